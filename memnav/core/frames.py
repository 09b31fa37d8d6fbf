"""The one place where Habitat's world frame meets ROS REP-103.

Habitat (episode files, scenes after the stage transform): +Y up, the agent looks along -Z, rotations
are quaternions [x, y, z, w]. memnav's map frame follows REP-103: x forward, y left, z up.
The mapping keeps handedness (both are right-handed):

    map.x = -hab.z      map.y = -hab.x      map.z = hab.y

so an agent at Habitat yaw theta (rotation about +Y) has map yaw theta (rotation about +z).

Also the camera's field of view: from a camera_info, and against the fields of view an encoder was trained on.
"""
from __future__ import annotations

import math

import numpy as np

from memnav.core.types import Pose2D

_HAB_TO_MAP = np.array([[0.0, 0.0, -1.0],
                        [-1.0, 0.0, 0.0],
                        [0.0, 1.0, 0.0]])
_MAP_TO_HAB = _HAB_TO_MAP.T


def habitat_to_map(points: np.ndarray) -> np.ndarray:
    """Convert Habitat world points (..., 3) to map-frame points (..., 3)."""
    return np.asarray(points, dtype=np.float64) @ _HAB_TO_MAP.T


def map_to_habitat(points: np.ndarray) -> np.ndarray:
    """Convert map-frame points (..., 3) to Habitat world points (..., 3)."""
    return np.asarray(points, dtype=np.float64) @ _MAP_TO_HAB.T


def camera_pose(base: Pose2D, forward_m: float) -> Pose2D:
    """The pose of a camera mounted `forward_m` meters ahead of the robot's turning axis (where odometry puts
    `base`), looking the same way: what depth is mapped from."""
    return Pose2D(base.x_m + forward_m * math.cos(base.yaw_rad), base.y_m + forward_m * math.sin(base.yaw_rad),
                  base.yaw_rad)


MAX_CAMERA_FORWARD_M = 2.0   # a camera farther ahead of (or behind) the turning axis than this is a typo


def check_camera_forward(field: str, forward_m: float) -> None:
    """Raise ValueError naming `field` (e.g. "SimConfig.sensor_forward_m") unless `forward_m` is a finite offset
    within 2 m."""
    if not (isinstance(forward_m, (int, float)) and math.isfinite(forward_m)
            and abs(forward_m) <= MAX_CAMERA_FORWARD_M):
        raise ValueError(f"{field} must be a finite offset within {MAX_CAMERA_FORWARD_M:g} m, "
                         f"got {forward_m!r}")


def camera_hfov_deg(width_px: int, fx_px: float) -> float | None:
    """The horizontal field of view of a pinhole camera `width_px` wide with focal length `fx_px` (a camera_info's
    K[0]), degrees; None when either is not a positive number."""
    if not (width_px > 0 and fx_px > 0 and math.isfinite(fx_px)):
        return None
    return math.degrees(2.0 * math.atan(width_px / (2.0 * fx_px)))


SIM_HFOV_DEG = 90.0     # the simulator's camera, which training views are rendered with
HFOV_TOLERANCE_DEG = 3.0   # a camera this far outside an encoder's trained fields of view is still taken as inside
FOV60_HFOV_DEG = (60.0, 90.0)   # the fields of view models/encoder_fov60.pt was trained on (--min-hfov-deg 60)


def trained_hfov_from(extra: dict) -> tuple[float, float]:
    """The horizontal fields of view (lowest, highest) an encoder checkpoint's training rendered, from its extra
    data: the simulator's 90 deg, or the camera of `memnav train encoder --hfov-deg`, and from `min_hfov_deg` up
    when trained with `--min-hfov-deg`."""
    train = extra.get("train_config") or {}
    rendered = float((train.get("camera") or {}).get("hfov_deg", SIM_HFOV_DEG))
    return min(float(train.get("min_hfov_deg", SIM_HFOV_DEG)), rendered), rendered


WIDE_ASPECT = 16 / 9   # the image shape models/encoder_69deg_16x9.pt was trained on (192 x 108 views)
WIDE_HFOV_DEG = (60.0, 69.0)   # ... and its fields of view (--hfov-deg 69 --min-hfov-deg 60)
ASPECT_TOLERANCE = 0.05   # image shapes within this share of each other count as the same


def trained_aspect_from(extra: dict) -> float:
    """The width / height of the images an encoder checkpoint's training rendered (`memnav train encoder
    --image-px`): 1.0 for the simulator's square camera, and for checkpoints that do not say."""
    camera = (extra.get("train_config") or {}).get("camera") or {}
    return float(camera.get("width_px", 1)) / float(camera.get("height_px", 1))


