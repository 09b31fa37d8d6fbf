"""`memnav goal-audit`: which goal photos does another spot in the house reproduce?

An ImageNav goal is a photo; an agent that stops where a view looks like it succeeds only if that view is
within the success distance of the goal. Where the house shows the same thing elsewhere (a stretch of wall
whose texture repeats, two rooms furnished alike), no observer can tell from the photo alone which spot is
meant. For each episode this command looks for the view, more than the success distance (geodesic) from the
goal, that reproduces the goal photo best, and compares it with how much the photo changes when the goal
camera itself is nudged (by `nudge_m` sideways and `nudge_deg` in heading):

- `lookalike_ratio` = RMS difference (RGB-D) between the photo and its best look-alike elsewhere, divided by
  the median RMS difference between the photo and the nudged views of the goal spot;
- `ambiguous`: ratio <= 1, some spot outside the success region matches the photo at least as well as the
  goal spot moved by a few centimetres;
- `near_identical`: ratio <= 0.5, the look-alike is nearly pixel for pixel the photo.

The search renders a grid of views over the navigable area (`grid_m` apart, every `heading_deg`), ranks them
against the photo at half resolution, and refines the best few distinct spots by coordinate descent on
position and heading. It can miss a look-alike that the grid does not come near, so the counts are lower
bounds. `--results EVAL.json` splits an evaluation's success and SPL by the audit's labels.

The search itself (`GoalAuditConfig`, `audit_goal`) takes a render function and plain arrays; `run` binds it
to the embedded simulator.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from memnav.cli import STDOUT_ONLY

# (B, 3) Habitat positions on the floor, (B,) yaws in radians -> (B, P, P, 4) views (`view_stack`)
RenderFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


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
               progress: Callable[[int], None] | None = None) -> ViewGrid:
        """Render the grid's views in batches (`progress(n)` after each batch of n views)."""
        yaws = cfg.headings_rad
        all_pos = np.repeat(positions, len(yaws), axis=0)
        all_yaw = np.tile(yaws, len(positions))
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


def episode_key(scene: object, episode_id: object) -> tuple[str, str]:
    """How audits and evaluation results name an episode: (house, episode id); `scene` may be a scene_id."""
    return Path(str(scene)).stem, str(episode_id)


