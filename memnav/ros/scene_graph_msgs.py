"""The scene-graph memory as messages: a JSON snapshot, RViz markers, retrieval lists.

Poses are in the memory frame (the odometry frame corrected at loop closures; identical to odometry until
the first one). Nothing here changes the memory.
"""
from __future__ import annotations

import colorsys
from collections.abc import Sequence

from memnav.core.memory import EdgeKind, Retrieval, SceneGraphMemory
from memnav.core.types import Pose2D

PLACE_DIAMETER_M = 0.25
EDGE_WIDTH_M = 0.03
# places drawn in one MarkerArray at most: about 40 bytes a sphere and 48 an edge, so some 300 KB at this many
# (a 100,000-place memory made an 11 MB array each publish: Fast DDS large messages, RViz stalled)
MAX_MARKER_PLACES = 3000
_NO_ROOM_RGBA = (0.6, 0.6, 0.6, 1.0)


def room_rgba(room_id: int | None) -> tuple[float, float, float, float]:
    """A stable, well-separated colour per room (golden-ratio hues); grey for no room."""
    if room_id is None:
        return _NO_ROOM_RGBA
    r, g, b = colorsys.hsv_to_rgb((room_id * 0.618033988749895) % 1.0, 0.75, 0.95)
    return (r, g, b, 1.0)


def _places(memory: SceneGraphMemory) -> list[dict]:
    c = memory.place_columns()   # not place() by place(): each copies its embedding
    return [{"id": i, "x_m": x, "y_m": y, "yaw_rad": yaw, "room_id": room if room >= 0 else None, "visit_count": visits,
             "first_seen_ns": first, "last_seen_ns": last}
            for i, (x, y, yaw), room, visits, first, last in zip(
                c["node_id"].tolist(), c["pose"].tolist(), c["room_id"].tolist(), c["visit_count"].tolist(),
                c["first_seen_ns"].tolist(), c["last_seen_ns"].tolist(), strict=True)]


def scene_graph_snapshot(memory: SceneGraphMemory, max_places: int = 0) -> dict:
    """JSON-ready summary: counts always; places, rooms, objects and edges up to `max_places` places.

    Args:
        memory: the memory to describe.
        max_places: above this many places only counts are listed (`truncated` true); 0 = no limit.
    """
    stats = memory.stats()
    body: dict = {
        "counts": {"places": stats.places, "objects": stats.objects, "rooms": stats.rooms,
                   "traversable_edges": stats.traversable_edges, "observed_from_edges": stats.observed_from_edges,
                   "graph_nodes": stats.graph_nodes, "graph_edges": stats.graph_edges},
        "last_stamp_ns": stats.last_stamp_ns,
        "drift_correction": list(memory.drift_correction),
        "localised": memory.localised,
        "truncated": bool(max_places) and stats.places > max_places,
    }
    if body["truncated"]:
        return body
    places = _places(memory)
    pose = {p["id"]: (p["x_m"], p["y_m"]) for p in places}
    rooms = []
    for room_id, members in sorted(memory.rooms().items()):
        xy = [pose[m] for m in members if m in pose]
        cx = sum(x for x, _ in xy) / len(xy) if xy else 0.0
        cy = sum(y for _, y in xy) / len(xy) if xy else 0.0
        rooms.append({"id": room_id, "place_ids": sorted(members), "x_m": cx, "y_m": cy})
    edges = [{"a": int(min(a, b)), "b": int(max(a, b)), "kind": d["kind"].name.lower(),
              "distance_m": d.get("distance_m")} for a, b, d in memory.graph.edges(data=True)]
    edges.sort(key=lambda e: (e["a"], e["b"]))
    objects = [{"id": o.id, "class_id": o.class_id, "label": o.label, "position_m": list(o.position_m),
                "room_id": o.room_id, "observation_count": o.observation_count} for o in memory.objects()]
    body.update(places=places, rooms=rooms, objects=objects, edges=edges)
    return body


def retrievals_json(hits: Sequence[Retrieval], robot: Pose2D | None) -> list[dict]:
    """Retrieval hits with memory-frame poses and, when the robot's memory-frame pose is known, the pose of
    each place relative to the robot (x forward, y left)."""
    out = []
    for h in hits:
        item = {"node_id": h.node_id, "similarity": h.similarity,
                "pose": {"x_m": h.pose.x_m, "y_m": h.pose.y_m, "yaw_rad": h.pose.yaw_rad}}
        if robot is not None:
            rel = h.pose.relative_to(robot)
            item["relative"] = {"x_m": rel.x_m, "y_m": rel.y_m, "yaw_rad": rel.yaw_rad,
                                "distance_m": (rel.x_m ** 2 + rel.y_m ** 2) ** 0.5}
        out.append(item)
    return out


def retrievals_body(memory: SceneGraphMemory, goal, k: int, odometry_pose: Pose2D | None, stamp_ns: int | None,
                    goal_stamp_ns: int | None) -> dict:
    """JSON-ready top-k places for a goal embedding, relative to the robot at `odometry_pose` (when known).

    Raises:
        memnav.core.memory.InvalidInputError: a goal embedding of the wrong length.
    """
    robot = memory.to_memory_frame(odometry_pose) if odometry_pose is not None else None
    return {"stamp_ns": stamp_ns, "goal_stamp_ns": goal_stamp_ns,
            "robot": None if robot is None else {"x_m": robot.x_m, "y_m": robot.y_m, "yaw_rad": robot.yaw_rad},
            "hits": retrievals_json(memory.retrieve(goal, k), robot)}