def shape_advice(width_px: int, height_px: int, hfov_deg: float, trained_aspect: float) -> tuple[bool, str] | None:
    """What the camera's image shape means for an encoder trained on `trained_aspect` images: (True, a warning)
    when that encoder was trained on a non-square camera and this one has another shape; (False, a hint) when a
    square-trained encoder runs on a 16:9 camera that models/encoder_69deg_16x9.pt covers (it navigated better
    there in simulation, README "A camera narrower than the simulator's"); else None."""
    aspect = width_px / height_px
    if abs(trained_aspect - 1.0) > ASPECT_TOLERANCE and abs(aspect / trained_aspect - 1.0) > ASPECT_TOLERANCE:
        return True, (f"this encoder was trained on {trained_aspect:.2f}:1 images and the camera's {width_px}x"
                      f"{height_px} is {aspect:.2f}:1: expect weaker place recognition; for other shapes use "
                      f"encoder_checkpoint models/encoder_fov60.pt with calibration "
                      f"models/stop_calibration_fov60.json")
    lo, hi = WIDE_HFOV_DEG
    if abs(trained_aspect - 1.0) <= ASPECT_TOLERANCE and abs(aspect / WIDE_ASPECT - 1.0) <= ASPECT_TOLERANCE \
            and lo - HFOV_TOLERANCE_DEG <= hfov_deg <= hi + HFOV_TOLERANCE_DEG:
        return False, ("a 16:9 camera of this field of view navigated better in simulation with encoder_checkpoint "
                       "models/encoder_69deg_16x9.pt and calibration models/stop_calibration_69deg_16x9.json")
    return None


def camera_mismatch(hfov_deg: float, trained_hfov_deg: tuple[float, float], image_px: tuple[int, int] | None = None,
                    trained_aspect: float = 1.0) -> str | None:
    """A sentence when a camera of `hfov_deg` is narrower than every field of view an encoder was trained on (by
    more than HFOV_TOLERANCE_DEG), else None; with the shipped models to use instead where they cover the camera.
    Place recognition was measured to drop on such cameras, and to rise on wider ones (README "A camera narrower
    than the simulator's"), which are therefore not named. With the camera's image size `image_px`, also the
    warning of `shape_advice` when an encoder trained on `trained_aspect` images (not square) gets another shape."""
    lo, hi = trained_hfov_deg
    if hfov_deg >= lo - HFOV_TOLERANCE_DEG:
        advice = shape_advice(*image_px, hfov_deg, trained_aspect) if image_px and min(image_px) > 0 else None
        return advice[1] if advice is not None and advice[0] else None
    trained = f"{lo:g} deg" if lo == hi else f"{lo:g}-{hi:g} deg"
    text = (f"the camera's {hfov_deg:.1f} deg field of view is narrower than the {trained} this encoder was trained "
            f"on: expect weaker place recognition")
    if hfov_deg >= FOV60_HFOV_DEG[0] - HFOV_TOLERANCE_DEG:
        text += (f"; for cameras of {FOV60_HFOV_DEG[0]:g}-{FOV60_HFOV_DEG[1]:g} deg use encoder_checkpoint "
                 "models/encoder_fov60.pt with calibration models/stop_calibration_fov60.json")
    return text


