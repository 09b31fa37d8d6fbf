"""Runner for ROS 2 YAML launch files (`memnav launch`), because launch / launch_ros are not on PyPI.

The same `launch/*.launch.yaml` files work with `ros2 launch memnav FILE` on a full ROS 2 install. This module
runs the subset of ROS 2's YAML launch format below itself; anything else raises `LaunchError` naming the file,
the entry (its path of list indices, `launch[3].group.children[0].node`), the key and what is supported, so a file
is never half-understood; errors found while resolving (a condition, a substitution, a value) name the entry too:

    launch:
    - arg: {name: data, default: data/houses, description: "dataset folder"}
    - arg: {name: split, default: test, choice: [{value: train}, {value: val}, {value: test}]}
                                                    # allowed values (ROS 2's spelling; `choices: [train, val,
                                                    # test]` is memnav's shorthand, which `ros2 launch` refuses)
    - set_env: {name: ROS_DOMAIN_ID, value: "7"}
    - push_ros_namespace: {namespace: robot1}     # also spelled push-ros-namespace
    - group: {scoped: true, children: [...]}       # or `group: [...]`; scoped keeps env/args/namespace inside
    - node:
        pkg: memnav                 # optional; also searches <prefix>/lib/<pkg> for the executable
        exec: sim_bridge_node       # required: an executable / console script name
        name: sim_bridge_node       # -r __node:=NAME
        namespace: robot1           # -r __ns:=/robot1 (relative names go under pushed namespaces)
        param:                      # in order, later wins (as in ROS 2)
        - from: $(find-pkg-share memnav)/config/memnav.yaml     # --params-file FILE
        - {name: split, value: test}                            # -p split:=test
        remap: [{from: /odom, to: odom}]                        # -r /odom:=odom
        args: "--extra arguments"   # before --ros-args, split like a shell
        output: screen              # screen | log | both (default log, as in ROS 2)
        respawn: true               # restart the node whenever it exits (never after CONFIG_ERROR_EXIT; given up
                                    # after RespawnLimit quick exits in a row: see Supervisor)
        respawn_delay: 2.0          # seconds before a restart
        on_exit: shutdown           # end the whole launch when this node exits (any node's CONFIG_ERROR_EXIT does)
        if: "$(var fused)"          # on any action (arg, set_env, push_ros_namespace, group mapping, node):
                                    # keep it only when the text is true or 1 (false or 0 drops it);
                                    # `unless:` is the opposite; both on one action is an error, as in ROS 2

Substitutions, in any string: `$(var NAME)`, `$(env NAME)`, `$(env NAME DEFAULT)`, `$(find-pkg-share PACKAGE)`
(an installed share folder, or for memnav installed editable the repository root holding launch/ and config/),
`$(equals A B)` (`true` or `false`, compared as ROS 2 launch does: booleans by truth, numbers by value, else text).
Substitutions nest inside another's arguments, e.g. `$(equals $(var odometry_origin) start)`; quotes group an
argument that holds spaces.

Stages: `load_launch_file` checks structure and substitution syntax (templates stay unresolved, so
`--show-args` needs no values); `resolve_launch` applies `name:=value` overrides and substitutions in document
order into a `LaunchPlan` of typed `NodeSpec`s; `build_command` turns one into a command line; `Supervisor`
runs them. This module is plain process supervision: it imports nothing from ROS.
"""
from __future__ import annotations

import collections
import ctypes
import datetime
import math
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn, TextIO

import yaml

# A node that refuses its configuration (a bad or unknown parameter, a missing model file) logs one line and exits
# with the memnav nodes' CONFIG_ERROR_EXIT. Restarting it cannot help, so such a node is never respawned and its
# exit ends the launch, with this status.
from memnav.core.namespaces import absolute_namespace
from memnav.ros.stack_node import CONFIG_ERROR_EXIT

SUPPORTED_ACTIONS = ("arg", "group", "node", "push_ros_namespace", "set_env")
SUPPORTED_SUBSTITUTIONS = "$(var NAME), $(env NAME [DEFAULT]), $(find-pkg-share PACKAGE), $(equals A B)"
ARG_KEYS = ("name", "default", "description", "choice", "choices")
SET_ENV_KEYS = ("name", "value")
GROUP_KEYS = ("children", "scoped")
PUSH_NAMESPACE_KEYS = ("namespace",)
NODE_KEYS = ("pkg", "exec", "name", "namespace", "param", "remap", "args", "output", "respawn", "respawn_delay",
             "on_exit")
PARAM_KEYS = ("from", "name", "value")
CONDITION_KEYS = ("if", "unless")
REMAP_KEYS = ("from", "to")
_ACTION_ALIASES = {"push-ros-namespace": "push_ros_namespace"}
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
# what ROS 2 launch's IfCondition / UnlessCondition accept (case-insensitive); anything else is an error
_CONDITION_TRUE = ("true", "1")
_CONDITION_FALSE = ("false", "0")
_BOOTSTRAP_MARK = "_ROS_WHEELS_BOOTSTRAP_COMPLETE"
_NODE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # rcl's node name rule (no '~' or substitutions left)


class LaunchError(ValueError):
    """A launch file, argument or node that memnav cannot run; the message names the file, the entry
    (`launch[3].group`) and the key."""


class Output(str, Enum):
    """Where a node's stdout and stderr go."""

    SCREEN = "screen"  # printed, each line prefixed with [label]
    LOG = "log"  # written to <log dir>/<label>.log only
    BOTH = "both"  # both of the above


# --------------------------------------------------------------------------------------------------------------
# Parsed (unresolved) launch file: every string is a template that may hold substitutions.


@dataclass(frozen=True)
class Condition:
    """`if:` / `unless:` on an action: a template resolved when the action is reached.

    Attributes:
        expression: template that must resolve to true/1 or false/0 (case-insensitive), as in ROS 2 launch.
        unless: `unless:` (keep the action when the expression is false) rather than `if:`.
    """

    expression: str
    unless: bool = False


@dataclass(frozen=True)
class LaunchArg:
    """A declared launch argument (`arg`), overridable on the command line as `name:=value`.

    Attributes:
        name: argument name, used as `$(var name)`.
        default: default value template; None makes the argument required.
        description: one line shown by `memnav launch FILE --show-args`.
        choices: allowed values; empty allows any.
        condition: `if:` / `unless:`; a declaration whose condition does not hold sets no value.
        where: location in the file (`FILE: launch[0].arg`), for error messages.
    """

    name: str
    default: str | None = None
    description: str = ""
    choices: tuple[str, ...] = ()
    condition: Condition | None = None
    where: str = ""


@dataclass(frozen=True)
class SetEnv:
    """`set_env`: an environment variable for the nodes that follow it (and for `$(env ...)`); `where`: its location
    in the file, for error messages."""

    name: str
    value: str
    condition: Condition | None = None
    where: str = ""


@dataclass(frozen=True)
class PushRosNamespace:
    """`push_ros_namespace`: prefix the namespace of the nodes that follow it in the same scope; `where`: its
    location in the file, for error messages."""

    namespace: str
    condition: Condition | None = None
    where: str = ""


@dataclass(frozen=True)
class ParamFile:
    """`param: [{from: FILE}]`: a ROS 2 parameter file, passed as `--params-file FILE`."""

    path: str


@dataclass(frozen=True)
class ParamValue:
    """`param: [{name: N, value: V}]`: one parameter, passed as `-p N:=V` (V a YAML scalar or list)."""

    name: str
    value: Any


@dataclass(frozen=True)
class Remap:
    """`remap: [{from: A, to: B}]`: passed as `-r A:=B`."""

    src: str
    dst: str


