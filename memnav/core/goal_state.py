"""A goal kept on disk, so that a policy node that restarts (a crash, `respawn: true`) goes on with the goal it was
working on instead of standing still until somebody sends the photo again. No ROS here.

Two files. The kept goal (`path`) is an uncompressed .npz: the goal photo (`rgb`, uint8 HxWx3), its depth when it came
with one (`depth`, float32 HxW, meters) and `meta`, a JSON string: {format, goal_stamp_ns, actions, unkept_actions,
resumes, started_utc}. It is replaced atomically and durably (memnav.core.files.replace_files with sync), so a node
killed at any moment leaves the old or the new goal, never half of one. The policy node writes it when a goal starts
and every few actions (a synced write of the photo costs 8 to 33 ms here, 128x128 to 640x480 RGB-D).

Beside it, the action record (`<path>.actions`, `record_actions`): one line of fixed length, {goal stamp, action
count, ending, boot}, with a checksum, overwritten in place before each action goes out, and before a goal's ending
(STOP, cancel, episode result, given up) is published. A count is written to the page cache only (microseconds: what
a killed process wrote is there for the next one) and names the machine's boot (Linux's boot_id); after a reboot it
vouches for nothing, as a power cut may have lost it. An ending is synced (fdatasync, about 4 ms here) and holds
across reboots. Where the boot cannot be named (not Linux), every line is synced. So:

- The count is exact. A restarted node counts the recorded actions, the one that may have been in flight included
  (`read_kept_goal` folds the record in as `unkept_actions`): a node killed while idle, or just after a write, loses
  no actions of its budget (max_steps). Only where the record cannot vouch for the count (missing, damaged, another
  goal's, a count out of range, a count of an earlier boot, or a record that could not be written) does a resume
  count the kept goal's `unkept_actions`, the writer's interval, as taken (the worst case): never fewer actions than
  were taken, as every action is recorded before it is published, and a record that may have lost writes (a power
  cut) is not believed.
- An ended goal is never resumed. Its ending is recorded before the ending is published, then the kept goal is
  removed (`drop_kept_goal`: the goal, then its record). A node killed before the record has not published the ending:
  the goal resumes (it never ended for anybody). Killed after it: the goal reads as ended (`KeptGoal.ended`), is not
  resumed (`resume_or_give_up`), and its ending is published again instead. A record that cannot be written removes
  the kept goal before the ending goes out instead (`mark_ended`).

A restarted node resumes the kept goal at most `max_resumes` times (`resume_or_give_up`): a goal whose every start
kills the node would otherwise restart it forever.
"""
from __future__ import annotations

import io
import json
import os
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from memnav.core.files import replace_files

__all__ = ["GOAL_STATE_FORMAT", "KeptGoal", "action_record_path", "counted_actions", "drop_kept_goal", "mark_ended",
           "read_kept_goal", "record_actions", "resume_or_give_up", "set_aside", "write_kept_goal"]

GOAL_STATE_FORMAT = 1
# the action record's line: magic, goal stamp, action count, ending ("-": none), boot (32 hex digits of Linux's
# boot_id; zeros: synced, good across reboots), crc32 of the four; fixed length, so an overwrite in place never leaves
# a longer old line's tail behind
_RECORD_MAGIC = "memnav-goal-actions-2"
_RECORD = re.compile(rf"{_RECORD_MAGIC} (\d{{20}}) (\d{{20}}) ([a-z-]{{1,12}}) *([0-9a-f]{{32}}) ([0-9a-f]{{8}})\n")
_SYNCED = "0" * 32


