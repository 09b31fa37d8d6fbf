"""Where on the robot's own map was the goal photo taken? Matching the goal's depth against the map.

The goal image comes with depth (the simulator renders it; a robot user can record it with the photo).
Its columns give a 2D scan: for each column the nearest surface at obstacle height, as a point
(forward, left) in the goal camera's frame, plus points along the way that must be free. A correlative
search places that scan on the occupancy map at every traversable position (every `position_stride`
cells) and `yaw_bins` headings: a pose scores the mean of exp(-d^2 / 2 sigma^2) over the scan's
endpoints, d being the distance from an endpoint to the nearest mapped obstacle (0 where the map does not
know the cell), minus the fraction of its free-space points that land on obstacles. The best poses, at
least `min_separation_m` apart, are the goal candidates; the robot drives to the best one and lets
appearance decide there (the stop rule, or a candidate rejected when the view does not match).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from memnav.core.frames import level_points, pixel_ray_offsets
from memnav.core.grid_path import cell_centers
from memnav.core.types import Pose2D, wrap_angle


@dataclass
class ScanMatchConfig:
    """Parameters of the goal scan matcher.

    Attributes:
        columns: image columns sampled for the goal scan.
        min_points: scans with fewer endpoints (e.g. a goal facing open space) are not matched.
        max_range_m: endpoints beyond this range are dropped, meters.
        sigma_m: endpoint-to-obstacle distance scale of the score, meters.
        yaw_bins: headings searched (360 / yaw_bins degrees apart).
        position_stride: search every n-th map cell in each direction.
        min_score: candidates scoring below this are not reported.
        min_separation_m: reported candidates differ by at least this in position, meters.
        max_candidates: how many candidates to report.
    """

    columns: int = 64
    min_points: int = 24
    max_range_m: float = 6.0
    sigma_m: float = 0.1
    yaw_bins: int = 72
    position_stride: int = 2
    min_score: float = 0.6
    min_separation_m: float = 1.0
    max_candidates: int = 4


@dataclass
class GoalScan:
    """Endpoints (K, 2) and free-space points (F, 2), meters, in the goal camera frame (forward, left); with
    colours (K, 3), RGB in [0, 1]: the mean colour of each endpoint's column at obstacle height near its range."""

    endpoints: np.ndarray
    free_points: np.ndarray
    colours: np.ndarray | None = None

    def moved_ahead(self, forward_m: float) -> GoalScan:
        """This scan in the frame of a point `forward_m` behind the camera (a robot's turning axis, its camera
        mounted that far ahead): every point `forward_m` further forward."""
        if forward_m == 0.0:
            return self
        shift = np.array([forward_m, 0.0])
        return GoalScan(self.endpoints + shift, self.free_points + shift, self.colours)


@dataclass
class Candidate:
    """A pose on the map where the goal scan fits, with its score."""

    pose: Pose2D
    score: float


