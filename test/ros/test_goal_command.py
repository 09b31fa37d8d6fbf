"""`memnav goal capture|send` against the real nodes, as real processes over DDS.

1. The simulator bridge in real time stands in for the robot (its own goal moved off /memnav/goal_*, so the
   policy node's only goal is the one sent): `memnav goal capture` saves the robot's view at its start, which
   is the simulator's render of that pose, with the start's odometry; `memnav goal send --wait` sends that photo
   to policy_node, which takes it as an RGB-D goal, drives, and calls STOP (it stands where the photo was taken),
   which ends the command with status 0 and says it stopped within 0.5 m of the capture's odometry pose; a tour
   of two goals ends at two STOPs.
2. `memnav goal cancel` gives up the goal being worked on: the robot stops at once and stays, and a
   `memnav goal send --wait` following that goal ends (status 1, ended by "cancelled"); Ctrl-C of `goal send
   --wait` cancels its goal the same way (status 130); with no goal, cancel says so (status 1). `memnav status`
   names the running nodes and how the goal ended.
3. Bad options and files are refused before any ROS work, and an earlier capture is left as it was.
4. `memnav goal send` (no --wait) waits for the policy node itself: a bag recorder already subscribing the goal
   topics is not taken for it (the goal, latched, would leave with the command before the policy node got it).
"""
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import (  # noqa: E402
    SPIN_UNTIL_STOPPED,
    close_ros_test,
    far_goal_photo,
    file_sha256,
    isolated_ros_env,
    make_tiny_dataset,
    robot_odom_pose,
    run_memnav,
    spin_until,
    start_policy_node,
    start_sim_robot,
    stop_processes,
    wait_for_text,
)

from memnav.cli import main  # noqa: E402
from memnav.core.goal_photo import GoalPhoto, read_goal_photo, write_goal_photo  # noqa: E402

SIM_COLOR, SIM_DEPTH = "/camera/color/image_raw", "/camera/depth/image_raw"


@pytest.mark.ros
@pytest.mark.slow
def test_capture_the_robots_view_then_send_it_and_the_policy_node_stops_there(tmp_path):
    from memnav.core.frames import habitat_to_map
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.episodes import load_episodes

    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    env = isolated_ros_env(83)
    logs = {name: tmp_path / f"{name}.log" for name in ("bridge", "policy")}
    kept = tmp_path / "goal_state.npz"   # kept while a goal is worked on (test_goal_resume), gone at its STOP
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False, bridge_args=["-p", "auto_next:=true"],
                                    policy_args=["-p", "max_steps:=12", "-p", f"goal_state_file:={kept}"])

    try:
        # 1. capture: the robot's view now (it stands at the episode start; nothing drives it without a goal)
        cap = run_memnav(["goal", "capture", str(tmp_path / "goals" / "start"), "--color-topic", SIM_COLOR,
                    "--depth-topic", SIM_DEPTH, "--timeout", "60"], env, 120)
        assert cap.returncode == 0, cap.stderr + report()
        goal = read_goal_photo(tmp_path / "goals" / "start.png")
        episode = load_episodes(data, "test")[0]
        seen = EmbeddedSimulator(config=SimConfig()).reset(episode)
        np.testing.assert_array_equal(goal.rgb, seen.rgb)
        np.testing.assert_allclose(goal.depth_m, np.round(seen.depth * 1000) / 1000, atol=1e-6)
        odom = goal.meta["odom_pose"]
        start_xy = habitat_to_map(np.asarray(episode.start_position))[:2]
        assert (odom["x_m"], odom["y_m"]) == pytest.approx(tuple(start_xy), abs=1e-3)
        assert goal.meta["color_topic"] == SIM_COLOR and goal.meta["depth_stamp_ns"] == goal.meta["stamp_ns"]
        assert "wrote" in cap.stdout and "depth" in cap.stdout

        # 2. send it: policy_node takes it as an RGB-D goal, acts on the camera and stops (it is already there),
        # and the command says how far from the capture's odometry pose the robot stopped
        start = str(tmp_path / "goals" / "start.png")
        sent = run_memnav(["goal", "send", start, "--wait", "--timeout", "120", "--json", str(tmp_path / "sent.json"),
                           "--no-progress"], env, 180)
        assert sent.returncode == 0, sent.stdout + sent.stderr + report()
        result = json.loads((tmp_path / "sent.json").read_text())
        assert result["stopped"] is True and result["depth"] is True and 1 <= result["actions"] <= 12
        assert result["policy_state"]["action"] == "STOP" and result["goals_stopped"] == 1 and result["reached"]
        assert result["distance_to_capture_m"] < 0.5, result   # it stopped where the photo was taken
        assert "STOP after" in sent.stdout and "from where the photo was taken (odometry)" in sent.stdout
        assert "RGB-D" in sent.stderr
        policy_log = logs["policy"].read_text()
        assert "new goal image" in policy_log and "RGB-D" in policy_log, report()
        assert not kept.exists()
        # 3. a tour of two goals: the bridge has moved on to its next episode (another start), so each is searched
        # for and ends at a STOP, the robot's own or, in real time, the one policy_node makes its 12th action
        # (max_steps: status 1 then); each is sent after the STOP before it
        tour = run_memnav(["goal", "send", start, start, "--wait", "--timeout", "120", "--json",
                           str(tmp_path / "tour.json"), "--no-progress"], env, 300)
        result = json.loads((tmp_path / "tour.json").read_text())
        assert result["goals_stopped"] == 2 and len(result["goals"]) == 2, tour.stdout + tour.stderr + report()
        first, second = result["goals"]
        assert first["goal_stamp_ns"] < second["goal_stamp_ns"]
        assert all(1 <= g["actions"] <= 12 and g["reached"] == (g["ended_by"] != "budget") for g in result["goals"])
        assert tour.returncode == (0 if result["all_reached"] else 1), tour.stdout + tour.stderr
        assert f"{result['goals_reached']} of 2 goals ended at the robot's own STOP" in tour.stdout
        assert not kept.exists()   # the STOP at the action budget ends a goal too
    finally:
        stop_processes(procs)


