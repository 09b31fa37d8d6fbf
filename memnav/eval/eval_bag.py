"""`memnav eval-bag BAG --report DIR`: offline evaluation of the memory stack on a recorded bag.

The bag's messages go through the same core objects the ROS nodes wrap, in-process and in time order:
encoder (batched) -> long-term scene-graph memory (insert + top-10 retrieval) -> goal belief and VoI stop
controller. No ROS graph, no clock: stamps come from the messages, so two runs on the same bag give the
same metrics (latencies aside) and run much faster than real time.

The bag: a rosbag2 folder, a `.mcap` or `.db3` file, or the files of one recording split without metadata.yaml
(their folder, or the files themselves), read as one bag in log-time order (`memnav.eval.bag_io.BagFile`).

Inputs (topic names are options): colour images (sensor_msgs/Image), depth images (optional), odometry
(nav_msgs/Odometry); optional annotations: ground-truth pose (nav_msgs/Odometry or geometry_msgs/PoseStamped
in the map frame), goal image + goal depth (the goal photo of each episode) and goal pose
(geometry_msgs/PoseStamped or nav_msgs/Odometry, map frame, stamped like its goal image).

Frames: a colour image is paired with the depth image of the same stamp (within `sync_tolerance_s`);
odometry and ground truth are interpolated at the frame stamp (a frame more than `max_pose_gap_s` from
any pose sample is skipped). A message without a header stamp (0) is placed at its log time. A goal image is
paired with its goal depth image by the same rule: the goal depth image nearest in stamp, within
`sync_tolerance_s` (the earlier one of two equally near), each used once. A goal image left without goal depth
(none near enough, or one of another size) is encoded without depth, as live (a goal photo without depth):
`input.goals_without_depth` counts them, and a warning says how many when the bag records goal depth images; goal
depth images paired with no goal image are counted under `input.skipped.goal_depth_without_goal_image`.

Topic names: relative names (`camera/color/image_raw`) resolve as ROS resolves them, under `--namespace` or under
/ without one; the topic options not given are their defaults, under `--namespace` when given; an absolute name
given is read as given (`--namespace /robot1 --gt-topic /ground_truth`: the robot's own topics under /robot1, the
ground truth as recorded).

Metrics (`metrics.json`, see `EvalResult.to_json`):
- place recognition: for each frame, the most similar earlier frame (cosine of embeddings) among frames at
  least `revisit_min_age_s` older; recall@k over the queries that have a true match (an older frame within
  `place_distance_m` and `place_angle_deg` by the reference pose: ground truth when recorded, else odometry);
- loop closure: precision = LOOP_CLOSURE inserts whose recognised place was created (reference pose) within
  `loop_distance_m` / `loop_angle_deg` of the frame; recall = revisit frames (an older frame within those
  bounds exists) that the memory associated with a correct old place (by loop closure or by updating it);
- long-term memory growth: places, edges, rooms and loop closures sampled every `growth_interval_s`;
- stop decisions (when goal images are recorded): per frame the VoI controller's STOP and the fixed
  threshold baseline; where a goal pose is known, precision and recall of STOP against "within
  `success_distance_m` of the goal pose" (Euclidean, reference pose), and per goal whether the first STOP
  was within that distance;
- per-stage latency (read + decode, encode, memory insert, retrieval, stop), and the realtime factor
  (`evaluated_duration_s`, the span of the evaluated frames' stamps, / wall time of the evaluation; the bag's own
  span, `bag_duration_s`, also counts topics recorded longer and frames left out by `max_frames`).
Skipped input (unknown types, undecodable or invalid messages, unpaired images, depth images of another size than
their colour image, frames without odometry, stamps going backwards, a truncated file) is counted under `input`.

Warnings (`input.warnings`, the report, and one `memnav eval-bag: warning:` line each on stderr): besides the
bag's own (a missing depth topic, a damaged file), a bag without ground truth whose goal poses are scored
against odometry is flagged unless the odometry is stamped in the goal poses' frame (every odometry message's
`header.frame_id` the goal poses' one): the goal poses are in the map frame, and odometry that starts at zero
where the robot started (the simulator's `odometry_origin: start`, a robot's wheel odometry) is not, so the
stop labels (at-goal frames, stop precision and recall, first STOP within the radius) would be wrong. The bag
records no odometry origin setting; the frame ids are all it says.
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memnav.cli import config_from_options as cli_config
from memnav.core.namespaces import absolute_namespace, resolve_name, under_namespace
from memnav.core.stamp_sync import GoalDepthPairer
from memnav.core.stop import STOP_FEATURES
from memnav.core.stop import load_calibrator as _load_calibrator
from memnav.core.types import Pose2D, wrap_angle
from memnav.eval.bag_io import BagError, BagFile

if TYPE_CHECKING:   # networkx is slow to import; `memnav --help` builds this module's parser
    from memnav.core.memory.scene_graph import InsertKind

MODELS = Path(__file__).resolve().parents[2] / "models"
IMAGE = "sensor_msgs/msg/Image"
ODOMETRY = "nav_msgs/msg/Odometry"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
POSE_TYPES = (ODOMETRY, POSE_STAMPED)
FEATURES = STOP_FEATURES
DISTROS = ("humble", "iron", "jazzy", "kilted")   # `--distro` choices


class TopicError(BagError):
    """A topic the evaluation needs is missing from the bag or has the wrong type."""


@dataclass
class EvalConfig:
    """What to read from the bag and how to score it.

    Attributes:
        rgb_topic: colour images (sensor_msgs/Image rgb8/bgr8/rgba8/bgra8/mono8).
        depth_topic: depth images (32FC1 meters or 16UC1 mm, registered to the colour images: the same size);
            "", absent or without messages: frames are encoded without depth.
        odom_topic: odometry (nav_msgs/Odometry); the memory's input pose.
        gt_topic: ground-truth pose (nav_msgs/Odometry or geometry_msgs/PoseStamped, map frame); "" = none.
        goal_topic: goal images (sensor_msgs/Image), one per episode; "" = no stop evaluation.
        goal_depth_topic: goal depth images, paired with goal images by stamp (nearest, within sync_tolerance_s).
        goal_pose_topic: goal poses (geometry_msgs/PoseStamped or nav_msgs/Odometry, map frame).
        checkpoint: encoder checkpoint.
        calibration: goal-belief calibration JSON (`memnav train stop`).
        sync_tolerance_s: colour and depth images this close in stamp form one frame (goal images and goal depth
            images: one goal), seconds.
        max_pose_gap_s: a frame farther than this from the odometry (ground-truth) samples around it gets no
            pose, seconds.
        batch_size: frames encoded per batch (fixed, so results do not depend on timing).
        threads: torch CPU threads (fixed for determinism).
        place_distance_m: place recognition: a true match lies within this distance, meters.
        place_angle_deg: ... and within this heading difference, degrees.
        revisit_min_age_s: frames (and memory places) at least this much older count as a revisit; also the
            memory's loop_closure_min_age_s, seconds.
        loop_distance_m: loop closure: a recognised place is correct within this distance, meters.
        loop_angle_deg: ... and this heading difference, degrees.
        success_distance_m: stop: "at the goal" within this (Euclidean) distance of the goal pose, meters.
        verify_min_similarity: geometric verification runs only at or above this cosine similarity to the goal.
        fixed_threshold: belief at which the fixed-threshold baseline stops.
        growth_interval_s: memory growth is sampled this often (bag time), seconds.
        distro: ROS distribution of the standard message definitions ("" = from the bag's metadata).
        max_frames: stop after this many frames (0 = all).
    """

    rgb_topic: str = "/camera/color/image_raw"
    depth_topic: str = "/camera/depth/image_raw"
    odom_topic: str = "/odom"
    gt_topic: str = "/memnav/ground_truth_pose"
    goal_topic: str = "/memnav/goal_image"
    goal_depth_topic: str = "/memnav/goal_depth"
    goal_pose_topic: str = "/memnav/goal_pose"
    checkpoint: str = str(MODELS / "encoder.pt")
    calibration: str = str(MODELS / "stop_calibration.json")
    sync_tolerance_s: float = 0.02
    max_pose_gap_s: float = 0.5
    batch_size: int = 8
    threads: int = 1
    place_distance_m: float = 1.0
    place_angle_deg: float = 30.0
    revisit_min_age_s: float = 30.0
    loop_distance_m: float = 2.0
    loop_angle_deg: float = 45.0
    success_distance_m: float = 1.0
    verify_min_similarity: float = 0.6
    fixed_threshold: float = 0.5
    growth_interval_s: float = 1.0
    distro: str = ""
    max_frames: int = 0

    def __post_init__(self) -> None:
        for name in ("rgb_topic", "odom_topic"):
            if not getattr(self, name):
                raise ValueError(f"EvalConfig.{name} must name a topic, got ''")
        for name in ("sync_tolerance_s", "max_pose_gap_s", "place_distance_m", "place_angle_deg",
                     "loop_distance_m", "loop_angle_deg", "success_distance_m", "growth_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"EvalConfig.{name} must be a finite number > 0, got {value!r}")
        if not (math.isfinite(self.revisit_min_age_s) and self.revisit_min_age_s >= 0):
            raise ValueError(f"EvalConfig.revisit_min_age_s must be a finite number >= 0, "
                             f"got {self.revisit_min_age_s!r}")
        for name, least in (("batch_size", 1), ("threads", 1), ("max_frames", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"EvalConfig.{name} must be >= {least}, got {getattr(self, name)!r}")


# ---------------------------------------------------------------------------------------------------------
# message helpers (rosbags message objects have the same field names as rclpy's)


def stamp_ns(msg: Any, log_time_ns: int) -> int:
    """Header stamp in ns; the log time when the message carries none (stamp 0)."""
    from memnav.ros.embedding_msgs import stamp_to_ns

    ns = stamp_to_ns(msg.header.stamp)
    return ns if ns > 0 else int(log_time_ns)


def pose_of(msg: Any, msgtype: str) -> Pose2D:
    """Planar pose of a nav_msgs/Odometry or geometry_msgs/PoseStamped (MessageError if non-finite)."""
    from memnav.ros.conversions import MessageError, odometry_to_pose, yaw_from_quaternion

    if msgtype == ODOMETRY:
        return odometry_to_pose(msg)
    p, q = msg.pose.position, msg.pose.orientation
    values = (p.x, p.y, q.x, q.y, q.z, q.w)
    if not all(math.isfinite(v) for v in values) or abs(q.x) + abs(q.y) + abs(q.z) + abs(q.w) < 1e-9:
        raise MessageError(f"PoseStamped.pose is invalid: {values}")
    return Pose2D(float(p.x), float(p.y), yaw_from_quaternion(q.x, q.y, q.z, q.w))


class PoseTrack:
    """Stamped planar poses; `at(t)` interpolates (yaw along the shorter arc).

    Attributes:
        frame_ids: `header.frame_id` of each bag message whose sample was added ("" where one names none); the
            bag reader fills it, `add` does not.
    """

    def __init__(self, max_gap_ns: int) -> None:
        self.stamps: list[int] = []
        self.poses: list[tuple[float, float, float]] = []
        self.max_gap_ns = max_gap_ns
        self.frame_ids: set[str] = set()

    def add(self, t_ns: int, pose: Pose2D) -> bool:
        """Append a sample; False (not added) when its stamp is not after the last one."""
        if self.stamps and t_ns <= self.stamps[-1]:
            return False
        self.stamps.append(t_ns)
        self.poses.append((pose.x_m, pose.y_m, pose.yaw_rad))
        return True

    def __len__(self) -> int:
        return len(self.stamps)

    def at(self, t_ns: int) -> Pose2D | None:
        i = bisect.bisect_left(self.stamps, t_ns)
        if i < len(self.stamps) and self.stamps[i] == t_ns:
            return Pose2D(*self.poses[i])
        if i == 0 or i == len(self.stamps):
            j = 0 if i == 0 else i - 1
            if self.stamps and abs(self.stamps[j] - t_ns) <= self.max_gap_ns // 10:   # tiny extrapolation
                return Pose2D(*self.poses[j])
            return None
        t0, t1 = self.stamps[i - 1], self.stamps[i]
        if t1 - t0 > self.max_gap_ns:
            return None
        a = (t_ns - t0) / (t1 - t0)
        (x0, y0, w0), (x1, y1, w1) = self.poses[i - 1], self.poses[i]
        return Pose2D(x0 + a * (x1 - x0), y0 + a * (y1 - y0), wrap_angle(w0 + a * wrap_angle(w1 - w0)))


@dataclass
class Goal:
    """A goal photo (and pose, when annotated, with the `header.frame_id` it was given in) from the bag."""

    stamp_ns: int
    rgb: np.ndarray
    depth: np.ndarray | None = None
    pose: Pose2D | None = None
    pose_frame_id: str = ""


@dataclass
class FrameRecord:
    """What the pipeline computed for one frame (kept for metrics and plots; no images)."""

    stamp_ns: int
    odom: Pose2D
    ref: Pose2D | None
    insert_kind: InsertKind
    node_id: int
    goal_index: int = -1
    similarity: float = math.nan
    verification: float = 0.0
    belief: float = math.nan
    stop: bool = False
    stop_fixed: bool = False


@dataclass
class StageTimes:
    """Per-frame latency samples of each stage, seconds."""

    read_decode: list[float] = field(default_factory=list)
    encode: list[float] = field(default_factory=list)
    memory_insert: list[float] = field(default_factory=list)
    retrieve: list[float] = field(default_factory=list)
    stop: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        out = {}
        for name, values in asdict(self).items():
            v = np.asarray(values, dtype=np.float64) * 1000.0
            out[name] = ({"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
                          "mean": float(v.mean()), "count": int(v.size)} if v.size else {"count": 0})
        return out


@dataclass
class EvalResult:
    """Everything the report shows; `to_json()` is metrics.json."""

    metrics: dict
    frames: list[FrameRecord]
    goals: list[Goal]
    places: dict[int, tuple[float, float, float, int]]    # node id -> memory-frame x, y, yaw, room
    edges: list[tuple[int, int]]
    loop_closures: list[tuple[int, int]]                   # (frame index, place id)
    growth: list[dict]
    frame_total_ms: list[float] = field(default_factory=list)   # per-frame processing time, by frame

    def to_json(self) -> dict:
        return self.metrics


# ---------------------------------------------------------------------------------------------------------
# the pipeline


def load_calibrator(path: Path):
    """The goal-belief calibrator stored at `path`, fitted on eval-bag's features (similarity + verification).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not a calibration JSON, or fitted on other features.
    """
    return _load_calibrator(path, FEATURES)


def _check_topics(bag: BagFile, cfg: EvalConfig) -> dict[str, str]:
    """Topic role -> topic name of the roles present; raises TopicError for a missing/wrong required one."""
    topics = bag.topics
    available = ", ".join(f"{t} ({i.msgtype})" for t, i in sorted(topics.items())) or "none"
    roles = {"rgb": (cfg.rgb_topic, (IMAGE,), True), "odom": (cfg.odom_topic, (ODOMETRY,), True),
             "depth": (cfg.depth_topic, (IMAGE,), False), "gt": (cfg.gt_topic, POSE_TYPES, False),
             "goal": (cfg.goal_topic, (IMAGE,), False), "goal_depth": (cfg.goal_depth_topic, (IMAGE,), False),
             "goal_pose": (cfg.goal_pose_topic, POSE_TYPES, False)}
    present: dict[str, str] = {}
    for role, (name, types, required) in roles.items():
        if not name or name not in topics:
            if required:
                raise TopicError(f"{bag.path}: topic {name or '(empty)'} ({role}) is not in the bag; "
                                 f"topics: {available}")
            if role == "depth" and name:
                bag.warnings.append(f"depth topic {name} is not in the bag: frames are encoded without depth")
            continue
        info = topics[name]
        if role == "depth" and info.count == 0 and any(i.count for i in topics.values()):
            # pairing with no depth would skip every colour image: a report of zero frames
            bag.warnings.append(f"depth topic {name} holds no messages: frames are encoded without depth")
            continue
        if info.msgtype not in types:
            if required:
                raise TopicError(f"{bag.path}: topic {name} ({role}) has type {info.msgtype}, expected "
                                 f"{' or '.join(types)}")
            bag.warnings.append(f"topic {name} ({role}) has type {info.msgtype}, expected {' or '.join(types)}; "
                                "ignored")
            continue
        present[role] = name
    return present


class _Pipeline:
    """State of one evaluation run (see the module docstring)."""

    def __init__(self, cfg: EvalConfig, encoder: Any, calibrator: Any, dim: int) -> None:
        from memnav.core.memory.scene_graph import SceneGraphConfig, SceneGraphMemory
        from memnav.core.stop import VoIStopController
        from memnav.core.verification import VerificationConfig

        self.cfg = cfg
        self.encoder = encoder
        self.calibrator = calibrator
        self.controller = VoIStopController()
        self.ver_cfg = VerificationConfig()
        self.memory = SceneGraphMemory(SceneGraphConfig(embedding_dim=dim,
                                                        loop_closure_min_age_s=cfg.revisit_min_age_s))
        self.frames: list[FrameRecord] = []
        self.embeddings: list[np.ndarray] = []
        self.loop_closures: list[tuple[int, int]] = []
        self.growth: list[dict] = []
        self.times = StageTimes()
        self.skipped: Counter = Counter()
        self.goal_index = -1
        self.goal_emb: np.ndarray | None = None
        self.goal_features: Any = None
        self.last_stamp: int | None = None
        self.next_growth_ns: int | None = None
        self.lc_count = 0

    def set_goal(self, index: int, goal: Goal) -> None:
        from memnav.core.verification import extract_features

        depth = goal.depth if goal.depth is not None and goal.depth.shape == goal.rgb.shape[:2] else None
        self.goal_emb = self.encoder.encode(goal.rgb, depth).astype(np.float32)
        self.goal_features = extract_features(goal.rgb, self.ver_cfg)
        self.goal_index = index

    def process_batch(self, batch: list[tuple[int, np.ndarray, np.ndarray | None, Pose2D, Pose2D | None, float]],
                      goals: list[Goal]) -> None:
        """Encode a batch of frames (stamp, rgb, depth, odom, ref, read time) and run memory + stop on each."""
        from memnav.core.memory.index import InvalidInputError
        from memnav.core.memory.scene_graph import InsertKind
        from memnav.core.verification import extract_features, verify_features

        t0 = time.perf_counter()
        rgb = np.stack([b[1] for b in batch])
        depth = None if any(b[2] is None or b[2].shape != b[1].shape[:2] for b in batch) \
            else np.stack([b[2] for b in batch])
        emb = self.encoder.encode_batch(rgb, depth).astype(np.float32)
        t_enc = (time.perf_counter() - t0) / len(batch)
        goal_stamps = [g.stamp_ns for g in goals]
        for i, (stamp, frame_rgb, _, odom, ref, t_read) in enumerate(batch):
            gi = bisect.bisect_right(goal_stamps, stamp) - 1
            if gi >= 0 and gi != self.goal_index:
                self.set_goal(gi, goals[gi])
            t1 = time.perf_counter()
            try:
                res = self.memory.insert_observation(stamp, odom, emb[i], thumbnail=frame_rgb)
            except InvalidInputError as err:
                self.skipped[f"memory_rejected:{err.field}"] += 1
                continue
            t2 = time.perf_counter()
            self.memory.retrieve(emb[i], k=10)
            t3 = time.perf_counter()
            kind = res.kind
            rec = FrameRecord(stamp, odom, ref, kind, res.node_id)
            index = len(self.frames)
            if kind is InsertKind.LOOP_CLOSURE:
                self.loop_closures.append((index, res.node_id))
                self.lc_count += 1
            if gi >= 0 and self.goal_emb is not None:
                sim = float(np.dot(emb[i], self.goal_emb))
                ver = 0.0
                if sim >= self.cfg.verify_min_similarity and self.goal_features is not None:
                    ver = verify_features(self.goal_features, extract_features(frame_rgb, self.ver_cfg),
                                          self.ver_cfg).score
                belief = float(self.calibrator.predict(np.array([[sim, ver]]))[0])
                decision = self.controller.decide(belief)
                rec.goal_index, rec.similarity, rec.verification, rec.belief = gi, sim, ver, belief
                rec.stop, rec.stop_fixed = bool(decision.stop), belief >= self.cfg.fixed_threshold
            t4 = time.perf_counter()
            self.frames.append(rec)
            self.embeddings.append(emb[i])
            tt = self.times
            tt.read_decode.append(t_read)
            tt.encode.append(t_enc)
            tt.memory_insert.append(t2 - t1)
            tt.retrieve.append(t3 - t2)
            tt.stop.append(t4 - t3)
            tt.total.append(t_read + t_enc + (t4 - t1))
            self.sample_growth(stamp)

    def sample_growth(self, stamp: int, force: bool = False) -> None:
        if not force and self.next_growth_ns is not None and stamp < self.next_growth_ns:
            return
        st = self.memory.stats()
        t0 = self.frames[0].stamp_ns if self.frames else stamp
        self.growth.append({"t_s": (stamp - t0) / 1e9, "frames": len(self.frames), "places": st.places,
                            "traversable_edges": st.traversable_edges, "rooms": st.rooms,
                            "loop_closures": self.lc_count})
        self.next_growth_ns = stamp + int(self.cfg.growth_interval_s * 1e9)


def _read_annotations(bag: BagFile, roles: dict[str, str], cfg: EvalConfig, invalid: Counter, out_of_order: Counter,
                      skipped: Counter) -> tuple[PoseTrack, PoseTrack | None, list[Goal]]:
    """Pass 1 over the small topics: odometry, ground truth, goals (goal depth paired by `pair_goal_depths`)."""
    from memnav.ros.conversions import MessageError, image_to_depth, image_to_rgb

    gap = int(cfg.max_pose_gap_s * 1e9)
    odom, gt = PoseTrack(gap), (PoseTrack(gap) if "gt" in roles else None)
    goal_imgs: dict[int, np.ndarray] = {}
    goal_depths: dict[int, np.ndarray] = {}     # stamp -> depth (a depth image recorded twice counts once)
    goal_poses: list[tuple[int, Pose2D, str]] = []
    wanted = [roles[r] for r in ("odom", "gt", "goal", "goal_depth", "goal_pose") if r in roles]
    by_topic = {name: role for role, name in roles.items()}
    for m in bag.messages(wanted):
        role = by_topic[m.topic]
        try:
            t = stamp_ns(m.msg, m.log_time_ns)
            if role in ("odom", "gt"):
                track = odom if role == "odom" else gt
                if track.add(t, pose_of(m.msg, m.msgtype)):
                    track.frame_ids.add(m.msg.header.frame_id)
                else:
                    out_of_order[m.topic] += 1
            elif role == "goal":
                goal_imgs[t] = image_to_rgb(m.msg)
            elif role == "goal_depth":
                goal_depths[t] = image_to_depth(m.msg)
            else:
                goal_poses.append((t, pose_of(m.msg, m.msgtype), m.msg.header.frame_id))
        except (MessageError, ValueError) as err:
            invalid[f"{m.topic}: {type(err).__name__}"] += 1
    goals = [Goal(t, rgb) for t, rgb in sorted(goal_imgs.items())]
    tol = int(cfg.sync_tolerance_s * 1e9)
    pair_goal_depths(goals, goal_depths, tol, skipped)
    if "goal_depth" in roles and goals:
        warning = goal_depth_warning(goals, skipped, roles, cfg)
        if warning is not None:
            bag.warnings.append(warning)
    goal_poses.sort(key=lambda p: p[0])
    for i, g in enumerate(goals):
        end = goals[i + 1].stamp_ns if i + 1 < len(goals) else math.inf
        mine = [(p, frame) for t, p, frame in goal_poses if g.stamp_ns - tol <= t < end - tol]
        g.pose, g.pose_frame_id = mine[0] if mine else (None, "")
    return odom, gt, goals


def pair_goal_depths(goals: list[Goal], depths: dict[int, np.ndarray], tolerance_ns: int, skipped: Counter) -> None:
    """Give each goal (in stamp order; one goal per stamp) the goal depth image nearest its stamp within
    `tolerance_ns` (of two equally near, the earlier), each depth image used once: the live nodes' rule
    (`GoalDepthPairer`). A depth image of another size than its goal image is dropped
    (`skipped["goal_depth_size_mismatch"]`; the goal is encoded without depth, as the encoder node drops it); depth
    images left over count as `skipped["goal_depth_without_goal_image"]`.
    """
    pairer: GoalDepthPairer[np.ndarray] = GoalDepthPairer(tolerance_ns, maxlen=max(1, len(depths)))
    for t, depth in sorted(depths.items()):
        pairer.add(t, depth)
    used = 0
    for g in goals:
        match = pairer.take(g.stamp_ns)
        if match is None:
            continue
        used += 1
        if match[1].shape != g.rgb.shape[:2]:
            skipped["goal_depth_size_mismatch"] += 1
            continue
        g.depth = match[1]
    if len(depths) > used:
        skipped["goal_depth_without_goal_image"] += len(depths) - used


def goal_depth_warning(goals: list[Goal], skipped: Counter, roles: dict[str, str], cfg: EvalConfig) -> str | None:
    """What to say when goal images of a bag that records goal depth images go without depth (None: none does)."""
    missing = sum(g.depth is None for g in goals)
    if not missing:
        return None
    mismatched = skipped["goal_depth_size_mismatch"]
    reasons = []
    if missing - mismatched:
        reasons.append(f"{missing - mismatched} have no goal depth image on {roles['goal_depth']} within "
                       f"--sync-tolerance ({cfg.sync_tolerance_s:g} s) of their stamp")
    if mismatched:
        reasons.append(f"{mismatched} have one of another size than the goal image")
    unused = skipped["goal_depth_without_goal_image"]
    left = f"; {unused} goal depth image(s) matched no goal image" if unused else ""
    return (f"{missing} of {len(goals)} goal image(s) on {roles['goal']} are encoded without depth: "
            f"{' and '.join(reasons)}{left}")


def reference_frame_warning(odom: PoseTrack, gt: PoseTrack | None, goals: list[Goal], cfg: EvalConfig) -> str | None:
    """Why the stop labels cannot be trusted, or None: without ground truth, the distance to each goal pose (map
    frame) is measured from odometry, which is right only when odometry is in the map frame. A bag records no
    odometry origin setting (the simulator's `odometry_origin`: `house`, the map frame, or `start`, zero where the
    robot started), so odometry counts as in the goal poses' frame only when every odometry message and every
    goal pose name the same, non-empty `header.frame_id`.

    Args:
        odom: the odometry track (with its frame ids).
        gt: the ground-truth track, None when the bag has none (then odometry is the reference).
        goals: the goals; only those with a pose are scored.
        cfg: settings (topic names for the message).
    """
    posed = [g for g in goals if g.pose is not None]
    if gt is not None or not posed:
        return None
    goal_frames = {g.pose_frame_id for g in posed}
    if len(goal_frames) == 1 and odom.frame_ids == goal_frames and "" not in goal_frames:
        return None

    def named(frames: set[str]) -> str:
        return " / ".join(repr(f) if f else "none given" for f in sorted(frames))

    source = f"none on {cfg.gt_topic}" if cfg.gt_topic else "--gt-topic ''"
    return (f"stop labels may be wrong: without ground truth ({source}) the distance to the {len(posed)} goal "
            f"pose(s), frame {named(goal_frames)}, is measured from odometry, frame {named(odom.frame_ids)}, and the "
            "bag does not say that odometry is in the goal poses' frame: odometry that starts at zero where the robot "
            "started (a stack run with odometry_origin: start, wheel odometry) is not, and then frames_at_goal, stop "
            "precision and recall and first_stop_within_radius are wrong; record ground truth, or odometry stamped "
            "in the goal poses' frame")


def _frames(bag: BagFile, roles: dict[str, str], cfg: EvalConfig, skipped: Counter, invalid: Counter):
    """Pass 2: colour (+ depth) frames in stamp order, with their read + decode time, seconds."""
    from memnav.ros.conversions import MessageError, image_to_depth, image_to_rgb

    tol = int(cfg.sync_tolerance_s * 1e9)
    window_ns = 2_000_000_000
    has_depth = "depth" in roles
    pending: list[list] = []          # [stamp, rgb, depth, log time, read time], in arrival order
    depth_pool: dict[int, tuple[np.ndarray, float, int]] = {}   # stamp -> (depth, read time, log time)
    topics = [roles["rgb"]] + ([roles["depth"]] if has_depth else [])
    it = iter(bag.messages(topics))
    while True:
        t0 = time.perf_counter()
        m = next(it, None)
        if m is None:
            break
        try:
            t = stamp_ns(m.msg, m.log_time_ns)
            if m.topic == roles["rgb"]:
                item = [t, image_to_rgb(m.msg), None, m.log_time_ns, time.perf_counter() - t0]
                match = _pop_near(depth_pool, t, tol) if has_depth else None
                if match is not None:
                    item[2], item[4] = match[0], item[4] + match[1]
                pending.append(item)
            else:
                depth = image_to_depth(m.msg)
                dt = time.perf_counter() - t0
                for item in pending:
                    if item[2] is None and abs(item[0] - t) <= tol:
                        item[2], item[4] = depth, item[4] + dt
                        break
                else:
                    depth_pool[t] = (depth, dt, m.log_time_ns)
        except (MessageError, ValueError) as err:
            invalid[f"{m.topic}: {type(err).__name__}"] += 1
            continue
        # emit complete frames in arrival order; give up on images older than the pairing window
        while pending and (not has_depth or pending[0][2] is not None
                           or m.log_time_ns - pending[0][3] > window_ns):
            item = pending.pop(0)
            if has_depth and item[2] is None:
                skipped["rgb_without_depth"] += 1
                continue
            yield item[0], item[1], item[2], item[4]
        for t_old in [k for k, v in depth_pool.items() if m.log_time_ns - v[2] > window_ns]:
            del depth_pool[t_old]
            skipped["depth_without_rgb"] += 1
    for item in pending:
        if has_depth and item[2] is None:
            skipped["rgb_without_depth"] += 1
        else:
            yield item[0], item[1], item[2], item[4]
    skipped["depth_without_rgb"] += len(depth_pool)


def _pop_near(pool: dict[int, tuple[np.ndarray, float, int]], t: int, tol: int) -> tuple[np.ndarray, float, int] | None:
    if t in pool:
        return pool.pop(t)
    best = min(pool, key=lambda k: abs(k - t), default=None)
    if best is not None and abs(best - t) <= tol:
        return pool.pop(best)
    return None


def evaluate_bag(path: Path | str | Sequence[Path | str], cfg: EvalConfig | None = None, *, encoder: Any = None,
                 calibrator: Any = None, progress: bool = False) -> EvalResult:
    """Run the offline evaluation of one bag (see the module docstring).

    Args:
        path: rosbag2 folder, .mcap or .db3 file, or the .mcap (.db3) files of one split recording (`BagFile`); only
            read.
        cfg: settings.
        encoder: a loaded `memnav.core.encoder.Encoder` (default: from cfg.checkpoint).
        calibrator: a loaded `GoalBeliefCalibrator` (default: from cfg.calibration).
        progress: show a progress bar on stderr.

    Raises:
        FileNotFoundError: the bag or a model file does not exist.
        BagError: the bag cannot be read (TopicError: a required topic is missing or of the wrong type).
    """
    import torch

    from memnav.core.encoder import Encoder

    cfg = cfg or EvalConfig()
    torch.set_num_threads(cfg.threads)
    t_open = time.perf_counter()
    with BagFile(path, distro=cfg.distro or None) as bag:
        roles = _check_topics(bag, cfg)    # a wrong bag fails before the models are loaded
        open_s = time.perf_counter() - t_open
        if encoder is None:
            encoder = Encoder.from_checkpoint(cfg.checkpoint)
        if calibrator is None:
            calibrator = load_calibrator(Path(cfg.calibration))
        wall0 = time.perf_counter() - open_s   # model loading is not part of the evaluation time
        invalid: Counter = Counter()
        out_of_order: Counter = Counter()
        skipped: Counter = Counter()
        odom, gt, goals = _read_annotations(bag, roles, cfg, invalid, out_of_order, skipped)
        if not len(odom):
            raise TopicError(f"{bag.path}: topic {roles['odom']} has no usable odometry message")
        warning = reference_frame_warning(odom, gt, goals, cfg)
        if warning is not None:
            bag.warnings.append(warning)
        pipe = _Pipeline(cfg, encoder, calibrator, encoder.embedding_dim)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=bag.topics[roles["rgb"]].count or None, desc="eval-bag", unit="frame", file=sys.stderr)
        batch: list = []
        n_frames = 0
        last = None
        depth_sizes: tuple[tuple[int, ...], tuple[int, ...]] | None = None   # the first mismatch: depth, colour
        for stamp, rgb, depth, t_read in _frames(bag, roles, cfg, skipped, invalid):
            if cfg.max_frames and n_frames >= cfg.max_frames:
                break
            if last is not None and stamp < last:
                out_of_order[roles["rgb"]] += 1
                continue
            if depth is not None and depth.shape != rgb.shape[:2]:
                # as the live encoder node drops such a pair; encoding it without depth instead made a whole batch
                # lose its depth, so that the results depended on --batch-size
                skipped["depth_size_mismatch"] += 1
                depth_sizes = depth_sizes or (depth.shape, rgb.shape[:2])
                continue
            pose = odom.at(stamp)
            if pose is None:
                skipped["frame_without_odometry"] += 1
                continue
            ref = gt.at(stamp) if gt is not None else pose
            if ref is None:
                skipped["frame_without_ground_truth"] += 1
            last = stamp
            n_frames += 1
            batch.append((stamp, rgb, depth, pose, ref, t_read))
            if len(batch) == cfg.batch_size:
                pipe.process_batch(batch, goals)
                batch = []
                if bar is not None:
                    bar.update(cfg.batch_size)
        if batch:
            pipe.process_batch(batch, goals)
            if bar is not None:
                bar.update(len(batch))
        if bar is not None:
            bar.close()
        if pipe.frames:
            pipe.sample_growth(pipe.frames[-1].stamp_ns, force=True)
        if depth_sizes is not None:
            (dh, dw), (ch, cw) = depth_sizes
            bag.warnings.append(
                f"{skipped['depth_size_mismatch']} frame(s) skipped: depth images on {roles['depth']} are "
                f"{dw}x{dh} px, colour images on {roles['rgb']} {cw}x{ch} px (as the live encoder node, a pair of "
                "other sizes is dropped); the depth must be registered to the colour image (a RealSense's "
                "aligned_depth_to_color), or evaluate without depth: --depth-topic ''")
        wall_s = time.perf_counter() - wall0
        metrics = _metrics(bag, roles, cfg, pipe, goals, gt is not None, invalid, out_of_order, skipped, wall_s)
    pl = pipe.memory
    places = {}
    for pid in pl.place_ids().tolist():
        info = pl.place(pid)
        places[pid] = (info.pose.x_m, info.pose.y_m, info.pose.yaw_rad, -1 if info.room_id is None else info.room_id)
    edges = [(a, b) for a, b, d in pl.graph.edges(data=True)
             if getattr(d.get("kind"), "name", "") == "TRAVERSABLE"]
    result = EvalResult(metrics, pipe.frames, goals, places, edges, pipe.loop_closures, pipe.growth,
                        [t * 1000.0 for t in pipe.times.total])
    pl.close()
    return result


# ---------------------------------------------------------------------------------------------------------
# metrics


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def _near(ref_a: np.ndarray, ref_b: np.ndarray, dist_m: float, angle_rad: float) -> np.ndarray:
    """(len a, len b) bool: pose pairs within dist and heading difference."""
    d = np.hypot(ref_a[:, None, 0] - ref_b[None, :, 0], ref_a[:, None, 1] - ref_b[None, :, 1])
    dyaw = np.abs((ref_a[:, None, 2] - ref_b[None, :, 2] + np.pi) % (2 * np.pi) - np.pi)
    return (d <= dist_m) & (dyaw <= angle_rad)


def place_recognition(emb: np.ndarray, stamps: np.ndarray, ref: np.ndarray, valid: np.ndarray, *,
                      min_age_ns: int, dist_m: float, angle_rad: float, ks: tuple[int, ...] = (1, 5),
                      chunk: int = 512) -> dict:
    """Frame-level place recognition recall@k against the reference poses.

    Each frame queries the frames at least `min_age_ns` older (cosine similarity of unit embeddings); a
    query counts if one of those is a true match (within dist_m and angle_rad); a hit if one of the top k is.

    Args:
        emb: (N, D) unit embeddings; stamps: (N,) ns; ref: (N, 3) reference poses; valid: (N,) bool (has ref).
    """
    n = len(emb)
    hits = dict.fromkeys(ks, 0)
    queries = 0
    kmax = max(ks)
    for s in range(0, n, chunk):
        q = np.arange(s, min(n, s + chunk))
        older = stamps[None, :] <= stamps[q, None] - min_age_ns            # (c, N)
        older &= valid[None, :] & valid[q, None] & (np.arange(n)[None, :] < q[:, None])
        if not older.any():
            continue
        truth = _near(ref[q], ref, dist_m, angle_rad) & older
        has = truth.any(axis=1)
        if not has.any():
            continue
        sims = emb[q] @ emb.T
        sims = np.where(older, sims, -np.inf)
        k = min(kmax, n)
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (len(q), 1))
        order = np.take_along_axis(sims, top, axis=1).argsort(axis=1)[:, ::-1]
        top = np.take_along_axis(top, order, axis=1)
        for row in np.flatnonzero(has):
            queries += 1
            for kk in ks:
                cand = top[row, :kk]
                cand = cand[np.isfinite(sims[row, cand])]
                if truth[row, cand].any():
                    hits[kk] += 1
    out: dict[str, Any] = {f"recall_at_{k}": _ratio(hits[k], queries) for k in ks}
    out["queries_with_match"] = queries
    return out


def _reference(frames: list[FrameRecord]) -> tuple[np.ndarray, np.ndarray]:
    """(N, 3) reference poses (x, y, yaw; zeros where missing) and (N,) bool: the frame has one."""
    valid = np.array([f.ref is not None for f in frames], dtype=bool)
    ref = np.array([(f.ref.x_m, f.ref.y_m, f.ref.yaw_rad) if f.ref is not None else (0.0, 0.0, 0.0)
                    for f in frames], dtype=np.float64).reshape(-1, 3)
    return ref, valid


def loop_closure_metrics(frames: list[FrameRecord], *, min_age_ns: int, dist_m: float, angle_rad: float,
                         chunk: int = 512) -> dict:
    """Loop-closure precision and recall of the memory's insert decisions against the reference poses.

    Precision: of the LOOP_CLOSURE inserts, those whose place was created (by reference pose) within
    dist_m and angle_rad of the frame. Recall: of the revisit frames (an earlier frame at least
    `min_age_ns` older lies within dist_m and angle_rad), those the memory associated (LOOP_CLOSURE or
    UPDATED_PLACE) with a place created at least `min_age_ns` earlier within those bounds.

    Args:
        frames: the evaluated frames in order (stamp, reference pose, insert kind and place id).
    """
    from memnav.core.memory.scene_graph import InsertKind

    n = len(frames)
    ref, valid = _reference(frames)
    stamps = np.array([f.stamp_ns for f in frames], dtype=np.int64)
    created: dict[int, int] = {}     # place id -> index of the frame that created it
    for i, f in enumerate(frames):
        if f.insert_kind is InsertKind.NEW_PLACE:
            created.setdefault(f.node_id, i)

    def correct(frame_idx: int, place_id: int) -> bool:
        src = created.get(place_id)
        if src is None or not (valid[frame_idx] and valid[src]):
            return False
        return bool(_near(ref[[frame_idx]], ref[[src]], dist_m, angle_rad)[0, 0])

    events = [i for i, f in enumerate(frames) if f.insert_kind is InsertKind.LOOP_CLOSURE]
    tp = sum(correct(i, frames[i].node_id) for i in events)
    revisits = recognised = 0
    for s in range(0, n, chunk):
        q = np.arange(s, min(n, s + chunk))
        older = (stamps[None, :] <= stamps[q, None] - min_age_ns) & valid[None, :] & valid[q, None]
        older &= np.arange(n)[None, :] < q[:, None]
        is_revisit = (_near(ref[q], ref, dist_m, angle_rad) & older).any(axis=1)
        for row in np.flatnonzero(is_revisit):
            i = int(q[row])
            revisits += 1
            f = frames[i]
            src = created.get(f.node_id)
            old_place = src is not None and frames[src].stamp_ns <= f.stamp_ns - min_age_ns
            if f.insert_kind is not InsertKind.NEW_PLACE and old_place and correct(i, f.node_id):
                recognised += 1
    return {"events": len(events), "true_positives": int(tp), "precision": _ratio(int(tp), len(events)),
            "revisit_frames": revisits, "recognised_revisits": recognised, "recall": _ratio(recognised, revisits)}


def _metrics(bag: BagFile, roles: dict[str, str], cfg: EvalConfig, pipe: _Pipeline, goals: list[Goal],
             has_gt: bool, invalid: Counter, out_of_order: Counter, skipped: Counter, wall_s: float) -> dict:
    frames = pipe.frames
    n = len(frames)
    stamps = np.array([f.stamp_ns for f in frames], dtype=np.int64)
    ref, valid = _reference(frames)
    emb = np.stack(pipe.embeddings) if n else np.zeros((0, 1), np.float32)
    min_age_ns = int(cfg.revisit_min_age_s * 1e9)
    pr = place_recognition(emb, stamps, ref, valid, min_age_ns=min_age_ns, dist_m=cfg.place_distance_m,
                           angle_rad=math.radians(cfg.place_angle_deg))
    pr.update(queries=n, distance_m=cfg.place_distance_m, angle_deg=cfg.place_angle_deg,
              min_age_s=cfg.revisit_min_age_s)

    loop = loop_closure_metrics(frames, min_age_ns=min_age_ns, dist_m=cfg.loop_distance_m,
                                angle_rad=math.radians(cfg.loop_angle_deg))
    loop.update(distance_m=cfg.loop_distance_m, angle_deg=cfg.loop_angle_deg)

    st = pipe.memory.stats()
    kinds = Counter(f.insert_kind.value for f in frames)
    memory = {"places": st.places, "objects": st.objects, "rooms": st.rooms, "traversable_edges": st.traversable_edges,
              "inserts": dict(sorted(kinds.items())), "growth": pipe.growth}

    stop = _stop_metrics(frames, goals, ref, valid, cfg) if "goal" in roles and goals else {
        "available": False, "reason": f"no goal images on {cfg.goal_topic or '(no goal topic)'}"}

    if bag.start_ns is not None and bag.end_ns is not None and bag.end_ns > bag.start_ns:
        duration_s = (bag.end_ns - bag.start_ns) / 1e9
    else:
        duration_s = float((stamps[-1] - stamps[0]) / 1e9) if n > 1 else 0.0
    # what was evaluated: the frames' span, not the bag's (--max-frames, other topics recorded longer)
    evaluated_s = float((stamps[-1] - stamps[0]) / 1e9) if n > 1 else 0.0
    counts = bag.counts
    skipped_all = {
        "unknown_type": dict(sorted(counts.unknown_type.items())),
        "deserialize_error": dict(sorted(counts.deserialize_error.items())),
        "invalid_message": dict(sorted(invalid.items())),
        "out_of_order": dict(sorted(out_of_order.items())),
        **{k: v for k, v in sorted((skipped + pipe.skipped).items())},
    }
    unknown_topics = {t: i.msgtype for t, i in bag.topics.items() if not i.known}
    return {
        "bag": bag.describe(),
        "input": {"topics": roles, "frames": n, "reference": "ground_truth" if has_gt else "odometry",
                  "goals": len(goals), "goals_with_pose": sum(g.pose is not None for g in goals),
                  "goals_without_depth": sum(g.depth is None for g in goals),
                  "skipped": skipped_all, "unknown_type_topics": unknown_topics,
                  "log_time_out_of_order": counts.log_time_out_of_order, "truncated": counts.truncated,
                  "truncated_reason": counts.truncated_reason, "warnings": list(dict.fromkeys(bag.warnings))},
        "place_recognition": pr,
        "loop_closure": loop,
        "memory": memory,
        "stop": stop,
        "latency_ms": pipe.times.summary(),
        "timing": {"bag_duration_s": duration_s, "evaluated_duration_s": evaluated_s, "wall_s": wall_s,
                   "realtime_factor": (evaluated_s / wall_s) if wall_s > 0 and evaluated_s > 0 else None,
                   "frames_per_s": n / wall_s if wall_s > 0 else None},
        "config": asdict(cfg),
    }


def _stop_metrics(frames: list[FrameRecord], goals: list[Goal], ref: np.ndarray, valid: np.ndarray,
                  cfg: EvalConfig) -> dict:
    with_goal = [i for i, f in enumerate(frames) if f.goal_index >= 0]
    labelled = [i for i in with_goal if goals[frames[i].goal_index].pose is not None and valid[i]]
    at_goal = {}
    for i in labelled:
        g = goals[frames[i].goal_index].pose
        # strictly within, as live success is (memnav.sim.metrics.is_success, after habitat-lab)
        at_goal[i] = math.hypot(ref[i, 0] - g.x_m, ref[i, 1] - g.y_m) < cfg.success_distance_m

    def pr(attr: str) -> dict:
        tp = sum(1 for i in labelled if getattr(frames[i], attr) and at_goal[i])
        stops = sum(1 for i in labelled if getattr(frames[i], attr))
        pos = sum(at_goal.values())
        return {"stops": stops, "true_positives": tp, "precision": _ratio(tp, stops), "recall": _ratio(tp, pos)}

    episodes = []
    for gi, g in enumerate(goals):
        mine = [i for i in with_goal if frames[i].goal_index == gi]
        if not mine:
            continue
        first = next((i for i in mine if frames[i].stop), None)
        ok = None
        if first is not None and first in at_goal:
            ok = bool(at_goal[first])
        episodes.append({"goal_stamp_ns": g.stamp_ns, "frames": len(mine), "first_stop_frame": first,
                         "first_stop_within_radius": ok,
                         "max_belief": float(max(frames[i].belief for i in mine))})
    judged = [e for e in episodes if e["first_stop_within_radius"] is not None]
    return {"available": True, "labelled": bool(labelled), "frames_with_goal": len(with_goal),
            "frames_labelled": len(labelled), "frames_at_goal": int(sum(at_goal.values())),
            "success_distance_m": cfg.success_distance_m, "voi": pr("stop"),
            "fixed_threshold": dict(pr("stop_fixed"), threshold=cfg.fixed_threshold),
            "verification_runs": sum(1 for i in with_goal if frames[i].similarity >= cfg.verify_min_similarity),
            "episodes": episodes,
            "first_stop_success_rate": _ratio(sum(e["first_stop_within_radius"] for e in judged), len(judged))}


# ---------------------------------------------------------------------------------------------------------
# command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = EvalConfig()
    parser.add_argument("bag", type=Path, nargs="+", metavar="BAG",
                        help="rosbag2 folder, or a single .mcap or .db3 file, or the .mcap (.db3) files of one "
                             "recording split without metadata.yaml (their folder alone reads as well): read as one "
                             "bag, in log-time order (only read, never modified)")
    parser.add_argument("--report", type=Path, required=True, metavar="DIR",
                        help="report folder: report.html, metrics.json and PNG plots are written there "
                             "(created; nothing is written elsewhere); must not lie inside BAG")
    topics = parser.add_argument_group(
        "topics", "Topic names as ROS resolves them: an absolute name (/odom) is read as given; a relative one "
                  "(odom, without the leading /) under --namespace, or under / without one.")
    for name, what in (("rgb", "colour images"), ("depth", "depth images ('' = none)"), ("odom", "odometry"),
                       ("gt", "ground-truth pose, map frame ('' = none)"), ("goal", "goal images ('' = none)"),
                       ("goal-depth", "goal depth images ('' = none: goal images are encoded without depth)"),
                       ("goal-pose", "goal pose annotations, map frame ('' = none: stop decisions are made but "
                                     "not scored)")):
        attr = f"{name.replace('-', '_')}_topic"
        # None: not given (the default, under --namespace when given); an explicit value is never moved
        topics.add_argument(f"--{name}-topic", default=None, metavar="TOPIC",
                            help=f"{what} (default: {getattr(d, attr)}, under --namespace when given)")
    topics.add_argument("--namespace", default="", metavar="NS",
                        help="the bag was recorded from a robot in namespace NS (memnav record of its topics): the "
                             "topic options not given are read under /NS (/NS/odom, ...), and so are relative topic "
                             "names given; an absolute topic name given is read as given; none by default")
    parser.add_argument("--checkpoint", type=Path, default=Path(d.checkpoint), help="encoder checkpoint")
    parser.add_argument("--calibration", type=Path, default=Path(d.calibration), help="stop calibration JSON")
    parser.add_argument("--sync-tolerance", type=float, default=d.sync_tolerance_s, metavar="S",
                        help="colour/depth images this close in stamp are one frame, and goal/goal depth images "
                             "one goal, seconds")
    parser.add_argument("--place-distance", type=float, default=d.place_distance_m, metavar="M",
                        help="place recognition: a true match is within this distance, meters")
    parser.add_argument("--place-angle", type=float, default=d.place_angle_deg, metavar="DEG",
                        help="place recognition: ... and this heading difference, degrees")
    parser.add_argument("--revisit-min-age", type=float, default=d.revisit_min_age_s, metavar="S",
                        help="frames at least this much older count as revisits (also the memory's loop-closure "
                             "minimum age), seconds")
    parser.add_argument("--loop-distance", type=float, default=d.loop_distance_m, metavar="M",
                        help="loop closure: the recognised place is correct within this distance, meters")
    parser.add_argument("--success-distance", type=float, default=d.success_distance_m, metavar="M",
                        help="stop: at the goal within this distance of the goal pose, meters")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help="frames per encoder batch")
    parser.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads")
    parser.add_argument("--distro", default="", choices=("", *DISTROS), metavar="DISTRO",
                        help=f"ROS distribution of the standard message definitions: {', '.join(DISTROS)} "
                             "(default: from the bag's metadata: its ros_distro, else a guess from its version)")
    parser.add_argument("--max-frames", type=int, default=0, help="evaluate at most this many frames (0 = all)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


TOPIC_FIELDS = ("rgb_topic", "depth_topic", "odom_topic", "gt_topic", "goal_topic", "goal_depth_topic",
                "goal_pose_topic")
# EvalConfig field -> the `eval-bag` option that sets it (`bench replay` shares --batch-size and --threads)
OPTIONS = {"rgb_topic": "--rgb-topic", "depth_topic": "--depth-topic", "odom_topic": "--odom-topic",
           "gt_topic": "--gt-topic", "goal_topic": "--goal-topic", "goal_depth_topic": "--goal-depth-topic",
           "goal_pose_topic": "--goal-pose-topic", "checkpoint": "--checkpoint", "calibration": "--calibration",
           "sync_tolerance_s": "--sync-tolerance", "place_distance_m": "--place-distance",
           "place_angle_deg": "--place-angle", "revisit_min_age_s": "--revisit-min-age",
           "loop_distance_m": "--loop-distance", "success_distance_m": "--success-distance",
           "batch_size": "--batch-size", "threads": "--threads", "distro": "--distro", "max_frames": "--max-frames"}


def config_from_options(**fields: Any) -> EvalConfig:
    """`EvalConfig(**fields)` for a command line: a bad value is refused naming its option as typed.

    Raises:
        ValueError: e.g. "--batch-size must be >= 1, got 0" (not the config's field name).
    """
    return cli_config(EvalConfig, OPTIONS, **fields)


def resolve_topics(args: argparse.Namespace) -> dict[str, str]:
    """The topic fields of EvalConfig from the command line, resolved as ROS resolves names in a namespace.

    An option not given (None) is its default (absolute, in the root namespace), put under `--namespace` when given;
    an absolute name given is read as given, also with `--namespace` (the user asked for that very topic, which may
    be the default's name); a relative name given goes under `--namespace`, or under / without one; '' stays ''
    (no topic).

    Raises:
        ValueError: `--namespace` is not a ROS namespace, or a topic is a private name (~...), which needs a node to
            resolve it (naming the option).
    """
    namespace = getattr(args, "namespace", "") or ""
    if namespace:
        absolute_namespace(namespace)   # a malformed one is refused even when every topic is given absolute
    defaults = EvalConfig()
    topics = {}
    for attr in TOPIC_FIELDS:
        given = getattr(args, attr, None)
        if given is None:
            default = getattr(defaults, attr)
            topics[attr] = under_namespace(default, namespace) if namespace else default
        elif given.startswith("~"):
            raise ValueError(f"{OPTIONS[attr]} {given!r}: a private name (~) is resolved against a node's name, and "
                             "eval-bag reads no node's topics; give the topic's name as recorded, e.g. "
                             f"{under_namespace(given.lstrip('~/') or 'topic', namespace or 'robot1')}")
        else:
            topics[attr] = resolve_name(given, namespace) if given else ""
    return topics


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    topics = resolve_topics(args)
    return config_from_options(
        **topics,
        checkpoint=str(args.checkpoint), calibration=str(args.calibration), sync_tolerance_s=args.sync_tolerance,
        place_distance_m=args.place_distance, place_angle_deg=args.place_angle,
        revisit_min_age_s=args.revisit_min_age, loop_distance_m=args.loop_distance,
        success_distance_m=args.success_distance, batch_size=args.batch_size, threads=args.threads,
        distro=args.distro, max_frames=args.max_frames)


def check_report_dir(bag: Path, report: Path) -> None:
    """Refuse a report folder inside the bag (the input is never modified) or that is a file."""
    b, r = bag.resolve(), report.resolve()
    if r == b or (b.is_dir() and b in r.parents):
        raise ValueError(f"--report {report} lies inside the bag {bag}; the input bag is never modified")
    if r.exists() and not r.is_dir():
        raise ValueError(f"--report {report} exists and is not a folder")


def run(args: argparse.Namespace) -> int:
    from memnav.eval.report import write_report

    cfg = config_from_args(args)
    bags = list(args.bag) if isinstance(args.bag, (list, tuple)) else [args.bag]
    for bag in bags:
        if not bag.exists():
            raise FileNotFoundError(f"bag {bag} does not exist")
        check_report_dir(bag, args.report)
    result = evaluate_bag(bags[0] if len(bags) == 1 else bags, cfg, progress=not args.no_progress)
    args.report.mkdir(parents=True, exist_ok=True)
    write_report(result, args.report)
    m = result.metrics
    pr, lc, tm = m["place_recognition"], m["loop_closure"], m["timing"]

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    for warning in m["input"]["warnings"]:
        print(f"memnav eval-bag: warning: {warning}", file=sys.stderr)
    print(f"{m['input']['frames']} frames over {tm['evaluated_duration_s']:.1f} s of the {tm['bag_duration_s']:.1f} s "
          f"bag in {tm['wall_s']:.1f} s ({fmt(tm['realtime_factor'])}x real time); "
          f"reference: {m['input']['reference']}")
    print(f"place recognition recall@1 {fmt(pr.get('recall_at_1'))} ({pr['queries_with_match']} queries); "
          f"loop closures {lc['events']} (precision {fmt(lc['precision'])}, recall {fmt(lc['recall'])}); "
          f"places {m['memory']['places']}")
    stop = m["stop"]
    if stop.get("labelled"):
        v = stop["voi"]
        print(f"stop: precision {fmt(v['precision'])} recall {fmt(v['recall'])} over {stop['frames_labelled']} "
              "labelled frames")
    elif stop.get("available"):
        print(f"stop: {stop['frames_with_goal']} frames with a goal image, no goal pose to score them against")
    skipped = {k: v for k, v in m["input"]["skipped"].items() if v}
    if skipped or m["input"]["truncated"]:
        print(f"skipped: {json.dumps(skipped)}; truncated: {m['input']['truncated']}", file=sys.stderr)
    print(f"report: {args.report / 'report.html'}")
    return 0
