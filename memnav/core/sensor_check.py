"""Pre-flight check of a robot's sensor streams against what memnav's nodes need (`memnav check`).

What the node shell records for a few seconds (per stream: when each message arrived, its stamp, its image
header, what converting it said) goes in; findings come out, each OK / WARN / FAIL with the reason and what to
do. The thresholds are the robot profile's (config/robot.yaml): the safety node's watchdog, the policy node's
colour-depth pairing tolerance. No ROS here: times are arguments.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from memnav.core.frames import camera_hfov_deg, camera_mismatch, level_points, pixel_ray_offsets, shape_advice
from memnav.core.stamp_sync import same_camera_frame

__all__ = ["CheckConfig", "Finding", "FloorFit", "Level", "StreamLog", "check_camera_for_encoder", "check_camera_info",
           "check_camera_mount", "fit_floor",
           "check_command_topic", "check_streams", "stream_summary"]


class Level(Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass
class CheckConfig:
    """What the streams must do.

    Attributes:
        watchdog_s: the safety node's `guard.watchdog_s`: a longer gap between two messages of any stream stops
            the robot, seconds.
        sync_tolerance_s: the policy node's `sync_tolerance_s`: a colour frame needs a depth frame stamped
            within this, seconds.
        min_camera_hz: below this colour / depth rate, decisions (one per `action_duration_s`, 1 s) see stale
            views: a warning, Hz.
        min_odom_hz: below this odometry rate, a frame's pose is interpolated over long gaps: a warning, Hz.
        min_paired: the share of colour frames that must find their depth frame (below it: FAIL; below
            `good_paired`: WARN).
        good_paired: see min_paired.
        clock_offset_s: stamps further than this from this computer's clock are reported (goals sent from here
            need `memnav goal send --stamp-topic`), seconds.
        min_valid_depth: the share of depth pixels with a reading below which depth is reported as mostly
            missing.
        depth_median_m: the range a median depth in metres should fall in indoors; outside it the units are
            likely wrong (16UC1 is millimetres, 32FC1 metres): a warning.
        depth_units_m: the range no depth camera's median leaves unless its units are wrong by a factor of 1000
            (millimetres in a 32FC1 image, metres in a 16UC1 one): outside it, a FAIL (the safety node would see
            every surface 1000 times too far or too near), metres.
    """

    watchdog_s: float = 0.5
    sync_tolerance_s: float = 0.02
    min_camera_hz: float = 5.0
    min_odom_hz: float = 10.0
    min_paired: float = 0.5
    good_paired: float = 0.9
    clock_offset_s: float = 0.5
    min_valid_depth: float = 0.3
    depth_median_m: tuple[float, float] = (0.2, 10.0)
    depth_units_m: tuple[float, float] = (0.02, 100.0)

    def __post_init__(self) -> None:
        for name in ("watchdog_s", "sync_tolerance_s", "min_camera_hz", "min_odom_hz", "clock_offset_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"CheckConfig.{name} must be a finite number > 0, got {value!r}")


@dataclass
class StreamLog:
    """What arrived on one topic during the check.

    Attributes:
        topic: the topic name.
        kind: "color", "depth" or "odom".
        publishers: publishers of the topic in the graph at the end of the check.
        arrival_s: arrival time of each message on this computer's wall clock, seconds.
        stamp_s: each message's header stamp, seconds.
        width, height, encoding, frame_id: of the last image message (frame_id also for odometry).
        errors: how many messages could not be converted, and the last reason.
        same_type_topics: other published topics of this stream's message type (named when this one is silent).
        valid_depth: per depth frame, the share of pixels with a reading.
        median_depth_m: per depth frame, the median of its readings, metres.
        window_s: (start, end) of the timed listening window on the arrival clock, or None: a stream that stops
            before the window's end is silent there (its last message is then older than the safety node's
            watchdog), which the gaps between messages alone do not show.
    """

    topic: str
    kind: str
    publishers: int = 0
    arrival_s: list[float] = field(default_factory=list)
    stamp_s: list[float] = field(default_factory=list)
    width: int | None = None
    height: int | None = None
    encoding: str | None = None
    frame_id: str | None = None
    errors: int = 0
    last_error: str | None = None
    valid_depth: list[float] = field(default_factory=list)
    median_depth_m: list[float] = field(default_factory=list)
    same_type_topics: list[str] = field(default_factory=list)
    window_s: tuple[float, float] | None = None

    @property
    def count(self) -> int:
        return len(self.arrival_s)

    def clear_messages(self) -> None:
        """Forget the messages recorded so far (and their errors); the topic's header facts stay."""
        for samples in (self.arrival_s, self.stamp_s, self.valid_depth, self.median_depth_m):
            samples.clear()
        self.errors, self.last_error = 0, None