@pytest.mark.ros
@pytest.mark.slow
def test_cancel_stops_the_robot_and_ctrl_c_of_send_wait_cancels_its_goal(tmp_path):
    data, goal, _ = far_goal_photo(tmp_path)   # the robot has to search
    env = isolated_ros_env(113)
    logs = {name: tmp_path / f"{name}.log" for name in ("bridge", "policy")}
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False, policy_args=["-p", "max_steps:=400"])

    def send_and_drive(json_path):
        """`goal send --wait` of the far goal, returned once the policy node has acted on it for a few seconds."""
        sending = subprocess.Popen([sys.executable, "-m", "memnav.cli", "goal", "send", str(goal), "--wait",
                                    "--json", str(json_path), "--no-progress"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 90
        started = logs["policy"].read_text().count("new goal image")
        while logs["policy"].read_text().count("new goal image") <= started and time.monotonic() < deadline:
            if sending.poll() is not None:
                break
            time.sleep(0.5)
        time.sleep(4.0)   # about 16 actions of 0.25 s: it is driving
        return sending

    try:
        idle = run_memnav(["goal", "cancel", "--timeout", "60"], env, 120)   # nothing sent yet
        assert idle.returncode == 1 and "no goal is being worked on: nothing to cancel" in idle.stderr, \
            idle.stderr + report()
        # 1. cancelled from another shell
        sending = send_and_drive(tmp_path / "first.json")
        assert sending.poll() is None, sending.communicate()[1] + report()
        cancelled = run_memnav(["goal", "cancel"], env, 60)
        assert cancelled.returncode == 0 and "goal cancelled" in cancelled.stderr, cancelled.stderr + report()
        out, err = sending.communicate(timeout=30)
        assert sending.returncode == 1, err
        result = json.loads((tmp_path / "first.json").read_text())
        assert result["ended_by"] == "cancelled" and not result["stopped"] and not result["reached"], result
        assert result["actions"] >= 2 and "the goal was cancelled after" in err
        # the robot stands: its odometry does not move over two seconds
        before = robot_odom_pose(tmp_path, env, "after_cancel_1")
        time.sleep(2.0)
        assert robot_odom_pose(tmp_path, env, "after_cancel_2") == pytest.approx(before, abs=1e-6)
        assert "goal cancelled after" in logs["policy"].read_text()
        # memnav status: the nodes that run, and the goal's end
        status = run_memnav(["status", "--json", str(tmp_path / "status.json")], env, 60)
        assert status.returncode == 0, status.stdout + status.stderr
        body = json.loads((tmp_path / "status.json").read_text())
        assert body["nodes"] == ["policy_node", "sim_bridge_node"] and "safety_node" in body["not_running"], \
            status.stdout + status.stderr
        assert body["goal_status"]["status"] == "cancelled" and body["goal_status"]["actions"] == result["actions"]
        assert "goal: ended: cancelled" in status.stdout
        # the policy node's /diagnostics status, as status heard it
        assert "waiting for a goal (the last one: cancelled after" in body["diagnostics"]["policy_node"]["message"], \
            body["diagnostics"]
        assert body["diagnostics"]["sim_bridge_node"]["message"].startswith("episode 1 of 3"), body["diagnostics"]
        # --watch: a report every second until Ctrl-C, which ends it with the last report's status
        watching = subprocess.Popen([sys.executable, "-m", "memnav.cli", "status", "--watch", "1", "--listen", "1",
                                     "--json", str(tmp_path / "watch.json")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while not (tmp_path / "watch.json").exists() and time.monotonic() < deadline and watching.poll() is None:
            time.sleep(0.2)   # the first report
        time.sleep(2.5)       # two or three more
        watching.send_signal(signal.SIGINT)
        out, err = watching.communicate(timeout=30)
        assert watching.returncode == 0, out + err
        assert out.count("memnav status of namespace /") >= 2 and out.count("\n--- ") >= 1, out
        assert json.loads((tmp_path / "watch.json").read_text())["goal_status"]["status"] == "cancelled"
        elsewhere = run_memnav(["status", "--namespace", "robot9", "--listen", "1"], env, 60)
        assert elsewhere.returncode == 1 and "a policy node runs in /: try no --namespace" in elsewhere.stdout
        # 2. Ctrl-C of goal send --wait cancels its goal
        sending = send_and_drive(tmp_path / "second.json")
        assert sending.poll() is None, sending.communicate()[1] + report()
        sending.send_signal(signal.SIGINT)
        out, err = sending.communicate(timeout=30)
        assert sending.returncode == 130, err + report()
        assert "Ctrl-C: cancelling the goal" in err and "the goal was cancelled after" in err
        result = json.loads((tmp_path / "second.json").read_text())
        assert result["ended_by"] == "cancelled" and result["interrupted"] is True, result
        again = run_memnav(["goal", "cancel"], env, 60)
        assert again.returncode == 1 and "nothing to cancel" in again.stderr   # the policy node has no goal left
    finally:
        stop_processes(procs)


@pytest.mark.ros
@pytest.mark.slow
def test_without_camera_info_a_goal_is_held_until_the_cameras_field_of_view_is_known(tmp_path):
    # the robot profile's camera_hfov_deg 0: the field of view comes from camera_info; the bridge's is moved away,
    # so the policy node holds a goal (and says why) until this test publishes one
    import math

    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo

    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    env = isolated_ros_env(127)
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False,
                                    bridge_args=["-r", "camera/color/camera_info:=sim/camera_info"],
                                    policy_args=["-p", "camera_hfov_deg:=0.0"])
    photo = tmp_path / "start.png"
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_camera_info")
    diagnosed = []
    node.create_subscription(DiagnosticArray, "/diagnostics",
                             lambda m: diagnosed.extend(d for d in m.status if d.name == "/policy_node"), 50)

    def policy_diagnosis(level: int, text: str) -> bool:
        """Within 10 s, /diagnostics says the policy node is at `level` (0 OK, 1 WARN, 2 ERROR) with `text`."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(d.level == bytes([level]) and text in d.message for d in diagnosed[-2:]):
                return True
            rclpy.spin_once(node, timeout_sec=0.2)
        return False

    try:
        cap = run_memnav(["goal", "capture", str(photo), "--color-topic", SIM_COLOR, "--depth-topic", SIM_DEPTH,
                          "--timeout", "60"], env, 120)
        assert cap.returncode == 0, cap.stderr + report()
        sent = run_memnav(["goal", "send", str(photo)], env, 120)   # taken (acknowledged), not started
        assert sent.returncode == 0, sent.stderr + report()
        time.sleep(6.0)
        log = (tmp_path / "policy.log").read_text()
        assert "goal held until the camera's field of view is known: no camera_info on /camera/color/camera_info" \
            in log and "new goal image" not in log, report()
        status = run_memnav(["status", "--json", str(tmp_path / "held.json")], env, 60)
        assert json.loads((tmp_path / "held.json").read_text())["goal_status"] is None, status.stdout
        # /diagnostics: an error, naming the missing camera_info
        assert policy_diagnosis(2, "no camera_info: the camera's field of view is unknown"), diagnosed[-2:]
        # a 60 deg camera of 128 px: fx = 64 / tan(30 deg)
        info = CameraInfo(width=128, height=128)
        info.k = [64.0 / math.tan(math.radians(30.0)), 0.0, 64.0, 0.0, 110.85, 64.0, 0.0, 0.0, 1.0]
        pub = node.create_publisher(CameraInfo, "/camera/color/camera_info", qos_profile_sensor_data)
        deadline = time.monotonic() + 60
        while "new goal image" not in (tmp_path / "policy.log").read_text() and time.monotonic() < deadline:
            pub.publish(info)
            rclpy.spin_once(node, timeout_sec=0.2)
        log = (tmp_path / "policy.log").read_text()
        assert "camera: 60.0 deg horizontal field of view (128 px wide" in log and "new goal image" in log, report()
        # the shipped encoder was trained on the simulator's 90 deg only: the node says so, and what to use instead
        assert "60.0 deg field of view is narrower than the 90 deg this encoder was trained on" in log, report()
        assert "models/encoder_fov60.pt" in log
        # /diagnostics: working on the goal now, with the narrower camera as a warning
        assert policy_diagnosis(1, "60.0 deg field of view is narrower than the 90 deg"), diagnosed[-2:]
        values = {v.key: v.value for v in diagnosed[-1].values}
        assert values["camera_hfov_deg"] == "60.0" and values["goal"] in ("active", "stopped", "budget"), values
        assert values["doing"].startswith(("working on a goal", "waiting for a goal (the last one")), values
    finally:
        close_ros_test(node, procs)


@pytest.mark.ros
@pytest.mark.slow
def test_a_16_9_encoder_given_a_4_3_camera_warns_of_the_image_shape(tmp_path):
    # the policy node alone, running the encoder trained on 16:9 views; camera_info says 640 x 480 at 69 deg. Its
    # stop calibration is the default encoder's: a miscalibrated goal belief, named at start by checkpoint hash
    import math

    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo

    env = isolated_ros_env(163)
    log = tmp_path / "policy.log"
    proc = start_policy_node(env, log, lockstep=False, args=[
        "-p", "camera_hfov_deg:=0.0", "-p", "encoder_checkpoint:=models/encoder_69deg_16x9.pt",
        "-p", "calibration:=models/stop_calibration.json"])
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_camera_shape")
    try:
        info = CameraInfo(width=640, height=480)
        fx = 320.0 / math.tan(math.radians(34.5))
        info.k = [fx, 0.0, 320.0, 0.0, fx, 240.0, 0.0, 0.0, 1.0]
        pub = node.create_publisher(CameraInfo, "/camera/color/camera_info", qos_profile_sensor_data)
        deadline = time.monotonic() + 60
        while "camera: 69.0 deg" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            pub.publish(info)
            rclpy.spin_once(node, timeout_sec=0.2)
        text = log.read_text()
        assert "camera: 69.0 deg horizontal field of view (640 px wide" in text, text[-2000:]
        assert "trained on 1.78:1 images and the camera's 640x480 is 1.33:1" in text, text[-2000:]
        assert "models/encoder_fov60.pt" in text
        assert "was fitted on encoder checkpoint models/encoder.pt (sha256 3e58e30a083a), but this node's " \
               "encoder_checkpoint is" in text and "encoder_69deg_16x9.pt (sha256 26e40f3ef30c)" in text, text[-3000:]
        assert "memnav train stop --checkpoint" in text
    finally:
        close_ros_test(node, [proc])


def test_bad_options_and_files_are_refused_before_ros_and_an_earlier_capture_stays(tmp_path, capsys):
    photo = tmp_path / "g.png"
    rgb = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    write_goal_photo(photo, GoalPhoto(rgb, np.ones((32, 32), np.float32)))
    before = {p.name: file_sha256(p) for p in tmp_path.iterdir()}
    cases = [
        (["goal", "send", str(tmp_path / "nowhere.png")], "nowhere.png does not exist"),
        (["goal", "send", str(tmp_path)], "is not a file"),
        (["goal", "send", str(photo), "--timeout", "5"], "--timeout: has effect only with --wait"),
        (["goal", "send", str(photo), "--depth", str(photo), "--no-depth"], "contradicts --no-depth"),
        (["goal", "send", str(photo), "--depth", str(tmp_path / "g.json")], "is not an image OpenCV can read"),
        (["goal", "send", str(photo), "--wait", "--timeout", "nan"], "--timeout must be a number of seconds"),
        (["goal", "send", str(photo), "--match-timeout", "0"], "--match-timeout must be a number of seconds > 0"),
        (["status", "--watch", "-1"], "--watch must be a number of seconds >= 0"),
        (["status", "--listen", "0"], "--listen must be a number of seconds > 0"),
        (["goal", "send", str(photo), "--wait", "--json", str(tmp_path)], "--json"),
        (["goal", "send", str(photo), str(photo)], "2 photos: several goals go one after another"),
        (["goal", "send", str(photo), str(photo), "--wait", "--depth", str(photo)], "names the depth of one photo"),
        (["goal", "send", str(photo), str(tmp_path / "gone.png"), "--wait"], "gone.png does not exist"),
        (["goal", "capture", str(photo)], "g.depth.png exist already; a goal photo is not overwritten"),
        (["goal", "capture", str(tmp_path / "new.png"), "--timeout", "-1"], "--timeout must be"),
        (["goal", "capture", str(tmp_path / "new.png"), "--sync-tolerance", "inf"], "--sync-tolerance must be"),
        (["goal", "capture", str(photo / "below.png")], "is a file, not a folder"),
        (["goal", "cancel", "--timeout", "0"], "--timeout must be a number of seconds > 0"),
    ]
    for args, expected in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert expected in err, (args, err)
    assert {p.name: file_sha256(p) for p in tmp_path.iterdir()} == before


def test_a_captures_depth_file_is_refused_as_the_photo(tmp_path, capsys):
    """`memnav goal send kitchen.depth.png` (a tab completion one step too far) sent the millimetres as a dark grey
    goal picture."""
    photo = tmp_path / "kitchen.png"
    rgb = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    write_goal_photo(photo, GoalPhoto(rgb, np.ones((32, 32), np.float32)))
    assert main(["goal", "send", str(tmp_path / "kitchen.depth.png"), "--match-timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert f"kitchen.depth.png is the depth of a goal photo, not its colour image: send {photo}" in err, err


TEXT_PEER = """
import rclpy
from std_msgs.msg import String

rclpy.init()
node = rclpy.create_node("test_text_peer")
pub = node.create_publisher(String, "/text", 10)
node.create_timer(0.1, lambda: pub.publish(String(data="hello")))
""" + SPIN_UNTIL_STOPPED


@pytest.mark.ros
@pytest.mark.slow
def test_a_stamp_topic_without_a_header_is_refused(tmp_path):
    """`--stamp-topic` naming a topic whose messages have no header ended in an AttributeError traceback from the
    subscription's callback (status 1)."""
    photo = tmp_path / "g.png"
    write_goal_photo(photo, GoalPhoto(np.random.default_rng(2).integers(0, 256, (32, 32, 3), dtype=np.uint8)))
    env = isolated_ros_env(141)
    peer = subprocess.Popen([sys.executable, "-c", TEXT_PEER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    try:
        sent = run_memnav(["goal", "send", str(photo), "--stamp-topic", "/text", "--match-timeout", "20"], env, 90)
    finally:
        stop_processes([peer])
    assert sent.returncode == 2 and "Traceback" not in sent.stderr, sent.stderr
    assert "--stamp-topic /text: its messages (std_msgs/msg/String) have no std_msgs/Header stamp" in sent.stderr


# a bag recorder on the goal topics (reliable, transient local: `ros2 bag record` asks for what every publisher
# offers)
GOAL_RECORDER = """
import rclpy
from sensor_msgs.msg import Image

from memnav.ros.qos import latched_qos

rclpy.init()
node = rclpy.create_node("bag_recorder")
for topic in ("/memnav/goal_image", "/memnav/goal_depth"):
    node.create_subscription(Image, topic, lambda msg, t=topic: print(f"heard {t}", flush=True), latched_qos())
print("recording", flush=True)
""" + SPIN_UNTIL_STOPPED


@pytest.mark.ros
@pytest.mark.slow
def test_send_waits_for_the_policy_node_not_for_a_recorder_of_the_goal_topics(tmp_path):
    """A recorder subscribes the goal topics before the policy node runs: `goal send` ended (status 0, "taken by 1
    subscriber(s)") as soon as the recorder acknowledged the goal, and the policy node started next never got it."""
    import re

    from std_msgs.msg import String

    from memnav.ros.qos import events_qos

    photo = tmp_path / "g.png"
    rng = np.random.default_rng(5)
    write_goal_photo(photo, GoalPhoto(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
                                      np.full((64, 64), 2.0, np.float32)))
    env = isolated_ros_env(67)
    rec_log, log = tmp_path / "recorder.log", tmp_path / "policy.log"
    procs = [subprocess.Popen([sys.executable, "-c", GOAL_RECORDER], stdout=rec_log.open("w"),
                              stderr=subprocess.STDOUT, env=env)]
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_goal_status")
    statuses: list[dict] = []
    node.create_subscription(String, "/memnav/goal_status", lambda msg: statuses.append(json.loads(msg.data)),
                             events_qos())
    try:
        assert wait_for_text(rec_log, "recording", 60), rec_log.read_text()
        sending = subprocess.Popen([sys.executable, "-m", "memnav.cli", "goal", "send", str(photo),
                                    "--match-timeout", "90"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env)
        procs.append(sending)
        # the goal is latched and goes out at once: the recorder has it; a command that takes the recorder for the
        # policy node ends now
        assert wait_for_text(rec_log, "heard /memnav/goal_image", 30), rec_log.read_text()
        time.sleep(1.0)
        ended_early = sending.poll() is not None
        procs.append(start_policy_node(env, log, lockstep=False))
        _, err = sending.communicate(timeout=150)
        assert sending.returncode == 0, err + log.read_text()[-2000:]
        stamp_ns = int(re.search(r"stamp (\d+) ns", err).group(1))
        # the policy node took the goal: it says so on its goal status
        started = spin_until(node, lambda: any(s["goal_stamp_ns"] == stamp_ns for s in statuses), 60)
        assert started, f"no goal status for {stamp_ns} (the command ended before the policy node ran: " \
            f"{ended_early}): {statuses}\n" + err + log.read_text()[-2000:]
        assert not ended_early
        assert [s["status"] for s in statuses if s["goal_stamp_ns"] == stamp_ns][0] == "active", statuses
        assert "RGB-D" in err and "RGB-D" in log.read_text()   # the depth reached it too
        assert rec_log.read_text().count("heard /memnav/goal_") == 2   # the recorder still has both
    finally:
        close_ros_test(node, procs)
