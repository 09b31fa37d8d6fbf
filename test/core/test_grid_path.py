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
