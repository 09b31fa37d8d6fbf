"""`memnav bench relocalise`: how a stored memory relocalises a robot that was carried elsewhere.

Per test house: a mapping walk (`--map-steps` views, 0.25 m apart along shortest paths between random points,
exact odometry) builds a memory with the encoder's embeddings of the embedded simulator's RGB-D frames. Then
`--trials` kidnappings: the robot stands at a random pose, its odometry frame is moved by a random rigid
transform (as if it had been carried, or its odometry restarted), `SceneGraphMemory.relocalise()` is called on a
fresh copy of the memory's database, and the robot walks `--trial-steps` views along a shortest path. The same
views are replayed for each `--confirmations` value (`SceneGraphConfig.relocalisation_confirmations`).

Reported per setting (`by_confirmations`): the fraction of trials relocalised within the walk, the fraction
relocalised wrongly (more than `--wrong-m` from the true position at that moment) and still wrong after the walk,
the steps it took (p50), the position error after the walk (p50, relocalised trials), and the fraction of the
places the walks added that lie more than `--wrong-m` from where their view was taken (places stored before the
memory relocalised are moved with it). Top-level keys repeat them for the default setting.
"""
from __future__ import annotations

import argparse
import itertools
import math
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from memnav.cli import BenchParts
from memnav.core.encoder import Encoder
from memnav.core.frames import pose2d_from_habitat
from memnav.core.memory import InsertKind, SceneGraphConfig, SceneGraphMemory
from memnav.sim.base import RENDERERS, SimConfig
from memnav.sim.dataset import default_data_dir
from memnav.train.frame_bank import along_path, houses_of_split

STEP_M = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=Path("models/encoder.pt"), help="encoder checkpoint")
    parser.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                        help="generated dataset (memnav scenes) whose houses are used")
    parser.add_argument("--split", choices=("train", "val", "test"), default="test", help="houses of this split")
    parser.add_argument("--max-houses", type=int, default=0, metavar="N", help="only the first N houses (0 = all)")
    parser.add_argument("--map-steps", type=int, default=600,
                        help="views of the mapping walk per house (0.25 m apart)")
    parser.add_argument("--trials", type=int, default=25, help="kidnappings per house")
    parser.add_argument("--trial-steps", type=int, default=60, help="views walked after each kidnapping")
    parser.add_argument("--confirmations", type=int, nargs="+", default=[1, 2, 3], metavar="N",
                        help="relocalisation_confirmations values compared on the same walks")
    parser.add_argument("--wrong-m", type=float, default=2.0,
                        help="a relocalisation farther than this from the true position counts as wrong, m")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the walks and kidnappings")
    parser.add_argument("--renderer", choices=RENDERERS, default="auto", help="the simulator's ray caster")


def _walk(sim, rng: np.random.Generator, n: int) -> list[tuple[np.ndarray, float]]:
    """n (Habitat position, yaw) views STEP_M apart, facing along shortest paths between random points."""
    views: list[tuple[np.ndarray, float]] = []
    here = sim.sample_navigable_point()
    while len(views) < n:
        path = sim.shortest_path(here, sim.sample_navigable_point())
        views.extend(itertools.islice(along_path(path, STEP_M), n - len(views)))
        here = path[-1]
        if len(path) < 2:     # unreachable goal: start somewhere else
            here = sim.sample_navigable_point()
    return views


