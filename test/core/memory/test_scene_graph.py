import itertools
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import file_sha256, run_sql

from memnav.core.memory import (
    SCHEMA_VERSION,
    CorruptStoreError,
    EdgeKind,
    InsertKind,
    InvalidInputError,
    Layer,
    ObjectDetection,
    SceneGraphConfig,
    SceneGraphMemory,
    SchemaVersionError,
)
from memnav.core.memory.index import IndexMode
from memnav.core.memory.snapshot import read_snapshot, read_thumbnails
from memnav.core.memory.store import backup_store
from memnav.core.types import Pose2D

ROOT = Path(__file__).resolve().parents[3]
DIM = 32
S = 1_000_000_000  # ns per second


class SmoothEmbedder:
    """Unit embeddings that vary smoothly with pose (random Fourier features, 1.5 m length scale)."""

    def __init__(self, dim=DIM, seed=0, length_m=1.5):
        rng = np.random.default_rng(seed)
        self.w = rng.standard_normal((4, dim))
        self.b = rng.uniform(0, 2 * np.pi, dim)
        self.length_m = length_m

    def __call__(self, x, y, yaw=0.0):
        phi = np.array([x / self.length_m, y / self.length_m, 1.3 * math.cos(yaw), 1.3 * math.sin(yaw)])
        e = np.cos(phi @ self.w + self.b)
        return e / np.linalg.norm(e)


def random_unit(rng, dim=DIM):
    v = rng.standard_normal(dim)
    return v / np.linalg.norm(v)


def cfg(tmp_path=None, **kw):
    base = {"embedding_dim": DIM, "consolidate_every": 0,
            "db_path": None if tmp_path is None else str(tmp_path / "m.db")}
    base.update(kw)
    return SceneGraphConfig(**base)


def drive(memory, embed, xs, start_stamp=0, y=0.0, yaw=0.0, odom_offset=(0.0, 0.0), dt_ns=S):
    """Insert observations along x at the given true positions; odometry is shifted by odom_offset."""
    results = []
    for i, x in enumerate(xs):
        pose = [x + odom_offset[0], y + odom_offset[1], yaw]
        results.append(memory.insert_observation(start_stamp + i * dt_ns, pose, embed(x, y, yaw)))
    return results


def reopened(tmp_path, embed, xs=np.arange(0, 6.01, 0.5)):
    """A memory that mapped xs along y = 0, closed and opened again, as after a reboot (not localised)."""
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, xs)
    m.close()
    return SceneGraphMemory(cfg(tmp_path))


def db_counts(path):
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("places", "objects", "edges")}
    finally:
        conn.close()


# --- insertion --------------------------------------------------------------------------------------------


def test_places_are_created_only_when_novel_in_pose_or_appearance():
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg())
    results = drive(m, embed, np.arange(0, 10.01, 0.25))
    kinds = [r.kind for r in results]
    assert kinds[0] is InsertKind.NEW_PLACE
    n_places = m.stats().places
    assert 5 <= n_places <= 21  # about one place per new_place_distance_m (1 m) over 10 m, never per step
    # consecutive places are linked with their distance
    ids = m.place_ids()
    path = m.shortest_path(int(ids[0]), int(ids[-1]))
    assert path is not None and path.length_m == pytest.approx(m.place(int(ids[-1])).pose.x_m, abs=0.01)
    # the same spot again: updated, not duplicated
    again = m.insert_observation(100 * S, [0.0, 0.0, 0.0], embed(0.0, 0.0))
    assert again.kind is InsertKind.UPDATED_PLACE and again.node_id == results[0].node_id
    assert m.place(again.node_id).visit_count >= 2 and m.stats().places == n_places
    # same pose, different appearance (e.g. the scene changed): a new place
    other = m.insert_observation(101 * S, [0.0, 0.0, 0.0], random_unit(np.random.default_rng(5)))
    assert other.kind is InsertKind.NEW_PLACE
    # same position, turned around: a new place
    turned = m.insert_observation(102 * S, [0.0, 0.0, math.pi], embed(0.0, 0.0, math.pi))
    assert turned.kind is InsertKind.NEW_PLACE


def test_loop_closure_links_old_place_under_drift_and_corrects_odometry(tmp_path):
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    first = drive(m, embed, np.arange(0, 6.01, 0.5))
    places_before = m.stats().places
    m.close()
    # restarted 5 minutes later: odometry starts afresh, 3 m off the memory's frame, so the loaded memory is
    # not localised; its first view of a stored place is a vote, and the second place that agrees with it
    # relocalises the memory (relocalisation_confirmations 2; places lie about 1.5 m apart here)
    m = SceneGraphMemory(cfg(tmp_path))
    assert m.loop_closure_gate_m() == math.inf and not m.localised     # a reboot's odometry may be anywhere
    later = drive(m, embed, np.arange(0, 6.01, 0.5), start_stamp=300 * S, odom_offset=(3.0, 0.0))
    assert later[0].kind is InsertKind.NEW_PLACE and later[0].similarity >= m.config.loop_closure_similarity
    closure = next(i for i, r in enumerate(later) if r.kind is InsertKind.LOOP_CLOSURE)
    assert closure <= 3 and later[closure].node_id in {r.node_id for r in first[:5]} and m.localised
    # after re-anchoring, the rest of the revisit maps onto the old places: the graph does not grow much
    assert m.stats().places <= places_before + 3
    assert {r.node_id for r in later} <= {r.node_id for r in first} | set(m.place_ids().tolist())
    tx, ty, _ = m.drift_correction
    assert tx == pytest.approx(-3.0, abs=0.75) and abs(ty) < 0.5
    assert m.to_memory_frame([3.0, 0.0, 0.0]).x_m == pytest.approx(0.0, abs=0.75)


def test_relocalise_after_the_robot_was_carried_needs_agreeing_closures(tmp_path):
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path, relocalisation_confirmations=2))
    first = drive(m, embed, np.arange(0, 8.01, 0.5))
    assert m.localised and m.loop_closure_gate_m() < 10.0
    # carried (kidnapped) 30 m along odometry's x axis without odometry noticing: odometry still reads x = 8,
    # the robot stands at x = 0. Without relocalise() the drift gate refuses every revisit so far away
    m.relocalise()
    assert not m.localised and m.loop_closure_gate_m() == math.inf
    edges_before = m.stats().traversable_edges
    later = drive(m, embed, np.arange(0, 3.01, 0.5), start_stamp=300 * S, odom_offset=(8.0, 0.0))
    kinds = [r.kind for r in later]
    assert kinds[0] is InsertKind.NEW_PLACE               # one view is only a vote
    closure = kinds.index(InsertKind.LOOP_CLOSURE)
    assert closure <= 3 and m.localised   # places lie about 1.5 m apart: the second one seen confirms
    assert later[closure].node_id in {r.node_id for r in first[:5]}
    assert m.to_memory_frame([8.0 + 3.0, 0.0, 0.0]).x_m == pytest.approx(3.0, abs=0.75)
    # the place created before the closure is not linked to where the robot was before it was carried, and
    # it was moved from the stale frame (x = 8) to where it is (x = 0), in RAM and in the database
    assert not m.graph.has_edge(first[-1].node_id, later[0].node_id)
    assert m.stats().traversable_edges > edges_before
    assert m.place(later[0].node_id).pose.x_m == pytest.approx(0.0, abs=0.75)
    assert later[0].node_id in {p.node_id for p in m.places_within([0.0, 0.0, 0.0], 1.0)}
    moved, rooms = m.place(later[0].node_id).pose, m.rooms()
    m.close()
    again = SceneGraphMemory(cfg(tmp_path))
    assert again.place(later[0].node_id).pose == moved and again.rooms() == rooms
    again.close()


def test_a_reboot_relocalises_the_whole_way_whatever_the_correction_gain(tmp_path):
    """loop_closure_correction_gain below 1 bounds a localised memory's Kalman steps; the closure that
    relocalises a rebooted memory (odometry 20 m off its frame) still applies the whole offset."""
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path, loop_closure_correction_gain=0.5))
    drive(m, embed, np.arange(0, 8.01, 0.5))
    m.close()
    m = SceneGraphMemory(cfg(tmp_path, loop_closure_correction_gain=0.5))
    later = drive(m, embed, np.arange(0, 8.01, 0.5), start_stamp=300 * S, odom_offset=(20.0, 0.0))
    assert m.localised and InsertKind.LOOP_CLOSURE in [r.kind for r in later]
    assert m.to_memory_frame([20.0 + 8.0, 0.0, 0.0]).x_m == pytest.approx(8.0, abs=0.75)
    assert InsertKind.NEW_PLACE not in [r.kind for r in later[4:]]   # the places known are found again
    m.close()


def test_look_alikes_that_disagree_do_not_relocalise():
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(relocalisation_confirmations=2))
    drive(m, embed, np.arange(0, 8.01, 0.5))
    m.relocalise(within_m=50.0)
    assert m.loop_closure_gate_m() == 50.0
    # each view looks like a stored place, but they are scattered: no two imply the same robot pose
    for i, x in enumerate((0.0, 6.0, 2.0, 8.0, 4.0)):
        r = m.insert_observation((300 + i) * S, [100.0 + 0.3 * i, 0.0, 0.0], embed(x, 0.0))
        assert r.kind is InsertKind.NEW_PLACE
    assert not m.localised
    # with a single confirmation the first candidate relocalises (the behaviour before votes)
    one = SceneGraphMemory(cfg(relocalisation_confirmations=1))
    drive(one, embed, np.arange(0, 8.01, 0.5))
    one.relocalise()
    assert one.insert_observation(300 * S, [100.0, 0.0, 0.0], embed(6.0, 0.0)).kind is InsertKind.LOOP_CLOSURE
    assert one.localised and one.to_memory_frame([100.0, 0.0, 0.0]).x_m == pytest.approx(6.0, abs=0.6)


def test_a_run_that_never_relocalises_leaves_no_places_behind(tmp_path):
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, np.arange(0, 6.01, 0.5))
    before = m.stats()
    m.close()
    # the next run sees nothing it knows (another part of the building): its places would lie in a frame
    # nothing ties to the memory's, so they are forgotten when it closes unlocalised
    m = SceneGraphMemory(cfg(tmp_path))
    rng = np.random.default_rng(4)
    for i in range(6):
        r = m.insert_observation((300 + i) * S, [1.5 * i, 40.0, 0.0], random_unit(rng))
        assert r.kind is InsertKind.NEW_PLACE
    assert not m.localised and m.stats().places == before.places + 6
    m.close()
    m = SceneGraphMemory(cfg(tmp_path))
    after = m.stats()
    assert (after.places, after.rooms, after.traversable_edges) == (before.places, before.rooms,
                                                                     before.traversable_edges)
    m.close()


