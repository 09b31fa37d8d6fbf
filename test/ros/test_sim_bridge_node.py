"""sim_bridge_node as a real process over DDS on an isolated domain: topics, services, actions, bad input."""
import json
import math
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import close_ros_test, make_tiny_dataset, spin_until, stop_processes, use_isolated_ros_domain  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("bridge") / "houses", houses=2, seed=4, test=3)


@pytest.fixture
def ros_env(monkeypatch):
    return use_isolated_ros_domain(monkeypatch, 0)


def _wait(node, cond, timeout=20.0):
    return spin_until(node, cond, timeout, 0.05)


def test_bridge_serves_episodes_over_dds(data, ros_env):
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args",
                             "-p", f"data:={data}", "-p", "split:=test", "-p", "lockstep:=true"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_client")
    got = {"odom": [], "rgb": [], "goal": [], "result": []}
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(Odometry, "/odom", lambda m: got["odom"].append(m), 10)
    node.create_subscription(Image, "/camera/color/image_raw", lambda m: got["rgb"].append(m), qos_profile_sensor_data)
    node.create_subscription(Image, "/memnav/goal_image", lambda m: got["goal"].append(m), latched)
    node.create_subscription(String, "/memnav/episode_result", lambda m: got["result"].append(m), latched)
    pub = node.create_publisher(String, "/memnav/action", 10)
    reset = node.create_client(Trigger, "/sim_bridge_node/reset")
    try:
        assert reset.wait_for_service(timeout_sec=30.0), "sim_bridge_node did not come up"
        fut = reset.call_async(Trigger.Request())
        assert _wait(node, lambda: fut.done() and got["odom"] and got["rgb"] and got["goal"])
        assert fut.result().success
        img = got["rgb"][-1]
        assert (img.height, img.width, img.encoding) == (128, 128, "rgb8")
        assert got["goal"][-1].encoding == "rgb8"

        from memnav.ros.conversions import odometry_to_pose

        before = odometry_to_pose(got["odom"][-1])
        n = len(got["odom"])
        _wait(node, lambda: pub.get_subscription_count() > 0, 10)
        pub.publish(String(data="TURN_LEFT"))
        assert _wait(node, lambda: len(got["odom"]) > n)
        after = odometry_to_pose(got["odom"][-1])
        dyaw = (after.yaw_rad - before.yaw_rad + math.pi) % (2 * math.pi) - math.pi
        assert dyaw == pytest.approx(math.radians(30), abs=1e-3)

        pub.publish(String(data="JUMP"))          # bad input: dropped, node keeps running
        pub.publish(String(data="STOP"))
        assert _wait(node, lambda: got["result"])
        result = json.loads(got["result"][-1].data)
        assert {"success", "spl", "soft_spl", "steps"} <= set(result) and result["steps"] == 2
        assert proc.poll() is None
        fut = reset.call_async(Trigger.Request())
        assert _wait(node, lambda: fut.done()) and fut.result().success
        # ~/next_episode starts the split's next episode: its id is named, and a new goal image is latched
        first_id = result["episode_id"]
        n_goal = len(got["goal"])
        nxt = node.create_client(Trigger, "/sim_bridge_node/next_episode")
        fut = nxt.call_async(Trigger.Request())
        assert _wait(node, lambda: fut.done() and len(got["goal"]) > n_goal)
        assert fut.result().success and first_id not in fut.result().message
        assert "started" in fut.result().message
    finally:
        node.destroy_node()
        rclpy.shutdown()
        out = stop_processes([proc])[0]
    assert "dropped action" in out


def _digest(path):
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.rglob("*")) if p.is_file()}


