"""`memnav scenes` + `memnav eval` end to end on a tiny generated dataset."""
import gzip
import json

import pytest

from memnav.cli import main
from memnav.eval.learned_agents import MODELS


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "houses"
    rc = main(["scenes", "--out", str(out), "--houses", "3", "--seed", "5", "--train-episodes", "4",
               "--val-episodes", "2", "--test-episodes", "6", "--no-progress"])
    assert rc == 0
    return out


def test_scenes_layout_and_split_by_house(tiny_dataset):
    out = tiny_dataset
    assert (out / ".complete").exists()
    glbs = sorted((out / "scenes").glob("*.glb"))
    assert len(glbs) == 3
    for glb in glbs:
        stage = json.loads(glb.with_name(glb.stem + ".stage_config.json").read_text())
        assert stage["up"] == [0, 1, 0] and stage["front"] == [0, 0, -1]
    scenes_by_split = {}
    for split in ("train", "val", "test"):
        with gzip.open(out / "episodes" / f"{split}.json.gz", "rt") as f:
            data = json.load(f)
        scenes_by_split[split] = {ep["scene_id"] for ep in data["episodes"]}
        for ep in data["episodes"]:
            assert {"episode_id", "scene_id", "start_position", "start_rotation", "goals", "info"} <= set(ep)
            assert len(ep["start_rotation"]) == 4 and len(ep["goals"][0]["position"]) == 3
            assert 1.5 <= ep["info"]["geodesic_distance"] <= 15.0
    assert not scenes_by_split["test"] & scenes_by_split["train"]
    assert not scenes_by_split["val"] & scenes_by_split["train"]


def test_same_seed_same_bytes(tiny_dataset, tmp_path):
    again = tmp_path / "again"
    assert main(["scenes", "--out", str(again), "--houses", "3", "--seed", "5", "--train-episodes", "4",
                 "--val-episodes", "2", "--test-episodes", "6", "--no-progress"]) == 0
    for rel in ("episodes/test.json.gz", "episodes/train.json.gz", "scenes/house_000.glb"):
        assert (again / rel).read_bytes() == (tiny_dataset / rel).read_bytes(), rel


def test_oracle_is_perfect_and_random_is_not(tiny_dataset, tmp_path, capsys):
    out_json = tmp_path / "oracle.json"
    assert main(["eval", "--agent", "oracle", "--split", "test", "--episodes", "6", "--data", str(tiny_dataset),
                 "--json", str(out_json), "--no-progress"]) == 0
    res = json.loads(out_json.read_text())
    assert res["episodes"] == 6
    assert res["success"] == 1.0
    assert res["spl"] >= 0.98
    for key in ("success", "spl", "soft_spl", "episodes", "mean_steps"):
        assert key in res
    table = capsys.readouterr().out
    assert "oracle" in table and "spl" in table
    rnd = tmp_path / "random.json"
    assert main(["eval", "--agent", "random", "--split", "test", "--episodes", "6", "--data", str(tiny_dataset),
                 "--json", str(rnd), "--no-progress"]) == 0
    assert json.loads(rnd.read_text())["spl"] < 0.5


def test_eval_runs_on_either_ray_caster(tiny_dataset, tmp_path):
    results = {}
    for renderer in ("object", "bvh"):
        out = tmp_path / f"{renderer}.json"
        assert main(["eval", "--agent", "oracle", "--split", "test", "--episodes", "2", "--data", str(tiny_dataset),
                     "--renderer", renderer, "--json", str(out), "--no-progress"]) == 0
        results[renderer] = json.loads(out.read_text())
    # the oracle follows geodesic paths: the renders differ only in tie-broken pixels, the episodes not at all
    assert results["object"]["success"] == results["bvh"]["success"] == 1.0
    assert results["object"]["spl"] == results["bvh"]["spl"]
    with pytest.raises(SystemExit):
        main(["eval", "--renderer", "raster", "--data", str(tiny_dataset)])
    assert (results["bvh"]["hfov_deg"], results["bvh"]["camera_height_m"]) == (90.0, 1.25)
    # the models and exploring options of the run: the shipped ones, nothing changed
    assert (results["bvh"]["encoder"], results["bvh"]["calibration"]) == ("models/encoder.pt",
                                                                        "models/stop_calibration.json")
    assert results["bvh"]["exploring_options"] == {}