def test_relocalising_an_empty_memory_keeps_what_it_stores_next(tmp_path):
    """~/relocalise (or an odometry jump) before anything was stored: the next places waited for loop closures
    with places that do not exist, never localised, and were forgotten when the memory closed: a run lost."""
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    m.relocalise()
    assert m.localised
    drive(m, embed, np.arange(0, 3.01, 0.5))
    stored = m.stats().places
    assert m.localised and stored > 0
    m.close()
    m = SceneGraphMemory(cfg(tmp_path))
    assert m.stats().places == stored
    m.close()


def test_consolidating_while_unlocalised_never_merges_a_stale_frame_place_into_the_memorys_own(tmp_path):
    """A robot rebooted on its dock (odometry starting at the memory's origin) stands there, unlocalised, and
    its automatic consolidation runs: its new places lie at the coordinates of the memory's own, in a frame
    nothing ties to it yet, so none of the memory's places may be merged into them (and then forgotten with
    them when the memory closes unlocalised)."""
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, np.arange(0, 4.01, 0.5))
    before = {q: m.place(q).visit_count for q in m.place_ids().tolist()}
    m.close()
    m = SceneGraphMemory(cfg(tmp_path, consolidate_every=20))
    drive(m, embed, np.zeros(25), start_stamp=400 * S)
    assert not m.localised
    assert set(before) <= set(m.place_ids().tolist())
    m.close()
    m = SceneGraphMemory(cfg(tmp_path))
    assert {q: m.place(q).visit_count for q in m.place_ids().tolist()} == before
    m.close()


def test_a_rebooted_run_does_not_relocalise_against_its_own_places(tmp_path):
    embed = SmoothEmbedder(length_m=4.0)
    m = reopened(tmp_path, embed)
    old = set(m.place_ids().tolist())
    # after the reboot the robot first explores a part of the house the memory never saw (y = 40), then
    # drives that stretch again 1.2 m to the side, minutes later: its views look like the places it stored
    # on the way out, which lie in this run's stale frame, and agree with each other. They must not
    # relocalise the memory (into the stale frame), nor be updated as if the pose were known
    out = drive(m, embed, np.arange(0, 8.01, 0.5), start_stamp=300 * S, y=40.0)
    back = drive(m, embed, np.arange(8, -0.01, -0.5), start_stamp=600 * S, y=41.2)
    assert max(r.similarity for r in back) >= m.config.loop_closure_similarity
    assert not m.localised and InsertKind.LOOP_CLOSURE not in [r.kind for r in back]
    assert not {r.node_id for r in out + back} & old     # nor are the memory's own places updated
    # the first stretch the memory does know (y = 0) relocalises it as before
    known = drive(m, embed, np.arange(0, 4.01, 0.5), start_stamp=900 * S, odom_offset=(3.0, 0.0))
    assert InsertKind.LOOP_CLOSURE in [r.kind for r in known] and m.localised
    assert m.to_memory_frame([3.0 + 4.0, 0.0, 0.0]).x_m == pytest.approx(4.0, abs=0.75)
    m.close()


def test_objects_seen_while_unlocalised_move_with_the_relocalisation_or_are_forgotten(tmp_path):
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, np.arange(0, 4.01, 0.5))
    # a chair (instance 7) at memory (2, 1)
    m.insert_observation(10 * S, [2.0, 0.0, 0.0], embed(2.0, 0.0), objects=[ObjectDetection(3, (2.0, 1.0, 0.4), 7)])
    m.close()
    # rebooted: odometry is the memory's frame shifted by (+5, 0); before relocalising, the robot sees the chair
    # again and a lamp (no instance id) at memory (1, -1), both measured in the stale frame
    m = SceneGraphMemory(cfg(tmp_path))
    chair = m.objects(3)[0]
    lamp_det = ObjectDetection(4, (6.0, -1.0, 1.2))
    r = m.insert_observation(300 * S, [7.0, 0.0, 0.0], embed(2.0, 0.0),
                             objects=[ObjectDetection(3, (7.0, 1.0, 0.4), 7), lamp_det])
    assert not m.localised and r.object_ids[0] == chair.id
    assert m.objects(3)[0].position_m == chair.position_m     # not averaged with a stale-frame measurement
    lamp = m.objects(4)[0].id
    # the same lamp seen again still unlocalised: associated with itself in the stale frame
    m.insert_observation(301 * S, [7.0, 0.2, 0.0], embed(2.0, 0.2), objects=[lamp_det])
    assert [o.id for o in m.objects(4)] == [lamp]
    drive(m, embed, np.arange(0, 4.01, 0.5), start_stamp=400 * S, odom_offset=(5.0, 0.0))
    assert m.localised
    assert m.objects(4)[0].position_m == pytest.approx((1.0, -1.0, 1.2), abs=0.75)
    m.close()
    again = SceneGraphMemory(cfg(tmp_path))
    assert again.objects(4)[0].position_m == pytest.approx((1.0, -1.0, 1.2), abs=0.75)
    again.close()
    # a run that never relocalises forgets the objects it created, and keeps the ones it only saw again
    m = SceneGraphMemory(cfg(tmp_path))
    rng = np.random.default_rng(9)
    m.insert_observation(900 * S, [0.0, 40.0, 0.0], random_unit(rng),
                         objects=[ObjectDetection(5, (0.0, 41.0, 0.5)), ObjectDetection(3, (0.0, 41.0, 0.4), 7)])
    assert not m.localised and len(m.objects(5)) == 1
    m.close()
    again = SceneGraphMemory(cfg(tmp_path))
    assert again.objects(5) == [] and [o.id for o in again.objects(3)] == [chair.id]
    assert again.objects(3)[0].position_m == chair.position_m
    again.close()


def test_an_object_a_class_only_detector_saw_before_and_after_relocalising_is_folded_into_one(tmp_path):
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, np.arange(0, 4.01, 0.5))
    # a lamp, no instance id, at memory (1, -1), seen twice
    for t in (10, 11):
        m.insert_observation(t * S, [1.0, 0.0, 0.0], embed(1.0, 0.0), objects=[ObjectDetection(4, (1.0, -1.0, 1.2))])
    (lamp,) = m.objects(4)
    m.close()
    # rebooted, odometry = memory frame + (5, 0): seen before relocalising, the lamp becomes a second object
    m = SceneGraphMemory(cfg(tmp_path))
    m.insert_observation(300 * S, [7.0, 0.0, 0.0], embed(2.0, 0.0), objects=[ObjectDetection(4, (6.1, -1.1, 1.2))])
    assert not m.localised and len(m.objects(4)) == 2
    assert m.consolidate().merged_objects == 0           # still in a stale frame: left alone
    drive(m, embed, np.arange(0, 4.01, 0.5), start_stamp=400 * S, odom_offset=(5.0, 0.0))
    assert m.localised and len(m.objects(4)) == 2        # moved next to the original, not merged yet
    report = m.consolidate()
    assert report.merged_objects == 1
    (kept,) = m.objects(4)
    # the original survives and keeps its position (the other was measured through the relocalisation)
    assert kept.id == lamp.id and kept.position_m == lamp.position_m and kept.observation_count == 3
    # seen from where the duplicate was seen (that place itself may have been merged into the one stored there)
    assert any(m.graph.has_edge(p.node_id, lamp.id) for p in m.places_within(Pose2D(2.0, 0.0, 0.0), 0.75))
    m.close()
    again = SceneGraphMemory(cfg(tmp_path))
    (stored,) = again.objects(4)
    assert (stored.id, stored.observation_count, stored.position_m) == (lamp.id, 3, lamp.position_m)
    assert db_counts(tmp_path / "m.db")["objects"] == 1
    again.close()
    # a run that relocalises and closes without consolidating folds them at close
    m = SceneGraphMemory(cfg(tmp_path))
    m.insert_observation(900 * S, [7.0, 0.0, 0.0], embed(2.0, 0.0), objects=[ObjectDetection(4, (6.0, -0.9, 1.2))])
    drive(m, embed, np.arange(0, 4.01, 0.5), start_stamp=1000 * S, odom_offset=(5.0, 0.0))
    assert m.localised and len(m.objects(4)) == 2
    m.close()
    again = SceneGraphMemory(cfg(tmp_path))
    assert [(o.id, o.observation_count) for o in again.objects(4)] == [(lamp.id, 4)]
    again.close()


def test_consolidation_folds_objects_of_one_class_only_within_the_association_distance():
    rng = np.random.default_rng(5)
    m = SceneGraphMemory(cfg(object_association_distance_m=0.5))
    # stored apart, then (as after drift corrections) two of them 0.3 m apart: objects 1-2 fold, the rest stay
    dets = [ObjectDetection(5, (0.0, 0.0, 0.0)), ObjectDetection(5, (0.9, 0.0, 0.0)),
            ObjectDetection(6, (0.0, 0.2, 0.0)), ObjectDetection(5, (3.0, 0.0, 0.0), instance_id=9)]
    ids = [m.insert_observation(i * S, [0.0, -2.0 + i, 0.0], random_unit(rng), objects=[d]).object_ids[0]
           for i, d in enumerate(dets)]
    assert len(m.objects()) == 4
    m._objects[ids[1]].position_m = (0.3, 0.0, 0.0)
    m._objects[ids[3]].position_m = (0.1, 0.0, 0.0)      # an instance id: never folded by position
    assert m.consolidate().merged_objects == 1
    assert sorted(o.id for o in m.objects()) == sorted([ids[0], ids[2], ids[3]])
    (five,) = [o for o in m.objects(5) if o.instance_id is None]
    assert five.position_m == pytest.approx((0.15, 0.0, 0.0)) and five.observation_count == 2


