"""`memnav replay BAG [--rate R] [--loop] [--remap from:=to]`: publish a recorded bag into the live graph.

Every topic of the bag (or of `--topics`) is published with the message bytes as recorded (no
deserialization) and the QoS the bag says its publishers offered (reliability, durability, depth;
reliable + volatile when the bag has none), so latched topics such as /memnav/goal_image stay latched. A topic
recorded from several publishers that offered different QoS gets one profile that serves all their subscribers
(`publisher_qos`: reliable if any was, transient local only if all were).
/clock (rosgraph_msgs/Clock, best effort, depth 1, as `ros2 bag play --clock`) carries the bag's log time,
so nodes started with `use_sim_time:=true` run on recorded time.

Timing: a timer at `--clock-hz` advances bag time by (wall time elapsed) x `--rate`, publishes /clock, then
every message whose log time has been reached, in log-time order; messages are therefore up to one timer
period late (10 ms at the default 100 Hz) but never reordered. Before the first message the replay waits
until each `--wait-for` topic has a subscriber (at most `--wait-timeout` seconds, then it starts anyway with a
warning), then `--delay` seconds more so that the other subscribers are discovered too (DDS discovery takes
about a second). `--loop` starts over after the last message (bag time jumps back). `--rate` is at most
MAX_RATE: /clock carries builtin_interfaces/Time, whose seconds are int32, and a larger rate would carry it past
that between two ticks (it wrapped to negative times). Topics whose Python message package is not installed are
skipped with a warning naming the topic and type. Messages of types the bag stores no definition for (a Humble
sqlite3 bag, a type newer than the bag's distribution) are replayed too: only the installed Python class is needed
to publish the bytes, which subscribers deserialize as that type.

As a node (`replay_node`, console script; what launch/replay.launch.yaml starts): the same replay, configured
by the ROS parameters of `ReplayConfig` (bag, rate, loop, ...); topics are renamed with ordinary ROS remapping
(`--ros-args -r /odom:=/robot/odom`, a launch file's `remap:`). The bag's topics are published under the node's
namespace (/odom as /robot1/odom under `-r __ns:=/robot1`, `memnav replay --namespace robot1` or
replay.launch.yaml's `namespace:=robot1`), /clock always at the root. It exits when the bag has been played (never
with `loop`); a bag that cannot be read, like any bad parameter, is one line and status 2
(`stack_node.CONFIG_ERROR_EXIT`), which memnav's launcher never respawns.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memnav.cli import config_from_options
from memnav.core.namespaces import absolute_namespace, resolve_name
from memnav.eval.bag_io import BagFile

# Largest --rate: a day of recording in under 9 s. /clock's seconds are int32 (until 2038 for wall-clock bags): at
# 10_000 even a stalled second between two ticks moves it by under 3 hours, where 1e12 moved it by centuries.
MAX_RATE = 10_000.0


@dataclass
class ReplayConfig:
    """One replay (also the ROS parameters of `replay_node`).

    Attributes:
        bag: rosbag2 folder, or a single .mcap or .db3 file (only read).
        rate: playback speed (2 = twice as fast as recorded), at most MAX_RATE.
        loop: start over after the last message.
        clock: publish /clock with the bag's log time.
        clock_hz: rate of /clock messages and of the publishing timer, Hz.
        delay_s: wait this long (after the wait for subscribers) before the first message, seconds.
        topics: replay only these topics, separated by spaces ("" = all).
        wait_for: topics, separated by spaces, that must have a subscriber before the first message.
        wait_timeout_s: give up waiting for those subscribers after this long and start anyway, seconds.
    """

    bag: str = ""
    rate: float = 1.0
    loop: bool = False
    clock: bool = True
    clock_hz: float = 100.0
    delay_s: float = 1.0
    topics: str = ""
    wait_for: str = ""
    wait_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.bag:
            raise ValueError("ReplayConfig.bag must name a bag")
        for name in ("rate", "clock_hz"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"ReplayConfig.{name} must be a finite number > 0, got {value!r}")
        if self.rate > MAX_RATE:
            raise ValueError(f"ReplayConfig.rate must be at most {MAX_RATE:g} (times as fast as recorded), got "
                             f"{self.rate!r}: /clock's int32 seconds would overflow between two ticks")
        for name in ("delay_s", "wait_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"ReplayConfig.{name} must be a finite number of seconds >= 0, got {value!r}")

    @property
    def topic_list(self) -> list[str]:
        return self.topics.split()

    @property
    def wait_for_list(self) -> list[str]:
        return self.wait_for.split()


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
    d = ReplayConfig(bag="-")
    parser.add_argument("bag", type=Path, metavar="BAG", help="rosbag2 folder, or a single .mcap or .db3 file")
    parser.add_argument("--rate", type=float, default=d.rate, metavar="R", help="playback speed (2 = twice as fast)")
    parser.add_argument("--loop", action="store_true", help="start over after the last message")
    parser.add_argument("--remap", action="append", default=[], metavar="FROM:=TO",
                        help="publish topic FROM under the name TO (repeatable)")
    parser.add_argument("--topics", nargs="+", default=None, metavar="TOPIC", help="replay only these topics")
    parser.add_argument("--clock-hz", type=float, default=d.clock_hz, metavar="HZ",
                        help="rate of /clock messages and of the publishing timer, Hz")
    parser.add_argument("--no-clock", action="store_true", help="do not publish /clock")
    parser.add_argument("--delay", type=float, default=d.delay_s, metavar="S",
                        help="wait this long after creating the publishers (and after --wait-for) before the "
                             "first message, seconds")
    parser.add_argument("--wait-for", nargs="+", default=[], metavar="TOPIC",
                        help="before the first message, wait until each of these bag topics has a subscriber")
    parser.add_argument("--wait-timeout", type=float, default=d.wait_timeout_s, metavar="S",
                        help="start anyway after waiting this long for --wait-for subscribers, seconds")
    parser.add_argument("--namespace", default="", metavar="NS",
                        help="publish the bag's topics under /NS (/NS/odom, ...; --remap targets as given, /clock "
                             "at the root): for a stack launched with namespace:=NS")
    parser.add_argument("--ros-args", nargs=argparse.REMAINDER, default=[], dest="ros_args",
                        help="everything after this goes to ROS (e.g. -r __node:=NAME)")


def publisher_qos(profiles: tuple) -> Any:
    """rclpy QoSProfile from a bag topic's offered QoS (rosbags Qos tuples, one per recorded publisher; reliable +
    volatile, depth 10 if none).

    Publishers that offered different QoS (a topic written by several nodes) get one profile that every subscriber
    of theirs can take: reliable if any was reliable (a reliable offer reaches reliable and best-effort
    subscribers); transient local only if all were (a subscriber that joins later gets old messages only where
    every recorded publisher latched them; a transient-local offer matches volatile subscribers too, so nothing is
    lost by volatile); depth the largest offered. `ros2 bag play` instead falls back to reliable, volatile, depth
    10 for any mix; the two agree except on a best-effort-only mix.
    """
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    reliable, latched, depth = True, False, 10
    if profiles:
        reliable = any(q.reliability.name != "BEST_EFFORT" for q in profiles)
        latched = all(q.durability.name == "TRANSIENT_LOCAL" for q in profiles)
        depths = [int(q.depth) for q in profiles if q.depth and q.depth > 0]
        depth = max(depths) if depths else (1 if latched else 10)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def open_bag(cfg: ReplayConfig) -> tuple[BagFile, list[str]]:
    """The bag and the topics to replay (validated before anything touches ROS).

    Raises:
        FileNotFoundError: no such bag.
        BagError: not a readable bag.
        ValueError: a `topics` or `wait_for` topic is not in the bag (naming it and listing the bag's).
    """
    path = Path(cfg.bag)
    if not path.exists():
        raise FileNotFoundError(f"bag {path} does not exist")
    bag = BagFile(path)
    topics = bag.topics
    selected = cfg.topic_list or sorted(topics)
    missing = [t for t in selected + cfg.wait_for_list if t not in topics]
    if missing:
        bag.close()
        raise ValueError(f"{path}: topics {missing} are not in the bag; it has {sorted(topics)}")
    return bag, selected


def published_name(topic: str, remaps: dict[str, str]) -> str:
    """The name a bag topic is published under: its --remap target as given, else the bag's name made relative, so
    that the node's namespace applies (the same name in the root namespace)."""
    return remaps.get(topic, topic.lstrip("/"))


def replay(node: Any, bag: BagFile, selected: list[str], cfg: ReplayConfig, remaps: dict[str, str]) -> Counter:
    """Play `selected` topics of `bag` on `node` until the end (forever with cfg.loop) or shutdown.

    Returns:
        Messages published per (bag) topic, also when Ctrl-C or a shutdown ends the replay.

    Raises:
        ValueError: none of the topics can be published (no Python message package for any of them).
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    from memnav.ros.embedding_msgs import ns_to_stamp
    from memnav.ros.record_command import message_class
    from memnav.ros.stack_node import shut_down

    log = node.get_logger()
    topics = bag.topics
    pubs: dict[str, Any] = {}
    for topic in selected:
        try:
            cls = message_class(topics[topic].msgtype)
        except ImportError as err:
            log.warning(f"not replaying {topic}: {err}")
            continue
        pubs[topic] = node.create_publisher(cls, published_name(topic, remaps), publisher_qos(topics[topic].qos))
    if not pubs:
        raise ValueError(f"{bag.path}: none of the topics {selected} can be published")
    clock_pub = None if not cfg.clock else node.create_publisher(
        Clock, "/clock", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
    wait_for = [t for t in cfg.wait_for_list if t in pubs]

    published: Counter = Counter()
    st: dict[str, Any] = {"it": None, "next": None, "t0_bag": None, "t0_wall": None, "done": False,
                          "phase": "wait", "since": time.monotonic()}

    def restart() -> None:
        st["it"] = bag.messages(list(pubs), decode=False, undefined_types=True)
        st["next"] = next(st["it"], None)
        st["t0_wall"] = None

    def ready(now: float) -> bool:
        """Waiting for subscribers, then the delay; True once playing."""
        if st["phase"] == "wait":
            lonely = [t for t in wait_for if pubs[t].get_subscription_count() == 0]
            if lonely and now - st["since"] < cfg.wait_timeout_s:
                return False
            if lonely:
                log.warning(f"no subscriber of {lonely} after {cfg.wait_timeout_s:g} s; starting anyway")
            st["phase"], st["since"] = "delay", now
        if st["phase"] == "delay":
            if now - st["since"] < cfg.delay_s:
                return False
            st["phase"] = "play"
            log.info(f"playing {bag.path}: {len(pubs)} topics at {cfg.rate}x{' in a loop' if cfg.loop else ''}")
        return True

    def tick() -> None:
        now = time.monotonic()
        if st["done"] or not ready(now):
            return
        if st["next"] is None:
            if not cfg.loop or not published:
                st["done"] = True
                return
            restart()
            if st["next"] is None:
                st["done"] = True
                return
        if st["t0_wall"] is None:
            st["t0_wall"], st["t0_bag"] = now, st["next"].log_time_ns
        bag_now = st["t0_bag"] + int((now - st["t0_wall"]) * cfg.rate * 1e9)
        if clock_pub is not None:
            c = Clock()
            c.clock = ns_to_stamp(bag_now)
            clock_pub.publish(c)
        while st["next"] is not None and st["next"].log_time_ns <= bag_now:
            m = st["next"]
            pubs[m.topic].publish(m.raw)
            published[m.topic] += 1
            st["next"] = next(st["it"], None)

    restart()
    node.create_timer(1.0 / cfg.clock_hz, tick)
    try:
        while rclpy.ok() and not st["done"]:
            rclpy.spin_once(node, timeout_sec=0.05)
    except (KeyboardInterrupt, ExternalShutdownException):
        return published    # Ctrl-C or shutdown (the only end of a loop): what was published until then
    except Exception:
        if not shut_down():
            raise
        return published
    # let reliable readers fetch the last messages before the publishers go away
    end = time.monotonic() + 0.5
    while rclpy.ok() and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    return published


def _summary(bag: BagFile, published: Counter, remaps: dict[str, str], namespace: str) -> str:
    """The line printed at the end: messages per topic under the name they were published as."""
    skipped = {k: v for k, v in bag.counts.to_json().items() if v and k not in ("read",)}
    names = {t: published_name(t, remaps) for t in published}
    names = {t: resolve_name(n, namespace) for t, n in names.items()}
    return (f"published {sum(published.values())} messages "
            f"({', '.join(f'{names[t]}: {n}' for t, n in sorted(published.items()))})"
            + (f"; skipped {skipped}" if skipped else ""))


def _finish(node: Any, bag: BagFile) -> None:
    import rclpy

    bag.close()
    node.destroy_node()
    if rclpy.ok():
        rclpy.shutdown()


# ReplayConfig field -> the `memnav replay` option that sets it
OPTIONS = {"bag": "BAG", "rate": "--rate", "clock_hz": "--clock-hz", "delay_s": "--delay",
           "topics": "--topics", "wait_for": "--wait-for", "wait_timeout_s": "--wait-timeout"}


def config_from_args(args: argparse.Namespace) -> ReplayConfig:
    """The replay the command line asks for.

    Raises:
        ValueError: a bad value, naming the option as typed (e.g. "--rate must be ...").
    """
    return config_from_options(ReplayConfig, OPTIONS, bag=str(args.bag), rate=args.rate, loop=args.loop,
                               clock=not args.no_clock, clock_hz=args.clock_hz, delay_s=args.delay,
                               topics=" ".join(args.topics or []), wait_for=" ".join(args.wait_for),
                               wait_timeout_s=args.wait_timeout)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    remaps = parse_remaps(args.remap)
    namespace = absolute_namespace(args.namespace) if args.namespace else ""   # before any ROS work
    bag, selected = open_bag(cfg)
    for w in bag.warnings:
        print(f"memnav replay: {w}", file=sys.stderr)

    import rclpy
    from rclpy.executors import ExternalShutdownException

    ros_args = (["-r", f"__ns:={namespace}"] if namespace else []) + list(args.ros_args)
    rclpy.init(args=["memnav_replay", "--ros-args", *ros_args] if ros_args else ["memnav_replay"])
    node = rclpy.create_node("memnav_replay")
    published: Counter = Counter()
    try:
        published = replay(node, bag, selected, cfg, remaps)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        _finish(node, bag)
    print(_summary(bag, published, remaps, namespace))
    return 0


def main_node(argv: list[str] | None = None) -> int:
    """`replay_node`: the replay as a ROS node configured by parameters (see the module docstring)."""
    from rclpy.executors import ExternalShutdownException

    from memnav.eval.bag_io import BagError
    from memnav.ros.params import declare_dataclass
    from memnav.ros.stack_node import start_nodes

    # a bad parameter or bag: one line, never worth a restart
    started = start_nodes("memnav_replay", [("memnav_replay", lambda node: declare_dataclass(node, ReplayConfig))],
                          list(argv if argv is not None else sys.argv), errors=(BagError,),
                          then=lambda configs: open_bag(configs[0]))
    if isinstance(started, int):
        return started
    [(node, cfg)], (bag, selected) = started
    log = node.get_logger()
    for w in bag.warnings:
        log.warning(w)
    namespace = node.get_namespace()
    published: Counter = Counter()
    status = 0
    try:
        published = replay(node, bag, selected, cfg, {})
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except ValueError as err:   # no topic can be published
        log.error(str(err))
        status = 1
    finally:
        _finish(node, bag)
    print(_summary(bag, published, {}, namespace), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main_node())
