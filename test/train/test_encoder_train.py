"""A few steps of encoder training on a tiny generated dataset: checkpoint, curve, resume."""
import json

import numpy as np
import pytest
import torch
from conftest import make_tiny_dataset

from memnav.cli import main
from memnav.core.encoder import Encoder, EncoderConfig, FrameEncoder, load_checkpoint, load_checkpoint_with_extra
from memnav.core.frames import trained_hfov_from
from memnav.train.encoder_train import augment, embed, house_bank_loss, mine_look_alikes, resolve_device
from memnav.train.frame_bank import FrameSet, same_place


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("enc") / "houses", seed=2)


@pytest.mark.slow
def test_train_writes_checkpoint_curve_and_resumes(tiny_data, tmp_path, capsys):
    out = tmp_path / "encoder.pt"
    args = ["train", "encoder", "--out", str(out), "--data", str(tiny_data), "--steps", "4", "--batch", "8",
            "--pairs-per-house", "12", "--eval-every", "2", "--no-progress", "--max-minutes", "0"]
    assert main(args) == 0          # stops after the first step (0 minutes), state saved
    state = out.with_name("encoder.pt.state")
    assert state.exists() and out.exists()
    assert "re-run to continue" in capsys.readouterr().err
    assert main(args[:-2]) == 0     # resumes and finishes
    curve = json.loads(out.with_suffix(".curve.json").read_text())
    assert curve["step"] == [1, 2, 3, 4]
    assert len(curve["val_recall_at_1"]) == 2 and 0.0 <= curve["val_recall_at_1"][-1] <= 1.0
    assert out.with_suffix(".curve.png").stat().st_size > 1000
    model = load_checkpoint(out)
    assert model.cfg.embedding_dim == 256
    with pytest.raises(SystemExit):
        main(["train", "encoder", "--bogus"])
    other_steps = [a if a != "4" else "9" for a in args[:-2]]
    assert main(other_steps) == 2   # resuming with a different --steps than the state is refused
    assert main([*args[:-2], "--no-near-miss"]) == 2   # ... and without the near misses it started with
    assert "near_miss True (now False)" in capsys.readouterr().err
    assert main([*args[:-2], "--positive-m", "0.9"]) == 2   # ... or with other positive pairs
    assert "positive_m 0.5 (now 0.9)" in capsys.readouterr().err
    assert main([*args[:-2], "--widths", "16", "32", "48", "64"]) == 2   # ... or with another architecture
    assert "widths [32, 64, 96, 128] (now [16, 32, 48, 64])" in capsys.readouterr().err
    assert (tiny_data / "cache").is_dir() and any("nearmiss" in f.name for f in (tiny_data / "cache").iterdir())
    assert main([*args[:-2], "--min-hfov-deg", "60"]) == 2   # ... or for narrower cameras
    assert "min_hfov_deg 90.0 (now 60.0)" in capsys.readouterr().err
    assert main([*args[:-2], "--aspect-ratios", "1", "1.778"]) == 2   # ... or for other image shapes
    assert "aspect_ratios [1.0] (now [1.0, 1.778])" in capsys.readouterr().err
    # trained for narrower and 16:9 cameras too (the same cached bank, views cropped)
    narrow = tmp_path / "narrow.pt"
    assert main(["train", "encoder", "--out", str(narrow), *args[4:-2], "--min-hfov-deg", "60",
                 "--aspect-ratios", "1", "1.778"]) == 0
    train_config = torch.load(narrow, weights_only=True)["extra"]["train_config"]
    assert (train_config["min_hfov_deg"], list(train_config["aspect_ratios"])) == (60.0, [1.0, 1.778])
    # an encoder for one robot's camera: views rendered 69 deg wide at 96 x 54, banks cached apart, and the
    # checkpoint says which fields of view it was trained on
    robot = tmp_path / "robot.pt"
    assert main(["train", "encoder", "--out", str(robot), *args[4:-2], "--hfov-deg", "69", "--image-px", "96",
                 "54"]) == 0
    assert any("_camheight_px54-hfov_deg69-width_px96" in f.name for f in (tiny_data / "cache").iterdir())
    extra = load_checkpoint_with_extra(robot)[1]
    assert extra["train_config"]["camera"] == {"hfov_deg": 69.0, "width_px": 96, "height_px": 54}
    assert trained_hfov_from(extra) == (69.0, 69.0)
    encoder = Encoder.from_checkpoint(robot)
    assert encoder.camera_mismatch(69.0) is None and "69 deg this encoder" in encoder.camera_mismatch(60.0)


