"""safety_node as a real process on an isolated domain: passes fresh commands, stops on stale or bad sensor
data and on the e-stop, counts bad messages and never dies on one."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import spin_until, stop_processes, use_isolated_ros_domain  # noqa: E402

from memnav.core.types import Pose2D  # noqa: E402
from memnav.ros.safety_node import PARAMETER_GROUPS, SafetyNodeConfig  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_config_validation_and_groups():
    assert [prefix for prefix, _ in PARAMETER_GROUPS] == ["", "guard."]
    with pytest.raises(ValueError, match="rate_hz"):
        SafetyNodeConfig(rate_hz=0.0)
    for bad in ({"camera_hfov_deg": 180.0}, {"camera_height_m": 0.0}, {"camera_pitch_deg": 60.0}):
        with pytest.raises(ValueError, match=f"SafetyNodeConfig.{next(iter(bad))}"):
            SafetyNodeConfig(**bad)


def test_safety_node_guards_the_command(monkeypatch):
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import Bool, String

    from memnav.ros import conversions as conv

    domain = 40 + ((os.getpid() + 113) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args",
                             "-p", "guard.max_linear_accel_mps2:=100.0", "-p", "guard.max_angular_accel_radps2:=100.0",
                             "-p", "guard.max_linear_mps:=0.4", "-p", "status_period_s:=0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_safety_client")
    got = {"cmd": [], "status": [], "diag": []}
    node.create_subscription(Twist, "/cmd_vel", lambda m: got["cmd"].append((time.monotonic(), m.linear.x,
                                                                             m.angular.z)), 100)
    node.create_subscription(String, "/memnav/safety_status", lambda m: got["status"].append(json.loads(m.data)), 50)
    node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: got["diag"].extend(m.status), 50)
    pub_rgb = node.create_publisher(Image, "/camera/color/image_raw", qos_profile_sensor_data)
    pub_depth = node.create_publisher(Image, "/camera/depth/image_raw", qos_profile_sensor_data)
    pub_odom = node.create_publisher(Odometry, "/odom", qos_profile_sensor_data)
    pub_cmd = node.create_publisher(Twist, "/memnav/cmd_vel_raw", 10)
    pub_estop = node.create_publisher(Bool, "/memnav/estop", 10)
    feed = {"rgb": "good", "odom": "good", "cmd": (0.6, 0.2), "nan_cmd": False}
    rgb = conv.rgb_to_image(np.zeros((8, 8, 3), np.uint8))
    bad_rgb = conv.rgb_to_image(np.zeros((8, 8, 3), np.uint8))
    bad_rgb.height = 9                              # data no longer matches the header
    depth = conv.depth_to_image(np.ones((8, 8), np.float32))

    def on_feed() -> None:
        if feed["rgb"] == "good":
            pub_rgb.publish(rgb)
        elif feed["rgb"] == "bad":
            pub_rgb.publish(bad_rgb)
        pub_depth.publish(depth)
        odom = conv.pose_to_odometry(Pose2D(1.0, 2.0, 0.3))
        if feed["odom"] == "nan":
            odom.pose.pose.position.x = math.nan
        pub_odom.publish(odom)
        twist = Twist()
        twist.linear.x, twist.angular.z = feed["cmd"]
        if feed["nan_cmd"]:
            twist.linear.x = math.nan
        pub_cmd.publish(twist)

    node.create_timer(0.05, on_feed)

    def wait_for(cond, timeout: float) -> bool:
        return spin_until(node, cond, timeout)

    def last_cmd():
        return got["cmd"][-1][1:] if got["cmd"] else None

    def moving():
        return last_cmd() == pytest.approx((0.4, 0.2))  # clipped to max_linear_mps

    def stopped():
        return last_cmd() == (0.0, 0.0)

    def status_is(reason):
        return lambda: bool(got["status"]) and got["status"][-1]["reason"] == reason

    def diagnosed(level: int, text: str):
        """/diagnostics says the safety node is at `level` (0 OK, 1 WARN, 2 ERROR) with `text` in its message."""
        return lambda: any(d.name == "/safety_node" and d.level == bytes([level]) and text in d.message
                           for d in got["diag"][-3:])

    try:
        assert wait_for(moving, 60.0), f"no guarded command; last {last_cmd()}"
        assert wait_for(status_is("limited"), 5.0)
        assert wait_for(diagnosed(0, "passing the policy's command"), 5.0), got["diag"][-3:]

        # a non-finite command is dropped; the last good one stays in force until it times out
        feed["nan_cmd"] = True
        assert wait_for(status_is("stale_command"), 3.0) and stopped(), (got["status"][-3:], proc.poll())
        feed["nan_cmd"] = False
        assert wait_for(moving, 5.0)

        # colour images that do not match their header do not count: the watchdog stops the robot
        feed["rgb"] = "bad"
        t_bad = time.monotonic()
        assert wait_for(status_is("stale_color"), 3.0) and stopped()
        assert time.monotonic() - t_bad < 1.5
        assert wait_for(diagnosed(2, "no colour image within the watchdog"), 3.0), got["diag"][-3:]
        assert {v.key: v.value for v in got["diag"][-1].values}["reason"] == "stale_color"
        feed["rgb"] = "good"
        assert wait_for(moving, 5.0)

        # NaN odometry: likewise
        feed["odom"] = "nan"
        assert wait_for(status_is("stale_odom"), 3.0) and stopped()
        feed["odom"] = "good"
        assert wait_for(moving, 5.0)

        # e-stop: zero at once, latched while commands keep coming, released explicitly
        assert wait_for(lambda: pub_estop.get_subscription_count() > 0, 5.0)
        pub_estop.publish(Bool(data=True))
        t_stop = time.monotonic()
        assert wait_for(stopped, 2.0) and got["cmd"][-1][0] - t_stop < 0.3
        n = len(got["cmd"])
        wait_for(lambda: len(got["cmd"]) > n + 25, 3.0)
        assert all(c[1:] == (0.0, 0.0) for c in got["cmd"][n:]) and got["status"][-1]["estop"]
        assert wait_for(diagnosed(1, "emergency stop engaged"), 3.0), got["diag"][-3:]
        pub_estop.publish(Bool(data=False))
        assert wait_for(moving, 5.0)
        # a best-effort e-stop publisher (micro-ROS's default, many joystick drivers) engages it too: against a
        # reliable-only subscription it matched nothing, and the stop was silently never heard
        pub_estop_be = node.create_publisher(Bool, "/memnav/estop", qos_profile_sensor_data)
        assert wait_for(lambda: pub_estop_be.get_subscription_count() > 0, 5.0)
        t_stop = time.monotonic()
        assert wait_for(lambda: pub_estop_be.publish(Bool(data=True)) or stopped(), 2.0)
        assert got["cmd"][-1][0] - t_stop < 0.5 and wait_for(lambda: got["status"][-1]["estop"], 2.0)
        pub_estop.publish(Bool(data=False))
        assert wait_for(moving, 5.0)
        assert proc.poll() is None
        dropped = got["status"][-1]["dropped"]
        assert dropped["command"] > 0 and dropped["color"] > 0 and dropped["odom"] > 0
        assert got["status"][-1]["age_s"]["depth"] < 0.5
    finally:
        node.destroy_node()
        rclpy.shutdown()
        out = stop_processes([proc])[0]
        print(out[-4000:])  # shown by pytest when the test fails
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out[-3000:]}"
    for what in ("dropped command", "dropped color", "dropped odom", "emergency stop ENGAGED"):
        assert what in out, out[-3000:]



def test_a_surface_ahead_holds_forward_speed_until_it_is_gone_or_the_stop_distance_is_lowered(monkeypatch):
    """guard.stop_distance_m 0.3 with the field of view from camera_info: forward is held until one has come; a
    wall 2 m ahead passes the command, one 0.2 m ahead holds forward speed at zero while the turn passes (status,
    /diagnostics and the log say so); `memnav param set` lowering the distance to 0.1 drives again; a patch too near
    to measure (REP 117's -inf) holds it again, 0 m ahead."""
    from conftest import run_memnav
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo, Image
    from std_msgs.msg import String

    from memnav.ros import conversions as conv

    domain = 40 + ((os.getpid() + 151) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args",
                             "-p", "guard.max_linear_accel_mps2:=100.0", "-p", "guard.max_angular_accel_radps2:=100.0",
                             "-p", "guard.stop_distance_m:=0.3", "-p", "camera_hfov_deg:=0.0",
                             "-p", "status_period_s:=0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_safety_client")
    got = {"cmd": [], "status": [], "diag": []}
    node.create_subscription(Twist, "/cmd_vel", lambda m: got["cmd"].append((m.linear.x, m.angular.z)), 100)
    node.create_subscription(String, "/memnav/safety_status", lambda m: got["status"].append(json.loads(m.data)), 50)
    node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: got["diag"].extend(m.status), 50)
    pubs = {name: node.create_publisher(kind, topic, qos_profile_sensor_data) for name, kind, topic in (
        ("rgb", Image, "/camera/color/image_raw"), ("depth", Image, "/camera/depth/image_raw"),
        ("odom", Odometry, "/odom"), ("info", CameraInfo, "/camera/color/camera_info"))}
    pub_cmd = node.create_publisher(Twist, "/memnav/cmd_vel_raw", 10)
    feed = {"wall_m": 2.0, "info": False, "too_near": False}
    rgb = conv.rgb_to_image(np.zeros((64, 64, 3), np.uint8))
    info = CameraInfo(width=64, height=64, k=[32.0, 0.0, 32.0, 0.0, 32.0, 32.0, 0.0, 0.0, 1.0])   # 90 deg

    def on_feed() -> None:
        pubs["rgb"].publish(rgb)
        frame = np.full((64, 64), feed["wall_m"], np.float32)
        if feed["too_near"]:
            frame[40:44, 5:9] = -np.inf                 # low at the left: inside the camera's minimum range
        pubs["depth"].publish(conv.depth_to_image(frame))
        pubs["odom"].publish(conv.pose_to_odometry(Pose2D(0.0, 0.0, 0.0)))
        if feed["info"]:
            pubs["info"].publish(info)
        twist = Twist()
        twist.linear.x, twist.angular.z = 0.3, 0.2
        pub_cmd.publish(twist)

    node.create_timer(0.05, on_feed)

    def wait_for(cond, timeout: float) -> bool:
        return spin_until(node, cond, timeout)

    def sending(v: float, w: float, reason: str):
        return lambda: (bool(got["cmd"]) and got["cmd"][-1] == pytest.approx((v, w)) and bool(got["status"])
                        and got["status"][-1]["reason"] == reason)

    try:
        # no camera_info yet: the depth image cannot be measured, so forward is held and the turn passes
        assert wait_for(sending(0.0, 0.2, "obstacle_ahead"), 60.0), (got["cmd"][-3:], got["status"][-1:])
        assert got["status"][-1]["ahead_m"] is None
        feed["info"] = True
        assert wait_for(sending(0.3, 0.2, "ok"), 10.0), got["status"][-1:]
        assert got["status"][-1]["ahead_m"] == pytest.approx(2.0)
        feed["wall_m"] = 0.2
        assert wait_for(sending(0.0, 0.2, "obstacle_ahead"), 5.0), got["status"][-1:]
        assert got["status"][-1]["ahead_m"] == pytest.approx(0.2)
        assert wait_for(lambda: any(d.name == "/safety_node" and d.level == bytes([1])
                                    and d.message.startswith("forward held") for d in got["diag"][-3:]), 5.0)
        env = dict(os.environ)
        lowered = run_memnav(["param", "set", "safety_node", "guard.stop_distance_m", "0.1"], env, 60)
        assert lowered.returncode == 0, lowered.stdout + lowered.stderr
        assert wait_for(sending(0.3, 0.2, "ok"), 5.0), got["status"][-1:]
        # a surface too near to measure: held, 0 m ahead (it read as no return, outside the middle: open space)
        feed["too_near"] = True
        assert wait_for(sending(0.0, 0.2, "obstacle_ahead"), 5.0), got["status"][-1:]
        assert got["status"][-1]["ahead_m"] == 0.0 and got["status"][-1]["blind_share"] == 0.0
        feed["too_near"] = False
        assert wait_for(sending(0.3, 0.2, "ok"), 5.0), got["status"][-1:]
        # a depth image with no return at all (a wall inside the camera's minimum range): held as well
        feed["wall_m"] = 0.0
        assert wait_for(sending(0.0, 0.2, "obstacle_ahead"), 5.0), got["status"][-1:]
        assert got["status"][-1]["blind_share"] == 1.0 and got["status"][-1]["ahead_m"] is None
        assert proc.poll() is None
    finally:
        node.destroy_node()
        rclpy.shutdown()
        out = stop_processes([proc])[0]
        print(out[-4000:])
    assert proc.returncode == 0, out[-3000:]
    assert "depth image: 90.0 deg horizontal field of view (camera_info)" in out, out[-3000:]
    assert "forward held: no depth image measured yet (no camera_info: field of view unknown)" in out, out[-3000:]
    assert "forward held: a surface 0.20 m ahead in the robot's path (guard.stop_distance_m 0.3)" in out, out[-3000:]
    assert "forward held: no return in 100% of the middle of the depth image" in out, out[-3000:]
    assert ("forward held: a surface 0.00 m ahead in the robot's path (too near to measure, or under the camera) "
            "(guard.stop_distance_m 0.1)") in out, out[-3000:]


