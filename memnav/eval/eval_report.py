"""The `memnav eval` report: figures and an HTML page from an evaluation's results (`memnav eval --report DIR`,
or later from its JSON with `memnav eval-report RUN.json --out DIR`; several JSON files are compared as agents,
episode by episode, `merge_runs`).

Files written into the report folder (and nowhere else):
- `results.json`: the same content `memnav eval --json` writes (written by `memnav eval --report`);
- `summary.png`: success, SPL and SoftSPL per agent with 95% confidence intervals;
- `by_distance.png`: success and SPL against the start's geodesic distance to the goal;
- `by_goal_view.png`: the same against the goal photo's median depth (a close-up of a wall tells little about
  where it was taken);
- `by_goal_ambiguity.png` (`memnav eval-report --goal-audit`): the same against the goal photo's look-alike
  ratio (`memnav goal-audit`: below 1, a spot outside the success region reproduces the photo at least as well
  as the goal spot nudged by a few centimetres);
- `ended_by.png`: how episodes ended (the Navigator layer that chose the last action), successes and failures;
- `path_by_layer.png` (runs of `memnav eval` with a layered agent): where the path went, meters per episode under
  each Navigator layer, the part driven towards spots the agent gave up, against the shortest path;
- `lifelong.png` (`--lifelong` runs): SPL against visit index;
- `stop_reliability.png`: the stop belief at each STOP against whether that STOP succeeded (reliability diagram);
- `episodes.png` (live runs only, not from a JSON): top-down paths of the focus agent's worst episodes over the
  house's navigable area, with the shortest path;
- `views.png` (live runs only): the goal photo beside the last view of the same episodes;
- `report.html`: tables (with confidence intervals and paired differences) and the figures, relative links.

The head of the page lists the run's settings (camera, models, step limit, seed, episode selection, ...; runs
compared that differ, run by run) and the episodes a run skipped (`skipped_episodes`: they could not be run, e.g.
a goal no navigable path reaches, and are in no mean, interval, figure or table). With `--lifelong-visits`, a
skipped episode still holds its place in its house's sequences: the report reads the run's episode list again
(`episode_list`, from the dataset's `data_absolute`, its `data` from this directory or from the results file's
folder) to tell which sequence each later episode was run in, and resamples a house whole where it cannot, naming
the paths it tried.

Files of the same names from an earlier report in the folder are replaced, each whole (written beside and
renamed into place, so a failed write keeps the old file); other files are left as they are, and the page links
only the figures this report wrote. Results of older versions without `soft_spl`, `steps` or distances show
"n/a" for those columns.

The statistics are plain functions (`wilson_interval`, `mean_interval`, `paired_difference`, `reliability`),
so scripts can use them on `memnav eval --json` files too.
"""
from __future__ import annotations

import argparse
import html
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memnav.core.files import json_safe, replace_files
from memnav.eval.report import _fmt, _plt, page_head, save_figure
from memnav.paths import check_output_dir
from memnav.sim.metrics import mean_path_by_layer

DISTANCE_BINS_M = (0.0, 2.0, 4.0, 6.0, 8.0, math.inf)
GOAL_DEPTH_BINS_M = (0.0, 1.0, 1.5, 2.0, 3.0, math.inf)
LOOKALIKE_RATIO_BINS = (0.0, 0.5, 0.75, 1.0, 1.25, math.inf)   # `memnav goal-audit`'s lookalike_ratio
Z95 = 1.959964


@dataclass
class EpisodeTrace:
    """What a live run keeps of one episode for the path figure (Habitat world x and z, meters).

    Attributes:
        agent: agent name.
        episode_id: episode id.
        scene_id: scene of the episode.
        path_xz: (N, 2) agent positions, the start first and one row per action.
        goal_xz: goal position.
        shortest_xz: (M, 2) the simulator's shortest path from start to goal (may be empty).
        goal_rgb: the goal photo, downsampled (uint8, H x W x 3), or None.
        final_rgb: the agent's last view, where it stopped or ran out of steps, downsampled, or None.
    """

    agent: str
    episode_id: str
    scene_id: str
    path_xz: np.ndarray
    goal_xz: tuple[float, float]
    shortest_xz: np.ndarray
    goal_rgb: np.ndarray | None = None
    final_rgb: np.ndarray | None = None


@dataclass
class FloorPlan:
    """A scene's navigable area as a top-down boolean grid (rows along z, columns along x)."""

    navigable: np.ndarray
    origin_xz: tuple[float, float]
    cell_m: float


@dataclass
class RunTraces:
    """Paths and floor plans collected by `memnav eval --report` (`run_episodes(..., traces=...)`)."""

    episodes: list[EpisodeTrace] = field(default_factory=list)
    floor_plans: dict[str, FloorPlan] = field(default_factory=dict)

    def add(self, other: RunTraces | None) -> None:
        """Take in another run's traces (a worker's, a sequence's); None adds nothing."""
        if other is not None:
            self.episodes += other.episodes
            self.floor_plans.update(other.floor_plans)


# --- statistics ---------------------------------------------------------------------------------------------

def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a success rate (95% by default); (nan, nan) for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)     # exact at the ends, where rounding would not be
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return lo, hi


