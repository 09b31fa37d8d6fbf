"""The robot's own occupancy map from depth + odometry, frontier exploration and planning on it.

`OccupancyMap` integrates each depth frame (pinhole camera at a known height, z-depth in meters) into a
2D grid in the odometry frame: points between `obstacle_min_height_m` and `obstacle_max_height_m` above
the floor are obstacle evidence, floor points and the space each image column sees before its nearest
obstacle are free evidence. A cell is an obstacle when its obstacle hits are at least a quarter of its
free hits (so a wall seen once stays a wall, and a glimpse of noise is outvoted); cells farther than
`robot_radius_m + clearance_m` from every obstacle are traversable.

`Explorer` picks moves from that map: towards the nearest reachable *frontier* (a traversable cell next to
unknown space, in clusters of at least `min_frontier_cells`), committing to a frontier until it is reached,
seen or found unreachable, or towards a given target point (the goal once it has been localized).
`frontiers_reached` counts the frontier targets reached (the navigator looks around there), and
`drop_frontier` makes the next move choose a frontier afresh, on the map as it is then. A robot walled in on
its map (less than `boxed_in_m2` reachable: a niche with a narrow way out, a corridor a bump's marks sealed)
plans with its radius alone, through cells with one bump's marks at most, until out. Geodesic distances come
from the fast marching method on the traversable cells; paths are steepest descent on that field,
string-pulled, and the robot turns towards the first visible waypoint and moves forward when roughly facing
it. Nothing here reads the simulator: only depth, odometry and the outcome of the robot's own moves (a forward
move that fell short adds obstacle evidence to the cells ahead).
"""
from __future__ import annotations

import io
import math
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from memnav.core.files import replace_files
from memnav.core.frames import (
    camera_pose,
    check_camera_forward,
    check_camera_pitch,
    level_points,
    pixel_ray_offsets,
    unseen_range_m,
)
from memnav.core.grid_path import cell_centers, descend, segment_clear, string_pull
from memnav.core.scan_match import Candidate, GoalScan, ScanMatchConfig, colour_affinity, goal_scan, match_scan
from memnav.core.types import Action, Pose2D, wrap_angle

MAP_FORMAT = "memnav-occupancy-map"
MAP_VERSION = 2   # 2: surface colours (colour_sum, colour_hits); version-1 maps load without them


_NEAREST_DEPTH_M = 0.05   # depth readings this near or nearer (but > 0: 0 is no return) are not mapped


class MapFileError(ValueError):
    """An occupancy-map file that cannot be used (names the file and what is wrong)."""


@dataclass
class ExplorerConfig:
    """Occupancy mapping and exploration.

    Attributes:
        cell_m: grid resolution, meters.
        size_m: side of the square map centred on the first pose, meters (points outside are ignored).
        hfov_deg: horizontal field of view of the depth camera, degrees.
        camera_height_m: height of the camera above the floor, meters.
        camera_forward_m: how far ahead of the robot's turning axis (the pose the map is given, odometry's
            base_link) the camera sits, meters (0: on it, as the simulator's camera by default). Depth is mapped
            from the camera's pose (`memnav.core.frames.camera_pose`) and the goal scan is placed that far ahead
            of the goal pose, so the map, plans and scan-matched goal poses all stay the robot's.
        camera_pitch_deg: how far the camera's optical axis looks down from level, degrees (negative: up; 0 as the
            simulator's by default): depth is turned level before it is mapped, so the floor stays floor.
        max_range_m: depth beyond this is not integrated (free space is marked up to it), meters.
        obstacle_min_height_m: points at least this high above the floor are obstacles, meters.
        obstacle_max_height_m: points higher than this (ceilings, overhangs above the robot) are ignored, meters.
        robot_radius_m: radius of the robot's footprint, meters.
        clearance_m: margin kept beyond the radius when planning, meters.
        pixel_stride: integrate every n-th pixel in each image direction (at least).
        pixel_spacing_deg: when > 0, the stride grows with the image's angular resolution so that the integrated
            pixels lie at least about this far apart (the camera's hfov_deg over its width, per pixel): at 0.7, a
            69 deg 640 x 360 frame is integrated at every 6th pixel (0.65 deg apart) instead of every 2nd (0.22 deg,
            10 ms a frame), while the simulator's 128 x 128 view and a 192 x 108 one keep pixel_stride. Off by
            default: it saved 7 ms a step at 640 x 360, but SPL came out 0.012-0.015 lower on two samples of 200
            episodes (more exploring; README "Exploration, goal candidates and goal localization"). 0 = off.
        min_frontier_cells: frontier clusters smaller than this are ignored (cells).
        frontier_reach_m: a frontier target counts as reached within this distance, meters.
        frontier_size_weight: the next frontier is the one with the least path length minus this many meters per
            meter of frontier (cells x cell_m): a long opening onto unknown space beats a slightly nearer gap.
        frontier_colour_weight: with goal colours given to `explore`, a frontier also counts this many meters
            nearer per unit of colour likeness around it: the mean, over the coloured surface cells within
            frontier_colour_radius_m of it, of the share of the goal's surface colours each cell's colour matches
            (walls seen through a doorway in the goal photo's colours pull the search that way); 0 = off.
        frontier_colour_radius_m: the neighbourhood of a frontier whose surface colours count, meters.
        target_reach_m: a point target counts as reached within this distance, meters.
        heading_tolerance_rad: move forward when the waypoint bearing is within this, else turn, radians.
        forward_step_m: length of MOVE_FORWARD, meters (collision marking).
        blocked_hits: obstacle hits a forward move that fell short adds to the cells just ahead. Few enough
            that free evidence the camera keeps seeing outvotes them within a few frames (a doorway the robot
            brushed opens again); a spot the robot keeps bumping into stays closed, each bump adding as many.
        keep_unseen_obstacles: free space below the camera's view (along a column, nearer than where its lowest
            pixel's ray comes down to obstacle_min_height_m: 1.16 m for the simulator's camera, 3 m for a 69 deg
            16:9 one at 1.25 m) is still marked, so the ground around the robot is known, but it does not clear a
            cell whose obstacle hits the camera saw (those of blocked moves, `blocked_hits`, it does): low
            furniture seen from afar is not erased by the frames that pass over it up close, and a doorway closed
            by a bump still opens again. Off by default (every cell is cleared alike); README "What the camera
            cannot see up close".
        boxed_in_m2: when the traversable area connected to the robot is smaller than this (it stands in a niche
            whose way out is narrower than the robot plus twice clearance_m, or a bump's obstacle marks sealed the
            corridor it came by), plans drop clearance_m (robot_radius_m only) and pass cells whose obstacle
            evidence is at most blocked_hits with more than twice as much free evidence, until the robot is out;
            0 = never, square meters.
    """

    cell_m: float = 0.1
    size_m: float = 64.0
    hfov_deg: float = 90.0
    camera_height_m: float = 1.25
    camera_forward_m: float = 0.0
    camera_pitch_deg: float = 0.0
    max_range_m: float = 4.0
    obstacle_min_height_m: float = 0.1
    obstacle_max_height_m: float = 1.6
    robot_radius_m: float = 0.18
    clearance_m: float = 0.05
    pixel_stride: int = 2
    pixel_spacing_deg: float = 0.0
    min_frontier_cells: int = 4
    frontier_reach_m: float = 0.5
    frontier_size_weight: float = 0.02
    frontier_colour_weight: float = 0.0
    frontier_colour_radius_m: float = 2.0
    target_reach_m: float = 0.3
    heading_tolerance_rad: float = math.radians(16.0)
    forward_step_m: float = 0.25
    blocked_hits: int = 3
    keep_unseen_obstacles: bool = False
    boxed_in_m2: float = 1.0

    def __post_init__(self) -> None:
        positive = ("cell_m", "size_m", "hfov_deg", "camera_height_m", "max_range_m", "robot_radius_m",
                    "frontier_reach_m", "target_reach_m", "heading_tolerance_rad", "forward_step_m")
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"ExplorerConfig.{name} must be a positive number, got {value!r}")
        if not 0 < self.hfov_deg < 180:
            raise ValueError(f"ExplorerConfig.hfov_deg must be in (0, 180), got {self.hfov_deg}")
        if self.pixel_stride < 1 or self.min_frontier_cells < 1 or self.blocked_hits < 1:
            raise ValueError("ExplorerConfig.pixel_stride, min_frontier_cells and blocked_hits must be >= 1")
        for name in ("boxed_in_m2", "pixel_spacing_deg", "frontier_size_weight", "frontier_colour_weight",
                     "frontier_colour_radius_m"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"ExplorerConfig.{name} must be a number >= 0, got {value!r}")
        if self.obstacle_max_height_m <= self.obstacle_min_height_m:
            raise ValueError("ExplorerConfig.obstacle_max_height_m must exceed obstacle_min_height_m")
        check_camera_forward("ExplorerConfig.camera_forward_m", self.camera_forward_m)
        check_camera_pitch("ExplorerConfig.camera_pitch_deg", self.camera_pitch_deg)

    def stride_for(self, width_px: int) -> int:
        """The pixel stride `integrate` uses on images `width_px` wide: pixel_stride, or more where that many
        pixels would lie closer than pixel_spacing_deg."""
        if self.pixel_spacing_deg <= 0:
            return self.pixel_stride
        return max(self.pixel_stride, int(self.pixel_spacing_deg * width_px / self.hfov_deg))

    @property
    def cells(self) -> int:
        """Cells along each side of the map."""
        return int(math.ceil(self.size_m / self.cell_m))


