"""`memnav topic list|info|hz|echo`: look at the live ROS graph from a shell, where pip-installed ROS 2 has no
`ros2 topic`. Works with any topic whose message package is installed (`echo`; `hz` and `list`/`info` need none).

    list            every topic with its type and its publisher and subscriber counts
    info TOPIC      its type, and each publisher and subscriber: node, reliability, durability, history depth
                    (the usual reason a subscriber hears nothing is a QoS mismatch: a reliable subscriber of a
                    best-effort publisher, a transient-local one of a volatile publisher; info says so)
    hz TOPIC        message rate over --window seconds, the period's min/max/std and the bandwidth, from the
                    serialized messages (nothing is deserialized: a 30 Hz colour stream costs almost nothing)
    echo TOPIC      each message as YAML (arrays longer than --max-array shown as their length and first
                    values); --count N stops after N, --field a.b prints one field

TOPIC is resolved as the stack's commands resolve topics: relative names under --namespace. `hz` and `echo`
subscribe with QoS matching every publisher (reliable only when all are, transient local when all are), as
`memnav record` does; a topic published with several message types is heard in the type most publishers use,
with a warning naming the others. `echo` ends quietly when its reader does (`| head`); Ctrl-C during `hz`
still prints the rate measured until then. Exit status 0; 1 when no message came within --timeout (`hz`,
`echo`) or the topic is not in the graph (`info`); 2 for a bad option or a type whose package is not installed;
130 at Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from memnav.ros.shell_node import Ros, add_actions, add_exit_statuses, add_ros_args, check_seconds, shell_ros_args

NO_MESSAGE_EXIT = 1
INTERRUPTED_EXIT = 130   # as memnav's commands end at Ctrl-C


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parsers = add_actions(parser, {
        "list": "every topic with its type and how many publish and subscribe it",
        "info": "a topic's type, publishers and subscribers with their QoS (and any mismatch between them)",
        "hz": "a topic's message rate, period spread and bandwidth",
        "echo": "print a topic's messages as YAML"})
    for action, p in parsers.items():
        if action != "list":
            p.add_argument("topic", metavar="TOPIC", help="the topic (relative names resolve under --namespace)")
    parsers["list"].add_argument("--wait", type=float, default=2.0, metavar="S",
                                 help="listen this long for discovery before listing, seconds")
    parsers["info"].add_argument("--wait", type=float, default=3.0, metavar="S",
                                 help="listen this long for discovery before answering, seconds (a new participant "
                                      "learns the graph's endpoints one by one, over a second or two)")
    parsers["hz"].add_argument("--window", type=float, default=5.0, metavar="S",
                               help="measure over this many seconds after the first message")
    parsers["echo"].add_argument("--count", type=int, default=0, metavar="N",
                                 help="stop after N messages (0 = until Ctrl-C)")
    parsers["echo"].add_argument("--field", default="", metavar="A.B",
                                 help="print only this field of each message (e.g. twist.twist.linear)")
    parsers["echo"].add_argument("--max-array", type=int, default=16, metavar="N",
                                 help="show arrays longer than N as their length and first values (0 = all)")
    for action in ("hz", "echo"):
        parsers[action].add_argument("--timeout", type=float, default=10.0, metavar="S",
                                     help="give up when no message has come within this many seconds")
    for action in ("list", "info", "hz"):
        parsers[action].add_argument("--json", type=Path, default=None, metavar="PATH",
                                     help="also write the result to this JSON file")
    for p in parsers.values():
        add_ros_args(p)
    add_exit_statuses("0 done; 1 no message within --timeout (hz, echo: a topic nobody publishes) or the topic not in "
                      "the graph (info); 2 a bad option or a message type whose package is not installed; 130 "
                      "Ctrl-C (the way to end `echo` without --count)", parser, *parsers.values())


def run(args: argparse.Namespace) -> int:
    for option in ("wait", "window", "timeout"):
        if hasattr(args, option):
            check_seconds(getattr(args, option), f"--{option}", zero_ok=option == "wait")
    if getattr(args, "count", 0) < 0 or getattr(args, "max_array", 0) < 0:
        raise ValueError("--count and --max-array must be >= 0")
    ros_args = shell_ros_args(args)
    ros = Ros("memnav_topic", ros_args)
    try:
        if args.action != "list":
            ros.resolve_topics(args, "topic")
        result, status = {"list": _list, "info": _info, "hz": _hz, "echo": _echo}[args.action](ros, args)
    finally:
        ros.close()
    if getattr(args, "json", None) is not None and result is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return status


def _listen(ros: Ros, seconds: float) -> None:
    """Spin `seconds` (discovery goes on meanwhile)."""
    if seconds > 0:
        ros.spin_until(lambda: False, seconds)


def _list(ros: Ros, args: argparse.Namespace) -> tuple[dict, int]:
    _listen(ros, args.wait)
    node = ros.node
    topics = {}
    for name, types in sorted(node.get_topic_names_and_types()):
        topics[name] = {"types": list(types), "publishers": node.count_publishers(name),
                        "subscribers": node.count_subscribers(name)}
        print(f"{name}  [{', '.join(types)}]  {topics[name]['publishers']} pub, {topics[name]['subscribers']} sub")
    if not topics:
        print("no topics (is anything running on this ROS_DOMAIN_ID?)", file=sys.stderr)
    return {"topics": topics}, 0


def endpoint(info: Any) -> dict:
    """One publisher's or subscriber's node and QoS, from rclpy's TopicEndpointInfo."""
    from rclpy.qos import HistoryPolicy

    qos = info.qos_profile
    # DDS discovery does not carry another process's history: it comes as UNKNOWN with depth 0 (None here)
    depth = int(qos.depth) if qos.history == HistoryPolicy.KEEP_LAST else None
    return {"node": f"{info.node_namespace.rstrip('/')}/{info.node_name}", "type": info.topic_type,
            "reliability": qos.reliability.name.lower(), "durability": qos.durability.name.lower(),
            "history_depth": depth}


