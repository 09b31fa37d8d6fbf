"""`memnav param list|get|set|dump NODE ...`: a running node's parameters from a shell, through its standard
parameter services (rcl_interfaces ListParameters, GetParameters, SetParameters), where pip-installed ROS 2 has no
`ros2 param`. Works with any ROS 2 node, memnav's or not.

NODE is a node name (`safety_node`), under --namespace when one is given (`/robot1/safety_node`), or a full name
(`/robot1/safety_node`). `set` parses VALUE as YAML (as `ros2 param set` does: `0.3`, `true`, `[1, 2]`, text) and
converts it to the parameter's current type (an integer for a double parameter becomes a double); the node may
refuse a change, and memnav's nodes refuse a change to a parameter they read only at start, saying so
(memnav.ros.params.guard_parameter_changes): the safety node's `guard.` limits change live, the rest is set in the
parameter file before a (re)start. `dump` writes the node's parameters in the ROS 2 params-file format, which
`--params-file` (and memnav launch's `param: [{from: FILE}]`) reads back.

Exit status: 0 done; 1 the node refused the change (its reason on stderr); 2 no such node or parameter, a value of
the wrong type, or no answer within --timeout.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from memnav.ros.shell_node import Ros, add_actions, add_exit_statuses, add_ros_args, check_seconds, shell_ros_args

REFUSED_EXIT = 1
INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1   # a ROS integer parameter's range


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parsers = add_actions(parser, {
        "list": "the node's parameters with their values and types",
        "get": "one parameter's value",
        "set": "change a parameter while the node runs (the node may refuse: status 1, with its reason)",
        "dump": "all parameters as a ROS 2 params file (YAML), on stdout or into --out"})
    for p in parsers.values():
        p.add_argument("node", metavar="NODE",
                       help="the node's name (safety_node, policy_node, ...: under --namespace when given) or full "
                            "name (/robot1/safety_node)")
    parsers["get"].add_argument("name", metavar="NAME", help="the parameter (e.g. guard.max_linear_mps)")
    parsers["set"].add_argument("name", metavar="NAME", help="the parameter (e.g. guard.max_linear_mps)")
    parsers["set"].add_argument("value", metavar="VALUE",
                                help="its new value, as YAML (0.3, true, [1.0, 2.0], text), converted to the "
                                     "parameter's type")
    parsers["list"].add_argument("--json", type=Path, default=None, metavar="PATH",
                                 help="also write {name: {type, value}} to this file")
    parsers["dump"].add_argument("--out", type=Path, default=None, metavar="FILE",
                                 help="write the params file here instead of stdout (an existing file is replaced)")
    for p in parsers.values():
        p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                       help="fail when the node's parameter services have not answered within this many seconds")
        add_ros_args(p)
    add_exit_statuses("0 done; 1 the node refused the change (its reason on stderr); 2 no such node (none answered "
                      "within --timeout) or parameter, a value of the wrong type, or a bad option; 130 Ctrl-C",
                      parser, *parsers.values())


def run(args: argparse.Namespace) -> int:
    check_seconds(args.timeout, "--timeout")
    ros_args = shell_ros_args(args)
    ros = Ros("memnav_param", ros_args)
    try:
        target = node_name(ros.node.get_namespace(), args.node)
        client = ParameterClient(ros, target, args.timeout)
        if args.action == "get":
            print(_text(client.get([args.name])[args.name]))
            return 0
        if args.action == "set":
            current = client.get([args.name])[args.name]
            new = to_type(args.name, yaml_value(args.value), current, text=args.value)
            ok, reason = client.set(args.name, new)
            if not ok:
                print(f"memnav param: {target} refused {args.name} = {_text(new)}: {reason or 'no reason given'}",
                      file=sys.stderr)
                return REFUSED_EXIT
            print(f"{target}: {args.name} = {_text(new)} (was {_text(current)})", file=sys.stderr)
            return 0
        values = client.get(client.names())
    finally:
        ros.close()
    if args.action == "list":
        for name, value in values.items():
            print(f"{name}: {_text(value)}  ({_type_name(value)})")
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({n: {"type": _type_name(v), "value": v} for n, v in values.items()},
                                            indent=2) + "\n")
        return 0
    text = params_file(target, values)
    if args.out is None:
        sys.stdout.write(text)
    else:
        from memnav.core.files import replace_files

        replace_files({args.out: text.encode()})
        print(f"wrote {args.out} ({len(values)} parameters of {target})", file=sys.stderr)
    return 0


def node_name(namespace: str, node: str) -> str:
    """The full name of `node` as given on the command line: a full name stays, a relative one goes under
    `namespace` (this command's, from --namespace)."""
    from memnav.core.namespaces import resolve_name

    if not node or node.endswith("/") or "//" in node:
        raise ValueError(f"NODE must be a node name such as safety_node or /robot1/safety_node, got {node!r}")
    return resolve_name(node, namespace)


def yaml_value(text: str) -> Any:
    """VALUE as `ros2 param set` reads it: YAML (`0.3`, `true`, `[1, 2]`), text that is not YAML as itself."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def to_type(name: str, value: Any, current: Any, text: str | None = None) -> Any:
    """`value` as the type of the parameter's `current` value (an int for a float parameter becomes a float; for a
    string parameter, the text as typed). A parameter not set (`current` None) takes any parameter type; a value
    that is none (a mapping, a date, a list of mixed types) is taken as the text typed, `text`, as `ros2 param set`
    does. Raises ValueError naming the parameter and the type it takes, or an integer beyond 64 bits."""
    from memnav.ros.params import coerce_parameter

    if isinstance(current, str) and not isinstance(value, str):
        value = "true" if value is True else "false" if value is False else str(value)
    if current is None:   # not set: any type
        value = _parameter_value(value)
        if value is None and text is not None:
            value = text
        if value is None:
            raise ValueError(f"parameter {name!r}: a value must be a bool, an integer, a double, text or a list of "
                             "one of them")
    else:
        value = coerce_parameter(name, value, current)
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
            raise ValueError(f"parameter {name!r}: {v} is beyond a 64-bit integer ({INT64_MIN} to {INT64_MAX})")
    return value


def _parameter_value(value: Any) -> Any:
    """`value` as a ROS parameter takes it (bool, int, float, str, or a list of one of them: integers among doubles
    become doubles); None when it is no parameter value."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if not isinstance(value, list) or not value:
        return None   # an empty list has no element type to declare
    for kind in (bool, str):
        if all(isinstance(v, kind) for v in value):
            return value
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return value if all(isinstance(v, int) for v in value) else [float(v) for v in value]
    return None


