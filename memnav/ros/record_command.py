"""`memnav record --out BAG [--storage mcap|sqlite3] [TOPIC ...]`: record live topics into a rosbag2 bag.

A generic recorder (rclpy raw subscriptions -> `rosbags` writer) for machines without rosbag2: the bag is a
rosbag2 folder (metadata.yaml version 8 + one .mcap or .db3 file) that `ros2 bag info/play` of Humble,
Jazzy and Kilted read, and that `memnav eval-bag` and `memnav replay` take.

Topics: the ones named (a relative name such as `odom` resolves in the recorder's namespace, /odom by default,
as `ros2 bag record` does), or every topic when none is named; the graph is re-checked every
`--discovery-interval` seconds, so topics whose publishers appear later are picked up. Each topic is
subscribed with QoS compatible with all its publishers (reliable only when every publisher is reliable,
transient local when every publisher is, so latched topics such as /memnav/goal_image are recorded), and
the publishers' QoS is stored as the topic's offered QoS (so `replay` offers the same). A topic whose type
has no Python message package installed, or no definition in the Kilted typestore, is skipped with a
warning. Messages are stored as received (CDR bytes), stamped with the node clock at reception (`--ros-args
-p use_sim_time:=true` records /clock time; `--duration` and `--discovery-interval` still count wall time, so a
paused or absent /clock neither stalls discovery nor the end of the recording). With use_sim_time, messages that
arrive before the first /clock (latched ones, typically) are written with the time of that first /clock, not at
time 0 (which put a decades-long gap at the start of the bag, so that a replay never reached its second message).

Topics are recorded under the names they have in the graph. A topic remap in --ros-args (`-r
/camera/color/image_raw:=/cam/rgb`) is refused, exit status 2, before anything starts: ROS would apply it to the
recorder's subscriptions, so a named topic would be looked for under one name and subscribed under another (nothing
recorded), and in a recording of every topic one topic's messages would be written under another's name. Name the
topics as the graph has them and rename them when replaying (`memnav replay BAG --remap FROM:=TO`). The node's own
name and namespace (`-r __node:=NAME`, `-r __ns:=/NS`) are taken.

Recording ends at Ctrl-C, SIGTERM or after `--duration` seconds; the bag is then finished (index and
metadata written). The output folder must not exist: a bag is never overwritten. A recording that fails
before its first message (a bad option, a ROS error) leaves no folder behind.
For large images between processes over Fast DDS, see the FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA note in the
README (set it for the publisher and the recorder alike).
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
from pathlib import Path
from typing import Any

from memnav.core.namespaces import resolve_name
from memnav.eval.bag_io import STORAGES, BagError, BagWriter, UnknownTypeError

MAX_TIMER_S = 9e9   # ROS timers count int64 nanoseconds (up to ~9.2e9 s)
_ROS_QOS_TO_BAG = {"reliability": ("RELIABLE", "BEST_EFFORT"), "durability": ("TRANSIENT_LOCAL", "VOLATILE")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topics", nargs="*", metavar="TOPIC",
                        help="topics to record (default: every topic in the graph, re-checked while recording)")
    parser.add_argument("--out", type=Path, required=True, metavar="BAG",
                        help="bag folder to create (must not exist)")
    parser.add_argument("--storage", choices=STORAGES, default="mcap", help="storage format of the bag")
    parser.add_argument("--duration", type=float, default=0.0, metavar="S",
                        help="stop after this many seconds of wall time (0 = until Ctrl-C or SIGTERM)")
    parser.add_argument("--discovery-interval", type=float, default=0.5, metavar="S",
                        help="how often the graph is checked for new topics, seconds")
    parser.add_argument("--ros-args", nargs=argparse.REMAINDER, default=[], dest="ros_args",
                        help="everything after this goes to ROS (e.g. -p use_sim_time:=true, -r __node:=NAME, "
                             "-r __ns:=/NS); topic remaps are refused: name the topics as the graph has them, and "
                             "rename them at replay (memnav replay --remap FROM:=TO)")


def message_class(msgtype: str) -> Any:
    """The Python class of a ROS message type name such as "sensor_msgs/msg/Image".

    Raises:
        ImportError: its package is not installed (naming the type).
    """
    parts = msgtype.split("/")
    if len(parts) != 3 or parts[1] != "msg":
        raise ImportError(f"{msgtype!r} is not a message type name (package/msg/Type)")
    try:
        return getattr(importlib.import_module(f"{parts[0]}.msg"), parts[2])
    except (ImportError, AttributeError) as err:
        raise ImportError(f"message type {msgtype}: Python package {parts[0]} is not installed or lacks "
                          f"{parts[2]} ({err})") from err


def subscription_qos(infos: list[Any]) -> tuple[Any, bool, bool]:
    """QoS matching every publisher in `infos` (rclpy TopicEndpointInfo): (profile, reliable, transient local)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    reliable = bool(infos) and all(i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in infos)
    latched = bool(infos) and all(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos)
    profile = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                         reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
    return profile, reliable, latched


