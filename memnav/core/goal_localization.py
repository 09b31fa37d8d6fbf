"""Where was the goal photo taken? A metric relative pose from an RGB-D goal and the current RGB-D frame.

ORB matches between the goal image and the current image (`memnav.core.verification.match_features`)
are lifted to 3D with each image's own depth (pinhole camera, z-depth). Both cameras ride on the same
ground robot at the same height, so the two point sets differ by a planar rigid motion (a yaw and a
translation on the floor); a two-point RANSAC finds the motion most matches agree on (planar residual
below `inlier_m`, height difference below `height_tolerance_m`) and a least-squares fit on its inliers
refines it. The result is the goal camera's pose in the current robot frame (x forward, y left), which
odometry turns into a goal in the odometry frame. No learning, so it works on real cameras too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from memnav.core.frames import camera_pose, level_points, pixel_ray_offsets
from memnav.core.types import Pose2D, wrap_angle
from memnav.core.verification import Features, VerificationConfig, match_features


@dataclass
class GoalLocalizerConfig:
    """Parameters of the RGB-D goal localizer.

    Attributes:
        hfov_deg: horizontal field of view of both images, degrees.
        pitch_deg: how far both cameras look down from level, degrees.
        min_inliers: matches that must agree before a pose is reported.
        min_inlier_ratio: and at least this fraction of the matches with valid depth.
        inlier_m: planar residual of an inlier, meters.
        height_tolerance_m: height difference of an inlier pair, meters.
        max_depth_m: keypoints with depth beyond this (or 0) are not used, meters.
        iterations: RANSAC hypotheses.
        seed: RANSAC sampling seed (the same inputs give the same pose).
    """

    hfov_deg: float = 90.0
    pitch_deg: float = 0.0
    min_inliers: int = 10
    min_inlier_ratio: float = 0.3
    inlier_m: float = 0.15
    height_tolerance_m: float = 0.15
    max_depth_m: float = 8.0
    iterations: int = 200
    seed: int = 0


@dataclass
class GoalEstimate:
    """The goal camera's pose relative to the current robot pose, with its support."""

    relative: Pose2D
    inliers: int
    matches: int


