"""DecisionGate: which frame a topic-driven agent decides on, and when, whatever order the topics arrive in."""
import numpy as np
import pytest

from memnav.core.decision_gate import DecisionGate, action_velocity, odometry_jump
from memnav.core.types import Action, Pose2D

RGB = np.zeros((4, 4, 3), np.uint8)
DEPTH = np.ones((4, 4), np.float32)
MS = 1_000_000


def gate(lockstep: bool, **kw) -> DecisionGate:
    args = dict(lockstep=lockstep, sync_tolerance_s=0.02, action_duration_s=1.0, goal_depth_wait_s=0.5) | kw
    return DecisionGate(**args)


def start_goal(g: DecisionGate, stamp_ns: int, wall_s: float = 0.0, with_depth: bool = True) -> None:
    g.goal_image(stamp_ns, RGB)
    if with_depth:
        g.goal_depth(stamp_ns, DEPTH)
    t, rgb, depth = g.goal_to_start()
    g.goal_started(t, rgb, depth, wall_s)


def frame(g: DecisionGate, stamp_ns: int, pose_stamp_ns: int | None = None, x_m: float = 0.0) -> None:
    g.colour(stamp_ns, RGB)
    g.depth(stamp_ns, DEPTH)
    g.odometry(stamp_ns if pose_stamp_ns is None else pose_stamp_ns, Pose2D(x_m, 0.0, 0.0))


def test_action_velocity_carries_out_the_action_in_its_duration():
    assert action_velocity(Action.MOVE_FORWARD, 0.25, 30.0, 0.5) == pytest.approx((0.5, 0.0))
    v, w = action_velocity(Action.TURN_RIGHT, 0.25, 30.0, 0.5)
    assert v == 0.0 and w == pytest.approx(-2 * 0.5235988)
    assert action_velocity(Action.TURN_LEFT, 0.25, 30.0, 1.0)[1] == pytest.approx(0.5235988)
    assert action_velocity(Action.STOP, 0.25, 30.0, 0.5) == (0.0, 0.0)


def test_lockstep_decides_once_per_frame_with_that_frames_odometry():
    g = gate(True)
    frame(g, 100 * MS)
    assert g.due(0.0, 0.0) is None                 # no goal yet
    start_goal(g, 100 * MS)
    got = g.due(0.0, 0.0)
    assert got is not None and got.stamp_ns == 100 * MS
    g.taking(got.stamp_ns)
    g.hold((0.25, 0.0), 0.0)
    assert g.due(0.0, 0.0) is None                 # not the same frame twice
    g.colour(200 * MS, RGB)
    g.depth(200 * MS, DEPTH)
    assert g.due(0.0, 0.0) is None                 # its odometry is still on its way
    g.odometry(201 * MS, Pose2D(9.0, 0.0, 0.0))
    assert g.due(0.0, 0.0) is None                 # lock-step pairs exact stamps only
    g.odometry(200 * MS, Pose2D(0.25, 0.0, 0.0))
    got = g.due(0.0, 0.0)                          # lock-step never waits out the action's duration
    assert got.stamp_ns == 200 * MS and got.pose.x_m == 0.25
    g.colour(300 * MS, RGB)
    assert g.due(0.0, 0.0) is None                 # colour and depth of different frames


def test_real_time_waits_out_the_action_and_pairs_odometry_of_the_frames_instant():
    g = gate(False)
    start_goal(g, 0)
    g.colour(1000 * MS, RGB)
    g.depth(1010 * MS, DEPTH)                       # within the 20 ms tolerance
    g.odometry(900 * MS, Pose2D(1.0, 0.0, 0.0))
    g.odometry(1200 * MS, Pose2D(2.0, 0.0, 0.0))    # newer, but 200 ms from the frame
    got = g.due(10.0, 10.0)
    assert got.stamp_ns == 1000 * MS and got.pose.x_m == 1.0
    g.taking(got.stamp_ns)
    g.hold((0.25, 0.0), 10.0)
    assert g.velocity(10.5) == (0.25, 0.0) and not g.action_done(10.5)
    frame(g, 1500 * MS, x_m=3.0)
    assert g.due(10.5, 10.5) is None               # the forward move is still being carried out
    assert g.action_done(11.0) and g.velocity(11.0) == (0.0, 0.0)
    assert g.due(11.0, 11.0).pose.x_m == 3.0
    g.colour(2000 * MS, RGB)
    g.depth(2050 * MS, DEPTH)
    assert g.due(12.0, 12.0) is None               # 50 ms apart: not a pair
    g.depth(2000 * MS, DEPTH)
    assert g.due(12.0, 12.0).pose.x_m == 3.0       # no odometry near it: the newest pose


