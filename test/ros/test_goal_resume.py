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

And at the edges of a goal's life: a node killed (SIGKILL) after a goal's ending went out, before it removed the
kept goal, and a node killed while it takes no action.

The kill at the removal is a policy node run by a small script that makes memnav.core.goal_state.drop_kept_goal
SIGKILL its own process: the one moment after the ending (the budget's STOP, a cancel) is published and before the
kept goal is gone, which a kill from outside cannot hit. Everything else is the node as a user runs it.
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
    close_ros_test,
    far_goal_photo,
    isolated_ros_env,
    robot_odom_pose,
    run_memnav,
    spin_until,
    start_policy_node,
    start_sim_robot,
    stop_processes,
    use_isolated_ros_domain,
    wait_for_text,
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


def _robot_keeping_its_goal(tmp_path, monkeypatch, domain_offset: int, max_steps: int):
    """A far goal photo (the agent searches, it does not STOP by itself) and a simulated robot in real time whose
    policy node keeps its goal in tmp_path/state/goal_state.npz, with action budget `max_steps`, on an isolated
    domain: (goal photo, env, kept goal path, the policy node's arguments, processes, report())."""
    data, goal, _photo = far_goal_photo(tmp_path)
    use_isolated_ros_domain(monkeypatch, domain_offset)
    env = isolated_ros_env(domain_offset)
    kept = tmp_path / "state" / "goal_state.npz"
    args = ["-p", f"goal_state_file:={kept}", "-p", f"max_steps:={max_steps}"]
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False, policy_args=args)
    return goal, env, kept, args, procs, report


def _actions_and_statuses(node) -> tuple[list[str], list[dict]]:
    """Every /memnav/action and /memnav/goal_status heard by `node` (deep reliable queues: nothing is lost while the
    test is busy with something else; the goal statuses' latched history too)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    actions: list[str] = []
    statuses: list[dict] = []
    node.create_subscription(String, "/memnav/action", lambda m: actions.append(m.data),
                             QoSProfile(depth=1000, history=HistoryPolicy.KEEP_LAST,
                                        reliability=ReliabilityPolicy.RELIABLE))
    node.create_subscription(String, "/memnav/goal_status", lambda m: statuses.append(json.loads(m.data)),
                             QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    return actions, statuses


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

    at_kill = []   # the kept goal as each kill left it (with its action record folded in)

    def restart(name: str):
        procs[1].send_signal(signal.SIGKILL)   # a crash: no clean-up of any kind
        procs[1].wait(timeout=10)
        at_kill.append(kept_goal())
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
        # its count: the actions recorded up to the kill (it said the last kept count, up to 9 fewer)
        assert body["goal_status"]["actions"] == at_kill[-1].actions + at_kill[-1].unkept_actions, (body, at_kill)
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

    from memnav.ros.policy_node import KEEP_EVERY_ACTIONS

    max_steps = 3 * KEEP_EVERY_ACTIONS
    goal, env, kept, args, procs, report = _robot_keeping_its_goal(tmp_path, monkeypatch, 151, max_steps)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_action_counter")
    actions, statuses = _actions_and_statuses(node)
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
        close_ros_test(node, procs)


# a policy node that dies, with no clean-up of any kind, when it removes its kept goal (the goal has ended)
KILLED_AT_REMOVAL = """
import os, signal, sys
import memnav.core.goal_state as goal_state
goal_state.drop_kept_goal = lambda path: os.kill(os.getpid(), signal.SIGKILL)
from memnav.ros.policy_node import main
sys.exit(main(sys.argv))
"""


def _killed_at_removal(tmp_path, env: dict, log, args: list[str]) -> subprocess.Popen:
    """A real-time policy node (as conftest.start_policy_node starts one) that SIGKILLs itself at the removal."""
    script = tmp_path / "killed_at_removal.py"
    script.write_text(KILLED_AT_REMOVAL)
    return subprocess.Popen([sys.executable, str(script), "--ros-args", "-p", "lockstep:=false",
                             "-p", "action_duration_s:=0.25", "-p", "collision_fraction:=0.4", *args],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


@pytest.mark.ros
@pytest.mark.slow
def test_a_node_killed_after_a_goals_ending_went_out_does_not_act_on_that_goal_again(tmp_path, monkeypatch):
    """Killed after the budget's STOP went out (and after a cancel), before the kept goal was removed: the restarted
    node took the goal up again; one more STOP beyond max_steps, and a cancelled goal driven on. Now the ending is
    recorded before it goes out: the restarted node publishes the goal's status again and takes no action on it."""
    from std_srvs.srv import Trigger

    max_steps = 5
    goal, env, kept, args, procs, report = _robot_keeping_its_goal(tmp_path, monkeypatch, 53, max_steps)
    logs = [tmp_path / "policy.log"]
    procs[1].kill()   # the bridge stays; the policy node is the one killed at the removal
    procs[1].wait(timeout=10)
    logs.append(tmp_path / "killed_1.log")
    procs[1] = _killed_at_removal(tmp_path, env, logs[-1], args)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_goal_ending")
    actions, statuses = _actions_and_statuses(node)

    def logs_report() -> str:
        return (f"actions heard: {actions}; statuses: {statuses}\n" + report()
                + "".join(f"\n--- {p.name}\n{p.read_text()[-2500:]}" for p in logs[1:]))

    def restart(name: str, killed_at_removal: bool) -> None:
        logs.append(tmp_path / f"{name}.log")
        procs[1] = (_killed_at_removal(tmp_path, env, logs[-1], args) if killed_at_removal
                    else start_policy_node(env, logs[-1], lockstep=False, args=args))

    def ending_of(stamp: int) -> list[str]:
        return [s["status"] for s in statuses if s["goal_stamp_ns"] == stamp and s["status"] != "active"]

    try:
        # 1. the budget's STOP goes out, then the node dies removing the kept goal
        assert spin_until(node, lambda: node.count_publishers("/memnav/action") > 0, 60), logs_report()
        sent = run_memnav(["goal", "send", str(goal), "--no-progress"], env, 120)
        assert sent.returncode == 0, sent.stdout + sent.stderr + logs_report()
        assert spin_until(node, lambda: procs[1].poll() is not None, 120), logs_report()
        spin_until(node, lambda: False, 1.0)   # what was on its way
        assert procs[1].returncode == -signal.SIGKILL and kept.exists(), logs_report()
        assert len(actions) == max_steps and actions[-1] == "STOP", logs_report()
        first = statuses[-1]["goal_stamp_ns"]
        assert ending_of(first) == ["budget"], logs_report()

        # 2. the restarted node does not take the ended goal up: its status again, no action, the files gone
        restart("policy_2", killed_at_removal=False)
        assert spin_until(node, lambda: len(ending_of(first)) == 2, 90), logs_report()
        assert ending_of(first) == ["budget", "budget"], logs_report()
        assert statuses[-1]["actions"] == max_steps and statuses[-1]["resumed"] == 0, logs_report()
        assert wait_for_text(logs[-1], f"goal {first} ended (budget) after {max_steps} actions, just before this "
                             "node restarted: not resumed", 10), logs_report()
        spin_until(node, lambda: False, 3.0)   # a resumed goal would have acted by now (an action every 0.25 s)
        assert len(actions) == max_steps and not kept.exists(), logs_report()
        assert not kept.with_name(kept.name + ".actions").exists(), logs_report()
        told = [s["status"] for s in statuses if s["goal_stamp_ns"] == first]
        assert "active" not in told[told.index("budget"):], logs_report()   # not taken up again

        # 3. a new goal, cancelled: the node dies removing it after "cancelled" went out; not driven on after
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=10)
        restart("killed_2", killed_at_removal=True)
        sent = run_memnav(["goal", "send", str(goal), "--no-progress"], env, 120)
        assert sent.returncode == 0, sent.stdout + sent.stderr + logs_report()
        assert spin_until(node, lambda: statuses[-1]["goal_stamp_ns"] != first, 30), logs_report()
        second = statuses[-1]["goal_stamp_ns"]
        assert spin_until(node, lambda: len(actions) >= max_steps + 2, 60), logs_report()
        client = node.create_client(Trigger, "/policy_node/cancel_goal")
        assert client.wait_for_service(timeout_sec=30), logs_report()
        client.call_async(Trigger.Request())   # its answer never comes: the node dies giving it
        assert spin_until(node, lambda: procs[1].poll() is not None, 60), logs_report()
        spin_until(node, lambda: False, 1.0)
        assert ending_of(second) == ["cancelled"] and kept.exists(), logs_report()
        cancelled_at = len(actions)
        restart("policy_3", killed_at_removal=False)
        assert spin_until(node, lambda: len(ending_of(second)) == 2, 90), logs_report()
        assert ending_of(second) == ["cancelled", "cancelled"], logs_report()
        spin_until(node, lambda: False, 3.0)
        assert len(actions) == cancelled_at and not kept.exists(), logs_report()
        assert wait_for_text(logs[-1], f"goal {second} ended (cancelled)", 5), logs_report()
    finally:
        close_ros_test(node, procs)