def test_bridge_records_an_episode_that_eval_bag_scores_against_ground_truth(data, ros_env, tmp_path):
    """The bridge drives one episode (an oracle mirrored in-process sends the actions: a full turn on the spot,
    then the shortest path and STOP) while recording it with `record.bag`; `memnav eval-bag` on that bag scores
    place recognition against the ground truth and the stop decisions against the goal pose."""
    from nav_msgs.msg import Odometry
    from std_msgs.msg import String

    from memnav.cli import main as memnav_main
    from memnav.core.types import Action
    from memnav.eval.agents import OracleAgent
    from memnav.eval.bag_io import BagFile
    from memnav.eval.eval_bag import pose_of
    from memnav.sim.base import SimConfig
    from memnav.sim.env import ImageNavEnv
    from memnav.sim.episodes import load_episodes
    from memnav.sim.factory import make_simulator

    bag = tmp_path / "episode"
    bridge = [sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args", "-p", f"data:={data}",
              "-p", "split:=test", "-p", "episodes:=1", "-p", "exit_when_done:=true", "-p", f"record.bag:={bag}"]
    proc = subprocess.Popen(bridge, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # the same episode in-process: the simulator is deterministic, so the oracle's actions fit the bridge's robot
    episode = load_episodes(data, "test")[0]
    env = ImageNavEnv(make_simulator("embedded", SimConfig()))
    env.reset(episode)
    oracle = OracleAgent(stop_distance_m=0.5)
    oracle.reset(episode, env.goal_observation, env.sim)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_driver")
    got = {"odom": 0, "result": []}
    node.create_subscription(Odometry, "/odom", lambda m: got.__setitem__("odom", got["odom"] + 1), 10)
    node.create_subscription(String, "/memnav/episode_result", lambda m: got["result"].append(m), 10)
    pub = node.create_publisher(String, "/memnav/action", 10)
    actions: list[Action] = []
    try:
        assert _wait(node, lambda: pub.get_subscription_count() > 0 and got["odom"] > 0, 60), "bridge did not come up"
        while not actions or actions[-1] != Action.STOP:
            # a full turn on the spot first (revisits for place recognition, > 1 s apart), then the oracle
            action = Action.TURN_LEFT if len(actions) < 13 else oracle.act(None)
            assert len(actions) < 300, "the oracle did not reach the goal"
            env.step(action)
            actions.append(action)
            n = got["odom"]
            pub.publish(String(data=action.name))
            if action != Action.STOP:
                assert _wait(node, lambda n=n: got["odom"] > n, 20), f"no observation after action {len(actions)}"
                if len(actions) <= 13:
                    time.sleep(0.1)
        assert _wait(node, lambda: got["result"], 20)
        out, _ = proc.communicate(timeout=30)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = json.loads(got["result"][-1].data)
    assert result["success"] == 1.0 and result["steps"] == len(actions), out[-2000:]
    assert proc.returncode == 0 and f"wrote {bag}" in out, out[-2000:]

    frames = len(actions)   # the first observation and one after each action but STOP
    with BagFile(bag) as b:
        topics = b.topics
        goal_pose = [pose_of(m.msg, m.msgtype) for m in b.messages(["/memnav/goal_pose"])]
        qos = topics["/memnav/goal_pose"].qos[0]
    assert {t: topics[t].count for t in topics} == {
        "/camera/color/image_raw": frames, "/camera/depth/image_raw": frames, "/camera/color/camera_info": frames,
        "/odom": frames, "/memnav/ground_truth_pose": frames, "/memnav/goal_image": 1, "/memnav/goal_depth": 1,
        "/memnav/goal_pose": 1, "/memnav/episode_result": 1, "/memnav/detections": frames}
    assert qos.durability.name == "TRANSIENT_LOCAL" and qos.reliability.name == "RELIABLE"
    expected = env.goal_observation.gt_pose
    assert (goal_pose[0].x_m, goal_pose[0].y_m, goal_pose[0].yaw_rad) == pytest.approx(
        (expected.x_m, expected.y_m, expected.yaw_rad), abs=1e-6)

    before = _digest(bag)
    report = tmp_path / "report"
    assert memnav_main(["eval-bag", str(bag), "--report", str(report), "--revisit-min-age", "1",
                        "--no-progress"]) == 0
    assert _digest(bag) == before
    m = json.loads((report / "metrics.json").read_text())
    inp = m["input"]
    assert inp["reference"] == "ground_truth" and inp["frames"] == frames
    assert inp["goals"] == 1 and inp["goals_with_pose"] == 1 and inp["truncated"] is False
    pr = m["place_recognition"]
    assert pr["queries_with_match"] > 0 and pr["recall_at_1"] is not None   # the turn on the spot came round
    stop = m["stop"]
    assert stop["available"] and stop["labelled"] and stop["frames_labelled"] == frames
    assert 0 < stop["frames_at_goal"] < frames                   # the oracle ended within 0.5 m of the goal
    assert stop["voi"]["recall"] is not None and len(stop["episodes"]) == 1

    # a bag is never overwritten: a second bridge on the same path refuses to start
    again = subprocess.run(bridge, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "exists already" in again.stderr and "Traceback" not in again.stderr
    assert _digest(bag) == before


def test_bridge_broadcasts_odom_to_base_link_on_tf(data, ros_env):
    """Only where tf2_msgs is installed (a full ROS 2 install; it is not on PyPI)."""
    pytest.importorskip("tf2_msgs")
    from nav_msgs.msg import Odometry
    from tf2_msgs.msg import TFMessage

    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args",
                             "-p", f"data:={data}", "-p", "split:=test", "-p", "republish_s:=0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_tf")
    got = {"odom": [], "tf": []}
    node.create_subscription(Odometry, "/odom", lambda m: got["odom"].append(m), 10)
    node.create_subscription(TFMessage, "/tf", lambda m: got["tf"].append(m), 100)
    try:
        assert _wait(node, lambda: got["odom"] and got["tf"], 60)
    finally:
        close_ros_test(node, [proc])
    t = got["tf"][-1].transforms[0]
    odom = next(o for o in got["odom"] if o.header.stamp == t.header.stamp)
    assert (t.header.frame_id, t.child_frame_id) == ("odom", "base_link")
    assert t.transform.translation.x == odom.pose.pose.position.x
    assert t.transform.rotation.z == odom.pose.pose.orientation.z


def test_real_time_bridge_moves_by_cmd_vel_alone(data, ros_env):
    """lockstep false: the policy node sends each action on /memnav/action and as a velocity on /cmd_vel; the
    bridge moves the robot by the velocity only, counts the actions toward the step limit and ends at STOP."""
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from memnav.ros.conversions import odometry_to_pose

    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args",
                             "-p", f"data:={data}", "-p", "split:=test", "-p", "lockstep:=false",
                             "-p", "rate_hz:=20.0", "-p", "auto_next:=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_real_time")
    got = {"gt": [], "result": []}
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(Odometry, "/memnav/ground_truth_pose", lambda m: got["gt"].append(m), 50)
    node.create_subscription(String, "/memnav/episode_result", lambda m: got["result"].append(m), latched)
    pub_action = node.create_publisher(String, "/memnav/action", 10)
    pub_cmd = node.create_publisher(Twist, "/cmd_vel", 10)
    try:
        assert _wait(node, lambda: len(got["gt"]) > 2 and pub_action.get_subscription_count() > 0, 60)
        start = odometry_to_pose(got["gt"][-1])
        for _ in range(3):                        # actions alone: counted, the robot stays put
            pub_action.publish(String(data="MOVE_FORWARD"))
        n = len(got["gt"])
        assert _wait(node, lambda: len(got["gt"]) > n + 5)
        still = odometry_to_pose(got["gt"][-1])
        assert math.hypot(still.x_m - start.x_m, still.y_m - start.y_m) < 1e-6
        turn = Twist()
        turn.angular.z = 0.5                      # a velocity alone: the robot turns
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pub_cmd.publish(turn)
            rclpy.spin_once(node, timeout_sec=0.05)
        assert _wait(node, lambda: abs(math.remainder(odometry_to_pose(got["gt"][-1]).yaw_rad - start.yaw_rad,
                                                      math.tau)) > 0.2)
        pub_action.publish(String(data="STOP"))
        assert _wait(node, lambda: got["result"])
        result = json.loads(got["result"][-1].data)
        assert result["steps"] == 4 and result["path_length_m"] < 0.05   # turning in place adds (almost) no path
    finally:
        close_ros_test(node, [proc])