def qos_mismatches(publishers: list[dict], subscribers: list[dict]) -> list[str]:
    """Pairs that DDS will not connect: a reliable subscriber asks more than a best-effort publisher offers, a
    transient-local subscriber more than a volatile publisher. One line each."""
    out = []
    for sub in subscribers:
        for pub in publishers:
            if sub["reliability"] == "reliable" and pub["reliability"] == "best_effort":
                out.append(f"{sub['node']} subscribes reliable but {pub['node']} publishes best effort: it gets "
                           "nothing from it")
            if sub["durability"] == "transient_local" and pub["durability"] == "volatile":
                out.append(f"{sub['node']} subscribes transient local but {pub['node']} publishes volatile: it gets "
                           "nothing from it")
    return out


def _info(ros: Ros, args: argparse.Namespace) -> tuple[dict | None, int]:
    _listen(ros, args.wait)
    node = ros.node
    types = dict(node.get_topic_names_and_types()).get(args.topic)
    if types is None:
        print(f"memnav topic: {args.topic} is not in the graph (`memnav topic list` lists what is)", file=sys.stderr)
        return None, NO_MESSAGE_EXIT
    pubs = [endpoint(i) for i in node.get_publishers_info_by_topic(args.topic)]
    subs = [endpoint(i) for i in node.get_subscriptions_info_by_topic(args.topic)
            if i.node_name != node.get_name()]
    problems = qos_mismatches(pubs, subs)
    print(f"{args.topic}  [{', '.join(types)}]")
    for what, ends in (("publishers", pubs), ("subscribers", subs)):
        print(f"{what}: {len(ends)}")
        for e in ends:
            depth = "history unknown" if e["history_depth"] is None else f"depth {e['history_depth']}"
            print(f"  {e['node']}  {e['reliability']}, {e['durability']}, {depth}")
    for line in problems:
        print(f"QoS mismatch: {line}")
    return {"topic": args.topic, "types": list(types), "publishers": pubs, "subscribers": subs,
            "qos_mismatches": problems}, 0


