import math

import numpy as np
import pytest

from memnav.core import frames


def test_habitat_map_round_trip():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(50, 3))
    assert np.allclose(frames.map_to_habitat(frames.habitat_to_map(pts)), pts)
    assert np.allclose(frames.habitat_to_map(frames.map_to_habitat(pts)), pts)


def test_axes_follow_rep103():
    # Habitat -Z (agent forward at yaw 0) is map +x; Habitat +Y (up) is map +z; Habitat -X is map +y (left)
    assert np.allclose(frames.habitat_to_map([0, 0, -1]), [1, 0, 0])
    assert np.allclose(frames.habitat_to_map([0, 1, 0]), [0, 0, 1])
    assert np.allclose(frames.habitat_to_map([-1, 0, 0]), [0, 1, 0])
    # right-handed in both frames: det = +1
    assert np.isclose(np.linalg.det(frames._HAB_TO_MAP), 1.0)


@pytest.mark.parametrize("yaw", [-3.0, -1.2, 0.0, 0.4, math.pi / 2, 2.9])
def test_yaw_quaternion_round_trip_and_heading(yaw):
    q = frames.quat_xyzw_from_yaw(yaw)
    assert np.isclose(np.linalg.norm(q), 1.0)
    assert np.isclose(frames.yaw_from_quat_xyzw(q), yaw)
    fwd = frames.heading_habitat(yaw)
    assert np.allclose(frames.rotate_by_quat_xyzw(q, [0, 0, -1]), fwd)
    # the same heading seen in the map frame is (cos yaw, sin yaw): map yaw == habitat yaw
    m = frames.habitat_to_map(fwd)
    assert np.allclose(m, [math.cos(yaw), math.sin(yaw), 0.0])


def test_turn_left_is_positive_yaw_in_both_frames():
    # TURN_LEFT rotates counter-clockwise seen from above: Habitat forward -Z turns toward -X (map +y)
    fwd = frames.heading_habitat(math.radians(30))
    assert fwd[0] < 0
    assert frames.habitat_to_map(fwd)[1] > 0


def test_bad_quaternion_is_rejected():
    with pytest.raises(ValueError, match="quaternion"):
        frames.yaw_from_quat_xyzw([0, 0, 0, 0])
    with pytest.raises(ValueError, match="quaternion"):
        frames.yaw_from_quat_xyzw([0, float("nan"), 0, 1])


def test_the_camera_pose_is_the_odometry_pose_moved_along_the_heading():
    import math

    from memnav.core.frames import camera_pose
    from memnav.core.types import Pose2D

    assert camera_pose(Pose2D(1.0, 2.0, 0.0), 0.2) == Pose2D(1.2, 2.0, 0.0)
    cam = camera_pose(Pose2D(1.0, 2.0, math.pi / 2), 0.2)
    assert (cam.x_m, cam.y_m, cam.yaw_rad) == (pytest.approx(1.0), pytest.approx(2.2), math.pi / 2)
    assert camera_pose(Pose2D(1.0, 2.0, 0.3), 0.0) == Pose2D(1.0, 2.0, 0.3)


def test_unseen_range_is_where_the_lowest_pixel_comes_down_to_obstacle_height():
    from memnav.core.frames import pixel_ray_offsets, unseen_range_m

    left, up = pixel_ray_offsets(np.array([0, 64, 127]), np.array([127]), 128, 128, 90.0)
    level = unseen_range_m(left, float(up[0]), 0.0, 1.25, 0.1)
    assert level[1] == pytest.approx(1.15 / abs(up[0]), rel=1e-3)   # straight ahead: 1.15 m down over 45 deg, 1.16 m
    assert level[0] == pytest.approx(level[2]) and level[0] > level[1]   # the corner rays reach farther out
    down = unseen_range_m(left, float(up[0]), 20.0, 1.25, 0.1)[1]
    assert down == pytest.approx(1.15 / math.tan(math.atan(abs(up[0])) + math.radians(20.0)), rel=1e-3)
    left, up = pixel_ray_offsets(np.array([96]), np.array([107]), 192, 108, 69.0)   # 16:9: 21 deg below the axis
    assert unseen_range_m(left, float(up[0]), 0.0, 1.25, 0.1)[0] == pytest.approx(3.0, abs=0.05)
    assert np.isinf(unseen_range_m(left, float(up[0]), -30.0, 1.25, 0.1)[0])   # looking up: it never comes down
