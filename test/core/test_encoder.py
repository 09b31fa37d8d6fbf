import numpy as np
import pytest
import torch

from memnav.core.encoder import (
    CheckpointError,
    Encoder,
    EncoderConfig,
    FrameEncoder,
    frames_to_array,
    load_checkpoint,
    save_checkpoint,
)


@pytest.fixture
def frame():
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (128, 128, 3), dtype=np.uint8), rng.uniform(0.5, 8, (128, 128)).astype(np.float32)


def test_embedding_shape_unit_norm_and_deterministic(frame):
    torch.manual_seed(0)
    enc = Encoder(FrameEncoder(EncoderConfig()))
    e1 = enc.encode(*frame)
    e2 = enc.encode(*frame)
    assert e1.shape == (256,) and e1.dtype == np.float32
    assert np.linalg.norm(e1) == pytest.approx(1.0, abs=1e-5)
    assert np.array_equal(e1, e2)
    batch = enc.encode_batch(np.stack([frame[0]] * 3), np.stack([frame[1]] * 3))
    assert batch.shape == (3, 256) and np.allclose(batch[0], e1, atol=1e-5)


def test_other_sizes_resized_and_missing_depth(frame):
    cfg = EncoderConfig()
    x = frames_to_array(np.zeros((480, 640, 3), np.uint8), None, cfg)
    assert x.shape == (1, 4, 64, 64) and np.all(x[:, 3] == 0)
    x = frames_to_array(frame[0], frame[1], cfg)
    assert 0 <= x.min() and x.max() <= 1


@pytest.mark.parametrize("rgb, depth, msg", [
    (np.zeros((64, 64), np.uint8), None, "rgb must be"),
    (np.zeros((64, 64, 3), np.float32), None, "uint8"),
    (np.zeros((64, 64, 3), np.uint8), np.zeros((32, 32), np.float32), "depth must match"),
])
def test_bad_frames_are_named(rgb, depth, msg):
    with pytest.raises(ValueError, match=msg):
        frames_to_array(rgb, depth, EncoderConfig())


