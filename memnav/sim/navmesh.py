"""Navigable-area grid computed from a scene mesh, with geodesic distances and shortest paths.

The mesh is sampled on a horizontal grid (cell `cell_m`). A cell is *free* when a ray cast down from
`max_climb_m` above the floor level meets an upward-facing surface near the floor level and a ray cast
up from that surface meets nothing (or a downward-facing surface) lower than the agent height. Free
space shrunk by the agent radius (Euclidean distance transform) is *navigable*: the agent's centre may
stand there without its cylinder touching anything. Geodesic distances come from the fast marching
method (scikit-fmm) on that grid, so they follow straight lines in open space like a navmesh does.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from memnav.core.grid_path import cell_centers
from memnav.core.grid_path import descend as _descend
from memnav.core.grid_path import line_of_sight as _line_of_sight
from memnav.core.grid_path import string_pull as _string_pull
from memnav.sim.mesh import SceneMesh
from memnav.sim.render import RayCaster

_FLOOR_NORMAL_MIN = 0.7  # |cos| of the slope a floor may have (about 45 degrees)


@dataclass
class NavGridConfig:
    """How the navigable grid is computed.

    Attributes:
        cell_m: grid resolution, meters.
        agent_radius_m: clearance kept from obstacles, meters.
        agent_height_m: headroom needed above the floor, meters.
        max_climb_m: floor height differences the agent can step over, meters.
        floor_height_m: floor level to map (Habitat y), or None to detect the dominant one.
        field_cache_size: how many goal distance fields to keep.
    """

    cell_m: float = 0.05
    agent_radius_m: float = 0.18
    agent_height_m: float = 1.5
    max_climb_m: float = 0.2
    floor_height_m: float | None = None
    field_cache_size: int = 64


def dominant_floor(mesh: SceneMesh, bin_m: float = 0.05) -> tuple[float, float]:
    """(height, winding sign) of the main floor: the lowest level with a large up-facing area.

    Winding is trusted (floors face up, as in glTF exports and scanned meshes); a mesh wound the
    other way round (no up-facing horizontal area at all) gets sign -1, so "up-facing" is judged
    consistently for the whole mesh.
    """
    v = mesh.vertices[mesh.faces].astype(np.float64)
    n = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    area = np.linalg.norm(n, axis=1)
    ok = area > 1e-12
    ny = np.zeros(len(v))
    ny[ok] = n[ok, 1] / area[ok]
    sign = 1.0
    if not np.any(ny > 0.9):
        sign = -1.0
    horizontal = ny * sign > 0.9
    if not horizontal.any():
        raise ValueError(f"{mesh.source}: no horizontal surface found to serve as floor")
    heights = v[horizontal, :, 1].mean(axis=1)
    bins = np.floor(heights / bin_m).astype(np.int64)
    uniq, inv = np.unique(bins, return_inverse=True)
    weight = np.bincount(inv, weights=area[horizontal])
    big = weight >= 0.25 * weight.max()
    floor_bin = uniq[big].min()
    return float(np.median(heights[bins == floor_bin])), sign


class NavGrid:
    """Navigable grid over one floor of a scene; all points are Habitat world (x, y, z)."""

    def __init__(self, mesh: SceneMesh, caster: RayCaster, config: NavGridConfig | None = None) -> None:
        self.config = config or NavGridConfig()
        cfg = self.config
        detected_height, self.winding_sign = dominant_floor(mesh)
        self.floor_height_m = cfg.floor_height_m if cfg.floor_height_m is not None else detected_height
        lo, hi = mesh.bounds
        self.origin = np.array([lo[0], lo[2]], dtype=np.float64) - cfg.cell_m
        self.shape = (int(math.ceil((hi[2] - lo[2]) / cfg.cell_m)) + 3,   # rows along z
                      int(math.ceil((hi[0] - lo[0]) / cfg.cell_m)) + 3)   # cols along x
        self.floor_y, free = self._sample_free(caster)
        from scipy import ndimage

        # centre-to-centre distance to the nearest blocked cell; that obstacle may reach half a cell
        # closer, so the conservative clearance is half a cell less
        clearance = ndimage.distance_transform_edt(free) * cfg.cell_m - 0.5 * cfg.cell_m
        self.navigable = clearance > cfg.agent_radius_m
        self.labels, self.num_components = ndimage.label(self.navigable, structure=np.ones((3, 3)))
        sizes = np.bincount(self.labels.ravel())
        sizes[0] = 0
        self.largest_component = int(np.argmax(sizes)) if self.num_components else 0
        self._fields: OrderedDict[tuple[float, float], np.ndarray] = OrderedDict()
        self._component_cells: dict[int, np.ndarray] = {}

    # --- grid <-> world -------------------------------------------------------------------------
    def to_cell(self, point: np.ndarray) -> tuple[int, int]:
        p = np.asarray(point, dtype=np.float64)
        col = int(np.floor((p[0] - self.origin[0]) / self.config.cell_m))
        row = int(np.floor((p[2] - self.origin[1]) / self.config.cell_m))
        return row, col

    def cell_center(self, row: int, col: int) -> np.ndarray:
        x, z = cell_centers(self.origin, row, col, self.config.cell_m)
        return np.array([float(x), float(self.floor_y[row, col]), float(z)])

    def in_bounds(self, row: int, col: int) -> bool:
        return 0 <= row < self.shape[0] and 0 <= col < self.shape[1]

    def is_navigable(self, point: np.ndarray) -> bool:
        p = np.asarray(point, dtype=np.float64)
        if p.shape != (3,) or not np.all(np.isfinite(p)):
            return False
        r, c = self.to_cell(p)
        if not self.in_bounds(r, c) or not self.navigable[r, c]:
            return False
        return abs(p[1] - self.floor_y[r, c]) <= self.config.max_climb_m + 0.5

    def height_at(self, point: np.ndarray) -> float:
        r, c = self.to_cell(point)
        return float(self.floor_y[r, c])

    @property
    def navigable_area_m2(self) -> float:
        return float(self.navigable.sum()) * self.config.cell_m ** 2

    # --- sampling -------------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator, component: int | None = None) -> np.ndarray:
        """Uniform random navigable point (in the largest component unless one is given)."""
        comp = self.largest_component if component is None else component
        if comp not in self._component_cells:
            self._component_cells[comp] = np.flatnonzero(self.labels.ravel() == comp)
        cells = self._component_cells[comp]
        if cells.size == 0:
            raise ValueError("the scene has no navigable area for this agent")
        idx = int(cells[rng.integers(cells.size)])
        row, col = divmod(idx, self.shape[1])
        p = self.cell_center(row, col)
        jitter = (rng.random(2) - 0.5) * self.config.cell_m * 0.9
        p[0] += jitter[0]
        p[2] += jitter[1]
        return p

    def snap(self, point: np.ndarray, max_dist_m: float = 0.5) -> tuple[int, int] | None:
        """Nearest navigable cell within max_dist_m, or None."""
        r, c = self.to_cell(point)
        k = int(math.ceil(max_dist_m / self.config.cell_m))
        r0, r1 = max(r - k, 0), min(r + k + 1, self.shape[0])
        c0, c1 = max(c - k, 0), min(c + k + 1, self.shape[1])
        if r0 >= r1 or c0 >= c1:
            return None
        window = self.navigable[r0:r1, c0:c1]
        if not window.any():
            return None
        rr, cc = np.nonzero(window)
        d2 = (rr + r0 - r) ** 2 + (cc + c0 - c) ** 2
        i = int(np.argmin(d2))
        if math.sqrt(d2[i]) * self.config.cell_m > max_dist_m:
            return None
        return int(rr[i] + r0), int(cc[i] + c0)

    # --- geodesics ------------------------------------------------------------------------------
    def distance_field(self, target: np.ndarray) -> np.ndarray | None:
        """Geodesic distance (meters) from every cell to `target`; inf where unreachable."""
        cell = self.snap(target)
        if cell is None:
            return None
        tgt = np.asarray(target, dtype=np.float64)
        # the field starts from the exact target, not its cell: cached by the target itself, so that a
        # distance never depends on which target of the same cell came first (it did, by up to a few cm)
        key = (round(float(tgt[0]), 6), round(float(tgt[2]), 6))
        if key in self._fields:
            self._fields.move_to_end(key)
            return self._fields[key]
        import skfmm

        c = self.config.cell_m
        cols, rows = cell_centers(self.origin, np.arange(self.shape[0]), np.arange(self.shape[1]), c)
        mask = self.labels != self.labels[cell]
        straight = np.hypot(cols[None, :] - tgt[0], rows[:, None] - tgt[2])
        # zero level set: a small circle around the target, so the field is metric from the start. The
        # components are 8-connected but the march is 4-connected: a target cell joined to the rest only
        # diagonally has no zero crossing to start from, so the circle grows until it has one; a component
        # that fits inside the circle is all a straight line away.
        for radius in (0.75 * c, 1.5 * c, 3.0 * c):
            phi = straight - radius
            phi[cell] = min(phi[cell], -1e-3)
            try:
                dist = skfmm.distance(np.ma.MaskedArray(phi, mask=mask), dx=c, order=2)
            except ValueError:  # no zero contour
                continue
            field = np.where(np.ma.getmaskarray(dist), np.inf, np.ma.getdata(dist) + radius)
            break
        else:
            field = np.where(mask, np.inf, straight)
        field = np.maximum(field, 0.0)
        self._fields[key] = field
        while len(self._fields) > self.config.field_cache_size:
            self._fields.popitem(last=False)
        return field

    def geodesic_distance(self, a: np.ndarray, b: np.ndarray) -> float:
        field = self.distance_field(b)
        if field is None:
            return math.inf
        cell = self.snap(a)
        if cell is None:
            return math.inf
        d = float(field[cell])
        if not math.isfinite(d):
            return math.inf
        # a geodesic is never shorter than the straight line (the snapped cell may be half a cell off)
        delta = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
        return max(d, float(np.hypot(delta[0], delta[2])))

    def shortest_path(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Waypoints (N, 3) from a to b: steepest descent on the distance field, then string-pulled."""
        field = self.distance_field(b)
        start = self.snap(a)
        if field is None or start is None or not math.isfinite(field[start]):
            return np.zeros((0, 3))
        cells = _descend(field, start[0], start[1], self.config.cell_m)
        pts = np.empty((len(cells) + 1, 3))
        pts[0] = np.asarray(a, dtype=np.float64)
        c = self.config.cell_m
        pts[1:-1, 0], pts[1:-1, 2] = cell_centers(self.origin, cells[1:, 0], cells[1:, 1], c)
        pts[1:-1, 1] = self.floor_y[cells[1:, 0], cells[1:, 1]]
        pts[-1] = np.asarray(b, dtype=np.float64)
        keep = _string_pull(self.navigable, self.origin, c, pts)
        return pts[keep]

    def line_of_sight(self, p: np.ndarray, q: np.ndarray) -> bool:
        """Whether the straight segment p-q stays on navigable cells."""
        return bool(_line_of_sight(self.navigable, self.origin, self.config.cell_m,
                                   np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)))

    # --- construction ---------------------------------------------------------------------------
    def _sample_free(self, caster: RayCaster) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.config
        rows, cols = self.shape
        xs, zs = cell_centers(self.origin, np.arange(rows), np.arange(cols), cfg.cell_m)
        xx, zz = np.meshgrid(xs, zs)
        n = xx.size
        top = self.floor_height_m + cfg.max_climb_m + 0.05
        origins = np.stack([xx.ravel(), np.full(n, top), zz.ravel()], axis=1)
        down = np.tile([0.0, -1.0, 0.0], (n, 1))
        hit = caster.cast(origins, down)
        t = hit["t_hit"]
        floor_y = top - t
        normal_y = hit["primitive_normals"][:, 1] * self.winding_sign
        # A ray that starts inside a solid (a wall) first meets that solid's bottom face, which faces
        # down: only up-facing surfaces are floor.
        is_floor = (np.isfinite(t) & (normal_y >= _FLOOR_NORMAL_MIN)
                    & (np.abs(floor_y - self.floor_height_m) <= cfg.max_climb_m + 0.05))
        up_origins = np.stack([xx.ravel(), np.where(is_floor, floor_y, 0.0) + 0.02, zz.ravel()], axis=1)
        up = np.tile([0.0, 1.0, 0.0], (n, 1))
        hit_up = caster.cast(up_origins, up)
        headroom = hit_up["t_hit"] + 0.02
        # Inside a closed solid (a wall standing on the floor slab) the vertical probes end on faces
        # coplanar with the floor and ceiling, so they cannot tell; horizontal probes can: from
        # inside a solid the first surfaces met are seen from behind (normal along the ray).
        free = is_floor & (headroom >= cfg.agent_height_m) & ~self._inside_solid(xx.ravel(), zz.ravel(), caster)
        floor_y = np.where(is_floor, floor_y, self.floor_height_m)
        return floor_y.reshape(rows, cols), free.reshape(rows, cols)

    def _inside_solid(self, xs: np.ndarray, zs: np.ndarray, caster: RayCaster) -> np.ndarray:
        """Cells whose centre lies inside a solid at knee or chest height (>= 2 of 4 back-face hits)."""
        n = xs.size
        dirs = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
        inside = np.zeros(n, dtype=bool)
        for height in (0.5, min(1.2, self.config.agent_height_m - 0.1)):
            y = np.full(n, self.floor_height_m + height)
            origins = np.repeat(np.stack([xs, y, zs], axis=1), 4, axis=0)
            d = np.tile(dirs, (n, 1))
            hit = caster.cast(origins, d)
            back = np.isfinite(hit["t_hit"]) & (np.einsum("ij,ij->i", hit["primitive_normals"], d)
                                                * self.winding_sign > 0.1)
            inside |= back.reshape(n, 4).sum(axis=1) >= 2
        return inside
