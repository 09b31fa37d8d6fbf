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


def _edited_split(tiny_dataset, tmp_path, edit) -> list[str]:
    """--data and --scenes-dir of the tiny dataset's test split with `edit(episodes)` applied (a user's edited
    episode file)."""
    with gzip.open(tiny_dataset / "episodes" / "test.json.gz", "rt") as f:
        data = json.load(f)
    edit(data["episodes"])
    out = tmp_path / "edited.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(data, f)
    return ["--data", str(out), "--scenes-dir", str(tiny_dataset / "scenes")]


@pytest.mark.parametrize("extra", [["--agent", "oracle"], ["--agent", "oracle", "--workers", "2"],
                                   ["--compare", "oracle,forward", "--max-steps", "30"]])
def test_an_unreachable_goal_skips_its_episode_with_a_warning_and_the_run_goes_on(tiny_dataset, tmp_path, capfd,
                                                                                   extra):
    """An episode whose goal no navigable path reaches (a user's edit moved it out of the house) stopped the whole
    run with an error, writing nothing. It is skipped with a warning naming it, left out of the means, and listed
    with the reason under skipped_episodes; every other episode is run, written and reported."""
    def move_goal_out(episodes):
        episodes[2]["goals"][0]["position"][0] += 100.0

    data = _edited_split(tiny_dataset, tmp_path, move_goal_out)
    with gzip.open(data[1], "rt") as f:
        ids = [e["episode_id"] for e in json.load(f)["episodes"]]
    out_json, report = tmp_path / "run.json", tmp_path / "report"
    assert main(["eval", *data, "--json", str(out_json), "--report", str(report), "--no-progress",
                 *extra]) == 0
    captured = capfd.readouterr()   # a worker process warns on the stderr it inherited
    assert f"episode {ids[2]}" in captured.err and "unreachable" in captured.err and "skipped" in captured.err
    assert f"skipped, not run and not in the means above (skipped_episodes in the results): {ids[2]}" in captured.out
    res = json.loads(out_json.read_text())
    per_agent = res["agents"] if "--compare" in extra else {"oracle": res}
    for name, a in per_agent.items():
        assert a["episodes"] == 5, name
        assert [e["episode_id"] for e in a["per_episode"]] == ids[:2] + ids[3:]
        assert [(s["episode_id"], "unreachable from the start" in s["reason"]) for s in a["skipped_episodes"]] \
            == [(ids[2], True)]
    assert per_agent["oracle"]["success"] == 1.0 or "--compare" in extra
    assert json.loads((report / "results.json").read_text()) == res
    assert "interrupted" not in res


def test_a_run_whose_every_goal_is_unreachable_exits_2_and_writes_nothing(tiny_dataset, tmp_path, capsys):
    def move_goals_out(episodes):
        for e in episodes:
            e["goals"][0]["position"][2] -= 100.0

    data = _edited_split(tiny_dataset, tmp_path, move_goals_out)
    out_json = tmp_path / "run.json"
    assert main(["eval", "--agent", "forward", *data, "--episodes", "2", "--json", str(out_json),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "none of the 2 episodes could be run" in err and "unreachable" in err and "Traceback" not in err
    assert not out_json.exists()


def test_another_error_at_an_episode_start_is_not_taken_for_an_unreachable_goal(tiny_dataset, tmp_path, capsys,
                                                                                 monkeypatch):
    from memnav.sim.embedded import EmbeddedSimulator

    def broken(self, episode):
        raise ValueError("a broken simulator")

    monkeypatch.setattr(EmbeddedSimulator, "reset", broken)
    assert main(["eval", "--agent", "oracle", "--data", str(tiny_dataset), "--episodes", "1", "--no-progress"]) == 2
    assert "a broken simulator" in capsys.readouterr().err


def test_the_oracle_heads_for_the_nearest_goal_as_the_metrics_measure(tiny_dataset, tmp_path):
    """With several goals, Success and SPL measure to the nearest one, but the oracle drove to the first (the goal
    photo's): on an episode whose second goal lies 2.5 m along the way to a far first one, its SPL was about
    2.5 m over the whole way. Now it heads for the nearest and its SPL stays the upper reference."""
    import numpy as np

    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.episodes import load_episodes

    episodes = load_episodes(tiny_dataset, "test")
    far = max(episodes, key=lambda e: e.geodesic_distance)
    sim = EmbeddedSimulator(config=SimConfig())
    sim.reset(far)
    start = sim.agent_state.position
    assert sim.geodesic_distance(start, far.goal.position) > 6.0
    path = np.asarray(sim.shortest_path(start, far.goal.position), dtype=np.float64)
    along = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(path, axis=0), axis=1))])
    k = int(np.searchsorted(along, 2.5))    # the point 2.5 m along the shortest path, on its k-th leg
    near = path[k - 1] + (path[k] - path[k - 1]) * (2.5 - along[k - 1]) / (along[k] - along[k - 1])
    assert sim.geodesic_distance(start, near) == pytest.approx(2.5, abs=0.3)
    sim.close()

    def second_goal(raw):
        raw[:] = [e for e in raw if e["episode_id"] == far.episode_id]
        raw[0]["goals"].append({"position": [float(v) for v in near], "radius": None})

    data = _edited_split(tiny_dataset, tmp_path, second_goal)
    out_json = tmp_path / "oracle.json"
    assert main(["eval", "--agent", "oracle", *data, "--json", str(out_json), "--no-progress"]) == 0
    res = json.loads(out_json.read_text())
    (ep,) = res["per_episode"]
    assert ep["geodesic_distance_m"] < 3.0                   # the metrics measure to the near goal
    assert res["success"] == 1.0 and res["spl"] >= 0.95       # and the oracle drove there