@dataclass
class Finding:
    level: Level
    topic: str
    text: str


def stream_summary(log: StreamLog) -> dict:
    """Rate, gaps and clock offset of one stream (None where fewer than two messages came); with the log's window,
    `silent_end_s`: how long before the window's end its last message came."""
    arr = np.sort(np.asarray(log.arrival_s, dtype=np.float64))
    gaps = np.diff(arr)
    silent_end = max(0.0, log.window_s[1] - arr[-1]) if log.window_s is not None and len(arr) else None
    offset = np.median(np.asarray(log.arrival_s) - np.asarray(log.stamp_s)) if log.count else None
    return {"topic": log.topic, "kind": log.kind, "publishers": log.publishers, "messages": log.count,
            "rate_hz": round(float((len(arr) - 1) / (arr[-1] - arr[0])), 2) if len(arr) > 1 and arr[-1] > arr[0]
            else None,
            "max_gap_s": round(float(gaps.max()), 3) if len(gaps) else None,
            "silent_end_s": round(float(silent_end), 3) if silent_end is not None else None,
            "clock_offset_s": round(float(offset), 3) if offset is not None else None,
            "width": log.width, "height": log.height, "encoding": log.encoding, "frame_id": log.frame_id,
            "conversion_errors": log.errors,
            "valid_depth": round(float(np.mean(log.valid_depth)), 3) if log.valid_depth else None,
            "median_depth_m": round(float(np.median(log.median_depth_m)), 3) if log.median_depth_m else None}


def _paired_share(color: StreamLog, depth: StreamLog, tol_s: float) -> float | None:
    if not color.count or not depth.count:
        return None
    d = np.sort(np.asarray(depth.stamp_s))
    c = np.asarray(color.stamp_s)
    idx = np.clip(np.searchsorted(d, c), 1, len(d) - 1) if len(d) > 1 else np.zeros(len(c), dtype=int)
    nearest = np.minimum(np.abs(d[idx] - c), np.abs(d[np.maximum(idx - 1, 0)] - c))
    return float(np.mean(nearest <= tol_s + 1e-9))