@pytest.mark.slow
def test_train_on_one_dataset_validates_on_another_and_refuses_changed_data_on_resume(tiny_data, tmp_path, capsys):
    other = make_tiny_dataset(tmp_path / "other", seed=5)
    out = tmp_path / "encoder.pt"
    args = ["train", "encoder", "--out", str(out), "--data", str(other), "--val-data", str(tiny_data),
            "--steps", "2", "--batch", "8", "--pairs-per-house", "12", "--eval-every", "2", "--no-progress",
            "--no-near-miss"]
    assert main(args) == 0
    # the train bank lives with the train houses, the validation banks with the val houses, each tagged
    # with its dataset's seed and size
    assert [f.name for f in (other / "cache").iterdir()] == ["encoder_bank_train_1h_12_64px_s0_pairs0.5m15deg_d5n3.npz"]
    assert any(f.name.startswith("encoder_bank_val_") and f.name.endswith("_d2n3.npz")
               for f in (tiny_data / "cache").iterdir())
    assert len(json.loads(out.with_suffix(".curve.json").read_text())["val_recall_at_1"]) == 1
    third = make_tiny_dataset(tmp_path / "third", seed=6)
    assert main([a if a != str(other) else str(third) for a in args]) == 2
    assert "dataset d5n3 (now d6n3)" in capsys.readouterr().err
    # the curve's validation recall is of one validation set: resuming against another is refused
    assert main([a if a != str(tiny_data) else str(third) for a in args]) == 2
    assert "val_dataset d2n3 (now d6n3)" in capsys.readouterr().err
    assert main([*args, "--near-miss-m", "1.6", "1.0"]) == 2
    assert "--near-miss-m MIN MAX needs 0 <= MIN < MAX, got 1.6 1" in capsys.readouterr().err
    banded = [a for a in args if a != "--no-near-miss"]
    assert main([*banded, "--restart", "--near-miss-m", "1.0", "1.6", "--near-miss-turn-deg", "30", "60"]) == 0
    bank = "encoder_bank_train_1h_12_64px_s0_pairs0.5m15deg_nearmiss1-1.6m30-60deg_d5n3.npz"
    assert (other / "cache" / bank).is_file()
    assert main(banded) == 2   # resuming with the default bands is refused, naming the one that differs
    assert "near_miss_m [1.0, 1.6] (now [1.15, 2.0])" in capsys.readouterr().err
    assert main([*banded, "--restart", "--mine-every", "-1"]) == 2
    assert "--mine-every must be >= 0" in capsys.readouterr().err
    assert main([*banded, "--restart", "--mine-every", "1"]) == 0   # mined look-alikes from step 1 on
    assert main(banded) == 2
    assert "mine_every 1 (now 0)" in capsys.readouterr().err
    # the house bank from step 1 on, alone and beside mining (which then shares its table)
    assert main([*banded, "--restart", "--house-bank-every", "1"]) == 0
    assert main([*banded, "--restart", "--house-bank-every", "1", "--mine-every", "1"]) == 0
    assert main([*banded, "--mine-every", "1"]) == 2
    assert "house_bank_every 1 (now 0)" in capsys.readouterr().err
    assert main([*banded, "--restart", "--house-bank-every", "-2"]) == 2
    assert "--house-bank-every must be >= 0" in capsys.readouterr().err
    # a weaker colour-gain augmentation is part of the training setting, too
    assert main([*banded, "--restart", "--colour-gain", "0.03"]) == 0
    assert main(banded) == 2
    assert "colour_gain_std 0.03 (now 0.1)" in capsys.readouterr().err
    assert main([*banded, "--restart", "--colour-gain", "1.5"]) == 2
    assert "--colour-gain must be in [0, 1), got 1.5" in capsys.readouterr().err
    missing = [a if a != str(tiny_data) else str(tmp_path / "nowhere") for a in args]
    assert main([*missing, "--restart"]) == 2
    assert "splits.json not found" in capsys.readouterr().err


