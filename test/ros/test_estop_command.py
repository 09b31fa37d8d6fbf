"""`memnav estop engage|release|status` against a real safety node process over DDS.

The safety node confirms engage and release on its status; with `estop_state_file` an engaged stop survives the
node being killed (SIGKILL) and started again, and a release does too; without a safety node the command fails
loudly, and another subscriber of the topic (a bag recorder) is not taken for the safety node. Bad options are
refused before any ROS work.
"""
import json
import signal
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import (  # noqa: E402
    SPIN_UNTIL_STOPPED,
    isolated_ros_env,
    run_memnav,
    stop_processes,
    wait_for_text,
)

from memnav.cli import main  # noqa: E402


def _safety(env: dict, log, state_file, namespace: str = "") -> subprocess.Popen:
    ns = ["-r", f"__ns:={namespace}"] if namespace else []
    return subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args", *ns, "-p",
                             f"estop_state_file:={state_file}"], stdout=log.open("a"), stderr=subprocess.STDOUT,
                            env=env)


@pytest.mark.ros
@pytest.mark.slow
def test_estop_is_confirmed_by_the_safety_node_kept_across_its_restart_and_fails_loudly_without_one(tmp_path):
    env = isolated_ros_env(89)
    log, state_file = tmp_path / "safety.log", tmp_path / "kept" / "estop.json"
    safety = _safety(env, log, state_file)
    try:
        engaged = run_memnav(["estop", "engage", "--timeout", "30"], env, 60)
        assert engaged.returncode == 0, engaged.stderr + log.read_text()
        assert "ENGAGED (safety node: estop, commanding 0 m/s, 0 rad/s)" in engaged.stderr
        assert json.loads(state_file.read_text())["engaged"] is True
        # the node dies without a chance to clean up and comes back: still engaged
        safety.send_signal(signal.SIGKILL)
        safety.wait(timeout=10)
        safety = _safety(env, log, state_file)
        status = run_memnav(["estop", "status", "--timeout", "30"], env, 60)
        assert status.returncode == 0, status.stderr + log.read_text()
        body = json.loads(status.stdout)
        assert body["estop"] is True and body["reason"] == "estop" and (body["v_mps"], body["w_radps"]) == (0, 0)
        assert "emergency stop ENGAGED as kept in" in log.read_text()
        released = run_memnav(["estop", "release", "--timeout", "30"], env, 60)
        assert released.returncode == 0, released.stderr + log.read_text()
        assert "released" in released.stderr and json.loads(state_file.read_text())["engaged"] is False
        # the same state again (an e-stop button repeating it) leaves the kept file as it was: written at a change
        before = state_file.stat().st_mtime_ns
        again = run_memnav(["estop", "release", "--timeout", "30"], env, 60)
        assert again.returncode == 0 and state_file.stat().st_mtime_ns == before, again.stderr
        safety.send_signal(signal.SIGKILL)
        safety.wait(timeout=10)
        safety = _safety(env, log, state_file)
        status = run_memnav(["estop", "status", "--timeout", "30"], env, 60)
        assert status.returncode == 0 and json.loads(status.stdout)["estop"] is False, status.stderr
    finally:
        stop_processes([safety])
    alone = run_memnav(["estop", "engage", "--timeout", "1"], isolated_ros_env(97), 60)
    assert alone.returncode == 2
    assert "no subscriber of /memnav/estop within 1 s" in alone.stderr and "Nothing was engaged" in alone.stderr


# a bag recorder on the emergency-stop topic (reliable, as `ros2 bag record` asks of a reliable publisher)
RECORDER = """
import rclpy
from std_msgs.msg import Bool

rclpy.init()
node = rclpy.create_node("bag_recorder")
node.create_subscription(Bool, "/memnav/estop", lambda msg: print(f"heard {msg.data}", flush=True), 10)
print("recording", flush=True)
""" + SPIN_UNTIL_STOPPED