@dataclass(frozen=True)
class NodeAction:
    """A `node` action as written: templates, not yet resolved (see `NodeSpec` for the resolved form).

    Attributes:
        executable: the `exec` key: an executable or console script name.
        pkg: ROS package; adds `<prefix>/lib/<pkg>` to the executable search.
        name: node name (`-r __node:=`), None keeps the node's own.
        namespace: node namespace, None keeps the pushed one (if any).
        params: parameter files and values, in the order given.
        remaps: topic/service remappings.
        args: extra command-line arguments before `--ros-args`.
        output: "screen", "log" or "both".
        respawn: template of a boolean: restart the node when it exits.
        respawn_delay: template of seconds to wait before a restart.
        shutdown_on_exit: `on_exit: shutdown`: the end of this node ends the launch.
        where: location in the file (`FILE: launch[3].node`), for error messages.
        condition: `if:` / `unless:`; the node is started only when it holds.
    """

    executable: str
    pkg: str | None = None
    name: str | None = None
    namespace: str | None = None
    params: tuple[ParamFile | ParamValue, ...] = ()
    remaps: tuple[Remap, ...] = ()
    args: str = ""
    output: str = Output.LOG.value
    respawn: str = "false"
    respawn_delay: str = "0.0"
    shutdown_on_exit: bool = False
    where: str = ""
    condition: Condition | None = None


@dataclass(frozen=True)
class Group:
    """`group`: child actions; when scoped, their args, env and namespace changes stay inside; `where`: its
    location in the file (`FILE: launch[2].group`), for error messages."""

    children: tuple[Action, ...]
    scoped: bool = True
    condition: Condition | None = None
    where: str = ""


Action = LaunchArg | SetEnv | PushRosNamespace | NodeAction | Group


@dataclass(frozen=True)
class LaunchFile:
    """A parsed launch file.

    Attributes:
        path: the file.
        actions: top-level actions in document order.
    """

    path: Path
    actions: tuple[Action, ...]

    @property
    def args(self) -> tuple[LaunchArg, ...]:
        """Every declared argument, groups included, in document order (first declaration of a name)."""
        seen: dict[str, LaunchArg] = {}
        for action in _walk(self.actions):
            if isinstance(action, LaunchArg) and action.name not in seen:
                seen[action.name] = action
        return tuple(seen.values())

    @property
    def nodes(self) -> tuple[NodeAction, ...]:
        """Every node action, groups included, in document order."""
        return tuple(a for a in _walk(self.actions) if isinstance(a, NodeAction))


def _walk(actions: Sequence[Action]) -> Iterator[Action]:
    for action in actions:
        yield action
        if isinstance(action, Group):
            yield from _walk(action.children)


# --------------------------------------------------------------------------------------------------------------
# Resolved plan


@dataclass(frozen=True)
class NodeSpec:
    """One node ready to start: every substitution resolved, every value typed.

    Attributes:
        label: unique name for output prefixes and reports (node name, else exec; `-2`, `-3` for repeats).
        executable: executable / console script name.
        pkg: ROS package, or None.
        name: node name, or None.
        namespace: absolute namespace, or None.
        params: parameter files (absolute paths that exist) and values, in order.
        remaps: remappings.
        args: extra arguments before `--ros-args`.
        output: where output goes.
        respawn: restart the node when it exits.
        respawn_delay_s: wait before a restart, seconds.
        shutdown_on_exit: the end of this node ends the launch.
        env: variables set by `set_env` before this node, on top of the launcher's environment.
        where: location in the launch file.
    """

    label: str
    executable: str
    pkg: str | None = None
    name: str | None = None
    namespace: str | None = None
    params: tuple[ParamFile | ParamValue, ...] = ()
    remaps: tuple[Remap, ...] = ()
    args: tuple[str, ...] = ()
    output: Output = Output.LOG
    respawn: bool = False
    respawn_delay_s: float = 0.0
    shutdown_on_exit: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    where: str = ""


@dataclass(frozen=True)
class LaunchPlan:
    """A resolved launch file.

    Attributes:
        path: the launch file.
        args: value of every argument (overrides applied).
        nodes: nodes to start, in document order.
    """

    path: Path
    args: Mapping[str, str]
    nodes: tuple[NodeSpec, ...]


# --------------------------------------------------------------------------------------------------------------
# Substitutions


@dataclass(frozen=True)
class _Sub:
    """One parsed `$(kind arg ...)`; each argument is itself a template (literal text and nested substitutions)."""

    kind: str
    args: tuple[Template, ...]
    source: str


Template = list[str | _Sub]  # literal text and substitutions, in order


_ARITY = {"var": (1, 1), "env": (1, 2), "find-pkg-share": (1, 1), "equals": (2, 2)}


def _parse_template(text: str, where: str) -> Template:
    """Split `text` into literal strings and `_Sub` substitutions (nested ones inside their arguments, as in
    `$(equals $(var origin) start)`); raise on unknown or malformed ones."""
    parts: Template = []
    pos = 0
    while (start := text.find("$(", pos)) >= 0:
        if start > pos:
            parts.append(text[pos:start])
        sub, pos = _parse_substitution(text, start, where)
        parts.append(sub)
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def _parse_substitution(text: str, start: int, where: str) -> tuple[_Sub, int]:
    """The substitution whose `$(` is at `start`, and the index after its closing parenthesis. Arguments are
    separated by whitespace outside quotes; quotes group an argument and are dropped."""
    tokens: list[Template] = []
    token: Template | None = None
    quote = ""
    i = start + 2
    while i < len(text):
        ch = text[i]
        if text.startswith("$(", i):   # substituted inside quotes too
            sub, i = _parse_substitution(text, i, where)
            token = (token or []) + [sub]
            continue
        if quote:
            if ch == quote:
                quote = ""
            else:
                token = _append_char(token, ch)
        elif ch == ")":
            if token is not None:
                tokens.append(token)
            return _checked(text[start:i + 1], tokens, where), i + 1
        elif ch in "'\"":
            quote, token = ch, token or []
        elif ch.isspace():
            if token is not None:
                tokens.append(token)
            token = None
        else:
            token = _append_char(token, ch)
        i += 1
    what = "unterminated quote" if quote else "unterminated substitution"
    raise LaunchError(f"{where}: {what} in {text!r}; supported: {SUPPORTED_SUBSTITUTIONS}")


def _append_char(token: Template | None, ch: str) -> Template:
    token = token or []
    if token and isinstance(token[-1], str):
        token[-1] += ch
    else:
        token.append(ch)
    return token


def _checked(source: str, tokens: list[Template], where: str) -> _Sub:
    kind = tokens[0] if tokens else []
    name = kind[0] if len(kind) == 1 and isinstance(kind[0], str) else ""
    arity = _ARITY.get(name)
    if arity is None:
        raise LaunchError(f"{where}: unsupported substitution {source}; memnav launch supports "
                          f"{SUPPORTED_SUBSTITUTIONS}")
    args = tuple(tokens[1:])
    if not arity[0] <= len(args) <= arity[1]:
        raise LaunchError(f"{where}: {source} takes {arity[0]}"
                          f"{'' if arity[0] == arity[1] else f' or {arity[1]}'} argument(s)")
    return _Sub(name, args, source)


def use_large_image_transports() -> None:
    """Give this process (and the processes it starts) the Fast DDS settings robot.launch.yaml gives its nodes for
    full-size camera images, each unless the environment sets it: FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA and
    FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_large_images.xml (shared memory with a 16 MB segment). Call it
    before rclpy.init. An install without the profile (its share folder not found) gets LARGE_DATA alone."""
    os.environ.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "LARGE_DATA")
    try:
        profile = find_package_share("memnav") / "config" / "fastdds_large_images.xml"
    except LaunchError:
        return
    if profile.is_file():
        os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(profile))


def find_package_share(package: str) -> Path:
    """The share folder of a ROS package, as `$(find-pkg-share PACKAGE)`.

    Looks in the ament index of every prefix in AMENT_PREFIX_PATH and of this Python's prefix. memnav installed
    editable (`pip install -e .`, no share folder) resolves to the repository root, which holds launch/ and config/.

    Raises:
        LaunchError: the package is not found.
    """
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p] + [sys.prefix]
    for prefix in prefixes:
        if (Path(prefix) / "share" / "ament_index" / "resource_index" / "packages" / package).is_file():
            share = Path(prefix) / "share" / package
            if share.is_dir():
                return share
    if package == "memnav":
        import memnav

        root = Path(memnav.__file__).resolve().parent.parent
        if (root / "package.xml").is_file():
            return root
    raise LaunchError(f"package {package!r} not found: no share/ament_index entry under {prefixes}")


