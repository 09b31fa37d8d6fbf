"""`memnav eval --compare` / `--lifelong` with learned agents, and `memnav bench agent`, on a tiny dataset."""
import json
import math

import pytest
import torch
from conftest import make_tiny_dataset

from memnav.cli import main
from memnav.core.policy import MemoryPolicy, PolicyConfig, save_policy
from memnav.eval.evaluate import spread_over_scenes
from memnav.eval.learned_agents import MODELS
from memnav.sim.metrics import EpisodeResult, lifelong_known_house_spl, lifelong_spl_by_visit

MODELS_ARGS = ["--encoder", "models/encoder.pt", "--calibration", "models/stop_calibration.json"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    data = make_tiny_dataset(root / "houses", houses=3, seed=6, train=1, val=1, test=3)
    torch.manual_seed(0)
    for variant, tokens in (("memnav", 24), ("episodic", 24), ("gru", 0)):
        save_policy(MemoryPolicy(PolicyConfig(memory_tokens=tokens)), root / f"policy_{variant}.pt",
                    extra={"variant": variant, "memory": {"memnav": "scene_graph"}.get(variant, variant)
                           if tokens else "none"})
    return root, data



def test_lifelong_with_odometry_restarts_reopens_the_memory_every_visit(setup, tmp_path, capsys):
    root, data = setup
    out, mem = tmp_path / "reboots.json", tmp_path / "mem"
    assert main(["eval", "--agent", "memnav", "--lifelong", "--odometry-restarts", "--memory-dir", str(mem),
                 "--data", str(data), "--episodes", "3", "--max-steps", "15", "--policy-dir", str(root),
                 *MODELS_ARGS, "--json", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert res["odometry_restarts"] is True and len(res["lifelong_spl_by_visit"]) == 3
    assert res["lifelong_earlier_memory"] == [] and res["odometry_origin"] == "house"
    # no occupancy map is carried between reboots: only the visit that created the memory saved one
    dbs = list((mem / "memnav").glob("*.db"))
    assert len(dbs) == 1
    # a second run on the same --memory-dir continues that house's memory, and says so
    capsys.readouterr()
    assert main(["eval", "--agent", "memnav", "--lifelong", "--odometry-restarts", "--memory-dir", str(mem),
                 "--data", str(data), "--episodes", "1", "--max-steps", "15", "--policy-dir", str(root),
                 *MODELS_ARGS, "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["lifelong_earlier_memory"] == [dbs[0].stem]
    assert f"continues earlier runs' memory of {dbs[0].stem}" in capsys.readouterr().out
    assert main(["eval", "--agent", "memnav", "--odometry-restarts", "--data", str(data), "--no-progress"]) == 2
    assert "--lifelong" in capsys.readouterr().err

@pytest.mark.slow
def test_compare_writes_one_table_and_per_agent_keys(setup, tmp_path, capsys):
    root, data = setup
    out = tmp_path / "cmp.json"
    report = tmp_path / "report"
    agents = "random,forward,gru,episodic,memnav,memnav-fixed,oracle"
    assert main(["eval", "--compare", agents, "--data", str(data), "--episodes", "2", "--spread",
                 "--max-steps", "30", "--policy-dir", str(root), *MODELS_ARGS, "--json", str(out),
                 "--report", str(report), "--no-progress"]) == 0
    table = capsys.readouterr().out
    res = json.loads(out.read_text())
    for name in agents.split(","):
        assert name in table
        for key in ("success", "spl", "soft_spl", "mean_steps"):
            assert key in res[name] and key in res["agents"][name]
        assert len(res["agents"][name]["per_episode"]) == 2
        assert {e["scene_id"] for e in res["agents"][name]["per_episode"]} == \
            {e["scene_id"] for e in res["agents"]["oracle"]["per_episode"]}
    for e in res["agents"]["oracle"]["per_episode"]:   # the oracle fails only by running out of steps
        assert e["success"] == 1.0 or e["steps"] == 30
    assert res["forward"]["success"] == 0.0 and res["forward"]["mean_steps"] == 30
    # the memnav agents say which of their layers ended each episode; agents without layers leave it empty
    for name in ("memnav", "memnav-fixed"):
        layers = [e["ended_by"] for e in res["agents"][name]["per_episode"]]
        assert all(layers) and sum(r["episodes"] for r in res[name]["ended_by"].values()) == 2
        assert f"{name}: episodes ended by: " in table
    assert all(e["ended_by"] == "" for e in res["agents"]["oracle"]["per_episode"]) and "ended_by" not in res["oracle"]
    # ... and how far each of their layers drove: the layers' meters add up to the path, the part towards spots
    # given up is part of its layer's
    for name in ("memnav", "memnav-fixed"):
        for e in res["agents"][name]["per_episode"]:
            assert sum(e["path_by_layer_m"].values()) == pytest.approx(e["path_length_m"], abs=0.01)
            assert all(m <= e["path_by_layer_m"][layer] + 1e-9 for layer, m in e["path_given_up_m"].items())
        assert f"{name}: path per episode " in table and res[name]["path_by_layer"]["explore"]["path_m"] > 0
    assert all(e["path_by_layer_m"] is None for e in res["agents"]["oracle"]["per_episode"])
    assert "path_by_layer" not in res["oracle"]
    # learned agents record their calibrated belief at a STOP; the others, and episodes without a STOP, do not
    for name in agents.split(","):
        for e in res["agents"][name]["per_episode"]:
            has = e["stop_belief"] is not None
            assert has == (name in ("gru", "episodic", "memnav", "memnav-fixed") and e["status"] == "stopped")
            assert not has or 0.0 <= e["stop_belief"] <= 1.0
            assert 0.0 < e["goal_view_depth_m"] < 10.0   # the goal photo's median depth, the same for every agent
    # the report holds the same results, one table row per agent and the figures the run allows
    assert json.loads((report / "results.json").read_text()) == res
    page = (report / "report.html").read_text()
    for name in agents.split(","):
        assert f"<td>{name}</td>" in page
    for png in ("summary.png", "by_distance.png", "by_goal_view.png", "ended_by.png", "path_by_layer.png",
                "episodes.png", "views.png"):
        assert (report / png).stat().st_size > 1000 and f"src='{png}'" in page
    assert "memnav against each agent" in page and "lifelong.png" not in page


@pytest.mark.slow
def test_lifelong_keeps_memory_per_house(setup, tmp_path):
    root, data = setup
    out = tmp_path / "life.json"
    mem = tmp_path / "mem"
    assert main(["eval", "--agent", "memnav", "--lifelong", "--memory-dir", str(mem), "--data", str(data),
                 "--episodes", "3", "--max-steps", "15", "--policy-dir", str(root), *MODELS_ARGS,
                 "--json", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert len(res["lifelong_spl_by_visit"]) == 3   # the first 3 test episodes are in one house
    # known-house SPL: the mean over every visit after the house's first
    assert res["lifelong_spl_known_house"] == pytest.approx(sum(e["spl"] for e in res["per_episode"][1:]) / 2)
    dbs = list((mem / "memnav").glob("*.db"))
    assert len(dbs) == 1
    from memnav.core.memory.scene_graph import SceneGraphMemory
    m = SceneGraphMemory.open(dbs[0])
    try:
        stats = m.stats()
        assert stats.places > 0 and stats.last_stamp_ns >= 3 * 10**9   # stamps grew across the 3 visits
    finally:
        m.close()
    # a second run continues the same databases (stamps continue, nothing is refused), here with the optional
    # memory-ranked candidates and homing over the occupancy map
    assert main(["eval", "--agent", "memnav", "--lifelong", "--memory-dir", str(mem), "--data", str(data),
                 "--episodes", "1", "--max-steps", "5", "--policy-dir", str(root), *MODELS_ARGS,
                 "--candidate-prior", "--homing-via-map", "--no-progress"]) == 0


@pytest.mark.slow
def test_lifelong_visits_restart_each_house_memory_every_v_visits(setup, tmp_path, capsys):
    """--lifelong-visits V: a house's episodes form sequences of V visits, each starting from empty memories in
    a folder of its own, and SPL by visit averages over the sequences; serial and parallel runs agree."""
    root, data = setup
    common = ["eval", "--agent", "memnav", "--lifelong", "--data", str(data), "--max-steps", "15",
              "--policy-dir", str(root), *MODELS_ARGS, "--no-progress"]
    assert main([*common, "--lifelong-visits", "-1"]) == 2
    assert "--lifelong-visits must be >= 0" in capsys.readouterr().err
    assert main([a for a in common if a != "--lifelong"] + ["--lifelong-visits", "2"]) == 2
    assert "--lifelong-visits needs --lifelong" in capsys.readouterr().err
    runs = []
    for workers in ("1", "2"):
        out, mem = tmp_path / f"seq{workers}.json", tmp_path / f"mem{workers}"
        assert main([*common, "--episodes", "3", "--lifelong-visits", "2", "--memory-dir", str(mem),
                     "--workers", workers, "--json", str(out)]) == 0
        runs.append(json.loads(out.read_text()))
        # the first 3 test episodes are in one house: sequences [1st, 2nd] and [3rd], each with its own database
        assert sorted(p.parent.name for p in (mem / "memnav").glob("seq*/*.db")) == ["seq000", "seq001"]
    serial, parallel = runs
    assert parallel["per_episode"] == serial["per_episode"]
    spl = [e["spl"] for e in serial["per_episode"]]
    assert serial["lifelong_visits"] == 2
    assert serial["lifelong_spl_by_visit"] == pytest.approx([(spl[0] + spl[2]) / 2, spl[1]])
    assert serial["lifelong_spl_known_house"] == pytest.approx(spl[1])
    # the second sequence starts from nothing: its first visit is the episode run alone, as a first visit
    alone = tmp_path / "alone.json"
    third = serial["per_episode"][2]["episode_id"]
    assert main([*common, "--episode-ids", third, "--json", str(alone)]) == 0
    assert json.loads(alone.read_text())["per_episode"] == serial["per_episode"][2:]


@pytest.mark.slow
@pytest.mark.parametrize("lifelong", [False, True])
def test_workers_give_the_serial_results(setup, tmp_path, lifelong):
    """Episodes spread over processes (a house's in order; lifelong, a house per process) end as in one process."""
    root, _ = setup
    data = make_tiny_dataset(tmp_path / "houses", houses=5, seed=6, train=2, val=1, test=1)   # 3 train houses
    common = ["eval", "--compare", "memnav,oracle", "--data", str(data), "--split", "train",
              "--max-steps", "25", "--policy-dir", str(root), *MODELS_ARGS, "--no-progress"]
    if lifelong:
        common.append("--lifelong")
    runs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.json"
        assert main([*common, "--workers", workers, "--json", str(out)]) == 0
        runs.append(json.loads(out.read_text()))
    serial, parallel = runs
    assert len(serial["agents"]["memnav"]["per_episode"]) == 6
    assert len({e["scene_id"] for e in serial["agents"]["memnav"]["per_episode"]}) == 3
    for name in ("memnav", "oracle"):
        assert parallel["agents"][name]["per_episode"] == serial["agents"][name]["per_episode"]
    if lifelong:
        assert parallel["memnav"]["lifelong_spl_by_visit"] == serial["memnav"]["lifelong_spl_by_visit"]


@pytest.mark.slow
def test_episode_ids_and_step_traces(setup, tmp_path, capsys):
    from memnav.sim.episodes import load_episodes

    root, data = setup
    ids = [str(ep.episode_id) for ep in load_episodes(data, "test")]
    out, trace = tmp_path / "ids.json", tmp_path / "trace"
    assert main(["eval", "--compare", "memnav,oracle", "--data", str(data), "--episode-ids", f"{ids[2]},{ids[0]}",
                 "--max-steps", "20", "--policy-dir", str(root), *MODELS_ARGS, "--trace", str(trace),
                 "--json", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert [e["episode_id"] for e in res["agents"]["memnav"]["per_episode"]] == [ids[0], ids[2]]   # split order
    for name in ("memnav", "oracle"):
        files = sorted((trace / name).glob("*.jsonl"))
        assert len(files) == 2
        for f, e in zip(files, res["agents"][name]["per_episode"]):
            lines = [json.loads(line) for line in f.read_text().splitlines()]
            assert lines[0]["episode"]["episode_id"] == e["episode_id"]
            steps = lines[1:]
            assert [s["step"] for s in steps] == list(range(1, e["steps"] + 1))
            assert steps[-1]["distance_to_goal_m"] == pytest.approx(e["distance_to_goal_m"], abs=1e-3)
            assert (steps[-1]["action"] == "STOP") == (e["status"] == "stopped")
            if name == "memnav":   # the learned agent says what its decisions rested on
                assert all(s["mode"] and 0.0 <= s["belief"] <= 1.0 for s in steps)
                assert steps[-1]["mode"] == e["ended_by"]
                # the per-layer path of the results is the trace's movement summed by the layer that chose it
                xz = [lines[0]["episode"]["start_xz"]] + [[s["x_m"], s["z_m"]] for s in steps]
                by_trace: dict[str, float] = {}
                for s, a, b in zip(steps, xz, xz[1:]):
                    by_trace[s["mode"]] = by_trace.get(s["mode"], 0.0) + math.dist(a, b)
                assert e["path_by_layer_m"] == pytest.approx({k: v for k, v in by_trace.items() if v > 0}, abs=0.01)
            else:
                assert "mode" not in steps[0]
    assert main(["eval", "--agent", "oracle", "--data", str(data), "--episode-ids", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_split_job_keeps_each_house_in_order():
    from pathlib import Path

    from memnav.eval.evaluate import AgentJob, split_job
    from memnav.eval.learned_agents import LearnedAgentOptions
    from memnav.sim.base import SimConfig

    class Ep:
        def __init__(self, scene, i):
            self.scene_id, self.i = scene, i
    eps = [Ep("a", i) for i in range(6)] + [Ep("b", i) for i in range(3)]
    job = AgentJob("oracle", None, 0, SimConfig(), "embedded", eps)
    pieces = split_job(job, workers=2, lifelong=False)      # 9 episodes, 8 pieces wanted: 2 per piece
    assert [idx for idx, _ in pieces] == [[0, 1], [2, 3], [4, 5], [6, 7], [8]]
    assert all([e.scene_id for e in p.episodes] == [eps[i].scene_id for i in idx] for idx, p in pieces)
    pieces = split_job(job, workers=2, lifelong=True)       # lifelong: a whole house per piece
    assert [idx for idx, _ in pieces] == [[0, 1, 2, 3, 4, 5], [6, 7, 8]]
    # lifelong sequences of 4 visits: a piece each, with the memory folder of its place in the house's run
    job = AgentJob("memnav", LearnedAgentOptions(lifelong_dir=Path("mem")), 0, SimConfig(), "embedded", eps)
    pieces = split_job(job, workers=2, lifelong=True, visits=4)
    assert [idx for idx, _ in pieces] == [[0, 1, 2, 3], [4, 5], [6, 7, 8]]
    assert [p.options.lifelong_dir for _, p in pieces] == [Path("mem/seq000"), Path("mem/seq001"), Path("mem/seq000")]


def test_unknown_compare_agent_and_wrong_checkpoint_are_clear_errors(setup, tmp_path, capsys):
    root, data = setup
    assert main(["eval", "--compare", "oracle,telepathy", "--data", str(data)]) == 2
    assert "telepathy" in capsys.readouterr().err
    # a name given twice ran twice and printed one row (with --lifelong, the second run on the first's memory)
    assert main(["eval", "--compare", "oracle,random,oracle", "--data", str(data)]) == 2
    assert "agent(s) named twice: oracle" in capsys.readouterr().err
    assert main(["eval", "--agent", "oracle", "--data", str(data), "--workers", "-1"]) == 2
    assert "--workers" in capsys.readouterr().err
    bad = tmp_path / "pol"
    bad.mkdir()
    save_policy(MemoryPolicy(PolicyConfig(memory_tokens=0)), bad / "policy_memnav.pt", extra={"memory": "none"})
    assert main(["eval", "--agent", "memnav", "--data", str(data), "--episodes", "1", "--policy-dir", str(bad),
                 *MODELS_ARGS]) == 2
    assert "policy_memnav.pt" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_agent_keys(setup, tmp_path):
    root, data = setup
    out = tmp_path / "agent.json"
    assert main(["bench", "agent", "--data", str(data), "--policy-dir", str(root), "--steps", "15", "--warmup", "2",
                 "--prefill", "200", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["steps"] == 15 and 0 < res["step_ms_p50"] <= res["step_ms_p99"]
    assert res["threads"] == 1 and res["blas_threads"] in (None, 1)
    assert (res["image_px"], res["hfov_deg"], res["encoder"]) == ([128, 128], 90.0, "models/encoder.pt")
    # timed on a robot's camera: a 16:9 69 deg stream, with the encoder trained on it
    robot = tmp_path / "robot.json"
    assert main(["bench", "agent", "--data", str(data), "--policy-dir", str(root), "--steps", "5", "--warmup", "1",
                 "--prefill", "0", "--hfov-deg", "69", "--image-px", "320", "180",
                 "--encoder", str(MODELS / "encoder_69deg_16x9.pt"),
                 "--calibration", str(MODELS / "stop_calibration_69deg_16x9.json"), "--map-pixel-spacing-deg", "0.7",
                 "--json", str(robot)]) == 0
    res = json.loads(robot.read_text())
    assert (res["image_px"], res["hfov_deg"], res["encoder"]) == ([320, 180], 69.0, "models/encoder_69deg_16x9.pt")
    assert res["map_pixel_spacing_deg"] == 0.7
    assert res["steps"] == 5 and res["step_ms_p50"] > 0
    assert main(["bench", "agent", "--data", str(data), "--encoder", str(tmp_path / "none.pt")]) == 2
    assert main(["bench", "agent", "--data", str(data), "--map-pixel-spacing-deg", "-1"]) == 2


def test_lifelong_spl_by_visit_and_spread():
    def r(scene, spl):
        return EpisodeResult(episode_id="x", scene_id=scene, success=1.0, spl=spl, soft_spl=spl,
                             distance_to_goal_m=0.1, geodesic_distance_m=3.0, path_length_m=3.0, steps=10,
                             status=None)
    res = [r("a", 0.2), r("a", 0.4), r("b", 0.6), r("a", 0.8), r("b", 1.0)]
    assert lifelong_spl_by_visit(res) == pytest.approx([0.4, 0.7, 0.8])
    assert lifelong_known_house_spl(res) == pytest.approx((0.4 + 0.8 + 1.0) / 3)
    assert lifelong_known_house_spl(res[:1]) is None
    # sequences of 2 visits: a house's 3rd episode is the first visit of its second sequence
    assert lifelong_spl_by_visit(res, visits=2) == pytest.approx([(0.2 + 0.6 + 0.8) / 3, (0.4 + 1.0) / 2])
    assert lifelong_known_house_spl(res, visits=2) == pytest.approx((0.4 + 1.0) / 2)

    class Ep:
        def __init__(self, scene, i):
            self.scene_id, self.i = scene, i
    eps = [Ep("a", i) for i in range(5)] + [Ep("b", i) for i in range(2)] + [Ep("c", i) for i in range(3)]
    picked = spread_over_scenes(eps, 5)
    assert [(e.scene_id, e.i) for e in picked] == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)]