def _subscribe(ros: Ros, topic: str, callback, raw: bool, deadline: float) -> str | None:
    """Subscribe `topic` with QoS matching its publishers once one is in the graph: the message type subscribed
    (`heard_type`); None when no publisher came before `deadline` (time.monotonic())."""
    from memnav.ros.record_command import message_class, subscription_qos

    node = ros.node

    def publishers():
        return node.get_publishers_info_by_topic(topic)

    if not ros.spin_until(lambda: bool(publishers()), max(deadline - time.monotonic(), 1e-3)):
        return None
    infos = publishers()
    msgtype = heard_type([i.topic_type for i in infos])
    infos = [i for i in infos if i.topic_type == msgtype]
    qos = subscription_qos(infos)[0]
    node.create_subscription(message_class(msgtype), topic, callback, qos, raw=raw)
    return msgtype


def heard_type(publisher_types: list[str]) -> str:
    """The message type to subscribe a topic with, given its publishers' types: the one most of them publish (a
    subscription hears one type only; the first by name among equals)."""
    counts = {t: publisher_types.count(t) for t in sorted(set(publisher_types))}
    return max(counts, key=lambda t: counts[t])


def unheard_types(ros: Ros, topic: str, heard: str) -> str | None:
    """A warning naming the publishers of `topic` whose message type is not `heard` (the subscribed type), or None
    when every publisher in the graph publishes that type."""
    types = [i.topic_type for i in ros.node.get_publishers_info_by_topic(topic)]
    others = {t: types.count(t) for t in sorted(set(types) - {heard})}
    if not others:
        return None
    return (f"memnav topic: {topic} is published with {len(others) + 1} message types: only its "
            f"{types.count(heard)} publisher(s) of {heard} are heard, not those of "
            + ", ".join(f"{t} ({n})" for t, n in others.items()))


def rate_summary(arrivals: list[float], sizes: list[int]) -> dict:
    """Rate and period spread of messages that arrived at `arrivals` (seconds, increasing) with serialized sizes
    `sizes` (bytes)."""
    n = len(arrivals)
    periods = [b - a for a, b in zip(arrivals, arrivals[1:])]
    span = arrivals[-1] - arrivals[0] if n > 1 else 0.0
    mean = sum(periods) / len(periods) if periods else math.nan
    std = math.sqrt(sum((p - mean) ** 2 for p in periods) / len(periods)) if periods else math.nan
    return {"messages": n, "rate_hz": (n - 1) / span if span > 0 else None,
            "period_min_s": min(periods) if periods else None, "period_max_s": max(periods) if periods else None,
            "period_std_s": std if periods else None, "mean_bytes": sum(sizes) / n if n else None,
            "bandwidth_bytes_per_s": sum(sizes[1:]) / span if span > 0 else None}


def _hz(ros: Ros, args: argparse.Namespace) -> tuple[dict | None, int]:
    arrivals: list[float] = []
    sizes: list[int] = []

    def on_msg(data: bytes) -> None:
        arrivals.append(time.monotonic())
        sizes.append(len(data))

    deadline = time.monotonic() + args.timeout
    heard = _subscribe(ros, args.topic, on_msg, True, deadline)
    if heard is None or not ros.spin_until(lambda: bool(arrivals), max(deadline - time.monotonic(), 1e-3)):
        print(f"memnav topic hz: no message on {args.topic} within {args.timeout:g} s", file=sys.stderr)
        return None, NO_MESSAGE_EXIT
    window_s, status = args.window, 0
    print(f"measuring {args.topic} ({heard}) for {window_s:g} s ...", file=sys.stderr, flush=True)
    end = arrivals[0] + window_s
    try:
        ros.spin_until(lambda: time.monotonic() >= end, window_s + 1.0)
    except KeyboardInterrupt:   # what was measured until then is still the answer
        window_s, status = round(time.monotonic() - arrivals[0], 3), INTERRUPTED_EXIT
        print(f"\nCtrl-C: measured over {window_s:g} s", file=sys.stderr)
    # checked after the window: a new participant learns the publishers one by one
    warning = unheard_types(ros, args.topic, heard)
    if warning:
        print(warning, file=sys.stderr)
    summary = {"topic": args.topic, "type": heard, "window_s": window_s, **rate_summary(arrivals, sizes)}
    rate = summary["rate_hz"]
    if rate is None:
        print(f"{args.topic}: 1 message in {window_s:g} s")
    else:
        print(f"{args.topic}: {rate:.2f} Hz over {summary['messages']} messages; period min "
              f"{summary['period_min_s'] * 1000:.1f} ms, max {summary['period_max_s'] * 1000:.1f} ms, std "
              f"{summary['period_std_s'] * 1000:.1f} ms; {summary['mean_bytes'] / 1024:.1f} KiB each, "
              f"{summary['bandwidth_bytes_per_s'] / 2 ** 20:.2f} MiB/s")
    return summary, status


