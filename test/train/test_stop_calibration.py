"""`memnav train stop` on a tiny generated dataset: what the calibration records of its encoder checkpoint."""
import json

import pytest
from conftest import make_tiny_dataset

from memnav.cli import main


@pytest.mark.slow
def test_the_calibration_names_its_checkpoint_by_hash(tmp_path):
    """The calibration recorded only the path given to --checkpoint: an encoder trained again into that path, or
    another checkpoint under that name, could not be told from the one the belief was fitted on."""
    import torch

    from memnav.core.checkpoint import checkpoint_sha256
    from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint
    from memnav.core.stop import EncoderCheckpoint, calibrated_checkpoint

    data = make_tiny_dataset(tmp_path / "houses", seed=2)
    torch.manual_seed(0)
    ckpt = tmp_path / "enc.pt"
    save_checkpoint(FrameEncoder(EncoderConfig(input_px=32, embedding_dim=16, widths=(8, 8, 8, 8))), ckpt)
    out = tmp_path / "stop.json"
    assert main(["train", "stop", "--checkpoint", str(ckpt), "--data", str(data), "--examples-per-house", "4",
                 "--out", str(out), "--no-progress"]) == 0
    body = json.loads(out.read_text())
    assert body["checkpoint"] == str(ckpt) and body["checkpoint_sha256"] == checkpoint_sha256(ckpt)
    assert calibrated_checkpoint(out) == EncoderCheckpoint(str(ckpt), checkpoint_sha256(ckpt))
