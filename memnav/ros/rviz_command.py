"""`memnav rviz [--namespace NS] [--profile sim|robot] [--out FILE]`: the RViz 2 configuration of the shipped
`config/memnav.rviz`, with its topics moved to where a namespaced robot (or the robot profile's camera) publishes
them. No ROS needed: the file is written for `rviz2 -d FILE` on a machine that has RViz.

The shipped file shows the root namespace's topics and the simulator's camera (`/camera/color/image_raw`).
Under `--namespace robot1` every memnav topic becomes `/robot1/memnav/...`, odometry `/robot1/odom` and the
camera `/robot1/camera/...`, as the launch files' `namespace:=robot1` puts them. `--profile robot` shows
robot.launch.yaml's default colour topic (a RealSense's `camera/camera/color/image_raw`); `--color-topic` and
`--odom-topic` name others (relative names resolve under the namespace, absolute ones stay). Everything shown
is in the odometry frame, so no TF remapping is needed.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from memnav.core.namespaces import absolute_namespace, resolve_name

SIM_COLOR_TOPIC = "camera/color/image_raw"   # the simulator bridge's, the shipped file's
ROBOT_COLOR_TOPIC = "camera/camera/color/image_raw"   # robot.launch.yaml's color_topic default
CAMERA_DISPLAY, ODOMETRY_DISPLAY = "Camera", "Odometry"   # the shipped file's display names
_TOPIC = re.compile(r"/?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")   # a fully qualified or relative name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", default="", metavar="NS",
                        help="the robot's namespace (the launch file's namespace:=NS): its topics are shown; "
                             "none by default (the root namespace, as the shipped file)")
    parser.add_argument("--profile", choices=("sim", "robot"), default="sim",
                        help="whose camera topic the Camera display shows: the simulator bridge's "
                             f"({SIM_COLOR_TOPIC}) or robot.launch.yaml's default ({ROBOT_COLOR_TOPIC})")
    parser.add_argument("--color-topic", default="", metavar="TOPIC",
                        help="the colour image topic to show instead (robot.launch.yaml's color_topic)")
    parser.add_argument("--odom-topic", default="odom", metavar="TOPIC",
                        help="the odometry topic to show (robot.launch.yaml's odom_topic)")
    parser.add_argument("--template", type=Path, default=None, metavar="FILE",
                        help="the RViz file to start from (default: the shipped config/memnav.rviz)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write here (an existing file is replaced) instead of stdout")


def run(args: argparse.Namespace) -> int:
    from memnav.core.files import replace_files
    from memnav.paths import check_output_file, shipped_file

    namespace = absolute_namespace(args.namespace) if args.namespace else "/"
    check_output_file(args.out, "--out")
    template = args.template or shipped_file("config/memnav.rviz")
    color = args.color_topic or (ROBOT_COLOR_TOPIC if args.profile == "robot" else SIM_COLOR_TOPIC)
    for option, topic in (("--color-topic", color), ("--odom-topic", args.odom_topic)):
        try:
            resolve(topic, namespace)
        except ValueError as err:
            raise ValueError(f"{option}: {err}") from None
    text = rviz_config(template.read_text(), namespace, {CAMERA_DISPLAY: color, ODOMETRY_DISPLAY: args.odom_topic})
    header = (f"# memnav RViz view of namespace {namespace}, made by `memnav rviz` from {template.name}\n"
              f"# open with: rviz2 -d {args.out or 'FILE'}\n")
    if args.out is None:
        sys.stdout.write(header + text)
        return 0
    replace_files({args.out: (header + text).encode()})
    print(f"wrote {args.out}: open it with `rviz2 -d {args.out}`", file=sys.stderr)
    return 0


def resolve(topic: str, namespace: str) -> str:
    """`topic` as a node in `namespace` resolves it: absolute names stay, relative ones go under the namespace."""
    if not _TOPIC.fullmatch(topic):
        raise ValueError(f"not a topic name: {topic!r} (letters, digits and underscores, not starting with a digit, "
                         "parts separated by '/')")
    return resolve_name(topic, namespace)


def rviz_config(text: str, namespace: str, topics: dict[str, str]) -> str:
    """An RViz config (YAML `text`) with each display's topic as seen from `namespace`: the displays named in
    `topics` show that topic (relative names resolved under `namespace`), every other display's root-namespace
    topic moves under `namespace`. Raises ValueError when the text is not an RViz config or a named display is
    not in it."""
    try:
        cfg = yaml.safe_load(text)
        displays = cfg["Visualization Manager"]["Displays"]
    except (yaml.YAMLError, KeyError, TypeError) as err:
        raise ValueError(f"not an RViz configuration (no 'Visualization Manager' displays): {err}") from None
    every = _every_display(displays)
    missing = sorted(set(topics) - {d.get("Name") for d in every})
    if missing:
        raise ValueError(f"the RViz configuration has no display named {', '.join(map(repr, missing))}")
    for display in every:
        topic = display.get("Topic")
        if not isinstance(topic, dict) or "Value" not in topic:
            continue
        name = display.get("Name")
        given = topics[name] if name in topics else str(topic["Value"]).lstrip("/")
        topic["Value"] = resolve(given, namespace)
    return yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False, width=120)


def _every_display(displays: object) -> list[dict]:
    """The displays of an RViz display list, those inside groups (an rviz_common/Group holds its own Displays)
    included, each once, whatever its name (RViz names a new display after its class, so two often share one)."""
    out: list[dict] = []
    for display in displays if isinstance(displays, list) else []:
        if isinstance(display, dict):
            out.append(display)
            out += _every_display(display.get("Displays"))
    return out
