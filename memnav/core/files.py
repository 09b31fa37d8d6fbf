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
            tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
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