def check_streams(color: StreamLog, depth: StreamLog, odom: StreamLog, duration_s: float,
                  cfg: CheckConfig | None = None) -> list[Finding]:
    """Findings on the three inputs of the robot profile, worst first within each stream."""
    cfg = cfg or CheckConfig()
    out: list[Finding] = []
    for log in (color, depth, odom):
        s = stream_summary(log)
        what = {"color": "colour image", "depth": "depth image", "odom": "odometry"}[log.kind]
        if log.count == 0:
            if log.publishers == 0:
                others = (f"; published topics of its type: {', '.join(log.same_type_topics)}"
                          if log.same_type_topics else "")
                out.append(Finding(Level.FAIL, log.topic, f"no publisher of the {what} topic: is the driver running, "
                                                          f"and is this the right topic name (remap)?{others}"))
            else:
                hint = (" Large images between processes over Fast DDS need FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA "
                        "in the driver's environment too (README)" if log.kind != "odom" else "")
                out.append(Finding(Level.FAIL, log.topic, f"{log.publishers} publisher(s) but no message in "
                                                          f"{duration_s:g} s.{hint}"))
            continue
        if log.errors:
            out.append(Finding(Level.FAIL, log.topic, f"{log.errors} of {log.count + log.errors} messages cannot be "
                                                      f"used: {log.last_error}"))
        rate, gap = s["rate_hz"], s["max_gap_s"]
        least = cfg.min_odom_hz if log.kind == "odom" else cfg.min_camera_hz
        silent = s["silent_end_s"]
        if silent is not None and silent >= cfg.watchdog_s:
            out.append(Finding(Level.FAIL, log.topic, f"no message in the last {silent:.2f} s of the {duration_s:g} s "
                                                      "listened: the stream stopped (driver crashed or stalled?); the "
                                                      f"safety node stops the robot at {cfg.watchdog_s:g} s "
                                                      "(guard.watchdog_s)"))
        if gap is not None and gap >= cfg.watchdog_s:
            out.append(Finding(Level.FAIL, log.topic, f"a gap of {gap:.2f} s between messages: the safety node stops "
                                                      f"the robot at {cfg.watchdog_s:g} s (guard.watchdog_s)"))
        if rate is None:
            out.append(Finding(Level.WARN, log.topic, f"only {log.count} message in {duration_s:g} s"))
        elif rate < least:
            out.append(Finding(Level.WARN, log.topic, f"{rate:.1f} Hz, below the {least:g} Hz memnav expects"))
        off = s["clock_offset_s"]
        if off is not None and abs(off) > cfg.clock_offset_s:
            out.append(Finding(Level.WARN, log.topic, f"stamps are {off:+.2f} s off this computer's clock: goals sent "
                                                      "from here need `memnav goal send --stamp-topic "
                                                      f"{color.topic}` (or synchronise the clocks)"))
        if log.kind == "depth" and log.valid_depth:
            if s["valid_depth"] < cfg.min_valid_depth:
                out.append(Finding(Level.WARN, log.topic, f"only {100 * s['valid_depth']:.0f}% of the depth pixels "
                                                          "have a reading"))
            lo, hi = cfg.depth_median_m
            med = s["median_depth_m"]
            least, most = cfg.depth_units_m
            if med is not None and not least <= med <= most:
                wrong = ("millimetres in a 32FC1 image, which must hold metres? every surface reads 1000 times too "
                         "far: the safety node would not stop for obstacles" if med > most else
                         "metres in a 16UC1 image, which must hold millimetres? every surface reads 1000 times too "
                         "near")
                out.append(Finding(Level.FAIL, log.topic, f"median depth {med:.3g} m in {log.encoding}: {wrong} "
                                                          "(16UC1 = millimetres, 32FC1 = metres)"))
            elif med is not None and not lo <= med <= hi:
                out.append(Finding(Level.WARN, log.topic, f"median depth {med:.3g} m, outside {lo:g}-{hi:g} m: are "
                                                          "the units right? (16UC1 = millimetres, 32FC1 = metres)"))
        if not any(f.topic == log.topic and f.level is not Level.OK for f in out):
            size = f", {log.width}x{log.height} {log.encoding}" if log.width else ""
            out.append(Finding(Level.OK, log.topic, f"{rate:.1f} Hz{size}" if rate is not None else "1 message"))
    if color.count and depth.count:
        if (color.width, color.height) != (depth.width, depth.height):
            out.append(Finding(Level.FAIL, depth.topic,
                               f"depth is {depth.width}x{depth.height} but colour {color.width}x{color.height}: depth "
                               "must be registered to the colour image (RealSense: align_depth.enable:=true, and the "
                               "aligned_depth_to_color topic)"))
        if not same_camera_frame(color.frame_id or "", depth.frame_id or ""):
            out.append(Finding(Level.FAIL, depth.topic,
                               f"depth is in frame_id {depth.frame_id!r}, colour in {color.frame_id!r}: the encoder "
                               "node pairs colour only with depth in its frame (depth registered to the colour "
                               "image; RealSense: align_depth.enable:=true, and the aligned_depth_to_color topic)"))
        share = _paired_share(color, depth, cfg.sync_tolerance_s)
        level = Level.OK if share >= cfg.good_paired else Level.WARN if share >= cfg.min_paired else Level.FAIL
        out.append(Finding(level, color.topic, f"{100 * share:.0f}% of the colour frames have a depth frame stamped "
                                               f"within {cfg.sync_tolerance_s:g} s (policy_node sync_tolerance_s)"))
    return out


