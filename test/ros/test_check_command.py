"""`memnav check` against the simulator bridge in real time (a real process over DDS), standing in for a robot."""
import json
import re
import signal
import subprocess
import sys

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import (  # noqa: E402
    SPIN_UNTIL_STOPPED,
    isolated_ros_env,
    make_tiny_dataset,
    run_memnav,
    spin_until,
    stop_processes,
)

from memnav.cli import main  # noqa: E402


@pytest.mark.ros
@pytest.mark.slow
def test_check_passes_the_simulated_robot_and_fails_topics_nobody_publishes(tmp_path):
    """The simulator bridge's camera 0.9 m up, looking 15 deg down: told so, every finding is OK, the floor in the
    depth image giving the camera's height and pitch; with the robot profile's 1.25 m and 0 deg, the check warns
    naming the values to set; topics nobody publishes FAIL."""
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=1)
    env = isolated_ros_env(101)
    log = tmp_path / "bridge.log"
    bridge = subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args", "-p",
                               f"data:={data}", "-p", "split:=test", "-p", "lockstep:=false", "-p", "rate_hz:=10.0",
                               "-p", "auto_next:=false", "-p", "sim.sensor_height_m:=0.9",
                               "-p", "sim.sensor_pitch_deg:=15.0"], stdout=log.open("w"), stderr=subprocess.STDOUT,
                              env=env)
    try:
        good = run_memnav(["check", "--color-topic", "/camera/color/image_raw", "--depth-topic",
                           "/camera/depth/image_raw", "--camera-info-topic", "camera/color/camera_info",
                           "--duration", "4", "--json", str(tmp_path / "ok.json"), "--camera-height-m", "0.9",
                           "--camera-pitch-deg", "15"], env, 120)
        assert good.returncode == 0, good.stdout + good.stderr + log.read_text()
        res = json.loads((tmp_path / "ok.json").read_text())
        assert res["ok"] is True and all(f["level"] == "OK" for f in res["findings"]), \
            [f for f in res["findings"] if f["level"] != "OK"]
        rows = {r["kind"]: r for r in res["topics"]}
        assert rows["color"]["rate_hz"] == pytest.approx(10.0, abs=1.5) and rows["color"]["encoding"] == "rgb8"
        assert rows["depth"]["encoding"] == "32FC1" and (rows["depth"]["width"], rows["depth"]["height"]) == (
            rows["color"]["width"], rows["color"]["height"])
        assert 0.2 < rows["depth"]["median_depth_m"] < 10.0 and rows["odom"]["messages"] > 0
        assert res["cmd_vel"]["subscribers"] >= 1   # the bridge stands in for the base
        info = res["camera_info"]   # the simulator's camera: 90 deg, 128 px
        assert info["topic"] == "/camera/color/camera_info" and info["hfov_deg"] == pytest.approx(90.0, abs=0.01)
        assert "OK    /camera/color/camera_info: 90.0 deg horizontal field of view (128x128" in good.stdout
        assert "the encoder models/encoder_fov60.pt was trained on 60-90 deg fields of view" in good.stdout
        assert "memnav can run on these inputs" in good.stdout
        mount = re.search(r"OK    /camera/depth/image_raw: the floor in view puts the camera ([0-9.]+) m above it, "
                          r"looking ([0-9.-]+) deg down", good.stdout)
        assert mount and float(mount[1]) == pytest.approx(0.9, abs=0.03) and float(mount[2]) == pytest.approx(
            15.0, abs=1.0), good.stdout
        # the robot profile's camera_height_m 1.25 and camera_pitch_deg 0: a warning naming what to set
        level = run_memnav(["check", "--color-topic", "/camera/color/image_raw", "--depth-topic",
                            "/camera/depth/image_raw", "--camera-info-topic", "camera/color/camera_info",
                            "--duration", "2"], env, 120)
        assert level.returncode == 0, level.stdout + level.stderr
        assert re.search(r"WARN  /camera/depth/image_raw: .*: set camera_height_m 0\.9\d \(set: 1\.25\) and "
                         r"camera_pitch_deg 1[45]\.\d \(set: 0\) for policy_node and safety_node", level.stdout), \
            level.stdout
        # the robot profile's RealSense topics: nobody publishes them here, and the check names what is published
        bad = run_memnav(["check", "--duration", "2"], env, 120)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert "FAIL  /camera/camera/color/image_raw: no publisher of the colour image topic" in bad.stdout
        assert "published topics of its type: /camera/color/image_raw, /camera/depth/image_raw" in bad.stdout, \
            bad.stdout
        assert "FAIL: memnav cannot run on these inputs" in bad.stdout
        assert "FAIL  /camera/camera/color/camera_info: no camera_info" in bad.stdout
    finally:
        stop_processes([bridge])


