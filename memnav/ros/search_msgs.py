"""The exploring agent's search as messages for RViz: its occupancy map, its planned path and the goal markers.

Everything comes from `Navigator.search_view()` (memnav.core.navigator.SearchView) and is in the odometry frame;
nothing here changes the agent.
"""
from __future__ import annotations

import array
import math

from memnav.core.navigator import SearchView
from memnav.core.types import Pose2D
from memnav.ros.conversions import set_yaw

MARKER_Z_M = 0.1        # markers float a little above the map so RViz draws them on top
ARROW_LENGTH_M = 0.5
GOAL_DIAMETER_M = 0.3
# colours (r, g, b, a): the RGB-D goal estimate, the candidate by kind, the best view
_GOAL_RGBA = (0.1, 0.9, 0.2, 0.9)
_CANDIDATE_RGBA = {"candidate": (1.0, 0.6, 0.0, 0.9), "sweep": (0.6, 0.3, 1.0, 0.9), "homing": (0.0, 0.8, 1.0, 0.9)}
_BEST_VIEW_RGBA = (0.2, 0.4, 1.0, 0.6)


def occupancy_grid(view: SearchView, frame_id: str, stamp=None):
    """nav_msgs/OccupancyGrid of the agent's map (-1 unknown, 0 free, 100 obstacle; rows follow the origin's
    y axis), or None while the agent has no map yet."""
    from nav_msgs.msg import OccupancyGrid

    if view.grid.size == 0:
        return None
    msg = OccupancyGrid()
    msg.header.frame_id = frame_id
    if stamp is not None:
        msg.header.stamp = stamp
        msg.info.map_load_time = stamp
    msg.info.resolution = float(view.resolution_m)
    msg.info.height, msg.info.width = (int(n) for n in view.grid.shape)
    msg.info.origin.position.x, msg.info.origin.position.y = view.origin.x_m, view.origin.y_m
    set_yaw(msg.info.origin.orientation, view.origin.yaw_rad)
    msg.data = array.array("b", view.grid.tobytes())
    return msg


def plan_path(view: SearchView, frame_id: str, stamp=None):
    """nav_msgs/Path of the path the agent planned this step (robot first; no poses when it planned none)."""
    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Path

    msg = Path()
    msg.header.frame_id = frame_id
    if stamp is not None:
        msg.header.stamp = stamp
    for i, (x, y) in enumerate(view.plan):
        p = PoseStamped()
        p.header = msg.header
        p.pose.position.x, p.pose.position.y = x, y
        nxt = view.plan[i + 1] if i + 1 < len(view.plan) else None
        yaw = math.atan2(nxt[1] - y, nxt[0] - x) if nxt is not None else 0.0   # facing along the path
        set_yaw(p.pose.orientation, yaw)
        msg.poses.append(p)
    return msg


def search_markers(view: SearchView, frame_id: str, stamp=None):
    """visualization_msgs/MarkerArray: a DELETEALL, then the RGB-D goal estimate (green cylinder), the goal
    candidate (an arrow: orange for a scan match, purple for a sweep position, cyan for a remembered place) and
    the best view so far (blue arrow), each where the agent has one."""
    from std_msgs.msg import ColorRGBA
    from visualization_msgs.msg import Marker, MarkerArray

    def marker(ns: str, kind: int, pose: Pose2D, rgba: tuple[float, ...]) -> Marker:
        m = Marker(ns=ns, id=0, type=kind, action=Marker.ADD)
        m.header.frame_id = frame_id
        if stamp is not None:
            m.header.stamp = stamp
        m.pose.position.x, m.pose.position.y, m.pose.position.z = pose.x_m, pose.y_m, MARKER_Z_M
        set_yaw(m.pose.orientation, pose.yaw_rad)
        m.color = ColorRGBA(**dict(zip("rgba", rgba)))
        if kind == Marker.ARROW:
            m.scale.x, m.scale.y, m.scale.z = ARROW_LENGTH_M, 0.08, 0.08
        else:
            m.scale.x = m.scale.y = GOAL_DIAMETER_M
            m.scale.z = 0.05
        return m

    clear = Marker(action=Marker.DELETEALL)
    clear.header.frame_id = frame_id
    out = MarkerArray(markers=[clear])
    if view.goal_estimate is not None:
        out.markers.append(marker("goal_estimate", Marker.CYLINDER, view.goal_estimate, _GOAL_RGBA))
    if view.candidate is not None:
        out.markers.append(marker(f"candidate_{view.candidate_kind}", Marker.ARROW, view.candidate,
                                  _CANDIDATE_RGBA.get(view.candidate_kind, _CANDIDATE_RGBA["candidate"])))
    if view.best_view is not None:
        out.markers.append(marker("best_view", Marker.ARROW, view.best_view, _BEST_VIEW_RGBA))
    return out