def test_a_wrong_relocalisation_retracted_moves_what_was_stored_since(tmp_path):
    embed = SmoothEmbedder()
    m = reopened(tmp_path, embed)
    # rebooted with odometry = memory frame + (0, 20); a wrong estimate puts the robot 10 m off, and the robot
    # then maps a new corridor at y = 5 (odometry y = 25) with a chair in it, all stored 10 m off
    m.set_pose([0.0, 25.0, 0.0], [10.0, 5.0, 0.0])
    rng = np.random.default_rng(2)
    new = [m.insert_observation((300 + i) * S, [1.5 * i, 25.0, 0.0], random_unit(rng),
                                objects=[ObjectDetection(6, (1.5 * i, 26.0, 0.3))] if i == 2 else ()).node_id
           for i in range(4)]
    assert m.place(new[0]).pose.x_m == pytest.approx(10.0)
    # the robot's map contradicts the saved one: the relocalisation is taken back; with retract, the places
    # stored since move with the next (right) relocalisation
    m.relocalise(retract=True)
    assert not m.localised
    drive(m, embed, np.arange(0, 4.01, 0.5), start_stamp=400 * S, odom_offset=(0.0, 20.0))
    assert m.localised and m.to_memory_frame([2.0, 20.0, 0.0]).y_m == pytest.approx(0.0, abs=0.75)
    for i, node in enumerate(new):
        p = m.place(node).pose
        assert (p.x_m, p.y_m) == pytest.approx((1.5 * i, 5.0), abs=0.75)
    assert m.objects(6)[0].position_m == pytest.approx((3.0, 6.0, 0.3), abs=0.75)
    m.close()
    again = SceneGraphMemory(cfg(tmp_path))
    assert again.place(new[3]).pose.x_m == pytest.approx(4.5, abs=0.75)
    again.close()


def test_a_relocalisation_vote_can_be_confirmed_from_outside(tmp_path):
    embed = SmoothEmbedder()
    m = reopened(tmp_path, embed)
    assert m.relocalisation_votes() == []                      # nothing recognised yet
    # rebooted with odometry = memory frame + (0, 20): one recognised view is one vote, not a relocalisation
    r = m.insert_observation(300 * S, [3.0, 20.0, 0.0], embed(3.0, 0.0))
    assert r.kind is InsertKind.NEW_PLACE and not m.localised
    (vote, support), *_ = m.relocalisation_votes()
    # a vote puts the robot at the recognised place (places lie about 1.5 m apart here)
    assert support == 1 and (vote.x_m, vote.y_m, vote.yaw_rad) == pytest.approx((0.0, -20.0, 0.0), abs=1.6)
    # something that can check it (the exploring agent fits its map to the saved one) confirms it
    m.set_pose([3.0, 20.0, 0.0], vote.compose(Pose2D(3.0, 20.0, 0.0)))
    assert m.localised and m.relocalisation_votes() == []
    assert m.place(r.node_id).pose.y_m == pytest.approx(0.0, abs=1e-9)    # the place stored meanwhile moved
    m.close()


def _voting_memory_with_a_merged_voter():
    """A memory with places `kept` at (0, 0) and `dup` (same view) at (0.3, 0), unlocalised, whose first vote came
    from `dup` (odometry 50 m off the memory's frame along y); consolidation then merged `dup` into `kept`.
    Only the best retrieval hit is a loop-closure candidate, so each observation casts at most one vote."""
    rng = np.random.default_rng(11)
    m = SceneGraphMemory(cfg(relocalisation_confirmations=2, loop_closure_candidates=1))
    e_kept = random_unit(rng)
    e_dup = e_kept + 0.05 * random_unit(rng)
    kept, dup = m.add_places_bulk(np.array([0, 0]), np.array([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0]]),
                                  np.stack([e_kept, e_dup / np.linalg.norm(e_dup)])).tolist()
    m.relocalise()
    first = m.insert_observation(300 * S, [0.3, 50.0, 0.0], e_dup)
    assert first.kind is InsertKind.NEW_PLACE and [s for _, s in m.relocalisation_votes()] == [1]
    assert m.consolidate(full=True).merged_places == 1 and dup not in m.graph and kept in m.graph
    return m, kept, rng


def test_a_relocalisation_vote_from_a_place_that_took_a_freed_slot_counts():
    """Votes remember the places behind them by node id: a place stored where a voter merged away used to be
    (the same row of the memory's arrays and index) is another place, and its agreeing vote relocalises."""
    m, _, rng = _voting_memory_with_a_merged_voter()
    e_c = random_unit(rng)
    (c,) = m.add_places_bulk(np.array([300 * S]), np.array([[6.0, 0.0, 0.0]]), e_c[None]).tolist()  # a map import
    # 100 s later, 5.7 m on along odometry, the robot sees c: it puts the robot where the vote on dup did
    r = m.insert_observation(400 * S, [6.0, 50.0, 0.0], e_c)
    assert r.kind is InsertKind.LOOP_CLOSURE and r.node_id == c and m.localised
    tx, ty, _ = m.drift_correction
    assert (tx, ty) == pytest.approx((0.0, -50.0), abs=1e-6)


def test_a_place_merged_into_another_passes_its_relocalisation_vote_on():
    """The survivor of a merge stands for the same spot and view as the place merged into it: after a vote from
    the merged place, a vote from the survivor is that place voting again, not a second place agreeing."""
    m, kept, _ = _voting_memory_with_a_merged_voter()
    # 1.3 m from the first vote along odometry, the robot sees kept (which now holds dup's view too)
    r = m.insert_observation(400 * S, [-1.0, 50.0, 0.0], m.place(kept).embedding)
    assert r.kind is InsertKind.NEW_PLACE and not m.localised
    assert [s for _, s in m.relocalisation_votes()] == [1, 1]
    # a third place that agrees does relocalise (support 2 with either vote)
    rng = np.random.default_rng(12)
    e_c = random_unit(rng)
    (c,) = m.add_places_bulk(np.array([400 * S]), np.array([[6.0, 0.0, 0.0]]), e_c[None]).tolist()
    r = m.insert_observation(500 * S, [6.0, 50.0, 0.0], e_c)
    assert r.kind is InsertKind.LOOP_CLOSURE and r.node_id == c and m.localised


def test_set_pose_localises_from_an_outside_estimate():
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg())
    drive(m, embed, np.arange(0, 4.01, 0.5))
    m.relocalise()
    stale = m.insert_observation(300 * S, [10.0, 10.0, math.pi / 2], random_unit(np.random.default_rng(3)))
    assert stale.kind is InsertKind.NEW_PLACE and m.place(stale.node_id).pose.x_m == pytest.approx(10.0)
    # an operator says: odometry pose (10, 10, 90 deg) is memory pose (2, 0, 0), within 0.3 m / 10 deg
    m.set_pose([10.0, 10.0, math.pi / 2], Pose2D(2.0, 0.0, 0.0), position_std_m=0.3, yaw_std_deg=10.0)
    moved = m.place(stale.node_id).pose                         # the place stored meanwhile moves with it
    assert (moved.x_m, moved.y_m, moved.yaw_rad) == pytest.approx((2.0, 0.0, 0.0), abs=1e-9)
    assert m.localised and m.loop_closure_gate_m() == pytest.approx(3 * math.hypot(0.3, 0.5))
    mapped = m.to_memory_frame([10.0, 11.0, math.pi / 2])      # 1 m ahead in odometry
    assert (mapped.x_m, mapped.y_m, mapped.yaw_rad) == pytest.approx((3.0, 0.0, 0.0), abs=1e-9)
    # bad input names the field and changes nothing
    before = m.drift_correction
    for kwargs, field in (({"position_std_m": 0.0}, "position_std_m"), ({"yaw_std_deg": float("nan")}, "yaw_std_deg")):
        with pytest.raises(InvalidInputError, match=field):
            m.set_pose([0.0, 0.0, 0.0], [1.0, 1.0, 0.0], **kwargs)
    with pytest.raises(InvalidInputError, match="memory_pose"):
        m.set_pose([0.0, 0.0, 0.0], [float("inf"), 0.0, 0.0])
    with pytest.raises(InvalidInputError, match="within_m"):
        m.relocalise(within_m=-1.0)
    assert m.drift_correction == before and m.localised
    with pytest.raises(ValueError, match="relocalisation_confirmations"):
        SceneGraphConfig(relocalisation_confirmations=0)


def test_loop_closures_are_gated_by_how_far_odometry_can_have_drifted():
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg())
    gate0 = m.loop_closure_gate_m()
    assert gate0 == pytest.approx(3 * 0.5)          # a new memory is localised: place spread only
    drive(m, embed, np.arange(0, 6.01, 0.5))
    assert m.loop_closure_gate_m() > gate0          # 6 m of travel: the gate widens
    # exact odometry, 5 minutes later at x = 5: the view of x = 0 (a look-alike 5 m away) is no revisit
    look_alike = m.insert_observation(300 * S, [5.0, 3.0, 0.0], embed(0.0, 0.0))
    assert look_alike.kind is InsertKind.NEW_PLACE and m.drift_correction == (0.0, 0.0, 0.0)
    # a revisit 0.4 m from where odometry says: closed, and only part of the residual is corrected
    back = m.insert_observation(301 * S, [0.4, 0.0, 0.0], embed(0.0, 0.0))
    assert back.kind in (InsertKind.LOOP_CLOSURE, InsertKind.UPDATED_PLACE)
    if back.kind is InsertKind.LOOP_CLOSURE:
        assert -0.4 < m.drift_correction[0] < 0.0
    # the same memory restarted by a robot localised in a fixed frame keeps gating
    fixed = SceneGraphConfig(embedding_dim=DIM, consolidate_every=0, start_localised=True)
    assert SceneGraphMemory(fixed).loop_closure_gate_m() == pytest.approx(1.5)


def test_verifier_can_reject_loop_closures_and_sees_the_candidate():
    embed = SmoothEmbedder()
    seen = []

    def reject(candidate):
        seen.append(candidate)
        return False

    m = SceneGraphMemory(cfg(), loop_closure_verifier=reject)
    first = drive(m, embed, [0.0])
    result = m.insert_observation(300 * S, [1.2, 0.0, 0.0], embed(0.0, 0.0))
    assert result.kind is InsertKind.NEW_PLACE
    assert seen and seen[0].node_id == first[0].node_id and seen[0].place_pose == Pose2D(0.0, 0.0, 0.0)
    assert seen[0].odometry_pose == Pose2D(1.2, 0.0, 0.0) and seen[0].similarity > 0.85
    # a per-call verifier overrides the constructor's
    accepted = m.insert_observation(301 * S, [1.2, 0.0, 0.0], embed(0.0, 0.0), verifier=lambda c: True)
    assert accepted.kind in (InsertKind.LOOP_CLOSURE, InsertKind.UPDATED_PLACE)