def _substitute(text: str, where: str, variables: Mapping[str, str], env: Mapping[str, str]) -> str:
    return _resolve(_parse_template(text, where), where, variables, env)


def _resolve(template: Template, where: str, variables: Mapping[str, str], env: Mapping[str, str]) -> str:
    out = []
    for part in template:
        if isinstance(part, str):
            out.append(part)
            continue
        args = [_resolve(arg, where, variables, env) for arg in part.args]
        if part.kind == "var":
            if args[0] not in variables:
                declared = ", ".join(sorted(variables)) or "none"
                raise LaunchError(f"{where}: $(var {args[0]}) names no argument declared before it "
                                  f"(declared so far: {declared})")
            out.append(variables[args[0]])
        elif part.kind == "env":
            if args[0] in env:
                out.append(env[args[0]])
            elif len(args) == 2:
                out.append(args[1])
            else:
                raise LaunchError(f"{where}: environment variable {args[0]} is not set "
                                  f"(give a default: $(env {args[0]} DEFAULT))")
        elif part.kind == "equals":
            out.append("true" if _launch_equal(*args) else "false")
        else:  # find-pkg-share
            try:
                out.append(str(find_package_share(args[0])))
            except LaunchError as err:
                raise LaunchError(f"{where}: {err}") from err
    return "".join(out)


def _split_args(text: str, where: str, variables: Mapping[str, str], env: Mapping[str, str]) -> tuple[str, ...]:
    """A node's `args` as ROS 2 launch splits them: the literal text by the shell's rules (quotes and all), each
    substitution's value kept inside the argument it stands in, whatever spaces or quotes it holds (`--data
    $(var data)` with data "/tmp/my maps" is two arguments, not three). An argument that is a substitution alone
    and resolves to nothing is left out (an optional flag given as an empty argument)."""
    template = _parse_template(text, where)
    values: list[str] = []
    masked = []
    for part in template:
        if isinstance(part, str):
            masked.append(part)
        else:
            masked.append(f"\0{len(values)}\0")
            values.append(_resolve((part,), where, variables, env))
    try:
        tokens = shlex.split("".join(masked))
    except ValueError as err:
        raise LaunchError(f"{where}: {err}") from err
    out = []
    for token in tokens:
        pieces = token.split("\0")   # literal, index, literal, index, ..., literal
        if len(pieces) == 3 and not pieces[0] and not pieces[2] and not values[int(pieces[1])]:
            continue
        out.append("".join(values[int(p)] if i % 2 else p for i, p in enumerate(pieces)))
    return tuple(out)


def _launch_equal(left: str, right: str) -> bool:
    """`$(equals A B)` as ROS 2 launch compares: booleans by truth (true/false/1/0, any case), numbers within
    floating-point closeness, anything else as text."""
    truth = {"true": True, "1": True, "false": False, "0": False}
    if left.lower() in truth and right.lower() in truth:
        return truth[left.lower()] == truth[right.lower()]
    try:
        return math.isclose(float(left), float(right))
    except ValueError:
        return left == right


# --------------------------------------------------------------------------------------------------------------
# Parsing


def load_launch_file(path: str | Path) -> LaunchFile:
    """Parse a ROS 2 YAML launch file, checking every action, key and substitution.

    Raises:
        LaunchError: the file cannot be read, is not YAML, or uses anything outside the supported subset.
    """
    path = Path(path)
    if path.suffix not in (".yaml", ".yml"):
        raise LaunchError(f"{path}: only YAML launch files (*.launch.yaml) are supported; Python and XML launch "
                          "files need launch_ros (`ros2 launch`)")
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise LaunchError(f"{path}: cannot read the launch file: {err}") from err
    except yaml.YAMLError as err:
        raise LaunchError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(data, dict) or set(data) != {"launch"}:
        raise LaunchError(f"{path}: expected one top-level key `launch:` holding a list of actions")
    return LaunchFile(path=path, actions=_parse_actions(data["launch"] or [], path, "launch"))


def _parse_actions(items: Any, path: Path, where: str) -> tuple[Action, ...]:
    if not isinstance(items, list):
        raise LaunchError(f"{path}: {where}: expected a list of actions, got {type(items).__name__}")
    actions: list[Action] = []
    for i, item in enumerate(items):
        loc = f"{where}[{i}]"
        if not isinstance(item, dict) or len(item) != 1:
            raise LaunchError(f"{path}: {loc}: each action is a mapping with one key, the action type "
                              f"(one of {', '.join(SUPPORTED_ACTIONS)})")
        ((kind, body),) = item.items()
        kind = _ACTION_ALIASES.get(kind, kind)
        loc = f"{loc}.{kind}"
        if kind not in SUPPORTED_ACTIONS:
            raise LaunchError(f"{path}: {loc}: unsupported action {kind!r}; memnav launch supports "
                              f"{', '.join(SUPPORTED_ACTIONS)}")
        if kind == "group":
            actions.append(_parse_group(body, path, loc))
            continue
        body, condition = _split_condition(_mapping(body, path, loc), path, loc)
        if kind == "arg":
            _check_keys(body, ARG_KEYS, ("name",), path, loc)
            default = body.get("default")
            default = None if default is None else _text(default, path, f"{loc}.default")
            choices = _parse_choices(body, path, loc)
            if choices and default is not None and "$(" not in default and default not in choices:
                raise LaunchError(f"{path}: {loc}.default: {default!r} is not one of its choices "
                                  f"{', '.join(choices)}")
            actions.append(LaunchArg(
                name=_plain(body["name"], path, f"{loc}.name"), default=default,
                description=_plain(body.get("description", ""), path, f"{loc}.description"),
                choices=choices, condition=condition, where=f"{path}: {loc}"))
        elif kind == "set_env":
            _check_keys(body, SET_ENV_KEYS, SET_ENV_KEYS, path, loc)
            actions.append(SetEnv(_text(body["name"], path, f"{loc}.name"), _text(body["value"], path, f"{loc}.value"),
                                  condition=condition, where=f"{path}: {loc}"))
        elif kind == "push_ros_namespace":
            _check_keys(body, PUSH_NAMESPACE_KEYS, PUSH_NAMESPACE_KEYS, path, loc)
            actions.append(PushRosNamespace(_text(body["namespace"], path, f"{loc}.namespace"), condition=condition,
                                            where=f"{path}: {loc}"))
        else:
            actions.append(replace(_parse_node(body, path, loc), condition=condition))
    return tuple(actions)


def _parse_choices(body: dict, path: Path, loc: str) -> tuple[str, ...]:
    """An arg's allowed values: ROS 2's `choice: [{value: a}, {value: b}]`, or memnav's `choices: [a, b]`."""
    if "choice" in body and "choices" in body:
        raise LaunchError(f"{path}: {loc}: give `choice` or `choices`, not both")
    if "choice" in body:
        entries = body["choice"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) and set(e) == {"value"} for e in entries):
            raise LaunchError(f"{path}: {loc}.choice: expected a list of `{{value: VALUE}}` mappings, as in ROS 2")
        choices = tuple(_plain(e["value"], path, f"{loc}.choice[{i}].value") for i, e in enumerate(entries))
    elif "choices" in body:
        if not isinstance(body["choices"], list):
            raise LaunchError(f"{path}: {loc}.choices: expected a list of values")
        choices = tuple(_plain(c, path, f"{loc}.choices") for c in body["choices"])
    else:
        return ()
    if not choices:
        key = "choice" if "choice" in body else "choices"
        raise LaunchError(f"{path}: {loc}.{key}: the list of allowed values is empty (leave the key out to allow any)")
    return choices


