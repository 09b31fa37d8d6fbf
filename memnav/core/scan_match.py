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
    """Endpoints (K, 2) and free-space points (F, 2), meters, in the goal camera frame (forward, left)."""

    endpoints: np.ndarray
    free_points: np.ndarray


@dataclass
class Candidate:
    """A pose on the map where the goal scan fits, with its score."""

    pose: Pose2D
    score: float


def goal_scan(depth: np.ndarray, hfov_deg: float, camera_height_m: float, min_height_m: float,
              max_height_m: float, cfg: ScanMatchConfig | None = None) -> GoalScan:
    """The goal image's 2D scan: per sampled column, the nearest surface at obstacle height."""
    cfg = cfg or ScanMatchConfig()
    depth = np.asarray(depth, dtype=np.float32)
    h, w = depth.shape
    f = w / (2.0 * math.tan(math.radians(hfov_deg) / 2.0))
    cols = np.linspace(0, w - 1, min(cfg.columns, w)).round().astype(np.int64)
    left_per_m = -(cols + 0.5 - w / 2.0) / f
    up_per_m = -(np.arange(h) + 0.5 - h / 2.0) / f
    d = depth[:, cols]
    height = camera_height_m + up_per_m[:, None] * d
    tall = (d > 0.05) & np.isfinite(d) & (height >= min_height_m) & (height <= max_height_m)
    fwd = np.where(tall, d, np.inf).min(axis=0)
    ok = np.isfinite(fwd) & (np.hypot(fwd, fwd * left_per_m) <= cfg.max_range_m)
    ends = np.stack([fwd[ok], fwd[ok] * left_per_m[ok]], axis=1)
    fracs = np.array([0.3, 0.55, 0.8])
    free = (ends[None, :, :] * fracs[:, None, None]).reshape(-1, 2)
    return GoalScan(ends, free)


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
        x = float(origin[0] + (cols[i] + 0.5) * cell_m)
        y = float(origin[1] + (rows[i] + 0.5) * cell_m)
        if any(math.hypot(x - c.pose.x_m, y - c.pose.y_m) < cfg.min_separation_m for c in out):
            continue
        out.append(Candidate(Pose2D(x, y, wrap_angle(float(yaws[best_yaw[i]]))), float(scores[i])))
    return out


@njit(cache=True)
def _search(dist, known, rows, cols, yaws, ends, free, cell_m, sigma):  # pragma: no cover - compiled
    n = rows.size
    nr, nc = dist.shape
    scores = np.full(n, -1.0)
    best_yaw = np.zeros(n, np.int64)
    inv = 1.0 / (2.0 * sigma * sigma)
    k = ends.shape[0]
    nf = free.shape[0]
    for yi in range(yaws.size):
        c, s = math.cos(yaws[yi]), math.sin(yaws[yi])
        ex = (c * ends[:, 0] - s * ends[:, 1]) / cell_m
        ey = (s * ends[:, 0] + c * ends[:, 1]) / cell_m
        fx = (c * free[:, 0] - s * free[:, 1]) / cell_m
        fy = (s * free[:, 0] + c * free[:, 1]) / cell_m
        for i in range(n):
            r0, c0 = rows[i] + 0.5, cols[i] + 0.5
            total = 0.0
            for j in range(k):
                rr = int(math.floor(r0 + ey[j]))
                cc = int(math.floor(c0 + ex[j]))
                if 0 <= rr < nr and 0 <= cc < nc and known[rr, cc]:
                    d = dist[rr, cc]
                    total += math.exp(-d * d * inv)
            score = total / k
            if score <= scores[i]:
                continue
            bad = 0
            for j in range(nf):
                rr = int(math.floor(r0 + fy[j]))
                cc = int(math.floor(c0 + fx[j]))
                if 0 <= rr < nr and 0 <= cc < nc and known[rr, cc] and dist[rr, cc] < 0.5 * cell_m:
                    bad += 1
            score -= bad / max(nf, 1)
            if score > scores[i]:
                scores[i] = score
                best_yaw[i] = yi
    return scores, best_yaw
