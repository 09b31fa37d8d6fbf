"""memnav.threads: torch and numpy BLAS thread counts set at run time."""
import numpy as np
import pytest
import torch

from memnav.threads import blas_threads, set_blas_threads, set_inference_threads


def test_set_blas_threads_round_trip():
    before = blas_threads()
    if before is None:
        pytest.skip("numpy's BLAS here is not an OpenBLAS with a thread setter")
    try:
        assert set_blas_threads(1) == before
        assert blas_threads() == 1
        a = np.random.default_rng(0).standard_normal((300, 64)).astype(np.float32)
        assert np.allclose(a @ a.T, (a.astype(np.float64) @ a.T.astype(np.float64)), atol=1e-3)
        assert set_blas_threads(2) == 1 and blas_threads() == 2
    finally:
        set_blas_threads(before)


def test_set_inference_threads_sets_both_and_rejects_zero():
    torch_before, blas_before = torch.get_num_threads(), blas_threads()
    try:
        set_inference_threads(1)
        assert torch.get_num_threads() == 1
        assert blas_threads() in (None, 1)
        with pytest.raises(ValueError, match="threads must be >= 1"):
            set_inference_threads(0)
        with pytest.raises(ValueError, match="BLAS threads must be >= 1"):
            set_blas_threads(0)
    finally:
        torch.set_num_threads(torch_before)
        if blas_before is not None:
            set_blas_threads(blas_before)


def test_set_inference_threads_reaches_the_blas_scipy_and_opencv_map_later():
    """A node set its threads at start; SciPy's and OpenCV's own OpenBLAS builds were mapped later (a scene load,
    the first ORB match) and ran on a thread per core. A fresh process, as a node starts."""
    import subprocess
    import sys

    script = """
import json
from memnav import threads
threads.set_inference_threads(1)
import cv2, scipy.linalg, scipy.ndimage  # noqa: F401  (what a node imports later)
print(json.dumps(threads.blas_thread_counts()))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    import json

    counts = json.loads(run.stdout)
    assert len(counts) >= 2 and all(n == 1 for n in counts.values()), counts
