"""stop_node's calibration loading and config validation (the node itself runs in test_stack_nodes.py), and the
node as a real process over DDS on embeddings whose values are extreme."""
import contextlib
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import close_ros_test

from memnav.ros.encoder_node import EncoderNodeConfig
from memnav.ros.model_paths import PACKAGE_ROOT
from memnav.ros.stop_node import FEATURES, StopNodeConfig, load_calibrator


def test_shipped_calibration_uses_the_node_features():
    cal = load_calibrator(PACKAGE_ROOT / "models" / "stop_calibration.json")
    assert cal.feature_names == FEATURES
    near, far = cal.predict([0.95, 1.0])[0], cal.predict([0.2, 0.0])[0]
    assert 0.0 <= far < near <= 1.0


def test_shipped_calibration_names_the_shipped_encoder_by_its_hash():
    """The shipped calibration named its encoder only by path: nothing could tell a user's own encoder.pt from it."""
    from memnav.core.checkpoint import checkpoint_sha256
    from memnav.core.stop import calibrated_checkpoint

    calibrated = calibrated_checkpoint(PACKAGE_ROOT / "models" / "stop_calibration.json")
    assert calibrated.path == "models/encoder.pt"
    assert calibrated.sha256 == checkpoint_sha256(PACKAGE_ROOT / calibrated.path)
    assert calibrated.sha256 == checkpoint_sha256(PACKAGE_ROOT / EncoderNodeConfig().checkpoint)   # what it runs
    for cal in sorted((PACKAGE_ROOT / "models").glob("stop_calibration_*.json")):   # each shipped pair agrees
        calibrated = calibrated_checkpoint(cal)
        assert calibrated.sha256 == checkpoint_sha256(PACKAGE_ROOT / calibrated.path), cal.name


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


@contextlib.contextmanager
def _stop_node_and_publishers(tmp_path, monkeypatch, offset: int, name: str):
    """A stop node process on an isolated domain, a test node with latched goal-embedding and embedding publishers,
    and spin(seconds, cond) that fails when the stop node dies; both nodes are stopped afterwards."""
    rclpy = pytest.importorskip("rclpy")
    from conftest import spin_while_alive, use_isolated_ros_domain
    from sensor_msgs.msg import Image

    from memnav.ros.qos import latched_qos

    domain = use_isolated_ros_domain(monkeypatch, offset)
    log_path = tmp_path / "stop.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.stop_node"], stdout=log, stderr=subprocess.STDOUT)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node(name)
    try:
        pub_goal = node.create_publisher(Image, "/memnav/goal_embedding", latched_qos())
        pub_emb = node.create_publisher(Image, "/memnav/embedding", 10)

        def spin(seconds: float, cond=lambda: False) -> bool:
            return spin_while_alive(node, proc, log_path, cond, seconds)

        yield node, log_path, pub_goal, pub_emb, spin
    finally:
        close_ros_test(node, [proc])


@pytest.mark.ros
@pytest.mark.slow
def test_embeddings_of_tiny_or_huge_values_get_their_true_similarity(tmp_path, monkeypatch):
    """The cosine similarity was computed in float32: the squares of an embedding's values of 1e-30 underflowed and
    those of 1e20 overflowed, so an embedding pointing at the goal had similarity Infinity (stop true at belief 1,
    published as invalid JSON) or 0, and a goal and an embedding both of tiny values gave NaN: the node died."""
    with _stop_node_and_publishers(tmp_path, monkeypatch, 133, "test_stop_node") as (node, log_path, pub_goal,
                                                                                      pub_emb, spin):
        from std_msgs.msg import String

        from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp

        raw: list[str] = []
        node.create_subscription(String, "/memnav/stop_decision", lambda m: raw.append(m.data), 10)
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