def test_bad_check_options_are_refused(tmp_path, capsys):
    assert main(["check", "--duration", "0"]) == 2
    assert "--duration must be a number of seconds > 0" in capsys.readouterr().err
    assert main(["check", "--encoder", str(tmp_path / "missing.pt")]) == 2
    assert "parameter '--encoder': model file" in capsys.readouterr().err
    assert main(["check", "--json", str(tmp_path)]) == 2
    assert "--json" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["check"], ["status"], ["estop"], ["topic", "echo"], ["topic", "list"],
                                     ["param", "set"], ["goal", "capture"], ["goal", "send"], ["goal", "cancel"]])
def test_the_shell_commands_help_says_what_their_exit_statuses_mean(command, capsys):
    """Their --help said nothing of exit statuses, which scripts go by (the module docstrings did)."""
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 " in out and " 2 " in out.split("Exit status:")[1] and "130 Ctrl-C" in out, out


@pytest.mark.ros
@pytest.mark.slow
def test_status_watch_interrupted_before_its_first_report_says_so(tmp_path):
    """Ctrl-C during `memnav status --watch S`'s first listen ended it silently with status 1 ("no policy node"),
    as if it had looked."""
    env = isolated_ros_env(143)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_status_watcher")
    status = subprocess.Popen([sys.executable, "-m", "memnav.cli", "status", "--watch", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:   # its node is up: it is listening (at least 5 s with no policy node) when the signal comes
        assert spin_until(node, lambda: "memnav_status" in node.get_node_names(), 60)
        status.send_signal(signal.SIGINT)
        out, err = status.communicate(timeout=30)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if status.poll() is None:
            status.kill()
            status.communicate()
    assert status.returncode == 130 and "memnav status: interrupted" in err and out == "", (out, err)


@pytest.mark.parametrize("options, named", [
    (["--camera-height-m", "nan"], "--camera-height-m must be a height > 0 m"),
    (["--camera-height-m", "-1"], "--camera-height-m must be a height > 0 m"),
    (["--camera-pitch-deg", "nan"], "--camera-pitch-deg must be a finite pitch"),
])
def test_check_refuses_a_camera_mount_the_policy_node_would_refuse(options, named, monkeypatch, capsys):
    """A NaN height or pitch is never farther than the tolerance from the floor fit: the mount came out OK ("as
    camera_height_m nan ... say"). Refused by name before listening."""
    from memnav.ros import check_command

    def listened(*_args):
        raise AssertionError("listened despite a bad option")

    monkeypatch.setattr(check_command, "listen", listened)
    assert main(["check", *options]) == 2
    assert f"memnav check: error: {named}" in capsys.readouterr().err


def test_check_json_is_strict_json_when_camera_info_holds_nan(tmp_path, capsys):
    """A camera_info whose K[0] is NaN (a broken driver) went into --json as a bare NaN, which strict readers
    refuse."""
    import argparse

    from memnav.core.sensor_check import StreamLog
    from memnav.ros.check_command import report

    out = tmp_path / "check.json"
    logs = tuple(StreamLog(topic, kind) for topic, kind in (("/c", "color"), ("/d", "depth"), ("/o", "odom")))
    camera = {"topic": "/ci", "width": 640, "height": 480, "fx_px": float("nan"), "hfov_deg": None}
    report(argparse.Namespace(duration=1.0, json=out), logs, {"topic": "/cmd_vel"}, camera, [], "")

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    body = json.loads(out.read_text(), parse_constant=refuse)
    assert body["camera_info"]["fx_px"] is None and body["camera_info"]["width"] == 640
    assert [p.name for p in tmp_path.iterdir()] == ["check.json"]   # written whole: no temporary left


# a robot whose inputs look alive at first: colour and depth at 20 Hz, odometry that stops 1.5 s after `memnav
# check` subscribes it (a driver that crashed), depth in millimetres in a 32FC1 image, and a camera_info whose K is
# the calibration of twice the image size
BROKEN_ROBOT = """
import sys
import time

import numpy as np
import rclpy
from nav_msgs.msg import Odometry
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image

from memnav.core.types import Pose2D
from memnav.ros import conversions as conv

rclpy.init(args=sys.argv)
node = rclpy.create_node("broken_robot")
pubs = {name: node.create_publisher(kind, name, qos_profile_sensor_data) for name, kind in (
    ("camera/camera/color/image_raw", Image), ("camera/camera/aligned_depth_to_color/image_raw", Image),
    ("odom", Odometry), ("camera/camera/color/camera_info", CameraInfo))}
heard = []


def tick():
    now = node.get_clock().now().to_msg()
    pubs["camera/camera/color/image_raw"].publish(conv.rgb_to_image(np.full((48, 64, 3), 90, np.uint8), now))
    pubs["camera/camera/aligned_depth_to_color/image_raw"].publish(
        conv.depth_to_image(np.full((48, 64), 2000.0, np.float32), now))   # 2 m, written in millimetres
    info = CameraInfo(width=64, height=48, k=[64.0, 0.0, 64.0, 0.0, 64.0, 48.0, 0.0, 0.0, 1.0])   # K of 128x96
    info.header.stamp = now
    pubs["camera/camera/color/camera_info"].publish(info)
    if not heard and pubs["odom"].get_subscription_count():
        heard.append(time.monotonic())
    if not heard or time.monotonic() - heard[0] < 1.5:
        pubs["odom"].publish(conv.pose_to_odometry(Pose2D(0.0, 0.0, 0.0), now))


node.create_timer(0.05, tick)
""" + SPIN_UNTIL_STOPPED


@pytest.mark.ros
@pytest.mark.slow
def test_check_fails_a_stream_that_stops_depth_in_the_wrong_units_and_a_k_of_another_size(tmp_path):
    """Three inputs `memnav check` passed with status 0 ("memnav can run on these inputs"): odometry that stopped
    during the listening (its messages until then were regular: OK at 20 Hz, though the safety node would stop the
    robot), a 32FC1 depth in millimetres (a warning only, though every surface reads 1000 times too far), and a
    camera_info whose principal point lies at the image's edge (K of another resolution: the field of view taken
    from it is wrong). Under --namespace, as a robot launched with namespace:=robot1."""
    env = isolated_ros_env(167)
    robot = subprocess.Popen([sys.executable, "-c", BROKEN_ROBOT, "--ros-args", "-r", "__ns:=/robot1"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        res = run_memnav(["check", "--namespace", "robot1", "--duration", "4", "--json", str(tmp_path / "c.json")],
                         env, 120)
    finally:
        out = stop_processes([robot])[0]
    assert res.returncode == 1, res.stdout + res.stderr + out[-2000:]
    body = json.loads((tmp_path / "c.json").read_text())
    assert body["ok"] is False
    failed = {f["topic"]: f["text"] for f in body["findings"] if f["level"] == "FAIL"}
    assert set(failed) == {"/robot1/odom", "/robot1/camera/camera/aligned_depth_to_color/image_raw",
                           "/robot1/camera/camera/color/camera_info"}, body["findings"]
    assert re.match(r"no message in the last [0-9.]+ s of the 4 s listened: the stream stopped", failed["/robot1/odom"])
    odom = next(r for r in body["topics"] if r["kind"] == "odom")
    assert odom["messages"] > 0 and odom["silent_end_s"] > 1.5, odom
    assert "median depth 2e+03 m in 32FC1: millimetres in a 32FC1 image" in failed[
        "/robot1/camera/camera/aligned_depth_to_color/image_raw"]
    assert failed["/robot1/camera/camera/color/camera_info"].startswith(
        "K does not fit the 64x48 image: its principal point (64, 48) px is far from the image centre (32, 24)")
    assert (body["camera_info"]["cx_px"], body["camera_info"]["cy_px"]) == (64.0, 48.0)
    colour = next(f for f in body["findings"] if f["topic"] == "/robot1/camera/camera/color/image_raw")
    assert colour["level"] == "OK"   # the streams that kept going still pass
