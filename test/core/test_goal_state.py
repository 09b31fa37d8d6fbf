"""memnav.core.goal_state: a goal kept on disk across restarts of the policy node."""
import json

import numpy as np
import pytest

from memnav.core.goal_state import (
    GOAL_STATE_FORMAT,
    KeptGoal,
    action_record_path,
    counted_actions,
    drop_kept_goal,
    mark_ended,
    read_kept_goal,
    record_actions,
    resume_or_give_up,
    set_aside,
    write_kept_goal,
)


def _goal(depth: bool = True, **kw) -> KeptGoal:
    rng = np.random.default_rng(0)
    return KeptGoal(goal_stamp_ns=kw.pop("goal_stamp_ns", 1_700_000_000_123_456_789),
                    rgb=rng.integers(0, 256, (48, 64, 3), dtype=np.uint8),
                    depth=rng.uniform(0.2, 5.0, (48, 64)).astype(np.float32) if depth else None,
                    started_utc="2026-11-27T12:00:00Z", **kw)


@pytest.mark.parametrize("depth", [True, False])
def test_a_kept_goal_reads_back_exactly(tmp_path, depth):
    goal = _goal(depth=depth, actions=37, resumes=1, unkept_actions=10)
    path = tmp_path / "robot" / "goal_state.npz"   # the folder is created
    write_kept_goal(path, goal)
    back, why = read_kept_goal(path)
    assert back is not None, why
    assert (back.goal_stamp_ns, back.actions, back.resumes, back.started_utc, back.unkept_actions) == (
        goal.goal_stamp_ns, 37, 1, "2026-11-27T12:00:00Z", 10)
    np.testing.assert_array_equal(back.rgb, goal.rgb)
    if depth:
        assert back.depth.dtype == np.float32
        np.testing.assert_array_equal(back.depth, goal.depth)
    else:
        assert back.depth is None
    assert f"goal {goal.goal_stamp_ns} kept in {path}: 37 actions (up to 10 more not kept)" in why
    assert [p.name for p in path.parent.iterdir()] == ["goal_state.npz"]   # no temporary file left


def test_no_file_is_no_goal_and_a_dropped_goal_is_gone(tmp_path):
    path = tmp_path / "goal_state.npz"
    assert read_kept_goal(path) == (None, f"no goal kept in {path}")
    drop_kept_goal(path)   # nothing to drop: no error
    write_kept_goal(path, _goal())
    drop_kept_goal(path)
    assert not path.exists() and read_kept_goal(path)[0] is None


def test_a_rewrite_replaces_the_goal_and_a_failed_write_raises(tmp_path):
    path = tmp_path / "goal_state.npz"
    write_kept_goal(path, _goal(actions=10))
    write_kept_goal(path, _goal(actions=20))
    assert read_kept_goal(path)[0].actions == 20
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        write_kept_goal(blocker / "goal_state.npz", _goal())
    assert read_kept_goal(path)[0].actions == 20   # a write that failed changed nothing kept


@pytest.mark.parametrize("damage, named", [
    (lambda p: p.write_bytes(b"PK\x03\x04 half a zip"), "unreadable"),
    (lambda p: p.write_bytes(b""), "unreadable"),
    (lambda p: np.savez(p, rgb=np.zeros((4, 4, 3), np.uint8)), "not 'meta' and 'rgb'"),
    (lambda p: np.savez(p, rgb=np.zeros((4, 4, 3), np.uint8), meta=np.array(json.dumps(
        {"format": 99, "goal_stamp_ns": 1, "actions": 0, "resumes": 0}))), "format 99"),
    (lambda p: np.savez(p, rgb=np.zeros((4, 4), np.uint8), meta=np.array(json.dumps(
        {"format": 1, "goal_stamp_ns": 1, "actions": 0, "resumes": 0}))), "KeptGoal.rgb"),
    (lambda p: np.savez(p, rgb=np.zeros((4, 4, 3), np.uint8), meta=np.array(json.dumps(
        {"format": 1, "goal_stamp_ns": "soon", "actions": 0, "resumes": 0}))), "KeptGoal.goal_stamp_ns"),
    (lambda p: np.savez(p, rgb=np.zeros((4, 4, 3), np.uint8), meta=np.array(json.dumps(
        {"format": 1, "goal_stamp_ns": 5, "actions": -1, "resumes": 0}))), "KeptGoal.actions"),
    (lambda p: np.savez(p, rgb=np.zeros((4, 4, 3), np.uint8), meta=np.array("[1, 2]")), "not a JSON object"),
])
def test_a_damaged_file_is_not_resumed_and_is_set_aside(tmp_path, damage, named):
    path = tmp_path / "goal_state.npz"
    damage(path)
    goal, why = read_kept_goal(path)
    assert goal is None and named in why and str(path) in why and "not resumed" in why, why
    aside = set_aside(path)
    assert aside == tmp_path / "goal_state.npz.unreadable" and aside.exists() and not path.exists()
    assert read_kept_goal(path) == (None, f"no goal kept in {path}")


