"""ROS parameters declared from config dataclasses (the dataclass is the single source of truth).

`declare_dataclass` declares one parameter per field and builds the dataclass; a value of a type the field
cannot take is refused by name (an integer is taken for a float field: `-p rate_hz:=2`). `check_overrides`
refuses parameter overrides addressed to a node that it never declared (a typo would silently leave a default,
a safety limit included), suggesting the closest declared name.

Which overrides count as addressed to a node (rcl's command-line rules):
    `-p name:=value`                 every node of the process: refused when no node of the process declares it
    `-p node:name:=value`            that node only
    `--params-file F`, section NODE  that node (its name or fully qualified name; also under namespace keys)
Sections with wildcards (`/**:`, `/*/x`, ...) may be shared by many nodes and are not checked; neither is
`use_sim_time`, which every rclpy node takes. A params file with no section for the node but one whose name is
a typo of it (`safty_node:`) only gets a warning (`misnamed_sections`): shared files hold other nodes' sections.

Changes at run time (`memnav param set`, `ros2 param set`, any SetParameters call): `guard_parameter_changes`
refuses a change to a parameter the node reads only at start, naming it and saying how to change it (the
parameter file and a restart), instead of taking a value that would change nothing. A group that `live_group`
marks as live (the safety node's `guard.` limits) is checked the way a start is, by building its dataclass,
and applied at once; a value the dataclass rejects is refused with its message, and nothing of that request is
set.
"""
from __future__ import annotations

import dataclasses
import difflib
import typing
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

ALWAYS_ALLOWED = frozenset({"use_sim_time"})
# rcl options taking a value (after --ros-args); only -p/--param and --params-file are read here
_ROS_OPTIONS_WITH_VALUE = frozenset({"-p", "--param", "--params-file", "-r", "--remap", "-e", "--enclave",
                                     "--log-level", "--log-config-file", "--log-file-name"})


class ParameterTypeError(ValueError):
    """A parameter override whose value has a type its field cannot take."""


class UnknownParameterError(ValueError):
    """Parameter overrides addressed to a node that declares no parameter of that name."""


@dataclasses.dataclass
class _Group:
    """Parameters a node declared from one dataclass: under `prefix`, its current value `config`, and `apply` (set
    by live_group: the group changes at run time; None: read at start only)."""

    prefix: str
    config: Any
    apply: Callable[[Any], None] | None = None


_GROUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # rclpy Node -> its [_Group]


def declare_dataclass(node: Any, cls: type[T], prefix: str = "") -> T:
    """Declare one parameter per field of `cls` (default = the field's default), read them back, build `cls`.

    Tuples become lists on the parameter server and tuples again here. A float field is declared DOUBLE and takes
    an integer override (rcl reads `-p x:=1` and `x: 1` as INTEGER, which rclpy would refuse).

    Raises:
        ParameterTypeError: an override of another type, naming the parameter, the type expected and the value.
        ValueError: a value the dataclass rejects (naming the field), so a bad params file stops the node at
            start-up.
    """
    hints = typing.get_type_hints(cls)
    overrides = _overrides(node)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            raise TypeError(f"{cls.__name__}.{f.name} needs a default to become a ROS parameter")
        name = f"{prefix}{f.name}"
        declared = list(default) if isinstance(default, tuple) else default
        if hints.get(f.name) is float and _is_int(declared):
            declared = float(declared)
        if name in overrides:
            declared = coerce_parameter(name, overrides[name].value, declared)
        # the override is already in `declared`, converted to the field's type
        value = node.declare_parameter(name, declared, ignore_override=True).value
        values[f.name] = tuple(value) if isinstance(default, tuple) else value
    config = cls(**values)
    _GROUPS.setdefault(node, []).append(_Group(prefix, config))
    return config


def live_group(node: Any, prefix: str, apply: Callable[[Any], None]) -> None:
    """Let the parameters `node` declared under `prefix` (with declare_dataclass) change while it runs: a change is
    validated by building the dataclass anew, then `apply(new config)` is called (guard_parameter_changes)."""
    for group in _GROUPS.get(node, []):
        if group.prefix == prefix:
            group.apply = apply
            return
    raise KeyError(f"{node.get_name()} declared no parameters under {prefix!r}")