TWIST, TWIST_STAMPED = "geometry_msgs/msg/Twist", "geometry_msgs/msg/TwistStamped"


def check_command_topic(topic: str, subscribers: int, publishers: int, subscriber_types: Sequence[str] = (),
                        stamped: bool = False) -> list[Finding]:
    """The base's velocity input: something must listen (the base driver), of the message type the safety node
    will publish (`stamped`: TwistStamped, else Twist; `subscriber_types`: each subscriber's), and nothing else
    should command it (a teleop node left running would fight the safety node, which publishes there at 50 Hz)."""
    out = []
    ours, other = (TWIST_STAMPED, TWIST) if stamped else (TWIST, TWIST_STAMPED)
    if subscriber_types and ours not in subscriber_types:
        hint = ("cmd_vel_stamped:=false" if stamped else "cmd_vel_stamped:=true (ros2_control's diff_drive_controller "
                "on Jazzy and later)") if other in subscriber_types else "remap cmd_vel_topic to the base's input"
        out.append(Finding(Level.FAIL, topic, f"the base subscribes {', '.join(sorted(set(subscriber_types)))}, but "
                                              f"the safety node will publish {ours}: the base would never move "
                                              f"(robot.launch.yaml {hint}; memnav check --cmd-vel-stamped checks "
                                              "the stamped one)"))
    if subscribers == 0:
        out.append(Finding(Level.WARN, topic, "nothing subscribes: the base driver is not running or listens on "
                                              "another topic (robot.launch.yaml cmd_vel_topic:=...)"))
    if publishers:
        out.append(Finding(Level.WARN, topic, f"{publishers} publisher(s) already (teleop?): with memnav running they "
                                              "would fight the safety node's commands"))
    if not out:
        out.append(Finding(Level.OK, topic, f"{subscribers} subscriber(s) of {ours}, no other publisher"))
    return out


# A principal point (K's cx, cy) farther than this share of the image size from its centre does not belong to the
# image: lenses put it within a few percent of the centre, and a K of twice (or half) the resolution puts it at the
# image's edge (or a quarter of the way in).
PRINCIPAL_POINT_TOLERANCE = 0.2


def check_camera_info(topic: str, info: tuple[int, int, float] | None, color_size: tuple[int, int] | None,
                      principal_px: tuple[float, float] | None = None) -> Finding:
    """The colour camera's camera_info, `info` = (width, height, fx) of the newest one or None: the policy node of
    the robot profile takes the camera's field of view from it (camera_hfov_deg 0) and acts only once it came.
    `principal_px` (K's cx, cy), when given, must lie near the centre of the width x height image, else K is
    another resolution's and the field of view taken from it is wrong: FAIL."""
    if info is None:
        return Finding(Level.FAIL, topic, "no camera_info: the robot profile's policy node takes the camera's field "
                                          "of view from it and holds goals until one comes (robot.launch.yaml "
                                          "camera_info_topic:=..., or set policy_node camera_hfov_deg)")
    width, height, fx = info
    hfov = camera_hfov_deg(width, fx)
    if hfov is None:
        return Finding(Level.FAIL, topic, f"no usable intrinsics (width {width}, K[0] {fx!r}): the field of view "
                                          "cannot be known; set policy_node camera_hfov_deg")
    if principal_px is not None:
        cx, cy = principal_px
        if not all(math.isfinite(c) and abs(c - size / 2) <= PRINCIPAL_POINT_TOLERANCE * size
                   for c, size in ((cx, width), (cy, height))):
            return Finding(Level.FAIL, topic, f"K does not fit the {width}x{height} image: its principal point "
                                              f"({cx:g}, {cy:g}) px is far from the image centre ({width / 2:g}, "
                                              f"{height / 2:g}), so K is another resolution's and the "
                                              f"{hfov:.1f} deg field of view taken from it is wrong (fix the "
                                              "camera's calibration, or set policy_node camera_hfov_deg)")
    if color_size is not None and color_size != (width, height):
        return Finding(Level.WARN, topic, f"{width}x{height}, not the colour image's {color_size[0]}x{color_size[1]}: "
                                          f"is it the colour camera's? ({hfov:.1f} deg horizontal field of view)")
    return Finding(Level.OK, topic, f"{hfov:.1f} deg horizontal field of view ({width}x{height}, fx {fx:.1f} px)")