def _split_condition(body: dict, path: Path, loc: str) -> tuple[dict, Condition | None]:
    """`body` without its `if:` / `unless:` key, and that condition (None when it has neither)."""
    present = [k for k in CONDITION_KEYS if k in body]
    if not present:
        return body, None
    if len(present) == 2:
        raise LaunchError(f"{path}: {loc}: `if` and `unless` cannot be used on the same action")
    (key,) = present
    condition = Condition(_text(body[key], path, f"{loc}.{key}"), unless=key == "unless")
    return {k: v for k, v in body.items() if k != key}, condition


def _parse_group(body: Any, path: Path, loc: str) -> Group:
    if isinstance(body, list):
        return Group(children=_parse_actions(body, path, loc), where=f"{path}: {loc}")
    body, condition = _split_condition(_mapping(body, path, loc), path, loc)
    _check_keys(body, GROUP_KEYS, ("children",), path, loc)
    scoped = body.get("scoped", True)
    if isinstance(scoped, str) and scoped.lower() in _TRUE + _FALSE:
        scoped = scoped.lower() in _TRUE
    if not isinstance(scoped, bool):
        raise LaunchError(f"{path}: {loc}.scoped: expected true or false, got {scoped!r}")
    return Group(children=_parse_actions(body["children"], path, f"{loc}.children"), scoped=scoped,
                 condition=condition, where=f"{path}: {loc}")


def _parse_node(body: dict, path: Path, loc: str) -> NodeAction:
    _check_keys(body, NODE_KEYS, ("exec",), path, loc)
    params: list[ParamFile | ParamValue] = []
    for i, entry in enumerate(_entries(body.get("param", []), path, f"{loc}.param")):
        ploc = f"{loc}.param[{i}]"
        if "param" in entry:
            raise LaunchError(f"{path}: {ploc}: nested parameter groups are not supported; use dotted names "
                              "(`name: sim.width_px`) or a parameter file")
        _check_keys(entry, PARAM_KEYS, (), path, ploc)
        if "from" in entry:
            if set(entry) != {"from"}:
                raise LaunchError(f"{path}: {ploc}: `from` takes a parameter file and no other key")
            params.append(ParamFile(_text(entry["from"], path, f"{ploc}.from")))
        elif {"name", "value"} <= set(entry):
            params.append(ParamValue(_text(entry["name"], path, f"{ploc}.name"),
                                     _param_value(entry["value"], path, f"{ploc}.value")))
        else:
            raise LaunchError(f"{path}: {ploc}: expected `from: FILE` or `name:` with `value:`")
    remaps = []
    for i, entry in enumerate(_entries(body.get("remap", []), path, f"{loc}.remap")):
        _check_keys(entry, REMAP_KEYS, REMAP_KEYS, path, f"{loc}.remap[{i}]")
        remaps.append(Remap(_text(entry["from"], path, f"{loc}.remap[{i}].from"),
                            _text(entry["to"], path, f"{loc}.remap[{i}].to")))
    on_exit = body.get("on_exit")
    if on_exit is not None and on_exit != "shutdown":
        raise LaunchError(f"{path}: {loc}.on_exit: only `on_exit: shutdown` is supported, got {on_exit!r}")
    optional = {k: _text(body[k], path, f"{loc}.{k}") for k in ("pkg", "name", "namespace") if k in body}
    return NodeAction(
        executable=_text(body["exec"], path, f"{loc}.exec"),
        params=tuple(params),
        remaps=tuple(remaps),
        args=_text(body.get("args", ""), path, f"{loc}.args"),
        output=_text(body.get("output", Output.LOG.value), path, f"{loc}.output"),
        respawn=_text(body.get("respawn", False), path, f"{loc}.respawn"),
        respawn_delay=_text(body.get("respawn_delay", 0.0), path, f"{loc}.respawn_delay"),
        shutdown_on_exit=on_exit == "shutdown",
        where=f"{path}: {loc}",
        **optional,
    )


def _mapping(body: Any, path: Path, loc: str) -> dict:
    if not isinstance(body, dict):
        raise LaunchError(f"{path}: {loc}: expected a mapping of keys, got {type(body).__name__}")
    return body


def _entries(items: Any, path: Path, loc: str) -> list[dict]:
    if not isinstance(items, list) or not all(isinstance(e, dict) for e in items):
        raise LaunchError(f"{path}: {loc}: expected a list of mappings")
    return items


def _check_keys(body: dict, allowed: Sequence[str], required: Sequence[str], path: Path, loc: str) -> None:
    unknown = [str(k) for k in body if k not in allowed]
    if unknown:
        raise LaunchError(f"{path}: {loc}: unsupported key(s) {', '.join(unknown)}; memnav launch supports "
                          f"{', '.join(allowed)}")
    missing = [k for k in required if k not in body]
    if missing:
        raise LaunchError(f"{path}: {loc}: missing required key(s) {', '.join(missing)}")


def _plain(value: Any, path: Path, loc: str) -> str:
    """A scalar as text (YAML true -> "true"); lists and mappings are refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise LaunchError(f"{path}: {loc}: expected a string or number, got {type(value).__name__}")


def _text(value: Any, path: Path, loc: str) -> str:
    """A scalar as a template whose substitutions are checked now (and resolved later)."""
    text = _plain(value, path, loc)
    _parse_template(text, f"{path}: {loc}")
    return text


def _param_value(value: Any, path: Path, loc: str) -> Any:
    if isinstance(value, list):
        if any(isinstance(v, (list, dict)) for v in value):
            _bad_param(value, path, loc)
        return [_param_value(v, path, f"{loc}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        _parse_template(value, f"{path}: {loc}")
        return value
    if isinstance(value, (bool, int, float)):
        return value
    _bad_param(value, path, loc)


def _bad_param(value: Any, path: Path, loc: str) -> NoReturn:
    raise LaunchError(f"{path}: {loc}: a parameter value is a scalar or a flat list, got {value!r}; "
                      "put structured parameters in a parameter file (`from:`)")


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """`name:=value` command-line items as a dict.

    Raises:
        LaunchError: an item without `:=` or with an empty name.
    """
    overrides: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep or not name:
            raise LaunchError(f"launch argument {item!r}: expected NAME:=VALUE")
        overrides[name] = value
    return overrides


# --------------------------------------------------------------------------------------------------------------
# Resolution


@dataclass
class _Scope:
    variables: dict[str, str]
    env: dict[str, str]  # set_env values only
    namespace: str | None

    def copy(self) -> _Scope:
        return _Scope(dict(self.variables), dict(self.env), self.namespace)


def resolve_launch(launch: LaunchFile, overrides: Mapping[str, str] | None = None,
                   environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """Resolve arguments and substitutions in document order into nodes ready to start.

    Args:
        launch: the parsed file.
        overrides: `name -> value` from the command line; each name must be a declared argument.
        environ: the environment `$(env ...)` reads before any `set_env` (default: os.environ).

    Raises:
        LaunchError: an unknown override, a required argument not given, a value outside `choices`, an undefined
            variable or environment variable, a missing parameter file or a bad `output`/`respawn` value.
    """
    overrides = dict(overrides or {})
    declared = {a.name: a for a in launch.args}
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise LaunchError(f"{launch.path}: unknown launch argument(s) {', '.join(unknown)}; declared arguments: "
                          f"{', '.join(declared) or 'none'}")
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    nodes: list[NodeSpec] = []
    labels: collections.Counter[str] = collections.Counter()

    def visit(actions: Sequence[Action], scope: _Scope) -> None:
        for action in actions:
            env = {**environ, **scope.env}
            where = _where(action, launch.path)
            if action.condition is not None and not _condition_holds(action.condition, where, scope.variables, env):
                continue
            if isinstance(action, LaunchArg):
                if action.name in overrides:
                    value = overrides[action.name]
                elif action.name in scope.variables:   # declared before (ROS 2: a default never overrides)
                    value = scope.variables[action.name]
                elif action.default is not None:
                    value = _substitute(action.default, f"{where}.default", scope.variables, env)
                else:
                    raise LaunchError(f"{where}: launch argument {action.name!r} has no default and was not "
                                      f"given; pass {action.name}:=VALUE")
                if action.choices and value not in action.choices:
                    raise LaunchError(f"{where}: launch argument {action.name}:={value} is not one of "
                                      f"{', '.join(action.choices)}")
                scope.variables[action.name] = value
                values.setdefault(action.name, value)
            elif isinstance(action, SetEnv):
                name = _substitute(action.name, f"{where}.name", scope.variables, env)
                scope.env[name] = _substitute(action.value, f"{where}.value", scope.variables, env)
            elif isinstance(action, PushRosNamespace):
                pushed = _substitute(action.namespace, f"{where}.namespace", scope.variables, env)
                scope.namespace = _join_namespace(scope.namespace, pushed)
            elif isinstance(action, Group):
                visit(action.children, scope.copy() if action.scoped else scope)
            else:
                nodes.append(_resolve_node(action, where, scope, env, labels))

    visit(launch.actions, _Scope({}, {}, None))
    return LaunchPlan(path=launch.path, args=values, nodes=tuple(nodes))


def _where(action: Action, path: Path) -> str:
    """An action's location for error messages: `FILE: launch[2].group.children[0].node` as parsed (the index of
    every list entry on the way, so one group or node among several like it is named), or `FILE: KIND` for an
    action built in code without one."""
    kinds = {LaunchArg: "arg", SetEnv: "set_env", PushRosNamespace: "push_ros_namespace", Group: "group",
             NodeAction: "node"}
    return action.where or f"{path}: {kinds[type(action)]}"


def _condition_holds(cond: Condition, where: str, variables: Mapping[str, str], env: Mapping[str, str]) -> bool:
    """Whether the `if:` of the action at `where` holds (or its `unless:` does not), by ROS 2 launch's rule: the
    resolved text is true/1 or false/0, case-insensitive; anything else raises LaunchError naming `where`."""
    key = "unless" if cond.unless else "if"
    value = _substitute(cond.expression, f"{where}.{key}", variables, env).strip().lower()
    if value not in _CONDITION_TRUE + _CONDITION_FALSE:
        raise LaunchError(f"{where}: `{key}: {cond.expression}` resolved to {value!r}; a condition must be "
                          f"{', '.join(_CONDITION_TRUE + _CONDITION_FALSE)} (case-insensitive)")
    return (value in _CONDITION_TRUE) != cond.unless


def _join_namespace(base: str | None, namespace: str | None) -> str | None:
    """ROS 2's rule: an absolute namespace replaces the pushed one, a relative one goes under it."""
    if not namespace:
        return base
    if namespace.startswith("/") or base is None:
        joined = namespace
    else:
        joined = f"{base.rstrip('/')}/{namespace}"
    return "/" + joined.strip("/")