def guard_parameter_changes(node: Any) -> None:
    """Check every later change of `node`'s declared parameters (see the module docstring): refused when read at
    start only or rejected by its dataclass, else applied (live groups) and logged."""
    from rcl_interfaces.msg import SetParametersResult

    def on_set(params: list) -> SetParametersResult:
        try:
            changes = _changes(node, params)
        except ValueError as err:
            return SetParametersResult(successful=False, reason=str(err))
        for group, new in changes:
            old, group.config = group.config, new
            group.apply(new)
            for f in dataclasses.fields(new):
                if getattr(old, f.name) != getattr(new, f.name):
                    node.get_logger().info(f"parameter {group.prefix}{f.name} changed at run time: "
                                           f"{getattr(old, f.name)!r} -> {getattr(new, f.name)!r}")
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(on_set)


def _changes(node: Any, params: Sequence[Any]) -> list[tuple[_Group, Any]]:
    """(group, its new config) for each live group that `params` (rclpy Parameters) change. Raises ValueError, one
    line for the caller of set_parameters, when one is read at start only or its dataclass refuses the values."""
    wanted: dict[int, dict[str, Any]] = {}
    groups = _GROUPS.get(node, [])
    for param in params:
        found = [(g, param.name[len(g.prefix):]) for g in groups if param.name.startswith(g.prefix)
                 and param.name[len(g.prefix):] in {f.name for f in dataclasses.fields(g.config)}]
        if not found:
            continue   # not a memnav parameter (use_sim_time: rclpy's own)
        group, field_name = found[-1]
        if group.apply is None:
            raise ValueError(f"{param.name} is read when {node.get_name()} starts: set it in the node's parameter "
                             "file (config/robot.yaml) or on its command line and restart the node")
        current = getattr(group.config, field_name)
        value = coerce_parameter(param.name, param.value, list(current) if isinstance(current, tuple) else current)
        wanted.setdefault(id(group), {})[field_name] = tuple(value) if isinstance(current, tuple) else value
    out = []
    for group in groups:
        if id(group) in wanted:
            out.append((group, dataclasses.replace(group.config, **wanted[id(group)])))   # ValueError: refused
    return out