def test_recent_places_are_not_loop_closure_candidates():
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(loop_closure_min_age_s=30.0))
    drive(m, embed, [0.0])
    # 10 s later, 3 m away in odometry, same view: too recent to be a revisit
    result = m.insert_observation(10 * S, [3.0, 0.0, 0.0], embed(0.0, 0.0))
    assert result.kind is InsertKind.NEW_PLACE


def test_repeated_patrol_with_drift_stays_bounded():
    embed = SmoothEmbedder(seed=3)
    m = SceneGraphMemory(cfg(consolidate_every=50))
    # a 4 m x 4 m square loop at 0.25 m per step
    side = np.arange(0, 4, 0.25)
    loop = ([(x, 0.0, 0.0) for x in side] + [(4.0, y, math.pi / 2) for y in side]
            + [(4.0 - x, 4.0, math.pi) for x in side] + [(0.0, 4.0 - y, -math.pi / 2) for y in side])
    stamp, drift = 0, np.zeros(2)
    counts = []
    for _ in range(6):
        for x, y, yaw in loop:
            drift += (0.01, 0.004)   # odometry drifts ~0.6 m per loop
            m.insert_observation(stamp, [x + drift[0], y + drift[1], yaw], embed(x, y, yaw))
            stamp += S // 2
        counts.append(m.stats().places)
    # closures correct only part of each residual (the drift gate's Kalman gain), so the second loop adds a
    # few places where the correction lags the systematic drift; after that the graph stops growing
    assert counts[-1] <= 1.5 * counts[0]
    assert max(counts[2:]) <= counts[1] + 1


def test_retrieve_returns_best_matches_first():
    rng = np.random.default_rng(0)
    m = SceneGraphMemory(cfg())
    embs = [random_unit(rng) for _ in range(20)]
    ids = [m.insert_observation(i * S, [5.0 * i, 0.0, 0.0], e).node_id for i, e in enumerate(embs)]
    hits = m.retrieve(embs[7] + 0.05 * random_unit(rng), k=5)
    assert hits[0].node_id == ids[7] and hits[0].pose.x_m == 35.0
    assert len(hits) == 5 and all(a.similarity >= b.similarity for a, b in itertools.pairwise(hits))
    assert len(m.retrieve(embs[0], k=100)) == 20
    with pytest.raises(InvalidInputError, match="k"):
        m.retrieve(embs[0], k=0)


def test_retrieve_ranks_equal_similarities_by_node_id_alike_live_and_reopened(tmp_path):
    """Places with the same embedding rank the lower node id first, also when the top k cuts through them, in
    a memory whose rows were reshuffled by a merge and a reused slot as in the same memory reopened."""
    rng = np.random.default_rng(6)
    m = SceneGraphMemory(cfg(tmp_path))
    e, v = random_unit(rng), random_unit(rng)
    near = e + 0.05 * random_unit(rng)       # same spot, same view: merged with e's place
    poses = np.array([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [10.0, 0.0, 0.0], [15.0, 0.0, 0.0], [20.0, 0.0, 0.0],
                      [30.0, 0.0, 0.0]])
    ids = m.add_places_bulk(np.arange(6), poses, np.stack([e, near, v, random_unit(rng), random_unit(rng), v]))
    assert m.consolidate(full=True).merged_places == 1          # ids[1] merged away: its slot is free again
    (late,) = m.add_places_bulk(np.array([6]), np.array([[40.0, 0.0, 0.0]]), v[None])   # ... and reused here
    same_view = [int(ids[2]), int(ids[5]), int(late)]
    live = {k: [(h.node_id, h.similarity) for h in m.retrieve(v, k)] for k in (1, 2, 3, 6)}
    assert [i for i, _ in live[3]] == same_view and [i for i, _ in live[1]] == same_view[:1]
    assert len({s for _, s in live[3]}) == 1
    m.close()
    with SceneGraphMemory.open(tmp_path / "m.db", cfg()) as again:
        assert {k: [(h.node_id, h.similarity) for h in again.retrieve(v, k)] for k in live} == live


def basis(i, dim=DIM):
    """A unit vector along axis i: every similarity to it is exact, so equal ones tie exactly."""
    v = np.zeros(dim)
    v[i] = 1.0
    return v


def test_an_observation_between_equally_similar_places_updates_the_lowest_node_id_alike_reopened(tmp_path):
    """Two nearby places with the same view: the observation updates the lower node id, in the memory that
    moved one of them (set_pose re-files it last in its spatial-grid cell) as in a copy of it reopened."""
    m = SceneGraphMemory(cfg(tmp_path))
    m.insert_observation(0, [50.0, 50.0, 0.0], basis(3))
    m.relocalise()
    moved = m.insert_observation(1 * S, [0.0, 0.0, 0.0], basis(0)).node_id     # stored in the stale frame
    (bulk,) = m.add_places_bulk(np.array([2 * S]), np.array([[5.2, 5.0, 0.0]]), basis(0)[None])
    m.set_pose([0.0, 0.0, 0.0], [5.0, 5.0, 0.0])      # `moved` goes to (5, 5), beside `bulk`
    m.set_pose([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert moved < bulk
    backup_store(tmp_path / "m.db", tmp_path / "copy.db")
    observation = (3 * S, [5.1, 5.0, 0.0], basis(0))
    live = m.insert_observation(*observation)
    with SceneGraphMemory.open(tmp_path / "copy.db", cfg(start_localised=True)) as again:
        copy = again.insert_observation(*observation)
    assert (live.kind, live.node_id) == (copy.kind, copy.node_id) == (InsertKind.UPDATED_PLACE, moved)
    assert live.similarity == copy.similarity == 1.0
    m.close()


def test_consolidation_merges_with_the_lowest_node_id_among_equally_similar_places(tmp_path):
    """A place with two equally similar neighbours merges with the lower node id, although the other one comes
    first in the spatial grid (a cell to the west); once merged, the third no longer is similar enough."""
    m = SceneGraphMemory(cfg(tmp_path, merge_similarity=0.55))
    east, west = 0.6 * basis(0) + 0.8 * basis(1), 0.6 * basis(0) + 0.8 * basis(2)
    ids = m.add_places_bulk(np.arange(3), np.array([[0.0, 0.5, 0.0], [0.6, 0.3, 0.0], [-0.6, 0.3, 0.0]]),
                            np.stack([basis(0), east, west]))
    assert m.consolidate(full=True).merged_places == 1
    assert m.place_ids().tolist() == [ids[0], ids[2]] and m.place(int(ids[0])).visit_count == 2


def test_consolidation_merges_alike_in_a_memory_and_in_the_same_memory_reopened(tmp_path):
    """Places are consolidated in node id order: a place that took a freed slot (listed first by slot) does not
    pick its partner before the older places do, and the memory consolidates as the same memory reopened
    (slots there in id order): ids[3] takes the late place, which is even more similar to ids[4]."""
    m = SceneGraphMemory(cfg(tmp_path))
    east, west = 0.95 * basis(0) + math.sqrt(1 - 0.95 ** 2) * basis(1), 0.98 * basis(0) + 0.2 * basis(2)
    ids = m.add_places_bulk(np.arange(5), np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [20.0, 0.0, 0.0],
                                                    [0.6, 0.3, 0.0], [-0.6, 0.3, 0.0]]),
                            np.stack([basis(3), basis(3), basis(2), east, west]))
    assert m.consolidate(full=True).merged_places == 1          # ids[1] merged away: its slot is free again
    (reused,) = m.add_places_bulk(np.array([6]), np.array([[0.0, 0.5, 0.0]]), basis(0)[None])
    backup_store(tmp_path / "m.db", tmp_path / "copy.db")
    with SceneGraphMemory.open(tmp_path / "copy.db", cfg()) as again:
        copy = (again.consolidate(full=True).merged_places,
                [(p, again.place(p).visit_count) for p in again.place_ids().tolist()])
    live = (m.consolidate(full=True).merged_places, [(p, m.place(p).visit_count) for p in m.place_ids().tolist()])
    assert live == copy == (1, [(ids[0], 2), (ids[2], 1), (ids[3], 2), (ids[4], 1)])
    assert reused not in m.place_ids().tolist()
    m.close()


def test_equidistant_places_come_by_node_id_alike_live_and_reopened(tmp_path):
    m = SceneGraphMemory(cfg(tmp_path))
    ids = m.add_places_bulk(np.arange(3), np.array([[50.0, 0.0, 0.0], [50.1, 0.0, 0.0], [1.0, 0.0, 0.0]]),
                            np.stack([basis(0), basis(0), basis(1)]))
    assert m.consolidate(full=True).merged_places == 1          # frees a slot below ids[2]'s ...
    (west,) = m.add_places_bulk(np.array([3]), np.array([[-1.0, 0.0, 0.0]]), basis(2)[None])   # ... taken here
    m.close()
    with SceneGraphMemory.open(tmp_path / "m.db", cfg()) as again:
        for mem in (m, again):
            assert mem.nearest_place([0.0, 0.0, 0.0]) == (ids[2], 1.0)
            assert [p.node_id for p in mem.places_within([0.0, 0.0, 0.0], 1.5)] == [ids[2], west]


def _ivf_memory(tmp_path, rng, **kw):
    """A memory past index_exact_max_size (IVF, 2 of its lists scanned), built in batches so that it trained
    more than once, and reshuffled by merges that free slots reused by later places."""
    m = SceneGraphMemory(cfg(tmp_path, index_exact_max_size=100, index_nprobe=2, merge_similarity=0.999,
                             start_localised=True, **kw))
    for i in range(20):
        embs = rng.standard_normal((50, DIM))
        poses = np.column_stack([rng.uniform(0, 40, (50, 2)), np.zeros(50)])
        if i % 4 == 3:
            embs[1::2], poses[1::2] = embs[::2], poses[::2] + [0.1, 0.0, 0.0]
        m.add_places_bulk(np.arange(50 * i, 50 * i + 50), poses, embs)
        if i % 4 == 3:
            assert m.consolidate(full=True).merged_places == 25
    return m


