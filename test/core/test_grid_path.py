"""Grid helpers shared by the simulator's navigable grid and the occupancy map."""
import numpy as np

from memnav.core.grid_path import cell_centers


def test_cell_centers_are_half_a_cell_past_the_cell_corner_for_arrays_and_scalars():
    origin = np.array([-2.0, 3.0])
    xs, ys = cell_centers(origin, np.array([0, 4]), np.array([1, 0]), 0.1)
    np.testing.assert_allclose(xs, [-1.85, -1.95])
    np.testing.assert_allclose(ys, [3.05, 3.45])
    x, y = cell_centers(origin, 2, 7, 0.5)
    assert (float(x), float(y)) == (1.75, 4.25)


def test_a_point_maps_back_to_the_cell_whose_centre_it_is():
    origin = np.array([0.3, -1.2])
    rows, cols = np.arange(50), np.arange(50)[::-1]
    xs, ys = cell_centers(origin, rows, cols, 0.1)
    np.testing.assert_array_equal(np.floor((xs - origin[0]) / 0.1).astype(int), cols)
    np.testing.assert_array_equal(np.floor((ys - origin[1]) / 0.1).astype(int), rows)


def _dense_clear(nav, origin, cell_m, p, q, n=4000):
    """Reference: the segment sampled every 1/4000 of its length (slow, but independent of the traversal)."""
    t = np.linspace(0.0, 1.0, n)
    cols = np.floor((p[0] + t * (q[0] - p[0]) - origin[0]) / cell_m).astype(int)
    rows = np.floor((p[2] + t * (q[2] - p[2]) - origin[1]) / cell_m).astype(int)
    inside = (rows >= 0) & (cols >= 0) & (rows < nav.shape[0]) & (cols < nav.shape[1])
    return bool(inside.all() and nav[rows, cols].all())


def test_segment_clear_refuses_a_corner_clip_the_half_cell_sampling_lets_through():
    from memnav.core.grid_path import line_of_sight, segment_clear

    nav = np.ones((10, 10), dtype=bool)
    nav[5, 5] = False                        # one blocked cell, x and y in [0.5, 0.6) m
    origin = np.zeros(2)
    # (0.4, 0.53) -> (0.72, 0.44) enters the blocked cell at x = 0.5 by 2 mm, between two half-cell samples
    p, q = np.array([0.4, 0.0, 0.53]), np.array([0.72, 0.0, 0.44])
    assert not _dense_clear(nav, origin, 0.1, p, q)
    assert line_of_sight(nav, origin, 0.1, p, q)          # the old sampling misses it
    assert not segment_clear(nav, origin, 0.1, p, q)


def test_segment_clear_agrees_with_dense_sampling_on_random_segments():
    from memnav.core.grid_path import segment_clear

    rng = np.random.default_rng(3)
    origin = np.array([-0.37, 1.21])
    disagreements, clear = 0, 0
    for _ in range(400):
        nav = rng.random((12, 12)) > 0.12
        p = np.array([origin[0] + rng.uniform(0, 1.2), 0.0, origin[1] + rng.uniform(0, 1.2)])
        q = np.array([origin[0] + rng.uniform(0, 1.2), 0.0, origin[1] + rng.uniform(0, 1.2)])
        reference = _dense_clear(nav, origin, 0.1, p, q, 20000)
        disagreements += segment_clear(nav, origin, 0.1, p, q) != reference
        clear += reference
    assert disagreements == 0
    assert 50 < clear < 350              # both answers were asked for


def test_segment_clear_goes_through_a_corner_beside_one_free_cell_but_not_between_two_blocked_ones():
    from memnav.core.grid_path import segment_clear

    origin = np.zeros(2)
    p, q = np.array([0.15, 0.0, 0.15]), np.array([0.35, 0.0, 0.35])   # cell (1, 1) to (3, 3) through corners
    nav = np.ones((5, 5), dtype=bool)
    assert segment_clear(nav, origin, 0.1, p, q)
    nav[1, 2] = False
    assert segment_clear(nav, origin, 0.1, p, q)                       # (2, 1) beside the corner is free
    nav[2, 1] = False
    assert not segment_clear(nav, origin, 0.1, p, q)                   # a gap of width zero
    assert not segment_clear(nav, origin, 0.1, p, np.array([0.15, 0.0, 0.75]))   # leaves the grid
    assert segment_clear(nav, origin, 0.1, p, p)


def test_descend_without_squeeze_goes_around_a_diagonal_gap():
    from memnav.core.grid_path import descend

    inf = np.inf
    field = np.array([[2.0, 1.0, 0.05],
                      [inf, 1.5, 1.0],
                      [3.5, inf, 2.0],
                      [3.0, 2.5, 2.2]])
    # from (2, 0) the steepest step is the diagonal to (1, 1), between the blocked (1, 0) and (2, 1)
    assert [tuple(c) for c in descend(field, 2, 0, 0.1)][:2] == [(2, 0), (1, 1)]
    around = [tuple(c) for c in descend(field, 2, 0, 0.1, True)]
    assert around == [(2, 0), (3, 1), (2, 2), (1, 2), (0, 2)]