@pytest.mark.ros
@pytest.mark.slow
def test_a_goal_that_ended_gets_no_more_decisions(tmp_path, monkeypatch):
    """The stop node went on deciding, "stop" or not, for a goal the policy node had cancelled or reached, for as
    long as embeddings came; and a node started late took up a goal that had already ended."""
    rclpy = pytest.importorskip("rclpy")
    from conftest import spin_while_alive, stop_processes, use_isolated_ros_domain
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp
    from memnav.ros.qos import events_qos, latched_qos

    domain = use_isolated_ros_domain(monkeypatch, 139)
    log_path = tmp_path / "stop.log"
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_stop_goal_status")
    pub_goal = node.create_publisher(Image, "/memnav/goal_embedding", latched_qos())
    pub_emb = node.create_publisher(Image, "/memnav/embedding", 10)
    pub_status = node.create_publisher(String, "/memnav/goal_status", events_qos())
    decisions: list[dict] = []
    node.create_subscription(String, "/memnav/stop_decision", lambda m: decisions.append(json.loads(m.data)), 50)
    direction = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    direction /= np.linalg.norm(direction)
    procs = []

    def start():
        with open(log_path, "a") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "memnav.ros.stop_node"], stdout=log,
                                          stderr=subprocess.STDOUT))

    def spin(seconds: float, cond=lambda: False) -> bool:
        return spin_while_alive(node, procs[-1], log_path, cond, seconds)

    def embedding(stamp_ns: int) -> None:
        pub_emb.publish(embedding_to_image(direction, stamp=ns_to_stamp(stamp_ns)))

    def status(goal_ns: int, what: str) -> None:
        pub_status.publish(String(data=json.dumps({"goal_stamp_ns": goal_ns, "status": what, "actions": 3})))

    try:
        start()
        assert spin(60.0, lambda: pub_emb.get_subscription_count() and pub_status.get_subscription_count()
                    and node.count_publishers("/memnav/stop_decision")), log_path.read_text()
        goal = 1_000_000_000
        pub_goal.publish(embedding_to_image(direction, stamp=ns_to_stamp(goal)))
        spin(1.0)
        embedding(goal + 1)
        assert spin(10.0, lambda: len(decisions) == 1), (decisions, log_path.read_text())
        status(goal, "cancelled")
        spin(1.0)
        for k in (2, 3, 4):
            embedding(goal + k)
        spin(2.0)
        assert len(decisions) == 1, decisions                        # none for the cancelled goal
        assert "goal (stamp 1000000000 ns) cancelled: no more stop decisions" in log_path.read_text()
        # a stop node started after the goal ended: the latched goal embedding and the status history reach it
        stop_processes(procs)
        start()
        assert spin(60.0, lambda: pub_emb.get_subscription_count() and pub_status.get_subscription_count()),\
            log_path.read_text()
        spin(2.0)
        embedding(goal + 5)
        spin(2.0)
        assert len(decisions) == 1, decisions
        later = goal + 10_000_000_000                               # the next goal is decided on again
        pub_goal.publish(embedding_to_image(direction, stamp=ns_to_stamp(later)))
        spin(1.0)
        embedding(later + 1)
        assert spin(10.0, lambda: len(decisions) == 2), (decisions, log_path.read_text())
        assert decisions[-1]["goal_stamp_ns"] == later
    finally:
        close_ros_test(node, procs)