def _answers(memory, queries, k=5):
    return [[(h.node_id, h.similarity) for h in memory.retrieve(q, k)] for q in queries]


def _outcome(result):
    return result.kind, result.node_id, result.similarity


def test_an_ivf_memory_reopened_searches_the_same_lists(tmp_path):
    """The IVF training is stored with the memory: reopened, it answers every approximate query as the memory
    that wrote it (not a retrained index), and both go on alike through the same later changes, retraining
    at the same size to the same lists."""
    rng = np.random.default_rng(3)
    m = _ivf_memory(tmp_path, rng)
    queries = rng.standard_normal((100, DIM))
    stats = m.stats()
    assert stats.index_mode is IndexMode.IVF and stats.places == 875
    live = _answers(m, queries)
    backup_store(tmp_path / "m.db", tmp_path / "copy.db")
    m.close()
    again = SceneGraphMemory.open(tmp_path / "m.db", m.config)
    copy = SceneGraphMemory.open(tmp_path / "copy.db", m.config)
    m = SceneGraphMemory.open(tmp_path / "m.db", m.config)   # reopened twice: nothing retrained in between
    assert again.stats().index_lists == m.stats().index_lists == stats.index_lists
    assert _answers(again, queries) == _answers(m, queries) == live
    more = [(np.arange(1000 + 100 * i, 1100 + 100 * i), rng.uniform(0, 40, (100, 3)), rng.standard_normal((100, DIM)))
            for i in range(30)]
    for mem in (again, copy):
        for batch in more:
            mem.add_places_bulk(*batch)
        assert mem.stats().places == 3875
    assert copy.stats().index_lists == again.stats().index_lists != stats.index_lists   # retrained at 3501
    assert _answers(copy, queries) == _answers(again, queries)
    observations = [((4000 + i) * S, rng.uniform(0, 40, 3), rng.standard_normal(DIM)) for i in range(50)]
    assert ([_outcome(again.insert_observation(*o)) for o in observations]
            == [_outcome(copy.insert_observation(*o)) for o in observations])
    for mem in (m, again, copy):
        mem.close()
    with SceneGraphMemory.open(tmp_path / "m.db", m.config) as third:
        assert _answers(third, queries) == _answers(copy, queries)


