"""Key of a navigable grid build: the mesh and every setting _sample_free reads."""
import hashlib

import numpy as np


def grid_key(grid, caster) -> str:
    h = hashlib.sha1()
    h.update(np.ascontiguousarray(caster.mesh.vertices).tobytes())
    h.update(np.ascontiguousarray(caster.mesh.faces).tobytes())
    h.update(repr((grid.origin.tolist(), grid.shape, float(grid.floor_height_m), float(grid.winding_sign),
                   grid.config)).encode())
    return h.hexdigest()
