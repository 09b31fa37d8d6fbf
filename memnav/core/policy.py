"""Image-goal navigation policy: attention over memory tokens + a recurrent core (PyTorch, CPU friendly).

Per step the policy reads
- the current embedding e, the goal embedding g and their product e*g (how the view matches the goal),
- a coarse depth profile (nearest obstacle in `depth_bins` image columns; collision avoidance),
- the previous action (one-hot) and the collision flag,
- up to M memory tokens, each [embedding, x_m, y_m, cos(yaw), sin(yaw) relative to the robot, age,
  cosine similarity to the goal, token type], masked where empty.

Architecture (as in Memory-Augmented RL for Image-Goal Navigation): an MLP embeds the step input into a
query; multi-head attention over the projected memory tokens gives a memory read-out; a GRU cell integrates
query + read-out over time; heads give logits over MOVE_FORWARD / TURN_LEFT / TURN_RIGHT, a value, and a
goal-reached score (logit of "the goal is within the success radius"). STOP is not a policy action: the
stop controller (memnav.core.stop) decides it from a calibrated belief.

The variant with `memory_tokens = 0` is the `gru` baseline (same inputs minus memory, same core).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from memnav.core.checkpoint import load_model, save_model
from memnav.core.types import Action

CHECKPOINT_FORMAT = "memnav-policy"
CHECKPOINT_VERSION = 1

# policy action index -> simulator action (STOP belongs to the stop controller)
MOVES: tuple[Action, ...] = (Action.MOVE_FORWARD, Action.TURN_LEFT, Action.TURN_RIGHT)
NUM_PREV_ACTIONS = len(Action)

# token types (one-hot in the token features)
TOKEN_WORKING = 0     # working buffer item (short-term)
TOKEN_PLACE = 1       # long-term scene-graph retrieval
TOKEN_EPISODIC = 2    # episodic memory item (baseline: every past step, no scene graph)
NUM_TOKEN_TYPES = 3
TOKEN_GEOMETRY = 7    # x, y, cos, sin, age, goal similarity, scaled distance


@dataclass
class PolicyConfig:
    """Policy architecture.

    Attributes:
        embedding_dim: length of the encoder embeddings.
        depth_bins: image columns of the depth profile input.
        hidden_dim: width of the step MLP and the GRU state.
        token_dim: width memory tokens are projected to before attention.
        heads: attention heads.
        memory_tokens: M, number of memory tokens read per step (0 = no memory: the `gru` baseline).
    """

    embedding_dim: int = 256
    depth_bins: int = 16
    hidden_dim: int = 256
    token_dim: int = 128
    heads: int = 4
    memory_tokens: int = 24

    def __post_init__(self) -> None:
        for name in ("embedding_dim", "depth_bins", "hidden_dim", "token_dim", "heads"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"PolicyConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.memory_tokens < 0:
            raise ValueError(f"PolicyConfig.memory_tokens must be >= 0, got {self.memory_tokens}")
        if self.token_dim % self.heads:
            raise ValueError(f"PolicyConfig.token_dim ({self.token_dim}) must be divisible by heads ({self.heads})")

    @property
    def step_dim(self) -> int:
        """Length of the per-step input vector (see `step_vector`)."""
        return 3 * self.embedding_dim + self.depth_bins + NUM_PREV_ACTIONS + 1

    @property
    def token_features(self) -> int:
        """Length of one memory token's feature vector."""
        return self.embedding_dim + TOKEN_GEOMETRY + NUM_TOKEN_TYPES


def step_vector(embedding: np.ndarray, goal: np.ndarray, depth_profile: np.ndarray, prev_action: int,
                collided: bool) -> np.ndarray:
    """The policy's per-step input: [e, g, e*g, depth profile, one-hot previous action, collided]."""
    onehot = np.zeros(NUM_PREV_ACTIONS, np.float32)
    if prev_action >= 0:
        onehot[prev_action] = 1.0
    return np.concatenate([embedding, goal, embedding * goal, depth_profile, onehot,
                           [1.0 if collided else 0.0]]).astype(np.float32)