def lift_keypoints(points_px: np.ndarray, depth: np.ndarray, hfov_deg: float,
                   max_depth_m: float, pitch_deg: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Keypoints (N, 2) -> (N, 3) points (forward, left, up) in meters in the level frame at the camera (pitched
    `pitch_deg` down), and which had valid depth."""
    depth = np.asarray(depth, dtype=np.float32)
    h, w = depth.shape
    u = np.clip(points_px[:, 0], 0, w - 1)
    v = np.clip(points_px[:, 1], 0, h - 1)
    # a keypoint sits on an edge: take the nearest surface of its 3x3 neighbourhood (the foreground)
    ui, vi = u.astype(np.int64), v.astype(np.int64)
    best = np.full(len(u), np.inf, np.float32)
    for dv in (-1, 0, 1):
        for du in (-1, 0, 1):
            z = depth[np.clip(vi + dv, 0, h - 1), np.clip(ui + du, 0, w - 1)]
            best = np.minimum(best, np.where(z > 0.05, z, np.inf))
    valid = np.isfinite(best) & (best <= max_depth_m)
    d = np.where(valid, best, 0.0)
    left_per_m, up_per_m = pixel_ray_offsets(u, v, w, h, hfov_deg)
    pts = np.stack(level_points(d, left_per_m, up_per_m, pitch_deg), axis=1)
    return pts, valid


def _fit(src: np.ndarray, dst: np.ndarray) -> tuple[float, np.ndarray]:
    """Least-squares planar rotation angle and translation with dst ~ R src + t (2D Kabsch)."""
    ms, md = src.mean(axis=0), dst.mean(axis=0)
    a, b = src - ms, dst - md
    cross = float(np.sum(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]))
    dot = float(np.sum(a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1]))
    theta = math.atan2(cross, dot)
    c, s = math.cos(theta), math.sin(theta)
    rot = np.array([[c, -s], [s, c]])
    return theta, md - rot @ ms


def localize_goal(goal: Features, goal_depth: np.ndarray, current: Features, current_depth: np.ndarray,
                  cfg: GoalLocalizerConfig | None = None, verification: VerificationConfig | None = None,
                  matches: tuple[np.ndarray, np.ndarray] | None = None) -> GoalEstimate | None:
    """The goal camera's planar pose in the current robot frame, or None without enough agreeing matches.

    `matches`: the goal -> current ratio-test matches when the caller has them already (`match_features`).
    """
    cfg = cfg or GoalLocalizerConfig()
    pg, pc = matches if matches is not None else match_features(goal, current, verification)
    if len(pg) < cfg.min_inliers:
        return None
    xg, vg = lift_keypoints(pg, goal_depth, cfg.hfov_deg, cfg.max_depth_m, cfg.pitch_deg)
    xc, vc = lift_keypoints(pc, current_depth, cfg.hfov_deg, cfg.max_depth_m, cfg.pitch_deg)
    ok = vg & vc
    xg, xc = xg[ok], xc[ok]
    n = len(xg)
    if n < cfg.min_inliers:
        return None
    height_ok = np.abs(xg[:, 2] - xc[:, 2]) <= cfg.height_tolerance_m
    src, dst = xg[:, :2], xc[:, :2]
    # all hypotheses at once: two distinct matches each; the rotation takes one's difference onto the other's
    rng = np.random.default_rng(cfg.seed)
    i = rng.integers(0, n, cfg.iterations)
    j = rng.integers(0, n - 1, cfg.iterations)
    j += j >= i
    u, v = src[i] - src[j], dst[i] - dst[j]
    usable = np.hypot(u[:, 0], u[:, 1]) >= 0.2           # too close together to fix a rotation
    if not usable.any():
        return None
    i, j, u, v = i[usable], j[usable], u[usable], v[usable]
    theta = np.arctan2(u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0], u[:, 0] * v[:, 0] + u[:, 1] * v[:, 1])
    c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
    ms, md = 0.5 * (src[i] + src[j]), 0.5 * (dst[i] + dst[j])
    tx = md[:, 0:1] - (c * ms[:, 0:1] - s * ms[:, 1:2])
    ty = md[:, 1:2] - (s * ms[:, 0:1] + c * ms[:, 1:2])
    res = np.hypot(c * src[None, :, 0] - s * src[None, :, 1] + tx - dst[None, :, 0],
                   s * src[None, :, 0] + c * src[None, :, 1] + ty - dst[None, :, 1])
    masks = (res <= cfg.inlier_m) & height_ok[None, :]
    counts = masks.sum(axis=1)
    best = int(np.argmax(counts))                      # the first of the best-supported hypotheses
    best_mask, best_count = masks[best], int(counts[best])
    if best_count < cfg.min_inliers or best_count < cfg.min_inlier_ratio * n:
        return None
    theta, t = _fit(src[best_mask], dst[best_mask])
    # goal camera origin (0, 0) maps to t; its forward axis is rotated by theta
    return GoalEstimate(Pose2D(float(t[0]), float(t[1]), wrap_angle(theta)), best_count, n)


def to_odometry_frame(estimate: GoalEstimate, robot: Pose2D, camera_forward_m: float = 0.0) -> Pose2D:
    """The goal in the robot's odometry frame: where the robot that took the goal photo stood, given the robot's
    pose now. The estimate is camera to camera; with the camera mounted `camera_forward_m` ahead of the turning
    axis (the pose odometry gives), both ends are moved along their headings by it."""
    goal_camera = camera_pose(robot, camera_forward_m).compose(estimate.relative)
    return camera_pose(goal_camera, -camera_forward_m)