def _read_boot_id() -> str | None:
    """This boot of the machine, as 32 hex digits (Linux's /proc/sys/kernel/random/boot_id), or None elsewhere."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "").lower()
    except OSError:
        return None
    return boot if re.fullmatch(r"[0-9a-f]{32}", boot) and boot != _SYNCED else None


_BOOT_ID = _read_boot_id()
_ENDING = re.compile(r"[a-z]{1,12}")


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
        unkept_actions: at most this many more actions may have been taken after `actions` was written; a resume
            counts them as taken. As written: the writer's interval (it writes the count again before taking more);
            as read (`read_kept_goal`), the actions the action record counts after `actions`, exactly, where the
            record vouches for them. 0 in a file from before this field.
        ended: "" while the goal is live; else how it ended (a /memnav/goal_status status: "stopped", "budget",
            "cancelled", "ended", "abandoned"), from the action record (`mark_ended`): the ending was, or was about
            to be, published, and the goal is not resumed.
    """

    goal_stamp_ns: int
    rgb: np.ndarray
    depth: np.ndarray | None = None
    actions: int = 0
    resumes: int = 0
    started_utc: str = ""
    unkept_actions: int = 0
    ended: str = ""

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
        if not isinstance(self.ended, str) or (self.ended and not _ENDING.fullmatch(self.ended)):
            raise ValueError(f"KeptGoal.ended must be \"\" or a status word (a-z, at most 12), got {self.ended!r}")