@pytest.mark.ros
@pytest.mark.slow
def test_a_node_killed_while_it_takes_no_action_loses_none_of_the_goals_budget(tmp_path, monkeypatch):
    """A kept goal counted the writer's interval (10 actions) as taken at every restart, although none was taken
    (a node killed while waiting for its camera, or just after a write): three kills of an idle node spent 30 actions
    of the budget. Now each action is recorded before it goes out, and the restarted node counts those exactly."""
    _data, goal, _photo = far_goal_photo(tmp_path)
    use_isolated_ros_domain(monkeypatch, 59)
    env = isolated_ros_env(59)
    kept = tmp_path / "state" / "goal_state.npz"
    args = ["-p", f"goal_state_file:={kept}", "-p", "max_steps:=400"]
    logs = [tmp_path / "policy_0.log"]
    # no simulator, no camera: the node keeps the goal and waits for frames, taking no action
    proc = start_policy_node(env, logs[0], lockstep=False, args=args)
    try:
        sent = run_memnav(["goal", "send", str(goal), "--no-progress"], env, 120)
        assert sent.returncode == 0, sent.stdout + sent.stderr + logs[0].read_text()
        stamp = read_kept_goal(kept)[0].goal_stamp_ns
        for restart in (1, 2, 3):
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            logs.append(tmp_path / f"policy_{restart}.log")
            proc = start_policy_node(env, logs[-1], lockstep=False, args=args)
            assert wait_for_text(logs[-1], "resumed goal (RGB-D): episode started", 90), logs[-1].read_text()
            text = logs[-1].read_text()
            assert (f"resuming goal {stamp} after a restart of this node (0 actions before; resume {restart} of "
                    "at most 3)") in text, text
            time.sleep(0.5)
            back, why = read_kept_goal(kept)
            assert back is not None and back.resumes == restart and back.actions + back.unkept_actions == 0, why
    finally:
        stop_processes([proc])