def test_frames_before_the_goal_and_after_its_end_are_not_decided_on():
    g = gate(False)
    frame(g, 50 * MS)
    start_goal(g, 100 * MS)
    assert g.due(5.0, 5.0) is None                 # the frame predates the goal photo
    frame(g, 150 * MS)
    assert g.due(5.0, 5.0) is not None
    g.episode_ended(99 * MS)                       # another goal's end changes nothing
    assert g.due(5.0, 5.0) is not None and g.goal_photo is not None
    g.episode_ended(100 * MS)
    assert g.due(5.0, 5.0) is None and g.goal_photo is None
    start_goal(g, 200 * MS)
    frame(g, 250 * MS)
    g.goal_over()                                  # the agent stopped
    assert g.due(5.0, 5.0) is None


def test_lockstep_decides_a_goal_sent_later_on_the_frame_the_simulator_waits_on():
    # a lock-step simulator holds its frame until an action comes (re-sending it with its stamp), so a goal sent
    # from outside after that frame must be decided on it, or neither side ever moves
    g = gate(True)
    frame(g, 50 * MS)
    start_goal(g, 100 * MS)
    got = g.due(0.0, 0.0)
    assert got is not None and got.stamp_ns == 50 * MS
    g.taking(got.stamp_ns)
    g.goal_over()                                  # it stopped there
    frame(g, 50 * MS)                              # the simulator re-sends the frame it stopped on
    start_goal(g, 300 * MS)                        # the next goal: that frame was decided on already
    assert g.due(0.0, 0.0) is None
    frame(g, 310 * MS)
    assert g.due(0.0, 0.0).stamp_ns == 310 * MS


def test_a_goal_without_depth_waits_for_it_and_late_depth_restarts_the_goal():
    g = gate(True, goal_depth_wait_s=0.5)
    start_goal(g, 100 * MS, wall_s=1.0, with_depth=False)
    assert not g.goal_has_depth and g.goal_photo[1] is None
    frame(g, 120 * MS)
    assert g.due(0.0, 1.2) is None                 # the depth may still be on its way
    assert not g.goal_depth(90 * MS, DEPTH)        # another goal's depth: nothing to restart
    assert g.goal_depth(100 * MS, DEPTH)           # this goal's, before any decision: start again with it
    t, _, depth = g.goal_to_start()
    assert t == 100 * MS and depth is DEPTH
    g.goal_started(t, RGB, depth, 1.3)
    assert g.goal_photo[1] is DEPTH and g.due(0.0, 1.3).stamp_ns == 120 * MS


def test_a_goal_without_depth_is_acted_on_after_the_wait_and_then_keeps_its_start():
    g = gate(True, goal_depth_wait_s=0.5)
    start_goal(g, 100 * MS, wall_s=1.0, with_depth=False)
    frame(g, 120 * MS)
    got = g.due(0.0, 1.6)                          # a user's photo has no depth: act once the wait is over
    assert got is not None
    g.taking(got.stamp_ns)
    assert not g.goal_depth(100 * MS, DEPTH)       # too late: a decision was taken on the goal already


