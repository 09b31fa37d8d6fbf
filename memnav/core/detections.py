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
