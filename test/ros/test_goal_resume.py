"""A policy node killed while it works on a goal (SIGKILL, as a crash) and started again resumes that goal from
its goal_state_file, as real processes over DDS; the simulator bridge in real time stands in for the robot.

1. `memnav goal send` (no --wait: nothing else keeps the goal) starts a far goal; the node keeps it on disk.
2. SIGKILL, and a new policy node: it logs the resume, reports the goal active with `resumed` 1 on
   /memnav/goal_status (as `memnav status` hears it) and on /diagnostics, acts on it (the kept action count goes on
   from the count before the kill), and the robot moves.
3. Killed again with max_goal_resumes 1: the third node gives the goal up ("abandoned") and removes the file; its
   photo published again with its stamp (a goal publisher still latching it) is ignored, not started from 0.
4. A new goal, cancelled: the file is removed, so nothing is resumed at the next start.

And the action budget across a restart: a node killed between two writes of the kept action count (written every
KEEP_EVERY_ACTIONS actions) took more actions than its file says; each was recorded beside it before it went out, so
the restarted node counts them exactly, and the goal's actions over both runs, as heard on /memnav/action, come to
max_steps (one fewer where the kill fell between recording an action and sending it).
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
    spin_until,
    start_policy_node,
    start_sim_robot,
    stop_processes,
    use_isolated_ros_domain,
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
def test_a_killed_policy_node_resumes_its_goal_and_gives_it_up_after_max_goal_resumes(tmp_path, monkeypatch):
    from sensor_msgs.msg import Image

    from memnav.ros.conversions import rgb_to_image
    from memnav.ros.embedding_msgs import ns_to_stamp
    from memnav.ros.qos import latched_qos

    data, goal, photo = far_goal_photo(tmp_path)   # meters from the start: the robot has to search
    domain = use_isolated_ros_domain(monkeypatch, 127)
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
        # its photo delivered again (a goal publisher still latching it): not started again from 0 actions
        rclpy.init(domain_id=domain)
        node = rclpy.create_node("test_latched_goal")
        try:
            pub = node.create_publisher(Image, "/memnav/goal_image", latched_qos())
            pub.publish(rgb_to_image(first.rgb, ns_to_stamp(first.goal_stamp_ns), frame_id="goal_camera"))
            assert spin_until(node, lambda: "has ended: the same photo again is ignored" in logs[-1].read_text(),
                              30), logs_report()
        finally:
            node.destroy_node()
            rclpy.shutdown()
        assert status()["goal_status"]["status"] == "abandoned"

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



@pytest.mark.ros
@pytest.mark.slow
def test_a_goal_resumed_after_a_kill_between_count_writes_keeps_to_its_action_budget(tmp_path, monkeypatch):
    """The kept action count is written every KEEP_EVERY_ACTIONS actions, so a node killed between two writes has
    taken more actions than its file says. The restarted node counts the recorded ones: the goal's actions over both
    runs, as heard on /memnav/action, stay within max_steps (before the count existed, up to 9 more) and reach it
    (before the record, the whole interval counted as taken: up to 10 fewer)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from memnav.ros.policy_node import KEEP_EVERY_ACTIONS

    max_steps = 3 * KEEP_EVERY_ACTIONS
    data, goal, _photo = far_goal_photo(tmp_path)   # meters away: the agent searches, it does not STOP by itself
    domain = use_isolated_ros_domain(monkeypatch, 151)
    env = isolated_ros_env(151)
    kept = tmp_path / "state" / "goal_state.npz"
    args = ["-p", f"goal_state_file:={kept}", "-p", f"max_steps:={max_steps}"]
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False, policy_args=args)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_action_counter")
    actions: list[str] = []
    statuses: list[dict] = []
    # deep reliable queues: nothing heard is lost while the test is busy with something else
    node.create_subscription(String, "/memnav/action", lambda m: actions.append(m.data),
                             QoSProfile(depth=1000, history=HistoryPolicy.KEEP_LAST,
                                        reliability=ReliabilityPolicy.RELIABLE))
    node.create_subscription(String, "/memnav/goal_status", lambda m: statuses.append(json.loads(m.data)),
                             QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    log2 = tmp_path / "policy_2.log"

    def logs_report() -> str:
        return (f"actions heard: {len(actions)}; statuses: {statuses}\n" + report()
                + (f"\n--- policy_2\n{log2.read_text()[-2500:]}" if log2.exists() else ""))

    def kept_count() -> int | None:
        g = read_kept_goal(kept)[0] if kept.exists() else None
        return None if g is None else g.actions

    try:
        assert spin_until(node, lambda: node.count_publishers("/memnav/action") > 0, 60), logs_report()
        sent = run_memnav(["goal", "send", str(goal), "--no-progress"], env, 120)
        assert sent.returncode == 0, sent.stdout + sent.stderr + logs_report()
        # killed half-way between two writes of the count, with room for a write before the budget is spent

        def half_way() -> bool:
            k = kept_count()
            return (k is not None and 0 < k < max_steps - KEEP_EVERY_ACTIONS
                    and KEEP_EVERY_ACTIONS // 2 <= len(actions) - k < KEEP_EVERY_ACTIONS - 2)

        assert spin_until(node, half_way, 120, step_s=0.01), logs_report()
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=10)
        spin_until(node, lambda: False, 1.0)   # what was on its way
        k, heard = kept_count(), len(actions)
        assert k is not None and k < heard < k + KEEP_EVERY_ACTIONS, logs_report()   # the file is behind
        stamp = read_kept_goal(kept)[0].goal_stamp_ns

        def ended() -> list[dict]:
            return [s for s in statuses if s["goal_stamp_ns"] == stamp and s["status"] != "active"]

        procs[1] = start_policy_node(env, log2, lockstep=False, args=args)
        assert spin_until(node, ended, 180), logs_report()
        spin_until(node, lambda: False, 1.0)
        assert [s["status"] for s in ended()] == ["budget"], logs_report()
        assert ended()[0]["actions"] == max_steps and ended()[0]["resumed"] == 1, logs_report()
        text = log2.read_text()
        # exactly those heard, or one more: recorded, about to go out when the node was killed
        assert any(f"{k} actions kept before, counted as {c}: up to {c - k} more may have been taken" in text
                   for c in (heard, heard + 1)), logs_report()
        assert max_steps - 1 <= len(actions) <= max_steps, logs_report()   # the budget holds, none of it lost
        assert actions[-1] == "STOP" and not kept.exists(), logs_report()
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes(procs)
