"""`memnav bench pipeline` through the CLI on a few seconds per mode: its keys and sane values (no timing targets:
those are the bench's job, on a machine that is not running other tests)."""
import json
import os
import subprocess
import sys

import pytest
from conftest import make_tiny_dataset

from memnav.cli import main


def test_bench_pipeline_refuses_bad_arguments(capsys):
    assert main(["bench", "pipeline", "--duration", "0"]) == 2
    assert "--duration must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "pipeline", "--modes", "threads"])


@pytest.mark.ros
@pytest.mark.slow
def test_bench_pipeline_keys_and_values(tmp_path):
    pytest.importorskip("rclpy")
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=1)
    out = tmp_path / "pipeline.json"
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    run = subprocess.run([sys.executable, "-m", "memnav.cli", "bench", "pipeline", "--data", str(data),
                          "--duration", "4", "--warmup", "1", "--frames", "6", "--log-dir", str(tmp_path / "logs"),
                          "--domain", str(40 + (os.getpid() + 13) % 150), "--json", str(out)],
                         env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[bench pipeline] multiprocess: first answer" in run.stderr and "[bench pipeline] fused:" in run.stderr
    res = json.loads(out.read_text())
    assert json.loads(run.stdout) == res
    for mode in ("multiprocess", "fused"):
        p50, p99 = res[f"latency_ms_p50_{mode}"], res[f"latency_ms_p99_{mode}"]
        assert 0.0 < p50 <= p99 <= res[f"latency_ms_max_{mode}"] < 5000.0
        sent, answered = res[f"frames_sent_{mode}"], res[f"frames_answered_{mode}"]
        assert 20 <= sent <= 60 and 1 <= answered <= sent   # 4 s at 10 Hz
        assert 5.0 < res[f"publish_rate_hz_{mode}"] < 15.0
        assert 0.0 < res[f"cpu_percent_{mode}"] <= 100.0 * os.cpu_count() + 1.0
        assert res[f"memory_event_ms_p50_{mode}"] > 0.0 and res[f"stop_decision_ms_p50_{mode}"] > 0.0
    assert set(res["cpu_percent_by_process_multiprocess"]) == {"policy_node", "encoder_node", "memory_node",
                                                                "stop_node"}
    assert set(res["cpu_percent_by_process_fused"]) == {"stack_node"}
    assert res["frame_px"] == 128 and res["rate_hz"] == 10.0
    assert res["targets_ms"] == {"latency_ms_p99_multiprocess": 50.0, "latency_ms_p99_fused": 20.0}
    assert set(res["targets_met"]) == set(res["targets_ms"])