def test_robot_yaml_builds_the_robot_profile_configs():
    import dataclasses
    from pathlib import Path

    import yaml

    from memnav.ros.policy_node import PolicyNodeConfig

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "robot.yaml").read_text())
    assert set(doc) == {"policy_node", "safety_node"}
    section = doc["safety_node"]["ros__parameters"]
    flat = {k: v for k, v in section.items() if k != "guard"} | {f"guard.{k}": v for k, v in section["guard"].items()}
    built = []
    for prefix, cls in PARAMETER_GROUPS:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {name: flat.pop(f"{prefix}{name}") for name in fields}   # every field listed
        assert all(type(v) is type(fields[k].default) for k, v in values.items()), values  # ROS-typed
        built.append(cls(**values))
    assert flat == {}, f"unknown safety_node parameters {sorted(flat)}"
    assert built[1].watchdog_s == 0.5
    policy = PolicyNodeConfig(**doc["policy_node"]["ros__parameters"])
    assert policy.lockstep is False


BASE = """
import rclpy
from geometry_msgs.msg import TwistStamped

rclpy.init()
node = rclpy.create_node("stamped_base")   # a base that takes TwistStamped only (diff_drive_controller, Jazzy)
seen = []


def on_cmd(msg):
    if len(seen) < 5:
        seen.append(msg)
        print(msg.header.frame_id, msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, msg.twist.linear.x,
              flush=True)


node.create_subscription(TwistStamped, "/cmd_vel", on_cmd, 10)
try:
    rclpy.spin(node)
except KeyboardInterrupt:
    pass
"""


