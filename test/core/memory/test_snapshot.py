"""Read-only snapshots of a stored memory: counts, networkx graph, and that nothing is written."""

import networkx as nx
import numpy as np
import pytest
from conftest import file_sha256, run_sql

from memnav.core.memory import (
    SCHEMA_VERSION,
    CorruptStoreError,
    MemoryStoreError,
    ObjectDetection,
    SceneGraphConfig,
    SceneGraphMemory,
    SchemaVersionError,
)
from memnav.core.memory.snapshot import read_snapshot, read_thumbnails, summarize, to_networkx
from memnav.core.memory.store import SceneGraphStore

DIM = 16
S = 1_000_000_000


def unit(rng):
    v = rng.standard_normal(DIM)
    return v / np.linalg.norm(v)


@pytest.fixture
def stored(tmp_path):
    """A memory of 6 places along x (distinct views), a chair seen twice, a thumbnail on each place."""
    path = tmp_path / "m.db"
    rng = np.random.default_rng(0)
    m = SceneGraphMemory(SceneGraphConfig(embedding_dim=DIM, consolidate_every=0, db_path=str(path)))
    thumb = np.zeros((8, 8, 3), np.uint8)
    for i in range(6):
        thumb[:] = 40 * i
        objs = [ObjectDetection(3, (2.0, 1.0, 0.4), instance_id=7, label="chair")] if i in (1, 2) else []
        m.insert_observation(i * S, [1.5 * i, 0.0, 0.0], unit(rng), thumbnail=thumb, objects=objs)
    m.segment_rooms()
    stats = m.stats()
    m.close()
    return path, stats


def test_summary_counts_match_the_memory(stored):
    path, stats = stored
    info = summarize(read_snapshot(path))
    assert (info["places"], info["objects"], info["rooms"]) == (stats.places, stats.objects, stats.rooms)
    assert info["places"] == 6 and info["objects"] == 1 and info["objects_by_label"] == {"chair": 1}
    assert info["edges"] == {"traversable": stats.traversable_edges, "observed_from": stats.observed_from_edges}
    assert info["edges"]["traversable"] == 5 and info["edges"]["observed_from"] == 2
    assert info["embedding_dim"] == DIM and info["schema_version"] == SCHEMA_VERSION
    assert info["first_seen_ns"] == 0 and info["last_seen_ns"] == 5 * S and info["span_s"] == 5.0
    assert info["extent_m"] == {"x_min": 0.0, "x_max": 7.5, "y_min": 0.0, "y_max": 0.0}
    assert info["visits_total"] == 6 and info["isolated_places"] == 0
    assert sum(info["places_per_room"].values()) == info["places_in_a_room"] == 6
    assert info["file_bytes"] >= path.stat().st_size > 0


def test_networkx_graph_has_every_layer_and_edge_kind(stored, tmp_path):
    path, stats = stored
    snap = read_snapshot(path)
    g = to_networkx(snap)
    layers = nx.get_node_attributes(g, "layer")
    assert sorted(layers.values()).count("place") == 6 and list(layers.values()).count("object") == 1
    assert list(layers.values()).count("room") == stats.rooms
    kinds = [d["kind"] for _, _, d in g.edges(data=True)]
    assert kinds.count("traversable") == 5 and kinds.count("observed_from") == 2
    assert kinds.count("place_in_room") == 6 and kinds.count("object_in_room") == 1
    trav = [d for _, _, d in g.edges(data=True) if d["kind"] == "traversable"]
    assert all(d["distance_m"] == pytest.approx(1.5) for d in trav)
    # GraphML round trip keeps the attributes (plain types only)
    nx.write_graphml(g, tmp_path / "g.graphml")
    back = nx.read_graphml(tmp_path / "g.graphml", node_type=int)
    assert back.number_of_nodes() == g.number_of_nodes() and back.number_of_edges() == g.number_of_edges()
    chair = next(n for n, d in back.nodes(data=True) if d["layer"] == "object")
    assert back.nodes[chair]["label"] == "chair" and back.nodes[chair]["z_m"] == pytest.approx(0.4)
    with_emb = to_networkx(snap, embeddings=True)
    place = next(n for n, d in with_emb.nodes(data=True) if d["layer"] == "place")
    assert len(with_emb.nodes[place]["embedding"]) == DIM


def test_rooms_joined_by_a_traversability_edge_are_adjacent(stored):
    path, _ = stored
    snap = read_snapshot(path)
    g = snap.graph
    room_of = dict(zip(g.place_ids.tolist(), g.place_rooms.tolist()))
    expected = {tuple(sorted((room_of[a], room_of[b]))) for a, b, k, _ in g.edges
                if k == 1 and room_of[a] != room_of[b]}
    assert snap.room_adjacency == expected