def read_audit(path: Path) -> dict[tuple[str, str], dict]:
    """A `memnav goal-audit --json` file's episodes by `episode_key`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not an audit file.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such goal audit file")
    try:
        doc = json.loads(Path(path).read_text())
        return {episode_key(r["scene"], r["episode_id"]): r for r in doc["per_episode"]}
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a `memnav goal-audit --json` file ({err!r})") from err


def annotate_ratios(per_episode: list[dict], audit: dict[tuple[str, str], dict]) -> int:
    """Add the audit's `goal_lookalike_ratio` to evaluation results' episodes; returns how many matched."""
    matched = 0
    for row in per_episode:
        found = audit.get(episode_key(row.get("scene_id", ""), row.get("episode_id")))
        if found is not None:
            row["goal_lookalike_ratio"] = found["lookalike_ratio"]
            matched += 1
    return matched


def split_results(audit: dict[tuple[str, str], dict], results: dict) -> dict:
    """Success and SPL of an evaluation (`memnav eval --json`, one agent) on the audit's ambiguous,
    near-identical and unambiguous episodes (matched by `episode_key`)."""
    per = results.get("per_episode")
    if not isinstance(per, list):
        raise ValueError("--results: not a `memnav eval --json` file of one agent (no per_episode list); "
                         "for --compare runs pass one agent's file")
    groups: dict[str, list[dict]] = {"ambiguous": [], "near_identical": [], "unambiguous": []}
    for r in per:
        row = audit.get(episode_key(r.get("scene_id", ""), r.get("episode_id")))
        if row is None:
            continue
        groups["ambiguous" if row["ambiguous"] else "unambiguous"].append(r)
        if row["near_identical"]:
            groups["near_identical"].append(r)
    matched = len(groups["ambiguous"]) + len(groups["unambiguous"])
    if matched == 0:
        raise ValueError("--results: none of its episodes is in the audit (another split or dataset?)")
    out: dict = {"agent": results.get("agent"), "matched_episodes": matched}
    for name, rows in groups.items():
        out[name] = {"episodes": len(rows),
                     "success": round(float(np.mean([r["success"] for r in rows])), 4) if rows else None,
                     "spl": round(float(np.mean([r["spl"] for r in rows])), 4) if rows else None}
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from memnav.eval.evaluate import add_data_arguments

    add_data_arguments(parser, run_options=False)
    parser.add_argument("--results", type=Path, default=None, metavar="EVAL_JSON",
                        help="a `memnav eval --json` file of one agent on the same episodes: its success and SPL "
                             "split by the audit's labels (key `results`)")
    parser.add_argument("--audit", type=Path, default=None, metavar="AUDIT_JSON",
                        help="reuse an earlier audit's JSON instead of searching again (with --results)")
    parser.add_argument("--json", type=Path, nargs="?", const=STDOUT_ONLY, default=None, metavar="PATH",
                        help="write the audit as JSON to PATH (without PATH: on stdout instead of the table)")
    defaults = GoalAuditConfig()
    parser.add_argument("--grid-m", type=float, default=defaults.grid_m,
                        help="spacing of the searched positions, meters (finer: slower, fewer look-alikes missed)")
    parser.add_argument("--heading-deg", type=float, default=defaults.heading_deg,
                        help="spacing of the searched headings, degrees")
    parser.add_argument("--candidates", type=int, default=defaults.candidates,
                        help="distinct spots refined per goal")
    parser.add_argument("--nudge-m", type=float, default=defaults.nudge_m,
                        help="the reference: how far the goal camera is moved, meters")
    parser.add_argument("--nudge-deg", type=float, default=defaults.nudge_deg,
                        help="the reference: how far the goal camera is turned, degrees")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars on stderr")


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


def _house_rows(sim, house: str, episodes: list, cfg: GoalAuditConfig, progress: bool,
                done: Callable[[], None]) -> list[dict]:
    """Audit one house's episodes in the embedded simulator `sim` (`done()` after each episode)."""
    from tqdm import tqdm

    from memnav.sim.metrics import view_median_depth

    sim.reset(episodes[0])
    grid_map = sim.grid
    render = simulator_renderer(sim, cfg)
    positions, rr, cc = grid_positions(grid_map, cfg.grid_m)
    with tqdm(total=len(positions) * len(cfg.headings_rad), desc=f"{house} views", unit="view", leave=False,
              mininterval=1.0, disable=not progress, file=sys.stderr) as views_bar:
        grid = ViewGrid.render(render, positions, cfg, progress=views_bar.update)
    rows = []
    for e in episodes:
        sim.reset(e)   # renders the goal photo at the camera's resolution (goal_view_depth_m, as eval)
        goal_pos = np.asarray(e.goal.position, dtype=np.float64)
        goal_yaw = e.goal_yaw_rad()
        field = grid_map.distance_field(goal_pos)
        flat = np.hypot(positions[:, 0] - goal_pos[0], positions[:, 2] - goal_pos[2])
        grid_geo = np.full(len(positions), np.inf) if field is None else np.maximum(field[rr, cc], flat)
        photo = render(goal_pos[None], np.array([goal_yaw]))[0]

        def geodesic_m(p: np.ndarray, goal: np.ndarray = goal_pos) -> float:
            return grid_map.geodesic_distance(p, goal)

        found = audit_goal(render, grid, photo, goal_pos, goal_yaw, grid_geo, geodesic_m, grid_map.is_navigable, cfg)
        goal_obs = sim.goal_observation
        depth = view_median_depth(goal_obs.depth if goal_obs is not None else None)
        rows.append({"episode_id": e.episode_id, "scene": house,
                     "goal_view_depth_m": None if depth is None else round(depth, 4), **found.to_json(cfg)})
        done()
    return rows