def test_a_stamped_base_gets_twist_stamped_and_check_names_the_setting(monkeypatch, tmp_path):
    domain = 40 + ((os.getpid() + 149) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    base = subprocess.Popen([sys.executable, "-c", BASE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # 1. memnav check with the default (Twist) finds a base that takes TwistStamped only, and says what to set
        check = subprocess.run([sys.executable, "-m", "memnav.cli", "check", "--duration", "1", "--json",
                                str(tmp_path / "check.json")], capture_output=True, text=True, timeout=120)
        body = json.loads((tmp_path / "check.json").read_text())
        assert body["cmd_vel"]["subscriber_types"] == ["geometry_msgs/msg/TwistStamped"], check.stdout
        wrong = [f for f in body["findings"] if f["topic"] == "/cmd_vel" and f["level"] == "FAIL"]
        assert wrong and "cmd_vel_stamped:=true" in wrong[0]["text"], body["findings"]
        # 2. the safety node with cmd_vel_stamped: the base gets stamped commands (zero: no sensors, the watchdog)
        safety = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args", "-p",
                                   "cmd_vel_stamped:=true", "-p", "cmd_vel_frame_id:=base_footprint"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(8.0)
        stop_processes([safety])
    finally:
        out = stop_processes([base])[0]
    lines = [line.split() for line in out.splitlines() if line.startswith("base_footprint")]
    assert len(lines) == 5, out
    stamps = [float(stamp) for _, stamp, _ in lines]
    assert stamps == sorted(stamps) and stamps[0] > 1e9 and all(float(v) == 0.0 for _, _, v in lines), lines


def test_under_sim_time_without_clock_the_watchdog_still_sends_zero(monkeypatch):
    """use_sim_time with no /clock (a stalled simulator, an ended replay): the control loop runs on the steady
    clock, as the watchdog's ages do, so the base still gets its zero command."""
    from geometry_msgs.msg import Twist

    domain = 40 + ((os.getpid() + 131) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args", "-p", "use_sim_time:=true"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_safety_sim_time")
    cmds = []
    node.create_subscription(Twist, "/cmd_vel", lambda m: cmds.append((m.linear.x, m.angular.z)), 100)
    try:
        assert spin_until(node, lambda: len(cmds) >= 10, 60.0), (len(cmds), proc.poll())
        assert set(cmds) == {(0.0, 0.0)}
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes([proc])


@pytest.mark.parametrize("signum, offset", [(signal.SIGINT, 17), (signal.SIGTERM, 19), (signal.SIGHUP, 23)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_while_driving_leaves_the_base_commanded_to_zero(monkeypatch, signum, offset):
    """A launcher's SIGINT/SIGTERM, a Ctrl-C, or the hang-up of a dropped ssh session while the robot drives: the
    last /cmd_vel the base gets is zero, and the node exits cleanly. rclpy's own handlers shut the context down
    first, so the node's clean-up could not publish, and a base without a command timeout drove on at the last
    speed."""
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from memnav.ros import conversions as conv

    domain = use_isolated_ros_domain(monkeypatch, offset)
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args",
                             "-p", "guard.max_linear_accel_mps2:=100.0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_safety_signal")
    cmds = []
    node.create_subscription(Twist, "/cmd_vel", lambda m: cmds.append(m.linear.x), 100)
    pub_rgb = node.create_publisher(Image, "/camera/color/image_raw", qos_profile_sensor_data)
    pub_depth = node.create_publisher(Image, "/camera/depth/image_raw", qos_profile_sensor_data)
    pub_odom = node.create_publisher(Odometry, "/odom", qos_profile_sensor_data)
    pub_cmd = node.create_publisher(Twist, "/memnav/cmd_vel_raw", 10)
    rgb = conv.rgb_to_image(np.zeros((8, 8, 3), np.uint8))
    depth = conv.depth_to_image(np.ones((8, 8), np.float32))
    forward = Twist()
    forward.linear.x = 0.3

    def feed() -> None:
        pub_rgb.publish(rgb)
        pub_depth.publish(depth)
        pub_odom.publish(conv.pose_to_odometry(Pose2D(0.0, 0.0, 0.0)))
        pub_cmd.publish(forward)

    node.create_timer(0.05, feed)
    out = ""
    try:
        assert spin_until(node, lambda: bool(cmds) and cmds[-1] == pytest.approx(0.3), 60.0), (cmds[-3:],
                                                                                               proc.poll())
        proc.send_signal(signum)
        spin_until(node, lambda: proc.poll() is not None, 10.0)
        spin_until(node, lambda: False, 0.5)      # anything still on its way
        assert proc.poll() is not None
        out = proc.communicate(timeout=10)[0]
        assert cmds[-1] == 0.0, (cmds[-5:], out[-2000:])
        assert proc.returncode == 0, out[-2000:]
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes([proc])


def test_a_latched_estop_sent_before_the_node_started_engages_it_and_a_latched_release_does_not_undo_a_kept_stop(
        monkeypatch, tmp_path):
    """A latched (transient-local) e-stop publisher, a button node or `ros2 topic pub --qos-durability
    transient_local`, that engaged the stop while the safety node was down (respawning) or before discovery matched
    them: the node, subscribing volatile only, never got it and started released. Now it starts engaged; the same
    publisher's live release releases it; and its old latched release does not undo a stop engaged since (kept in
    estop_state_file) when the node restarts. A volatile publisher (`memnav estop`) raises no QoS warning."""
    from rclpy.qos import qos_profile_sensor_data
    from std_msgs.msg import Bool, String

    from memnav.ros.qos import latched_qos

    domain = use_isolated_ros_domain(monkeypatch, 53)
    log, state_file = tmp_path / "safety.log", tmp_path / "estop.json"

    def start_safety() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args", "-p",
                                 "status_period_s:=0.1", "-p", f"estop_state_file:={state_file}"],
                                stdout=log.open("a"), stderr=subprocess.STDOUT)

    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_latched_estop")
    statuses = []
    node.create_subscription(String, "/memnav/safety_status", lambda m: statuses.append(json.loads(m.data)), 50)
    button = node.create_publisher(Bool, "/memnav/estop", latched_qos())
    button.publish(Bool(data=True))             # pressed; no safety node runs yet
    volatile = node.create_publisher(Bool, "/memnav/estop", 10)
    procs = [start_safety()]

    def estop_now(engaged: bool, timeout_s: float = 30.0) -> bool:
        n = len(statuses)
        return spin_until(node, lambda: len(statuses) > n + 2 and all(s["estop"] is engaged for s in statuses[-3:]),
                          timeout_s)

    try:
        # nothing is published after the node starts: it hears the latched stop once discovery has matched them
        assert estop_now(True, 60.0), (statuses[-3:], log.read_text())
        assert statuses[-1]["reason"] == "estop"
        assert json.loads(state_file.read_text())["engaged"] is True
        button.publish(Bool(data=False))        # released on the button, live
        assert estop_now(False), statuses[-3:]
        # engaged by another (volatile) publisher; the button's latched state is still "released"
        assert spin_until(node, lambda: volatile.get_subscription_count() >= 2, 10.0)
        volatile.publish(Bool(data=True))
        assert estop_now(True), statuses[-3:]
        # the node dies and comes back: the button's old latched release must not release the kept stop
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        procs[0] = start_safety()
        statuses.clear()
        assert spin_until(node, lambda: len(statuses) >= 3 and button.get_subscription_count() >= 3, 60.0)
        spin_until(node, lambda: False, 1.0)
        assert statuses and all(s["estop"] is True for s in statuses), statuses
        # a best-effort copy and a reliable one of each message: the last state is what counts
        be = node.create_publisher(Bool, "/memnav/estop", qos_profile_sensor_data)
        assert spin_until(node, lambda: be.get_subscription_count() >= 1, 10.0)
        volatile.publish(Bool(data=False))
        assert estop_now(False), statuses[-3:]
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes(procs)
    text = log.read_text()
    assert "incompatible QoS" not in text, text[-3000:]      # each publisher is heard by one of the three
    assert text.count("emergency stop ENGAGED as kept in") == 1, text[-3000:]
