"""`memnav train encoder`: self-supervised training of the perception encoder.

Views taken within `positive_m` and `positive_deg` of each other should embed close together, all
others apart. Training pairs are rendered by the embedded simulator in the TRAIN houses (random poses
and poses along shortest-path walks, each with a jittered second view); the loss is a symmetric InfoNCE
over the batch where other views of the same place are removed from the negatives, and batches mix a
few houses so most negatives come from the same house (hard negatives). Optional terms: mined look-alikes
(`--mine-every`) and the house bank (`--house-bank-every`, `house_bank_loss`). Augmentations (brightness,
contrast, colour gain, noise, depth noise and dropout, small shifts) make it robust to lighting and
sensor noise. Resumable: the optimiser state, random streams, mined look-alikes, house-bank table and curve
live in `<out>.state`; re-running the same command continues up to `--steps`, and a run stopped and resumed
(`--max-minutes`) trains as the same run uninterrupted (bit for bit on the CPU; on a GPU as far as its
kernels are deterministic). A first Ctrl-C stops the run once the step under way is done, saved there as
`--max-minutes` saves (a second one stops at once). Every save (checkpoint, state, curves) replaces its files
atomically; a NaN or infinite loss stops the run before it is saved. Without `--out`, an existing
models/encoder.pt that no `.state` belongs to (the shipped encoder) is not replaced.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from memnav.cli import add_camera_arguments, camera_options
from memnav.core.checkpoint import file_tag, read_state, torch_bytes
from memnav.core.encoder import SIM_HFOV_DEG, EncoderConfig, FrameEncoder, load_checkpoint, save_checkpoint
from memnav.core.files import replace_files
from memnav.eval.report import figure_png
from memnav.paths import check_output_dir, check_output_file, same_file
from memnav.sim.dataset import default_data_dir
from memnav.train.checks import diverged, output_checkpoint, stop_at_step_end
from memnav.train.frame_bank import (
    NEAR_MISS_M,
    NEAR_MISS_TURN_DEG,
    FrameSet,
    checked_houses,
    dataset_summary,
    houses_of_split,
    recall_at_1,
    render_set,
    same_place,
)

MAX_ASPECT = 2.5   # widest image shape `--aspect-ratios` takes (21:9 is 2.33)
DEFAULT_OUT = Path("models/encoder.pt")   # --out when not given (`output_checkpoint`)


@dataclass
class EncoderTrainConfig:
    """Training settings.

    Attributes:
        steps: total optimisation steps (a resumed run continues up to this).
        batch_pairs: positive pairs per batch.
        houses_per_batch: houses a batch is drawn from (hard negatives come from the same house).
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        temperature: InfoNCE temperature.
        pairs_per_house: rendered training pairs per train house.
        positive_m: positives are rendered within this distance, meters.
        positive_deg: positives are rendered within this heading change, degrees.
        near_miss: also render, for each anchor, a view just outside the same-place criterion (near_miss_m
            away, or turned near_miss_turn_deg; `frame_bank.near_miss_pose`) and add it to the batch as a
            negative. Views a metre or so apart look alike, and random in-batch negatives rarely are that close.
        near_miss_m: distance band of the near misses that moved, meters.
        near_miss_turn_deg: turn band of the near misses that turned in place (within 0.3 m), degrees.
        mine_every: every this many steps (0 = never), embed all training anchors and give each its most
            similar other anchor of the same house that is not the same place (a look-alike) as one more
            negative from then on (`mine_look_alikes`).
        house_bank_every: from this step on (0 = never), also rank each view's positive against every other
            training anchor of its house (`house_bank_loss`), through a table of their embeddings that is
            recomputed in full every this many steps and refreshed for the batch's anchors every step. Anchors
            of the table inside the same-place box count as positives too, so the term asks what the
            retrieval benchmark asks: that some view of the same place outranks every other view of the house.
        colour_gain_std: standard deviation of the per-channel colour gain of the augmentation (white balance);
            brightness and contrast are jittered independently of it. Room colours are a strong cue in these
            houses, so a large gain teaches the network to discard part of it.
        min_hfov_deg: narrower cameras: on half the steps, every view of the batch is cropped about its centre
            to one horizontal field of view drawn from [min_hfov_deg, SIM_HFOV_DEG] (`crop_fov`; exact for
            a pinhole camera, at the bank's resolution), as a robot camera narrower than the simulator's sees
            database and goal alike. SIM_HFOV_DEG (the default) is off.
        aspect_ratios: image shapes (width / height) of the cameras trained for: every step, all views of the
            batch are cropped to one ratio drawn from these (on top of that step's field of view; the vertical
            field of view shrinks with the ratio, square pixels) and stretched back to the square input, as the
            encoder stretches a non-square camera frame. (1.0,) (the default) is off: square views only.
        camera: the simulated camera that renders the training and validation views, as SimConfig fields
            (hfov_deg, sensor_height_m, width_px, height_px, sensor_forward_m, sensor_pitch_deg) where they differ
            from the simulator's 90 deg 128 x 128 camera at 1.25 m ({}, the default): an encoder for one robot's
            camera. A non-square image is stretched to the square input, as the encoder stretches that camera's
            frames; `min_hfov_deg` then crops below the camera's own field of view.
        eval_every: steps between validation recall@1 evaluations.
        seed: random seed.
    """

    steps: int = 3000
    batch_pairs: int = 96
    houses_per_batch: int = 3
    lr: float = 2e-3
    weight_decay: float = 1e-4
    temperature: float = 0.07
    pairs_per_house: int = 1200
    positive_m: float = 0.5
    positive_deg: float = 15.0
    eval_every: int = 250
    near_miss: bool = True
    near_miss_m: tuple[float, float] = NEAR_MISS_M
    near_miss_turn_deg: tuple[float, float] = NEAR_MISS_TURN_DEG
    mine_every: int = 0
    house_bank_every: int = 0
    colour_gain_std: float = 0.1
    min_hfov_deg: float = SIM_HFOV_DEG
    aspect_ratios: tuple[float, ...] = (1.0,)
    camera: dict[str, float] = field(default_factory=dict)
    seed: int = 0


def augment(x: torch.Tensor, gen: torch.Generator,
            colour_gain_std: float = EncoderTrainConfig.colour_gain_std) -> torch.Tensor:
    """Photometric + sensor-noise augmentation of a (B, 4, P, P) batch.

    `gen` is a CPU generator. A batch on a GPU draws its noise there, from a generator seeded by one draw
    of `gen` (so a resumed run draws the same), instead of drawing it on the CPU and copying it over.
    """
    b = x.shape[0]
    rgb, depth = x[:, :3], x[:, 3:]
    if x.device.type == "cpu":
        draw, on = gen, {}
    else:
        draw = torch.Generator(device=x.device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
        on = {"device": x.device}
    gain = 1.0 + colour_gain_std * torch.randn(b, 3, 1, 1, generator=draw, **on)
    bright = 0.7 + 0.6 * torch.rand(b, 1, 1, 1, generator=draw, **on)
    mean = rgb.mean(dim=(1, 2, 3), keepdim=True)
    contrast = 0.7 + 0.6 * torch.rand(b, 1, 1, 1, generator=draw, **on)
    rgb = ((rgb - mean) * contrast + mean) * bright * gain
    rgb = rgb + 0.03 * torch.randn(rgb.shape, generator=draw, **on)
    depth = depth * (1.0 + 0.02 * torch.randn(depth.shape, generator=draw, **on))
    depth = depth * (torch.rand(depth.shape, generator=draw, **on) > 0.05)
    out = torch.cat([rgb.clamp(0, 1), depth.clamp(0, 1)], dim=1)
    # small translations (up to 3 px) stand in for small pose differences
    dx, dy = (int(v) for v in torch.randint(-3, 4, (2,), generator=gen))
    return torch.roll(out, shifts=(dy, dx), dims=(2, 3))


def crop_fov(x: torch.Tensor, hfov_deg: float, base_hfov_deg: float = SIM_HFOV_DEG,
             aspect: float = 1.0) -> torch.Tensor:
    """A (B, 4, P, P) batch of square `base_hfov_deg` views as a narrower pinhole camera of `hfov_deg` would see
    them: the central crop of that field of view, resized back to P x P (colour bilinear, depth nearest: a depth
    reading is never blended across an edge). `aspect` > 1 is a camera whose image is that many times wider than
    high (square pixels, so its vertical field of view is narrower): the crop keeps that many times fewer rows,
    stretched to P x P as the encoder stretches such a camera's frames. `hfov_deg` >= base with `aspect` 1
    returns `x` itself."""
    import torch.nn.functional as F

    if hfov_deg >= base_hfov_deg and aspect == 1.0:
        return x
    p = x.shape[-1]
    ratio = math.tan(math.radians(min(hfov_deg, base_hfov_deg)) / 2) / math.tan(math.radians(base_hfov_deg) / 2)
    width = max(2, round(p * ratio))
    height = max(2, round(p * ratio / aspect))
    top, left = (p - height) // 2, (p - width) // 2
    crop = x[:, :, top:top + height, left:left + width]
    rgb = F.interpolate(crop[:, :3], size=(p, p), mode="bilinear", align_corners=False)
    depth = F.interpolate(crop[:, 3:], size=(p, p), mode="nearest")
    return torch.cat([rgb, depth], dim=1)


def info_nce(za: torch.Tensor, zb: torch.Tensor, same: torch.Tensor, temperature: float,
             zn: torch.Tensor | None = None, same_n: torch.Tensor | None = None,
             same_bn: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric InfoNCE between views a and b (pair i is the positive of i).

    `same` (B, B) marks off-diagonal a/b pairs that are the same place (not used as negatives). Extra
    negatives zn (M, D) join both directions' denominators; `same_n` (B, M) marks the ones that are in fact
    the same place as a_i, `same_bn` those that are as b_i (default: same_n).
    """
    b = len(za)
    eye = torch.eye(b, dtype=torch.bool, device=za.device)
    mask = same & ~eye
    logits_ab = (za @ zb.T / temperature).masked_fill(mask, float("-inf"))
    logits_ba = (zb @ za.T / temperature).masked_fill(mask.T, float("-inf"))
    if zn is not None:
        assert same_n is not None
        logits_ab = torch.cat([logits_ab, (za @ zn.T / temperature).masked_fill(same_n, float("-inf"))], dim=1)
        same_bn = same_n if same_bn is None else same_bn
        logits_ba = torch.cat([logits_ba, (zb @ zn.T / temperature).masked_fill(same_bn, float("-inf"))], dim=1)
    target = torch.arange(b, device=za.device)
    return 0.5 * (torch.nn.functional.cross_entropy(logits_ab, target)
                  + torch.nn.functional.cross_entropy(logits_ba, target))


def house_bank_loss(z: torch.Tensor, partner: torch.Tensor, poses: np.ndarray, house: np.ndarray,
                    own: np.ndarray, table: torch.Tensor, table_poses: np.ndarray, table_house: np.ndarray,
                    temperature: float) -> torch.Tensor:
    """Mean over rows of -log P(a view of the same place) among the row's partner and its house's table views.

    Row i's candidates are its partner view (always a positive) and every table entry of house[i] except
    own[i] (the table entry of the row's own anchor); table entries within the same-place box of poses[i]
    are positives as well. Gradient flows through z and partner, not through the (detached) table.
    """
    losses = []
    for h in np.unique(house):
        rows = np.flatnonzero(house == h)
        cols = np.flatnonzero(table_house == h)
        s_tab = z[rows] @ table[cols].T / temperature
        s_tab = s_tab.masked_fill(torch.from_numpy(cols[None, :] == own[rows, None]).to(z.device), float("-inf"))
        s_pos = (z[rows] * partner[rows]).sum(dim=1, keepdim=True) / temperature
        logits = torch.cat([s_pos, s_tab], dim=1)
        pos = torch.from_numpy(np.concatenate(
            [np.ones((len(rows), 1), dtype=bool),
             same_place(poses[rows], table_poses[cols], house[rows], table_house[cols])], axis=1)).to(z.device)
        losses.append(torch.logsumexp(logits, dim=1) - torch.logsumexp(logits.masked_fill(~pos, float("-inf")), dim=1))
    return torch.cat(losses).mean()


def embed(model: FrameEncoder, frames: np.ndarray, batch: int = 256) -> np.ndarray:
    """Embeddings (N, D) of frames (N, 4, P, P), computed on the model's device in batches."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for i in range(0, len(frames), batch):
            x = torch.from_numpy(frames[i:i + batch]).to(device).float()   # float16 frames cross as such
            out.append(model(x).cpu().numpy())
    return np.concatenate(out)


def resolve_device(name: str) -> torch.device:
    """The torch device for `--device`: auto (CUDA when torch sees a GPU, else the CPU), cpu or cuda[:N]."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"--device: unknown device {name!r} (auto, cpu or cuda[:N])") from err
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device: unsupported device type {device.type!r} (auto, cpu or cuda[:N])")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: this torch build sees no CUDA GPU (torch {torch.__version__}); "
                         "use --device cpu")
    return device