def test_thumbnails_are_read_back(stored):
    path, _ = stored
    g = read_snapshot(path).graph
    thumbs = read_thumbnails(path, g.place_ids.tolist())
    assert len(thumbs) == 6
    assert sorted(int(t[0, 0, 0]) for t in thumbs.values()) == [0, 40, 80, 120, 160, 200]


def test_reading_writes_nothing_even_beside_a_live_writer(stored):
    path, _ = stored
    before = file_sha256(path)
    read_snapshot(path, check_integrity=True)
    assert file_sha256(path) == before
    # a cleanly closed database is read as it lies: no -wal / -shm bookkeeping files appear beside it
    side = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    assert not any(f.exists() for f in side)
    SceneGraphStore(path, None, read_only=True).close()
    assert not any(f.exists() for f in side) and file_sha256(path) == before
    # a memory open for writing in this process: the reader sees its committed places
    m = SceneGraphMemory.open(path, SceneGraphConfig(embedding_dim=DIM, consolidate_every=0))
    m.insert_observation(100 * S, [20.0, 0.0, 0.0], unit(np.random.default_rng(5)))
    assert summarize(read_snapshot(path))["places"] == 7
    m.close()


def test_read_only_store_refuses_writes(stored):
    path, _ = stored
    store = SceneGraphStore(path, None, read_only=True)
    assert store.embedding_dim == DIM
    with pytest.raises(MemoryStoreError, match="read-only"):
        with store.transaction():
            store.set_next_node_id(99)
    store.close()


def test_bad_files_are_refused_by_name_and_untouched(tmp_path):
    with pytest.raises(MemoryStoreError, match="missing or empty"):
        read_snapshot(tmp_path / "none.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 10)
    with pytest.raises(CorruptStoreError, match="junk.db"):
        read_snapshot(junk)
    assert junk.read_bytes() == b"not a database at all" * 10
    newer = tmp_path / "newer.db"
    SceneGraphMemory(SceneGraphConfig(embedding_dim=DIM, db_path=str(newer))).close()
    run_sql(newer, "UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    before = file_sha256(newer)
    with pytest.raises(SchemaVersionError, match="newer.db"):
        read_snapshot(newer)
    assert file_sha256(newer) == before


def test_writable_store_still_needs_an_embedding_dim(tmp_path):
    with pytest.raises(ValueError, match="embedding_dim"):
        SceneGraphStore(tmp_path / "x.db", None)


def _writer_commits_and_closes(path, place_id):
    """A memory node's store opening the file, committing a place and closing: its close checkpoints the log
    into the file, rewriting pages an immutable reader may be in the middle of."""
    writer = SceneGraphStore(path, 4)
    with writer.transaction():
        writer.insert_place(place_id, (float(place_id), 0.0, 0.0), 1, 1, None, np.ones(4, np.float32), None)
        writer.set_next_node_id(place_id + 1)
    writer.close()


def test_a_read_the_file_changed_under_is_made_again(tmp_path, monkeypatch):
    """No writer holds the file when the reader opens it (so it reads without locks), and one commits and closes
    while it reads: read_snapshot, read_thumbnails and backup_store each read again, and give the new state."""
    import memnav.core.memory.store as store_module

    path = tmp_path / "m.sqlite"
    _writer_commits_and_closes(path, 0)
    assert not path.with_name(path.name + "-wal").exists()
    load, loads = SceneGraphStore.load, []

    def load_while_a_writer_comes(self, *args, **kwargs):
        out = load(self, *args, **kwargs)
        loads.append(self._state_at_open is not None)
        if len(loads) == 1:
            _writer_commits_and_closes(path, 1)
        return out

    monkeypatch.setattr(SceneGraphStore, "load", load_while_a_writer_comes)
    assert read_snapshot(path).graph.place_ids.tolist() == [0, 1]
    assert loads == [True, True]               # immutable both times; the second saw the file as it stayed
    monkeypatch.setattr(SceneGraphStore, "load", load)

    copy, copies = SceneGraphStore.copy_to, []

    def copy_while_a_writer_comes(self, target):
        copy(self, target)
        copies.append(self._state_at_open is not None)
        if len(copies) == 1:
            _writer_commits_and_closes(path, 2)

    monkeypatch.setattr(SceneGraphStore, "copy_to", copy_while_a_writer_comes)
    backup = store_module.backup_store(path, tmp_path / "backup.sqlite")
    assert copies == [True, True] and backup.places == 3
    assert read_snapshot(tmp_path / "backup.sqlite").graph.place_ids.tolist() == [0, 1, 2]
