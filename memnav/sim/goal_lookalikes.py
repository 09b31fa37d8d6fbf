"""Look-alikes of a goal photo: the view elsewhere in a house that reproduces it best.

An ImageNav goal is a photo; an agent that stops where a view looks like it succeeds only if that view is
within the success distance of the goal. Where the house shows the same thing elsewhere (a stretch of wall
whose texture repeats, two rooms furnished alike), no observer can tell from the photo alone which spot is
meant. `HouseLookalikes.audit` looks for the view, more than `outside_m` (geodesic) from the goal, that
reproduces the goal photo best, and compares it with how much the photo changes when the goal camera itself
is nudged (by `nudge_m` sideways and `nudge_deg` in heading):

- `GoalAudit.ratio` = RMS difference (RGB-D) between the photo and its best look-alike elsewhere, divided by
  the median RMS difference between the photo and the nudged views of the goal spot;
- ambiguous: ratio <= 1, some spot outside the success region matches the photo at least as well as the
  goal spot moved by a few centimetres; near-identical: ratio <= 0.5.

The search renders a grid of views over the navigable area (`grid_m` apart, every `heading_deg`), ranks them
against the photo at half resolution, and refines the best few distinct spots by coordinate descent on
position and heading. It can miss a look-alike that the grid does not come near, so it errs toward calling a
goal unambiguous. The search itself (`audit_goal`) takes a render function and plain arrays;
`HouseLookalikes` binds it to the embedded simulator's loaded house. Used by `memnav goal-audit` and by
`memnav scenes --min-goal-lookalike-ratio`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

RenderFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


MIN_HEADING_DEG = 1.0    # the finest heading spacing of the search: 360 views per position, 10x the default


@dataclass(frozen=True)
class GoalAuditConfig:
    """How look-alikes of a goal photo are searched for.

    Attributes:
        grid_m: spacing of the grid of candidate positions over the navigable area, meters.
        heading_deg: spacing of the candidate headings at each grid position, degrees.
        image_px: side of the square views compared, pixels (the coarse ranking uses half of it).
        candidates: how many distinct spots of the coarse ranking are refined.
        candidate_spacing_m: refined spots are at least this far apart, meters.
        refine_steps: (meters, degrees) step sizes of the coordinate descent, coarse to fine.
        refine_iterations: most descent moves per step size.
        nudge_m: how far the goal camera is moved for the reference difference, meters.
        nudge_deg: how far the goal camera is turned for the reference difference, degrees.
        outside_m: look-alikes must be farther than this from the goal, geodesic meters (the success distance).
        depth_clip_m: depth is clipped to this before comparing, meters.
        depth_scale_m: depth is divided by this, so that it weighs like a colour channel in [0, 1], meters.
        ambiguous_ratio: a goal is ambiguous when its look-alike's ratio is at most this.
        near_identical_ratio: a goal is near-identical elsewhere when the ratio is at most this.
    """

    grid_m: float = 0.15
    heading_deg: float = 10.0
    image_px: int = 64
    candidates: int = 6
    candidate_spacing_m: float = 0.5
    refine_steps: tuple[tuple[float, float], ...] = ((0.08, 4.0), (0.04, 2.0), (0.02, 1.0), (0.01, 0.5))
    refine_iterations: int = 6
    nudge_m: float = 0.05
    nudge_deg: float = 2.0
    outside_m: float = 1.0
    depth_clip_m: float = 5.0
    depth_scale_m: float = 2.0
    ambiguous_ratio: float = 1.0
    near_identical_ratio: float = 0.5

    def __post_init__(self) -> None:
        for name in ("grid_m", "heading_deg", "candidate_spacing_m", "nudge_m", "nudge_deg", "outside_m",
                     "depth_clip_m", "depth_scale_m", "ambiguous_ratio", "near_identical_ratio"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"GoalAuditConfig.{name} must be a positive number, got {value!r}")
        if not MIN_HEADING_DEG <= self.heading_deg <= 360.0:   # 1e-6 deg: 3.6e8 headings per position
            raise ValueError(f"GoalAuditConfig.heading_deg must be between {MIN_HEADING_DEG:g} and 360 degrees, got "
                             f"{self.heading_deg!r}")
        if self.image_px < 8 or self.image_px % 2:
            raise ValueError(f"GoalAuditConfig.image_px must be an even number >= 8, got {self.image_px!r}")
        for name in ("candidates", "refine_iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"GoalAuditConfig.{name} must be >= 1, got {getattr(self, name)!r}")

    @property
    def headings_rad(self) -> np.ndarray:
        """The candidate headings at every grid position."""
        return np.radians(np.arange(-180.0, 180.0, self.heading_deg))


@dataclass(frozen=True)
class GoalAudit:
    """One goal photo's best look-alike elsewhere in its house.

    Attributes:
        nudge_rms: median RMS difference between the photo and the goal spot nudged (the reference).
        lookalike_rms: RMS difference between the photo and its best look-alike (inf when none was found).
        lookalike_position: the look-alike's Habitat position on the floor (x, y, z), or None.
        lookalike_yaw_rad: its heading, or None.
        lookalike_geodesic_m: its geodesic distance to the goal, meters, or None.
    """

    nudge_rms: float
    lookalike_rms: float
    lookalike_position: tuple[float, float, float] | None
    lookalike_yaw_rad: float | None
    lookalike_geodesic_m: float | None

    @property
    def ratio(self) -> float:
        """lookalike_rms / nudge_rms: 0 for an exact copy elsewhere, inf when none was found (or when the photo
        does not change when nudged, a blank view, and nothing elsewhere copies it exactly)."""
        if self.lookalike_rms == 0.0:
            return 0.0
        return self.lookalike_rms / self.nudge_rms if self.nudge_rms > 0 else math.inf

    def to_json(self, cfg: GoalAuditConfig) -> dict:
        ratio = self.ratio
        return {"nudge_rms": round(self.nudge_rms, 5),
                "lookalike_rms": round(self.lookalike_rms, 5) if math.isfinite(self.lookalike_rms) else None,
                "lookalike_ratio": round(ratio, 4) if math.isfinite(ratio) else None,
                "lookalike_geodesic_m": None if self.lookalike_geodesic_m is None
                else round(self.lookalike_geodesic_m, 3),
                "lookalike_position": None if self.lookalike_position is None
                else [round(v, 3) for v in self.lookalike_position],
                "lookalike_yaw_rad": None if self.lookalike_yaw_rad is None else round(self.lookalike_yaw_rad, 4),
                "ambiguous": bool(ratio <= cfg.ambiguous_ratio),
                "near_identical": bool(ratio <= cfg.near_identical_ratio)}


def view_stack(rgb: np.ndarray, depth: np.ndarray, cfg: GoalAuditConfig) -> np.ndarray:
    """(B, P, P, 3) uint8 RGB and (B, P, P) depth in meters -> (B, P, P, 4) float32 views to compare."""
    out = np.empty((*depth.shape, 4), dtype=np.float32)
    out[..., :3] = rgb / np.float32(255.0)
    out[..., 3] = np.clip(depth, 0.0, cfg.depth_clip_m) / np.float32(cfg.depth_scale_m)
    return out


def rms_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """RMS difference between view `a` (P, P, 4) and each of the views `b` (B, P, P, 4) -> (B,)."""
    diff = np.asarray(b, dtype=np.float32) - np.asarray(a, dtype=np.float32)[None]
    return np.sqrt(np.mean(diff.reshape(diff.shape[0], -1) ** 2, axis=1))


def half_resolution(views: np.ndarray) -> np.ndarray:
    """(B, P, P, 4) -> (B, (P/2) * (P/2) * 4) flat 2x2 averages, the coarse ranking's descriptors."""
    b, p = views.shape[0], views.shape[1]
    return views.reshape(b, p // 2, 2, p // 2, 2, 4).mean(axis=(2, 4)).reshape(b, -1)


@dataclass
class ViewGrid:
    """Views rendered at every grid position and heading of one house.

    Attributes:
        positions: (N, 3) Habitat floor positions.
        yaws: (H,) headings, radians; view i is at positions[i // H], yaws[i % H].
        descriptors: (N * H, D) half-resolution views (`half_resolution`).
    """

    positions: np.ndarray
    yaws: np.ndarray
    descriptors: np.ndarray

    def __post_init__(self) -> None:
        self._sq = (self.descriptors.astype(np.float64) ** 2).sum(axis=1)

    @classmethod
    def render(cls, render: RenderFn, positions: np.ndarray, cfg: GoalAuditConfig, batch: int = 512,
               progress: Callable[[int], None] | None = None,
               total: Callable[[int], None] | None = None) -> ViewGrid:
        """Render the grid's views in batches (`total(N)` once before the first, with the number of views;
        `progress(n)` after each batch of n views)."""
        yaws = cfg.headings_rad
        all_pos = np.repeat(positions, len(yaws), axis=0)
        all_yaw = np.tile(yaws, len(positions))
        if total is not None:
            total(len(all_pos))
        half = cfg.image_px // 2
        desc = np.empty((len(all_pos), half * half * 4), dtype=np.float32)
        for s in range(0, len(all_pos), batch):
            desc[s:s + batch] = half_resolution(render(all_pos[s:s + batch], all_yaw[s:s + batch]))
            if progress is not None:
                progress(len(all_pos[s:s + batch]))
        return cls(np.asarray(positions, dtype=np.float64), yaws, desc)

    def squared_distances(self, view: np.ndarray) -> np.ndarray:
        """(N * H,) squared distances between a view (P, P, 4) and every grid view, at half resolution."""
        q = half_resolution(view[None])[0].astype(np.float64)
        return self._sq - 2.0 * (self.descriptors @ q.astype(np.float32)).astype(np.float64) + float(q @ q)


def distinct_candidates(grid: ViewGrid, sq_dist: np.ndarray, outside: np.ndarray, cfg: GoalAuditConfig,
                        look_at: int = 2000) -> list[int]:
    """Indices of the best-ranked grid views outside the success region, at distinct spots.

    Args:
        sq_dist: (N * H,) distances from `ViewGrid.squared_distances`.
        outside: (N,) per grid position: eligible as a look-alike.
    """
    eligible = np.repeat(outside, len(grid.yaws))
    ranked = np.argsort(np.where(eligible, sq_dist, np.inf), kind="stable")[:look_at]
    chosen: list[int] = []
    for i in ranked:
        if not eligible[i]:
            break
        p = grid.positions[i // len(grid.yaws)]
        if all(math.hypot(p[0] - grid.positions[j // len(grid.yaws)][0],
                          p[2] - grid.positions[j // len(grid.yaws)][2]) >= cfg.candidate_spacing_m
               for j in chosen):
            chosen.append(int(i))
            if len(chosen) >= cfg.candidates:
                break
    return chosen


def nudged_rms(render: RenderFn, photo: np.ndarray, position: np.ndarray, yaw_rad: float,
               cfg: GoalAuditConfig) -> float:
    """Median RMS difference between the photo and 8 views of the goal spot moved `nudge_m` (in 8 directions)
    and turned `nudge_deg` (alternately left and right): how much the photo changes for a few centimetres."""
    angles = np.arange(8) * (math.pi / 4)
    pos = np.asarray(position, dtype=np.float64)[None] + cfg.nudge_m * np.stack(
        [np.cos(angles), np.zeros(8), np.sin(angles)], axis=1)
    yaws = yaw_rad + math.radians(cfg.nudge_deg) * np.where(np.arange(8) % 2, 1.0, -1.0)
    return float(np.median(rms_difference(photo, render(pos, yaws))))


def refine(render: RenderFn, photo: np.ndarray, position: np.ndarray, yaw_rad: float,
           allowed: Callable[[np.ndarray], bool], cfg: GoalAuditConfig) -> tuple[float, np.ndarray, float]:
    """Coordinate descent on (x, z, yaw) from a grid view toward the photo, through allowed positions only.

    Returns (RMS difference, position, yaw) of the best view found.
    """
    pos = np.asarray(position, dtype=np.float64).copy()
    yaw = float(yaw_rad)
    best = float(rms_difference(photo, render(pos[None], np.array([yaw])))[0])
    for step_m, step_deg in cfg.refine_steps:
        step_rad = math.radians(step_deg)
        moves = [(step_m, 0.0, 0.0), (-step_m, 0.0, 0.0), (0.0, step_m, 0.0), (0.0, -step_m, 0.0),
                 (0.0, 0.0, step_rad), (0.0, 0.0, -step_rad)]
        for _ in range(cfg.refine_iterations):
            tries = [(pos + np.array([dx, 0.0, dz]), yaw + da) for dx, dz, da in moves]
            tries = [(p, a) for p, a in tries if allowed(p)]
            if not tries:
                break
            rms = rms_difference(photo, render(np.stack([p for p, _ in tries]), np.array([a for _, a in tries])))
            k = int(np.argmin(rms))
            if rms[k] >= best:
                break
            best, (pos, yaw) = float(rms[k]), tries[k]
    return best, pos, yaw


def audit_goal(render: RenderFn, grid: ViewGrid, photo: np.ndarray, goal_position: np.ndarray, goal_yaw_rad: float,
               grid_geodesic_m: np.ndarray, geodesic_m: Callable[[np.ndarray], float],
               navigable: Callable[[np.ndarray], bool], cfg: GoalAuditConfig) -> GoalAudit:
    """The goal photo's best look-alike more than `cfg.outside_m` (geodesic) from the goal.

    Args:
        render: views at (B, 3) positions and (B,) yaws, as `view_stack` makes them.
        grid: the house's grid of views.
        photo: the goal photo as a view (P, P, 4), rendered by `render` at the goal pose.
        goal_position, goal_yaw_rad: the goal camera's pose (Habitat floor position, heading).
        grid_geodesic_m: (N,) geodesic distance of every grid position to the goal (inf: unreachable).
        geodesic_m: geodesic distance of any position to the goal.
        navigable: whether the agent can stand at a position.
    """
    nudge = nudged_rms(render, photo, goal_position, goal_yaw_rad, cfg)
    outside = np.isfinite(grid_geodesic_m) & (grid_geodesic_m > cfg.outside_m)
    best: tuple[float, np.ndarray, float] | None = None
    for i in distinct_candidates(grid, grid.squared_distances(photo), outside, cfg):
        start = grid.positions[i // len(grid.yaws)]
        found = refine(render, photo, start, float(grid.yaws[i % len(grid.yaws)]),
                       lambda p: navigable(p) and geodesic_m(p) > cfg.outside_m, cfg)
        if best is None or found[0] < best[0]:
            best = found
    if best is None:
        return GoalAudit(nudge, math.inf, None, None, None)
    rms, pos, yaw = best
    return GoalAudit(nudge, rms, (float(pos[0]), float(pos[1]), float(pos[2])), float(yaw), float(geodesic_m(pos)))


def simulator_renderer(sim, cfg: GoalAuditConfig) -> RenderFn:
    """A RenderFn over the embedded simulator's loaded scene: its camera's height, field of view and depth range,
    at `cfg.image_px` pixels."""
    from memnav.sim.render import Camera

    caster, sim_cfg = sim.scene.caster, sim.config
    camera = Camera(cfg.image_px, cfg.image_px, sim_cfg.hfov_deg)
    eye = np.array([0.0, sim_cfg.sensor_height_m, 0.0])

    def render(positions: np.ndarray, yaws: np.ndarray) -> np.ndarray:
        frames = caster.render(np.asarray(positions) + eye, np.asarray(yaws), camera, max_depth_m=sim_cfg.max_depth_m)
        return view_stack(np.stack([f.rgb for f in frames]), np.stack([f.depth for f in frames]), cfg)

    return render


def grid_positions(grid_map, grid_m: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Navigable cells of a `NavGrid` about `grid_m` apart: (N, 3) floor positions and their (rows, cols)."""
    step = max(1, round(grid_m / grid_map.config.cell_m))
    rr, cc = np.nonzero(grid_map.navigable)
    keep = (rr % step == 0) & (cc % step == 0)
    rr, cc = rr[keep], cc[keep]
    return np.array([grid_map.cell_center(r, c) for r, c in zip(rr, cc)]).reshape(-1, 3), rr, cc


class HouseLookalikes:
    """The look-alike search over the house an `EmbeddedSimulator` has loaded (its grid of views is rendered
    once, in the constructor; `total(N)` first with the number of views, then `progress(n)` after each batch of
    n views)."""

    def __init__(self, sim, cfg: GoalAuditConfig | None = None, progress: Callable[[int], None] | None = None,
                 total: Callable[[int], None] | None = None) -> None:
        self.cfg = cfg or GoalAuditConfig()
        self.grid_map = sim.grid
        self.render = simulator_renderer(sim, self.cfg)
        self.positions, self._rows, self._cols = grid_positions(self.grid_map, self.cfg.grid_m)
        self.grid = ViewGrid.render(self.render, self.positions, self.cfg, progress=progress, total=total)

    def audit(self, goal_position: np.ndarray, goal_yaw_rad: float) -> GoalAudit:
        """The best look-alike of the photo taken at (goal_position, goal_yaw_rad) (Habitat floor position)."""
        goal = np.asarray(goal_position, dtype=np.float64)
        field = self.grid_map.distance_field(goal)
        flat = np.hypot(self.positions[:, 0] - goal[0], self.positions[:, 2] - goal[2])
        grid_geo = np.full(len(self.positions), np.inf) if field is None \
            else np.maximum(field[self._rows, self._cols], flat)
        photo = self.render(goal[None], np.array([goal_yaw_rad]))[0]

        def geodesic_m(p: np.ndarray) -> float:
            return self.grid_map.geodesic_distance(p, goal)

        return audit_goal(self.render, self.grid, photo, goal, goal_yaw_rad, grid_geo, geodesic_m,
                          self.grid_map.is_navigable, self.cfg)
