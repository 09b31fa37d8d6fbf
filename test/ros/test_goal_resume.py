"""A policy node killed while it works on a goal (SIGKILL, as a crash) and started again resumes that goal from
its goal_state_file, as real processes over DDS; the simulator bridge in real time stands in for the robot.

1. `memnav goal send` (no --wait: nothing else keeps the goal) starts a far goal; the node keeps it on disk.
2. SIGKILL, and a new policy node: it logs the resume, reports the goal active with `resumed` 1 on
   /memnav/goal_status (as `memnav status` hears it) and on /diagnostics, acts on it (the kept action count goes on
   from the count before the kill), and the robot moves.
3. Killed again with max_goal_resumes 1: the third node gives the goal up ("abandoned") and removes the file.
4. A new goal, cancelled: the file is removed, so nothing is resumed at the next start.
"""
import json
import signal
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import (  # noqa: E402
    far_goal_photo,
    isolated_ros_env,
    robot_odom_pose,
    run_memnav,
    start_policy_node,
    start_sim_robot,
    stop_processes,
)

from memnav.core.goal_state import read_kept_goal  # noqa: E402


def _wait_for(check, timeout_s: float, every_s: float = 0.3):
    """The first truthy value of check() within timeout_s, else None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every_s)
    return None


@pytest.mark.ros
@pytest.mark.slow
def test_a_killed_policy_node_resumes_its_goal_and_gives_it_up_after_max_goal_resumes(tmp_path):
    data, goal, photo = far_goal_photo(tmp_path)   # meters from the start: the robot has to search
    env = isolated_ros_env(127)
    kept = tmp_path / "state" / "goal_state.npz"
    args = ["-p", f"goal_state_file:={kept}", "-p", "max_goal_resumes:=1", "-p", "max_steps:=400"]
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False, policy_args=args)
    logs = [tmp_path / "policy.log"]

    def logs_report() -> str:
        return report() + "".join(f"\n--- {p.name}\n{p.read_text()[-2500:]}" for p in logs[1:])

    def kept_goal():
        return read_kept_goal(kept)[0] if kept.exists() else None

    def status() -> dict:
        out = run_memnav(["status", "--listen", "1", "--json", str(tmp_path / "status.json")], env, 60)
        assert (tmp_path / "status.json").exists(), out.stdout + out.stderr
        return json.loads((tmp_path / "status.json").read_text())

    def restart(name: str):
        procs[1].send_signal(signal.SIGKILL)   # a crash: no clean-up of any kind
        procs[1].wait(timeout=10)
        logs.append(tmp_path / f"{name}.log")
        procs[1] = start_policy_node(env, logs[-1], lockstep=False, args=args)

    try:
        # 1. a goal sent without --wait: `goal send` exits once the policy node has it, so only the file keeps it
        sent = run_memnav(["goal", "send", str(goal), "--no-progress"], env, 120)
        assert sent.returncode == 0, sent.stdout + sent.stderr + logs_report()
        first = _wait_for(lambda: (g := kept_goal()) is not None and g.actions >= 10 and g, 90)
        assert first, logs_report()
        assert first.resumes == 0 and first.depth is not None and first.rgb.shape == photo.rgb.shape
        np.testing.assert_array_equal(first.rgb, photo.rgb)

        # 2. killed and started again: the same goal goes on, its action count too
        restart("policy_2")
        assert _wait_for(lambda: "resuming goal" in logs[-1].read_text(), 90), logs_report()
        assert f"resuming goal {first.goal_stamp_ns} after a restart of this node" in logs[-1].read_text()
        assert _wait_for(lambda: "resumed goal (RGB-D): episode started" in logs[-1].read_text(), 30), logs_report()
        resumed = _wait_for(lambda: (g := kept_goal()) is not None and g.resumes == 1
                            and g.actions >= first.actions + 10 and g, 90)
        assert resumed and resumed.goal_stamp_ns == first.goal_stamp_ns, logs_report()
        body = status()
        assert body["goal_status"]["status"] == "active" and body["goal_status"]["resumed"] == 1, body
        assert body["goal_status"]["goal_stamp_ns"] == first.goal_stamp_ns
        message = _wait_for(lambda: status()["diagnostics"].get("policy_node", {}).get("message", ""), 30)
        assert message and "(resumed after 1 restart of this node)" in message, message
        before = robot_odom_pose(tmp_path, env, "before")
        assert _wait_for(lambda: robot_odom_pose(tmp_path, env, "after") != pytest.approx(before, abs=1e-3), 30), \
            "the robot did not move after the resume\n" + logs_report()

        # 3. killed again: max_goal_resumes 1 is spent, the goal is given up and its file removed
        restart("policy_3")
        assert _wait_for(lambda: "given up" in logs[-1].read_text(), 90), logs_report()
        assert "the node restarted 2 times while working on it (max_goal_resumes 1)" in logs[-1].read_text()
        assert not kept.exists()
        body = status()
        assert body["goal_status"]["status"] == "abandoned", body

        # 4. a new goal, cancelled: nothing is kept, so nothing is resumed
        sent = run_memnav(["goal", "send", str(goal), "--no-progress"], env, 120)
        assert sent.returncode == 0, sent.stdout + sent.stderr + logs_report()
        second = _wait_for(kept_goal, 60)
        assert second and second.goal_stamp_ns != first.goal_stamp_ns and second.resumes == 0, logs_report()
        cancelled = run_memnav(["goal", "cancel"], env, 60)
        assert cancelled.returncode == 0, cancelled.stderr + logs_report()
        assert not kept.exists()
    finally:
        stop_processes(procs)

