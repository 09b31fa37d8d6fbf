"""`memnav goal-audit`: look-alikes of goal photos elsewhere in a house, and evaluation results split by them."""
import json
import math

import numpy as np
import pytest
from conftest import make_tiny_dataset

from memnav.cli import main
from memnav.eval.goal_audit import (
    GoalAuditConfig,
    ViewGrid,
    annotate_ratios,
    audit_goal,
    distinct_candidates,
    grid_positions,
    half_resolution,
    read_audit,
    rms_difference,
    simulator_renderer,
    split_results,
    view_stack,
)
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator

COARSE = GoalAuditConfig(grid_m=0.25, heading_deg=15.0, candidates=3)


def test_config_refuses_bad_values_by_name():
    with pytest.raises(ValueError, match="grid_m"):
        GoalAuditConfig(grid_m=0.0)
    with pytest.raises(ValueError, match="nudge_deg"):
        GoalAuditConfig(nudge_deg=float("nan"))
    with pytest.raises(ValueError, match="image_px"):
        GoalAuditConfig(image_px=33)
    with pytest.raises(ValueError, match="candidates"):
        GoalAuditConfig(candidates=0)


def test_view_stack_scales_depth_like_a_colour_and_differences_are_rms():
    cfg = GoalAuditConfig(depth_clip_m=5.0, depth_scale_m=2.0)
    rgb = np.full((1, 4, 4, 3), 255, np.uint8)
    depth = np.array([[[1.0, 9.0, 0.0, 2.0]] * 4], np.float32)
    v = view_stack(rgb, depth, cfg)
    assert v.shape == (1, 4, 4, 4) and np.allclose(v[..., :3], 1.0)
    assert np.allclose(v[0, 0, :, 3], [0.5, 2.5, 0.0, 1.0])   # 9 m clipped to 5 m
    other = v.copy()
    other[..., 0] = 0.0                                        # red off everywhere: a quarter of the channels
    assert rms_difference(v[0], np.concatenate([v, other]))[0] == 0.0
    assert math.isclose(float(rms_difference(v[0], other)[0]), 0.5, rel_tol=1e-6)
    assert half_resolution(v).shape == (1, 2 * 2 * 4)


def test_distinct_candidates_keep_spacing_and_stay_outside():
    cfg = GoalAuditConfig(heading_deg=180.0, candidates=3, candidate_spacing_m=0.5)   # two headings per spot
    positions = np.array([[0.0, 0, 0], [0.1, 0, 0], [1.0, 0, 0], [1.2, 0, 0], [2.0, 0, 0]])
    grid = ViewGrid(positions, cfg.headings_rad, np.zeros((10, 4), np.float32))
    rank_of_spot = np.array([0.0, 1.0, 3.0, 2.0, 4.0])       # spot 0 best, then 1, 3, 2, 4
    sq = np.repeat(rank_of_spot, 2)
    outside = np.array([False, True, True, True, True])
    spots = [i // 2 for i in distinct_candidates(grid, sq, outside, cfg)]
    # spot 0 is inside the success region; spot 2 is 0.2 m from the better-ranked spot 3
    assert spots == [1, 3, 4]


@pytest.fixture(scope="module")
def two_rooms(tmp_path_factory):
    from conftest import write_two_room_scene

    path = write_two_room_scene(tmp_path_factory.mktemp("audit") / "scenes")
    sim = EmbeddedSimulator(path, SimConfig())
    render = simulator_renderer(sim, COARSE)
    positions, rows, cols = grid_positions(sim.grid, COARSE.grid_m)
    assert len(positions) == len(rows) == len(cols) > 100 and all(sim.grid.is_navigable(p) for p in positions)
    grid = ViewGrid.render(render, positions, COARSE)
    assert grid.descriptors.shape == (len(positions) * len(COARSE.headings_rad), 32 * 32 * 4)
    return sim, render, grid, positions


def _audit(two_rooms, goal_xz, yaw):
    sim, render, grid, positions = two_rooms
    goal = np.array([goal_xz[0], sim.grid.floor_height_m, goal_xz[1]])
    geo = np.array([sim.grid.geodesic_distance(p, goal) for p in positions])
    photo = render(goal[None], np.array([yaw]))[0]
    return audit_goal(render, grid, photo, goal, yaw, geo, lambda p: sim.grid.geodesic_distance(p, goal),
                      sim.grid.is_navigable, COARSE)


def test_a_bare_wall_is_reproduced_in_the_next_room(two_rooms):
    # 0.6 m from the north wall, facing it (yaw 0 looks along -z): the view is that wall only, and the wall
    # (one part, one colour) runs through both rooms
    found = _audit(two_rooms, (2.0, 0.6), 0.0)
    assert found.lookalike_geodesic_m is not None and found.lookalike_geodesic_m > 1.0
    assert found.ratio <= COARSE.near_identical_ratio
    row = found.to_json(COARSE)
    assert row["near_identical"] and row["ambiguous"]


def test_a_view_of_the_only_box_has_no_look_alike(two_rooms):
    # facing west across the first room at its box, which nothing else in the scene resembles
    found = _audit(two_rooms, (3.0, 2.0), math.pi / 2)
    assert found.lookalike_geodesic_m is not None and found.lookalike_geodesic_m > 1.0
    assert found.ratio > 1.0
    row = found.to_json(COARSE)
    assert not row["ambiguous"] and not row["near_identical"]


def test_results_are_split_and_annotated_by_episode(tmp_path):
    audit_rows = [
        {"episode_id": "h_0", "scene": "h", "lookalike_ratio": 0.3, "ambiguous": True, "near_identical": True},
        {"episode_id": "h_1", "scene": "h", "lookalike_ratio": 0.9, "ambiguous": True, "near_identical": False},
        {"episode_id": "h_2", "scene": "h", "lookalike_ratio": 1.4, "ambiguous": False, "near_identical": False},
    ]
    path = tmp_path / "audit.json"
    path.write_text(json.dumps({"per_episode": audit_rows}))
    audit = read_audit(path)
    per = [{"episode_id": f"h_{i}", "scene_id": "scenes/h.glb", "success": s, "spl": s * 0.5}
           for i, s in enumerate((0.0, 1.0, 1.0))] + [{"episode_id": "x_0", "scene_id": "x.glb", "success": 1.0,
                                                        "spl": 1.0}]
    out = split_results(audit, {"agent": "memnav", "per_episode": per})
    assert out["matched_episodes"] == 3
    assert out["ambiguous"] == {"episodes": 2, "success": 0.5, "spl": 0.25}
    assert out["near_identical"] == {"episodes": 1, "success": 0.0, "spl": 0.0}
    assert out["unambiguous"] == {"episodes": 1, "success": 1.0, "spl": 0.5}
    assert annotate_ratios(per, audit) == 3
    assert [r.get("goal_lookalike_ratio") for r in per] == [0.3, 0.9, 1.4, None]
    with pytest.raises(ValueError, match="none of its episodes"):
        split_results(audit, {"agent": "memnav", "per_episode": per[3:]})
    with pytest.raises(ValueError, match="per_episode"):
        split_results(audit, {"agents": {}})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"episodes": 3}))
    with pytest.raises(ValueError, match="not a `memnav goal-audit --json` file"):
        read_audit(bad)
    with pytest.raises(FileNotFoundError, match="no such goal audit"):
        read_audit(tmp_path / "missing.json")