def _embed(sim, encoder: Encoder, views: list[tuple[np.ndarray, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings (n, D), map-frame poses (n, 3)) of the views."""
    rgb, depth, poses = [], [], []
    for pos, yaw in views:
        obs = sim.render_at(pos, yaw)
        rgb.append(obs.rgb)
        depth.append(obs.depth)
        poses.append(pose2d_from_habitat(pos, yaw))
    return encoder.encode_batch(np.stack(rgb), np.stack(depth)), np.asarray(poses)


def _moved(poses: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The poses seen from an odometry frame moved by a random rigid transform (up to 20 m, any heading)."""
    theta = rng.uniform(-math.pi, math.pi)
    t = rng.uniform(-20.0, 20.0, 2)
    c, s = math.cos(theta), math.sin(theta)
    x, y = poses[:, 0], poses[:, 1]
    return np.stack([c * x - s * y + t[0], s * x + c * y + t[1], poses[:, 2] + theta], axis=1)


def _trial(db: Path, work: Path, dim: int, confirmations: int, emb: np.ndarray, true: np.ndarray,
           odom: np.ndarray, wrong_m: float) -> dict:
    copy = work / "trial.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    shutil.copyfile(db, copy)
    cfg = SceneGraphConfig(embedding_dim=dim, db_path=str(copy), relocalisation_confirmations=confirmations)
    with SceneGraphMemory(cfg) as memory:
        memory.relocalise()
        stamp0 = (memory.stats().last_stamp_ns or 0) + 3600 * 10**9
        at, error_at = None, None
        created: dict[int, int] = {}      # place id -> the view that created it
        for i in range(len(emb)):
            result = memory.insert_observation(stamp0 + i * 10**9, odom[i], emb[i])
            if result.kind is InsertKind.NEW_PLACE:
                created[result.node_id] = i
            if at is None and memory.localised:
                p = memory.to_memory_frame(odom[i])
                at, error_at = i + 1, math.hypot(p.x_m - true[i, 0], p.y_m - true[i, 1])
        end = memory.to_memory_frame(odom[-1])
        error_end = math.hypot(end.x_m - true[-1, 0], end.y_m - true[-1, 1]) if at is not None else None
        kept = [(memory.place(n).pose, true[i]) for n, i in created.items() if n in memory.graph]
        misplaced = sum(math.hypot(p.x_m - t[0], p.y_m - t[1]) > wrong_m for p, t in kept)
    return {"steps": at, "error_at_m": error_at, "error_end_m": error_end, "new_places": len(kept),
            "misplaced_places": misplaced,
            "wrong": at is not None and error_at > wrong_m,
            "wrong_end": error_end is not None and error_end > wrong_m}


def _summary(trials: list[dict]) -> dict:
    done = [t for t in trials if t["steps"] is not None]
    med = lambda xs: round(float(np.median(xs)), 3) if xs else None  # noqa: E731
    return {"trials": len(trials), "relocalised_fraction": round(len(done) / max(len(trials), 1), 3),
            "wrong_relocalisation_fraction": round(sum(t["wrong"] for t in trials) / max(len(trials), 1), 3),
            "wrong_after_walk_fraction": round(sum(t["wrong_end"] for t in trials) / max(len(trials), 1), 3),
            "steps_to_relocalise_p50": med([t["steps"] for t in done]),
            "error_at_relocalisation_m_p50": med([t["error_at_m"] for t in done]),
            "error_after_walk_m_p50": med([t["error_end_m"] for t in done]),
            "misplaced_new_places_fraction": round(sum(t["misplaced_places"] for t in trials)
                                                   / max(sum(t["new_places"] for t in trials), 1), 3)}


def run(args: argparse.Namespace) -> dict:
    import torch
    from tqdm import tqdm

    from memnav.sim.embedded import EmbeddedSimulator

    for name in ("map_steps", "trials", "trial_steps", "max_houses"):
        if getattr(args, name) < (0 if name == "max_houses" else 1):
            raise ValueError(f"--{name.replace('_', '-')} must be >= {0 if name == 'max_houses' else 1}, "
                             f"got {getattr(args, name)}")
    if any(c < 1 for c in args.confirmations):
        raise ValueError(f"--confirmations must all be >= 1, got {args.confirmations}")
    confirmations = list(dict.fromkeys(args.confirmations))   # `2 2` compares one setting, not each trial twice
    if not args.wrong_m > 0:
        raise ValueError(f"--wrong-m must be > 0, got {args.wrong_m}")
    encoder = Encoder.from_checkpoint(args.checkpoint)
    torch.set_num_threads(2)
    houses = houses_of_split(args.data, args.split)[:args.max_houses or None]
    rng = np.random.default_rng(args.seed)
    sim = EmbeddedSimulator(config=SimConfig(seed=args.seed, renderer=args.renderer))
    results: dict[int, list[dict]] = {c: [] for c in confirmations}   # the trials of the houses finished
    places: list[int] = []
    default = SceneGraphConfig().relocalisation_confirmations
    out: dict = {"houses": 0, "split": args.split, "checkpoint": str(args.checkpoint), "map_steps": args.map_steps,
                 "trial_steps": args.trial_steps, "places_per_house": [], "wrong_m": args.wrong_m,
                 "default_confirmations": default}
    bar = tqdm(total=len(houses) * (1 + args.trials), desc="relocalise", unit="walk",
               disable=args.no_progress, file=sys.stderr)
    # Ctrl-C: the houses finished before it are still summarised, printed and written (marked interrupted)
    with tempfile.TemporaryDirectory(prefix="memnav_reloc_") as tmp, \
            BenchParts(out, [f"house {scene.stem}" for scene in houses]) as parts:
        work = Path(tmp)
        for h, scene in enumerate(houses):
            sim.load_scene(scene)
            emb, poses = _embed(sim, encoder, _walk(sim, rng, args.map_steps))
            db = work / f"house{h}.db"
            with SceneGraphMemory(SceneGraphConfig(embedding_dim=emb.shape[1], db_path=str(db))) as memory:
                for i in range(len(emb)):
                    memory.insert_observation(i * 10**9, poses[i], emb[i])
                house_places = memory.stats().places
            bar.update(1)
            trials: dict[int, list[dict]] = {c: [] for c in confirmations}
            for _ in range(args.trials):
                emb_t, true = _embed(sim, encoder, _walk(sim, rng, args.trial_steps))
                odom = _moved(true, rng)
                for c in confirmations:
                    trials[c].append(_trial(db, work, emb.shape[1], c, emb_t, true, odom, args.wrong_m))
                bar.update(1)
            sim.close()
            for c in confirmations:
                results[c].extend(trials[c])
            places.append(house_places)
            by = {str(c): _summary(results[c]) for c in confirmations}
            parts.add(f"house {scene.stem}", {"houses": h + 1, "places_per_house": list(places),
                                              "by_confirmations": by, **by.get(str(default), {})})
    bar.close()
    return out