def test_eval_with_another_camera_names_it_in_the_results(tiny_dataset, tmp_path):
    out = tmp_path / "narrow.json"
    assert main(["eval", "--agent", "oracle", "--split", "test", "--episodes", "1", "--data", str(tiny_dataset),
                 "--hfov-deg", "69", "--camera-height-m", "0.6", "--image-px", "160", "120", "--json", str(out),
                 "--calibration", str(MODELS / "stop_calibration_fov60.json"), "--keep-unseen-obstacles",
                 "--map-range-m", "4", "--map-pixel-spacing-deg", "0.7", "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert (res["hfov_deg"], res["camera_height_m"], res["image_px"]) == (69.0, 0.6, [160, 120])
    assert res["calibration"] == "models/stop_calibration_fov60.json"
    assert res["exploring_options"] == {"keep_unseen_obstacles": True, "map_range_m": 4.0,
                                        "map_pixel_spacing_deg": 0.7}
    assert res["success"] == 1.0


def test_eval_bad_inputs_exit_nonzero(tiny_dataset, tmp_path, capsys):
    assert main(["eval", "--agent", "oracle", "--split", "nope", "--data", str(tiny_dataset), "--no-progress"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["eval", "--data", str(tmp_path / "missing"), "--no-progress"]) == 2
    with pytest.raises(SystemExit):
        main(["eval", "--agent", "teleporter"])
    # options that only make sense together are refused by name
    base = ["eval", "--agent", "oracle", "--data", str(tiny_dataset), "--no-progress"]
    assert main(base + ["--odometry-restarts"]) == 2
    assert "--odometry-restarts needs --lifelong" in capsys.readouterr().err
    assert main(base + ["--lifelong", "--map-checks-in-background"]) == 2
    assert "--map-checks-in-background needs --odometry-restarts" in capsys.readouterr().err
    assert main(base + ["--lifelong", "--odometry-origin", "start"]) == 2
    assert "--odometry-origin start with --lifelong needs --odometry-restarts" in capsys.readouterr().err


def test_corrupt_episode_file_exits_2_and_names_it(tmp_path, capsys):
    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08garbage")
    assert main(["eval", "--data", str(bad), "--no-progress"]) == 2
    assert "broken.json.gz" in capsys.readouterr().err
    assert bad.read_bytes() == b"\x1f\x8b\x08garbage"   # nothing touched


@pytest.mark.parametrize("option, value, message", [
    ("--max-steps", "0", "--max-steps must be >= 1"), ("--seed", "-5", "--seed must be >= 0"),
    ("--episode-ids", ",", "no episode id"), ("--scenes-dir", "{tmp}/none", "--scenes-dir"),
    ("--json", "{tmp}", "--json"), ("--report", "{file}", "--report"), ("--trace", "{file}", "--trace"),
    ("--memory-dir", "{file}", "--memory-dir"), ("--compare", "random", "--agent and --compare"),
    ("--memory-dir", "{tmp}/mem", "--memory-dir needs --lifelong"),   # not silently ignored
    ("--colour-weight", "nan", "--colour-weight must be a finite number"),
    ("--hfov-deg", "180", "--hfov-deg must be in (0, 180)"),
    ("--camera-height-m", "0", "--camera-height-m must be a positive number")])
def test_bad_option_exits_2_naming_it_before_any_episode_runs(tiny_dataset, tmp_path, capsys, option, value,
                                                              message):
    file = tmp_path / "a_file"
    file.write_text("kept")
    argv = ["eval", "--agent", "forward", "--data", str(tiny_dataset), "--no-progress",
            option, value.format(tmp=tmp_path, file=file)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""    # refused before the evaluation: no table
    assert file.read_text() == "kept"


def test_eval_options_carry_every_exploring_tuning_field_with_its_default():
    """`memnav eval` has an option for each ExploringTuning field (same name), defaulting to the agents'."""
    from memnav.cli import build_parser
    from memnav.eval.exploring_defaults import ExploringTuning

    args = build_parser().parse_args(["eval", "--agent", "memnav"])
    assert ExploringTuning.values_of(args) == ExploringTuning.values_of(ExploringTuning())
    args = build_parser().parse_args(["eval", "--agent", "memnav", "--frontier-colour-weight", "15",
                                      "--candidate-prior", "--keep-unseen-obstacles"])
    assert ExploringTuning(**ExploringTuning.values_of(args)).frontier_colour_weight == 15.0
    assert ExploringTuning.values_of(args)["candidate_prior"] is True
    assert ExploringTuning.values_of(args)["keep_unseen_obstacles"] is True


@pytest.mark.parametrize("extra, finished", [
    ([], {"oracle": 2}),                                       # one agent, serial
    (["--lifelong", "--lifelong-visits", "2"], {"oracle": 2}),  # a sequence finished, the next one interrupted
    (["--compare", "oracle,forward"], {"oracle": 6, "forward": 1})])   # the second agent interrupted
def test_ctrl_c_keeps_the_finished_episodes_in_the_table_json_and_report(tiny_dataset, tmp_path, capsys,
                                                                         monkeypatch, extra, finished):
    """Ctrl-C ends the run with status 130, but the episodes finished before it are printed, written to --json and
    reported, marked interrupted (they were lost, and nothing was written)."""
    from memnav.sim.env import ImageNavEnv

    interrupt_at = sum(finished.values()) + 1   # the episode start that Ctrl-C interrupts
    reset, started = ImageNavEnv.reset, []

    def reset_until_ctrl_c(self, episode):
        started.append(episode.episode_id)
        if len(started) == interrupt_at:
            raise KeyboardInterrupt
        return reset(self, episode)

    monkeypatch.setattr(ImageNavEnv, "reset", reset_until_ctrl_c)
    out_json, report = tmp_path / "run.json", tmp_path / "report"
    argv = ["eval", "--split", "test", "--data", str(tiny_dataset), "--json", str(out_json), "--report", str(report),
            "--no-progress", *(extra if "--compare" in extra else ["--agent", "oracle", *extra])]
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert "interrupted" in captured.err and "oracle" in captured.out   # the table of what finished
    res = json.loads(out_json.read_text())
    assert res["interrupted"] is True
    per_agent = res["agents"] if "--compare" in extra else {"oracle": res}
    assert {name: len(a["per_episode"]) for name, a in per_agent.items()} == finished
    assert [e["episode_id"] for e in per_agent["oracle"]["per_episode"]] == started[:finished["oracle"]]
    assert json.loads((report / "results.json").read_text()) == res
    assert "<td>interrupted</td><td>True</td>" in (report / "report.html").read_text()


def test_ctrl_c_before_any_episode_finished_writes_nothing(tiny_dataset, tmp_path, capsys, monkeypatch):
    from memnav.sim.env import ImageNavEnv

    def ctrl_c(self, episode):
        raise KeyboardInterrupt

    monkeypatch.setattr(ImageNavEnv, "reset", ctrl_c)
    out_json = tmp_path / "run.json"
    assert main(["eval", "--agent", "oracle", "--split", "test", "--data", str(tiny_dataset), "--json", str(out_json),
                 "--no-progress"]) == 130
    assert "nothing is written" in capsys.readouterr().err
    assert not out_json.exists()


def test_json_dash_writes_the_results_to_stdout_and_the_table_to_stderr(tiny_dataset, tmp_path, monkeypatch, capsys):
    """`--json -` wrote a file named "-" into the working folder; now it is stdout, for a pipe (`| jq .spl`)."""
    import json

    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--agent", "oracle", "--split", "test", "--episodes", "2", "--data", str(tiny_dataset),
                 "--no-progress", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    res = json.loads(out)
    assert res["agent"] == "oracle" and res["episodes"] == 2 and res["success"] == 1.0
    assert "success" in err and "oracle" in err                  # the table, on stderr
    assert list(tmp_path.iterdir()) == []
