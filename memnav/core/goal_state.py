"""A goal kept on disk, so that a policy node that restarts (a crash, `respawn: true`) goes on with the goal it was
working on instead of standing still until somebody sends the photo again. No ROS here.

The file is an uncompressed .npz: the goal photo (`rgb`, uint8 HxWx3), its depth when it came with one (`depth`,
float32 HxW, meters) and `meta`, a JSON string: {format, goal_stamp_ns, actions, unkept_actions, resumes,
started_utc}. It is replaced atomically and durably (memnav.core.files.replace_files with sync), so a node killed at
any moment leaves the old or the new goal, never half of one. The policy node writes it when a goal starts and
every few actions (a synced write of the photo at every action would cost more than the count is worth), and removes
it when the goal ends (STOP, cancel, the action budget, an episode result).

So the kept count can be behind: `unkept_actions` says how many actions the writer may take before it writes the
count again. A restarted node counts them as taken (`resume_or_give_up`): a node killed just before its next write
would otherwise resume up to that many actions short, and a goal could overspend its action budget (max_steps)
after a crash. At worst it stops that many actions early.

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

__all__ = ["GOAL_STATE_FORMAT", "KeptGoal", "counted_actions", "drop_kept_goal", "read_kept_goal",
           "resume_or_give_up", "set_aside", "write_kept_goal"]

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
        unkept_actions: at most this many more actions may have been taken after `actions` was written, before the
            writer would write the count again (its write interval); a resume counts them as taken. 0 in a file
            from before this field.
    """

    goal_stamp_ns: int
    rgb: np.ndarray
    depth: np.ndarray | None = None
    actions: int = 0
    resumes: int = 0
    started_utc: str = ""
    unkept_actions: int = 0

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
        for name in ("actions", "resumes", "unkept_actions"):
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
            "unkept_actions": goal.unkept_actions, "resumes": goal.resumes, "started_utc": goal.started_utc}
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
                            started_utc=str(meta.get("started_utc", "")),
                            unkept_actions=meta.get("unkept_actions", 0))
    # a damaged zip header can also claim a compression method, a zip version or encryption that zipfile does not
    # handle (NotImplementedError, RuntimeError): unreadable as well, not a crash at every start of the node
    except (OSError, ValueError, KeyError, TypeError, EOFError, UnicodeDecodeError, zipfile.BadZipFile,
            NotImplementedError, RuntimeError) as err:
        return None, f"the goal kept in {p} is unreadable ({err}): not resumed"
    return goal, (f"goal {goal.goal_stamp_ns} kept in {p}: {goal.actions} actions (up to {goal.unkept_actions} more "
                  f"not kept), started {goal.started_utc or '?'}, resumed {goal.resumes} times before")


def counted_actions(goal: KeptGoal, max_actions: int = 0) -> int:
    """The actions a restarted node counts as taken on `goal`: the kept count and the `unkept_actions` that may have
    gone unwritten (the worst case, so that an action budget is not overspent after a crash). With an action budget
    (`max_actions` > 0, whose last action ends the goal and removes its file), no more than `max_actions` - 1: a
    kept goal has not had its last action yet, so the next action is its last. Never less than the kept count."""
    if not isinstance(max_actions, int) or max_actions < 0:
        raise ValueError(f"max_actions must be an int >= 0, got {max_actions!r}")
    worst = goal.actions + goal.unkept_actions
    if max_actions > 0:
        worst = min(worst, max_actions - 1)
    return max(goal.actions, worst)


def resume_or_give_up(goal: KeptGoal, max_resumes: int, max_actions: int = 0) -> tuple[KeptGoal | None, str]:
    """Whether a restarted node takes `goal` up again: (the goal with one more resume and its actions counted by
    `counted_actions` (none unkept: nothing is decided before the resumed goal is written again), to be kept before
    anything else is done, or None: give it up; a line for the log). Given up after `max_resumes` resumes: a goal
    that kills the node each time would otherwise restart it forever. `max_actions`: the goal's action budget
    (0 = none)."""
    if not isinstance(max_resumes, int) or max_resumes < 0:
        raise ValueError(f"max_resumes must be >= 0, got {max_resumes!r}")
    if goal.resumes >= max_resumes:
        return None, (f"goal {goal.goal_stamp_ns} given up: the node restarted {goal.resumes + 1} times while working "
                      f"on it (max_goal_resumes {max_resumes}); send it again to retry")
    counted = counted_actions(goal, max_actions)
    taken = KeptGoal(goal.goal_stamp_ns, goal.rgb, goal.depth, counted, goal.resumes + 1, goal.started_utc)
    before = f"{goal.actions} actions before" if counted == goal.actions else (
        f"{goal.actions} actions kept before, counted as {counted}: up to {goal.unkept_actions} more may have been "
        "taken after the count was last written")
    return taken, (f"resuming goal {goal.goal_stamp_ns} after a restart of this node ({before}; resume "
                   f"{taken.resumes} of at most {max_resumes})")


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
