"""ImageNav metrics exactly as habitat-lab defines them (Success, SPL, SoftSPL, DistanceToGoal)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from memnav.core.types import EpisodeStatus


def is_success(called_stop: bool, distance_to_goal_m: float, success_distance_m: float = 1.0) -> bool:
    """habitat-lab Success: STOP was called while strictly closer than success_distance (geodesic)."""
    return bool(called_stop and distance_to_goal_m < success_distance_m)


def spl(success: bool, geodesic_start_m: float, path_length_m: float) -> float:
    """Success weighted by (normalized inverse) Path Length: S * l / max(p, l)."""
    if not success:
        return 0.0
    denom = max(path_length_m, geodesic_start_m)
    return 1.0 if denom <= 0 else float(geodesic_start_m / denom)


def soft_spl(distance_to_goal_m: float, geodesic_start_m: float, path_length_m: float) -> float:
    """habitat-lab SoftSPL: max(0, 1 - d_T / d_0) * d_0 / max(d_0, p).

    A start on the goal (d_0 = 0) scores as `spl` does there: 1 for staying put, 0 for any path (the
    efficiency d_0 / p is 0), not 1 wherever the agent ended."""
    if geodesic_start_m <= 0:
        return 1.0 if path_length_m <= 0 else 0.0
    progress = max(0.0, 1.0 - distance_to_goal_m / geodesic_start_m)
    return float(progress * geodesic_start_m / max(geodesic_start_m, path_length_m))


@dataclass
class EpisodeResult:
    """Outcome of one episode.

    Attributes:
        episode_id: id from the episode file.
        scene_id: scene of the episode.
        success: 1 if STOP was called within the success distance, else 0.
        spl: success weighted by path length.
        soft_spl: progress weighted by path length.
        distance_to_goal_m: geodesic distance from the final position to the goal, meters.
        geodesic_distance_m: geodesic distance from start to goal, meters.
        path_length_m: length of the path the agent actually travelled, meters.
        steps: actions taken (STOP included).
        status: how the episode ended.
        ended_by: for agents with decision layers (memnav's Navigator): the layer that chose the last action
            ("stop" = the stop rule, "candidate"/"approach" = a judged goal candidate, "best_view", "homing",
            "policy", ...); empty for other agents.
        stop_belief: for agents with a calibrated goal belief (the learned agents), the belief that the goal is
            within the success radius at the view where they called STOP; None otherwise.
        goal_view_depth_m: median depth of the goal photo's pixels, meters (how far the surfaces it shows are:
            below about 1 m it is a close-up of a wall, which tells little about where it was taken); None
            when unknown.
        path_by_layer_m: for agents with decision layers, in `memnav eval`: meters travelled under each layer
            that chose the moves (`PathByLayer`); they add up to path_length_m. None otherwise.
        path_given_up_m: the part of path_by_layer_m that a judging layer (JUDGING_LAYERS) drove towards a spot
            the agent then gave up (judged and rejected, or found unreachable), per layer; None as above.
    """

    episode_id: str
    scene_id: str
    success: float
    spl: float
    soft_spl: float
    distance_to_goal_m: float
    geodesic_distance_m: float
    path_length_m: float
    steps: int
    status: EpisodeStatus
    ended_by: str = ""
    stop_belief: float | None = None
    goal_view_depth_m: float | None = None
    path_by_layer_m: dict[str, float] | None = None
    path_given_up_m: dict[str, float] | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d


@dataclass
class SkippedEpisode:
    """An episode that could not be run, so no agent acted in it: its goal is unreachable from its start in the
    scene (no navigable path), or its start or a goal is off the scene's navigable floor. `memnav eval` leaves it
    out of every mean and lists it under `skipped_episodes`, with the reason.

    Attributes:
        episode_id: id from the episode file.
        scene_id: scene of the episode.
        reason: why it could not be run (the simulator's message, naming episode, scene and positions).
    """

    episode_id: str
    scene_id: str
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


JUDGING_LAYERS = ("candidate", "approach", "sweep", "homing")
"""The Navigator layers that drive to a spot and judge it there (a look-around), then stop or give it up."""


class PathByLayer:
    """Where an episode's path went: meters travelled under each decision layer that chose the moves, and how
    much of the judging layers' path (JUDGING_LAYERS) led to spots the agent then gave up.

    Per step: `given_up(count)` with the agent's running count of spots given up (`Navigator.spots_given_up`),
    read after it chose its action, then `moved(layer, meters)` once the action was carried out. The path the
    judging layers drove since the last spot was given up is charged to the give-up when the count next grows;
    what is still pending when the episode ends led to where it ended. Turns move nothing and add no path.
    """

    def __init__(self) -> None:
        self.by_layer: dict[str, float] = {}
        self.given_up_by_layer: dict[str, float] = {}
        self._pending: dict[str, float] = {}
        self._count = 0

    def given_up(self, count: int) -> None:
        if count > self._count:
            for layer, m in self._pending.items():
                self.given_up_by_layer[layer] = self.given_up_by_layer.get(layer, 0.0) + m
            self._pending = {}
            self._count = count

    def moved(self, layer: str, meters: float) -> None:
        if not math.isfinite(meters) or meters < 0:
            raise ValueError(f"moved: meters must be finite and >= 0, got {meters}")
        self.by_layer[layer] = self.by_layer.get(layer, 0.0) + meters
        if layer in JUDGING_LAYERS:
            self._pending[layer] = self._pending.get(layer, 0.0) + meters

    def result_fields(self) -> dict:
        """`path_by_layer_m` and `path_given_up_m` for an EpisodeResult, in millimetres' precision."""
        def rounded(d: dict[str, float]) -> dict[str, float]:   # layers that moved the robot, most path first
            return {k: round(v, 3) for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v > 0}
        return {"path_by_layer_m": rounded(self.by_layer), "path_given_up_m": rounded(self.given_up_by_layer)}


def view_median_depth(depth: np.ndarray | None) -> float | None:
    """Median depth of a view's pixels that hit something, meters (below about 1 m the view is a close-up of a
    wall); None for no depth or no hit."""
    if depth is None:
        return None
    seen = np.asarray(depth)[np.asarray(depth) > 0]
    return float(np.median(seen)) if seen.size else None


def results_document(agent: str, results: Sequence[EpisodeResult], **meta: object) -> dict:
    """One agent's results as `memnav eval --json` writes them (and `memnav eval-report` reads them): the
    summary keys of `aggregate`, `agent`, the given metadata (split, data, backend, ...), `per_episode`;
    `episodes` and `episodes_run` count the episodes run."""
    out = dict(aggregate(results), agent=agent, **meta, per_episode=[r.to_json() for r in results])
    out["episodes"] = out["episodes_run"] = len(results)
    return out


def aggregate(results: Sequence[EpisodeResult]) -> dict:
    """Mean metrics over episodes (keys used by `memnav eval --json`)."""
    if not results:
        return {"episodes": 0, "success": 0.0, "spl": 0.0, "soft_spl": 0.0, "mean_steps": 0.0,
                "distance_to_goal": math.nan}

    def mean(key: str) -> float:
        return float(np.mean([getattr(r, key) for r in results]))

    out = {
        "episodes": len(results),
        "success": mean("success"),
        "spl": mean("spl"),
        "soft_spl": mean("soft_spl"),
        "mean_steps": mean("steps"),
        "distance_to_goal": mean("distance_to_goal_m"),
        "path_length": mean("path_length_m"),
        "geodesic_distance": mean("geodesic_distance_m"),
    }
    if any(r.ended_by for r in results):
        out["ended_by"] = ended_by_layer(results)
    if any(r.path_by_layer_m is not None for r in results):
        out["path_by_layer"] = path_by_layer(results)
    return out


def path_by_layer(results: Sequence[EpisodeResult]) -> dict[str, dict[str, float]]:
    """Mean meters per episode under each decision layer: {layer: {"path_m", "given_up_m"}} (given_up_m: the part
    driven towards spots the agent then gave up), most path first. Means over all `results`; an episode without a
    record (another agent's, or a live run's) counts as none: where every episode has one, the path_m add up to the
    mean path length (`path_length`), and what is left beyond the mean shortest path (`geodesic_distance`) is the
    detour that SPL charges."""
    return mean_path_by_layer([(r.path_by_layer_m, r.path_given_up_m) for r in results])


def mean_path_by_layer(records: Sequence[tuple[dict[str, float] | None, dict[str, float] | None]]
                       ) -> dict[str, dict[str, float]]:
    """Means over episodes' (path_by_layer_m, path_given_up_m) records, None counting as none: {layer: {"path_m",
    "given_up_m"}}, most path first (`path_by_layer`; the report reads the same fields from results JSON)."""
    n = max(1, len(records))
    table: dict[str, dict[str, float]] = {}
    for path, given_up in records:
        for key, record in (("path_m", path), ("given_up_m", given_up)):
            for layer, m in (record or {}).items():
                table.setdefault(layer, {"path_m": 0.0, "given_up_m": 0.0})[key] += m / n
    return dict(sorted(table.items(), key=lambda kv: -kv[1]["path_m"]))


def path_summary(summary: dict) -> str:
    """One line from an `aggregate` summary with `path_by_layer`: the mean path per episode against the mean
    shortest path, each layer's share, and what went to spots given up."""
    layers = summary["path_by_layer"]
    given_up = sum(v["given_up_m"] for v in layers.values())
    parts = ", ".join(f"{layer} {v['path_m']:.1f}" + (f" ({v['given_up_m']:.1f} to spots given up)"
                                                      if v["given_up_m"] >= 0.05 else "")
                      for layer, v in layers.items() if v["path_m"] >= 0.05)
    return (f"path per episode {summary['path_length']:.1f} m (shortest {summary['geodesic_distance']:.1f} m): "
            f"{parts or 'no movement'}; {given_up:.1f} m to spots given up")


def ended_by_layer(results: Sequence[EpisodeResult]) -> dict[str, dict]:
    """Per decision layer that chose an episode's last action: episodes and successes ended that way."""
    table: dict[str, dict] = {}
    for r in results:
        row = table.setdefault(r.ended_by or "unknown", {"episodes": 0, "successes": 0})
        row["episodes"] += 1
        row["successes"] += int(r.success > 0)
    return dict(sorted(table.items(), key=lambda kv: -kv[1]["episodes"]))


def visit_indices(results: Sequence[EpisodeResult | SkippedEpisode], visits: int = 0) -> list[int | None]:
    """Each result's visit index (0 = a house's first episode): its place among its house's episodes, counted
    afresh every `visits` episodes when a house's memory restarts that often (0 = never).

    `results` may hold, in episode order, the episodes that were skipped (`SkippedEpisode`, index None): no agent
    visited them, so they take no visit index, but with `visits` > 0 they still hold their place in their house's
    runs of `visits` consecutive episodes (`memnav eval --lifelong-visits` forms those runs from the episode list,
    each with a memory of its own), so that a later episode keeps the run, and the visit number, it was run in."""
    slots: dict[str, int] = {}
    seen: dict[tuple[str, int], int] = {}
    out: list[int | None] = []
    for r in results:
        slot = slots.get(r.scene_id, 0)
        slots[r.scene_id] = slot + 1
        if isinstance(r, SkippedEpisode):
            out.append(None)
            continue
        run = (r.scene_id, slot // visits if visits > 0 else 0)
        k = seen.get(run, 0)
        seen[run] = k + 1
        out.append(k)
    return out


def lifelong_spl_by_visit(results: Sequence[EpisodeResult | SkippedEpisode], visits: int = 0) -> list[float]:
    """Mean SPL of each house's k-th episode (k = 1, 2, ...), over the houses (with `visits` > 0: the sequences
    of `visits` episodes, `visit_indices`) that had a k-th episode. Skipped episodes in `results` count for
    nothing (see `visit_indices`)."""
    per_visit: dict[int, list[float]] = {}
    for r, k in zip(results, visit_indices(results, visits)):
        if k is not None:
            per_visit.setdefault(k, []).append(r.spl)
    return [float(sum(v) / len(v)) for _, v in sorted(per_visit.items())]


def lifelong_known_house_spl(results: Sequence[EpisodeResult | SkippedEpisode], visits: int = 0) -> float | None:
    """Mean SPL over the episodes that are not their house's first (the memory knew the house; with `visits`
    > 0, not their sequence's first); None if none. Skipped episodes in `results` count for nothing."""
    known = [r.spl for r, k in zip(results, visit_indices(results, visits)) if k is not None and k > 0]
    return float(sum(known) / len(known)) if known else None


def lifelong_summary(spl_by_visit: Sequence[float], known_house_spl: float | None, visits: int = 10) -> str:
    """One line for a lifelong run's log: SPL of the first `visits` visits and over the visits after a house's
    first."""
    shown = ", ".join(f"{v:.2f}" for v in spl_by_visit[:visits])
    known = "n/a" if known_house_spl is None else f"{known_house_spl:.3f}"
    return (f"lifelong SPL by visit 1..{min(visits, len(spl_by_visit))}: {shown}; in known houses (every visit "
            f"after a house's first): {known}")
