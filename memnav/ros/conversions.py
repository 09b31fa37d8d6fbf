"""Message <-> numpy/dataclass conversions: the only place where ROS message layouts are known.

Every conversion validates the message and raises `MessageError` naming the field, so a node can
drop a bad message with a warning instead of crashing.
"""
from __future__ import annotations

import math

import numpy as np

from memnav.core.types import Pose2D

# encoding -> (channels, numpy dtype)
_ENCODINGS = {
    "rgb8": (3, np.uint8), "bgr8": (3, np.uint8), "rgba8": (4, np.uint8), "bgra8": (4, np.uint8),
    "mono8": (1, np.uint8), "8UC1": (1, np.uint8), "8UC3": (3, np.uint8),
    "32FC1": (1, np.float32), "16UC1": (1, np.uint16), "mono16": (1, np.uint16),
}


class MessageError(ValueError):
    """A message cannot be converted (wrong encoding, size mismatch, non-finite values)."""


def _image_array(msg) -> np.ndarray:
    enc = msg.encoding
    if enc not in _ENCODINGS:
        raise MessageError(f"Image.encoding {enc!r} is not supported; expected one of {sorted(_ENCODINGS)}")
    channels, dtype = _ENCODINGS[enc]
    h, w = int(msg.height), int(msg.width)
    itemsize = np.dtype(dtype).itemsize
    if h <= 0 or w <= 0:
        raise MessageError(f"Image.height/width must be positive, got {h}x{w}")
    row = w * channels * itemsize
    step = int(msg.step) if msg.step else row
    data = np.frombuffer(bytes(msg.data) if not isinstance(msg.data, (bytes, bytearray)) else msg.data,
                         dtype=np.uint8)
    if step < row or data.size != step * h:
        raise MessageError(f"Image.data has {data.size} bytes, header says {h} rows x step {step} "
                           f"({enc}, {w} px wide needs step >= {row})")
    arr = data.reshape(h, step)[:, :row].copy().view(dtype)
    big = bool(msg.is_bigendian)
    if itemsize > 1 and big != (np.little_endian is False):
        arr = arr.byteswap()
    return arr.reshape(h, w, channels)


def image_to_rgb(msg) -> np.ndarray:
    """sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) -> uint8 (H, W, 3) RGB."""
    arr = _image_array(msg)
    if arr.dtype != np.uint8:
        raise MessageError(f"Image.encoding {msg.encoding!r} is not a colour image")
    enc = msg.encoding
    if enc in ("bgr8", "bgra8"):
        arr = arr[..., [2, 1, 0]]
    elif arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    return np.ascontiguousarray(arr[..., :3])


def image_to_depth(msg, keep_too_near: bool = False) -> np.ndarray:
    """sensor_msgs/Image (32FC1 meters, or 16UC1 / mono16 millimeters) -> float32 (H, W) meters.

    Readings as REP 117 gives them: in 32FC1, +inf is no return (too far), NaN invalid and -inf too near to
    measure (a surface inside the sensor's minimum range); in 16UC1, 0 is no return. All of them, and zero or
    negative values, become 0 (no reading), as the encoder was trained and the map is built: neither can place a
    surface it has no distance for. With `keep_too_near` (the safety node, for `nearest_ahead_m`), -inf stays -inf,
    so that a surface too near to measure holds the robot instead of reading as open space.
    """
    arr = _image_array(msg)
    if arr.shape[2] != 1 or arr.dtype not in (np.float32, np.uint16):
        raise MessageError(f"Image.encoding {msg.encoding!r} is not a depth image (32FC1 or 16UC1)")
    depth = arr[..., 0].astype(np.float32)
    if arr.dtype == np.uint16:
        depth *= 0.001
    out = np.where(np.isfinite(depth) & (depth > 0), depth, np.float32(0.0))
    if keep_too_near:
        out[depth == -np.inf] = -np.inf
    return out


def rgb_to_image(rgb: np.ndarray, stamp=None, frame_id: str = "camera_color_optical_frame"):
    from sensor_msgs.msg import Image

    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise MessageError(f"rgb must be (H, W, 3) uint8, got {rgb.shape}")
    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", is_bigendian=0, step=rgb.shape[1] * 3)
    msg.data = rgb.tobytes()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    return msg