@dataclass
class MapEvidence:
    """Evidence counts and colours laid on an occupancy grid (see OccupancyMap.evidence_from)."""

    free: np.ndarray
    occ: np.ndarray
    colour_sum: np.ndarray
    colour_hits: np.ndarray

    @classmethod
    def empty(cls, n: int) -> MapEvidence:
        return cls(np.zeros((n, n), np.uint16), np.zeros((n, n), np.uint16), np.zeros((n, n, 3), np.float32),
                   np.zeros((n, n), np.uint16))


class OccupancyMap:
    """Obstacle / free evidence counts on a square grid in the odometry frame (x, y of Pose2D)."""

    def __init__(self, config: ExplorerConfig, center: Pose2D) -> None:
        self.cfg = config
        n = config.cells
        self.origin = np.array([center.x_m - 0.5 * n * config.cell_m, center.y_m - 0.5 * n * config.cell_m])
        self.free = np.zeros((n, n), np.uint16)
        self.occ = np.zeros((n, n), np.uint16)
        self.bumped = np.zeros((n, n), np.uint16)   # the part of `occ` that blocked moves added (not seen)
        self.colour_sum = np.zeros((n, n, 3), np.float32)   # summed RGB (0-1) of the obstacle pixels per cell
        self.colour_hits = np.zeros((n, n), np.uint16)
        self._lo = np.array([n, n])       # bounding box of cells with any evidence (rows, cols)
        self._hi = np.array([-1, -1])
        self._rays: dict[tuple[int, int, float], tuple[np.ndarray, ...]] = {}

    # -- cells ---------------------------------------------------------------------------------------
    def to_cells(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, cols, inside) of points; row follows y, column follows x."""
        c = np.floor((np.asarray(x) - self.origin[0]) / self.cfg.cell_m).astype(np.int64)
        r = np.floor((np.asarray(y) - self.origin[1]) / self.cfg.cell_m).astype(np.int64)
        n = self.free.shape[0]
        inside = (r >= 0) & (c >= 0) & (r < n) & (c < n)
        return r, c, inside

    def cell_center(self, row: int, col: int) -> tuple[float, float]:
        x, y = cell_centers(self.origin, row, col, self.cfg.cell_m)
        return float(x), float(y)

    def _add(self, grid: np.ndarray, x: np.ndarray, y: np.ndarray, amount: int = 1,
             spare_seen_obstacles: bool = False) -> None:
        """Add `amount` hits to `grid` at the cells of points (x, y); with `spare_seen_obstacles`, not to cells
        holding more obstacle hits than blocked moves gave them (`bumped`): hits the camera saw. Evidence laid on
        from another map (`add_evidence`) counts as seen."""
        r, c, inside = self.to_cells(x, y)
        r, c = r[inside], c[inside]
        if spare_seen_obstacles:
            unseen = self.occ[r, c] <= self.bumped[r, c]
            r, c = r[unseen], c[unseen]
        if r.size == 0:
            return
        grid[r, c] = np.minimum(grid[r, c].astype(np.int64) + amount, 60000).astype(np.uint16)
        self._lo = np.minimum(self._lo, [r.min(), c.min()])
        self._hi = np.maximum(self._hi, [r.max(), c.max()])

    # -- integration ---------------------------------------------------------------------------------
    def integrate(self, depth: np.ndarray, pose: Pose2D, rgb: np.ndarray | None = None) -> None:
        """Add one depth frame (z-depth in meters, 0 = no return) taken with the robot at `pose` (its camera
        `camera_forward_m` ahead); with `rgb` (H', W', 3) uint8 registered to it (same field of view, any
        resolution), also the colours of the surfaces at obstacle height."""
        cfg = self.cfg
        robot, pose = pose, camera_pose(pose, cfg.camera_forward_m)
        depth = np.asarray(depth, dtype=np.float32)
        h, w = depth.shape
        s = cfg.stride_for(w)
        left_per_col, up_per_row = self._pixel_rays(h, w)[:2]
        d = depth[::s, ::s]
        # level points at the camera: ahead, left of the optical axis, up (the depth itself ahead when level)
        ahead, lat, rise = level_points(d, left_per_col[None, ::s], up_per_row[::s, None], cfg.camera_pitch_deg)
        height = cfg.camera_height_m + rise
        rng = np.hypot(ahead, lat)
        valid = (d > _NEAREST_DEPTH_M) & np.isfinite(d)
        seen = valid & (rng <= cfg.max_range_m)
        floor = seen & (height < cfg.obstacle_min_height_m)
        tall = valid & (height >= cfg.obstacle_min_height_m) & (height <= cfg.obstacle_max_height_m)

        # free space: each column is clear up to its nearest obstacle (or the range limit). A column is clear
        # nowhere when it holds a surface nearer than depth is trusted (0 < d <= _NEAREST_DEPTH_M: a camera
        # pressed against a wall) or no return at all (a real depth camera reads 0 where it cannot tell, e.g. a
        # wall inside its minimum range): else the wall in front of it would be cleared away
        obst_rng = np.where(tall, rng, np.inf).min(axis=0)
        blind = ((d > 0) & (d <= _NEAREST_DEPTH_M)).any(axis=0) | ~valid.any(axis=0)
        obst_rng[blind] = 0.0
        obstacle = tall & seen
        clear = np.minimum(obst_rng - 0.75 * cfg.cell_m, cfg.max_range_m)
        ux, uy = self._pixel_rays(h, w)[2][:, ::s]
        steps = np.arange(0.0, cfg.max_range_m, 0.5 * cfg.cell_m)
        along = steps[:, None] * np.ones_like(clear)[None, :]
        keep = along <= clear[None, :]
        if cfg.keep_unseen_obstacles:
            unseen = keep & (along < self._pixel_rays(h, w)[3][None, ::s])
            keep &= ~unseen
            self._add(self.free, *pose.apply((along * ux[None, :])[unseen], (along * uy[None, :])[unseen]),
                      spare_seen_obstacles=True)
        fx = (along * ux[None, :])[keep]
        fy = (along * uy[None, :])[keep]
        self._add(self.free, *pose.apply(fx, fy))
        self._add(self.free, *pose.apply(ahead[floor], lat[floor]))
        obstacle_xy = pose.apply(ahead[obstacle], lat[obstacle])
        self._add(self.occ, *obstacle_xy)
        if rgb is not None and np.ndim(rgb) == 3 and np.shape(rgb)[2] == 3:
            rgb = np.asarray(rgb)
            if rgb.shape[:2] != (h, w):     # registered to the depth image, another resolution: nearest pixel
                rgb = rgb[(np.arange(h) * rgb.shape[0]) // h][:, (np.arange(w) * rgb.shape[1]) // w]
            r, c, inside = self.to_cells(*obstacle_xy)
            flat = r[inside] * self.colour_hits.shape[1] + c[inside]
            colours = rgb[::s, ::s][obstacle][inside].astype(np.float32) / 255.0
            sums = self.colour_sum.reshape(-1, 3)
            np.add.at(sums, flat, colours)
            cells, counts = np.unique(flat, return_counts=True)
            hits = self.colour_hits.reshape(-1)
            hits[cells] = np.minimum(hits[cells].astype(np.int64) + counts, 60000)
            full = cells[hits[cells] >= 30000]      # a cell seen very often: halve both, the mean stays
            hits[full] //= 2
            sums[full] *= 0.5
        self.mark_footprint(robot)

    def _pixel_rays(self, h: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per column: left offset per meter of depth; per row: up offset per meter; per column, the unit
        vector (ahead, left) of its ray at the horizon, along which free space is marked, and how near the camera
        an obstacle may stand out of its view, meters (`memnav.core.frames.unseen_range_m`). Kept per image size
        and pitch until the camera changes (`Explorer.set_camera`)."""
        cfg = self.cfg
        key = (h, w, cfg.camera_pitch_deg)
        if key not in self._rays:
            left, up = pixel_ray_offsets(np.arange(w), np.arange(h), w, h, cfg.hfov_deg)
            # a pitched column's level ray: (1 / cos, left) per meter of depth, i.e. along (1, left cos pitch)
            flat = left * math.cos(math.radians(cfg.camera_pitch_deg)) if cfg.camera_pitch_deg else left
            norm = np.hypot(1.0, flat)
            unseen = unseen_range_m(left, float(up[-1]), cfg.camera_pitch_deg, cfg.camera_height_m,
                                    cfg.obstacle_min_height_m)
            self._rays[key] = (left, up, np.stack([1.0 / norm, flat / norm]), unseen)
        return self._rays[key]

    def mark_footprint(self, pose: Pose2D) -> None:
        """The robot stands here: its footprint is free."""
        r = self.cfg.robot_radius_m
        g = np.arange(-r, r + 1e-9, 0.5 * self.cfg.cell_m)
        xx, yy = np.meshgrid(g, g)
        inside = xx ** 2 + yy ** 2 <= r * r
        self._add(self.free, pose.x_m + xx[inside], pose.y_m + yy[inside])

    def mark_blocked_ahead(self, pose: Pose2D) -> None:
        """A forward move fell short: something the camera did not see stands just ahead."""
        cfg = self.cfg
        dist = cfg.robot_radius_m + 0.5 * cfg.cell_m
        offsets = np.linspace(-cfg.robot_radius_m, cfg.robot_radius_m, 5)
        cos_y, sin_y = math.cos(pose.yaw_rad), math.sin(pose.yaw_rad)
        xs = pose.x_m + cos_y * dist - sin_y * offsets
        ys = pose.y_m + sin_y * dist + cos_y * offsets
        self._add(self.occ, xs, ys, amount=cfg.blocked_hits)
        self._add(self.bumped, xs, ys, amount=cfg.blocked_hits)

    # -- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the map to `path` (.npz) atomically: a crash or a failed write (a full disk) leaves the previous
        file intact and no temporary file behind."""
        buf = io.BytesIO()
        np.savez_compressed(buf, format=np.array(MAP_FORMAT), version=np.array(MAP_VERSION),
                            cell_m=np.array(self.cfg.cell_m), cells=np.array(self.cfg.cells),
                            origin=self.origin, free=self.free, occ=self.occ, lo=self._lo, hi=self._hi,
                            colour_sum=self.colour_sum, colour_hits=self.colour_hits, bumped=self.bumped)
        replace_files({Path(path): buf.getvalue()}, sync=True)

    @classmethod
    def load(cls, path: str | Path, config: ExplorerConfig) -> OccupancyMap:
        """Read a map written by `save`; the grid must match `config` (cell size and extent).

        Raises:
            MapFileError: unreadable, not a memnav map, a newer version, or another grid; the file is left as is.
        """
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise MapFileError(f"{path}: not a readable occupancy map ({err})") from err
        missing = {"format", "version", "cell_m", "cells", "origin", "free", "occ", "lo", "hi"} - set(data)
        if missing or str(data["format"]) != MAP_FORMAT:
            raise MapFileError(f"{path}: not a memnav occupancy map (missing {sorted(missing) or 'format tag'})")
        if int(data["version"]) > MAP_VERSION:
            raise MapFileError(f"{path}: map version {int(data['version'])} is newer than this memnav "
                               f"({MAP_VERSION}); upgrade memnav")
        n = config.cells
        if abs(float(data["cell_m"]) - config.cell_m) > 1e-9 or int(data["cells"]) != n:
            raise MapFileError(f"{path}: grid of {int(data['cells'])} cells of {float(data['cell_m'])} m, the "
                               f"explorer uses {n} cells of {config.cell_m} m")
        if data["free"].shape != (n, n) or data["occ"].shape != (n, n):
            raise MapFileError(f"{path}: count arrays of shape {data['free'].shape}, expected {(n, n)}")
        m = cls(config, Pose2D(0.0, 0.0, 0.0))
        m.origin = data["origin"].astype(np.float64)
        m.free = data["free"].astype(np.uint16)
        m.occ = data["occ"].astype(np.uint16)
        m._lo = data["lo"].astype(np.int64)
        m._hi = data["hi"].astype(np.int64)
        if "colour_sum" in data:      # version 2 on
            if data["colour_sum"].shape != (n, n, 3) or data["colour_hits"].shape != (n, n):
                raise MapFileError(f"{path}: colour arrays of shape {data['colour_sum'].shape} and "
                                   f"{data['colour_hits'].shape}, expected {(n, n, 3)} and {(n, n)}")
            m.colour_sum = data["colour_sum"].astype(np.float32)
            m.colour_hits = data["colour_hits"].astype(np.uint16)
        if "bumped" in data:          # files written before it: every obstacle hit counts as seen
            if data["bumped"].shape != (n, n):
                raise MapFileError(f"{path}: bump array of shape {data['bumped'].shape}, expected {(n, n)}")
            m.bumped = data["bumped"].astype(np.uint16)
        return m

    # -- another frame's evidence -------------------------------------------------------------------
    def evidence_from(self, src: OccupancyMap, src_from_self: Pose2D) -> MapEvidence:
        """The evidence of map `src`, drawn in another frame, laid on this grid: each cell of this grid takes the
        counts and colours of the `src` cell its centre falls in once mapped by `src_from_self` (this map's frame
        -> src's frame). Nearest-cell lookup from every cell of this grid, so a rotation leaves no holes."""
        n, m = self.free.shape[0], src.free.shape[0]
        out = MapEvidence.empty(n)
        if np.any(src._hi < src._lo):
            return out                                   # src has no evidence
        # only this grid's cells that can land on src's evidence: its bounding box, mapped back, with a margin
        c = src.cfg.cell_m
        corners = np.array([[src._lo[1], src._lo[0]], [src._lo[1], src._hi[0] + 1], [src._hi[1] + 1, src._lo[0]],
                            [src._hi[1] + 1, src._hi[0] + 1]], np.float64) * c + src.origin
        back = [Pose2D(float(x), float(y), 0.0).relative_to(src_from_self) for x, y in corners]
        rows, cols, _ = self.to_cells(np.array([b.x_m for b in back]), np.array([b.y_m for b in back]))
        r0, r1 = int(np.clip(rows.min() - 1, 0, n)), int(np.clip(rows.max() + 2, 0, n))
        c0, c1 = int(np.clip(cols.min() - 1, 0, n)), int(np.clip(cols.max() + 2, 0, n))
        if r0 >= r1 or c0 >= c1:
            return out
        rr, cc = np.mgrid[r0:r1, c0:c1]
        x, y = cell_centers(self.origin, rr, cc, self.cfg.cell_m)
        sr, sc, inside = src.to_cells(*src_from_self.apply(x, y))
        sr, sc = np.clip(sr, 0, m - 1), np.clip(sc, 0, m - 1)
        box = (slice(r0, r1), slice(c0, c1))
        out.free[box] = np.where(inside, src.free[sr, sc], 0)
        out.occ[box] = np.where(inside, src.occ[sr, sc], 0)
        out.colour_sum[box] = np.where(inside[..., None], src.colour_sum[sr, sc], 0.0)
        out.colour_hits[box] = np.where(inside, src.colour_hits[sr, sc], 0)
        return out

    def _transforms_around(self, src: OccupancyMap, guess: Pose2D, radius_m: float, angle_deg: float,
                           step_deg: float, max_points: int, count_seen: bool = False):
        """Lay this map's obstacle cells (at most `max_points`) on `src` through every transform near `guess`:
        each rotation about their centroid within `angle_deg` (`step_deg` steps), with every shift within
        `radius_m` (one-cell steps). Yields, per rotation, (rotation rad, rotated transform, shifts in cells,
        the number of cells landing on or next to an obstacle of src per (row, col) shift, and with
        `count_seen` the numbers landing on cells src has seen and on its free floor (seen, no obstacle within
        one cell), else None), after a first item: the number of cells laid (nothing more when there are none)."""
        everything = np.s_[:, :]
        rows, cols = np.nonzero(self.obstacles(everything))
        if rows.size > max_points:
            keep = np.linspace(0, rows.size - 1, max_points).astype(np.int64)
            rows, cols = rows[keep], cols[keep]
        yield rows.size
        if rows.size == 0:
            return
        x, y = cell_centers(self.origin, rows, cols, self.cfg.cell_m)
        cx, cy = float(x.mean()), float(y.mean())
        grown = src._grown_obstacles()
        known = src.known(everything) if count_seen else None
        floor = known & ~grown if known is not None else None
        m = src.free.shape[0]
        k = int(round(radius_m / src.cfg.cell_m))
        shifts = np.arange(-k, k + 1)
        for dtheta in np.radians(np.arange(-angle_deg, angle_deg + 1e-9, step_deg)):
            cos, sin = math.cos(dtheta), math.sin(dtheta)
            about = Pose2D(cx - (cos * cx - sin * cy), cy - (sin * cx + cos * cy), float(dtheta))
            t = guess.compose(about)                 # rotate about the centroid, then the guess
            sr, sc, _ = src.to_cells(*t.apply(x, y))
            rr = sr[:, None, None] + shifts[None, :, None]
            cc = sc[:, None, None] + shifts[None, None, :]
            ok = (rr >= 0) & (rr < m) & (cc >= 0) & (cc < m)
            at = np.clip(rr, 0, m - 1), np.clip(cc, 0, m - 1)
            hits = np.where(ok, grown[at], False).sum(axis=0)
            seen = (np.where(ok, known[at], False).sum(axis=0), np.where(ok, floor[at], False).sum(axis=0)
                    ) if known is not None else None
            yield float(dtheta), t, shifts, hits, seen

    def align_to(self, src: OccupancyMap, guess: Pose2D, radius_m: float = 1.5, angle_deg: float = 24.0,
                 step_deg: float = 2.0, max_points: int = 3000) -> tuple[Pose2D, float]:
        """Refine a transform this map's frame -> src's frame (`guess`, e.g. a relocalised memory's correction) by
        correlating obstacle cells: every rotation about the centroid of this map's obstacles within
        `angle_deg` (`step_deg` steps) and every shift within `radius_m` (one-cell steps) is scored by the
        share of this map's obstacle cells that land on or next to an obstacle of `src`, less 0.02 per radius
        and per angle range away from the guess (so of two equally good fits the nearer wins). Returns the best
        transform and its share (0 when this map has no obstacles)."""
        aligned, share, _ = self.align_and_contradiction(src, guess, None, radius_m, angle_deg, step_deg, max_points)
        return aligned, share

    def contradiction(self, src: OccupancyMap, guess: Pose2D, min_seen: int, radius_m: float = 1.5,
                      angle_deg: float = 24.0, step_deg: float = 2.0, max_points: int = 3000) -> float | None:
        """How much this map contradicts `src` at best when laid on it near `guess` (the same transforms as
        `align_to`; radius_m and angle_deg 0 check `guess` alone): among the transforms that put at least
        `min_seen` of this map's obstacle cells on cells src has seen, the least share of those that land on
        src's free floor (no obstacle within one cell). None when no transform puts that many on seen cells.
        A wall standing where the other map saw open floor at every transform near the guess refutes it, where
        a low fit alone (`align_to`) may only mean that this map covers rooms src never saw."""
        return self.align_and_contradiction(src, guess, min_seen, radius_m, angle_deg, step_deg, max_points)[2]

    def align_and_contradiction(self, src: OccupancyMap, guess: Pose2D, min_seen: int | None,
                                radius_m: float = 1.5, angle_deg: float = 24.0, step_deg: float = 2.0,
                                max_points: int = 3000) -> tuple[Pose2D, float, float | None]:
        """`align_to` and `contradiction` from one pass over the transforms near `guess`: the best transform,
        its share, and the least contradiction (None when `min_seen` is None, or no transform reaches it)."""
        fits = self._transforms_around(src, guess, radius_m, angle_deg, step_deg, max_points,
                                       count_seen=min_seen is not None)
        n = next(fits)
        c = src.cfg.cell_m
        best = (-math.inf, guess, 0.0)
        least = None
        span = math.radians(angle_deg) or 1.0      # (no rotations to tell apart when it is 0)
        for dtheta, t, shifts, hits, seen in fits:
            # among equally good fits (a symmetric room, a long corridor) the one nearest the guess wins
            k = max(int(shifts[-1]), 1)
            far = np.hypot(shifts[:, None], shifts[None, :]) / k + abs(dtheta) / span
            ranked = hits / n - 0.02 * far
            i, j = np.unravel_index(int(np.argmax(ranked)), ranked.shape)
            if ranked[i, j] > best[0]:
                best = (float(ranked[i, j]), Pose2D(t.x_m + float(shifts[j]) * c, t.y_m + float(shifts[i]) * c,
                                                    t.yaw_rad), float(hits[i, j]) / n)
            if seen is not None:
                on_seen, on_floor = seen
                enough = on_seen >= max(min_seen, 1)
                if enough.any():
                    share = float((on_floor[enough] / on_seen[enough]).min())
                    least = share if least is None else min(least, share)
        return best[1], best[2], least

    def _grown_obstacles(self) -> np.ndarray:
        """Obstacle cells and their 4-neighbours (one cell of tolerance for a fit)."""
        target = self.obstacles(np.s_[:, :])
        grown = target.copy()
        grown[1:] |= target[:-1]
        grown[:-1] |= target[1:]
        grown[:, 1:] |= target[:, :-1]
        grown[:, :-1] |= target[:, 1:]
        return grown

    def copy(self) -> OccupancyMap:
        """An independent copy (e.g. to work on in another thread while this one keeps integrating frames)."""
        out = OccupancyMap(self.cfg, Pose2D(0.0, 0.0, 0.0))
        out.origin = self.origin.copy()
        out.free, out.occ, out.bumped = self.free.copy(), self.occ.copy(), self.bumped.copy()
        out.colour_sum, out.colour_hits = self.colour_sum.copy(), self.colour_hits.copy()
        out._lo, out._hi = self._lo.copy(), self._hi.copy()
        return out

    def without(self, ev: MapEvidence) -> OccupancyMap:
        """A copy of this map with evidence laid on it (`evidence_from`, `add_evidence`) taken back out."""
        out = self.copy()
        out.add_evidence(ev, sign=-1)
        return out

    def add_unseen(self, ev: MapEvidence) -> None:
        """Add evidence (`evidence_from`) only to the cells this map has none for, leaving what it saw as it is."""
        unseen = ~self.known(np.s_[:, :])
        self.add_evidence(MapEvidence(np.where(unseen, ev.free, 0), np.where(unseen, ev.occ, 0),
                                      np.where(unseen[..., None], ev.colour_sum, 0.0),
                                      np.where(unseen, ev.colour_hits, 0)))

    def add_evidence(self, ev: MapEvidence, sign: int = 1) -> None:
        """Add (sign 1) or take back (sign -1) evidence laid on this grid by `evidence_from`."""
        for name in ("free", "occ", "colour_hits"):
            grid = getattr(self, name)
            grid[...] = np.clip(grid.astype(np.int64) + sign * getattr(ev, name).astype(np.int64), 0, 60000)
        self.colour_sum = np.maximum(self.colour_sum + sign * ev.colour_sum, 0.0).astype(np.float32)
        any_ev = (self.free > 0) | (self.occ > 0)
        if any_ev.any():
            rows, cols = np.nonzero(any_ev)
            self._lo, self._hi = np.array([rows.min(), cols.min()]), np.array([rows.max(), cols.max()])
        else:
            self._lo, self._hi = np.array(self.free.shape), np.array([-1, -1])

    # -- views ----------------------------------------------------------------------------------------
    def window(self, pose: Pose2D | None, margin_cells: int = 8) -> tuple[slice, slice]:
        """The part of the grid with evidence (and the robot, given its pose), plus a margin."""
        n = self.free.shape[0]
        lo, hi = self._lo, self._hi
        if pose is not None:
            r, c, _ = self.to_cells(np.array([pose.x_m]), np.array([pose.y_m]))
            lo, hi = np.minimum(lo, [r[0], c[0]]), np.maximum(hi, [r[0], c[0]])
        lo = np.clip(lo - margin_cells, 0, n)
        hi = np.clip(hi + margin_cells + 1, 0, n)
        return slice(int(lo[0]), int(hi[0])), slice(int(lo[1]), int(hi[1]))

    def window_origin(self, win: tuple[slice, slice]) -> np.ndarray:
        """(x, y) of the corner of the window's cell (0, 0), meters."""
        c = self.cfg.cell_m
        return np.array([self.origin[0] + win[1].start * c, self.origin[1] + win[0].start * c])

    def obstacles(self, win: tuple[slice, slice]) -> np.ndarray:
        occ = self.occ[win].astype(np.int32)
        return (occ > 0) & (4 * occ >= self.free[win].astype(np.int32))

    def known(self, win: tuple[slice, slice]) -> np.ndarray:
        return (self.occ[win] > 0) | (self.free[win] > 0)

    def grid_view(self, margin_cells: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """The cells with evidence plus a margin as an occupancy grid: (int8 array, rows follow y and columns x,
        -1 unknown, 0 free, 100 obstacle; (x, y) of the corner of its cell (0, 0) in meters). An empty map gives
        a (0, 0) array."""
        if (self._hi < self._lo).any():
            return np.zeros((0, 0), np.int8), self.origin.copy()
        win = self.window(None, margin_cells)
        cells = np.full((win[0].stop - win[0].start, win[1].stop - win[1].start), -1, np.int8)
        cells[self.known(win)] = 0
        cells[self.obstacles(win)] = 100
        return cells, self.window_origin(win)


@dataclass
class Plan:
    """A move and why: `kind` is "frontier", "target" or "none"; waypoint and path (robot first, then the
    string-pulled corners to the goal; empty when no path was planned) in the map's frame."""

    action: Action | None
    kind: str
    waypoint: tuple[float, float] | None = None
    distance_m: float = math.inf
    path: tuple[tuple[float, float], ...] = ()


class Explorer:
    """Frontier exploration and point-to-point navigation on the robot's own occupancy map.

    Args:
        config: mapping and exploration parameters.
    """

    def __init__(self, config: ExplorerConfig | None = None) -> None:
        self.cfg = config or ExplorerConfig()
        self.map: OccupancyMap | None = None
        self._frontier: tuple[float, float] | None = None
        self._failed: list[tuple[float, float]] = []
        self.frontiers_reached = 0            # frontier targets reached so far (the navigator may look around there)
        self._version = 0                     # bumped whenever the map changes (invalidates the field cache)
        self._cache: tuple | None = None
        self.last_plan: Plan | None = None    # the last plan explore() or go_to() made (what to show a user)

    @classmethod
    def from_config(cls, cfg: ExplorerConfig) -> Explorer:
        return cls(cfg)

    def set_camera(self, hfov_deg: float, camera_height_m: float, camera_forward_m: float | None = None,
                   camera_pitch_deg: float | None = None) -> None:
        """The camera the depth comes from (a robot's, known once its camera_info arrives): frames from now on are
        mapped with this field of view, height and (given) offset ahead of the turning axis and pitch; what the
        map holds stays.

        Raises:
            ValueError: a field of view outside (0, 180) degrees, a height <= 0, an offset beyond 2 m or a pitch
                beyond 45 degrees, naming the field.
        """
        forward = self.cfg.camera_forward_m if camera_forward_m is None else float(camera_forward_m)
        pitch = self.cfg.camera_pitch_deg if camera_pitch_deg is None else float(camera_pitch_deg)
        self.cfg = replace(self.cfg, hfov_deg=float(hfov_deg), camera_height_m=float(camera_height_m),
                           camera_forward_m=forward, camera_pitch_deg=pitch)
        if self.map is not None:
            self.map.cfg = self.cfg
            self.map._rays.clear()   # the per-pixel rays of the old camera

    def reset(self, keep_map: bool = False) -> None:
        """Start over: forget the map (a new episode, possibly in another odometry frame) unless `keep_map`
        (the same odometry frame, e.g. lifelong visits); frontier commitments are dropped either way."""
        if not keep_map:
            self.map = None
        self._version += 1
        self._frontier = None
        self._failed = []
        self.last_plan = None

    def drop_frontier(self) -> None:
        """Forget the committed frontier: the next explore() chooses again on the map as it is then."""
        self._frontier = None

    def save_map(self, path: str | Path) -> bool:
        """Write the map (see OccupancyMap.save); False when there is no map yet."""
        if self.map is None:
            return False
        self.map.save(path)
        return True

    def load_map(self, path: str | Path) -> None:
        """Replace the map with one written by `save_map` (raises MapFileError, see OccupancyMap.load)."""
        self.map = OccupancyMap.load(path, self.cfg)
        self.map_changed()

    def map_changed(self) -> None:
        """The map was edited from outside (evidence added): plans and the committed frontier start afresh."""
        self._version += 1
        self._frontier = None
        self._failed = []

    def update(self, depth: np.ndarray, pose: Pose2D, blocked: bool = False, rgb: np.ndarray | None = None) -> None:
        """Integrate a depth frame (and its colours, given `rgb`); `blocked`: the last forward move fell short."""
        self._version += 1
        if self.map is None:
            self.map = OccupancyMap(self.cfg, pose)
        if blocked:
            self.map.mark_blocked_ahead(pose)
            self._frontier = None   # re-plan around what was hit
        self.map.integrate(depth, pose, rgb)

    # -- planning -------------------------------------------------------------------------------------
    def _fields(self, pose: Pose2D) -> tuple | None:
        """(window, traversable, distance-from-robot field, known, obstacle distance in m) on the evidence window.

        Cached until the map changes or the robot moves: one step's explore, go_to and match_goal share it."""
        key = (self._version, pose.x_m, pose.y_m)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        fields = self._compute_fields(pose)
        self._cache = (key, fields)
        return fields

    def _compute_fields(self, pose: Pose2D) -> tuple | None:
        import skfmm
        from scipy import ndimage

        m = self.map
        if m is None:
            return None
        cfg = self.cfg
        win = m.window(pose)
        obstacles = m.obstacles(win)
        clearance = ndimage.distance_transform_edt(~obstacles) * cfg.cell_m
        known = m.known(win)
        r, c, _ = m.to_cells(np.array([pose.x_m]), np.array([pose.y_m]))
        rr, cc = int(r[0]) - win[0].start, int(c[0]) - win[1].start
        if not (0 <= rr < obstacles.shape[0] and 0 <= cc < obstacles.shape[1]):
            return None
        trav = self._traversable(known, obstacles, clearance, rr, cc, cfg.robot_radius_m + cfg.clearance_m)
        region = self._region(trav, rr, cc)
        if region.sum() * cfg.cell_m ** 2 < cfg.boxed_in_m2:
            # boxed in (a narrow doorway out of a niche, a corridor a bump's marks sealed): until out, plan
            # without the margin, through cells whose obstacle evidence is one bump's worth at most and whose
            # free evidence is more than twice that (a bump there again adds as much and closes them)
            occ, free = (g[win].astype(np.int32) for g in (m.occ, m.free))
            loose = obstacles & ~((occ <= cfg.blocked_hits) & (free > 2 * occ))
            near = ndimage.distance_transform_edt(~loose) * cfg.cell_m
            trav = self._traversable(known, loose, near, rr, cc, cfg.robot_radius_m)
            region = self._region(trav, rr, cc)
        rows = np.arange(trav.shape[0])[:, None]
        cols = np.arange(trav.shape[1])[None, :]
        phi = np.hypot(rows - rr, cols - cc) * cfg.cell_m - 0.75 * cfg.cell_m
        phi[rr, cc] = min(phi[rr, cc], -1e-3)
        mask = ~region
        try:
            dist = skfmm.distance(np.ma.MaskedArray(phi, mask=mask), dx=cfg.cell_m, order=1)
        except ValueError:
            return None
        field = np.where(np.ma.getmaskarray(dist), np.inf, np.ma.getdata(dist) + 0.75 * cfg.cell_m)
        return win, trav, np.maximum(field, 0.0), known, clearance

    def _traversable(self, known: np.ndarray, obstacles: np.ndarray, clearance: np.ndarray, rr: int, cc: int,
                     margin_m: float) -> np.ndarray:
        """Known cells farther than `margin_m` from every obstacle, plus the free cells under the robot at (rr, cc)
        (it stands where it stands, even if the inflated map disagrees)."""
        trav = known & ~obstacles & (clearance > margin_m)
        rad = int(math.ceil(self.cfg.robot_radius_m / self.cfg.cell_m))
        r0, r1, c0, c1 = max(0, rr - rad), rr + rad + 1, max(0, cc - rad), cc + rad + 1
        trav[r0:r1, c0:c1] |= ~obstacles[r0:r1, c0:c1]
        trav[rr, cc] = True
        return trav

    @staticmethod
    def _region(trav: np.ndarray, rr: int, cc: int) -> np.ndarray:
        """The traversable cells connected to (rr, cc)."""
        from scipy import ndimage

        labels, _ = ndimage.label(trav)
        return labels == labels[rr, cc]

    def match_goal(self, pose: Pose2D, scan: GoalScan, cfg: ScanMatchConfig | None = None,
                   radius_m: float | None = None) -> list[Candidate]:
        """Poses on the map (reachable from the robot, within `radius_m` of it if given) where the goal's
        depth scan fits, best first."""
        fields = self._fields(pose)
        if fields is None:
            return []
        win, trav, field, known, clearance = fields
        m = self.map
        assert m is not None
        cell = self.cfg.cell_m
        origin = m.window_origin(win)
        positions = trav & np.isfinite(field)
        if radius_m is not None:
            xs, ys = cell_centers(origin, np.arange(positions.shape[0]), np.arange(positions.shape[1]), cell)
            positions &= np.hypot(xs[None, :] - pose.x_m, ys[:, None] - pose.y_m) <= radius_m
        return match_scan(scan, clearance, known, positions, origin, cell, cfg)

    def goal_scan(self, depth: np.ndarray, cfg: ScanMatchConfig | None = None,
                  rgb: np.ndarray | None = None) -> GoalScan:
        """The goal image's depth as a scan (with colours, given `rgb`), with this map's camera and obstacle
        heights, in the frame of the robot that took it: its points `camera_forward_m` further ahead than the
        camera saw them, so scan-matched poses are where that robot stood."""
        c = self.cfg
        scan = goal_scan(depth, c.hfov_deg, c.camera_height_m, c.obstacle_min_height_m, c.obstacle_max_height_m,
                         cfg, rgb=rgb, band_m=c.cell_m, pitch_deg=c.camera_pitch_deg)
        return scan.moved_ahead(c.camera_forward_m)

    def colour_fit(self, scan: GoalScan, pose: Pose2D, sigma: float = 0.1, min_points: int = 8) -> float | None:
        """How well the goal scan's colours agree with the map's surface colours with the goal camera at `pose`
        (map frame): the mean over endpoints of exp(-|colour difference|^2 / 2 sigma^2), each endpoint compared
        with the mean colour of the map cells within one cell of where it lands (two when those hold none).
        None when the scan has no colours or fewer than `min_points` endpoints land near coloured cells."""
        return self.colour_fits(scan, [pose], sigma, min_points)[0]

    def colour_fits(self, scan: GoalScan, poses: list[Pose2D], sigma: float = 0.1,
                    min_points: int = 8) -> list[float | None]:
        """`colour_fit` at each of several poses, in one array operation."""
        m = self.map
        if m is None or scan.colours is None or len(scan.endpoints) == 0 or not poses:
            return [None] * len(poses)
        px, py, yaw = (np.array([getattr(p, k) for p in poses])[:, None] for k in ("x_m", "y_m", "yaw_rad"))
        c, s_ = np.cos(yaw), np.sin(yaw)
        fwd, left = scan.endpoints[None, :, 0], scan.endpoints[None, :, 1]
        r, col, _ = m.to_cells(px + c * fwd - s_ * left, py + s_ * fwd + c * left)       # (N, K)
        n = m.colour_hits.shape[0]
        rr = np.clip(r[..., None] + _RING_DR, 0, n - 1)     # (N, K, 25): the cells within two of each endpoint
        cc = np.clip(col[..., None] + _RING_DC, 0, n - 1)
        flat = rr * n + cc
        sums = m.colour_sum.reshape(-1, 3).T[:, flat]                  # (3, N, K, 25)
        counts = m.colour_hits.ravel()[flat].astype(np.float64)       # (N, K, 25)
        hits, total = counts @ _RING_INNER, (sums @ _RING_INNER).transpose(1, 2, 0)
        outer = hits == 0                    # nothing within one cell: widen to two
        hits[outer] = counts[outer].sum(axis=-1)
        total[outer] = sums[:, outer].sum(axis=-1).T
        ok = hits > 0
        diff = chromaticity(total / np.maximum(hits, 1.0)[..., None]) - chromaticity(scan.colours)[None]
        agree = np.where(ok, np.exp(-(diff ** 2).sum(axis=-1) / (2.0 * sigma ** 2)), 0.0)
        used = ok.sum(axis=1)
        return [float(a / u) if u >= min_points else None for a, u in zip(agree.sum(axis=1), used)]

    def explore(self, pose: Pose2D, goal_colours: np.ndarray | None = None, colour_sigma: float = 0.1) -> Plan:
        """The next move towards the chosen frontier, or Plan(None, "none") when nothing is left to explore.

        `goal_colours` (K, 3 RGB in 0-1, e.g. `GoalScan.colours`): with `frontier_colour_weight` > 0, frontiers
        near surfaces of those colours are chosen sooner (see ExplorerConfig)."""
        from scipy import ndimage

        fields = self._fields(pose)
        if fields is None:
            return Plan(None, "none")
        win, trav, field, known, _ = fields
        m = self.map
        assert m is not None
        if self._frontier is not None:
            fx, fy = self._frontier
            if math.hypot(fx - pose.x_m, fy - pose.y_m) < self.cfg.frontier_reach_m:
                self._frontier = None
                self.frontiers_reached += 1
            elif not self._is_frontier(fx, fy, win, trav, known):
                self._frontier = None
        if self._frontier is None:
            unknown = ~known
            pad = np.pad(unknown, 1, constant_values=True)
            near_unknown = pad[:-2, 1:-1] | pad[2:, 1:-1] | pad[1:-1, :-2] | pad[1:-1, 2:]
            frontier = trav & near_unknown & np.isfinite(field)
            labels, count = ndimage.label(frontier, structure=np.ones((3, 3)))
            likeness = (self._colour_likeness(win, goal_colours, colour_sigma)
                        if goal_colours is not None and self.cfg.frontier_colour_weight > 0 and count else None)
            best, best_cost = None, math.inf
            for lab in range(1, count + 1):
                rr, cc = np.nonzero(labels == lab)
                if rr.size < self.cfg.min_frontier_cells:
                    continue
                d = field[rr, cc]
                i = int(np.argmin(d))
                x, y = m.cell_center(int(rr[i]) + win[0].start, int(cc[i]) + win[1].start)
                if d[i] < self.cfg.frontier_reach_m or any(math.hypot(x - a, y - b) < 0.5 for a, b in self._failed):
                    continue
                cost = float(d[i]) - self.cfg.frontier_size_weight * rr.size * self.cfg.cell_m
                if likeness is not None:
                    cost -= self.cfg.frontier_colour_weight * float(likeness[rr[i], cc[i]])
                if cost < best_cost:
                    best, best_cost = (x, y), cost
            self._frontier = best
        if self._frontier is None:
            return Plan(None, "none")
        plan = self._move_to(pose, self._frontier, win, trav, field, "frontier")
        if plan.action is None:
            self._failed.append(self._frontier)
            self._frontier = None
        self.last_plan = plan
        return plan

    def _colour_likeness(self, win: tuple[slice, slice], goal_colours: np.ndarray, sigma: float) -> np.ndarray:
        """Per window cell, the mean over the coloured surface cells within frontier_colour_radius_m of the share
        of `goal_colours` whose chromaticity each one matches (Gaussian, `sigma`); 0 where none is near."""
        from scipy import ndimage

        m = self.map
        assert m is not None
        hits = m.colour_hits[win]
        seen = hits > 0
        like = np.zeros(hits.shape, np.float64)
        goal = chromaticity(np.asarray(goal_colours, dtype=np.float64).reshape(-1, 3))
        if seen.any() and len(goal):
            cells = chromaticity(m.colour_sum[win][seen] / hits[seen][:, None])
            like[seen] = colour_affinity(cells, goal, sigma).mean(axis=1)
        size = 2 * int(round(self.cfg.frontier_colour_radius_m / self.cfg.cell_m)) + 1
        total = ndimage.uniform_filter(like, size, mode="constant")
        count = ndimage.uniform_filter(seen.astype(np.float64), size, mode="constant")
        return np.where(count > 1e-9, total / np.maximum(count, 1e-9), 0.0)

    def unvisited_point(self, pose: Pose2D, visited_xy: np.ndarray, min_distance_m: float, *,
                        bonus: np.ndarray | None = None, bonus_radius_m: float = 1.0) -> tuple[float, float] | None:
        """The reachable map position nearest to drive to that lies at least `min_distance_m` from every visited
        position (an (N, 2) array, meters), or None when there is none: where to stand next once everything
        has been seen but the goal not found, since a place seen from afar was not seen from where it stands.

        `bonus`, an (M, 3) array of map x, y and meters, makes a position within `bonus_radius_m` of such a
        point that many meters nearer (the largest bonus within reach counts): a prior on where to look first."""
        from scipy import ndimage

        fields = self._fields(pose)
        if fields is None:
            return None
        win, trav, field, _, _ = fields
        m = self.map
        assert m is not None
        cell = self.cfg.cell_m
        reach = trav & np.isfinite(field)
        unvisited = np.ones_like(reach)
        pts = np.asarray(visited_xy, dtype=np.float64).reshape(-1, 2)
        r, c, inside = m.to_cells(pts[:, 0], pts[:, 1])
        r, c = r[inside] - win[0].start, c[inside] - win[1].start
        ok = (r >= 0) & (c >= 0) & (r < reach.shape[0]) & (c < reach.shape[1])
        unvisited[r[ok], c[ok]] = False
        far = reach & (ndimage.distance_transform_edt(unvisited) * cell >= min_distance_m)
        if not far.any():
            return None
        rows, cols = np.nonzero(far)
        cost = field[rows, cols]
        if bonus is not None and len(bonus):
            xs, ys = cell_centers(m.window_origin(win), rows, cols, cell)
            b = np.asarray(bonus, dtype=np.float64).reshape(-1, 3)
            near = np.hypot(xs[:, None] - b[None, :, 0], ys[:, None] - b[None, :, 1]) <= bonus_radius_m
            cost = cost - np.where(near, b[None, :, 2], 0.0).max(axis=1)
        i = int(np.argmin(cost))
        x, y = cell_centers(m.window_origin(win), rows[i], cols[i], cell)
        return float(x), float(y)

    def go_to(self, pose: Pose2D, x_m: float, y_m: float) -> Plan:
        """The next move towards a point (or the reachable cell nearest to it); action None once there."""
        fields = self._fields(pose)
        if fields is None:
            return Plan(None, "none")
        win, trav, field, _, _ = fields
        m = self.map
        assert m is not None
        reach = np.isfinite(field)
        rows, cols = np.nonzero(reach)
        xs, ys = cell_centers(m.window_origin(win), rows, cols, self.cfg.cell_m)
        err = np.hypot(xs - x_m, ys - y_m)
        # the reachable cell nearest the target; among near-equals, the one closest to drive to
        score = err + 0.05 * field[rows, cols]
        i = int(np.argmin(score))
        goal = (float(xs[i]), float(ys[i]))
        if math.hypot(goal[0] - pose.x_m, goal[1] - pose.y_m) < self.cfg.target_reach_m:
            self.last_plan = Plan(None, "target", goal, 0.0)
        else:
            self.last_plan = self._move_to(pose, goal, win, trav, field, "target")
        return self.last_plan

    def _is_frontier(self, x: float, y: float, win, trav: np.ndarray, known: np.ndarray) -> bool:
        m = self.map
        assert m is not None
        r, c, inside = m.to_cells(np.array([x]), np.array([y]))
        if not inside[0]:
            return False
        rr, cc = int(r[0]) - win[0].start, int(c[0]) - win[1].start
        k = 2
        r0, c0 = max(0, rr - k), max(0, cc - k)
        return bool(trav[rr, cc]) and not bool(known[r0: rr + k + 1, c0: cc + k + 1].all())

    def _move_to(self, pose: Pose2D, goal: tuple[float, float], win, trav: np.ndarray, field: np.ndarray,
                 kind: str) -> Plan:
        m = self.map
        assert m is not None
        cfg = self.cfg
        r, c, _ = m.to_cells(np.array([goal[0]]), np.array([goal[1]]))
        gr, gc = int(r[0]) - win[0].start, int(c[0]) - win[1].start
        if not (0 <= gr < field.shape[0] and 0 <= gc < field.shape[1]) or not math.isfinite(field[gr, gc]):
            return Plan(None, kind)
        cells = descend(field, gr, gc, cfg.cell_m, True)[::-1]      # robot -> goal
        origin = m.window_origin(win)
        pts = np.zeros((len(cells) + 1, 3))
        pts[0, 0], pts[0, 2] = pose.x_m, pose.y_m
        pts[1:, 0], pts[1:, 2] = cell_centers(origin, cells[:, 0], cells[:, 1], cfg.cell_m)
        keep = string_pull(trav, origin, cfg.cell_m, pts, True)
        path = pts[keep]
        wp = path[1] if len(path) > 1 else path[0]
        # skip a waypoint the robot is already on
        if len(path) > 2 and math.hypot(wp[0] - pose.x_m, wp[2] - pose.y_m) < 0.15:
            wp = path[2]
        if not segment_clear(trav, origin, cfg.cell_m, pts[0], wp) and len(path) > 1:
            wp = pts[min(3, len(pts) - 1)]
        return Plan(steer(pose, float(wp[0]), float(wp[2]), cfg.heading_tolerance_rad), kind,
                    (float(wp[0]), float(wp[2])), float(field[gr, gc]),
                    tuple((float(p[0]), float(p[2])) for p in path))


# colour_fit's neighbourhood: cell offsets within two cells, and which of them lie within one
_RING_DR, _RING_DC = (v.ravel() for v in np.mgrid[-2:3, -2:3])
_RING_INNER = ((np.abs(_RING_DR) <= 1) & (np.abs(_RING_DC) <= 1)).astype(np.float64)


def chromaticity(rgb: np.ndarray) -> np.ndarray:
    """RGB (..., 3) divided by its channel mean: the colour without its brightness, which the lighting and the
    viewing angle change from view to view (black stays black)."""
    rgb = np.asarray(rgb, dtype=np.float64)
    return rgb / np.maximum(rgb.mean(axis=-1, keepdims=True), 0.02)


def steer(pose: Pose2D, x_m: float, y_m: float, tolerance_rad: float) -> Action:
    """Turn towards (x, y) while its bearing is off by more than the tolerance, else move forward."""
    bearing = wrap_angle(math.atan2(y_m - pose.y_m, x_m - pose.x_m) - pose.yaw_rad)
    if abs(bearing) > tolerance_rad:
        return Action.TURN_LEFT if bearing > 0 else Action.TURN_RIGHT
    return Action.MOVE_FORWARD


def face(pose: Pose2D, yaw_rad: float, tolerance_rad: float) -> Action | None:
    """Turn towards a heading; None once within the tolerance."""
    err = wrap_angle(yaw_rad - pose.yaw_rad)
    if abs(err) <= tolerance_rad:
        return None
    return Action.TURN_LEFT if err > 0 else Action.TURN_RIGHT
