"""`memnav bench relocalise` on a tiny dataset with the shipped encoder (keys, value ranges, bad arguments)."""
import json

import pytest
from conftest import make_tiny_dataset

from memnav.cli import main
from memnav.ros.model_paths import PACKAGE_ROOT


@pytest.mark.slow
def test_bench_relocalise_keys_and_the_setting_compared(tmp_path, capsys):
    data = make_tiny_dataset(tmp_path / "houses", seed=9)
    out = tmp_path / "reloc.json"
    assert main(["bench", "relocalise", "--checkpoint", str(PACKAGE_ROOT / "models" / "encoder.pt"),
                 "--data", str(data), "--map-steps", "160", "--trials", "4", "--trial-steps", "30",
                 "--confirmations", "1", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["houses"] == 1 and res["split"] == "test" and len(res["places_per_house"]) == 1
    assert res["places_per_house"][0] > 5 and res["default_confirmations"] == 2
    by = res["by_confirmations"]
    assert set(by) == {"1", "2"}
    for s in by.values():
        assert s["trials"] == 4
        for key in ("relocalised_fraction", "wrong_relocalisation_fraction", "wrong_after_walk_fraction",
                    "misplaced_new_places_fraction"):
            assert 0.0 <= s[key] <= 1.0
    # one confirmation relocalises from the first recognised view, so never later than two
    assert by["1"]["relocalised_fraction"] > 0
    assert by["1"]["steps_to_relocalise_p50"] <= (by["2"]["steps_to_relocalise_p50"] or 10**9)
    assert 1 <= by["1"]["steps_to_relocalise_p50"] <= 30
    assert res["relocalised_fraction"] == by["2"]["relocalised_fraction"]      # the default's, repeated
    assert "relocalise: " in capsys.readouterr().err                           # the progress bar


@pytest.mark.parametrize("args, name", [(["--trials", "0"], "--trials"), (["--confirmations", "0"], "--confirmations"),
                                        (["--wrong-m", "0"], "--wrong-m"), (["--max-houses", "-1"], "--max-houses")])
def test_bench_relocalise_bad_arguments_are_clear_errors(args, name, capsys):
    assert main(["bench", "relocalise", *args]) == 2
    assert name in capsys.readouterr().err


def test_bench_relocalise_a_repeated_confirmations_value_is_one_setting(tmp_path, monkeypatch, capsys):
    """`--confirmations 2 2` ran every kidnapping twice for the one setting and reported twice the --trials."""
    from memnav.eval import bench_relocalise

    calls = []

    def trial(*args) -> dict:   # the walks and the memory are real; the trial itself is not what is tested
        calls.append(args[3])
        return {"steps": 1, "error_at_m": 0.1, "error_end_m": 0.1, "new_places": 1, "misplaced_places": 0,
                "wrong": False, "wrong_end": False}

    monkeypatch.setattr(bench_relocalise, "_trial", trial)
    data = make_tiny_dataset(tmp_path / "houses", seed=9)
    capsys.readouterr()
    assert main(["bench", "relocalise", "--checkpoint", str(PACKAGE_ROOT / "models" / "encoder.pt"), "--data",
                 str(data), "--map-steps", "8", "--trials", "2", "--trial-steps", "2", "--confirmations", "2", "1",
                 "2", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert calls == [2, 1, 2, 1]   # each kidnapping replayed once per distinct setting, in the order given
    assert set(res["by_confirmations"]) == {"1", "2"}
    assert res["by_confirmations"]["2"]["trials"] == 2 == res["trials"]


@pytest.mark.slow
def test_ctrl_c_during_a_house_keeps_the_houses_finished(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the second house's kidnappings: the first house's trials are summarised, printed and written
    (marked interrupted); the second house's finished trials are left out with it."""
    from memnav.eval import bench_relocalise

    calls = []

    def trial(*args) -> dict:
        calls.append(args[3])
        if len(calls) == 5:   # two trials x two settings in the first house, then the second house's first
            raise KeyboardInterrupt
        return {"steps": 1, "error_at_m": 0.1, "error_end_m": 0.1, "new_places": 1, "misplaced_places": 0,
                "wrong": False, "wrong_end": False}

    monkeypatch.setattr(bench_relocalise, "_trial", trial)
    data = make_tiny_dataset(tmp_path / "houses", houses=4, seed=9)   # two train houses
    splits = json.loads((data / "splits.json").read_text())["splits"]
    first, second = sorted(name for name, split in splits.items() if split == "train")
    capsys.readouterr()
    out = tmp_path / "reloc.json"
    assert main(["bench", "relocalise", "--checkpoint", str(PACKAGE_ROOT / "models" / "encoder.pt"), "--data",
                 str(data), "--split", "train", "--map-steps", "8", "--trials", "2", "--trial-steps", "2",
                 "--confirmations", "1", "2", "--json", str(out), "--no-progress"]) == 130
    printed = capsys.readouterr()
    res = json.loads(out.read_text())
    assert json.loads(printed.out) == res and res["interrupted"] is True and res["left_out"] == [f"house {second}"]
    assert res["houses"] == 1 and len(res["places_per_house"]) == 1
    assert res["by_confirmations"]["1"]["trials"] == 2 == res["trials"]
    assert f"memnav bench relocalise: interrupted: measured house {first}; left out: house {second}" in printed.err