def test_a_version_1_memory_is_migrated_losing_nothing_and_then_keeps_its_lists(tmp_path):
    """A file written before the index training was stored (schema version 1): read-only it is read as it is;
    opened by a memory it gains the (empty) table in one transaction, every row kept; the memory trains its
    index once and stores it with its next change, so that from then on a reopened memory searches alike."""
    rng = np.random.default_rng(4)
    m = _ivf_memory(tmp_path, rng)
    tagged = m.insert_observation(10_000 * S, [1.0, 2.0, 0.0], random_unit(rng),
                                  thumbnail=np.zeros((4, 4, 3), np.uint8),
                                  objects=[ObjectDetection(2, (1.0, 2.0, 0.5), label="cup")])
    assert tagged.kind is InsertKind.NEW_PLACE
    m.close()
    path = tmp_path / "m.db"
    run_sql(path, "DROP TABLE index_training")
    run_sql(path, "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    run_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    before = file_sha256(path)
    old = read_snapshot(path)
    assert old.schema_version == 1 and old.graph.index_training is None and file_sha256(path) == before
    queries = rng.standard_normal((50, DIM))
    with SceneGraphMemory.open(path, m.config) as first:
        assert first.stats().schema_version == SCHEMA_VERSION
        trained = _answers(first, queries)
        added = first.insert_observation(10_001 * S, [30.0, 30.0, 0.0], random_unit(rng))   # stores the training
        assert added.kind is InsertKind.NEW_PLACE
    new = read_snapshot(path)
    assert new.schema_version == SCHEMA_VERSION and new.graph.index_training is not None
    for name in ("place_ids", "place_poses", "place_first_seen_ns", "place_visits", "place_rooms",
                 "place_embeddings"):
        np.testing.assert_array_equal(getattr(new.graph, name)[:-1], getattr(old.graph, name))
    assert new.graph.objects == old.graph.objects and set(old.graph.edges) <= set(new.graph.edges)
    assert list(read_thumbnails(path, [tagged.node_id])) == [tagged.node_id]
    with SceneGraphMemory.open(path, m.config) as second:
        assert _answers(second, queries) == trained


def test_a_damaged_index_training_is_refused_naming_the_file_and_left_untouched(tmp_path):
    rng = np.random.default_rng(5)
    _ivf_memory(tmp_path, rng).close()
    path = tmp_path / "m.db"
    for damage, message in ((b"\x00" * 7, "index_training row is malformed"),
                            (np.full(3 * DIM, np.nan, "<f4").tobytes(), "contain NaN or inf")):
        run_sql(path, "UPDATE index_training SET centroids = ?", (damage,))
        run_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")
        before = file_sha256(path)
        with pytest.raises(CorruptStoreError, match=message) as info:
            SceneGraphMemory.open(path, cfg(index_exact_max_size=100))
        assert str(path) in str(info.value) and file_sha256(path) == before


def test_a_stored_index_training_follows_the_index_settings(tmp_path):
    """Reopened with a larger index_exact_max_size the memory searches exactly, as that setting says, and
    stores that; forgetting it below half of index_exact_max_size drops the stored training."""
    rng = np.random.default_rng(6)
    m = _ivf_memory(tmp_path, rng)
    config = m.config
    m.close()
    with SceneGraphMemory.open(tmp_path / "m.db", replace(config, index_exact_max_size=1000)) as exact:
        assert exact.stats().index_mode is IndexMode.EXACT
        exact.insert_observation(10_000 * S, [1.0, 2.0, 0.0], random_unit(rng))
    assert read_snapshot(tmp_path / "m.db").graph.index_training is None
    with SceneGraphMemory.open(tmp_path / "m.db", config) as ivf:     # trains again, and stores it
        assert ivf.stats().index_mode is IndexMode.IVF
        ivf.insert_observation(10_001 * S, [1.0, 2.0, 0.0], random_unit(rng))
    assert read_snapshot(tmp_path / "m.db").graph.index_training is not None
    with SceneGraphMemory.open(tmp_path / "m.db", replace(config, max_places=40)) as small:
        small.insert_observation(10_003 * S, [5.0, 2.0, 0.0], random_unit(rng))    # forgets down to ~40
        assert small.stats().index_mode is IndexMode.EXACT
    assert read_snapshot(tmp_path / "m.db").graph.index_training is None


def test_shortest_path_uses_traversability_only():
    rng = np.random.default_rng(1)
    m = SceneGraphMemory(cfg())
    a = m.insert_observation(0, [0.0, 0.0, 0.0], random_unit(rng)).node_id
    b = m.insert_observation(S, [1.5, 0.0, 0.0], random_unit(rng)).node_id
    c = m.insert_observation(2 * S, [3.0, 0.0, 0.0], random_unit(rng)).node_id
    far = m.insert_observation(3 * S, [50.0, 0.0, 0.0], random_unit(rng)).node_id  # a jump: not linked
    path = m.shortest_path(a, c)
    assert path.node_ids == (a, b, c) and path.length_m == pytest.approx(3.0)
    # all places share a room, but containment edges are not paths
    assert m.shortest_path(a, far) is None
    with pytest.raises(InvalidInputError, match="goal_id"):
        m.shortest_path(a, 12345)
    assert m.nearest_place([2.8, 0.4, 1.0]) == (c, pytest.approx(0.4472, abs=1e-3))
    assert m.nearest_place([60.0, 0.0, 0.0])[0] == far
    assert SceneGraphMemory(cfg()).nearest_place([0.0, 0.0, 0.0]) is None
    with pytest.raises(InvalidInputError, match="pose"):
        m.nearest_place([float("nan"), 0.0, 0.0])
    near = m.places_within([2.0, 0.0, 0.0], 1.1)        # b (0.5 m) then c (1.0 m); a (2 m) is outside
    assert [p.node_id for p in near] == [b, c] and near[0].embedding.shape == (m.config.embedding_dim,)
    assert m.places_within([20.0, 0.0, 0.0], 5.0) == []
    with pytest.raises(InvalidInputError, match="radius_m"):
        m.places_within([0.0, 0.0, 0.0], float("nan"))


def test_objects_are_associated_by_instance_or_class_and_distance():
    rng = np.random.default_rng(2)
    m = SceneGraphMemory(cfg())
    chair = ObjectDetection(class_id=3, position_m=(1.0, 1.0, 0.4), instance_id=42, label="chair")
    r1 = m.insert_observation(0, [0.0, 0.0, 0.0], random_unit(rng), objects=[chair])
    r2 = m.insert_observation(S, [4.0, 0.0, 0.0], random_unit(rng),
                              objects=[ObjectDetection(3, (1.2, 1.0, 0.4), instance_id=42)])
    assert r1.object_ids == r2.object_ids
    (obj,) = m.objects()
    assert obj.observation_count == 2 and obj.position_m[0] == pytest.approx(1.1) and obj.label == "chair"
    assert m.graph.nodes[obj.id]["layer"] is Layer.OBJECT
    for place in (r1.node_id, r2.node_id):
        assert m.graph.edges[place, obj.id]["kind"] is EdgeKind.OBSERVED_FROM
    # detector without ids: same class nearby joins, other class or far away does not
    d1 = m.insert_observation(2 * S, [8.0, 0.0, 0.0], random_unit(rng), objects=[ObjectDetection(5, (8.0, 1.0, 0.0))])
    d2 = m.insert_observation(3 * S, [12.0, 0.0, 0.0], random_unit(rng),
                              objects=[ObjectDetection(5, (8.2, 1.1, 0.0)), ObjectDetection(6, (8.0, 1.0, 0.0)),
                                       ObjectDetection(5, (20.0, 1.0, 0.0))])
    assert d2.object_ids[0] == d1.object_ids[0]
    assert len(set(d2.object_ids)) == 3 and len(m.objects(class_id=5)) == 2


def test_rooms_group_places_by_connectivity():
    embed = SmoothEmbedder(seed=4)
    m = SceneGraphMemory(cfg(room_resolution=1.0))
    # two 4 x 3 grids of places joined by a single corridor edge
    stamp = 0
    for x0 in (0.0, 20.0):
        for y in (0.0, 1.5, 3.0):
            for x in np.arange(x0, x0 + 6.0, 1.5):
                m.insert_observation(stamp, [x, y, 0.0], embed(x, y))
                stamp += S
    for x in np.arange(6.0, 20.0, 1.5):
        m.insert_observation(stamp, [x, 3.0, 0.0], embed(x, 3.0))
        stamp += S
    n_rooms = m.segment_rooms()
    rooms = m.rooms()
    assert n_rooms >= 2 and len(rooms) == n_rooms
    assert sorted(p for members in rooms.values() for p in members) == m.place_ids().tolist()
    left = m.place(int(m.place_ids()[0])).room_id
    right = m.place(int(m.retrieve(embed(21.5, 1.5))[0].node_id)).room_id
    assert left != right
    for pid in m.place_ids().tolist():
        room = m.place(pid).room_id
        assert m.graph.edges[pid, room]["kind"] is EdgeKind.PLACE_IN_ROOM
    adjacent = [e for e in m.graph.edges(data=True) if e[2]["kind"] is EdgeKind.ROOM_ADJACENT]
    assert adjacent and all(m.graph.nodes[n]["layer"] is Layer.ROOM for a, b, _ in adjacent for n in (a, b))


# --- consolidation and forgetting ---------------------------------------------------------------------------


def test_consolidation_merges_redundant_places_and_rewires_edges(tmp_path):
    rng = np.random.default_rng(3)
    m = SceneGraphMemory(cfg(tmp_path))
    e = random_unit(rng)
    near = e + 0.05 * random_unit(rng)
    # the bulk path has no novelty test: two places at the same spot with the same view, linked in a chain
    ids = m.add_places_bulk(np.array([0, 1, 2]), np.array([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [1.2, 0.0, 0.0]]),
                            np.stack([e, near, random_unit(rng)]))
    assert m.stats().places == 3
    report = m.consolidate(full=True)
    assert report.merged_places == 1 and m.stats().places == 2
    survivor = next(i for i in ids[:2].tolist() if i in m.graph)
    assert m.place(survivor).visit_count == 2
    assert m.shortest_path(survivor, int(ids[2])) is not None
    m.close()
    assert db_counts(tmp_path / "m.db")["places"] == 2
    with SceneGraphMemory.open(tmp_path / "m.db", cfg()) as again:
        assert again.place(survivor).visit_count == 2 and again.stats().places == 2


def test_capacity_forgets_least_valuable_places_and_keeps_paths():
    rng = np.random.default_rng(4)
    m = SceneGraphMemory(cfg(max_places=30, forget_batch_fraction=0.1))
    embs = [random_unit(rng) for _ in range(40)]
    stamp = 0
    # the first five places of a corridor are visited again and again: valuable
    for _ in range(5):
        for i in range(5):
            m.insert_observation(stamp, [1.5 * i, 0.0, 0.0], embs[i])
            stamp += S
    ids = [m.retrieve(embs[i], 1)[0].node_id for i in range(5)]
    assert all(m.place(i).visit_count == 5 for i in ids)
    forgotten = 0
    for i in range(5, 40):   # then the corridor goes on, once
        result = m.insert_observation(stamp, [1.5 * i, 0.0, 0.0], embs[i])
        forgotten += result.forgotten_places
        stamp += S
        assert m.stats().places <= 30
    assert forgotten > 0 and m.stats().places == 40 - forgotten
    survivors = set(m.place_ids().tolist())
    assert set(ids) <= survivors            # frequently visited places survive
    assert result.node_id in survivors      # the place the robot is at is never forgotten
    path = m.shortest_path(ids[0], result.node_id)   # bypass edges keep the corridor connected
    assert path is not None and path.length_m == pytest.approx(1.5 * 39, abs=1e-6)
    assert len(path.node_ids) < 40


@pytest.mark.parametrize("max_places, fraction", [(1, 0.01), (3, 0.7)])
def test_a_small_capacity_never_forgets_the_place_the_robot_is_at(max_places, fraction):
    """max_places * (1 - forget_batch_fraction) under 1: one place stays, the current one, and every insert
    returns a place that exists."""
    rng = np.random.default_rng(4)
    m = SceneGraphMemory(cfg(max_places=max_places, forget_batch_fraction=fraction))
    for i in range(6):
        result = m.insert_observation(i * S, [1.5 * i, 0.0, 0.0], random_unit(rng))
        assert result.node_id in set(m.place_ids().tolist())
        assert 1 <= m.stats().places <= max_places


def test_place_values_prefer_recent_frequent_distinct():
    rng = np.random.default_rng(5)
    m = SceneGraphMemory(cfg(forget_half_life_s=100.0))
    a = m.insert_observation(0, [0.0, 0.0, 0.0], random_unit(rng)).node_id
    b = m.insert_observation(S, [10.0, 0.0, 0.0], random_unit(rng)).node_id
    c = m.insert_observation(1000 * S, [20.0, 0.0, 0.0], random_unit(rng)).node_id
    ids, values = m.place_values(1000 * S)
    v = dict(zip(ids.tolist(), values.tolist()))
    assert v[c] > v[b] > v[a]


# --- persistence ---------------------------------------------------------------------------------------------


def test_memory_survives_restart(tmp_path):
    embed = SmoothEmbedder()
    thumb = np.random.default_rng(0).integers(0, 256, (64, 48, 3), dtype=np.uint8)
    m = SceneGraphMemory(cfg(tmp_path))
    results = drive(m, embed, np.arange(0, 5.01, 0.5))
    tagged = m.insert_observation(20 * S, [10.0, 0.0, 0.0], embed(10.0, 0.0), thumbnail=thumb,
                                  objects=[ObjectDetection(7, (10.0, 1.0, 0.3), instance_id=9, label="plant")])
    m.segment_rooms()
    before = {pid: m.place(pid) for pid in m.place_ids().tolist()}
    edges_before = {(min(a, b), max(a, b), d["kind"]) for a, b, d in m.graph.edges(data=True)}
    stats_before = m.stats()
    nodes_before = set(m.graph.nodes)
    m.close()

    m2 = SceneGraphMemory.open(tmp_path / "m.db", cfg())
    assert m2.stats().places == stats_before.places and m2.stats().objects == 1
    for pid, info in before.items():
        got = m2.place(pid)
        assert got.pose == info.pose and got.visit_count == info.visit_count and got.room_id == info.room_id
        assert (got.first_seen_ns, got.last_seen_ns) == (info.first_seen_ns, info.last_seen_ns)
        np.testing.assert_allclose(got.embedding, info.embedding, atol=1e-6)
    assert {(min(a, b), max(a, b), d["kind"]) for a, b, d in m2.graph.edges(data=True)} == edges_before
    small = m2.thumbnail(tagged.node_id)
    assert small.shape == (32, 24, 3) and small.dtype == np.uint8
    np.testing.assert_array_equal(small, thumb[1::2, 1::2][:32, :24])  # nearest-neighbour 2x downscale
    assert m2.thumbnail(results[0].node_id) is None
    assert m2.objects()[0].label == "plant"
    # ids are never reused, and time keeps going forwards within a session (across sessions: see below)
    new = m2.insert_observation(30 * S, [40.0, 0.0, 0.0], embed(40.0, 0.0))
    assert new.node_id > max(nodes_before)
    with pytest.raises(InvalidInputError, match="goes backwards"):
        m2.insert_observation(29 * S, [40.0, 0.0, 0.0], embed(40.0, 0.0))
    m2.close()


# --- sessions: a clock that restarts ---------------------------------------------------------------------


def stored_stamps(path):
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT id, last_seen_ns FROM places").fetchall())
    finally:
        conn.close()


def test_a_session_whose_clock_restarted_is_accepted_and_stored_after_the_last_one(tmp_path):
    """A persistent memory refused every stamp older than its last stored one, across restarts too: with a clock
    that restarts at 0 (a simulator restarted, a bag replayed, ROS sim time), a reopened memory refused everything.
    Now the first stamp of a session starts it after the stored ones; within the session an older stamp is still
    refused; what the memory reports is in the session's clock, and the file's timeline only goes forwards."""
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    first = drive(m, embed, np.arange(0, 3.01, 0.5), start_stamp=100 * S)     # stamps 100 .. 106 s
    old_id = first[0].node_id
    old_last = m.place(old_id).last_seen_ns
    assert m.stamp_offset_ns == 0 and m.close() == (0, 0)
    m = SceneGraphMemory(cfg(tmp_path))
    assert m.stats().last_stamp_ns == 106 * S and m.stamp_offset_ns == 0        # nothing decided yet
    r = m.insert_observation(2 * S, [0.0, 30.0, 0.0], random_unit(np.random.default_rng(1)))
    offset = m.stamp_offset_ns
    assert offset == 106 * S + 1 - 2 * S                                         # just after the stored ones
    assert m.place(r.node_id).first_seen_ns == 2 * S and m.stats().last_stamp_ns == 2 * S
    # an old place's age in the session's clock is its age on the stored timeline (no time between sessions)
    assert 2 * S - m.place(old_id).last_seen_ns == 106 * S + 1 - old_last
    assert stored_stamps(tmp_path / "m.db")[r.node_id] == 106 * S + 1
    with pytest.raises(InvalidInputError, match=f"goes backwards: {S} < last accepted {2 * S}"):
        m.insert_observation(S, [0.0, 30.0, 0.0], random_unit(np.random.default_rng(2)))
    m.insert_observation(3 * S, [2.0, 30.0, 0.0], random_unit(np.random.default_rng(3)))
    m.set_pose([0.0, 0.0, 0.0], [0.0, 30.0, 0.0])      # localised: the places of this session are kept
    ids, values = m.place_values(3 * S)
    assert len(ids) == m.stats().places and np.all(values > 0)
    m.close()
    # a third session, its clock at 0 again: after the second session's stamps
    m = SceneGraphMemory(cfg(tmp_path))
    assert m.stats().last_stamp_ns == 106 * S + 1 + S
    r3 = m.insert_observation(0, [5.0, 30.0, 0.0], random_unit(np.random.default_rng(4)))
    assert m.stamp_offset_ns == 106 * S + 2 + S and m.place(r3.node_id).last_seen_ns == 0
    m.set_pose([0.0, 0.0, 0.0], [0.0, 30.0, 0.0])
    m.close()
    stamps = stored_stamps(tmp_path / "m.db")
    assert stamps[r3.node_id] == max(stamps.values()) and stamps[r3.node_id] > stamps[r.node_id] > old_last
    # a session whose clock is ahead (a wall clock) stores its stamps as given
    m = SceneGraphMemory(cfg(tmp_path))
    late = m.insert_observation(10_000 * S, [9.0, 30.0, 0.0], random_unit(np.random.default_rng(5)))
    assert m.stamp_offset_ns == 0 and m.place(late.node_id).last_seen_ns == 10_000 * S
    m.close()


def test_a_restarted_clock_still_relocalises_against_the_places_seen_just_before(tmp_path):
    """A session whose clock restarts starts just after the stored stamps, so the places of the session before
    are "seconds" old on the stored timeline: they must still be loop-closure candidates (they are not part of
    this session's traverse), or a rebooted robot could not relocalise for loop_closure_min_age_s."""
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    first = drive(m, embed, np.arange(0, 6.01, 0.5))
    m.close()
    m = SceneGraphMemory(cfg(tmp_path))
    later = drive(m, embed, np.arange(0, 6.01, 0.5), start_stamp=0, odom_offset=(3.0, 0.0))
    assert m.stamp_offset_ns > 0
    closure = next(i for i, r in enumerate(later) if r.kind is InsertKind.LOOP_CLOSURE)
    assert closure <= 3 and later[closure].node_id in {r.node_id for r in first[:5]} and m.localised
    assert m.to_memory_frame([3.0, 0.0, 0.0]).x_m == pytest.approx(0.0, abs=0.75)
    m.close()
    # within one session the places just seen are still no revisit (loop_closure_min_age_s)
    fresh = SceneGraphMemory(cfg())
    drive(fresh, embed, [0.0])
    assert fresh.insert_observation(10 * S, [3.0, 0.0, 0.0], embed(0.0, 0.0)).kind is InsertKind.NEW_PLACE


def test_a_restart_with_a_wall_clock_keeps_the_age_rule_between_sessions(tmp_path):
    """A wall clock: the new session's stamps are later than the stored ones (offset 0), so they tell the real time
    since the places of the session before were seen. Within loop_closure_min_age_s those are the current traverse,
    as within one session (a lifelong evaluation's visits follow each other so, and its figures stay as measured);
    older, they relocalise the reopened memory at once."""
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, np.arange(0, 6.01, 0.5))                  # 0 .. 12 s
    m.close()
    m = SceneGraphMemory(cfg(tmp_path))
    soon = drive(m, embed, np.arange(0, 1.51, 0.5), start_stamp=15 * S, odom_offset=(3.0, 0.0))
    assert m.stamp_offset_ns == 0 and InsertKind.LOOP_CLOSURE not in [r.kind for r in soon]
    m.close()
    m = SceneGraphMemory(cfg(tmp_path))
    later = drive(m, embed, np.arange(0, 6.01, 0.5), start_stamp=60 * S, odom_offset=(3.0, 0.0))
    assert m.stamp_offset_ns == 0 and m.localised
    assert InsertKind.LOOP_CLOSURE in [r.kind for r in later[:4]]
    m.close()


