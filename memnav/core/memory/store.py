"""SQLite persistence for the scene-graph memory (WAL, versioned schema, one transaction per change).

Durability: the database runs in WAL mode with `synchronous=NORMAL`, so a committed transaction is in the
WAL file as soon as COMMIT returns and survives the process being killed (SIGKILL included); only an OS
crash or power cut can lose the last commits (`sync_full=True` closes that gap at the cost of an fsync per
commit). An interrupted transaction is rolled back by SQLite on the next open.

Safety: an existing file is validated read-only before anything is written to it. A file that is not a
SQLite database, is malformed, is not a memnav memory, or has a newer schema version is refused with
`CorruptStoreError` / `SchemaVersionError` (both name the file) and is never modified.

The in-RAM graph is the working copy; this module only reads it back at start and mirrors each change.
Place-room and object-room containment live in `room_id` columns; room adjacency is derived on load.

Schema versions: 1 had no `index_training` table (the embedding index's IVF centroids, so that a reopened
memory searches the same lists as the memory that wrote it). A version-1 file opened for writing is migrated
to version 2 in one transaction that only adds that table (empty: the index trains itself once and stores
its training with the next change); read-only it is read as it is.
"""
from __future__ import annotations

import os
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from memnav.core.memory.index import IvfTraining

SCHEMA_VERSION = 2
APPLICATION = "memnav.scene_graph"
_SQLITE_MAGIC = b"SQLite format 3\x00"
T = TypeVar("T")


def read_only_uri(path: Path) -> str:
    """The URI a reader opens `path` with, so that reading leaves its folder as it was.

    A WAL database that no writer holds open (no `-wal` file beside it: SQLite removes it when the last
    connection closes cleanly) is opened `immutable=1`, since plain `mode=ro` would create the `-shm` and `-wal`
    bookkeeping files beside it. One with a `-wal` file (a live writer, or a crash whose log holds committed
    transactions) is opened `mode=ro`, which reads that log.
    """
    uri = f"{path.resolve().as_uri()}?mode=ro"
    with path.open("rb") as fh:
        header = fh.read(20)
    wal_mode = len(header) == 20 and header[18] == 2 and header[19] == 2   # read / write format 2: WAL
    if wal_mode and not path.with_name(path.name + "-wal").exists():
        uri += "&immutable=1"
    return uri


def file_state(path: Path) -> tuple[int, int, int]:
    """(inode, size, modification time in ns) of `path`: what a checkpoint into it or a replacement changes."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


# an immutable reader (read_only_uri) takes no locks: a writer that opens the file meanwhile and checkpoints into
# it rewrites pages under the read, which may then mix two states; such a read is made again (by then the
# writer's -wal file is there, and the next reader reads through SQLite's locks)
STABLE_READ_TRIES = 3
_TABLES = ("meta", "places", "objects", "rooms", "edges", "index_training")
_TABLES_V1 = _TABLES[:-1]

# version 2: the IVF training of the embedding index (one row, id 0; none in exact mode). centroids: nlist x
# embedding_dim little-endian float32; exact_max_size: the index setting it was trained under
_INDEX_TRAINING_TABLE = """
CREATE TABLE index_training (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    trained_size INTEGER NOT NULL,
    exact_max_size INTEGER NOT NULL,
    centroids BLOB NOT NULL
)"""

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE places (
    id INTEGER PRIMARY KEY,
    x_m REAL NOT NULL, y_m REAL NOT NULL, yaw_rad REAL NOT NULL,
    first_seen_ns INTEGER NOT NULL, last_seen_ns INTEGER NOT NULL,
    visit_count INTEGER NOT NULL,
    room_id INTEGER,
    embedding BLOB NOT NULL,
    thumbnail BLOB
);
CREATE TABLE objects (
    id INTEGER PRIMARY KEY,
    class_id INTEGER NOT NULL, instance_id INTEGER, label TEXT NOT NULL,
    x_m REAL NOT NULL, y_m REAL NOT NULL, z_m REAL NOT NULL,
    first_seen_ns INTEGER NOT NULL, last_seen_ns INTEGER NOT NULL,
    observation_count INTEGER NOT NULL,
    room_id INTEGER,
    embedding BLOB
);
CREATE TABLE rooms (id INTEGER PRIMARY KEY, x_m REAL NOT NULL, y_m REAL NOT NULL);
CREATE TABLE edges (
    a INTEGER NOT NULL, b INTEGER NOT NULL, kind INTEGER NOT NULL, distance_m REAL,
    PRIMARY KEY (a, b, kind)
) WITHOUT ROWID;
CREATE INDEX edges_by_b ON edges (b);
""" + _INDEX_TRAINING_TABLE + ";\n"