def test_late_depth_restarts_no_goal_decided_on_a_frame_older_than_it_nor_one_that_ended():
    """Lock-step: the simulator holds a frame (50 ms) older than a goal sent from outside (100 ms), and the first
    decision is on it; the goal's depth coming after that decision, or after the goal ended, restarts nothing."""
    for ended in (False, True):
        g = gate(True, goal_depth_wait_s=0.5)
        frame(g, 50 * MS)
        start_goal(g, 100 * MS, wall_s=1.0, with_depth=False)
        got = g.due(0.0, 1.6)
        assert got is not None and got.stamp_ns == 50 * MS
        g.taking(got.stamp_ns)
        if ended:
            g.goal_over()                              # that decision was its STOP
        assert not g.goal_depth(100 * MS, DEPTH)
    g = gate(True, goal_depth_wait_s=0.5)              # a new goal after a decided one may still take its depth
    frame(g, 50 * MS)
    start_goal(g, 100 * MS, wall_s=1.0)
    g.taking(g.due(0.0, 1.0).stamp_ns)
    start_goal(g, 200 * MS, wall_s=2.0, with_depth=False)
    assert g.goal_depth(200 * MS, DEPTH)


def test_real_time_pairs_goal_depth_stamped_near_the_photo_as_live_frames_pair():
    """A goal publisher of a user's own, or a RealSense's colour and depth of one moment, stamps the goal depth a few
    ms off the photo: within sync_tolerance_s it is the goal's depth (nearest, each depth to one goal), as
    `memnav eval-bag` pairs them; the goal no longer went on RGB-only."""
    g = gate(False)                                 # sync tolerance 20 ms
    g.goal_depth(1_012 * MS, DEPTH)                 # before the photo
    near = np.full((4, 4), 2.0, np.float32)
    g.goal_depth(995 * MS, near)                    # nearer
    g.goal_image(1_000 * MS, RGB)
    t, _, depth = g.goal_to_start()
    assert t == 1_000 * MS and depth is near
    g.goal_started(t, RGB, depth, 0.0)
    g.goal_image(1_010 * MS, RGB)                   # a new photo: 995 is the last goal's, 1012 is free
    assert g.goal_to_start()[2] is DEPTH
    # the depth after the photo, before any decision: the goal starts again with it
    g = gate(False)
    start_goal(g, 2_000 * MS, with_depth=False)
    assert not g.goal_depth(2_030 * MS, DEPTH)      # 30 ms off: not this goal's
    assert g.goal_depth(2_007 * MS, DEPTH)
    assert g.goal_to_start()[2] is DEPTH


def test_lockstep_keeps_goal_depth_pairing_exact():
    g = gate(True)                                  # lock-step pairs exact stamps only, goals too
    g.goal_depth(1_005 * MS, DEPTH)
    g.goal_image(1_000 * MS, RGB)
    assert g.goal_to_start()[2] is None
    g.goal_depth(1_000 * MS, DEPTH)
    assert g.goal_to_start()[2] is DEPTH


def test_a_goal_going_on_without_the_depth_that_came_too_far_off_says_so_once():
    g = gate(False, goal_depth_wait_s=0.5)
    g.goal_depth(1_050 * MS, DEPTH)                 # 50 ms off: beyond the 20 ms tolerance
    start_goal(g, 1_000 * MS, wall_s=1.0, with_depth=False)
    frame(g, 1_100 * MS)
    got = g.due(5.0, 1.6)
    assert got is not None
    line = g.taking(got.stamp_ns)
    assert line is not None and f"goal {1_000 * MS}" in line and f"stamped {1_050 * MS}" in line
    assert "50.0 ms" in line and "sync_tolerance_s (0.02 s)" in line
    g.hold((0.0, 0.0), 5.0)
    frame(g, 1_200 * MS)
    assert g.taking(g.due(7.0, 7.0).stamp_ns) is None    # once per goal
    g = gate(False, goal_depth_wait_s=0.0)          # no depth at all (a user's photo) or one paired: nothing said
    for depth in (False, True):
        start_goal(g, (3_000 + 1_000 * depth) * MS, with_depth=depth)
        frame(g, (3_100 + 1_000 * depth) * MS)
        assert g.taking(g.due(9.0 + 2 * depth, 9.0).stamp_ns) is None
        g.hold((0.0, 0.0), 9.0 + 2 * depth)