def _bank(data: Path, split: str, per_house: int, enc_cfg: EncoderConfig, seed: int, pairs: bool,
          cache_dir: Path, near_miss: bool = False, jitter: tuple[float, float] = (0.5, 15.0),
          near_miss_m: tuple[float, float] = NEAR_MISS_M, near_miss_turn_deg: tuple[float, float] = NEAR_MISS_TURN_DEG,
          progress: bool = True, workers: int = 0,
          camera: dict[str, float] | None = None) -> tuple[FrameSet, FrameSet | None, FrameSet | None]:
    """Render (or load from the cache) a split's frames: anchors, their positives and near misses.

    workers: `render_set`'s; banks drawn with a stream per house (workers >= 1) are cached under their own
    name, the same for any number of workers. camera: `render_set`'s (SimConfig camera fields other than the
    simulator's), named in the cache key.
    """
    houses = houses_of_split(data, split)
    kind = (f"pairs{jitter[0]:g}m{jitter[1]:g}deg" if pairs else "single") + ("_nearmiss" if near_miss else "")
    if near_miss and (tuple(near_miss_m), tuple(near_miss_turn_deg)) != (NEAR_MISS_M, NEAR_MISS_TURN_DEG):
        kind += f"{near_miss_m[0]:g}-{near_miss_m[1]:g}m{near_miss_turn_deg[0]:g}-{near_miss_turn_deg[1]:g}deg"
    key = f"{split}_{len(houses)}h_{per_house}_{enc_cfg.input_px}px_s{seed}_{kind}_{_dataset_tag(data)}"
    if workers > 0:
        key += "_perhouse"
    if camera:
        key += "_cam" + "-".join(f"{name}{camera[name]:g}" for name in sorted(camera))
    path = cache_dir / f"encoder_bank_{key}.npz"
    if path.is_file():
        z = np.load(path)
        return tuple(FrameSet(z[f"{p}frames"], z[f"{p}poses"], z["house"]) if f"{p}frames" in z else None
                     for p in ("", "p", "n"))
    pair_jitter = (jitter[0], math.radians(jitter[1])) if pairs else None
    sets = render_set(houses, per_house, enc_cfg, seed, pair_jitter=pair_jitter, near_miss=near_miss,
                      near_miss_m=near_miss_m, near_miss_turn_deg=near_miss_turn_deg,
                      desc=f"render {split}", progress=progress, workers=workers, camera=camera)
    cache_dir.mkdir(parents=True, exist_ok=True)
    arrays = {f"{p}{k}": getattr(fs, k) for p, fs in zip(("", "p", "n"), sets) if fs is not None
              for k in ("frames", "poses")}
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, house=sets[0].house, **arrays)
    tmp.replace(path)
    return sets


