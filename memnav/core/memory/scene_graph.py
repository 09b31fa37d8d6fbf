"""Long-term memory: a layered scene graph of places, objects and rooms, persisted to SQLite.

Layers and edges of `SceneGraphMemory.graph` (a `networkx.Graph`; node attribute `layer`, edge attribute
`kind`, traversability edges also carry `distance_m`):

* place nodes: keyframes along the robot's paths (pose, unit embedding, PNG thumbnail, first/last seen
  stamp, visit count); place-place TRAVERSABLE edges with the distance travelled between them.
* object nodes: detections from any source (simulator semantic ids now, a detector later) with class id,
  optional instance id, 3D position and optional embedding; place-object OBSERVED_FROM edges.
* room nodes: places grouped by connectivity (Louvain communities of the traversability graph weighted by
  appearance similarity); PLACE_IN_ROOM / OBJECT_IN_ROOM containment and ROOM_ADJACENT edges.

Frames: poses passed in are odometry poses. The memory keeps an SE(2) correction (memory <- odometry),
re-estimated at every loop closure, and stores places in the corrected "memory frame". Under drift the
two frames diverge; a revisit recognised by appearance re-anchors them.

Bounded growth: an observation creates a place only if it is novel in pose (farther than
`new_place_distance_m` or turned more than `new_place_angle_deg` from every nearby place) or in appearance
(cosine similarity below `new_place_similarity`) and is not a recognised revisit (loop closure);
consolidation merges redundant places; a capacity policy forgets the least valuable places beyond
`max_places`.

Durability: each insert is committed in its own SQLite transaction (automatic consolidation and
forgetting commit in theirs), so a killed process loses at most the insert in flight (see
memnav.core.memory.store); a rejected call leaves the memory and the file unchanged. Time is never read
here: stamps come in.

Sessions and stamps: a session is one opening of the memory (an object of this class). Within a session stamps
never go backwards (an older stamp is refused). Across sessions they may: a simulator restarted at 0, a replayed
bag, ROS sim time. The memory keeps one timeline that only goes forwards, the stamps stored in the file: the
first stamp of a session that is not later than the last one stored starts the session just after it, and the
session's stamps are stored shifted by that `stamp_offset_ns` (0 when the session's clock starts ahead, e.g. a
wall clock: stored stamps are then the caller's). No time passes between such sessions (nothing knows how
much did). What the memory reports (`place`, `objects`, `stats`, `place_values`, loop-closure candidates) is in
the session's own clock, so ages (its stamp minus a place's last_seen_ns) stay right; places from an earlier
session may then report stamps before the session's first (negative ones too). In a session whose clock started
behind (offset > 0), a place last seen in an earlier session is never "part of the current traverse"
(`loop_closure_min_age_s`): a restarted robot may relocalise against the places it saw just before the restart;
with offset 0 the stamps tell the real time between sessions, and the age rule applies as within one. Readers of
the file (memnav.core.memory.snapshot) see the stored timeline.
Not thread-safe: one caller at a time.
"""
from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from enum import Enum, IntEnum
from pathlib import Path
from typing import Self

import networkx as nx
import numpy as np

from memnav.core.memory.index import (
    _INT64_MAX,
    EmbeddingIndex,
    IndexMode,
    InvalidInputError,
    check_embedding,
    check_embeddings,
    check_pose,
    check_stamp,
)
from memnav.core.memory.store import (
    CorruptStoreError,
    MemoryStoreError,
    ObjectRow,
    SceneGraphStore,
    decode_png,
    encode_png,
)
from memnav.core.types import Pose2D, wrap_angle


class Layer(Enum):
    """Which layer of the scene graph a node belongs to."""

    PLACE = "place"
    OBJECT = "object"
    ROOM = "room"


class EdgeKind(IntEnum):
    """Edge types of the scene graph (the integer is the code stored in the database)."""

    TRAVERSABLE = 1     # place - place, with distance_m
    OBSERVED_FROM = 2   # place - object
    PLACE_IN_ROOM = 3   # place - room
    OBJECT_IN_ROOM = 4  # object - room
    ROOM_ADJACENT = 5   # room - room


class InsertKind(Enum):
    """What `insert_observation` did with an observation."""

    NEW_PLACE = "new_place"          # novel in pose or appearance: a place node was created
    UPDATED_PLACE = "updated_place"  # matched a nearby place (pose and appearance): that place was updated
    LOOP_CLOSURE = "loop_closure"    # recognised an older place by appearance (+ geometry) under drift