def test_a_goal_is_resumed_at_most_max_resumes_times():
    goal = _goal(actions=12)
    taken, why = resume_or_give_up(goal, 2)
    assert taken.resumes == 1 and taken.actions == 12 and taken.goal_stamp_ns == goal.goal_stamp_ns
    assert "resuming goal" in why and "12 actions before; resume 1 of at most 2" in why
    taken, _ = resume_or_give_up(taken, 2)
    assert taken.resumes == 2
    given_up, why = resume_or_give_up(taken, 2)
    assert given_up is None and "given up" in why and "restarted 3 times" in why and "max_goal_resumes 2" in why
    assert resume_or_give_up(goal, 0)[0] is None   # 0: never resumed
    with pytest.raises(ValueError, match="max_resumes"):
        resume_or_give_up(goal, -1)


def test_a_resume_counts_the_actions_not_yet_kept_as_taken():
    """The count is written every few actions: a node killed between two writes took up to unkept_actions more than
    its file says, so a resume counts them (the budget is not overspent), and never more than the budget's last but
    one (the budget's last action ends the goal and removes its file, so a kept goal has not had it yet)."""
    goal = _goal(actions=20, unkept_actions=10)
    assert counted_actions(goal) == 30
    assert counted_actions(goal, 500) == 30
    assert counted_actions(goal, 25) == 24   # the next action is the budget's STOP
    assert counted_actions(goal, 21) == 20
    assert counted_actions(_goal(actions=40, unkept_actions=10), 30) == 40   # never below the kept count
    assert counted_actions(_goal(actions=20)) == 20   # nothing unkept: the count as kept
    with pytest.raises(ValueError, match="max_actions"):
        counted_actions(goal, -1)

    taken, why = resume_or_give_up(goal, 3, 500)
    assert (taken.actions, taken.unkept_actions, taken.resumes) == (30, 0, 1)
    assert "(20 actions kept before, counted as 30: up to 10 more may have been taken" in why
    assert "resume 1 of at most 3" in why
    assert resume_or_give_up(goal, 3, 25)[0].actions == 24
    # the resumed goal, kept again before anything is decided, is not counted up a second time by the next resume
    assert counted_actions(taken) == 30


def test_a_file_from_before_unkept_actions_reads_with_none_unkept(tmp_path):
    path = tmp_path / "goal_state.npz"
    np.savez(path, rgb=np.zeros((4, 4, 3), np.uint8), meta=np.array(json.dumps(
        {"format": GOAL_STATE_FORMAT, "goal_stamp_ns": 5, "actions": 12, "resumes": 0})))
    goal, why = read_kept_goal(path)
    assert goal is not None and goal.unkept_actions == 0 and counted_actions(goal) == 12, why


@pytest.mark.parametrize("field, value", [("goal_stamp_ns", -1), ("goal_stamp_ns", 1.5), ("rgb", np.zeros((4, 4))),
                                          ("rgb", np.zeros((4, 4, 3), np.float32)), ("depth", np.zeros((4, 4, 1))),
                                          ("depth", np.zeros((4, 4), np.uint16)), ("actions", -3), ("resumes", None),
                                          ("unkept_actions", -1), ("unkept_actions", 2.0)])
