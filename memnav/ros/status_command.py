"""`memnav status`: what the running memnav stack is doing, in one look (there is no `ros2` CLI with pip-only ROS 2).

Waits up to 5 s for a policy node to appear in the graph (discovery), then listens for `--listen` seconds (2 by
default: the safety node reports every second), longer while nodes are still being discovered (until the node list
has not changed for 3.5 s, at most 6 s more), and prints which of the
stack's nodes run in the namespace, the goal (/memnav/goal_status: working on it, or how it ended), the last
decision (/memnav/policy_state), the safety node's state (/memnav/safety_status: e-stop, the velocity it
commands, how old its inputs are), the memory node's scene-graph counts (/memnav/scene_graph) and each node's
newest /diagnostics status (level and message). Status 0 when a
policy node runs in the namespace, 1 when none does (it then names the namespaces where one runs). `--json FILE`
writes the same as one object. `--watch S` keeps listening and prints the status again every S seconds until
Ctrl-C. Summarised by memnav.core.stack_status.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from memnav.core.files import json_safe, replace_files
from memnav.core.stack_status import GraphSettle, Heard, summarize
from memnav.ros.qos import events_qos, latched_qos
from memnav.ros.shell_node import Ros, add_exit_statuses, add_ros_args, check_seconds, shell_ros_args

DISCOVERY_S = 5.0   # wait up to this long for a policy node to show in the graph before listening
# After the listen window the node list must have stayed the same SETTLE_S seconds: a fresh process discovers the
# stack's nodes one DDS participant at a time, and Fast DDS re-announces a participant every 3 s, so one node can
# show up seconds after another (up to 3.2 s measured here: scripts/probe_discovery_gap.py). A 1 s settle left a
# node out of a status now and then.
SETTLE_S = 3.5
SETTLE_MAX_S = 6.0  # the settle is waited for at most this long past the window (a graph where nodes come and go)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", type=float, default=2.0, metavar="S",
                        help="listen this many seconds to the nodes' status topics (the safety node reports every "
                             f"second); longer while the node list still changes (until it is unchanged for "
                             f"{SETTLE_S:g} s, at most {SETTLE_MAX_S:g} s more)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the status as JSON (with --watch: replaced at every report)")
    parser.add_argument("--watch", type=float, default=0.0, metavar="S",
                        help="keep listening and print the status again every S seconds until Ctrl-C (0 = once); "
                             "the exit status is the last report's")
    add_ros_args(parser)
    add_exit_statuses(f"0 a policy node runs in the namespace; 1 none does (said after at most {DISCOVERY_S:g} s of "
                      f"discovery, --listen and {SETTLE_MAX_S:g} s of settling: about 10 s with nothing running); 2 "
                      "a bad option; 130 Ctrl-C (with --watch: once a report is out, Ctrl-C ends with the last "
                      "report's status)", parser)


def run(args: argparse.Namespace) -> int:
    check_seconds(args.listen, "--listen")
    check_seconds(args.watch, "--watch", zero_ok=True)
    ros_args = shell_ros_args(args)   # before any ROS work
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import String

    from memnav.core.diagnostics import DiagnosticLevel

    latched = latched_qos()
    ros = Ros("memnav_status", ros_args)
    got: dict = {}
    diagnosed: dict[str, tuple[str, str]] = {}

    def on_diagnostics(msg: DiagnosticArray) -> None:
        diagnosed.update((d.name, (DiagnosticLevel.name_of(d.level), d.message)) for d in msg.status)

    def keep(key: str, pick=lambda body: body):
        def callback(msg: String) -> None:
            try:
                got[key] = (time.monotonic(), pick(json.loads(msg.data)))
            except (ValueError, TypeError, KeyError, AttributeError):
                return
        return callback

    ok, reported = False, False
    try:
        node = ros.node
        node.create_subscription(String, "memnav/goal_status", keep("goal"), events_qos())   # the newest comes last
        node.create_subscription(String, "memnav/policy_state", keep("policy"), 10)
        node.create_subscription(String, "memnav/safety_status", keep("safety"), 10)
        node.create_subscription(String, "memnav/scene_graph",
                                 keep("graph", lambda b: {**b["counts"], "localised": b.get("localised")}), latched)
        node.create_subscription(DiagnosticArray, "diagnostics", on_diagnostics, 50)
        # discovery first (a second or more on a busy graph), then the window the status topics are heard in
        ros.spin_until(lambda: any(name == "policy_node" for name, _ in node.get_node_names_and_namespaces()),
                       DISCOVERY_S)
        listen_start = time.monotonic()
        graph = GraphSettle(listen_start + args.listen, SETTLE_S)
        ros.spin_until(lambda: graph.update(node.get_node_names_and_namespaces(), time.monotonic()),
                       args.listen + SETTLE_MAX_S)
        ok, reported = report(node, got, diagnosed, listen_start, args.json), True
        while args.watch > 0:
            start = time.monotonic()
            ros.spin_until(lambda: False, args.watch)
            print(f"\n--- {time.strftime('%H:%M:%S')}")
            ok = report(node, got, diagnosed, start, args.json)
    except KeyboardInterrupt:   # the end of --watch (before its first report: interrupted, as without --watch)
        if args.watch <= 0 or not reported:
            raise
    finally:
        ros.close()
    return 0 if ok else 1


def report(node, got: dict, diagnosed: dict, listen_start: float, json_path: Path | None) -> bool:
    """Print what was heard since the start (the newest of each topic) and write it to `json_path`; whether a
    policy node runs in the namespace."""
    end = time.monotonic()
    heard = Heard(namespace=node.get_namespace(), nodes=node.get_node_names_and_namespaces(),
                  now_s=node.get_clock().now().nanoseconds / 1e9, listened_s=round(end - listen_start, 1),
                  goal_status=got.get("goal", (0, None))[1], policy_state=got.get("policy", (0, None))[1],
                  policy_state_age_s=round(end - got["policy"][0], 2) if "policy" in got else None,
                  safety=got.get("safety", (0, None))[1], scene_graph=got.get("graph", (0, None))[1],
                  diagnostics=dict(diagnosed))
    lines, body, ok = summarize(heard)
    print("\n".join(lines), flush=True)
    if json_path is not None:
        # strict JSON: the nodes' own messages can carry NaN (Python's json writes it), which strict readers refuse
        replace_files({json_path: (json.dumps(json_safe(body), indent=2, allow_nan=False) + "\n").encode()})
    return ok