def mean_interval(values: list[float] | np.ndarray, z: float = Z95) -> tuple[float, float, float]:
    """Mean and its normal-approximation interval (mean - z SE, mean + z SE); nan when empty."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    return m, m - z * se, m + z * se


def paired_difference(a: list[float] | np.ndarray, b: list[float] | np.ndarray, resamples: int = 2000,
                      seed: int = 0, clusters: list | None = None) -> tuple[float, float, float]:
    """Mean of a - b over the same episodes and its 95% paired bootstrap interval.

    With `clusters` (a label per episode, e.g. its house), whole clusters are resampled: episodes that share
    something (lifelong visits to one house share its memory, so one early divergence carries over to the rest)
    are not independent, and resampling them one by one would make the interval too narrow.

    Raises:
        ValueError: a and b (or clusters) differ in length.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or (clusters is not None and len(clusters) != x.size):
        raise ValueError(f"paired_difference: {x.size} values against {y.size}"
                         + ("" if clusters is None else f" and {len(clusters)} cluster labels")
                         + "; the runs must share episodes")
    if x.size == 0:
        return math.nan, math.nan, math.nan
    d = x - y
    rng = np.random.default_rng(seed)
    if clusters is None:
        means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    else:
        _, label = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
        sums, sizes = np.bincount(label, weights=d), np.bincount(label).astype(np.float64)
        pick = rng.integers(0, sums.size, size=(resamples, sums.size))
        means = sums[pick].sum(axis=1) / sizes[pick].sum(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


@dataclass
class Reliability:
    """A reliability diagram: per belief bin, the mean belief, the observed success rate and the count."""

    edges: np.ndarray
    mean_belief: np.ndarray
    success_rate: np.ndarray
    counts: np.ndarray
    ece: float


def reliability(beliefs: list[float] | np.ndarray, outcomes: list[float] | np.ndarray, bins: int = 10) -> Reliability:
    """Bin beliefs in [0, 1] into `bins` equal bins; ECE = sum over bins of count share x |success - belief|."""
    p = np.clip(np.asarray(beliefs, dtype=np.float64), 0.0, 1.0)
    y = np.asarray(outcomes, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_b = np.bincount(idx, weights=p, minlength=bins) / counts
        rate = np.bincount(idx, weights=y, minlength=bins) / counts
    ece = float(np.nansum(counts / max(1, p.size) * np.abs(rate - mean_b))) if p.size else math.nan
    return Reliability(edges, mean_b, rate, counts, ece)


# --- the results, whichever shape `memnav eval --json` wrote --------------------------------------------------

def agents_of(results: dict) -> dict[str, dict]:
    """{agent: summary with per_episode} from a `memnav eval --json` dict (single agent or --compare).

    Raises:
        ValueError: the dict holds no per-episode results.
    """
    if "agents" in results:
        agents = results["agents"]
    elif "agent" in results:
        if not isinstance(results["agent"], str):
            raise ValueError(f"results: 'agent' is {results['agent']!r}, not an agent name")
        agents = {results["agent"]: results}
    else:
        raise ValueError("results: neither 'agents' (memnav eval --compare) nor 'agent' (memnav eval --agent)")
    if not isinstance(agents, dict):
        raise ValueError(f"results: 'agents' is a {type(agents).__name__}, not an object of agent name: results")
    for name, a in agents.items():
        if not isinstance(a, dict) or not isinstance(a.get("per_episode"), list):
            raise ValueError(f"results: agent {name!r} has no 'per_episode' list")
        for i, ep in enumerate(a["per_episode"]):
            for key in ("scene_id", "episode_id"):   # what tells episodes apart (see _key)
                if not isinstance(ep, dict) or ep.get(key) is None:
                    raise ValueError(f"results: agent {name!r} per_episode[{i}] has no {key!r}")
            for key in ("success", "spl"):
                value = ep.get(key) if isinstance(ep, dict) else None
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"results: agent {name!r} per_episode[{i}] has no number {key!r} "
                                     f"(got {value!r})")
        skipped = a.get("skipped_episodes", [])   # absent in results of older versions
        if not isinstance(skipped, list):
            raise ValueError(f"results: agent {name!r} 'skipped_episodes' is a {type(skipped).__name__}, not a "
                             "list of episodes")
        for i, ep in enumerate(skipped):
            for key in ("scene_id", "episode_id"):
                if not isinstance(ep, dict) or ep.get(key) is None:
                    raise ValueError(f"results: agent {name!r} skipped_episodes[{i}] has no {key!r}")
    return agents


def skipped_of(agent: dict) -> list[dict]:
    """An agent's episodes that could not be run (`skipped_episodes`, `memnav.sim.metrics.SkippedEpisode`): in no
    mean, interval, figure or table of the report; [] in results of older versions."""
    return agent.get("skipped_episodes") or []


def focus_agent(agents: dict[str, dict], wanted: str | None = None) -> str:
    """The agent the report compares the others against: `wanted`, else memnav if run, else the first."""
    if wanted is not None:
        if wanted not in agents:
            raise ValueError(f"--focus {wanted!r}: not in this run (agents: {', '.join(agents)})")
        return wanted
    return "memnav" if "memnav" in agents else next(iter(agents))


def _every(episodes: list[dict], key: str) -> list | None:
    """Each episode's `key`, or None when an episode lacks it (results of an older version)."""
    values = [e.get(key) for e in episodes]
    return None if any(v is None for v in values) else values


def summary_rows(agents: dict[str, dict]) -> list[dict]:
    """Per agent: episodes, success with its Wilson interval, SPL and SoftSPL with their intervals, mean steps
    (SoftSPL and steps nan where an episode did not record them)."""
    rows = []
    for name, a in agents.items():
        eps = a["per_episode"]
        succ = [float(e["success"]) for e in eps]
        lo, hi = wilson_interval(sum(succ), len(succ))
        soft, steps = _every(eps, "soft_spl"), _every(eps, "steps")
        rows.append({"agent": name, "episodes": len(eps), "success": float(np.mean(succ)) if succ else math.nan,
                     "success_ci": (lo, hi), "spl": mean_interval([e["spl"] for e in eps]),
                     "soft_spl": mean_interval(soft) if soft is not None else (math.nan,) * 3,
                     "mean_steps": float(np.mean(steps)) if eps and steps is not None else math.nan})
    return rows


def _key(episode: dict) -> tuple[str, str]:
    """Episodes are told apart by scene and id (Habitat datasets reuse ids across scenes)."""
    return episode["scene_id"], str(episode["episode_id"])


def episodes_run_by_every_agent(agents: dict[str, dict]) -> int:
    """How many episodes every agent ran (told apart by `_key`): what a results file's top-level `episodes` and
    `episodes_run` count (one agent: its episodes; --compare: those the agents' means share, fewer than an agent's
    own `episodes` only where a Ctrl-C stopped a later agent early)."""
    keys = [{_key(e) for e in a["per_episode"]} for a in agents.values()]
    return len(set.intersection(*keys)) if keys else 0


def data_candidates(results: dict, results_dir: Path | None = None) -> list[Path]:
    """Where a results file's dataset may be, in the order tried: `data_absolute` (recorded since 2026-11-28),
    `data` as recorded (a relative one from this directory), and a relative `data` from the results file's folder
    `results_dir` (e.g. a run folder moved whole, its dataset beside the results)."""
    found: list[Path] = []
    for value, base in ((results.get("data_absolute"), None), (results.get("data"), None),
                        (results.get("data"), results_dir)):
        if not isinstance(value, str) or not value:
            continue
        path = Path(value).expanduser()
        if base is not None:
            if path.is_absolute():
                continue
            path = base / path
        if Path(os.path.abspath(path)) not in [Path(os.path.abspath(p)) for p in found]:
            found.append(path)
    return found


def episode_list(results: dict, results_dir: Path | None = None) -> tuple[list[tuple[str, str]] | None, str]:
    """The run's episode list (each episode's `_key`, in order), chosen again from the dataset its results name
    (`data_candidates`, `split`, `episode_selection`, as `memnav eval` chose it) and ""; or None and why not:
    results of an older version, or a dataset that is not at any of the paths tried or not readable (naming each
    path tried, as an absolute path, with what was wrong there)."""
    from memnav.eval.evaluate import load_split

    selection = results.get("episode_selection")
    if isinstance(selection, str):   # merged runs (`merge_runs`) that differ in it: one text, run by run
        return None, f"the runs chose different episodes (episode_selection: {selection})"
    if not isinstance(selection, dict):
        return None, "the results do not record the episode selection (results of an older version)"
    candidates = data_candidates(results, results_dir)
    if not candidates:
        return None, "the results do not name their dataset ('data')"
    tried = []
    for data in candidates:
        args = argparse.Namespace(data=data, split=results.get("split"), scenes_dir=None,
                                  episodes=selection.get("episodes"), episode_ids=selection.get("episode_ids"),
                                  spread=bool(selection.get("spread")))
        if not data.exists():
            tried.append(f"{os.path.abspath(data)} (no such file or folder)")
            continue
        try:
            return [(ep.scene_id, str(ep.episode_id)) for ep in load_split(args)], ""
        except (OSError, ValueError, TypeError) as err:
            tried.append(f"{os.path.abspath(data)} ({err})")
    return None, f"its data {results.get('data')!r} was not found or not readable; tried " + "; ".join(tried)


def episode_list_order(results: dict, results_dir: Path | None = None) -> list[tuple[str, str]] | None:
    """`episode_list` without the reason: the run's episode list, or None where it cannot be read again."""
    return episode_list(results, results_dir)[0]


def house_slots(episodes: list[dict], skipped: Sequence[dict] = (), order: list[tuple[str, str]] | None = None
                ) -> list[int | None]:
    """Each episode's place among its house's episodes in the run's episode list (0 = the house's first), where
    the episodes that were skipped (`skipped_of`) held their places too (`memnav.sim.metrics.visit_indices`).

    A house without skipped episodes counts its episodes as they come. The results do not say where among a
    house's episodes the skipped ones were: for such a house that takes `order`, the run's episode list
    (`episode_list_order`); without it, or where it does not hold the house's episodes in the order they were
    run, its episodes' places are None (unknown).
    """
    where: dict[tuple[str, str], int] = {}
    count: dict[str, int] = {}
    for scene, episode_id in order or ():
        where.setdefault((scene, episode_id), count.get(scene, 0))
        count[scene] = count.get(scene, 0) + 1
    gaps = {s["scene_id"] for s in skipped}
    known: dict[str, bool] = {}
    for house in gaps:
        run = [where.get(_key(e)) for e in episodes if e["scene_id"] == house]
        left_out = [where.get(_key(s)) for s in skipped if s["scene_id"] == house]
        known[house] = (None not in run + left_out and all(a < b for a, b in zip(run, run[1:]))
                        and len(set(run + left_out)) == len(run) + len(left_out))
    seen: dict[str, int] = {}
    slots: list[int | None] = []
    for e in episodes:
        house = e["scene_id"]
        k = seen.get(house, 0)
        seen[house] = k + 1
        slots.append(k if house not in gaps else where[_key(e)] if known[house] else None)
    return slots


def lifelong_clusters(episodes: list[dict], visits: int = 0, skipped: Sequence[dict] = (),
                      order: list[tuple[str, str]] | None = None) -> list[str]:
    """What a lifelong run's episodes share a memory with, one label each: their house, or with `visits` > 0
    (`memnav eval --lifelong-visits`) their house's run of `visits` consecutive episodes of the episode list,
    where skipped episodes held their places (`house_slots`). A house with skipped episodes whose places are
    unknown (no `order`) is labelled whole: a coarser cluster, which still holds each of its sequences."""
    if visits <= 0:
        return [e["scene_id"] for e in episodes]
    return [e["scene_id"] if slot is None else f"{e['scene_id']}#{slot // visits}"
            for e, slot in zip(episodes, house_slots(episodes, skipped, order))]


def paired_rows(agents: dict[str, dict], focus: str, by_house: bool = False, visits: int = 0,
                order: list[tuple[str, str]] | None = None) -> list[dict]:
    """Success and SPL of the focus agent minus each other agent's, paired over the same episodes (an agent run on
    other episodes gets differ None and no differences); `by_house` resamples whole houses for the intervals
    (lifelong runs, see paired_difference), or with `visits` > 0 whole sequences of visits (`lifelong_clusters`,
    with the run's episode list `order` where episodes were skipped)."""
    base = agents[focus]["per_episode"]
    houses = lifelong_clusters(base, visits, skipped_of(agents[focus]), order) if by_house else None
    rows = []
    for name, a in agents.items():
        eps = a["per_episode"]
        if name == focus:
            continue
        if [_key(e) for e in eps] != [_key(e) for e in base]:
            nan3 = (math.nan, math.nan, math.nan)
            rows.append({"agent": name, "success": nan3, "spl": nan3, "differ": None})
            continue
        rows.append({"agent": name,
                     "success": paired_difference([e["success"] for e in base], [e["success"] for e in eps],
                                                  clusters=houses),
                     "spl": paired_difference([e["spl"] for e in base], [e["spl"] for e in eps], clusters=houses),
                     "differ": sum(1 for x, y in zip(base, eps) if x["success"] != y["success"]
                                   or abs(x["spl"] - y["spl"]) > 0.02)})
    return rows


def by_distance(episodes: list[dict], edges: tuple[float, ...] = DISTANCE_BINS_M,
                key: str = "geodesic_distance_m", unit: str = " m") -> list[dict]:
    """Success and SPL per bin of `key`: the start's geodesic distance to the goal, or another value (a distance
    in meters unless `unit` says otherwise; episodes without it are left out)."""
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = [e for e in episodes if e.get(key) is not None and lo <= e[key] < hi]
        label = f"{lo:g}-{hi:g}{unit}" if math.isfinite(hi) else f">= {lo:g}{unit}"
        rows.append({"bin": label, "episodes": len(sel),
                     "success": float(np.mean([e["success"] for e in sel])) if sel else math.nan,
                     "spl": float(np.mean([e["spl"] for e in sel])) if sel else math.nan})
    return rows


def ended_by_counts(episodes: list[dict]) -> dict[str, tuple[int, int]]:
    """{layer: (successes, failures)} over episodes that name their last layer, most frequent first."""
    counts: dict[str, list[int]] = {}
    for e in episodes:
        layer = e.get("ended_by") or ""
        if layer:
            c = counts.setdefault(layer, [0, 0])
            c[0 if e["success"] else 1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(counts.items(), key=lambda kv: -sum(kv[1]))}


def path_groups(episodes: list[dict]) -> dict[str, dict]:
    """Where the path went, for the successful and the failed episodes that recorded it (`path_by_layer_m`):
    {"successes" / "failures": {"episodes", "geodesic_m", "layers": {layer: (mean path m, mean m to spots given
    up)}}}, layers with the most path first; groups without episodes are left out."""
    out: dict[str, dict] = {}
    for group, ok in (("successes", True), ("failures", False)):
        sel = [e for e in episodes if e.get("path_by_layer_m") is not None and bool(e["success"]) == ok]
        if not sel:
            continue
        layers = mean_path_by_layer([(e["path_by_layer_m"], e.get("path_given_up_m")) for e in sel])
        out[group] = {"episodes": len(sel), "geodesic_m": float(np.mean([e["geodesic_distance_m"] for e in sel])),
                      "layers": {k: (v["path_m"], v["given_up_m"]) for k, v in layers.items() if v["path_m"] > 0}}
    return out


def per_house(agents: dict[str, dict]) -> dict[str, dict[str, tuple[int, float, float]]]:
    """{house: {agent: (episodes, success, SPL)}}."""
    table: dict[str, dict[str, tuple[int, float, float]]] = {}
    for name, a in agents.items():
        groups: dict[str, list[dict]] = {}
        for e in a["per_episode"]:
            groups.setdefault(Path(e["scene_id"]).stem, []).append(e)
        for house, eps in groups.items():
            table.setdefault(house, {})[name] = (len(eps), float(np.mean([e["success"] for e in eps])),
                                                 float(np.mean([e["spl"] for e in eps])))
    return dict(sorted(table.items()))


def stops_with_belief(episodes: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(belief at STOP, success) of the episodes that stopped and recorded a belief."""
    sel = [e for e in episodes if e.get("status") == "stopped" and e.get("stop_belief") is not None]
    return (np.array([e["stop_belief"] for e in sel], dtype=np.float64),
            np.array([e["success"] for e in sel], dtype=np.float64))


# --- figures ------------------------------------------------------------------------------------------------

def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    save_figure(fig, path)


def plot_summary(rows: list[dict], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4))
    x = np.arange(len(rows))
    for i, (key, label) in enumerate((("success", "success"), ("spl", "SPL"), ("soft_spl", "SoftSPL"))):
        if key == "success":
            mid = np.array([r["success"] for r in rows])
            lo = np.array([r["success_ci"][0] for r in rows])
            hi = np.array([r["success_ci"][1] for r in rows])
        else:
            mid, lo, hi = (np.array([r[key][j] for r in rows]) for j in range(3))
        err = np.vstack([np.maximum(0, mid - lo), np.maximum(0, hi - mid)])
        ax.bar(x + (i - 1) * 0.27, mid, 0.27, yerr=err, capsize=3, label=label)
    ax.set_xticks(x, [r["agent"] for r in rows])
    ax.set(ylim=(0, 1.05), ylabel="mean over episodes", title="success, SPL and SoftSPL (whiskers: 95% interval)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    _save(fig, path)


def plot_by_distance(agents: dict[str, dict], path: Path, key: str = "geodesic_distance_m",
                     edges: tuple[float, ...] = DISTANCE_BINS_M, what: str = "geodesic start-goal distance",
                     unit: str = " m") -> bool:
    """Success and SPL per bin of `key` for each agent; False (nothing written) when no episode has `key`."""
    if not any(e.get(key) is not None for a in agents.values() for e in a["per_episode"]):
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    labels = None
    for name, a in agents.items():
        rows = by_distance(a["per_episode"], edges, key, unit)
        labels = [f"{r['bin']}\n({r['episodes']})" for r in rows]
        for ax, metric in zip(axes, ("success", "spl")):
            ax.plot(np.arange(len(rows)), [r[metric] for r in rows], "o-", label=name)
    for ax, metric in zip(axes, ("success", "SPL")):
        ax.set_xticks(np.arange(len(labels or [])), labels or [], fontsize=8)
        ax.set(ylim=(-0.03, 1.03), xlabel=f"{what} (episodes)", ylabel=metric, title=f"{metric} by {what}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    _save(fig, path)
    return True


def plot_ended_by(agents: dict[str, dict], path: Path) -> bool:
    """Stacked bars per layer; False (nothing written) when no agent names its layers."""
    layered = {n: ended_by_counts(a["per_episode"]) for n, a in agents.items()}
    layered = {n: c for n, c in layered.items() if c}
    if not layered:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, len(layered), figsize=(4.5 * len(layered), 3.5), squeeze=False)
    for ax, (name, counts) in zip(axes[0], layered.items()):
        layers = list(counts)
        ok = [counts[k][0] for k in layers]
        bad = [counts[k][1] for k in layers]
        y = np.arange(len(layers))
        ax.barh(y, ok, color="tab:green", label="success")
        ax.barh(y, bad, left=ok, color="tab:red", label="failure")
        ax.set_yticks(y, layers)
        ax.invert_yaxis()
        ax.set(xlabel="episodes", title=f"{name}: what ended each episode")
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=8, loc="lower right")
    _save(fig, path)
    return True


_LAYER_COLOURS = {"explore": "tab:blue", "candidate": "tab:orange", "approach": "tab:green", "sweep": "tab:purple",
                  "best_view": "tab:brown", "homing": "tab:cyan", "policy": "tab:gray"}


def plot_path_by_layer(agents: dict[str, dict], path: Path) -> bool:
    """Per agent that recorded it, stacked bars of the mean path per episode by layer for its successful and its
    failed episodes, the part towards spots given up hatched, the mean shortest path marked; False (nothing
    written) when no agent recorded it."""
    groups = {n: path_groups(a["per_episode"]) for n, a in agents.items()}
    groups = {n: g for n, g in groups.items() if g}
    if not groups:
        return False
    plt = _plt()
    names = sorted({layer for g in groups.values() for row in g.values() for layer in row["layers"]})
    spare = iter(["tab:olive", "tab:pink", "tab:red", "0.3"] * len(names))
    colours = {layer: _LAYER_COLOURS.get(layer) or next(spare) for layer in names}
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 1.2 + 1.3 * len(groups)), squeeze=False)
    for ax, (name, g) in zip(axes[:, 0], groups.items()):
        labels = []
        for y, (group, row) in enumerate(g.items()):
            left = 0.0
            for layer, (m, given_up) in row["layers"].items():
                kept = m - given_up
                ax.barh(y, kept, left=left, color=colours[layer], label=layer)
                ax.barh(y, given_up, left=left + kept, color=colours[layer], hatch="//", edgecolor="white",
                        label=f"{layer}: to spots given up" if given_up > 0 else None)
                left += m
            ax.plot([row["geodesic_m"]] * 2, [y - 0.45, y + 0.45], color="black", lw=2,
                    label="shortest path" if y == 0 else None)
            labels.append(f"{group}\n({row['episodes']})")
        ax.set_yticks(np.arange(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set(xlabel="meters per episode (mean)", title=f"{name}: where the path went, by the layer that drove")
        ax.grid(alpha=0.3, axis="x")
        handles, texts = ax.get_legend_handles_labels()
        seen = dict(zip(texts, handles))
        ax.legend(seen.values(), seen.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _save(fig, path)
    return True


def plot_lifelong(agents: dict[str, dict], path: Path, order: list[tuple[str, str]] | None = None) -> bool:
    """SPL against visit index per agent (`lifelong_spl_by_visit`); with one agent, each house's episodes faint
    behind it. `order`: the run's episode list, where episodes were skipped (`house_slots`)."""
    curves = {n: a["lifelong_spl_by_visit"] for n, a in agents.items() if a.get("lifelong_spl_by_visit")}
    if not curves:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    if len(curves) == 1:   # one agent: each house's own visits, faint, behind the mean over houses
        agent = next(iter(agents[n] for n in curves))
        # --lifelong-visits V: each house's episodes are sequences of V visits, each from an empty memory, and
        # the curve has V points; an episode is drawn at its visit in its sequence, as the curve counts it: the
        # episodes of its sequence that were run before it, plus one (a skipped episode holds its place in the
        # sequence but is no visit). A house whose sequences are unknown (skipped episodes, no episode list)
        # is left out.
        every = int(agent.get("lifelong_visits") or 0)
        eps = agent["per_episode"]
        slots = house_slots(eps, skipped_of(agent), order) if every > 0 else [0] * len(eps)
        houses: dict[str, tuple[list[int], list[float]]] = {}
        before: dict[tuple[str, int], int] = {}
        for e, slot in zip(eps, slots):
            if slot is None:
                continue
            run = (e["scene_id"], slot // every if every > 0 else 0)
            before[run] = before.get(run, 0) + 1
            visit, spl = houses.setdefault(e["scene_id"], ([], []))
            visit.append(before[run])
            spl.append(e["spl"])
        for k, (visit, spls) in enumerate(houses.values()):
            ax.plot(visit, spls, "_", ms=5, alpha=0.45, color="0.45",
                    label="each house's episode" if k == 0 else None)
    for name, curve in curves.items():
        visits = np.arange(1, len(curve) + 1)
        line = ax.plot(visits, curve, "o", ms=3, alpha=0.5)[0]
        if len(curve) >= 10:   # a running mean of 5 over fewer points would be one or a few points
            k = 5
            smooth = np.convolve(curve, np.ones(k) / k, mode="valid")
            ax.plot(visits[k // 2:len(curve) - k // 2], smooth, "-", color=line.get_color(),
                    label=f"{name} (running mean of 5)")
        else:
            line.set_linestyle("-")
            line.set_label(name)
    ax.set(xlabel="visit index (episodes in the same house so far)", ylabel="SPL (mean over houses)",
           ylim=(-0.03, 1.03), title="lifelong: SPL against visit index")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def plot_reliability(agents: dict[str, dict], path: Path) -> dict[str, Reliability]:
    """Reliability diagram of the belief at STOP per agent that records it; {} (nothing written) if none does."""
    found = {}
    for name, a in agents.items():
        b, y = stops_with_belief(a["per_episode"])
        if b.size:
            found[name] = reliability(b, y)
    if not found:
        return {}
    plt = _plt()
    fig, (ax, axh) = plt.subplots(2, 1, figsize=(6, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([0, 1], [0, 1], "--", color="0.5", lw=1, label="calibrated")
    width = 0.1 / max(1, len(found))
    for i, (name, rel) in enumerate(found.items()):
        ok = rel.counts > 0
        ax.plot(rel.mean_belief[ok], rel.success_rate[ok], "o-", label=f"{name} (ECE {rel.ece:.3f})")
        centres = (rel.edges[:-1] + rel.edges[1:]) / 2 + (i - (len(found) - 1) / 2) * width
        axh.bar(centres, rel.counts, width, label=name)
    ax.set(ylabel="share of STOPs within 1 m", ylim=(-0.03, 1.03),
           title="stop belief at STOP against outcome (reliability)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    axh.set(xlabel="belief P(goal within the success radius) at STOP", ylabel="STOPs", xlim=(0, 1))
    axh.grid(alpha=0.3)
    _save(fig, path)
    return found


def chosen_traces(agents: dict[str, dict], traces: RunTraces, focus: str,
                  count: int = 8) -> list[tuple[EpisodeTrace, dict]]:
    """The focus agent's failures farthest from the goal first, then its lowest-SPL successes."""
    by_id = {(t.scene_id, t.episode_id): t for t in traces.episodes if t.agent == focus}
    eps = [e for e in agents[focus]["per_episode"] if _key(e) in by_id]
    fails = sorted((e for e in eps if not e["success"]), key=lambda e: -e["distance_to_goal_m"])
    wins = sorted((e for e in eps if e["success"]), key=lambda e: e["spl"])
    picked = fails[:max(count - 2, count - len(wins))] if wins else fails[:count]
    picked += wins[:count - len(picked)]
    return [(by_id[_key(e)], e) for e in picked]


def plot_episodes(chosen: list[tuple[EpisodeTrace, dict]], plans: dict[str, FloorPlan], path: Path) -> bool:
    if not chosen:
        return False
    plt = _plt()
    cols = min(4, len(chosen))
    rows = math.ceil(len(chosen) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.ravel()[len(chosen):]:
        ax.axis("off")
    for ax, (t, e) in zip(axes.ravel(), chosen):
        plan = plans.get(t.scene_id)
        if plan is not None:
            h, w = plan.navigable.shape
            x0, z0 = plan.origin_xz
            ax.imshow(np.where(plan.navigable, 0.93, 0.55), cmap="gray", vmin=0, vmax=1, origin="lower",
                      extent=(x0, x0 + w * plan.cell_m, z0, z0 + h * plan.cell_m), interpolation="nearest")
        if len(t.shortest_xz):
            ax.plot(t.shortest_xz[:, 0], t.shortest_xz[:, 1], "--", color="tab:green", lw=1.2, label="shortest")
        ax.plot(t.path_xz[:, 0], t.path_xz[:, 1], "-", color="tab:blue", lw=1.0, label="agent")
        ax.plot(*t.path_xz[0], "o", color="tab:blue", ms=6, label="start")
        ax.plot(*t.goal_xz, "*", color="tab:green", ms=13, mec="k", mew=0.5, label="goal")
        ax.plot(*t.path_xz[-1], "X", color="tab:red" if not e["success"] else "tab:blue", ms=8, mec="k", mew=0.5,
                label="end")
        ax.add_patch(plt.Circle(t.goal_xz, 1.0, fill=False, color="tab:green", lw=0.8))
        pad = 1.5
        pts = np.vstack([t.path_xz, [t.goal_xz]] + ([t.shortest_xz] if len(t.shortest_xz) else []))
        ax.set_xlim(pts[:, 0].min() - pad, pts[:, 0].max() + pad)
        ax.set_ylim(pts[:, 1].min() - pad, pts[:, 1].max() + pad)
        ax.set_aspect("equal")
        verdict = "success" if e["success"] else f"failed, {e['distance_to_goal_m']:.1f} m off"
        ax.set_title(f"{t.episode_id}: {verdict}\nSPL {e['spl']:.2f}, {e['steps']} actions"
                     + (f", ended by {e['ended_by']}" if e.get("ended_by") else ""), fontsize=8)
        ax.tick_params(labelsize=7)
    axes.ravel()[0].legend(fontsize=7, loc="best")
    fig.suptitle("top-down paths (x, z in meters; grey: not navigable; circle: the 1 m success radius)", fontsize=9)
    _save(fig, path)
    return True


def thumbnail(rgb: np.ndarray, size_px: int = 96) -> np.ndarray:
    """An RGB image shrunk (by whole-pixel striding) to at most `size_px` on its longer side, uint8."""
    img = np.asarray(rgb)
    step = max(1, math.ceil(max(img.shape[:2]) / size_px))
    return np.ascontiguousarray(img[::step, ::step, :3]).astype(np.uint8)


def plot_views(chosen: list[tuple[EpisodeTrace, dict]], path: Path) -> bool:
    """Goal photo beside the last view, per chosen episode: what a wrong STOP took for the goal."""
    chosen = [(t, e) for t, e in chosen if t.goal_rgb is not None and t.final_rgb is not None]
    if not chosen:
        return False
    plt = _plt()
    pairs_per_row = 2
    rows = math.ceil(len(chosen) / pairs_per_row)
    fig, axes = plt.subplots(rows, 2 * pairs_per_row, figsize=(2.3 * 2 * pairs_per_row, 2.5 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for k, (t, e) in enumerate(chosen):
        ax_goal, ax_end = axes[k // pairs_per_row, 2 * (k % pairs_per_row)], axes[k // pairs_per_row,
                                                                                2 * (k % pairs_per_row) + 1]
        ax_goal.imshow(t.goal_rgb)
        ax_goal.set_title(f"{t.episode_id}\ngoal photo", fontsize=8)
        ax_end.imshow(t.final_rgb)
        verdict = "success" if e["success"] else f"{e['distance_to_goal_m']:.1f} m from the goal"
        belief = e.get("stop_belief")
        ax_end.set_title(f"last view: {verdict}" + (f"\nbelief {belief:.2f}" if belief is not None else ""),
                         fontsize=8, color="black" if e["success"] else "tab:red")
    fig.suptitle("goal photo and the last view of the episodes above", fontsize=9)
    _save(fig, path)
    return True


# --- HTML -----------------------------------------------------------------------------------------------------

def _ci(mid: float, lo: float, hi: float) -> str:
    if not math.isfinite(mid):
        return "n/a"
    return f"{mid:.3f} [{lo:.3f}, {hi:.3f}]"


def _html_table(head: list[str], rows: list[list[Any]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in r) + "</tr>" for r in rows)   # escapes text
    return f"<table><tr>{th}</tr>{body}</table>"


def _path_table(agents: dict[str, dict]) -> str:
    """The path figure's numbers: per agent and group, meters per episode under each layer (to spots given up in
    brackets) and the shortest path."""
    rows = []
    for name, g in agents.items():
        for group, row in path_groups(g["per_episode"]).items():
            layers = ", ".join(f"{layer} {m:.1f}" + (f" ({given_up:.1f} given up)" if given_up >= 0.05 else "")
                               for layer, (m, given_up) in row["layers"].items())
            total = sum(m for m, _ in row["layers"].values())
            rows.append([name, f"{group} ({row['episodes']})", total, row["geodesic_m"], layers])
    return ("<p>Meters per episode (mean) travelled while each Navigator layer chose the moves; in brackets the "
            "part driven towards spots the agent then gave up (judged and rejected, or unreachable). The path "
            "beyond the shortest one is what SPL charges.</p>"
            + _html_table(["agent", "episodes", "path (m)", "shortest path (m)", "by layer (m)"], rows))


# the settings `memnav eval --json` records of the simulated robot and of what else it takes to run it again,
# shown at the head of a report (those a results file lacks, of an older version, are not shown)
RUN_SETTINGS = ("interrupted", "odometry_origin", "hfov_deg", "camera_height_m", "camera_forward_m", "camera_pitch_deg",
                "camera_mount_told", "image_px", "odometry_restarts", "encoder", "calibration", "exploring_options",
                "max_steps", "seed", "episode_selection", "explore", "homing", "renderer", "policy_dir", "scenes_dir",
                "memory_dir", "workers", "map_checks_in_background")


def setting_text(value: object) -> str:
    """A run setting as the report's head shows it: options (a dict) as "name=value, ..." ("defaults" when none
    was changed), anything else as it prints."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "defaults"
    return str(value)


def _skipped_section(agents: dict[str, dict]) -> list[str]:
    """The episodes that could not be run, per agent ("every agent" where all skipped the same), with a notice
    that they are in no mean; nothing where none was skipped."""
    skipped = {name: skipped_of(a) for name, a in agents.items() if skipped_of(a)}
    if not skipped:
        return []
    lists = list(skipped.values())
    same = len(agents) > 1 and len(skipped) == len(agents) and all(v == lists[0] for v in lists)
    shown = {"every agent": lists[0]} if same else skipped
    rows = [[name, str(s["episode_id"]), Path(s["scene_id"]).stem, str(s.get("reason") or "")]
            for name, eps in shown.items() for s in eps]
    count = len(lists[0]) if same else len({(s["scene_id"], str(s["episode_id"])) for v in lists for s in v})
    return [f"<h2 class='warn'>Skipped episodes ({count})</h2>"
            f"<p class='warn'>{count} episode{'s' if count > 1 else ''} could not be run (no agent acted in "
            f"{'them' if count > 1 else 'it'}, e.g. a goal no navigable path reaches): left out of every mean, "
            "interval, figure and table of this report.</p>",
            _html_table(["agent", "episode", "house", "reason"], rows)]


def render_html(results: dict, agents: dict[str, dict], focus: str, figures: list[tuple[str, str]],
                reliabilities: dict[str, Reliability], command: str | None = None,
                order: list[tuple[str, str]] | None = None, order_missing: str = "") -> str:
    """The report page; `order_missing`: why the run's episode list could not be read again (`episode_list`)."""
    meta = [("split", results.get("split")), ("data", results.get("data")), ("backend", results.get("backend")),
            ("episodes", results.get("episodes")), ("episodes_selected", results.get("episodes_selected")),
            ("lifelong", results.get("lifelong")),
            *((key, results.get(key)) for key in RUN_SETTINGS)]
    if command:
        meta.append(("command", command))
    parts = [page_head("memnav eval report"),
             f"<h1>memnav eval: {html.escape(', '.join(agents))}</h1>",
             _html_table(["run", ""], [[k, setting_text(v)] for k, v in meta if v is not None]),
             *_skipped_section(agents),
             "<h2>Summary</h2><p>Means over episodes with 95% intervals (success: Wilson; SPL, SoftSPL: normal "
             "approximation).</p>",
             _html_table(["agent", "episodes", "success", "SPL", "SoftSPL", "mean steps"],
                         [[r["agent"], r["episodes"], _ci(r["success"], *r["success_ci"]), _ci(*r["spl"]),
                           _ci(*r["soft_spl"]), r["mean_steps"]] for r in summary_rows(agents)])]
    lifelong = bool(results.get("lifelong"))
    visits = int(agents[focus].get("lifelong_visits") or 0)
    paired = paired_rows(agents, focus, by_house=lifelong, visits=visits, order=order)
    if paired:
        how = (" It resamples whole houses: in lifelong runs a house's visits share its memory, so one early "
               "divergence carries over to its later visits, and those episodes are not independent. With few "
               "houses (fewer than about 10) the interval is itself rough: read it together with the number of "
               "episodes that differ." if lifelong and not visits else
               f" It resamples whole sequences of {visits} visits (--lifelong-visits): a sequence's visits share "
               "its memory, so they are not independent, while sequences start from empty memories." if lifelong
               else "")
        base = agents[focus]["per_episode"]
        whole = sorted({Path(e["scene_id"]).stem for e, slot in zip(base, house_slots(base, skipped_of(agents[focus]),
                                                                                    order)) if slot is None})
        if lifelong and visits and whole:
            how += (f" {html.escape(', '.join(whole))}: resampled as whole houses, since episodes were skipped there "
                    "and the run's episode list (its data, split and episode_selection) could not be read again to "
                    "tell which sequence each later episode was run in"
                    + (f" ({html.escape(order_missing)})." if order_missing else "."))
        parts += [f"<h2>{html.escape(focus)} against each agent, episode by episode</h2>"
                  f"<p>{html.escape(focus)} minus the other agent on the same episodes, with a 95% paired bootstrap "
                  f"interval: an interval that holds 0 is a difference these episodes cannot tell from noise.{how}</p>",
                  _html_table(["agent", "success difference", "SPL difference", "episodes that differ"],
                              [[r["agent"], _ci(*r["success"]), _ci(*r["spl"]),
                                r["differ"] if r["differ"] is not None else "not paired: other episodes"]
                               for r in paired])]
    for name, src in figures:
        parts.append(f"<h2>{html.escape(name)}</h2><img src='{src}' alt='{html.escape(name)}'>")
        if src == "path_by_layer.png":
            parts.append(_path_table(agents))
        if src == "stop_reliability.png" and reliabilities:
            parts.append(_html_table(["agent", "STOPs with a belief", "ECE"],
                                     [[n, int(r.counts.sum()), r.ece] for n, r in reliabilities.items()]))
    houses = per_house(agents)
    names = list(agents)
    parts += ["<h2>Per house</h2>",
              _html_table(["house"] + [f"{n} success / SPL (episodes)" for n in names],
                          [[h] + [f"{v[n][1]:.2f} / {v[n][2]:.2f} ({v[n][0]})" if n in v else "" for n in names]
                           for h, v in houses.items()])]
    fails = sorted((e for e in agents[focus]["per_episode"] if not e["success"]),
                   key=lambda e: -(e.get("distance_to_goal_m") or 0.0))
    if fails:
        parts += [f"<h2>{html.escape(focus)}: failed episodes ({len(fails)})</h2>",
                  _html_table(["episode", "house", "end distance (m)", "start distance (m)", "actions", "status",
                               "ended by"],
                              [[str(e["episode_id"]), Path(e["scene_id"]).stem, e.get("distance_to_goal_m"),
                                e.get("geodesic_distance_m"), e.get("steps"), str(e.get("status", "")),
                                e.get("ended_by") or ""]
                               for e in fails[:50]])]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_eval_report(results: dict, out_dir: Path, traces: RunTraces | None = None, focus: str | None = None,
                      command: str | None = None, results_dir: Path | None = None) -> list[Path]:
    """Write the report of a `memnav eval` results dict into `out_dir` (created); returns the files written.
    `results_dir`: the folder of the results file read (`memnav eval-report`), where a relative `data` is looked
    for too (`data_candidates`).

    Raises:
        ValueError: results without per-episode data, or a focus agent that was not run.
    """
    agents = agents_of(results)
    focus = focus_agent(agents, focus)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str]] = []
    rows = summary_rows(agents)
    plot_summary(rows, out_dir / "summary.png")
    figures.append(("Success and SPL", "summary.png"))
    if plot_by_distance(agents, out_dir / "by_distance.png"):   # not without episodes
        figures.append(("By distance to the goal", "by_distance.png"))
    if plot_by_distance(agents, out_dir / "by_goal_view.png", "goal_view_depth_m", GOAL_DEPTH_BINS_M,
                        "goal photo's median depth"):
        figures.append(("By how far the goal photo looks (close-ups of a wall tell little)", "by_goal_view.png"))
    if plot_by_distance(agents, out_dir / "by_goal_ambiguity.png", "goal_lookalike_ratio", LOOKALIKE_RATIO_BINS,
                        "goal photo's look-alike ratio", unit=""):
        figures.append(("By how well a spot elsewhere reproduces the goal photo (`memnav goal-audit`; "
                        "below 1: ambiguous)", "by_goal_ambiguity.png"))
    if plot_ended_by(agents, out_dir / "ended_by.png"):
        figures.append(("How episodes ended", "ended_by.png"))
    if plot_path_by_layer(agents, out_dir / "path_by_layer.png"):
        figures.append(("Where the path went", "path_by_layer.png"))
    # with --lifelong-visits, where episodes were skipped: the episode list tells which sequence each was run in
    visits = int(agents[focus].get("lifelong_visits") or 0)
    order, order_missing = episode_list(results, results_dir) \
        if visits and any(skipped_of(a) for a in agents.values()) else (None, "")
    if order_missing:
        print(f"warning: the run's episode list could not be read again, so the houses with skipped episodes are "
              f"resampled whole in the paired intervals: {order_missing}", file=sys.stderr)
    if plot_lifelong(agents, out_dir / "lifelong.png", order):
        figures.append(("Lifelong: SPL by visit", "lifelong.png"))
    rel = plot_reliability(agents, out_dir / "stop_reliability.png")
    if rel:
        figures.append(("Stop belief at STOP (reliability)", "stop_reliability.png"))
    chosen = chosen_traces(agents, traces, focus) if traces is not None else []
    if traces is not None and plot_episodes(chosen, traces.floor_plans, out_dir / "episodes.png"):
        figures.append((f"{focus}: worst episodes, top-down", "episodes.png"))
    if plot_views(chosen, out_dir / "views.png"):
        figures.append((f"{focus}: goal photo and last view of the same episodes", "views.png"))
    page = render_html(json_safe(results), agents, focus, figures, rel, command, order, order_missing)
    replace_files({out_dir / "report.html": page.encode()})
    return [out_dir / "report.html"] + [out_dir / src for _, src in figures]


# --- `memnav eval-report` ---------------------------------------------------------------------------------------

def _same_folder(a: object, b: object) -> bool:
    """Whether two dataset paths name the same folder (one relative to this directory, one absolute, say)."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def merge_runs(runs: list[tuple[str, dict]], rename: bool = False) -> dict:
    """Several `memnav eval --json` results as one --compare-shaped dict, so that runs of one agent under two
    settings are compared episode by episode. Agents are named by their run (`label`), or `label:agent` where a
    run holds several; one run is returned as it is, unless `rename` (its label was given: `--names`).

    Raises:
        ValueError: two runs of another split or data (dataset paths naming the same folder, relative or
            absolute, are the same data), or the same name twice.
    """
    if len(runs) == 1 and not rename:
        return runs[0][1]
    merged: dict[str, dict] = {}
    first = runs[0][1]
    for label, results in runs:
        for key in ("split", "data", "lifelong"):
            a, b = results.get(key), first.get(key)
            if a != b and not (key == "data" and (_same_folder(a, b) or _same_folder(results.get("data_absolute"),
                                                                                   first.get("data_absolute")))):
                raise ValueError(f"{label}: {key} {a!r} differs from {runs[0][0]}'s {b!r}")
        agents = agents_of(results)
        for name, a in agents.items():
            key = label if len(agents) == 1 else f"{label}:{name}"
            if key in merged:
                raise ValueError(f"two runs are both named {key!r}: rename a file or pass --names")
            merged[key] = a
    # a setting the runs share is shown as it is; one they differ in, run by run
    settings = {}
    for key in ("episodes_selected", *RUN_SETTINGS):
        values = [results.get(key) for _, results in runs]
        if any(v is not None for v in values):
            settings[key] = values[0] if all(v == values[0] for v in values) else \
                "; ".join(f"{label} {setting_text(v)}" for (label, _), v in zip(runs, values))
    # the dataset's absolute path from the first run that records it (an older first file has none)
    absolute = next((r["data_absolute"] for _, r in runs if r.get("data_absolute")), None)
    return {**{k: first.get(k) for k in ("split", "data", "backend", "lifelong") if k in first},
            **({"data_absolute": absolute} if absolute else {}), **settings,
            "episodes": episodes_run_by_every_agent(merged), "agents": merged}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, nargs="+", metavar="RUN.json",
                        help="results files written by `memnav eval --json` (one agent or --compare); with several "
                             "(e.g. one agent with and without an option, on the same episodes) the report compares "
                             "them as agents named by their file name, the first one the focus")
    parser.add_argument("--names", default=None, metavar="A,B,...",
                        help="names for the runs, one per file (default: the file names without .json)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="report folder (created; report.html and PNG figures; existing files of the same "
                             "names are replaced, other files left as they are)")
    parser.add_argument("--focus", default=None, metavar="AGENT",
                        help="the agent the others are compared with episode by episode, and whose failures are "
                             "listed (default: memnav if it was run, else the first agent; with several files, "
                             "the first file's)")
    parser.add_argument("--goal-audit", type=Path, default=None, metavar="AUDIT_JSON",
                        help="a `memnav goal-audit --json` file of the same split: adds each episode's "
                             "goal_lookalike_ratio and a figure of success and SPL against it")


def _read_results(path: Path) -> dict:
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a results file (memnav eval --json)")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file")
    try:
        results = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON file ({err})") from err
    if not isinstance(results, dict):
        raise ValueError(f"{path}: expected a JSON object from `memnav eval --json`")
    try:
        agents_of(results)
    except ValueError as err:
        raise ValueError(f"{path}: {str(err).removeprefix('results: ')}") from None
    return results


def run(args: argparse.Namespace) -> int:
    paths: list[Path] = args.results
    names = [n.strip() for n in args.names.split(",")] if args.names else [p.stem for p in paths]
    if len(names) != len(paths):
        raise ValueError(f"--names: {len(names)} names for {len(paths)} files")
    if not all(names):
        raise ValueError(f"--names {args.names!r}: a run's name is empty")
    check_output_dir(args.out, "--out")
    results = merge_runs([(name, _read_results(p)) for name, p in zip(names, paths)], rename=bool(args.names))
    if args.goal_audit is not None:
        from memnav.eval.goal_audit import annotate_ratios, read_audit

        ratios = read_audit(args.goal_audit)
        for name, agent in agents_of(results).items():
            if annotate_ratios(agent["per_episode"], ratios) == 0:
                raise ValueError(f"--goal-audit {args.goal_audit}: none of {name}'s episodes is in the audit "
                                 "(another split or dataset?)")
    focus = args.focus
    if focus is None and len(paths) > 1:
        focus = next(iter(results["agents"]))
    elif focus is None and args.names and f"{names[0]}:memnav" in results.get("agents", {}):
        focus = f"{names[0]}:memnav"   # one --compare file, renamed: memnav stays the focus
    files = write_eval_report(results, args.out, focus=focus,
                              command="memnav eval-report " + " ".join(str(p) for p in paths),
                              results_dir=paths[0].parent)
    print(f"wrote {files[0]} ({len(files) - 1} figures)")
    return 0
