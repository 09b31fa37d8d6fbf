"""The memory node on its own (a real process over DDS): embeddings that wait for odometry of their instants."""
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import stop_processes, use_isolated_ros_domain  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parents[2] / "config" / "memnav.yaml"


def test_embeddings_faster_than_odometry_are_inserted_not_dropped(tmp_path, monkeypatch):
    """Embeddings whose odometry had not come yet waited in a queue of 10; the 11th threw the oldest away, logged
    as "no odometry for 0.5 s; queue full" although it had waited only milliseconds and odometry was there.
    Now the oldest one's wait ends early and it is inserted with the odometry there is."""
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.core.types import Pose2D
    from memnav.ros.conversions import pose_to_odometry
    from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp

    domain = use_isolated_ros_domain(monkeypatch, 113)
    log_path = tmp_path / "memory.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.memory_node", "--ros-args", "--params-file",
                                 str(CONFIG), "-p", "odom_wait_s:=30.0", "-p", "odom_max_age_s:=60.0",
                                 "-p", f"db_path:={tmp_path / 'memory.db'}"], stdout=log, stderr=subprocess.STDOUT)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_memory_node")
    try:
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        pub_odom = node.create_publisher(Odometry, "/odom", reliable)
        pub_emb = node.create_publisher(Image, "/memnav/embedding", reliable)
        events = []
        node.create_subscription(String, "/memnav/memory_event", lambda m: events.append(json.loads(m.data)), 50)

        def spin(seconds: float, cond) -> bool:
            end = time.monotonic() + seconds
            while time.monotonic() < end and not cond():
                rclpy.spin_once(node, timeout_sec=0.05)
                assert proc.poll() is None, log_path.read_text()
            return cond()

        assert spin(60.0, lambda: pub_emb.get_subscription_count() and pub_odom.get_subscription_count()
                    and node.count_publishers("/memnav/memory_event")), log_path.read_text()
        spin(1.0, lambda: False)                       # let the memory node match this node's publishers too
        base = 1_000_000_000
        pub_odom.publish(pose_to_odometry(Pose2D(0.0, 0.0, 0.0), ns_to_stamp(base), "odom", "base_link"))
        rng = np.random.default_rng(0)
        for i in range(1, 16):                         # 15 frames 0.1 s apart by stamp, sent at 30 Hz
            emb = rng.standard_normal(256).astype(np.float32)
            pub_emb.publish(embedding_to_image(emb / np.linalg.norm(emb), stamp=ns_to_stamp(base + i * 100_000_000),
                                               frame_id="odom"))
            spin(1 / 30, lambda: False)
        # with odom_wait_s 30, only the 5 beyond the queue's 10 can be inserted now; before, they were dropped
        assert spin(20.0, lambda: len(events) >= 5), (events, log_path.read_text())
        assert [e["stamp_ns"] for e in events[:5]] == [base + i * 100_000_000 for i in range(1, 6)]
        log = log_path.read_text()
        assert "queue full" not in log and "dropped embedding" not in log, log
        assert "10 embeddings wait for odometry of their instants" in log, log
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes([proc])


def test_relocalise_on_an_empty_memory_keeps_what_is_stored_next(tmp_path, monkeypatch):
    """~/relocalise on an empty memory (an operator's reflex after carrying the robot, before the first run) left
    it unlocalised with nothing to relocalise against: every place stored next waited for loop closures that could
    never come, ~/save reported them committed, and the node's clean exit forgot them all (0 places on restart)."""
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    from memnav.core.memory import SceneGraphConfig, SceneGraphMemory
    from memnav.core.types import Pose2D
    from memnav.ros.conversions import pose_to_odometry
    from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp

    domain = use_isolated_ros_domain(monkeypatch, 117)
    db = tmp_path / "memory.db"
    log_path = tmp_path / "memory.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.memory_node", "--ros-args", "--params-file",
                                 str(CONFIG), "-p", f"db_path:={db}"], stdout=log, stderr=subprocess.STDOUT)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_memory_node_relocalise")
    try:
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        pub_odom = node.create_publisher(Odometry, "/odom", reliable)
        pub_emb = node.create_publisher(Image, "/memnav/embedding", reliable)
        events = []
        node.create_subscription(String, "/memnav/memory_event", lambda m: events.append(json.loads(m.data)), 50)
        relocalise = node.create_client(Trigger, "/memory_node/relocalise")

        def spin(seconds: float, cond) -> bool:
            end = time.monotonic() + seconds
            while time.monotonic() < end and not cond():
                rclpy.spin_once(node, timeout_sec=0.05)
                assert proc.poll() is None, log_path.read_text()
            return cond()

        assert spin(60.0, lambda: relocalise.service_is_ready() and pub_emb.get_subscription_count()
                    and pub_odom.get_subscription_count()), log_path.read_text()
        spin(1.0, lambda: False)                       # let the memory node match this node's publishers too
        answer = relocalise.call_async(Trigger.Request())
        assert spin(10.0, answer.done) and answer.result().success, log_path.read_text()
        rng = np.random.default_rng(0)
        base = 1_000_000_000
        for i in range(3):                             # three places 2 m apart
            stamp = ns_to_stamp(base + i * 1_000_000_000)
            pub_odom.publish(pose_to_odometry(Pose2D(2.0 * i, 0.0, 0.0), stamp, "odom", "base_link"))
            emb = rng.standard_normal(256).astype(np.float32)
            pub_emb.publish(embedding_to_image(emb / np.linalg.norm(emb), stamp=stamp, frame_id="odom"))
            spin(0.1, lambda: False)
        assert spin(20.0, lambda: len(events) >= 3), (events, log_path.read_text())
        assert [e["localised"] for e in events] == [True] * 3, events
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes([proc])
    assert proc.returncode == 0, log_path.read_text()
    memory = SceneGraphMemory.from_config(SceneGraphConfig(db_path=str(db)))
    try:
        assert memory.stats().places == 3, log_path.read_text()
    finally:
        memory.close()


