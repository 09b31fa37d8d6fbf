"""A goal kept on disk, so that a policy node that restarts (a crash, `respawn: true`) goes on with the goal it was
working on instead of standing still until somebody sends the photo again. No ROS here.

The file is an uncompressed .npz: the goal photo (`rgb`, uint8 HxWx3), its depth when it came with one (`depth`,
float32 HxW, meters) and `meta`, a JSON string: {format, goal_stamp_ns, actions, resumes, started_utc}. It is
replaced atomically and durably (memnav.core.files.replace_files with sync), so a node killed at any moment leaves
the old or the new goal, never half of one. The policy node writes it when a goal starts and every few actions,
and removes it when the goal ends (STOP, cancel, the action budget, an episode result).

A restarted node resumes the kept goal at most `max_resumes` times (`resume_or_give_up`): a goal whose every start
kills the node would otherwise restart it forever.
"""
from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memnav.core.files import replace_files

__all__ = ["GOAL_STATE_FORMAT", "KeptGoal", "drop_kept_goal", "read_kept_goal", "resume_or_give_up",
           "set_aside", "write_kept_goal"]

GOAL_STATE_FORMAT = 1


@dataclass(frozen=True)
class KeptGoal:
    """The goal a policy node works on, as kept on disk.

    Attributes:
        goal_stamp_ns: the goal photo's stamp, nanoseconds (names the goal on /memnav/goal_status).
        rgb: the goal photo, uint8 HxWx3.
        depth: its depth, float32 HxW meters, or None (a photo from a user).
        actions: actions taken on it so far (the action budget counts on from there after a restart).
        resumes: how often a restarted node has taken it up again.
        started_utc: when it first started, ISO 8601 UTC (for the log).
    """

    goal_stamp_ns: int
    rgb: np.ndarray
    depth: np.ndarray | None = None
    actions: int = 0
    resumes: int = 0
    started_utc: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.goal_stamp_ns, int) or self.goal_stamp_ns < 0:
            raise ValueError(f"KeptGoal.goal_stamp_ns must be an int >= 0, got {self.goal_stamp_ns!r}")
        rgb = self.rgb
        if not (isinstance(rgb, np.ndarray) and rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
                and rgb.size > 0):
            raise ValueError("KeptGoal.rgb must be a non-empty uint8 HxWx3 array, got "
                             + (f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__))
        depth = self.depth
        if depth is not None and not (isinstance(depth, np.ndarray) and depth.ndim == 2 and depth.size > 0
                                      and np.issubdtype(depth.dtype, np.floating)):
            raise ValueError("KeptGoal.depth must be a non-empty float HxW array or None, got "
                             + (f"{depth.dtype} {depth.shape}" if isinstance(depth, np.ndarray)
                                else type(depth).__name__))
        for name in ("actions", "resumes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"KeptGoal.{name} must be an int >= 0, got {value!r}")


def write_kept_goal(path: Path | str, goal: KeptGoal) -> None:
    """Keep `goal` in `path` ("~" expands), replacing what was there atomically and durably.

    Raises:
        OSError: the folder cannot be created or the file written (a full or read-only disk); what was kept
            before is left as it was.
    """
    meta = {"format": GOAL_STATE_FORMAT, "goal_stamp_ns": goal.goal_stamp_ns, "actions": goal.actions,
            "resumes": goal.resumes, "started_utc": goal.started_utc}
    arrays = {"rgb": goal.rgb, "meta": np.array(json.dumps(meta))}
    if goal.depth is not None:
        arrays["depth"] = goal.depth.astype(np.float32, copy=False)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    replace_files({Path(path).expanduser(): buf.getvalue()}, sync=True)


def read_kept_goal(path: Path | str) -> tuple[KeptGoal | None, str]:
    """The goal kept in `path` by `write_kept_goal`, for a policy node that (re)starts.

    Returns:
        (the goal, or None when there is none or the file cannot be understood; one line for the log naming the
        file and what was found). An unreadable file is not resumed: driving to a goal nobody can name is worse
        than waiting for the next one (`set_aside` moves it out of the way).
    """
    p = Path(path).expanduser()
    if not p.exists():
        return None, f"no goal kept in {p}"
    try:
        with np.load(p, allow_pickle=False) as z:
            if "meta" not in z.files or "rgb" not in z.files:
                raise ValueError(f"it holds {sorted(z.files)}, not 'meta' and 'rgb'")
            meta = json.loads(str(z["meta"]))
            if not isinstance(meta, dict):
                raise ValueError("'meta' is not a JSON object")
            if meta.get("format") != GOAL_STATE_FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, this memnav reads format {GOAL_STATE_FORMAT}")
            depth = z["depth"] if "depth" in z.files else None
            goal = KeptGoal(goal_stamp_ns=meta.get("goal_stamp_ns"), rgb=z["rgb"], depth=depth,
                            actions=meta.get("actions"), resumes=meta.get("resumes"),
                            started_utc=str(meta.get("started_utc", "")))
    # a damaged zip header can also claim a compression method, a zip version or encryption that zipfile does not
    # handle (NotImplementedError, RuntimeError): unreadable as well, not a crash at every start of the node
    except (OSError, ValueError, KeyError, TypeError, EOFError, UnicodeDecodeError, zipfile.BadZipFile,
            NotImplementedError, RuntimeError) as err:
        return None, f"the goal kept in {p} is unreadable ({err}): not resumed"
    return goal, (f"goal {goal.goal_stamp_ns} kept in {p}: {goal.actions} actions, started {goal.started_utc or '?'}, "
                  f"resumed {goal.resumes} times before")


def resume_or_give_up(goal: KeptGoal, max_resumes: int) -> tuple[KeptGoal | None, str]:
    """Whether a restarted node takes `goal` up again: (the goal with one more resume, to be kept before anything
    else is done, or None: give it up; a line for the log). Given up after `max_resumes` resumes: a goal that
    kills the node each time would otherwise restart it forever."""
    if not isinstance(max_resumes, int) or max_resumes < 0:
        raise ValueError(f"max_resumes must be >= 0, got {max_resumes!r}")
    if goal.resumes >= max_resumes:
        return None, (f"goal {goal.goal_stamp_ns} given up: the node restarted {goal.resumes + 1} times while working "
                      f"on it (max_goal_resumes {max_resumes}); send it again to retry")
    taken = KeptGoal(goal.goal_stamp_ns, goal.rgb, goal.depth, goal.actions, goal.resumes + 1, goal.started_utc)
    return taken, (f"resuming goal {goal.goal_stamp_ns} after a restart of this node ({goal.actions} actions "
                   f"before; resume {taken.resumes} of at most {max_resumes})")


def drop_kept_goal(path: Path | str) -> None:
    """No goal is kept any more (it ended). Raises OSError when the file exists and cannot be removed."""
    Path(path).expanduser().unlink(missing_ok=True)


def set_aside(path: Path | str) -> Path | None:
    """Move an unreadable kept goal out of the way (to `<name>.unreadable`, replacing an older one) so that it
    is looked at by a person, not read again at every start; the new path, or None when it could not be moved."""
    p = Path(path).expanduser()
    aside = p.with_name(p.name + ".unreadable")
    try:
        p.replace(aside)
    except OSError:
        return None
    return aside
