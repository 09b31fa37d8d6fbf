import sqlite3
import struct
import zlib

import numpy as np
import pytest
from conftest import file_sha256, run_sql

from memnav.core.memory.index import IvfTraining
from memnav.core.memory.store import (
    SCHEMA_VERSION,
    CorruptStoreError,
    MemoryStoreError,
    SceneGraphStore,
    SchemaVersionError,
    decode_png,
    encode_png,
)


def make_store(path, dim=8):
    store = SceneGraphStore(path, dim)
    with store.transaction():
        store.insert_place(0, (1.0, 2.0, 0.5), 10, 1, None, np.ones(dim, np.float32), None)
    store.close()
    return path


def test_png_round_trip_and_valid_chunks():
    img = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    data = encode_png(img)
    np.testing.assert_array_equal(decode_png(data), img)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, tag = struct.unpack(">I4s", data[8:16])
    assert tag == b"IHDR" and length == 13
    crc = struct.unpack(">I", data[16 + length : 20 + length])[0]
    assert crc == zlib.crc32(data[12 : 16 + length]) & 0xFFFFFFFF
    with pytest.raises(ValueError):
        decode_png(b"not a png")
    for damaged in (data[:-20], data[:20], data[:40] + b"\x00" * 8 + data[48:]):   # truncated, torn IHDR, bad IDAT
        with pytest.raises(ValueError, match="thumbnail PNG"):
            decode_png(damaged)


def test_new_file_is_versioned_wal_and_reloads(tmp_path):
    path = make_store(tmp_path / "m.sqlite")
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert int(meta["schema_version"]) == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    store = SceneGraphStore(path, 8)
    data = store.load()
    store.close()
    assert data.place_ids.tolist() == [0]
    np.testing.assert_allclose(data.place_poses, [[1.0, 2.0, 0.5]])
    np.testing.assert_allclose(data.place_embeddings, np.ones((1, 8)))


def test_a_reader_loads_one_state_while_the_writer_beside_it_commits(tmp_path):
    """A commit of the live writer landing between the reader's queries (here right after it counted the
    places) is seen by none of them: the places, edges and next id all come from the state at the first."""
    d = 4
    writer = SceneGraphStore(tmp_path / "m.sqlite", d)
    with writer.transaction():
        writer.insert_place(0, (0.0, 0.0, 0.0), 1, 1, None, np.ones(d, np.float32), None)
        writer.set_next_node_id(1)
    reader = SceneGraphStore(tmp_path / "m.sqlite", None, read_only=True)
    count = reader.count

    def count_then_writer_commits(table):
        n = count(table)
        with writer.transaction():
            writer.insert_place(1, (1.0, 0.0, 0.0), 2, 2, None, np.ones(d, np.float32), None)
            writer.upsert_edge(0, 1, 0, 1.0)
            writer.set_next_node_id(2)
        return n

    reader.count = count_then_writer_commits
    graph = reader.load()
    assert graph.place_ids.tolist() == [0] and graph.edges == [] and graph.next_node_id == 1
    reader.count = count
    assert reader.load().place_ids.tolist() == [0, 1]    # the next load sees the commit
    reader.close()
    writer.close()


def test_a_first_creation_killed_before_its_schema_committed_is_created_anew(tmp_path):
    """A process killed (SIGKILL) between the WAL switch, which writes the new file's header page, and the
    schema's commit leaves an SQLite file without tables: the next open makes it a memory instead of refusing
    it for good; a reader finds no memory there, and a file with any table of its own is still refused."""
    import subprocess
    import sys

    path = tmp_path / "m.sqlite"
    child = ("import os, signal\n"
             "import memnav.core.memory.store as st\n"
             "def killed(self):\n"
             "    os.kill(os.getpid(), signal.SIGKILL)\n"
             "    yield\n"
             "st.SceneGraphStore.transaction = st.contextmanager(killed)\n"
             f"st.SceneGraphStore({str(path)!r}, 4)\n")
    assert subprocess.run([sys.executable, "-c", child], timeout=60).returncode == -9
    assert path.stat().st_size > 0
    with pytest.raises(MemoryStoreError, match="no memory database here"):
        SceneGraphStore(path, None, read_only=True)
    store = SceneGraphStore(path, 4)
    with store.transaction():
        store.insert_place(0, (0.0, 0.0, 0.0), 1, 1, None, np.ones(4, np.float32), None)
    store.close()
    reader = SceneGraphStore(path, None, read_only=True)
    assert reader.load().place_ids.tolist() == [0]
    reader.close()
    other = tmp_path / "other.sqlite"
    run_sql(other, "CREATE TABLE notes (t TEXT)")
    before = file_sha256(other)
    with pytest.raises(CorruptStoreError):
        SceneGraphStore(other, 4)
    assert file_sha256(other) == before


def test_transaction_rolls_back_on_error(tmp_path):
    store = SceneGraphStore(tmp_path / "m.sqlite", 4)
    with pytest.raises(RuntimeError), store.transaction():
        store.insert_place(0, (0.0, 0.0, 0.0), 1, 1, None, np.ones(4, np.float32), None)
        raise RuntimeError("boom")
    assert store.count("places") == 0
    store.close()