@dataclass
class SceneGraphConfig:
    """Settings of the scene-graph memory.

    Attributes:
        embedding_dim: length of place/object embeddings.
        new_place_distance_m: an observation farther than this from every place (memory frame) is a new place, m.
        new_place_angle_deg: ... or turned more than this from every nearby place, degrees.
        new_place_similarity: ... or less cosine-similar than this to the matching nearby place.
        loop_closure_similarity: cosine similarity an older place must reach to be recognised as a revisit.
        loop_closure_min_age_s: places seen within this many seconds are part of the current traverse and are
            never loop-closure candidates, s.
        loop_closure_max_distance_m: geometric gate: a candidate farther than this from the drift-corrected
            position is rejected (bounds the odometry drift tolerated; inf trusts appearance alone), m.
        loop_closure_candidates: how many retrieval hits are checked per observation.
        loop_closure_nprobe: IVF lists scanned by the loop-closure search (top-1 matters, so fewer than retrieval).
        loop_closure_correction_gain: upper bound on the fraction of the pose residual applied to the odometry
            correction at a loop closure (the fraction itself comes from the drift model below: how uncertain
            the correction is against how far from a place's stored pose the robot may recognise it). The
            closure that relocalises an unlocalised memory applies the whole residual.
        odometry_drift_per_m: odometry position error, std in meters after 1 m travelled; it grows with the
            square root of the distance (a random walk). With place_position_std_m it sets how far from the
            predicted position a loop closure may be (`loop_closure_gate_sigmas` standard deviations, at most
            loop_closure_max_distance_m) and how much of the residual a closure corrects. A recognised view
            outside that gate is a look-alike, not a revisit. m per sqrt(m).
        odometry_yaw_drift_deg_per_m: odometry heading error, std in degrees after 1 m travelled (square-root
            growth as above), deg per sqrt(m).
        place_position_std_m: how far from a place's stored position the robot typically is when it recognises
            the place (places are new_place_distance_m apart), m.
        place_yaw_std_deg: ... and how far turned from the place's stored heading, degrees.
        loop_closure_gate_sigmas: a loop-closure candidate must lie within this many standard deviations of
            the predicted position (drift and place spread together).
        start_localised: the odometry frame is the memory's frame from the start (a robot localised in a fixed
            map frame; the simulator, whose odometry stays in the house's frame across episodes): a memory
            loaded from a file is then tracked with the drift gate from the first observation on. False (the
            default): odometry restarts with each run, so a loaded memory starts unlocalised and relocalises
            from loop closures that may lie anywhere (see relocalisation_radius_m). A new, empty memory is always
            localised: its frame is this odometry's.
        relocalisation_confirmations: an unlocalised memory (loaded from a file, or after `relocalise()`) takes
            its frame from appearance only when this many loop-closure candidates, seen in different
            observations and at different places (a place and one consolidation merged into it count as one),
            agree on where the robot is (within loop_closure_gate_sigmas x sqrt(2) x place_position_std_m and
            as many times place_yaw_std_deg), seen at least relocalisation_baseline_m apart; 1 trusts the first
            candidate. Look-alike views elsewhere in the house rarely agree with each other once the robot has
            moved between them (turning on the spot in a room like another, every view agrees with the other
            room).
        relocalisation_baseline_m: how far odometry must have moved the robot between two agreeing
            relocalisation votes, m.
        relocalisation_radius_m: how far from where odometry puts the robot an unlocalised memory's loop closures
            may lie (a loaded memory, and `relocalise()` without within_m), m; 0 = anywhere (the default: a
            rebooted robot's odometry starts wherever it stands).
        max_edge_distance_m: consecutive places farther apart than this are not linked (a relocalisation jump), m.
        embedding_average_max_visits: a place's embedding is the mean of at most this many recent visits, and an
            object's of at most this many recent observations.
        merge_distance_m: consolidation merges places closer than this (memory frame) ..., m.
        merge_similarity: ... whose embeddings are at least this cosine-similar.
        consolidate_every: run `consolidate()` automatically after this many inserts (0 = only when called).
        max_places: capacity; beyond it the least valuable places are forgotten (0 = unbounded).
        forget_batch_fraction: when over capacity, forget down to (1 - this) * max_places at once (amortises
            the scoring pass).
        forget_half_life_s: age at which a place's value halves in the forgetting score, s.
        room_resolution: Louvain resolution of room segmentation (higher: more, smaller rooms).
        room_segmentation_max_places: `consolidate(full=True)` re-segments all rooms only up to this many places
            (routine consolidation re-segments just the rooms around changed places).
        object_association_distance_m: a detection without instance id joins the nearest object of its class
            within this distance; consolidation merges objects without instance id of one class that lie this
            close, m.
        thumbnail_size_px: keyframe thumbnails are downscaled to fit in this many pixels per side, px.
        index_exact_max_size: exact top-k retrieval up to this many places; an IVF index beyond.
        index_nprobe: IVF lists scanned per retrieval query.
        db_path: SQLite file; None keeps the memory in RAM only.
        db_sync_full: fsync each commit (power-loss safe) instead of WAL synchronous=NORMAL (crash safe).
        db_check_integrity: run SQLite quick_check when opening an existing file (reads the whole file).
        seed: seed of the index training and room segmentation.
    """

    embedding_dim: int = 256
    new_place_distance_m: float = 1.0
    new_place_angle_deg: float = 30.0
    new_place_similarity: float = 0.9
    loop_closure_similarity: float = 0.85
    loop_closure_min_age_s: float = 30.0
    loop_closure_max_distance_m: float = 10.0
    loop_closure_candidates: int = 5
    loop_closure_nprobe: int = 8
    loop_closure_correction_gain: float = 1.0
    odometry_drift_per_m: float = 0.2
    odometry_yaw_drift_deg_per_m: float = 3.0
    place_position_std_m: float = 0.5
    place_yaw_std_deg: float = 15.0
    loop_closure_gate_sigmas: float = 3.0
    start_localised: bool = False
    relocalisation_confirmations: int = 2
    relocalisation_radius_m: float = 0.0
    relocalisation_baseline_m: float = 1.0
    max_edge_distance_m: float = 3.0
    embedding_average_max_visits: int = 20
    merge_distance_m: float = 0.75
    merge_similarity: float = 0.92
    consolidate_every: int = 200
    max_places: int = 0
    forget_batch_fraction: float = 0.01
    forget_half_life_s: float = 7 * 24 * 3600.0
    room_resolution: float = 1.0
    room_segmentation_max_places: int = 20_000
    object_association_distance_m: float = 0.5
    thumbnail_size_px: int = 32
    index_exact_max_size: int = 20_000
    index_nprobe: int = 16
    db_path: str | None = None
    db_sync_full: bool = False
    db_check_integrity: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        positive = ("embedding_dim", "new_place_distance_m", "new_place_angle_deg", "loop_closure_candidates",
                    "loop_closure_nprobe", "max_edge_distance_m", "embedding_average_max_visits",
                    "merge_distance_m", "forget_half_life_s", "room_resolution", "object_association_distance_m",
                    "thumbnail_size_px", "index_exact_max_size", "index_nprobe", "loop_closure_max_distance_m",
                    "place_position_std_m", "place_yaw_std_deg", "loop_closure_gate_sigmas",
                    "relocalisation_confirmations")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not value > 0:  # NaN fails too
                raise ValueError(f"SceneGraphConfig.{name} must be > 0, got {value!r}")
        for name in ("new_place_similarity", "loop_closure_similarity", "merge_similarity"):
            value = getattr(self, name)
            if not -1.0 <= value <= 1.0:
                raise ValueError(f"SceneGraphConfig.{name} must be a cosine similarity in [-1, 1], got {value!r}")
        for name in ("loop_closure_min_age_s", "consolidate_every", "max_places", "room_segmentation_max_places",
                     "odometry_drift_per_m", "odometry_yaw_drift_deg_per_m", "relocalisation_radius_m",
                     "relocalisation_baseline_m"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"SceneGraphConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0.0 < self.loop_closure_correction_gain <= 1.0:
            raise ValueError("SceneGraphConfig.loop_closure_correction_gain must be in (0, 1], "
                             f"got {self.loop_closure_correction_gain!r}")
        if not 0.0 < self.forget_batch_fraction < 1.0:
            raise ValueError("SceneGraphConfig.forget_batch_fraction must be in (0, 1), "
                             f"got {self.forget_batch_fraction!r}")

    @classmethod
    def from_dict(cls, values: dict) -> SceneGraphConfig:
        """Build from a parameter dict (e.g. a YAML section); unknown keys are an error naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"SceneGraphConfig: unknown keys {unknown}")
        return cls(**values)

    @property
    def new_place_angle_rad(self) -> float:
        return math.radians(self.new_place_angle_deg)


@dataclass(frozen=True)
class ObjectDetection:
    """One detected object instance in an observation.

    Attributes:
        class_id: semantic class (simulator semantic category or detector class index).
        position_m: (x, y, z) in the odometry frame of the observation, meters.
        instance_id: a stable instance id when the source has one (the simulator's semantic id); None for a
            detector, in which case the detection is associated to the nearest object of its class.
        label: human-readable class name.
        embedding: optional appearance embedding (embedding_dim values).
    """

    class_id: int
    position_m: tuple[float, float, float]
    instance_id: int | None = None
    label: str = ""
    embedding: np.ndarray | None = None


@dataclass(frozen=True)
class InsertResult:
    """Outcome of `insert_observation`.

    Attributes:
        kind: new place, updated place, or loop closure.
        node_id: the place node the observation now belongs to.
        similarity: cosine similarity to the matched place before its update; for a new place, to the most
            similar place found (0.0 if none).
        object_ids: object node ids of the observation's detections, in input order.
        merged_places: places merged by an automatic consolidation during this call.
        forgotten_places: places forgotten by the capacity policy during this call.
    """

    kind: InsertKind
    node_id: int
    similarity: float
    object_ids: tuple[int, ...] = ()
    merged_places: int = 0
    forgotten_places: int = 0


@dataclass(frozen=True)
class Retrieval:
    """One retrieval hit: a place node, its cosine similarity to the query, and its memory-frame pose."""

    node_id: int
    similarity: float
    pose: Pose2D


@dataclass(frozen=True)
class LoopClosureCandidate:
    """What a geometric verifier sees: the current observation and one place proposed by appearance.

    Attributes:
        stamp_ns: observation stamp as given, ns.
        odometry_pose: the observation's odometry pose.
        predicted_pose: that pose mapped into the memory frame by the current drift correction.
        embedding: the observation's unit embedding.
        node_id: candidate place node.
        place_pose: the candidate's stored (memory-frame) pose.
        similarity: cosine similarity between observation and place embeddings.
    """

    stamp_ns: int
    odometry_pose: Pose2D
    predicted_pose: Pose2D
    embedding: np.ndarray
    node_id: int
    place_pose: Pose2D
    similarity: float


LoopClosureVerifier = Callable[[LoopClosureCandidate], bool]


@dataclass(frozen=True)
class PlaceInfo:
    """A copy of one place node's data (stamps in the session's clock: see the module docstring)."""

    node_id: int
    pose: Pose2D
    first_seen_ns: int
    last_seen_ns: int
    visit_count: int
    room_id: int | None
    embedding: np.ndarray


@dataclass(frozen=True)
class PathResult:
    """A shortest path over traversability edges: node ids from start to goal and its length, m."""

    node_ids: tuple[int, ...]
    length_m: float


@dataclass(frozen=True)
class ConsolidationReport:
    """What `consolidate()` changed."""

    merged_places: int
    rooms: int
    merged_objects: int = 0


@dataclass(frozen=True)
class MemoryStats:
    """Sizes and settings of a memory, for logs and benchmarks (last_stamp_ns: the last stamp accepted, or stored
    before this session's first one, in the session's clock: see the module docstring)."""

    places: int
    objects: int
    rooms: int
    traversable_edges: int
    observed_from_edges: int
    graph_nodes: int
    graph_edges: int
    index_mode: IndexMode
    index_lists: int
    index_bytes: int
    db_path: str
    schema_version: int
    last_stamp_ns: int | None


# ---------------------------------------------------------------------------------------------------------
# internal containers


class _PlaceColumns:
    """Place attributes as slot-indexed column arrays (vectorised scoring; ~70 bytes per place)."""

    def __init__(self) -> None:
        self.cap = 0
        self.hi = 0                              # slots [0, hi) have been used
        self.free: list[int] = []
        self.slot_of: dict[int, int] = {}        # node id -> slot
        self.ids = np.zeros(0, np.int64)
        self.pose = np.zeros((0, 3), np.float64)  # x_m, y_m, yaw_rad (memory frame)
        self.first_ns = np.zeros(0, np.int64)
        self.last_ns = np.zeros(0, np.int64)
        self.visits = np.zeros(0, np.int64)
        self.room = np.zeros(0, np.int64)         # -1: none
        self.redundancy = np.zeros(0, np.float32)  # max similarity to a traversability neighbour
        self.has_thumb = np.zeros(0, bool)
        self.alive = np.zeros(0, bool)

    def _grow(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(need, 2 * self.cap, 64)
        for name in ("ids", "pose", "first_ns", "last_ns", "visits", "room", "redundancy", "has_thumb", "alive"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: self.cap] = old
            setattr(self, name, new)
        self.cap = cap

    def alloc(self, count: int) -> np.ndarray:
        """Reserve `count` slots (reusing freed ones for single allocations)."""
        if count == 1 and self.free:
            return np.array([self.free.pop()], np.int64)
        self._grow(self.hi + count)
        slots = np.arange(self.hi, self.hi + count, dtype=np.int64)
        self.hi += count
        return slots

    def release(self, slot: int) -> None:
        del self.slot_of[int(self.ids[slot])]
        self.alive[slot] = False
        self.free.append(slot)

    def alive_slots(self) -> np.ndarray:
        return np.flatnonzero(self.alive[: self.hi])


class _SpatialGrid:
    """Hash grid of place slots by memory-frame position (queries with radius <= cell size)."""

    def __init__(self, cell_m: float) -> None:
        self.cell_m = cell_m
        self.cells: dict[int, list[int]] = {}

    def _key(self, ix: int, iy: int) -> int:
        return (ix << 32) ^ (iy & 0xFFFFFFFF)

    def _cell(self, x: float, y: float) -> tuple[int, int]:
        return math.floor(x / self.cell_m), math.floor(y / self.cell_m)

    def add(self, slot: int, x: float, y: float) -> None:
        self.cells.setdefault(self._key(*self._cell(x, y)), []).append(slot)

    def remove(self, slot: int, x: float, y: float) -> None:
        key = self._key(*self._cell(x, y))
        members = self.cells[key]
        members.remove(slot)
        if not members:
            del self.cells[key]

    def near(self, x: float, y: float) -> list[int]:
        """Slots in the 3 x 3 cells around (x, y): a superset of those within one cell size."""
        ix, iy = self._cell(x, y)
        out: list[int] = []
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                members = self.cells.get(self._key(ix + dx, iy + dy))
                if members:
                    out.extend(members)
        return out


@dataclass
class _Hypothesis:
    """Where an unlocalised memory might be: the correction one loop-closure candidate implies."""

    correction: np.ndarray   # memory <- odometry (tx_m, ty_m, theta_rad)
    support: int             # agreeing candidates, at different places and observations
    places: frozenset[int]   # node ids of the places behind them (ids are never reused, unlike index slots;
                             # a place merged into another passes its votes on to it: see _merge)
    stamp_ns: int            # the last observation that supported it
    odom_xy: tuple[float, float]   # where odometry put the robot at that observation


@dataclass
class _Decision:
    kind: InsertKind
    slot: int              # -1 for a new place
    similarity: float
    hypotheses: tuple[_Hypothesis, ...] = ()   # new relocalisation votes of an unlocalised memory


def _mean_position(a, na: int, b, nb: int) -> tuple[float, float, float]:
    """Position of an object seen na times at `a` and nb times at `b` (observation-weighted mean)."""
    return tuple(((np.asarray(a) * na + np.asarray(b) * nb) / (na + nb)).tolist())


def _mean_embedding(kept: np.ndarray | None, n_kept: int, new: np.ndarray, n_new: int, max_n: int) -> np.ndarray:
    """Unit mean of a place's or object's embedding (None: none yet) and a new one, each weighted by its visits or
    observations, at most `max_n` (SceneGraphConfig.embedding_average_max_visits)."""
    mean = new * min(n_new, max_n)
    if kept is not None:
        mean = kept * min(n_kept, max_n) + mean
    return (mean / np.linalg.norm(mean)).astype(np.float32)


def _se2_apply(corr: np.ndarray, pose: Pose2D) -> Pose2D:
    """Map an odometry pose into the memory frame with correction (tx, ty, theta)."""
    c, s = math.cos(corr[2]), math.sin(corr[2])
    return Pose2D(c * pose.x_m - s * pose.y_m + corr[0], s * pose.x_m + c * pose.y_m + corr[1],
                  wrap_angle(pose.yaw_rad + corr[2]))


def _correction_between(odom: Pose2D, memory: Pose2D) -> np.ndarray:
    """The correction (tx, ty, theta) that maps odometry pose `odom` onto memory-frame pose `memory`."""
    theta = wrap_angle(memory.yaw_rad - odom.yaw_rad)
    c, s = math.cos(theta), math.sin(theta)
    return np.array([memory.x_m - (c * odom.x_m - s * odom.y_m), memory.y_m - (s * odom.x_m + c * odom.y_m), theta])


_MAX_HYPOTHESES = 32   # relocalisation votes kept while unlocalised (the best supported, then the newest)

# ---------------------------------------------------------------------------------------------------------


class SceneGraphMemory:
    """Layered scene-graph memory with SQLite persistence (see the module docstring).

    Args:
        config: settings; `config.db_path` selects the database file (None: RAM only). An existing file is
            loaded, so the memory survives restarts.
        loop_closure_verifier: optional geometric check called for each appearance-based loop-closure
            candidate (e.g. depth/feature registration); return False to reject it.

    Raises:
        CorruptStoreError, SchemaVersionError, MemoryStoreError: the database file cannot be used (it is not
            modified).
    """

    def __init__(self, config: SceneGraphConfig | None = None, *,
                 loop_closure_verifier: LoopClosureVerifier | None = None) -> None:
        self.config = cfg = config if config is not None else SceneGraphConfig()
        self._verifier = loop_closure_verifier
        self._store = SceneGraphStore(cfg.db_path, cfg.embedding_dim, sync_full=cfg.db_sync_full,
                                      check_integrity=cfg.db_check_integrity)
        self.graph = nx.Graph()
        self._places = _PlaceColumns()
        # trained in node id order (slots are reused, so their order differs in the same memory reopened)
        self._index = EmbeddingIndex(cfg.embedding_dim, exact_max_size=cfg.index_exact_max_size,
                                     nprobe=cfg.index_nprobe, seed=cfg.seed,
                                     key_order=lambda slots: self._places.ids[slots])
        self._index_saved = self._index.generation   # the index training the database holds (see _transaction)
        self._grid = _SpatialGrid(max(cfg.new_place_distance_m, cfg.merge_distance_m))
        self._objects: dict[int, ObjectRow] = {}
        self._object_by_instance: dict[int, int] = {}
        self._objects_by_class: dict[int, set[int]] = {}
        self._room_sums: dict[int, list[float]] = {}   # room id -> [sum_x, sum_y, place count]
        self._room_links: Counter[tuple[int, int]] = Counter()  # cross-room traversability edge counts
        self._next_id = 0
        self._last_stamp_ns: int | None = None   # the last stamp stored or accepted, on the stored timeline
        # this session's clock on the stored timeline (see the module docstring): stored = given + offset; both
        # None until the session's first accepted stamp, which starts the session at _session_start_ns
        self._stamp_offset_ns: int | None = None
        self._session_start_ns: int | None = None
        # tracking state (not persisted: odometry restarts with the process)
        self._prev_slot = -1
        self._correction = np.zeros(3)           # memory <- odometry: tx_m, ty_m, theta_rad
        # variances of that correction (position m^2, heading rad^2); inf = not localised yet (see
        # SceneGraphConfig.start_localised), set in _load
        self._correction_var = np.zeros(2)
        self._unlocalised_gate_m = cfg.relocalisation_radius_m or math.inf   # how far unlocalised closures may be
        self._hypotheses: list[_Hypothesis] = []   # relocalisation votes while unlocalised
        # ids of the places and objects created since the last relocalise() (or the start): stored through the
        # current correction, they are in a stale frame while the memory is unlocalised, and move with it
        self._frame_places: set[int] = set()
        self._frame_objects: set[int] = set()
        self._last_odom: Pose2D | None = None
        self._inserts_since_consolidation = 0
        self._dirty: set[int] = set()
        self.persist_error: str | None = None   # why the memory stopped writing to its file (keep_in_ram)
        try:
            self._load()
        except BaseException:
            self._store.close()
            raise

    @classmethod
    def from_config(cls, config: SceneGraphConfig, *,
                    loop_closure_verifier: LoopClosureVerifier | None = None) -> SceneGraphMemory:
        return cls(config, loop_closure_verifier=loop_closure_verifier)

    @classmethod
    def open(cls, path: str | Path, config: SceneGraphConfig | None = None, *,
             loop_closure_verifier: LoopClosureVerifier | None = None) -> SceneGraphMemory:
        """Open (or create) the memory stored at `path`, with `config` for every other setting."""
        cfg = replace(config if config is not None else SceneGraphConfig(), db_path=str(path))
        return cls(cfg, loop_closure_verifier=loop_closure_verifier)

    def close(self) -> tuple[int, int]:
        """Close the database. Every change is already committed, so there is nothing to save.

        A memory still unlocalised (loaded, or after `relocalise()`, and never relocalised since) first forgets
        the places and objects it stored meanwhile (`held_back`): they lie in an odometry frame nothing ties to the
        memory's, and a later run could relocalise against them instead of the memory's own places. (They are in
        the file until then: a process killed before closing leaves them there.) A localised memory first folds
        together objects stored twice (`_merge_objects`: a class-only detector saw the same thing before and
        after the memory relocalised).

        Returns:
            (places, objects) forgotten because the memory closed unlocalised: `held_back` just before."""
        stale: list[int] = []
        objects: list[int] = []
        try:
            if not self.localised:
                stale = [self._places.slot_of[n] for n in self._frame_places if n in self._places.slot_of]
                objects = [o for o in self._frame_objects if o in self._objects]
                if stale or objects:
                    with self._transaction():
                        for slot in stale:
                            self._remove_place(slot, bypass=False)
                        for oid in objects:
                            self._remove_object(oid)
            elif self._frame_objects:
                with self._transaction():     # objects seen twice before and after relocalising: one
                    self._merge_objects()
        finally:
            self._frame_places, self._frame_objects = set(), set()
            self._store.close()
        return len(stale), len(objects)

    @property
    def held_back(self) -> tuple[int, int]:
        """(places, objects) that `close()` would forget now: those stored since the memory was loaded or last
        `relocalise()`d while it is still unlocalised (they are committed to the file, but lie in an odometry
        frame nothing ties to the memory's yet). They are kept, moved into the memory's frame, once it
        relocalises (agreeing loop closures, or `set_pose`). (0, 0) when localised."""
        if self.localised:
            return 0, 0
        return (sum(n in self._places.slot_of for n in self._frame_places),
                sum(o in self._objects for o in self._frame_objects))

    @property
    def stamp_offset_ns(self) -> int:
        """How much later than given this session's stamps are stored, ns (see the module docstring): 0 unless
        its clock started at or behind the last stamp an earlier session stored; 0 before its first stamp."""
        return self._stamp_offset_ns or 0

    def _session_stamp(self, stamp_ns: object, field: str = "stamp_ns") -> tuple[int, int]:
        """A given stamp on the stored timeline, and this session's offset (fixed by its first stamp).

        Raises:
            InvalidInputError: not an int64 number of ns, older than the session's last accepted stamp, or past
                the int64 range once shifted.
        """
        offset = self._stamp_offset_ns
        if offset is None:
            stamp = check_stamp(stamp_ns, None, field)
            last = self._last_stamp_ns
            offset = 0 if last is None or stamp > last else last + 1 - stamp   # a new session: just after
        else:
            stamp = check_stamp(stamp_ns, self._last_stamp_ns - offset, field)
        if offset and stamp + offset > _INT64_MAX:
            raise InvalidInputError(field, f"{stamp} is past the int64 range of ns once shifted by this session's "
                                           f"stamp_offset_ns {offset}")
        return stamp + offset, offset

    def _begin_session(self, stamp: int, offset: int) -> None:
        """An observation on the stored timeline at `stamp` was accepted: the session starts if it had not."""
        if self._stamp_offset_ns is None:
            self._stamp_offset_ns, self._session_start_ns = offset, stamp

    def keep_in_ram(self, why: str) -> None:
        """Stop writing to the database file and go on in RAM, after a write to it failed (a full disk, a file
        gone read-only, ...; `insert_observation` raised MemoryStoreError, or called this itself with
        keep_in_ram_on_failure).

        The file keeps its last commit: SQLite rolled the failed transaction back, and nothing is written to it
        any more. The graph in RAM keeps everything, the failed observation's changes included, and takes every
        later change (an in-memory SQLite store stands in for the file), so a robot goes on navigating with its
        memory for the rest of the run; what it learns from the failure on is not saved. Keyframe thumbnails
        stored in the file before are no longer read (`thumbnail` gives None for them). `persist_error` keeps
        `why`. A memory already in RAM only is left as it is.
        """
        if self.persist_error is not None or self._store.path == ":memory:":
            return
        old, self._store = self._store, SceneGraphStore(None, self.config.embedding_dim)
        self._index_saved = -1
        self.persist_error = why
        try:
            old.close()
        except sqlite3.Error:   # closing after a failed write: nothing is left to keep
            pass

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """The store's transaction, which also stores the index's IVF training when it changed (retrained, or
        back to exact mode) before committing, so that the memory reopened searches the same lists."""
        with self._store.transaction():
            yield
            if self._index.generation != self._index_saved:
                self._store.set_index_training(self._index.training)
                self._index_saved = self._index.generation

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- loading ----------------------------------------------------------------------------------------

    def _load(self) -> None:
        data = self._store.load()
        self._next_id = data.next_node_id
        n = len(data.place_ids)
        pl = self._places
        if n:
            slots = pl.alloc(n)
            pl.ids[slots] = data.place_ids
            pl.pose[slots] = data.place_poses
            pl.first_ns[slots] = data.place_first_seen_ns
            pl.last_ns[slots] = data.place_last_seen_ns
            pl.visits[slots] = data.place_visits
            pl.room[slots] = data.place_rooms
            pl.alive[slots] = True
            pl.slot_of.update(zip(data.place_ids.tolist(), slots.tolist()))
            try:
                self._index.restore(slots, data.place_embeddings, data.index_training)
            except ValueError as err:
                raise CorruptStoreError(self._store.path, f"stored index training is unusable: {err}") from err
            stored, now = data.index_training, self._index.training
            same = (stored is None and now is None) or (
                stored is not None and now is not None and stored.trained_size == now.trained_size
                and stored.exact_max_size == now.exact_max_size and np.array_equal(stored.centroids, now.centroids))
            self._index_saved = self._index.generation if same else -1
            for s, x, y in zip(slots.tolist(), data.place_poses[:, 0].tolist(), data.place_poses[:, 1].tolist()):
                self._grid.add(s, x, y)
            self.graph.add_nodes_from(data.place_ids.tolist(), layer=Layer.PLACE)
            self._last_stamp_ns = int(data.place_last_seen_ns.max())
        for room_id, _x, _y in data.rooms:
            self.graph.add_node(room_id, layer=Layer.ROOM)
            self._room_sums[room_id] = [0.0, 0.0, 0]
        unknown_rooms = set(np.unique(pl.room[pl.alive_slots()]).tolist()) - set(self._room_sums) - {-1}
        if unknown_rooms:
            raise CorruptStoreError(self._store.path, f"places refer to missing rooms {sorted(unknown_rooms)[:5]}")
        for slot in np.flatnonzero(pl.alive[: pl.hi] & (pl.room[: pl.hi] >= 0)).tolist():
            self._room_add_place(slot, int(pl.room[slot]))
        for obj in data.objects:
            self._register_object(obj)
            if self._last_stamp_ns is None or obj.last_seen_ns > self._last_stamp_ns:
                self._last_stamp_ns = obj.last_seen_ns
        trav = [(a, b, d) for a, b, kind, d in data.edges if kind == EdgeKind.TRAVERSABLE]
        observed = [(a, b) for a, b, kind, _ in data.edges if kind == EdgeKind.OBSERVED_FROM]
        bad = ([(a, b) for a, b, _ in trav if a not in pl.slot_of or b not in pl.slot_of]
               + [(a, b) for a, b in observed if a not in pl.slot_of or b not in self._objects])
        if bad or len(trav) + len(observed) != len(data.edges):
            raise CorruptStoreError(self._store.path, f"edges to missing nodes or of unknown kind, e.g. {bad[:1]}")
        self.graph.add_edges_from((a, b, {"kind": EdgeKind.TRAVERSABLE, "distance_m": d}) for a, b, d in trav)
        self.graph.add_edges_from((a, b, {"kind": EdgeKind.OBSERVED_FROM}) for a, b in observed)
        if trav:
            ends = np.array([(pl.slot_of[a], pl.slot_of[b]) for a, b, _ in trav], np.int64)
            self._update_redundancy_bulk(ends)
            for sa, sb in ends.tolist():
                self._room_link(sa, sb, +1)
        if self._next_id <= max(self.graph.nodes, default=-1):
            self._next_id = max(self.graph.nodes) + 1
        if n and not self.config.start_localised:   # odometry restarted: the first closure relocalises
            self._correction_var[:] = np.inf

    # -- validation -------------------------------------------------------------------------------------

    def _check_thumbnail(self, thumbnail: object) -> bytes | None:
        if thumbnail is None:
            return None
        img = np.asarray(thumbnail)
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3 or img.shape[0] == 0 or img.shape[1] == 0:
            raise InvalidInputError("thumbnail", f"expected an (H, W, 3) uint8 image, got {img.dtype} {img.shape}")
        size = self.config.thumbnail_size_px
        h, w = img.shape[:2]
        if max(h, w) > size:  # nearest-neighbour downscale keeping the aspect ratio
            scale = size / max(h, w)
            rows = ((np.arange(max(1, round(h * scale))) + 0.5) / scale).astype(int).clip(0, h - 1)
            cols = ((np.arange(max(1, round(w * scale))) + 0.5) / scale).astype(int).clip(0, w - 1)
            img = img[rows][:, cols]
        return encode_png(img)

    def _check_detection(self, det: object, field: str) -> ObjectDetection:
        if not isinstance(det, ObjectDetection):
            raise InvalidInputError(field, f"expected an ObjectDetection, got {type(det).__name__}")
        pos = np.asarray(det.position_m, dtype=np.float64).reshape(-1)
        if pos.shape != (3,) or not np.all(np.isfinite(pos)):
            raise InvalidInputError(f"{field}.position_m", f"expected 3 finite values, got {det.position_m!r}")
        if isinstance(det.class_id, bool) or not isinstance(det.class_id, (int, np.integer)):
            raise InvalidInputError(f"{field}.class_id", f"expected an int, got {det.class_id!r}")
        emb = None
        if det.embedding is not None:
            emb = check_embedding(det.embedding, self.config.embedding_dim, f"{field}.embedding")
        return replace(det, position_m=tuple(pos.tolist()), embedding=emb, class_id=int(det.class_id))

    # -- insertion --------------------------------------------------------------------------------------

    def insert_observation(self, stamp_ns: int, pose: Pose2D | Sequence[float], embedding: np.ndarray,
                           thumbnail: np.ndarray | None = None, objects: Iterable[ObjectDetection] = (), *,
                           verifier: LoopClosureVerifier | None = None,
                           keep_in_ram_on_failure: bool = False) -> InsertResult:
        """Add one observation: update the matching place, close a loop, or create a place.

        Decision (memory frame = odometry pose mapped through the drift correction):
        1. UPDATED_PLACE if a place within `new_place_distance_m` and `new_place_angle_deg` has cosine
           similarity >= `new_place_similarity` (the most similar such place);
        2. else LOOP_CLOSURE if a retrieval hit with similarity >= `loop_closure_similarity` is older than
           `loop_closure_min_age_s`, within `loop_closure_max_distance_m`, and accepted by the verifier; the
           drift correction is then pulled towards that place;
        3. else NEW_PLACE at the corrected pose.
        The previous place and this one are linked by a traversability edge; detections become or update
        object nodes; consolidation and the capacity policy run when due. One database transaction.

        Args:
            stamp_ns: observation time, ns; must not be earlier than the last stamp accepted in this session (the
                first one may be earlier than the stored ones: a new session, see the module docstring).
            pose: odometry pose (Pose2D or [x_m, y_m, yaw_rad]).
            embedding: (embedding_dim,) appearance embedding (normalised here).
            thumbnail: optional (H, W, 3) uint8 keyframe image, downscaled to `thumbnail_size_px`.
            objects: detections seen in this observation.
            verifier: geometric loop-closure check for this call (default: the constructor's).
            keep_in_ram_on_failure: when the database write fails, `keep_in_ram` (the file keeps its last commit,
                `persist_error` says why) and insert the observation again, in RAM, instead of raising.

        Returns:
            What happened, with the place node id.

        Raises:
            InvalidInputError: a bad stamp, pose, embedding, thumbnail or detection (naming the field); the
                memory is unchanged.
            MemoryStoreError: the database write failed (e.g. disk full) and keep_in_ram_on_failure is off; the
                file is rolled back to the last commit, but the in-RAM graph may be ahead of it: reopen the
                memory, or call `keep_in_ram`.
        """
        objects = list(objects)   # a second try must see them too
        try:
            return self._insert(stamp_ns, pose, embedding, thumbnail, objects, verifier)
        except MemoryStoreError as err:
            if not keep_in_ram_on_failure or self.persist_error is not None:
                raise
            self.keep_in_ram(str(err))
            return self._insert(stamp_ns, pose, embedding, thumbnail, objects, verifier)

    def _insert(self, stamp_ns: int, pose: Pose2D | Sequence[float], embedding: np.ndarray,
                thumbnail: np.ndarray | None, objects: list[ObjectDetection],
                verifier: LoopClosureVerifier | None) -> InsertResult:
        """`insert_observation`, one try."""
        stamp, offset = self._session_stamp(stamp_ns)
        odom = check_pose(pose)
        emb = check_embedding(embedding, self.config.embedding_dim)
        thumb = self._check_thumbnail(thumbnail)
        dets = [self._check_detection(d, f"objects[{i}]") for i, d in enumerate(objects)]

        predicted = _se2_apply(self._correction, odom)
        var = self._correction_var
        if self._last_odom is not None:
            var = var + math.hypot(odom.x_m - self._last_odom.x_m, odom.y_m - self._last_odom.y_m) * np.array(
                [self.config.odometry_drift_per_m ** 2, math.radians(self.config.odometry_yaw_drift_deg_per_m) ** 2])
        decision = self._decide(stamp, offset, odom, predicted, emb, verifier or self._verifier, var)  # read-only
        with self._transaction():
            node_id, object_ids = self._apply(decision, stamp, predicted, emb, thumb, dets)
            self._store.set_next_node_id(self._next_id)
        self._begin_session(stamp, offset)
        self._last_stamp_ns = stamp
        self._last_odom = odom
        self._correction_var = var
        if decision.kind is InsertKind.LOOP_CLOSURE:
            stale, was_localised = self._correction.copy(), self.localised
            self._correct_drift(predicted, decision.slot)
            self._hypotheses = []
            if not was_localised:
                self._move_frame_nodes(stale)
        elif decision.kind is InsertKind.NEW_PLACE and node_id in self.graph:
            self._frame_places.add(node_id)
        if decision.kind is not InsertKind.LOOP_CLOSURE and decision.hypotheses:
            kept = sorted([*self._hypotheses, *decision.hypotheses], key=lambda h: (h.support, h.stamp_ns))
            self._hypotheses = kept[-_MAX_HYPOTHESES:]

        merged = forgotten = 0
        self._inserts_since_consolidation += 1
        cfg = self.config
        if cfg.consolidate_every and self._inserts_since_consolidation >= cfg.consolidate_every:
            merged = self.consolidate().merged_places
        if cfg.max_places and len(self._places.slot_of) > cfg.max_places:
            forgotten = self._enforce_capacity(stamp)
        final_id = node_id if node_id in self.graph else int(self._places.ids[self._prev_slot])
        return InsertResult(decision.kind, final_id, decision.similarity, tuple(object_ids), merged, forgotten)

    def loop_closure_gate_m(self, variance: np.ndarray | None = None) -> float:
        """How far from the predicted position a loop closure may be now, m (`SceneGraphConfig`'s drift model)."""
        cfg = self.config
        var = float((self._correction_var if variance is None else variance)[0])
        if not math.isfinite(var):
            return self._unlocalised_gate_m
        return min(cfg.loop_closure_max_distance_m,
                   cfg.loop_closure_gate_sigmas * math.sqrt(var + cfg.place_position_std_m ** 2))

    def _decide(self, stamp: int, offset: int, odom: Pose2D, predicted: Pose2D, emb: np.ndarray,
                verifier: LoopClosureVerifier | None, variance: np.ndarray) -> _Decision:
        """What to do with an observation at `stamp` (stored timeline; the caller gave stamp - offset)."""
        cfg, pl = self.config, self._places
        local = np.array(self._grid.near(predicted.x_m, predicted.y_m), np.int64)
        unlocalised = not math.isfinite(float(variance[0]))
        if len(local) and unlocalised:
            # the pose is in a stale frame: only the places stored in that frame since are really nearby
            local = local[np.isin(pl.ids[local], np.fromiter(self._frame_places, np.int64))]
        if len(local):
            dxy = pl.pose[local, :2] - (predicted.x_m, predicted.y_m)
            dyaw = np.abs((pl.pose[local, 2] - predicted.yaw_rad + np.pi) % (2 * np.pi) - np.pi)
            local = local[(np.hypot(dxy[:, 0], dxy[:, 1]) <= cfg.new_place_distance_m)
                          & (dyaw <= cfg.new_place_angle_rad)]
        best_sim = 0.0
        if len(local):
            sims = self._index.similarities(local, emb)
            best = self._most_similar(local, sims)
            if sims[best] >= cfg.new_place_similarity:
                return _Decision(InsertKind.UPDATED_PLACE, int(local[best]), float(sims[best]))
            best_sim = float(sims[best])
        keys, sims = self._index.search(emb, cfg.loop_closure_candidates, nprobe=cfg.loop_closure_nprobe,
                                        tie_order=pl.ids)
        min_age_ns = int(cfg.loop_closure_min_age_s * 1e9)
        # a session whose clock started behind the stored stamps (offset > 0) cannot tell how long ago the places of
        # earlier sessions were seen (they lie just before it on the stored timeline): those are never part of its
        # traverse. With offset 0 the stamps say the true time between sessions, and the age rule applies to all.
        session_start = stamp if self._session_start_ns is None else self._session_start_ns
        gate_m = self.loop_closure_gate_m(variance)
        if len(sims):
            best_sim = max(best_sim, float(sims[0]))
        voting = unlocalised and cfg.relocalisation_confirmations > 1
        votes: list[_Hypothesis] = []
        for slot, sim in zip(keys.tolist(), sims.tolist()):
            if sim < cfg.loop_closure_similarity:
                break
            if pl.last_ns[slot] > stamp - min_age_ns and (not offset or pl.last_ns[slot] >= session_start):
                continue                             # part of the current traverse, not a revisit
            if unlocalised and int(pl.ids[slot]) in self._frame_places:
                continue    # stored in the stale frame since: agreeing with them would relocalise into it
            px, py, pyaw = pl.pose[slot]
            if math.hypot(px - predicted.x_m, py - predicted.y_m) > gate_m:
                continue          # farther than odometry can have drifted: a look-alike elsewhere
            if verifier is not None and not verifier(LoopClosureCandidate(
                    stamp - offset, odom, predicted, emb.copy(), int(pl.ids[slot]), Pose2D(px, py, pyaw), sim)):
                continue
            if not voting:
                return _Decision(InsertKind.LOOP_CLOSURE, slot, sim)
            vote = self._vote(odom, _correction_between(odom, Pose2D(px, py, pyaw)), int(pl.ids[slot]), stamp)
            if vote.support >= cfg.relocalisation_confirmations:
                return _Decision(InsertKind.LOOP_CLOSURE, slot, sim)
            votes.append(vote)
        return _Decision(InsertKind.NEW_PLACE, -1, best_sim, tuple(votes))

    def _most_similar(self, slots: np.ndarray, sims: np.ndarray) -> int:
        """Position in `slots` of the most similar place, the lowest node id among equals (as `retrieve` ranks):
        candidates come from the spatial grid, whose order differs between a memory and the same one reopened."""
        top = np.flatnonzero(sims == sims.max())
        return int(top[np.argmin(self._places.ids[slots[top]])])

    def _vote(self, odom: Pose2D, correction: np.ndarray, place_id: int, stamp: int) -> _Hypothesis:
        """The relocalisation hypothesis of one loop-closure candidate (the place with node id `place_id`),
        supported by every earlier one that puts the robot at the same pose from another place."""
        cfg = self.config
        spread = cfg.loop_closure_gate_sigmas * math.sqrt(2.0)
        here = _se2_apply(correction, odom)
        best: _Hypothesis | None = None
        for h in self._hypotheses:
            if place_id in h.places or h.stamp_ns >= stamp or (best is not None and h.support <= best.support):
                continue
            if math.hypot(odom.x_m - h.odom_xy[0], odom.y_m - h.odom_xy[1]) < cfg.relocalisation_baseline_m:
                continue                             # no baseline: a look-alike room agrees with itself
            there = _se2_apply(h.correction, odom)
            if (math.hypot(there.x_m - here.x_m, there.y_m - here.y_m) <= spread * cfg.place_position_std_m
                    and abs(wrap_angle(there.yaw_rad - here.yaw_rad)) <= math.radians(spread * cfg.place_yaw_std_deg)):
                best = h
        here_xy = (odom.x_m, odom.y_m)
        if best is None:
            return _Hypothesis(correction, 1, frozenset((place_id,)), stamp, here_xy)
        return _Hypothesis(correction, best.support + 1, best.places | {place_id}, stamp, here_xy)

    def _move_frame_nodes(self, stale: np.ndarray) -> None:
        """The memory just relocalised: move the places and objects created since the last relocalise(), stored
        through the stale correction, to where the new correction puts them (one transaction)."""
        pl, moved = self._places, []
        stale_pose = Pose2D(*stale.tolist())
        objects = [self._objects[o] for o in sorted(self._frame_objects) if o in self._objects]
        for obj in objects:
            x, y, z = obj.position_m
            new = _se2_apply(self._correction, Pose2D(x, y, 0.0).relative_to(stale_pose))
            obj.position_m = (new.x_m, new.y_m, z)
        for node_id in sorted(self._frame_places):
            slot = pl.slot_of.get(node_id)
            if slot is None:
                continue                                 # merged or forgotten since
            x, y, yaw = (float(v) for v in pl.pose[slot])
            # back into the odometry frame, then forward through the new correction
            new = _se2_apply(self._correction, Pose2D(x, y, yaw).relative_to(stale_pose))
            room = int(pl.room[slot])
            if room >= 0:
                self._room_remove_place(slot, delete_empty=False)
            self._grid.remove(slot, x, y)
            pl.pose[slot] = (new.x_m, new.y_m, new.yaw_rad)
            self._grid.add(slot, new.x_m, new.y_m)
            if room >= 0:
                pl.room[slot] = room
                self._room_add_place(slot, room)
            moved.append((new.x_m, new.y_m, new.yaw_rad, node_id))
        if moved or objects:
            with self._transaction():
                for obj in objects:
                    self._store.upsert_object(obj)
                self._store.set_place_poses(moved)
                for room in {int(pl.room[pl.slot_of[m[3]]]) for m in moved} - {-1}:
                    sums = self._room_sums[room]
                    self._store.upsert_room(room, sums[0] / sums[2], sums[1] / sums[2])

    def relocalise(self, within_m: float | None = None, *, retract: bool = False) -> None:
        """Forget where the robot is in the memory's frame, e.g. after it was carried elsewhere (a kidnapped
        robot) or when its odometry was reset.

        The next observations are stored in the old correction's frame until `relocalisation_confirmations`
        loop-closure candidates agree on a pose (within `within_m` of where odometry puts the robot; None:
        `relocalisation_radius_m`, by default anywhere in the memory); the correction then snaps to it, and
        the places and objects stored in between are moved with it (a memory closed before that forgets
        them). Places stored in between never vote: they agree with each other in the stale frame. An empty
        memory has nothing to relocalise against and stays as it is (localised: its frame starts with the next
        observation); its next places would otherwise wait for a vote that cannot come and be forgotten at close.
        The next place is not linked to the last one. Objects the memory already knew are recognised by instance id in
        between, but their positions are not averaged with ones measured in the stale frame.

        With `retract`, the last relocalisation (from loop closures or `set_pose`) is taken back as wrong,
        e.g. because what the robot sees since contradicts the map: the places and objects created since the
        last `relocalise()` (or the start), which were stored in the wrong frame, move with the next
        relocalisation as well (or are forgotten if it never comes). Places and objects the memory knew
        before and that were updated meanwhile keep those updates.
        """
        if within_m is not None and (isinstance(within_m, bool) or not isinstance(within_m, (int, float))
                                     or not within_m > 0):
            raise InvalidInputError("within_m", f"must be a distance > 0 or None, got {within_m!r}")
        if not self._places.slot_of and not self._objects:
            self._prev_slot = -1
            self._last_odom = None
            return
        self._correction_var = np.full(2, np.inf)
        self._unlocalised_gate_m = float(within_m) if within_m is not None else (
            self.config.relocalisation_radius_m or math.inf)
        self._hypotheses = []
        if not retract:
            self._frame_places, self._frame_objects = set(), set()
        self._prev_slot = -1
        self._last_odom = None

    def set_pose(self, odometry_pose: Pose2D | Sequence[float], memory_pose: Pose2D | Sequence[float], *,
                 position_std_m: float | None = None, yaw_std_deg: float | None = None) -> None:
        """Localise the memory from outside (an operator's pose estimate, a map-based localiser): the robot at
        `odometry_pose` (odometry frame) stands at `memory_pose` (the memory's frame), known to within
        `position_std_m` / `yaw_std_deg` (default: `place_position_std_m` / `place_yaw_std_deg`). Loop
        closures are then gated and weighted against that uncertainty. The next place is not linked to the
        last one. Places stored while the memory was unlocalised are moved to where this estimate puts them."""
        odom = check_pose(odometry_pose, "odometry_pose")
        target = check_pose(memory_pose, "memory_pose")
        cfg = self.config
        stds = {"position_std_m": cfg.place_position_std_m if position_std_m is None else position_std_m,
                "yaw_std_deg": cfg.place_yaw_std_deg if yaw_std_deg is None else yaw_std_deg}
        for name, value in stds.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise InvalidInputError(name, f"must be a finite standard deviation > 0, got {value!r}")
        stale, was_localised = self._correction.copy(), self.localised
        self._correction = _correction_between(odom, target)
        self._correction_var = np.array([stds["position_std_m"] ** 2, math.radians(stds["yaw_std_deg"]) ** 2])
        self._hypotheses = []
        if not was_localised:
            self._move_frame_nodes(stale)
        self._prev_slot = -1
        self._last_odom = odom

    def relocalisation_votes(self) -> list[tuple[Pose2D, int]]:
        """While unlocalised: the corrections (memory <- odometry, as `drift_correction`) that the loop-closure
        candidates seen so far imply, each with the number of candidates that agree with it, the best supported
        and then the newest first; empty when localised. Something that can check a correction (e.g. a map) may
        confirm one with `set_pose` before `relocalisation_confirmations` candidates agree."""
        if self.localised:
            return []
        return [(Pose2D(*h.correction.tolist()), h.support) for h in reversed(self._hypotheses)]

    @property
    def localised(self) -> bool:
        """Whether the memory knows where odometry lies in its frame (False after loading a file without
        `start_localised`, or after `relocalise()`, until enough loop closures agree)."""
        return bool(np.isfinite(self._correction_var).all())

    def _apply(self, decision: _Decision, stamp: int, predicted: Pose2D, emb: np.ndarray, thumb: bytes | None,
               dets: list[ObjectDetection]) -> tuple[int, list[int]]:
        pl = self._places
        prev = self._prev_slot
        if decision.kind is InsertKind.NEW_PLACE:
            room = int(pl.room[prev]) if prev >= 0 and pl.room[prev] >= 0 else -1
            slot = self._add_place(predicted, emb, stamp, thumb, room)
        else:
            slot = decision.slot
            self._touch_place(slot, emb, stamp, thumb)
        if prev >= 0 and prev != slot:
            # an old place recognised by a loop closure was stored under a different drift than the previous
            # place: measure from where odometry says the robot is, not from the old place's stored pose
            to = (predicted.x_m, predicted.y_m) if decision.kind is InsertKind.LOOP_CLOSURE else pl.pose[slot, :2]
            d = math.hypot(pl.pose[prev, 0] - to[0], pl.pose[prev, 1] - to[1])
            if d <= self.config.max_edge_distance_m:
                self._link_places(prev, slot, max(d, 1e-3))
        self._prev_slot = slot
        self._dirty.add(slot)
        node_id = int(pl.ids[slot])
        object_ids = [self._observe_object(det, slot, stamp) for det in dets]
        return node_id, object_ids

    def _correct_drift(self, predicted: Pose2D, slot: int) -> None:
        """Pull the memory <- odometry correction towards the recognised place, by as much as the correction is
        less certain than where a recognised place puts the robot (a scalar Kalman update per position and
        heading; an unlocalised memory snaps to the place)."""
        cfg = self.config
        noise = np.array([cfg.place_position_std_m ** 2, math.radians(cfg.place_yaw_std_deg) ** 2])
        gains, after = np.ones(2), noise.copy()
        for i, (v, r) in enumerate(zip(self._correction_var.tolist(), noise.tolist())):
            if math.isfinite(v):
                gains[i] = min(v / max(v + r, 1e-12), cfg.loop_closure_correction_gain)
                after[i] = (1.0 - gains[i]) * v
            # else unlocalised: the whole residual, whatever loop_closure_correction_gain says (that bounds a
            # Kalman step of a known correction; part of an unknown offset would leave the memory claiming a
            # place-sized uncertainty it does not have, and its drift gate would refuse the closures that fix it)
        self._correction_var = after
        g, gy = float(gains[0]), float(gains[1])
        px, py, pyaw = self._places.pose[slot]
        dtheta = gy * wrap_angle(pyaw - predicted.yaw_rad)
        c, s = math.cos(dtheta), math.sin(dtheta)
        tx, ty = self._correction[0] - predicted.x_m, self._correction[1] - predicted.y_m
        self._correction = np.array([c * tx - s * ty + predicted.x_m + g * (px - predicted.x_m),
                                     s * tx + c * ty + predicted.y_m + g * (py - predicted.y_m),
                                     wrap_angle(self._correction[2] + dtheta)])

    def _add_place(self, pose: Pose2D, emb: np.ndarray, stamp: int, thumb: bytes | None, room: int) -> int:
        pl = self._places
        node_id = self._next_id
        self._next_id += 1
        slot = int(pl.alloc(1)[0])
        pl.ids[slot] = node_id
        pl.pose[slot] = (pose.x_m, pose.y_m, pose.yaw_rad)
        pl.first_ns[slot] = pl.last_ns[slot] = stamp
        pl.visits[slot] = 1
        pl.room[slot] = -1
        pl.redundancy[slot] = 0.0
        pl.has_thumb[slot] = thumb is not None
        pl.alive[slot] = True
        pl.slot_of[node_id] = slot
        self._index.add(slot, emb)
        self._grid.add(slot, pose.x_m, pose.y_m)
        self.graph.add_node(node_id, layer=Layer.PLACE)
        if room < 0:
            room = self._new_room()
        pl.room[slot] = room
        self._room_add_place(slot, room)
        sums = self._room_sums[room]
        self._store.upsert_room(room, sums[0] / sums[2], sums[1] / sums[2])
        self._store.insert_place(node_id, (pose.x_m, pose.y_m, pose.yaw_rad), stamp, 1, room, emb, thumb)
        return slot

    def _touch_place(self, slot: int, emb: np.ndarray, stamp: int, thumb: bytes | None) -> None:
        """Record a visit: count, last-seen stamp, running-mean embedding, first thumbnail kept."""
        pl = self._places
        mean = _mean_embedding(self._index.get(slot), int(pl.visits[slot]), emb, 1,
                               self.config.embedding_average_max_visits)
        self._index.update(slot, mean)
        pl.visits[slot] += 1
        pl.last_ns[slot] = stamp
        new_thumb = thumb if (thumb is not None and not pl.has_thumb[slot]) else None
        pl.has_thumb[slot] |= new_thumb is not None
        self._store.update_place(int(pl.ids[slot]), first_seen_ns=int(pl.first_ns[slot]), last_seen_ns=stamp,
                                 visits=int(pl.visits[slot]), embedding=mean, thumbnail=new_thumb)

    def _link_places(self, sa: int, sb: int, distance_m: float) -> None:
        pl = self._places
        a, b = int(pl.ids[sa]), int(pl.ids[sb])
        data = self.graph.get_edge_data(a, b)
        if data is not None:
            if data["kind"] is EdgeKind.TRAVERSABLE and data["distance_m"] <= distance_m:
                return
            data["distance_m"] = distance_m
        else:
            self.graph.add_edge(a, b, kind=EdgeKind.TRAVERSABLE, distance_m=distance_m)
            self._room_link(sa, sb, +1)
            sim = float(self._index.get(sa) @ self._index.get(sb))
            pl.redundancy[sa] = max(pl.redundancy[sa], sim)
            pl.redundancy[sb] = max(pl.redundancy[sb], sim)
        self._store.upsert_edge(min(a, b), max(a, b), EdgeKind.TRAVERSABLE, distance_m)

    # -- objects ----------------------------------------------------------------------------------------

    def _register_object(self, obj: ObjectRow) -> None:
        self._objects[obj.id] = obj
        if obj.instance_id is not None:
            self._object_by_instance[obj.instance_id] = obj.id
        self._objects_by_class.setdefault(obj.class_id, set()).add(obj.id)
        self.graph.add_node(obj.id, layer=Layer.OBJECT)
        if obj.room_id is not None and obj.room_id in self.graph:
            self.graph.add_edge(obj.id, obj.room_id, kind=EdgeKind.OBJECT_IN_ROOM)

    def _remove_object(self, oid: int) -> None:
        obj = self._objects.pop(oid)
        if obj.instance_id is not None and self._object_by_instance.get(obj.instance_id) == oid:
            del self._object_by_instance[obj.instance_id]
        self._objects_by_class[obj.class_id].discard(oid)
        self.graph.remove_node(oid)
        self._store.delete_node(oid)

    def _observe_object(self, det: ObjectDetection, place_slot: int, stamp: int) -> int:
        cfg = self.config
        x, y, z = det.position_m
        mem = _se2_apply(self._correction, Pose2D(x, y, 0.0))
        pos = np.array([mem.x_m, mem.y_m, z])
        unlocalised = not self.localised     # pos is in a stale frame: only objects stored in it since compare
        oid = self._object_by_instance.get(det.instance_id) if det.instance_id is not None else None
        if oid is None and det.instance_id is None:
            best = cfg.object_association_distance_m
            pool = self._objects_by_class.get(det.class_id, set())
            for cand in (self._frame_objects & pool if unlocalised else pool):
                d = float(np.linalg.norm(np.asarray(self._objects[cand].position_m) - pos))
                if d <= best:
                    oid, best = cand, d
        place_id = int(self._places.ids[place_slot])
        room = int(self._places.room[place_slot])
        if oid is None:
            oid = self._next_id
            self._next_id += 1
            obj = ObjectRow(oid, det.class_id, det.instance_id, det.label, tuple(pos.tolist()), stamp, stamp, 1,
                            room if room >= 0 else None, det.embedding)
            self._register_object(obj)
            self._frame_objects.add(oid)
        else:
            obj = self._objects[oid]
            n = obj.observation_count
            if not unlocalised or oid in self._frame_objects:
                obj.position_m = _mean_position(obj.position_m, n, pos, 1)
            obj.observation_count = n + 1
            obj.last_seen_ns = stamp
            if det.embedding is not None:
                obj.embedding = _mean_embedding(obj.embedding, n, det.embedding, 1,
                                                 self.config.embedding_average_max_visits)
            if det.label and not obj.label:
                obj.label = det.label
        self._store.upsert_object(obj)
        if not self.graph.has_edge(place_id, oid):
            self.graph.add_edge(place_id, oid, kind=EdgeKind.OBSERVED_FROM)
            self._store.upsert_edge(place_id, oid, EdgeKind.OBSERVED_FROM, None)
        return oid

    # -- rooms ------------------------------------------------------------------------------------------

    def _new_room(self) -> int:
        room_id = self._next_id
        self._next_id += 1
        self.graph.add_node(room_id, layer=Layer.ROOM)
        self._room_sums[room_id] = [0.0, 0.0, 0]
        return room_id

    def _room_add_place(self, slot: int, room: int) -> None:
        sums = self._room_sums[room]
        sums[0] += self._places.pose[slot, 0]
        sums[1] += self._places.pose[slot, 1]
        sums[2] += 1
        self.graph.add_edge(int(self._places.ids[slot]), room, kind=EdgeKind.PLACE_IN_ROOM)

    def _room_remove_place(self, slot: int, *, delete_empty: bool = True) -> None:
        room = int(self._places.room[slot])
        if room < 0:
            return
        sums = self._room_sums[room]
        sums[0] -= self._places.pose[slot, 0]
        sums[1] -= self._places.pose[slot, 1]
        sums[2] -= 1
        self._places.room[slot] = -1
        place_id = int(self._places.ids[slot])
        if self.graph.has_edge(place_id, room):
            self.graph.remove_edge(place_id, room)
        if sums[2] <= 0:
            if delete_empty:
                self._delete_room(room)
        else:
            self._store.upsert_room(room, sums[0] / sums[2], sums[1] / sums[2])

    def _delete_room(self, room: int) -> None:
        """Delete an (empty) room node; its objects lose their room."""
        del self._room_sums[room]
        self.graph.remove_node(room)
        self._store.delete_node(room)
        for obj in self._objects.values():
            if obj.room_id == room:
                obj.room_id = None
                self._store.upsert_object(obj)

    def _room_link(self, sa: int, sb: int, delta: int) -> None:
        """Count traversability edges between rooms; a ROOM_ADJACENT edge exists while the count is > 0."""
        ra, rb = int(self._places.room[sa]), int(self._places.room[sb])
        if ra < 0 or rb < 0 or ra == rb:
            return
        key = (min(ra, rb), max(ra, rb))
        self._room_links[key] += delta
        if self._room_links[key] > 0:
            self.graph.add_edge(*key, kind=EdgeKind.ROOM_ADJACENT)
        else:
            del self._room_links[key]
            if self.graph.has_edge(*key):
                self.graph.remove_edge(*key)

    def segment_rooms(self, around: Iterable[int] | None = None) -> int:
        """Regroup places into rooms: Louvain communities of the traversability graph, edges weighted by
        appearance similarity (rooms look alike inside and change at doorways).

        Args:
            around: place ids whose neighbourhood to re-segment: their rooms and the rooms adjacent to those
                (bounded work, used by `consolidate`). None re-segments every place.

        Room ids are kept where a new room overlaps an old one most; emptied rooms are deleted; objects move
        to the room most of their observing places are in. One transaction. Returns the number of rooms.
        """
        pl = self._places
        if around is None:
            region = set(pl.ids[pl.alive_slots()].tolist())
        else:
            seeds = [p for p in around if p in pl.slot_of]
            rooms = {int(pl.room[pl.slot_of[p]]) for p in seeds} - {-1}
            rooms |= {n for r in rooms for n, d in self.graph[r].items() if d["kind"] is EdgeKind.ROOM_ADJACENT}
            region = set(seeds)
            region.update(n for r in rooms for n, d in self.graph[r].items() if d["kind"] is EdgeKind.PLACE_IN_ROOM)
        if not region:
            return len(self._room_sums)
        sub = nx.Graph()
        sub.add_nodes_from(region)
        trav_edges = set()
        for a in region:
            for b, data in self.graph[a].items():
                if data["kind"] is EdgeKind.TRAVERSABLE:
                    trav_edges.add((min(a, b), max(a, b)))
                    if b in region:
                        sim = float(self._index.get(pl.slot_of[a]) @ self._index.get(pl.slot_of[b]))
                        sub.add_edge(a, b, weight=max(sim, 0.01))
        communities = nx.community.louvain_communities(sub, weight="weight", resolution=self.config.room_resolution,
                                                       seed=self.config.seed)
        old_rooms = {int(pl.room[pl.slot_of[p]]) for p in region} - {-1}
        used: set[int] = set()
        assignment: dict[int, int] = {}
        for members in sorted(communities, key=lambda c: (-len(c), min(c))):
            votes = Counter(int(pl.room[pl.slot_of[m]]) for m in members)
            room = next((r for r, _ in votes.most_common() if r in old_rooms and r not in used), None)
            if room is None:
                room = self._new_room()
            used.add(room)
            for m in members:
                assignment[m] = room
        with self._transaction():
            for a, b in trav_edges:
                self._room_link(pl.slot_of[a], pl.slot_of[b], -1)
            changed = []
            for node, room in assignment.items():
                slot = pl.slot_of[node]
                if pl.room[slot] != room:
                    self._room_remove_place(slot, delete_empty=False)
                    pl.room[slot] = room
                    self._room_add_place(slot, room)
                    changed.append((room, node))
            for room in old_rooms - used:
                self._delete_room(room)
            for a, b in trav_edges:
                self._room_link(pl.slot_of[a], pl.slot_of[b], +1)
            self._store.set_place_rooms(changed)
            for room in used:
                sums = self._room_sums[room]
                self._store.upsert_room(room, sums[0] / sums[2], sums[1] / sums[2])
            objects = {n for p in region for n, d in self.graph[p].items() if d["kind"] is EdgeKind.OBSERVED_FROM}
            for oid in sorted(objects):
                self._set_object_room(self._objects[oid])
            self._store.set_next_node_id(self._next_id)
        return len(self._room_sums)

    def _set_object_room(self, obj: ObjectRow) -> None:
        """Put an object in the room most of its observing places are in."""
        rooms = Counter(int(self._places.room[self._places.slot_of[p]]) for p, d in self.graph[obj.id].items()
                        if d["kind"] is EdgeKind.OBSERVED_FROM)
        rooms.pop(-1, None)
        room = rooms.most_common(1)[0][0] if rooms else None
        if room == obj.room_id:
            return
        if obj.room_id is not None and self.graph.has_edge(obj.id, obj.room_id):
            self.graph.remove_edge(obj.id, obj.room_id)
        obj.room_id = room
        if room is not None:
            self.graph.add_edge(obj.id, room, kind=EdgeKind.OBJECT_IN_ROOM)
        self._store.upsert_object(obj)

    # -- removal, merging, consolidation, forgetting --------------------------------------------------

    def _traversable_neighbours(self, node_id: int) -> list[tuple[int, float]]:
        return [(n, d["distance_m"]) for n, d in self.graph[node_id].items() if d["kind"] is EdgeKind.TRAVERSABLE]

    def _remove_place(self, slot: int, *, bypass: bool) -> None:
        """Delete a place; with `bypass`, link its traversability neighbours pairwise so paths survive."""
        pl = self._places
        node_id = int(pl.ids[slot])
        nbrs = self._traversable_neighbours(node_id)
        for n, _ in nbrs:
            self._room_link(slot, pl.slot_of[n], -1)
        self._room_remove_place(slot)
        self.graph.remove_node(node_id)
        self._index.remove(slot)
        self._grid.remove(slot, pl.pose[slot, 0], pl.pose[slot, 1])
        pl.release(slot)
        self._store.delete_node(node_id)
        self._dirty.discard(slot)
        if self._prev_slot == slot:
            self._prev_slot = -1
        if bypass:
            for i, (u, du) in enumerate(nbrs):
                for v, dv in nbrs[i + 1 :]:
                    self._link_places(pl.slot_of[u], pl.slot_of[v], du + dv)

    def _merge(self, keep: int, drop: int) -> None:
        """Fold place `drop` into place `keep`: visits, stamps, embedding, edges, thumbnail and relocalisation
        votes (`keep` now stands for the same spot and view, so a vote from it does not count as another place's
        after one from `drop`)."""
        pl = self._places
        keep_id, drop_id = int(pl.ids[keep]), int(pl.ids[drop])
        self._hypotheses = [replace(h, places=h.places | {keep_id}) if drop_id in h.places else h
                            for h in self._hypotheses]
        mean = _mean_embedding(self._index.get(keep), int(pl.visits[keep]), self._index.get(drop), int(pl.visits[drop]),
                               self.config.embedding_average_max_visits)
        self._index.update(keep, mean)
        pl.visits[keep] += pl.visits[drop]
        pl.first_ns[keep] = min(pl.first_ns[keep], pl.first_ns[drop])
        pl.last_ns[keep] = max(pl.last_ns[keep], pl.last_ns[drop])
        self._store.update_place(keep_id, first_seen_ns=int(pl.first_ns[keep]), last_seen_ns=int(pl.last_ns[keep]),
                                 visits=int(pl.visits[keep]), embedding=mean)
        if pl.has_thumb[drop] and not pl.has_thumb[keep]:
            self._store.adopt_thumbnail(keep_id, drop_id)
            pl.has_thumb[keep] = True
        trav = self._traversable_neighbours(drop_id)
        observed = [n for n, d in self.graph[drop_id].items() if d["kind"] is EdgeKind.OBSERVED_FROM]
        was_prev = self._prev_slot == drop
        self._remove_place(drop, bypass=False)
        for n, d in trav:
            if n != keep_id:
                self._link_places(keep, pl.slot_of[n], d)
        for obj in observed:
            if not self.graph.has_edge(keep_id, obj):
                self.graph.add_edge(keep_id, obj, kind=EdgeKind.OBSERVED_FROM)
                self._store.upsert_edge(keep_id, obj, EdgeKind.OBSERVED_FROM, None)
        if was_prev:
            self._prev_slot = keep
        self._dirty.add(keep)

    def consolidate(self, *, full: bool = False) -> ConsolidationReport:
        """Merge redundant places and objects, and re-segment rooms (one transaction).

        Two places are redundant when they are within `merge_distance_m` in the memory frame and their
        embeddings are at least `merge_similarity` cosine-similar (same spot, same view: e.g. created before
        a loop closure re-anchored the drift). The place with more visits (then the older) survives. While the
        memory is unlocalised, a place stored since the last `relocalise()` is merged only with another such
        place, never with one of the memory's own: their coordinates are in frames nothing ties together yet. Objects
        without instance id of one class within `object_association_distance_m` of each other are folded
        together (`_merge_objects`).

        Args:
            full: check every place, not only those touched since the last consolidation.
        """
        cfg, pl = self.config, self._places
        # in node id order: slots are reused, so their order differs between a memory and the same one reopened
        todo = pl.alive_slots() if full else np.fromiter(self._dirty, np.int64, len(self._dirty))
        todo = todo[np.argsort(pl.ids[todo], kind="stable")].tolist()
        merged = 0
        with self._transaction():
            for slot in todo:
                while pl.alive[slot]:
                    near = [s for s in self._grid.near(pl.pose[slot, 0], pl.pose[slot, 1]) if s != slot]
                    if not self.localised:
                        # places stored since the last relocalise() lie in a stale frame, the others in the
                        # memory's: near in coordinates, they need not be near in the house (as in _decide)
                        mine = int(pl.ids[slot]) in self._frame_places
                        near = [s for s in near if (int(pl.ids[s]) in self._frame_places) == mine]
                    if not near:
                        break
                    near_arr = np.array(near, np.int64)
                    dist = np.hypot(*(pl.pose[near_arr, :2] - pl.pose[slot, :2]).T)
                    near_arr = near_arr[dist <= cfg.merge_distance_m]
                    if len(near_arr) == 0:
                        break
                    sims = self._index.similarities(near_arr, self._index.get(slot))
                    best = self._most_similar(near_arr, sims)
                    if sims[best] < cfg.merge_similarity:
                        break
                    other = int(near_arr[best])
                    keep, drop = sorted((slot, other), key=lambda s: (-pl.visits[s], pl.first_ns[s], pl.ids[s]))
                    self._merge(keep, drop)
                    merged += 1
            merged_objects = self._merge_objects()
        touched = [int(pl.ids[s]) for s in self._dirty if pl.alive[s]]
        self._dirty.clear()
        self._inserts_since_consolidation = 0
        rooms = len(self._room_sums)
        if full and 0 < len(pl.slot_of) <= cfg.room_segmentation_max_places:
            rooms = self.segment_rooms()
        elif touched:
            rooms = self.segment_rooms(around=touched)
        return ConsolidationReport(merged, rooms, merged_objects)

    def _merge_objects(self) -> int:
        """Fold objects without instance id of one class that lie within `object_association_distance_m` of
        each other into one (a class-only detector saw the same thing twice, e.g. once before the memory
        relocalised). While the memory is unlocalised, objects stored since are left alone (stale frame). The
        survivor is an object from before the last `relocalise()` if there is one, then the one seen more
        often, then the older; it takes the other's observations, stamps and observed-from edges. Its position
        is the observation-weighted mean, except that an object from before the last relocalise() keeps its
        own: the other was measured through a relocalisation that may still be retracted. Returns how many
        objects were folded away (the caller holds the transaction)."""
        limit = self.config.object_association_distance_m
        skip = set() if self.localised else set(self._frame_objects)
        merged = 0
        for pool in self._objects_by_class.values():
            def rank(o: int) -> tuple:
                ob = self._objects[o]
                return (o in self._frame_objects, -ob.observation_count, ob.first_seen_ns, o)

            ids = sorted((o for o in pool if self._objects[o].instance_id is None and o not in skip), key=rank)
            if len(ids) < 2:
                continue
            pos = np.array([self._objects[o].position_m for o in ids])
            alive = np.ones(len(ids), bool)
            for i, keep in enumerate(ids):
                if not alive[i]:
                    continue
                alive[i] = False
                near = np.nonzero(alive & (np.linalg.norm(pos - pos[i], axis=1) <= limit))[0]
                for j in near.tolist():
                    self._fold_object(keep, ids[j])
                    alive[j] = False
                    merged += 1
        return merged

    def _fold_object(self, keep: int, drop: int) -> None:
        """Fold object `drop` into object `keep` (see `_merge_objects`)."""
        a, b = self._objects[keep], self._objects[drop]
        na, nb = a.observation_count, b.observation_count
        if (keep in self._frame_objects) == (drop in self._frame_objects):
            a.position_m = _mean_position(a.position_m, na, b.position_m, nb)
        if b.embedding is not None:
            a.embedding = _mean_embedding(a.embedding, na, b.embedding, nb, self.config.embedding_average_max_visits)
        a.observation_count = na + nb
        a.first_seen_ns, a.last_seen_ns = min(a.first_seen_ns, b.first_seen_ns), max(a.last_seen_ns, b.last_seen_ns)
        a.label = a.label or b.label
        seen_from = [n for n, d in self.graph[drop].items() if d["kind"] is EdgeKind.OBSERVED_FROM]
        self._remove_object(drop)
        self._frame_objects.discard(drop)
        for place_id in seen_from:
            if not self.graph.has_edge(place_id, keep):
                self.graph.add_edge(place_id, keep, kind=EdgeKind.OBSERVED_FROM)
                self._store.upsert_edge(place_id, keep, EdgeKind.OBSERVED_FROM, None)
        self._store.upsert_object(a)
        self._set_object_room(a)

    def place_values(self, now_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Forgetting scores of all places: (node ids, values); lower is forgotten first.

        value = (1 + ln visits) * 0.5 ** (age_s / forget_half_life_s) * (1 - redundancy), where age is the
        time since the place was last seen (`now_ns` in this session's clock) and redundancy the highest cosine
        similarity to a traversability neighbour (clipped to [0, 0.99]): old, rarely visited, redundant places
        go first.
        """
        return self._place_values(int(now_ns) + self.stamp_offset_ns)

    def _place_values(self, now_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """`place_values` at `now_ns` on the stored timeline."""
        pl = self._places
        slots = pl.alive_slots()
        age_s = np.maximum(now_ns - pl.last_ns[slots], 0) / 1e9
        value = ((1.0 + np.log(np.maximum(pl.visits[slots], 1))) * 0.5 ** (age_s / self.config.forget_half_life_s)
                 * (1.0 - np.clip(pl.redundancy[slots], 0.0, 0.99)))
        return pl.ids[slots].copy(), value

    def enforce_capacity(self, now_ns: int) -> int:
        """Forget the least valuable places (see `place_values`, at `now_ns` in this session's clock) while over
        `max_places`; the place the robot is at is kept. Neighbours of a forgotten place are linked so paths
        survive. Returns the count."""
        return self._enforce_capacity(int(now_ns) + self.stamp_offset_ns)

    def _enforce_capacity(self, now_ns: int) -> int:
        """`enforce_capacity` at `now_ns` on the stored timeline."""
        cfg, pl = self.config, self._places
        if not cfg.max_places or len(pl.slot_of) <= cfg.max_places:
            return 0
        # at least one place stays: the one the robot is at (a small max_places could make the target 0)
        target = max(1, int(cfg.max_places * (1.0 - cfg.forget_batch_fraction)))
        ids, value = self._place_values(now_ns)
        if self._prev_slot >= 0:
            value[ids == pl.ids[self._prev_slot]] = np.inf
        count = len(ids) - target
        victims = ids[np.argpartition(value, count - 1)[:count]]
        with self._transaction():
            for node_id in victims.tolist():
                self._remove_place(pl.slot_of[node_id], bypass=True)
        return count

    # -- bulk -------------------------------------------------------------------------------------------

    def add_places_bulk(self, stamps_ns: np.ndarray, poses: np.ndarray, embeddings: np.ndarray, *,
                        link_sequential: bool = True) -> np.ndarray:
        """Insert many places at once without novelty tests (importing a map, building benchmarks).

        Vectorised path: one index batch, one database transaction. With `link_sequential`, consecutive rows
        closer than `max_edge_distance_m` get traversability edges. Places get no room until the next
        `segment_rooms()`. Call `consolidate(full=True)` afterwards if rows may be redundant.

        Args:
            stamps_ns: (N,) non-decreasing int stamps, not earlier than the session's last accepted stamp (the
                first stamps of a session may be earlier than the stored ones: see the module docstring).
            poses: (N, 3) memory-frame [x_m, y_m, yaw_rad].
            embeddings: (N, embedding_dim).

        Returns:
            (N,) node ids.

        Raises:
            InvalidInputError: naming the field (and row) at fault; the memory is unchanged.
        """
        stamps = np.asarray(stamps_ns)
        if stamps.ndim != 1 or not np.issubdtype(stamps.dtype, np.integer):
            raise InvalidInputError("stamps_ns", f"expected (N,) integers, got {stamps.dtype} {stamps.shape}")
        n = len(stamps)
        poses = np.asarray(poses, dtype=np.float64)
        if poses.shape != (n, 3):
            raise InvalidInputError("poses", f"expected shape ({n}, 3), got {poses.shape}")
        if not np.all(np.isfinite(poses)):
            raise InvalidInputError(f"poses[{int(np.argmin(np.isfinite(poses).all(1)))}]", "contains NaN or inf")
        embs = check_embeddings(embeddings, self.config.embedding_dim)
        if len(embs) != n:
            raise InvalidInputError("embeddings", f"expected {n} rows, got {len(embs)}")
        if n == 0:
            return np.zeros(0, np.int64)
        stamps = stamps.astype(np.int64)
        if np.any(np.diff(stamps) < 0):
            raise InvalidInputError(f"stamps_ns[{int(np.argmax(np.diff(stamps) < 0)) + 1}]", "goes backwards")
        first, offset = self._session_stamp(int(stamps[0]), "stamps_ns[0]")
        if offset and int(stamps[-1]) + offset > _INT64_MAX:
            raise InvalidInputError(f"stamps_ns[{n - 1}]", f"{int(stamps[-1])} is past the int64 range of ns once "
                                                          f"shifted by this session's stamp_offset_ns {offset}")
        stamps = stamps + offset

        pl = self._places
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        slots = pl.alloc(n)
        pl.ids[slots] = ids
        pl.pose[slots] = poses
        pl.first_ns[slots] = pl.last_ns[slots] = stamps
        pl.visits[slots] = 1
        pl.room[slots] = -1
        pl.redundancy[slots] = 0.0
        pl.has_thumb[slots] = False
        pl.alive[slots] = True
        pl.slot_of.update(zip(ids.tolist(), slots.tolist()))
        self._index.add_batch(slots, embs)
        for s, x, y in zip(slots.tolist(), poses[:, 0].tolist(), poses[:, 1].tolist()):
            self._grid.add(s, x, y)
        self.graph.add_nodes_from(ids.tolist(), layer=Layer.PLACE)
        edges = np.zeros((0, 2), np.int64)
        dist = np.zeros(0)
        if link_sequential and n > 1:
            dist = np.hypot(*np.diff(poses[:, :2], axis=0).T)
            keep = dist <= self.config.max_edge_distance_m
            edges = np.stack([slots[:-1][keep], slots[1:][keep]], axis=1)
            dist = np.maximum(dist[keep], 1e-3)
            self.graph.add_edges_from(
                (a, b, {"kind": EdgeKind.TRAVERSABLE, "distance_m": d})
                for a, b, d in zip(ids[:-1][keep].tolist(), ids[1:][keep].tolist(), dist.tolist()))
            self._update_redundancy_bulk(edges)
        self._next_id += n
        self._begin_session(first, offset)
        self._last_stamp_ns = int(stamps[-1])
        blobs = embs.astype("<f4")
        with self._transaction():
            self._store.insert_places(
                (i, x, y, t, s, s, 1, None, blobs[k].tobytes())
                for k, (i, x, y, t, s) in enumerate(zip(ids.tolist(), poses[:, 0].tolist(), poses[:, 1].tolist(),
                                                        poses[:, 2].tolist(), stamps.tolist())))
            self._store.insert_edges((int(pl.ids[a]), int(pl.ids[b]), int(EdgeKind.TRAVERSABLE), d)
                                     for (a, b), d in zip(edges.tolist(), dist.tolist()))
            self._store.set_next_node_id(self._next_id)
        return ids

    def _update_redundancy_bulk(self, edge_slots: np.ndarray, chunk: int = 65_536) -> None:
        pl = self._places
        for s in range(0, len(edge_slots), chunk):
            e = edge_slots[s : s + chunk]
            sims = np.einsum("ij,ij->i", self._index.get_many(e[:, 0]), self._index.get_many(e[:, 1]))
            np.maximum.at(pl.redundancy, e[:, 0], sims.astype(np.float32))
            np.maximum.at(pl.redundancy, e[:, 1], sims.astype(np.float32))

    # -- queries ----------------------------------------------------------------------------------------

    def retrieve(self, embedding: np.ndarray, k: int = 10, *, exact: bool = False) -> list[Retrieval]:
        """The k places whose embeddings are most cosine-similar to `embedding`, best first.

        Exact up to `index_exact_max_size` places, IVF-approximate beyond (unless `exact`). Equal similarities
        rank the lower node id first, and the k kept at a tie are those with the lowest ids, so a memory and
        the same memory reopened from its file answer alike (in IVF mode too: the file keeps the index's
        training, see `_transaction`).

        Raises:
            InvalidInputError: bad embedding or k < 1.
        """
        emb = check_embedding(embedding, self.config.embedding_dim)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidInputError("k", f"expected a positive int, got {k!r}")
        pl = self._places
        slots, sims = self._index.search(emb, int(k), exact=exact, tie_order=pl.ids)
        return [Retrieval(int(pl.ids[s]), float(sim), Pose2D(*pl.pose[s].tolist()))
                for s, sim in zip(slots.tolist(), sims.tolist())]

    def shortest_path(self, start_id: int, goal_id: int) -> PathResult | None:
        """Shortest path between two places over traversability edges (Dijkstra on distance_m).

        Returns:
            The path, or None if the places are not connected.

        Raises:
            InvalidInputError: if either id is not a place node.
        """
        for field, node in (("start_id", start_id), ("goal_id", goal_id)):
            if node not in self._places.slot_of:
                raise InvalidInputError(field, f"{node} is not a place node")

        def weight(u: int, v: int, data: dict) -> float | None:
            return data["distance_m"] if data["kind"] is EdgeKind.TRAVERSABLE else None

        try:
            length, path = nx.single_source_dijkstra(self.graph, start_id, goal_id, weight=weight)
        except nx.NetworkXNoPath:
            return None
        return PathResult(tuple(path), float(length))

    def nearest_place(self, pose: Pose2D | Sequence[float]) -> tuple[int, float] | None:
        """The place nearest to a memory-frame position: (node id, distance in m), or None when empty
        (equidistant places: the lowest node id).

        Raises:
            InvalidInputError: a bad pose.
        """
        slots, d = self._place_distances(check_pose(pose, "pose"))
        if slots.size == 0:
            return None
        near = np.flatnonzero(d == d.min())   # equidistant: the lowest node id (slot order is not the same reopened)
        i = int(near[np.argmin(self._places.ids[slots[near]])])
        return int(self._places.ids[slots[i]]), float(d[i])

    def places_within(self, pose: Pose2D | Sequence[float], radius_m: float) -> list[PlaceInfo]:
        """Copies of the places within `radius_m` of a memory-frame position, nearest first
        (equidistant ones by node id).

        Raises:
            InvalidInputError: a bad pose or radius.
        """
        p = check_pose(pose, "pose")
        if not math.isfinite(radius_m) or radius_m < 0:
            raise InvalidInputError("radius_m", f"must be a finite distance >= 0, got {radius_m}")
        slots, d = self._place_distances(p)
        inside = np.flatnonzero(d <= radius_m)
        ids = self._places.ids[slots[inside]]
        return [self.place(int(ids[i])) for i in np.lexsort((ids, d[inside]))]   # equidistant: by node id

    def _place_distances(self, p: Pose2D) -> tuple[np.ndarray, np.ndarray]:
        """The live place slots and their planar distances to a memory-frame position, m."""
        pl = self._places
        slots = pl.alive_slots()
        return slots, np.hypot(pl.pose[slots, 0] - p.x_m, pl.pose[slots, 1] - p.y_m)

    def place(self, node_id: int) -> PlaceInfo:
        """A copy of a place node's data.

        Raises:
            InvalidInputError: if `node_id` is not a place.
        """
        slot = self._places.slot_of.get(node_id)
        if slot is None:
            raise InvalidInputError("node_id", f"{node_id} is not a place node")
        pl, offset = self._places, self.stamp_offset_ns
        room = int(pl.room[slot])
        return PlaceInfo(node_id, Pose2D(*pl.pose[slot].tolist()), int(pl.first_ns[slot]) - offset,
                         int(pl.last_ns[slot]) - offset, int(pl.visits[slot]), room if room >= 0 else None,
                         self._index.get(slot))

    def place_ids(self) -> np.ndarray:
        """Ids of all place nodes (ascending)."""
        return np.sort(self._places.ids[self._places.alive_slots()])

    def place_columns(self) -> dict[str, np.ndarray]:
        """Every place's data but its embedding, as column copies in ascending node id order: for a reader of all
        places (drawing, listing) that `place()` one at a time would slow (it copies each embedding; ~1.6 s to
        draw 100,000 places that way).

        Returns:
            Row i is place `node_id[i]` as `place()` gives it: "node_id" (N,) int64, "pose" (N, 3) float64
            memory-frame [x_m, y_m, yaw_rad], "first_seen_ns" and "last_seen_ns" (N,) int64 in the session's clock,
            "visit_count" (N,) int64, "room_id" (N,) int64 (-1: no room).
        """
        pl, offset = self._places, self.stamp_offset_ns
        slots = pl.alive_slots()
        slots = slots[np.argsort(pl.ids[slots], kind="stable")]
        return {"node_id": pl.ids[slots], "pose": pl.pose[slots], "first_seen_ns": pl.first_ns[slots] - offset,
                "last_seen_ns": pl.last_ns[slots] - offset, "visit_count": pl.visits[slots], "room_id": pl.room[slots]}

    def thumbnail(self, node_id: int) -> np.ndarray | None:
        """A place's keyframe thumbnail as (h, w, 3) uint8, or None if it has none."""
        if node_id not in self._places.slot_of:
            raise InvalidInputError("node_id", f"{node_id} is not a place node")
        data = self._store.thumbnail(node_id)
        return None if data is None else decode_png(data)

    def objects(self, class_id: int | None = None) -> list[ObjectRow]:
        """Copies of the object nodes (of one class if given), by id; stamps in this session's clock."""
        ids = sorted(self._objects if class_id is None else self._objects_by_class.get(class_id, ()))
        offset = self.stamp_offset_ns
        return [replace(self._objects[i], first_seen_ns=self._objects[i].first_seen_ns - offset,
                        last_seen_ns=self._objects[i].last_seen_ns - offset) for i in ids]

    def rooms(self) -> dict[int, list[int]]:
        """Room id -> ids of its places."""
        out: dict[int, list[int]] = {r: [] for r in self._room_sums}
        pl = self._places
        for slot in pl.alive_slots().tolist():
            if pl.room[slot] >= 0:
                out[int(pl.room[slot])].append(int(pl.ids[slot]))
        return out

    def to_memory_frame(self, odometry_pose: Pose2D | Sequence[float]) -> Pose2D:
        """Map an odometry pose into the memory frame with the current drift correction."""
        return _se2_apply(self._correction, check_pose(odometry_pose, "odometry_pose"))

    @property
    def drift_correction(self) -> tuple[float, float, float]:
        """Current memory <- odometry correction (tx_m, ty_m, theta_rad)."""
        return tuple(self._correction.tolist())  # type: ignore[return-value]

    def sizes(self) -> tuple[int, int, int]:
        """(places, objects, rooms): `stats()`'s counts without its pass over every edge (34 ms at 20,000
        places), for a node that reports them every decision or every second."""
        return len(self._places.slot_of), len(self._objects), len(self._room_sums)

    def stats(self) -> MemoryStats:
        kinds = Counter(d["kind"] for _, _, d in self.graph.edges(data=True))
        places, objects, rooms = self.sizes()
        return MemoryStats(
            places=places, objects=objects, rooms=rooms,
            traversable_edges=kinds[EdgeKind.TRAVERSABLE], observed_from_edges=kinds[EdgeKind.OBSERVED_FROM],
            graph_nodes=self.graph.number_of_nodes(), graph_edges=self.graph.number_of_edges(),
            index_mode=self._index.mode, index_lists=self._index.num_lists, index_bytes=self._index.nbytes,
            db_path=self._store.path, schema_version=self._store.schema_version(),
            last_stamp_ns=None if self._last_stamp_ns is None else self._last_stamp_ns - self.stamp_offset_ns)
