"""Model files named by node parameters: a relative path is looked up under the package root first.

A node started by a launch file runs in an arbitrary working directory, so `models/encoder.pt` means the
package's (repository's) `models/encoder.pt`; a relative path that only exists under the working
directory is accepted too, and an absolute path is taken as is.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def resolve_model_path(path: str, parameter: str) -> Path:
    """The file a model parameter names.

    Args:
        path: the parameter value.
        parameter: the parameter name, for the error message.

    Raises:
        FileNotFoundError: naming the parameter and every place looked at.
    """
    if not path:
        raise FileNotFoundError(f"parameter {parameter!r} is empty; expected a model file path")
    p = Path(path).expanduser()
    candidates = [p] if p.is_absolute() else [PACKAGE_ROOT / p, Path.cwd() / p]
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(f"parameter {parameter!r}: model file {path!r} not found (looked at "
                            f"{', '.join(str(c) for c in candidates)})")