def offered_qos(infos: list[Any]) -> list[Any]:
    """rosbags `Qos` tuples of the publishers' profiles (what rosbag2 stores as offered_qos_profiles)."""
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    from memnav.eval.bag_io import qos_profile

    return [qos_profile(i.qos_profile.reliability == ReliabilityPolicy.RELIABLE,
                        i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL,
                        max(1, int(i.qos_profile.depth or 1))) for i in infos]


# ROS arguments that take the next one as their value (rcl's), so that a value is never read as an option
_ROS_ARGS_WITH_VALUE = {"-p", "--param", "--params-file", "-e", "--enclave", "--log-level", "--log-file-name",
                        "--log-config-file"}
# remap rules for the node itself, not for a topic: taken
_NODE_REMAPS = {"__node", "__name", "__ns"}


def topic_remaps(ros_args: list[str]) -> list[str]:
    """The topic (or service) remap rules among `ros_args` (what follows --ros-args on the command line): every
    `-r` / `--remap` rule except the node's own name and namespace (`__node:=`, `__name:=`, `__ns:=`, also with a
    `NODE:` prefix). Arguments after a `--` that ends the ROS arguments are not ROS's (until another --ros-args)."""
    rules: list[str] = []
    in_ros, i = True, 0
    while i < len(ros_args):
        arg = ros_args[i]
        if arg == "--ros-args":
            in_ros = True
        elif not in_ros:
            pass
        elif arg == "--":
            in_ros = False
        elif arg in ("-r", "--remap") and i + 1 < len(ros_args):
            rule = ros_args[i + 1]
            name = rule.split(":=", 1)[0]
            if "://" not in name and ":" in name:   # NODE:name:=... (rostopic://name:=... is a topic's)
                name = name.split(":", 1)[1]
            if ":=" in rule and name not in _NODE_REMAPS:   # no ":=": not a rule at all, rcl says so
                rules.append(rule)
            i += 1
        elif arg in _ROS_ARGS_WITH_VALUE:
            i += 1
        i += 1
    return rules


