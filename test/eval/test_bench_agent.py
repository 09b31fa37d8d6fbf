"""`memnav bench agent`: its --threads option (bounds, and what the JSON says of the BLAS threads)."""
import json
import subprocess
import sys

import pytest
from conftest import make_tiny_dataset


def test_bench_agent_refuses_a_thread_count_that_would_crash_it():
    """--threads 100000 ended the process with a segmentation fault (status 139, no message). A process of its own:
    the old code's crash would take the test runner with it."""
    run = subprocess.run([sys.executable, "-m", "memnav.cli", "bench", "agent", "--threads", "100000",
                          "--no-progress"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--threads must be from 1 to 1024, got 100000" in run.stderr, run.stderr[-2000:]


# every OpenBLAS mapped into the process after a tiny bench, with its thread count
BLAS_COUNTS = """
import json, sys
from memnav.cli import main
from memnav.threads import blas_thread_counts
assert main(sys.argv[1:]) == 0
print(json.dumps(blas_thread_counts()), file=sys.stderr)
"""


@pytest.mark.slow
def test_bench_agent_runs_every_blas_on_the_threads_asked_for(tmp_path):
    """Loading a scene loads OpenCV's and SciPy's own OpenBLAS builds after --threads was applied: they ran on a
    thread per core, and `blas_threads` (the first OpenBLAS mapped) said 2 beside `threads` 1."""
    data = make_tiny_dataset(tmp_path / "houses", seed=9)
    run = subprocess.run([sys.executable, "-c", BLAS_COUNTS, "bench", "agent", "--data", str(data), "--steps", "2",
                          "--warmup", "0", "--prefill", "0", "--threads", "1", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout)
    counts = json.loads(run.stderr.strip().splitlines()[-1])
    assert res["threads"] == 1 and res["blas_threads"] in (None, 1)
    assert all(n == 1 for n in counts.values()), counts


@pytest.mark.slow
def test_ctrl_c_keeps_the_steps_timed(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the timed steps: the latency of the steps timed before it is printed and written (marked
    interrupted, `steps` the number timed) and the bench exits 130."""
    from memnav.cli import main
    from memnav.eval import bench_agent

    class InterruptedAgent(bench_agent.LearnedAgent):
        acts = 0

        def act(self, obs):
            InterruptedAgent.acts += 1
            if InterruptedAgent.acts == 5:   # one warm-up step and three timed, then Ctrl-C
                raise KeyboardInterrupt
            return super().act(obs)

    monkeypatch.setattr(bench_agent, "LearnedAgent", InterruptedAgent)
    data = make_tiny_dataset(tmp_path / "houses", seed=9)
    capsys.readouterr()
    out = tmp_path / "agent.json"
    assert main(["bench", "agent", "--data", str(data), "--steps", "10", "--warmup", "1", "--prefill", "0",
                 "--json", str(out), "--no-progress"]) == 130
    printed = capsys.readouterr()
    res = json.loads(out.read_text())
    assert json.loads(printed.out) == res and res["interrupted"] is True and res["left_out"] == ["7 timed steps"]
    assert res["steps"] == 3 and 0 < res["step_ms_p50"] <= res["step_ms_p99"] and res["agent"] == "memnav"
    assert "memnav bench agent: interrupted: measured 3 of 10 timed steps; left out: 7 timed steps" in printed.err


@pytest.mark.slow
def test_bench_agent_times_torch_on_the_threads_asked_for(tmp_path):
    """--threads 1 was applied before the simulator's first render, which set torch's threads to one per core (numba
    starting its thread pool): the steps ran torch on 2 threads while the JSON said `threads` 1."""
    data = make_tiny_dataset(tmp_path / "houses", seed=9)
    run = subprocess.run([sys.executable, "-m", "memnav.cli", "bench", "agent", "--data", str(data), "--steps", "2",
                          "--warmup", "0", "--prefill", "0", "--threads", "1", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout)
    assert res["threads"] == 1 == res["torch_threads"] and res["steps"] == 2
