"""sim_bridge_node + encoder_node + memory_node + stop_node as real processes on an isolated domain.

The test drives the simulator with a few actions over /memnav/action and checks what flows between the
nodes: embeddings stamped like their colour frames, memory inserts, graph snapshot and markers, the memory
services, retrievals for the goal, and stop decisions. Every process is stopped by the fixture's finalizer.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import make_tiny_dataset, spin_until, stop_processes  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parents[2] / "config" / "memnav.yaml"
NODES = ("sim_bridge_node", "encoder_node", "memory_node", "stop_node")


@pytest.fixture
def stack(tmp_path, monkeypatch, request):
    """Start the four nodes (params from config/memnav.yaml plus test overrides); yield (domain, logs, procs)."""
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=2)
    domain = 40 + ((os.getpid() + 33) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    overrides = {
        "sim_bridge_node": [f"data:={data}", "split:=test", "lockstep:=true", "republish_s:=0.5"],
        "encoder_node": [],
        "memory_node": [f"db_path:={tmp_path / 'memory.db'}", "markers_period_s:=0.2", "snapshot_period_s:=0.2"],
        "stop_node": ["verify_min_similarity:=-1.0"],   # verify every frame: exercises the image pairing
    }
    procs, logs = {}, {}

    def stop_all() -> None:
        stop_processes(procs.values())
        for f in logs.values():
            f.close()

    request.addfinalizer(stop_all)
    for name in NODES:
        args = [sys.executable, "-m", f"memnav.ros.{name}", "--ros-args", "--params-file", str(CONFIG)]
        for p in overrides[name]:
            args += ["-p", p]
        logs[name] = open(tmp_path / f"{name}.log", "w+")
        procs[name] = subprocess.Popen(args, stdout=logs[name], stderr=subprocess.STDOUT, text=True)
    return domain, tmp_path, procs


def _tails(folder: Path) -> str:
    return "\n".join(f"--- {n}:\n{(folder / f'{n}.log').read_text()[-1500:]}" for n in NODES)


def test_stack_builds_memory_and_decides_stops(stack):
    from geometry_msgs.msg import PoseWithCovarianceStamped
    from rclpy.event_handler import SubscriptionEventCallbacks
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger
    from visualization_msgs.msg import Marker, MarkerArray

    from memnav.core.encoder import Encoder
    from memnav.core.stop import StopReason
    from memnav.ros.conversions import image_to_depth, image_to_rgb
    from memnav.ros.embedding_msgs import image_to_embedding, stamp_to_ns
    from memnav.ros.model_paths import PACKAGE_ROOT

    domain, folder, procs = stack
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_stack_observer")
    got = {k: [] for k in ("emb", "goal_img", "goal_depth", "goal_emb", "event", "snap", "markers", "stop", "retr",
                           "det", "diag")}
    frames = {"colour": {}, "depth": {}}   # stamp -> message
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)

    def keep(key, convert=lambda m: m):
        return lambda m: got[key].append(convert(m))

    as_json = lambda m: json.loads(m.data)  # noqa: E731
    sensor = QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT)   # deep: no frame lost while asserting
    for kind in frames:
        node.create_subscription(Image, f"/camera/{'color' if kind == 'colour' else kind}/image_raw",
                                 lambda m, k=kind: frames[k].setdefault(stamp_to_ns(m.header.stamp), m), sensor)
    node.create_subscription(Image, "/memnav/embedding", keep("emb"), 50)
    node.create_subscription(Image, "/memnav/goal_image", keep("goal_img"), latched)
    node.create_subscription(Image, "/memnav/goal_depth", keep("goal_depth"), latched)
    node.create_subscription(Image, "/memnav/goal_embedding", keep("goal_emb"), latched)
    # volatile topics checked per frame: the actions wait until DDS has matched these readers to their writers
    matched = {"event": 0, "stop": 0}

    def on_match(key):
        return SubscriptionEventCallbacks(matched=lambda info: matched.__setitem__(key, info.current_count))

    node.create_subscription(String, "/memnav/memory_event", keep("event", as_json), 50,
                             event_callbacks=on_match("event"))
    node.create_subscription(String, "/memnav/scene_graph", keep("snap", as_json), latched)
    node.create_subscription(MarkerArray, "/memnav/scene_graph_markers", keep("markers"), 10)
    node.create_subscription(String, "/memnav/detections", keep("det", as_json), 50)
    node.create_subscription(String, "/memnav/stop_decision", keep("stop", as_json), 50,
                             event_callbacks=on_match("stop"))
    node.create_subscription(String, "/memnav/retrievals", keep("retr", as_json), 50)
    from diagnostic_msgs.msg import DiagnosticArray
    node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: got["diag"].extend(m.status), 50)
    pub = node.create_publisher(String, "/memnav/action", 10)
    services = {s: node.create_client(Trigger, f"/memory_node/{s}") for s in ("save", "query", "clear", "relocalise")}

    def wait(cond, timeout: float, what: str, required: bool = True) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
            if cond():
                return True
            dead = [n for n, p in procs.items() if p.poll() is not None]
            if dead:
                pytest.fail(f"{dead} exited while waiting for {what}\n{_tails(folder)}")
        if required:
            counts = {k: len(v) for k, v in got.items()} | {f"frames_{k}": len(v) for k, v in frames.items()}
            pytest.fail(f"timed out after {timeout} s waiting for {what}; received {counts}\n{_tails(folder)}")
        return False

    def call(name: str) -> Trigger.Response:
        fut = services[name].call_async(Trigger.Request())
        wait(fut.done, 10, f"~/{name} response")
        return fut.result()

    try:
        # the first frame's memory event may leave before this node's subscription matched (volatile topic);
        # its re-sends are duplicates the memory ignores, so frames are checked from the first action on
        wait(lambda: got["emb"] and got["goal_emb"] and got["stop"], 45, "the stack to come up")
        wait(lambda: pub.get_subscription_count() > 0 and all(c.service_is_ready() for c in services.values()),
             10, "/memnav/action subscriber and memory services")
        wait(lambda: min(matched.values()) > 0, 10, "memory events and stop decisions matched to this node")
        # the writers can match this node a moment after its readers matched them: a warm-up action repeats
        # until both a memory event and a stop decision arrive, so no checked frame's message is lost; and
        # until a decision was verified, i.e. the stop node also pairs colour frames and the goal image it
        # receives from the bridge (its own readers are matched by discovery at their own pace)
        for _ in range(5):
            counts = (len(got["event"]), len(got["stop"]))
            pub.publish(String(data="TURN_LEFT"))
            if wait(lambda c=counts: len(got["event"]) > c[0] and len(got["stop"]) > c[1]
                    and any(d["verification_ran"] for d in got["stop"][c[1]:]), 4, "", required=False):
                break
        else:
            pytest.fail(f"no memory event, stop decision or verified decision after 5 warm-up actions\n"
                        f"{_tails(folder)}")
        before = max(stamp_to_ns(m.header.stamp) for m in got["emb"])
        for action in ("TURN_LEFT", "TURN_LEFT", "MOVE_FORWARD", "TURN_RIGHT", "TURN_RIGHT", "TURN_RIGHT"):
            seen = {stamp_to_ns(m.header.stamp) for m in got["emb"]}
            for _ in range(3):   # a first message can leave before the bridge has matched this publisher
                pub.publish(String(data=action))
                if wait(lambda s=seen: {stamp_to_ns(m.header.stamp) for m in got["emb"]} - s, 4, "", required=False):
                    break
            else:
                pytest.fail(f"no embedding after {action} (sent 3 times)\n{_tails(folder)}")
        stamps = sorted({t for m in got["emb"] if (t := stamp_to_ns(m.header.stamp)) > before})
        wait(lambda: {e["stamp_ns"] for e in got["event"]} >= set(stamps), 10, "a memory event per frame")
        wait(lambda: {d["stamp_ns"] for d in got["stop"]} >= set(stamps), 10, "a stop decision per frame")

        # embeddings: one per frame (stamp copied from the colour image), unit norm, 1 x D
        assert len(stamps) >= 6 and set(stamps) <= set(frames["colour"])
        for m in got["emb"]:
            emb = image_to_embedding(m)
            assert (m.height, m.width) == (1, 256) and np.linalg.norm(emb) == pytest.approx(1.0, abs=1e-4)
        # the values are the encoder's on the colour + depth frame of that stamp (goal: goal image + goal depth)
        encoder = Encoder.from_checkpoint(PACKAGE_ROOT / "models" / "encoder.pt")
        last = next(m for m in reversed(got["emb"]) if stamp_to_ns(m.header.stamp) in frames["depth"])
        t = stamp_to_ns(last.header.stamp)
        expected = encoder.encode(image_to_rgb(frames["colour"][t]), image_to_depth(frames["depth"][t]))
        assert np.allclose(image_to_embedding(last), expected, atol=1e-5)
        goal_img, goal_depth = got["goal_img"][-1], got["goal_depth"][-1]
        assert goal_img.header.stamp == goal_depth.header.stamp
        expected = encoder.encode(image_to_rgb(goal_img), image_to_depth(goal_depth))
        wait(lambda: np.allclose(image_to_embedding(got["goal_emb"][-1]), expected, atol=1e-5), 5,
             "the goal embedding of goal image + goal depth")
        goal = got["goal_emb"][-1]
        assert goal.header.stamp == goal_img.header.stamp and goal.width == 256

        # memory: events per insert, snapshot and markers with places
        events = {e["stamp_ns"]: e for e in got["event"]}
        assert all(e["kind"] in ("new_place", "updated_place", "loop_closure") for e in events.values())
        assert set(stamps) <= set(events) and any(e["kind"] == "new_place" for e in events.values())
        wait(lambda: got["snap"] and got["snap"][-1]["counts"]["places"] > 0
             and got["snap"][-1]["last_stamp_ns"] == stamps[-1], 5, "a snapshot with every insert")
        snap = got["snap"][-1]
        assert snap["counts"]["places"] == len(snap["places"]) >= len({e["node_id"] for e in events.values()})
        assert snap["frame_id"] == "odom" and snap["counts"]["traversable_edges"] >= 1
        wait(lambda: any(len(m.points) == snap["counts"]["places"] for a in got["markers"] for m in a.markers
                         if m.type == Marker.SPHERE_LIST), 5, "markers of every place")
        assert got["retr"] and all(len(r["hits"]) >= 1 and "relative" in r["hits"][0] for r in got["retr"])
        # objects: the bridge's detections (semantic ids, stamped like the frames) become object nodes; turn
        # (a full circle at most) until a frame shows an object and its memory event counts it
        def with_objects() -> list[int]:
            ev = {e["stamp_ns"]: e for e in got["event"]}
            return [d["stamp_ns"] for d in got["det"] if d["objects"] and ev.get(d["stamp_ns"], {}).get("objects")]
        for _ in range(12):
            if with_objects():
                break
            seen = {stamp_to_ns(m.header.stamp) for m in got["emb"]}
            pub.publish(String(data="TURN_LEFT"))
            wait(lambda s=seen: {e["stamp_ns"] for e in got["event"]} - s, 5, "a memory event after a turn")
        assert with_objects(), "no frame of a full turn showed an object that reached the memory"
        dets = {d["stamp_ns"]: d["objects"] for d in got["det"]}
        events = {e["stamp_ns"]: e for e in got["event"]}
        assert set(stamps) <= set(dets)                                        # one message per frame
        for o in (o for objs in dets.values() for o in objs):
            assert o["class_id"] >= 0 and o["instance_id"] > 0 and o["label"] and np.isfinite(o["position_m"]).all()
        assert all(e["objects"] in (0, len(dets[t])) for t, e in events.items() if t in dets)   # 0: came late
        wait(lambda: got["snap"][-1]["counts"]["objects"] > 0, 5, "a snapshot with objects")
        labels = {o["label"] for o in got["snap"][-1]["objects"]}
        assert labels <= {o["label"] for objs in dets.values() for o in objs}

        # /diagnostics: every node reports once a second, the memory node its size
        def newest(name):
            return next((d for d in reversed(got["diag"]) if d.name == f"/{name}"), None)

        wait(lambda: all(newest(n) is not None for n in NODES), 5, "every node's diagnostics")
        # the newest memory report after the inserts (one a second: on a loaded machine the one heard first may
        # still be from before them)
        wait(lambda: int({v.key: v.value for v in newest("memory_node").values}["places"]) >= 1, 5,
             "a memory node report with its places")
        memory = newest("memory_node")
        diag = {v.key: v.value for v in memory.values}
        assert memory.level == b"\x00" and int(diag["places"]) >= 1 and diag["db_path"].endswith("memory.db"), diag
        assert memory.message.startswith(f"{diag['places']} places"), memory.message
        # likewise the encoder's and stop node's newest reports after the goal came (seen once in a full run: the
        # stop node's newest said "0 stop decisions; no goal embedding yet")
        wait(lambda: newest("encoder_node").message.endswith("goal photo encoded"), 5,
             "an encoder node report with the goal photo")
        wait(lambda: " stop decisions; the last: " in newest("stop_node").message, 5,
             "a stop node report with its decisions")
        assert " of 2 (house_" in newest("sim_bridge_node").message, newest("sim_bridge_node").message

        # services
        saved = call("save")
        assert saved.success and json.loads(saved.message)["places"] == snap["counts"]["places"]
        assert (folder / "memory.db").is_file()
        queried = call("query")
        assert queried.success
        hits = json.loads(queried.message)["hits"]
        assert 1 <= len(hits) <= 8 and all(-1.0 <= h["similarity"] <= 1.0 + 1e-6 for h in hits)
        assert hits == sorted(hits, key=lambda h: -h["similarity"])

        # stop decisions: one per frame, calibrated belief, a StopReason
        for d in got["stop"]:
            assert 0.0 <= d["belief"] <= 1.0 and d["reason"] in StopReason.__members__
            assert isinstance(d["stop"], bool) and -1.0 <= d["similarity"] <= 1.0 + 1e-6
            assert 0.0 <= d["verification"] <= 1.0 and d["goal_stamp_ns"] == stamp_to_ns(goal.header.stamp)
        assert any(d["verification_ran"] for d in got["stop"])

        # bad input is dropped with a warning; the nodes keep running
        bad_pub = node.create_publisher(Image, "/memnav/embedding", 10)
        bad_goal = node.create_publisher(Image, "/memnav/goal_image", latched)
        short = Image(height=1, width=3, encoding="32FC1", step=12, data=np.ones(3, np.float32).tobytes())
        short.header.stamp = got["emb"][-1].header.stamp
        wait(lambda: bad_pub.get_subscription_count() >= 2 and bad_goal.get_subscription_count() >= 1, 10,
             "subscribers of the bad messages")
        bad_pub.publish(short)
        bad_goal.publish(Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(5)))
        logs = lambda: {n: (folder / f"{n}.log").read_text() for n in NODES}  # noqa: E731
        wait(lambda: "dropped embedding" in logs()["memory_node"] and "dropped embedding" in logs()["stop_node"]
             and "dropped goal image" in logs()["encoder_node"], 10, "warnings about the bad messages")

        # relocalisation: ~/relocalise forgets where the robot is (one observation is at most one vote, so the
        # next event is unlocalised); a pose on /initialpose in the memory's frame localises it again, one in
        # another frame is dropped with a warning
        def next_event() -> dict:
            for _ in range(3):
                n = len(got["event"])
                pub.publish(String(data="TURN_LEFT"))
                if wait(lambda n=n: len(got["event"]) > n, 4, "", required=False):
                    return got["event"][n]
            pytest.fail(f"no memory event after 3 turns\n{_tails(folder)}")

        relocalised = call("relocalise")
        assert relocalised.success and json.loads(relocalised.message)["localised"] is False
        assert next_event()["localised"] is False
        wait(lambda: got["snap"][-1]["localised"] is False, 5, "a snapshot saying the memory is unlocalised")
        estimate = node.create_publisher(PoseWithCovarianceStamped, "/initialpose", 10)
        wait(lambda: estimate.get_subscription_count() >= 1, 10, "the /initialpose subscriber")
        guess = PoseWithCovarianceStamped()
        guess.header.frame_id = "map"
        guess.pose.pose.position.x, guess.pose.pose.orientation.w = 1.0, 1.0
        guess.pose.covariance[0] = guess.pose.covariance[7] = 0.09
        estimate.publish(guess)
        wait(lambda: "dropped initial pose" in logs()["memory_node"], 10, "a warning about the map-frame pose")
        guess.header.frame_id = "odom"
        estimate.publish(guess)
        wait(lambda: "localised at (1.00, 0.00" in logs()["memory_node"], 10, "the pose estimate applied")
        assert next_event()["localised"] is True
        wait(lambda: got["snap"][-1]["localised"] is True, 5, "a snapshot saying the memory is localised")

        cleared = call("clear")
        assert cleared.success
        wait(lambda: got["snap"][-1]["counts"]["places"] == 0, 5, "an empty snapshot after ~/clear")
        assert all(p.poll() is None for p in procs.values()), _tails(folder)
    finally:
        node.destroy_node()
        rclpy.shutdown()


def test_encoder_pairs_by_stamp_and_encodes_rgb_only_checkpoints(tmp_path, monkeypatch, request):
    """Two encoder_node processes on the same camera topics: an RGB-only checkpoint encodes every colour frame,
    an RGB-D one only colour frames with a depth frame within sync_tolerance_s, in either arrival order; a goal
    image is encoded with its goal depth when that comes."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    from memnav.core.encoder import Encoder, EncoderConfig, FrameEncoder, save_checkpoint
    from memnav.ros.conversions import depth_to_image, rgb_to_image
    from memnav.ros.embedding_msgs import image_to_embedding, ns_to_stamp, stamp_to_ns

    domain = 40 + ((os.getpid() + 111) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    procs = {}
    for name, use_depth in (("rgb", False), ("rgbd", True)):
        save_checkpoint(FrameEncoder(EncoderConfig(input_px=32, embedding_dim=16, widths=(8, 8, 8, 8),
                                                   use_depth=use_depth)), tmp_path / f"{name}.pt")
        log = open(tmp_path / f"{name}.log", "w")
        request.addfinalizer(log.close)
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "memnav.ros.encoder_node", "--ros-args", "-r", f"__node:=encoder_{name}",
             "-r", f"/memnav/embedding:=/{name}/embedding", "-r", f"/memnav/goal_embedding:=/{name}/goal_embedding",
             "-p", f"checkpoint:={tmp_path / name}.pt"], stdout=log, stderr=subprocess.STDOUT, text=True)

    def stop_all() -> None:
        stop_processes(procs.values())

    request.addfinalizer(stop_all)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_encoder_client")
    got, goals = {"rgb": [], "rgbd": []}, {"rgb": [], "rgbd": []}
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    for name in got:
        node.create_subscription(Image, f"/{name}/embedding", lambda m, n=name: got[n].append(m), 50)
        node.create_subscription(Image, f"/{name}/goal_embedding", lambda m, n=name: goals[n].append(m), latched)
    pub_rgb = node.create_publisher(Image, "/camera/color/image_raw", QoSProfile(depth=20))
    pub_depth = node.create_publisher(Image, "/camera/depth/image_raw", QoSProfile(depth=20))
    pub_goal = node.create_publisher(Image, "/memnav/goal_image", latched)
    pub_goal_depth = node.create_publisher(Image, "/memnav/goal_depth", latched)
    rng = np.random.default_rng(0)

    def spin(seconds: float, cond=lambda: False) -> bool:
        return spin_until(node, cond, seconds)

    def colour(t_ns: int) -> None:
        pub_rgb.publish(rgb_to_image(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8), ns_to_stamp(t_ns)))
        spin(0.05)

    def depth(t_ns: int, shape=(24, 32)) -> None:   # registered to the colour image: in its frame
        pub_depth.publish(depth_to_image(rng.uniform(0.5, 4.0, shape).astype(np.float32), ns_to_stamp(t_ns),
                                         "camera_color_optical_frame"))
        spin(0.05)

    s = 1_000_000_000
    try:
        assert spin(30, lambda: pub_rgb.get_subscription_count() >= 2 and pub_depth.get_subscription_count() >= 2
                    and node.count_publishers("/rgbd/embedding") >= 1), "encoder nodes did not come up"
        # discovery completes on each side at its own pace: repeat a warm-up pair until both nodes answer
        for i in range(1, 100):   # stamped from 1 ns: a stamp of 0 is "no time", stamped on receipt
            colour(i), depth(i)
            if spin(0.2, lambda: got["rgb"] and got["rgbd"]):
                break
        assert got["rgb"] and got["rgbd"], "encoder nodes do not answer"
        colour(1 * s), depth(1 * s + 5_000_000)              # within 20 ms: a pair
        colour(2 * s)                                        # no depth at all
        colour(3 * s), depth(3 * s + 50_000_000)             # 50 ms apart: no pair
        depth(4 * s), colour(4 * s)                          # depth first
        depth(5 * s, (12, 16)), colour(5 * s)                # sizes differ: dropped
        bad = rgb_to_image(np.zeros((24, 32, 3), np.uint8), ns_to_stamp(6 * s))
        bad.data = bytes(10)
        pub_rgb.publish(bad)
        # warm-up frames are stamped below 1 s and may still be answered late: look at the test frames only
        stamps = lambda n: sorted(t for m in got[n] if (t := stamp_to_ns(m.header.stamp)) >= s)  # noqa: E731
        spin(10, lambda: len(stamps("rgb")) >= 5 and len(stamps("rgbd")) >= 2)
        spin(0.5)
        assert stamps("rgb") == [1 * s, 2 * s, 3 * s, 4 * s, 5 * s]
        assert stamps("rgbd") == [1 * s, 4 * s]
        for m in got["rgb"] + got["rgbd"]:
            assert m.width == 16 and np.linalg.norm(image_to_embedding(m, 16)) == pytest.approx(1.0, abs=1e-5)

        # goal: the RGB-D encoder waits goal_depth_wait_s for the goal's depth, encodes without it, then again with it
        goal_rgb = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
        goal_depth = rng.uniform(0.5, 4.0, (24, 32)).astype(np.float32)
        pub_goal.publish(rgb_to_image(goal_rgb, ns_to_stamp(10 * s)))
        assert spin(10, lambda: goals["rgb"] and goals["rgbd"]), "no goal embeddings"
        pub_goal_depth.publish(depth_to_image(goal_depth, ns_to_stamp(10 * s)))
        assert spin(10, lambda: len(goals["rgbd"]) >= 2), "no goal embedding with depth"
        spin(0.3)
        enc = {n: Encoder.from_checkpoint(tmp_path / f"{n}.pt") for n in goals}
        assert len(goals["rgb"]) == 1 and len(goals["rgbd"]) == 2
        assert np.allclose(image_to_embedding(goals["rgb"][0]), enc["rgb"].encode(goal_rgb), atol=1e-5)
        first, second = (image_to_embedding(m) for m in goals["rgbd"])
        assert np.allclose(first, enc["rgbd"].encode(goal_rgb, None), atol=1e-5)
        assert np.allclose(second, enc["rgbd"].encode(goal_rgb, goal_depth), atol=1e-5)
        assert {stamp_to_ns(m.header.stamp) for m in goals["rgb"] + goals["rgbd"]} == {10 * s}
        assert all(p.poll() is None for p in procs.values())
    finally:
        node.destroy_node()
        rclpy.shutdown()
    stop_all()
    assert "dropped colour image" in (tmp_path / "rgb.log").read_text()
    assert "dropped frame pair" in (tmp_path / "rgbd.log").read_text()