@pytest.mark.ros
@pytest.mark.slow
def test_engage_waits_for_the_safety_node_not_for_a_recorder_on_the_topic(tmp_path):
    # a recorder subscribes the topic before the safety node runs: the command must not take it for the safety node
    # (publishing once to it, the safety node, started next, would never hear the stop)
    env = isolated_ros_env(61)
    rec_log, log, state_file = tmp_path / "recorder.log", tmp_path / "safety.log", tmp_path / "estop.json"
    recorder = subprocess.Popen([sys.executable, "-c", RECORDER], stdout=rec_log.open("w"), stderr=subprocess.STDOUT,
                                env=env)
    procs = [recorder]
    try:
        assert wait_for_text(rec_log, "recording", 60), rec_log.read_text()
        engage = subprocess.Popen([sys.executable, "-m", "memnav.cli", "estop", "engage", "--timeout", "40"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(engage)
        # time for the command to start and find the recorder (a command that takes it publishes now)
        early = wait_for_text(rec_log, "heard True", 8)
        procs.append(_safety(env, log, state_file))
        _, err = engage.communicate(timeout=90)
        assert engage.returncode == 0, f"recorder heard it before the safety node ran: {early}\n{err}"
        assert not early, "the stop went out before the safety node ran (to the recorder only)"
        assert "emergency stop ENGAGED (safety node: estop" in err
        assert json.loads(state_file.read_text())["engaged"] is True   # the safety node took it
        assert wait_for_text(rec_log, "heard True", 10), rec_log.read_text()   # and the recorder still has it
    finally:
        stop_processes(procs)


@pytest.mark.ros
@pytest.mark.slow
def test_two_robots_in_namespaces_have_separate_estops_and_state_files(tmp_path):
    # one domain, one computer, one estop_state_file setting (robot.yaml's): each robot keeps its own stop
    env = isolated_ros_env(109)
    state_file = tmp_path / "kept" / "estop.json"
    nodes = {ns: _safety(env, tmp_path / f"safety_{ns}.log", state_file, f"/{ns}") for ns in ("robot1", "robot2")}
    try:
        engaged = run_memnav(["estop", "engage", "--namespace", "robot1", "--timeout", "30"], env, 60)
        assert engaged.returncode == 0, engaged.stderr
        statuses = {}
        for ns in nodes:
            status = run_memnav(["estop", "status", "--namespace", ns, "--timeout", "30"], env, 60)
            assert status.returncode == 0, status.stderr
            statuses[ns] = json.loads(status.stdout)["estop"]
        assert statuses == {"robot1": True, "robot2": False}
        assert json.loads((tmp_path / "kept" / "robot1" / "estop.json").read_text())["engaged"] is True
        assert not state_file.exists()
        assert not (tmp_path / "kept" / "robot2" / "estop.json").exists()   # never engaged: nothing to keep
        # no safety node in the root namespace: the command says so rather than engaging another robot's
        alone = run_memnav(["estop", "engage", "--timeout", "1"], env, 60)
        assert alone.returncode == 2 and "no subscriber of /memnav/estop" in alone.stderr
    finally:
        stop_processes(nodes.values())


# a safety node that never takes the stop (hung in its control loop, say): it subscribes the e-stop and reports
# itself released
DEAF_SAFETY = """
import json

import rclpy
from std_msgs.msg import Bool, String

rclpy.init()
node = rclpy.create_node("safety_node")
node.create_subscription(Bool, "/memnav/estop", lambda msg: None, 10)
status = node.create_publisher(String, "/memnav/safety_status", 10)
node.create_timer(0.2, lambda: status.publish(String(data=json.dumps({"estop": False, "reason": "stale_color"}))))
print("up", flush=True)
""" + SPIN_UNTIL_STOPPED


@pytest.mark.ros
@pytest.mark.slow
def test_engage_fails_within_its_timeout_all_told_when_a_late_safety_node_never_confirms(tmp_path):
    # the safety node appears late (respawning) and never confirms: the command waited --timeout for it, then
    # --timeout again for the confirmation, failing only after about twice the time it was given
    env = isolated_ros_env(119)
    log = tmp_path / "deaf.log"
    t0 = time.monotonic()
    engage = subprocess.Popen([sys.executable, "-m", "memnav.cli", "estop", "engage", "--timeout", "10"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    procs = [engage]
    try:
        time.sleep(5.0)
        procs.append(subprocess.Popen([sys.executable, "-c", DEAF_SAFETY], stdout=log.open("w"),
                                      stderr=subprocess.STDOUT, env=env))
        _, err = engage.communicate(timeout=60)
        elapsed = time.monotonic() - t0
        assert engage.returncode == 2, err
        # 10 s and the command's own start-up (an old command took 5 + the peer's start + 10 s at least)
        assert elapsed < 14.0, (elapsed, err)
        assert wait_for_text(log, "up", 10), log.read_text()   # it was there, but too late to confirm
    finally:
        stop_processes(procs)


def test_bad_estop_options_are_refused(capsys):
    for args in (["estop", "engage", "--timeout", "0"], ["estop", "status", "--timeout", "nan"]):
        assert main(args) == 2
        assert "--timeout must be a number of seconds > 0" in capsys.readouterr().err
