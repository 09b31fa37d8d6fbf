"""Object detections from a semantic image + depth: the simulator's semantic ids feed the scene graph.

A real detector can produce the same `ObjectDetection`s (class, 3D position) later; the memory does not
care where they come from.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from memnav.core.memory import ObjectDetection
from memnav.core.types import Pose2D


def detections_from_semantic(semantic: np.ndarray, depth: np.ndarray, pose: Pose2D, focal_px: float,
                             camera_height_m: float, classes: Mapping[int, tuple[int, str]] | None = None,
                             min_pixels: int = 20, max_depth_m: float = 8.0) -> list[ObjectDetection]:
    """One detection per semantic id seen with enough valid depth pixels.

    Each object's position is the median of its pixels back-projected through a pinhole camera
    (principal point at the image centre, square pixels) at `pose` (odometry frame, x forward, y left,
    z up) and `camera_height_m` above the floor.

    Args:
        semantic: (H, W) int semantic ids, 0 = none.
        depth: (H, W) float32 depth along the optical axis, meters (0 = no reading).
        pose: camera pose in the odometry frame.
        focal_px: focal length, pixels.
        camera_height_m: camera height above the floor, meters.
        classes: semantic id -> (class id, label); ids missing here use class id = semantic id.
        min_pixels: ignore ids with fewer valid pixels.
        max_depth_m: ignore depth beyond this, meters.

    Raises:
        ValueError: when semantic and depth shapes differ or focal_px is not positive.
    """
    semantic = np.asarray(semantic)
    depth = np.asarray(depth, dtype=np.float32)
    if semantic.shape != depth.shape or semantic.ndim != 2:
        raise ValueError(f"semantic {semantic.shape} and depth {depth.shape} must be the same (H, W)")
    if not math.isfinite(focal_px) or focal_px <= 0:
        raise ValueError(f"focal_px must be positive, got {focal_px}")
    h, w = depth.shape
    valid = (semantic > 0) & np.isfinite(depth) & (depth > 0) & (depth < max_depth_m)
    if not valid.any():
        return []
    rows, cols = np.nonzero(valid)
    z = depth[rows, cols]
    # camera frame: forward = depth, left = -(u - cx) * z / f, up = -(v - cy) * z / f
    fwd = z
    left = -(cols + 0.5 - w / 2.0) * z / focal_px
    up = -(rows + 0.5 - h / 2.0) * z / focal_px + camera_height_m
    c, s = math.cos(pose.yaw_rad), math.sin(pose.yaw_rad)
    xs = pose.x_m + c * fwd - s * left
    ys = pose.y_m + s * fwd + c * left
    ids = semantic[rows, cols]
    out = []
    for sid in np.unique(ids):
        m = ids == sid
        if m.sum() < min_pixels:
            continue
        class_id, label = (classes or {}).get(int(sid), (int(sid), ""))
        out.append(ObjectDetection(class_id=int(class_id), instance_id=int(sid), label=label,
                                   position_m=(float(np.median(xs[m])), float(np.median(ys[m])),
                                               float(np.median(up[m])))))
    return out


def detections_to_dict(stamp_ns: int, detections: list[ObjectDetection]) -> dict:
    """The JSON body of a detections message (`/memnav/detections`): the frame's stamp and, per object,
    class id, label, instance id (or null) and position in the odometry frame of that frame, meters."""
    return {"stamp_ns": int(stamp_ns),
            "objects": [{"class_id": d.class_id, "label": d.label, "instance_id": d.instance_id,
                         "position_m": [float(v) for v in d.position_m]} for d in detections]}


def detections_from_dict(body: object) -> tuple[int, list[ObjectDetection]]:
    """Parse `detections_to_dict`'s body (e.g. from any detector publishing that JSON).

    Raises:
        ValueError: naming the field that is missing or invalid.
    """
    if not isinstance(body, dict):
        raise ValueError(f"detections must be a JSON object, got {type(body).__name__}")
    stamp = body.get("stamp_ns")
    if isinstance(stamp, bool) or not isinstance(stamp, int) or stamp < 0:
        raise ValueError(f"detections.stamp_ns must be a non-negative integer, got {stamp!r}")
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise ValueError(f"detections.objects must be a list, got {type(objects).__name__}")
    out = []
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            raise ValueError(f"detections.objects[{i}] must be an object")
        cls, inst, pos = obj.get("class_id"), obj.get("instance_id"), obj.get("position_m")
        if isinstance(cls, bool) or not isinstance(cls, int):
            raise ValueError(f"detections.objects[{i}].class_id must be an integer, got {cls!r}")
        if inst is not None and (isinstance(inst, bool) or not isinstance(inst, int)):
            raise ValueError(f"detections.objects[{i}].instance_id must be an integer or null, got {inst!r}")
        if (not isinstance(pos, list) or len(pos) != 3
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in pos)):
            raise ValueError(f"detections.objects[{i}].position_m must be 3 finite numbers, got {pos!r}")
        out.append(ObjectDetection(class_id=cls, instance_id=inst, label=str(obj.get("label", "")),
                                   position_m=(float(pos[0]), float(pos[1]), float(pos[2]))))
    return stamp, out