@pytest.mark.slow
def test_render_workers_cache_their_bank_apart_and_a_resume_must_keep_them(tiny_data, tmp_path, capsys):
    """--render-workers N renders a bank with a stream per house, cached under its own name (the same for
    any N); resuming a run with or without it, against how it started, is refused by name."""
    out = tmp_path / "encoder.pt"
    args = ["train", "encoder", "--out", str(out), "--data", str(tiny_data), "--steps", "2", "--batch", "8",
            "--pairs-per-house", "12", "--eval-every", "2", "--no-progress", "--no-near-miss",
            "--cache-dir", str(tmp_path / "cache"), "--max-minutes", "0"]
    assert main([*args, "--render-workers", "-1"]) == 2
    assert "--render-workers must be >= 0 (rendering processes), got -1" in capsys.readouterr().err
    assert main([*args, "--render-workers", "2"]) == 0
    banks = sorted(f.name for f in (tmp_path / "cache").iterdir() if f.name.startswith("encoder_bank_train"))
    assert banks == ["encoder_bank_train_1h_12_64px_s0_pairs0.5m15deg_d2n3_perhouse.npz"]
    assert main(args[:-2]) == 2       # resumed without it: another bank, refused
    assert "house_streams True (now False)" in capsys.readouterr().err
    assert main([*args[:-2], "--render-workers", "1"]) == 0   # any N >= 1 reads the same bank and resumes
    assert json.loads(out.with_suffix(".curve.json").read_text())["step"] == [1, 2]
    assert len([f for f in (tmp_path / "cache").iterdir() if f.name.startswith("encoder_bank_train")]) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_augment_on_a_gpu_draws_there_and_repeats_from_the_same_cpu_generator():
    x = (torch.rand(32, 4, 16, 16) * 0.5 + 0.25).cuda()
    a = augment(x, torch.Generator().manual_seed(3))
    b = augment(x, torch.Generator().manual_seed(3))
    c = augment(x, torch.Generator().manual_seed(4))
    assert a.device.type == "cuda" and a.shape == x.shape
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    assert 0.0 < float((a[:, 3] == 0).float().mean()) < 0.2      # depth dropout, about 5% of pixels


def test_colour_gain_scales_the_channels_apart_only_when_asked():
    x = torch.rand(64, 4, 16, 16) * 0.5 + 0.25
    ratios = []
    for std in (0.0, 0.3):
        out = augment(x, torch.Generator().manual_seed(0), colour_gain_std=std)
        rgb = out[:, :3].mean(dim=(2, 3)) / x[:, :3].mean(dim=(2, 3))   # per image and channel: the scaling
        ratios.append((rgb.max(dim=1).values / rgb.min(dim=1).values).median().item())
    # brightness and contrast scale the three channels alike; only the colour gain sets them apart
    assert ratios[0] < 1.08 < 1.2 < ratios[1]


def test_mined_look_alike_is_the_most_similar_other_place_of_the_same_house():
    torch.manual_seed(0)
    model = FrameEncoder(EncoderConfig())
    rng = np.random.default_rng(0)
    n = 12
    frames = rng.random((n, 4, 64, 64)).astype(np.float16)
    poses = np.column_stack([rng.uniform(0, 8, n), rng.uniform(0, 8, n), rng.uniform(-3, 3, n)])
    poses[1] = poses[0] + [0.2, 0.0, 0.1]          # 0 and 1 are the same place
    poses[11] = [50.0, 50.0, 0.0]                   # the only anchor of house 1
    house = np.array([0] * 11 + [1])
    anchors = FrameSet(frames, poses, house)
    mined = mine_look_alikes(model, anchors)
    emb = embed(model, frames)
    allowed = ~same_place(poses, poses, house, house)
    for i in range(11):
        j = mined[i]
        assert house[j] == house[i] and allowed[i, j]
        assert emb[i] @ emb[j] == pytest.approx(max(emb[i] @ emb[k] for k in range(n) if allowed[i, k]), abs=1e-5)
    assert mined[0] != 1 and mined[1] != 0
    assert mined[11] == 11                           # nothing to mine in a house of one anchor: itself


