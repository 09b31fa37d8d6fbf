"""Record the navigable grids of some dataset splits, for a lent GPU machine without open3d (see README.md here).

usage: python scripts/device/record_grids.py OUT.npz DATA:SPLIT [DATA:SPLIT ...]

Loads every house of each split in the embedded simulator, the real way (open3d's ray caster builds the grid),
and saves what NavGrid._sample_free returned for it, keyed by `shim/gridkey.grid_key` (mesh and grid settings).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent / "shim"))
from gridkey import grid_key  # noqa: E402

import memnav.sim.navmesh as navmesh  # noqa: E402
from memnav.sim.base import SimConfig  # noqa: E402
from memnav.sim.embedded import EmbeddedSimulator  # noqa: E402
from memnav.train.frame_bank import houses_of_split  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, specs = Path(argv[0]), argv[1:]
    recorded: dict[str, np.ndarray] = {}
    original = navmesh.NavGrid._sample_free

    def recording(self, caster):
        floor_y, free = original(self, caster)
        key = grid_key(self, caster)
        recorded[key + "_y"], recorded[key + "_f"] = floor_y, free
        return floor_y, free

    navmesh.NavGrid._sample_free = recording
    sim = EmbeddedSimulator(config=SimConfig(seed=0))
    for spec in specs:
        data, _, split = spec.rpartition(":")
        for house in houses_of_split(Path(data), split):
            sim.load_scene(house)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **recorded)
    print(f"recorded {len(recorded) // 2} navigable grids in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