class MemoryStoreError(RuntimeError):
    """The memory database cannot be used; `path` names the file."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class CorruptStoreError(MemoryStoreError):
    """The file is not a readable memnav memory database (it is left untouched)."""


class SchemaVersionError(MemoryStoreError):
    """The file's schema version is not one this code can read (it is left untouched)."""

    def __init__(self, path: str, found: int, supported: int) -> None:
        super().__init__(path, f"memory schema_version {found} is newer than the supported version "
                               f"{supported}; upgrade memnav to read it (the file was not modified)")
        self.found = found
        self.supported = supported


@dataclass
class ObjectRow:
    """One stored object node."""

    id: int
    class_id: int
    instance_id: int | None
    label: str
    position_m: tuple[float, float, float]
    first_seen_ns: int
    last_seen_ns: int
    observation_count: int
    room_id: int | None
    embedding: np.ndarray | None


@dataclass
class LoadedGraph:
    """Everything read back from a database at start (places as column arrays, id order)."""

    place_ids: np.ndarray            # (N,) int64
    place_poses: np.ndarray          # (N, 3) float64: x_m, y_m, yaw_rad
    place_first_seen_ns: np.ndarray  # (N,) int64
    place_last_seen_ns: np.ndarray   # (N,) int64
    place_visits: np.ndarray         # (N,) int64
    place_rooms: np.ndarray          # (N,) int64, -1 where none
    place_embeddings: np.ndarray     # (N, D) float32
    objects: list[ObjectRow]
    rooms: list[tuple[int, float, float]]  # (id, x_m, y_m)
    edges: list[tuple[int, int, int, float | None]]  # (a, b, kind, distance_m)
    next_node_id: int
    index_training: IvfTraining | None = None   # None: exact mode, or a version-1 file


