"""Checks the training commands share: a loss that stays finite (an output path that can be written is checked by
`memnav.paths.check_output_file`, a figure's bytes come from `memnav.eval.report.figure_png`)."""
from __future__ import annotations


class TrainingDivergedError(RuntimeError):
    """The training loss (or a weight) became NaN or infinite; nothing of that step was saved."""


def diverged(value: float, where: str, hint: str) -> TrainingDivergedError:
    """The error that stops a run whose loss became `value` (NaN or infinite) at `where` (e.g. "step 12 of 3000"),
    before that step is saved; `hint` says what is kept and what the user can do."""
    return TrainingDivergedError(f"the training loss is {value} at {where}: the run diverged and stops; {hint}")
