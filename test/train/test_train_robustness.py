"""What a user training their own models runs into: a diverging loss, a resume that must repeat the uninterrupted
run or be refused by name, an output folder that cannot be written, and a save that fails half way."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import file_sha256, make_tiny_dataset, wait_for_text

from memnav.cli import main
from memnav.core.checkpoint import CheckpointError
from memnav.core.encoder import EncoderConfig, FrameEncoder, load_checkpoint, save_checkpoint
from memnav.core.stop import GoalBeliefCalibrator

needs_proc = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc (a folder no file can "
                                                                        "be created in, even by root)")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("robust") / "houses", seed=2)


def _encoder_args(data, out, *extra):
    return ["train", "encoder", "--data", str(data), "--out", str(out), "--steps", "4", "--batch", "8",
            "--pairs-per-house", "12", "--eval-every", "2", "--no-progress", "--device", "cpu", "--threads", "1",
            "--no-near-miss", *extra]


def test_save_model_refuses_nan_weights_and_keeps_the_file(tmp_path):
    path = tmp_path / "enc.pt"
    torch.manual_seed(0)
    model = FrameEncoder(EncoderConfig())
    save_checkpoint(model, path)
    before = file_sha256(path)
    with torch.no_grad():
        next(model.parameters())[0] = float("nan")
    with pytest.raises(CheckpointError, match="holds NaN or infinite values"):
        save_checkpoint(model, path)
    assert file_sha256(path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["enc.pt"]   # no temporary file left


def test_a_checkpoint_without_tensors_is_refused_by_name(tmp_path):
    path = tmp_path / "enc.pt"
    torch.manual_seed(0)
    save_checkpoint(FrameEncoder(EncoderConfig()), path)
    payload = torch.load(path, weights_only=True)
    for state, message in ((None, "no state_dict mapping of tensors"),
                           ({**payload["state_dict"], "head.bias": [0.0]}, "entry head.bias is not a tensor")):
        broken = dict(payload)
        if state is None:
            del broken["state_dict"]
        else:
            broken["state_dict"] = state
        torch.save(broken, tmp_path / "broken.pt")
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(tmp_path / "broken.pt")


def test_curves_and_reliability_diagram_survive_a_failed_write(tmp_path, monkeypatch):
    """A write that fails half way (a full disk) leaves the previous curve files whole, and no temporary file."""
    from matplotlib.figure import Figure

    from memnav.train.encoder_train import write_curve
    from memnav.train.stop_calibration import plot_reliability

    out = tmp_path / "enc.pt"
    write_curve(out, {"step": [1], "loss": [1.0], "val_step": [1], "val_recall_at_1": [0.5]})
    plot_reliability({"mean_predicted": [0.2], "observed_frequency": [0.3], "ece": 0.1}, tmp_path / "cal.png", "t")
    before = {p.name: file_sha256(p) for p in tmp_path.iterdir()}

    def savefig(self, fname, *args, **kwargs):
        if hasattr(fname, "write"):
            fname.write(b"\x89PNG half")
        else:
            Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig)
    with pytest.raises(OSError):
        write_curve(out, {"step": [1, 2], "loss": [1.0, 0.5], "val_step": [2], "val_recall_at_1": [0.6]})
    with pytest.raises(OSError):
        plot_reliability({"mean_predicted": [0.4], "observed_frequency": [0.3], "ece": 0.2}, tmp_path / "cal.png", "t")
    assert {p.name: file_sha256(p) for p in tmp_path.iterdir()} == before


@needs_proc
@pytest.mark.parametrize("command", [
    ["train", "encoder", "--device", "cpu"],
    ["train", "stop"],
    ["train", "policy"],
])
def test_an_out_folder_that_cannot_be_written_is_refused_before_any_work(command, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "splits.json").write_text(json.dumps({"houses": 2, "seed": 0, "splits": {"h0": "train", "h1": "val"}}))
    rc = main([*command, "--data", str(data), "--out", "/proc/memnav_nowhere/model.pt", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--out /proc/memnav_nowhere/model.pt: cannot write in /proc" in err and "Traceback" not in err, err


@pytest.mark.slow
def test_encoder_loss_that_turns_nan_stops_the_run_before_it_is_saved(tiny_data, tmp_path, capsys):
    out = tmp_path / "enc.pt"
    assert main(_encoder_args(tiny_data, out, "--lr", "1e30")) == 2
    err = capsys.readouterr().err
    assert "the training loss is nan at step 2 of 4: the run diverged" in err and "--lr (now 1e+30)" in err, err
    assert not out.exists() and not out.with_name("enc.pt.state").exists()


@pytest.mark.slow
def test_encoder_resumed_step_by_step_with_mining_and_house_bank_equals_the_uninterrupted_run(tiny_data, tmp_path):
    """The mined look-alikes and the house-bank table are kept in the state, so a run stopped after every step
    (`--max-minutes 0`) trains exactly as one that never stopped."""
    extra = ("--mine-every", "2", "--house-bank-every", "2")
    whole, chunked = tmp_path / "whole" / "enc.pt", tmp_path / "chunked" / "enc.pt"
    assert main(_encoder_args(tiny_data, whole, *extra)) == 0
    for _ in range(4):
        assert main(_encoder_args(tiny_data, chunked, *extra, "--max-minutes", "0")) == 0
    curves = [json.loads(p.with_suffix(".curve.json").read_text()) for p in (whole, chunked)]
    assert curves[1]["step"] == [1, 2, 3, 4]
    assert curves[0] == curves[1]
    a, b = (torch.load(p, weights_only=True)["state_dict"] for p in (whole, chunked))
    assert all(torch.equal(v, b[k]) for k, v in a.items())


@pytest.mark.slow
def test_encoder_resume_with_other_training_settings_is_refused_by_name(tiny_data, tmp_path, capsys):
    out = tmp_path / "enc.pt"
    assert main(_encoder_args(tiny_data, out, "--max-minutes", "0")) == 0
    capsys.readouterr()
    before = file_sha256(out.with_name("enc.pt.state"))
    for option, value, field in (("--lr", "0.01", "lr 0.002 (now 0.01)"), ("--seed", "3", "seed 0 (now 3)"),
                                 ("--batch", "6", "batch_pairs 8 (now 6)"),
                                 ("--pairs-per-house", "6", "pairs_per_house 12 (now 6)")):
        assert main(_encoder_args(tiny_data, out, option, value)) == 2
        err = capsys.readouterr().err
        assert "was started with other training settings: " + field in err and "--restart" in err, err
    assert file_sha256(out.with_name("enc.pt.state")) == before


@pytest.fixture(scope="module")
def policy_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("policy_robust")
    data = make_tiny_dataset(root / "houses", houses=2, seed=4, train=1, val=1, test=0)
    encoders = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        encoders.append(root / f"enc{seed}.pt")
        save_checkpoint(FrameEncoder(EncoderConfig()), encoders[-1])
    cal = root / "cal.json"
    cal.write_text(json.dumps(GoalBeliefCalibrator(None, ("similarity", "verification")).to_dict()))
    return root, data, encoders, cal


def _policy_args(setup, out, updates, *extra, encoder=0):
    root, data, encoders, cal = setup
    return ["train", "policy", "--variant", "gru", "--out", str(out), "--data", str(data), "--checkpoint",
            str(encoders[encoder]), "--calibration", str(cal), "--envs", "4", "--rollout-steps", "4", "--updates",
            str(updates), "--bc-updates", "1", "--save-every", "1", "--no-progress", *extra]


@pytest.mark.slow
def test_policy_resume_with_another_encoder_is_refused_and_restart_starts_over(policy_setup, tmp_path, capsys):
    out = tmp_path / "pol.pt"
    assert main(_policy_args(policy_setup, out, 1)) == 0
    state = out.with_name("pol.pt.state")
    before = file_sha256(state)
    capsys.readouterr()
    assert main(_policy_args(policy_setup, out, 2, encoder=1)) == 2
    err = capsys.readouterr().err
    assert "was started with other inputs: encoder enc0.pt:" in err and "(now enc1.pt:" in err, err
    assert file_sha256(state) == before
    assert main(_policy_args(policy_setup, out, 1, "--restart", encoder=1)) == 0
    assert "resuming" not in capsys.readouterr().err
    assert torch.load(state, weights_only=True)["inputs"]["encoder"].startswith("enc1.pt:")


@pytest.mark.slow
def test_policy_trains_with_any_number_of_envs(policy_setup, tmp_path):
    """--envs 6 (not a multiple of the 4-environment PPO minibatch) used to be refused with an internal message."""
    from memnav.train.policy_train import minibatch_envs

    assert [minibatch_envs(n) for n in (1, 2, 3, 4, 5, 6, 8, 12)] == [1, 2, 3, 4, 1, 3, 4, 4]
    args = _policy_args(policy_setup, tmp_path / "pol.pt", 2)
    args[args.index("--envs") + 1] = "6"
    assert main(args) == 0
    curve = json.loads((tmp_path / "pol.curve.json").read_text())
    assert [r["phase"] for r in curve] == ["dagger", "ppo"]


@pytest.mark.slow
def test_policy_loss_that_turns_nan_stops_the_run_before_it_is_saved(policy_setup, tmp_path, capsys):
    out = tmp_path / "pol.pt"
    assert main(_policy_args(policy_setup, out, 3, "--lr", "1e30")) == 2
    err = capsys.readouterr().err
    assert "the training loss is nan at update 1 of 3 (DAgger): the run diverged" in err, err
    assert "Traceback" not in err and not out.exists() and not out.with_name("pol.pt.state").exists()


class _RunsCodeWhenUnpickled:
    """What a doctored `.state` file can hold: unpickling it calls open(marker, "w"), i.e. runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_resumable_state_is_read_without_running_code_it_holds(tiny_data, tmp_path, capsys):
    """The encoder's `.state` was read with torch.load(weights_only=False): a state file from elsewhere ran
    whatever it held. Now it is read like the checkpoints (weights_only=True) and such a file is refused."""
    out = tmp_path / "enc.pt"
    marker = tmp_path / "ran"
    torch.save({"model": {}, "opt": {}, "sched": {}, "gen": torch.zeros(1), "rng": {}, "curve": {}, "step": 1,
                "total_steps": 4, "payload": _RunsCodeWhenUnpickled(marker)}, out.with_name("enc.pt.state"))
    assert main(_encoder_args(tiny_data, out)) == 2
    err = capsys.readouterr().err
    assert "enc.pt.state: not a resumable state of `memnav train encoder` (torch.load cannot read it)" in err, err
    assert not marker.exists()
    assert not out.exists()