def test_cli_audits_a_split_and_the_report_plots_results_by_it(tmp_path, capsys):
    data = make_tiny_dataset(tmp_path / "houses", houses=3, seed=2, test=2)
    audit, results, report = tmp_path / "audit.json", tmp_path / "eval.json", tmp_path / "report"
    coarse = ["--grid-m", "0.5", "--heading-deg", "30", "--candidates", "2"]
    assert main(["goal-audit", "--data", str(data), "--split", "test", *coarse, "--json", str(audit),
                 "--no-progress"]) == 0
    doc = json.loads(audit.read_text())
    assert doc["episodes"] == 2 and len(doc["per_episode"]) == 2 and doc["config"]["grid_m"] == 0.5
    for row in doc["per_episode"]:
        assert row["nudge_rms"] > 0 and row["goal_view_depth_m"] > 0
        if row["lookalike_ratio"] is not None:
            assert row["lookalike_geodesic_m"] > 1.0
            assert row["ambiguous"] == (row["lookalike_ratio"] <= 1.0)
    assert doc["ambiguous_episodes"] == sum(r["ambiguous"] for r in doc["per_episode"])
    assert main(["eval", "--agent", "forward", "--data", str(data), "--split", "test", "--max-steps", "10",
                 "--json", str(results), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["goal-audit", "--audit", str(audit), "--results", str(results)]) == 0
    table = capsys.readouterr().out
    assert "unambiguous" in table and "forward (2 episodes matched)" in table
    assert main(["eval-report", str(results), "--goal-audit", str(audit), "--out", str(report)]) == 0
    assert (report / "by_goal_ambiguity.png").stat().st_size > 0
    assert "by_goal_ambiguity.png" in (report / "report.html").read_text()
    # a results file of another dataset is refused by name, and so is a file that is not an audit
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"agent": "forward", "per_episode": [
        {"episode_id": "nope", "scene_id": "nope.glb", "success": 0.0, "spl": 0.0}]}))
    assert main(["goal-audit", "--audit", str(audit), "--results", str(other)]) == 2
    assert "none of its episodes" in capsys.readouterr().err
    assert main(["eval-report", str(results), "--goal-audit", str(results), "--out", str(report)]) == 2
    assert "not a `memnav goal-audit --json` file" in capsys.readouterr().err
