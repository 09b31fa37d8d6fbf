"""Top-k cosine retrieval over unit embeddings: exact brute force when small, an IVF index when large.

The index stores float32 unit vectors under caller-chosen non-negative integer keys (the scene graph uses
dense row slots). Vectors live in contiguous blocks ("inverted lists") that grow by doubling, so a query
is a handful of BLAS matrix-vector products plus one `partition`, and a float64 rescoring of the few rows
near the top:

* exact mode (size <= `exact_max_size`): one block holds everything; search scans it all. On two cores a
  20k x 256 float32 scan takes ~1.4 ms, 100k ~7 ms: that memory-bound scan is why the default switch to the
  approximate index is 20k vectors, well below the ~100k where exact search would still be "fast enough"
  for a human but not for a 2 ms budget.
* IVF mode: spherical k-means (trained on a sample) splits the vectors into ~sqrt(N) lists; a query scans
  the `nprobe` lists whose centroids are most similar. The index retrains itself (amortised) each time it
  has grown `retrain_growth` times since the last training, and falls back to exact mode when it shrinks
  below half the threshold. A training depends only on the vectors held and the seed (the sample is drawn
  in the caller's `key_order`, seeded by the size), and `training` / `restore` carry it over to an index
  rebuilt elsewhere (the scene graph stores it with the memory), so that a reopened index scans the same lists.

Results do not depend on how the vectors happen to be laid out (insertion and removal order, which list a
vector sits in, exact or IVF mode): equal similarities rank the lower key first (or the lower of a caller's
tie-break values), and the similarities returned are computed row by row in float64, since a BLAS scan may
round one vector's dot product differently depending on its row; likewise the list a vector goes to is
settled in float64 where two centroids come that close. Two indexes holding the same vectors under the same
keys give the same results in exact mode or with `exact=True`, and in IVF mode when they hold the same
training (the same centroids).

This module also holds the input checks shared by the memory components (embeddings, poses, stamps), so
every component rejects bad input with the same `InvalidInputError` naming the offending field.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from memnav.core.types import Pose2D


class InvalidInputError(ValueError):
    """An argument failed validation; `field` names it. The memory component is left unchanged."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


# ---------------------------------------------------------------------------------------------------------
# input checks shared by the memory components


