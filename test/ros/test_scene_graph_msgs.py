"""Scene-graph snapshot, markers and retrieval lists from a small real memory (messages built without rclpy.init)."""
import json
import math

import numpy as np
import pytest

from memnav.core.memory import EdgeKind, SceneGraphConfig, SceneGraphMemory
from memnav.core.types import Pose2D
from memnav.ros.scene_graph_msgs import (
    MAX_MARKER_PLACES,
    marker_stride,
    retrievals_body,
    retrievals_json,
    room_rgba,
    scene_graph_markers,
    scene_graph_snapshot,
)


@pytest.fixture
def memory():
    rng = np.random.default_rng(0)
    mem = SceneGraphMemory(SceneGraphConfig(embedding_dim=8))
    for i in range(5):   # five places 1.5 m apart along x, each looking different
        mem.insert_observation(i * 1_000_000_000, Pose2D(1.5 * i, 0.0, 0.0), rng.normal(size=8))
    yield mem
    mem.close()


def test_snapshot_lists_places_rooms_and_edges(memory):
    snap = json.loads(json.dumps(scene_graph_snapshot(memory)))   # JSON-ready
    assert snap["counts"]["places"] == 5 and not snap["truncated"] and snap["localised"] is True
    assert [p["x_m"] for p in snap["places"]] == pytest.approx([0.0, 1.5, 3.0, 4.5, 6.0])
    trav = [e for e in snap["edges"] if e["kind"] == "traversable"]
    assert len(trav) == snap["counts"]["traversable_edges"] == 4
    assert all(e["distance_m"] == pytest.approx(1.5) for e in trav)
    in_rooms = sorted(pid for r in snap["rooms"] for pid in r["place_ids"])
    assert in_rooms == sorted(p["id"] for p in snap["places"])
    assert snap["last_stamp_ns"] == 4_000_000_000
    small = scene_graph_snapshot(memory, max_places=3)
    assert small["truncated"] and "places" not in small and small["counts"]["places"] == 5


def test_markers_show_every_place_and_edge(memory):
    pytest.importorskip("visualization_msgs.msg")
    from visualization_msgs.msg import Marker

    arr = scene_graph_markers(memory, "odom")
    kinds = [m.type for m in arr.markers]
    assert arr.markers[0].action == Marker.DELETEALL
    places = arr.markers[kinds.index(Marker.SPHERE_LIST)]
    edges = arr.markers[kinds.index(Marker.LINE_LIST)]
    assert places.header.frame_id == "odom" and len(places.points) == len(places.colors) == 5
    assert len(edges.points) == 2 * 4
    labels = [m for m in arr.markers if m.type == Marker.TEXT_VIEW_FACING]
    assert len(labels) == len(memory.rooms())
    colours = {(c.r, c.g, c.b) for c in places.colors}
    assert colours <= {room_rgba(r)[:3] for r in memory.rooms()}


def _points(marker) -> list[tuple[float, float]]:
    return [(round(p.x, 6), round(p.y, 6)) for p in marker.points]