def marker_stride(places: int, max_places: int = MAX_MARKER_PLACES) -> int:
    """Every how many places (by id) one is drawn so that at most `max_places` of `places` are (0: no limit)."""
    if max_places < 0:
        raise ValueError(f"max_places must be >= 0 (0 = no limit), got {max_places!r}")
    return -(-places // max_places) if max_places and places > max_places else 1


def scene_graph_markers(memory: SceneGraphMemory, frame_id: str, stamp=None, *,
                        max_places: int = MAX_MARKER_PLACES):
    """visualization_msgs/MarkerArray: a DELETEALL, places as one sphere list coloured by room, traversability
    edges as one line list, and a text label per room at its centroid.

    Args:
        memory: the memory to draw.
        frame_id: the markers' frame (the memory frame).
        stamp: the markers' header stamp (builtin_interfaces/Time), or None.
        max_places: above this many places only every k-th place by id is drawn (k = `marker_stride`: spread
            evenly along the way the robot went), each standing for the places up to the next drawn one: an edge
            between two places is drawn once between the drawn places they stand for; a text marker (namespace
            "info", above the places' centroid) says how many of how many are drawn.
            Room labels still count and centre on all places. 0 = no limit.

    Raises:
        ValueError: a negative `max_places`.
    """
    from geometry_msgs.msg import Point
    from std_msgs.msg import ColorRGBA
    from visualization_msgs.msg import Marker, MarkerArray

    columns = memory.place_columns()   # not place() by place(): each copies its embedding (~1.6 s at 100,000)
    ids = columns["node_id"].tolist()
    stride = marker_stride(len(ids), max_places)

    def marker(ns: str, mid: int, kind: int) -> Marker:
        m = Marker(ns=ns, id=mid, type=kind, action=Marker.ADD)
        m.header.frame_id = frame_id
        if stamp is not None:
            m.header.stamp = stamp
        m.pose.orientation.w = 1.0
        return m

    clear = Marker(action=Marker.DELETEALL)
    clear.header.frame_id = frame_id
    places = marker("places", 0, Marker.SPHERE_LIST)
    places.scale.x = places.scale.y = places.scale.z = PLACE_DIAMETER_M
    # every place's: room labels are over all of them
    pose: dict[int, tuple[float, float]] = dict(zip(ids, zip(columns["pose"][:, 0].tolist(),
                                                            columns["pose"][:, 1].tolist())))
    drawn_ids = ids[::stride]
    drawn = set(drawn_ids)
    # one Point per drawn place, which the edges reuse, and one ColorRGBA per room: building a message object
    # costs microseconds, and one per sphere, line end and colour took some 2 s at 100,000 places uncapped
    point = {i: Point(x=pose[i][0], y=pose[i][1], z=0.0) for i in drawn_ids}
    places.points = list(point.values())
    rooms = columns["room_id"][::stride].tolist()
    palette = {r: ColorRGBA(**dict(zip("rgba", room_rgba(r if r >= 0 else None)))) for r in set(rooms)}
    places.colors = [palette[r] for r in rooms]
    edges = marker("edges", 0, Marker.LINE_LIST)
    edges.scale.x = EDGE_WIDTH_M
    edges.color = ColorRGBA(r=0.9, g=0.9, b=0.9, a=0.8)
    line: list = []
    if stride == 1:
        for a, b, d in memory.graph.edges(data=True):
            if d["kind"] is EdgeKind.TRAVERSABLE and a in point and b in point:
                line += (point[a], point[b])
    else:
        # each place stands for the drawn place that opens its run of `stride` ids: an edge between two places
        # is drawn between their drawn places (once), so the capped map keeps its connectivity (between drawn
        # places alone, consecutive ids of a walk are never both drawn, and hardly an edge was left)
        rep = {n: ids[k - k % stride] for k, n in enumerate(ids)}
        pairs: dict[tuple[int, int], None] = {}
        for a, b, d in memory.graph.edges(data=True):
            if d["kind"] is EdgeKind.TRAVERSABLE and a in rep and b in rep and rep[a] != rep[b]:
                pairs[(min(rep[a], rep[b]), max(rep[a], rep[b]))] = None
        for a, b in pairs:
            line += (point[a], point[b])
    edges.points = line
    out = MarkerArray(markers=[clear, places, edges])
    if stride > 1:
        info = marker("info", 0, Marker.TEXT_VIEW_FACING)
        info.pose.position.x = sum(x for x, _ in pose.values()) / len(pose)
        info.pose.position.y = sum(y for _, y in pose.values()) / len(pose)
        info.pose.position.z = 1.5
        info.scale.z = 0.5
        info.color = ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0)
        info.text = (f"{len(drawn)} of {len(ids)} places drawn (1 in {stride}, max_places {max_places}); "
                     "each stands for the places up to the next, edges joined likewise")
        out.markers.append(info)
    for room_id, members in sorted(memory.rooms().items()):
        xy = [pose[m] for m in members if m in pose]
        if not xy:
            continue
        label = marker("rooms", int(room_id), Marker.TEXT_VIEW_FACING)
        label.pose.position.x = sum(x for x, _ in xy) / len(xy)
        label.pose.position.y = sum(y for _, y in xy) / len(xy)
        label.pose.position.z = 0.5
        label.scale.z = 0.3
        label.color = ColorRGBA(**dict(zip("rgba", room_rgba(room_id))))
        label.text = f"room {room_id} ({len(xy)})"
        out.markers.append(label)
    return out