def write_kept_goal(path: Path | str, goal: KeptGoal) -> None:
    """Keep `goal` in `path` ("~" expands), replacing what was there atomically and durably. Its `ended` is not
    written (`mark_ended` records an ending); the action record beside it is left as it is (`record_actions`).

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
    goal, record = _with_record(goal, _read_record(action_record_path(p)))
    if goal.ended:
        return goal, f"goal {goal.goal_stamp_ns} kept in {p} ended ({goal.ended}) after {goal.actions} actions"
    return goal, (f"goal {goal.goal_stamp_ns} kept in {p}: {goal.actions} actions {record}, started "
                  f"{goal.started_utc or '?'}, resumed {goal.resumes} times before")


def action_record_path(path: Path | str) -> Path:
    """The action record beside the kept goal at `path` ("~" expands): `<path>.actions`."""
    p = Path(path).expanduser()
    return p.with_name(p.name + ".actions")


def record_actions(path: Path | str, goal_stamp_ns: int, actions: int, ended: str = "") -> None:
    """Record that `actions` actions of the goal stamped `goal_stamp_ns` kept in `path` are (about to be) taken, or
    with `ended` (a status word) that it ended with them: before the action, or the ending, goes out.

    One fixed-length line overwritten in place, no photo written. A count is left to the page cache (a process
    killed after this returns leaves it for the next one; microseconds) and names this boot, so that after a reboot
    (a power cut may have lost it) it vouches for nothing; an ending, or any line where the boot cannot be named, is
    synced (fdatasync; a few milliseconds) and holds across reboots.

    Raises:
        ValueError: a stamp, count or ending that cannot be recorded.
        OSError: the record cannot be written. It is removed then (a resume counts the kept goal's interval of
            unkept actions as taken, the worst case), or where that fails too, the kept goal (it is not resumed):
            an older record left as it was could vouch for fewer actions than were taken. The message says which.
    """
    for name, value in (("goal_stamp_ns", goal_stamp_ns), ("actions", actions)):
        if not isinstance(value, int) or not 0 <= value < 10**20:
            raise ValueError(f"record_actions: {name} must be an int >= 0, got {value!r}")
    if not isinstance(ended, str) or (ended and not _ENDING.fullmatch(ended)):
        raise ValueError(f"record_actions: ended must be \"\" or a status word (a-z, at most 12), got {ended!r}")
    sync = bool(ended) or _BOOT_ID is None
    body = f"{goal_stamp_ns:020d} {actions:020d} {ended or '-':<12} {_SYNCED if sync else _BOOT_ID}"
    line = f"{_RECORD_MAGIC} {body} {zipfile.crc32(body.encode()):08x}\n".encode()
    record = action_record_path(path)
    try:
        fd = os.open(record, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, line, 0)
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        try:
            record.unlink(missing_ok=True)
            left = "removed it: a resume counts the actions after the kept count as taken (the worst case)"
        except OSError:
            try:
                Path(path).expanduser().unlink(missing_ok=True)
                left = "could not remove it either, so the kept goal is removed: it would not be resumed"
            except OSError:
                left = "could remove neither it nor the kept goal: a resume may count too few actions"
        raise OSError(f"could not record the actions in {record} ({err}); {left}") from err


def _read_record(path: Path) -> tuple[int, int, str] | None:
    """(goal stamp, actions, ending or "") of the action record at `path`, or None: none there, damaged, or an
    unsynced count of another boot than this one (a power cut may have lost later writes)."""
    try:
        with open(path, "rb") as f:
            got = _RECORD.fullmatch(f.read(256).decode("ascii"))
    except (OSError, UnicodeDecodeError):
        return None
    if got is None:
        return None
    body = f"{got[1]} {got[2]} {got[3]:<12} {got[4]}"
    if f"{zipfile.crc32(body.encode()):08x}" != got[5] or got[4] not in (_SYNCED, _BOOT_ID):
        return None
    return int(got[1]), int(got[2]), "" if got[3] == "-" else got[3]


def _with_record(goal: KeptGoal, record: tuple[int, int, str] | None) -> tuple[KeptGoal, str]:
    """`goal` as its action record tells: ended, or its actions after the kept count exactly (`unkept_actions`);
    unchanged (the worst case) where the record cannot vouch for them. Also a few words for the log."""
    worst = f"(up to {goal.unkept_actions} more not kept)"
    if record is None or record[0] != goal.goal_stamp_ns:
        return goal, f"{worst}, no action record of this goal written since this boot"
    _, actions, ended = record
    if ended:
        return replace(goal, actions=max(goal.actions, actions), unkept_actions=0, ended=ended), ""
    if not goal.actions <= actions <= goal.actions + goal.unkept_actions:
        # an older record (written before the kept count, or one that could not be written since): it vouches for
        # nothing after the count
        return goal, f"{worst}, the action record ({actions}) is not of this count"
    return replace(goal, unkept_actions=actions - goal.actions), f"and {actions - goal.actions} more recorded"


def counted_actions(goal: KeptGoal, max_actions: int = 0) -> int:
    """The actions a restarted node counts as taken on `goal`: the kept count and the `unkept_actions` that may have
    gone unwritten (as `read_kept_goal` reads them: exactly those recorded, the one that was about to go out
    included, or where no record vouches for them the writer's interval, the worst case; so that an action budget
    is not overspent after a crash). With an action budget
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
    (0 = none). An ended goal (`KeptGoal.ended`: killed after recording its ending) is not taken up: None, and its
    ending is to be published again."""
    if not isinstance(max_resumes, int) or max_resumes < 0:
        raise ValueError(f"max_resumes must be >= 0, got {max_resumes!r}")
    if goal.ended:
        return None, (f"goal {goal.goal_stamp_ns} ended ({goal.ended}) after {goal.actions} actions, just before this "
                      "node restarted: not resumed; its status is published again")
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
    """No goal is kept any more (it ended): the kept goal, then its action record (which may say that it ended).
    Raises OSError when a file exists and cannot be removed."""
    Path(path).expanduser().unlink(missing_ok=True)
    action_record_path(path).unlink(missing_ok=True)


def mark_ended(path: Path | str, goal_stamp_ns: int, actions: int, ended: str) -> None:
    """The goal kept in `path` ends with `actions` actions, as `ended` says (a status word): call before its last
    action (a STOP) or its status goes out, then `drop_kept_goal` after. A node killed in between reads it as ended
    (`read_kept_goal`) and does not resume it. When the ending cannot be recorded, the kept goal is removed instead
    (it is not resumed either; a node killed before the ending went out then forgets a goal that had ended).

    Raises:
        OSError: neither could be done: a restarted node would resume the ended goal.
    """
    try:
        record_actions(path, goal_stamp_ns, actions, ended)
    except OSError as err:   # the kept goal must not outlive its ending (a record left behind alone is nothing)
        try:
            Path(path).expanduser().unlink(missing_ok=True)
        except OSError as also:
            raise OSError(f"the end of goal {goal_stamp_ns} could not be recorded ({err}) nor its kept copy removed "
                          f"({also})") from also


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
