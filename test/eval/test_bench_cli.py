"""`memnav bench sim` and `memnav bench encoder` through the CLI on tiny settings (keys and value ranges); Ctrl-C
during a bench (memory, sim, encoder) keeps what it measured before."""
import json
import signal
import subprocess
import sys

import pytest
import torch
from conftest import make_tiny_dataset, wait_for_text

from memnav.cli import main
from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("bench") / "houses", seed=9)


@pytest.mark.slow
def test_bench_sim_keys(tiny_data, tmp_path):
    out = tmp_path / "sim.json"
    own = sorted((tiny_data / "scenes").glob("*.glb"))[-1]   # a user's mesh: any file the simulator loads
    assert main(["bench", "sim", "--data", str(tiny_data), "--steps", "20", "--chunks", "2",
                 "--heavy-triangles", "30000", "--scene", str(own), "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("rgbd_128_steps_per_s", "rgbd_256_steps_per_s", "heavy_128_steps_per_s", "scene_128_steps_per_s"):
        assert res[key] > 0
    assert res["heavy_128_triangles"] >= 30000
    assert res["scene_128_mesh"] == str(own) and res["scene_128_renderer"] == "object"
    assert res["scene_128_triangles"] < 20_000


def test_bench_sim_refuses_a_missing_scene(tmp_path, capsys):
    out = tmp_path / "sim.json"
    assert main(["bench", "sim", "--scene", str(tmp_path / "nope.glb"), "--json", str(out)]) != 0
    assert "--scene" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow
def test_bench_encoder_keys(tiny_data, tmp_path, capsys):
    torch.manual_seed(0)
    ckpt = tmp_path / "enc.pt"
    save_checkpoint(FrameEncoder(EncoderConfig()), ckpt)
    out = tmp_path / "enc.json"
    assert main(["bench", "encoder", "--checkpoint", str(ckpt), "--data", str(tiny_data), "--db-per-house", "30",
                 "--queries-per-house", "10", "--vocab-words", "16", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("recall_at_1", "recall_at_1_verified", "baseline_pixels_recall_at_1", "baseline_orb_recall_at_1"):
        assert 0.0 <= res[key] <= 1.0
    assert res["encode_ms_p50"] > 0 and res["queries_evaluated"] > 0
    assert res["verify_top_k"] == 10 and res["verify_pair_ms_p50"] > 0
    assert res["recall_at_1"] <= res["recall_at_5"] <= 1.0
    # the queries split by close-ups (median depth below 1 m) and the rest: together they are the queries evaluated
    assert res["close_up_queries"] + res["other_queries"] == res["queries_evaluated"]
    parts = [(res[f"recall_at_1_{k}_queries"], res[f"{k}_queries"]) for k in ("close_up", "other")]
    assert sum(r * n for r, n in parts if n) == pytest.approx(res["recall_at_1"] * res["queries_evaluated"], abs=0.01)
    assert res["renderer"] == "auto" and res["split"] == "test"
    assert (res["hfov_deg"], res["camera_height_m"], res["image_px"]) == (90.0, 1.25, [128, 128])   # the simulator's
    bars = capsys.readouterr().err
    assert "database: " in bars and "scan verification: " in bars and "%|" in bars     # tqdm bars
    assert "ambiguous_queries" not in res             # the look-alike search runs only when asked for
    # the same on a train house, where an encoder can be compared with what it does on houses it saw; no bars;
    # the queries also split by memnav goal-audit's look-alike labels (a coarse search grid, to keep it short)
    assert main(["bench", "encoder", "--checkpoint", str(ckpt), "--data", str(tiny_data), "--split", "train",
                 "--max-houses", "1", "--db-per-house", "30", "--queries-per-house", "10", "--vocab-words", "16",
                 "--verify-top", "0", "--audit-queries", "--lookalike-grid-m", "0.5", "--lookalike-heading-deg", "30",
                 "--json", str(out), "--no-progress"]) == 0
    assert "%|" not in capsys.readouterr().err      # the summary line only
    res = json.loads(out.read_text())
    assert res["split"] == "train" and res["test_houses"] == 1 and 0.0 <= res["recall_at_1"] <= 1.0
    assert res["ambiguous_queries"] + res["unambiguous_queries"] == res["queries_evaluated"]
    assert res["near_identical_queries"] <= res["ambiguous_queries"]
    parts = [(res[f"recall_at_1_{k}_queries"], res[f"{k}_queries"]) for k in ("ambiguous", "unambiguous")]
    assert sum(r * n for r, n in parts if n) == pytest.approx(res["recall_at_1"] * res["queries_evaluated"], abs=0.01)
    assert (res["lookalike_grid_m"], res["lookalike_heading_deg"]) == (0.5, 30.0)


@pytest.mark.slow
def test_bench_encoder_render_workers_give_the_same_figures_with_one_or_two_processes(tiny_data, tmp_path):
    torch.manual_seed(0)
    ckpt = tmp_path / "enc.pt"
    save_checkpoint(FrameEncoder(EncoderConfig()), ckpt)
    results = []
    for workers in ("1", "2"):
        out = tmp_path / f"enc{workers}.json"
        assert main(["bench", "encoder", "--checkpoint", str(ckpt), "--data", str(tiny_data), "--split", "train",
                     "--db-per-house", "20", "--queries-per-house", "8", "--vocab-words", "8", "--verify-top", "0",
                     "--render-workers", workers, "--json", str(out), "--no-progress"]) == 0
        results.append(json.loads(out.read_text()))
    keys = ("recall_at_1", "recall_at_5", "baseline_pixels_recall_at_1", "baseline_orb_recall_at_1",
            "queries_evaluated", "database_size")
    assert [results[0][k] for k in keys] == [results[1][k] for k in keys]
    assert (results[0]["render_workers"], results[1]["render_workers"]) == (1, 2)


@pytest.mark.slow
def test_bench_encoder_renders_another_camera_when_asked(tiny_data, tmp_path):
    torch.manual_seed(0)
    ckpt = tmp_path / "enc.pt"
    save_checkpoint(FrameEncoder(EncoderConfig()), ckpt)
    results = {}
    for camera in (("90", "1.25"), ("60", "0.5")):
        out = tmp_path / f"enc{camera[0]}.json"
        assert main(["bench", "encoder", "--checkpoint", str(ckpt), "--data", str(tiny_data), "--split", "train",
                     "--max-houses", "1", "--db-per-house", "80", "--queries-per-house", "12", "--vocab-words", "8",
                     "--verify-top", "3", "--hfov-deg", camera[0], "--camera-height-m", camera[1],
                     "--json", str(out), "--no-progress"]) == 0
        results[camera] = json.loads(out.read_text())
    narrow = results[("60", "0.5")]
    assert (narrow["hfov_deg"], narrow["camera_height_m"]) == (60.0, 0.5)
    for key in ("recall_at_1", "recall_at_1_verified", "baseline_pixels_recall_at_1"):
        assert 0.0 <= narrow[key] <= 1.0
    # the same poses, so the same queries have a true match (what the camera sees: test_frame_bank)
    assert narrow["queries_evaluated"] == results[("90", "1.25")]["queries_evaluated"] >= 3
    # a 16:9 camera: the encoder stretches its frames to the square input, as it does a robot's
    out = tmp_path / "wide_image.json"
    assert main(["bench", "encoder", "--checkpoint", str(ckpt), "--data", str(tiny_data), "--split", "train",
                 "--max-houses", "1", "--db-per-house", "80", "--queries-per-house", "12", "--vocab-words", "8",
                 "--verify-top", "0", "--hfov-deg", "69", "--image-px", "192", "108", "--json", str(out),
                 "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert res["image_px"] == [192, 108] and 0.0 <= res["recall_at_1"] <= 1.0
    assert res["queries_evaluated"] == narrow["queries_evaluated"]


@pytest.mark.parametrize("option, value", [("--hfov-deg", ["180"]), ("--hfov-deg", ["nan"]),
                                           ("--camera-height-m", ["0"]), ("--image-px", ["0", "128"])])
def test_bench_encoder_impossible_camera_is_refused_by_name(option, value, capsys):
    assert main(["bench", "encoder", option, *value]) == 2
    assert f"{option} must be" in capsys.readouterr().err


def test_bench_encoder_scan_verification_needs_a_square_image(capsys):
    # scan verification reads the encoder's square input, which stretches a non-square frame
    assert main(["bench", "encoder", "--image-px", "160", "120"]) == 2
    assert "--verify-top 0 with a non-square --image-px" in capsys.readouterr().err


def test_bench_encoder_look_alike_search_needs_the_simulators_camera(capsys):
    assert main(["bench", "encoder", "--audit-queries", "--hfov-deg", "69"]) == 2
    assert "--audit-queries" in capsys.readouterr().err


def test_bench_encoder_negative_render_workers_is_a_clear_error(capsys):
    assert main(["bench", "encoder", "--render-workers", "-1"]) == 2
    assert "--render-workers must be >= 0" in capsys.readouterr().err


def test_bench_encoder_bad_lookalike_grid_is_refused_by_name(capsys):
    assert main(["bench", "encoder", "--audit-queries", "--lookalike-grid-m", "0"]) == 2
    assert "--lookalike-grid-m" in capsys.readouterr().err


def test_bench_encoder_negative_max_houses_is_a_clear_error(capsys):
    assert main(["bench", "encoder", "--max-houses", "-2"]) == 2
    assert "--max-houses" in capsys.readouterr().err


def test_bench_encoder_negative_verify_top_is_a_clear_error(capsys):
    assert main(["bench", "encoder", "--verify-top", "-1"]) == 2
    assert "--verify-top" in capsys.readouterr().err


def test_bench_encoder_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["bench", "encoder", "--checkpoint", str(tmp_path / "none.pt")]) == 2
    assert "none.pt" in capsys.readouterr().err


@pytest.mark.parametrize("target, options", [
    ("sim", ["--scene", "no/such/mesh.glb"]),
    ("memory", ["--sizes", "10", "--queries", "1", "--patrol-hours", "0.001", "--no-progress"]),
    ("relocalise", ["--data", "no/such/dataset"]),
    ("encoder", ["--data", "no/such/dataset"]),
    ("agent", ["--data", "no/such/dataset"]),
    ("pipeline", ["--data", "no/such/dataset", "--no-progress"]),
    ("replay", ["--data", "no/such/dataset", "--no-progress"]),
])
def test_bench_json_path_that_cannot_be_written_is_refused_before_the_run(target, options, tmp_path, capsys):
    """`--json FOLDER` was found out only after the whole bench (a traceback at the end of an hour's run); every
    other error came first."""
    assert main(["bench", target, *options, "--json", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"memnav bench: error: --json {tmp_path}: is a directory")


def test_bench_encoder_vocabulary_needs_a_word(capsys):
    """--vocab-words 0 rendered every view, then failed in cv2.kmeans with a traceback."""
    assert main(["bench", "encoder", "--vocab-words", "0"]) == 2
    assert "--vocab-words must be >= 1" in capsys.readouterr().err


def test_orb_vocabulary_larger_than_its_descriptors_is_a_clear_error():
    import numpy as np

    from memnav.eval.bench_encoder import OrbBagOfWords

    rgb = np.random.default_rng(0).integers(0, 256, (2, 128, 128, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="--vocab-words 100000: more words than the"):
        OrbBagOfWords(rgb, 100_000, 0)
    assert len(OrbBagOfWords(rgb, 8, 0).centers) == 8


def _interrupted_when(args: list[str], text: str, tmp_path, timeout_s: float = 240.0) -> tuple[int, str, str]:
    """`memnav ARGS` as a process of its own, sent SIGINT (Ctrl-C) once `text` is on its stderr (a part measured);
    its exit status, stdout and stderr."""
    out_log, err_log = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with out_log.open("w") as out, err_log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "memnav.cli", *args], stdout=out,
                                stderr=err)
        try:
            assert wait_for_text(err_log, text, timeout_s), err_log.read_text()[-3000:]
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGABRT)   # faulthandler: the stacks of a process that did not end
                proc.wait(timeout=30)
    return proc.returncode, out_log.read_text(), err_log.read_text()


@pytest.mark.slow
def test_ctrl_c_during_bench_memory_keeps_the_sizes_measured(tmp_path):
    """Ctrl-C while the second size is built: the first size's figures are printed and written, marked interrupted,
    and the process exits 130 (everything was lost before)."""
    out = tmp_path / "memory.json"
    code, stdout, stderr = _interrupted_when(["bench", "memory", "--sizes", "10,100k", "--queries", "5",
                                              "--db", str(tmp_path / "db"), "--json", str(out)],
                                             "100k: generating", tmp_path)
    assert code == 130, stderr[-3000:]
    res = json.loads(out.read_text())
    assert json.loads(stdout) == res
    assert res["interrupted"] is True and res["left_out"] == ["size 100k", "bytes_per_node", "patrol"]
    assert res["insert_ms_p50_10"] > 0 and 0.0 <= res["retrieve_recall_at_10_10"] <= 1.0
    assert "insert_ms_p50_100k" not in res and "nodes_after_patrol" not in res and res["sizes"] == [10, 100_000]
    assert "memnav bench memory: interrupted: measured size 10; left out: size 100k, bytes_per_node, patrol" in stderr
    assert "Traceback" not in stderr
    assert list((tmp_path / "db").iterdir()) == []    # the 100k database was not left half-built


@pytest.mark.slow
def test_ctrl_c_during_bench_sim_keeps_the_resolutions_timed(tmp_path):
    out = tmp_path / "sim.json"
    code, stdout, stderr = _interrupted_when(["bench", "sim", "--data", str(tmp_path / "none"), "--steps", "800",
                                              "--chunks", "3", "--heavy-triangles", "30000", "--json", str(out)],
                                             "| 1/3 [", tmp_path)
    assert code == 130, stderr[-3000:]
    res = json.loads(out.read_text())
    assert json.loads(stdout) == res
    assert res["interrupted"] is True and res["left_out"] == ["rgbd_256", "heavy_128"]
    assert res["rgbd_128_steps_per_s"] > 0 and res["rgbd_128_renderer"] == "object"
    assert "rgbd_256_steps_per_s" not in res and "heavy_128_steps_per_s" not in res
    assert res["targets"]["rgbd_128_steps_per_s"] == 1000 and res["render_threads"] == 1
    assert "memnav bench sim: interrupted: measured rgbd_128; left out: rgbd_256, heavy_128" in stderr
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_ctrl_c_during_bench_encoder_keeps_the_encoders_recall(tiny_data, tmp_path, monkeypatch, capsys):
    """Ctrl-C while the ORB vocabulary is built: the encoder's recall, its scan verification and the pixel baseline
    measured before are printed and written; the ORB baseline and the latency are left out."""
    from memnav.eval import bench_encoder

    def ctrl_c(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_encoder, "OrbBagOfWords", ctrl_c)
    torch.manual_seed(0)
    ckpt = tmp_path / "enc.pt"
    save_checkpoint(FrameEncoder(EncoderConfig()), ckpt)
    out = tmp_path / "enc.json"
    assert main(["bench", "encoder", "--checkpoint", str(ckpt), "--data", str(tiny_data), "--db-per-house", "20",
                 "--queries-per-house", "8", "--vocab-words", "8", "--verify-top", "2", "--json", str(out),
                 "--no-progress"]) == 130
    printed = capsys.readouterr()
    res = json.loads(out.read_text())
    assert json.loads(printed.out) == res
    assert res["interrupted"] is True and res["left_out"] == ["ORB baseline", "latency"]
    for key in ("recall_at_1", "recall_at_5", "recall_at_1_verified", "baseline_pixels_recall_at_1"):
        assert 0.0 <= res[key] <= 1.0
    assert res["queries_evaluated"] > 0 and res["database_size"] == 20 and res["split"] == "test"
    assert "baseline_orb_recall_at_1" not in res and "encode_ms_p50" not in res
    assert ("memnav bench encoder: interrupted: measured encoder recall, scan verification, pixel baseline; left out: "
            "ORB baseline, latency") in printed.err