def test_an_odometry_jump_is_told_apart_from_motion_and_frames_before_it_are_not_decided_on():
    assert odometry_jump(Pose2D(0, 0, 0), Pose2D(0.4, 0.0, 0.5), 0.5, 45.0) is None   # motion
    assert odometry_jump(Pose2D(0, 0, 3.1), Pose2D(0, 0, -3.1), 0.5, 45.0) is None   # across +-pi: 4 deg
    moved = odometry_jump(Pose2D(3.0, 4.0, 0.0), Pose2D(0.0, 0.0, 0.0), 0.5, 45.0)
    assert moved == "odometry jumped 5.00 m and 0 deg between two messages, from (3.00, 4.00) to (0.00, 0.00)"
    assert "and 90 deg" in odometry_jump(Pose2D(0, 0, 0), Pose2D(0, 0, 1.5708), 0.5, 45.0)
    assert odometry_jump(Pose2D(0, 0, 0), Pose2D(9, 0, 3), 0.0, 0.0) is None   # off
    g = gate(False, odometry_jump_m=0.5, odometry_jump_deg=45.0)
    start_goal(g, 0)
    frame(g, 1000 * MS, x_m=3.0)
    assert g.odometry(1050 * MS, Pose2D(3.05, 0.0, 0.0)) is None
    g.colour(1100 * MS, RGB)                       # a frame of just before the jump
    g.depth(1100 * MS, DEPTH)
    assert "jumped 3.05 m" in g.odometry(1150 * MS, Pose2D(0.0, 0.0, 0.0))   # the base driver restarted
    assert g.due(10.0, 10.0) is None               # taken before the jump: its pose is in the old frame
    frame(g, 1200 * MS, x_m=0.02)
    got = g.due(10.0, 10.0)
    assert got.stamp_ns == 1200 * MS and got.pose.x_m == 0.02
    g.colour(1300 * MS, RGB)
    g.depth(1300 * MS, DEPTH)
    assert g.due(11.0, 11.0).pose.x_m == 0.02      # no pose of before the jump is paired any more
    off = gate(False)                              # the default: not checked
    assert off.odometry(5, Pose2D(0, 0, 0)) is None and off.odometry(6, Pose2D(9, 9, 3)) is None


def test_bad_arguments_and_a_missing_goal_are_named():
    with pytest.raises(ValueError, match="action_duration_s"):
        gate(False, action_duration_s=0.0)
    with pytest.raises(ValueError, match="odometry_jump_m and odometry_jump_deg must be >= 0"):
        gate(False, odometry_jump_m=float("nan"))
    with pytest.raises(RuntimeError, match="no goal photo"):
        gate(False).goal_to_start()


def test_real_time_stands_still_when_odometry_stops_instead_of_deciding_on_its_last_pose():
    """Frames kept coming after the odometry stopped (a base driver that died) and were decided on with the
    last pose heard, seconds old, where the robot no longer was: the map smeared and the search went astray."""
    g = gate(False, odometry_timeout_s=1.0)
    start_goal(g, 0)
    g.odometry(1000 * MS, Pose2D(1.0, 0.0, 0.0), wall_s=10.0)
    g.colour(1500 * MS, RGB)
    g.depth(1500 * MS, DEPTH)                       # 500 ms from the pose: past the tolerance, not silent yet
    got = g.due(10.5, 10.5)
    assert got is not None and got.pose.x_m == 1.0
    g.taking(got.stamp_ns)
    g.hold((0.25, 0.0), 10.5)
    g.colour(3000 * MS, RGB)
    g.depth(3000 * MS, DEPTH)
    assert g.odometry_silent_s(12.0) == pytest.approx(2.0)
    assert g.due(12.0, 12.0) is None                # nothing heard for 2 s: no decision, the robot stands
    assert g.velocity(12.0) == (0.0, 0.0)
    g.odometry(3000 * MS, Pose2D(1.2, 0.0, 0.0), wall_s=12.1)   # it is back
    assert g.odometry_silent_s(12.1) is None
    got = g.due(12.1, 12.1)
    assert got is not None and got.pose.x_m == 1.2
    off = gate(False)                               # 0: off, the last pose as before
    start_goal(off, 0)
    off.odometry(1000 * MS, Pose2D(1.0, 0.0, 0.0), wall_s=10.0)
    off.colour(3000 * MS, RGB)
    off.depth(3000 * MS, DEPTH)
    assert off.due(12.0, 12.0).pose.x_m == 1.0
    lock = gate(True, odometry_timeout_s=1.0)       # lock-step waits for the frame's own odometry anyway
    assert lock.odometry_silent_s(99.0) is None
    with pytest.raises(ValueError, match="odometry_timeout_s must be >= 0"):
        gate(False, odometry_timeout_s=float("nan"))