def test_clear_forgets_embeddings_still_waiting_for_odometry(tmp_path, monkeypatch):
    """Embeddings waiting for odometry of their instants when ~/clear came were kept, and went into the cleared
    memory as soon as odometry came: places of before the clear, at the odometry of before the clear."""
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    from memnav.core.types import Pose2D
    from memnav.ros.conversions import pose_to_odometry
    from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp

    domain = use_isolated_ros_domain(monkeypatch, 119)
    log_path = tmp_path / "memory.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.memory_node", "--ros-args", "--params-file",
                                 str(CONFIG), "-p", "odom_wait_s:=30.0", "-p", "odom_max_age_s:=60.0",
                                 "-p", f"db_path:={tmp_path / 'memory.db'}"], stdout=log, stderr=subprocess.STDOUT)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_memory_node_clear")
    try:
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        pub_odom = node.create_publisher(Odometry, "/odom", reliable)
        pub_emb = node.create_publisher(Image, "/memnav/embedding", reliable)
        events = []
        node.create_subscription(String, "/memnav/memory_event", lambda m: events.append(json.loads(m.data)), 50)
        clients = {name: node.create_client(Trigger, f"/memory_node/{name}") for name in ("clear", "save")}

        def spin(seconds: float, cond) -> bool:
            end = time.monotonic() + seconds
            while time.monotonic() < end and not cond():
                rclpy.spin_once(node, timeout_sec=0.05)
                assert proc.poll() is None, log_path.read_text()
            return cond()

        def call(name: str):
            future = clients[name].call_async(Trigger.Request())
            assert spin(10.0, future.done), log_path.read_text()
            return future.result()

        assert spin(60.0, lambda: all(c.service_is_ready() for c in clients.values())
                    and pub_emb.get_subscription_count() and pub_odom.get_subscription_count()), log_path.read_text()
        spin(1.0, lambda: False)                       # let the memory node match this node's publishers too
        rng = np.random.default_rng(0)

        def embedding(stamp_ns: int):
            emb = rng.standard_normal(256).astype(np.float32)
            return embedding_to_image(emb / np.linalg.norm(emb), stamp=ns_to_stamp(stamp_ns), frame_id="odom")

        base = 1_000_000_000
        pub_odom.publish(pose_to_odometry(Pose2D(0.0, 0.0, 0.0), ns_to_stamp(base), "odom", "base_link"))
        spin(0.3, lambda: False)
        for i in range(1, 4):                          # newer than all odometry: they wait for it
            pub_emb.publish(embedding(base + i * 100_000_000))
            spin(0.05, lambda: False)
        spin(0.5, lambda: False)
        assert call("clear").success and events == [], events
        after = base + 1_000_000_000
        pub_odom.publish(pose_to_odometry(Pose2D(5.0, 0.0, 0.0), ns_to_stamp(after), "odom", "base_link"))
        pub_emb.publish(embedding(after))
        assert spin(20.0, lambda: any(e["stamp_ns"] == after for e in events)), (events, log_path.read_text())
        spin(0.5, lambda: False)
        assert [e["stamp_ns"] for e in events] == [after], events
        assert json.loads(call("save").message)["places"] == 1
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes([proc])