def _camera_of(args: argparse.Namespace) -> dict[str, float]:
    """The camera options (`add_camera_arguments`) that differ from the simulator's camera, as SimConfig fields
    (a ValueError names a bad option)."""
    from memnav.sim.base import SimConfig

    return {name: value for name, value in camera_options(args).items() if value != getattr(SimConfig, name)}


def _dataset_tag(data: Path) -> str:
    """Short tag of a dataset (its generator seed and house count) so that banks of two datasets never mix."""
    summary = dataset_summary(data)
    return f"d{summary.get('seed', 'x')}n{summary.get('houses', 'x')}"


def _architecture(args: argparse.Namespace, base: EncoderConfig) -> EncoderConfig:
    """The network to train: `base` (the default, or --init's) with --input-px / --widths where given; with
    --init those must match the checkpoint, naming what differs."""
    input_px, widths = getattr(args, "input_px", None), getattr(args, "widths", None)   # None: not given
    if input_px is not None and (input_px % 16 or input_px < 32):
        raise ValueError(f"--input-px must be a multiple of 16 and >= 32 (pixels), got {input_px}")
    if widths is not None and min(widths) < 1:
        raise ValueError(f"--widths must be 4 channel counts >= 1, got {' '.join(map(str, widths))}")
    cfg = EncoderConfig(**{**base.to_dict(), **({"input_px": input_px} if input_px is not None else {}),
                           **({"widths": tuple(widths)} if widths is not None else {})})
    if args.init is not None and cfg != base:
        given = cfg.to_dict()
        diff = ", ".join(f"{k} {v} (given {given[k]})" for k, v in base.to_dict().items() if given[k] != v)
        raise ValueError(f"--init {args.init}: its architecture differs from the options: {diff}; leave "
                         f"--input-px / --widths out to fine-tune it as it is")
    return cfg


