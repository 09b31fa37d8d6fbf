"""Path helpers on 2D grids shared by the simulator's navigable grid and the robot's own occupancy map.

Grids are boolean (rows, cols) arrays; a cell (r, c) covers x in origin[0] + c * cell_m and the second
planar coordinate in origin[1] + r * cell_m. Points are 3-vectors whose [0] and [2] entries are those two
planar coordinates (Habitat's x and z; the occupancy map stores its x and y there), so one set of
compiled routines serves both.
"""
from __future__ import annotations

import numpy as np
from numba import njit


def cell_centers(origin, rows, cols, cell_m: float) -> tuple[np.ndarray, np.ndarray]:
    """Planar coordinates (first, second) of the centres of cells (rows, cols); arrays or scalars."""
    first = origin[0] + (np.asarray(cols) + 0.5) * cell_m
    second = origin[1] + (np.asarray(rows) + 0.5) * cell_m
    return first, second


@njit(cache=True)
def descend(field, r, c, cell_m):  # pragma: no cover - compiled
    """Cells visited by steepest descent on a distance field from (r, c) until the goal cell."""
    rows, cols = field.shape
    out = [(r, c)]
    for _ in range(rows * cols):
        if field[r, c] <= cell_m:
            break
        best_r, best_c, best_v = -1, -1, field[r, c]
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                rr, cc = r + dr, c + dc
                if (dr != 0 or dc != 0) and 0 <= rr < rows and 0 <= cc < cols and field[rr, cc] < best_v:
                    best_r, best_c, best_v = rr, cc, field[rr, cc]
        if best_r < 0:
            break
        r, c = best_r, best_c
        out.append((r, c))
    return np.array(out, dtype=np.int64)


@njit(cache=True)
def line_of_sight(navigable, origin, cell_m, p, q):  # pragma: no cover - compiled
    """Whether the segment p-q (3-vectors, planar coordinates in [0] and [2]) stays on True cells."""
    rows, cols = navigable.shape
    d = np.hypot(q[0] - p[0], q[2] - p[2])
    n = max(2, int(np.ceil(d / (0.5 * cell_m))) + 1)
    for i in range(n):
        t = i / (n - 1)
        col = int(np.floor((p[0] + t * (q[0] - p[0]) - origin[0]) / cell_m))
        row = int(np.floor((p[2] + t * (q[2] - p[2]) - origin[1]) / cell_m))
        if row < 0 or col < 0 or row >= rows or col >= cols or not navigable[row, col]:
            return False
    return True


@njit(cache=True)
def string_pull(navigable, origin, cell_m, pts):  # pragma: no cover - compiled
    """Indices of the points kept when each point jumps to the farthest one it can see."""
    keep = [0]
    i = 0
    n = pts.shape[0]
    while i < n - 1:
        j = n - 1
        while j > i + 1 and not line_of_sight(navigable, origin, cell_m, pts[i], pts[j]):
            j -= 1
        keep.append(j)
        i = j
    return np.array(keep, dtype=np.int64)