def surface_columns(depth: np.ndarray, hfov_deg: float, camera_height_m: float, min_height_m: float,
                    max_height_m: float, columns: int, max_range_m: float,
                    pitch_deg: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sampled image column, the nearest surface between min_height_m and max_height_m above the floor.

    Returns (endpoints (K, 2) as (forward, left) meters in the level frame at the camera, image rows (K,), image
    columns (K,)) for the columns that see such a surface within max_range_m. Non-finite or <= 5 cm depths are
    ignored. `pitch_deg`: how far the camera looks down from level.
    """
    cols, ahead, lat, height, d = _sampled_columns(depth, hfov_deg, camera_height_m, columns, pitch_deg)
    tall = (d > 0.05) & np.isfinite(d) & (height >= min_height_m) & (height <= max_height_m)
    masked = np.where(tall, ahead, np.inf)
    rows = masked.argmin(axis=0)
    k = np.arange(masked.shape[1])
    fwd, left = masked[rows, k], lat[rows, k]
    ok = np.isfinite(fwd) & (np.hypot(fwd, left) <= max_range_m)
    ends = np.stack([fwd[ok], left[ok]], axis=1)
    return ends, rows[ok], cols[ok]


def _sampled_columns(depth: np.ndarray, hfov_deg: float, camera_height_m: float, columns: int,
                     pitch_deg: float = 0.0) -> tuple[np.ndarray, ...]:
    """The image columns a scan samples (K,), and per pixel of them (H, K): its point ahead of and left of the
    camera and its height above the floor (`memnav.core.frames.level_points`), and its depth; meters."""
    depth = np.asarray(depth, dtype=np.float32)
    h, w = depth.shape
    cols = np.linspace(0, w - 1, min(columns, w)).round().astype(np.int64)
    left_per_m, up_per_m = pixel_ray_offsets(cols, np.arange(h), w, h, hfov_deg)
    d = depth[:, cols]
    ahead, lat, rise = level_points(d, left_per_m[None, :], up_per_m[:, None], pitch_deg)
    return cols, ahead, lat, camera_height_m + rise, d


def free_space_points(endpoints: np.ndarray) -> np.ndarray:
    """Points at 30%, 55% and 80% of the way to each endpoint: seen through, so they must be free."""
    fracs = np.array([0.3, 0.55, 0.8])
    return (endpoints[None, :, :] * fracs[:, None, None]).reshape(-1, 2)


def colour_affinity(a: np.ndarray, b: np.ndarray, sigma: float) -> np.ndarray:
    """(len(a), len(b)) Gaussian agreement of every pair of colours a (Na, 3) and b (Nb, 3)."""
    diff = a[:, None, :] - b[None, :, :]
    return np.exp(-(diff ** 2).sum(axis=2) / (2.0 * sigma ** 2))


def goal_scan(depth: np.ndarray, hfov_deg: float, camera_height_m: float, min_height_m: float,
              max_height_m: float, cfg: ScanMatchConfig | None = None, rgb: np.ndarray | None = None,
              band_m: float = 0.1, pitch_deg: float = 0.0) -> GoalScan:
    """The goal image's 2D scan: per sampled column, the nearest surface at obstacle height; with `rgb` (H, W, 3)
    uint8 of the depth's size, also each endpoint's colour: the mean over its column's pixels at obstacle
    height within `band_m` of its depth, as an occupancy map's cell averages what it saw there. `pitch_deg`:
    how far the camera looks down from level."""
    cfg = cfg or ScanMatchConfig()
    ends, _, cols = surface_columns(depth, hfov_deg, camera_height_m, min_height_m, max_height_m, cfg.columns,
                                    cfg.max_range_m, pitch_deg)
    colours = None
    if rgb is not None and np.shape(rgb) == (*np.shape(depth), 3):
        all_cols, d, _, height, _ = _sampled_columns(depth, hfov_deg, camera_height_m, cfg.columns, pitch_deg)
        keep = np.searchsorted(all_cols, cols)          # the sampled columns that saw a surface
        d, height = d[:, keep], height[:, keep]
        near = (np.isfinite(d) & (height >= min_height_m) & (height <= max_height_m)
                & (np.abs(d - ends[:, 0][None, :]) <= band_m))
        pix = np.asarray(rgb)[:, cols].astype(np.float64) / 255.0            # (H, K, 3)
        colours = (pix * near[..., None]).sum(axis=0) / np.maximum(near.sum(axis=0), 1)[:, None]
    return GoalScan(ends, free_space_points(ends), colours)


def match_scan(scan: GoalScan, obstacle_distance_m: np.ndarray, known: np.ndarray, positions: np.ndarray,
               origin: np.ndarray, cell_m: float, cfg: ScanMatchConfig | None = None) -> list[Candidate]:
    """Best poses of the scan on a map window.

    Args:
        scan: the goal scan.
        obstacle_distance_m: (rows, cols) distance from each cell to the nearest obstacle, meters.
        known: (rows, cols) cells with any evidence.
        positions: (rows, cols) bool, cells where the goal camera may stand.
        origin: (x, y) of the window's corner cell (0, 0), meters.
        cell_m: cell size, meters.
        cfg: search parameters.
    """
    cfg = cfg or ScanMatchConfig()
    if len(scan.endpoints) < cfg.min_points:
        return []
    yaws = np.arange(cfg.yaw_bins) * (2.0 * math.pi / cfg.yaw_bins)
    rows, cols = np.nonzero(positions)
    keep = (rows % cfg.position_stride == 0) & (cols % cfg.position_stride == 0)
    rows, cols = rows[keep], cols[keep]
    if rows.size == 0:
        return []
    scores, best_yaw = _search(obstacle_distance_m.astype(np.float32), known, rows, cols, yaws,
                               scan.endpoints.astype(np.float64), scan.free_points.astype(np.float64),
                               cell_m, cfg.sigma_m)
    order = np.argsort(-scores)
    out: list[Candidate] = []
    for i in order:
        if scores[i] < cfg.min_score or len(out) >= cfg.max_candidates:
            break
        x, y = (float(v) for v in cell_centers(origin, rows[i], cols[i], cell_m))
        if any(math.hypot(x - c.pose.x_m, y - c.pose.y_m) < cfg.min_separation_m for c in out):
            continue
        out.append(Candidate(Pose2D(x, y, wrap_angle(float(yaws[best_yaw[i]]))), float(scores[i])))
    return out


@njit(cache=True)
def rotated_cells(points, yaw, cell_m, shift, rows_out, cols_out):  # pragma: no cover - compiled
    """Cell offsets (rows = second axis, cols = first) of points (forward, left) seen from a cell centre at
    heading yaw, plus shift; written into rows_out / cols_out."""
    c, s = math.cos(yaw), math.sin(yaw)
    for j in range(points.shape[0]):
        rows_out[j] = int(math.floor(0.5 + (s * points[j, 0] + c * points[j, 1]) / cell_m)) + shift
        cols_out[j] = int(math.floor(0.5 + (c * points[j, 0] - s * points[j, 1]) / cell_m)) + shift


@njit(cache=True)
def _search(dist, known, rows, cols, yaws, ends, free, cell_m, sigma):  # pragma: no cover - compiled
    """Best score and heading per position. A point at (forward, left) seen from a cell centre lands in the
    cell at an integer offset that depends on the heading only, so per heading the offsets are computed once
    and each position costs table reads: the endpoint score exp(-d^2 / 2 sigma^2) (0 where the map does
    not know the cell) and the "free point on an obstacle" flag, both on a zero-padded grid."""
    n = rows.size
    nr, nc = dist.shape
    inv = 1.0 / (2.0 * sigma * sigma)
    k = ends.shape[0]
    nf = free.shape[0]
    reach = 0.0
    for j in range(k):
        reach = max(reach, math.hypot(ends[j, 0], ends[j, 1]))
    for j in range(nf):
        reach = max(reach, math.hypot(free[j, 0], free[j, 1]))
    pad = int(math.ceil(reach / cell_m)) + 2
    tab = np.zeros((nr + 2 * pad, nc + 2 * pad))
    bad = np.zeros((nr + 2 * pad, nc + 2 * pad), np.uint8)
    for r in range(nr):
        for c in range(nc):
            if known[r, c]:
                d = dist[r, c]
                tab[r + pad, c + pad] = math.exp(-d * d * inv)
                if d < 0.5 * cell_m:
                    bad[r + pad, c + pad] = 1
    scores = np.full(n, -1.0)
    best_yaw = np.zeros(n, np.int64)
    er = np.empty(k, np.int64)
    ec = np.empty(k, np.int64)
    fr = np.empty(nf, np.int64)
    fc = np.empty(nf, np.int64)
    for yi in range(yaws.size):
        rotated_cells(ends, yaws[yi], cell_m, pad, er, ec)
        rotated_cells(free, yaws[yi], cell_m, pad, fr, fc)
        for i in range(n):
            r0, c0 = rows[i], cols[i]
            total = 0.0
            for j in range(k):
                total += tab[r0 + er[j], c0 + ec[j]]
            score = total / k
            if score <= scores[i]:
                continue
            nbad = 0
            for j in range(nf):
                nbad += bad[r0 + fr[j], c0 + fc[j]]
            score -= nbad / max(nf, 1)
            if score > scores[i]:
                scores[i] = score
                best_yaw[i] = yi
    return scores, best_yaw
