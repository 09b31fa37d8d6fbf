"""`memnav train encoder|stop|policy` refuse a bad option with one line naming it, exit status 2, before any work.

The dataset here is a bare splits.json whose scene files do not exist: a command that got as far as rendering
(or loading episodes) would fail there with another message, so each refusal shown comes before that work.
"""
import json

import pytest
import torch
from conftest import file_sha256

from memnav.cli import main


@pytest.fixture
def fake_data(tmp_path):
    """A dataset summary with four train houses and one val house, and no scenes."""
    data = tmp_path / "data"
    data.mkdir()
    splits = {"h0": "train", "h1": "train", "h2": "train", "h3": "train", "h4": "val"}
    (data / "splits.json").write_text(json.dumps({"houses": 5, "seed": 0, "splits": splits}))
    return data


def _refused(argv: list[str], option: str, capsys) -> str:
    """Run the command; check that it is refused with exit status 2 and one stderr line naming `option`."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("bad, option", [
    (["--lr", "-1"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--eval-every", "0"], "--eval-every"),
    (["--max-minutes", "-1"], "--max-minutes"),
    (["--max-minutes", "nan"], "--max-minutes"),
    (["--widths", "0", "1", "2", "3"], "--widths"),
    (["--input-px", "17"], "--input-px"),
    (["--positive-m", "-1"], "--positive-m"),
    (["--positive-deg", "nan"], "--positive-deg"),
    (["--val-data", "{tmp}/nonexistent"], "--val-data"),
    (["--data", "{tmp}/nonexistent"], "--data"),
    (["--threads", "0"], "--threads"),
    (["--pairs-per-house", "0"], "--pairs-per-house"),
    (["--steps", "0"], "--steps"),
    (["--batch", "0"], "--batch"),
    (["--batch", "2"], "--batch"),          # a batch draws from 3 of the 4 train houses
    (["--seed", "-1"], "--seed"),
    (["--out", "{tmp}"], "--out"),          # an existing directory
    (["--out", "{tmp}/data/splits.json/enc.pt"], "--out"),   # below a file
    (["--cache-dir", "{tmp}/data/splits.json"], "--cache-dir"),
    (["--min-hfov-deg", "95"], "--min-hfov-deg"),   # wider than the rendered 90 deg views
    (["--min-hfov-deg", "nan"], "--min-hfov-deg"),
    (["--aspect-ratios", "1", "0.5"], "--aspect-ratios"),   # taller than wide: give width / height >= 1
    (["--aspect-ratios", "3"], "--aspect-ratios"),
    (["--aspect-ratios", "1.5", "--image-px", "160", "120"], "--aspect-ratios"),   # already not square
    (["--min-hfov-deg", "80", "--hfov-deg", "69"], "--min-hfov-deg"),   # wider than the rendered views
    (["--hfov-deg", "0"], "--hfov-deg"),
    (["--image-px", "0", "120"], "--image-px"),
])
def test_train_encoder_refuses_bad_option_before_rendering(bad, option, fake_data, tmp_path, capsys):
    argv = ["train", "encoder", "--data", str(fake_data), "--out", str(tmp_path / "enc.pt"), "--device", "cpu",
            "--no-progress", *[a.format(tmp=tmp_path) for a in bad]]
    line = _refused(argv, option, capsys)
    if option in ("--steps", "--batch"):   # the message says which of the two was wrong
        assert ({"--steps", "--batch"} - {option}).pop() not in line
    assert not (tmp_path / "enc.pt").exists()


def test_train_encoder_no_progress_hides_the_render_bars(fake_data, tmp_path, capsys, monkeypatch):
    import memnav.train.encoder_train as encoder_train

    asked = []

    def render_set(*args, progress=True, **kwargs):
        asked.append(progress)
        raise RuntimeError("stop here")

    monkeypatch.setattr(encoder_train, "render_set", render_set)
    argv = ["train", "encoder", "--data", str(fake_data), "--out", str(tmp_path / "enc.pt"), "--device", "cpu",
            "--cache-dir", str(tmp_path / "cache")]
    assert main([*argv, "--no-progress"]) == 2
    assert main(argv) == 2
    assert asked == [False, True]
    assert "stop here" in capsys.readouterr().err


def _garbage_states(path):
    """Two files that are not a resumable state: random bytes, and a torch file of something else."""
    path.with_name("bytes").write_bytes(b"\x80\x02garbage\x00\xff" * 8)
    torch.save({"weights": torch.zeros(2)}, path.with_name("other"))
    return [path.with_name("bytes"), path.with_name("other")]


def test_train_encoder_refuses_a_garbage_state_and_leaves_it(fake_data, tmp_path, capsys):
    out = tmp_path / "enc.pt"
    state = tmp_path / "enc.pt.state"
    for garbage in _garbage_states(state):
        garbage.replace(state)
        before = file_sha256(state)
        line = _refused(["train", "encoder", "--data", str(fake_data), "--out", str(out), "--device", "cpu",
                         "--no-progress"], "enc.pt.state", capsys)
        assert "not a resumable state" in line and "--restart" in line
        assert file_sha256(state) == before and not out.exists()


@pytest.mark.parametrize("bad, option", [
    (["--max-distance", "-1"], "--max-distance"),
    (["--max-distance", "inf"], "--max-distance"),
    (["--success-distance", "0"], "--success-distance"),
    (["--success-distance", "5", "--max-distance", "1"], "--success-distance"),
    (["--examples-per-house", "0"], "--examples-per-house"),
    (["--examples-per-house", "-1"], "--examples-per-house"),
    (["--seed", "-1"], "--seed"),
    (["--data", "{tmp}/nonexistent"], "--data"),
    (["--out", "{tmp}"], "--out"),          # an existing directory
    (["--out", "{tmp}/data/splits.json/cal.json"], "--out"),   # below a file
    (["--out", "{tmp}/cal.png"], "--out"),  # the reliability diagram would overwrite it
    (["--hfov-deg", "180"], "--hfov-deg"),
    (["--camera-height-m", "-1"], "--camera-height-m"),
])
def test_train_stop_refuses_bad_option_before_rendering(bad, option, fake_data, tmp_path, capsys):
    argv = ["train", "stop", "--data", str(fake_data), "--out", str(tmp_path / "cal.json"),
            "--checkpoint", str(tmp_path / "no_encoder.pt"), "--no-progress", *[a.format(tmp=tmp_path) for a in bad]]
    _refused(argv, option, capsys)
    assert not (tmp_path / "cal.json").exists()


@pytest.mark.parametrize("bad, option", [
    (["--updates", "0"], "--updates"),
    (["--updates", "-1"], "--updates"),
    (["--bc-updates", "-1"], "--bc-updates"),
    (["--envs", "0"], "--envs"),
    (["--rollout-steps", "0"], "--rollout-steps"),
    (["--max-episode-steps", "0"], "--max-episode-steps"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "0"], "--lr"),
    (["--save-every", "0"], "--save-every"),
    (["--max-minutes", "-1"], "--max-minutes"),
    (["--houses", "-1"], "--houses"),
    (["--seed", "-1"], "--seed"),
    (["--data", "{tmp}/nonexistent"], "--data"),
    (["--out", "{tmp}"], "--out"),          # an existing directory
    (["--calibration", "{tmp}/no_calibration.json"], "--calibration"),
])
def test_train_policy_refuses_bad_option_before_training(bad, option, fake_data, tmp_path, capsys):
    argv = ["train", "policy", "--data", str(fake_data), "--out", str(tmp_path / "pol.pt"),
            "--checkpoint", str(tmp_path / "no_encoder.pt"), "--no-progress", *[a.format(tmp=tmp_path) for a in bad]]
    if option == "--calibration":   # checked after the episodes and the encoder: give real ones
        from conftest import make_tiny_dataset

        from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint

        argv[argv.index("--data") + 1] = str(make_tiny_dataset(tmp_path / "houses", houses=2, test=0))
        save_checkpoint(FrameEncoder(EncoderConfig()), tmp_path / "no_encoder.pt")
    _refused(argv, option, capsys)
    assert not (tmp_path / "pol.pt").exists() and not (tmp_path / "pol.pt.state").exists()


def test_train_policy_refuses_a_garbage_state_and_leaves_it(tmp_path, capsys):
    out = tmp_path / "pol.pt"
    state = tmp_path / "pol.pt.state"
    for garbage in _garbage_states(state):
        garbage.replace(state)
        before = file_sha256(state)
        line = _refused(["train", "policy", "--data", str(tmp_path / "nonexistent"), "--out", str(out),
                         "--no-progress"], "pol.pt.state", capsys)
        assert "not a resumable state of `memnav train policy`" in line
        assert file_sha256(state) == before and not out.exists()
