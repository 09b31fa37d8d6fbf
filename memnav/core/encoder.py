"""Perception encoder: an RGB-D frame -> a unit-norm embedding (PyTorch CNN, CPU friendly).

Frames are resized to `input_px` (64 by default) and fed as 4 channels (RGB in [0, 1], depth / max_depth).
The network keeps a coarse spatial layout (a 4x4 map flattened into the head) because where things are
in the view matters for telling places and headings apart.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from memnav.core.checkpoint import CheckpointError, load_model, save_model
from memnav.core.frames import SIM_HFOV_DEG, camera_mismatch, trained_aspect_from, trained_hfov_from

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "CheckpointError", "Encoder", "EncoderConfig", "FrameEncoder",
           "SIM_HFOV_DEG", "frames_to_array", "load_checkpoint", "save_checkpoint"]

CHECKPOINT_FORMAT = "memnav-encoder"
CHECKPOINT_VERSION = 1


@dataclass
class EncoderConfig:
    """Encoder architecture and preprocessing.

    Attributes:
        input_px: frames are resized to input_px x input_px pixels before the network.
        embedding_dim: length of the output embedding.
        widths: channels of the four strided convolution stages.
        max_depth_m: depth is divided by this (and clipped to 1), meters.
        use_depth: feed the depth channel (else zeros).
    """

    input_px: int = 64
    embedding_dim: int = 256
    widths: tuple[int, int, int, int] = (32, 64, 96, 128)
    max_depth_m: float = 10.0
    use_depth: bool = True

    def __post_init__(self) -> None:
        self.widths = tuple(int(w) for w in self.widths)
        if self.input_px % 16 or self.input_px < 32:
            raise ValueError(f"EncoderConfig.input_px must be a multiple of 16 and >= 32, got {self.input_px}")
        if self.embedding_dim <= 0 or len(self.widths) != 4:
            raise ValueError("EncoderConfig: embedding_dim must be > 0 and widths must have 4 entries")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["widths"] = list(self.widths)
        return d


class FrameEncoder(nn.Module):
    """4 x (conv stride 2 + BN + ReLU, conv 3x3) -> 4x4 map -> linear -> L2-normalised embedding."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        layers: list[nn.Module] = []
        cin = 4
        for w in cfg.widths:
            layers += [nn.Conv2d(cin, w, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                       nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            cin = w
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.head = nn.Linear(cin * 16, cfg.embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.pool(self.features(x)).flatten(1)
        return nn.functional.normalize(self.head(z), dim=1)


def frames_to_array(rgb: np.ndarray, depth: np.ndarray | None, cfg: EncoderConfig) -> np.ndarray:
    """Preprocess frames into a float32 array (B, 4, P, P) for the network.

    Args:
        rgb: uint8 (H, W, 3) or (B, H, W, 3); other sizes are resized.
        depth: float32 (H, W) or (B, H, W) meters, or None (zeros).

    Raises:
        ValueError: naming the argument whose shape or dtype is wrong.
    """
    import cv2

    rgb = np.asarray(rgb)
    single = rgb.ndim == 3
    if single:
        rgb = rgb[None]
    if rgb.ndim != 4 or rgb.shape[-1] != 3:
        raise ValueError(f"rgb must be (H, W, 3) or (B, H, W, 3), got shape {rgb.shape}")
    if rgb.dtype != np.uint8:
        raise ValueError(f"rgb must be uint8, got {rgb.dtype}")
    if depth is not None:
        depth = np.asarray(depth, dtype=np.float32)
        if single:
            depth = depth[None]
        if depth.shape != rgb.shape[:3]:
            raise ValueError(f"depth must match rgb's (B, H, W) {rgb.shape[:3]}, got {depth.shape}")
    p = cfg.input_px
    out = np.zeros((rgb.shape[0], 4, p, p), dtype=np.float32)
    for i in range(rgb.shape[0]):
        img = rgb[i] if rgb.shape[1:3] == (p, p) else cv2.resize(rgb[i], (p, p), interpolation=cv2.INTER_AREA)
        out[i, :3] = img.transpose(2, 0, 1) * (1.0 / 255.0)
        if depth is not None and cfg.use_depth:
            d = depth[i]
            d = np.where(np.isfinite(d), d, 0.0).astype(np.float32)
            if d.shape != (p, p):
                d = cv2.resize(d, (p, p), interpolation=cv2.INTER_NEAREST)
            out[i, 3] = np.clip(d / cfg.max_depth_m, 0.0, 1.0)
    return out


class Encoder:
    """Inference wrapper: numpy frames in, numpy unit-norm embeddings out.

    `trained_hfov_deg` is the range of horizontal fields of view the network was trained on: the simulator's 90
    deg, or `memnav train encoder --hfov-deg`'s, from `min_hfov_deg` up with `--min-hfov-deg`; `trained_aspect`
    the width / height of the images it was trained on (1: square; `--image-px`). Both are read from the
    checkpoint.
    """

    def __init__(self, model: FrameEncoder, trained_hfov_deg: tuple[float, float] = (SIM_HFOV_DEG, SIM_HFOV_DEG),
                 trained_aspect: float = 1.0) -> None:
        self.model = model.eval()
        self.cfg = model.cfg
        self.trained_hfov_deg = (float(trained_hfov_deg[0]), float(trained_hfov_deg[1]))
        self.trained_aspect = float(trained_aspect)

    def camera_mismatch(self, hfov_deg: float, image_px: tuple[int, int] | None = None) -> str | None:
        """camera_mismatch for this encoder's trained fields of view and image shape."""
        return camera_mismatch(hfov_deg, self.trained_hfov_deg, image_px, self.trained_aspect)

    @property
    def embedding_dim(self) -> int:
        return self.cfg.embedding_dim

    @torch.inference_mode()
    def encode_batch(self, rgb: np.ndarray, depth: np.ndarray | None = None) -> np.ndarray:
        x = torch.from_numpy(frames_to_array(rgb, depth, self.cfg))
        return self.model(x).numpy()

    def encode(self, rgb: np.ndarray, depth: np.ndarray | None = None) -> np.ndarray:
        """Embedding (D,) of one frame: rgb uint8 (H, W, 3), depth float32 (H, W) meters or None."""
        if np.asarray(rgb).ndim != 3:
            raise ValueError(f"encode takes one frame (H, W, 3); use encode_batch for {np.asarray(rgb).shape}")
        return self.encode_batch(rgb, depth)[0]

    @classmethod
    def from_checkpoint(cls, path: Path | str) -> Encoder:
        model, extra = load_checkpoint_with_extra(path)
        return cls(model, trained_hfov_from(extra), trained_aspect_from(extra))


def save_checkpoint(model: FrameEncoder, path: Path | str, extra: dict | None = None) -> None:
    """Write a checkpoint loadable with torch.load(weights_only=True)."""
    save_model(model, path, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, model.cfg.to_dict(), extra)


def load_checkpoint(path: Path | str) -> FrameEncoder:
    """Load an encoder checkpoint, refusing other formats, versions and architectures by name.

    Raises:
        CheckpointError: what differs (format, version, config field or tensor shape).
    """
    return load_checkpoint_with_extra(path)[0]


def load_checkpoint_with_extra(path: Path | str) -> tuple[FrameEncoder, dict]:
    """`load_checkpoint`, and the checkpoint's `extra` dict (its training settings, for one)."""
    return load_model(path, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, lambda cfg: FrameEncoder(EncoderConfig(**cfg)),
                      "encoder")
