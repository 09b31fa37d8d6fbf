"""Short-term working memory: K recent observations kept by value, not by arrival order.

A fixed-capacity buffer of (stamp, pose, embedding) items for the policy. When it is full, the newcomer
always enters (the policy must see the latest observation) and the item with the lowest score leaves
(KARMA-style adaptive replacement instead of FIFO):

    score_i = recency_weight   * 0.5 ** (age_i / recency_half_life_s)
            + novelty_weight   * (1 - max_{j != i} cos(e_i, e_j))      over the buffer plus the newcomer
            + relevance_weight * max(0, cos(e_i, goal))                 0 when no goal is set

so an old item that resembles the goal image survives, while one of two near-duplicates is dropped.
Ties go against the older item. `as_tensors()` hands the content to a policy as zero-padded tensors.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import numpy as np

from memnav.core.memory.index import check_embedding, check_pose, check_stamp
from memnav.core.types import Pose2D


@dataclass
class WorkingBufferConfig:
    """Settings of the working buffer.

    Attributes:
        capacity: number of items K kept.
        embedding_dim: length of the embeddings.
        recency_weight: weight of the recency term of the replacement score.
        novelty_weight: weight of the novelty term (dissimilarity to the other items).
        relevance_weight: weight of the relevance term (similarity to the goal embedding).
        recency_half_life_s: age at which the recency term halves, s.
    """

    capacity: int = 32
    embedding_dim: int = 256
    recency_weight: float = 1.0
    novelty_weight: float = 1.0
    relevance_weight: float = 1.0
    recency_half_life_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("capacity", "embedding_dim", "recency_half_life_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not value > 0:
                raise ValueError(f"WorkingBufferConfig.{name} must be > 0, got {value!r}")
        for name in ("recency_weight", "novelty_weight", "relevance_weight"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):   # inf: every score inf or NaN, i.e. first in, first out
                raise ValueError(f"WorkingBufferConfig.{name} must be a finite number >= 0, got {value!r}")


class BufferAddStatus(Enum):
    """What `WorkingBuffer.add` did."""

    APPENDED = "appended"   # there was room
    REPLACED = "replaced"   # the lowest-scoring item was evicted


@dataclass(frozen=True)
class BufferAddResult:
    """Outcome of `WorkingBuffer.add`: status, and the stamp of the evicted item (None if none)."""

    status: BufferAddStatus
    evicted_stamp_ns: int | None = None


@dataclass(frozen=True)
class BufferItem:
    """One buffered observation."""

    stamp_ns: int
    pose: Pose2D
    embedding: np.ndarray


class BufferTensors(NamedTuple):
    """Buffer content for a policy, oldest first, zero-padded to capacity K.

    embeddings: [K, D] float32 unit vectors; rel_poses: [K, 3] float32 (x_m forward, y_m left, yaw_rad)
    in the frame of the reference pose; ages_s: [K] float32 seconds before the reference time;
    mask: [K] bool, True for real items.
    """

    embeddings: object
    rel_poses: object
    ages_s: object
    mask: object


class WorkingBuffer:
    """Fixed-capacity short-term memory with score-based replacement (see the module docstring).

    Args:
        capacity: number of items K.
        embedding_dim: embedding length D.
        recency_weight, novelty_weight, relevance_weight: weights of the three score terms.
        recency_half_life_s: age at which the recency term halves, s.
    """

    def __init__(self, capacity: int = 32, embedding_dim: int = 256, *, recency_weight: float = 1.0,
                 novelty_weight: float = 1.0, relevance_weight: float = 1.0,
                 recency_half_life_s: float = 10.0) -> None:
        self.config = WorkingBufferConfig(capacity, embedding_dim, recency_weight, novelty_weight,
                                          relevance_weight, recency_half_life_s)
        self._emb = np.zeros((capacity, embedding_dim), np.float32)
        self._stamp = np.zeros(capacity, np.int64)
        self._pose = np.zeros((capacity, 3), np.float64)
        self._n = 0
        self._goal: np.ndarray | None = None
        self._last_stamp_ns: int | None = None

    @classmethod
    def from_config(cls, cfg: WorkingBufferConfig) -> WorkingBuffer:
        return cls(cfg.capacity, cfg.embedding_dim, recency_weight=cfg.recency_weight,
                   novelty_weight=cfg.novelty_weight, relevance_weight=cfg.relevance_weight,
                   recency_half_life_s=cfg.recency_half_life_s)

    @property
    def capacity(self) -> int:
        return self.config.capacity

    def __len__(self) -> int:
        return self._n

    def clear(self) -> None:
        """Forget every item and the goal (a new episode)."""
        self._n = 0
        self._goal = None
        self._last_stamp_ns = None

    def set_goal(self, goal_embedding: np.ndarray | None) -> None:
        """Set (or clear with None) the goal embedding used by the relevance term."""
        self._goal = None if goal_embedding is None else check_embedding(
            goal_embedding, self.config.embedding_dim, "goal_embedding")

    def items(self) -> list[BufferItem]:
        """Copies of the buffered items, oldest first."""
        order = np.argsort(self._stamp[: self._n], kind="stable")
        return [BufferItem(int(self._stamp[i]), Pose2D(*self._pose[i].tolist()), self._emb[i].copy()) for i in order]

    def score_items(self, now_ns: int, newcomer: np.ndarray | None = None) -> np.ndarray:
        """Replacement scores of the buffered items, aligned with `items()` (oldest first).

        Args:
            now_ns: reference time for the recency term, ns.
            newcomer: an embedding about to be added; it counts in the novelty term as `add` does.
        """
        order = np.argsort(self._stamp[: self._n], kind="stable")
        extra = None if newcomer is None else check_embedding(newcomer, self.config.embedding_dim, "newcomer")
        return self._scores(int(now_ns), extra)[order]

    def _scores(self, now_ns: int, newcomer: np.ndarray | None) -> np.ndarray:
        cfg, n = self.config, self._n
        emb = self._emb[:n]
        age_s = np.maximum(now_ns - self._stamp[:n], 0) / 1e9
        recency = 0.5 ** (age_s / cfg.recency_half_life_s)
        gram = emb @ emb.T
        np.fill_diagonal(gram, -np.inf)
        nearest = gram.max(axis=1) if n > 1 else np.full(n, -np.inf)
        if newcomer is not None:
            nearest = np.maximum(nearest, emb @ newcomer)
        novelty = np.where(np.isfinite(nearest), 1.0 - np.clip(nearest, -1.0, 1.0), 1.0)
        relevance = np.zeros(n) if self._goal is None else np.maximum(emb @ self._goal, 0.0)
        return cfg.recency_weight * recency + cfg.novelty_weight * novelty + cfg.relevance_weight * relevance

    def add(self, stamp_ns: int, embedding: np.ndarray, pose: Pose2D | Sequence[float],
            goal_embedding: np.ndarray | None = None) -> BufferAddResult:
        """Add an observation; when full, evict the lowest-scoring item (the newcomer always enters).

        Args:
            stamp_ns: observation time, ns; not earlier than the previous add.
            embedding: (D,) embedding (normalised here).
            pose: odometry pose of the observation.
            goal_embedding: the current goal; replaces the stored goal (None keeps it).

        Raises:
            memnav.core.memory.index.InvalidInputError: bad stamp, embedding, pose or goal (naming the
                field); the buffer is unchanged.
        """
        stamp = check_stamp(stamp_ns, self._last_stamp_ns)
        emb = check_embedding(embedding, self.config.embedding_dim)
        p = check_pose(pose)
        goal = None if goal_embedding is None else check_embedding(
            goal_embedding, self.config.embedding_dim, "goal_embedding")
        if goal is not None:
            self._goal = goal
        self._last_stamp_ns = stamp
        if self._n < self.capacity:
            slot, evicted, status = self._n, None, BufferAddStatus.APPENDED
            self._n += 1
        else:
            scores = self._scores(stamp, emb)
            # lowest score leaves; among equal scores the oldest
            slot = int(np.lexsort((self._stamp[: self._n], scores))[0])
            evicted, status = int(self._stamp[slot]), BufferAddStatus.REPLACED
        self._emb[slot] = emb
        self._stamp[slot] = stamp
        self._pose[slot] = (p.x_m, p.y_m, p.yaw_rad)
        return BufferAddResult(status, evicted)

    def as_arrays(self, origin: Pose2D | None = None, now_ns: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Numpy version of `as_tensors` (same shapes and order)."""
        cfg, n = self.config, self._n
        emb = np.zeros((cfg.capacity, cfg.embedding_dim), np.float32)
        rel = np.zeros((cfg.capacity, 3), np.float32)
        ages = np.zeros(cfg.capacity, np.float32)
        mask = np.zeros(cfg.capacity, bool)
        if n == 0:
            return emb, rel, ages, mask
        order = np.argsort(self._stamp[:n], kind="stable")
        newest = order[-1]
        ref = check_pose(origin, "origin") if origin is not None else Pose2D(*self._pose[newest].tolist())
        now = int(self._stamp[newest]) if now_ns is None else int(now_ns)
        poses = self._pose[order]
        dx, dy = poses[:, 0] - ref.x_m, poses[:, 1] - ref.y_m
        c, s = np.cos(ref.yaw_rad), np.sin(ref.yaw_rad)
        rel[:n, 0] = c * dx + s * dy
        rel[:n, 1] = -s * dx + c * dy
        rel[:n, 2] = (poses[:, 2] - ref.yaw_rad + np.pi) % (2 * np.pi) - np.pi
        emb[:n] = self._emb[order]
        ages[:n] = (now - self._stamp[order]) / 1e9
        mask[:n] = True
        return emb, rel, ages, mask

    def as_tensors(self, origin: Pose2D | None = None, now_ns: int | None = None, device: str = "cpu"
                   ) -> BufferTensors:
        """The buffer as torch tensors for a policy, oldest first, zero-padded to capacity.

        Args:
            origin: pose the relative poses are expressed in (default: the newest item's pose).
            now_ns: reference time of the ages (default: the newest item's stamp), ns.
            device: torch device of the returned tensors.

        Returns:
            BufferTensors(embeddings [K, D] float32, rel_poses [K, 3] float32, ages_s [K] float32, mask [K] bool).
        """
        import torch  # deferred: the rest of the memory package does not need torch

        arrays = self.as_arrays(origin, now_ns)
        return BufferTensors(*(torch.from_numpy(a).to(device) for a in arrays))

