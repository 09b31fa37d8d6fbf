"""ROS namespaces as text (no ROS imports): checking one, and putting a root-namespace topic name under it."""
from __future__ import annotations

import re

__all__ = ["absolute_namespace", "resolve_name", "under_namespace"]

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def absolute_namespace(namespace: str, option: str = "--namespace") -> str:
    """`robot1` or `/fleet/robot1` as an absolute ROS namespace (`/robot1`, `/fleet/robot1`).

    Raises:
        ValueError: not a ROS namespace (tokens of letters, digits and underscores, not starting with a digit,
            separated by single slashes), naming `option` and the value.
    """
    tokens = namespace.strip("/").split("/")
    if not namespace.strip("/") or "//" in namespace or not all(_TOKEN.fullmatch(t) for t in tokens):
        raise ValueError(f"{option} must be a ROS namespace such as robot1 or /fleet/robot1 (letters, digits "
                         f"and underscores, not starting with a digit, parts separated by '/'), got {namespace!r}")
    return "/" + "/".join(tokens)


def under_namespace(topic: str, namespace: str) -> str:
    """The root-namespace topic name `topic` (`/odom` or `odom`) as the same topic under `namespace`
    (`/robot1/odom`); "" stays "" (no topic)."""
    if not topic:
        return topic
    return f"{absolute_namespace(namespace).rstrip('/')}/{topic.lstrip('/')}"


def resolve_name(name: str, namespace: str) -> str:
    """`name` (a topic or node name) as a node in `namespace` resolves it: an absolute name stays, a relative one
    goes under the namespace (`odom` in /robot1 is /robot1/odom; in the root namespace, "" or "/", /odom)."""
    if name.startswith("/"):
        return name
    return under_namespace(name, namespace) if namespace.strip("/") else "/" + name