def _resolve_node(node: NodeAction, where: str, scope: _Scope, env: Mapping[str, str],
                  labels: collections.Counter[str]) -> NodeSpec:
    def sub(text: str, key: str) -> str:
        return _substitute(text, f"{where}.{key}", scope.variables, env)

    executable = sub(node.executable, "exec")
    if not executable or "/" in executable:
        raise LaunchError(f"{where}.exec: expected an executable name (found on the search path), got "
                          f"{executable!r}")
    name = sub(node.name, "name") if node.name is not None else None
    if name is not None and (not name or "/" in name):
        raise LaunchError(f"{where}.name: a node name has no '/' (use namespace), got {name!r}")
    if name is not None and not _NODE_NAME.fullmatch(name):
        raise LaunchError(f"{where}.name: a ROS node name is letters, digits and underscores, not starting with a "
                          f"digit, got {name!r}")
    namespace = _join_namespace(scope.namespace,
                                sub(node.namespace, "namespace") if node.namespace is not None else None)
    if namespace is not None and namespace != "/":
        try:   # as launch_ros validates it, before anything starts (rcl would refuse it in every node)
            absolute_namespace(namespace, option=f"{where}.namespace")
        except ValueError as err:
            raise LaunchError(str(err)) from None
    params: list[ParamFile | ParamValue] = []
    for i, p in enumerate(node.params):
        if isinstance(p, ParamFile):
            file = Path(sub(p.path, f"param[{i}].from")).expanduser().absolute()
            if not file.is_file():
                raise LaunchError(f"{where}.param[{i}]: parameter file not found: {file}")
            params.append(ParamFile(str(file)))
        else:
            values = p.value if isinstance(p.value, list) else [p.value]
            resolved = [sub(v, f"param[{i}].value") if isinstance(v, str) else v for v in values]
            params.append(ParamValue(sub(p.name, f"param[{i}].name"),
                                     resolved if isinstance(p.value, list) else resolved[0]))
    output = sub(node.output, "output")
    if output not in {o.value for o in Output}:
        raise LaunchError(f"{where}.output: expected one of {', '.join(o.value for o in Output)}, got {output!r}")
    respawn = sub(node.respawn, "respawn").lower()
    if respawn not in _TRUE + _FALSE:
        raise LaunchError(f"{where}.respawn: expected true or false, got {respawn!r}")
    try:
        delay = float(sub(node.respawn_delay, "respawn_delay"))
    except ValueError as err:
        raise LaunchError(f"{where}.respawn_delay: expected seconds, got {node.respawn_delay!r}") from err
    if not (math.isfinite(delay) and delay >= 0):
        raise LaunchError(f"{where}.respawn_delay: expected a non-negative number of seconds, got {delay}")
    args = _split_args(node.args, f"{where}.args", scope.variables, env)
    base = name or executable
    label, n = base, 1
    while labels[label]:   # taken: by a node of this name before, or as another's suffixed label (foo-2)
        n += 1
        label = f"{base}-{n}"
    labels[label] += 1
    return NodeSpec(
        label=label,
        executable=executable,
        pkg=sub(node.pkg, "pkg") if node.pkg is not None else None,
        name=name,
        namespace=namespace,
        params=tuple(params),
        remaps=tuple(Remap(sub(r.src, f"remap[{i}].from"), sub(r.dst, f"remap[{i}].to"))
                     for i, r in enumerate(node.remaps)),
        args=args,
        output=Output(output),
        respawn=respawn in _TRUE,
        respawn_delay_s=delay,
        shutdown_on_exit=node.shutdown_on_exit,
        env=dict(scope.env),
        where=where,
    )


# --------------------------------------------------------------------------------------------------------------
# Command lines


