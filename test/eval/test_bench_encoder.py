"""`memnav bench encoder --threads`: the threads its embeddings and latency run on, applied and in the JSON."""
import json
import subprocess
import sys

import pytest
from conftest import make_tiny_dataset

from memnav.cli import main

# the bench in a process of its own (thread counts are process-wide), then torch's thread count after it
TORCH_THREADS = """
import sys, torch
from memnav.cli import main
assert main(sys.argv[1:]) == 0
print(f"torch threads {torch.get_num_threads()}", file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 3])
def test_bench_encoder_runs_on_the_threads_asked_for_and_says_so(threads, tmp_path):
    """The bench ran torch on 2 threads (fixed in the code; the simulator's first render then set a thread per core)
    and numpy's BLAS on a thread per core, and its JSON said neither: an `encode_ms_p50` could not be told from one
    on encoder_node's single thread."""
    data = make_tiny_dataset(tmp_path / "houses", seed=9)
    run = subprocess.run([sys.executable, "-c", TORCH_THREADS, "bench", "encoder", "--data", str(data),
                          "--db-per-house", "10", "--queries-per-house", "5", "--vocab-words", "8", "--verify-top",
                          "0", "--threads", str(threads), "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout)
    assert res["threads"] == threads == res["torch_threads"] and res["blas_threads"] in (None, threads)
    assert f"torch threads {threads}" in run.stderr
    assert res["encode_ms_p50"] > 0


@pytest.mark.parametrize("threads", ["0", "100000"])
def test_bench_encoder_refuses_a_thread_count_out_of_range(threads, capsys):
    assert main(["bench", "encoder", "--threads", threads]) == 2
    assert f"--threads must be from 1 to 1024, got {threads}" in capsys.readouterr().err