def to_plain(msg: Any, max_array: int) -> Any:
    """A ROS message as plain Python (dicts in field order, lists, numbers, strings) for YAML; an array longer than
    `max_array` (> 0) becomes "<N values: a, b, c, ...>"."""
    if hasattr(msg, "get_fields_and_field_types"):
        return {name: to_plain(getattr(msg, name), max_array) for name in msg.get_fields_and_field_types()}
    if isinstance(msg, (bytes, bytearray)) and len(msg) == 1:
        return msg[0]   # a single byte field (e.g. a diagnostic level)
    if isinstance(msg, (str, bool, int, float)) or msg is None:
        return msg
    try:
        values = list(msg)
    except TypeError:
        return str(msg)
    if max_array and len(values) > max_array:
        head = ", ".join(str(to_plain(v, max_array)) for v in values[:3])
        return f"<{len(values)} values: {head}, ...>"
    return [to_plain(v, max_array) for v in values]


def field_of(plain: Any, path: str) -> Any:
    """The field `a.b.c` of a message made plain by to_plain. Raises ValueError naming the part not found."""
    at = plain
    for part in [p for p in path.split(".") if p]:
        if not isinstance(at, dict) or part not in at:
            raise ValueError(f"--field {path}: no field {part!r} (fields here: "
                             f"{', '.join(at) if isinstance(at, dict) else 'none'})")
        at = at[part]
    return at


def _echo(ros: Ros, args: argparse.Namespace) -> tuple[None, int]:
    import yaml

    seen = {"n": 0, "error": None, "closed": False}

    def on_msg(msg: Any) -> None:
        if args.count and seen["n"] >= args.count or seen["error"] or seen["closed"]:
            return
        plain = to_plain(msg, args.max_array)
        try:
            if args.field:
                plain = field_of(plain, args.field)
        except ValueError as err:
            seen["error"] = err
            return
        seen["n"] += 1
        try:
            sys.stdout.write(yaml.safe_dump(plain, sort_keys=False, default_flow_style=False, width=100) + "---\n")
            sys.stdout.flush()
        except BrokenPipeError:   # the reader went away (`| head -n 20`): done, as a shell tool ends there
            seen["closed"] = True
            # Python would flush stdout again at exit, and fail again: let it write to nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    deadline = time.monotonic() + args.timeout
    heard = _subscribe(ros, args.topic, on_msg, False, deadline)
    if heard is None or not ros.spin_until(lambda: seen["n"] > 0 or seen["error"] is not None,
                                           max(deadline - time.monotonic(), 1e-3)):
        print(f"memnav topic echo: no message on {args.topic} within {args.timeout:g} s", file=sys.stderr)
        return None, NO_MESSAGE_EXIT
    warning = unheard_types(ros, args.topic, heard)
    if warning:
        print(warning, file=sys.stderr)
    ros.spin_until(lambda: bool(args.count) and seen["n"] >= args.count or seen["error"] is not None
                   or seen["closed"], 0)
    if seen["error"] is not None:
        raise seen["error"]
    return None, 0