def test_bulk_places_may_start_a_session_behind_the_stored_stamps(tmp_path):
    m = SceneGraphMemory(cfg(tmp_path))
    m.add_places_bulk(np.array([50 * S, 60 * S]), np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
                      np.tile(np.eye(DIM)[0], (2, 1)))
    m.close()
    m = SceneGraphMemory(cfg(tmp_path, start_localised=True))
    ids = m.add_places_bulk(np.array([S, 2 * S]), np.array([[5.0, 0.0, 0.0], [6.0, 0.0, 0.0]]),
                            np.tile(np.eye(DIM)[1], (2, 1)))
    assert m.stamp_offset_ns == 59 * S + 1 and [m.place(i).last_seen_ns for i in ids.tolist()] == [S, 2 * S]
    with pytest.raises(InvalidInputError) as info:
        m.add_places_bulk(np.array([S]), np.zeros((1, 3)), np.tile(np.eye(DIM)[2], (1, 1)))
    assert info.value.field == "stamps_ns[0]"
    m.close()
    stamps = stored_stamps(tmp_path / "m.db")
    assert [stamps[i] for i in ids.tolist()] == [60 * S + 1, 61 * S + 1]


def test_held_back_counts_what_closing_unlocalised_forgets(tmp_path):
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, np.arange(0, 3.01, 0.5))
    assert m.held_back == (0, 0)
    before = m.stats().places
    m.close()
    m = SceneGraphMemory(cfg(tmp_path))
    rng = np.random.default_rng(4)
    for i in range(3):                                   # nowhere the memory knows: it stays unlocalised
        m.insert_observation(i * S, [1.5 * i, 40.0, 0.0], random_unit(rng),
                             objects=[ObjectDetection(5, (1.5 * i, 41.0, 0.5), instance_id=i)] if i == 0 else ())
    assert not m.localised and m.held_back == (3, 1) and m.stats().places == before + 3
    assert db_counts(tmp_path / "m.db")["places"] == before + 3      # in the file until the clean exit
    assert m.close() == (3, 1)
    assert db_counts(tmp_path / "m.db")["places"] == before
    # localised from outside: kept
    m = SceneGraphMemory(cfg(tmp_path))
    m.insert_observation(0, [0.0, 40.0, 0.0], random_unit(rng))
    assert m.held_back == (1, 0)
    m.set_pose([0.0, 40.0, 0.0], [0.0, 40.0, 0.0])
    assert m.held_back == (0, 0) and m.close() == (0, 0)
    assert db_counts(tmp_path / "m.db")["places"] == before + 1


def test_newer_schema_and_corrupt_files_are_refused_and_untouched(tmp_path):
    m = SceneGraphMemory(cfg(tmp_path))
    m.insert_observation(0, [0.0, 0.0, 0.0], random_unit(np.random.default_rng(0)))
    m.close()
    path = tmp_path / "m.db"
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError, match=f"schema_version 99 is newer than the supported version "
                                                 f"{SCHEMA_VERSION}") as info:
        SceneGraphMemory.open(path, cfg())
    assert str(path) in str(info.value)
    assert path.read_bytes() == before

    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(8192))
    before = junk.read_bytes()
    with pytest.raises(CorruptStoreError, match="junk.db"):
        SceneGraphMemory.open(junk, cfg())
    assert junk.read_bytes() == before


# --- bad input -------------------------------------------------------------------------------------------------


def _snapshot(m, path):
    s = m.stats()
    return (s.places, s.objects, s.rooms, s.graph_edges, s.last_stamp_ns, m.drift_correction,
            m.place_ids().tolist(), db_counts(path))


@pytest.mark.parametrize("kwargs, field", [
    ({"pose": [np.nan, 0.0, 0.0]}, "pose.x_m"),
    ({"pose": [0.0, 0.0, np.inf]}, "pose.yaw_rad"),
    ({"pose": [0.0, 0.0]}, "pose"),
    ({"embedding": np.full(DIM, np.nan)}, "embedding"),
    ({"embedding": np.ones(DIM + 1)}, "embedding"),
    ({"embedding": np.zeros(DIM)}, "embedding"),
    ({"stamp_ns": 5 * S}, "stamp_ns"),
    ({"stamp_ns": 20.5}, "stamp_ns"),
    ({"stamp_ns": 2 ** 63}, "stamp_ns"),
    ({"thumbnail": np.zeros((8, 8), np.uint8)}, "thumbnail"),
    ({"thumbnail": np.zeros((8, 8, 3), np.float32)}, "thumbnail"),
    ({"objects": [ObjectDetection(1, (np.nan, 0.0, 0.0))]}, "objects[0].position_m"),
    ({"objects": [ObjectDetection(1, (0.0, 0.0, 0.0), embedding=np.ones(3))]}, "objects[0].embedding"),
    ({"objects": ["chair"]}, "objects[0]"),
])
def test_bad_input_is_rejected_naming_the_field_and_memory_unchanged(tmp_path, kwargs, field):
    rng = np.random.default_rng(6)
    m = SceneGraphMemory(cfg(tmp_path))
    for i in range(5):
        m.insert_observation((10 + i) * S, [1.5 * i, 0.0, 0.0], random_unit(rng),
                             objects=[ObjectDetection(1, (1.5 * i, 1.0, 0.0), instance_id=1)])
    before = _snapshot(m, tmp_path / "m.db")
    call = {"stamp_ns": 20 * S, "pose": [0.0, 0.0, 0.0], "embedding": random_unit(rng)}
    call.update(kwargs)
    with pytest.raises(InvalidInputError) as info:
        m.insert_observation(**call)
    assert info.value.field == field and str(info.value).startswith(field)
    assert _snapshot(m, tmp_path / "m.db") == before
    m.close()


def test_bulk_insert_rejects_bad_rows_without_change(tmp_path):
    m = SceneGraphMemory(cfg(tmp_path))
    good = np.tile(np.eye(DIM)[0], (3, 1))
    poses = np.zeros((3, 3))
    bad_poses = poses.copy()
    bad_poses[1, 2] = np.nan
    for kwargs, field in (({"poses": bad_poses}, "poses[1]"),
                          ({"stamps_ns": np.array([0, 2, 1])}, "stamps_ns[2]"),
                          ({"embeddings": np.ones((3, DIM + 1))}, "embeddings")):
        call = {"stamps_ns": np.array([0, 1, 2]), "poses": poses, "embeddings": good}
        call.update(kwargs)
        with pytest.raises(InvalidInputError) as info:
            m.add_places_bulk(**call)
        assert info.value.field == field
    assert m.stats().places == 0 and db_counts(tmp_path / "m.db")["places"] == 0


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="new_place_distance_m"):
        SceneGraphConfig(new_place_distance_m=0.0)
    with pytest.raises(ValueError, match="merge_similarity"):
        SceneGraphConfig(merge_similarity=1.5)
    with pytest.raises(ValueError, match="unknown keys"):
        SceneGraphConfig.from_dict({"embedding_dim": 8, "bogus": 1})
    assert SceneGraphConfig.from_dict({"embedding_dim": 8}).embedding_dim == 8


