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