def test_markers_of_a_large_memory_draw_an_even_subset_of_places(memory):
    """A 100,000-place memory built a MarkerArray of every place and edge each publish (some 9 MB: Fast DDS large
    messages, RViz stalls). Above max_places every k-th place is drawn, standing for the places up to the next, an
    edge between two places drawn once between the places that stand for them, and a text marker says so; room
    labels still count and centre on all places."""
    pytest.importorskip("visualization_msgs.msg")
    from visualization_msgs.msg import Marker

    ids = memory.place_ids().tolist()
    xy = {i: (memory.place(i).pose.x_m, memory.place(i).pose.y_m) for i in ids}
    memory.graph.add_edge(ids[0], ids[3], kind=EdgeKind.TRAVERSABLE, distance_m=4.5)   # a loop closure's edge
    full = scene_graph_markers(memory, "odom", max_places=0)
    arr = scene_graph_markers(memory, "odom", max_places=2)   # 5 places: every 3rd, ids[0] and ids[3]
    by_ns = {m.ns: m for m in arr.markers if m.ns}
    assert _points(by_ns["places"]) == [xy[ids[0]], xy[ids[3]]] and len(by_ns["places"].colors) == 2
    assert _points(by_ns["edges"]) == [xy[ids[0]], xy[ids[3]]]   # 2-3 and the added 0-3 edge, joined once
    assert len(full.markers[2].points) == 2 * 5   # uncapped: the 4 edges along the way and the added one
    info = by_ns["info"]
    assert info.type == Marker.TEXT_VIEW_FACING and info.header.frame_id == "odom"
    assert info.text.startswith("2 of 5 places drawn (1 in 3") and "edges joined likewise" in info.text
    assert info.pose.position.x == pytest.approx(3.0)   # above the centroid of all places
    labels = lambda a: [(m.id, m.text, m.pose.position.x, m.pose.position.y) for m in a.markers  # noqa: E731
                        if m.ns == "rooms"]
    assert labels(arr) == labels(full) and labels(arr)
    assert sum(int(m.text.split("(")[1].rstrip(")")) for m in arr.markers if m.ns == "rooms") == 5
    # at the cap or without one, everything and no info marker
    for whole in (scene_graph_markers(memory, "odom", max_places=5), full):
        assert len(whole.markers[1].points) == 5 and "info" not in {m.ns for m in whole.markers}
    with pytest.raises(ValueError, match="max_places"):
        scene_graph_markers(memory, "odom", max_places=-1)


def test_marker_stride_keeps_within_the_cap():
    for places in (0, 1, 2999, 3000, 3001, 6000, 6001, 100_000):
        stride = marker_stride(places)
        assert len(range(0, places, stride)) <= MAX_MARKER_PLACES and (stride == 1) == (places <= MAX_MARKER_PLACES)
        assert len(range(0, places, stride)) > MAX_MARKER_PLACES // 2 or places <= MAX_MARKER_PLACES
    assert marker_stride(100_000, 0) == 1


