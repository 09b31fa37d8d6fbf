"""`memnav launch launch/replay.launch.yaml bag:=BAG`: replay_node plays a recorded patrol into the encoder, memory
and stop nodes (separate processes over DDS, use_sim_time), which compute embeddings, memory inserts and stop
decisions for the bag's frames; the launch ends cleanly when the bag has been played."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import write_two_room_scene  # noqa: E402

from memnav.eval.bag_io import BagFile, BagWriter  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
FRAMES = 30


@pytest.fixture
def patrol_bag(tmp_path) -> Path:
    """3 s at 10 Hz of RGB-D + odometry with ground truth and one goal, as the simulator bridge records them."""
    from memnav.eval.bench_replay import PatrolConfig, record_patrol_bag

    scene = write_two_room_scene(tmp_path / "scenes")
    with BagWriter(tmp_path / "patrol", "mcap") as w:
        rec = record_patrol_bag(scene, [(w, True)], PatrolConfig(frames=FRAMES, waypoints=3, seed=1))
    assert rec["frames"] == FRAMES
    return tmp_path / "patrol"


def test_replay_launch_runs_the_stack_on_the_bag(patrol_bag, tmp_path):
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    with BagFile(patrol_bag) as bag:
        frame_stamps = {m.log_time_ns for m in bag.messages(["/camera/color/image_raw"], decode=False)}
        goal_stamps = [m.log_time_ns for m in bag.messages(["/memnav/goal_image"], decode=False)]
        total = bag.message_count
    domain = 40 + ((os.getpid() + 67) % 150)
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    launch_file = ROOT / "launch" / "replay.launch.yaml"
    launch = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch", str(launch_file), f"bag:={patrol_bag}",
                               # delay: this listener must match the stack's publishers before the first frame
                               "rate:=2.0", "delay:=3.0"], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_replay_listener")
    got: dict[str, list] = {"embedding": [], "memory": [], "stop": [], "goal": []}
    stamp = lambda h: h.stamp.sec * 10**9 + h.stamp.nanosec  # noqa: E731
    node.create_subscription(Image, "/memnav/embedding", lambda m: got["embedding"].append((stamp(m.header), m.width)),
                             10)
    node.create_subscription(String, "/memnav/memory_event", lambda m: got["memory"].append(json.loads(m.data)), 100)
    node.create_subscription(String, "/memnav/stop_decision", lambda m: got["stop"].append(json.loads(m.data)), 100)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(Image, "/memnav/goal_embedding", lambda m: got["goal"].append(stamp(m.header)), latched)
    try:
        end = time.monotonic() + 150
        while launch.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        if launch.poll() is None:
            launch.kill()
        out, _ = launch.communicate(timeout=30)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if launch.poll() is None:
            launch.kill()
            launch.communicate()
    assert launch.returncode == 0, out[-3000:]
    assert f"published {total} messages" in out, out[-3000:]
    assert "memnav_replay: finished (exit code 0)" in out and "crashed" not in out
    for name in ("encoder_node", "memory_node", "stop_node"):
        assert f"{name}: stopped (exit code 0)" in out, out[-3000:]
    # every frame of the bag went through the stack (stamps are the bag's, not the wall clock's)
    embedded = {t for t, _ in got["embedding"]}
    assert embedded <= frame_stamps and len(embedded) >= FRAMES - 2, (len(embedded), out[-2000:])
    assert {w for _, w in got["embedding"]} == {256}
    assert got["goal"] == goal_stamps and min(frame_stamps) in goal_stamps
    inserted = {e["stamp_ns"] for e in got["memory"]}
    assert inserted <= frame_stamps and len(inserted) >= FRAMES - 4
    assert got["stop"] and goal_stamps[0] in {d["goal_stamp_ns"] for d in got["stop"]} <= set(goal_stamps)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["patrol", "scenes"]   # nothing written beside the bag


def test_replay_node_refuses_a_missing_bag_by_name(tmp_path):
    missing = tmp_path / "nope"
    run = subprocess.run([str(Path(sys.executable).parent / "replay_node"), "--ros-args", "-p", f"bag:={missing}"],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, ROS_DOMAIN_ID=str(40 + ((os.getpid() + 71) % 150)),
                                  ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST"))
    assert run.returncode == 2 and f"bag {missing} does not exist" in run.stderr   # CONFIG_ERROR_EXIT, one line
    assert "Traceback" not in run.stderr
