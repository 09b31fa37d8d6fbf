"""`memnav goal-audit`: which goal photos does another spot in the house reproduce?

For each episode of a split, the view more than the success distance (geodesic) from the goal that
reproduces the goal photo best (`memnav.sim.goal_lookalikes`), against how much the photo changes when the
goal camera itself is nudged:

- `lookalike_ratio` = RMS difference (RGB-D) between the photo and its best look-alike elsewhere, divided by
  the median RMS difference between the photo and views of the goal spot moved `--nudge-m` and turned
  `--nudge-deg`;
- `ambiguous`: ratio <= 1; `near_identical`: ratio <= 0.5.

The search can miss a look-alike that its grid does not come near, so the counts are lower bounds.
`--results EVAL.json` splits an evaluation's success and SPL by the audit's labels; `memnav eval-report
--goal-audit` plots them (`annotate_ratios`). `--audit FILE` reads an earlier audit instead of searching: the
options that only steer the search (`SEARCH_OPTIONS`) are then refused by name, not ignored.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from memnav.cli import STDOUT_ONLY, config_from_options
from memnav.core.files import json_safe, replace_files
from memnav.paths import check_output_file, same_file
from memnav.sim.goal_lookalikes import GoalAuditConfig, HouseLookalikes

# what `memnav goal-audit` reads and searches (args dests): meaningless with --audit FILE, which reads an audit
SEARCH_OPTIONS = ("data", "scenes_dir", "split", "episodes", "episode_ids", "spread", "renderer",
                  "grid_m", "heading_deg", "candidates", "nudge_m", "nudge_deg")


class _Default:
    """A search option's default as parsed when the option is left out, so that `run` can tell it from the same
    value typed; prints as the value, so --help shows the default as before."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return str(self.value)


def _given_search_options(args: argparse.Namespace) -> list[str]:
    """The SEARCH_OPTIONS typed on the command line, as options ("--grid-m"), in the order of SEARCH_OPTIONS."""
    return [f"--{name.replace('_', '-')}" for name in SEARCH_OPTIONS
            if getattr(args, name, None) is not None and not isinstance(getattr(args, name), _Default)]


def _search_settings(args: argparse.Namespace) -> None:
    """Replace the marked defaults of the options left out by their values."""
    for name in SEARCH_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, _Default):
            setattr(args, name, value.value)


def episode_key(scene: object, episode_id: object) -> tuple[str, str]:
    """How audits and evaluation results name an episode: (house, episode id); `scene` may be a scene_id."""
    return Path(str(scene)).stem, str(episode_id)


def load_audit(path: Path) -> dict:
    """A `memnav goal-audit --json` document, its rows checked for the names and labels the command and the report
    read.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not an audit file.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such goal audit file")
    try:
        doc = json.loads(Path(path).read_text())
        for r in doc["per_episode"]:
            for key in ("scene", "episode_id", "lookalike_ratio", "ambiguous", "near_identical"):
                r[key]   # noqa: B018 - every row must hold the labels
            for key in ("ambiguous", "near_identical"):   # counted: a "no" would count as one
                if not isinstance(r[key], bool):
                    raise TypeError(f"episode {r['episode_id']!r}: {key} is {r[key]!r}, not true or false")
        return doc
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a `memnav goal-audit --json` file ({err!r})") from err


def by_episode(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """An audit's rows by `episode_key`."""
    return {episode_key(r["scene"], r["episode_id"]): r for r in rows}


def read_audit(path: Path) -> dict[tuple[str, str], dict]:
    """A `memnav goal-audit --json` file's episodes by `episode_key` (errors as `load_audit`)."""
    return by_episode(load_audit(path)["per_episode"])


def annotate_ratios(per_episode: list[dict], audit: dict[tuple[str, str], dict]) -> int:
    """Add the audit's `goal_lookalike_ratio` to evaluation results' episodes; returns how many matched."""
    matched = 0
    for row in per_episode:
        found = audit.get(episode_key(row.get("scene_id", ""), row.get("episode_id")))
        if found is not None:
            row["goal_lookalike_ratio"] = found["lookalike_ratio"]
            matched += 1
    return matched


def load_results(path: Path) -> dict:
    """A `memnav eval --json` file of one agent, checked for what `split_results` reads (read before the search,
    so that a wrong file is named before minutes of rendering, not after).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not JSON, or not one agent's evaluation (naming --results and the file).
    """
    if not path.is_file():
        raise FileNotFoundError(f"--results {path}: " + ("is a directory; give a `memnav eval --json` file"
                                                         if path.is_dir() else "no such file"))
    try:
        results = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"--results {path}: not JSON ({err})") from err
    per = results.get("per_episode") if isinstance(results, dict) else None
    if not isinstance(per, list):
        raise ValueError(f"--results {path}: not a `memnav eval --json` file of one agent (no per_episode list); "
                         "for --compare runs pass one agent's file")
    for r in per:
        if not isinstance(r, dict):
            raise ValueError(f"--results {path}: an entry of per_episode is {r!r}, not an episode's results")
        for key in ("success", "spl"):
            value = r.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"--results {path}: episode {r.get('episode_id')!r} has {key} {value!r}, "
                                 "not a number")
    return results