def _init_tag(path: Path | None) -> str | None:
    """What a run started from, for refusing a resume from another start: the checkpoint's file name and a
    digest of its bytes (None: a random initialisation)."""
    return None if path is None else file_tag(path)


def _check_options(cfg: EncoderTrainConfig, args: argparse.Namespace) -> None:
    """Refuse option values training cannot use, naming the option as typed (checks that need no files)."""
    for name, value, least, what in (("--steps", cfg.steps, 1, "training steps"),
                                     ("--batch", cfg.batch_pairs, 2, "positive pairs per batch"),
                                     ("--pairs-per-house", cfg.pairs_per_house, 1, "rendered pairs per house"),
                                     ("--eval-every", cfg.eval_every, 1, "steps between evaluations"),
                                     ("--threads", args.threads, 1, "torch CPU threads"),
                                     ("--render-workers", getattr(args, "render_workers", 0), 0, "rendering processes"),
                                     ("--seed", cfg.seed, 0, "random seed")):
        if value < least:
            raise ValueError(f"{name} must be >= {least} ({what}), got {value}")
    for name, every in (("--mine-every", cfg.mine_every), ("--house-bank-every", cfg.house_bank_every)):
        if every < 0:
            raise ValueError(f"{name} must be >= 0 (0 = off), got {every}")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {cfg.lr:g}")
    for name, value in (("--positive-m", cfg.positive_m), ("--positive-deg", cfg.positive_deg)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value:g}")
    if args.max_minutes is not None and not (args.max_minutes >= 0):
        raise ValueError(f"--max-minutes must be >= 0 (leave it out for no limit), got {args.max_minutes:g}")
    if not 0 <= cfg.colour_gain_std < 1:
        raise ValueError(f"--colour-gain must be in [0, 1), got {cfg.colour_gain_std:g}")
    if not (math.isfinite(cfg.min_hfov_deg) and 20 <= cfg.min_hfov_deg <= SIM_HFOV_DEG):
        raise ValueError(f"--min-hfov-deg must be in [20, {SIM_HFOV_DEG:g}] degrees ({SIM_HFOV_DEG:g} = off), "
                         f"got {cfg.min_hfov_deg:g}")
    width, height = cfg.camera.get("width_px", 1), cfg.camera.get("height_px", 1)
    if cfg.aspect_ratios != (1.0,) and width != height:
        raise ValueError(f"--aspect-ratios crops square views to other shapes: leave it out with a non-square "
                         f"--image-px ({width:g} x {height:g}, whose views already have that shape)")
    base_hfov = cfg.camera.get("hfov_deg", SIM_HFOV_DEG)
    if SIM_HFOV_DEG > cfg.min_hfov_deg > base_hfov:
        raise ValueError(f"--min-hfov-deg {cfg.min_hfov_deg:g} is wider than the {base_hfov:g} deg the views are "
                         f"rendered with (--hfov-deg): give a narrower one, or leave it out")
    bad = [r for r in cfg.aspect_ratios if not (math.isfinite(r) and 1.0 <= r <= MAX_ASPECT)]
    if bad:
        raise ValueError(f"--aspect-ratios must each be a width / height ratio in [1, {MAX_ASPECT:g}] (1 = square, "
                         f"1.778 = 16:9), got {' '.join(f'{r:g}' for r in bad)}")
    for name, (lo, hi) in (("--near-miss-m", cfg.near_miss_m), ("--near-miss-turn-deg", cfg.near_miss_turn_deg)):
        if not 0 <= lo < hi:
            raise ValueError(f"{name} MIN MAX needs 0 <= MIN < MAX, got {lo:g} {hi:g}")


# what `run` reads back from `<out>.state` (the architecture and data settings are optional: older states)
_STATE_KEYS = ("model", "opt", "sched", "gen", "rng", "curve", "step", "total_steps")


def _read_state(state_path: Path) -> dict:
    """The resumable state `run` saved in `state_path` (a ValueError naming the file otherwise)."""
    return read_state(state_path, _STATE_KEYS, "memnav train encoder",
                      "pass --restart to start over (it is then replaced) or move it away")


def _refuse_changed(state_path: Path, what: str, started: dict, now: dict) -> None:
    """Refuse to resume a run whose saved settings differ from this command's, naming each field."""
    if started != now:
        diff = ", ".join(f"{k} {started.get(k)} (now {v})" for k, v in now.items() if started.get(k) != v)
        raise ValueError(f"{state_path}: was started with other {what}: {diff}; pass the same options to resume "
                         f"or --restart to start over")


