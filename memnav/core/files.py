"""Replacing files so that a crash or a failed write never leaves half of one: each through a temporary file
beside it, renamed into place. No ROS here."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np


def replace_files(files: dict[Path, bytes], sync: bool = False) -> None:
    """Write each file's bytes to a temporary file beside it, then rename them all into place: a write that fails
    (a full disk) replaces none of them and leaves no temporary file behind.

    Args:
        files: path -> its new contents; missing folders are created.
        sync: flush each temporary file to the disk before the renames (survives a power cut, slower).

    Raises:
        OSError: a folder cannot be created or a file written.
    """
    written: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(path)
            tmp = temporary_path(path)
            written.append((tmp, path))
            with open(tmp, "wb") as f:
                f.write(data)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
        for tmp, path in written:
            os.replace(tmp, path)
    finally:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)


def temporary_path(path: Path, pid: int | None = None) -> Path:
    """The hidden temporary file beside `path` that process `pid` (this one by default) writes before renaming
    it into place: `.NAME.tmpPID`."""
    return path.with_name(f".{path.name}.tmp{os.getpid() if pid is None else pid}")


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporary files beside `path` (`temporary_path`) left by processes that are gone (killed
    during a write: SIGKILL, a power cut); those of running processes are theirs and stay.

    Returns:
        The files removed.
    """
    removed = []
    prefix = f".{path.name}.tmp"
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return removed
    for sibling in siblings:
        pid = sibling.name[len(prefix):]
        if not (sibling.name.startswith(prefix) and pid.isdigit()) or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        try:
            sibling.unlink()
            removed.append(sibling)
        except OSError:
            pass        # another writer's clean-up got there first, or the folder is read-only: harmless
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True     # another user's process (or a number no process has: kept, nothing is risked)
    return True


def state_path_in_namespace(path: str, namespace: str) -> str:
    """The state file (an e-stop's, a kept goal's) of a node in ROS namespace `namespace`: `path` itself in the
    root namespace, else a folder named after the namespace beside it (`~/.ros/memnav/estop_state.json` under
    /robot1 is `~/.ros/memnav/robot1/estop_state.json`), so robots in separate namespaces never share one. ""
    stays "" (nothing kept)."""
    ns = namespace.strip("/")
    if not path or not ns:
        return path
    p = Path(path)
    return str(p.parent.joinpath(*ns.split("/"), p.name))


def json_safe(value: Any) -> Any:
    """A copy of `value` that `json.dumps(..., allow_nan=False)` takes: non-finite floats become None (null;
    NaN and Infinity are not JSON, and strict readers refuse a file holding them), numpy scalars plain numbers,
    tuples lists, keys strings."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