def executable_search_path(pkg: str | None = None, exec_paths: Sequence[str | Path] = ()) -> list[Path]:
    """Folders searched for a node's executable, in order.

    `exec_paths` first, then the folder of this Python (the venv's console scripts), then `<prefix>/lib/<pkg>`
    for this Python's prefix and each AMENT_PREFIX_PATH entry (where `colcon build` puts ament_python scripts),
    then PATH.
    """
    folders = [Path(p) for p in exec_paths] + [Path(sys.executable).parent]
    if pkg:
        prefixes = [sys.prefix] + [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
        folders += [Path(prefix) / "lib" / pkg for prefix in prefixes]
    folders += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return list(dict.fromkeys(folders))


def find_executable(name: str, pkg: str | None = None, exec_paths: Sequence[str | Path] = ()) -> Path:
    """The first executable file `name` in `executable_search_path(pkg, exec_paths)`.

    Raises:
        LaunchError: not found (the message lists the folders searched).
    """
    folders = executable_search_path(pkg, exec_paths)
    for folder in folders:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise LaunchError(f"executable {name!r} not found (is the package installed?); searched "
                      f"{', '.join(map(str, folders))}")


def format_param_value(value: Any) -> str:
    """A parameter value in the YAML syntax `-p name:=value` reads (strings pass through unchanged)."""
    if isinstance(value, str):
        return value or "''"
    return yaml.safe_dump(value, default_flow_style=True, width=2**31).strip().removesuffix("...").strip()


def build_command(node: NodeSpec, exec_paths: Sequence[str | Path] = ()) -> list[str]:
    """The command line that starts `node`: `EXEC [args] --ros-args -r __node:= -r __ns:= ... -r from:=to`.

    Raises:
        LaunchError: the executable is not found.
    """
    try:
        cmd = [str(find_executable(node.executable, node.pkg, exec_paths)), *node.args]
    except LaunchError as err:
        raise LaunchError(f"{node.where}: {err}") from err
    ros: list[str] = []
    if node.name is not None:
        ros += ["-r", f"__node:={node.name}"]
    if node.namespace is not None:
        ros += ["-r", f"__ns:={node.namespace}"]
    for p in node.params:
        if isinstance(p, ParamFile):
            ros += ["--params-file", p.path]
        else:
            ros += ["-p", f"{p.name}:={format_param_value(p.value)}"]
    for r in node.remaps:
        ros += ["-r", f"{r.src}:={r.dst}"]
    return cmd + (["--ros-args", *ros] if ros else [])


def child_environment(node: NodeSpec, executable: str | Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a node starts with: `base` (os.environ) + its `set_env` values + unbuffered Python output.

    The ROS wheels re-execute every Python of this venv once with LD_LIBRARY_PATH extended and mark it with
    _ROS_WHEELS_BOOTSTRAP_COMPLETE; a program of another interpreter or venv inheriting that mark would not
    bootstrap itself and fail to load its libraries. For those, the mark and this venv's additions are removed.
    """
    env = dict(os.environ if base is None else base)
    env.update(node.env)
    env.setdefault("PYTHONUNBUFFERED", "1")  # line by line through the pipe, and nothing lost on a crash
    if _BOOTSTRAP_MARK in env and not _same_environment(Path(executable)):
        del env[_BOOTSTRAP_MARK]
        ours = {str(Path(sys.prefix) / "lib")}
        site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        ours |= {str(p.resolve()) for p in site.glob("ros_*.libs")}
        kept = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p not in ours]
        if kept:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
        else:
            env.pop("LD_LIBRARY_PATH", None)
    return env


def _same_environment(executable: Path) -> bool:
    """Whether `executable` lives in, or is a script run by an interpreter of, this Python's prefix."""
    prefix = os.path.realpath(sys.prefix)

    def inside(path: str) -> bool:
        return os.path.realpath(os.path.dirname(path)).startswith(prefix + os.sep)

    try:
        with open(executable, "rb") as f:
            head = f.readline(512)
    except OSError:
        return False
    if not head.startswith(b"#!"):
        return inside(str(executable))
    words = head[2:].decode(errors="replace").split()
    if not words:
        return False
    interpreter = words[0]
    if os.path.basename(interpreter) == "env" and len(words) > 1:
        interpreter = shutil.which(words[1]) or words[1]
    return inside(interpreter)


def locate_launch_file(text: str) -> Path:
    """A launch file given as a path, or as a bare name found in `$(find-pkg-share memnav)/launch/`.

    Raises:
        LaunchError: neither exists.
    """
    path = Path(text)
    if path.is_file():
        return path
    if path.parent == Path("."):
        try:
            candidate = find_package_share("memnav") / "launch" / text
        except LaunchError:
            candidate = None
        if candidate is not None and candidate.is_file():
            return candidate
        raise LaunchError(f"launch file not found: {text} (nor {candidate})")
    raise LaunchError(f"launch file not found: {text}")


def default_log_dir() -> Path:
    """Where `output: log` nodes write: $ROS_LOG_DIR, else $ROS_HOME/log, else ~/.ros/log, one folder per run."""
    base = os.environ.get("ROS_LOG_DIR") or (
        str(Path(os.environ["ROS_HOME"]) / "log") if os.environ.get("ROS_HOME") else str(Path.home() / ".ros" / "log"))
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S")
    return Path(base).expanduser() / f"memnav_launch_{stamp}_{os.getpid()}"


# --------------------------------------------------------------------------------------------------------------
# Supervision




class NodeFailure(str, Enum):
    """How a node failed the launch (`NodeReport.failure`)."""

    CRASHED = "crashed"  # ended non-zero or by a signal (or could not start) and was not respawned
    REFUSED_CONFIG = "refused_config"  # exited with CONFIG_ERROR_EXIT; the launch was shut down
    GAVE_UP = "gave_up"  # a respawn node that kept exiting soon after its start; the launch was shut down


@dataclass(frozen=True)
class RespawnLimit:
    """When a respawn node is given up on: it exited `exits` times in a row, each within `within_s` of its start.

    A node that cannot stay up (a port taken, a device missing, a crash at start-up) would otherwise be restarted
    forever while the rest of the launch runs without it.

    Attributes:
        exits: consecutive quick exits that end the launch (>= 1).
        within_s: an exit this soon after the node's start counts as quick, seconds.
    """

    exits: int = 3
    within_s: float = 5.0

    def __post_init__(self) -> None:
        if self.exits < 1:
            raise ValueError(f"RespawnLimit.exits must be >= 1, got {self.exits}")
        if not (math.isfinite(self.within_s) and self.within_s >= 0):
            raise ValueError(f"RespawnLimit.within_s must be a finite number of seconds >= 0, got {self.within_s!r}")


@dataclass
class NodeReport:
    """What happened to one node during a launch.

    Attributes:
        label: the node's label.
        starts: how many times it was started (restarts = starts - 1).
        pids: process id of each start.
        returncode: exit status of its last run (negative: killed by that signal), None if it never ended.
        failure: how it failed the launch, None when it did not (see `NodeFailure`).
        failed_runs: runs that ended non-zero while the launch was running, respawned ones included.
        tail: the last output lines of its latest run.
    """

    label: str
    starts: int = 0
    pids: list[int] = field(default_factory=list)
    returncode: int | None = None
    failure: NodeFailure | None = None
    failed_runs: int = 0
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=50))

    @property
    def restarts(self) -> int:
        """Respawns after the first start."""
        return max(0, self.starts - 1)

    @property
    def crashed(self) -> bool:
        """It failed the launch: crashed without respawn, refused its configuration, or was given up on."""
        return self.failure is not None


@dataclass
class _Managed:
    spec: NodeSpec
    cmd: list[str]
    env: dict[str, str]
    report: NodeReport
    popen: subprocess.Popen | None = None
    reader: threading.Thread | None = None
    respawn_at: float | None = None
    groups: list[int] = field(default_factory=list)
    started_at: float = 0.0  # time.monotonic() of the latest start
    quick_exits: int = 0  # consecutive exits within RespawnLimit.within_s of the start
    log_path: Path | None = None