def mine_look_alikes(model: FrameEncoder, anchors: FrameSet, emb: np.ndarray | None = None) -> np.ndarray:
    """For each anchor, the index of the most similar anchor of its house that is not the same place.

    `emb` (optional): the anchors' embeddings by this model, if already computed.
    """
    emb = embed(model, anchors.frames) if emb is None else emb
    mined = np.arange(len(emb))
    for h in np.unique(anchors.house):
        ids = np.flatnonzero(anchors.house == h)
        sims = emb[ids] @ emb[ids].T
        sims[same_place(anchors.poses[ids], anchors.poses[ids], anchors.house[ids], anchors.house[ids])] = -np.inf
        best = sims.argmax(axis=1)
        ok = np.isfinite(sims[np.arange(len(ids)), best])
        mined[ids[ok]] = ids[best[ok]]
    return mined


def validation_recall(model: FrameEncoder, db: FrameSet, queries: FrameSet) -> float:
    match = same_place(queries.poses, db.poses, queries.house, db.house)
    r, _ = recall_at_1(embed(model, db.frames), embed(model, queries.frames), match)
    return r


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = EncoderTrainConfig()
    parser.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="encoder checkpoint to write; the resumable state goes to PATH.state and the "
                             f"training curves beside it (.curve.json, .curve.png); default {DEFAULT_OUT}, which "
                             "a new run does not replace when it exists without PATH.state (the shipped encoder): "
                             "give --out to replace it")
    parser.add_argument("--data", type=Path, default=default_data_dir(),
                        metavar="DIR", help="generated dataset whose train houses are trained on")
    parser.add_argument("--val-data", type=Path, default=None, metavar="DIR",
                        help="dataset whose val houses give the validation recall@1 (default: --data); lets a "
                             "run on a larger generated dataset be compared with runs on the default one")
    parser.add_argument("--steps", type=int, default=d.steps, metavar="STEPS",
                        help="total optimisation steps, one batch each (a resumed run continues up to STEPS)")
    parser.add_argument("--batch", type=int, default=d.batch_pairs, metavar="PAIRS",
                        help="positive pairs (two views of one place) per training batch, >= 2")
    parser.add_argument("--lr", type=float, default=d.lr, metavar="LR",
                        help="AdamW peak learning rate (linear warm-up, then cosine decay to 0 over --steps)")
    parser.add_argument("--pairs-per-house", type=int, default=d.pairs_per_house, metavar="PAIRS",
                        help="training pairs rendered per train house (rendered once, then read from the cache)")
    parser.add_argument("--eval-every", type=int, default=d.eval_every, metavar="STEPS",
                        help="training steps between validation recall@1 evaluations (each one also saves the "
                             "checkpoint and state)")
    parser.add_argument("--max-minutes", type=float, default=None, metavar="MIN",
                        help="stop cleanly after this many minutes of training, wall clock (state saved; re-run "
                             "to continue); default: no limit (0 stops after the first step)")
    parser.add_argument("--restart", action="store_true", help="ignore an existing <out>.state and start over")
    parser.add_argument("--init", type=Path, default=None, metavar="CHECKPOINT",
                        help="fine-tune: start from this encoder checkpoint's weights instead of a random "
                             "initialisation (its architecture is used; --input-px / --widths, when given, must "
                             "match it); the schedule (warm-up, cosine decay over --steps) starts afresh")
    parser.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                        help="where rendered frame banks are cached (unset: each dataset's own DIR/cache)")
    e = EncoderConfig()
    parser.add_argument("--input-px", type=int, default=argparse.SUPPRESS, metavar="PX",
                        help=f"network input size in pixels (frames are resized to PX x PX; multiple of 16; "
                             f"default: {e.input_px}, or --init's)")
    parser.add_argument("--widths", type=int, nargs=4, default=argparse.SUPPRESS, metavar="C",
                        help=f"channels of the four convolution stages (default: {' '.join(map(str, e.widths))}, "
                             f"or --init's)")
    parser.add_argument("--positive-m", type=float, default=d.positive_m, metavar="M",
                        help="each anchor's positive view is rendered within this distance, meters")
    parser.add_argument("--positive-deg", type=float, default=d.positive_deg, metavar="DEG",
                        help="... and within this heading change, degrees")
    parser.add_argument("--no-near-miss", action="store_true",
                        help="train without the rendered near-miss negatives (views {:g}-{:g} m away or turned "
                             "{:g}-{:g} deg by default); the shipped models/encoder.pt was trained without them"
                             .format(*NEAR_MISS_M, *NEAR_MISS_TURN_DEG))
    parser.add_argument("--near-miss-m", type=float, nargs=2, default=list(d.near_miss_m), metavar=("MIN", "MAX"),
                        help="distance band of the near-miss negatives that moved, meters (the success radius is 1)")
    parser.add_argument("--near-miss-turn-deg", type=float, nargs=2, default=list(d.near_miss_turn_deg),
                        metavar=("MIN", "MAX"), help="turn band of the near misses that turned in place, degrees "
                                                     "(the success criterion allows 30)")
    parser.add_argument("--mine-every", type=int, default=d.mine_every, metavar="STEPS",
                        help="every STEPS steps, give each anchor its current closest look-alike (same house, not "
                             "the same place) as an extra negative; 0 = off")
    parser.add_argument("--house-bank-every", type=int, default=d.house_bank_every, metavar="STEPS",
                        help="from step STEPS on, also rank each positive against every other training anchor of "
                             "its house (embeddings re-computed every STEPS steps; table views within 1 m / 30 deg "
                             "count as positives); 0 = off")
    parser.add_argument("--colour-gain", type=float, default=d.colour_gain_std, metavar="STD",
                        help="standard deviation of the augmentation's per-channel colour gain (white balance); "
                             "brightness and contrast jitter are separate")
    parser.add_argument("--min-hfov-deg", type=float, default=d.min_hfov_deg, metavar="DEG",
                        help="also train for narrower cameras than the simulator's 90 deg: on half the steps all "
                             "views of the batch are cropped to one field of view drawn from [DEG, 90] (a robot's "
                             f"RealSense colour stream is about 69); {SIM_HFOV_DEG:g} = off")
    parser.add_argument("--aspect-ratios", type=float, nargs="+", default=list(d.aspect_ratios), metavar="R",
                        help="also train for cameras whose image is not square: every step, all views of the batch "
                             "are cropped to one width / height ratio drawn from these (on top of --min-hfov-deg's "
                             "crop) and stretched back to the square input, as the encoder stretches such a "
                             "camera's frames (e.g. 1 1.333 1.778 for square, 4:3 and 16:9); 1 = square only")
    add_camera_arguments(parser, "the training and validation views are rendered with (an encoder for one "
                                 "robot's camera)")
    parser.add_argument("--seed", type=int, default=d.seed, metavar="N",
                        help="random seed (poses, batches, augmentation, initialisation), >= 0")
    parser.add_argument("--threads", type=int, default=2, metavar="N", help="torch CPU threads, >= 1")
    parser.add_argument("--device", default="auto", metavar="DEV",
                        help="where the network trains: auto (a CUDA GPU when torch sees one, else the CPU), cpu "
                             "or cuda[:N]; frames are rendered and augmented on the CPU either way")
    parser.add_argument("--render-workers", type=int, default=0, metavar="N",
                        help="render the training houses in N worker processes, each house from a random stream "
                             "of its own (the same frames for any N >= 1, cached apart from N = 0's); 0 (the "
                             "default) renders them in this process from one stream, as every run in the README "
                             "before this option")
    parser.add_argument("--no-progress", action="store_true",
                        help="hide the progress bars (frame rendering and training)")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    cfg = EncoderTrainConfig(steps=args.steps, batch_pairs=args.batch, lr=args.lr,
                             pairs_per_house=args.pairs_per_house, eval_every=args.eval_every, seed=args.seed,
                             near_miss=not args.no_near_miss, positive_m=args.positive_m,
                             positive_deg=args.positive_deg, near_miss_m=tuple(args.near_miss_m),
                             near_miss_turn_deg=tuple(args.near_miss_turn_deg), mine_every=args.mine_every,
                             house_bank_every=args.house_bank_every, colour_gain_std=args.colour_gain,
                             min_hfov_deg=args.min_hfov_deg, aspect_ratios=tuple(args.aspect_ratios),
                             camera=_camera_of(args))
    # every option is checked before the first frame is rendered (minutes of work on a real dataset)
    _check_options(cfg, args)
    args.out = output_checkpoint(args.out, DEFAULT_OUT)
    check_output_file(args.out, "--out")
    if args.cache_dir is not None:
        check_output_dir(args.cache_dir, "--cache-dir")
    device = resolve_device(args.device)
    if args.init is not None and same_file(args.init, args.out):
        raise ValueError(f"--init {args.init} is also --out: write the fine-tuned encoder to another file (a "
                         f"resumed run checks that --init is unchanged)")
    init = load_checkpoint(args.init) if args.init is not None else None
    enc_cfg = _architecture(args, init.cfg if init is not None else EncoderConfig())
    train_houses = len(checked_houses(args.data, "train", "--data"))
    val_data = args.val_data or args.data
    checked_houses(val_data, "val", "--val-data" if args.val_data else "--data")
    batch_houses = min(cfg.houses_per_batch, train_houses)
    if cfg.batch_pairs < batch_houses:
        raise ValueError(f"--batch must be >= {batch_houses} (a batch takes pairs from {batch_houses} train "
                         f"houses), got {cfg.batch_pairs}")
    torch.set_num_threads(args.threads)
    data_config = {**{k: getattr(cfg, k) for k in ("near_miss", "positive_m", "positive_deg")},
                   "near_miss_m": list(cfg.near_miss_m), "near_miss_turn_deg": list(cfg.near_miss_turn_deg),
                   "mine_every": cfg.mine_every, "house_bank_every": cfg.house_bank_every,
                   "colour_gain_std": cfg.colour_gain_std, "min_hfov_deg": cfg.min_hfov_deg,
                   "aspect_ratios": list(cfg.aspect_ratios), "camera": cfg.camera,
                   "dataset": _dataset_tag(args.data), "val_dataset": _dataset_tag(val_data),
                   "init": _init_tag(args.init),
                   "house_streams": getattr(args, "render_workers", 0) > 0}
    # settings the optimisation depends on beyond the data and architecture (--steps is checked on its own)
    train_config = {k: getattr(cfg, k) for k in ("lr", "batch_pairs", "pairs_per_house", "seed", "houses_per_batch",
                                                 "weight_decay", "temperature")}
    state_path = args.out.with_name(args.out.name + ".state")
    st = _read_state(state_path) if state_path.is_file() and not args.restart else None
    if st is not None:
        if st["total_steps"] != cfg.steps:
            raise ValueError(f"{state_path}: was started for --steps {st['total_steps']}; pass the same "
                             f"--steps to resume or --restart to start over")
        # states written before these options existed: the default network, no near misses, 0.5 m / 15 deg
        # pairs, the default near-miss bands, the dataset of this command
        _refuse_changed(state_path, "architecture", st.get("encoder_config", EncoderConfig().to_dict()),
                        enc_cfg.to_dict())
        _refuse_changed(state_path, "training data",
                        {"near_miss": False, "positive_m": 0.5, "positive_deg": 15.0,
                         "near_miss_m": list(NEAR_MISS_M), "near_miss_turn_deg": list(NEAR_MISS_TURN_DEG),
                         "mine_every": 0, "house_bank_every": 0, "colour_gain_std": 0.1,
                         "min_hfov_deg": SIM_HFOV_DEG, "aspect_ratios": [1.0], "camera": {},
                         "dataset": data_config["dataset"], "val_dataset": data_config["val_dataset"],
                         "init": None, "house_streams": False,
                         **st.get("data_config", {})}, data_config)
        if "train_config" in st:   # states written before it was recorded are not checked for these
            _refuse_changed(state_path, "training settings", st["train_config"], train_config)
    progress = not args.no_progress
    train_a, train_b, train_n = _bank(args.data, "train", cfg.pairs_per_house, enc_cfg, cfg.seed, True,
                                      args.cache_dir or (args.data / "cache"), near_miss=cfg.near_miss,
                                      jitter=(cfg.positive_m, cfg.positive_deg), near_miss_m=cfg.near_miss_m,
                                      near_miss_turn_deg=cfg.near_miss_turn_deg, progress=progress,
                                      workers=getattr(args, "render_workers", 0), camera=cfg.camera)
    val_cache = args.cache_dir or (val_data / "cache")
    val_db = _bank(val_data, "val", 300, enc_cfg, cfg.seed + 1, False, val_cache, progress=progress,
                   camera=cfg.camera)[0]
    val_q = _bank(val_data, "val", 100, enc_cfg, cfg.seed + 2, False, val_cache, progress=progress,
                  camera=cfg.camera)[0]
    assert train_b is not None

    torch.manual_seed(cfg.seed)
    model = FrameEncoder(enc_cfg)
    if init is not None:
        model.load_state_dict(init.state_dict())
        print(f"starting from the weights of {args.init}", file=sys.stderr)
    model = model.to(device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True   # fixed batch shapes: let cuDNN pick its fastest kernels
    embed_batch = 2048 if device.type == "cuda" else 256
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = max(1, min(100, cfg.steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1.0 + math.cos(math.pi * min(1.0, s / cfg.steps))))
    curve: dict = {"step": [], "loss": [], "val_step": [], "val_recall_at_1": []}
    step = 0
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    if st is not None:
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        gen.set_state(st["gen"])
        rng.bit_generator.state = st["rng"]
        curve, step = st["curve"], st["step"]
        print(f"resuming {args.out} at step {step}/{cfg.steps}", file=sys.stderr)

    houses = np.unique(train_a.house)
    by_house = {h: np.flatnonzero(train_a.house == h) for h in houses}
    mined: np.ndarray | None = None
    table: torch.Tensor | None = None
    table_step = -1  # the step at which `table` was last computed in full
    if st is not None and st.get("mined") is not None:   # states before these were kept recompute them
        mined = st["mined"].numpy()
    if st is not None and st.get("table") is not None:
        table, table_step = st["table"].to(device), st["table_step"]
    saved_step = step if st is not None else None

    def save_state() -> None:
        nonlocal saved_step
        # the checkpoint refuses NaN weights; the state and curves are written together after it
        save_checkpoint(model, args.out, extra={"train_config": asdict(cfg), "step": step,
                                                 "val_recall_at_1": (curve["val_recall_at_1"] or [None])[-1]})
        keep_table = cfg.house_bank_every > 0 and table is not None
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                 "gen": gen.get_state(), "rng": rng.bit_generator.state, "curve": curve, "step": step,
                 "total_steps": cfg.steps, "data_config": data_config, "train_config": train_config,
                 "encoder_config": enc_cfg.to_dict(),
                 "mined": torch.from_numpy(mined) if mined is not None else None,
                 "table": table.cpu() if keep_table else None, "table_step": table_step if keep_table else -1}
        replace_files({state_path: torch_bytes(state), **curve_files(args.out, curve)}, sync=True)
        saved_step = step

    def anchor_table() -> torch.Tensor:
        """Embeddings of all training anchors by the current model, computed once per step at most."""
        nonlocal table, table_step
        if table_step != step:
            table = torch.from_numpy(embed(model, train_a.frames, embed_batch)).to(device)
            table_step = step
            model.train()
        assert table is not None
        return table

    base_hfov = cfg.camera.get("hfov_deg", SIM_HFOV_DEG)   # the rendered views' field of view (`--hfov-deg`)
    hfov, aspect = base_hfov, 1.0   # this step's camera (`--min-hfov-deg`, `--aspect-ratios`)

    def view(frames: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        """Augmented network inputs of frames[rows] on the training device, as this step's camera sees them
        (augmentation draws from `gen`; on a GPU the frames cross as float16 and are augmented there)."""
        x = torch.from_numpy(frames[rows].astype(np.float32)) if device.type == "cpu" \
            else torch.from_numpy(frames[rows]).to(device).float()
        return augment(crop_fov(x, hfov, base_hfov, aspect), gen, cfg.colour_gain_std)

    def same_mask(poses_a: np.ndarray, poses_b: np.ndarray, house: np.ndarray) -> torch.Tensor:
        """`same_place` of two pose arrays of the batch's houses, on the training device."""
        return torch.from_numpy(same_place(poses_a, poses_b, house, house)).to(device)

    start = time.monotonic()
    bar = tqdm(total=cfg.steps, initial=step, desc="train encoder", unit="step", disable=args.no_progress,
               file=sys.stderr)
    with stop_at_step_end("step") as ctrl_c_asked, bar:   # tqdm closes its bar on leaving
        while step < cfg.steps:
            model.train()
            hs = rng.choice(houses, size=min(cfg.houses_per_batch, len(houses)), replace=False)
            per = cfg.batch_pairs // len(hs)
            idx = np.concatenate([rng.choice(by_house[h], size=per, replace=len(by_house[h]) < per) for h in hs])
            if cfg.min_hfov_deg < SIM_HFOV_DEG:   # drawn only when asked: runs without it draw as before
                narrow, u = torch.rand(2, generator=gen).tolist()
                hfov = cfg.min_hfov_deg + u * (base_hfov - cfg.min_hfov_deg) if narrow < 0.5 else base_hfov
            if cfg.aspect_ratios != (1.0,):   # likewise
                aspect = cfg.aspect_ratios[int(torch.randint(len(cfg.aspect_ratios), (1,), generator=gen))]
            views = [view(train_a.frames, idx), view(train_b.frames, idx)]
            house = train_a.house[idx]
            same = same_mask(train_a.poses[idx], train_a.poses[idx], house)
            same_an = same_bn = None
            if train_n is not None:
                views.append(view(train_n.frames, idx))
                same_an = same_mask(train_a.poses[idx], train_n.poses[idx], house)
                same_bn = same_mask(train_b.poses[idx], train_n.poses[idx], house)
            if cfg.mine_every > 0 and step >= cfg.mine_every:
                if mined is None or step % cfg.mine_every == 0:
                    mined = mine_look_alikes(model, train_a, anchor_table().cpu().numpy())
                j = mined[idx]
                views.append(view(train_a.frames, j))
                sa = same_mask(train_a.poses[idx], train_a.poses[j], house)
                sb = same_mask(train_b.poses[idx], train_a.poses[j], house)
                same_an = sa if same_an is None else torch.cat([same_an, sa], dim=1)
                same_bn = sb if same_bn is None else torch.cat([same_bn, sb], dim=1)
            use_bank = cfg.house_bank_every > 0 and step >= cfg.house_bank_every
            if use_bank and (table_step < 0 or step % cfg.house_bank_every == 0):
                anchor_table()
            z = model(torch.cat(views)).split(len(idx))
            zn = torch.cat(z[2:]) if len(z) > 2 else None
            loss = info_nce(z[0], z[1], same, cfg.temperature, zn, same_an, same_bn)
            if use_bank:
                assert table is not None
                loss = loss + 0.5 * (
                    house_bank_loss(z[0], z[1], train_a.poses[idx], house, idx, table, train_a.poses, train_a.house,
                                    cfg.temperature)
                    + house_bank_loss(z[1], z[0], train_b.poses[idx], house, idx, table, train_a.poses, train_a.house,
                                      cfg.temperature))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_value = loss.item()
            if not math.isfinite(loss_value):   # stop before this step's weights are saved
                kept = f"as saved at step {saved_step}" if saved_step is not None else "as they were (none saved yet)"
                raise diverged(loss_value, f"step {step + 1} of {cfg.steps}",
                               f"{args.out} and {state_path} are left {kept}; start over with --restart and a lower "
                               f"--lr (now {cfg.lr:g})")
            if use_bank:
                assert table is not None
                table[torch.from_numpy(idx).to(device)] = z[0].detach()
            step += 1
            curve["step"].append(step)
            curve["loss"].append(loss_value)
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}")
            if step % cfg.eval_every == 0 or step == cfg.steps:
                r = validation_recall(model, val_db, val_q)
                curve["val_step"].append(step)
                curve["val_recall_at_1"].append(r)
                bar.set_postfix(loss=f"{loss_value:.3f}", val_r1=f"{r:.3f}")
                save_state()
            if ctrl_c_asked():   # stop here, saved below (before the time limit: a Ctrl-C always exits 130)
                break
            if args.max_minutes is not None and time.monotonic() - start > 60 * args.max_minutes:
                save_state()
                print(f"stopped after {args.max_minutes} min at step {step}/{cfg.steps}; re-run to continue",
                      file=sys.stderr)
                return 0
        if saved_step != step or step == cfg.steps:   # a finished run's files are written again, as always
            save_state()
    if step < cfg.steps:
        print(f"interrupted (Ctrl-C) at step {step}/{cfg.steps}: {args.out} and {state_path.name} saved there; "
              f"re-run the same command to continue", file=sys.stderr)
        return 130
    print(f"wrote {args.out} (step {step}, val recall@1 {curve['val_recall_at_1'][-1]:.3f})")
    return 0