def check_camera_for_encoder(topic: str, hfov_deg: float | None, encoder: str,
                             trained_hfov_deg: tuple[float, float], image_px: tuple[int, int] | None = None,
                             trained_aspect: float = 1.0) -> Finding | None:
    """Whether the encoder the policy node will run was trained on cameras like this one: its `hfov_deg` (None
    when not known: check_camera_info fails then) and, when given, its image size `image_px` against the
    encoder's `trained_aspect` (frames.shape_advice). A narrower camera, or another image shape than a
    non-square-trained encoder's, is a warning: place recognition was measured to drop there, and the policy
    node says the same of the field of view at start."""
    if hfov_deg is None:
        return None
    mismatch = camera_mismatch(hfov_deg, trained_hfov_deg, image_px, trained_aspect)
    if mismatch is not None:
        return Finding(Level.WARN, topic, f"{mismatch} ({encoder})")
    advice = shape_advice(*image_px, hfov_deg, trained_aspect) if image_px and min(image_px) > 0 else None
    lo, hi = trained_hfov_deg
    trained = f"{lo:g} deg" if lo == hi else f"{lo:g}-{hi:g} deg"
    hint = f"; {advice[1]}" if advice is not None else ""   # a warning would have been the mismatch
    return Finding(Level.OK, topic, f"the encoder {encoder} was trained on {trained} fields of view, which cover this "
                                    f"camera's {hfov_deg:.1f} deg{hint}")


@dataclass(frozen=True)
class FloorFit:
    """The floor plane seen in a depth image, in the camera's terms.

    Attributes:
        height_m: the camera's height above it, meters (the policy node's camera_height_m).
        pitch_deg: how far the optical axis looks down from level, degrees (camera_pitch_deg; negative: up).
        roll_deg: how far the camera is turned about its optical axis, degrees (not modelled: should be ~0).
        share: the share of the sampled pixels on the floor.
    """

    height_m: float
    pitch_deg: float
    roll_deg: float
    share: float


