"""`memnav bench pipeline` through the CLI on a few seconds per mode: its keys and sane values (no timing targets:
those are the bench's job, on a machine that is not running other tests)."""
import argparse
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


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the bench gets as far as rendering frames or starting a node process."""
    from memnav.eval import bench_pipeline

    def started(*_args, **_kwargs):
        raise AssertionError("the bench started work despite a bad option")

    monkeypatch.setattr(bench_pipeline, "render_frames", started)
    monkeypatch.setattr(bench_pipeline, "_Stack", started)


@pytest.mark.parametrize("options, named", [
    (["--domain", "-1"], "--domain"),
    (["--domain", "999"], "--domain"),
    (["--domain", "232"], "--domain"),             # the fused mode would run on 233
    (["--modes", "fused", "--domain", "233"], "--domain"),   # above Fast DDS's last usable id on Linux
    (["--duration", "nan"], "--duration"),
    (["--duration", "inf"], "--duration"),
    (["--warmup", "nan"], "--warmup"),
    (["--rate-hz", "inf"], "--rate-hz"),
    (["--action-duration", "nan"], "--action-duration"),
    (["--startup-timeout", "nan"], "--startup-timeout"),
    (["--startup-timeout", "0"], "--startup-timeout"),
    (["--frames", "0"], "--frames"),
    (["--size-px", "4"], "--size-px"),
    (["--image-px", "640", "4"], "--image-px"),
    (["--size-px", "256", "--image-px", "640", "360"], "--size-px"),
    (["--hfov-deg", "180"], "--hfov-deg"),
    (["--camera-height-m", "nan"], "--camera-height-m"),
    (["--encoder", "no/such/encoder.pt"], "--encoder"),
    (["--calibration", "no/such/calibration.json"], "--calibration"),
])
def test_bench_pipeline_names_the_bad_option_before_starting_anything(capsys, no_work, options, named):
    assert main(["bench", "pipeline", "--no-progress", *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memnav bench: error: {named} ") and len(err.splitlines()) == 1


def test_bench_pipeline_accepts_the_last_domain_for_one_mode(capsys, monkeypatch):
    from memnav.eval import bench_pipeline

    def rendered(*_args, **_kwargs):
        raise RuntimeError("got past the option checks")

    monkeypatch.setattr(bench_pipeline, "render_frames", rendered)
    assert main(["bench", "pipeline", "--no-progress", "--modes", "fused", "--domain", "232"]) == 2
    assert "got past the option checks" in capsys.readouterr().err


@pytest.mark.parametrize("modes", [1, 2])
def test_default_domain_keeps_every_mode_within_the_recommended_ids(modes):
    from memnav.eval.bench_pipeline import RECOMMENDED_MAX_DOMAIN_ID, default_domain

    firsts = {default_domain(pid, modes) for pid in range(4_194_304 - 1000, 4_194_304 + 1)}   # Linux's pid_max
    last = RECOMMENDED_MAX_DOMAIN_ID - modes + 1
    assert firsts == set(range(1, last + 1))   # never 0 (a ROS graph without ROS_DOMAIN_ID), all of 1-101 used
    assert max(firsts) + modes - 1 == RECOMMENDED_MAX_DOMAIN_ID == 101
    with pytest.raises(ValueError, match="modes"):
        default_domain(4242, 0)


def test_domain_help_names_the_default_range(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "pipeline", "--help"])
    assert "within 1 to 101" in " ".join(capsys.readouterr().out.split())


def _arguments(argv: list[str]) -> argparse.Namespace:
    from memnav.eval.bench_pipeline import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_the_camera_and_model_options_reach_the_nodes_that_declare_them(tmp_path, monkeypatch):
    """Defaults leave the parameter file's camera and models alone; a robot camera's options become policy_node's
    camera_* parameters, the models reach each node under its own name (one -p each in the fused process, where it
    reaches every part that declares it)."""
    from memnav.eval import bench_pipeline
    from memnav.eval.evaluate import MODELS

    policy = {"lockstep": "false", "action_duration_s": "0.02", "max_steps": "0"}
    assert bench_pipeline.node_overrides(_arguments([])) == {"policy_node": policy}
    encoder, calibration = MODELS / "encoder_69deg_16x9.pt", MODELS / "stop_calibration_69deg_16x9.json"
    args = _arguments(["--image-px", "640", "360", "--hfov-deg", "69", "--camera-pitch-deg", "10",
                       "--encoder", str(encoder), "--calibration", str(calibration)])
    assert bench_pipeline.node_overrides(args) == {
        "policy_node": {**policy, "camera_hfov_deg": "69.0", "camera_pitch_deg": "10.0",
                        "encoder_checkpoint": str(encoder), "calibration": str(calibration)},
        "encoder_node": {"checkpoint": str(encoder)}, "stop_node": {"calibration": str(calibration)}}

    commands = []

    class Started:
        pid = 0

        def poll(self):
            return 0

    def popen(command, **_kwargs):
        commands.append(command)
        return Started()

    monkeypatch.setattr(bench_pipeline.subprocess, "Popen", popen)
    bench_pipeline._Stack("fused", tmp_path / "params.yaml", bench_pipeline.node_overrides(args), 0, tmp_path)
    (fused,) = commands
    assert fused.count(f"calibration:={calibration}") == 1 and f"checkpoint:={encoder}" in fused
    assert f"encoder_checkpoint:={encoder}" in fused and "camera_hfov_deg:=69.0" in fused
    commands.clear()
    bench_pipeline._Stack("multiprocess", tmp_path / "params.yaml", bench_pipeline.node_overrides(args), 0, tmp_path)
    by_node = {c[2].rsplit(".", 1)[1]: c for c in commands}
    assert f"checkpoint:={encoder}" in by_node["encoder_node"]
    assert "camera_hfov_deg:=69.0" not in by_node["encoder_node"]
    assert by_node["memory_node"][3:] == ["--ros-args", "--params-file", str(tmp_path / "params.yaml")]


def _sleepers(n: int) -> dict[str, subprocess.Popen]:
    return {f"node{i}": subprocess.Popen(["sleep", "30"]) for i in range(n)}


def test_stack_stops_the_processes_it_started_when_a_later_one_fails(tmp_path, monkeypatch):
    from memnav.eval import bench_pipeline

    real_popen, started = subprocess.Popen, []

    def popen(*_args, **kwargs):
        if len(started) == 2:
            raise OSError("no third process")
        started.append(real_popen(["sleep", "30"], stdout=kwargs.get("stdout")))
        return started[-1]

    monkeypatch.setattr(bench_pipeline.subprocess, "Popen", popen)
    with pytest.raises(OSError, match="no third process"):
        bench_pipeline._Stack("multiprocess", tmp_path / "params.yaml", {}, 0, tmp_path)
    assert len(started) == 2 and all(p.poll() is not None for p in started)


@pytest.mark.parametrize("failure", ["ros_init", "interrupt"])
def test_measure_mode_stops_the_stack_whatever_ends_it(tmp_path, monkeypatch, failure):
    """A ROS error after the nodes started (Fast DDS refusing a domain id) or a Ctrl-C: no node outlives the bench."""
    pytest.importorskip("rclpy")
    from memnav.eval import bench_pipeline

    stacks = []

    class SleepingStack(bench_pipeline._Stack):
        def __init__(self, *_args) -> None:   # stand-ins for the nodes, cheap to start
            self.logs, self.procs = {}, _sleepers(4)
            stacks.append(self)

    monkeypatch.setattr(bench_pipeline, "_Stack", SleepingStack)
    if failure == "interrupt":
        def interrupted(*_args):
            raise KeyboardInterrupt
        monkeypatch.setattr(bench_pipeline, "_drive", interrupted)
    frames = bench_pipeline.Frames(goal_rgb=None, goal_depth=None)
    with pytest.raises(KeyboardInterrupt) if failure == "interrupt" else pytest.raises(RuntimeError, match="Domain id"):
        bench_pipeline.measure_mode("multiprocess", frames, _arguments([]), tmp_path / "params.yaml",
                                    -1 if failure == "ros_init" else 0, tmp_path, lambda _msg: None)
    assert len(stacks) == 1 and all(p.poll() is not None for p in stacks[0].procs.values())


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


@pytest.mark.ros
@pytest.mark.slow
def test_bench_pipeline_on_a_robot_cameras_full_size_frames(tmp_path):
    """640 x 360 frames of a 69 deg camera with the 16:9 models: 922 KB depth images, most of which Fast DDS's
    default transports (and LARGE_DATA alone) lose between processes, reach the stack's processes (the bench sends
    them with config/fastdds_large_images.xml, as robot.launch.yaml does) and nearly all get decisions; the JSON
    says how it ran."""
    pytest.importorskip("rclpy")
    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=1)
    out = tmp_path / "pipeline.json"
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.pop("FASTDDS_BUILTIN_TRANSPORTS", None)
    env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    run = subprocess.run([sys.executable, "-m", "memnav.cli", "bench", "pipeline", "--data", str(data),
                          "--modes", "multiprocess", "--duration", "3", "--warmup", "1", "--frames", "4",
                          "--image-px", "640", "360", "--hfov-deg", "69", "--encoder", "models/encoder_69deg_16x9.pt",
                          "--calibration", "models/stop_calibration_69deg_16x9.json", "--log-dir",
                          str(tmp_path / "logs"), "--domain", str(40 + (os.getpid() + 71) % 150), "--json", str(out)],
                         env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "frames of 640x360 px (69 deg)" in run.stderr and "fastdds_large_images.xml" in run.stderr
    res = json.loads(out.read_text())
    assert res["image_px"] == [640, 360] and res["frame_px"] is None and res["hfov_deg"] == 69.0
    assert res["encoder"] == "models/encoder_69deg_16x9.pt" and res["fastdds_builtin_transports"] == "LARGE_DATA"
    assert res["fastdds_profiles_file"].endswith("config/fastdds_large_images.xml")
    sent, answered = res["frames_sent_multiprocess"], res["frames_answered_multiprocess"]
    assert sent >= 20 and answered >= 0.6 * sent and res["latency_ms_p50_multiprocess"] > 0.0
    assert res["latency_ms_p50_fused"] is None
    encoder_log = (tmp_path / "logs" / "multiprocess_encoder_node.log").read_text()
    assert "encoder_69deg_16x9.pt" in encoder_log


def test_ctrl_c_during_the_second_mode_keeps_the_first_modes_figures(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the fused stack is measured: the multiprocess figures are printed and written (marked
    interrupted, their target judged), and the bench exits 130."""
    import numpy as np

    from memnav.eval import bench_pipeline

    def frames(*_args):
        return bench_pipeline.Frames(np.zeros((8, 8, 3), np.uint8), np.ones((8, 8), np.float32),
                                     [np.zeros((8, 8, 3), np.uint8)], [np.ones((8, 8), np.float32)], [None])

    def measure(mode, *_args):   # the stack itself is test_bench_pipeline_keys_and_values's
        if mode == "fused":
            raise KeyboardInterrupt
        return {"latency_ms_p50": 12.0, "latency_ms_p99": 30.0, "cpu_percent": 80.0, "frames_sent": 40}

    monkeypatch.setattr(bench_pipeline, "render_frames", frames)
    monkeypatch.setattr(bench_pipeline, "measure_mode", measure)
    out = tmp_path / "pipeline.json"
    assert main(["bench", "pipeline", "--log-dir", str(tmp_path / "logs"), "--json", str(out), "--no-progress"]) == 130
    printed = capsys.readouterr()
    res = json.loads(out.read_text())
    assert json.loads(printed.out) == res and res["interrupted"] is True and res["left_out"] == ["fused"]
    assert res["latency_ms_p99_multiprocess"] == 30.0 and res["frames_sent_multiprocess"] == 40
    assert res["latency_ms_p99_fused"] is None and "frames_sent_fused" not in res
    assert res["targets_met"] == {"latency_ms_p99_multiprocess": True}
    assert "memnav bench pipeline: interrupted: measured multiprocess; left out: fused" in printed.err
