"""`memnav train policy` on a tiny dataset: DAgger then PPO updates, checkpoint, curves, resume."""
import json

import pytest
import torch
from conftest import make_tiny_dataset

from memnav.cli import main
from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint
from memnav.core.policy import load_policy
from memnav.core.stop import GoalBeliefCalibrator


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("policy")
    data = make_tiny_dataset(root / "houses", houses=2, seed=4, train=1, val=1, test=0)
    torch.manual_seed(0)
    enc = root / "enc.pt"
    save_checkpoint(FrameEncoder(EncoderConfig()), enc)
    cal = root / "cal.json"
    cal.write_text(json.dumps(GoalBeliefCalibrator(None, ("similarity", "verification")).to_dict()))
    return root, data, enc, cal


def _args(root, data, enc, cal, updates, variant="memnav"):
    return ["train", "policy", "--variant", variant, "--out", str(root / f"p_{variant}.pt"), "--data", str(data),
            "--checkpoint", str(enc), "--calibration", str(cal), "--envs", "4", "--rollout-steps", "6",
            "--updates", str(updates), "--bc-updates", "1", "--save-every", "1", "--no-progress"]


@pytest.mark.slow
def test_dagger_then_ppo_writes_checkpoint_curves_and_resumes(setup):
    root, data, enc, cal = setup
    assert main(_args(root, data, enc, cal, 2)) == 0
    model, extra = load_policy(root / "p_memnav.pt")
    assert extra["variant"] == "memnav" and extra["update"] == 2
    assert model.cfg.memory_tokens == 24
    curve = json.loads((root / "p_memnav.curve.json").read_text())
    assert [r["phase"] for r in curve] == ["dagger", "ppo"]
    assert curve[0]["bc_loss"] > 0 and curve[1]["value_loss"] > 0
    assert (root / "p_memnav.curve.png").stat().st_size > 1000
    # resuming continues from the saved update instead of starting over
    assert main(_args(root, data, enc, cal, 3)) == 0
    curve = json.loads((root / "p_memnav.curve.json").read_text())
    assert [r["update"] for r in curve] == [1, 2, 3]


@pytest.mark.slow
def test_resume_with_other_settings_is_refused(setup, capsys):
    root, data, enc, cal = setup
    assert main(_args(root, data, enc, cal, 1, variant="gru")) == 0
    args = _args(root, data, enc, cal, 2, variant="gru")
    args[args.index("--rollout-steps") + 1] = "7"
    assert main(args) == 2
    assert "rollout_steps" in capsys.readouterr().err
    model, _ = load_policy(root / "p_gru.pt")
    assert model.cfg.memory_tokens == 0


def test_missing_calibration_is_a_clear_error(setup, capsys):
    root, data, enc, _ = setup
    assert main(_args(root, data, enc, root / "nope.json", 1)) == 2
    assert "nope.json" in capsys.readouterr().err
