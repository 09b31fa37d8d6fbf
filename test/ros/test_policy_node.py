"""policy_node drives sim_bridge_node over DDS in lock-step: both are real processes on an isolated domain."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import close_ros_test, make_tiny_dataset  # noqa: E402

from memnav.core.policy import MemoryPolicy, PolicyConfig, save_policy  # noqa: E402
from memnav.core.types import Action, Pose2D  # noqa: E402
from memnav.ros.policy_node import PolicyNodeConfig  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_bad_config_fields_are_named():
    with pytest.raises(ValueError, match="action_duration_s"):
        PolicyNodeConfig(action_duration_s=0.0)
    with pytest.raises(ValueError, match="max_steps"):
        PolicyNodeConfig(max_steps=-1)
    with pytest.raises(ValueError, match="min_state_subscribers"):
        PolicyNodeConfig(min_state_subscribers=-1)
    for hfov in (180.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="camera_hfov_deg"):
            PolicyNodeConfig(camera_hfov_deg=hfov)
    with pytest.raises(ValueError, match="camera_height_m"):
        PolicyNodeConfig(camera_height_m=0.0)
    for forward in (2.5, -3.0, float("nan")):
        with pytest.raises(ValueError, match="PolicyNodeConfig.camera_forward_m"):
            PolicyNodeConfig(camera_forward_m=forward)
    with pytest.raises(ValueError, match="PolicyNodeConfig.camera_pitch_deg"):
        PolicyNodeConfig(camera_pitch_deg=90.0)
    for every in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="PolicyNodeConfig.mount_check_s"):
            PolicyNodeConfig(mount_check_s=every)


def test_policy_node_defaults_are_the_eval_agents_defaults():
    from memnav.eval.exploring_defaults import EXPLORING_CANDIDATE_NEAR_M, ExploringTuning
    from memnav.eval.learned_agents import LearnedAgentOptions

    node, agent = PolicyNodeConfig(), LearnedAgentOptions()
    assert isinstance(node, ExploringTuning) and isinstance(agent, ExploringTuning)
    assert ExploringTuning.values_of(node) == ExploringTuning.values_of(agent) == ExploringTuning.values_of(
        ExploringTuning())
    assert node.candidate_near_m == EXPLORING_CANDIDATE_NEAR_M
    assert (node.max_steps, node.explore, node.collision_fraction) == (agent.max_steps, agent.explore,
                                                                       agent.collision_fraction)


def test_policy_node_closes_the_loop(tmp_path, monkeypatch):
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=2)
    save_policy(MemoryPolicy(PolicyConfig(memory_tokens=24)), tmp_path / "policy_memnav.pt",
                extra={"variant": "memnav", "memory": "scene_graph"})
    domain = 40 + ((os.getpid() + 77) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from nav_msgs.msg import OccupancyGrid, Odometry
    from rclpy.event_handler import SubscriptionEventCallbacks
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String
    from visualization_msgs.msg import MarkerArray

    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_observer")
    got = {"state": [], "action": [], "result": [], "map": [], "markers": [], "odom": []}
    latched = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(String, "/memnav/policy_state", lambda m: got["state"].append(json.loads(m.data)), 50)
    node.create_subscription(String, "/memnav/action", lambda m: got["action"].append(m.data), 50)
    node.create_subscription(OccupancyGrid, "/memnav/map", got["map"].append, latched)
    node.create_subscription(MarkerArray, "/memnav/search_markers", got["markers"].append, 50)
    node.create_subscription(Odometry, "/odom", got["odom"].append,
                             QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
    matched = {"result": 0}
    node.create_subscription(String, "/memnav/episode_result", lambda m: got["result"].append(json.loads(m.data)),
                             latched, event_callbacks=SubscriptionEventCallbacks(
                                 matched=lambda info: matched.__setitem__("result", info.current_count)))
    # results are latched one deep and with exploration a 6-step episode ends within a fraction of a second:
    # the policy node (which starts the episodes moving) is started only once this node's result reader is
    # matched to the bridge, so no result can be missed; and it acts only once its action publisher has
    # matched both the bridge and this node, and its state publisher this node (else the first actions of a
    # freshly discovered publisher can go out before this node's readers are matched, and are lost)
    procs = [subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args", "-p", f"data:={data}",
                               "-p", "split:=test", "-p", "lockstep:=true", "-p", "sim.max_episode_steps:=6"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    end = time.monotonic() + 60
    while time.monotonic() < end and not matched["result"] and procs[0].poll() is None:
        rclpy.spin_once(node, timeout_sec=0.05)
    procs.append(subprocess.Popen([sys.executable, "-m", "memnav.ros.policy_node", "--ros-args",
                                   "-p", f"policy_dir:={tmp_path}", "-p", "lockstep:=true",
                                   "-p", "min_action_subscribers:=2", "-p", "min_state_subscribers:=1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and len({r["episode_id"] for r in got["result"]}) < 2:
            rclpy.spin_once(node, timeout_sec=0.05)
        results = {r["episode_id"]: r for r in got["result"]}
        if len(results) < 2:
            for p in procs:
                p.send_signal(signal.SIGINT)
            outs = [p.communicate(timeout=10)[0][-3000:] for p in procs]
            pytest.fail(f"episodes finished: {list(results)}; actions seen: {len(got['action'])}\n" + "\n".join(outs))
        for r in results.values():
            assert r["steps"] <= 6 and r["goal_stamp_ns"] > 0
        modes = ("policy", "homing", "look", "explore", "candidate", "approach", "sweep", "best_view", "stop")
        assert got["state"] and all(0.0 <= s["belief"] <= 1.0 and s["mode"] in modes for s in got["state"])
        # a fresh memory per goal (no lifelong_dir): localised from the start, no saved house map to lay
        assert all(s["localised"] is True and s["house_map"] == "none" for s in got["state"])
        assert set(got["action"]) <= {a.name for a in Action}
        assert len(got["action"]) >= sum(r["steps"] for r in results.values())
        # the agent's own occupancy map for RViz, in the frame of /odom: six steps of the look-around at the
        # start, so the robot has not moved and stands on a free cell of it
        assert got["map"] and got["markers"]
        grid = got["map"][-1]
        cells = np.array(grid.data, np.int8).reshape(grid.info.height, grid.info.width)
        assert grid.header.frame_id == got["odom"][-1].header.frame_id and grid.info.resolution == pytest.approx(0.1)
        assert (cells == 0).sum() > 100 and (cells == 100).sum() > 10 and set(np.unique(cells)) <= {-1, 0, 100}
        o = grid.info.origin
        origin = Pose2D(o.position.x, o.position.y, 2 * math.atan2(o.orientation.z, o.orientation.w))
        on_free = []
        for m in got["odom"]:
            rel = Pose2D(m.pose.pose.position.x, m.pose.pose.position.y, 0.0).relative_to(origin)
            r, c = int(rel.y_m // grid.info.resolution), int(rel.x_m // grid.info.resolution)
            on_free.append(0 <= r < cells.shape[0] and 0 <= c < cells.shape[1] and cells[r, c] == 0)
        assert any(on_free)
        # ~/relocalise (the robot was carried): the memory relocalises, the search starts over if a goal is on
        from std_srvs.srv import Trigger

        client = node.create_client(Trigger, "/policy_node/relocalise")
        assert client.wait_for_service(timeout_sec=10.0)
        fut = client.call_async(Trigger.Request())
        end = time.monotonic() + 10
        while time.monotonic() < end and not fut.done():
            rclpy.spin_once(node, timeout_sec=0.05)
        reply = fut.result()
        assert reply is not None and reply.success
        body = json.loads(reply.message)
        assert body["localised"] is False and isinstance(body["search_restarted"], bool)
        assert all(p.poll() is None for p in procs)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def test_a_policy_node_whose_camera_mount_is_wrong_says_so(tmp_path):
    """The simulator bridge's camera 0.9 m up and 15 deg down, the policy node left at 1.25 m and 0 deg (no goal
    needed): from the floor in view it logs the values to set and reports them on /diagnostics."""
    from conftest import isolated_ros_env, spin_until, start_sim_robot
    from diagnostic_msgs.msg import DiagnosticArray

    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=1)
    env = isolated_ros_env(157)
    procs, report = start_sim_robot(data, env, tmp_path, lockstep=False,
                                    bridge_args=["-p", "sim.sensor_height_m:=0.9", "-p", "sim.sensor_pitch_deg:=15.0",
                                                 "-p", "auto_next:=false"],
                                    policy_args=["-p", "mount_check_s:=1.0"])
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_mount_listener")
    diags = []
    node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diags.extend(m.status), 50)
    try:
        def warned() -> bool:
            return any(d.name == "/policy_node" and d.level == bytes([1]) and "camera mount: " in d.message
                       for d in diags[-5:])
        assert spin_until(node, warned, 90.0), report()
        text = next(d.message for d in reversed(diags) if d.name == "/policy_node" and "camera mount" in d.message)
        assert "set camera_height_m 0.9" in text and "camera_pitch_deg 1" in text, text
    finally:
        close_ros_test(node, procs)
    assert "camera mount: the floor in view puts the camera 0.9" in (tmp_path / "policy.log").read_text(), report()


def test_a_goal_photo_delivered_again_after_its_goal_ended_does_not_start_it_again(tmp_path):
    """The same goal photo (its stamp) once more after the goal ended: a publisher that repeats it, a latched sample
    delivered again after a reconnection. The goal started again from scratch and the robot, stopped at the goal,
    drove off searching for it."""
    from conftest import isolated_ros_env, spin_until, start_policy_node
    from test_policy_bridge_edges import Feeder

    from memnav.ros import conversions as conv

    env = isolated_ros_env(173)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("repeat_feeder")
    feeder = Feeder(node)
    log = tmp_path / "policy.log"
    proc = start_policy_node(env, log, lockstep=False, args=["-p", "map_period_s:=0.0", "-p",
                                                             "goal_depth_wait_s:=0.0", "-p", "max_steps:=2"])
    try:
        assert spin_until(node, lambda: node.count_subscribers("/memnav/goal_image") > 0, 60), log.read_text()[-2000:]
        photo = conv.rgb_to_image(np.random.default_rng(1).integers(0, 255, (96, 128, 3), dtype=np.uint8),
                                  node.get_clock().now().to_msg())
        feeder.pub_goal.publish(photo)
        # max_steps 2: the second action is a STOP, the goal's end
        assert spin_until(node, lambda: any(s["status"] == "budget" for s in feeder.statuses), 60), \
            log.read_text()[-2000:]
        actions = len(feeder.actions)
        feeder.pub_goal.publish(photo)
        spin_until(node, lambda: False, 3.0)
        assert [s["status"] for s in feeder.statuses] == ["active", "budget"], feeder.statuses
        assert len(feeder.actions) == actions and proc.poll() is None
        assert "has ended: the same photo again is ignored" in log.read_text()
        feeder.send_goal(2)                          # a goal sent anew still starts
        assert spin_until(node, lambda: [s["status"] for s in feeder.statuses][-1:] == ["budget"]
                          and len(feeder.statuses) == 4, 60), feeder.statuses
    finally:
        close_ros_test(node, [proc])


def test_depth_in_another_frame_than_the_colour_image_is_not_used(tmp_path):
    """Depth of the depth camera's own frame (unregistered: its pixels are not the colour image's) was paired by
    stamp and mapped; now it is not used, and the log names both frames, as the encoder node does."""
    from conftest import isolated_ros_env, spin_until, start_policy_node
    from test_policy_bridge_edges import Feeder

    env = isolated_ros_env(179)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("frame_feeder")
    feeder = Feeder(node)
    feeder.depth_frame = "camera_depth_optical_frame"
    log = tmp_path / "policy.log"
    proc = start_policy_node(env, log, lockstep=False, args=["-p", "map_period_s:=0.0", "-p",
                                                             "goal_depth_wait_s:=0.0", "-p", "max_steps:=3"])
    try:
        assert spin_until(node, lambda: node.count_subscribers("/memnav/goal_image") > 0, 60), log.read_text()[-2000:]
        feeder.send_goal(3)
        assert spin_until(node, lambda: "depth image in frame_id 'camera_depth_optical_frame'" in log.read_text(),
                          30), log.read_text()[-2000:]
        spin_until(node, lambda: False, 2.0)
        assert feeder.actions == [] and proc.poll() is None          # no colour-depth pair, no decision
        assert "colour in 'camera_color_optical_frame': not used" in log.read_text()
        feeder.depth_frame = "camera_color_optical_frame"            # registered depth: decisions come
        assert spin_until(node, lambda: len(feeder.actions) >= 1, 60), log.read_text()[-2000:]
    finally:
        close_ros_test(node, [proc])


def test_goal_depth_stamped_near_the_goal_photo_is_the_goals_and_one_too_far_off_is_named(tmp_path):
    """A goal publisher of a user's own (or a RealSense's colour and depth of one moment) stamps the goal depth a
    few ms off the photo: the goal went on RGB-only, silently. Now the nearest goal depth within sync_tolerance_s
    is the goal's (as for camera frames and in `memnav eval-bag`), and a goal that goes on without depth although
    one came stamped beyond the tolerance logs both stamps and the tolerance."""
    from conftest import isolated_ros_env, spin_until, start_policy_node, wait_for_text
    from sensor_msgs.msg import Image
    from test_policy_bridge_edges import Feeder

    from memnav.ros import conversions as conv
    from memnav.ros.embedding_msgs import ns_to_stamp, stamp_to_ns
    from memnav.ros.qos import latched_qos

    env = isolated_ros_env(193)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("goal_depth_feeder")
    feeder = Feeder(node)
    pub_goal_depth = node.create_publisher(Image, "/memnav/goal_depth", latched_qos())
    log = tmp_path / "policy.log"
    proc = start_policy_node(env, log, lockstep=False, args=["-p", "map_period_s:=0.0", "-p", "max_steps:=2",
                                                             "-p", "sync_tolerance_s:=0.02",
                                                             "-p", "goal_depth_wait_s:=1.0"])
    ms = 1_000_000
    rng = np.random.default_rng(5)

    def send(depth_offset_ns: int) -> int:
        t = stamp_to_ns(node.get_clock().now().to_msg())
        depth = np.full((96, 128), 1.5, np.float32)
        pub_goal_depth.publish(conv.depth_to_image(depth, ns_to_stamp(t + depth_offset_ns)))
        spin_until(node, lambda: False, 0.3)   # the depth first: the goal starts with it, no restart
        feeder.pub_goal.publish(conv.rgb_to_image(rng.integers(0, 255, (96, 128, 3), dtype=np.uint8),
                                                  ns_to_stamp(t)))
        return t

    try:
        assert spin_until(node, lambda: node.count_subscribers("/memnav/goal_depth") > 0, 60), log.read_text()[-2000:]
        send(6 * ms)                           # 6 ms off: the goal's depth
        assert spin_until(node, lambda: [s["status"] for s in feeder.statuses] == ["active", "budget"], 60), \
            log.read_text()[-2000:]
        assert "new goal image (RGB-D): episode started" in log.read_text()
        assert "goes on without depth" not in log.read_text()
        t = send(50 * ms)                      # 50 ms off (tolerance 20 ms): RGB-only, and said why
        assert spin_until(node, lambda: len(feeder.statuses) == 4 and feeder.statuses[-1]["status"] == "budget", 60), \
            log.read_text()[-2000:]
        assert "new goal image (RGB): episode started" in log.read_text()
        assert wait_for_text(log, f"goal {t} goes on without depth", 5), log.read_text()[-2000:]
        line = next(x for x in log.read_text().splitlines() if f"goal {t} goes on without depth" in x)
        assert f"stamped {t + 50 * ms}" in line and "50.0 ms" in line and "sync_tolerance_s (0.02 s)" in line, line
        assert proc.poll() is None
    finally:
        close_ros_test(node, [proc])
