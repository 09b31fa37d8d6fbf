"""`memnav bench replay`: offline bag evaluation speed as a multiple of real time.

The benchmark records its own bag, in a temporary folder, from the embedded simulator: a robot patrols a
house (the first one of `--data`, generated if absent), driving the privileged shortest-path policy from
waypoint to waypoint and back round the same loop, one frame per action at `--rate` Hz, 128x128 RGB-D +
camera info + odometry (2% drift) with the topics, frames and QoS of `sim_bridge_node`. A second bag of the
same drive adds the annotations (ground-truth pose, and per leg a goal image, goal depth and goal pose). Each bag is
evaluated `--repeats` times by `memnav eval-bag`'s pipeline (models loaded once beforehand, not timed);
`realtime_factor` = bag duration / median wall time for the RGB-D + odometry bag (target >= 20),
`realtime_factor_annotated` the same with ground truth and goals (place-recognition, loop-closure and stop
scoring included).

`record_patrol_bag` is also what the tests use to make small, realistic bags.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memnav.cli import BenchParts
from memnav.core.types import Action, Observation, Pose2D
from memnav.eval.bag_io import BagWriter, qos_profile, typestore_for_distro
from memnav.ros.sim_bridge_node import TOPICS as BRIDGE_TOPICS
from memnav.sim.base import SimConfig
from memnav.sim.dataset import default_data_dir

CAMERA_FRAME = "camera_color_optical_frame"
EPOCH_NS = 1_700_000_000 * 1_000_000_000


@dataclass
class PatrolConfig:
    """The simulated recording.

    Attributes:
        frames: frames to record (one per action).
        rate_hz: frame rate of the recording, Hz.
        waypoints: navigable waypoints of the patrol loop (the robot drives the loop round and round).
        stop_distance_m: a waypoint counts as reached within this distance, meters.
        seed: waypoint sampling seed.
    """

    frames: int = 1200
    rate_hz: float = 10.0
    waypoints: int = 4
    stop_distance_m: float = 0.5
    seed: int = 0


class _Msgs:
    """sensor_msgs / nav_msgs / geometry_msgs objects of a rosbags typestore (no rclpy needed)."""

    def __init__(self, typestore: Any) -> None:
        self.t = typestore.types

    def header(self, stamp_ns: int, frame_id: str) -> Any:
        stamp = self.t["builtin_interfaces/msg/Time"](sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
        return self.t["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)

    def rgb(self, rgb: np.ndarray, stamp_ns: int) -> Any:
        h, w = rgb.shape[:2]
        return self.t["sensor_msgs/msg/Image"](header=self.header(stamp_ns, CAMERA_FRAME), height=h, width=w,
                                              encoding="rgb8", is_bigendian=0, step=w * 3,
                                              data=np.ascontiguousarray(rgb, np.uint8).reshape(-1))

    def depth(self, depth: np.ndarray, stamp_ns: int) -> Any:
        h, w = depth.shape
        data = np.ascontiguousarray(depth, "<f4").view(np.uint8).reshape(-1)
        return self.t["sensor_msgs/msg/Image"](header=self.header(stamp_ns, CAMERA_FRAME), height=h, width=w,
                                              encoding="32FC1", is_bigendian=0, step=w * 4, data=data)

    def camera_info(self, cfg: SimConfig, stamp_ns: int) -> Any:
        f, w, h = cfg.focal_px, cfg.width_px, cfg.height_px
        roi = self.t["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
        return self.t["sensor_msgs/msg/CameraInfo"](
            header=self.header(stamp_ns, CAMERA_FRAME), height=h, width=w, distortion_model="plumb_bob",
            d=np.zeros(5), k=np.array([f, 0, w / 2, 0, f, h / 2, 0, 0, 1.0]), r=np.eye(3).reshape(-1),
            p=np.array([f, 0, w / 2, 0, 0, f, h / 2, 0, 0, 0, 1.0, 0]), binning_x=0, binning_y=0, roi=roi)

    def _pose(self, pose: Pose2D) -> Any:
        t = self.t
        return t["geometry_msgs/msg/Pose"](
            position=t["geometry_msgs/msg/Point"](x=pose.x_m, y=pose.y_m, z=0.0),
            orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=math.sin(pose.yaw_rad / 2),
                                                          w=math.cos(pose.yaw_rad / 2)))

    def odometry(self, pose: Pose2D, stamp_ns: int, frame_id: str) -> Any:
        t = self.t
        vec = t["geometry_msgs/msg/Vector3"]
        return t["nav_msgs/msg/Odometry"](
            header=self.header(stamp_ns, frame_id), child_frame_id="base_link",
            pose=t["geometry_msgs/msg/PoseWithCovariance"](pose=self._pose(pose), covariance=np.zeros(36)),
            twist=t["geometry_msgs/msg/TwistWithCovariance"](
                twist=t["geometry_msgs/msg/Twist"](linear=vec(x=0.0, y=0.0, z=0.0), angular=vec(x=0.0, y=0.0, z=0.0)),
                covariance=np.zeros(36)))

    def pose_stamped(self, pose: Pose2D, stamp_ns: int, frame_id: str) -> Any:
        return self.t["geometry_msgs/msg/PoseStamped"](header=self.header(stamp_ns, frame_id), pose=self._pose(pose))


# topic -> (type, reliable, transient local, depth): as sim_bridge_node offers (and records) them
SENSOR_TOPICS = {t: BRIDGE_TOPICS[t] for t in ("/camera/color/image_raw", "/camera/depth/image_raw",
                                               "/camera/color/camera_info", "/odom")}
ANNOTATION_TOPICS = {t: BRIDGE_TOPICS[t] for t in ("/memnav/ground_truth_pose", "/memnav/goal_image",
                                                   "/memnav/goal_depth", "/memnav/goal_pose")}


def _approach_yaw(sim: Any, start: np.ndarray, goal: np.ndarray) -> float:
    """Heading of the last segment of the shortest path (the robot faces this way on arrival)."""
    path = np.asarray(sim.shortest_path(start, goal), dtype=np.float64)
    if len(path) >= 2:
        d = path[-1] - path[-2]
        if abs(d[0]) + abs(d[2]) > 1e-6:
            return math.atan2(-d[0], -d[2])
    return 0.0


def _oracle_action(sim: Any, goal: np.ndarray) -> Action:
    """The privileged shortest-path action towards `goal` (OracleAgent's rule)."""
    from types import SimpleNamespace

    from memnav.eval.agents import OracleAgent

    agent = OracleAgent(stop_distance_m=0.0)
    target = SimpleNamespace(position=goal)   # an episode of one goal: the nearest is that one
    episode = SimpleNamespace(goal=target, goals=[target], nearest_goal=lambda *_args: target)
    agent.reset(episode, None, sim)  # type: ignore[arg-type]
    return agent.act(None)  # type: ignore[arg-type]


def record_patrol_bag(scene: Path, writers: list[tuple[BagWriter, bool]], cfg: PatrolConfig,
                      sim_config: SimConfig | None = None) -> dict:
    """Drive a patrol in `scene` and write every frame to each (writer, with_annotations) pair.

    Returns:
        {"frames", "duration_s", "legs"} of the recording.

    Raises:
        ValueError: the scene has too little navigable space for the waypoints.
    """
    from memnav.sim.embedded import EmbeddedSimulator

    sim_cfg = sim_config or SimConfig(seed=cfg.seed)
    sim = EmbeddedSimulator(scene, sim_cfg)
    msgs = _Msgs(writers[0][0].typestore)
    for w, annotated in writers:
        topics = SENSOR_TOPICS | (ANNOTATION_TOPICS if annotated else {})
        for topic, (mtype, reliable, latched, depth) in topics.items():
            w.add_topic(topic, mtype, [qos_profile(reliable, latched, depth)])
    rng = np.random.default_rng(cfg.seed)
    points = [sim.sample_navigable_point() for _ in range(max(2, cfg.waypoints))]
    # a loop whose legs are long enough to be worth driving
    points = [p for i, p in enumerate(points) if i == 0 or np.linalg.norm(p - points[i - 1]) > 1.0] or points
    if len(points) < 2:
        raise ValueError(f"{scene}: could not sample {cfg.waypoints} separated navigable waypoints")
    sim.set_agent_pose(points[0], float(rng.uniform(-math.pi, math.pi)))
    period_ns = int(round(1e9 / cfg.rate_hz))
    stamp = EPOCH_NS
    frames = legs = 0
    leg_target = 1
    goal_started = False
    obs: Observation = sim.step(Action.TURN_LEFT)
    while frames < cfg.frames:
        goal = points[leg_target % len(points)]
        if not goal_started:
            pos = sim.agent_state.position
            goal_yaw = _approach_yaw(sim, pos, goal)
            goal_obs = sim.render_at(goal, goal_yaw)
            for w, annotated in writers:
                if annotated:
                    w.write("/memnav/goal_image", msgs.rgb(goal_obs.rgb, stamp), stamp)
                    w.write("/memnav/goal_depth", msgs.depth(goal_obs.depth, stamp), stamp)
                    w.write("/memnav/goal_pose", msgs.pose_stamped(goal_obs.gt_pose, stamp, "map"), stamp)
            goal_started = True
        for w, annotated in writers:
            w.write("/camera/color/image_raw", msgs.rgb(obs.rgb, stamp), stamp)
            w.write("/camera/depth/image_raw", msgs.depth(obs.depth, stamp), stamp)
            w.write("/camera/color/camera_info", msgs.camera_info(sim_cfg, stamp), stamp)
            w.write("/odom", msgs.odometry(obs.pose, stamp, "odom"), stamp)
            if annotated:
                w.write("/memnav/ground_truth_pose", msgs.odometry(obs.gt_pose, stamp, "map"), stamp)
        frames += 1
        stamp += period_ns
        here = sim.agent_state.position
        if sim.geodesic_distance(here, goal) < cfg.stop_distance_m:
            legs += 1
            leg_target += 1
            goal_started = False
        action = _oracle_action(sim, goal)
        obs = sim.step(action if action != Action.STOP else Action.TURN_LEFT)
    sim.close()
    return {"frames": frames, "duration_s": (frames - 1) * period_ns / 1e9, "legs": legs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                        help="dataset whose first house is patrolled (a house is generated if absent)")
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the recorded bag, seconds")
    parser.add_argument("--rate", type=float, default=10.0, help="frame rate of the bag, Hz")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="bag storage")
    parser.add_argument("--repeats", type=int, default=3, help="evaluations per bag; the median is reported")
    parser.add_argument("--batch-size", type=int, default=8, help="frames per encoder batch")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="waypoint seed")


