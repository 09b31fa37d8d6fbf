"""The exploring agent's search as ROS messages: occupancy grid, planned path, markers (built without rclpy.init)."""
import math

import numpy as np
import pytest

pytest.importorskip("nav_msgs")

from memnav.core.navigator import SearchView  # noqa: E402
from memnav.core.types import Pose2D  # noqa: E402
from memnav.ros.search_msgs import occupancy_grid, plan_path, search_markers  # noqa: E402


def _view(**kw):
    grid = np.full((3, 4), -1, np.int8)
    grid[1, :] = 0
    grid[2, 3] = 100
    return SearchView(grid, 0.1, Pose2D(2.0, -1.0, math.pi / 2), **kw)


def test_occupancy_grid_keeps_cells_rows_and_the_turned_origin():
    msg = occupancy_grid(_view(), "odom")
    assert msg.header.frame_id == "odom" and msg.info.resolution == pytest.approx(0.1)
    assert (msg.info.height, msg.info.width) == (3, 4)
    # row-major, row 0 first: what RViz draws at the origin corner, +x along a row
    assert list(msg.data) == [-1] * 4 + [0] * 4 + [-1, -1, -1, 100]
    o = msg.info.origin
    assert (o.position.x, o.position.y) == (2.0, -1.0)
    assert 2 * math.atan2(o.orientation.z, o.orientation.w) == pytest.approx(math.pi / 2)
    assert occupancy_grid(SearchView(np.zeros((0, 0), np.int8), 0.1, Pose2D(0, 0, 0)), "odom") is None


def test_plan_path_faces_along_the_path_and_is_empty_without_a_plan():
    msg = plan_path(_view(plan=((0.0, 0.0), (0.0, 1.0), (1.0, 1.0)), plan_kind="frontier"), "map")
    assert [(p.pose.position.x, p.pose.position.y) for p in msg.poses] == [(0.0, 0.0), (0.0, 1.0), (1.0, 1.0)]
    yaws = [2 * math.atan2(p.pose.orientation.z, p.pose.orientation.w) for p in msg.poses]
    assert yaws[:2] == pytest.approx([math.pi / 2, 0.0])
    assert all(p.header.frame_id == "map" for p in msg.poses)
    assert plan_path(_view(), "map").poses == []


def test_markers_show_what_the_agent_has_and_clear_the_rest():
    from visualization_msgs.msg import Marker

    msg = search_markers(_view(goal_estimate=Pose2D(1.0, 2.0, 0.0), candidate=Pose2D(3.0, 0.0, math.pi),
                               candidate_kind="sweep"), "odom")
    assert msg.markers[0].action == Marker.DELETEALL
    by_ns = {m.ns: m for m in msg.markers[1:]}
    assert set(by_ns) == {"goal_estimate", "candidate_sweep"}
    assert (by_ns["goal_estimate"].pose.position.x, by_ns["goal_estimate"].pose.position.y) == (1.0, 2.0)
    assert by_ns["candidate_sweep"].type == Marker.ARROW
    assert abs(2 * math.atan2(by_ns["candidate_sweep"].pose.orientation.z,
                              by_ns["candidate_sweep"].pose.orientation.w)) == pytest.approx(math.pi)
    assert len(search_markers(_view(), "odom").markers) == 1      # nothing to show: only the DELETEALL