def test_bridge_logs_a_results_json_it_cannot_write_and_exits_1_not_with_a_traceback(data, ros_env, tmp_path):
    """The results file is writable at start (checked then) but not after the episodes (here a folder took its
    place; a full disk, a read-only or removed folder alike): an error names the parameter and the path, and with
    exit_when_done the bridge exits with RESULTS_ERROR_EXIT."""
    from nav_msgs.msg import Odometry
    from std_msgs.msg import String

    results = tmp_path / "out" / "results.json"
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args",
                             "-p", f"data:={data}", "-p", "split:=test", "-p", "episodes:=1",
                             "-p", "exit_when_done:=true", "-p", f"results_json:={results}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_results_json")
    odom = []
    node.create_subscription(Odometry, "/odom", odom.append, 10)
    pub = node.create_publisher(String, "/memnav/action", 10)
    try:
        assert _wait(node, lambda: odom and pub.get_subscription_count() > 0, 60)
        results.mkdir(parents=True)
        pub.publish(String(data="STOP"))
        assert _wait(node, lambda: proc.poll() is not None, 30)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        out = stop_processes([proc])[0]
    assert "Traceback" not in out, out[-3000:]
    assert f"parameter 'results_json': the results of 1 episodes could not be written to {results}" in out, out[-3000:]
    assert "summary over 1 episodes" in out
    from memnav.ros.sim_bridge_node import RESULTS_ERROR_EXIT

    assert proc.returncode == RESULTS_ERROR_EXIT == 1


