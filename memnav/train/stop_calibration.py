"""`memnav train stop`: fit the stop controller's goal belief on train houses, check it on val houses.

Examples: a goal photo at a random pose, and a current view at a pose 0-4 m from the goal position
(heading near the goal heading, as at the end of a navigation run). Features: cosine similarity of the
encoder embeddings and the geometric verification score; label: geodesic distance below the success
radius (1 m). A logistic model maps features to P(goal within radius); the reliability diagram on the
val houses shows whether that probability can be trusted (what the VoI rule needs).
The calibration names the encoder checkpoint it was fitted on: `checkpoint` (the path as given) and
`checkpoint_sha256` (memnav.core.checkpoint.checkpoint_sha256 of its bytes), which stop_node checks against the
checkpoint the encoder node announces.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from memnav.cli import add_camera_arguments, camera_options
from memnav.core.checkpoint import checkpoint_sha256
from memnav.core.encoder import Encoder
from memnav.core.files import replace_files
from memnav.core.stop import STOP_FEATURES, GoalBeliefCalibrator
from memnav.core.verification import verify_pair
from memnav.eval.report import figure_png
from memnav.paths import check_output_file
from memnav.sim.base import SimConfig
from memnav.sim.dataset import default_data_dir
from memnav.train.frame_bank import checked_houses

FEATURES = STOP_FEATURES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("models/stop_calibration.json"), metavar="PATH",
                        help="calibration JSON to write (the reliability diagram goes beside it, as .png)")
    parser.add_argument("--checkpoint", type=Path, default=Path("models/encoder.pt"), metavar="PATH",
                        help="encoder checkpoint whose embedding similarity is one of the belief's features")
    parser.add_argument("--data", type=Path, default=default_data_dir(),
                        metavar="DIR", help="generated dataset (train houses fit, val houses check)")
    parser.add_argument("--examples-per-house", type=int, default=150, metavar="N",
                        help="rendered goal/current view pairs per house (train and val houses alike), >= 1")
    parser.add_argument("--max-distance", type=float, default=4.0, metavar="M",
                        help="current views are placed up to this far from the goal position, meters")
    parser.add_argument("--success-distance", type=float, default=1.0, metavar="M",
                        help="success radius: a current view within this geodesic distance of the goal is a "
                             "positive example, meters (below --max-distance)")
    add_camera_arguments(parser, "the goal photos and current views are rendered with (fit the belief for the "
                                 "camera the robot has)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="random seed, >= 0")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def make_examples(encoder: Encoder, houses: list[Path], per_house: int, max_dist_m: float, radius_m: float,
                  seed: int, desc: str, progress: bool = True,
                  camera: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features (N, 2), labels (N,)) from rendered goal/current view pairs; `camera`: SimConfig's camera fields
    (`memnav.cli.camera_options`; default: the simulator's camera)."""
    from tqdm import tqdm

    from memnav.sim.embedded import EmbeddedSimulator

    rng = np.random.default_rng(seed)
    sim = EmbeddedSimulator(config=SimConfig(seed=seed, **(camera or {})))
    feats, labels = [], []
    bar = tqdm(total=len(houses) * per_house, desc=desc, unit="ex", file=sys.stderr, disable=not progress)
    for scene in houses:
        sim.load_scene(scene)
        n = 0
        while n < per_house:
            goal = sim.sample_navigable_point()
            goal_yaw = float(rng.uniform(-math.pi, math.pi))
            r = max_dist_m * math.sqrt(rng.random())
            a = rng.uniform(-math.pi, math.pi)
            cur = goal + np.array([r * math.cos(a), 0.0, r * math.sin(a)])
            if not sim.is_navigable(cur):
                continue
            geo = sim.geodesic_distance(cur, goal)
            if not math.isfinite(geo):
                continue
            yaw = goal_yaw + rng.normal(0.0, math.radians(45))
            g_obs, c_obs = sim.render_at(goal, goal_yaw), sim.render_at(cur, yaw)
            e = encoder.encode_batch(np.stack([g_obs.rgb, c_obs.rgb]), np.stack([g_obs.depth, c_obs.depth]))
            feats.append((float(e[0] @ e[1]), verify_pair(g_obs.rgb, c_obs.rgb).score))
            labels.append(geo < radius_m)
            n += 1
            bar.update(1)
        sim.close()
    bar.close()
    return np.asarray(feats), np.asarray(labels, dtype=bool)


