"""The memory node on its own (a real process over DDS): embeddings that wait for odometry of their instants,
~/relocalise on an empty memory, ~/clear with embeddings still waiting."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import spin_while_alive, stop_processes, use_isolated_ros_domain  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parents[2] / "config" / "memnav.yaml"
BASE_NS = 1_000_000_000


class MemoryNodeRun:
    """A memory node process (config/memnav.yaml, its database in `folder`, extra `-p` parameters) and a node of
    the test's own that publishes /odom and /memnav/embedding, hears /memnav/memory_event and calls its services."""

    def __init__(self, folder: Path, domain: int, *params: str) -> None:
        from nav_msgs.msg import Odometry
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_msgs.msg import String
        from std_srvs.srv import Trigger

        self.db, self.log = folder / "memory.db", folder / "memory.log"
        args = [a for p in params for a in ("-p", p)]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.memory_node", "--ros-args",
                                          "--params-file", str(CONFIG), "-p", f"db_path:={self.db}", *args],
                                         stdout=log, stderr=subprocess.STDOUT)
        rclpy.init(domain_id=domain)
        self.node = rclpy.create_node("test_memory_node")
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_odom = self.node.create_publisher(Odometry, "/odom", reliable)
        self.pub_emb = self.node.create_publisher(Image, "/memnav/embedding", reliable)
        self.events: list[dict] = []
        self.node.create_subscription(String, "/memnav/memory_event",
                                      lambda m: self.events.append(json.loads(m.data)), 50)
        self.clients = {name: self.node.create_client(Trigger, f"/memory_node/{name}")
                        for name in ("clear", "save", "relocalise")}
        self.rng = np.random.default_rng(0)

    def spin(self, seconds: float, cond=lambda: False) -> bool:
        return spin_while_alive(self.node, self.proc, self.log, cond, seconds)

    def ready(self) -> None:
        assert self.spin(60.0, lambda: all(c.service_is_ready() for c in self.clients.values())
                         and self.pub_emb.get_subscription_count() and self.pub_odom.get_subscription_count()), \
            self.log.read_text()
        self.spin(1.0)                                 # let the memory node match this node's publishers too

    def call(self, name: str):
        from std_srvs.srv import Trigger

        future = self.clients[name].call_async(Trigger.Request())
        assert self.spin(10.0, future.done), self.log.read_text()
        return future.result()

    def odometry(self, x_m: float, stamp_ns: int) -> None:
        from memnav.core.types import Pose2D
        from memnav.ros.conversions import pose_to_odometry
        from memnav.ros.embedding_msgs import ns_to_stamp

        self.pub_odom.publish(pose_to_odometry(Pose2D(x_m, 0.0, 0.0), ns_to_stamp(stamp_ns), "odom", "base_link"))

    def embedding(self, stamp_ns: int) -> None:
        from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp

        emb = self.rng.standard_normal(256).astype(np.float32)
        self.pub_emb.publish(embedding_to_image(emb / np.linalg.norm(emb), stamp=ns_to_stamp(stamp_ns),
                                                frame_id="odom"))

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.shutdown()
        stop_processes([self.proc])


@pytest.fixture
def memory_node(tmp_path, monkeypatch, request):
    """Starts a `MemoryNodeRun` (domain by `offset`, extra parameters); stopped after the test."""
    runs = []

    def start(offset: int, *params: str) -> MemoryNodeRun:
        runs.append(MemoryNodeRun(tmp_path, use_isolated_ros_domain(monkeypatch, offset), *params))
        return runs[-1]

    yield start
    for run in runs:
        if run.proc.returncode is None:
            run.close()


def test_embeddings_faster_than_odometry_are_inserted_not_dropped(memory_node):
    """Embeddings whose odometry had not come yet waited in a queue of 10; the 11th threw the oldest away, logged
    as "no odometry for 0.5 s; queue full" although it had waited only milliseconds and odometry was there.
    Now the oldest one's wait ends early and it is inserted with the odometry there is."""
    run = memory_node(113, "odom_wait_s:=30.0", "odom_max_age_s:=60.0")
    run.ready()
    run.odometry(0.0, BASE_NS)
    for i in range(1, 16):                             # 15 frames 0.1 s apart by stamp, sent at 30 Hz
        run.embedding(BASE_NS + i * 100_000_000)
        run.spin(1 / 30)
    # with odom_wait_s 30, only the 5 beyond the queue's 10 can be inserted now; before, they were dropped
    assert run.spin(20.0, lambda: len(run.events) >= 5), (run.events, run.log.read_text())
    assert [e["stamp_ns"] for e in run.events[:5]] == [BASE_NS + i * 100_000_000 for i in range(1, 6)]
    log = run.log.read_text()
    assert "queue full" not in log and "dropped embedding" not in log, log
    assert "10 embeddings wait for odometry of their instants" in log, log