def _episode_rows(args: argparse.Namespace, cfg: GoalAuditConfig) -> list[dict]:
    from tqdm import tqdm

    from memnav.eval.evaluate import load_split
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    episodes = load_split(args)
    if not episodes:
        raise ValueError(f"no {args.split} episodes in {args.data}")
    sim = EmbeddedSimulator(config=SimConfig(success_distance_m=cfg.outside_m, renderer=args.renderer))
    houses: dict[str, list] = {}
    for e in episodes:
        houses.setdefault(e.scene_name, []).append(e)
    rows: list[dict] = []
    with tqdm(total=len(episodes), desc="goal audit", unit="goal", disable=args.no_progress,
              file=sys.stderr) as bar:
        for house, house_episodes in houses.items():
            rows += _house_rows(sim, house, house_episodes, cfg, not args.no_progress, lambda: bar.update(1))
    sim.close()
    return rows


def summarize(rows: list[dict]) -> dict:
    """Counts of the audit's labels, overall and for close-up goal photos (median depth below 1 m)."""
    close = [r for r in rows if r.get("goal_view_depth_m") is not None and r["goal_view_depth_m"] < 1.0]
    return {"episodes": len(rows),
            "ambiguous_episodes": sum(r["ambiguous"] for r in rows),
            "near_identical_episodes": sum(r["near_identical"] for r in rows),
            "close_up_episodes": len(close),
            "ambiguous_close_up_episodes": sum(r["ambiguous"] for r in close)}


def format_summary(doc: dict) -> str:
    lines = [f"goal audit of {doc['episodes']} {doc.get('split', '')} episodes: {doc['ambiguous_episodes']} ambiguous "
             f"(a spot more than {doc['config']['outside_m']:g} m away matches the photo at least as well as the "
             f"goal spot nudged), {doc['near_identical_episodes']} of them near-identical; "
             f"{doc['ambiguous_close_up_episodes']} of {doc['close_up_episodes']} close-ups ambiguous"]
    res = doc.get("results")
    if res:
        lines.append(f"{res['agent']} ({res['matched_episodes']} episodes matched):")
        lines.append(f"  {'goals':<16}{'episodes':>9}{'success':>9}{'spl':>8}")
        for name in ("unambiguous", "ambiguous", "near_identical"):
            g = res[name]
            success, spl = (f"{g[k]:.3f}" if g[k] is not None else "-" for k in ("success", "spl"))
            lines.append(f"  {name:<16}{g['episodes']:>9}{success:>9}{spl:>8}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    cfg = GoalAuditConfig(grid_m=args.grid_m, heading_deg=args.heading_deg, candidates=args.candidates,
                          nudge_m=args.nudge_m, nudge_deg=args.nudge_deg)
    if args.audit is not None:
        read_audit(args.audit)   # refuses a file that is not an audit, by name
        doc = json.loads(args.audit.read_text())
        rows = doc["per_episode"]
    else:
        rows = _episode_rows(args, cfg)
        doc = {"split": args.split, "data": str(args.data), "config": asdict(cfg), **summarize(rows),
               "per_episode": rows}
    if args.results is not None:
        if not args.results.is_file():
            raise FileNotFoundError(f"--results {args.results}: no such file")
        try:
            results = json.loads(args.results.read_text())
        except ValueError as err:
            raise ValueError(f"--results {args.results}: not JSON ({err})") from err
        doc["results"] = split_results({episode_key(r["scene"], r["episode_id"]): r for r in rows}, results)
    if args.json is not None:
        text = json.dumps(doc, indent=2)
        if args.json == STDOUT_ONLY:
            print(text)
            return 0
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(format_summary(doc))
    return 0
