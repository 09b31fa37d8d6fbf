import json

import numpy as np
import pytest

from memnav.core.stop import (
    FixedThresholdStop,
    GoalBeliefCalibrator,
    StopReason,
    VoIStopController,
    expected_max_stop_or_search,
)


def test_expected_max_matches_monte_carlo():
    rng = np.random.default_rng(0)
    for p, v, k in ((0.3, 0.4, 8.0), (0.7, 0.2, 3.0), (0.5, 0.5, 20.0)):
        samples = rng.beta(k * p, k * (1 - p), 400_000)
        mc = np.maximum(samples, v).mean()
        assert expected_max_stop_or_search(p, 1.0, v, k) == pytest.approx(mc, abs=2e-3)


def test_voi_is_non_negative_and_largest_near_the_decision_boundary():
    ctrl = VoIStopController(search_value=0.4, look_cost=0.0)
    vois = {p: ctrl.decide(p).voi for p in (0.02, 0.2, 0.4, 0.6, 0.98)}
    assert all(v >= 0 for v in vois.values())
    assert vois[0.4] == max(vois.values())
    assert vois[0.02] < 0.01 and vois[0.98] < 0.01


def test_decisions_follow_belief_and_cost():
    ctrl = VoIStopController(search_value=0.3, look_cost=0.02)
    assert ctrl.decide(0.95).stop and ctrl.decide(0.95).reason is StopReason.CONFIDENT
    assert not ctrl.decide(0.05).stop and ctrl.decide(0.05).reason is StopReason.KEEP_SEARCHING
    d = ctrl.decide(0.35)
    assert not d.stop and d.reason is StopReason.LOOK_AGAIN and d.voi > 0.02
    # looking is free and very informative -> wait longer; expensive -> stop earlier
    cheap = VoIStopController(search_value=0.3, look_cost=0.0, evidence_strength=1.0)
    dear = VoIStopController(search_value=0.3, look_cost=0.3)
    assert not cheap.decide(0.6).stop
    assert dear.decide(0.6).stop
    # stopping never happens below the point where stopping beats searching on
    assert not any(ctrl.decide(p).stop for p in np.linspace(0, 0.29, 30))


def test_bad_belief_rejected():
    with pytest.raises(ValueError, match="belief"):
        VoIStopController().decide(1.5)
    with pytest.raises(ValueError, match="belief"):
        VoIStopController().decide(float("nan"))


def test_fixed_threshold_baseline():
    s = FixedThresholdStop(0.7)
    assert s.decide(0.71).stop and not s.decide(0.69).stop


def test_calibrator_recovers_logistic_model_and_is_calibrated():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (20_000, 2))
    true_w = np.array([4.0, -2.0, 0.5])
    p = 1 / (1 + np.exp(-(x @ true_w[:2] + true_w[2])))
    y = rng.random(len(p)) < p
    cal = GoalBeliefCalibrator(feature_names=("similarity", "verification")).fit(x, y)
    assert np.allclose(cal.weights, true_w, atol=0.15)
    rel = cal.reliability(x, y)
    assert rel["ece"] < 0.02 and sum(rel["count"]) == len(x)
    again = GoalBeliefCalibrator.from_dict(cal.to_dict())
    assert np.allclose(again.predict(x[:5]), cal.predict(x[:5]))
    with pytest.raises(ValueError, match="features"):
        cal.predict(np.zeros((3, 5)))


def test_load_calibrator_names_the_file_and_what_is_wrong(tmp_path):
    from memnav.core.stop import STOP_FEATURES, load_calibrator

    good = tmp_path / "cal.json"
    good.write_text(json.dumps({"feature_names": list(STOP_FEATURES), "weights": [8.0, 2.0, -6.0]}))
    assert load_calibrator(good).feature_names == STOP_FEATURES
    cases = {"no_weights.json": json.dumps({"feature_names": list(STOP_FEATURES)}),
             "text.json": "not json at all",
             "list.json": "[1, 2]"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=rf"{name}: not a stop calibration JSON"):
            load_calibrator(tmp_path / name)
    with pytest.raises(ValueError, match="no 'weights' field"):
        load_calibrator(tmp_path / "no_weights.json")
    with pytest.raises(ValueError, match="is a directory"):
        load_calibrator(tmp_path)
    with pytest.raises(FileNotFoundError, match="memnav train stop"):
        load_calibrator(tmp_path / "none.json")


