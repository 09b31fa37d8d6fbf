"""Checks the training commands share: a loss that stays finite, the default output path, and Ctrl-C at a step
boundary (an output path that can be written is checked by `memnav.paths.check_output_file`, a figure's bytes
come from `memnav.eval.report.figure_png`)."""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class TrainingDivergedError(RuntimeError):
    """The training loss (or a weight) became NaN or infinite; nothing of that step was saved."""


def diverged(value: float, where: str, hint: str) -> TrainingDivergedError:
    """The error that stops a run whose loss became `value` (NaN or infinite) at `where` (e.g. "step 12 of 3000"),
    before that step is saved; `hint` says what is kept and what the user can do."""
    return TrainingDivergedError(f"the training loss is {value} at {where}: the run diverged and stops; {hint}")


def output_checkpoint(out: Path | None, default: Path) -> Path:
    """The checkpoint a training run writes: `out` (--out) when given, else `default`.

    A run started without --out never replaces a file already at `default` that no resumable state
    (`<default>.state`) belongs to: a shipped model (models/encoder.pt, models/policy_memnav.pt), or one copied
    there. The user names it with --out to replace it.

    Raises:
        ValueError: naming the default path and the options that go on.
    """
    if out is not None:
        return out
    state = default.with_name(default.name + ".state")
    if default.exists() and not state.is_file():
        raise ValueError(f"--out not given, and its default {default} already holds a model that no resumable run "
                         f"({state.name}) belongs to (a shipped checkpoint?); this run would replace it: give "
                         f"--out {default} to replace it, or --out with another path")
    return default


@contextmanager
def stop_at_step_end(what: str) -> Iterator[Callable[[], bool]]:
    """Within the `with`, a first Ctrl-C (SIGINT) does not interrupt: it sets the flag the yielded callable
    returns, which the training loop reads once each `what` (step, update) is done, to save and stop there; a
    second Ctrl-C interrupts at once (KeyboardInterrupt), as it does outside. Where Python does not turn SIGINT
    into KeyboardInterrupt (ignored, as for a background job; another handler; not the main thread), nothing
    changes and the callable returns False."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield lambda: False
        return
    asked = threading.Event()

    def first_ctrl_c(signum: int, frame: object) -> None:
        asked.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # os.write, not print: a handler that writes through sys.stderr while the interrupted code is in the
        # middle of a write to it raises "reentrant call" (a progress bar writes there all the time)
        os.write(2, f"\nCtrl-C: stopping when this {what} is done, with the state saved (Ctrl-C again: stop at "
                    f"once, losing what was trained since the last save)\n".encode())

    signal.signal(signal.SIGINT, first_ctrl_c)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
