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