def depth_profile(depth: np.ndarray, bins: int, max_depth_m: float = 5.0) -> np.ndarray:
    """Nearest obstacle per image column band over the middle rows, scaled to [0, 1] (0 = touching).

    Zero depth (no return) counts as far. Uses the central half of the rows, where walls and furniture
    that block a forward step appear for a camera at robot height.
    """
    d = np.asarray(depth, dtype=np.float32)
    h, w = d.shape
    band = d[h // 4: 3 * h // 4]
    band = np.where(band > 0, band, max_depth_m)
    edges = np.linspace(0, w, bins + 1).astype(int)
    out = np.array([band[:, a:b].min() for a, b in zip(edges[:-1], edges[1:])], np.float32)
    return np.clip(out / max_depth_m, 0.0, 1.0)


class MemoryPolicy(nn.Module):
    """Step MLP -> attention over memory tokens -> GRU -> action logits, value, goal-reached logit."""

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_dim
        self.step_mlp = nn.Sequential(nn.Linear(cfg.step_dim, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        core_in = h
        if cfg.memory_tokens > 0:
            self.token_proj = nn.Sequential(nn.Linear(cfg.token_features, cfg.token_dim), nn.ReLU(),
                                            nn.Linear(cfg.token_dim, cfg.token_dim))
            self.query = nn.Linear(h, cfg.token_dim)
            self.attn = nn.MultiheadAttention(cfg.token_dim, cfg.heads, batch_first=True)
            core_in = h + cfg.token_dim
        self.gru = nn.GRUCell(core_in, h)
        self.actor = nn.Sequential(nn.Linear(h, h // 2), nn.ReLU(), nn.Linear(h // 2, len(MOVES)))
        self.critic = nn.Sequential(nn.Linear(h, h // 2), nn.ReLU(), nn.Linear(h // 2, 1))
        self.goal_head = nn.Sequential(nn.Linear(h, h // 2), nn.ReLU(), nn.Linear(h // 2, 1))
        # small initial logits: a near-uniform starting policy
        nn.init.normal_(self.actor[-1].weight, std=0.01)
        nn.init.zeros_(self.actor[-1].bias)

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, self.cfg.hidden_dim)

    def forward(self, step: torch.Tensor, tokens: torch.Tensor | None, token_mask: torch.Tensor | None,
                hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step for a batch.

        Args:
            step: [B, step_dim] step inputs.
            tokens: [B, M, token_features] memory tokens (None when memory_tokens == 0).
            token_mask: [B, M] bool, True where a token is real.
            hidden: [B, hidden_dim] recurrent state (zeros at episode start).

        Returns:
            (action logits [B, 3], value [B], goal-reached logit [B], new hidden [B, hidden_dim]).
        """
        x = self.step_mlp(step)
        if self.cfg.memory_tokens > 0:
            assert tokens is not None and token_mask is not None
            keys = self.token_proj(tokens)
            # an all-empty memory would make attention undefined: let such rows attend to a zero token
            mask = token_mask.clone()
            empty = ~mask.any(dim=1)
            if empty.any():
                keys = keys.clone()
                keys[empty, 0] = 0.0
                mask[empty, 0] = True
            read, _ = self.attn(self.query(x).unsqueeze(1), keys, keys, key_padding_mask=~mask, need_weights=False)
            x = torch.cat([x, read.squeeze(1)], dim=1)
        hidden = self.gru(x, hidden)
        return self.actor(hidden), self.critic(hidden).squeeze(1), self.goal_head(hidden).squeeze(1), hidden


def save_policy(model: MemoryPolicy, path: Path | str, extra: dict | None = None) -> None:
    """Write a policy checkpoint (loadable with torch.load(weights_only=True))."""
    save_model(model, path, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, asdict(model.cfg), extra)


def load_policy(path: Path | str) -> tuple[MemoryPolicy, dict]:
    """Load a policy checkpoint; returns (model, extra).

    Raises:
        CheckpointError: another format, version or architecture, naming what differs.
    """
    return load_model(path, CHECKPOINT_FORMAT, CHECKPOINT_VERSION,
                      lambda cfg: MemoryPolicy(PolicyConfig(**cfg)), "policy")