def params_file(node: str, values: dict[str, Any]) -> str:
    """`values` as a ROS 2 params file for node `node`, given by its full name: the section is the node's name in
    the root namespace, else its full name (`/robot1/safety_node:`); dotted names nest (`guard.max_linear_mps`
    under `guard:`)."""
    tree: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        *groups, leaf = name.split(".")
        at = tree
        for g in groups:
            at = at.setdefault(g, {})
        at[leaf] = value
    namespace, name = node.rsplit("/", 1)
    doc = {node if namespace else name: {"ros__parameters": tree}}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (str, list, bool)) or value is None else repr(value)


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return f"{_type_name(value[0]) if value else 'empty'} array"
    return {bool: "bool", int: "integer", float: "double", str: "string", bytes: "bytes"}.get(type(value), "not set")


class ParameterClient:
    """The parameter services of the node named `target`, called from `ros`'s node."""

    def __init__(self, ros: Ros, target: str, timeout_s: float) -> None:
        from rcl_interfaces.srv import GetParameters, ListParameters, SetParameters

        self.ros, self.target, self.timeout_s = ros, target, timeout_s
        self._names: list[str] | None = None
        self.clients = {name: ros.node.create_client(srv, f"{target}/{name}")
                        for name, srv in (("list_parameters", ListParameters), ("get_parameters", GetParameters),
                                          ("set_parameters", SetParameters))}

    def _call(self, service: str, request: Any) -> Any:
        client = self.clients[service]
        return self.ros.call(client, request, self.timeout_s, f"no node {self.target} answered within "
                             f"{self.timeout_s:g} s (no service {client.service_name}): is it running on this "
                             "ROS_DOMAIN_ID, in this namespace (--namespace)? `memnav status` lists memnav's nodes")

    def names(self) -> list[str]:
        """The node's parameter names, asked once per command (`get` checks the names it is given against them)."""
        from rcl_interfaces.srv import ListParameters

        if self._names is None:
            self._names = sorted(self._call("list_parameters", ListParameters.Request()).result.names)
        return self._names

    def get(self, names: list[str]) -> dict[str, Any]:
        """name -> value (None: declared, not set). Raises ValueError naming a parameter the node does not have."""
        from rcl_interfaces.msg import ParameterType
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        known = set(self.names())
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"{self.target} has no parameter {', '.join(missing)} (`memnav param list "
                           f"{self.target}` lists them)")
        values = self._call("get_parameters", GetParameters.Request(names=list(names))).values
        return {n: None if v.type == ParameterType.PARAMETER_NOT_SET else _plain(parameter_value_to_python(v))
                for n, v in zip(names, values)}

    def set(self, name: str, value: Any) -> tuple[bool, str]:
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        result = self._call("set_parameters", SetParameters.Request(
            parameters=[Parameter(name, value=value).to_parameter_msg()])).results[0]
        return bool(result.successful), str(result.reason)


def _plain(value: Any) -> Any:
    """A parameter value as plain Python (arrays come back as array.array or numpy arrays)."""
    if isinstance(value, (str, bytes, bool, int, float)) or value is None:
        return value
    return [_plain(v) for v in value]
