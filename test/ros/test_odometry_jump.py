"""A policy node whose odometry jumps in the middle of a goal (as when a robot's base driver restarts at zero)
relocalises and goes on with the goal, as real processes over DDS: the simulator bridge in real time stands in
for the robot, and a relay between its /odom and the policy node adds 2 m to x from the moment the test says so.
"""
import json
import re
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import (  # noqa: E402
    far_goal_photo,
    isolated_ros_env,
    run_memnav,
    start_sim_robot,
    stop_processes,
)

RELAY = """
import sys
from pathlib import Path

import rclpy
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy

trigger = Path(sys.argv[1])
rclpy.init()
node = rclpy.create_node("odom_relay")
pub = node.create_publisher(Odometry, "/odom_relay", 50)
jumped = [False]


def relay(msg):
    if not jumped[0] and trigger.exists():
        jumped[0] = True
        print("jumped", flush=True)
    if jumped[0]:
        msg.pose.pose.position.x += 2.0
    pub.publish(msg)


node.create_subscription(Odometry, "/odom", relay, QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
try:
    rclpy.spin(node)
except KeyboardInterrupt:
    pass
"""


def _actions(status: dict) -> int | None:
    """The policy node's action count on the goal, from its /diagnostics message as `memnav status` heard it."""
    found = re.search(r"working on a goal: (\d+) actions", status["diagnostics"].get("policy_node", {}).get(
        "message", ""))
    return int(found.group(1)) if found else None


def _wait_for(check, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    return None


@pytest.mark.ros
@pytest.mark.slow
def test_an_odometry_jump_mid_goal_relocalises_the_policy_node_which_goes_on(tmp_path):
    data, goal, _ = far_goal_photo(tmp_path)   # meters from the start: the robot searches for a while
    env = isolated_ros_env(139)
    trigger = tmp_path / "jump_now"
    relay = subprocess.Popen([sys.executable, "-c", RELAY, str(trigger)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env)
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False, policy_args=[
        "-r", "odom:=/odom_relay", "-p", "odometry_jump_m:=0.5", "-p", "odometry_jump_deg:=45.0",
        "-p", "max_steps:=400"])
    log = tmp_path / "policy.log"

    def status() -> dict:
        run_memnav(["status", "--listen", "1", "--json", str(tmp_path / "status.json")], env, 60)
        return json.loads((tmp_path / "status.json").read_text())

    try:
        sent = run_memnav(["goal", "send", str(goal), "--no-progress"], env, 120)
        assert sent.returncode == 0, sent.stdout + sent.stderr + report()
        driving = _wait_for(lambda: (s := status())["goal_status"] and s["goal_status"]["status"] == "active"
                            and (_actions(s) or 0) >= 12 and s, 90)
        assert driving, report()
        assert "odometry jumped" not in log.read_text()   # 12 actions of motion (3 m, 360 deg at most): no jump
        trigger.touch()
        assert _wait_for(lambda: "odometry jumped" in log.read_text(), 30), report()
        text = log.read_text()
        moved = float(re.search(r"odometry jumped (\d+\.\d+) m", text).group(1))   # 2 m, give or take a step
        assert 1.7 < moved < 2.3, report()
        assert "relocalising, as ~/relocalise does; the goal's search starts over from here" in text, report()
        jumped_at = len(text)
        # the goal goes on: the same goal active, more actions (the policy node's /diagnostics counts them)
        before = _wait_for(lambda: _actions(status()), 30)
        assert before is not None, report()
        after = _wait_for(lambda: (s := status())["goal_status"]["status"] == "active"
                          and (_actions(s) or 0) >= before + 5 and s, 60)
        assert after and after["goal_status"]["goal_stamp_ns"] == driving["goal_status"]["goal_stamp_ns"], report()
        assert log.read_text()[jumped_at:].count("odometry jumped") == 0   # once: the new frame holds
    finally:
        stop_processes([*procs, relay])
