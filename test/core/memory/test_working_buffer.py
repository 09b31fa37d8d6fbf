import math

import numpy as np
import pytest
import torch

from memnav.core.memory import (
    BufferAddStatus,
    InvalidInputError,
    WorkingBuffer,
    WorkingBufferConfig,
)
from memnav.core.types import Pose2D

S = 1_000_000_000
D = 16


def basis(i, dim=D):
    e = np.zeros(dim)
    e[i % dim] = 1.0
    return e


def test_appends_until_full_then_replaces():
    buf = WorkingBuffer(capacity=4, embedding_dim=D)
    for i in range(4):
        assert buf.add(i * S, basis(i), [float(i), 0.0, 0.0]).status is BufferAddStatus.APPENDED
    result = buf.add(4 * S, basis(4), [4.0, 0.0, 0.0])
    assert result.status is BufferAddStatus.REPLACED and result.evicted_stamp_ns is not None
    assert len(buf) == 4
    assert buf.items()[-1].stamp_ns == 4 * S   # the newcomer always enters


def test_lowest_scoring_item_is_evicted():
    rng = np.random.default_rng(0)
    buf = WorkingBuffer(capacity=6, embedding_dim=D, recency_half_life_s=5.0)
    buf.set_goal(rng.standard_normal(D))
    for i in range(6):
        buf.add(i * S, rng.standard_normal(D), [float(i), 0.0, 0.0])
    for step in range(6, 20):
        newcomer = rng.standard_normal(D)
        scores = buf.score_items(step * S, newcomer=newcomer)
        expected = buf.items()[int(np.argmin(scores))].stamp_ns
        result = buf.add(step * S, newcomer, [float(step), 0.0, 0.0])
        assert result.evicted_stamp_ns == expected
        assert expected not in {it.stamp_ns for it in buf.items()}


def test_goal_relevant_old_item_survives_where_fifo_would_drop_it():
    goal = basis(0)
    buf = WorkingBuffer(capacity=4, embedding_dim=D)
    buf.add(0, goal + 0.1 * basis(1), [0.0, 0.0, 0.0], goal_embedding=goal)   # the goal seen early on
    for i in range(1, 12):
        buf.add(i * S, basis(i % 7 + 2), [float(i), 0.0, 0.0])
    stamps = [it.stamp_ns for it in buf.items()]
    assert 0 in stamps                          # FIFO would keep only stamps 8..11
    assert stamps[-1] == 11 * S
    # without a goal, the same old item is the first to go
    fifo_like = WorkingBuffer(capacity=4, embedding_dim=D)
    fifo_like.add(0, goal + 0.1 * basis(1), [0.0, 0.0, 0.0])
    for i in range(1, 12):
        fifo_like.add(i * S, basis(i % 7 + 2), [float(i), 0.0, 0.0])
    assert 0 not in [it.stamp_ns for it in fifo_like.items()]


def test_near_duplicate_is_evicted_before_a_novel_older_item():
    buf = WorkingBuffer(capacity=3, embedding_dim=D, recency_half_life_s=100.0, relevance_weight=0.0)
    buf.add(0, basis(0), [0.0, 0.0, 0.0])                      # old but unique
    buf.add(50 * S, basis(1), [1.0, 0.0, 0.0])                 # duplicate pair ...
    buf.add(51 * S, basis(1) + 0.01 * basis(2), [1.1, 0.0, 0.0])
    result = buf.add(52 * S, basis(3), [2.0, 0.0, 0.0])
    assert result.evicted_stamp_ns == 50 * S                   # ... the older duplicate goes
    assert [it.stamp_ns for it in buf.items()] == [0, 51 * S, 52 * S]