def test_bridge_under_use_sim_time_waits_for_clock_instead_of_stamping_zero(data, ros_env):
    from builtin_interfaces.msg import Time
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    from memnav.ros.embedding_msgs import stamp_to_ns

    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args",
                             "-p", f"data:={data}", "-p", "split:=test", "-p", "use_sim_time:=true",
                             "-p", "republish_s:=0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_sim_time")
    odom = []
    node.create_subscription(Odometry, "/odom", odom.append, 10)
    # as `ros2 bag play --clock` and memnav replay publish it
    pub_clock = node.create_publisher(Clock, "/clock", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
    try:
        assert _wait(node, lambda: node.count_subscribers("/clock") > 0, 60)
        _wait(node, lambda: odom, 3)
        assert odom == []   # no frame before the first /clock (it would be stamped 0)
        for _ in range(200):
            pub_clock.publish(Clock(clock=Time(sec=5)))
            if _wait(node, lambda: odom, 0.2):
                break
        assert odom and all(stamp_to_ns(m.header.stamp) == 5 * 10**9 for m in odom)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        out = stop_processes([proc])[0]
    assert "use_sim_time is set but no /clock has arrived: no episode starts until it does" in out


def _bridge_with_results(data, split, results):
    return subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args", "-p", f"data:={data}",
                             "-p", f"split:={split}", "-p", "episodes:=2", "-p", "exit_when_done:=true",
                             "-p", f"results_json:={results}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _results_listener(ros_env: int, name: str):
    """rclpy on the bridge's domain and a node `name` hearing /odom and /memnav/episode_result, with an action
    publisher: (node, odometry heard, episode results heard, action publisher)."""
    from nav_msgs.msg import Odometry
    from std_msgs.msg import String

    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node(name)
    odom, ended = [], []
    node.create_subscription(Odometry, "/odom", odom.append, 10)
    node.create_subscription(String, "/memnav/episode_result", ended.append, 10)
    return node, odom, ended, node.create_publisher(String, "/memnav/action", 10)


def _end_first_episode(node, pub, odom, ended):
    from std_msgs.msg import String

    assert _wait(node, lambda: odom and pub.get_subscription_count() > 0, 60), "the bridge did not come up"
    pub.publish(String(data="STOP"))
    assert _wait(node, lambda: ended)


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_ctrl_c_mid_run_keeps_the_ended_episodes_in_results_json(data, ros_env, tmp_path, signal_name):
    """Stopped after the first of two episodes (Ctrl-C, or SIGTERM from a launch or systemd): the results file holds
    that episode, marked interrupted as `memnav eval --json` after Ctrl-C (it was never written: all was lost)."""
    import signal

    results = tmp_path / "out" / "results.json"
    proc = _bridge_with_results(data, "test", results)
    node, odom, ended, pub = _results_listener(ros_env, "test_interrupted")
    try:
        _end_first_episode(node, pub, odom, ended)
        proc.send_signal(getattr(signal, signal_name))
        out, _ = proc.communicate(timeout=30)
    finally:
        close_ros_test(node, [proc])
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    doc = json.loads(results.read_text())
    assert doc["interrupted"] is True and doc["episodes"] == 1 and doc["episodes_selected"] == 2
    assert [e["episode_id"] for e in doc["per_episode"]] == [json.loads(ended[0].data)["episode_id"]]
    assert doc["source"] == "sim_bridge_node" and "error" not in doc


def test_an_episode_that_cannot_be_started_ends_the_run_with_the_results_so_far(ros_env, tmp_path):
    """The second episode's scene is removed while the first runs (a dataset on a network drive, an edited one): the
    bridge names the episode and the cause, writes the first episode's result and exits with EPISODE_ERROR_EXIT
    (it died in the callback with a traceback, writing nothing)."""
    from memnav.sim.episodes import load_episodes

    data = make_tiny_dataset(tmp_path / "houses", houses=4, seed=4)
    first, second = load_episodes(data, "train")[:2]
    assert first.scene_path != second.scene_path
    results = tmp_path / "results.json"
    proc = _bridge_with_results(data, "train", results)
    node, odom, ended, pub = _results_listener(ros_env, "test_scene_gone")
    try:
        assert _wait(node, lambda: odom and pub.get_subscription_count() > 0, 60), "the bridge did not come up"
        second.scene_path.unlink()
        _end_first_episode(node, pub, odom, ended)
        out, _ = proc.communicate(timeout=30)   # it ends by itself
    finally:
        close_ros_test(node, [proc])
    assert "Traceback" not in out, out[-3000:]
    assert f"episode {second.episode_id} ({second.scene_id}) cannot be started" in out and "not found" in out
    from memnav.ros.sim_bridge_node import EPISODE_ERROR_EXIT

    assert proc.returncode == EPISODE_ERROR_EXIT == 3
    doc = json.loads(results.read_text())
    assert doc["interrupted"] is True and doc["episodes_selected"] == 2
    assert [e["episode_id"] for e in doc["per_episode"]] == [first.episode_id]
    assert f"episode {second.episode_id}" in doc["error"]