def _wait_then_ctrl_c(argv: list[str], log: Path, shown: str) -> subprocess.CompletedProcess:
    """`memnav ARGV` as a user runs it in a terminal: once its progress bar shows `shown` (a step or update is
    done), one Ctrl-C (SIGINT); its exit status and stderr."""
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "memnav.cli", *argv], stdout=subprocess.PIPE, stderr=err,
                                text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            assert wait_for_text(log, shown, 120), log.read_text()[-3000:]
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", log.read_text())


@pytest.mark.slow
def test_encoder_ctrl_c_saves_the_steps_done_and_a_rerun_continues_from_there(tiny_data, tmp_path):
    """Ctrl-C ended the run at once and kept nothing since the last save (up to --eval-every steps, 250 by default):
    now the step under way is finished and saved, as --max-minutes saves."""
    out = tmp_path / "enc.pt"
    argv = [a for a in _encoder_args(tiny_data, out) if a != "--no-progress"]
    for option, value in (("--steps", "400"), ("--eval-every", "1000")):
        argv[argv.index(option) + 1] = value
    done = _wait_then_ctrl_c(argv, tmp_path / "err.log", "loss=")
    assert done.returncode == 130 and out.with_name("enc.pt.state").is_file(), done.stderr[-3000:]
    state = torch.load(out.with_name("enc.pt.state"), weights_only=True)
    step = state["step"]
    assert 1 <= step < 400 and f"interrupted (Ctrl-C) at step {step}/400" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Ctrl-C: stopping when this step is done" in done.stderr
    assert torch.load(out, weights_only=True)["extra"]["step"] == step
    assert json.loads(out.with_suffix(".curve.json").read_text())["step"] == list(range(1, step + 1))
    assert main([*argv, "--no-progress", "--max-minutes", "0"]) == 0   # the same command resumes there
    assert json.loads(out.with_suffix(".curve.json").read_text())["step"] == list(range(1, step + 2))