def split_results(audit: dict[tuple[str, str], dict], results: dict) -> dict:
    """Success and SPL of an evaluation (`memnav eval --json`, one agent) on the audit's ambiguous,
    near-identical and unambiguous episodes (matched by `episode_key`)."""
    per = results.get("per_episode") if isinstance(results, dict) else None
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
                        help="reuse an earlier audit's JSON instead of searching again (with --results; the "
                             "search's options are then refused)")
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
    # a default stays recognisable as such, so that --audit can refuse the search options actually typed
    parser.set_defaults(**{name: _Default(parser.get_default(name)) for name in SEARCH_OPTIONS
                           if parser.get_default(name) is not None})


def house_lookalikes(sim, cfg: GoalAuditConfig, house: str, progress: bool) -> HouseLookalikes:
    """The look-alike search over the house `sim` has loaded; its grid of views renders under a progress bar
    (stderr, cleared when done) unless `progress` is False."""
    from tqdm import tqdm

    with tqdm(desc=f"{house} views", unit="view", leave=False, mininterval=1.0, disable=not progress,
              file=sys.stderr) as views_bar:
        return HouseLookalikes(sim, cfg, progress=views_bar.update, total=views_bar.reset)


def _house_rows(sim, house: str, episodes: list, cfg: GoalAuditConfig, progress: bool,
                done: Callable[[], None]) -> list[dict]:
    """Audit one house's episodes in the embedded simulator `sim` (`done()` after each episode)."""
    from memnav.sim.episodes import require_scene
    from memnav.sim.metrics import view_median_depth

    sim.load_scene(require_scene(episodes[0]))
    finder = house_lookalikes(sim, cfg, house, progress)
    rows = []
    for e in episodes:
        goal, yaw = np.asarray(e.goal.position, dtype=np.float64), e.goal_yaw_rad()
        found = finder.audit(goal, yaw)
        # the goal photo at the camera's resolution, as an episode's reset renders it (goal_view_depth_m, as eval)
        depth = view_median_depth(sim.render_at(goal, yaw).depth)
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
    outside_m = doc.get("config", {}).get("outside_m", GoalAuditConfig.outside_m)
    split = f" {doc['split']}" if doc.get("split") else ""
    lines = [f"goal audit of {doc['episodes']}{split} episodes: {doc['ambiguous_episodes']} ambiguous "
             f"(a spot more than {outside_m:g} m away matches the photo at least as well as the "
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
    if args.audit is not None:
        given = _given_search_options(args)
        if given:
            raise ValueError(f"{', '.join(given)}: {'has' if len(given) == 1 else 'have'} no effect with --audit "
                             f"{args.audit} (the audit is read, not searched)")
    _search_settings(args)
    check_output_file(args.json, "--json")
    results = None
    if args.results is not None:   # checked before the search, which the refusal of a wrong file would waste
        if args.json not in (None, STDOUT_ONLY) and same_file(args.json, args.results):
            raise ValueError(f"--json {args.json} is the --results file: the audit would replace the evaluation; "
                             "write it to another file")
        results = load_results(args.results)
    names = ("grid_m", "heading_deg", "candidates", "nudge_m", "nudge_deg")
    cfg = config_from_options(GoalAuditConfig, {n: f"--{n.replace('_', '-')}" for n in names},
                              **{n: getattr(args, n) for n in names})
    if args.audit is not None:
        doc = load_audit(args.audit)   # refuses a file that is not an audit, by name
        rows = doc["per_episode"]
        doc.update(summarize(rows))
    else:
        rows = _episode_rows(args, cfg)
        doc = {"split": args.split, "data": str(args.data), "config": asdict(cfg), **summarize(rows),
               "per_episode": rows}
    if results is not None:
        doc["results"] = split_results(by_episode(rows), results)
    if args.json is not None:
        # strict JSON (a non-finite value, which an audit written by hand may hold, as null)
        text = json.dumps(json_safe(doc), indent=2, allow_nan=False)
        if args.json == STDOUT_ONLY:
            print(text)
            return 0
        replace_files({args.json: (text + "\n").encode()})   # a failed write keeps an earlier audit whole
    print(format_summary(doc))
    return 0
