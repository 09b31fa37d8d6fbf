"""policy_node's goal_state_file at the edges of a goal's life, as real processes over DDS: a node killed (SIGKILL)
after a goal's ending went out, before it removed the kept goal, and a node killed while it takes no action.

The kill at the removal is a policy node run by a small script that makes memnav.core.goal_state.drop_kept_goal
SIGKILL its own process: the one moment after the ending (the budget's STOP, a cancel) is published and before the
kept goal is gone, which a kill from outside cannot hit. Everything else is the node as a user runs it.
"""
import json
import signal
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import (  # noqa: E402
    far_goal_photo,
    isolated_ros_env,
    run_memnav,
    spin_until,
    start_policy_node,
    start_sim_robot,
    stop_processes,
    use_isolated_ros_domain,
    wait_for_text,
)

from memnav.core.goal_state import read_kept_goal  # noqa: E402

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
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    max_steps = 5
    data, goal, _photo = far_goal_photo(tmp_path)   # meters away: the agent searches, it does not STOP by itself
    domain = use_isolated_ros_domain(monkeypatch, 53)
    env = isolated_ros_env(53)
    kept = tmp_path / "state" / "goal_state.npz"
    args = ["-p", f"goal_state_file:={kept}", "-p", f"max_steps:={max_steps}"]
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False, policy_args=args)
    logs = [tmp_path / "policy.log"]
    procs[1].kill()   # the bridge stays; the policy node is the one killed at the removal
    procs[1].wait(timeout=10)
    logs.append(tmp_path / "killed_1.log")
    procs[1] = _killed_at_removal(tmp_path, env, logs[-1], args)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_goal_ending")
    actions: list[str] = []
    statuses: list[dict] = []
    node.create_subscription(String, "/memnav/action", lambda m: actions.append(m.data),
                             QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    node.create_subscription(String, "/memnav/goal_status", lambda m: statuses.append(json.loads(m.data)),
                             QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                        durability=DurabilityPolicy.TRANSIENT_LOCAL))

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
        node.destroy_node()
        rclpy.shutdown()
        stop_processes(procs)


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
