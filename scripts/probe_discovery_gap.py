"""Probe: how long after one node of a running stack does a freshly started process discover the next one?

`memnav status` lists the nodes its own DDS participant has discovered; a node it has not discovered yet is
reported as not running. This starts a simulator bridge and a policy node in lock-step (namespace /robot1, the
first test episode of data/houses, a ROS_DOMAIN_ID of its own, discovery on this machine only), waits 15 s, then
starts RUNS fresh processes one after another, each set up as `memnav status` sets itself up (the Fast DDS large-image
profile, unless --no-profile), and prints, per process, when each of the two nodes first appeared in its graph
(seconds after rclpy.init) and the gap between them; then the gaps sorted.

Run from the repository root: `.venv/bin/python scripts/probe_discovery_gap.py [--runs 30] [--no-profile]`
(about 5 s a run). Not a feature: the README's `memnav status` paragraph reports what it printed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memnav.procs import stop_processes

NODES = ("policy_node", "sim_bridge_node")


def discover(profile: bool) -> None:
    """The child: print {node: seconds after rclpy.init it first appeared in /robot1} as JSON."""
    if profile:
        from memnav.ros.launcher import use_large_image_transports

        use_large_image_transports()
    import rclpy

    start = time.monotonic()
    rclpy.init()
    node = rclpy.create_node("discovery_probe", namespace="/robot1")
    first: dict[str, float] = {}
    end = start + 12.0
    while time.monotonic() < end and len(first) < len(NODES):
        rclpy.spin_once(node, timeout_sec=0.02)
        for name, namespace in node.get_node_names_and_namespaces():
            if namespace == "/robot1" and name in NODES:
                first.setdefault(name, round(time.monotonic() - start, 2))
    print(json.dumps(first), flush=True)
    node.destroy_node()
    rclpy.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-profile", action="store_true",
                        help="the probing processes leave FASTDDS_DEFAULT_PROFILES_FILE unset")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        discover(not args.no_profile)
        return 0
    env = dict(os.environ, ROS_DOMAIN_ID=str(200 + os.getpid() % 30), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    common = ["--ros-args", "-r", "__ns:=/robot1", "-p", "lockstep:=true"]
    logs = Path(tempfile.mkdtemp(prefix="discovery_probe_"))
    procs = [subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", *common, "-p", "data:=data/houses",
                               "-p", "split:=test", "-r", "memnav/goal_image:=sim/goal_image",
                               "-r", "memnav/goal_depth:=sim/goal_depth"],
                              stdout=(logs / "bridge.log").open("w"), stderr=subprocess.STDOUT, env=env),
             subprocess.Popen([sys.executable, "-m", "memnav.ros.policy_node", *common],
                              stdout=(logs / "policy.log").open("w"), stderr=subprocess.STDOUT, env=env)]
    gaps, missed = [], 0
    try:
        time.sleep(15.0)
        child = [sys.executable, __file__, "--child"] + (["--no-profile"] if args.no_profile else [])
        for run in range(args.runs):
            out = subprocess.run(child, env=env, capture_output=True, text=True, timeout=60)
            first = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
            if len(first) == len(NODES):
                gaps.append(round(abs(first[NODES[0]] - first[NODES[1]]), 2))
            else:
                missed += 1
            print(run, first, flush=True)
    finally:
        stop_processes(procs, timeout_s=20.0)
    print("gaps (s), sorted:", sorted(gaps), "| runs missing a node after 12 s:", missed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
