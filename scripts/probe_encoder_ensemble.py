"""Probe: does combining encoders (or test-time shifts, or a colour histogram) reach recall@1 0.90?

Renders `memnav bench encoder`'s database (300 views per house, seed 123) and queries (100 per house, seed 124)
in the test and val houses of data/houses, then prints recall@1 of:
  - each shipped encoder alone (models/encoder.pt, models/encoder_mined6k.pt), as the bench computes it;
  - each with test-time shifts (the mean embedding of the frame and four 2-pixel shifts);
  - the two concatenated, the shipped one weighted 0.5 / 0.7 / 1.0;
  - those plus a 216-bin colour histogram of the 64x64 input (weight 0.5), and mined6k plus the histogram alone.
Also splits encoder_mined6k's hits by how many database views are true matches.

Run from the repository root: `.venv/bin/python scripts/probe_encoder_ensemble.py` (about 1 min on 2 cores).
Not a feature: the README's encoder section reports what it printed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from memnav.core.encoder import Encoder
from memnav.train.encoder_train import embed
from memnav.train.frame_bank import houses_of_split, recall_at_1, render_set, same_place


def colour_histogram(frames: np.ndarray) -> np.ndarray:
    """216-bin (6 x 6 x 6) RGB histogram of (N, 4, P, P) network inputs, square-rooted, unit norm."""
    q = np.clip((frames[:, :3] * 6).astype(int), 0, 5)
    idx = q[:, 0] * 36 + q[:, 1] * 6 + q[:, 2]
    h = np.sqrt(np.stack([np.bincount(i.ravel(), minlength=216) for i in idx]).astype(np.float32))
    return h / np.linalg.norm(h, axis=1, keepdims=True)


def shifted_mean(encoder: Encoder, frames: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(frames)
    outs = [embed(encoder.model, frames)]
    for dx, dy in ((2, 0), (-2, 0), (0, 2), (0, -2)):
        outs.append(embed(encoder.model, torch.roll(x, (dy, dx), (2, 3)).numpy()))
    m = np.mean(outs, 0)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def main() -> None:
    torch.set_num_threads(2)
    enc = {n: Encoder.from_checkpoint(f"models/{n}.pt") for n in ("encoder", "encoder_mined6k")}
    for split in ("test", "val"):
        houses = houses_of_split(Path("data/houses"), split)
        db = render_set(houses, 300, enc["encoder"].cfg, 123, keep_rgb=True, progress=False)[0]
        qs = render_set(houses, 100, enc["encoder"].cfg, 124, keep_rgb=True, progress=False)[0]
        match = same_place(qs.poses, db.poses, qs.house, db.house)
        plain = {n: (embed(e.model, db.frames), embed(e.model, qs.frames)) for n, e in enc.items()}
        shifted = {n: (shifted_mean(e, db.frames), shifted_mean(e, qs.frames)) for n, e in enc.items()}
        hist = (colour_histogram(db.frames), colour_histogram(qs.frames))

        def r(parts: list[tuple[float, tuple[np.ndarray, np.ndarray]]]) -> float:
            d = np.concatenate([w * p[0] for w, p in parts], 1)
            q = np.concatenate([w * p[1] for w, p in parts], 1)
            return round(recall_at_1(d, q, match)[0], 4)

        mined, shipped = plain["encoder_mined6k"], plain["encoder"]
        print(f"{split}: {int(match.any(1).sum())} queries with a true match")
        print(f"  shipped {r([(1, shipped)])}, mined6k {r([(1, mined)])}; with shifts: "
              f"{r([(1, shifted['encoder'])])}, {r([(1, shifted['encoder_mined6k'])])}")
        for w in (0.5, 0.7, 1.0):
            print(f"  mined6k + {w} x shipped: {r([(1, mined), (w, shipped)])}; plus the histogram (0.5): "
                  f"{r([(1, mined), (w, shipped), (0.5, hist)])}")
        print(f"  mined6k + the histogram (0.5): {r([(1, mined), (0.5, hist)])}")
        top = np.argmax(mined[1] @ mined[0].T, axis=1)
        hit, n_true, valid = match[np.arange(len(top)), top], match.sum(1), match.any(1)
        print("  mined6k by true matches per query (queries, recall@1): "
              + ", ".join(f"{k}: ({int(((n_true == k) & valid).sum())}, {hit[(n_true == k) & valid].mean():.2f})"
                          for k in range(1, 6))
              + f", 6+: ({int((n_true >= 6).sum())}, {hit[n_true >= 6].mean():.2f})")


if __name__ == "__main__":
    main()
