"""`memnav scenes`: houses and episodes, reuse of a complete dataset, and the goal look-alike filter."""
import gzip
import json

import numpy as np
import pytest

from memnav.cli import main
from memnav.sim.dataset import EpisodeSamplingConfig, completion_marker, sample_episodes
from memnav.sim.goal_lookalikes import GoalAuditConfig

SMALL = ["--houses", "2", "--seed", "5", "--train-episodes", "1", "--val-episodes", "0", "--test-episodes", "2",
         "--no-progress"]
COARSE = ["--lookalike-grid-m", "0.5", "--lookalike-heading-deg", "30"]


def _episodes(data, split):
    with gzip.open(data / "episodes" / f"{split}.json.gz", "rt") as f:
        return json.load(f)["episodes"]


def test_same_seed_same_bytes_and_a_complete_dataset_is_reused(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["scenes", "--out", str(a), *SMALL]) == 0
    assert main(["scenes", "--out", str(b), *SMALL]) == 0
    for rel in ("episodes/train.json.gz", "episodes/test.json.gz", "scenes/house_000.glb", "splits.json"):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    assert json.loads((a / ".complete").read_text()) == {"houses": 2, "seed": 5}
    assert all("goal_lookalike_ratio" not in e["info"] for e in _episodes(a, "test"))
    capsys.readouterr()
    assert main(["scenes", "--out", str(a), *SMALL]) == 0
    assert "already holds 2 houses" in capsys.readouterr().out


def test_goal_filter_keeps_goals_that_identify_their_place(tmp_path, capsys):
    data = tmp_path / "filtered"
    assert main(["scenes", "--out", str(data), *SMALL, "--min-goal-lookalike-ratio", "1.0", *COARSE]) == 0
    episodes = _episodes(data, "train") + _episodes(data, "test")
    assert len(episodes) == 3
    assert all(e["info"]["goal_lookalike_ratio"] >= 1.0 for e in episodes)
    assert json.loads((data / "splits.json").read_text())["min_goal_lookalike_ratio"] == 1.0
    assert json.loads((data / ".complete").read_text()) == {
        "houses": 2, "seed": 5, "min_goal_lookalike_ratio": 1.0, "lookalike_grid_m": 0.5,
        "lookalike_heading_deg": 30.0}
    # the audit, with the same search grid, finds the ratios the generator recorded
    audit = tmp_path / "audit.json"
    assert main(["goal-audit", "--data", str(data), "--grid-m", "0.5", "--heading-deg", "30", "--json", str(audit),
                 "--no-progress"]) == 0
    rows = json.loads(audit.read_text())["per_episode"]
    assert [r["lookalike_ratio"] for r in rows] == [e["info"]["goal_lookalike_ratio"] for e in _episodes(data, "test")]
    # the same request reuses the dataset; one without the filter is not the same dataset
    capsys.readouterr()
    assert main(["scenes", "--out", str(data), *SMALL, "--min-goal-lookalike-ratio", "1.0", *COARSE]) == 0
    assert "already holds" in capsys.readouterr().out
    assert main(["scenes", "--out", str(data), *SMALL]) == 0
    assert "already holds" not in capsys.readouterr().out
    assert all("goal_lookalike_ratio" not in e["info"] for e in _episodes(data, "test"))


def test_goal_filter_refuses_bad_settings(tmp_path, capsys):
    with pytest.raises(ValueError, match="min_goal_lookalike_ratio"):
        EpisodeSamplingConfig(min_goal_lookalike_ratio=-1.0)
    with pytest.raises(ValueError, match="needs a goal_lookalike_ratio function"):
        sample_episodes(None, "scenes/x.glb", 1, np.random.default_rng(0),
                        EpisodeSamplingConfig(min_goal_lookalike_ratio=1.0), "x_")
    assert main(["scenes", "--out", str(tmp_path / "d"), *SMALL, "--min-goal-lookalike-ratio", "nan"]) == 2
    assert "min_goal_lookalike_ratio" in capsys.readouterr().err
    assert main(["scenes", "--out", str(tmp_path / "d"), *SMALL, "--min-goal-lookalike-ratio", "1",
                 "--lookalike-heading-deg", "-5"]) == 2
    assert "--lookalike-heading-deg" in capsys.readouterr().err
    assert not (tmp_path / "d" / ".complete").exists()
    # the marker leaves the grid out when the filter is off, so datasets from before the filter stay complete
    assert completion_marker(3, 1, EpisodeSamplingConfig(), GoalAuditConfig(grid_m=0.5)) == {"houses": 3, "seed": 1}
