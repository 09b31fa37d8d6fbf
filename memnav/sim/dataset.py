"""`memnav scenes`: procedural houses + ImageNav episodes in Habitat's formats.

Layout written under --out DIR:
    DIR/scenes/house_XXX.glb, .stage_config.json, .semantic.json
    DIR/episodes/{train,val,test}.json.gz      (split by house: no test house appears in train)
    DIR/splits.json                            (which house went to which split)
    DIR/.complete                              (written last; its absence means "regenerate")
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memnav.core.frames import quat_xyzw_from_yaw, yaw_from_quat_xyzw
from memnav.paths import check_output_dir
from memnav.sim.base import SimConfig
from memnav.sim.goal_lookalikes import GoalAuditConfig

SPLITS = ("train", "val", "test")


def default_data_dir() -> Path:
    """Where commands read and write the generated dataset unless told otherwise: $MEMNAV_DATA or data/houses."""
    return Path(os.environ.get("MEMNAV_DATA", "data/houses"))


@dataclass
class EpisodeSamplingConfig:
    """How episodes are drawn in each house.

    Attributes:
        min_geodesic_m: shortest start-goal geodesic distance, meters.
        max_geodesic_m: longest start-goal geodesic distance, meters.
        min_geodesic_to_euclid_ratio: episodes straighter than this are kept only with probability
            `straight_keep_prob` (as Habitat's PointNav generator does, to avoid trivial episodes).
        straight_keep_prob: probability of keeping a near-straight episode.
        max_tries: attempts per episode before giving up on a house, count.
        min_goal_lookalike_ratio: a goal whose photo a spot outside the success distance reproduces with a
            look-alike ratio below this (`memnav.sim.goal_lookalikes`; 1 = at least as well as the goal spot
            nudged by 5 cm) is drawn again, and kept goals record theirs in the episode's
            info.goal_lookalike_ratio; 0 (the default) keeps every goal and draws exactly what it always did.
    """

    min_geodesic_m: float = 1.5
    max_geodesic_m: float = 15.0
    min_geodesic_to_euclid_ratio: float = 1.1
    straight_keep_prob: float = 0.3
    max_tries: int = 2000
    min_goal_lookalike_ratio: float = 0.0

    def __post_init__(self) -> None:
        r = self.min_goal_lookalike_ratio
        if not (isinstance(r, (int, float)) and math.isfinite(r) and r >= 0):
            raise ValueError(f"min_goal_lookalike_ratio must be a number >= 0 (0 = off), got {r!r}")


def assign_splits(num_houses: int) -> list[str]:
    """Split label per house index: about 2/3 train, 1/6 val, 1/6 test, test houses last."""
    if num_houses <= 0:
        raise ValueError(f"--houses must be positive, got {num_houses}")
    if num_houses == 1:
        return ["test"]
    if num_houses == 2:
        return ["train", "test"]
    n_test = max(1, round(num_houses / 6))
    n_val = max(1, round(num_houses / 6))
    n_train = num_houses - n_test - n_val
    return ["train"] * n_train + ["val"] * n_val + ["test"] * n_test


def sample_episodes(sim, scene_id: str, count: int, rng: np.random.Generator,
                    cfg: EpisodeSamplingConfig, id_prefix: str,
                    goal_lookalike_ratio: Callable[[np.ndarray, float], float] | None = None) -> list:
    """Draw `count` start/goal pairs in the simulator's current scene.

    `goal_lookalike_ratio(goal_position, goal_yaw_rad)` (required when `cfg.min_goal_lookalike_ratio` > 0, for
    example `HouseLookalikes(sim).audit(...).ratio`) rates each drawn goal photo; goals below the minimum are
    drawn again.
    """
    from memnav.sim.episodes import Episode, NavGoal

    if cfg.min_goal_lookalike_ratio > 0 and goal_lookalike_ratio is None:
        raise ValueError("min_goal_lookalike_ratio > 0 needs a goal_lookalike_ratio function to rate goals with")

    episodes = []
    tries = 0
    while len(episodes) < count:
        tries += 1
        if tries > cfg.max_tries * max(count, 1):
            raise RuntimeError(f"{scene_id}: could only sample {len(episodes)} of {count} episodes with "
                               f"geodesic distance in [{cfg.min_geodesic_m}, {cfg.max_geodesic_m}] m")
        start = sim.grid.sample(rng)
        goal = sim.grid.sample(rng)
        euclid = float(np.hypot(goal[0] - start[0], goal[2] - start[2]))
        if euclid > cfg.max_geodesic_m or euclid < 0.5 * cfg.min_geodesic_m:
            continue
        geo = sim.geodesic_distance(start, goal)
        if not (cfg.min_geodesic_m <= geo <= cfg.max_geodesic_m):
            continue
        if geo / max(euclid, 1e-6) < cfg.min_geodesic_to_euclid_ratio and rng.random() > cfg.straight_keep_prob:
            continue
        start_yaw = float(rng.uniform(-math.pi, math.pi))
        goal_yaw = float(rng.uniform(-math.pi, math.pi))
        goal_position, goal_rotation = np.round(goal, 5), np.round(quat_xyzw_from_yaw(goal_yaw), 7)
        info = {"geodesic_distance": round(float(geo), 5), "euclidean_distance": round(euclid, 5)}
        if cfg.min_goal_lookalike_ratio > 0:
            # rated as saved (rounded position and quaternion), so `memnav goal-audit` finds the same ratio
            ratio = goal_lookalike_ratio(goal_position, yaw_from_quat_xyzw(goal_rotation))
            if not ratio >= cfg.min_goal_lookalike_ratio:
                continue
            info["goal_lookalike_ratio"] = round(float(ratio), 4) if math.isfinite(ratio) else None
        episodes.append(Episode(
            episode_id=f"{id_prefix}{len(episodes)}",
            scene_id=scene_id,
            start_position=np.round(start, 5),
            start_rotation=np.round(quat_xyzw_from_yaw(start_yaw), 7),
            goals=[NavGoal(position=goal_position, radius=None, rotation=goal_rotation)],
            geodesic_distance=round(float(geo), 5),
            info=info,
        ))
    return episodes


def generate_dataset(out: Path, houses: int, seed: int, per_split: dict[str, int],
                     sampling: EpisodeSamplingConfig | None = None, progress: bool = True,
                     lookalikes: GoalAuditConfig | None = None) -> dict:
    """Write houses and episodes under `out`; returns a summary dict.

    With `sampling.min_goal_lookalike_ratio` > 0 each house's goals are rated by a look-alike search
    (`HouseLookalikes`, configured by `lookalikes`), which renders a grid of views of the house first.
    """
    from tqdm import tqdm

    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.episodes import save_episodes
    from memnav.sim.goal_lookalikes import HouseLookalikes
    from memnav.sim.houses import generate_house, write_house

    sampling = sampling or EpisodeSamplingConfig()
    scenes_dir = out / "scenes"
    scenes_dir.mkdir(parents=True, exist_ok=True)
    marker = out / ".complete"
    if marker.exists():
        marker.unlink()
    labels = assign_splits(houses)
    by_split: dict[str, list] = {s: [] for s in SPLITS}
    split_of: dict[str, str] = {}
    sim = EmbeddedSimulator(config=SimConfig(seed=seed))
    for i in tqdm(range(houses), desc="houses", unit="house", disable=not progress, file=sys.stderr):
        name = f"house_{i:03d}"
        house = generate_house(seed * 100_003 + i, name=name)
        glb = write_house(house, scenes_dir)
        sim.load_scene(glb)
        split = labels[i]
        rng = np.random.default_rng([seed, i, 7])
        rate = None
        if sampling.min_goal_lookalike_ratio > 0 and per_split[split] > 0:
            finder = HouseLookalikes(sim, lookalikes)

            def rate(position: np.ndarray, yaw_rad: float, finder: HouseLookalikes = finder) -> float:
                return finder.audit(position, yaw_rad).ratio

        eps = sample_episodes(sim, f"scenes/{glb.name}", per_split[split], rng, sampling, f"{name}_", rate)
        by_split[split].extend(eps)
        split_of[name] = split
        sim.close()
    (out / "episodes").mkdir(exist_ok=True)
    for split in SPLITS:
        save_episodes(out / "episodes" / f"{split}.json.gz", by_split[split])
    remove_houses_beyond(scenes_dir, houses)
    summary = {"houses": houses, "seed": seed, "splits": split_of,
               "episodes": {s: len(by_split[s]) for s in SPLITS}}
    if sampling.min_goal_lookalike_ratio > 0:
        summary["min_goal_lookalike_ratio"] = sampling.min_goal_lookalike_ratio
    (out / "splits.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    marker.write_text(json.dumps(completion_marker(houses, seed, sampling, lookalikes)) + "\n")
    return summary


def remove_houses_beyond(scenes_dir: Path, houses: int) -> list[Path]:
    """Remove the files of houses numbered `houses` and up (`house_NNN.*`, what an earlier, larger set wrote into
    `scenes_dir`): a set made again with fewer houses left them, and whatever reads every mesh of the folder
    (`memnav bench sim`) took them for its own. Other files are left alone. Returns those removed."""
    stale = []
    for path in sorted(scenes_dir.glob("house_*.*")):
        number = path.name[len("house_"):].split(".", 1)[0]
        if number.isdigit() and int(number) >= houses:
            path.unlink()
            stale.append(path)
    return stale


def completion_marker(houses: int, seed: int, sampling: EpisodeSamplingConfig,
                      lookalikes: GoalAuditConfig | None = None) -> dict:
    """What `DIR/.complete` records: a dataset is reused only when asked for the same again (the goal filter and
    its search grid are recorded only when the filter is on, so datasets written before it existed still count
    as complete)."""
    done: dict = {"houses": houses, "seed": seed}
    if sampling.min_goal_lookalike_ratio > 0:
        grid = lookalikes or GoalAuditConfig()
        done.update(min_goal_lookalike_ratio=sampling.min_goal_lookalike_ratio, lookalike_grid_m=grid.grid_m,
                    lookalike_heading_deg=grid.heading_deg)
    return done


def stored_episode_counts(out: Path) -> dict | None:
    """The episodes per split a generated dataset's splits.json records; None when it cannot be read."""
    try:
        counts = json.loads((out / "splits.json").read_text())["episodes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return counts if isinstance(counts, dict) else None


def add_lookalike_grid_arguments(parser: argparse.ArgumentParser, used_with: str) -> None:
    """--lookalike-grid-m / --lookalike-heading-deg: the grid of the look-alike search an option `used_with` runs."""
    parser.add_argument("--lookalike-grid-m", type=float, default=GoalAuditConfig.grid_m, metavar="M",
                        help=f"with {used_with}: spacing of the positions searched for look-alikes, meters")
    parser.add_argument("--lookalike-heading-deg", type=float, default=GoalAuditConfig.heading_deg, metavar="DEG",
                        help=f"with {used_with}: spacing of the headings searched for look-alikes, degrees")


def lookalike_grid(args: argparse.Namespace) -> GoalAuditConfig:
    """The look-alike search's settings from `add_lookalike_grid_arguments`' options (a bad value is refused
    naming its option)."""
    for name in ("lookalike_grid_m", "lookalike_heading_deg"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    return GoalAuditConfig(grid_m=args.lookalike_grid_m, heading_deg=args.lookalike_heading_deg)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=default_data_dir(),
                        metavar="DIR", help="output folder (scenes/, episodes/)")
    parser.add_argument("--houses", type=int, default=24, metavar="N", help="number of houses")
    parser.add_argument("--seed", type=int, default=0, help="random seed (same seed, same bytes)")
    parser.add_argument("--train-episodes", type=int, default=100, metavar="N",
                        help="episodes per train house")
    parser.add_argument("--val-episodes", type=int, default=50, metavar="N", help="episodes per val house")
    parser.add_argument("--test-episodes", type=int, default=125, metavar="N",
                        help="episodes per test house (4 test houses x 125 = 500 with the defaults)")
    parser.add_argument("--min-goal-lookalike-ratio", type=float, default=0.0, metavar="R",
                        help="draw again every goal whose photo a spot more than the success distance away "
                             "reproduces with a look-alike ratio below R (`memnav goal-audit`; 1 = at least as well "
                             "as the goal spot nudged by 5 cm), so that goal photos identify their place; renders "
                             "a grid of views per house first (40-70 s per default house on a 2-core machine) "
                             "and rates each goal in a fraction of a second. 0 = off: every goal is kept, the same "
                             "bytes as without the option")
    add_lookalike_grid_arguments(parser, "--min-goal-lookalike-ratio")
    parser.add_argument("--force", action="store_true", help="regenerate even if DIR is complete")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    for name in ("houses", "train_episodes", "val_episodes", "test_episodes"):
        if getattr(args, name) < (1 if name == "houses" else 0):
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    check_output_dir(args.out, "--out")
    try:
        sampling = EpisodeSamplingConfig(min_goal_lookalike_ratio=args.min_goal_lookalike_ratio)
    except ValueError as err:
        raise ValueError(f"--min-goal-lookalike-ratio: {err}") from None
    lookalikes = lookalike_grid(args)
    if sampling.min_goal_lookalike_ratio == 0:   # the search runs only for the goal filter
        given = [f"--{name.replace('_', '-')}" for name, default in (("lookalike_grid_m", GoalAuditConfig.grid_m),
                                                                     ("lookalike_heading_deg",
                                                                      GoalAuditConfig.heading_deg))
                 if getattr(args, name) != default]
        if given:
            raise ValueError(f"{', '.join(given)}: {'has' if len(given) == 1 else 'have'} no effect without "
                             "--min-goal-lookalike-ratio (the look-alike search runs only for the goal filter)")
    per_split = {"train": args.train_episodes, "val": args.val_episodes, "test": args.test_episodes}
    marker = args.out / ".complete"
    if marker.exists() and not args.force:
        try:
            done = json.loads(marker.read_text())
        except json.JSONDecodeError:
            done = {}
        # the marker does not hold the episodes asked per house; splits.json holds how many each split got
        labels = assign_splits(args.houses)
        wanted = {s: per_split[s] * labels.count(s) for s in SPLITS}
        if done == completion_marker(args.houses, args.seed, sampling, lookalikes) and \
                stored_episode_counts(args.out) == wanted:
            print(f"{args.out}: already holds {args.houses} houses for seed {args.seed} (use --force to redo)")
            return 0
    summary = generate_dataset(args.out, args.houses, args.seed, per_split, sampling, progress=not args.no_progress,
                               lookalikes=lookalikes)
    print(f"wrote {args.houses} houses to {args.out / 'scenes'}; episodes: "
          + ", ".join(f"{s}={n}" for s, n in summary["episodes"].items()))
    return 0
