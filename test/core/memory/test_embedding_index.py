import numpy as np
import pytest

from memnav.core.memory.index import (
    EmbeddingIndex,
    IndexMode,
    InvalidInputError,
    IvfTraining,
    check_embedding,
    check_embeddings,
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


def test_a_finite_embedding_whose_square_overflows_float32_still_normalises():
    """Components of 1e20 (finite in float32, their squares not): the unit vector, not zeros."""
    np.testing.assert_allclose(check_embedding([3e20, 4e20], 2), [0.6, 0.8], rtol=1e-6)
    rows = check_embeddings([[3e20, 4e20], [0.0, 2.0]], 2)
    np.testing.assert_allclose(rows, [[0.6, 0.8], [0.0, 1.0]], rtol=1e-6)
    assert rows.dtype == np.float32


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
    assert check_stamp(2 ** 63 - 1, None) == 2 ** 63 - 1
    for outside in (2 ** 63, -(2 ** 63) - 1, np.uint64(2 ** 64 - 1)):
        with pytest.raises(InvalidInputError, match="signed 64-bit") as info:
            check_stamp(outside, None)
        assert info.value.field == "stamp_ns"


@pytest.mark.parametrize("exact_max_size", [1, 5, 7])
def test_a_small_exact_max_size_switches_to_lists_without_failing_an_add(exact_max_size):
    """Fewer vectors than the 8 lists a switch to IVF asks for at least: as many lists as vectors, every add
    succeeds and every vector is still found."""
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((12, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = EmbeddingIndex(16, exact_max_size=exact_max_size, nprobe=64, seed=0)
    for key, vec in enumerate(vecs):
        index.add(key, vec)
        assert len(index) == key + 1
    assert index.mode is IndexMode.IVF
    for key, vec in enumerate(vecs):
        assert index.search(vec, 1)[0].tolist() == [key]


def test_get_many_refuses_an_absent_key_like_get():
    index = EmbeddingIndex(3, exact_max_size=100, seed=0)
    for key, vec in enumerate(np.eye(3, dtype=np.float32)):
        index.add(key, vec)
    index.remove(0)      # key 2 moves into key 0's position: a stale read of key 0 would give key 2's vector
    np.testing.assert_array_equal(index.get_many([1, 2]), np.eye(3, dtype=np.float32)[1:])
    for absent in ([0], [1, 0], [7], [-1]):
        with pytest.raises(KeyError, match="is absent"):
            index.get_many(absent)


def _with_copies(rng, n, d, copy_keys):
    """n unit rows keyed 0..n-1, the rows under copy_keys all one vector (exactly equal similarities)."""
    x = unit_rows(rng, n, d)
    x[copy_keys] = x[copy_keys[0]]
    return x


def test_equal_similarities_rank_the_lower_key_first_whatever_the_layout():
    """Two indexes holding the same vectors under the same keys, added in different orders and moved around by
    removals, answer alike: equal similarities rank the lower key first, a top-k that cuts through a tie keeps
    the lowest keys, and the similarities are bit for bit the same (a BLAS scan rounds a row by its position)."""
    rng = np.random.default_rng(7)
    copy_keys = np.array([183, 5, 97, 42, 150, 61, 17, 130])
    x = _with_copies(rng, 203, 32, copy_keys)    # 203: not a multiple of the rows a BLAS kernel takes at once
    forward, backward = EmbeddingIndex(32), EmbeddingIndex(32)
    forward.add_batch(np.arange(203), x)
    for key in range(202, -1, -1):       # reverse storage order: the highest key sits first
        backward.add(key, x[key])
    for key in (5, 17, 0, 1):            # removal swaps the last row into the hole; the key goes back at the end
        backward.remove(key)
        backward.add(key, x[key])
    lowest = np.sort(copy_keys)
    for k in (1, 3, 8, 11):
        for index in (forward, backward):
            keys, sims = index.search(x[5], k)
            assert keys[: min(k, 8)].tolist() == lowest[: min(k, 8)].tolist()
            assert np.all(sims[: min(k, 8)] == sims[0]) and np.all(np.diff(sims) <= 0)
    for q in [x[5], *unit_rows(rng, 20, 32)]:
        for k in (1, 4, 10, 203):
            a, b = forward.search(q, k), backward.search(q, k)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
    # a caller's tie order (e.g. node ids of the keys): here the reverse of the keys
    keys, _ = backward.search(x[5], 3, tie_order=1000 - np.arange(203))
    assert keys.tolist() == lowest[::-1][:3].tolist()


def test_equal_similarities_rank_the_lower_key_first_in_ivf_mode():
    rng = np.random.default_rng(8)
    copy_keys = np.array([1500, 9, 777, 300, 1999, 64])
    x = clustered(rng, 2000, 32)
    x[copy_keys] = x[copy_keys[0]]
    index = EmbeddingIndex(32, exact_max_size=256, nprobe=4, seed=0)
    for key in range(1999, -1, -1):
        index.add(key, x[key])
    assert index.mode is IndexMode.IVF
    lowest = np.sort(copy_keys)
    for exact in (False, True):
        for k in (2, 4, 6):
            keys, sims = index.search(x[9], k, exact=exact)
            assert keys.tolist() == lowest[:k].tolist() and np.all(sims == sims[0])
    index.remove(9)
    index.add(9, x[9])                  # back in at the end of its list
    assert index.search(x[9], 2)[0].tolist() == [9, 64]


def test_training_depends_only_on_the_vectors_held_in_key_order():
    """Two indexes holding the same vectors, one filled in a single batch, the other one by one in reverse
    under other keys that `key_order` ranks alike (as the scene graph's reused slots and node ids), train the
    same centroids at the same size and answer every approximate query alike."""
    rng = np.random.default_rng(9)
    x = clustered(rng, 2000, 32)
    slot_of = rng.permutation(2000) + 5          # item i sits under key slot_of[i]
    rank = np.full(2005, -1)
    rank[slot_of] = np.arange(2000)
    batch = EmbeddingIndex(32, exact_max_size=1999, nprobe=2)
    batch.add_batch(np.arange(2000), x)
    single = EmbeddingIndex(32, exact_max_size=1999, nprobe=2, key_order=lambda keys: rank[keys])
    for i in range(1999, -1, -1):
        single.add(int(slot_of[i]), x[i])
    assert batch.mode is single.mode is IndexMode.IVF and batch.generation == single.generation == 1
    a, b = batch.training, single.training
    np.testing.assert_array_equal(a.centroids, b.centroids)
    assert a.trained_size == b.trained_size == 2000 and a.exact_max_size == b.exact_max_size == 1999
    for q in [x[3], *unit_rows(rng, 30, 32)]:
        keys_a, sims_a = batch.search(q, 10)
        keys_b, sims_b = single.search(q, 10, tie_order=rank)
        np.testing.assert_array_equal(slot_of[keys_a], keys_b)
        np.testing.assert_array_equal(sims_a, sims_b)


def test_restore_takes_over_a_training_and_searches_the_same_lists():
    rng = np.random.default_rng(10)
    x = clustered(rng, 1500, 32)
    live = EmbeddingIndex(32, exact_max_size=256, nprobe=2, seed=3)
    for key in range(1500):             # trained at 257, again at 1029: not what a fresh training of 1500 gives
        live.add(key, x[key])
    order = rng.permutation(1500)
    copy = EmbeddingIndex(32, exact_max_size=256, nprobe=2, seed=3)
    copy.restore(order, x[order], live.training)
    assert copy.generation == 1 and copy.num_lists == live.num_lists
    np.testing.assert_array_equal(copy.training.centroids, live.training.centroids)
    assert copy.training.trained_size == live.training.trained_size == 1029
    retrained = EmbeddingIndex(32, exact_max_size=256, nprobe=2, seed=3)
    retrained.restore(np.arange(1500), x, None)
    assert retrained.training.trained_size == 1500
    differ = 0
    for q in unit_rows(rng, 50, 32):
        got, want = copy.search(q, 10), live.search(q, 10)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        differ += retrained.search(q, 10)[0].tolist() != want[0].tolist()
    assert differ > 0                   # what restoring the training is for
    # made under another exact_max_size, or too small to be in IVF mode: trained (or not) as add_batch would
    other = EmbeddingIndex(32, exact_max_size=2000)
    other.restore(np.arange(1500), x, live.training)
    assert other.mode is IndexMode.EXACT
    small = EmbeddingIndex(32, exact_max_size=256)
    small.restore(np.arange(100), x[:100], live.training)
    assert small.mode is IndexMode.EXACT and small.training is None


@pytest.mark.parametrize("centroids, trained_size, message", [
    (np.zeros((0, 32), np.float32), 10, "centroids"),
    (np.ones((4, 31), np.float32), 10, "centroids"),
    (np.full((4, 32), np.nan, np.float32), 10, "centroids"),
    (np.ones((4, 32), np.float32), 0, "trained_size"),
])
def test_restore_refuses_a_bad_training_leaving_the_index_empty(centroids, trained_size, message):
    index = EmbeddingIndex(32, exact_max_size=8)
    x = unit_rows(np.random.default_rng(11), 20, 32)
    with pytest.raises(ValueError, match=message):
        index.restore(np.arange(20), x, IvfTraining(centroids, trained_size, 8))
    assert len(index) == 0
    index.restore(np.arange(20), x, None)
    with pytest.raises(ValueError, match="empty index"):
        index.restore(np.arange(20, 40), x, None)
