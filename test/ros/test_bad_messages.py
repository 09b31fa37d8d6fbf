"""No node dies on a bad message: malformed messages on every topic the stack subscribes to are dropped with a
counted warning, and the stack still answers a valid frame afterwards.

The four stack nodes run fused (one stack_node process: a crash in any callback would end all of them), and
sim_bridge_node runs beside them for its /memnav/action and /cmd_vel subscriptions, its own outputs remapped
under /bridge so that the test alone feeds the stack's camera, odometry and goal topics. Every process is a
real one on an isolated domain.
"""
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import make_tiny_dataset, stop_processes  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parents[2] / "config" / "memnav.yaml"
BRIDGE_OUTPUTS = ("/camera/color/image_raw", "/camera/depth/image_raw", "/camera/color/camera_info", "/odom",
                  "/memnav/ground_truth_pose", "/memnav/goal_image", "/memnav/goal_depth", "/memnav/episode_result",
                  "/memnav/detections")
STACK_NODES = ("policy_node", "encoder_node", "memory_node", "stop_node")


@pytest.fixture
def processes(tmp_path, monkeypatch, request):
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=1)
    domain = 40 + ((os.getpid() + 91) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    remaps = [a for topic in BRIDGE_OUTPUTS for a in ("-r", f"{topic}:=/bridge{topic}")]
    commands = {
        "stack": ["memnav.ros.stack_node", "--ros-args", "--params-file", str(CONFIG), "-p", "lockstep:=true",
                  "-p", "snapshot_period_s:=0.2", "-p", "verify_min_similarity:=-1.0"],
        "bridge": ["memnav.ros.sim_bridge_node", "--ros-args", "--params-file", str(CONFIG), "-p", f"data:={data}",
                   "-p", "split:=test", "-p", "lockstep:=true", *remaps],
    }
    procs, logs = {}, {}
    for name, cmd in commands.items():
        logs[name] = tmp_path / f"{name}.log"
        with open(logs[name], "w") as log:
            procs[name] = subprocess.Popen([sys.executable, "-m", *cmd], stdout=log, stderr=subprocess.STDOUT)

    def stop_all() -> None:
        stop_processes(procs.values())

    request.addfinalizer(stop_all)
    return domain, procs, logs


def _image(encoding: str, height: int, width: int, data: bytes, step: int | None = None, stamp_ns: int = 0,
           bigendian: int = 0):
    from sensor_msgs.msg import Image

    from memnav.ros.embedding_msgs import ns_to_stamp

    msg = Image(height=height, width=width, encoding=encoding, is_bigendian=bigendian,
                step=step if step is not None else (len(data) // height if height else 0))
    msg.data = data
    msg.header.stamp = ns_to_stamp(stamp_ns)
    return msg


def test_malformed_messages_on_every_topic_are_dropped(processes):
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.core.types import Pose2D
    from memnav.ros.conversions import depth_to_image, pose_to_odometry, rgb_to_image
    from memnav.ros.embedding_msgs import embedding_to_image, ns_to_stamp, stamp_to_ns

    domain, procs, logs = processes
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_bad_messages")
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    pubs = {
        "colour": node.create_publisher(Image, "/camera/color/image_raw", reliable),
        "depth": node.create_publisher(Image, "/camera/depth/image_raw", reliable),
        "odom": node.create_publisher(Odometry, "/odom", reliable),
        "goal": node.create_publisher(Image, "/memnav/goal_image", latched),
        "goal_depth": node.create_publisher(Image, "/memnav/goal_depth", latched),
        "embedding": node.create_publisher(Image, "/memnav/embedding", reliable),
        "goal_embedding": node.create_publisher(Image, "/memnav/goal_embedding", latched),
        "result": node.create_publisher(String, "/memnav/episode_result", latched),
        "action": node.create_publisher(String, "/memnav/action", reliable),
        "detections": node.create_publisher(String, "/memnav/detections", reliable),
        "cmd_vel": node.create_publisher(Twist, "/cmd_vel", reliable),
    }
    got = {"state": [], "emb": [], "event": [], "stop": [], "bridge": []}
    as_json = lambda m: json.loads(m.data)  # noqa: E731
    node.create_subscription(String, "/memnav/policy_state", lambda m: got["state"].append(as_json(m)), 50)
    node.create_subscription(Image, "/memnav/embedding", lambda m: got["emb"].append(stamp_to_ns(m.header.stamp)), 50)
    node.create_subscription(String, "/memnav/memory_event", lambda m: got["event"].append(as_json(m)), 50)
    node.create_subscription(String, "/memnav/stop_decision", lambda m: got["stop"].append(as_json(m)), 50)
    node.create_subscription(Image, "/bridge/camera/color/image_raw",
                             lambda m: got["bridge"].append(stamp_to_ns(m.header.stamp)),
                             QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
    rng = np.random.default_rng(0)
    goal_rgb = np.tile(np.linspace(0, 255, 128, dtype=np.uint8)[None, :, None], (128, 1, 3))
    goal_depth = np.full((128, 128), 2.0, np.float32)

    def tails() -> str:
        return "\n".join(f"--- {n}:\n{path.read_text()[-2500:]}" for n, path in logs.items())

    def spin(seconds: float, cond=lambda: False) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.02)
            dead = [n for n, p in procs.items() if p.poll() is not None]
            if dead:
                pytest.fail(f"{dead} died (exit {[procs[n].returncode for n in dead]})\n{tails()}")
            if cond():
                return True
        return False

    def now_ns() -> int:
        return node.get_clock().now().nanoseconds

    def send_goal() -> int:
        t = now_ns()
        pubs["goal"].publish(rgb_to_image(goal_rgb, ns_to_stamp(t)))
        pubs["goal_depth"].publish(depth_to_image(goal_depth, ns_to_stamp(t)))
        return t

    def send_frame(encodings=("rgb8", "32FC1")) -> int:
        t = now_ns()
        stamp = ns_to_stamp(t)
        rgb = rng.integers(0, 255, (128, 128, 3), dtype=np.uint8)
        depth = rng.uniform(0.5, 4.0, (128, 128)).astype(np.float32)
        colour = rgb_to_image(rgb, stamp) if encodings[0] == "rgb8" else \
            _image("bgr8", 128, 128, rgb[..., ::-1].tobytes(), stamp_ns=t)
        # depth registered to the colour image carries its frame_id (the encoder pairs no other)
        depth_msg = depth_to_image(depth, stamp, colour.header.frame_id) if encodings[1] == "32FC1" else \
            _image("16UC1", 128, 128, (depth * 1000).astype(np.uint16).tobytes(), stamp_ns=t)
        pubs["odom"].publish(pose_to_odometry(Pose2D(0.1 * (t % 7), 0.0, 0.0), stamp))
        pubs["colour"].publish(colour)
        pubs["depth"].publish(depth_msg)
        return t

    def answered(t: int) -> bool:
        return (any(s["stamp_ns"] == t for s in got["state"]) and t in got["emb"]
                and any(e["stamp_ns"] == t for e in got["event"]) and any(d["stamp_ns"] == t for d in got["stop"]))

    def answer_a_frame(what: str, encodings=("rgb8", "32FC1"), tries: int = 40) -> None:
        for _ in range(tries):   # discovery and start-up are not instantaneous: repeat until every node answers
            t = send_frame(encodings)
            if spin(1.5, lambda t=t: answered(t)):
                return
        pytest.fail(f"no policy state, embedding, memory event and stop decision for a valid frame {what}\n{tails()}")

    try:
        assert spin(60, lambda: all(p.get_subscription_count() > 0 for p in pubs.values())), \
            f"subscribers did not come up\n{tails()}"
        goal_ns = send_goal()
        answer_a_frame("before the bad messages")
        assert spin(20, lambda: got["bridge"]), "the bridge published no frame"

        # ---- malformed messages to every subscribed topic -------------------------------------------------
        t = now_ns()
        ok_rgb = rng.integers(0, 255, (4, 4, 3), dtype=np.uint8).tobytes()
        bad_images = [
            _image("rgb8", 4, 4, ok_rgb[:-1], step=12, stamp_ns=t),             # fewer bytes than the header says
            _image("rgb8", 4, 4, ok_rgb, step=3, stamp_ns=t),                   # step shorter than a row
            _image("yuv422", 4, 4, ok_rgb, stamp_ns=t),                         # unknown encoding
            _image("", 4, 4, ok_rgb, stamp_ns=t),
            _image("rgb8", 0, 0, b"", stamp_ns=t),                              # empty
            _image("rgb8", 100000, 100000, ok_rgb, step=300000, stamp_ns=t),   # a huge header, 48 bytes of data
        ]
        colour_only = [_image("32FC1", 4, 4, np.ones(16, np.float32).tobytes(), stamp_ns=t + 1)]   # depth as colour
        depth_only = [_image("rgb8", 4, 4, ok_rgb, stamp_ns=t + 2),                                  # colour as depth
                      _image("32FC1", 4, 4, np.ones(15, np.float32).tobytes(), step=16, stamp_ns=t + 2)]
        bad_poses = []
        for values in ((math.nan, 0.0, 0.0, 1.0), (math.inf, 0.0, 0.0, 1.0), (0.0, 0.0, math.nan, 1.0),
                       (0.0, 0.0, 0.0, 0.0)):   # x, y, qz, qw; the last is a zero quaternion
            odom = pose_to_odometry(Pose2D(0.0, 0.0, 0.0), ns_to_stamp(t + 3))
            odom.pose.pose.position.x, odom.pose.pose.position.y = values[0], values[1]
            odom.pose.pose.orientation.z, odom.pose.pose.orientation.w = values[2], values[3]
            bad_poses.append(odom)
        emb = rng.standard_normal(256).astype(np.float32)
        bad_embeddings = [
            _image("32FC1", 1, 256, np.full(256, np.nan, np.float32).tobytes(), stamp_ns=t + 4),
            _image("32FC1", 1, 256, np.zeros(256, np.float32).tobytes(), stamp_ns=t + 4),
            _image("32FC1", 1, 256, emb.tobytes()[:-4], step=1024, stamp_ns=t + 4),
            _image("32FC1", 2, 128, emb.tobytes(), stamp_ns=t + 4),                  # not 1 x D
            _image("rgb8", 1, 256, bytes(768), stamp_ns=t + 4),
            embedding_to_image(emb[:16], stamp=ns_to_stamp(t + 4)),                  # another length
        ]
        results = ["not json", "[1, 2]", '"text"', "null", '{"goal_stamp_ns": "abc"}', '{"goal_stamp_ns": 1e400}',
                   '{"goal_stamp_ns": NaN}', '{"goal_stamp_ns": [1]}']
        actions = ["FLY", "", "99", "-1", "\u00b2", "TURN_LEFT; STOP", "x" * 10000]
        detections = ["not json", "[]", '{"stamp_ns": -1, "objects": []}', '{"stamp_ns": 5}',
                      '{"stamp_ns": 5, "objects": [{"class_id": 1, "position_m": [0, NaN, 0]}]}',
                      '{"stamp_ns": 5, "objects": [7]}', "[" * 100000]
        twists = []
        for v, w in ((math.nan, 0.0), (0.0, math.inf)):
            twist = Twist()
            twist.linear.x, twist.angular.z = v, w
            twists.append(twist)
        # colour and depth of one stamp but different sizes, with their odometry: the encoder and the policy
        # both refuse the pair
        t_pair = now_ns()
        mismatched = [("odom", pose_to_odometry(Pose2D(0.0, 0.0, 0.0), ns_to_stamp(t_pair))),
                      ("colour", rgb_to_image(rng.integers(0, 255, (128, 128, 3), dtype=np.uint8),
                                              ns_to_stamp(t_pair))),
                      ("depth", depth_to_image(np.ones((64, 64), np.float32), ns_to_stamp(t_pair),
                                               "camera_color_optical_frame"))]
        sequence = ([("colour", m) for m in bad_images + colour_only] + [("depth", m) for m in bad_images + depth_only]
                    + [("odom", m) for m in bad_poses] + [("goal", m) for m in bad_images + colour_only]
                    + [("goal_depth", m) for m in bad_images + depth_only]
                    + [("goal_depth", depth_to_image(np.ones((16, 16), np.float32), ns_to_stamp(goal_ns)))]
                    + [("embedding", m) for m in bad_embeddings] + [("goal_embedding", m) for m in bad_embeddings]
                    + [("result", String(data=r)) for r in results] + [("action", String(data=a)) for a in actions]
                    + [("cmd_vel", m) for m in twists] + [("detections", String(data=d)) for d in detections]
                    + mismatched)
        for topic, msg in sequence:
            pubs[topic].publish(msg)
            spin(0.05)
        # the warnings are throttled (one per node per 2 s): after a pause, one more bad message per node logs
        # the count of everything it dropped
        spin(2.5)
        pubs["goal"].publish(bad_images[0])
        pubs["embedding"].publish(bad_embeddings[0])
        pubs["action"].publish(String(data="FLY"))
        pubs["cmd_vel"].publish(twists[0])

        def last_count(log: str, name: str) -> int:
            counts = re.findall(rf"\[{name}\]: dropped .*? \((\d+) so far\)", log)
            return int(counts[-1]) if counts else 0

        logs_text = lambda: {n: p.read_text() for n, p in logs.items()}  # noqa: E731
        minimum = {"policy_node": 15, "encoder_node": 10, "memory_node": 15, "stop_node": 8}
        assert spin(10, lambda: all(last_count(logs_text()["stack"], n) >= k for n, k in minimum.items())
                    and last_count(logs_text()["bridge"], "sim_bridge_node") >= 5), \
            {n: last_count(logs_text()["stack"], n) for n in minimum} | {"bridge": tails()}
        assert "Traceback" not in logs_text()["stack"] + logs_text()["bridge"], tails()

        # ---- the stack still answers: a new goal, then frames (one of them bgr8 + 16UC1 millimeters) ----------
        send_goal()
        answer_a_frame("after the bad messages")
        send_goal()   # in case the policy stopped: a new episode
        answer_a_frame("in bgr8 with 16UC1 depth", encodings=("bgr8", "16UC1"))
        seen = set(got["bridge"])
        for _ in range(5):
            pubs["action"].publish(String(data="TURN_LEFT"))
            if spin(3, lambda: set(got["bridge"]) - seen):
                break
        else:
            pytest.fail(f"the bridge does not answer a valid action any more\n{tails()}")
        assert all(p.poll() is None for p in procs.values()), tails()
    finally:
        node.destroy_node()
        rclpy.shutdown()