def test_a_clock_that_goes_back_ends_the_action_instead_of_holding_it_until_the_old_end():
    """The node's clock stepped back (NTP on the robot, a simulator's /clock reset): the action held until its end
    on the old time kept its velocity on /cmd_vel, and no decision came, for as long as the clock went back (an
    hour's step: an hour of driving forward blind)."""
    g = gate(False, goal_depth_wait_s=0.0)
    start_goal(g, 0)
    frame(g, 1000 * MS)
    got = g.due(1000.0, 1000.0)
    g.taking(got.stamp_ns)
    g.hold((0.25, 0.0), 1000.0)
    assert g.velocity(1000.5) == (0.25, 0.0) and not g.action_done(1000.5)
    assert g.velocity(-2600.0) == (0.0, 0.0) and g.action_done(-2600.0)   # an hour back
    assert g.velocity(5.0) == (0.0, 0.0) and g.action_done(5.0)           # /clock restarted near 0
    frame(g, 2000 * MS)
    assert g.due(5.0, 1001.0) is not None                                  # decided on again
    g.hold((0.0, 0.5), 5.0)                                                # held on the new time as usual
    assert g.velocity(5.5) == (0.0, 0.5) and g.velocity(6.0) == (0.0, 0.0)


def test_goals_that_ended_are_remembered_so_their_photo_again_is_no_new_goal():
    g = gate(False)
    start_goal(g, 100 * MS)
    assert not g.ended(100 * MS)
    g.goal_over()                                   # the agent's STOP, or a cancel
    assert g.ended(100 * MS)
    start_goal(g, 200 * MS)
    start_goal(g, 200 * MS)                         # the same goal again (its depth came late): not ended
    assert not g.ended(200 * MS)
    start_goal(g, 300 * MS)                         # replaced by a new goal
    assert g.ended(200 * MS) and not g.ended(300 * MS)
    g.episode_ended(299 * MS)                       # another goal's result
    assert not g.ended(299 * MS) and not g.ended(300 * MS)
    g.episode_ended(300 * MS)
    assert g.ended(300 * MS)
    g.given_up(50 * MS)                             # a kept goal abandoned at start, never worked on here
    assert g.ended(50 * MS) and g.goal_stamp_ns is None
    g.given_up(50 * MS)                             # remembered once
    assert list(g._ended).count(50 * MS) == 1


def test_a_goal_stamped_ahead_of_the_camera_frames_says_how_far_once_it_has_waited():
    """A goal photo stamped by this computer's clock, the camera's clock 3 s behind: no frame is ever of the goal's
    time, and the policy stood still for good without a word. The gate now says how far behind the frames are."""
    g = gate(False)
    start_goal(g, 5000 * MS, wall_s=10.0)
    frame(g, 2000 * MS)
    assert g.due(10.5, 10.5) is None
    assert g.frames_behind_goal_s(11.0) is None                  # not waited 2 s yet
    assert g.frames_behind_goal_s(12.5) == pytest.approx(3.0)
    frame(g, 5100 * MS)                                          # a frame of the goal's time: decided on
    got = g.due(12.6, 12.6)
    assert got is not None and got.stamp_ns == 5100 * MS
    g.taking(got.stamp_ns)
    assert g.frames_behind_goal_s(13.0) is None
    assert gate(True).frames_behind_goal_s(99.0) is None          # lock-step decides on the frame it has
