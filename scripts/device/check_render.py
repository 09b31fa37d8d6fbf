"""Compare a small frame bank rendered on the lent machine with one rendered here (see README.md here).

usage: python scripts/device/check_render.py save|compare REF.npz DATA:SPLIT

`save` (here) renders 5 pairs with positives and near misses in the split's first two houses and writes them;
`compare` (there) renders the same and prints, per view set, whether the poses are equal and how far the
frames differ (a different CPU and numba may move a few values by one 8-bit level).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from memnav.core.encoder import EncoderConfig
from memnav.train.frame_bank import houses_of_split, render_set


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("save", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, ref, spec = argv[0], Path(argv[1]), argv[2]
    data, _, split = spec.rpartition(":")
    sets = render_set(houses_of_split(Path(data), split)[:2], 5, EncoderConfig(), 7,
                      pair_jitter=(1.0, math.radians(30)), near_miss=True, progress=False, workers=2)
    if mode == "save":
        np.savez(ref, **{f"f{i}": s.frames for i, s in enumerate(sets)},
                 **{f"p{i}": s.poses for i, s in enumerate(sets)})
        print(f"wrote {ref}")
        return 0
    z = np.load(ref)
    same = True
    for i, s in enumerate(sets):
        d = np.abs(s.frames.astype(np.float32) - z[f"f{i}"].astype(np.float32))
        poses_equal = bool(np.array_equal(s.poses, z[f"p{i}"]))
        same &= poses_equal
        print(f"set {i}: poses equal {poses_equal}, frame values differing by > 1e-3: {float((d > 1e-3).mean()):.4f}, "
              f"largest difference {d.max():.3f}, mean {d.mean():.2e}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