def test_a_bad_goal_is_refused_naming_the_field(field, value):
    kw = {"goal_stamp_ns": 5, "rgb": np.zeros((4, 4, 3), np.uint8), "depth": None, field: value}
    with pytest.raises(ValueError, match=f"KeptGoal.{field}"):
        KeptGoal(**kw)


def _patch_central_directory(path, offset: int, value: bytes) -> None:
    """Overwrite bytes at `offset` of the first central-directory entry of the zip at `path` (a damaged disk)."""
    data = bytearray(path.read_bytes())
    at = data.index(b"PK\x01\x02") + offset
    data[at:at + len(value)] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("offset, value, raised", [
    (6, b"\xff\x00", "zip file version"),         # 'version needed to extract': NotImplementedError
    (10, b"\x63\x00", "compression method"),      # an unknown compression method: NotImplementedError
    (8, b"\x01\x00", "encrypted"),                # the 'encrypted' flag: RuntimeError
])
def test_a_damaged_zip_header_is_unreadable_not_a_crash(tmp_path, offset, value, raised):
    """A kept goal whose zip header a damaged disk changed made read_kept_goal raise NotImplementedError or
    RuntimeError: the policy node died at every start, before it could set the file aside (a respawn loop)."""
    path = tmp_path / "goal_state.npz"
    write_kept_goal(path, _goal())
    _patch_central_directory(path, offset, value)
    goal, why = read_kept_goal(path)
    assert goal is None and "unreadable" in why and raised in why and "not resumed" in why, why
    assert set_aside(path) == tmp_path / "goal_state.npz.unreadable"


def test_recorded_actions_are_counted_exactly_and_only_a_record_that_cannot_vouch_counts_the_worst_case(tmp_path):
    """Each action is recorded beside the kept goal before it goes out: a restarted node counts those exactly, so a
    node killed while idle, or just after a write, loses none of the budget (before: the writer's interval, 10, at
    every restart). Without a record it can trust, the worst case as before: never fewer actions than were taken."""
    path = tmp_path / "goal_state.npz"
    goal = _goal(actions=20, unkept_actions=10)
    write_kept_goal(path, goal)
    assert read_kept_goal(path)[0].unkept_actions == 10   # no record: the worst case
    record_actions(path, goal.goal_stamp_ns, 20)   # kept, nothing taken since
    back, why = read_kept_goal(path)
    assert (back.actions, back.unkept_actions, counted_actions(back, 500)) == (20, 0, 20), why
    assert "20 actions and 0 more recorded" in why
    taken, why = resume_or_give_up(back, 3, 500)
    assert taken.actions == 20 and "(20 actions before; resume 1" in why
    record_actions(path, goal.goal_stamp_ns, 23)   # 3 taken after the write, the last one perhaps not sent yet
    assert counted_actions(read_kept_goal(path)[0], 500) == 23
    assert counted_actions(read_kept_goal(path)[0], 22) == 21   # the budget's last action is still a STOP
    line = action_record_path(path).read_bytes()
    assert len(line) == 119 and line.endswith(b"\n")   # fixed length: overwritten in place, nothing left over

    # records that cannot vouch for the count: another goal's, one out of the kept interval, a damaged one
    for stamp, actions in ((goal.goal_stamp_ns + 1, 23), (goal.goal_stamp_ns, 19), (goal.goal_stamp_ns, 31)):
        record_actions(path, stamp, actions)
        back, why = read_kept_goal(path)
        assert counted_actions(back) == 30 and "(up to 10 more not kept)" in why, why
    record_actions(path, goal.goal_stamp_ns, 23)
    action_record_path(path).write_bytes(line.replace(b"%020d" % 23, b"%020d" % 29))   # the checksum no longer fits
    assert counted_actions(read_kept_goal(path)[0]) == 30
    action_record_path(path).write_bytes(line[:40])   # torn
    assert counted_actions(read_kept_goal(path)[0]) == 30
    with pytest.raises(ValueError, match="ended"):
        record_actions(path, goal.goal_stamp_ns, 23, "Ended!")


