import numpy as np
import pytest

from memnav.core.memory.index import (
    EmbeddingIndex,
    IndexMode,
    InvalidInputError,
    check_embedding,
    check_pose,
    check_stamp,
)
from memnav.core.types import Pose2D


def unit_rows(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def clustered(rng, n, d, clusters=40, spread=0.3):
    centres = unit_rows(rng, clusters, d)
    x = centres[rng.integers(0, clusters, n)] + spread * unit_rows(rng, n, d) / np.sqrt(2)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_exact_search_matches_brute_force_order():
    rng = np.random.default_rng(0)
    x = unit_rows(rng, 300, 32)
    index = EmbeddingIndex(32)
    keys = rng.permutation(1000)[:300]  # keys need not be dense
    index.add_batch(keys, x)
    q = x[17]
    got_keys, got_sims = index.search(q, 10)
    order = np.argsort(-(x @ q))[:10]
    assert index.mode is IndexMode.EXACT
    np.testing.assert_array_equal(got_keys, keys[order])
    np.testing.assert_allclose(got_sims, (x @ q)[order], rtol=1e-5)
    assert got_keys[0] == keys[17] and got_sims[0] == pytest.approx(1.0, abs=1e-5)
    assert np.all(np.diff(got_sims) <= 0)


def test_add_remove_update_round_trip():
    rng = np.random.default_rng(1)
    x = unit_rows(rng, 50, 8)
    index = EmbeddingIndex(8)
    for k in range(50):
        index.add(k, x[k])
    np.testing.assert_array_equal(index.get(7), x[7])
    index.remove(7)
    assert len(index) == 49 and 7 not in index
    assert 7 not in index.search(x[7], 49)[0]
    # the row swapped into the hole is still found under its own key
    np.testing.assert_array_equal(index.get(49), x[49])
    index.update(3, x[10])
    np.testing.assert_array_equal(index.get(3), x[10])
    assert set(index.search(x[10], 2)[0]) == {3, 10}
    with pytest.raises(KeyError):
        index.add(3, x[0])
    with pytest.raises(KeyError):
        index.remove(7)
    assert sorted(index.keys().tolist()) == sorted(set(range(50)) - {7})


def test_switches_to_ivf_when_large_keeps_recall_and_switches_back():
    rng = np.random.default_rng(2)
    x = clustered(rng, 3000, 32)
    index = EmbeddingIndex(32, exact_max_size=500, nprobe=8, seed=0)
    index.add_batch(np.arange(3000), x)
    assert index.mode is IndexMode.IVF and index.num_lists > 1
    recalls = []
    for q in unit_rows(rng, 5, 32) * 0.1 + x[:5]:
        q = q / np.linalg.norm(q)
        exact = set(index.search(q, 10, exact=True)[0].tolist())
        approx = set(index.search(q, 10)[0].tolist())
        recalls.append(len(exact & approx) / 10)
    assert np.mean(recalls) >= 0.9
    # single inserts go to their nearest list and are found
    index.add(5000, x[0])
    assert 5000 in index.search(x[0], 3)[0]
    for k in range(2900):
        index.remove(k)
    assert index.mode is IndexMode.EXACT and len(index) == 101
    keys, _ = index.search(x[2950], 1)
    assert keys[0] == 2950


def test_empty_index_returns_nothing():
    index = EmbeddingIndex(4)
    keys, sims = index.search(np.array([1, 0, 0, 0], np.float32), 5)
    assert keys.shape == (0,) and sims.shape == (0,)


@pytest.mark.parametrize("value, field_msg", [
    (np.ones(7), r"expected shape \(8,\)"),
    (np.r_[np.ones(7), np.nan], "NaN or inf"),
    (np.r_[np.ones(7), np.inf], "NaN or inf"),
    (np.zeros(8), "zero norm"),
    (np.ones((2, 8)), r"expected shape \(8,\)"),
])
def test_check_embedding_rejects_naming_the_field(value, field_msg):
    with pytest.raises(InvalidInputError, match=field_msg) as info:
        check_embedding(value, 8, "goal_embedding")
    assert info.value.field == "goal_embedding"
    assert str(info.value).startswith("goal_embedding:")


def test_check_embedding_normalises():
    out = check_embedding([3.0, 4.0], 2)
    np.testing.assert_allclose(out, [0.6, 0.8], rtol=1e-6)
    assert out.dtype == np.float32


def test_check_pose_and_stamp():
    assert check_pose([1.0, 2.0, 0.5]) == Pose2D(1.0, 2.0, 0.5)
    with pytest.raises(InvalidInputError) as info:
        check_pose([1.0, float("nan"), 0.0])
    assert info.value.field == "pose.y_m"
    with pytest.raises(InvalidInputError) as info:
        check_pose(np.array([0.0, 0.0, np.inf]))
    assert info.value.field == "pose.yaw_rad"
    assert check_stamp(5, 5) == 5
    with pytest.raises(InvalidInputError, match="goes backwards"):
        check_stamp(4, 5)
    with pytest.raises(InvalidInputError, match="integer"):
        check_stamp(4.5, None)