@pytest.mark.slow
def test_policy_ctrl_c_saves_the_updates_done_and_a_rerun_resumes_from_there(policy_setup, tmp_path, capsys):
    out = tmp_path / "pol.pt"
    argv = [a for a in _policy_args(policy_setup, out, 1000) if a != "--no-progress"]
    argv[argv.index("--save-every") + 1] = "1000"
    done = _wait_then_ctrl_c(argv, tmp_path / "err.log", "succ=")
    assert done.returncode == 130 and out.with_name("pol.pt.state").is_file(), done.stderr[-3000:]
    update = torch.load(out.with_name("pol.pt.state"), weights_only=True)["update"]
    assert 1 <= update < 1000 and f"interrupted (Ctrl-C) at update {update}/1000" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert torch.load(out, weights_only=True)["extra"]["update"] == update
    assert [r["update"] for r in json.loads(out.with_suffix(".curve.json").read_text())] == list(range(1, update + 1))
    resumed = _policy_args(policy_setup, out, update + 1)
    assert main(resumed) == 0
    assert f"resuming from update {update}" in capsys.readouterr().err
    assert len(json.loads(out.with_suffix(".curve.json").read_text())) == update + 1


def test_encoder_without_out_leaves_a_model_already_at_the_default_path(tiny_data, tmp_path, monkeypatch, capsys):
    """Without --out, `memnav train encoder` wrote models/encoder.pt, replacing the shipped encoder (which the
    agents and their stop calibration were fitted to) with whatever the run trained, a few steps or not."""
    monkeypatch.chdir(tmp_path)
    shipped = tmp_path / "models" / "encoder.pt"
    shipped.parent.mkdir()
    torch.manual_seed(3)
    save_checkpoint(FrameEncoder(EncoderConfig()), shipped)
    before = file_sha256(shipped)
    argv = _encoder_args(tiny_data, "x")
    del argv[argv.index("--out"):argv.index("--out") + 2]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--out not given, and its default models/encoder.pt already holds a model" in err, err
    assert "give --out models/encoder.pt to replace it" in err
    assert file_sha256(shipped) == before and sorted(p.name for p in shipped.parent.iterdir()) == ["encoder.pt"]