def test_info_nce_near_misses_join_the_denominator_unless_marked_same_place():
    from memnav.train.encoder_train import info_nce

    torch.manual_seed(0)
    za = torch.nn.functional.normalize(torch.randn(6, 16), dim=1)
    zb = torch.nn.functional.normalize(za + 0.1 * torch.randn(6, 16), dim=1)
    no_same = torch.zeros(6, 6, dtype=torch.bool)
    base = info_nce(za, zb, no_same, 0.1)
    # a near miss that looks exactly like its anchor is a strong negative: the loss rises
    hard = info_nce(za, zb, no_same, 0.1, zn=za.clone(), same_n=torch.zeros(6, 6, dtype=torch.bool))
    assert hard > base + 0.1
    # near misses marked as the same place are not negatives at all
    masked = info_nce(za, zb, no_same, 0.1, zn=za.clone(), same_n=torch.ones(6, 6, dtype=torch.bool))
    assert torch.isclose(masked, base)
    # same-place pairs among the b views are removed from the negatives too
    far = info_nce(za, zb, torch.ones(6, 6, dtype=torch.bool), 0.1)
    assert far < base


@pytest.mark.slow
def test_stop_calibration_writes_belief_and_reliability(tiny_data, tmp_path, capsys):
    import torch

    from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint
    from memnav.core.stop import GoalBeliefCalibrator

    torch.manual_seed(0)
    ckpt = tmp_path / "enc.pt"
    save_checkpoint(FrameEncoder(EncoderConfig()), ckpt)
    out = tmp_path / "stop.json"
    assert main(["train", "stop", "--checkpoint", str(ckpt), "--data", str(tiny_data), "--examples-per-house", "12",
                 "--out", str(out), "--no-progress"]) == 0
    assert "%|" not in capsys.readouterr().err      # no bars
    res = json.loads(out.read_text())
    assert res["feature_names"] == ["similarity", "verification"] and len(res["weights"]) == 3
    assert res["examples"] == {"train": 12, "val": 12} and 0 <= res["ece"]["val"] <= 1
    assert (res["hfov_deg"], res["camera_height_m"], res["image_px"]) == (90.0, 1.25, [128, 128])   # its camera
    assert out.with_suffix(".png").stat().st_size > 1000
    belief = GoalBeliefCalibrator.from_dict(res).predict([[0.9, 1.0]])
    assert 0.0 <= float(belief[0]) <= 1.0


def test_house_bank_loss_counts_table_views_of_the_same_place_as_positives_and_skips_the_own_entry():
    # two rows in house 0; the table holds 4 views of house 0 and 1 of house 1
    z = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), dim=1)
    partner = torch.nn.functional.normalize(torch.tensor([[0.6, 0.8, 0.0], [0.8, 0.6, 0.0]]), dim=1)
    poses = np.array([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0]])
    house = np.array([0, 0])
    table = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    table_house = np.array([0, 0, 0, 0, 1])
    own = np.array([0, 1])                      # rows 0 and 1 are anchors 0 and 1 of the table

    def loss(table_poses):
        return float(house_bank_loss(z, partner, poses, house, own, table, table_poses, table_house, 0.1))

    far = np.array([[0, 0, 0], [5, 0, 0], [20, 20, 0], [30, 30, 0], [0, 0, 0]], dtype=float)
    near = far.copy()
    near[2] = [0.3, 0.0, 0.2]                   # table view 2 (equal to row 0's embedding) is row 0's place
    # as a negative, view 2 outscores row 0's partner; as a positive it makes the loss smaller
    assert loss(near) < loss(far)
    # the rows' own entries (0 and 1, equal to z) are never candidates, and house 1's view (also equal to
    # row 0's embedding) is never one either: moving them changes nothing
    moved = far.copy()
    moved[[0, 1, 4]] = [[40, 0, 0], [0, 40, 0], [0, 0, 0]]
    assert loss(moved) == pytest.approx(loss(far))
    # by hand for row 1: candidates are its partner and table views 0, 2 and 3 (view 1 is its own)
    s_pos = float(z[1] @ partner[1]) / 0.1
    s_tab = np.array([float(z[1] @ table[k]) / 0.1 for k in (0, 2, 3)])
    row1 = np.log(np.exp(s_pos) + np.exp(s_tab).sum()) - s_pos
    row0 = float(house_bank_loss(z[:1], partner[:1], poses[:1], house[:1], own[:1], table, far, table_house, 0.1))
    assert loss(far) == pytest.approx((row0 + row1) / 2, rel=1e-5)
    # gradient reaches both the rows and their partners
    zg, pg = z.clone().requires_grad_(), partner.clone().requires_grad_()
    house_bank_loss(zg, pg, poses, house, own, table, far, table_house, 0.1).backward()
    assert zg.grad is not None and pg.grad is not None and pg.grad.abs().sum() > 0