def check_no_topic_remaps(ros_args: list[str]) -> None:
    """Refuse a topic remap in record's --ros-args (ValueError naming it and what to do instead): ROS applies it to
    the recorder's subscriptions, so a named topic would be looked for in the graph under its own name and subscribed
    under the remapped one (nothing recorded, only "never saw a publisher"), and in a recording of every topic the
    messages of the remap's target would be written under its source's name (the source's own never recorded)."""
    rules = topic_remaps(ros_args)
    if not rules:
        return
    rule = rules[0]
    source, _, target = rule.partition(":=")
    source = source.split("://", 1)[-1]
    if ":" in source:
        source = source.split(":", 1)[1]
    raise ValueError(f"--ros-args -r {rule}: memnav record takes no topic remaps (ROS would turn its subscription "
                     f"of {source} to {target}: {source} recorded as nothing, or {target}'s messages written under the "
                     f"name {source}); name the topics as they are in the graph (memnav record --out BAG {target}) "
                     f"and rename them when replaying (memnav replay BAG --remap {target}:={source})")


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.duration <= MAX_TIMER_S:   # NaN fails every comparison
        raise ValueError(f"--duration must be a number of seconds from 0 to {MAX_TIMER_S:g} "
                         f"(0 = until Ctrl-C or SIGTERM), got {args.duration:g}")
    if not 0 < args.discovery_interval <= MAX_TIMER_S:
        raise ValueError(f"--discovery-interval must be a number of seconds above 0 and at most {MAX_TIMER_S:g}, "
                         f"got {args.discovery_interval:g}")
    check_no_topic_remaps(args.ros_args)
    if args.out.exists():
        raise BagError(f"--out {args.out} exists already; a bag is never overwritten")
    import rclpy
    from rclpy.clock import Clock, ClockType
    from rclpy.executors import ExternalShutdownException

    rclpy.init(args=["memnav_record", "--ros-args", *args.ros_args] if args.ros_args else ["memnav_record"])
    node = rclpy.create_node("memnav_record")
    log = node.get_logger()
    writer: BagWriter | None = None
    wanted = {resolve_name(t, node.get_namespace()) for t in args.topics}   # the graph lists absolute names
    wall = Clock(clock_type=ClockType.STEADY_TIME)   # the timers' clock: the node's is /clock with use_sim_time
    subs: dict[str, Any] = {}
    refused: set[str] = set()
    state = {"done": False}

    sim_time = node.get_parameter("use_sim_time").value
    before_clock: list[tuple[str, bytes]] = []   # with use_sim_time: messages received while the clock reads 0

    def make_callback(topic: str):
        def on_message(raw: bytes) -> None:
            stamp_ns = node.get_clock().now().nanoseconds
            if sim_time and stamp_ns == 0:
                before_clock.append((topic, raw))
                return
            for early_topic, early_raw in before_clock:
                writer.write_raw(early_topic, stamp_ns, early_raw)
            before_clock.clear()
            writer.write_raw(topic, stamp_ns, raw)
        return on_message

    def discover() -> None:
        for topic, types in node.get_topic_names_and_types():
            if topic in subs or topic in refused or (wanted and topic not in wanted):
                continue
            infos = node.get_publishers_info_by_topic(topic)
            if not infos:
                continue
            msgtype = types[0]
            try:
                cls = message_class(msgtype)
                writer.add_topic(topic, msgtype, offered_qos(infos))
            except (ImportError, UnknownTypeError) as err:
                refused.add(topic)
                log.warning(f"not recording {topic}: {err}")
                continue
            profile, reliable, latched = subscription_qos(infos)
            subs[topic] = node.create_subscription(cls, topic, make_callback(topic), profile, raw=True)
            log.info(f"recording {topic} ({msgtype}, {'reliable' if reliable else 'best effort'}"
                     f"{', transient local' if latched else ''})")

    def stop(*_: object) -> None:
        state["done"] = True

    previous_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, stop)
        node.create_timer(args.discovery_interval, discover, clock=wall)
        if args.duration > 0:
            node.create_timer(args.duration, stop, clock=wall)
        writer = BagWriter(args.out, args.storage)   # last: whatever can refuse the options has run by now
        discover()
        log.info(f"recording into {args.out} ({args.storage}); Ctrl-C to stop")
        try:
            while rclpy.ok() and not state["done"]:
                rclpy.spin_once(node, timeout_sec=0.1)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        for topic, raw in before_clock:   # no /clock ever came: time 0 is all there is
            writer.write_raw(topic, 0, raw)
        writer.close()
    except BaseException:
        if writer is not None:   # keeps a bag that holds messages, removes an empty one (run refused an existing --out)
            writer.abandon()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    never = sorted(wanted - set(subs) - refused)
    counts = ", ".join(f"{t}: {n}" for t, n in sorted(writer.counts.items())) or "no messages"
    print(f"wrote {args.out} ({counts})")
    if never:
        print(f"memnav record: never saw a publisher of {', '.join(never)}", file=sys.stderr)
    return 0