def test_newer_schema_is_refused_and_file_untouched(tmp_path):
    path = make_store(tmp_path / "m.sqlite")
    run_sql(path, "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    before = file_sha256(path)
    with pytest.raises(SchemaVersionError) as info:
        SceneGraphStore(path, 8)
    err = info.value
    assert err.found == SCHEMA_VERSION + 1 and err.supported == SCHEMA_VERSION
    assert str(path) in str(err) and f"schema_version {SCHEMA_VERSION + 1}" in str(err)
    assert file_sha256(path) == before


def test_garbage_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "m.sqlite"
    path.write_bytes(b"definitely not sqlite" * 100)
    before = file_sha256(path)
    with pytest.raises(CorruptStoreError, match="not an SQLite database") as info:
        SceneGraphStore(path, 8)
    assert info.value.path == str(path)
    assert file_sha256(path) == before


def test_foreign_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    run_sql(path, "CREATE TABLE customers (id INTEGER)")
    before = file_sha256(path)
    with pytest.raises(CorruptStoreError, match="not a memnav memory"):
        SceneGraphStore(path, 8)
    assert file_sha256(path) == before


def test_damaged_pages_are_refused_and_untouched(tmp_path):
    path = make_store(tmp_path / "m.sqlite")
    run_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray(path.read_bytes())
    raw[100:4096] = b"\xff" * (4096 - 100)   # wipe the schema page after the 100-byte file header
    path.write_bytes(bytes(raw))
    before = file_sha256(path)
    with pytest.raises(CorruptStoreError, match="malformed|not a memnav"):
        SceneGraphStore(path, 8)
    assert file_sha256(path) == before


def test_hand_damaged_values_are_refused_as_corrupt_naming_what(tmp_path):
    """A meta embedding_dim that is no integer, an object embedding of the wrong length: CorruptStoreError
    naming it (not a bare ValueError a caller catching MemoryStoreError would miss); the file untouched."""
    path = make_store(tmp_path / "m.sqlite", dim=4)
    run_sql(path, "UPDATE meta SET value = 'four' WHERE key = 'embedding_dim'")
    before = file_sha256(path)
    with pytest.raises(CorruptStoreError, match="embedding_dim 'four' is not an integer"):
        SceneGraphStore(path, None, read_only=True)
    assert file_sha256(path) == before
    path = make_store(tmp_path / "o.sqlite", dim=4)
    run_sql(path, "INSERT INTO objects (id, class_id, instance_id, label, x_m, y_m, z_m, first_seen_ns, last_seen_ns, "
            "observation_count, room_id, embedding) VALUES (5, 1, NULL, 'lamp', 0, 0, 0, 1, 1, 1, NULL, ?)",
            (b"\x00" * 7,))
    store = SceneGraphStore(path, 4)
    with pytest.raises(CorruptStoreError, match="object 5 embedding is not 4 float32 values"):
        store.load()
    store.close()


def test_embedding_dim_mismatch_is_refused(tmp_path):
    path = make_store(tmp_path / "m.sqlite", dim=8)
    with pytest.raises(MemoryStoreError, match="embedding_dim is 8 in the file but 16"):
        SceneGraphStore(path, 16)


def _ids(path) -> list[int]:
    store = SceneGraphStore(path, None, read_only=True)
    try:
        return store.load().place_ids.tolist()
    finally:
        store.close()


def test_a_backup_of_an_open_database_holds_every_commit_still_in_its_wal_log(tmp_path):
    from memnav.core.memory.store import backup_store

    src = tmp_path / "live.db"
    writer = SceneGraphStore(src, 8)     # kept open: its commits sit in the -wal log, not yet in the file
    for i in range(5):
        with writer.transaction():
            writer.insert_place(i, (float(i), 0.0, 0.0), 10 + i, 1, None, np.full(8, i, np.float32), None)
    assert (tmp_path / "live.db-wal").stat().st_size > 0
    out = backup_store(src, tmp_path / "backups" / "copy.db")
    assert (out.places, out.objects, out.edges) == (5, 0, 0) and out.bytes > 0
    copy = tmp_path / "backups" / "copy.db"
    assert _ids(copy) == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in copy.parent.iterdir()) == ["copy.db"]   # no temporary or side file left
    with writer.transaction():          # the writer goes on as before
        writer.insert_place(5, (5.0, 0.0, 0.0), 20, 1, None, np.ones(8, np.float32), None)
    writer.close()
    assert _ids(src) == [0, 1, 2, 3, 4, 5] and _ids(copy) == [0, 1, 2, 3, 4]


