"""`memnav topic list|info|hz|echo` against a real safety node process over DDS (it publishes /cmd_vel at 50 Hz,
its status and /diagnostics, and subscribes the e-stop), plus the pure pieces: messages made plain for YAML, QoS
mismatches, the rate summary."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip("rclpy")

from conftest import SPIN_UNTIL_STOPPED, stop_processes  # noqa: E402

from memnav.ros.topic_command import field_of, qos_mismatches, rate_summary, to_plain  # noqa: E402


def test_messages_become_plain_yaml_with_long_arrays_shortened():
    from diagnostic_msgs.msg import DiagnosticStatus

    from memnav.ros import conversions as conv

    image = to_plain(conv.rgb_to_image(np.zeros((4, 8, 3), np.uint8)), max_array=16)
    assert (image["height"], image["width"], image["encoding"]) == (4, 8, "rgb8")
    assert image["data"] == "<96 values: 0, 0, 0, ...>" and set(image["header"]) == {"stamp", "frame_id"}
    assert len(to_plain(conv.rgb_to_image(np.zeros((4, 8, 3), np.uint8)), max_array=0)["data"]) == 96
    status = to_plain(DiagnosticStatus(level=b"\x02", name="/policy_node", message="no camera_info"), 16)
    assert status["level"] == 2 and status["name"] == "/policy_node" and status["values"] == []
    assert yaml.safe_load(yaml.safe_dump(image)) == image
    assert field_of(image, "header.frame_id") == image["header"]["frame_id"]
    with pytest.raises(ValueError, match=r"--field header.seq: no field 'seq' \(fields here: stamp, frame_id\)"):
        field_of(image, "header.seq")


def test_qos_mismatches_and_the_rate_summary():
    pub = {"node": "/cam", "reliability": "best_effort", "durability": "volatile"}
    sub = {"node": "/policy_node", "reliability": "reliable", "durability": "transient_local"}
    lines = qos_mismatches([pub], [sub])
    assert len(lines) == 2 and "subscribes reliable but /cam publishes best effort" in lines[0]
    assert qos_mismatches([{**pub, "reliability": "reliable", "durability": "transient_local"}], [sub]) == []
    assert qos_mismatches([pub], [{**sub, "reliability": "best_effort", "durability": "volatile"}]) == []
    summary = rate_summary([0.0, 0.1, 0.2, 0.35, 0.4], [100, 100, 100, 100, 100])
    assert summary["messages"] == 5 and summary["rate_hz"] == pytest.approx(10.0)
    assert summary["period_min_s"] == pytest.approx(0.05) and summary["period_max_s"] == pytest.approx(0.15)
    assert summary["bandwidth_bytes_per_s"] == pytest.approx(1000.0) and summary["mean_bytes"] == 100
    assert rate_summary([1.0], [10])["rate_hz"] is None


PEER = """
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool

