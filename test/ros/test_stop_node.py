"""stop_node's calibration loading and config validation (the node itself runs in test_stack_nodes.py), and the
node as a real process over DDS on embeddings whose values are extreme."""
import json
import subprocess
import sys

import numpy as np
import pytest

from memnav.ros.model_paths import PACKAGE_ROOT
from memnav.ros.stop_node import FEATURES, StopNodeConfig, load_calibrator


def test_shipped_calibration_uses_the_node_features():
    cal = load_calibrator(PACKAGE_ROOT / "models" / "stop_calibration.json")
    assert cal.feature_names == FEATURES
    near, far = cal.predict([0.95, 1.0])[0], cal.predict([0.2, 0.0])[0]
    assert 0.0 <= far < near <= 1.0


def test_other_calibrations_are_refused(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"feature_names": ["similarity"], "weights": [1.0, 0.0]}))
    with pytest.raises(ValueError, match=r"one\.json.*features \('similarity',\)"):
        load_calibrator(one)
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    with pytest.raises(ValueError, match="not a stop calibration"):
        load_calibrator(junk)


def test_config_validation():
    with pytest.raises(ValueError, match="verify_min_similarity"):
        StopNodeConfig(verify_min_similarity=1.5)
    with pytest.raises(ValueError, match="image_queue_size"):
        StopNodeConfig(image_queue_size=0)


@pytest.mark.ros
def test_a_calibration_with_nan_weights_is_refused_at_start(tmp_path, monkeypatch):
    """It was accepted, and the node died with a traceback at its first decision (belief NaN)."""
    pytest.importorskip("rclpy")
    from conftest import use_isolated_ros_domain

    from memnav.ros.stack_node import CONFIG_ERROR_EXIT

    use_isolated_ros_domain(monkeypatch, 131)
    cal = tmp_path / "nan.json"
    cal.write_text('{"feature_names": ["similarity", "verification"], "weights": [NaN, 1.0, 0.0]}')
    run = subprocess.run([sys.executable, "-m", "memnav.ros.stop_node", "--ros-args", "-p", f"calibration:={cal}"],
                         capture_output=True, text=True, timeout=45)
    assert run.returncode == CONFIG_ERROR_EXIT and "Traceback" not in run.stderr + run.stdout, run.stderr[-2000:]
    assert f"{cal}: weights must be finite numbers" in run.stderr, run.stderr


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


@pytest.mark.ros
@pytest.mark.slow
def test_embeddings_of_tiny_or_huge_values_get_their_true_similarity(tmp_path, monkeypatch):
    """The cosine similarity was computed in float32: the squares of an embedding's values of 1e-30 underflowed and
    those of 1e20 overflowed, so an embedding pointing at the goal had similarity Infinity (stop true at belief 1,
    published as invalid JSON) or 0, and a goal and an embedding both of tiny values gave NaN: the node died."""
    rclpy = pytest.importorskip("rclpy")
    from conftest import spin_while_alive, stop_processes, use_isolated_ros_domain
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp

    domain = use_isolated_ros_domain(monkeypatch, 133)
    log_path = tmp_path / "stop.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.stop_node"], stdout=log, stderr=subprocess.STDOUT)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_stop_node")
    try:
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        pub_goal = node.create_publisher(Image, "/memnav/goal_embedding", latched)
        pub_emb = node.create_publisher(Image, "/memnav/embedding", QoSProfile(depth=10))
        raw: list[str] = []
        node.create_subscription(String, "/memnav/stop_decision", lambda m: raw.append(m.data), 10)

        def spin(seconds: float, cond) -> bool:
            return spin_while_alive(node, proc, log_path, cond, seconds)

        assert spin(60.0, lambda: pub_emb.get_subscription_count() and pub_goal.get_subscription_count()
                    and node.count_publishers("/memnav/stop_decision")), log_path.read_text()
        direction = np.random.default_rng(0).standard_normal(256).astype(np.float32)
        direction /= np.linalg.norm(direction)
        stamp = 1_000_000_000
        for goal_scale, scales in ((1.0, (1e-30, 1e20, 1.0)), (1e-30, (1e-30,))):
            pub_goal.publish(embedding_to_image(direction * np.float32(goal_scale), stamp=ns_to_stamp(stamp)))
            spin(1.0, lambda: False)   # the goal first (another topic: not ordered with the embeddings)
            for scale in scales:
                stamp += 1
                want = len(raw) + 1
                pub_emb.publish(embedding_to_image(direction * np.float32(scale), stamp=ns_to_stamp(stamp)))
                assert spin(10.0, lambda want=want: len(raw) >= want), (scale, raw, log_path.read_text())
                decision = json.loads(raw[-1], parse_constant=_no_constants)
                assert decision["stamp_ns"] == stamp
                assert decision["similarity"] == pytest.approx(1.0, abs=1e-5), (goal_scale, scale, decision)
        assert "Traceback" not in log_path.read_text()
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_processes([proc])