def check_embedding(value: object, dim: int, field: str = "embedding") -> np.ndarray:
    """Validate one embedding and return it as a float32 unit vector of shape (dim,).

    Raises:
        InvalidInputError: if it is not a finite, non-zero vector of length `dim`.
    """
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(field, f"expected a numeric vector of length {dim}") from err
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise InvalidInputError(field, f"expected shape ({dim},), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidInputError(field, "contains NaN or inf")
    # the norm in float64: squared in float32, a component of 2e19 or more overflows and the vector came out zero
    norm = float(np.linalg.norm(arr.astype(np.float64)))
    if norm < 1e-12:
        raise InvalidInputError(field, "has zero norm; cosine similarity is undefined")
    return (arr / norm).astype(np.float32)


def check_embeddings(value: object, dim: int, field: str = "embeddings") -> np.ndarray:
    """Validate an (N, dim) batch of embeddings; return float32 unit rows (a new array).

    Raises:
        InvalidInputError: naming the first offending row.
    """
    arr = np.asarray(value, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise InvalidInputError(field, f"expected shape (N, {dim}), got {arr.shape}")
    finite = np.all(np.isfinite(arr), axis=1)
    if not np.all(finite):
        raise InvalidInputError(f"{field}[{int(np.argmin(finite))}]", "contains NaN or inf")
    norms = np.linalg.norm(arr.astype(np.float64), axis=1)   # float64: see check_embedding
    if np.any(norms < 1e-12):
        raise InvalidInputError(f"{field}[{int(np.argmax(norms < 1e-12))}]", "has zero norm")
    return (arr / norms[:, None]).astype(np.float32)


def check_pose(value: Pose2D | Sequence[float] | np.ndarray, field: str = "pose") -> Pose2D:
    """Accept a Pose2D or an [x_m, y_m, yaw_rad] sequence; reject non-finite values naming the field.

    Raises:
        InvalidInputError: if a component is missing or not finite.
    """
    if isinstance(value, Pose2D):
        parts = {"x_m": value.x_m, "y_m": value.y_m, "yaw_rad": value.yaw_rad}
    else:
        try:
            arr = np.asarray(value, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as err:
            raise InvalidInputError(field, "expected a Pose2D or [x_m, y_m, yaw_rad]") from err
        if arr.shape != (3,):
            raise InvalidInputError(field, f"expected a Pose2D or [x_m, y_m, yaw_rad], got shape {arr.shape}")
        parts = {"x_m": float(arr[0]), "y_m": float(arr[1]), "yaw_rad": float(arr[2])}
    for name, component in parts.items():
        if not math.isfinite(component):
            raise InvalidInputError(f"{field}.{name}", f"must be finite, got {component}")
    if isinstance(value, Pose2D):
        return value
    return Pose2D(parts["x_m"], parts["y_m"], parts["yaw_rad"])


_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def check_stamp(stamp_ns: object, last_stamp_ns: int | None, field: str = "stamp_ns") -> int:
    """Validate a timestamp: an integer number of nanoseconds, not earlier than `last_stamp_ns`.

    Equal stamps are accepted (two observations taken at the same instant).

    Raises:
        InvalidInputError: if it is not an integer, lies outside int64 (where stamps are stored), or goes backwards.
    """
    if isinstance(stamp_ns, bool) or not isinstance(stamp_ns, (int, np.integer)):
        raise InvalidInputError(field, f"expected an integer number of nanoseconds, got {stamp_ns!r}")
    stamp = int(stamp_ns)
    if not _INT64_MIN <= stamp <= _INT64_MAX:
        raise InvalidInputError(field, f"{stamp} does not fit a signed 64-bit integer of nanoseconds")
    if last_stamp_ns is not None and stamp < last_stamp_ns:
        raise InvalidInputError(field, f"goes backwards: {stamp} < last accepted {last_stamp_ns}")
    return stamp


# ---------------------------------------------------------------------------------------------------------


def _row_similarities(vecs: np.ndarray, q: np.ndarray) -> np.ndarray:
    """float32 dot products of float32 rows with q, each row summed alone in float64 (a BLAS product may round
    a row differently depending on its position in the matrix)."""
    # float64 products of float32 values are exact, and each row is summed alone, in one order
    return (vecs.astype(np.float64) * q.astype(np.float64)).sum(axis=1).astype(np.float32)


class _Block:
    """A growable contiguous run of (key, vector) rows; removal swaps the last row into the hole."""

    __slots__ = ("keys", "n", "vecs")

    def __init__(self, dim: int, capacity: int = 16) -> None:
        self.vecs = np.empty((max(capacity, 1), dim), dtype=np.float32)
        self.keys = np.empty(max(capacity, 1), dtype=np.int64)
        self.n = 0

    def reserve(self, capacity: int) -> None:
        if capacity <= self.vecs.shape[0]:
            return
        vecs = np.empty((capacity, self.vecs.shape[1]), dtype=np.float32)
        keys = np.empty(capacity, dtype=np.int64)
        vecs[: self.n] = self.vecs[: self.n]
        keys[: self.n] = self.keys[: self.n]
        self.vecs, self.keys = vecs, keys

    def append(self, keys: np.ndarray, vecs: np.ndarray) -> int:
        """Append rows; return the position of the first one."""
        start, m = self.n, len(keys)
        if start + m > self.vecs.shape[0]:
            self.reserve(max(2 * self.vecs.shape[0], start + m))
        self.vecs[start : start + m] = vecs
        self.keys[start : start + m] = keys
        self.n = start + m
        return start

    def remove(self, pos: int) -> int:
        """Remove the row at pos; return the key that moved into pos (-1 if none moved)."""
        last = self.n - 1
        moved = -1
        if pos != last:
            self.vecs[pos] = self.vecs[last]
            self.keys[pos] = self.keys[last]
            moved = int(self.keys[pos])
        self.n = last
        return moved

    @property
    def nbytes(self) -> int:
        return self.vecs.nbytes + self.keys.nbytes


@dataclass(frozen=True)
class IvfTraining:
    """What an IVF index was trained to: enough for another index holding the same vectors to build the same
    lists without training (see `EmbeddingIndex.restore`).

    Attributes:
        centroids: (nlist, dim) float32 unit rows.
        trained_size: how many vectors the index held when they were trained (it retrains once it holds
            `retrain_growth` times as many).
        exact_max_size: the index's `exact_max_size` then (an index set up otherwise does not take them).
    """

    centroids: np.ndarray
    trained_size: int
    exact_max_size: int


class IndexMode(Enum):
    """The search regime an index is in."""

    EXACT = "exact"
    IVF = "ivf"


class EmbeddingIndex:
    """Cosine top-k over float32 unit vectors keyed by non-negative ints (exact, then IVF when large).

    Not thread-safe; the owner serialises calls.

    Args:
        dim: embedding dimension.
        exact_max_size: brute-force search up to this many vectors; an IVF index beyond.
        nprobe: IVF lists scanned per query (more: higher recall, slower).
        retrain_growth: retrain the IVF centroids each time the size has grown by this factor.
        kmeans_iters: Lloyd iterations when training IVF centroids.
        train_points_per_list: training sample size per IVF list.
        seed: seed of the k-means sampling.
        key_order: maps an array of keys to values that order them (distinct per key; default: the keys). The
            training sample is drawn in this order, so two indexes holding the same vectors under keys that this
            order ranks alike train the same centroids (the scene graph passes the node id of each slot).
    """

    def __init__(self, dim: int, *, exact_max_size: int = 20_000, nprobe: int = 16,
                 retrain_growth: float = 4.0, kmeans_iters: int = 10, train_points_per_list: int = 64,
                 seed: int = 0, key_order: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        if exact_max_size < 1 or nprobe < 1 or retrain_growth <= 1.0 or kmeans_iters < 1:
            raise ValueError("exact_max_size and nprobe must be >= 1, retrain_growth > 1, kmeans_iters >= 1")
        self.dim = dim
        self.exact_max_size = exact_max_size
        self.nprobe = nprobe
        self.retrain_growth = retrain_growth
        self.kmeans_iters = kmeans_iters
        self.train_points_per_list = train_points_per_list
        self.seed = seed
        self._key_order = key_order
        self.generation = 0   # counts the (re)trainings and switches to exact mode: when `training` changed
        self._blocks: list[_Block] = [_Block(dim)]
        self._centroids: np.ndarray | None = None   # (nlist, dim) float32 unit rows in IVF mode
        self._trained_size = 0
        self._key_block = np.full(0, -1, dtype=np.int32)   # key -> block number (-1: absent)
        self._key_pos = np.zeros(0, dtype=np.int64)        # key -> row within its block
        self._size = 0

    # -- bookkeeping ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: int) -> bool:
        return 0 <= key < len(self._key_block) and self._key_block[key] >= 0

    @property
    def mode(self) -> IndexMode:
        """`IndexMode.EXACT` or `IndexMode.IVF`."""
        return IndexMode.EXACT if self._centroids is None else IndexMode.IVF

    @property
    def num_lists(self) -> int:
        return len(self._blocks)

    @property
    def nbytes(self) -> int:
        """Bytes held by vectors, keys, key maps and centroids (allocated capacity, not just used rows)."""
        total = sum(b.nbytes for b in self._blocks) + self._key_block.nbytes + self._key_pos.nbytes
        return total + (0 if self._centroids is None else self._centroids.nbytes)

    def _ensure_keys(self, max_key: int) -> None:
        if max_key < len(self._key_block):
            return
        cap = max(2 * len(self._key_block), max_key + 1, 64)
        kb = np.full(cap, -1, dtype=np.int32)
        kp = np.zeros(cap, dtype=np.int64)
        kb[: len(self._key_block)] = self._key_block
        kp[: len(self._key_pos)] = self._key_pos
        self._key_block, self._key_pos = kb, kp

    def _assign(self, vecs: np.ndarray, chunk: int = 16_384) -> np.ndarray:
        """Nearest IVF list of each row (all zeros in exact mode), the lowest list among equally near ones.

        The same for a vector whatever the batch it comes in: where the float32 scan puts another centroid within
        its rounding error of the nearest (a BLAS product rounds a row differently depending on its position),
        the row is settled by `_row_similarities` instead.
        """
        if self._centroids is None:
            return np.zeros(len(vecs), dtype=np.int64)
        cents = self._centroids
        slack = 2.0 * (self.dim + 1) * 2.0 ** -24   # as in `search`, for unit rows and centroids
        if len(vecs) == 1:      # one insert or update: the same test without the batch bookkeeping
            sims = cents @ vecs[0]
            best = int(np.argmax(sims))
            if np.count_nonzero(sims >= sims[best] - slack) > 1:
                best = int(np.argmax(_row_similarities(cents, vecs[0])))
            return np.array([best], dtype=np.int64)
        out = np.empty(len(vecs), dtype=np.int64)
        for s in range(0, len(vecs), chunk):
            sims = vecs[s : s + chunk] @ cents.T
            best = np.argmax(sims, axis=1)
            top = sims[np.arange(len(best)), best]
            close = np.count_nonzero(sims >= (top - slack)[:, None], axis=1) > 1
            for i in np.flatnonzero(close).tolist():
                best[i] = np.argmax(_row_similarities(cents, vecs[s + i]))
            out[s : s + chunk] = best
        return out

    # -- mutation ---------------------------------------------------------------------------------------

    def add(self, key: int, vec: np.ndarray) -> None:
        """Add one unit vector under a new key (the caller has validated and normalised it).

        Raises:
            KeyError: if the key is already present.
        """
        self.add_batch(np.array([key], dtype=np.int64), np.asarray(vec, dtype=np.float32)[None, :])

    def add_batch(self, keys: np.ndarray, vecs: np.ndarray) -> None:
        """Add many unit vectors at once (vectorised; used to load or bulk-build).

        Raises:
            KeyError: if any key is negative, duplicated or already present.
        """
        self._add(keys, vecs)
        self._maybe_retrain()

    def _add(self, keys: np.ndarray, vecs: np.ndarray) -> None:
        """add_batch without retraining."""
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        vecs = np.asarray(vecs, dtype=np.float32)
        if len(keys) == 0:
            return
        if vecs.shape != (len(keys), self.dim):
            raise ValueError(f"vecs must have shape ({len(keys)}, {self.dim}), got {vecs.shape}")
        if keys.min() < 0:
            raise KeyError(f"index keys must be >= 0, got {int(keys.min())}")
        self._ensure_keys(int(keys.max()))
        if np.any(self._key_block[keys] >= 0) or len(np.unique(keys)) != len(keys):
            raise KeyError("index keys must be new and unique")
        lists = self._assign(vecs)
        if len(keys) == 1:
            self._append(int(lists[0]), keys, vecs)
        else:
            order = np.argsort(lists, kind="stable")
            bounds = np.flatnonzero(np.diff(lists[order])) + 1
            for group in np.split(order, bounds):
                self._append(int(lists[group[0]]), keys[group], vecs[group])
        self._size += len(keys)

    def restore(self, keys: np.ndarray, vecs: np.ndarray, training: IvfTraining | None) -> None:
        """Fill an empty index with many vectors and the training another index holding them had (`training`),
        so that both scan the same lists. The training is taken only if it was made under this index's
        `exact_max_size` and the index is not below half of it (where that index would have left IVF mode);
        otherwise, or with None, the index trains itself as `add_batch` would.

        Raises:
            ValueError: the index is not empty, or the centroids are not finite (nlist, dim) rows.
            KeyError: as `add_batch`.
        """
        if self._size:
            raise ValueError("restore() fills an empty index")
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        if training is not None:
            cents = np.asarray(training.centroids, dtype=np.float32)
            if cents.ndim != 2 or cents.shape[1] != self.dim or len(cents) == 0 or not np.all(np.isfinite(cents)):
                raise ValueError(f"IVF centroids must be finite (nlist, {self.dim}) rows, got {cents.shape}")
            if training.trained_size < 1:
                raise ValueError(f"IVF trained_size must be >= 1, got {training.trained_size}")
            if training.exact_max_size != self.exact_max_size or len(keys) < self.exact_max_size // 2:
                training = None
        self._blocks[0].reserve(len(keys))
        self._add(keys, vecs)
        if training is not None:
            self._rebuild(cents.copy())
            self._trained_size = int(training.trained_size)
        self._maybe_retrain()

    @property
    def training(self) -> IvfTraining | None:
        """The current IVF training (a copy), None in exact mode."""
        if self._centroids is None:
            return None
        return IvfTraining(self._centroids.copy(), self._trained_size, self.exact_max_size)

    def _append(self, block_no: int, keys: np.ndarray, vecs: np.ndarray) -> None:
        start = self._blocks[block_no].append(keys, vecs)
        self._key_block[keys] = block_no
        self._key_pos[keys] = np.arange(start, start + len(keys))

    def remove(self, key: int) -> None:
        """Remove a key.

        Raises:
            KeyError: if the key is absent.
        """
        if key not in self:
            raise KeyError(f"index key {key} is absent")
        block_no, pos = int(self._key_block[key]), int(self._key_pos[key])
        moved = self._blocks[block_no].remove(pos)
        if moved >= 0:
            self._key_pos[moved] = pos
        self._key_block[key] = -1
        self._size -= 1
        if self._centroids is not None and self._size < self.exact_max_size // 2:
            self._rebuild(None)

    def update(self, key: int, vec: np.ndarray) -> None:
        """Replace the vector stored under an existing key (moves it to its new nearest list)."""
        if key not in self:
            raise KeyError(f"index key {key} is absent")
        vec = np.asarray(vec, dtype=np.float32)
        block_no = int(self._key_block[key])
        if int(self._assign(vec[None, :])[0]) == block_no:
            self._blocks[block_no].vecs[self._key_pos[key]] = vec
            return
        self.remove(key)
        self.add(key, vec)

    def get(self, key: int) -> np.ndarray:
        """A copy of the vector stored under key."""
        if key not in self:
            raise KeyError(f"index key {key} is absent")
        return self._blocks[int(self._key_block[key])].vecs[self._key_pos[key]].copy()

    def get_many(self, keys: Sequence[int] | np.ndarray) -> np.ndarray:
        """(len(keys), dim) copies of the stored vectors.

        Raises:
            KeyError: naming the first key that is absent (a removed key's stale position would otherwise read
                whatever vector sits there now).
        """
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        present = (keys >= 0) & (keys < len(self._key_block))
        present[present] = self._key_block[keys[present]] >= 0
        if not present.all():
            raise KeyError(f"index key {int(keys[np.argmin(present)])} is absent")
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        blocks, pos = self._key_block[keys], self._key_pos[keys]
        if len(self._blocks) == 1:
            out[:] = self._blocks[0].vecs[pos]
            return out
        if len(keys) <= 64:     # a few rows (a place's neighbours): grouping by list costs more than it saves
            for i, (b, p) in enumerate(zip(blocks.tolist(), pos.tolist())):
                out[i] = self._blocks[b].vecs[p]
            return out
        order = np.argsort(blocks, kind="stable")
        cuts = np.flatnonzero(np.diff(blocks[order])) + 1
        for group in np.split(order, cuts):
            out[group] = self._blocks[int(blocks[group[0]])].vecs[pos[group]]
        return out

    def similarities(self, keys: Sequence[int] | np.ndarray, query: np.ndarray) -> np.ndarray:
        """Cosine similarities of the vectors stored under `keys` to a unit query, as `search` scores them.

        Each one is computed on its own in float64 (then rounded to float32), so it does not depend on which
        other keys are asked for or in what order: equal vectors give equal similarities, and a caller that
        picks the best of them can break ties by its own order.

        Raises:
            KeyError: naming the first key that is absent.
        """
        return _row_similarities(self.get_many(keys), np.asarray(query, dtype=np.float32))

    def keys(self) -> np.ndarray:
        """All keys currently stored (unordered)."""
        return np.concatenate([b.keys[: b.n] for b in self._blocks]) if self._size else np.zeros(0, np.int64)

    # -- IVF training -----------------------------------------------------------------------------------

    def _maybe_retrain(self) -> None:
        if self._centroids is None:
            if self._size > self.exact_max_size:
                self._rebuild(self._train())
        elif self._size > self.retrain_growth * self._trained_size:
            self._rebuild(self._train())

    def _all(self) -> tuple[np.ndarray, np.ndarray]:
        keys = np.concatenate([b.keys[: b.n] for b in self._blocks])
        vecs = np.concatenate([b.vecs[: b.n] for b in self._blocks])
        return keys, vecs

    def _train(self) -> np.ndarray:
        """Spherical k-means on a sample; returns (nlist, dim) unit centroids.

        Depends only on the vectors held, their `key_order` and the seed, not on how they were inserted (the
        storage layout) or on earlier trainings: an index rebuilt from the same vectors trains the same lists.
        """
        # never more lists than vectors (an exact_max_size under 8 switches to lists with fewer than 8 vectors)
        nlist = min(int(np.clip(round(math.sqrt(self._size)), 8, 8192)), self._size)
        sample_size = min(self._size, nlist * self.train_points_per_list)
        rng = np.random.default_rng([self.seed, self._size])
        keys = self.keys()
        rank = keys if self._key_order is None else np.asarray(self._key_order(keys))
        # the sample in key order, gathered without materialising all vectors
        sample = keys[np.argsort(rank, kind="stable")[np.sort(rng.choice(self._size, size=sample_size,
                                                                           replace=False))]]
        x = self.get_many(sample)
        centroids = x[rng.choice(len(x), size=nlist, replace=False)].copy()
        for _ in range(self.kmeans_iters):
            assign = np.argmax(x @ centroids.T, axis=1)
            order = np.argsort(assign, kind="stable")
            present, first = np.unique(assign[order], return_index=True)
            sums = np.add.reduceat(x[order], first, axis=0)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            centroids[present] = sums / np.maximum(norms, 1e-12)
            empty = np.setdiff1d(np.arange(nlist), present)
            if len(empty):  # re-seed empty lists with random sample points
                centroids[empty] = x[rng.choice(len(x), size=len(empty), replace=False)]
        self._trained_size = self._size
        return centroids.astype(np.float32)

    def _rebuild(self, centroids: np.ndarray | None) -> None:
        """Redistribute every vector into the lists of `centroids` (None: one exact block)."""
        keys, vecs = self._all()
        self._centroids = centroids
        self.generation += 1
        lists = self._assign(vecs)
        nlist = 1 if centroids is None else len(centroids)
        counts = np.bincount(lists, minlength=nlist)
        # headroom so the next inserts do not immediately reallocate every list
        self._blocks = [_Block(self.dim, int(c + max(4, c // 8))) for c in counts]
        order = np.argsort(lists, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for b in range(nlist):
            group = order[bounds[b] : bounds[b + 1]]
            if len(group):
                self._append(b, keys[group], vecs[group])
        if centroids is None:
            self._trained_size = 0

    # -- search -----------------------------------------------------------------------------------------

    def search(self, query: np.ndarray, k: int, *, exact: bool = False, nprobe: int | None = None,
               tie_order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k stored vectors most similar (cosine) to a unit query.

        The ranking does not depend on the storage layout: the rows near the top of the scan are rescored in
        float64 (one row at a time, so a vector's similarity is the same wherever it is stored), and equal
        similarities rank the lower key first (the lower `tie_order[key]` if given), also where the cut after
        the k-th result goes through a tie. In IVF mode this holds among the vectors of the lists scanned.

        Args:
            query: (dim,) float32 unit vector (validated by the caller).
            k: number of results; fewer when the index holds fewer vectors, or (IVF mode) when the `nprobe`
                lists scanned hold fewer than k together (a large k with a small nprobe).
            exact: scan every list even in IVF mode (for recall measurements).
            nprobe: IVF lists to scan for this query (default: the index's `nprobe`).
            tie_order: optional array indexed by key, one distinct value per stored key: among equal
                similarities the key with the lower value comes first (e.g. the scene graph's node id of each
                slot). Default: the key itself.

        Returns:
            (keys int64 (k',), similarities float32 (k',)), most similar first.
        """
        if self._size == 0 or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        q = np.asarray(query, dtype=np.float32)
        if self._centroids is None or exact:
            probe = range(len(self._blocks))
        else:
            nprobe = min(self.nprobe if nprobe is None else max(1, nprobe), len(self._centroids))
            csims = self._centroids @ q
            probe = np.argpartition(-csims, nprobe - 1)[:nprobe] if nprobe < len(csims) else range(len(csims))
        blocks = [self._blocks[b] for b in probe if self._blocks[b].n]
        if not blocks:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        sims_parts = [b.vecs[: b.n] @ q for b in blocks]
        sims = sims_parts[0] if len(sims_parts) == 1 else np.concatenate(sims_parts)
        n = len(sims)
        if k < n:
            kth = np.partition(sims, n - k)[n - k]   # the k-th largest scanned similarity
            # a float32 dot product of unit vectors is within dim * 2^-24 * |q| of the exact one (whatever the
            # summation order): every row that can be in the exact top k, or tie with its k-th, scans within
            # twice that of `kth`
            slack = 2.0 * (self.dim + 1) * 2.0 ** -24 * math.sqrt(float(q @ q))
            short = np.flatnonzero(sims >= kth - slack)
        else:
            short = np.arange(n)
        keys, vecs = self._gather(blocks, short)
        scores = _row_similarities(vecs, q)
        rank = keys if tie_order is None else np.asarray(tie_order)[keys]
        m = len(short)
        if k < m:
            t = np.partition(scores, m - k)[m - k]   # the k-th largest rescored similarity
            above = np.flatnonzero(scores > t)
            tied = np.flatnonzero(scores == t)
            need = k - len(above)
            if need < len(tied):    # the cut goes through a tie: first in tie order
                tied = tied[np.argpartition(rank[tied], need - 1)[:need]]
            top = np.concatenate([above, tied])
            top = top[np.lexsort((rank[top], -scores[top]))]
        else:
            top = np.lexsort((rank, -scores))
        return keys[top], scores[top]

    @staticmethod
    def _gather(blocks: list[_Block], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keys and vectors of `rows` (ascending positions in the concatenation of `blocks`' used rows)."""
        if len(blocks) == 1:
            return blocks[0].keys[rows], blocks[0].vecs[rows]
        starts = np.cumsum([0] + [b.n for b in blocks])
        cuts = np.searchsorted(rows, starts).tolist()   # rows[cuts[i]:cuts[i + 1]] lie in blocks[i]
        keys = np.empty(len(rows), np.int64)
        vecs = np.empty((len(rows), blocks[0].vecs.shape[1]), np.float32)
        for i, block in enumerate(blocks):
            lo, hi = cuts[i], cuts[i + 1]
            if lo < hi:
                local = rows[lo:hi] - starts[i]
                keys[lo:hi] = block.keys[local]
                vecs[lo:hi] = block.vecs[local]
        return keys, vecs
