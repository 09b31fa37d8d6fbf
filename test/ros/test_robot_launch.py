"""`memnav launch launch/robot.launch.yaml` against the simulator bridge standing in for a robot's drivers.

The bridge runs in real-time velocity mode (it integrates /cmd_vel every tick, like a base); a relay in this test
republishes its camera under the RealSense driver's topic names (colour rgb8, aligned depth 16UC1 in mm), so the
robot profile runs exactly as it would on a robot, with the shipped policy (models/policy_memnav.pt).

1. The goal: the robot starts 1.75 m straight behind the goal view; driven by velocity commands alone (through
   the robot profile: exploration, goal candidates, the stop rule) it calls STOP, and the bridge judges the
   episode a success (STOP within 1 m of the goal by ground truth), in at most 2 attempts of 180 s (the
   second restarts the episode: real-time runs depend on the machine's load).
2. Watchdog: right after the policy starts a moving action (its own command then lasts 1 s), the relay stops
   forwarding the camera; /cmd_vel must be zero within 0.5 s of the cut while the policy still commands motion,
   and the safety node must report the stale image, at an age between 0.5 s and 0.5 s plus one control period.
"""
import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import make_tiny_dataset, spin_until  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
COLOR = "/camera/camera/color/image_raw"
DEPTH = "/camera/camera/aligned_depth_to_color/image_raw"
WATCHDOG_S = 0.5            # guard.watchdog_s in config/robot.yaml
SAFETY_PERIOD_S = 1 / 50.0  # 1 / safety_node rate_hz in config/robot.yaml
GOAL_TIMEOUT_S = 180.0      # an attempt must have stopped at the goal by then (it looks around first), s
ATTEMPTS = 2                # real time on a shared machine: the episode may be restarted once
START_M = 1.75              # the robot starts this far behind the goal view, meters


def write_episode(data: Path) -> tuple[np.ndarray, float]:
    """An episode of `data`'s test split moved to start START_M straight behind its goal view, facing the same
    way (a short approach with nothing in the way), written as split "easy".

    Returns:
        The goal's (x, y) in the map frame (where /memnav/ground_truth_pose lives) and the start's distance to it.
    """
    from memnav.core.frames import habitat_to_map, heading_habitat, quat_xyzw_from_yaw
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.episodes import load_episodes, save_episodes

    sim = EmbeddedSimulator(config=SimConfig())
    for episode in load_episodes(data, "test"):
        sim.reset(episode)
        yaw = episode.goal_yaw_rad()
        goal = np.asarray(episode.goal.position, dtype=np.float64)
        start = goal - heading_habitat(yaw) * START_M
        if sim.is_navigable(start) and sim.geodesic_distance(start, goal) < START_M + 0.05:
            easy = dataclasses.replace(episode, episode_id=f"{episode.episode_id}_easy", start_position=start,
                                       start_rotation=quat_xyzw_from_yaw(yaw), geodesic_distance=None, info={})
            save_episodes(data / "episodes" / "easy.json.gz", [easy])
            return habitat_to_map(goal)[:2], START_M
    pytest.fail("no test episode of the tiny dataset has a free straight approach to its goal")


