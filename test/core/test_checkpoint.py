"""Checkpoint identities (memnav.core.checkpoint.checkpoint_sha256)."""
import hashlib
import shutil

from memnav.core.checkpoint import CHECKPOINT_SHA256_CHARS, checkpoint_sha256
from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint


def test_checkpoint_identity_follows_the_weights_not_the_path(tmp_path):
    import torch

    cfg = EncoderConfig(input_px=32, embedding_dim=16, widths=(8, 8, 8, 8))
    torch.manual_seed(0)
    first = tmp_path / "encoder.pt"
    save_checkpoint(FrameEncoder(cfg), first)
    ident = checkpoint_sha256(first)
    assert ident == hashlib.sha256(first.read_bytes()).hexdigest()[:CHECKPOINT_SHA256_CHARS]
    copy = tmp_path / "renamed.pt"
    shutil.copy(first, copy)
    assert checkpoint_sha256(copy) == ident                 # copied or renamed: the same checkpoint
    save_checkpoint(FrameEncoder(cfg), first)                # trained again into the same path: another one
    assert checkpoint_sha256(first) != ident