def test_the_results_name_every_setting_the_run_needs_to_be_repeated(tiny_dataset, tmp_path):
    """--max-steps, --seed, --no-explore (and the other settings that change the results) are in the results
    file, beside the camera, models and exploring options already there."""
    out = tmp_path / "run.json"
    assert main(["eval", "--agent", "forward", "--data", str(tiny_dataset), "--episodes", "2", "--spread",
                 "--max-steps", "7", "--seed", "3", "--no-explore", "--no-homing", "--renderer", "bvh",
                 "--json", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert (res["max_steps"], res["seed"], res["explore"], res["homing"], res["renderer"]) == (7, 3, False, False,
                                                                                              "bvh")
    assert res["episode_selection"] == {"episodes": 2, "episode_ids": None, "spread": True}
    assert (res["policy_dir"], res["scenes_dir"], res["memory_dir"], res["workers"]) == ("models", None, None, 1)
    assert res["map_checks_in_background"] is False and res["skipped_episodes"] == []
    assert all(e["steps"] == 7 for e in res["per_episode"])
    # defaults, and the same keys at the top level of a --compare run
    first = res["per_episode"][0]["episode_id"]
    assert main(["eval", "--compare", "forward,random", "--data", str(tiny_dataset), "--episode-ids", first,
                 "--max-steps", "3", "--json", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert (res["max_steps"], res["seed"], res["explore"], res["homing"]) == (3, 0, True, True)
    assert res["episode_selection"]["episode_ids"] == first
    assert res["agents"]["random"]["skipped_episodes"] == []


@pytest.mark.parametrize("extra", [["--agent", "oracle"], ["--compare", "oracle,forward", "--max-steps", "30"]])
def test_episodes_counts_the_episodes_run_in_either_kind_of_results_file(tiny_dataset, tmp_path, extra):
    """A results file's top-level `episodes` counted the episodes run with one agent but the episodes selected with
    --compare, so a skipped episode made the two kinds disagree. Both now count the episodes run (by every agent),
    as each agent's summary does, and say both explicitly: episodes_selected and episodes_run, top level and per
    agent."""
    def move_goal_out(episodes):
        episodes[2]["goals"][0]["position"][0] += 100.0

    data = _edited_split(tiny_dataset, tmp_path, move_goal_out)
    out_json = tmp_path / "run.json"
    assert main(["eval", *data, "--json", str(out_json), "--no-progress", *extra]) == 0
    res = json.loads(out_json.read_text())
    assert res["episodes"] == 5   # --compare: was 6, the episodes selected
    assert (res["episodes_selected"], res["episodes_run"]) == (6, 5)
    per_agent = res["agents"] if "--compare" in extra else {"oracle": res}
    for name, a in per_agent.items():
        assert (a["episodes"], a["episodes_selected"], a["episodes_run"], len(a["skipped_episodes"])) == (5, 6, 5, 1)
        assert (res.get(name) or res)["episodes_run"] == 5   # --compare: the summaries at the top level too
        assert {"success", "spl", "soft_spl", "mean_steps"} <= set(a)


def test_episodes_of_an_interrupted_compare_run_counts_those_every_agent_ran(tiny_dataset, tmp_path, capsys,
                                                                            monkeypatch):
    """Ctrl-C during the second agent of --compare: each agent says how many episodes it ran, and the top-level
    `episodes` (and `episodes_run`) counts those both ran, not the 6 selected."""
    from memnav.sim.env import ImageNavEnv

    reset, started = ImageNavEnv.reset, []

    def reset_until_ctrl_c(self, episode):
        started.append(episode.episode_id)
        if len(started) == 6 + 2 + 1:   # oracle's 6, forward's first 2, then Ctrl-C
            raise KeyboardInterrupt
        return reset(self, episode)

    monkeypatch.setattr(ImageNavEnv, "reset", reset_until_ctrl_c)
    out_json = tmp_path / "run.json"
    assert main(["eval", "--compare", "oracle,forward", "--max-steps", "20", "--split", "test", "--data",
                 str(tiny_dataset), "--json", str(out_json), "--no-progress"]) == 130
    capsys.readouterr()
    res = json.loads(out_json.read_text())
    assert (res["episodes"], res["interrupted"]) == (2, True)   # was 6, the episodes selected
    assert (res["episodes_selected"], res["episodes_run"]) == (6, 2)
    assert {n: (a["episodes"], a["episodes_run"], a["episodes_selected"]) for n, a in res["agents"].items()} \
        == {"oracle": (6, 6, 6), "forward": (2, 2, 6)}
