"""Versioned model checkpoints shared by the encoder and the policy.

A checkpoint is a plain dict {format, version, config, state_dict, extra} saved with torch.save and read
with `torch.load(..., weights_only=True)`, so loading never runs pickled code. Loading checks the format
name, the version, the config (through the caller's config class) and every tensor name and shape, and
names what differs.
"""
from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from memnav.core.files import replace_files

M = TypeVar("M", bound=nn.Module)


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable, or of another format, version or architecture."""


def non_finite_tensors(state: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors of a state dict that hold a NaN or an infinity."""
    return [k for k, v in state.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())]


CHECKPOINT_SHA256_CHARS = 12   # hex digits of a checkpoint's identity (48 bits: no two checkpoints of one user collide)


def checkpoint_sha256(path: Path | str) -> str:
    """A checkpoint file's identity: the first CHECKPOINT_SHA256_CHARS hex digits of the SHA-256 of its bytes. It
    names the weights, not the path: a checkpoint copied or renamed keeps it, one trained again into the same path
    gets another (what a stop calibration records of the encoder it was fitted on, and the encoder node announces).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:CHECKPOINT_SHA256_CHARS]


def file_tag(path: Path | str) -> str:
    """A file's name and identity (`checkpoint_sha256`), e.g. "encoder.pt:3e58e30a083a": what a training run
    records of a file it reads, so that a resume from another file is refused."""
    return f"{Path(path).name}:{checkpoint_sha256(path)}"


def torch_bytes(obj: object) -> bytes:
    """What torch.save writes for `obj`, as bytes (to be written atomically with `memnav.core.files.replace_files`)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def save_model(model: nn.Module, path: Path | str, fmt: str, version: int, config: dict,
               extra: dict | None = None) -> None:
    """Write `model` atomically (temp file, synced, renamed), loadable with weights_only=True.

    Raises:
        CheckpointError: a weight is NaN or infinite (the file is then left as it was).
        OSError: the file cannot be written (the file is then left as it was).
    """
    path = Path(path)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    bad = non_finite_tensors(state)
    if bad:
        raise CheckpointError(f"{path}: not written: tensor {bad[0]} holds NaN or infinite values "
                              f"({len(bad)} tensor{'s' if len(bad) > 1 else ''} in all)")
    payload = {"format": fmt, "version": version, "config": config, "state_dict": state, "extra": extra or {}}
    replace_files({path: torch_bytes(payload)}, sync=True)


def _torch_load_reason(err: Exception) -> str:
    """What torch.load's error says went wrong, without the paragraph of unpickling advice it adds."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if lines and lines[0].startswith("Weights only load failed"):
        detail = next((line for line in lines[1:] if not line.startswith(("Please file", "Check the documentation"))),
                      "")
        return "not a file torch.load(weights_only=True) reads" + (f": {detail}" if detail else "")
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


def read_payload(path: Path | str, fmt: str, version: int, what: str) -> dict:
    """The checked payload dict of a checkpoint of format `fmt` and `version` (`what` names it in errors)."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{what} checkpoint {path}: is a directory, not a checkpoint file")
    if not path.is_file():
        raise CheckpointError(f"{what} checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for foreign/corrupt files
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({_torch_load_reason(err)})") from err
    if not isinstance(payload, dict) or payload.get("format") != fmt:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(f"{path}: format is {found!r}, expected {fmt!r}")
    if payload.get("version") != version:
        raise CheckpointError(f"{path}: version {payload.get('version')!r}, this memnav reads version {version}")
    return payload


def load_model(path: Path | str, fmt: str, version: int, build: Callable[[dict], M], what: str) -> tuple[M, dict]:
    """Load a checkpoint: check it, build the model from its config with `build`, load the weights.

    Returns:
        (model in eval mode, the payload's `extra` dict).

    Raises:
        CheckpointError: what differs (format, version, config field or tensor name/shape).
    """
    payload = read_payload(path, fmt, version, what)
    try:
        model = build(dict(payload["config"]))
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"{path}: config does not describe this {what} architecture: {err}") from err
    state = payload.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: no state_dict mapping of tensors (found {type(state).__name__})")
    odd = sorted(str(k) for k, v in state.items() if not isinstance(v, torch.Tensor))
    if odd:
        raise CheckpointError(f"{path}: state_dict entry {odd[0]} is not a tensor ({len(odd)} such in all)")
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise CheckpointError(f"{path}: architecture differs: missing {missing[:3]}, unexpected {unexpected[:3]}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise CheckpointError(f"{path}: tensor {k} has shape {tuple(v.shape)}, expected {tuple(own[k].shape)}")
    model.load_state_dict(state)
    return model.eval(), dict(payload.get("extra") or {})


def read_state(path: Path | str, keys: tuple[str, ...], what: str, start_over: str, *,
               weights_only: bool = True) -> dict:
    """A training job's resumable state saved with torch.save: a dict holding `keys`. Anything else is a ValueError
    naming the file and `what` wrote such states, which says how to start over (`start_over`); the file is left
    as it is.
    """
    cause: Exception | None = None
    try:
        st = torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as err:  # noqa: BLE001 - a damaged or foreign file fails in many ways inside unpickling
        reason, cause = "torch.load cannot read it", err
    else:
        missing = [k for k in keys if k not in st] if isinstance(st, dict) else list(keys)
        if not missing:
            return st
        reason = f"no {', '.join(missing)}"
    raise ValueError(f"{path}: not a resumable state of `{what}` ({reason}); {start_over}") from cause