@pytest.mark.parametrize("weights", ["[NaN, 2.0, -6.0]", "[8.0, Infinity, -6.0]", "[8.0, 2.0, -Infinity]"])
def test_load_calibrator_refuses_non_finite_weights(tmp_path, weights):
    """json reads NaN and Infinity: a calibration with one loaded, and the stop node then died at its first
    decision (a NaN belief refused by VoIStopController.decide) instead of refusing the file at start."""
    from memnav.core.stop import load_calibrator

    path = tmp_path / "cal.json"
    path.write_text(f'{{"feature_names": ["similarity", "verification"], "weights": {weights}}}')
    with pytest.raises(ValueError, match=r"cal\.json: weights must be finite numbers"):
        load_calibrator(path)


def test_calibrated_checkpoint_reads_the_calibrations_checkpoint_and_its_hash(tmp_path):
    """A calibration recorded only the path of the encoder checkpoint it was fitted on, so nothing could tell
    whether the encoder node runs that checkpoint."""
    from memnav.core.stop import EncoderCheckpoint, calibrated_checkpoint

    base = {"feature_names": ["similarity", "verification"], "weights": [4.0, 1.0, -4.0]}
    new = tmp_path / "new.json"
    new.write_text(json.dumps(dict(base, checkpoint="models/encoder.pt", checkpoint_sha256="3e58e30a083a")))
    assert calibrated_checkpoint(new) == EncoderCheckpoint("models/encoder.pt", "3e58e30a083a")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(dict(base, checkpoint="models/encoder.pt")))
    assert calibrated_checkpoint(old) == EncoderCheckpoint("models/encoder.pt", None)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(base))
    assert calibrated_checkpoint(bare) == EncoderCheckpoint(None, None)
    upper = tmp_path / "upper.json"   # a hash typed in capitals by hand is the same hash
    upper.write_text(json.dumps(dict(base, checkpoint_sha256="3E58E30A083A")))
    assert calibrated_checkpoint(upper).sha256 == "3e58e30a083a"
    for value in ("not hex!", 123, ""):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(dict(base, checkpoint_sha256=value)))
        with pytest.raises(ValueError, match=r"bad\.json: field checkpoint/checkpoint_sha256"):
            calibrated_checkpoint(bad)


def test_encoder_checkpoint_announcement_round_trips_and_refuses_junk():
    from memnav.core.stop import EncoderCheckpoint

    ckpt = EncoderCheckpoint("/data/my_encoder.pt", "0123456789ab")
    assert EncoderCheckpoint.from_json(ckpt.to_json()) == ckpt
    for junk, what in (("not json", "not an encoder checkpoint announcement"), ("[1]", "announcement"),
                       ('{"checkpoint": "a.pt"}', "no 'sha256' field"),
                       ('{"checkpoint": "a.pt", "sha256": null}', "sha256 is null"),
                       ('{"checkpoint": "a.pt", "sha256": "xyz"}', "hex digits")):
        with pytest.raises(ValueError, match=what):
            EncoderCheckpoint.from_json(junk)


def test_checkpoint_mismatch_names_both_checkpoints_and_the_command_to_recalibrate():
    from memnav.core.stop import EncoderCheckpoint, checkpoint_mismatch, unchecked_calibration_note

    calibrated = EncoderCheckpoint("models/encoder.pt", "3e58e30a083a")
    same = EncoderCheckpoint("/opt/memnav/models/encoder.pt", "3e58e30a083a")
    longer = EncoderCheckpoint("/copy/encoder.pt", "3e58e30a083a63c7e1aa")   # a full-length hash agrees too
    mine = EncoderCheckpoint("/home/me/my_encoder.pt", "0123456789ab")
    assert checkpoint_mismatch("cal.json", calibrated, same) is None
    assert checkpoint_mismatch("cal.json", calibrated, longer) is None
    warning = checkpoint_mismatch("cal.json", calibrated, mine)
    assert warning is not None
    for part in ("stop calibration cal.json", "models/encoder.pt (sha256 3e58e30a083a)",
                 "/home/me/my_encoder.pt (sha256 0123456789ab)",
                 "memnav train stop --checkpoint /home/me/my_encoder.pt --out stop_calibration_my_encoder.json"):
        assert part in warning, warning
    # a calibration naming no hash: nothing to compare, said once
    old = EncoderCheckpoint("models/encoder.pt", None)
    assert checkpoint_mismatch("cal.json", old, mine) is None
    note = unchecked_calibration_note("cal.json", old)
    assert note is not None and "cal.json does not name its encoder checkpoint's hash" in note
    assert unchecked_calibration_note("cal.json", calibrated) is None