def test_robot_launch_reaches_goal_and_watchdog_stops(tmp_path, monkeypatch):
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    goal_xy, start_m = write_episode(data)
    domain = 40 + ((os.getpid() + 59) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    # robot.yaml keeps the safety node's emergency stop in ~/.ros: a home of the test's own, so that a stop
    # engaged on this machine by someone else cannot hold the robot still here, and this test leaves none
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    logs = {"bridge": tmp_path / "bridge.log", "launch": tmp_path / "launch.log"}
    # the stand-in robot: camera under /sim/* (relayed below), its episode judge on /sim/action
    bridge = subprocess.Popen(
        [sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args", "-p", f"data:={data}",
         "-p", "split:=easy", "-p", "lockstep:=false", "-p", "rate_hz:=10.0", "-p", "auto_next:=false",
         "-p", "sim.max_episode_steps:=100",
         "-r", "/camera/color/image_raw:=/sim/color", "-r", "/camera/depth/image_raw:=/sim/depth",
         "-r", "/camera/color/camera_info:=/camera/camera/color/camera_info", "-r", "/memnav/action:=/sim/action"],
        stdout=logs["bridge"].open("w"), stderr=subprocess.STDOUT)
    launch = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch",
                               str(ROOT / "launch" / "robot.launch.yaml")],
                              stdout=logs["launch"].open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_robot_driver")
    got: dict[str, list] = {"cmd": [], "raw": [], "status": [], "state": [], "result": [], "gt": []}
    relay = {"on": True, "last_color": None, "first_withheld": None}
    pub_color = node.create_publisher(Image, COLOR, qos_profile_sensor_data)
    pub_depth = node.create_publisher(Image, DEPTH, qos_profile_sensor_data)
    pub_sim_action = node.create_publisher(String, "/sim/action", 10)

    def on_color(msg: Image) -> None:
        if relay["on"]:
            pub_color.publish(msg)
            relay["last_color"] = time.monotonic()
        elif relay["first_withheld"] is None:
            relay["first_withheld"] = time.monotonic()

    def on_depth(msg: Image) -> None:
        if not relay["on"]:
            return
        # as realsense2_camera publishes aligned depth: 16UC1, millimeters
        metres = np.frombuffer(bytes(msg.data), dtype=np.float32).reshape(msg.height, msg.width)
        msg.data = np.clip(np.round(metres * 1000.0), 0, 65535).astype(np.uint16).tobytes()
        msg.encoding, msg.step, msg.is_bigendian = "16UC1", msg.width * 2, 0
        pub_depth.publish(msg)

    def on_action(msg: String) -> None:
        # the stand-in robot is driven by /cmd_vel alone; STOP goes to the bridge, which judges the episode
        if msg.data == "STOP":
            pub_sim_action.publish(msg)

    latched = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(Image, "/sim/color", on_color, qos_profile_sensor_data)
    node.create_subscription(Image, "/sim/depth", on_depth, qos_profile_sensor_data)
    node.create_subscription(String, "/memnav/action", on_action, 10)
    node.create_subscription(Twist, "/cmd_vel", lambda m: got["cmd"].append((time.monotonic(), m.linear.x,
                                                                             m.angular.z)), 100)
    node.create_subscription(Twist, "/memnav/cmd_vel_raw", lambda m: got["raw"].append((time.monotonic(), m.linear.x,
                                                                                        m.angular.z)), 100)
    node.create_subscription(String, "/memnav/safety_status", lambda m: got["status"].append(
        (time.monotonic(), json.loads(m.data))), 50)
    node.create_subscription(String, "/memnav/policy_state", lambda m: got["state"].append(
        (time.monotonic(), json.loads(m.data))), 50)
    node.create_subscription(String, "/memnav/episode_result", lambda m: got["result"].append(json.loads(m.data)),
                             latched)
    node.create_subscription(Odometry, "/memnav/ground_truth_pose", lambda m: got["gt"].append(
        float(np.hypot(m.pose.pose.position.x - goal_xy[0], m.pose.pose.position.y - goal_xy[1]))), 50)
    reset = node.create_client(Trigger, "/sim_bridge_node/reset")

    def wait_for(cond, timeout: float) -> bool:
        return spin_until(node, cond, timeout, 0.01)

    def report() -> str:
        return "\n".join(f"--- {name}\n{path.read_text()[-2500:]}" for name, path in logs.items())

    try:
        # 1. the robot drives itself (through the robot profile, velocity commands only) to the goal and stops
        # there: the bridge's episode result (ground truth) says success
        assert wait_for(lambda: bool(got["gt"]), 30.0), report()
        assert got["gt"][0] == pytest.approx(start_m, abs=0.05)
        tries = []
        for attempt in range(ATTEMPTS):
            n_res, n_gt = len(got["result"]), len(got["gt"])
            if attempt:   # the same episode again from its start (the bridge's ~/reset)
                fut = reset.call_async(Trigger.Request())
                assert wait_for(fut.done, 20.0) and fut.result().success
            t0 = time.monotonic()
            ok = wait_for(lambda n=n_res: len(got["result"]) > n, GOAL_TIMEOUT_S)
            gts = got["gt"][n_gt:]
            final = gts[-1] if gts else None
            result = got["result"][n_res] if ok else None
            tries.append((round(time.monotonic() - t0, 1), final, result and result["success"]))
            print(f"attempt {attempt + 1}: over after {tries[-1][0]} s, closest {min(gts, default=None)} m, final "
                  f"{final} m of {start_m} m; result {result}; modes {sorted({s['mode'] for _, s in got['state']})}")
            if ok and result["success"] == 1.0 and final is not None and final < 1.0:
                break
        else:
            pytest.fail(f"no success in {ATTEMPTS} attempts (s, final m, success): {tries}\n{report()}")
        assert max(v for _, v, _ in got["cmd"]) <= 0.5 + 1e-9           # guard.max_linear_mps

        # 2. cut the camera just after the policy starts a moving action: its own command lasts 1 s
        def moving_action_started(n_state: int) -> bool:
            fresh = [s for _, s in got["state"][n_state:] if s["action"] != "STOP"]
            return bool(fresh) and got["state"][-1][1]["action"] != "STOP" and bool(got["cmd"]) \
                and abs(got["cmd"][-1][1]) + abs(got["cmd"][-1][2]) > 0.0
        for _ in range(3):   # the policy may STOP at once after a reset: start the episode again
            n_state = len(got["state"])
            fut = reset.call_async(Trigger.Request())
            assert wait_for(fut.done, 20.0) and fut.result().success
            if wait_for(functools.partial(moving_action_started, n_state), 15.0):
                break
        else:
            pytest.fail(f"the policy did not move again\n{report()}")
        relay["on"] = False
        t_cut_request = time.monotonic()
        n_cmd = len(got["cmd"])
        assert wait_for(lambda: any(c[1:] == (0.0, 0.0) for c in got["cmd"][n_cmd:]), 3.0), report()
        t_zero = next(t for t, v, w in got["cmd"][n_cmd:] if (v, w) == (0.0, 0.0))
        wait_for(lambda: time.monotonic() > t_zero + 1.0, 2.0)
        t_last, t_cut = relay["last_color"], relay["first_withheld"]
        assert t_last is not None and t_last <= t_cut_request and t_cut is not None
        # the policy still asked to move when the guard sent zero: it was the watchdog
        raw_before = [r for r in got["raw"] if r[0] <= t_zero]
        assert raw_before and abs(raw_before[-1][1]) + abs(raw_before[-1][2]) > 0.0
        stale = next(s for t, s in got["status"] if t >= t_cut_request and s["reason"] != "limited"
                     and s["reason"] != "ok")
        assert stale["reason"] in ("stale_color", "stale_depth") and (stale["v_mps"], stale["w_radps"]) == (0, 0)
        # measured inside the safety node: zero at the first check after the image became 0.5 s old
        age = stale["age_s"][stale["reason"].removeprefix("stale_")]
        print(f"watchdog: image age at zero {age:.3f} s (in the node); zero {t_zero - t_cut:.3f} s after the cut, "
              f"{t_zero - t_last:.3f} s after the last frame (here)")
        assert WATCHDOG_S < age <= WATCHDOG_S + SAFETY_PERIOD_S + 0.03, stale
        # measured here, end to end: zero within 0.5 s of the cut (the first frame withheld), and not before
        # the last frame delivered was 0.5 s old
        assert t_zero - t_cut <= WATCHDOG_S, (t_zero - t_cut, t_zero - t_last)
        assert t_zero - t_last > WATCHDOG_S - 0.05, (t_zero - t_cut, t_zero - t_last)
        # and it stays zero while the camera is out
        assert all((v, w) == (0.0, 0.0) for t, v, w in got["cmd"] if t >= t_zero)
        assert bridge.poll() is None and launch.poll() is None, report()
        assert "no emergency-stop state in" in logs["launch"].read_text(), report()   # robot.yaml's state file
    finally:
        node.destroy_node()
        rclpy.shutdown()
        os.killpg(launch.pid, signal.SIGINT)
        bridge.send_signal(signal.SIGINT)
        for proc in (launch, bridge):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
