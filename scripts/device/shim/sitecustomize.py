"""Device-only: open3d is not installed there. Navigable grids are replayed from grids.npz, computed on the
CPU machine by the real NavGrid._sample_free with open3d; the object-order renderer needs no open3d."""
import sys
import types
from pathlib import Path

import numpy as np

_here = Path(__file__).parent
sys.path.insert(0, str(_here))
_grids = np.load(_here / "grids.npz")


class _NoCaster:
    def add_triangles(self, *args):
        pass

    def cast_rays(self, *args):
        raise RuntimeError("open3d is not on this machine: only the recorded navigable grids and the "
                           "object-order renderer are available")


_o3d = types.ModuleType("open3d")
_o3d.t = types.SimpleNamespace(geometry=types.SimpleNamespace(RaycastingScene=_NoCaster))
_o3d.core = types.SimpleNamespace(Tensor=lambda x: x)
sys.modules["open3d"] = _o3d

from gridkey import grid_key  # noqa: E402

import memnav.sim.navmesh as _nm  # noqa: E402


def _sample_free(self, caster):
    k = grid_key(self, caster)
    if k + "_y" not in _grids:
        raise RuntimeError(f"no recorded navigable grid for this scene ({k})")
    return _grids[k + "_y"], _grids[k + "_f"]


_nm.NavGrid._sample_free = _sample_free