class SceneGraphStore:
    """A memnav memory database: schema creation, validation on open, and typed writes.

    Use `transaction()` around a group of writes; each committed group is durable (see module docstring).
    Not thread-safe: the owning memory serialises calls.

    Args:
        path: database file, created if absent; None keeps the database in RAM (nothing survives close).
        embedding_dim: embedding length; an existing file must match it. None takes the file's (read-only only).
        sync_full: fsync on every commit (survives power loss, slower) instead of WAL `synchronous=NORMAL`.
        check_integrity: run `PRAGMA quick_check` when opening an existing file (reads the whole file).
        read_only: open an existing file for reading only (inspection tools; safe beside a running writer);
            every write raises `MemoryStoreError`.

    Raises:
        CorruptStoreError: the file is not a memnav memory database, or is malformed.
        SchemaVersionError: the file was written by a newer schema.
        MemoryStoreError: the file's embedding dimension differs from `embedding_dim`.
    """

    def __init__(self, path: str | Path | None, embedding_dim: int | None, *, sync_full: bool = False,
                 check_integrity: bool = False, read_only: bool = False) -> None:
        self.path = ":memory:" if path is None else str(path)
        self.embedding_dim = embedding_dim
        self.read_only = read_only
        exists = path is not None and Path(path).exists() and Path(path).stat().st_size > 0
        if embedding_dim is None and not read_only:
            raise ValueError("embedding_dim may be None only when opening read-only")
        self._file_version = SCHEMA_VERSION
        if exists and self._validate_existing(Path(path), check_integrity):
            # an SQLite file without a single table: a first creation cut short (the WAL switch writes the
            # header page before the schema commits); it holds nothing to lose, so the schema is created in it
            exists = False
        if read_only and not exists:
            raise MemoryStoreError(self.path, "no memory database here (missing or empty file)")
        self._depth = 0
        self._state_at_open: tuple[int, int, int] | None = None
        if read_only:
            uri = read_only_uri(Path(path))
            if "immutable=1" in uri:
                self._state_at_open = file_state(Path(path))
            try:
                self._conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            except sqlite3.Error as err:
                raise MemoryStoreError(self.path, f"cannot open database for reading: {err}") from err
            return
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as err:
            raise MemoryStoreError(self.path, f"cannot open database: {err}") from err
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={'FULL' if sync_full else 'NORMAL'}")
            self._conn.execute("PRAGMA temp_store=MEMORY")
            if not exists:
                with self.transaction():
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        self._conn.execute(statement)  # not executescript: that would commit early
                    self._conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                        ("schema_version", str(SCHEMA_VERSION)), ("application", APPLICATION),
                        ("embedding_dim", str(embedding_dim)), ("next_node_id", "0")])
            elif self._file_version < SCHEMA_VERSION:
                self._migrate()
        except sqlite3.Error as err:
            self._conn.close()
            raise MemoryStoreError(self.path, f"cannot initialise database: {err}") from err

    def _migrate(self) -> None:
        """Bring a version-1 file to the current schema (one transaction; nothing stored is changed). The version is
        read again inside it: another writer may have migrated the file since it was validated."""
        with self.transaction():
            version = int(self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
            if version == 1:
                self._conn.execute(_INDEX_TRAINING_TABLE)
                self._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        self._file_version = SCHEMA_VERSION

    def changed_under_read(self) -> bool:
        """A read-only store opened immutable (no writer held the file then) whose file has changed since: what
        it read may mix two states (see STABLE_READ_TRIES), so read again with a new store."""
        if self._state_at_open is None:
            return False
        try:
            return file_state(Path(self.path)) != self._state_at_open
        except OSError:
            return True

    # -- open-time validation (read-only: a refused file is never modified) ---------------------------

    def _validate_existing(self, path: Path, check_integrity: bool) -> bool:
        """Refuse a file that is not a usable memnav memory (naming why); True when it is an SQLite database
        holding nothing at all (no table, index or view), False when it is a memory."""
        with path.open("rb") as fh:
            if fh.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                raise CorruptStoreError(self.path, "not an SQLite database (bad header); refusing to use it")
        try:
            conn = sqlite3.connect(read_only_uri(path), uri=True)
        except sqlite3.Error as err:
            raise CorruptStoreError(self.path, f"cannot be opened: {err}") from err
        try:
            if conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0:
                return True
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "meta" not in tables:
                raise CorruptStoreError(self.path, "not a memnav memory database (no meta table)")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            try:
                version = int(meta["schema_version"])
            except (KeyError, ValueError) as err:
                raise CorruptStoreError(self.path, "meta table has no valid schema_version") from err
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(self.path, version, SCHEMA_VERSION)
            missing = [t for t in (_TABLES_V1 if version == 1 else _TABLES) if t not in tables]
            if version < 1 or meta.get("application") != APPLICATION or missing:
                raise CorruptStoreError(self.path, f"not a memnav memory database (schema_version {version}, "
                                                   f"application {meta.get('application')!r}, "
                                                   f"missing tables {missing})")
            try:
                dim = int(meta.get("embedding_dim", "-1"))
            except ValueError as err:
                raise CorruptStoreError(self.path, f"meta embedding_dim {meta.get('embedding_dim')!r} is not an "
                                                   "integer") from err
            if self.embedding_dim is None and dim > 0:
                self.embedding_dim = dim
            if dim != self.embedding_dim:
                raise MemoryStoreError(self.path, f"embedding_dim is {dim} in the file but {self.embedding_dim} "
                                                  "in the config; refusing to mix them")
            if check_integrity:
                result = conn.execute("PRAGMA quick_check").fetchone()[0]
                if result != "ok":
                    raise CorruptStoreError(self.path, f"integrity check failed: {result}")
            self._file_version = version
        except sqlite3.DatabaseError as err:
            raise CorruptStoreError(self.path, f"malformed database: {err}") from err
        finally:
            conn.close()
        return False

    # -- transactions -----------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one atomic commit; nested uses join the outer transaction.

        Raises:
            MemoryStoreError: the store is closed, locked by another writer, or a write failed (rolled back).
        """
        if self._conn is None:
            raise MemoryStoreError(self.path, "the memory database is closed")
        if self.read_only:
            raise MemoryStoreError(self.path, "opened read-only: nothing may be written")
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise MemoryStoreError(self.path, f"cannot start a transaction: {err}") from err
        self._depth = 1
        try:
            yield
            self._conn.execute("COMMIT")
        except sqlite3.Error as err:
            self._rollback()
            raise MemoryStoreError(self.path, f"database write failed and was rolled back: {err}") from err
        except BaseException:
            self._rollback()
            raise
        finally:
            self._depth = 0

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    # -- writes (call inside transaction()) -------------------------------------------------------------

    def set_index_training(self, row: IvfTraining | None) -> None:
        """Store the embedding index's IVF training, replacing the one stored (None: exact mode, none)."""
        if row is None:
            self._conn.execute("DELETE FROM index_training")
            return
        cents = np.asarray(row.centroids)
        if cents.ndim != 2 or cents.shape[1] != self.embedding_dim or len(cents) == 0:
            raise ValueError(f"index centroids must have shape (nlist, {self.embedding_dim}), got {cents.shape}")
        self._conn.execute("INSERT OR REPLACE INTO index_training (id, trained_size, exact_max_size, centroids) "
                           "VALUES (0, ?, ?, ?)", (int(row.trained_size), int(row.exact_max_size), _blob(cents)))

    def set_next_node_id(self, next_id: int) -> None:
        self._conn.execute("UPDATE meta SET value = ? WHERE key = 'next_node_id'", (str(next_id),))

    def insert_place(self, node_id: int, pose: tuple[float, float, float], stamp_ns: int, visits: int,
                     room_id: int | None, embedding: np.ndarray, thumbnail: bytes | None) -> None:
        self._conn.execute(
            "INSERT INTO places (id, x_m, y_m, yaw_rad, first_seen_ns, last_seen_ns, visit_count, room_id, "
            "embedding, thumbnail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (node_id, *pose, stamp_ns, stamp_ns, visits, room_id, _blob(embedding), thumbnail))

    def insert_places(self, rows: Iterable[tuple]) -> None:
        """Bulk insert of (id, x_m, y_m, yaw_rad, first_ns, last_ns, visits, room_id, embedding_blob)."""
        self._conn.executemany(
            "INSERT INTO places (id, x_m, y_m, yaw_rad, first_seen_ns, last_seen_ns, visit_count, room_id, "
            "embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def update_place(self, node_id: int, *, first_seen_ns: int, last_seen_ns: int, visits: int,
                     embedding: np.ndarray, thumbnail: bytes | None = None) -> None:
        """Update a place's statistics and embedding; a thumbnail, when given, replaces the stored one."""
        if thumbnail is None:
            self._conn.execute("UPDATE places SET first_seen_ns = ?, last_seen_ns = ?, visit_count = ?, "
                               "embedding = ? WHERE id = ?",
                               (first_seen_ns, last_seen_ns, visits, _blob(embedding), node_id))
        else:
            self._conn.execute("UPDATE places SET first_seen_ns = ?, last_seen_ns = ?, visit_count = ?, "
                               "embedding = ?, thumbnail = ? WHERE id = ?",
                               (first_seen_ns, last_seen_ns, visits, _blob(embedding), thumbnail, node_id))

    def set_place_poses(self, rows: Iterable[tuple[float, float, float, int]]) -> None:
        """Bulk update of (x_m, y_m, yaw_rad, place_id): places moved into another frame."""
        self._conn.executemany("UPDATE places SET x_m = ?, y_m = ?, yaw_rad = ? WHERE id = ?", rows)

    def adopt_thumbnail(self, keep_id: int, drop_id: int) -> None:
        """Give `keep_id` the thumbnail of `drop_id` if it has none (used when merging places)."""
        self._conn.execute("UPDATE places SET thumbnail = (SELECT thumbnail FROM places WHERE id = ?) "
                           "WHERE id = ? AND thumbnail IS NULL", (drop_id, keep_id))

    def set_place_rooms(self, rows: Iterable[tuple[int | None, int]]) -> None:
        """Bulk update of (room_id, place_id)."""
        self._conn.executemany("UPDATE places SET room_id = ? WHERE id = ?", rows)

    def delete_node(self, node_id: int) -> None:
        """Delete a place, object or room row and every stored edge touching it."""
        for table in ("places", "objects", "rooms"):
            self._conn.execute(f"DELETE FROM {table} WHERE id = ?", (node_id,))
        self._conn.execute("DELETE FROM edges WHERE a = ?", (node_id,))
        self._conn.execute("DELETE FROM edges WHERE b = ?", (node_id,))

    def upsert_object(self, row: ObjectRow) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO objects (id, class_id, instance_id, label, x_m, y_m, z_m, first_seen_ns, "
            "last_seen_ns, observation_count, room_id, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row.id, row.class_id, row.instance_id, row.label, *row.position_m, row.first_seen_ns,
             row.last_seen_ns, row.observation_count, row.room_id,
             None if row.embedding is None else _blob(row.embedding)))

    def replace_rooms(self, rooms: Iterable[tuple[int, float, float]]) -> None:
        """Replace the whole rooms table with (id, x_m, y_m) rows."""
        self._conn.execute("DELETE FROM rooms")
        self._conn.executemany("INSERT INTO rooms (id, x_m, y_m) VALUES (?, ?, ?)", rooms)

    def upsert_room(self, room_id: int, x_m: float, y_m: float) -> None:
        self._conn.execute("INSERT OR REPLACE INTO rooms (id, x_m, y_m) VALUES (?, ?, ?)", (room_id, x_m, y_m))

    def set_object_rooms(self, rows: Iterable[tuple[int | None, int]]) -> None:
        self._conn.executemany("UPDATE objects SET room_id = ? WHERE id = ?", rows)

    def upsert_edge(self, a: int, b: int, kind: int, distance_m: float | None) -> None:
        self._conn.execute("INSERT OR REPLACE INTO edges (a, b, kind, distance_m) VALUES (?, ?, ?, ?)",
                           (a, b, kind, distance_m))

    def insert_edges(self, rows: Iterable[tuple[int, int, int, float | None]]) -> None:
        self._conn.executemany("INSERT OR REPLACE INTO edges (a, b, kind, distance_m) VALUES (?, ?, ?, ?)", rows)

    def delete_edge(self, a: int, b: int, kind: int) -> None:
        self._conn.execute("DELETE FROM edges WHERE a = ? AND b = ? AND kind = ?", (a, b, kind))

    # -- reads ------------------------------------------------------------------------------------------

    def thumbnail(self, node_id: int) -> bytes | None:
        row = self._conn.execute("SELECT thumbnail FROM places WHERE id = ?", (node_id,)).fetchone()
        return None if row is None else row[0]

    def schema_version(self) -> int:
        return int(self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    def meta(self) -> dict[str, str]:
        """The meta table (schema_version, application, embedding_dim, next_node_id)."""
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())

    def count(self, table: str) -> int:
        if table not in _TABLES:
            raise ValueError(f"unknown table {table!r}")
        return int(self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    def load(self, chunk: int = 65_536) -> LoadedGraph:
        """Read the whole graph back (places in id order, streamed in chunks).

        Raises:
            CorruptStoreError: if rows cannot be read or are inconsistent.
        """
        d = self.embedding_dim
        # one read transaction for all the reads below: in autocommit each would see the commits made between
        # them by a writer beside this reader (the place count one state, the edges another)
        own = not self._conn.in_transaction
        try:
            if own:
                self._conn.execute("BEGIN")
            n = self.count("places")
            ids = np.empty(n, np.int64)
            poses = np.empty((n, 3), np.float64)
            first = np.empty(n, np.int64)
            last = np.empty(n, np.int64)
            visits = np.empty(n, np.int64)
            rooms = np.empty(n, np.int64)
            embs = np.empty((n, d), np.float32)
            cur = self._conn.execute("SELECT id, x_m, y_m, yaw_rad, first_seen_ns, last_seen_ns, visit_count, "
                                     "room_id, embedding FROM places ORDER BY id")
            i = 0
            while rows := cur.fetchmany(chunk):
                m = len(rows)
                if i + m > n:
                    raise CorruptStoreError(self.path, "places table changed while loading")
                cols = list(zip(*rows))
                ids[i : i + m] = cols[0]
                poses[i : i + m] = np.column_stack(cols[1:4])
                first[i : i + m] = cols[4]
                last[i : i + m] = cols[5]
                visits[i : i + m] = cols[6]
                rooms[i : i + m] = [-1 if r is None else r for r in cols[7]]
                blob = b"".join(cols[8])
                if len(blob) != m * d * 4:
                    raise CorruptStoreError(self.path, f"place embeddings are not {d} float32 values each")
                embs[i : i + m] = np.frombuffer(blob, dtype="<f4").reshape(m, d)
                i += m
            if i != n:
                raise CorruptStoreError(self.path, "places table changed while loading")
            objects = [ObjectRow(id=r[0], class_id=r[1], instance_id=r[2], label=r[3], position_m=(r[4], r[5], r[6]),
                                 first_seen_ns=r[7], last_seen_ns=r[8], observation_count=r[9], room_id=r[10],
                                 embedding=None if r[11] is None else self._object_embedding(r[0], r[11]))
                       for r in self._conn.execute("SELECT id, class_id, instance_id, label, x_m, y_m, z_m, "
                                                   "first_seen_ns, last_seen_ns, observation_count, room_id, "
                                                   "embedding FROM objects ORDER BY id")]
            room_rows = [tuple(r) for r in self._conn.execute("SELECT id, x_m, y_m FROM rooms ORDER BY id")]
            edges = [tuple(r) for r in self._conn.execute("SELECT a, b, kind, distance_m FROM edges")]
            next_id = int(self._conn.execute("SELECT value FROM meta WHERE key = 'next_node_id'").fetchone()[0])
            training = self._index_training() if self._file_version >= 2 else None
        except sqlite3.DatabaseError as err:
            raise CorruptStoreError(self.path, f"malformed database while loading: {err}") from err
        finally:
            if own and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")   # it only read
        return LoadedGraph(ids, poses, first, last, visits, rooms, embs, objects, room_rows, edges, next_id, training)

    def _index_training(self) -> IvfTraining | None:
        rows = self._conn.execute("SELECT trained_size, exact_max_size, centroids FROM index_training").fetchall()
        if not rows:
            return None
        trained_size, exact_max_size, blob = rows[0]
        d = self.embedding_dim or 0
        if (not isinstance(blob, bytes) or len(blob) == 0 or len(blob) % (4 * d)
                or not all(isinstance(v, int) and v >= 1 for v in (trained_size, exact_max_size))):
            raise CorruptStoreError(self.path, "index_training row is malformed (centroids must be nlist x "
                                               f"{d} float32 values, trained_size and exact_max_size integers >= 1)")
        cents = np.frombuffer(blob, "<f4").reshape(-1, d).copy()
        if not np.all(np.isfinite(cents)):
            raise CorruptStoreError(self.path, "index_training centroids contain NaN or inf")
        return IvfTraining(cents, trained_size, exact_max_size)

    def copy_to(self, target: Path) -> None:
        """SQLite's online backup of this database into the new file `target`, in WAL mode as the store keeps
        its files: all pages in one step, so one read transaction and one consistent copy.

        Raises:
            sqlite3.Error: the copy failed.
        """
        copy = sqlite3.connect(target)
        try:
            self._conn.backup(copy)
            copy.execute("PRAGMA journal_mode=WAL")
        finally:
            copy.close()

    def _object_embedding(self, object_id: int, blob: bytes) -> np.ndarray:
        if len(blob) != 4 * (self.embedding_dim or 0):
            raise CorruptStoreError(self.path, f"object {object_id} embedding is not {self.embedding_dim} float32 "
                                               f"values ({len(blob)} bytes)")
        return np.frombuffer(blob, "<f4").copy()

    def close(self) -> None:
        """Commit nothing further and close (a WAL checkpoint folds the log into the main file)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # type: ignore[assignment]


_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class BackupResult:
    """What `backup_store` wrote: the copy's path, size in bytes, and its place, object and edge counts."""

    path: str
    bytes: int
    places: int
    objects: int
    edges: int


def refuse_overwrite(*paths: Path) -> None:
    """FileExistsError naming the first of `paths` that exists: a backup never overwrites a file."""
    for path in paths:
        if path.exists():
            raise FileExistsError(f"{path} exists; a backup never overwrites a file: remove it or name another")


def backup_store(src: str | Path, dst: str | Path) -> BackupResult:
    """Copy the memory database `src` to the new file `dst`, consistently even while a node writes to it.

    SQLite's online backup copies the database as one read transaction sees it: every transaction committed
    when it starts (those still in the WAL log included), none half. A writer goes on meanwhile (WAL readers do
    not block it). The copy is written beside `dst`, checked (schema, `quick_check`), flushed to the disk and
    then renamed into place, so `dst` is either a whole, checked memory or absent. `src` is only read.

    Raises:
        CorruptStoreError / SchemaVersionError / MemoryStoreError: `src` is refused (named, left untouched).
        FileExistsError: `dst` (or an SQLite side file of it) exists: a backup never overwrites a file.
    """
    src, dst = Path(src), Path(dst)
    SceneGraphStore(src, None, read_only=True).close()   # a refused source is named before anything is written
    refuse_overwrite(dst, *(dst.with_name(dst.name + s) for s in _SIDE_FILES))
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    def copy_into_tmp(store: SceneGraphStore) -> None:
        for path in (tmp, *(tmp.with_name(tmp.name + s) for s in _SIDE_FILES)):   # an earlier try's copy
            path.unlink(missing_ok=True)
        try:
            store.copy_to(tmp)
        except sqlite3.Error as err:
            raise MemoryStoreError(str(src), f"backup to {dst} failed: {err}") from err

    try:
        read_stably(src, copy_into_tmp)
        copy = SceneGraphStore(tmp, None, read_only=True, check_integrity=True)
        try:
            counts = [copy.count(t) for t in ("places", "objects", "edges")]
        finally:
            copy.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        _place_new_file(tmp, dst)
    finally:
        for path in (tmp, *(tmp.with_name(tmp.name + s) for s in _SIDE_FILES)):
            path.unlink(missing_ok=True)
    return BackupResult(str(dst), dst.stat().st_size, *counts)


def read_stably(path: Path, read: Callable[[SceneGraphStore], T], *, check_integrity: bool = False) -> T:
    """`read(store)` on a read-only store of `path`, made again (up to STABLE_READ_TRIES times) when the file
    changed under an immutable reader; the store is closed either way.

    Raises:
        MemoryStoreError (and the refusals of SceneGraphStore): the file cannot be read, or kept changing.
    """
    for _ in range(STABLE_READ_TRIES):
        store = SceneGraphStore(path, None, read_only=True, check_integrity=check_integrity)
        try:
            out = read(store)
            if not store.changed_under_read():
                return out
        finally:
            store.close()
    raise MemoryStoreError(str(path), "the file kept changing while it was read (a writer opening and closing "
                                      "it); try again")


def _place_new_file(tmp: Path, dst: Path) -> None:
    """Give the finished file `tmp` the name `dst`, which must not exist: a hard link fails on a file created
    there since the backup checked (a rename would replace it); where the file system has no hard links, the
    check is made again just before the rename. The folder is flushed so that the name survives a power cut."""
    try:
        os.link(tmp, dst)
    except FileExistsError:
        refuse_overwrite(dst)
        raise
    except OSError:
        refuse_overwrite(dst)
        os.replace(tmp, dst)
    try:
        fd = os.open(dst.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _blob(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


# ---------------------------------------------------------------------------------------------------------
# keyframe thumbnails as PNG bytes (RGB, 8 bit, no interlace), written and read without extra dependencies


def encode_png(rgb: np.ndarray) -> bytes:
    """Encode an (H, W, 3) uint8 image as PNG bytes (filter 0, zlib level 6)."""
    img = np.ascontiguousarray(rgb, dtype=np.uint8)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"thumbnail must be (H, W, 3) uint8, got shape {img.shape}")
    h, w = img.shape[:2]
    raw = np.concatenate([np.zeros((h, 1), np.uint8), img.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def decode_png(data: bytes) -> np.ndarray:
    """Decode PNG bytes written by `encode_png` (8-bit RGB, filter 0) to an (H, W, 3) uint8 array.

    Raises:
        ValueError: if the bytes are not such a PNG.
    """
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("thumbnail is not PNG data")
    pos, idat, header = 8, [], None
    while pos + 8 <= len(data):
        length, tag = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if tag == b"IHDR":
            if len(body) != 13:
                raise ValueError("thumbnail PNG is damaged (short IHDR chunk)")
            header = struct.unpack(">IIBBBBB", body)
        elif tag == b"IDAT":
            idat.append(body)
        elif tag == b"IEND":
            break
        pos += 12 + length
    if header is None or header[2:] != (8, 2, 0, 0, 0):
        raise ValueError("thumbnail PNG must be 8-bit RGB without interlace")
    w, h = header[0], header[1]
    try:
        raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(h, 1 + w * 3)
    except (zlib.error, ValueError) as err:
        raise ValueError(f"thumbnail PNG is damaged ({err})") from err
    if np.any(raw[:, 0] != 0):
        raise ValueError("thumbnail PNG uses row filters this reader does not support")
    return raw[:, 1:].reshape(h, w, 3).copy()
