"""Thread counts for per-step inference: torch's and numpy's BLAS.

An agent step does many small matrix products (a 2,000 x 256 memory search, the scan matcher's pose
grid). numpy's bundled OpenBLAS splits even those over every core, and waking its worker threads costs
more than the product: on the 2-core machines `memnav bench agent` measured a step p50 of 7.9-10.6 ms
with OpenBLAS's default threads (two here) against 6.3 ms with one. `set_blas_threads` changes the count at
run time (the `OPENBLAS_NUM_THREADS` variable only counts before numpy is imported), through the
library's own setter found among the libraries loaded in this process. Where none is found (another
BLAS, another OS) it does nothing and says so by returning None.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

MAX_INFERENCE_THREADS = 1024
"""Upper bound of a node's torch_threads: a count far beyond the cores (10^5) crashed the process (segmentation
fault)."""

# setter symbols of the OpenBLAS builds numpy ships (scipy-openblas, 64-bit ints) and of plain OpenBLAS
_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")


def _loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (Linux only; [] elsewhere)."""
    import numpy  # noqa: F401  (loads numpy's BLAS so that it is mapped)

    maps = Path("/proc/self/maps")
    if not sys.platform.startswith("linux") or not maps.exists():
        return []
    paths = []
    for line in maps.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and "openblas" in Path(parts[5]).name.lower() and parts[5] not in paths:
            paths.append(parts[5])
    return paths


def _symbol(lib: ctypes.CDLL, names: tuple[str, ...]):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def blas_thread_counts() -> dict[str, int]:
    """Every OpenBLAS loaded in this process (its library path) with its thread count ({} where none is found)."""
    counts = {}
    for path in _loaded_openblas():
        getter = _symbol(ctypes.CDLL(path), _GETTERS)
        if getter is not None:
            getter.restype = ctypes.c_int
            counts[path] = int(getter())
    return counts


def blas_threads() -> int | None:
    """The thread count of the first OpenBLAS loaded in this process, or None where none is found."""
    return next(iter(blas_thread_counts().values()), None)


def set_blas_threads(n: int) -> int | None:
    """Set every loaded OpenBLAS to `n` threads; returns the previous count (None: no OpenBLAS found)."""
    if n < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {n}")
    previous = None
    for path in _loaded_openblas():
        lib = ctypes.CDLL(path)
        setter = _symbol(lib, _SETTERS)
        if setter is None:
            continue
        getter = _symbol(lib, _GETTERS)
        if getter is not None and previous is None:
            getter.restype = ctypes.c_int
            previous = int(getter())
        setter.argtypes = [ctypes.c_int]
        setter(int(n))
    return previous


# modules that map an OpenBLAS of their own when first imported (numpy's is mapped by `_loaded_openblas`)
BUNDLED_BLAS_MODULES = ("scipy.linalg", "cv2")


def check_inference_threads(n: int, name: str = "inference threads") -> int:
    """`n` if it is a thread count to pass to `set_inference_threads` (1 to MAX_INFERENCE_THREADS; 10^5 crashed the
    process with a segmentation fault), else ValueError naming `name` (e.g. "--threads"): for options checked
    before any work."""
    if not 1 <= n <= MAX_INFERENCE_THREADS:
        raise ValueError(f"{name} must be from 1 to {MAX_INFERENCE_THREADS}, got {n}")
    return n


def set_inference_threads(n: int) -> None:
    """Run per-step inference on `n` threads: torch's intra-op pool and the OpenBLAS builds of numpy, SciPy and
    OpenCV (n >= 1). SciPy's and OpenCV's are imported first: mapped later (a scene load, the first ORB match),
    each would start with a thread per core."""
    import importlib

    import torch

    if n < 1:
        raise ValueError(f"inference threads must be >= 1, got {n}")
    for module in BUNDLED_BLAS_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    torch.set_num_threads(n)
    set_blas_threads(n)
