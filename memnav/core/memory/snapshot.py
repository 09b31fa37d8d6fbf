"""A read-only look at a stored scene-graph memory: counts, time span, rooms, objects, and a networkx graph.

For the inspection tools (`memnav memory info|show|export`): the database is opened read-only
(`SceneGraphStore(read_only=True)`), so it can be looked at while a memory node is writing to it, and
nothing in it can change (SQLite may leave its empty WAL bookkeeping files, `-wal` and `-shm`, beside a file
that had none; the database file itself is not written). Room adjacency is not stored; as when a memory is
loaded, two rooms are adjacent when a traversability edge joins places of the two. Stamps are the stored ones:
one timeline that only goes forwards across the sessions that wrote the file (a session whose clock restarted is
stored just after the one before it: see memnav.core.memory.scene_graph), so spans count no time between such
sessions.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

from memnav.core.memory.scene_graph import EdgeKind, Layer
from memnav.core.memory.store import LoadedGraph, SceneGraphStore, decode_png, read_stably


@dataclass(frozen=True)
class MemorySnapshot:
    """Everything in a memory database, read once.

    Attributes:
        path: the database file.
        schema_version: schema version written in the file.
        embedding_dim: embedding length written in the file.
        file_bytes: size of the database file plus its WAL log (bytes on disk).
        graph: the stored rows (places as column arrays, objects, rooms, edges).
    """

    path: str
    schema_version: int
    embedding_dim: int
    file_bytes: int
    graph: LoadedGraph

    @property
    def room_adjacency(self) -> set[tuple[int, int]]:
        """Pairs (a < b) of rooms joined by at least one traversability edge between their places."""
        room_of = dict(zip(self.graph.place_ids.tolist(), self.graph.place_rooms.tolist()))
        pairs = set()
        for a, b, kind, _ in self.graph.edges:
            if kind == EdgeKind.TRAVERSABLE:
                ra, rb = room_of.get(a, -1), room_of.get(b, -1)
                if ra >= 0 and rb >= 0 and ra != rb:
                    pairs.add((min(ra, rb), max(ra, rb)))
        return pairs


def read_snapshot(path: str | Path, *, check_integrity: bool = False) -> MemorySnapshot:
    """Read a memory database without writing to it.

    Args:
        path: the `.sqlite` file a memory (node, `memnav eval --lifelong --memory-dir`, ...) wrote.
        check_integrity: also run SQLite's `quick_check` over the whole file.

    Raises:
        MemoryStoreError: the file is missing or cannot be opened.
        CorruptStoreError: the file is not a memnav memory database or is malformed.
        SchemaVersionError: the file was written by a newer memnav.
    """
    path = Path(path)

    def read(store: SceneGraphStore) -> tuple[LoadedGraph, int, int]:
        return store.load(), store.schema_version(), int(store.embedding_dim or 0)

    graph, version, dim = read_stably(path, read, check_integrity=check_integrity)
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return MemorySnapshot(str(path), version, dim, size, graph)


def read_thumbnails(path: str | Path, place_ids: list[int]) -> dict[int, np.ndarray]:
    """Keyframe thumbnails (H, W, 3 uint8) of these places, read-only; places without one are left out."""

    def read(store: SceneGraphStore) -> dict[int, bytes]:
        return {int(pid): blob for pid in place_ids if (blob := store.thumbnail(int(pid)))}

    return {pid: decode_png(blob) for pid, blob in read_stably(Path(path), read).items()}


def _iso(stamp_ns: int) -> str:
    """A stamp as seconds; memories stamped with wall-clock time also get a UTC date."""
    from datetime import datetime, timezone

    seconds = stamp_ns / 1e9
    if seconds > 1e9:  # after 2001: a wall-clock stamp, not simulated time from 0
        return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="seconds")
    return f"{seconds:.3f} s"


def summarize(snap: MemorySnapshot) -> dict:
    """Counts and extents of a memory, as plain JSON-ready values.

    Keys: file, schema_version, embedding_dim, file_bytes, places, objects, rooms, edges (per kind), visits
    (total and per place: mean, max), first_seen / last_seen (stamps in ns and readable), span_s, extent_m
    (min/max x and y of the places), places_per_room (room id -> count), objects_by_label (label -> count),
    room_adjacency (pairs), isolated_places (places with no traversability edge).
    """
    g = snap.graph
    n = len(g.place_ids)
    kinds = Counter(EdgeKind(kind).name.lower() for _, _, kind, _ in g.edges)
    stamps = g.place_first_seen_ns.tolist() + [o.first_seen_ns for o in g.objects]
    lasts = g.place_last_seen_ns.tolist() + [o.last_seen_ns for o in g.objects]
    linked = {a for a, _, k, _ in g.edges if k == EdgeKind.TRAVERSABLE} | {
        b for _, b, k, _ in g.edges if k == EdgeKind.TRAVERSABLE}
    per_room = Counter(int(r) for r in g.place_rooms.tolist() if r >= 0)
    out: dict = {
        "file": snap.path,
        "schema_version": snap.schema_version,
        "embedding_dim": snap.embedding_dim,
        "file_bytes": snap.file_bytes,
        "places": n,
        "objects": len(g.objects),
        "rooms": len(g.rooms),
        # the database stores these two kinds; containment and room adjacency follow from room_id columns
        "edges": {k.name.lower(): kinds.get(k.name.lower(), 0) for k in (EdgeKind.TRAVERSABLE,
                                                                          EdgeKind.OBSERVED_FROM)},
        "places_in_a_room": int(sum(per_room.values())),
        "visits_total": int(g.place_visits.sum()) if n else 0,
        "visits_per_place_mean": round(float(g.place_visits.mean()), 3) if n else None,
        "visits_per_place_max": int(g.place_visits.max()) if n else None,
        "first_seen_ns": min(stamps) if stamps else None,
        "last_seen_ns": max(lasts) if lasts else None,
        "first_seen": _iso(min(stamps)) if stamps else None,
        "last_seen": _iso(max(lasts)) if lasts else None,
        "span_s": round((max(lasts) - min(stamps)) / 1e9, 3) if stamps else None,
        "extent_m": ({"x_min": round(float(g.place_poses[:, 0].min()), 3),
                      "x_max": round(float(g.place_poses[:, 0].max()), 3),
                      "y_min": round(float(g.place_poses[:, 1].min()), 3),
                      "y_max": round(float(g.place_poses[:, 1].max()), 3)} if n else None),
        "places_per_room": {str(r): c for r, c in sorted(per_room.items())},
        "objects_by_label": dict(sorted(Counter(o.label for o in g.objects).items())),
        "room_adjacency": sorted([list(p) for p in snap.room_adjacency]),
        "isolated_places": int(sum(1 for pid in g.place_ids.tolist() if pid not in linked)) if n > 1 else 0,
        "next_node_id": g.next_node_id,
    }
    return out


def to_networkx(snap: MemorySnapshot, *, embeddings: bool = False) -> nx.Graph:
    """The memory as a networkx graph whose attributes are plain str / int / float (GraphML-safe).

    Nodes carry `layer` (place / object / room) and their stored fields (`x_m`, `y_m`, `yaw_rad`,
    `first_seen_ns`, `last_seen_ns`, `visits`, `room_id` for places; `class_id`, `instance_id`, `label`,
    `z_m`, `observations` for objects); edges carry `kind` (traversable, observed_from, place_in_room,
    object_in_room, room_adjacent) and `distance_m` where stored. With `embeddings`, place and object nodes
    also carry `embedding` as a list of floats (for JSON; GraphML cannot hold lists).
    """
    g = snap.graph
    out = nx.Graph(memnav_schema_version=snap.schema_version, embedding_dim=snap.embedding_dim)
    for i, pid in enumerate(g.place_ids.tolist()):
        x, y, yaw = (float(v) for v in g.place_poses[i])
        attrs = {"layer": Layer.PLACE.value, "x_m": x, "y_m": y, "yaw_rad": yaw,
                 "first_seen_ns": int(g.place_first_seen_ns[i]), "last_seen_ns": int(g.place_last_seen_ns[i]),
                 "visits": int(g.place_visits[i]), "room_id": int(g.place_rooms[i])}
        if embeddings:
            attrs["embedding"] = [round(float(v), 6) for v in g.place_embeddings[i]]
        out.add_node(pid, **attrs)
    for o in g.objects:
        attrs = {"layer": Layer.OBJECT.value, "class_id": int(o.class_id),
                 "instance_id": -1 if o.instance_id is None else int(o.instance_id), "label": str(o.label),
                 "x_m": float(o.position_m[0]), "y_m": float(o.position_m[1]), "z_m": float(o.position_m[2]),
                 "first_seen_ns": int(o.first_seen_ns), "last_seen_ns": int(o.last_seen_ns),
                 "observations": int(o.observation_count), "room_id": -1 if o.room_id is None else int(o.room_id)}
        if embeddings and o.embedding is not None:
            attrs["embedding"] = [round(float(v), 6) for v in o.embedding]
        out.add_node(o.id, **attrs)
    for rid, x, y in g.rooms:
        out.add_node(rid, layer=Layer.ROOM.value, x_m=float(x), y_m=float(y))
    for a, b, kind, dist in g.edges:
        attrs = {"kind": EdgeKind(kind).name.lower()}
        if dist is not None and math.isfinite(dist):
            attrs["distance_m"] = float(dist)
        out.add_edge(a, b, **attrs)
    for i, pid in enumerate(g.place_ids.tolist()):
        if g.place_rooms[i] >= 0:
            out.add_edge(pid, int(g.place_rooms[i]), kind=EdgeKind.PLACE_IN_ROOM.name.lower())
    for o in g.objects:
        if o.room_id is not None and o.room_id >= 0:
            out.add_edge(o.id, int(o.room_id), kind=EdgeKind.OBJECT_IN_ROOM.name.lower())
    for a, b in sorted(snap.room_adjacency):
        out.add_edge(a, b, kind=EdgeKind.ROOM_ADJACENT.name.lower())
    return out
