"""encoder_node as a real process on an isolated domain: goal images paired with goal depth images by stamp."""
import subprocess
import sys

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import close_ros_test, isolated_ros_env, spin_until, wait_for_text  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_goal_depth_stamped_near_the_goal_image_is_paired_and_one_too_far_off_is_named(tmp_path):
    """A goal publisher of a user's own (or a RealSense's colour and depth of one moment) stamps the goal depth a
    few ms off the goal image: it went unpaired and the goal was encoded RGB-only, silently. Now the nearest depth
    within sync_tolerance_s is the goal's, as for camera frames and in `memnav eval-bag`; a goal encoded without
    depth although one came stamped beyond the tolerance logs both stamps and the tolerance."""
    from sensor_msgs.msg import Image

    from memnav.core.encoder import Encoder, EncoderConfig, FrameEncoder, save_checkpoint
    from memnav.ros.conversions import depth_to_image, rgb_to_image
    from memnav.ros.embedding_msgs import image_to_embedding, ns_to_stamp, stamp_to_ns
    from memnav.ros.qos import latched_qos

    checkpoint = tmp_path / "rgbd.pt"
    save_checkpoint(FrameEncoder(EncoderConfig(input_px=32, embedding_dim=16, widths=(8, 8, 8, 8), use_depth=True)),
                    checkpoint)
    env = isolated_ros_env(191)
    log = tmp_path / "encoder.log"
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.encoder_node", "--ros-args",
                             "-p", f"checkpoint:={checkpoint}", "-p", "sync_tolerance_s:=0.02",
                             "-p", "goal_depth_wait_s:=1.5"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("goal_depth_feeder")
    goals: list = []
    node.create_subscription(Image, "/memnav/goal_embedding", goals.append, latched_qos())
    pub_goal = node.create_publisher(Image, "/memnav/goal_image", latched_qos())
    pub_goal_depth = node.create_publisher(Image, "/memnav/goal_depth", latched_qos())
    rng = np.random.default_rng(3)
    s, ms = 1_000_000_000, 1_000_000
    try:
        assert spin_until(node, lambda: pub_goal.get_subscription_count() > 0
                          and pub_goal_depth.get_subscription_count() > 0
                          and node.count_publishers("/memnav/goal_embedding") > 0, 60), log.read_text()[-2000:]
        encoder = Encoder.from_checkpoint(checkpoint)
        # 1: depth stamped 6 ms after the goal image, sent first: the goal is encoded RGB-D, once
        rgb1 = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
        depth1 = rng.uniform(0.5, 4.0, (24, 32)).astype(np.float32)
        pub_goal_depth.publish(depth_to_image(depth1, ns_to_stamp(10 * s + 6 * ms)))
        spin_until(node, lambda: False, 0.3)
        pub_goal.publish(rgb_to_image(rgb1, ns_to_stamp(10 * s)))
        assert spin_until(node, lambda: len(goals) >= 1, 20), log.read_text()[-2000:]
        spin_until(node, lambda: False, 2.0)          # past goal_depth_wait_s: no second (RGB-only) embedding
        assert len(goals) == 1 and stamp_to_ns(goals[0].header.stamp) == 10 * s
        assert np.allclose(image_to_embedding(goals[0]), encoder.encode(rgb1, depth1), atol=1e-5)
        assert "goal embedding published (RGB-D, goal stamp 10000000000 ns)" in log.read_text()
        # 2: depth stamped 50 ms after the goal image (tolerance 20 ms): RGB-only after the wait, and said why
        rgb2 = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
        depth2 = rng.uniform(0.5, 4.0, (24, 32)).astype(np.float32)
        pub_goal.publish(rgb_to_image(rgb2, ns_to_stamp(20 * s)))
        pub_goal_depth.publish(depth_to_image(depth2, ns_to_stamp(20 * s + 50 * ms)))
        assert spin_until(node, lambda: len(goals) >= 2, 20), log.read_text()[-2000:]
        assert np.allclose(image_to_embedding(goals[1]), encoder.encode(rgb2, None), atol=1e-5)
        assert wait_for_text(log, "goal 20000000000 goes on without depth", 5), log.read_text()[-2000:]
        line = next(x for x in log.read_text().splitlines() if "goal 20000000000 goes on without depth" in x)
        assert "stamped 20050000000" in line and "50.0 ms" in line and "sync_tolerance_s (0.02 s)" in line, line
        assert proc.poll() is None
    finally:
        close_ros_test(node, [proc])


def test_the_checkpoint_is_announced_latched_with_its_hash(tmp_path):
    """Nothing said which checkpoint the embeddings come from: the stop node could not tell that its calibration
    was fitted on another one. Now a latched /memnav/encoder_checkpoint names the checkpoint and its sha256 (a
    node joining later still hears it), and /diagnostics carries the hash."""
    import json

    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import String

    from memnav.core.checkpoint import checkpoint_sha256
    from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint
    from memnav.ros.qos import latched_qos

    checkpoint = tmp_path / "mine.pt"
    save_checkpoint(FrameEncoder(EncoderConfig(input_px=32, embedding_dim=16, widths=(8, 8, 8, 8))), checkpoint)
    env = isolated_ros_env(199)
    log = tmp_path / "encoder.log"
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.encoder_node", "--ros-args",
                             "-p", f"checkpoint:={checkpoint}"], stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=env)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("checkpoint_listener")
    try:
        assert spin_until(node, lambda: node.count_publishers("/memnav/encoder_checkpoint") > 0, 60), \
            log.read_text()[-2000:]
        spin_until(node, lambda: False, 1.0)   # announced before this subscriber joins: latched, it still comes
        heard: list = []
        diagnosed: list = []
        node.create_subscription(String, "/memnav/encoder_checkpoint", lambda m: heard.append(json.loads(m.data)),
                                 latched_qos())
        node.create_subscription(DiagnosticArray, "/diagnostics",
                                 lambda m: diagnosed.extend(d for d in m.status if d.name == "/encoder_node"), 10)
        assert spin_until(node, lambda: heard and diagnosed, 10), (heard, diagnosed)
        sha = checkpoint_sha256(checkpoint)
        assert heard == [{"checkpoint": str(checkpoint), "sha256": sha}]
        assert {v.key: v.value for v in diagnosed[-1].values}["checkpoint_sha256"] == sha
        assert f"sha256 {sha}" in log.read_text()
    finally:
        close_ros_test(node, [proc])