class Supervisor:
    """Starts a launch plan's nodes, relays their output, respawns, reports crashes and shuts everything down.

    Every node runs in its own session and process group (so a terminal's Ctrl-C reaches only the launcher,
    which then shuts the nodes down in order, and so a node's own children are found again). Shutdown, on
    SIGINT/SIGTERM, `stop()`, the exit of an `on_exit: shutdown` node, a node refusing its configuration, a
    respawn node given up on, or the end of the last node: SIGINT to each process group, up to
    `shutdown_timeout_s` to exit, then SIGTERM, again up to `shutdown_timeout_s`, then SIGKILL. A second Ctrl-C
    skips the wait. Leftover processes of a node that exited (children it did not end) get SIGTERM at once. No
    process of any group is left when `run` returns. Should the launcher die without shutting down (SIGKILL, a
    crash), every node gets SIGTERM from the kernel (Linux), so none is left running on its own. A closed screen
    or message stream (`memnav launch FILE | head`) is given up on, the nodes' output still drained and logged.

    A node that exits with CONFIG_ERROR_EXIT refused its configuration: whatever its `respawn` and `on_exit`, it
    is not restarted and the launch shuts down. A respawn node that exits `respawn_limit.exits` times in a row,
    each within `respawn_limit.within_s` of its start, is given up on and the launch shuts down. Any other
    non-zero exit of a respawn node is reported with its run's last output lines and the node restarted; of a
    node without respawn, reported as a crash while the other nodes keep running (as in ROS 2), unless it has
    `on_exit: shutdown`.

    Exit status of `run`: CONFIG_ERROR_EXIT (2) when a node refused its configuration; else 1 when any node
    failed while the launch was running (ended non-zero or by a signal, respawned or not, or could not start),
    however the launch ended (Ctrl-C included); else 0. A non-zero status ends with one summary line naming
    the nodes and what happened to them.

    Attributes:
        reports: per node label, what happened to it (starts, pids, exit status, last output lines).
        interrupted: the launch was ended by SIGINT or SIGTERM.
        respawn_limit: when a respawn node is given up on.
    """

    def __init__(self, nodes: Sequence[NodeSpec], *, exec_paths: Sequence[str | Path] = (),
                 shutdown_timeout_s: float = 5.0, out: TextIO | None = None, log: TextIO | None = None,
                 log_dir: Path | None = None, tail_lines: int = 50, respawn_limit: RespawnLimit | None = None) -> None:
        """Build every command line now, so a missing executable fails before anything starts.

        Args:
            nodes: resolved nodes (`resolve_launch(...).nodes`).
            exec_paths: extra folders searched first for executables.
            shutdown_timeout_s: wait after SIGINT before SIGTERM, and after SIGTERM before SIGKILL, seconds.
            out: where `screen` output goes, prefixed with `[label]` (default stdout).
            log: where the launcher's own messages and crash reports go (default stderr).
            log_dir: folder for `output: log` files (default: `default_log_dir()`, made only when needed).
            tail_lines: output lines of a node's latest run kept for crash reports.
            respawn_limit: when a respawn node that keeps exiting is given up on (default `RespawnLimit()`:
                3 exits in a row, each within 5 s of its start).

        Raises:
            ValueError: `shutdown_timeout_s` is negative or not finite (NaN would never escalate).
            LaunchError: an executable is not found.
        """
        if not (math.isfinite(shutdown_timeout_s) and shutdown_timeout_s >= 0):
            raise ValueError(f"Supervisor.shutdown_timeout_s must be a finite number of seconds >= 0, "
                             f"got {shutdown_timeout_s!r}")
        self.shutdown_timeout_s = shutdown_timeout_s
        self.respawn_limit = respawn_limit or RespawnLimit()
        self._out = out
        self._log = log
        self._log_dir = log_dir
        self._tail_lines = tail_lines
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue[tuple] = queue.SimpleQueue()  # put() is safe inside signal handlers
        self._managed: list[_Managed] = []
        for spec in nodes:
            cmd = build_command(spec, exec_paths)
            self._managed.append(_Managed(
                spec=spec, cmd=cmd, env=child_environment(spec, cmd[0]),
                report=NodeReport(spec.label, tail=collections.deque(maxlen=tail_lines))))
        self.reports: dict[str, NodeReport] = {m.spec.label: m.report for m in self._managed}
        self.interrupted = False
        self._hurry = False   # a second signal came during the shutdown: no more waiting
        self._closed_streams: set[str] = set()   # "out" / "log": writing failed, given up (see _write_stream)

    # -- public ----------------------------------------------------------------------------------------------

    def run(self) -> int:
        """Start every node, supervise until the launch ends, shut down; return the exit status.

        SIGINT, SIGTERM and SIGHUP handlers are installed for the duration when called from the main thread (the
        nodes run in sessions of their own, so a closed terminal's SIGHUP reaches only the launcher, which must
        then stop them rather than die and leave them running).

        Raises:
            LaunchError: a node's log file cannot be written (ROS_LOG_DIR not a writable folder); the nodes
                started before are shut down first.
        """
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                handlers[signum] = signal.signal(signum, self._on_signal)
        try:
            try:
                for m in self._managed:
                    self._start(m)
                self._supervise()
            finally:
                self._shutdown()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
        status = self.exit_status()
        summary = self._summary()
        if summary:
            self._say(f"exit status {status}: {summary}")
        return status

    def stop(self) -> None:
        """Ask `run` (possibly in another thread) to shut everything down."""
        self._events.put(("stop",))

    def exit_status(self) -> int:
        """CONFIG_ERROR_EXIT when a node refused its configuration, 1 when any node failed (respawned or not),
        else 0."""
        reports = self.reports.values()
        if any(r.failure is NodeFailure.REFUSED_CONFIG for r in reports):
            return CONFIG_ERROR_EXIT
        return 1 if any(r.failure is not None or r.failed_runs for r in reports) else 0

    # -- internals -------------------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._events.put(("signal", signum))

    def _say(self, message: str) -> None:
        with self._lock:
            self._write_stream("log", self._log or sys.stderr, f"[launch] {message}\n")

    def _write_stream(self, which: str, stream: TextIO, text: str) -> None:
        """Write to the launcher's screen ("out") or message ("log") stream, holding `_lock`. Once writing to one
        fails (its reader closed the pipe, `| head`; a closed terminal), it is given up: the launch, the relaying of
        every node's output and the nodes' log files carry on (a node never dies of its output going nowhere)."""
        if which in self._closed_streams:
            return
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):   # ValueError: the stream itself was closed
            self._closed_streams.add(which)
            try:   # a file stream's unwritten rest then goes to /dev/null, not into an error when Python exits
                fd = stream.fileno()
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)
            except (OSError, ValueError, AttributeError):   # io.UnsupportedOperation (StringIO) is an OSError
                pass
            if which == "out":
                self._write_stream("log", self._log or sys.stderr, "[launch] the screen output was closed; the nodes "
                                   "keep running, output: screen nodes' lines are dropped, log files go on\n")

    def _start(self, m: _Managed) -> None:
        log_file = None
        if m.spec.output in (Output.LOG, Output.BOTH):
            if self._log_dir is None:
                self._log_dir = default_log_dir()
            m.log_path = self._log_dir / f"{m.spec.label}.log"
            try:
                self._log_dir.mkdir(parents=True, exist_ok=True)
                log_file = open(m.log_path, "a")  # closed by the reader thread
            except OSError as err:
                raise LaunchError(
                    f"{m.spec.where}: cannot write the log file of {m.spec.label} ({m.spec.output.value} output) "
                    f"at {m.log_path}: {err.strerror or err}; set ROS_LOG_DIR (or ROS_HOME) to a writable folder, "
                    "or give the node `output: screen`") from err
        try:
            popen = subprocess.Popen(m.cmd, env=m.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_end_with_launcher())
        except OSError as err:
            if log_file is not None:
                log_file.close()
            m.report.failure = NodeFailure.CRASHED
            m.respawn_at = None
            self._say(f"{m.spec.label}: cannot start {m.cmd[0]}: {err}")
            return
        m.popen = popen
        m.started_at = time.monotonic()
        m.groups.append(popen.pid)  # start_new_session: the group id is the pid
        m.report.starts += 1
        m.report.pids.append(popen.pid)
        m.report.tail = collections.deque(maxlen=self._tail_lines)  # this run's lines only
        m.respawn_at = None
        self._say(f"{m.spec.label}: started, pid {popen.pid}" + (f", log {log_file.name}" if log_file else ""))
        m.reader = threading.Thread(target=self._pump, args=(m, popen, log_file, m.report.tail), daemon=True,
                                    name=f"launch-out-{m.spec.label}")
        m.reader.start()
        threading.Thread(target=lambda: self._events.put(("exit", m, popen, popen.wait())), daemon=True,
                         name=f"launch-wait-{m.spec.label}").start()

    def _pump(self, m: _Managed, popen: subprocess.Popen, log_file: TextIO | None,
              tail: collections.deque[str]) -> None:
        assert popen.stdout is not None
        try:
            for raw in iter(popen.stdout.readline, b""):
                line = raw.decode(errors="replace").rstrip("\r\n")
                tail.append(line)
                if m.spec.output in (Output.SCREEN, Output.BOTH):
                    with self._lock:
                        self._write_stream("out", self._out or sys.stdout, f"[{m.spec.label}] {line}\n")
                if log_file is not None:
                    try:
                        log_file.write(line + "\n")
                        log_file.flush()
                    except OSError as err:   # a full disk: keep relaying (and draining the pipe) without the file
                        self._say(f"{m.spec.label}: cannot write its log file {log_file.name} any more: {err}")
                        log_file.close()
                        log_file = None
        finally:
            popen.stdout.close()
            if log_file is not None:
                try:
                    log_file.close()
                except OSError:
                    pass

    def _running(self) -> bool:
        return any(m.popen is not None or m.respawn_at is not None for m in self._managed)

    def _supervise(self) -> None:
        while self._running():
            pending = [m.respawn_at for m in self._managed if m.respawn_at is not None]
            timeout = max(0.0, min(pending) - time.monotonic()) if pending else None
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                event = None
            if event is None or event[0] not in ("signal", "stop"):   # never restart a node once asked to stop
                for m in self._managed:
                    if m.respawn_at is not None and m.respawn_at <= time.monotonic():
                        self._start(m)
            if event is None:
                continue
            if event[0] == "signal":
                self.interrupted = True
                self._say(f"{signal.Signals(event[1]).name} received, shutting down")
                return
            if event[0] == "stop":
                self._say("stop requested, shutting down")
                return
            _, m, popen, returncode = event
            if popen is not m.popen:
                continue
            if self._on_exit(m, returncode):
                return

    def _on_exit(self, m: _Managed, returncode: int) -> bool:
        """Handle a node's end during the launch; True when the launch must shut down."""
        m.popen = None
        m.report.returncode = returncode
        self._end_leftovers(m)
        if m.reader is not None:
            m.reader.join(timeout=2.0)  # the last lines, for the report
        how = _describe_exit(returncode)
        label, pid = m.spec.label, m.report.pids[-1]
        if returncode != 0:
            m.report.failed_runs += 1
        if returncode == CONFIG_ERROR_EXIT:
            m.report.failure = NodeFailure.REFUSED_CONFIG
            shown = m.spec.output is not Output.LOG  # its own error line is already on the screen
            self._say(f"{label} refused its configuration ({how}, pid {pid}); it is not restarted, shutting down"
                      + ("" if shown else ";" + self._tail_text(m)))
            return True
        limit = self.respawn_limit
        m.quick_exits = m.quick_exits + 1 if time.monotonic() - m.started_at < limit.within_s else 0
        if m.spec.respawn and not m.spec.shutdown_on_exit:
            if m.quick_exits >= limit.exits:
                m.report.failure = NodeFailure.GAVE_UP
                self._say(f"{label}: {how}; it exited within {limit.within_s:g} s of its start {m.quick_exits} "
                          f"times in a row, giving up on it (no respawn), shutting down;" + self._tail_text(m))
                return True
            m.respawn_at = time.monotonic() + m.spec.respawn_delay_s
            self._say(f"{label}: {how}; respawning in {m.spec.respawn_delay_s:g} s"
                      + (self._tail_text(m) if returncode != 0 else ""))
            return False
        if returncode != 0:
            m.report.failure = NodeFailure.CRASHED
            self._say(f"{label} crashed: {how} (pid {pid}); {self._tail_text(m).lstrip()}")
        else:
            self._say(f"{label}: finished ({how})")
        if m.spec.shutdown_on_exit:
            self._say(f"{label} has on_exit: shutdown, shutting down")
            return True
        return False

    def _summary(self) -> str:
        """One line naming every node that failed the launch and how, the most serious first ("" if none)."""
        parts: dict[NodeFailure | None, list[str]] = {f: [] for f in (*NodeFailure, None)}
        for m in self._managed:
            r = m.report
            if r.failure is NodeFailure.REFUSED_CONFIG:
                where = f"its error is in {m.log_path}" if m.spec.output is Output.LOG else "its error is above"
                parts[r.failure].append(f"{r.label} refused its configuration (exit code {CONFIG_ERROR_EXIT}; "
                                        f"{where})")
            elif r.failure is NodeFailure.GAVE_UP:
                parts[r.failure].append(
                    f"{r.label} was given up on: it exited within {self.respawn_limit.within_s:g} s of its start "
                    f"{m.quick_exits} times in a row (last: {_describe_exit(r.returncode or 0)})")
            elif r.failure is NodeFailure.CRASHED:
                parts[r.failure].append(f"{r.label} could not start" if r.returncode is None else
                                        f"{r.label} crashed ({_describe_exit(r.returncode)})")
            elif r.failed_runs:
                parts[None].append(f"{r.label} failed {r.failed_runs} time(s) and was respawned")
        order = (NodeFailure.REFUSED_CONFIG, NodeFailure.GAVE_UP, NodeFailure.CRASHED, None)
        return "; ".join(text for key in order for text in parts[key])

    def _tail_text(self, m: _Managed) -> str:
        lines = list(m.report.tail)
        if not lines:
            return " it printed nothing"
        body = "\n".join(f"    [{m.spec.label}] {line}" for line in lines)
        return f" last {len(lines)} output line(s):\n{body}"

    def _end_leftovers(self, m: _Managed) -> None:
        for group in m.groups:
            if _group_alive(group):
                self._say(f"{m.spec.label}: ending processes it left behind (group {group})")
                _signal_group(group, signal.SIGTERM)

    def _shutdown(self) -> None:
        for m in self._managed:
            m.respawn_at = None
        labels = {g: m.spec.label for m in self._managed for g in m.groups}
        steps = ((signal.SIGINT, self.shutdown_timeout_s), (signal.SIGTERM, self.shutdown_timeout_s),
                 (signal.SIGKILL, 5.0))
        for signum, timeout in steps:
            alive = sorted(_alive_groups(list(labels)))
            if not alive:
                break
            if signum != signal.SIGINT:
                names = ", ".join(sorted({labels[g] for g in alive}))
                self._say(f"still running: {names}; sending {signal.Signals(signum).name}")
            for group in alive:
                _signal_group(group, signum)
            # after a second Ctrl-C no step waits more than a moment: SIGTERM, then SIGKILL
            self._wait_groups(alive, min(timeout, 0.2) if self._hurry else timeout)
        for m in self._managed:
            if m.popen is not None:
                try:
                    self._stopped(m, m.popen.wait(timeout=1.0))
                except subprocess.TimeoutExpired:  # only if it escaped its group and ignored SIGKILL's group
                    self._say(f"{m.spec.label}: pid {m.popen.pid} did not end")
            if m.reader is not None:
                m.reader.join(timeout=2.0)

    def _stopped(self, m: _Managed, returncode: int) -> None:
        m.popen = None
        m.report.returncode = returncode
        self._say(f"{m.spec.label}: stopped ({_describe_exit(returncode)})")

    def _wait_groups(self, groups: Sequence[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while _alive_groups(groups):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                event = self._events.get(timeout=min(0.05, remaining))
            except queue.Empty:
                continue
            if event[0] == "signal":
                self._say(f"{signal.Signals(event[1]).name} received again, not waiting")
                self._hurry = True
                return
            if event[0] == "exit" and event[2] is event[1].popen:
                self._stopped(event[1], event[3])


_PR_SET_PDEATHSIG = 1   # linux/prctl.h


def _end_with_launcher() -> Callable[[], None] | None:
    """A `preexec_fn` that makes a node get SIGTERM when the launcher dies, however it dies (SIGKILL, a crash, an
    out-of-memory kill): the nodes run in sessions of their own, so nothing else would reach them, and an orphaned
    node would keep running (a policy node still commanding the base). None where prctl is unavailable (not Linux).

    The signal comes when the thread that started the node ends; `Supervisor.run` starts and respawns every node
    from its own thread and returns only once they all ended. It reaches the node's own process, not processes
    that process starts (a memnav node ends its own on SIGTERM).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    launcher, signum = os.getpid(), int(signal.SIGTERM)

    def in_child() -> None:   # in the forked child before exec: one C call and two system calls, nothing else
        prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != launcher:   # the launcher died between the fork and the prctl
            os.kill(os.getpid(), signum)

    return in_child


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(group: int) -> bool:
    """Whether any process of the group is still running (zombies waiting to be reaped do not count)."""
    return bool(_alive_groups([group]))


def _alive_groups(groups: Sequence[int]) -> set[int]:
    """The process groups among `groups` with a running (non-zombie) process."""
    candidates = set()
    for group in groups:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        candidates.add(group)
    proc = Path("/proc")
    if not candidates or not proc.is_dir():
        return candidates
    running = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) in candidates:
            running.add(int(fields[2]))
    return running