# --- crash safety ------------------------------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from memnav.core.memory import SceneGraphConfig, SceneGraphMemory

    memory = SceneGraphMemory.open(sys.argv[1], SceneGraphConfig(embedding_dim=64, consolidate_every=0))
    i = 0
    while True:
        emb = np.random.default_rng(i).standard_normal(64)
        result = memory.insert_observation(i * 1_000_000_000, [5.0 * i, 0.0, 0.0], emb)
        print(i, result.node_id, flush=True)
        i += 1
""")


def test_sigkill_loses_at_most_the_last_insert(tmp_path):
    path = tmp_path / "crash.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(60.0, proc.kill)
    watchdog.start()
    try:
        printed = []
        while len(printed) < 200:
            line = proc.stdout.readline()
            assert line, "child exited early"
            printed.append(tuple(map(int, line.split())))
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()  # lines already in the pipe
        proc.wait()
    finally:
        watchdog.cancel()
    assert proc.returncode == -signal.SIGKILL
    printed += [tuple(map(int, line.split())) for line in rest.splitlines() if len(line.split()) == 2]
    last_i = printed[-1][0]

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    conn.close()
    with SceneGraphMemory.open(path, SceneGraphConfig(embedding_dim=64)) as m:
        n = m.stats().places
        # every acknowledged insert is there; at most one more (committed, killed before printing)
        assert last_i + 1 <= n <= last_i + 2
        for i, node_id in printed:
            info = m.place(node_id)
            assert info.pose.x_m == 5.0 * i
            emb = np.random.default_rng(i).standard_normal(64)
            np.testing.assert_allclose(info.embedding, emb / np.linalg.norm(emb), atol=1e-6)
        # and the memory keeps working after the crash
        assert m.insert_observation((last_i + 10) * S, [0.0, 50.0, 0.0], np.ones(64)).kind is InsertKind.NEW_PLACE


# --- bookkeeping invariants under a mixed workload --------------------------------------------------------------


def _check_invariants(m):
    g = m.graph
    places = set(m.place_ids().tolist())
    rooms = {n for n, d in g.nodes(data=True) if d["layer"] is Layer.ROOM}
    assert {n for n, d in g.nodes(data=True) if d["layer"] is Layer.PLACE} == places
    membership = m.rooms()
    assert set(membership) == rooms and all(membership.values())   # no empty rooms
    for room, members in membership.items():
        for p in members:
            assert m.place(p).room_id == room and g.edges[p, room]["kind"] is EdgeKind.PLACE_IN_ROOM
    expected_adjacent = set()
    for a, b, d in g.edges(data=True):
        if d["kind"] is EdgeKind.TRAVERSABLE:
            assert a in places and b in places and d["distance_m"] > 0
            ra, rb = m.place(a).room_id, m.place(b).room_id
            if ra != rb:
                expected_adjacent.add((min(ra, rb), max(ra, rb)))
        elif d["kind"] is EdgeKind.OBSERVED_FROM:
            assert {g.nodes[a]["layer"], g.nodes[b]["layer"]} == {Layer.PLACE, Layer.OBJECT}
    adjacent = {(min(a, b), max(a, b)) for a, b, d in g.edges(data=True) if d["kind"] is EdgeKind.ROOM_ADJACENT}
    assert adjacent == expected_adjacent
    for obj in m.objects():
        in_rooms = [n for n, d in g[obj.id].items() if d["kind"] is EdgeKind.OBJECT_IN_ROOM]
        assert in_rooms == ([] if obj.room_id is None else [obj.room_id])


def test_invariants_hold_and_survive_restart_under_merges_forgetting_and_rooms(tmp_path):
    embed = SmoothEmbedder(seed=7)
    rng = np.random.default_rng(7)
    m = SceneGraphMemory(cfg(tmp_path, consolidate_every=25, max_places=20, forget_batch_fraction=0.2,
                             merge_similarity=0.8, merge_distance_m=0.9))
    stamp = 0
    for lap in range(4):
        for t in np.arange(0, 2 * np.pi, 0.08):
            x, y = 6 * np.cos(t), 4 * np.sin(t)
            yaw = t + np.pi / 2
            drift = 0.05 * lap
            dets = [ObjectDetection(int(rng.integers(1, 4)), (x + 1.0, y, 0.5))] if rng.random() < 0.2 else []
            m.insert_observation(stamp, [x + drift, y, yaw], embed(x, y, yaw), objects=dets)
            stamp += S
        _check_invariants(m)
    m.consolidate(full=True)
    _check_invariants(m)
    places = {p: m.place(p) for p in m.place_ids().tolist()}
    edges = {(min(a, b), max(a, b), d["kind"]) for a, b, d in m.graph.edges(data=True)}
    objects = {o.id: (o.room_id, o.observation_count) for o in m.objects()}
    assert len(places) <= 20
    m.close()
    with SceneGraphMemory.open(tmp_path / "m.db", cfg()) as again:
        _check_invariants(again)
        assert {p: again.place(p) for p in again.place_ids().tolist()}.keys() == places.keys()
        for p, info in places.items():
            got = again.place(p)
            assert (got.pose, got.visit_count, got.room_id) == (info.pose, info.visit_count, info.room_id)
        assert {(min(a, b), max(a, b), d["kind"]) for a, b, d in again.graph.edges(data=True)} == edges
        assert {o.id: (o.room_id, o.observation_count) for o in again.objects()} == objects


def test_a_full_disk_keeps_the_file_at_its_last_commit_and_the_memory_goes_on_in_ram(tmp_path):
    """SQLite's own size limit (max_page_count) makes the database full, as a full disk does: the write fails with
    SQLITE_FULL, the file keeps its last commit, and after keep_in_ram the memory takes every later observation
    in RAM, writing nothing more to the file."""
    from memnav.core.memory import MemoryStoreError

    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg(tmp_path))
    drive(m, embed, np.arange(0.0, 3.01, 0.5))
    pages = m._store._conn.execute("PRAGMA page_count").fetchone()[0]
    m._store._conn.execute(f"PRAGMA max_page_count = {pages}")      # not one page more: the database is full
    thumb = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)   # a keyframe needs pages
    failed = None
    for i, x in enumerate(np.arange(10.0, 30.01, 1.0)):         # new places far away: new rows
        saved = db_counts(tmp_path / "m.db")                      # the last commit before this insert
        try:
            m.insert_observation((100 + i) * S, [x, 0.0, 0.0], embed(x, 0.0), thumbnail=thumb)
        except MemoryStoreError as err:
            failed = err
            break
    assert failed is not None and "full" in str(failed), failed
    assert db_counts(tmp_path / "m.db") == saved                  # the failed transaction was rolled back
    m.keep_in_ram(str(failed))
    assert m.persist_error == str(failed)
    before = m.stats().places
    drive(m, embed, np.arange(40.0, 43.01, 1.0), start_stamp=200 * S)   # new places, in RAM only
    assert m.stats().places == before + 4 and m.stats().db_path == ":memory:"
    assert db_counts(tmp_path / "m.db") == saved                  # nothing more reached the file
    m.keep_in_ram("again")                                        # once is enough: the first reason stays
    assert m.persist_error == str(failed)
    m.close()
    reopened_memory = SceneGraphMemory(cfg(tmp_path, db_check_integrity=True))   # whole, at its last commit
    assert reopened_memory.stats().places == saved["places"]
    reopened_memory.close()


def test_sizes_are_the_counts_of_stats():
    embed = SmoothEmbedder()
    m = SceneGraphMemory(cfg())
    drive(m, embed, np.arange(0.0, 6.01, 0.5))
    m.insert_observation(100 * S, [6.0, 0.0, 0.0], embed(6.0, 0.0),
                         objects=[ObjectDetection(3, (6.5, 0.2, 0.4), instance_id=7, label="chair")])
    st = m.stats()
    assert m.sizes() == (st.places, st.objects, st.rooms) and st.places > 1 and st.objects == 1


def test_place_columns_are_every_place_as_place_gives_it_in_node_id_order(tmp_path):
    """place_columns(): every place's data but its embedding in one call (drawing 100,000 places place() by place()
    took 1.6 s), row for row what place() gives: in node id order where forgotten places' slots were reused, stamps
    in the session's clock (a restarted one), room -1 for none; copies, so changing them changes no place."""
    rng = np.random.default_rng(4)
    m = SceneGraphMemory(cfg(tmp_path))
    m.add_places_bulk(np.arange(3) * S + 100 * S, np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]]),
                      np.stack([random_unit(rng) for _ in range(3)]))
    m.close()
    m = SceneGraphMemory(cfg(tmp_path, max_places=12, forget_batch_fraction=0.25))   # its clock starts at 0
    m.set_pose([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    embs = [random_unit(rng) for _ in range(20)]
    stamp = 0
    for _ in range(3):                     # a corridor visited three times, then one walked once: some forgotten
        for i in range(4):
            m.insert_observation(stamp, [1.5 * i, 5.0, 0.0], embs[i])
            stamp += S
    for i in range(4, 20):
        m.insert_observation(stamp, [1.5 * i, 5.0, 0.0], embs[i])
        stamp += S
    m.segment_rooms()
    m.add_places_bulk(np.array([stamp]), np.array([[40.0, 5.0, 0.3]]), random_unit(rng)[None])   # no room yet
    columns = m.place_columns()
    assert m.stamp_offset_ns > 0 and set(columns) == {"node_id", "pose", "first_seen_ns", "last_seen_ns",
                                                     "visit_count", "room_id"}
    ids = m.place_ids().tolist()
    assert columns["node_id"].tolist() == ids and columns["pose"].shape == (len(ids), 3)
    rows = [(p.node_id, (p.pose.x_m, p.pose.y_m, p.pose.yaw_rad), p.first_seen_ns, p.last_seen_ns, p.visit_count,
             -1 if p.room_id is None else p.room_id) for p in map(m.place, ids)]
    assert list(zip(columns["node_id"].tolist(), map(tuple, columns["pose"].tolist()),
                    columns["first_seen_ns"].tolist(), columns["last_seen_ns"].tolist(),
                    columns["visit_count"].tolist(), columns["room_id"].tolist(), strict=True)) == rows
    assert {r[4] for r in rows} == {1, 3} and rows[-1][5] == -1 and len({r[5] for r in rows}) > 2
    for column in columns.values():
        column[...] = 0
    assert [m.place(i).pose.x_m for i in ids] == [r[1][0] for r in rows] and m.place_ids().tolist() == ids
    m.close()