def depth_to_image(depth: np.ndarray, stamp=None, frame_id: str = "camera_color_optical_frame"):
    """(H, W) float meters -> sensor_msgs/Image 32FC1. Depth registered to the colour image (what memnav reads)
    is in the colour camera's frame, hence the default: the encoder pairs colour and depth of one frame_id."""
    from sensor_msgs.msg import Image

    depth = np.ascontiguousarray(depth, dtype=np.float32)
    if depth.ndim != 2:
        raise MessageError(f"depth must be (H, W), got {depth.shape}")
    msg = Image(height=depth.shape[0], width=depth.shape[1], encoding="32FC1",
                is_bigendian=int(not np.little_endian), step=depth.shape[1] * 4)
    msg.data = depth.tobytes()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    return msg


def yaw_from_quaternion(x: float, y: float, z: float, w: float) -> float:
    """Heading about +z of a REP-103 orientation quaternion, of any non-zero length (the form with
    1 - 2 (y^2 + z^2) holds for unit ones only: a quaternion 1% long, as a filter that does not renormalise gives,
    was off by a degree, (0, 0, 1, 1) by 27)."""
    return math.atan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z)


def _planar_pose(pose, what: str) -> Pose2D:
    """geometry_msgs/Pose -> Pose2D (x, y, yaw); non-finite values or a zero quaternion raise MessageError."""
    p, q = pose.position, pose.orientation
    values = (p.x, p.y, q.x, q.y, q.z, q.w)
    if not all(math.isfinite(v) for v in values):
        raise MessageError(f"{what} has non-finite values {values}")
    if abs(q.x) + abs(q.y) + abs(q.z) + abs(q.w) < 1e-9:
        raise MessageError(f"{what}.orientation is a zero quaternion")
    return Pose2D(float(p.x), float(p.y), yaw_from_quaternion(q.x, q.y, q.z, q.w))


def odometry_to_pose(msg) -> Pose2D:
    """nav_msgs/Odometry -> Pose2D (x, y, yaw) in its frame; non-finite values raise MessageError."""
    return _planar_pose(msg.pose.pose, "Odometry.pose")


def pose_estimate_to_pose(msg) -> tuple[Pose2D, float | None, float | None]:
    """geometry_msgs/PoseWithCovarianceStamped (e.g. RViz's "2D Pose Estimate" on /initialpose) -> (pose,
    position std in m, yaw std in degrees). A std is None where the covariance leaves it unset (0) or is not
    finite; the position std is that of the larger of the x and y variances."""
    pose = _planar_pose(msg.pose.pose, "PoseWithCovarianceStamped.pose")
    cov = [float(c) for c in msg.pose.covariance]
    xy, yaw = max(cov[0], cov[7]), cov[35]
    position_std = math.sqrt(xy) if math.isfinite(xy) and xy > 0 else None
    yaw_std = math.degrees(math.sqrt(yaw)) if math.isfinite(yaw) and yaw > 0 else None
    return pose, position_std, yaw_std


def set_yaw(orientation, yaw_rad: float) -> None:
    """Write a rotation of `yaw_rad` about z into a geometry_msgs/Quaternion (x and y stay 0)."""
    orientation.z, orientation.w = math.sin(yaw_rad / 2.0), math.cos(yaw_rad / 2.0)


def pose_to_odometry(pose: Pose2D, stamp=None, frame_id: str = "odom", child_frame_id: str = "base_link",
                     v_mps: float = 0.0, w_radps: float = 0.0):
    from nav_msgs.msg import Odometry

    msg = Odometry()
    msg.header.frame_id = frame_id
    msg.child_frame_id = child_frame_id
    if stamp is not None:
        msg.header.stamp = stamp
    msg.pose.pose.position.x = pose.x_m
    msg.pose.pose.position.y = pose.y_m
    set_yaw(msg.pose.pose.orientation, pose.yaw_rad)
    msg.twist.twist.linear.x = float(v_mps)
    msg.twist.twist.angular.z = float(w_radps)
    return msg


def twist_to_command(msg) -> tuple[float, float]:
    """geometry_msgs/Twist -> (v m/s, w rad/s); non-finite values raise MessageError."""
    v, w = float(msg.linear.x), float(msg.angular.z)
    if not (math.isfinite(v) and math.isfinite(w)):
        raise MessageError(f"Twist has non-finite values linear.x={v}, angular.z={w}")
    return v, w