def coerce_parameter(name: str, value: Any, default: Any) -> Any:
    """`value` (a parameter override) as the type of `default`: an integer becomes a float for a float, elementwise
    for arrays; any other type mismatch is refused.

    Raises:
        ParameterTypeError: naming the parameter, the type expected and the value given.
    """
    if isinstance(default, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise _type_error(name, default, value)
        if not default:
            return list(value)
        try:
            return [coerce_parameter(name, v, default[0]) for v in value]
        except ParameterTypeError:
            raise _type_error(name, default, value) from None
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        if _is_int(value):
            return float(value)
        ok = isinstance(value, float)
    elif isinstance(default, int):
        ok = _is_int(value)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise _type_error(name, default, value)
    return value


def check_overrides(nodes: Sequence[Any], args: Sequence[str]) -> None:
    """Refuse parameter overrides of the command line `args` (as given to rclpy.init) that are addressed to one of
    `nodes` (the rclpy Nodes of this process, their parameters declared) or to the whole process, and that the
    node, or for a process-wide `-p` no node of the process, declares.

    Raises:
        UnknownParameterError: one line naming each unknown parameter, where it came from and the closest
            declared name.
    """
    declared = {id(n): set(n.list_parameters([], 0).names) | ALWAYS_ALLOWED for n in nodes}
    everywhere = set().union(*declared.values()) if declared else set(ALWAYS_ALLOWED)
    problems = []
    files = params_files(args)
    for target, name in cli_overrides(args):
        if target is None:
            if name not in everywhere:
                problems.append(_unknown(name, "-p", everywhere, ", ".join(n.get_name() for n in nodes)))
            continue
        for node in nodes:
            if _addresses(target, node) and name not in declared[id(node)]:
                problems.append(_unknown(name, f"-p {target}:{name}", declared[id(node)], node.get_name()))
    for path in files:
        for node in nodes:
            for name in sorted(file_parameters(path, node.get_fully_qualified_name()) - declared[id(node)]):
                problems.append(_unknown(name, path, declared[id(node)], node.get_name()))
    if problems:
        raise UnknownParameterError("; ".join(dict.fromkeys(problems)))


def misnamed_sections(nodes: Sequence[Any], args: Sequence[str]) -> list[str]:
    """Warnings for the params files of `args` that address none of `nodes` by name but hold a section whose name
    is one typo away from one of them (`safty_node:` for safety_node): its parameters reach no node. Only a
    warning: a shared file may well hold sections of other nodes only."""
    warnings = []
    for path in params_files(args):
        try:
            doc = yaml.safe_load(Path(path).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        keys = ["/" + "/".join(key_path) for key_path, _ in _sections(doc, ())]
        for node in nodes:
            if node.get_fully_qualified_name() in keys:
                continue
            for key in keys:
                leaf = key.rsplit("/", 1)[-1]
                if "*" not in key and leaf != node.get_name() and difflib.SequenceMatcher(
                        None, leaf, node.get_name()).ratio() >= 0.85:
                    warnings.append(f"params file {path}: section {key.lstrip('/')!r} names no node of this "
                                    f"process and gives {node.get_name()} nothing; did you mean "
                                    f"{node.get_name()!r}?")
    return warnings


def cli_overrides(args: Sequence[str]) -> list[tuple[str | None, str]]:
    """(node name or None for every node, parameter name) of each `-p [node:]name:=value` among the ROS
    arguments of `args`."""
    return [(rule.split(":", 1)[0], rule.split(":", 1)[1]) if ":" in rule else (None, rule)
            for rule in (value.split(":=", 1)[0] for option, value in _ros_options(args)
                         if option in ("-p", "--param"))]


def params_files(args: Sequence[str]) -> list[str]:
    """The `--params-file` paths among the ROS arguments of `args`, in order."""
    return [value for option, value in _ros_options(args) if option == "--params-file"]


def file_parameters(path: str | Path, fully_qualified_name: str) -> set[str]:
    """Names of the parameters a params file gives the node `fully_qualified_name` by name: sections keyed by it
    (`stop_node:`, `/stop_node:`, `/ns: {stop_node: ...}`), not wildcard sections. Nested keys are dotted.
    An unreadable file gives none (rcl has parsed it already when a node exists)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    names: set[str] = set()
    for key_path, params in _sections(doc, ()):
        if "*" not in "".join(key_path) and "/" + "/".join(key_path) == fully_qualified_name:
            names |= set(flatten_parameters(params))
    return names


def _sections(tree: Any, key_path: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], dict]]:
    """(node path parts, ros__parameters) of a params file."""
    if not isinstance(tree, dict):
        return
    for key, value in tree.items():
        if key == "ros__parameters":
            if isinstance(value, dict):
                yield key_path, value
        elif isinstance(value, dict):
            yield from _sections(value, key_path + tuple(p for p in str(key).split("/") if p))


def flatten_parameters(tree: dict, prefix: str = "") -> dict[str, Any]:
    """A params-file section's nested mapping as dotted parameter names -> values (`guard: {a: 1}` -> `guard.a`)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten_parameters(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _ros_options(args: Sequence[str]) -> list[tuple[str, str]]:
    """(option, value) of the value-taking options inside `--ros-args ... [--]` blocks."""
    out = []
    inside, i = False, 0
    while i < len(args):
        arg = args[i]
        if arg == "--ros-args":
            inside = True
        elif inside and arg == "--":
            inside = False
        elif inside and arg in _ROS_OPTIONS_WITH_VALUE and i + 1 < len(args):
            out.append((arg, args[i + 1]))
            i += 1
        i += 1
    return out


def _addresses(target: str, node: Any) -> bool:
    return target.lstrip("/") in (node.get_name(), node.get_fully_qualified_name().lstrip("/"))


def _unknown(name: str, source: str, declared: set[str], nodes: str) -> str:
    return f"unknown parameter {name!r} for {nodes} (from {source}){_suggestion(name, declared)}"


def _suggestion(name: str, declared: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(declared), n=1, cutoff=0.6)
    if not close:   # a prefix left out (max_linear_mps for guard.max_linear_mps)
        by_leaf = {d.rsplit(".", 1)[-1]: d for d in sorted(declared, reverse=True)}
        leaf = difflib.get_close_matches(name.rsplit(".", 1)[-1], sorted(by_leaf), n=1, cutoff=0.8)
        close = [by_leaf[leaf[0]]] if leaf else []
    return f"; did you mean {close[0]!r}?" if close else ""


def _overrides(node: Any) -> dict[str, Any]:
    # rclpy keeps every override the node takes (the -p rules and the params-file sections matching its name,
    # wildcards included) in this dict, which its own declare_parameter reads; Kilted has no public accessor
    return dict(getattr(node, "_parameter_overrides", {}) or {})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_ROS_TYPE_NAMES = {bool: "bool", int: "integer", float: "double", str: "string"}


def _type_name(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return (f"{_type_name(value[0])} array" if value else "array")
    return next((n for t, n in _ROS_TYPE_NAMES.items() if type(value) is t), type(value).__name__)


def _type_error(name: str, default: Any, value: Any) -> ParameterTypeError:
    return ParameterTypeError(f"parameter {name!r} expects {_article(_type_name(default))}, got "
                              f"{_type_name(value)} {value!r}")


def _article(type_name: str) -> str:
    return f"an {type_name}" if type_name[0] in "aeiou" else f"a {type_name}"