def fit_floor(depth: np.ndarray, hfov_deg: float, max_depth_m: float = 5.0, inlier_m: float = 0.03,
              iterations: int = 300, seed: int = 0) -> FloorFit | None:
    """The floor plane in a depth image (z-depth in meters along the optical axis; 0 / NaN = no return): of the
    planes below the camera that face up within 45 degrees of its up axis and hold at least 100 points and 10% of
    them within `inlier_m`, the one holding the most with under 2% of the points seen below it (a table top has
    the floor below it), by RANSAC over about 4,000 evenly spread pixels, then a least-squares fit to its points.
    None when there is no such plane (too little floor in view)."""
    d = np.asarray(depth, dtype=np.float64)
    h, w = d.shape
    stride = max(1, int(math.sqrt(h * w / 4000.0)))
    left, up = pixel_ray_offsets(np.arange(0, w, stride), np.arange(0, h, stride), w, h, hfov_deg)
    d = d[::stride, ::stride]
    ok = np.isfinite(d) & (d > 0.1) & (d <= max_depth_m)
    pts = np.stack(level_points(d, left[None, :], up[:, None]), axis=-1)[ok]   # (forward, left, up), camera frame
    if len(pts) < 100:
        return None
    rng = np.random.default_rng(seed)
    need = max(100, 0.1 * len(pts))
    planes = []                                              # (offset, count, normal) of well-supported planes
    for _ in range(iterations):
        a, b, c = pts[rng.choice(len(pts), 3, replace=False)]
        n = np.cross(b - a, c - a)
        norm = np.linalg.norm(n)
        if norm < 1e-9:
            continue
        n = n / norm * (1.0 if n[2] >= 0 else -1.0)          # pointing up out of the floor
        offset = -float(n @ a)                               # the camera's height above the plane
        if n[2] < math.cos(math.radians(45.0)) or offset < 0.05:
            continue
        count = int((np.abs(pts @ n + offset) < inlier_m).sum())
        if count >= need:
            planes.append((offset, count, n))
    # the floor: the best-held plane with (almost) nothing seen below it; a table top or a bed has the floor
    # around it below, a plane cut across the floor and the foot of a wall has half the floor below
    floor = next((p for p in sorted(planes, key=lambda p: -p[1])
                  if ((pts @ p[2] + p[0]) < -2.0 * inlier_m).mean() < 0.02), None)
    if floor is None:
        return None
    offset, _, n = floor
    on = pts[np.abs(pts @ n + offset) < inlier_m]
    centre = on.mean(axis=0)
    n = np.linalg.svd(on - centre, full_matrices=False)[2][-1]
    n = n * (1.0 if n[2] >= 0 else -1.0)
    return FloorFit(height_m=float(-(n @ centre)), pitch_deg=math.degrees(math.atan2(-n[0], n[2])),
                    roll_deg=math.degrees(math.atan2(n[1], n[2])), share=len(on) / len(pts))


def check_camera_mount(topic: str, fit: FloorFit | None, camera_height_m: float, camera_pitch_deg: float,
                       height_tolerance_m: float = 0.1, pitch_tolerance_deg: float = 3.0) -> Finding:
    """The camera's height and pitch as the floor in its depth image shows them (`fit_floor`), against the values
    the policy node will map with (its camera_height_m and camera_pitch_deg, given): WARN naming the values to set
    when they differ by more than the tolerances, or when the camera is rolled; WARN when no floor was seen."""
    if fit is None:
        return Finding(Level.WARN, topic, "no floor in view: the camera's height and pitch could not be checked "
                                          "(point it at open floor, or check camera_height_m and camera_pitch_deg "
                                          "by hand)")
    seen = (f"the floor in view puts the camera {fit.height_m:.2f} m above it, looking {fit.pitch_deg:.1f} deg "
            f"down, rolled {fit.roll_deg:.1f} deg ({100 * fit.share:.0f}% of the depth image on it)")
    wrong = []
    if abs(fit.height_m - camera_height_m) > height_tolerance_m:
        wrong.append(f"camera_height_m {fit.height_m:.2f} (set: {camera_height_m:g})")
    if abs(fit.pitch_deg - camera_pitch_deg) > pitch_tolerance_deg:
        wrong.append(f"camera_pitch_deg {fit.pitch_deg:.1f} (set: {camera_pitch_deg:g})")
    if wrong:
        return Finding(Level.WARN, topic, f"{seen}: set {' and '.join(wrong)} for policy_node and safety_node "
                                          "(config/robot.yaml), or the floor is mapped as obstacles")
    if abs(fit.roll_deg) > pitch_tolerance_deg:
        return Finding(Level.WARN, topic, f"{seen}: a rolled camera is not modelled; mount it level side to side")
    return Finding(Level.OK, topic, f"{seen}, as camera_height_m {camera_height_m:g} and camera_pitch_deg "
                                    f"{camera_pitch_deg:g} say")
