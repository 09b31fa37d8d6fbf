"""Probe: does a policy node exit when sent SIGTERM, wherever it is (starting, driving), and how fast?

Each run starts a simulator bridge and a policy node in lock-step (namespace /robot1, the test episodes of
data/houses, a ROS_DOMAIN_ID of its own, discovery on this machine only), waits a random time in [--min-s,
--max-s], sends SIGTERM to the policy node (and to the bridge too with --both), and prints how long the node took
to exit and its exit status. A node still running 20 s later is sent SIGABRT, so that its log (under
--logs/runN/policy.log) ends with every thread's Python stack (the nodes run with `-X faulthandler`).

Run from the repository root: `.venv/bin/python scripts/probe_sigterm.py [--runs 12] [--min-s 0.5] [--max-s 40]
[--both] [--seed 0]` (about 30 s a run). Not a feature: the README's launch paragraph reports what it printed.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memnav.procs import stop_processes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--min-s", type=float, default=0.5, help="earliest SIGTERM after the start, seconds")
    parser.add_argument("--max-s", type=float, default=40.0, help="latest SIGTERM after the start, seconds")
    parser.add_argument("--both", action="store_true", help="SIGTERM the bridge at the same moment")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logs", type=Path, default=None, help="folder for the logs (default: a new temporary one)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="sigterm_probe_"))
    env = dict(os.environ, ROS_DOMAIN_ID=str(180 + os.getpid() % 20), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    common = ["--ros-args", "-r", "__ns:=/robot1", "-p", "lockstep:=true"]
    python = [sys.executable, "-X", "faulthandler", "-m"]
    print(f"logs in {logs}", flush=True)
    for run in range(args.runs):
        folder = logs / f"run{run}"
        folder.mkdir(parents=True, exist_ok=True)
        bridge = subprocess.Popen(python + ["memnav.ros.sim_bridge_node", *common, "-p", "data:=data/houses",
                                           "-p", "split:=test", "-r", "memnav/goal_image:=sim/goal_image",
                                           "-r", "memnav/goal_depth:=sim/goal_depth"],
                                  stdout=(folder / "bridge.log").open("w"), stderr=subprocess.STDOUT, env=env)
        policy = subprocess.Popen(python + ["memnav.ros.policy_node", *common],
                                  stdout=(folder / "policy.log").open("w"), stderr=subprocess.STDOUT, env=env)
        wait_s = rng.uniform(args.min_s, args.max_s)
        time.sleep(wait_s)
        start = time.monotonic()
        policy.send_signal(signal.SIGTERM)
        if args.both:
            bridge.send_signal(signal.SIGTERM)
        try:
            status = policy.wait(timeout=20.0)
            result = f"exited, status {status}, in {time.monotonic() - start:.2f} s"
        except subprocess.TimeoutExpired:
            policy.send_signal(signal.SIGABRT)
            try:
                policy.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                policy.kill()
            result = f"STILL RUNNING 20 s later (stacks at the end of {folder / 'policy.log'})"
        stop_processes([bridge], timeout_s=20.0)
        print(f"run {run}: SIGTERM {wait_s:.1f} s after the start: {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