def test_a_backup_taken_while_another_process_writes_is_whole(tmp_path):
    """A child process commits one place per transaction (ids 0, 1, 2, ...) as fast as it can; every backup taken
    meanwhile is a checked database holding exactly the first n of them."""
    import subprocess
    import sys
    import time

    from memnav.core.memory.store import backup_store

    src = tmp_path / "busy.db"
    code = (
        "import sys, numpy as np\n"
        "from memnav.core.memory.store import SceneGraphStore\n"
        f"s = SceneGraphStore({str(src)!r}, 8)\n"
        "i = 0\n"
        "while True:\n"
        "    with s.transaction():\n"
        "        s.insert_place(i, (float(i), 0.0, 0.0), i, 1, None, np.ones(8, np.float32), bytes(2000))\n"
        "    i += 1\n")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while (not src.exists() or src.stat().st_size == 0 or not _count_ready(src, 50)) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        counts = []
        for k in range(3):
            result = backup_store(src, tmp_path / f"copy{k}.db")
            ids = _ids(tmp_path / f"copy{k}.db")
            assert ids == list(range(len(ids))) and result.places == len(ids)   # a prefix: no commit half-copied
            counts.append(len(ids))
        assert child.poll() is None, "the writer stopped"
        assert counts[0] >= 50 and counts == sorted(counts) and counts[-1] > counts[0]   # it wrote on meanwhile
    finally:
        child.kill()
        child.wait()


def _count_ready(path, n: int) -> bool:
    try:
        store = SceneGraphStore(path, None, read_only=True)
    except MemoryStoreError:
        return False        # the schema is still being written
    try:
        return store.count("places") >= n
    finally:
        store.close()


def test_a_backup_never_overwrites_and_refuses_a_source_it_cannot_read(tmp_path):
    from memnav.core.memory.store import backup_store

    src = make_store(tmp_path / "m.db")
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="taken.db exists; a backup never overwrites"):
        backup_store(src, taken)
    assert taken.read_bytes() == b"keep me"
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"x" * 4096)
    with pytest.raises(CorruptStoreError, match="garbage.db"):
        backup_store(garbage, tmp_path / "g_copy.db")
    run_sql(src, "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    before = file_sha256(src)
    with pytest.raises(SchemaVersionError):
        backup_store(src, tmp_path / "new_copy.db")
    assert file_sha256(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.db", "m.db", "taken.db"]


def test_a_file_created_at_the_backups_name_while_it_copies_is_not_overwritten(tmp_path, monkeypatch):
    import memnav.core.memory.store as store_module

    src = make_store(tmp_path / "m.db")
    dst = tmp_path / "late.db"
    copy = SceneGraphStore.copy_to

    def copy_then_someone_writes_dst(self, target):
        copy(self, target)
        dst.write_bytes(b"keep me")

    monkeypatch.setattr(SceneGraphStore, "copy_to", copy_then_someone_writes_dst)
    with pytest.raises(FileExistsError, match="late.db exists; a backup never overwrites"):
        store_module.backup_store(src, dst)
    assert dst.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.db", "m.db"]   # no temporary file left


def _as_version_1(path):
    """Turn a file into what schema version 1 wrote (no index_training table), folded into the main file."""
    run_sql(path, "DROP TABLE index_training")
    run_sql(path, "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    run_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")


def test_a_version_1_file_is_read_as_it_is_and_migrated_when_opened_for_writing(tmp_path):
    path = make_store(tmp_path / "m.sqlite")
    _as_version_1(path)
    before = file_sha256(path)
    reader = SceneGraphStore(path, None, read_only=True)
    old = reader.load()
    assert reader.schema_version() == 1 and old.index_training is None
    reader.close()
    assert file_sha256(path) == before
    store = SceneGraphStore(path, 8)
    assert store.schema_version() == SCHEMA_VERSION and store.count("index_training") == 0
    new = store.load()
    assert new.place_ids.tolist() == old.place_ids.tolist() == [0] and new.next_node_id == old.next_node_id
    np.testing.assert_array_equal(new.place_embeddings, old.place_embeddings)
    np.testing.assert_array_equal(new.place_poses, old.place_poses)
    cents = np.eye(8, dtype=np.float32)[:3]
    with store.transaction():
        store.set_index_training(IvfTraining(cents, 40, 20))
    stored = store.load().index_training
    np.testing.assert_array_equal(stored.centroids, cents)
    assert (stored.trained_size, stored.exact_max_size) == (40, 20)
    with pytest.raises(ValueError, match=r"shape \(nlist, 8\)"), store.transaction():
        store.set_index_training(IvfTraining(np.ones((3, 7), np.float32), 40, 20))
    with store.transaction():
        store.set_index_training(None)
    assert store.load().index_training is None
    store.close()
    again = SceneGraphStore(path, 8)   # migrated once: opened again as it is
    assert again.schema_version() == SCHEMA_VERSION and again.load().place_ids.tolist() == [0]
    again.close()


def test_a_current_file_without_the_index_training_table_is_refused(tmp_path):
    path = make_store(tmp_path / "m.sqlite")
    run_sql(path, "DROP TABLE index_training")
    run_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    before = file_sha256(path)
    with pytest.raises(CorruptStoreError, match="index_training"):
        SceneGraphStore(path, 8)
    assert file_sha256(path) == before