def test_markers_as_memory_node_calls_them_apply_the_default_cap():
    """memory_node calls scene_graph_markers(memory, frame_id, stamp): the default cap applies to it."""
    pytest.importorskip("visualization_msgs.msg")
    from builtin_interfaces.msg import Time

    n = MAX_MARKER_PLACES + 1
    mem = SceneGraphMemory(SceneGraphConfig(embedding_dim=4))
    try:
        poses = np.stack([np.arange(n) * 0.5, np.zeros(n), np.zeros(n)], axis=1)
        mem.add_places_bulk(np.arange(n), poses, np.random.default_rng(0).normal(size=(n, 4)))
        arr = scene_graph_markers(mem, "map", Time(sec=7))
        by_ns = {m.ns: m for m in arr.markers if m.ns}
        assert len(by_ns["places"].points) == (n + 1) // 2 and by_ns["places"].header.stamp.sec == 7
        assert f"of {n} places drawn (1 in 2" in by_ns["info"].text
        # consecutive places are linked and every 2nd is drawn: the drawn ones are linked in a chain (between the
        # drawn places alone there was no edge left: a capped map was dots)
        assert _points(by_ns["edges"])[:4] == [(0.0, 0.0), (1.0, 0.0), (1.0, 0.0), (2.0, 0.0)]
        assert len(by_ns["edges"].points) == 2 * ((n + 1) // 2 - 1)
    finally:
        mem.close()


def test_room_colours_are_distinct_and_stable():
    assert room_rgba(3) == room_rgba(3) and room_rgba(None)[:3] == (0.6, 0.6, 0.6)
    assert len({room_rgba(r) for r in range(20)}) == 20


def test_retrievals_relative_to_the_robot(memory):
    goal = memory.place(int(memory.place_ids()[2])).embedding
    hits = memory.retrieve(goal, 3)
    out = retrievals_json(hits, Pose2D(3.0, -1.0, math.pi / 2))   # robot 1 m to the right, facing +y
    assert out[0]["node_id"] == int(memory.place_ids()[2]) and out[0]["similarity"] == pytest.approx(1.0)
    assert out[0]["relative"]["x_m"] == pytest.approx(1.0) and out[0]["relative"]["y_m"] == pytest.approx(0.0)
    assert out[0]["relative"]["distance_m"] == pytest.approx(1.0)
    assert "relative" not in retrievals_json(hits, None)[0]


def test_retrievals_body_places_the_robot_in_the_memory_frame(memory):
    goal = memory.place(int(memory.place_ids()[4])).embedding
    body = json.loads(json.dumps(retrievals_body(memory, goal, 2, Pose2D(4.5, 0.0, 0.0), 7, 3)))
    assert (body["stamp_ns"], body["goal_stamp_ns"]) == (7, 3) and len(body["hits"]) == 2
    assert body["robot"] == {"x_m": 4.5, "y_m": 0.0, "yaw_rad": 0.0}   # no loop closure: memory frame = odometry
    assert body["hits"][0]["relative"]["x_m"] == pytest.approx(1.5)
    assert retrievals_body(memory, goal, 2, None, None, None)["robot"] is None


def test_markers_of_a_memory_with_rooms_are_its_places_edges_and_room_centres():
    """The markers read every place's pose and room in one call (place() by place() took 1.6 s at 100,000 places);
    what they draw is each place where place() has it, coloured by its room, and each room at its places' centre."""
    pytest.importorskip("visualization_msgs.msg")
    from builtin_interfaces.msg import Time
    from visualization_msgs.msg import Marker

    mem = SceneGraphMemory(SceneGraphConfig(embedding_dim=8))
    try:
        rng = np.random.default_rng(1)
        xs = [0.0, 1.0, 2.0, 20.0, 21.0]   # two rooms: three places linked in a row, 18 m away two more
        mem.add_places_bulk(np.arange(5), np.array([[x, 0.5 * x, 0.1] for x in xs]), rng.normal(size=(5, 8)))
        mem.segment_rooms()
        mem.add_places_bulk(np.array([5]), np.array([[50.0, -1.0, 0.0]]), rng.normal(size=(1, 8)))   # no room yet
        ids = mem.place_ids().tolist()
        room_a, room_b = (mem.place(ids[i]).room_id for i in (0, 3))
        assert room_a is not None and room_b not in (None, room_a) and mem.place(ids[5]).room_id is None

        arr = scene_graph_markers(mem, "map", Time(sec=3, nanosec=4), max_places=0)
        assert [(m.ns, m.id, m.type, m.action) for m in arr.markers] == [
            ("", 0, Marker.ARROW, Marker.DELETEALL), ("places", 0, Marker.SPHERE_LIST, Marker.ADD),
            ("edges", 0, Marker.LINE_LIST, Marker.ADD)] + sorted(
            [("rooms", room_a, Marker.TEXT_VIEW_FACING, Marker.ADD), ("rooms", room_b, Marker.TEXT_VIEW_FACING,
                                                                       Marker.ADD)])
        assert all(m.header.frame_id == "map" for m in arr.markers)
        assert all((m.header.stamp.sec, m.header.stamp.nanosec) == (3, 4) for m in arr.markers[1:])
        places, edges = arr.markers[1], arr.markers[2]
        assert [(p.x, p.y, p.z) for p in places.points] == [(x, 0.5 * x, 0.0) for x in xs] + [(50.0, -1.0, 0.0)]
        np.testing.assert_allclose([(c.r, c.g, c.b, c.a) for c in places.colors],   # float32 in the message
                                   [room_rgba(room_a)] * 3 + [room_rgba(room_b)] * 2 + [room_rgba(None)], atol=1e-6)
        assert places.scale.x == places.scale.z == 0.25 and edges.scale.x == 0.03
        assert [(p.x, p.y) for p in edges.points] == [(0.0, 0.0), (1.0, 0.5), (1.0, 0.5), (2.0, 1.0),
                                                      (20.0, 10.0), (21.0, 10.5)]
        labels = {m.id: m for m in arr.markers if m.ns == "rooms"}
        assert labels[room_a].text == f"room {room_a} (3)" and labels[room_b].text == f"room {room_b} (2)"
        assert (labels[room_a].pose.position.x, labels[room_a].pose.position.y) == pytest.approx((1.0, 0.5))
        assert (labels[room_b].pose.position.x, labels[room_b].pose.position.y) == pytest.approx((20.5, 10.25))
        np.testing.assert_allclose([(c.r, c.g, c.b) for c in (labels[room_a].color, labels[room_b].color)],
                                   [room_rgba(room_a)[:3], room_rgba(room_b)[:3]], atol=1e-6)

        capped = scene_graph_markers(mem, "map", max_places=2)   # every 3rd: ids[0] and ids[3], no edge between
        by_ns = {m.ns: m for m in capped.markers if m.ns}
        assert [(p.x, p.y) for p in by_ns["places"].points] == [(0.0, 0.0), (20.0, 10.0)]
        np.testing.assert_allclose([(c.r, c.g, c.b) for c in by_ns["places"].colors],
                                   [room_rgba(room_a)[:3], room_rgba(room_b)[:3]], atol=1e-6)
        assert by_ns["edges"].points == []
        info = by_ns["info"]
        assert (info.pose.position.x, info.pose.position.y) == pytest.approx((94.0 / 6, (22.0 - 1.0) / 6))
        assert info.text.startswith("2 of 6 places drawn (1 in 3, max_places 2)")
        assert [(m.id, m.text) for m in capped.markers if m.ns == "rooms"] == [
            (m.id, m.text) for m in arr.markers if m.ns == "rooms"]
    finally:
        mem.close()


def test_markers_build_one_point_per_place_and_one_colour_per_room_with_the_same_message():
    """Uncapped, the markers of a 100,000-place memory took some 2 s to build, most of it making a Point for each
    sphere and for both ends of each edge, and a ColorRGBA for each sphere. The edges now reuse the places' Points and
    the spheres share one colour per room; the message is the same, value for value and after serialization, as one
    built object by object."""
    pytest.importorskip("visualization_msgs.msg")
    serialization = pytest.importorskip("rclpy.serialization")
    from geometry_msgs.msg import Point
    from std_msgs.msg import ColorRGBA
    from visualization_msgs.msg import MarkerArray

    mem = SceneGraphMemory(SceneGraphConfig(embedding_dim=8))
    try:
        rng = np.random.default_rng(2)
        xs = [0.0, 1.0, 2.0, 3.0, 20.0, 21.0, 22.0]   # two rooms, then a place in none
        mem.add_places_bulk(np.arange(7), np.array([[x, 0.25 * x, 0.0] for x in xs]), rng.normal(size=(7, 8)))
        mem.segment_rooms()
        mem.add_places_bulk(np.array([7]), np.array([[50.0, -1.0, 0.0]]), rng.normal(size=(1, 8)))
        ids = mem.place_ids().tolist()
        mem.graph.add_edge(ids[0], ids[3], kind=EdgeKind.TRAVERSABLE, distance_m=3.0)   # a loop closure's edge
        for max_places, drawn in ((0, ids), (4, ids[::2])):
            arr = scene_graph_markers(mem, "map", max_places=max_places)
            places, edges = arr.markers[1], arr.markers[2]
            # what it was built as before, object by object
            info = {i: mem.place(i) for i in ids}
            assert places.points == [Point(x=info[i].pose.x_m, y=info[i].pose.y_m, z=0.0) for i in drawn]
            assert places.colors == [ColorRGBA(**dict(zip("rgba", room_rgba(info[i].room_id)))) for i in drawn]
            trav = [(a, b) for a, b, d in mem.graph.edges(data=True) if d["kind"] is EdgeKind.TRAVERSABLE]
            if max_places:   # joined between the drawn places standing for their ends, once
                rep = {i: drawn[k // 2] for k, i in enumerate(ids)}
                trav = list(dict.fromkeys((min(rep[a], rep[b]), max(rep[a], rep[b])) for a, b in trav
                                          if rep[a] != rep[b]))
            assert edges.points == [Point(x=info[i].pose.x_m, y=info[i].pose.y_m) for pair in trav for i in pair]
            assert len(edges.points) >= 2 * 2
            # built once: every edge end is a place's Point, and a room's places share its colour
            assert {id(p) for p in edges.points} <= {id(p) for p in places.points}
            assert len({id(c) for c in places.colors}) == len({(c.r, c.g, c.b) for c in places.colors}) > 1
            wire = serialization.serialize_message(arr)
            back = serialization.deserialize_message(wire, MarkerArray)   # (colours come back float32-rounded)
            assert back.markers[1].points == places.points and back.markers[2].points == edges.points
    finally:
        mem.close()
