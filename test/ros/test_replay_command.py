"""`memnav replay` edge cases, as a real process over DDS on an isolated domain: a type the bag stores no definition
for is replayed (its bytes, as every topic's), a topic recorded from publishers with different QoS is offered so that
a reliable subscriber still gets it, and a rate that would overflow /clock's int32 seconds is refused by name."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")

from conftest import spin_until_exit, use_isolated_ros_domain  # noqa: E402

from memnav.eval.bag_io import BagFile, BagWriter, qos_profile, typestore_for_distro  # noqa: E402

T = typestore_for_distro().types
T0 = 1_700_000_000 * 10**9
N = 5


def _velocity(i: int, t: int):
    vec = T["geometry_msgs/msg/Vector3"](x=float(i), y=0.0, z=0.0)
    header = T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9),
                                      frame_id="base_link")
    return T["geometry_msgs/msg/VelocityStamped"](header=header, body_frame_id="base_link", reference_frame_id="odom",
                                                  velocity=T["geometry_msgs/msg/Twist"](linear=vec, angular=vec))


def _string(i: int):
    return T["std_msgs/msg/String"](data=str(i))


def _listen(domain: int, msg_class, topic: str, qos, bag: Path, *args: str) -> tuple[list, subprocess.Popen, str]:
    """Subscribe `topic` here, replay `bag` with `args` and return (messages heard, the replay, its output)."""
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_replay_listener")
    heard: list = []
    node.create_subscription(msg_class, topic, heard.append, qos)
    replay = subprocess.Popen([sys.executable, "-m", "memnav.cli", "replay", str(bag), *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        spin_until_exit(node, replay, 60)
        for _ in range(20):   # the last ones in flight
            rclpy.spin_once(node, timeout_sec=0.05)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if replay.poll() is None:
            replay.kill()
    out, _ = replay.communicate(timeout=10)
    return heard, replay, out


@pytest.fixture
def undefined_type_bag(tmp_path) -> Path:
    """A sqlite3 bag of Humble (its typestore has no geometry_msgs/VelocityStamped) that stores no definition of that
    type, as `ros2 bag record` of a distribution without stored definitions leaves it; /text is a known type."""
    path = tmp_path / "humble_bag"
    with BagWriter(path, "sqlite3") as w:
        w.add_topic("/velocity", "geometry_msgs/msg/VelocityStamped", [qos_profile(True, False, 10)])
        w.add_topic("/text", "std_msgs/msg/String", [qos_profile(True, False, 10)])
        for i in range(N):
            t = T0 + i * 10**8
            w.write("/velocity", _velocity(i, t), t)
            w.write("/text", _string(i), t + 1000)
    con = sqlite3.connect(next(path.glob("*.db3")))
    con.execute("DELETE FROM message_definitions WHERE topic_type = 'geometry_msgs/msg/VelocityStamped'")
    con.commit()
    con.close()
    meta = yaml.safe_load((path / "metadata.yaml").read_text())
    meta["rosbag2_bagfile_information"]["ros_distro"] = "humble"
    (path / "metadata.yaml").write_text(yaml.safe_dump(meta))
    with BagFile(path) as bag:
        assert not bag.topics["/velocity"].known and bag.topics["/text"].known   # what the test is about
    return path


@pytest.mark.ros
@pytest.mark.slow
def test_a_type_the_bag_has_no_definition_for_is_replayed(undefined_type_bag, monkeypatch):
    from geometry_msgs.msg import VelocityStamped

    domain = use_isolated_ros_domain(monkeypatch, 71)
    heard, replay, out = _listen(domain, VelocityStamped, "/velocity", 100, undefined_type_bag,
                                 "--rate", "4", "--wait-for", "/velocity", "--delay", "1")
    assert replay.returncode == 0, out
    assert [m.velocity.linear.x for m in heard] == [float(i) for i in range(N)], out   # reliable: all, in order
    assert heard[0].body_frame_id == "base_link" and heard[0].reference_frame_id == "odom"
    assert f"published {2 * N} messages" in out and f"/velocity: {N}" in out and "unknown_type" not in out, out


def test_publishers_that_offered_different_qos_get_a_profile_serving_them_all():
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    from memnav.ros.replay_command import publisher_qos

    mixed = publisher_qos((qos_profile(False, True, 5), qos_profile(True, False, 20)))
    assert mixed.reliability == ReliabilityPolicy.RELIABLE and mixed.durability == DurabilityPolicy.VOLATILE
    assert mixed.depth == 20
    latched = publisher_qos((qos_profile(True, True, 1), qos_profile(True, True, 3)))
    assert latched.durability == DurabilityPolicy.TRANSIENT_LOCAL and latched.depth == 3
    best_effort = publisher_qos((qos_profile(False, False, 5), qos_profile(False, False, 5)))
    assert best_effort.reliability == ReliabilityPolicy.BEST_EFFORT
    none = publisher_qos(())
    assert (none.reliability, none.durability, none.depth) == (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE,
                                                               10)


@pytest.mark.ros
@pytest.mark.slow
def test_a_topic_recorded_from_a_best_effort_and_a_reliable_publisher_reaches_a_reliable_subscriber(
        tmp_path, monkeypatch):
    # two nodes published /text, the first best effort: offering its profile, the replay reached no reliable subscriber
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    path = tmp_path / "two_publishers"
    with BagWriter(path, "mcap") as w:
        w.add_topic("/text", "std_msgs/msg/String", [qos_profile(False, False, 5), qos_profile(True, False, 10)])
        for i in range(N):
            w.write("/text", _string(i), T0 + i * 10**8)
    domain = use_isolated_ros_domain(monkeypatch, 73)
    heard, replay, out = _listen(domain, String, "/text", QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE),
                                 path, "--rate", "4", "--wait-for", "/text", "--delay", "1", "--wait-timeout", "10")
    assert replay.returncode == 0, out
    assert [m.data for m in heard] == [str(i) for i in range(N)], out


def test_a_rate_that_would_overflow_the_clocks_seconds_is_refused_by_name(undefined_type_bag, capsys, monkeypatch):
    # --rate 1e12 moved /clock 1e10 s per 10 ms tick: past int32 seconds, where it wrapped to negative times
    from memnav.cli import main

    use_isolated_ros_domain(monkeypatch, 79)   # should it start replaying after all
    assert main(["replay", str(undefined_type_bag), "--rate", "1e12", "--delay", "0"]) == 2
    from memnav.ros.replay_command import MAX_RATE, ReplayConfig

    err = capsys.readouterr().err
    assert f"--rate must be at most {MAX_RATE:g}" in err and "1000000000000.0" in err and "int32" in err, err
    # MAX_RATE itself passes the check (refused here only for the topic not in the bag)
    assert main(["replay", str(undefined_type_bag), "--rate", f"{MAX_RATE:g}", "--topics", "/nope"]) == 2
    err = capsys.readouterr().err
    assert "/nope" in err and "--rate" not in err, err
    with pytest.raises(ValueError, match="ReplayConfig.rate must be at most"):
        ReplayConfig(bag="b", rate=MAX_RATE * 2)
    # replay_node (launch/replay.launch.yaml): the same limit on its parameter, one line and status 2
    node = subprocess.run([sys.executable, "-m", "memnav.ros.replay_command", "--ros-args", "-p",
                           f"bag:={undefined_type_bag}", "-p", "rate:=1e12"], capture_output=True, text=True,
                          timeout=60)
    assert node.returncode == 2 and "rate must be at most" in node.stderr + node.stdout, node.stderr
    assert "Traceback" not in node.stderr