def test_relocalise_on_an_empty_memory_keeps_what_is_stored_next(memory_node):
    """~/relocalise on an empty memory (an operator's reflex after carrying the robot, before the first run) left
    it unlocalised with nothing to relocalise against: every place stored next waited for loop closures that could
    never come, ~/save reported them committed, and the node's clean exit forgot them all (0 places on restart)."""
    from memnav.core.memory import SceneGraphConfig, SceneGraphMemory

    run = memory_node(117)
    run.ready()
    assert run.call("relocalise").success, run.log.read_text()
    for i in range(3):                                 # three places 2 m apart
        run.odometry(2.0 * i, BASE_NS + i * 1_000_000_000)
        run.embedding(BASE_NS + i * 1_000_000_000)
        run.spin(0.1)
    assert run.spin(20.0, lambda: len(run.events) >= 3), (run.events, run.log.read_text())
    assert [e["localised"] for e in run.events] == [True] * 3, run.events
    run.close()
    assert run.proc.returncode == 0, run.log.read_text()
    memory = SceneGraphMemory.from_config(SceneGraphConfig(db_path=str(run.db)))
    try:
        assert memory.stats().places == 3, run.log.read_text()
    finally:
        memory.close()


def test_clear_forgets_embeddings_still_waiting_for_odometry(memory_node):
    """Embeddings waiting for odometry of their instants when ~/clear came were kept, and went into the cleared
    memory as soon as odometry came: places of before the clear, at the odometry of before the clear."""
    run = memory_node(119, "odom_wait_s:=30.0", "odom_max_age_s:=60.0")
    run.ready()
    run.odometry(0.0, BASE_NS)
    run.spin(0.3)
    for i in range(1, 4):                              # newer than all odometry: they wait for it
        run.embedding(BASE_NS + i * 100_000_000)
        run.spin(0.05)
    run.spin(0.5)
    assert run.call("clear").success and run.events == [], run.events
    after = BASE_NS + 1_000_000_000
    run.odometry(5.0, after)
    run.embedding(after)
    assert run.spin(20.0, lambda: any(e["stamp_ns"] == after for e in run.events)), \
        (run.events, run.log.read_text())
    run.spin(0.5)
    assert [e["stamp_ns"] for e in run.events] == [after], run.events
    assert json.loads(run.call("save").message)["places"] == 1


def test_a_restarted_clock_is_a_new_session_and_save_tells_what_is_held_back(memory_node):
    """A restart whose clock starts behind the stamps in db_path (a restarted simulator, a replayed bag,
    use_sim_time) had every embedding refused until ~/clear. And the places a restarted, still unlocalised memory
    stored were forgotten at the clean exit while ~/save said they were committed. Now that run's embeddings
    are a new session (with one warning); an older stamp within the run is still refused; ~/save fails, counting
    the places held back until the memory relocalises; the clean exit logs how many it forgot and why."""
    from memnav.core.memory import SceneGraphConfig, SceneGraphMemory

    first = memory_node(151)
    first.ready()
    later_ns = 100 * BASE_NS
    for i in range(3):                                 # three places 2 m apart, 100 s into the first run's clock
        first.odometry(2.0 * i, later_ns + i * BASE_NS)
        first.embedding(later_ns + i * BASE_NS)
        first.spin(0.1)
    assert first.spin(20.0, lambda: len(first.events) >= 3), (first.events, first.log.read_text())
    saved = first.call("save")
    body = json.loads(saved.message)
    assert saved.success and body["places"] == 3 and body["held_back_places"] == 0 and body["localised"], body
    first.close()
    assert first.proc.returncode == 0 and "forgot" not in first.log.read_text(), first.log.read_text()

    run = memory_node(151)
    run.rng = np.random.default_rng(1)                 # views the memory does not know: it stays unlocalised
    run.ready()
    assert "unlocalised until" in run.log.read_text(), run.log.read_text()
    for i in range(2):                                 # the clock restarted: 1 s, 2 s
        run.odometry(2.0 * i, BASE_NS + i * BASE_NS)
        run.embedding(BASE_NS + i * BASE_NS)
        run.spin(0.1)
    assert run.spin(20.0, lambda: len(run.events) >= 2), (run.events, run.log.read_text())
    assert [e["localised"] for e in run.events] == [False, False], run.events
    run.embedding(BASE_NS + BASE_NS // 2)              # older than the last accepted stamp of this run: refused
    assert run.spin(10.0, lambda: "goes backwards" in run.log.read_text()), run.log.read_text()
    saved = run.call("save")
    body = json.loads(saved.message)
    assert not saved.success and body["committed"] and not body["localised"], body
    assert (body["places"], body["held_back_places"], body["held_back_objects"]) == (5, 2, 0), body
    assert "forgotten if the node exits" in body["note"], body
    log = run.log.read_text()
    assert log.count("this run's clock starts behind the memory's") == 1, log
    assert f"the last stamp stored in {run.db} {later_ns + 2 * BASE_NS} ns" in log, log
    run.close()
    log = run.log.read_text()
    assert run.proc.returncode == 0, log
    assert "forgot the 2 places and 0 objects stored since the memory was loaded or relocalised" in log, log
    assert "keeps its other 3 places" in log, log
    memory = SceneGraphMemory.from_config(SceneGraphConfig(db_path=str(run.db)))
    try:
        assert memory.stats().places == 3
    finally:
        memory.close()