def test_an_action_count_costs_no_sync_and_vouches_only_within_its_boot(tmp_path, monkeypatch):
    """A count goes out before every action, so it is not synced (4 ms each on this machine's disk): the page cache
    keeps it for a process started after a kill, and it names the boot. After a reboot (a power cut may have lost
    the later counts while an older line survived) it vouches for nothing and the worst case is counted; an ending
    is synced and holds across reboots."""
    import memnav.core.goal_state as goal_state

    if goal_state._BOOT_ID is None:
        pytest.skip("no Linux boot_id here: every line is synced")
    synced = []
    real_sync = goal_state.os.fdatasync
    monkeypatch.setattr(goal_state.os, "fdatasync", lambda fd: (synced.append(fd), real_sync(fd)))
    path = tmp_path / "goal_state.npz"
    goal = _goal(actions=20, unkept_actions=10)
    write_kept_goal(path, goal)
    synced.clear()
    record_actions(path, goal.goal_stamp_ns, 23)
    assert synced == [] and counted_actions(read_kept_goal(path)[0]) == 23
    assert goal_state._BOOT_ID.encode() in action_record_path(path).read_bytes()
    monkeypatch.setattr(goal_state, "_BOOT_ID", "f" * 32)   # the machine rebooted since
    back, why = read_kept_goal(path)
    assert counted_actions(back) == 30 and "no action record" in why, why
    mark_ended(path, goal.goal_stamp_ns, 25, "budget")   # synced, good on any boot
    assert len(synced) == 1
    monkeypatch.setattr(goal_state, "_BOOT_ID", "e" * 32)
    assert read_kept_goal(path)[0].ended == "budget"


def test_an_ended_goal_is_not_resumed_and_its_ending_is_told(tmp_path):
    """The ending is recorded before it is published, the kept goal removed after: a node killed in between read
    the goal back as live and acted on it again (one more STOP after the budget's, a cancelled goal driven on)."""
    path = tmp_path / "goal_state.npz"
    goal = _goal(actions=20, unkept_actions=10, resumes=1)
    write_kept_goal(path, goal)
    mark_ended(path, goal.goal_stamp_ns, 25, "budget")
    back, why = read_kept_goal(path)
    assert (back.ended, back.actions, back.unkept_actions) == ("budget", 25, 0), why
    assert why == f"goal {goal.goal_stamp_ns} kept in {path} ended (budget) after 25 actions"
    taken, why = resume_or_give_up(back, 3, 500)
    assert taken is None and "ended (budget) after 25 actions" in why and "not resumed" in why, why
    drop_kept_goal(path)
    assert list(tmp_path.iterdir()) == []   # the goal and its record
    # an ending recorded for another goal ends nothing
    write_kept_goal(path, goal)
    mark_ended(path, goal.goal_stamp_ns + 1, 3, "cancelled")
    assert read_kept_goal(path)[0].ended == ""


def test_a_record_that_cannot_be_written_never_leaves_a_count_too_low_nor_an_ended_goal(tmp_path):
    """A record that cannot be written is removed (the count falls back to the worst case), or where that fails
    too the kept goal: an older record left as it was would vouch for fewer actions than were taken."""
    goal = _goal(actions=20, unkept_actions=10)
    blocked = tmp_path / "goal_state.npz"
    write_kept_goal(blocked, goal)
    (tmp_path / "folder").mkdir()
    action_record_path(blocked).symlink_to(tmp_path / "folder")   # cannot be opened for writing, but removed
    with pytest.raises(OSError, match="removed it: a resume counts the actions after the kept count as taken"):
        record_actions(blocked, goal.goal_stamp_ns, 21)
    assert not action_record_path(blocked).exists() and counted_actions(read_kept_goal(blocked)[0]) == 30
    action_record_path(blocked).mkdir()   # cannot be opened for writing, nor unlinked
    with pytest.raises(OSError, match="the kept goal is removed"):
        record_actions(blocked, goal.goal_stamp_ns, 21)
    assert not blocked.exists()
    # an ending that cannot be recorded removes the kept goal before it goes out: not resumed either
    write_kept_goal(blocked, goal)
    mark_ended(blocked, goal.goal_stamp_ns, 21, "stopped")
    assert read_kept_goal(blocked)[0] is None
