"""Several robots on one ROS_DOMAIN_ID, each under a namespace of its own, as real processes over DDS.

1. Two simulated robots, `memnav launch launch/sim.launch.yaml namespace:=robot1` and `namespace:=robot2`, run
   at the same time on one domain; each robot's episode takes exactly the decisions of the in-process
   `memnav eval` on that episode (lock-step), which it could not if either stack heard the other's topics.
2. The shell commands find a namespaced robot with `--namespace`: `memnav goal capture --namespace robot1` saves
   its view (NAME.json names the full topic), and `memnav goal send --namespace robot1 --wait` drives it to a
   STOP, here against the simulator in lock-step (a goal sent from outside while the bridge waits on its frame
   is decided on that frame).
3. A namespace that is not one is refused before any ROS work.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

import torch  # noqa: E402
from conftest import isolated_ros_env, make_tiny_dataset, run_memnav, start_sim_robot, stop_processes  # noqa: E402

from memnav.cli import main  # noqa: E402
from memnav.core.goal_photo import read_goal_photo  # noqa: E402
from memnav.core.policy import MemoryPolicy, PolicyConfig, save_policy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EPISODE_LINE = re.compile(r"episode (\S+): success (\d) spl ([0-9.]+) soft_spl ([0-9.]+) steps (\d+)")


@pytest.mark.ros
@pytest.mark.slow
def test_two_simulated_robots_in_namespaces_share_a_domain_without_hearing_each_other(tmp_path):
    """Two fused stacks under /robot1 and /robot2 on one domain, each on its own episode, with their cameras 0.15 m
    ahead of the turning axis and looking 10 deg down (`camera_forward_m:=0.15 camera_pitch_deg:=10`: the bridge
    mounts it so and the policy node is told): each drives the trajectory of the in-process `memnav eval
    --camera-forward-m 0.15 --camera-pitch-deg 10`."""
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    torch.manual_seed(3)   # a policy of its own: the comparison must not depend on the shipped checkpoint
    save_policy(MemoryPolicy(PolicyConfig(memory_tokens=24)), tmp_path / "policy_memnav.pt",
                extra={"variant": "memnav", "memory": "scene_graph"})
    env = isolated_ros_env(103)
    launches = {}
    for i, robot in enumerate(("robot1", "robot2")):   # one domain, two stacks, each on its own episode
        launches[robot] = subprocess.Popen(
            [sys.executable, "-m", "memnav.cli", "launch", str(ROOT / "launch" / "sim.launch.yaml"),
             f"namespace:={robot}", "fused:=true", "episodes:=1", f"first_episode:={i}", "max_steps:=40",
             "camera_forward_m:=0.15", "camera_pitch_deg:=10.0",
             f"data:={data}", f"policy_dir:={tmp_path}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        outs = {robot: p.communicate(timeout=300)[0] for robot, p in launches.items()}
    finally:
        stop_processes(launches.values())
    over_dds = {}
    for robot, out in outs.items():
        assert launches[robot].returncode == 0, out[-3000:]
        found = EPISODE_LINE.findall(out)
        assert len(found) == 1, out[-3000:]
        over_dds[robot] = found[0]
    def in_process_eval(*extra: str) -> dict:
        res_path = tmp_path / "eval.json"
        assert main(["eval", "--agent", "memnav", "--data", str(data), "--episodes", "2", "--max-steps", "40",
                     "--policy-dir", str(tmp_path), "--json", str(res_path), "--no-progress", "--camera-forward-m",
                     "0.15", "--camera-pitch-deg", "10", *extra]) == 0
        return json.loads(res_path.read_text())

    body = in_process_eval()
    assert (body["camera_forward_m"], body["camera_pitch_deg"], body["camera_mount_told"]) == (0.15, 10.0, True)
    in_process = body["per_episode"]
    # the mount matters to these episodes: an agent not told drives elsewhere, so the match below shows the policy
    # nodes were told
    untold = in_process_eval("--camera-mount-untold")["per_episode"]
    assert [round(e["soft_spl"], 4) for e in untold] != [round(e["soft_spl"], 4) for e in in_process]
    for robot, e in zip(("robot1", "robot2"), in_process):
        ep, succ, spl, soft, steps = over_dds[robot]
        assert ep == str(e["episode_id"]), (robot, over_dds)
        # the same trajectory as the in-process run: same steps and SoftSPL (which depends on every position)
        assert (int(succ), int(steps)) == (e["success"], e["steps"]), robot
        assert float(spl) == pytest.approx(e["spl"], abs=1e-3) and float(soft) == pytest.approx(e["soft_spl"],
                                                                                             abs=1e-4), robot


@pytest.mark.ros
@pytest.mark.slow
def test_goal_commands_find_a_namespaced_robot_and_a_lockstep_simulator_drives_a_sent_goal(tmp_path):
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    env = isolated_ros_env(107)
    # lock-step, the bridge's own goal moved off memnav/goal_* (relative: /robot1/sim/goal_image), so the only goal
    # the policy node gets is the one sent
    # the policy node takes the camera's field of view from the bridge's camera_info, as the robot profile does
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=True, ros_args=["-r", "__ns:=/robot1"],
                                    bridge_args=["-p", "auto_next:=true"], policy_args=["-p", "camera_hfov_deg:=0.0"])

    try:
        # the bridge holds its start frame (re-sent each second) until an action comes: nothing moves the robot
        cap = run_memnav(["goal", "capture", str(tmp_path / "start"), "--namespace", "robot1", "--color-topic",
                          "camera/color/image_raw", "--depth-topic", "camera/depth/image_raw", "--timeout", "60"],
                         env, 120)
        assert cap.returncode == 0, cap.stderr + report()
        goal = read_goal_photo(tmp_path / "start.png")
        assert goal.meta["color_topic"] == "/robot1/camera/color/image_raw"
        assert goal.meta["depth_topic"] == "/robot1/camera/depth/image_raw"
        assert goal.meta["odom_topic"] == "/robot1/odom" and goal.meta["odom_pose"] is not None
        # the relative remap applied under the namespace: the policy node never got the bridge's own goal
        status = run_memnav(["status", "--namespace", "robot1", "--json", str(tmp_path / "status.json")], env, 60)
        assert status.returncode == 0, status.stdout + report()
        body = json.loads((tmp_path / "status.json").read_text())
        assert body["namespace"] == "/robot1" and body["nodes"] == ["policy_node", "sim_bridge_node"]
        assert body["goal_status"] is None and "goal: none since the policy node started" in status.stdout
        # sent after the frame it shows: in lock-step the policy node decides on the frame the bridge waits on
        sent = run_memnav(["goal", "send", str(tmp_path / "start.png"), "--namespace", "/robot1", "--wait",
                           "--timeout", "120", "--json", str(tmp_path / "sent.json"), "--no-progress"], env, 180)
        assert sent.returncode == 0, sent.stdout + sent.stderr + report()
        result = json.loads((tmp_path / "sent.json").read_text())
        assert result["stopped"] and result["reached"] and result["policy_state"]["action"] == "STOP"
        assert result["actions"] >= 1 and result["distance_to_capture_m"] < 0.5, result
        assert "episode" in (tmp_path / "bridge.log").read_text()   # the STOP ended the bridge's episode
        assert "camera: 90.0 deg horizontal field of view (128 px wide" in (tmp_path / "policy.log").read_text()
    finally:
        stop_processes(procs)


def test_a_bad_namespace_is_refused_before_any_ros_work(tmp_path, capsys):
    photo = tmp_path / "never.png"
    for bad in ("1robot", "robot 1", "robot1//arm", "/"):
        assert main(["goal", "capture", str(photo), "--namespace", bad]) == 2
        err = capsys.readouterr().err
        assert "--namespace must be a ROS namespace" in err and repr(bad) in err, err
    assert not photo.exists() and not photo.with_suffix(".json").exists()
    assert main(["estop", "status", "--namespace", "robot-1"]) == 2
    assert "--namespace" in capsys.readouterr().err
