"""Policy network: shapes, empty memories, checkpoint round trip and refusals."""
import numpy as np
import pytest
import torch

from memnav.core.checkpoint import CheckpointError
from memnav.core.policy import (
    MOVES,
    MemoryPolicy,
    PolicyConfig,
    depth_profile,
    load_policy,
    save_policy,
    step_vector,
)
from memnav.core.types import Action


def _inputs(cfg: PolicyConfig, batch: int, real_tokens: int):
    step = torch.randn(batch, cfg.step_dim)
    tokens = torch.randn(batch, cfg.memory_tokens, cfg.token_features)
    mask = torch.zeros(batch, cfg.memory_tokens, dtype=torch.bool)
    mask[:, :real_tokens] = True
    return step, tokens, mask


def test_forward_shapes_and_empty_memory_is_finite():
    torch.manual_seed(0)
    cfg = PolicyConfig(memory_tokens=6, hidden_dim=32, token_dim=16, heads=2)
    model = MemoryPolicy(cfg)
    step, tokens, mask = _inputs(cfg, 3, 0)   # no memory yet (first step of an episode)
    logits, value, goal, h = model(step, tokens, mask, model.initial_state(3))
    assert logits.shape == (3, len(MOVES)) and value.shape == (3,) and goal.shape == (3,) and h.shape == (3, 32)
    assert torch.isfinite(logits).all() and torch.isfinite(h).all()


def test_masked_tokens_do_not_change_the_output():
    torch.manual_seed(1)
    cfg = PolicyConfig(memory_tokens=5, hidden_dim=32, token_dim=16, heads=2)
    model = MemoryPolicy(cfg).eval()
    step, tokens, mask = _inputs(cfg, 2, 3)
    out_a = model(step, tokens, mask, model.initial_state(2))[0]
    tokens2 = tokens.clone()
    tokens2[:, 3:] = 100.0  # padding slots hold garbage: must be ignored
    out_b = model(step, tokens2, mask, model.initial_state(2))[0]
    assert torch.allclose(out_a, out_b, atol=1e-5)


def test_gru_variant_has_no_attention():
    model = MemoryPolicy(PolicyConfig(memory_tokens=0, hidden_dim=32))
    assert not hasattr(model, "attn")
    step = torch.randn(2, model.cfg.step_dim)
    logits, *_ = model(step, None, None, model.initial_state(2))
    assert logits.shape == (2, 3)


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(2)
    cfg = PolicyConfig(memory_tokens=4, hidden_dim=32, token_dim=16, heads=2)
    model = MemoryPolicy(cfg)
    path = tmp_path / "p.pt"
    save_policy(model, path, extra={"variant": "memnav"})
    loaded, extra = load_policy(path)
    assert extra["variant"] == "memnav" and loaded.cfg == cfg
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k])
    assert torch.load(path, weights_only=True)["format"] == "memnav-policy"


def test_checkpoint_of_other_architecture_or_format_is_refused(tmp_path):
    path = tmp_path / "p.pt"
    save_policy(MemoryPolicy(PolicyConfig(memory_tokens=4, hidden_dim=32, token_dim=16, heads=2)), path)
    payload = torch.load(path, weights_only=True)
    payload["config"]["hidden_dim"] = 64   # config says 64, tensors are 32 wide
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="shape"):
        load_policy(path)
    payload["version"] = 99
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="version 99"):
        load_policy(path)
    from memnav.core.encoder import EncoderConfig, FrameEncoder, save_checkpoint
    save_checkpoint(FrameEncoder(EncoderConfig()), path)
    with pytest.raises(CheckpointError, match="memnav-encoder"):
        load_policy(path)


def test_depth_profile_and_step_vector():
    depth = np.full((8, 16), 4.0, np.float32)
    depth[:, 12:] = 0.5      # an obstacle on the right
    depth[:, :2] = 0.0       # no return on the left counts as far
    prof = depth_profile(depth, bins=4, max_depth_m=5.0)
    assert prof.shape == (4,)
    assert prof[3] == pytest.approx(0.1) and prof[0] == pytest.approx(0.8)
    e = np.ones(4, np.float32) / 2
    v = step_vector(e, e, prof, int(Action.TURN_LEFT), True)
    assert v.shape == (4 * 3 + 4 + 4 + 1,)
    assert v[-1] == 1.0 and v[-5 + int(Action.TURN_LEFT)] == 1.0


def test_config_validation():
    with pytest.raises(ValueError, match="divisible"):
        PolicyConfig(token_dim=30, heads=4)
    with pytest.raises(ValueError, match="memory_tokens"):
        PolicyConfig(memory_tokens=-1)