@pytest.mark.ros
@pytest.mark.slow
def test_a_new_encoder_embedding_length_is_taken_but_not_from_one_odd_embedding(tmp_path, monkeypatch):
    """Once the stop node had decided on embeddings of one length, a goal embedding of another length was dropped
    for good: an encoder restarted with another checkpoint (every embedding, and the goal re-encoded, now of the
    new length) got no stop decision until the stop node was restarted too."""
    rng = np.random.default_rng(0)
    units = {n: (v / np.linalg.norm(v)).astype(np.float32) for n in (64, 32, 48) for v in [rng.standard_normal(n)]}
    with _stop_node_and_publishers(tmp_path, monkeypatch, 181, "test_stop_lengths") as (node, log_path, pub_goal,
                                                                                         pub_emb, spin):
        from std_msgs.msg import String

        from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp
        from memnav.ros.stop_node import LENGTH_SWITCH_AFTER

        decisions: list[dict] = []
        node.create_subscription(String, "/memnav/stop_decision", lambda m: decisions.append(json.loads(m.data)), 50)

        def goal(length: int, stamp_ns: int) -> None:
            pub_goal.publish(embedding_to_image(units[length], stamp=ns_to_stamp(stamp_ns)))
            spin(1.0)   # another topic than the embeddings: not ordered with them

        def embedding(length: int, stamp_ns: int, decided: bool) -> None:
            n = len(decisions)
            pub_emb.publish(embedding_to_image(units[length], stamp=ns_to_stamp(stamp_ns)))
            if decided:
                assert spin(10.0, lambda: len(decisions) > n), (length, stamp_ns, decisions, log_path.read_text())
                assert decisions[-1]["stamp_ns"] == stamp_ns
            else:
                spin(0.5)
                assert len(decisions) == n, (length, stamp_ns, decisions[n:])

        def switches() -> list[str]:
            return [line for line in log_path.read_text().splitlines() if "/memnav/embedding now have length" in line]

        assert spin(60.0, lambda: pub_emb.get_subscription_count() and pub_goal.get_subscription_count()
                    and node.count_publishers("/memnav/stop_decision")), log_path.read_text()
        s = 1_000_000_000
        goal(64, s)
        embedding(64, s + 1, decided=True)
        # one odd embedding is dropped and changes nothing; neither do fewer than LENGTH_SWITCH_AFTER in a row
        embedding(32, s + 2, decided=False)
        embedding(64, s + 3, decided=True)
        for k in range(LENGTH_SWITCH_AFTER - 1):
            embedding(32, s + 10 + k, decided=False)
        assert switches() == [], switches()
        embedding(64, s + 20, decided=True)
        assert decisions[-1]["goal_stamp_ns"] == s and decisions[-1]["similarity"] == pytest.approx(1.0, abs=1e-5)
        # the encoder restarted with a 32-long checkpoint: after LENGTH_SWITCH_AFTER in a row the node says so once
        for k in range(LENGTH_SWITCH_AFTER):
            embedding(32, s + 30 + k, decided=False)   # the goal is still 64 long: nothing to decide on
        assert spin(2.0, lambda: len(switches()) == 1), log_path.read_text()
        assert "now have length 32, before 64" in switches()[0]
        goal(32, s)                                    # the goal photo re-encoded by the new encoder: taken
        embedding(32, s + 40, decided=True)
        assert decisions[-1]["goal_stamp_ns"] == s and decisions[-1]["similarity"] == pytest.approx(1.0, abs=1e-5)
        # and again, the goal first this time: it is held, and the first embedding of its length agrees with it
        later = 5 * s
        goal(48, later)
        assert "dropped goal embedding" in log_path.read_text()
        embedding(32, later + 1, decided=True)         # meanwhile the last goal is decided on
        assert decisions[-1]["goal_stamp_ns"] == s
        embedding(48, later + 2, decided=True)
        assert decisions[-1]["goal_stamp_ns"] == later
        assert decisions[-1]["similarity"] == pytest.approx(1.0, abs=1e-5)
        assert len(switches()) == 2 and "now have length 48, before 32" in switches()[1], switches()
        spin(0.2)   # asserts that the node is still running
        assert "Traceback" not in log_path.read_text()



