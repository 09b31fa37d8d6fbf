"""Checks the training commands share: an output folder that can be written, a loss that stays finite, and the
bytes of a matplotlib figure (so that curves are written atomically with `memnav.core.files.replace_files`)."""
from __future__ import annotations

import io
import tempfile
from pathlib import Path


class TrainingDivergedError(RuntimeError):
    """The training loss (or a weight) became NaN or infinite; nothing of that step was saved."""


def check_writable_output(path: Path, option: str) -> None:
    """Refuse an output file whose folder cannot be written, before any work is done for it: the nearest existing
    folder on the way to it must take a new file (a missing folder is created there when the file is written).

    Raises:
        ValueError: naming `option`, the path and why.
    """
    folder = Path(path).absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot write in {folder} ({err.strerror or err})") from err


def diverged(value: float, where: str, hint: str) -> TrainingDivergedError:
    """The error that stops a run whose loss became `value` (NaN or infinite) at `where` (e.g. "step 12 of 3000"),
    before that step is saved; `hint` says what is kept and what the user can do."""
    return TrainingDivergedError(f"the training loss is {value} at {where}: the run diverged and stops; {hint}")


def figure_png(fig, dpi: int) -> bytes:
    """A matplotlib figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