def test_checkpoint_round_trip_and_refusals(tmp_path, frame):
    torch.manual_seed(1)
    model = FrameEncoder(EncoderConfig())
    path = tmp_path / "enc.pt"
    save_checkpoint(model, path)
    loaded = Encoder.from_checkpoint(path)
    assert np.allclose(loaded.encode(*frame), Encoder(model.eval()).encode(*frame), atol=1e-6)

    payload = torch.load(path, weights_only=True)
    payload["version"] = 99
    torch.save(payload, tmp_path / "v99.pt")
    with pytest.raises(CheckpointError, match="version 99"):
        load_checkpoint(tmp_path / "v99.pt")
    payload["version"] = 1
    payload["format"] = "someone-else"
    torch.save(payload, tmp_path / "fmt.pt")
    with pytest.raises(CheckpointError, match="someone-else"):
        load_checkpoint(tmp_path / "fmt.pt")
    other = FrameEncoder(EncoderConfig(widths=(16, 32, 48, 64)))
    payload = torch.load(path, weights_only=True)
    payload["state_dict"] = other.state_dict()
    torch.save(payload, tmp_path / "arch.pt")
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(tmp_path / "arch.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt"):
        load_checkpoint(tmp_path / "junk.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="is a directory"):
        load_checkpoint(tmp_path)
    # a JSON file given as a checkpoint: one line saying torch cannot read it, not torch's page of advice
    (tmp_path / "cal.json").write_text('{"weights": [1.0]}')
    with pytest.raises(CheckpointError, match=r"cal\.json: .*weights_only=True\) reads") as info:
        load_checkpoint(tmp_path / "cal.json")
    assert "\n" not in str(info.value) and "trusted source" not in str(info.value)


def test_shipped_alternative_encoder_matches_its_documented_command(frame):
    """models/encoder_mined6k.pt (not the default) loads with weights_only, embeds like the default encoder,
    records the training settings models/README.md gives for it, and has its own stop calibration."""
    import json

    from memnav.core.checkpoint import read_payload
    from memnav.core.encoder import CHECKPOINT_FORMAT, CHECKPOINT_VERSION
    from memnav.paths import PACKAGE_ROOT

    path = PACKAGE_ROOT / "models" / "encoder_mined6k.pt"
    extra = read_payload(path, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, "encoder")["extra"]
    cfg = extra["train_config"]
    assert (extra["step"], cfg["steps"], cfg["pairs_per_house"], cfg["mine_every"], cfg["house_bank_every"]) == \
        (6000, 6000, 600, 400, 0)
    assert (cfg["positive_m"], cfg["positive_deg"], list(cfg["near_miss_m"]), list(cfg["near_miss_turn_deg"])) == \
        (1.0, 30.0, [1.0, 1.6], [30.0, 60.0])
    shipped = Encoder.from_checkpoint(PACKAGE_ROOT / "models" / "encoder.pt")
    alt = Encoder.from_checkpoint(path)
    z, z_alt = shipped.encode(*frame), alt.encode(*frame)
    assert z.shape == z_alt.shape == (256,) and abs(float(np.linalg.norm(z_alt)) - 1.0) < 1e-5
    assert not np.allclose(z, z_alt)    # another network, not a copy of the default
    cal = json.loads((PACKAGE_ROOT / "models" / "stop_calibration_mined6k.json").read_text())
    assert cal["checkpoint"] == "models/encoder_mined6k.pt" and cal["ece"]["val"] < 0.05


def test_an_encoder_knows_the_fields_of_view_it_was_trained_on_and_names_a_narrower_camera(tmp_path):
    model = FrameEncoder(EncoderConfig())
    plain, cropped = tmp_path / "plain.pt", tmp_path / "fov60.pt"
    save_checkpoint(model, plain)                                   # no training settings: the simulator's 90 deg
    save_checkpoint(model, cropped, extra={"train_config": {"min_hfov_deg": 60.0}})   # --min-hfov-deg 60
    simulator_only, fov60 = Encoder.from_checkpoint(plain), Encoder.from_checkpoint(cropped)
    assert simulator_only.trained_hfov_deg == (90.0, 90.0) and fov60.trained_hfov_deg == (60.0, 90.0)
    assert simulator_only.camera_mismatch(69.4) == (
        "the camera's 69.4 deg field of view is narrower than the 90 deg this encoder was trained on: expect weaker "
        "place recognition; for cameras of 60-90 deg use encoder_checkpoint models/encoder_fov60.pt with calibration "
        "models/stop_calibration_fov60.json")
    assert "encoder_fov60" not in simulator_only.camera_mismatch(50.0)   # the shipped models do not cover it either
    assert simulator_only.camera_mismatch(88.0) is None           # within the tolerance
    assert fov60.camera_mismatch(69.4) is None and fov60.camera_mismatch(58.0) is None
    assert "narrower than the 60-90 deg" in fov60.camera_mismatch(50.0)
    # a wider camera sees more of the room: recognition was measured to rise there, so it is not named
    assert simulator_only.camera_mismatch(110.0) is None


def test_the_robot_profiles_encoder_matches_its_documented_command(frame):
    """models/encoder_fov60.pt (config/robot.yaml's) records the settings models/README.md gives for it, was
    trained for 60-90 deg cameras, and its stop calibration was fitted with 69 deg views."""
    import json

    import yaml

    from memnav.paths import PACKAGE_ROOT

    path = PACKAGE_ROOT / "models" / "encoder_fov60.pt"
    extra = torch.load(path, weights_only=True)["extra"]
    cfg = extra["train_config"]
    assert (extra["step"], cfg["steps"], cfg["pairs_per_house"], cfg["mine_every"], cfg["min_hfov_deg"]) == \
        (6000, 6000, 600, 400, 60.0)
    assert (cfg["positive_m"], cfg["positive_deg"], list(cfg["near_miss_m"]), list(cfg["near_miss_turn_deg"])) == \
        (1.0, 30.0, [1.0, 1.6], [30.0, 60.0])
    enc = Encoder.from_checkpoint(path)
    assert enc.trained_hfov_deg == (60.0, 90.0) and enc.camera_mismatch(69.4) is None
    assert abs(float(np.linalg.norm(enc.encode(*frame))) - 1.0) < 1e-5
    cal = json.loads((PACKAGE_ROOT / "models" / "stop_calibration_fov60.json").read_text())
    assert cal["checkpoint"] == "models/encoder_fov60.pt" and cal["hfov_deg"] == 69.0 and cal["ece"]["val"] < 0.05
    params = yaml.safe_load((PACKAGE_ROOT / "config" / "robot.yaml").read_text())["policy_node"]["ros__parameters"]
    assert (params["encoder_checkpoint"], params["calibration"]) == ("models/encoder_fov60.pt",
                                                                     "models/stop_calibration_fov60.json")


def test_the_16_9_encoder_matches_its_documented_command(frame):
    """models/encoder_69deg_16x9.pt records the settings models/README.md gives for it (views rendered with a 69
    deg 192 x 108 camera, crops down to 60 deg), and its stop calibration was fitted with that camera's views."""
    import json

    from memnav.core.frames import trained_aspect_from
    from memnav.paths import PACKAGE_ROOT

    path = PACKAGE_ROOT / "models" / "encoder_69deg_16x9.pt"
    extra = torch.load(path, weights_only=True)["extra"]
    cfg = extra["train_config"]
    assert (extra["step"], cfg["steps"], cfg["pairs_per_house"], cfg["mine_every"], cfg["min_hfov_deg"]) == \
        (6000, 6000, 600, 400, 60.0)
    assert cfg["camera"] == {"hfov_deg": 69.0, "width_px": 192, "height_px": 108}
    assert abs(trained_aspect_from(extra) - 16 / 9) < 1e-9
    enc = Encoder.from_checkpoint(path)
    assert enc.trained_hfov_deg == (60.0, 69.0) and enc.camera_mismatch(69.4) is None
    assert enc.camera_mismatch(50.0) is not None
    # the policy node passes camera_info's image size: another shape than 16:9 is said, as memnav check says it
    assert enc.camera_mismatch(69.4, (1280, 720)) is None and enc.camera_mismatch(69.4, (848, 480)) is None
    assert "trained on 1.78:1 images" in enc.camera_mismatch(69.4, (640, 480))
    assert Encoder.from_checkpoint(PACKAGE_ROOT / "models" / "encoder_fov60.pt").camera_mismatch(69.4, (640, 480)) \
        is None
    assert abs(float(np.linalg.norm(enc.encode(*frame))) - 1.0) < 1e-5
    cal = json.loads((PACKAGE_ROOT / "models" / "stop_calibration_69deg_16x9.json").read_text())
    assert (cal["checkpoint"], cal["hfov_deg"], cal["image_px"]) == ("models/encoder_69deg_16x9.pt", 69.0, [192, 108])
    assert cal["ece"]["val"] < 0.05
