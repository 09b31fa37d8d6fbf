"""`memnav goal capture|send` against the real nodes, as real processes over DDS.

1. The simulator bridge in real time stands in for the robot (its own goal moved off /memnav/goal_*, so the
   policy node's only goal is the one sent): `memnav goal capture` saves the robot's view at its start, which
   is the simulator's render of that pose, with the start's odometry; `memnav goal send --wait` sends that photo
   to policy_node, which takes it as an RGB-D goal, drives, and calls STOP (it stands where the photo was taken),
   which ends the command with status 0 and says it stopped within 0.5 m of the capture's odometry pose; a tour
   of two goals ends at two STOPs.
2. Bad options and files are refused before any ROS work, and an earlier capture is left as it was.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import file_sha256, isolated_ros_env, make_tiny_dataset, run_memnav, stop_processes  # noqa: E402

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
    procs = [
        subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args", "-p", f"data:={data}",
                          "-p", "split:=test", "-p", "lockstep:=false", "-p", "rate_hz:=10.0",
                          "-p", "auto_next:=true", "-r", "/memnav/goal_image:=/sim/goal_image",
                          "-r", "/memnav/goal_depth:=/sim/goal_depth"],
                         stdout=logs["bridge"].open("w"), stderr=subprocess.STDOUT, env=env),
        subprocess.Popen([sys.executable, "-m", "memnav.ros.policy_node", "--ros-args", "-p", "lockstep:=false",
                          "-p", "max_steps:=12", "-p", "action_duration_s:=0.25", "-p", "collision_fraction:=0.4"],
                         stdout=logs["policy"].open("w"), stderr=subprocess.STDOUT, env=env)]

    def report() -> str:
        return "\n".join(f"--- {name}\n{path.read_text()[-2000:]}" for name, path in logs.items())

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
    finally:
        stop_processes(procs)


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
        (["goal", "send", str(photo), "--wait", "--json", str(tmp_path)], "--json"),
        (["goal", "send", str(photo), str(photo)], "2 photos: several goals go one after another"),
        (["goal", "send", str(photo), str(photo), "--wait", "--depth", str(photo)], "names the depth of one photo"),
        (["goal", "send", str(photo), str(tmp_path / "gone.png"), "--wait"], "gone.png does not exist"),
        (["goal", "capture", str(photo)], "g.depth.png exist already; a goal photo is not overwritten"),
        (["goal", "capture", str(tmp_path / "new.png"), "--timeout", "-1"], "--timeout must be"),
        (["goal", "capture", str(tmp_path / "new.png"), "--sync-tolerance", "inf"], "--sync-tolerance must be"),
        (["goal", "capture", str(photo / "below.png")], "is a file, not a folder"),
    ]
    for args, expected in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert expected in err, (args, err)
    assert {p.name: file_sha256(p) for p in tmp_path.iterdir()} == before