@pytest.mark.slow
def test_policy_without_out_writes_its_variant_and_leaves_a_model_already_there(policy_setup, tmp_path, monkeypatch,
                                                                                capsys):
    """Without --out, every --variant was written to models/policy_memnav.pt: `--variant gru` replaced the shipped
    memnav policy with a GRU one (which `memnav eval` then loaded as the memnav agent)."""
    from memnav.core.policy import load_policy

    monkeypatch.chdir(tmp_path)
    models = tmp_path / "models"
    models.mkdir()
    shipped = models / "policy_memnav.pt"
    shipped.write_bytes(b"the shipped memnav policy")
    argv = _policy_args(policy_setup, "x", 1)
    del argv[argv.index("--out"):argv.index("--out") + 2]
    assert main(argv) == 0   # --variant gru
    assert load_policy(models / "policy_gru.pt")[1]["variant"] == "gru"
    assert shipped.read_bytes() == b"the shipped memnav policy"
    capsys.readouterr()
    memnav_variant = [a if a != "gru" else "memnav" for a in argv]
    assert main(memnav_variant) == 2
    err = capsys.readouterr().err
    assert "--out not given, and its default models/policy_memnav.pt already holds a model" in err, err
    assert shipped.read_bytes() == b"the shipped memnav policy"
    assert main(argv) == 0   # its own run, with its state beside it: resumed (here: already done)
    assert "already trained for 1 updates" in capsys.readouterr().err


def test_policy_refuses_an_out_that_would_replace_the_encoder_or_calibration_it_reads(policy_setup, tmp_path, capsys):
    """`--out` naming the --checkpoint (or a --calibration beside it) replaced the encoder the run reads with the
    policy at the first save; the encoder trainer already refused `--init` as `--out`."""
    _, _, encoders, cal = policy_setup
    before = {p: file_sha256(p) for p in (encoders[0], cal)}
    assert main(_policy_args(policy_setup, encoders[0], 1)) == 2
    err = capsys.readouterr().err
    assert f"--checkpoint {encoders[0]} is also what --out {encoders[0]} writes (enc0.pt)" in err, err
    assert main(_policy_args(policy_setup, cal, 1)) == 2
    err = capsys.readouterr().err
    assert f"--calibration {cal} is also what --out {cal} writes (cal.json)" in err, err
    assert {p: file_sha256(p) for p in (encoders[0], cal)} == before