rclpy.init()
node = rclpy.create_node("test_topic_peer")
node.create_publisher(Bool, "/memnav/estop", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
""" + SPIN_UNTIL_STOPPED


@pytest.mark.ros
@pytest.mark.slow
def test_topic_lists_measures_and_prints_a_running_nodes_topics(monkeypatch, tmp_path):
    domain = 40 + ((os.getpid() + 137) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    procs = [subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args", "-p",
                               "status_period_s:=0.2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
             # an e-stop button that publishes best effort: the safety node's reliable subscription never hears it
             subprocess.Popen([sys.executable, "-c", PEER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)]

    def topic(*args: str) -> subprocess.CompletedProcess:
        """`memnav topic ARGS` as its own process."""
        return subprocess.run([sys.executable, "-m", "memnav.cli", "topic", *args], capture_output=True, text=True,
                              timeout=90)

    try:
        listed = topic("list", "--wait", "3", "--json", str(tmp_path / "list.json"))
        assert listed.returncode == 0, listed.stderr
        topics = json.loads((tmp_path / "list.json").read_text())["topics"]
        assert topics["/cmd_vel"]["types"] == ["geometry_msgs/msg/Twist"] and topics["/cmd_vel"]["publishers"] == 1
        assert "/cmd_vel  [geometry_msgs/msg/Twist]  1 pub" in listed.stdout
        rate = topic("hz", "/cmd_vel", "--window", "2", "--json", str(tmp_path / "hz.json"))
        assert rate.returncode == 0, rate.stderr
        summary = json.loads((tmp_path / "hz.json").read_text())
        assert 25.0 < summary["rate_hz"] < 75.0 and summary["messages"] > 50, summary   # rate_hz 50
        assert summary["mean_bytes"] > 0 and "Hz over" in rate.stdout
        echoed = topic("echo", "/memnav/safety_status", "--count", "2")
        assert echoed.returncode == 0 and echoed.stdout.count("---\n") == 2, echoed.stderr
        body = json.loads(yaml.safe_load(echoed.stdout.split("---\n")[0])["data"])
        assert body["reason"] == "stale_color"   # no sensors: the watchdog holds it still
        linear = topic("echo", "/cmd_vel", "--count", "1", "--field", "linear")
        assert linear.returncode == 0 and yaml.safe_load(linear.stdout.split("---")[0]) == {"x": 0.0, "y": 0.0,
                                                                                             "z": 0.0}
        wrong = topic("echo", "/cmd_vel", "--count", "1", "--field", "linear.w")
        assert wrong.returncode == 2 and "no field 'w' (fields here: x, y, z)" in wrong.stderr
        info = topic("info", "/memnav/estop", "--json", str(tmp_path / "info.json"))
        assert info.returncode == 0, info.stderr
        found = json.loads((tmp_path / "info.json").read_text())
        # the safety node subscribes the e-stop three times: reliable, best effort (so that a best-effort e-stop
        # publisher is heard too) and reliable transient local (a latched stop sent before it started); its reliable
        # subscriptions and the best-effort peer are still a mismatch
        assert [s["node"] for s in found["subscribers"]] == ["/safety_node"] * 3
        assert sorted(s["reliability"] for s in found["subscribers"]) == ["best_effort", "reliable", "reliable"]
        assert any("/safety_node subscribes reliable but /test_topic_peer publishes best effort" in line
                   for line in found["qos_mismatches"]), found
        assert "QoS mismatch: /safety_node subscribes reliable" in info.stdout
        silent = topic("hz", "/nothing_here", "--timeout", "1")
        assert silent.returncode == 1 and "no message on /nothing_here within 1 s" in silent.stderr
        absent = topic("info", "/nothing_here", "--wait", "0.5")
        assert absent.returncode == 1 and "/nothing_here is not in the graph" in absent.stderr
    finally:
        stop_processes(procs)


MIXED_PEER = """
import sys

import rclpy
from std_msgs.msg import Int32, String

rclpy.init()
node = rclpy.create_node("test_mixed_" + sys.argv[1])
kind = String if sys.argv[1] == "text" else Int32
pub = node.create_publisher(kind, "/mixed", 10)
node.create_timer(0.05, lambda: pub.publish(kind(data="x" * 100) if kind is String else kind(data=7)))
""" + SPIN_UNTIL_STOPPED


@pytest.mark.ros
@pytest.mark.slow
def test_hz_names_publishers_of_another_type_echo_ends_with_its_reader_and_hz_reports_at_ctrl_c(monkeypatch,
                                                                                                tmp_path):
    """A topic published with two message types (20 Hz each), which a subscription hears only one of: hz says so
    (it reported 20 Hz as the topic's rate, silently). `echo | head` ended with "error: Broken pipe" (status 2);
    Ctrl-C during hz's window threw the measurement away."""
    domain = 40 + ((os.getpid() + 139) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    procs = [subprocess.Popen([sys.executable, "-c", MIXED_PEER, kind], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for kind in ("text", "number")]
    cli = [sys.executable, "-m", "memnav.cli", "topic"]
    try:
        rate = subprocess.run([*cli, "hz", "/mixed", "--window", "3", "--json", str(tmp_path / "hz.json")],
                              capture_output=True, text=True, timeout=90)
        assert rate.returncode == 0, rate.stderr
        summary = json.loads((tmp_path / "hz.json").read_text())
        assert 10.0 < summary["rate_hz"] < 30.0, summary
        other = ({"std_msgs/msg/Int32", "std_msgs/msg/String"} - {summary["type"]}).pop()
        assert "/mixed is published with 2 message types" in rate.stderr and f"not those of {other} (1)" in \
            rate.stderr, rate.stderr

        echo = subprocess.Popen([*cli, "echo", "/mixed"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = echo.stdout.readline()   # then the reader goes away, as `| head -n 1` does
        echo.stdout.close()
        err = echo.communicate(timeout=30)[1]
        assert first.startswith("data:") and echo.returncode == 0 and "Broken pipe" not in err, (first, err)

        hz = subprocess.Popen([*cli, "hz", "/mixed", "--window", "120", "--json", str(tmp_path / "cut.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        lines = []
        while not any(line.startswith("measuring /mixed") for line in lines):
            lines.append(hz.stderr.readline())
            assert lines[-1], "".join(lines)   # ended before measuring
        spin_s = 2.0
        time.sleep(spin_s)
        hz.send_signal(signal.SIGINT)
        out, err = hz.communicate(timeout=30)
        assert hz.returncode == 130 and "Hz over" in out and "Ctrl-C: measured over" in err, (out, err)
        cut = json.loads((tmp_path / "cut.json").read_text())
        assert spin_s <= cut["window_s"] < 60 and cut["messages"] >= 10, cut
    finally:
        stop_processes(procs)