def run(args: argparse.Namespace) -> dict:
    for option, value in (("--seconds", args.seconds), ("--rate", args.rate)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{option} must be a finite number > 0, got {value:g}")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    from memnav.core.encoder import Encoder
    from memnav.eval.bench_sim import _house_scene
    from memnav.eval.eval_bag import EvalConfig, config_from_options, evaluate_bag, load_calibrator

    base = config_from_options(batch_size=args.batch_size, threads=args.threads)   # refuses by option name
    encoder = Encoder.from_checkpoint(base.checkpoint)
    calibrator = load_calibrator(Path(base.calibration))
    with tempfile.TemporaryDirectory(prefix="memnav_bench_replay_") as tmp:
        work = Path(tmp)
        scene = _house_scene(args.data, work)
        store = typestore_for_distro()
        t0 = time.perf_counter()
        plain = BagWriter(work / "rgbd_odom", args.storage, store)
        annotated = BagWriter(work / "annotated", args.storage, store)
        # mildly drifting odometry, so that revisits need loop closures
        sim_cfg = SimConfig(seed=args.seed, odom_noise_trans_std=0.02, odom_noise_rot_std=0.02)
        rec = record_patrol_bag(scene, [(plain, False), (annotated, True)],
                                PatrolConfig(frames=int(round(args.seconds * args.rate)) + 1, rate_hz=args.rate,
                                             seed=args.seed), sim_cfg)
        plain.close()
        annotated.close()
        record_s = time.perf_counter() - t0
        bag_mb = sum(f.stat().st_size for f in (work / "rgbd_odom").iterdir()) / 2**20
        # warm-up (first calls of torch, cv2, numba-free code paths), not timed
        evaluate_bag(work / "annotated", EvalConfig(batch_size=args.batch_size, threads=args.threads, max_frames=64),
                     encoder=encoder, calibrator=calibrator)
        out: dict = {"scene": str(scene), "cpu_count": os.cpu_count(), "storage": args.storage,
                     "frames": rec["frames"], "rate_hz": args.rate, "image_px": 128,
                     "bag_duration_s": round(rec["duration_s"], 2), "bag_mb": round(bag_mb, 1),
                     "patrol_legs": rec["legs"], "record_s": round(record_s, 2), "threads": args.threads,
                     "batch_size": args.batch_size, "repeats": args.repeats}
        out["targets"] = {"realtime_factor": 20}
        bags = (("", "rgbd_odom"), ("_annotated", "annotated"))
        # Ctrl-C: the bag evaluated before it is still printed and written (marked interrupted)
        with BenchParts(out, [f"{folder} bag" for _, folder in bags]) as parts:
            for key, folder in bags:
                walls, result = [], None
                for _ in range(args.repeats):
                    result = evaluate_bag(work / folder, base, encoder=encoder, calibrator=calibrator)
                    walls.append(result.metrics["timing"]["wall_s"])
                    print(f"bench replay: {folder} {walls[-1]:.2f} s", file=sys.stderr)
                assert result is not None
                wall = float(np.median(walls))
                duration = result.metrics["timing"]["bag_duration_s"]
                part = {f"realtime_factor{key}": round(duration / wall, 2), f"eval_wall_s{key}": round(wall, 3),
                        f"frames_per_s{key}": round(result.metrics["input"]["frames"] / wall, 1),
                        f"latency_ms_p50{key}": {k: round(v["p50"], 3)
                                                 for k, v in result.metrics["latency_ms"].items() if v.get("count")}}
                if key:
                    m = result.metrics
                    part["annotated_metrics"] = {
                        "place_recognition_recall_at_1": m["place_recognition"].get("recall_at_1"),
                        "loop_closure_precision": m["loop_closure"]["precision"],
                        "loop_closure_recall": m["loop_closure"]["recall"],
                        "places": m["memory"]["places"],
                        "stop_precision": m["stop"].get("voi", {}).get("precision"),
                        "stop_recall": m["stop"].get("voi", {}).get("recall")}
                parts.add(f"{folder} bag", part)
    return out