def test_as_tensors_padded_ordered_and_relative():
    buf = WorkingBuffer(capacity=5, embedding_dim=D)
    buf.add(1 * S, basis(0), [1.0, 0.0, 0.0])
    buf.add(2 * S, basis(1), [1.0, 1.0, math.pi / 2])
    buf.add(4 * S, basis(2), [0.0, 1.0, math.pi])
    emb, rel, ages, mask = buf.as_tensors(origin=Pose2D(1.0, 0.0, math.pi / 2))
    assert emb.shape == (5, D) and emb.dtype == torch.float32
    assert rel.shape == (5, 3) and ages.shape == (5,) and mask.dtype == torch.bool
    assert mask.tolist() == [True, True, True, False, False]
    assert torch.all(emb[3:] == 0) and torch.all(rel[3:] == 0) and torch.all(ages[3:] == 0)
    np.testing.assert_allclose(emb[:3].numpy(), np.stack([basis(0), basis(1), basis(2)]))
    # origin at (1, 0) facing +y: (1, 1) is 1 m straight ahead, (0, 1) is 1 m ahead and 1 m to the left
    np.testing.assert_allclose(rel[:3].numpy(), [[0, 0, -math.pi / 2], [1, 0, 0], [1, 1, math.pi / 2]], atol=1e-6)
    np.testing.assert_allclose(ages[:3].numpy(), [3.0, 2.0, 0.0])
    # defaults: the newest item is the reference
    _, rel2, ages2, _ = buf.as_arrays(now_ns=5 * S)
    np.testing.assert_allclose(rel2[2], [0, 0, 0], atol=1e-6)
    np.testing.assert_allclose(ages2[:3], [4.0, 3.0, 1.0])


def test_empty_buffer_tensors_are_all_padding():
    emb, _rel, _ages, mask = WorkingBuffer(capacity=3, embedding_dim=D).as_tensors()
    assert emb.shape == (3, D) and not mask.any()


@pytest.mark.parametrize("kwargs, field", [
    ({"embedding": np.full(D, np.nan)}, "embedding"),
    ({"embedding": np.ones(D + 2)}, "embedding"),
    ({"stamp_ns": 1 * S}, "stamp_ns"),
    ({"stamp_ns": 2 ** 63}, "stamp_ns"),                 # does not fit the int64 the stamps are kept in
    ({"stamp_ns": np.uint64(2 ** 64 - 1)}, "stamp_ns"),
    ({"pose": [0.0, np.inf, 0.0]}, "pose.y_m"),
    ({"goal_embedding": np.zeros(D)}, "goal_embedding"),
])
def test_bad_input_rejected_and_buffer_unchanged(kwargs, field):
    buf = WorkingBuffer(capacity=3, embedding_dim=D)
    for i in range(3):
        buf.add((i + 1) * S, basis(i), [float(i), 0.0, 0.0])
    before = buf.as_arrays()
    call = {"stamp_ns": 10 * S, "embedding": basis(5), "pose": [0.0, 0.0, 0.0]}
    call.update(kwargs)
    with pytest.raises(InvalidInputError) as info:
        buf.add(**call)
    assert info.value.field == field
    after = buf.as_arrays()
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    buf.add(10 * S, basis(5), [0.0, 0.0, 0.0])   # the stamp check did not advance on failure


def test_config_round_trip_and_validation():
    cfg = WorkingBufferConfig(capacity=8, embedding_dim=4, novelty_weight=2.0)
    buf = WorkingBuffer.from_config(cfg)
    assert buf.config == cfg and buf.capacity == 8
    assert WorkingBuffer().capacity == 32
    with pytest.raises(ValueError, match="capacity"):
        WorkingBufferConfig(capacity=0)
    with pytest.raises(ValueError, match="novelty_weight"):
        WorkingBufferConfig(novelty_weight=-1.0)
    # an infinite weight scored every item inf (NaN with a zero term): replacement silently became first in, first out
    for name in ("recency_weight", "novelty_weight", "relevance_weight"):
        with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0, got inf"):
            WorkingBufferConfig(**{name: float("inf")})
