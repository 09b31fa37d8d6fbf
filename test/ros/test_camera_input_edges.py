"""encoder_node and stop_node on awkward but valid input, as real processes on an isolated domain: a depth image of
another camera (another frame_id), a camera that stamps every frame 0, a goal embedding of another length."""
import subprocess
import sys

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import close_ros_test, isolated_ros_env, spin_until  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

S = 1_000_000_000


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """An RGB-D encoder_node and a stop_node, each a process of its own, and a client node: yield
    (client, received messages, publishers, encoder, log paths)."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.core.encoder import Encoder, EncoderConfig, FrameEncoder, save_checkpoint

    tmp = tmp_path_factory.mktemp("camera_edges")
    checkpoint = tmp / "rgbd.pt"
    save_checkpoint(FrameEncoder(EncoderConfig(input_px=32, embedding_dim=16, widths=(8, 8, 8, 8), use_depth=True)),
                    checkpoint)
    env = isolated_ros_env(131)
    logs = {name: tmp / f"{name}.log" for name in ("encoder_node", "stop_node")}
    # the encoder's embeddings go to /enc/embedding: the stop node's /memnav/embedding carries the test's alone
    args = {"encoder_node": ["-p", f"checkpoint:={checkpoint}", "-r", "/memnav/embedding:=/enc/embedding"],
            "stop_node": []}
    procs = []
    for name, log in logs.items():
        with open(log, "w") as out:
            procs.append(subprocess.Popen([sys.executable, "-m", f"memnav.ros.{name}", "--ros-args", *args[name]],
                                          stdout=out, stderr=subprocess.STDOUT, env=env))
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_camera_edges")
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    got = {"emb": [], "stop": []}
    node.create_subscription(Image, "/enc/embedding", got["emb"].append, 50)
    node.create_subscription(String, "/memnav/stop_decision", got["stop"].append, 50)
    pubs = {"colour": node.create_publisher(Image, "/camera/color/image_raw", QoSProfile(depth=20)),
            "depth": node.create_publisher(Image, "/camera/depth/image_raw", QoSProfile(depth=20)),
            "goal_embedding": node.create_publisher(Image, "/memnav/goal_embedding", latched),
            "embedding": node.create_publisher(Image, "/memnav/embedding", QoSProfile(depth=10))}
    try:
        assert spin_until(node, lambda: pubs["colour"].get_subscription_count() >= 2
                          and pubs["depth"].get_subscription_count() >= 1
                          and pubs["embedding"].get_subscription_count() >= 1
                          and node.count_publishers("/enc/embedding") >= 1
                          and node.count_publishers("/memnav/stop_decision") >= 1, 60), \
            "\n".join(p.read_text()[-1500:] for p in logs.values())
        yield node, got, pubs, Encoder.from_checkpoint(checkpoint), logs
    finally:
        close_ros_test(node, procs)


def _frame(rng) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(0, 255, (24, 32, 3), dtype=np.uint8), rng.uniform(0.5, 4.0, (24, 32)).astype(np.float32)


def test_encoder_pairs_only_depth_of_the_colour_images_frame_and_names_both_frames(nodes):
    from memnav.ros.conversions import depth_to_image, rgb_to_image
    from memnav.ros.embedding_msgs import image_to_embedding, ns_to_stamp, stamp_to_ns

    node, got, pubs, encoder, logs = nodes
    rng = np.random.default_rng(1)
    warning = "no colour image pairs with a depth image: colour frame_id 'cam_a_color' on /camera/color/image_raw, " \
              "depth frame_id 'cam_b_depth' on /camera/depth/image_raw"
    # a depth stream of another camera, stamped exactly like the colour images: nothing pairs, and a warning names
    # both frames (repeated until it shows: discovery completes at its own pace)
    for i in range(1, 60):
        rgb, depth = _frame(rng)
        pubs["colour"].publish(rgb_to_image(rgb, ns_to_stamp(i * 1000), "cam_a_color"))
        pubs["depth"].publish(depth_to_image(depth, ns_to_stamp(i * 1000), "cam_b_depth"))
        if spin_until(node, lambda: warning in logs["encoder_node"].read_text(), 0.3):
            break
    assert warning in logs["encoder_node"].read_text(), logs["encoder_node"].read_text()[-2000:]
    spin_until(node, lambda: False, 0.5)
    assert got["emb"] == []
    # both cameras' depth on the topic, the other camera's first and at the colour image's very stamp: the colour
    # image pairs with its own camera's depth, 5 ms off
    sent = {}
    for k in (1, 2, 3):
        rgb, depth = _frame(rng)
        pubs["depth"].publish(depth_to_image(_frame(rng)[1], ns_to_stamp(k * S), "cam_b_depth"))
        spin_until(node, lambda: False, 0.05)
        pubs["colour"].publish(rgb_to_image(rgb, ns_to_stamp(k * S), "cam_a_color"))
        pubs["depth"].publish(depth_to_image(depth, ns_to_stamp(k * S + 5_000_000), "cam_a_color"))
        sent[k * S] = encoder.encode(rgb, depth)
    assert spin_until(node, lambda: len(got["emb"]) >= 3, 10), logs["encoder_node"].read_text()[-2000:]
    for msg in got["emb"]:
        assert np.allclose(image_to_embedding(msg, 16), sent[stamp_to_ns(msg.header.stamp)], atol=1e-5)
    got["emb"].clear()


def test_encoder_stamps_frames_stamped_zero_with_their_receive_time(nodes):
    from memnav.ros.conversions import depth_to_image, rgb_to_image
    from memnav.ros.embedding_msgs import image_to_embedding, ns_to_stamp, stamp_to_ns

    node, got, pubs, encoder, logs = nodes
    rng = np.random.default_rng(2)
    got["emb"].clear()
    start_ns = node.get_clock().now().nanoseconds
    expected = []
    for _ in range(3):   # three different frames, each stamped 0
        rgb, depth = _frame(rng)
        pubs["colour"].publish(rgb_to_image(rgb, ns_to_stamp(0), "cam_a_color"))
        pubs["depth"].publish(depth_to_image(depth, ns_to_stamp(0), "cam_a_color"))
        expected.append(encoder.encode(rgb, depth))
        n = len(expected)
        assert spin_until(node, lambda n=n: len(got["emb"]) >= n, 10), logs["encoder_node"].read_text()[-2000:]
    stamps = [stamp_to_ns(m.header.stamp) for m in got["emb"]]
    assert all(t >= start_ns for t in stamps) and len(set(stamps)) == 3   # receive times, not 0 or one repeated
    for msg, emb in zip(got["emb"], expected):
        assert np.allclose(image_to_embedding(msg, 16), emb, atol=1e-5)   # each frame its own embedding
    log = logs["encoder_node"].read_text()
    assert log.count("images on /camera/color/image_raw are stamped 0 (no time)") == 1, log[-2000:]


def test_stop_node_names_a_goal_embedding_of_another_length(nodes):
    from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp

    node, got, pubs, _, logs = nodes
    rng = np.random.default_rng(3)
    # the goal first, encoded by another checkpoint (16 values); the embeddings (256) after it: the goal is named,
    # as held and undecided (it came first) or as dropped (an embedding overtook it between the two topics)
    pubs["goal_embedding"].publish(embedding_to_image(rng.standard_normal(16), stamp=ns_to_stamp(S)))
    warnings = ("goal embedding (stamp 1000000000 ns) has length 16, the embeddings on /memnav/embedding 256",
                "dropped goal embedding (1 so far): its length is 16, the embeddings' 256")
    pub = pubs["embedding"]
    for i in range(60):
        pub.publish(embedding_to_image(rng.standard_normal(256), stamp=ns_to_stamp(2 * S + i)))
        if spin_until(node, lambda: any(w in logs["stop_node"].read_text() for w in warnings), 0.3):
            break
    log = logs["stop_node"].read_text()
    assert any(w in log for w in warnings) and "dropped embedding" not in log, log[-2000:]
    assert got["stop"] == []
    # a goal embedding of the embeddings' length: decisions
    pubs["goal_embedding"].publish(embedding_to_image(rng.standard_normal(256), stamp=ns_to_stamp(3 * S)))
    for i in range(60):
        pub.publish(embedding_to_image(rng.standard_normal(256), stamp=ns_to_stamp(4 * S + i)))
        if spin_until(node, lambda: got["stop"], 0.3):
            break
    assert got["stop"], logs["stop_node"].read_text()[-2000:]
