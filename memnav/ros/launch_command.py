"""`memnav launch FILE [name:=value ...]`: run a ROS 2 YAML launch file and supervise its nodes.

The launch files under launch/ also work with `ros2 launch memnav FILE` on a full ROS 2 install; this command
runs them where launch_ros is unavailable (it is not on PyPI). See memnav.ros.launcher for the supported subset.
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from memnav.ros.launcher import (
    LaunchFile,
    Supervisor,
    build_command,
    load_launch_file,
    locate_launch_file,
    parse_overrides,
    resolve_launch,
)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--show-args", action="store_true",
        help="print the arguments the file declares, with their defaults, descriptions and allowed values, "
             "and exit without resolving or starting anything%(default).0s")
    parser.add_argument(
        "--dry-run", action="store_true",
        help="resolve arguments and substitutions, find every executable and print each node's environment "
             "additions (set_env) and full command line (--ros-args with -r __node:=, -r __ns:=, "
             "--params-file, -p and -r remappings) as a shell line, then exit without starting anything"
             "%(default).0s")
    parser.add_argument(
        "--shutdown-timeout", type=float, default=5.0, metavar="SECONDS",
        help="on Ctrl-C, SIGTERM, the end of an on_exit: shutdown node or a node failure that ends the launch "
             "(a node refusing its configuration, a respawn node given up on), every node's process group gets SIGINT "
             "and this long to exit, then SIGTERM and this long again, then SIGKILL (0: no waiting); a second "
             "Ctrl-C skips the waiting")


class _ItemsAndOptions(argparse.Action):
    """Everything after FILE: NAME:=VALUE items, and this command's options mixed in among them in any order.

    argparse hands a positional all the strings it can take at once and then never again, so
    `FILE --dry-run agent:=gru` would leave `agent:=gru` unrecognized; this action takes the rest of the command
    line (nargs=REMAINDER), keeps the NAME:=VALUE items in order and parses the other strings as options.
    """

    def __init__(self, *args: Any, options: argparse.ArgumentParser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.options = options

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        items = [v for v in values if ":=" in v and not v.startswith("-")]
        rest = [v for v in values if not (":=" in v and not v.startswith("-"))]
        if "-h" in rest or "--help" in rest:
            parser.print_help()
            parser.exit()
        _, unknown = self.options.parse_known_args(rest, namespace)
        bad = [v for v in unknown if v.startswith("-")]
        if bad:
            parser.error(f"unrecognized arguments: {' '.join(bad)}")
        # anything else is a launch argument without `:=`, which parse_overrides refuses by name
        setattr(namespace, self.dest, items + unknown)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = "%(prog)s [-h] FILE [NAME:=VALUE ...] [--show-args] [--dry-run] [--shutdown-timeout SECONDS]"
    parser.add_argument(
        "file", metavar="FILE",
        help="the launch file: a path, or a bare name such as sim.launch.yaml looked up in the launch/ folder of "
             "the memnav package share (the repository root when memnav is installed editable). Only ROS 2 YAML "
             "launch files are supported: args (with allowed values: choice), set_env, node (pkg, exec, name, "
             "namespace, param from a file and inline, remap, args, output, respawn, respawn_delay, on_exit: "
             "shutdown), group and push_ros_namespace, `if:`/`unless:` on any action, "
             "with $(var NAME), $(env NAME [DEFAULT]), $(find-pkg-share PACKAGE) and $(equals A B); "
             "anything else is refused with an error naming it. Options may come before FILE or anywhere among "
             "the NAME:=VALUE items")
    options = argparse.ArgumentParser(prog=parser.prog, add_help=False)
    _add_options(options)
    items = parser.add_argument(
        "overrides", nargs=argparse.REMAINDER, metavar="NAME:=VALUE", action=_ItemsAndOptions, options=options,
        default=[],
        help="set a declared launch argument, as with `ros2 launch` (e.g. data:=data/houses split:=val); an "
             "argument the file does not declare is an error listing the declared ones, a value outside an "
             "argument's allowed values is an error listing them, and an argument without a default must be "
             "given%(default).0s")
    items.required = False  # argparse takes a REMAINDER positional as required; no item at all is fine
    _add_options(parser)


def show_args(launch: LaunchFile) -> str:
    """The `--show-args` text (the layout of `ros2 launch --show-args`)."""
    if not launch.args:
        return "No arguments.\n"
    lines = ["Arguments (pass arguments as '<name>:=<value>'):", ""]
    for arg in launch.args:
        lines.append(f"    '{arg.name}':")
        lines.append(f"        {arg.description or 'no description given'}")
        if arg.choices:
            lines.append(f"        Valid choices are: {', '.join(arg.choices)}")
        lines.append("        (required)" if arg.default is None else f"        (default: '{arg.default}')")
        lines.append("")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    timeout = args.shutdown_timeout
    if not (math.isfinite(timeout) and timeout >= 0):   # NaN would never escalate to SIGTERM / SIGKILL
        raise ValueError(f"--shutdown-timeout must be a finite number of seconds >= 0, got {timeout:g}")
    path = locate_launch_file(str(args.file))
    launch = load_launch_file(path)
    if args.show_args:
        print(show_args(launch), end="")
        return 0
    plan = resolve_launch(launch, parse_overrides(args.overrides))
    if args.dry_run:
        for node in plan.nodes:
            cmd = build_command(node)
            env = [f"{k}={v}" for k, v in node.env.items()]
            flags = [f"output={node.output.value}"] + (["respawn"] if node.respawn else []) + \
                (["on_exit=shutdown"] if node.shutdown_on_exit else [])
            print(f"# {node.label} ({', '.join(flags)})")
            print(shlex.join(["env", *env, *cmd] if env else cmd))
        return 0
    if not plan.nodes:
        print(f"memnav launch: {Path(path)} starts no node", file=sys.stderr)
        return 0
    supervisor = Supervisor(plan.nodes, shutdown_timeout_s=args.shutdown_timeout)
    return supervisor.run()