def plot_reliability(rel: dict, path: Path, title: str) -> None:
    """Write the reliability diagram to `path` (PNG, replaced atomically)."""
    replace_files({path: reliability_png(rel, title)})


def reliability_png(rel: dict, title: str) -> bytes:
    """The reliability diagram of `GoalBeliefCalibrator.reliability`'s `rel`, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    try:
        ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
        pred, freq = np.array(rel["mean_predicted"]), np.array(rel["observed_frequency"])
        ok = np.isfinite(pred)
        ax.plot(pred[ok], freq[ok], "o-", label=f"fitted belief (ECE {rel['ece']:.3f})")
        ax.set(xlabel="predicted P(goal within radius)", ylabel="observed frequency", title=title, xlim=(0, 1),
               ylim=(0, 1))
        ax.legend(loc="upper left")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        return figure_png(fig, dpi=90)
    finally:
        plt.close(fig)


def _check_options(args: argparse.Namespace) -> None:
    """Refuse option values the fit cannot use, naming the option as typed (checks that need no files)."""
    if args.examples_per_house < 1:
        raise ValueError(f"--examples-per-house must be >= 1, got {args.examples_per_house}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    for name, value in (("--max-distance", args.max_distance), ("--success-distance", args.success_distance)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite distance > 0, meters, got {value:g}")
    if args.success_distance >= args.max_distance:
        raise ValueError(f"--success-distance ({args.success_distance:g} m) must be below --max-distance "
                         f"({args.max_distance:g} m), or no example lies outside the success radius")
    check_output_file(args.out, "--out")
    if args.out.suffix.lower() == ".png":
        raise ValueError(f"--out {args.out}: the reliability diagram is written to <out>.png; give the JSON "
                         f"another suffix (e.g. .json)")


def run(args: argparse.Namespace) -> int:
    import torch

    _check_options(args)
    camera = camera_options(args)
    train_houses = checked_houses(args.data, "train", "--data")
    val_houses = checked_houses(args.data, "val", "--data")
    torch.set_num_threads(2)
    encoder = Encoder.from_checkpoint(args.checkpoint)
    # the checkpoint's identity: stop_node compares it with the one the encoder node announces it runs
    sha256 = checkpoint_sha256(args.checkpoint)
    train_x, train_y = make_examples(encoder, train_houses, args.examples_per_house,
                                     args.max_distance, args.success_distance, args.seed, "train examples",
                                     not args.no_progress, camera)
    val_x, val_y = make_examples(encoder, val_houses, args.examples_per_house,
                                 args.max_distance, args.success_distance, args.seed + 1, "val examples",
                                 not args.no_progress, camera)
    cal = GoalBeliefCalibrator(feature_names=FEATURES).fit(train_x, train_y)
    rel_train, rel_val = cal.reliability(train_x, train_y), cal.reliability(val_x, val_y)
    out = dict(cal.to_dict(), success_distance_m=args.success_distance, checkpoint=str(args.checkpoint),
               checkpoint_sha256=sha256,
               hfov_deg=camera["hfov_deg"], camera_height_m=camera["sensor_height_m"],
               image_px=[camera["width_px"], camera["height_px"]],
               examples={"train": int(len(train_y)), "val": int(len(val_y))},
               positive_rate={"train": float(train_y.mean()), "val": float(val_y.mean())},
               ece={"train": rel_train["ece"], "val": rel_val["ece"]}, reliability_val=rel_val)
    # the calibration (read by the policy node) and its diagram replace the old ones together, never half written
    replace_files({args.out: (json.dumps(out, indent=2) + "\n").encode(),
                   args.out.with_suffix(".png"): reliability_png(rel_val, "goal belief on val houses")}, sync=True)
    print(f"wrote {args.out}: weights {np.round(cal.weights, 3).tolist()}, ECE train {rel_train['ece']:.3f} "
          f"val {rel_val['ece']:.3f}")
    return 0
