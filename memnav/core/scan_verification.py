"""Were two RGB-D views taken within a metre and 30 degrees of each other? Their depth scans decide.

Each view becomes a coloured 2D scan: per sampled image column, the nearest surface at obstacle height
(`scan_match.surface_columns`) as a point (forward, left) in the camera frame, with the colour of the
pixel that saw it, plus free-space points along the way. To compare view B with view A, B's scan is placed
in A's camera frame at every relative pose within `max_shift_m` and `max_turn_deg` (a grid of
`cell_m` positions and `turn_step_deg` headings). A pose scores the mean over B's endpoints of

    exp(-d^2 / 2 sigma^2) * exp(-|c_B - c_A|^2 / 2 colour_sigma^2)

where d is the distance to A's nearest endpoint and c_A its colour (RGB in [0, 1]), minus the fraction
of B's free-space points that land on A's surfaces. The fit is the best pose's score, averaged over
both directions (B in A, A in B). On the train houses it is 0.29-0.65 (10th-90th percentile) for views
within 1 m and 30 deg of each other and mostly below 0.2 for look-alikes elsewhere (median 0.06): room
shape, furniture layout and colours must all agree at a pose inside the box. Colour separates the two
ends of a symmetric room, which depth alone confuses.

Used to re-rank a place-recognition shortlist: `verified_order` sorts candidates by embedding similarity
plus `weight` times the fit. No learning is involved; it needs the depth a robot's RGB-D camera gives.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
from numba import njit
from scipy.ndimage import distance_transform_edt

from memnav.core.scan_match import colour_affinity, free_space_points, rotated_cells, surface_columns


@dataclass
class ScanVerifyConfig:
    """Parameters of scan verification.

    Attributes:
        hfov_deg: horizontal field of view of the depth camera, degrees.
        camera_height_m: camera height above the floor, meters.
        min_height_m: surfaces at least this high above the floor count (the floor does not), meters.
        max_height_m: surfaces above this (ceilings) do not count, meters.
        columns: image columns sampled per view.
        max_range_m: surfaces farther than this are dropped, meters.
        min_points: a view with fewer surface points (facing open space) has fit 0 with anything.
        cell_m: grid cell of the pose search and of the distance field, meters.
        sigma_m: distance scale of an endpoint's score, meters.
        colour_sigma: colour-difference scale of an endpoint's score (RGB in [0, 1]); 0 ignores colour.
        max_shift_m: relative positions searched, up to this far, meters.
        max_turn_deg: relative headings searched, up to this much either way, degrees.
        turn_step_deg: heading step of the search, degrees.
        weight: `verified_order` ranks by similarity + weight * fit.
    """

    hfov_deg: float = 90.0
    camera_height_m: float = 1.25
    min_height_m: float = 0.1
    max_height_m: float = 1.6
    columns: int = 64
    max_range_m: float = 6.0
    min_points: int = 8
    cell_m: float = 0.05
    sigma_m: float = 0.1
    colour_sigma: float = 0.1
    max_shift_m: float = 1.0
    max_turn_deg: float = 30.0
    turn_step_deg: float = 2.5
    weight: float = 1.5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"ScanVerifyConfig.{f.name} must be a finite number, got {value!r}")
        for name in ("hfov_deg", "camera_height_m", "columns", "max_range_m", "min_points", "cell_m", "sigma_m",
                     "turn_step_deg"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ScanVerifyConfig.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("colour_sigma", "max_shift_m", "max_turn_deg", "weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"ScanVerifyConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if not self.hfov_deg < 180:
            raise ValueError(f"ScanVerifyConfig.hfov_deg must be < 180, got {self.hfov_deg!r}")
        if self.max_height_m <= self.min_height_m:
            raise ValueError("ScanVerifyConfig.max_height_m must exceed min_height_m, got "
                             f"{self.max_height_m!r} <= {self.min_height_m!r}")


@dataclass
class ViewScan:
    """One view's coloured scan and the fields other scans are scored against.

    Attributes:
        endpoints: (K, 2) surface points (forward, left) in the camera frame, meters.
        colours: (K, 3) their RGB in [0, 1].
        free_points: (F, 2) points that must be free, meters.
        origin: (forward, left) of grid cell (0, 0)'s corner, meters.
        closeness: (rows, cols) exp(-d^2 / 2 sigma^2), d = distance to the nearest endpoint (0 beyond 4 sigma).
        nearest: (rows, cols) index of that endpoint.
        surface: (rows, cols) cells holding an endpoint.
        search_rows, search_cols: grid cells within max_shift_m of the camera: positions searched.
    """

    endpoints: np.ndarray
    colours: np.ndarray
    free_points: np.ndarray
    origin: np.ndarray = field(repr=False)
    closeness: np.ndarray = field(repr=False)
    nearest: np.ndarray = field(repr=False)
    surface: np.ndarray = field(repr=False)
    search_rows: np.ndarray = field(repr=False)
    search_cols: np.ndarray = field(repr=False)


def view_scan(rgb: np.ndarray, depth: np.ndarray, cfg: ScanVerifyConfig | None = None) -> ViewScan:
    """The coloured scan of one view.

    Args:
        rgb: (H, W, 3) uint8, or float in [0, 1].
        depth: (H, W) meters; non-finite and <= 5 cm readings are ignored (no return).
        cfg: parameters.
    """
    cfg = cfg or ScanVerifyConfig()
    rgb = np.asarray(rgb)
    depth = np.asarray(depth, dtype=np.float32)
    if depth.ndim != 2 or min(depth.shape) < 2:
        raise ValueError(f"depth must be (H, W) meters, got shape {depth.shape}")
    if rgb.shape != (*depth.shape, 3):
        raise ValueError(f"rgb must be (H, W, 3) matching depth {depth.shape}, got shape {rgb.shape}")
    colour = rgb.astype(np.float64) / 255.0 if rgb.dtype == np.uint8 else rgb.astype(np.float64)
    if not np.isfinite(colour).all() or colour.min() < 0.0 or colour.max() > 1.0:
        raise ValueError("rgb must be uint8 or float in [0, 1]")
    ends, rows, cols = surface_columns(depth, cfg.hfov_deg, cfg.camera_height_m, cfg.min_height_m,
                                       cfg.max_height_m, cfg.columns, cfg.max_range_m)
    colours = colour[rows, cols]
    cell = cfg.cell_m
    span = np.concatenate([ends, np.zeros((1, 2))])
    lo = np.minimum(span.min(axis=0), -cfg.max_shift_m) - 1.0
    hi = np.maximum(span.max(axis=0), cfg.max_shift_m) + 1.0
    n_cols, n_rows = (int(math.ceil(v)) for v in (hi - lo) / cell)
    label = np.full((n_rows, n_cols), -1, dtype=np.int64)
    if len(ends):
        label[((ends[:, 1] - lo[1]) / cell).astype(np.int64), ((ends[:, 0] - lo[0]) / cell).astype(np.int64)] = \
            np.arange(len(ends))
        dist, (near_r, near_c) = distance_transform_edt(label < 0, return_indices=True)
        nearest = label[near_r, near_c].astype(np.int32)
        dist_m = dist * cell
        closeness = np.where(dist_m <= 4.0 * cfg.sigma_m, np.exp(-dist_m ** 2 / (2.0 * cfg.sigma_m ** 2)),
                             0.0).astype(np.float32)
    else:
        nearest = np.zeros((n_rows, n_cols), dtype=np.int32)
        closeness = np.zeros((n_rows, n_cols), dtype=np.float32)
    grid_r, grid_c = np.mgrid[0:n_rows, 0:n_cols]
    inside = np.hypot(lo[0] + (grid_c + 0.5) * cell, lo[1] + (grid_r + 0.5) * cell) <= cfg.max_shift_m + 1e-9
    search_rows, search_cols = (v.astype(np.int32) for v in np.nonzero(inside))
    return ViewScan(ends, colours, free_space_points(ends), lo, closeness, nearest, label >= 0, search_rows,
                    search_cols)


def _one_way(a: ViewScan, b: ViewScan, affinity: np.ndarray, cfg: ScanVerifyConfig) -> float:
    """Best score of b's scan placed in a's frame, over the relative poses searched; affinity is (K_b, K_a)."""
    turn = math.radians(cfg.max_turn_deg)
    step = math.radians(cfg.turn_step_deg)
    n_half = int(math.floor(turn / step + 1e-9))
    yaws = np.arange(-n_half, n_half + 1) * step
    return float(_best_pose(a.closeness, a.nearest, a.surface, a.search_rows, a.search_cols, yaws, b.endpoints,
                            affinity, b.free_points, cfg.cell_m))


def scan_fit(a: ViewScan, b: ViewScan, cfg: ScanVerifyConfig | None = None) -> float:
    """Symmetric fit of two views: the mean of both directions' best pose score (<= 1; 0 if either view
    has fewer than `min_points` surface points). Both scans must come from `view_scan` with the same cfg."""
    cfg = cfg or ScanVerifyConfig()
    if len(a.endpoints) < cfg.min_points or len(b.endpoints) < cfg.min_points:
        return 0.0
    # colour agreement of every endpoint pair, (K_b, K_a): one matrix serves both directions
    if cfg.colour_sigma > 0:
        affinity = colour_affinity(b.colours, a.colours, cfg.colour_sigma)
    else:
        affinity = np.ones((len(b.endpoints), len(a.endpoints)))
    return 0.5 * (_one_way(a, b, affinity, cfg) + _one_way(b, a, np.ascontiguousarray(affinity.T), cfg))


def verified_order(similarities: np.ndarray, fits: np.ndarray, weight: float) -> np.ndarray:
    """Indices of a shortlist sorted best first by similarity + weight * fit (stable on ties)."""
    similarities = np.asarray(similarities, dtype=np.float64)
    fits = np.asarray(fits, dtype=np.float64)
    if similarities.shape != fits.shape or similarities.ndim != 1:
        raise ValueError(f"similarities and fits must be matching 1-D arrays, got {similarities.shape} "
                         f"and {fits.shape}")
    return np.argsort(-(similarities + weight * fits), kind="stable")


@njit(cache=True)
def _best_pose(closeness, nearest, surface, rows, cols, yaws, ends, affinity, free, cell):  # pragma: no cover
    """Max over positions (rows, cols) and headings of the endpoint score minus the blocked free fraction."""
    n_r, n_c = closeness.shape
    k = ends.shape[0]
    n_free = free.shape[0]
    best = -1.0
    er = np.empty(k, np.int64)
    ec = np.empty(k, np.int64)
    fr = np.empty(n_free, np.int64)
    fc = np.empty(n_free, np.int64)
    for yi in range(yaws.size):
        rotated_cells(ends, yaws[yi], cell, 0, er, ec)
        rotated_cells(free, yaws[yi], cell, 0, fr, fc)
        for i in range(rows.size):
            total = 0.0
            for j in range(k):
                r = rows[i] + er[j]
                q = cols[i] + ec[j]
                if 0 <= r < n_r and 0 <= q < n_c:
                    w = closeness[r, q]
                    if w > 0.0:
                        total += w * affinity[j, nearest[r, q]]
            score = total / k
            if score <= best:
                continue
            blocked = 0
            for j in range(n_free):
                r = rows[i] + fr[j]
                q = cols[i] + fc[j]
                if 0 <= r < n_r and 0 <= q < n_c and surface[r, q]:
                    blocked += 1
            score -= blocked / max(n_free, 1)
            if score > best:
                best = score
    return best
