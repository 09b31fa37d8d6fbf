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
def descend(field, r, c, cell_m, no_squeeze=False):  # pragma: no cover - compiled
    """Cells visited by steepest descent on a distance field from (r, c) until the goal cell.

    With `no_squeeze`, a diagonal step between two unreachable (non-finite) cells is not taken: the straight
    line between the two cell centres passes through the corner the blocked cells share. The simulator's
    navigable grid joins cells diagonally on purpose (its navmesh is 8-connected); the robot's own map,
    whose fast-marching field is 4-connected, asks for it.
    """
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
                    if no_squeeze and dr != 0 and dc != 0 and not (np.isfinite(field[rr, c])
                                                                  or np.isfinite(field[r, cc])):
                        continue
                    best_r, best_c, best_v = rr, cc, field[rr, cc]
        if best_r < 0:
            break
        r, c = best_r, best_c
        out.append((r, c))
    return np.array(out, dtype=np.int64)


@njit(cache=True)
def line_of_sight(navigable, origin, cell_m, p, q):  # pragma: no cover - compiled
    """Whether the segment p-q (3-vectors, planar coordinates in [0] and [2]) stays on True cells, sampled
    every half cell: a segment that clips a blocked cell's corner by less than that can pass. The simulator's
    shortest paths (and with them the oracle and the encoder's training walks) are defined with it; the
    robot's own map uses `segment_clear`."""
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
def _free(navigable, row, col):  # pragma: no cover - compiled
    rows, cols = navigable.shape
    return 0 <= row < rows and 0 <= col < cols and navigable[row, col]


@njit(cache=True)
def segment_clear(navigable, origin, cell_m, p, q):  # pragma: no cover - compiled
    """Whether the segment p-q (3-vectors, planar coordinates in [0] and [2]) crosses only True cells: every
    cell it passes through, however little of it, is checked (an exact grid traversal). Where it passes
    exactly through a grid corner it may go between the two cells beside the corner if either is True; both
    False is a gap of width zero."""
    x0, y0 = (p[0] - origin[0]) / cell_m, (p[2] - origin[1]) / cell_m
    x1, y1 = (q[0] - origin[0]) / cell_m, (q[2] - origin[1]) / cell_m
    col, row = int(np.floor(x0)), int(np.floor(y0))
    end_col, end_row = int(np.floor(x1)), int(np.floor(y1))
    if not _free(navigable, row, col):
        return False
    dx, dy = x1 - x0, y1 - y0
    step_c = 1 if dx > 0 else -1
    step_r = 1 if dy > 0 else -1
    # parameter t in [0, 1] along the segment at which it crosses the next column / row boundary
    t_c = ((col + (1 if dx > 0 else 0)) - x0) / dx if dx != 0 else np.inf
    t_r = ((row + (1 if dy > 0 else 0)) - y0) / dy if dy != 0 else np.inf
    dt_c = abs(1.0 / dx) if dx != 0 else np.inf
    dt_r = abs(1.0 / dy) if dy != 0 else np.inf
    eps = 1e-9
    for _ in range(abs(end_col - col) + abs(end_row - row) + 1):
        if col == end_col and row == end_row:
            return True
        if abs(t_c - t_r) <= eps:          # through a corner: the diagonal cell, and one of its two sides
            if t_c > 1.0:
                return True
            if not (_free(navigable, row, col + step_c) or _free(navigable, row + step_r, col)):
                return False
            col += step_c
            row += step_r
            t_c += dt_c
            t_r += dt_r
        elif t_c < t_r:
            if t_c > 1.0:
                return True
            col += step_c
            t_c += dt_c
        else:
            if t_r > 1.0:
                return True
            row += step_r
            t_r += dt_r
        if not _free(navigable, row, col):
            return False
    return True


@njit(cache=True)
def string_pull(navigable, origin, cell_m, pts, exact=False):  # pragma: no cover - compiled
    """Indices of the points kept when each point jumps to the farthest one it can see (`segment_clear` with
    `exact`, else `line_of_sight`)."""
    keep = [0]
    i = 0
    n = pts.shape[0]
    while i < n - 1:
        j = n - 1
        while j > i + 1 and not (segment_clear(navigable, origin, cell_m, pts[i], pts[j]) if exact
                                 else line_of_sight(navigable, origin, cell_m, pts[i], pts[j])):
            j -= 1
        keep.append(j)
        i = j
    return np.array(keep, dtype=np.int64)
