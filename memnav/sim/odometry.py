"""Odometry shared by the simulator backends: body-frame motion, noise, and command validation."""
from __future__ import annotations

import math

import numpy as np

from memnav.core.frames import pose2d_from_habitat
from memnav.core.types import Pose2D, wrap_angle
from memnav.sim.base import SimConfig


def check_velocity_command(v_mps: float, w_radps: float, dt_s: float) -> None:
    """Raise ValueError naming the field of a non-finite velocity command or a non-positive dt."""
    for name, value in (("v_mps", v_mps), ("w_radps", w_radps), ("dt_s", dt_s)):
        if not math.isfinite(value):
            raise ValueError(f"step_velocity: {name} must be finite, got {value}")
    if dt_s <= 0:
        raise ValueError(f"step_velocity: dt_s must be > 0, got {dt_s}")


def body_motion(p0: np.ndarray, yaw0: float, p1: np.ndarray, yaw1: float) -> tuple[float, float, float]:
    """(forward, left, dyaw) of a Habitat-frame motion, expressed in the body frame at the start."""
    x0, y0, _ = pose2d_from_habitat(p0, yaw0)
    x1, y1, _ = pose2d_from_habitat(p1, yaw1)
    dx, dy = x1 - x0, y1 - y0
    c, s = math.cos(yaw0), math.sin(yaw0)
    return c * dx + s * dy, -s * dx + c * dy, wrap_angle(yaw1 - yaw0)


def start_odometry(gt_pose: Pose2D, config: SimConfig) -> Pose2D:
    """The odometry pose an episode starts with at ground-truth pose `gt_pose` (`SimConfig.odometry_origin`)."""
    return gt_pose if config.odometry_origin == "house" else Pose2D(0.0, 0.0, 0.0)


def apply_odometry(odom: Pose2D, fwd_m: float, left_m: float, dyaw_rad: float, config: SimConfig,
                   rng: np.random.Generator) -> Pose2D:
    """Compose a body-frame motion onto an odometry pose, with the configured noise.

    Translation noise: std `odom_noise_trans_std` per meter travelled on each axis; rotation noise: std
    `odom_noise_rot_std` per radian turned plus per meter travelled.
    """
    dist = math.hypot(fwd_m, left_m)
    if config.odom_noise_trans_std > 0 and dist > 0:
        fwd_m += rng.normal(0.0, config.odom_noise_trans_std * dist)
        left_m += rng.normal(0.0, config.odom_noise_trans_std * dist)
    if config.odom_noise_rot_std > 0 and (dist > 0 or dyaw_rad != 0):
        dyaw_rad += rng.normal(0.0, config.odom_noise_rot_std * (abs(dyaw_rad) + dist))
    return odom.compose(Pose2D(fwd_m, left_m, dyaw_rad))
