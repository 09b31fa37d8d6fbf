"""Scene-graph snapshot, markers and retrieval lists from a small real memory (messages built without rclpy.init)."""
import json
import math

import numpy as np
import pytest

from memnav.core.memory import SceneGraphConfig, SceneGraphMemory
from memnav.core.types import Pose2D
from memnav.ros.scene_graph_msgs import (
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