@pytest.mark.ros
@pytest.mark.slow
def test_an_encoder_running_another_checkpoint_than_the_calibrations_is_named_once(tmp_path):
    """The calibration is fitted on the similarities of one encoder checkpoint, but nothing told the stop node which
    checkpoint the encoder node runs: a user's own encoder with the shipped calibration got a silently miscalibrated
    stop. Now the encoder node announces its checkpoint's hash and the stop node warns once, naming both and the
    command to recalibrate, and says WARN on /diagnostics; a calibration without the hash is not checked (one info
    line), and the shipped encoder with the shipped calibration is silent."""
    rclpy = pytest.importorskip("rclpy")
    from conftest import isolated_ros_env, spin_until, stop_processes, wait_for_text
    from diagnostic_msgs.msg import DiagnosticArray

    from memnav.core.checkpoint import checkpoint_sha256
    from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint

    mine = tmp_path / "my_encoder.pt"
    save_checkpoint(FrameEncoder(EncoderConfig(input_px=32, embedding_dim=16, widths=(8, 8, 8, 8))), mine)
    shipped = PACKAGE_ROOT / "models" / "stop_calibration.json"
    shipped_sha = checkpoint_sha256(PACKAGE_ROOT / "models" / "encoder.pt")
    old = tmp_path / "old_calibration.json"            # as `memnav train stop` wrote them before the hash
    old.write_text(json.dumps({k: v for k, v in json.loads(shipped.read_text()).items() if k != "checkpoint_sha256"}))
    env = isolated_ros_env(197)
    logs = {name: tmp_path / f"{name}.log" for name in ("stop", "stop_old", "encoder", "encoder_shipped")}
    procs: list[subprocess.Popen] = []

    def start(log: str, *args: str) -> None:
        with open(logs[log], "w") as out:
            procs.append(subprocess.Popen([sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT,
                                          env=env))

    start("stop", "memnav.ros.stop_node")
    start("stop_old", "memnav.ros.stop_node", "--ros-args", "-r", "__node:=stop_node_old",
          "-p", f"calibration:={old}")
    start("encoder", "memnav.ros.encoder_node", "--ros-args", "-p", f"checkpoint:={mine}")
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("test_stop_checkpoint")
    diagnosed: list = []
    node.create_subscription(DiagnosticArray, "/diagnostics",
                             lambda m: diagnosed.extend(d for d in m.status if d.name == "/stop_node"), 50)

    def warnings() -> list[str]:
        return [line for line in logs["stop"].read_text().splitlines() if "was fitted on encoder checkpoint" in line]

    try:
        assert spin_until(node, lambda: len(warnings()) == 1, 60), \
            {k: v.read_text()[-2000:] for k, v in logs.items() if v.exists()}
        line = warnings()[0]
        assert "WARN" in line, line
        for part in (f"stop calibration {shipped}", f"models/encoder.pt (sha256 {shipped_sha})",
                     f"{mine} (sha256 {checkpoint_sha256(mine)})", f"memnav train stop --checkpoint {mine}"):
            assert part in line, line
        assert spin_until(node, lambda: any(d.level == bytes([1]) and "another checkpoint than the calibration's"
                                            in d.message for d in diagnosed[-2:]), 10), diagnosed[-2:]
        # no hash in the calibration: one info line, no check
        assert wait_for_text(logs["stop_old"], "does not name its encoder checkpoint's hash", 10), \
            logs["stop_old"].read_text()
        assert "was fitted on encoder checkpoint" not in logs["stop_old"].read_text()
        # the encoder restarted on the shipped checkpoint: said once, and /diagnostics no longer warns of it
        stop_processes([procs.pop()])
        start("encoder_shipped", "memnav.ros.encoder_node")
        assert spin_until(node, lambda: "now runs" in logs["stop"].read_text(), 60), logs["stop"].read_text()
        diagnosed.clear()
        assert spin_until(node, lambda: len(diagnosed) >= 2, 10)
        assert all("another checkpoint" not in d.message for d in diagnosed), diagnosed
        assert len(warnings()) == 1 and all(p.poll() is None for p in procs)
        assert "Traceback" not in "".join(log.read_text() for log in logs.values())
    finally:
        close_ros_test(node, procs)