def pixel_ray_offsets(cols: np.ndarray, rows: np.ndarray, width: int, height: int,
                      hfov_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """The pinhole camera of a width x height image with square pixels and a horizontal field of view of
    hfov_deg: for image columns and rows (pixel indices or sub-pixel coordinates), how far left and how far up
    of the optical axis their rays run per meter of depth (camera frame: forward, left, up)."""
    f = width / (2.0 * math.tan(math.radians(hfov_deg) / 2.0))
    return -(np.asarray(cols) + 0.5 - width / 2.0) / f, -(np.asarray(rows) + 0.5 - height / 2.0) / f


MAX_CAMERA_PITCH_DEG = 45.0   # a camera pitched further than this sees too little ahead to navigate by


def check_camera_pitch(field: str, pitch_deg: float) -> None:
    """Raise ValueError naming `field` unless `pitch_deg` is a finite pitch within 45 degrees."""
    if not (isinstance(pitch_deg, (int, float)) and math.isfinite(pitch_deg)
            and abs(pitch_deg) <= MAX_CAMERA_PITCH_DEG):
        raise ValueError(f"{field} must be a finite pitch within {MAX_CAMERA_PITCH_DEG:g} degrees (positive: "
                         f"looking down), got {pitch_deg!r}")


def check_robot_camera(owner: str, hfov_deg: float, height_m: float, pitch_deg: float) -> None:
    """Raise ValueError naming `owner`.camera_hfov_deg, camera_height_m or camera_pitch_deg unless the field of
    view is in (0, 180) degrees or 0 (from camera_info), the height > 0 m and the pitch within 45 degrees: a node's
    camera settings (the policy node's and the safety node's)."""
    if not (math.isfinite(hfov_deg) and (hfov_deg == 0 or 0 < hfov_deg < 180)):
        raise ValueError(f"{owner}.camera_hfov_deg must be in (0, 180) degrees, or 0 (from camera_info), "
                         f"got {hfov_deg!r}")
    if not (math.isfinite(height_m) and height_m > 0):
        raise ValueError(f"{owner}.camera_height_m must be a height > 0 m, got {height_m!r}")
    check_camera_pitch(f"{owner}.camera_pitch_deg", pitch_deg)


def level_points(depth: np.ndarray, left_per_m: np.ndarray, up_per_m: np.ndarray,
                 pitch_deg: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depth pixels as points in the level frame at the camera: (forward, left, up) meters.

    `depth` is z-depth along the optical axis; `left_per_m` / `up_per_m` are the pixels' ray offsets
    (`pixel_ray_offsets`), broadcast against it; `pitch_deg` how far the optical axis looks down from level
    (negative: up). At 0 the forward coordinate is the depth itself (the same array)."""
    d = np.asarray(depth)
    if pitch_deg == 0.0:
        return d, left_per_m * d, up_per_m * d
    c, s = math.cos(math.radians(pitch_deg)), math.sin(math.radians(pitch_deg))
    up = up_per_m * d
    return d * c + up * s, left_per_m * d, up * c - d * s


def unseen_range_m(left_per_m: np.ndarray, bottom_up_per_m: float, pitch_deg: float, camera_height_m: float,
                   min_height_m: float) -> np.ndarray:
    """Per image column (its `left_per_m` ray offset), the level distance from the camera within which the
    column's lowest pixel (`bottom_up_per_m`, the image's last row) looks above `min_height_m` over the floor:
    something standing there lower than the camera may be out of view, so the column's view says nothing of it.
    Meters; inf where that ray never comes down to `min_height_m`."""
    left = np.asarray(left_per_m, dtype=np.float64)
    ahead, lat, rise = level_points(np.ones_like(left), left, np.full_like(left, bottom_up_per_m), pitch_deg)
    drop = camera_height_m - min_height_m
    down = rise < 0
    return np.where(down, np.hypot(ahead, lat) * drop / np.where(down, -rise, 1.0), np.inf)


def quat_xyzw_from_yaw(yaw_rad: float) -> np.ndarray:
    """Habitat rotation quaternion [x, y, z, w] for a rotation of yaw_rad about +Y."""
    return np.array([0.0, math.sin(yaw_rad / 2.0), 0.0, math.cos(yaw_rad / 2.0)])


def rotate_by_quat_xyzw(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vector v (3,) by the unit quaternion q = [x, y, z, w]."""
    q = np.asarray(q, dtype=np.float64)
    u, w = q[:3], q[3]
    v = np.asarray(v, dtype=np.float64)
    return v + 2.0 * np.cross(u, np.cross(u, v) + w * v)


def yaw_from_quat_xyzw(q: np.ndarray) -> float:
    """Heading (rotation about +Y, equal to map yaw) of a Habitat rotation [x, y, z, w].

    Works for any rotation: the agent's forward axis (-Z) is rotated and projected on the floor.

    Raises:
        ValueError: if q is not a finite, non-zero 4-vector.
    """
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    if q.shape != (4,) or not np.all(np.isfinite(q)) or np.linalg.norm(q) < 1e-9:
        raise ValueError(f"rotation must be a finite non-zero quaternion [x, y, z, w], got {q.tolist()}")
    q = q / np.linalg.norm(q)
    fwd = rotate_by_quat_xyzw(q, np.array([0.0, 0.0, -1.0]))
    return math.atan2(-fwd[0], -fwd[2])


def heading_habitat(yaw_rad: float) -> np.ndarray:
    """Unit forward vector in Habitat world coordinates for heading yaw_rad."""
    return np.array([-math.sin(yaw_rad), 0.0, -math.cos(yaw_rad)])


def pose2d_from_habitat(position: np.ndarray, yaw_rad: float) -> tuple[float, float, float]:
    """(x_m, y_m, yaw_rad) in the map frame for a Habitat position and heading."""
    p = habitat_to_map(np.asarray(position, dtype=np.float64))
    return float(p[0]), float(p[1]), float(yaw_rad)


def habitat_position_from_map(x_m: float, y_m: float, height_m: float) -> np.ndarray:
    """Habitat world position for a map-frame point at the given height above map z=0."""
    return map_to_habitat(np.array([x_m, y_m, height_m]))
