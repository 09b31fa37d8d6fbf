"""The main job: `memnav launch launch/sim.launch.yaml` runs the stack as separate processes over DDS (isolated
domain, localhost discovery), and its per-episode success/SPL match the in-process `memnav eval` on the same
episodes (lock-step makes them comparable)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

import torch  # noqa: E402
from conftest import make_tiny_dataset, spin_until_exit  # noqa: E402

from memnav.core.policy import MemoryPolicy, PolicyConfig, save_policy  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_sim_launch_matches_in_process_eval(tmp_path):
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    # a policy of its own: the comparison must not depend on which checkpoint is shipped
    torch.manual_seed(3)
    save_policy(MemoryPolicy(PolicyConfig(memory_tokens=24)), tmp_path / "policy_memnav.pt",
                extra={"variant": "memnav", "memory": "scene_graph"})
    env = dict(os.environ, ROS_DOMAIN_ID=str(40 + ((os.getpid() + 31) % 150)),
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    memnav = [sys.executable, "-m", "memnav.cli"]
    results = tmp_path / "ros" / "results.json"
    run = subprocess.run([*memnav, "launch", str(ROOT / "launch" / "sim.launch.yaml"), "episodes:=2",
                          "max_steps:=60", f"data:={data}", f"policy_dir:={tmp_path}", f"results_json:={results}"],
                         env=env, capture_output=True, text=True, timeout=240)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    over_dds = {m[0]: (float(m[1]), float(m[2]), float(m[3]), int(m[4])) for m in
                re.findall(r"episode (\S+): success (\d) spl ([0-9.]+) soft_spl ([0-9.]+) steps (\d+)", out)}
    assert len(over_dds) == 2, out[-3000:]
    # the bridge's results file, in `memnav eval --json` format, says the same and makes a report
    written = json.loads(results.read_text())
    assert written["agent"] == "memnav" and written["episodes"] == 2 and written["source"] == "sim_bridge_node"
    assert {e["episode_id"]: (e["success"], e["steps"]) for e in written["per_episode"]} == \
        {ep: (v[0], v[3]) for ep, v in over_dds.items()}
    written_by_id = {e["episode_id"]: e for e in written["per_episode"]}
    subprocess.run([*memnav, "eval-report", str(results), "--out", str(tmp_path / "report")], check=True, timeout=60)
    assert "<td>memnav</td>" in (tmp_path / "report" / "report.html").read_text()
    assert "summary over 2 episodes" in out

    res_path = tmp_path / "eval.json"
    subprocess.run([*memnav, "eval", "--agent", "memnav", "--data", str(data), "--episodes", "2",
                    "--max-steps", "60", "--policy-dir", str(tmp_path), "--json", str(res_path),
                    "--no-progress"],
                   check=True, timeout=240)
    in_process = {e["episode_id"]: e for e in json.loads(res_path.read_text())["per_episode"]}
    assert set(in_process) == set(over_dds)
    for ep, e in in_process.items():
        succ, spl, soft, steps = over_dds[ep]
        # the same trajectory: same steps and the same SoftSPL (which depends on the path and the end point)
        assert (succ, steps) == (e["success"], e["steps"])
        assert spl == pytest.approx(e["spl"], abs=1e-3) and soft == pytest.approx(e["soft_spl"], abs=1e-4)
        # the layer that ended it and the belief at its STOP, from the policy node's state over DDS
        w = written_by_id[ep]
        assert w["ended_by"] == e["ended_by"] != ""
        assert (w["stop_belief"] is None) == (e["stop_belief"] is None)
        assert w["stop_belief"] is None or w["stop_belief"] == pytest.approx(e["stop_belief"], abs=1e-6)



def _one_house(tmp_path, domain_offset: int):
    """A tiny dataset and a policy of its own, the house of the last test episode and the ids of its first two
    episodes, and an environment on an isolated DDS domain: the setting of the lifelong launch tests."""
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    torch.manual_seed(3)
    save_policy(MemoryPolicy(PolicyConfig(memory_tokens=24)), tmp_path / "policy_memnav.pt",
                extra={"variant": "memnav", "memory": "scene_graph"})
    from memnav.sim.episodes import load_episodes

    episodes = load_episodes(data, "test")
    house = episodes[-1].scene_name
    ids = [str(e.episode_id) for e in episodes if e.scene_name == house][:2]
    env = dict(os.environ, ROS_DOMAIN_ID=str(40 + ((os.getpid() + domain_offset) % 150)),
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    return data, house, ids, env


def test_sim_launch_lifelong_in_one_house_matches_in_process_eval(tmp_path):
    """scene:=H lifelong_dir:=D: the bridge serves one house's episodes, the policy node keeps that house's memory
    in D across them (as `memnav eval --lifelong`, whose per-episode results it matches in lock-step), and the
    results file gives SPL by visit. Without scene the bridge refuses lifelong_dir, naming it."""
    data, house, ids, env = _one_house(tmp_path, domain_offset=43)
    memnav = [sys.executable, "-m", "memnav.cli"]
    results, life = tmp_path / "ros" / "results.json", tmp_path / "life"
    launch = [*memnav, "launch", str(ROOT / "launch" / "sim.launch.yaml"), "episodes:=2", "max_steps:=60",
              f"data:={data}", f"policy_dir:={tmp_path}", f"results_json:={results}", f"lifelong_dir:={life}"]
    refused = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "lifelong_dir needs scene" in refused.stdout + refused.stderr
    run = subprocess.run([*launch, f"scene:={house}"], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    written = json.loads(results.read_text())
    assert written["lifelong"] is True and len(written["lifelong_spl_by_visit"]) == 2
    assert [e["episode_id"] for e in written["per_episode"]] == ids
    assert (life / f"{house}.db").is_file()

    res_path = tmp_path / "eval.json"
    subprocess.run([*memnav, "eval", "--agent", "memnav", "--data", str(data), "--episode-ids", ",".join(ids),
                    "--lifelong", "--memory-dir", str(tmp_path / "eval_life"), "--max-steps", "60",
                    "--policy-dir", str(tmp_path), "--json", str(res_path), "--no-progress"], check=True, timeout=300)
    in_process = json.loads(res_path.read_text())
    for w, e in zip(written["per_episode"], in_process["per_episode"], strict=True):
        assert (w["episode_id"], w["success"], w["steps"]) == (e["episode_id"], e["success"], e["steps"])
        assert w["spl"] == pytest.approx(e["spl"], abs=1e-3)
    assert written["lifelong_spl_by_visit"] == pytest.approx(in_process["lifelong_spl_by_visit"], abs=1e-3)


def test_sim_launch_lifelong_with_odometry_from_the_start_pose_relocalises_at_every_goal(tmp_path):
    """odometry_origin:=start with lifelong_dir: /odom restarts at every episode's start pose, so the policy node
    (odometry_restarts, which the launch file derives from odometry_origin) reopens the house's memory for every
    goal and relocalises it, as a robot rebooted between goals; in lock-step it matches `memnav eval --lifelong
    --odometry-restarts --odometry-origin start` episode for episode."""
    data, house, ids, env = _one_house(tmp_path, domain_offset=47)
    memnav = [sys.executable, "-m", "memnav.cli"]
    results = tmp_path / "ros" / "results.json"
    run = subprocess.run([*memnav, "launch", str(ROOT / "launch" / "sim.launch.yaml"), "episodes:=2",
                          "max_steps:=60", f"data:={data}", f"policy_dir:={tmp_path}", f"results_json:={results}",
                          f"lifelong_dir:={tmp_path / 'life'}", f"scene:={house}", "odometry_origin:=start"],
                         env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    # one line per goal (a depth that follows its image before any decision goes on with the same episode)
    starts = re.findall(r"episode started; memory (\S+): (\d+) places, (\w+)", out)
    assert [(key, where) for key, _, where in starts] == [(house, "localised"), (house, "relocalising")], out[-3000:]
    assert starts[0][1] == "0" and int(starts[1][1]) > 0
    assert "lifelong SPL by visit 1..2:" in out
    written = json.loads(results.read_text())
    assert (written["odometry_origin"], written["lifelong_earlier_memory"]) == ("start", [])

    res_path = tmp_path / "eval.json"
    subprocess.run([*memnav, "eval", "--agent", "memnav", "--data", str(data), "--episode-ids", ",".join(ids),
                    "--lifelong", "--odometry-restarts", "--odometry-origin", "start", "--memory-dir",
                    str(tmp_path / "eval_life"), "--max-steps", "60", "--policy-dir", str(tmp_path), "--json",
                    str(res_path), "--no-progress"], check=True, timeout=300)
    in_process = json.loads(res_path.read_text())
    assert in_process["odometry_origin"] == "start" and in_process["odometry_restarts"] is True
    for w, e in zip(written["per_episode"], in_process["per_episode"], strict=True):
        assert (w["episode_id"], w["success"], w["steps"]) == (e["episode_id"], e["success"], e["steps"])
        assert w["spl"] == pytest.approx(e["spl"], abs=1e-3) and w["ended_by"] == e["ended_by"]


def test_sim_launch_in_real_time(tmp_path):
    """lockstep:=false: the bridge integrates /cmd_vel at 10 Hz and the policy acts on its timer, as on a robot.
    The episode runs to its end, every action counts as one step, and the robot moves by the velocities alone:
    the path is no longer than the MOVE_FORWARDs' velocities carry it (0.25 m/s held for 1 s, a tick over at
    most), where carrying out each action as well would double it. With odometry_origin:=start, /odom starts at
    zero and follows the ground truth rigidly from there (a robot switched on at the episode's start)."""
    import rclpy
    from nav_msgs.msg import Odometry
    from std_msgs.msg import String

    from memnav.ros.conversions import odometry_to_pose

    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    domain = 40 + ((os.getpid() + 37) % 150)
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    results = tmp_path / "results.json"
    # this node listens before the launch starts: on a loaded machine, discovering a node that starts beside
    # the launch's processes once took as long as the policy node's start, and the odometry before the first
    # action was missed
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_real_time_actions")
    actions: list[str] = []
    node.create_subscription(String, "/memnav/action", lambda m: actions.append(m.data), 100)
    odom, truth, before_acting = {}, {}, []   # stamp -> Pose2D; the odometry received before the first action

    def on_odom(msg: Odometry) -> None:
        odom[(msg.header.stamp.sec, msg.header.stamp.nanosec)] = pose = odometry_to_pose(msg)
        if not actions:
            before_acting.append(pose)

    node.create_subscription(Odometry, "/odom", on_odom, 100)
    node.create_subscription(Odometry, "/memnav/ground_truth_pose", lambda m: truth.__setitem__(
        (m.header.stamp.sec, m.header.stamp.nanosec), odometry_to_pose(m)), 100)
    # the policy node holds the goal's actions until this node's subscription is matched as well as the bridge's:
    # volatile actions published before a subscriber is matched never reach it (2 of 30 were lost on some runs)
    import yaml

    params = yaml.safe_load((ROOT / "config" / "memnav.yaml").read_text())
    params["policy_node"]["ros__parameters"]["min_action_subscribers"] = 2
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    launch = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch", str(ROOT / "launch" / "sim.launch.yaml"),
                               "episodes:=1", "max_steps:=30", f"data:={data}", "lockstep:=false",
                               "collision_fraction:=0.4", "odometry_origin:=start", f"results_json:={results}",
                               f"params:={tmp_path / 'params.yaml'}"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        spin_until_exit(node, launch, 240, step_s=0.1)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if launch.poll() is None:
            launch.kill()
    out = launch.communicate()[0]
    assert launch.returncode == 0, out[-3000:]
    (episode,) = json.loads(results.read_text())["per_episode"]
    assert episode["steps"] == len(actions) <= 30, actions
    assert episode["ended_by"] != ""      # the agent's state of its last decision, matched in real time
    forwards = actions.count("MOVE_FORWARD")
    assert forwards >= 3, actions
    assert episode["path_length_m"] <= 0.28 * forwards + 0.05, (episode["path_length_m"], forwards)
    assert "summary over 1 episodes" in out
    # the policy node takes seconds to load: the bridge's odometry reads zero while the robot waits for it
    assert before_acting and all(p.as_array().tolist() == [0.0, 0.0, 0.0] for p in before_acting)
    pairs = [(odom[t], truth[t]) for t in sorted(odom) if t in truth]
    start = next(g for o, g in pairs if o.as_array().tolist() == [0.0, 0.0, 0.0])   # the truth at odometry's origin
    moved = [(o, g) for o, g in pairs if abs(o.x_m) + abs(o.y_m) > 0.1]
    assert len(moved) >= 3, pairs[-1]
    for o, g in pairs:
        assert g.relative_to(start).as_array() == pytest.approx(o.as_array(), abs=1e-6)
