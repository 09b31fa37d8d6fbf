"""Message conversions, built from messages directly (no rclpy.init)."""
import math

import numpy as np
import pytest

pytest.importorskip("sensor_msgs.msg")

from geometry_msgs.msg import Twist  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from memnav.core.types import Pose2D  # noqa: E402
from memnav.ros import conversions as cv  # noqa: E402


def _img(arr: np.ndarray, enc: str, step_pad: int = 0) -> Image:
    h, w = arr.shape[:2]
    row = arr[0].nbytes
    data = np.zeros((h, row + step_pad), np.uint8)
    data[:, :row] = arr.reshape(h, -1).view(np.uint8)
    return Image(height=h, width=w, encoding=enc, step=row + step_pad, data=data.tobytes(),
                 is_bigendian=0)


def test_rgb_round_trip_and_other_colour_encodings():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (5, 7, 3), dtype=np.uint8)
    assert np.array_equal(cv.image_to_rgb(cv.rgb_to_image(rgb)), rgb)
    assert np.array_equal(cv.image_to_rgb(_img(rgb[..., ::-1].copy(), "bgr8")), rgb)
    rgba = np.concatenate([rgb, np.full((5, 7, 1), 255, np.uint8)], axis=2)
    assert np.array_equal(cv.image_to_rgb(_img(rgba, "rgba8", step_pad=4)), rgb)
    mono = rgb[..., 0].copy()[..., None]
    assert np.array_equal(cv.image_to_rgb(_img(mono, "mono8"))[..., 2], mono[..., 0])


def test_depth_encodings():
    d = np.array([[1.5, 0.0], [np.nan, 4.25]], np.float32)
    out = cv.image_to_depth(cv.depth_to_image(d))
    assert out.tolist() == [[1.5, 0.0], [0.0, 4.25]]
    mm = np.array([[1500, 0], [65535, 250]], np.uint16)[..., None]
    assert np.allclose(cv.image_to_depth(_img(mm, "16UC1")), [[1.5, 0.0], [65.535, 0.25]])


def test_depth_too_near_to_measure_is_kept_only_when_asked():
    """REP 117 in 32FC1: -inf too near, +inf no return, NaN invalid. All read 0 (no reading, as the encoder was
    trained); the safety node asks to keep -inf, a surface inside the minimum range, for its bumper."""
    d = np.array([[1.5, -np.inf, np.inf], [np.nan, 0.0, -2.0]], np.float32)
    msg = cv.depth_to_image(d)
    assert cv.image_to_depth(msg).tolist() == [[1.5, 0.0, 0.0], [0.0, 0.0, 0.0]]
    kept = cv.image_to_depth(msg, keep_too_near=True)
    assert kept.dtype == np.float32 and kept.tolist() == [[1.5, -math.inf, 0.0], [0.0, 0.0, 0.0]]
    mm = np.array([[0, 300]], np.uint16)[..., None]                         # 16UC1: 0 is no return
    assert cv.image_to_depth(_img(mm, "16UC1"), keep_too_near=True).tolist() == [[0.0, pytest.approx(0.3)]]


@pytest.mark.parametrize("mutate, msg", [
    (lambda m: setattr(m, "encoding", "yuv422"), "encoding"),
    (lambda m: setattr(m, "height", 6), "bytes"),
    (lambda m: setattr(m, "step", 3), "step"),
])
def test_bad_images_are_named(mutate, msg):
    m = cv.rgb_to_image(np.zeros((5, 7, 3), np.uint8))
    mutate(m)
    with pytest.raises(cv.MessageError, match=msg):
        cv.image_to_rgb(m)
    with pytest.raises(cv.MessageError, match="not a depth"):
        cv.image_to_depth(cv.rgb_to_image(np.zeros((2, 2, 3), np.uint8)))


def test_odometry_round_trip_and_nan():
    pose = Pose2D(1.5, -2.0, 2.5)
    back = cv.odometry_to_pose(cv.pose_to_odometry(pose))
    assert back.x_m == 1.5 and back.y_m == -2.0 and back.yaw_rad == pytest.approx(2.5)
    bad = cv.pose_to_odometry(pose)
    bad.pose.pose.position.x = math.nan
    with pytest.raises(cv.MessageError, match="non-finite"):
        cv.odometry_to_pose(bad)


@pytest.mark.parametrize("scale", [0.2, 0.99, 1.01, 2.0])
def test_odometry_heading_does_not_depend_on_the_quaternions_length(scale):
    """A filter that does not renormalise sends quaternions a little (or a lot) off unit length: the same
    heading, as the rotation they stand for, for yaws all round and a tilted robot's too."""
    for yaw in np.linspace(-3.0, 3.0, 13):
        msg = cv.pose_to_odometry(Pose2D(0.0, 0.0, float(yaw)))
        q = msg.pose.pose.orientation
        q.x, q.y, q.z, q.w = q.x * scale, q.y * scale, q.z * scale, q.w * scale
        assert cv.odometry_to_pose(msg).yaw_rad == pytest.approx(yaw, abs=1e-9)
    # pitched 10 deg and yawed 40 deg (ZYX), any scale: yaw 40 deg
    cy, sy, cp, sp = math.cos(math.radians(20)), math.sin(math.radians(20)), math.cos(math.radians(5)), \
        math.sin(math.radians(5))
    x, y, z, w = -sy * sp, cy * sp, sy * cp, cy * cp
    assert cv.yaw_from_quaternion(x * scale, y * scale, z * scale, w * scale) == pytest.approx(math.radians(40))


def test_pose_estimate_reads_the_planar_pose_and_its_spread():
    from geometry_msgs.msg import PoseWithCovarianceStamped

    msg = PoseWithCovarianceStamped()
    msg.pose.pose = cv.pose_to_odometry(Pose2D(2.0, -1.0, 0.5)).pose.pose
    pose, position_std, yaw_std = cv.pose_estimate_to_pose(msg)
    assert (pose.x_m, pose.y_m) == (2.0, -1.0) and pose.yaw_rad == pytest.approx(0.5)
    assert position_std is None and yaw_std is None          # an all-zero covariance says nothing
    msg.pose.covariance[0], msg.pose.covariance[7], msg.pose.covariance[35] = 0.04, 0.09, math.radians(10) ** 2
    _, position_std, yaw_std = cv.pose_estimate_to_pose(msg)
    assert position_std == pytest.approx(0.3) and yaw_std == pytest.approx(10.0)
    msg.pose.pose.orientation.w = msg.pose.pose.orientation.z = 0.0
    with pytest.raises(cv.MessageError, match="PoseWithCovarianceStamped.pose.orientation is a zero quaternion"):
        cv.pose_estimate_to_pose(msg)


def test_twist():
    t = Twist()
    t.linear.x, t.angular.z = 0.3, -0.5
    assert cv.twist_to_command(t) == (0.3, -0.5)
    t.angular.z = math.inf
    with pytest.raises(cv.MessageError, match="Twist"):
        cv.twist_to_command(t)
