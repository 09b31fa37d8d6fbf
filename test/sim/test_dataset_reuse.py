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


def test_a_set_made_again_with_fewer_houses_leaves_no_house_of_the_larger_one(tmp_path):
    """3 houses, then --force with 2: house_002's mesh stayed in scenes/, and `memnav bench sim` (every mesh of
    the folder) took it for one of the set's. Files that are not a house's stay."""
    data = tmp_path / "d"
    small = ["--seed", "5", "--train-episodes", "1", "--val-episodes", "0", "--test-episodes", "1", "--no-progress"]
    assert main(["scenes", "--out", str(data), "--houses", "3", *small]) == 0
    (data / "scenes" / "my_notes.txt").write_text("mine")
    assert main(["scenes", "--out", str(data), "--houses", "2", "--force", *small]) == 0
    names = sorted(p.name for p in (data / "scenes").iterdir())
    assert names == ["house_000.glb", "house_000.semantic.json", "house_000.stage_config.json", "house_001.glb",
                     "house_001.semantic.json", "house_001.stage_config.json", "my_notes.txt"], names
    assert json.loads((data / "splits.json").read_text())["houses"] == 2
