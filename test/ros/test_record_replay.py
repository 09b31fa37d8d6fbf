"""`memnav record` and `memnav replay` as real processes over DDS on an isolated domain: a bag replayed (with a
remap and /clock) is recorded again byte for byte, latched topics stay latched, bad options exit 2."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from memnav.eval.bag_io import BagFile, BagWriter, qos_profile, typestore_for_distro  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

STORE = typestore_for_distro()
T = STORE.types
N = 20
T0 = 1_700_000_000 * 10**9


@pytest.fixture
def ros_env(monkeypatch):
    domain = 40 + (os.getpid() % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return domain


def _header(t: int, frame: str):
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9),
                                    frame_id=frame)


def _image(i: int, t: int):
    return T["sensor_msgs/msg/Image"](header=_header(t, "cam"), height=16, width=16, encoding="rgb8", is_bigendian=0,
                                      step=48, data=np.full(16 * 16 * 3, i, np.uint8))


def _odom(i: int, t: int):
    vec = T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0)
    pose = T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=float(i), y=0.0, z=0.0),
                                       orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
    return T["nav_msgs/msg/Odometry"](
        header=_header(t, "odom"), child_frame_id="base_link",
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=T["geometry_msgs/msg/Twist"](linear=vec, angular=vec),
                                                         covariance=np.zeros(36)))


@pytest.fixture
def source_bag(tmp_path) -> Path:
    """2 s at 10 Hz: best-effort images, reliable odometry, one latched goal image."""
    with BagWriter(tmp_path / "source", "sqlite3") as w:
        w.add_topic("/camera/color/image_raw", "sensor_msgs/msg/Image", [qos_profile(False, False, 5)])
        w.add_topic("/odom", "nav_msgs/msg/Odometry", [qos_profile(True, False, 10)])
        w.add_topic("/memnav/goal_image", "sensor_msgs/msg/Image", [qos_profile(True, True, 1)])
        w.write("/memnav/goal_image", _image(200, T0), T0)
        for i in range(N):
            t = T0 + i * 10**8
            w.write("/camera/color/image_raw", _image(i, t), t)
            w.write("/odom", _odom(i, t), t + 1000)
    return tmp_path / "source"


def _memnav(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memnav.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, timeout: float, sig: int | None = None) -> str:
    if sig is not None:
        proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"process did not finish in {timeout} s:\n{out}")
    return out


def test_replayed_bag_is_recorded_byte_for_byte_with_clock(source_bag, tmp_path, ros_env):
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    rec_path = tmp_path / "recorded"
    recorder = _memnav("record", "--out", str(rec_path), "--duration", "60", "/camera/color/image_raw",
                       "/robot/odom", "/memnav/goal_image")
    rclpy.init(domain_id=ros_env)
    from rclpy.parameter import Parameter

    node = rclpy.create_node("test_clock_listener", parameter_overrides=[Parameter("use_sim_time", value=True)])
    sim_times: list[int] = []
    clocks: list[int] = []
    node.create_subscription(Clock, "/clock", lambda m: clocks.append(m.clock.sec * 10**9 + m.clock.nanosec),
                             QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT))   # as TimeSource
    try:
        time.sleep(1.0)   # let the recorder start its discovery
        replay = _memnav("replay", str(source_bag), "--rate", "2", "--delay", "4", "--remap", "/odom:=/robot/odom")
        end = time.monotonic() + 60
        while replay.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
            sim_times.append(node.get_clock().now().nanoseconds)
        out = _finish(replay, 5)
        assert replay.returncode == 0, out
        assert f"published {2 * N + 1} messages" in out and "/robot/odom: 20" in out
        rec_out = _finish(recorder, 20, signal.SIGINT)
        assert recorder.returncode == 0, rec_out
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if recorder.poll() is None:
            recorder.kill()

    src = BagFile(source_bag)
    src_raw = {t: [m.raw for m in src.messages([t])] for t in src.topics}
    with BagFile(rec_path) as bag:
        assert set(bag.topics) == {"/camera/color/image_raw", "/robot/odom", "/memnav/goal_image"}
        got = {t: [m.raw for m in bag.messages([t])] for t in bag.topics}
        qos = bag.topics["/memnav/goal_image"].qos[0]
    assert got["/robot/odom"] == src_raw["/odom"]                     # reliable: all, in order, same bytes
    assert got["/memnav/goal_image"] == src_raw["/memnav/goal_image"]  # latched and recorded
    assert qos.durability.name == "TRANSIENT_LOCAL" and qos.reliability.name == "RELIABLE"
    images = got["/camera/color/image_raw"]
    assert len(images) >= N - 2 and set(images) <= set(src_raw["/camera/color/image_raw"])
    assert clocks, "no /clock received"
    assert T0 <= min(clocks) and max(clocks) <= T0 + (N + 2) * 10**8
    assert all(a <= b for a, b in zip(clocks, clocks[1:]))
    assert T0 <= max(sim_times) <= T0 + (N + 2) * 10**8   # a use_sim_time node runs on the bag's time


def test_bad_options_exit_2_before_touching_ros(source_bag, tmp_path):
    from memnav.cli import main

    assert main(["record", "--out", str(source_bag)]) == 2                         # never overwrites a bag
    assert main(["replay", str(source_bag), "--remap", "/odom"]) == 2              # not FROM:=TO
    assert main(["replay", str(source_bag), "--topics", "/nope"]) == 2
    assert main(["replay", str(tmp_path / "missing")]) == 2
    assert main(["replay", str(source_bag), "--wait-for", "/nope"]) == 2           # not a topic of the bag
    garbage = tmp_path / "garbage.mcap"
    garbage.write_bytes(b"\x00garbage" * 20)
    assert main(["replay", str(garbage)]) == 2                                     # not a bag: BagError
    assert garbage.read_bytes() == b"\x00garbage" * 20
    assert (source_bag / "metadata.yaml").is_file() and len(list(source_bag.iterdir())) == 2