def test_resolve_device_names_what_is_wrong():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")
    with pytest.raises(ValueError, match="unsupported device type 'meta'"):
        resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA GPU"):
            resolve_device("cuda")


@pytest.mark.slow
def test_train_on_the_chosen_device_writes_a_cpu_checkpoint(tiny_data, tmp_path, capsys):
    """--device: refused by name where torch has no such device; where it has one (or on the CPU), the
    house bank and mining run there and the checkpoint loads on the CPU."""
    out = tmp_path / "encoder.pt"
    args = ["train", "encoder", "--out", str(out), "--data", str(tiny_data), "--steps", "2", "--batch", "8",
            "--pairs-per-house", "12", "--eval-every", "2", "--no-progress", "--house-bank-every", "1",
            "--mine-every", "1"]
    assert main([*args, "--device", "tpu"]) == 2
    assert "--device: unknown device 'tpu'" in capsys.readouterr().err
    assert not out.exists()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert main([*args, "--device", device]) == 0
    model = load_checkpoint(out)
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert len(json.loads(out.with_suffix(".curve.json").read_text())["val_recall_at_1"]) == 1


@pytest.mark.slow
def test_init_fine_tunes_a_checkpoint_and_refuses_another_architecture_or_start(tiny_data, tmp_path, capsys):
    """--init: training starts from the checkpoint's weights and architecture; options that contradict it, a
    missing file and resuming from another start are refused by name."""
    base = tmp_path / "base.pt"
    args = ["train", "encoder", "--data", str(tiny_data), "--batch", "8", "--pairs-per-house", "12",
            "--eval-every", "1", "--no-progress", "--no-near-miss"]
    assert main([*args, "--out", str(base), "--steps", "2", "--widths", "16", "32", "48", "64"]) == 0
    tuned = tmp_path / "tuned.pt"
    fine = [*args, "--out", str(tuned), "--steps", "1", "--init", str(base)]
    assert main([*fine, "--lr", "1e-12"]) == 0     # a vanishing step: the weights stay the checkpoint's
    assert "starting from the weights of" in capsys.readouterr().err
    start, after = load_checkpoint(base), load_checkpoint(tuned)
    assert after.cfg.widths == (16, 32, 48, 64)     # --init's architecture, not the default one
    for (name, a), b in zip(start.named_parameters(), after.parameters()):   # batch-norm statistics do move
        assert torch.allclose(a, b, atol=1e-6), name
    assert main([*fine, "--restart", "--widths", "32", "64", "96", "128"]) == 2
    assert "widths [16, 32, 48, 64] (given [32, 64, 96, 128])" in capsys.readouterr().err
    assert main([*fine, "--restart", "--init", str(tmp_path / "missing.pt")]) == 2
    assert "missing.pt" in capsys.readouterr().err
    assert main([*args, "--out", str(base), "--steps", "1", "--init", str(base)]) == 2
    assert "is also --out" in capsys.readouterr().err
    # a state started from base.pt does not resume as a run from scratch (or from another checkpoint)
    state = tuned.with_name("tuned.pt.state")
    assert main([*fine[:-2], "--steps", "3", "--init", str(base), "--max-minutes", "0"]) == 2   # other --steps
    capsys.readouterr()
    assert main([*fine[:-2], "--restart", "--steps", "3", "--init", str(base), "--max-minutes", "0"]) == 0
    assert state.is_file()
    assert main([*fine[:-2], "--steps", "3", "--widths", "16", "32", "48", "64"]) == 2
    assert "init base.pt:" in capsys.readouterr().err
