"""RGB-D goal localization: a known planar motion between two synthetic views is recovered."""
import math

import numpy as np
import pytest

from memnav.core.goal_localization import GoalEstimate, GoalLocalizerConfig, localize_goal, to_odometry_frame
from memnav.core.types import Pose2D
from memnav.core.verification import Features

W = H = 128
F = W / 2.0   # hfov 90 deg


def _view(points_cam: np.ndarray):
    """Pixels and a depth image (z-depth) for camera points (forward, left, up)."""
    u = W / 2.0 - F * points_cam[:, 1] / points_cam[:, 0] - 0.5
    v = H / 2.0 - F * points_cam[:, 2] / points_cam[:, 0] - 0.5
    depth = np.zeros((H, W), np.float32)
    for uu, vv, z in zip(u, v, points_cam[:, 0]):
        depth[int(vv) - 1:int(vv) + 2, int(uu) - 1:int(uu) + 2] = z
    return np.stack([u, v], axis=1).astype(np.float32), depth


def _scene(rng, n=60):
    # points on surfaces 2-4 m ahead of the current camera, within its field of view
    fwd = rng.uniform(2.0, 4.0, n)
    return np.stack([fwd, rng.uniform(-0.6, 0.6, n) * fwd, rng.uniform(-0.5, 0.5, n) * fwd], axis=1)


def test_recovers_the_goal_camera_pose():
    rng = np.random.default_rng(0)
    cur = _scene(rng)
    goal_rel = Pose2D(0.6, -0.3, math.radians(12))      # goal camera in the current frame
    c, s = math.cos(goal_rel.yaw_rad), math.sin(goal_rel.yaw_rad)
    d = cur[:, :2] - [goal_rel.x_m, goal_rel.y_m]
    goal = np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], cur[:, 2]], axis=1)
    keep = (goal[:, 0] > 0.5) & (np.abs(goal[:, 1] / goal[:, 0]) < 0.9) & (np.abs(goal[:, 2] / goal[:, 0]) < 0.9)
    cur, goal = cur[keep], goal[keep]
    desc = rng.integers(0, 256, (len(cur), 32), dtype=np.uint8)
    px_c, depth_c = _view(cur)
    px_g, depth_g = _view(goal)
    est = localize_goal(Features(px_g, desc), depth_g, Features(px_c, desc), depth_c, GoalLocalizerConfig())
    assert isinstance(est, GoalEstimate)
    assert est.inliers >= 0.8 * len(cur)
    assert est.relative.x_m == pytest.approx(0.6, abs=0.08)
    assert est.relative.y_m == pytest.approx(-0.3, abs=0.08)
    assert est.relative.yaw_rad == pytest.approx(math.radians(12), abs=math.radians(3))
    # in the odometry frame of a robot at (2, 1) facing +y
    world = to_odometry_frame(est, Pose2D(2.0, 1.0, math.pi / 2))
    assert world.x_m == pytest.approx(2.0 + 0.3, abs=0.1) and world.y_m == pytest.approx(1.6, abs=0.1)


def test_with_the_camera_ahead_of_the_axis_the_goal_is_where_the_robot_stood():
    """Cameras 0.3 m ahead of the turning axis: the estimate (camera to camera) is moved to the robots' axes at
    both ends. The goal robot stands 2 m ahead of the current one, turned 90 deg left: its camera is 0.3 m
    further on its own heading, so the goal camera is seen 1.7 m ahead and 0.3 m left of the current camera."""
    est = GoalEstimate(Pose2D(1.7, 0.3, math.pi / 2), 40, 40)
    robot = Pose2D(1.0, -1.0, 0.0)
    goal = to_odometry_frame(est, robot, camera_forward_m=0.3)
    assert (goal.x_m, goal.y_m, goal.yaw_rad) == pytest.approx((3.0, -1.0, math.pi / 2), abs=1e-9)
    # taken as cameras on the axis: off by the offset at both ends
    wrong = to_odometry_frame(est, robot)
    assert math.hypot(wrong.x_m - 3.0, wrong.y_m + 1.0) == pytest.approx(math.hypot(0.3, 0.3), abs=1e-9)


def test_keypoints_of_a_camera_looking_down_are_lifted_level():
    """A camera pitched 30 deg down, 1.25 m up: the pixel at the image centre with depth 2.5 m is the floor point
    2.17 m ahead, 1.25 m below the camera; taken as level, 2.5 m ahead at the camera's height."""
    from memnav.core.goal_localization import lift_keypoints

    depth = np.full((H, W), 2.5, np.float32)
    centre = np.array([[W / 2.0 - 0.5, H / 2.0 - 0.5]])
    pts, valid = lift_keypoints(centre, depth, 90.0, 8.0, pitch_deg=30.0)
    assert valid[0] and pts[0] == pytest.approx([2.5 * math.cos(math.radians(30.0)), 0.0, -1.25], abs=1e-3)
    level, _ = lift_keypoints(centre, depth, 90.0, 8.0)
    assert level[0] == pytest.approx([2.5, 0.0, 0.0], abs=1e-3)


def test_unrelated_views_give_no_pose():
    rng = np.random.default_rng(1)
    a, b = _scene(rng), _scene(rng)
    desc = rng.integers(0, 256, (len(a), 32), dtype=np.uint8)
    px_a, depth_a = _view(a)
    px_b, depth_b = _view(b)
    # same descriptors, unrelated geometry: matches exist but agree on no rigid motion
    assert localize_goal(Features(px_a, desc), depth_a, Features(px_b, desc), depth_b) is None
    # no depth at the keypoints: nothing to lift
    assert localize_goal(Features(px_a, desc), np.zeros_like(depth_a), Features(px_a, desc), depth_a) is None
