"""`memnav scenes` reuses a complete dataset only when asked for the same one, and refuses options without effect."""
import gzip
import json

from memnav.cli import main

TINY = ["--houses", "2", "--seed", "5", "--train-episodes", "1", "--val-episodes", "0", "--no-progress"]


def _test_episodes(data):
    with gzip.open(data / "episodes" / "test.json.gz", "rt") as f:
        return json.load(f)["episodes"]


def test_other_episode_counts_are_not_the_complete_dataset(tmp_path, capsys):
    data = tmp_path / "d"
    assert main(["scenes", "--out", str(data), *TINY, "--test-episodes", "1"]) == 0
    assert len(_test_episodes(data)) == 1
    capsys.readouterr()
    assert main(["scenes", "--out", str(data), *TINY, "--test-episodes", "3"]) == 0   # more episodes asked
    assert "already holds" not in capsys.readouterr().out
    assert len(_test_episodes(data)) == 3
    assert json.loads((data / "splits.json").read_text())["episodes"] == {"train": 1, "val": 0, "test": 3}
    assert main(["scenes", "--out", str(data), *TINY, "--test-episodes", "3"]) == 0   # the same: reused
    assert "already holds 2 houses" in capsys.readouterr().out
    # val houses: none of 2, so --val-episodes changes nothing and the dataset is still the one asked for
    assert main(["scenes", "--out", str(data), *TINY, "--test-episodes", "3", "--val-episodes", "9"]) == 0
    assert "already holds 2 houses" in capsys.readouterr().out


def test_lookalike_grid_options_without_the_goal_filter_are_refused(tmp_path, capsys):
    data = tmp_path / "d"
    assert main(["scenes", "--out", str(data), *TINY, "--lookalike-grid-m", "0.5"]) == 2
    assert capsys.readouterr().err == ("memnav scenes: error: --lookalike-grid-m: has no effect without "
                                       "--min-goal-lookalike-ratio (the look-alike search runs only for the goal "
                                       "filter)\n")
    assert main(["scenes", "--out", str(data), *TINY, "--lookalike-grid-m", "0.5", "--lookalike-heading-deg",
                 "30", "--min-goal-lookalike-ratio", "0"]) == 2
    assert "--lookalike-grid-m, --lookalike-heading-deg: have no effect" in capsys.readouterr().err
    assert not data.exists()
