"""`memnav replay BAG [--rate R] [--loop] [--remap from:=to]`: publish a recorded bag into the live graph.

Every topic of the bag (or of `--topics`) is published with the message bytes as recorded (no
deserialization) and the QoS the bag says its publishers offered (reliability, durability, depth;
reliable + volatile when the bag has none), so latched topics such as /memnav/goal_image stay latched.
/clock (rosgraph_msgs/Clock, best effort, depth 1, as `ros2 bag play --clock`) carries the bag's log time,
so nodes started with `use_sim_time:=true` run on recorded time.

Timing: a timer at `--clock-hz` advances bag time by (wall time elapsed) x `--rate`, publishes /clock, then
every message whose log time has been reached, in log-time order; messages are therefore up to one timer
period late (10 ms at the default 100 Hz) but never reordered. `--delay` waits before the first message so
that subscribers can be discovered (DDS discovery takes about a second). `--loop` starts over after the last
message (bag time jumps back). Topics whose Python message package is not installed are skipped with a
warning; so are messages of types the bag has no definition for (counted).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from memnav.eval.bag_io import BagFile


def parse_remaps(items: list[str]) -> dict[str, str]:
    """"from:=to" items -> {from: to}.

    Raises:
        ValueError: an item without ":=" or with an empty side (naming it).
    """
    out: dict[str, str] = {}
    for item in items:
        src, sep, dst = item.partition(":=")
        if not sep or not src or not dst:
            raise ValueError(f"--remap {item!r}: expected FROM:=TO, e.g. /odom:=/robot/odom")
        out[src] = dst
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, metavar="BAG", help="rosbag2 folder, or a single .mcap or .db3 file")
    parser.add_argument("--rate", type=float, default=1.0, metavar="R", help="playback speed (2 = twice as fast)")
    parser.add_argument("--loop", action="store_true", help="start over after the last message")
    parser.add_argument("--remap", action="append", default=[], metavar="FROM:=TO",
                        help="publish topic FROM under the name TO (repeatable)")
    parser.add_argument("--topics", nargs="+", default=None, metavar="TOPIC", help="replay only these topics")
    parser.add_argument("--clock-hz", type=float, default=100.0, metavar="HZ",
                        help="rate of /clock messages and of the publishing timer, Hz")
    parser.add_argument("--no-clock", action="store_true", help="do not publish /clock")
    parser.add_argument("--delay", type=float, default=1.0, metavar="S",
                        help="wait this long after creating the publishers before the first message, seconds")
    parser.add_argument("--ros-args", nargs=argparse.REMAINDER, default=[], dest="ros_args",
                        help="everything after this goes to ROS (e.g. -r __node:=NAME)")


def publisher_qos(profiles: tuple) -> Any:
    """rclpy QoSProfile from a bag topic's offered QoS (rosbags Qos tuples; reliable + volatile if none)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    reliable, latched, depth = True, False, 10
    if profiles:
        q = profiles[0]
        reliable = q.reliability.name != "BEST_EFFORT"
        latched = q.durability.name == "TRANSIENT_LOCAL"
        depth = int(q.depth) if q.depth and q.depth > 0 else (1 if latched else 10)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def run(args: argparse.Namespace) -> int:
    if not args.rate > 0 or not args.clock_hz > 0 or args.delay < 0:
        raise ValueError("--rate and --clock-hz must be > 0 and --delay >= 0")
    remaps = parse_remaps(args.remap)
    if not args.bag.exists():
        raise FileNotFoundError(f"bag {args.bag} does not exist")
    bag = BagFile(args.bag)
    topics = bag.topics
    selected = list(args.topics) if args.topics else sorted(topics)
    missing = [t for t in selected if t not in topics]
    if missing:
        raise ValueError(f"{args.bag}: topics {missing} are not in the bag; it has {sorted(topics)}")
    for w in bag.warnings:
        print(f"memnav replay: {w}", file=sys.stderr)

    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    from memnav.ros.record_command import message_class

    rclpy.init(args=["memnav_replay", "--ros-args", *args.ros_args] if args.ros_args else ["memnav_replay"])
    node = rclpy.create_node("memnav_replay")
    log = node.get_logger()
    pubs: dict[str, Any] = {}
    for topic in selected:
        try:
            cls = message_class(topics[topic].msgtype)
        except ImportError as err:
            log.warn(f"not replaying {topic}: {err}")
            continue
        pubs[topic] = node.create_publisher(cls, remaps.get(topic, topic), publisher_qos(topics[topic].qos))
    clock_pub = None if args.no_clock else node.create_publisher(
        Clock, "/clock", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
    if not pubs:
        node.destroy_node()
        rclpy.shutdown()
        raise ValueError(f"{args.bag}: none of the topics {selected} can be published")

    published: Counter = Counter()
    st: dict[str, Any] = {"it": None, "next": None, "t0_bag": None, "t0_wall": None, "bag_now": None,
                          "done": False, "loops": 0}

    def restart() -> None:
        st["it"] = bag.messages(list(pubs), decode=False)
        st["next"] = next(st["it"], None)
        st["t0_wall"] = None

    def tick() -> None:
        if st["done"]:
            return
        if st["next"] is None:
            if not args.loop or not published:
                st["done"] = True
                return
            st["loops"] += 1
            restart()
            if st["next"] is None:
                st["done"] = True
                return
        now = time.monotonic()
        if st["t0_wall"] is None:
            st["t0_wall"], st["t0_bag"] = now, st["next"].log_time_ns
        bag_now = st["t0_bag"] + int((now - st["t0_wall"]) * args.rate * 1e9)
        if clock_pub is not None:
            c = Clock()
            c.clock.sec, c.clock.nanosec = divmod(bag_now, 1_000_000_000)
            clock_pub.publish(c)
        while st["next"] is not None and st["next"].log_time_ns <= bag_now:
            m = st["next"]
            pubs[m.topic].publish(m.raw)
            published[m.topic] += 1
            st["next"] = next(st["it"], None)

    restart()
    start_timer: dict[str, Any] = {}

    def begin() -> None:
        start_timer["t"].cancel()
        node.create_timer(1.0 / args.clock_hz, tick)

    start_timer["t"] = node.create_timer(max(args.delay, 1e-3), begin)
    log.info(f"replaying {args.bag}: {len(pubs)} topics at {args.rate}x{' in a loop' if args.loop else ''}")
    try:
        while rclpy.ok() and not st["done"]:
            rclpy.spin_once(node, timeout_sec=0.05)
        # let reliable readers fetch the last messages before the publishers go away
        end = time.monotonic() + 0.5
        while rclpy.ok() and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        bag.close()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    skipped = {k: v for k, v in bag.counts.to_json().items() if v and k not in ("read",)}
    print(f"published {sum(published.values())} messages "
          f"({', '.join(f'{remaps.get(t, t)}: {n}' for t, n in sorted(published.items()))})"
          + (f"; skipped {skipped}" if skipped else ""))
    return 0