def curve_files(out: Path, curve: dict) -> dict[Path, bytes]:
    """The bytes of `<out>.curve.json` and `<out>.curve.png` (loss and validation recall@1 against step), to be
    written with `memnav.core.files.replace_files`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    try:
        if curve["loss"]:
            k = max(1, len(curve["loss"]) // 200)
            loss = np.convolve(curve["loss"], np.ones(k) / k, mode="valid")
            ax[0].plot(curve["step"][k - 1:], loss)
        ax[0].set(xlabel="step", ylabel="InfoNCE loss", title="training loss")
        ax[1].plot(curve["val_step"], curve["val_recall_at_1"], marker="o")
        ax[1].set(xlabel="step", ylabel="recall@1", title="val place recognition (1 m, 30 deg)", ylim=(0, 1))
        for a in ax:
            a.grid(alpha=0.3)
        fig.tight_layout()
        png = figure_png(fig, dpi=80)
    finally:
        plt.close(fig)
    return {out.with_suffix(".curve.json"): (json.dumps(curve) + "\n").encode(), out.with_suffix(".curve.png"): png}


def write_curve(out: Path, curve: dict) -> None:
    """Write `<out>.curve.json` and `<out>.curve.png` atomically (`curve_files`)."""
    replace_files(curve_files(out, curve))
