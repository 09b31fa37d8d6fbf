"""When an image-goal agent on topics decides: the goal it works on, the frame it decides on, the action it holds.

Topics arrive in no set order: the goal photo's depth can come after the photo, a colour frame before its depth
or its odometry, an episode's end after the next goal. `DecisionGate` takes what arrives (stamps in
nanoseconds) and says when a decision is due and on which colour frame, depth and pose; the policy node only
converts messages, asks the gate and runs the agent. Times come in as arguments: `now_s` is the clock the
actions' durations run on (the node's clock), `wall_s` a monotonic clock for how long a goal has waited.

Lock-step (evaluation against a simulator that publishes one frame per action): the gate pairs colour, depth
and odometry of exactly the same stamp and decides once per new frame. Real time: it pairs the newest colour
and depth within `sync_tolerance_s` with the odometry nearest the colour frame's instant, and decides only once
the previous action has been carried out for `action_duration_s`. A goal photo and its goal depth image pair the
same way (exactly in lock-step, nearest within `sync_tolerance_s` in real time; each depth image to one photo).

Odometry that jumps (a base driver restarted at (0, 0, 0), a localiser's correction, a robot carried while its
odometry was off) is told apart from motion when configured (`odometry_jump_m` / `odometry_jump_deg`): two
consecutive odometry messages farther apart than a robot moves between two of them. The gate then forgets the
poses before the jump and decides on no frame taken before it, and says so (`odometry` returns why), so that
the agent can relocalise as after being carried.

Odometry that stops (a base driver that died, a cable out) is told apart, in real time and when configured
(`odometry_timeout_s`), by when its last message arrived: past that, a frame with no odometry of its instant is
not decided on (the robot stands) rather than on the last pose heard, where the robot no longer is.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from memnav.core.stamp_sync import GoalDepthPairer, StampedQueue
from memnav.core.types import Action, Pose2D

ODOMETRY_SLACK_NS = 100_000_000   # real time: odometry this much further from a frame than the sync tolerance
ENDED_GOALS_KEPT = 32             # the stamps of this many ended goals are remembered (`DecisionGate.ended`)


def action_velocity(action: Action, forward_step_m: float, turn_angle_deg: float,
                    action_duration_s: float) -> tuple[float, float]:
    """(v m/s, w rad/s) that carries out `action` in `action_duration_s` (STOP: zero)."""
    if action == Action.MOVE_FORWARD:
        return forward_step_m / action_duration_s, 0.0
    turn = math.radians(turn_angle_deg) / action_duration_s
    if action == Action.TURN_LEFT:
        return 0.0, turn
    if action == Action.TURN_RIGHT:
        return 0.0, -turn
    return 0.0, 0.0


def odometry_jump(before: Pose2D, after: Pose2D, max_m: float, max_deg: float) -> str | None:
    """One line saying how far odometry jumped from `before` to `after` when the move is over `max_m` meters or
    the turn over `max_deg` degrees (either 0: not checked), else None."""
    moved = math.hypot(after.x_m - before.x_m, after.y_m - before.y_m)
    turned = abs(math.degrees((after.yaw_rad - before.yaw_rad + math.pi) % (2 * math.pi) - math.pi))
    if (max_m > 0 and moved > max_m) or (max_deg > 0 and turned > max_deg):
        return (f"odometry jumped {moved:.2f} m and {turned:.0f} deg between two messages, from ({before.x_m:.2f}, "
                f"{before.y_m:.2f}) to ({after.x_m:.2f}, {after.y_m:.2f})")
    return None


@dataclass(frozen=True)
class DecisionInput:
    """The frame a decision is due on: its colour stamp, colour image, depth image and odometry pose."""

    stamp_ns: int
    rgb: np.ndarray
    depth: np.ndarray
    pose: Pose2D


class DecisionGate:
    """The goal, the frames and the held action of an agent driven over topics.

    Args:
        lockstep: one decision per new frame of exactly paired stamps (True), or real time (False).
        sync_tolerance_s: real time: colour and depth this close in stamp form a pair, seconds.
        action_duration_s: real time: an action is carried out (its velocity held) this long before the next
            decision, seconds.
        goal_depth_wait_s: a goal photo that came without depth waits this long for it before the first
            decision (a photo from a user has none), seconds.
        odometry_history: odometry poses kept to pair frames with.
        odometry_jump_m: consecutive odometry poses farther apart than this are a jump, meters (0 = off).
        odometry_jump_deg: ... or turned by more than this, degrees (0 = off).
        odometry_timeout_s: real time: no decision while the newest odometry message arrived longer ago than
            this (`odometry`'s `wall_s`, `due`'s clock) and none lies near the frame's instant, seconds (0 = off).
    """

    def __init__(self, *, lockstep: bool, sync_tolerance_s: float, action_duration_s: float,
                 goal_depth_wait_s: float, odometry_history: int = 64, odometry_jump_m: float = 0.0,
                 odometry_jump_deg: float = 0.0, odometry_timeout_s: float = 0.0) -> None:
        if action_duration_s <= 0 or sync_tolerance_s < 0 or goal_depth_wait_s < 0:
            raise ValueError("DecisionGate: action_duration_s must be > 0, sync_tolerance_s and goal_depth_wait_s "
                             f">= 0; got {action_duration_s!r}, {sync_tolerance_s!r}, {goal_depth_wait_s!r}")
        if not (math.isfinite(odometry_jump_m) and odometry_jump_m >= 0
                and math.isfinite(odometry_jump_deg) and odometry_jump_deg >= 0):
            raise ValueError("DecisionGate: odometry_jump_m and odometry_jump_deg must be >= 0 (0 = off); got "
                             f"{odometry_jump_m!r}, {odometry_jump_deg!r}")
        if not (math.isfinite(odometry_timeout_s) and odometry_timeout_s >= 0):
            raise ValueError(f"DecisionGate: odometry_timeout_s must be >= 0 (0 = off); got {odometry_timeout_s!r}")
        self.odometry_jump_m, self.odometry_jump_deg = odometry_jump_m, odometry_jump_deg
        self.odometry_timeout_s = odometry_timeout_s
        self._pose_wall_s: float | None = None   # when the newest odometry arrived (None: not told)
        self.lockstep = lockstep
        self.sync_tolerance_ns = 0 if lockstep else int(sync_tolerance_s * 1e9)
        self.action_duration_s = action_duration_s
        self.goal_depth_wait_s = goal_depth_wait_s
        self._goal_rgb: tuple[int, np.ndarray] | None = None     # the newest goal photo
        # goal depth images, paired with goal photos as live frames are: nearest within the sync tolerance (exact
        # in lock-step, where the simulator stamps a goal photo and its depth alike), each to one photo only
        self._goal_depths: GoalDepthPairer[np.ndarray] = GoalDepthPairer(self.sync_tolerance_ns)
        self.goal_stamp_ns: int | None = None   # the goal being worked on (None: wait for the next one)
        self._ended: deque[int] = deque(maxlen=ENDED_GOALS_KEPT)   # stamps of goals that ended, newest last
        self.goal_wall_s = 0.0                   # when work on it started
        self._working: tuple[np.ndarray, np.ndarray | None] | None = None   # its photo and depth
        self._rgb: tuple[int, np.ndarray] | None = None
        self._depth: tuple[int, np.ndarray] | None = None
        self._poses: StampedQueue[Pose2D] = StampedQueue(odometry_history)
        self._newest_pose: tuple[int, Pose2D] | None = None
        self.acted_ns = -1                       # the colour stamp of the last decision
        self._decided = False                    # a decision was taken on the goal last started
        self._velocity = (0.0, 0.0)
        self._velocity_from_s = 0.0
        self._velocity_until_s = 0.0

    # --- the goal ------------------------------------------------------------------------------
    def goal_image(self, stamp_ns: int, rgb: np.ndarray) -> None:
        """A goal photo arrived (start it with `goal_to_start`)."""
        self._goal_rgb = (int(stamp_ns), rgb)

    def goal_depth(self, stamp_ns: int, depth: np.ndarray) -> bool:
        """A goal depth image arrived. True: it belongs to the goal being worked on (the goal photo's depth, see
        `goal_to_start`), which started without depth and has had no decision yet, so start that goal again
        (`goal_to_start`), now with depth. (Whether a decision came is kept, not read from the frames' stamps: in
        lock-step the first decision may be on a frame older than the goal.)"""
        self._goal_depths.add(stamp_ns, depth)
        return (self._goal_rgb is not None and self.goal_stamp_ns == self._goal_rgb[0] and not self.goal_has_depth
                and not self._decided and self._goal_depths.nearest(self._goal_rgb[0]) is not None)

    def goal_to_start(self) -> tuple[int, np.ndarray, np.ndarray | None]:
        """(stamp, photo, its depth or None) of the newest goal photo. Its depth: the goal depth image nearest its
        stamp within the sync tolerance (exactly its stamp in lock-step) that no other goal photo took, as
        `memnav eval-bag` pairs them; it is now this photo's."""
        if self._goal_rgb is None:
            raise RuntimeError("DecisionGate.goal_to_start: no goal photo has arrived")
        stamp, rgb = self._goal_rgb
        depth = self._goal_depths.take(stamp)
        return stamp, rgb, None if depth is None else depth[1]

    def goal_started(self, stamp_ns: int, rgb: np.ndarray, depth: np.ndarray | None, wall_s: float) -> None:
        """The agent took the goal photo stamped `stamp_ns` (with its depth, or None) at `wall_s`: decisions on
        frames from then on are due. A goal worked on until now that it replaces has ended."""
        if self.goal_stamp_ns is not None and self.goal_stamp_ns != int(stamp_ns):
            self._ended.append(self.goal_stamp_ns)
        self.goal_stamp_ns, self.goal_wall_s = int(stamp_ns), wall_s
        self._working = (rgb, depth)
        self._decided = False

    @property
    def goal_has_depth(self) -> bool:
        """The goal last started came with its depth."""
        return self._working is not None and self._working[1] is not None

    @property
    def goal_photo(self) -> tuple[np.ndarray, np.ndarray | None] | None:
        """(photo, depth or None) of the goal being worked on; None when there is none."""
        return self._working if self.goal_stamp_ns is not None else None

    def episode_ended(self, goal_stamp_ns: int) -> None:
        """An episode result for the goal stamped `goal_stamp_ns`: if it is this goal, no more decisions on it."""
        if goal_stamp_ns == self.goal_stamp_ns:
            self.goal_over()

    def goal_over(self) -> None:
        """The agent stopped (or the goal was cancelled): no more decisions until the next goal."""
        if self.goal_stamp_ns is not None:
            self._ended.append(self.goal_stamp_ns)
        self.goal_stamp_ns = None

    def given_up(self, stamp_ns: int) -> None:
        """The goal stamped `stamp_ns` was given up without being worked on here (a kept goal abandoned after too
        many restarts of the node): its photo, delivered again, is not started (`ended`)."""
        if int(stamp_ns) not in self._ended:
            self._ended.append(int(stamp_ns))

    def ended(self, stamp_ns: int) -> bool:
        """Whether the goal stamped `stamp_ns` was worked on and has ended (stopped, cancelled, replaced, its
        episode over; the last ENDED_GOALS_KEPT): its photo arriving again (a publisher that repeats it, a latched
        sample delivered again after a reconnection) is not a new goal, and is not started again."""
        return int(stamp_ns) in self._ended

    # --- the frames ----------------------------------------------------------------------------
    def colour(self, stamp_ns: int, rgb: np.ndarray) -> None:
        self._rgb = (int(stamp_ns), rgb)

    def depth(self, stamp_ns: int, depth: np.ndarray) -> None:
        self._depth = (int(stamp_ns), depth)

    def odometry(self, stamp_ns: int, pose: Pose2D, wall_s: float | None = None) -> str | None:
        """A new odometry pose, arrived at `wall_s` (`due`'s clock; for `odometry_timeout_s`). Returns None, or
        when it jumped from the pose before (see the module docstring) one line saying how far; the poses before
        it are then forgotten, and frames taken before it are not decided on."""
        if wall_s is not None:
            self._pose_wall_s = wall_s
        jump = None
        if self._newest_pose is not None:
            jump = odometry_jump(self._newest_pose[1], pose, self.odometry_jump_m, self.odometry_jump_deg)
        if jump is not None:
            self._poses.clear()
            self.acted_ns = max(self.acted_ns, int(stamp_ns) - 1)
        self._newest_pose = (int(stamp_ns), pose)
        self._poses.push(stamp_ns, pose)
        return jump

    def due(self, now_s: float, wall_s: float) -> DecisionInput | None:
        """The frame to decide on now, or None while there is no goal, no new paired frame, (lock-step) no
        odometry of the frame yet, (real time) the newest frame is older than the goal or the previous action is
        still being carried out, or a goal photo without depth still waits for it. In lock-step a frame not yet
        decided on is due even when the goal came after it: the simulator waits on that frame for an action.
        Nothing changes until `taking`."""
        if self.goal_stamp_ns is None or self._rgb is None or self._depth is None or self._newest_pose is None:
            return None
        (t_rgb, rgb), (t_depth, depth) = self._rgb, self._depth
        # lock-step: colour, depth and odometry of this very frame (the bridge stamps all three alike; frames of
        # consecutive fast steps can lie closer together than any tolerance). Real time: the newest close
        # colour/depth pair, with the odometry of its instant rather than the newest (a turning robot's newest
        # pose can be a tick or more ahead of a frame that waited in a queue, which smears the map)
        if abs(t_rgb - t_depth) > self.sync_tolerance_ns or t_rgb <= self.acted_ns:
            return None
        # real time: a frame taken before the goal was sent is stale (a newer one comes within a frame period).
        # Lock-step: the simulator holds its frame until an action comes, so a goal sent from outside while it
        # waits (later than that frame) is decided on that frame, or nothing would ever move
        if t_rgb < self.goal_stamp_ns and not self.lockstep:
            return None
        match = self._poses.nearest(t_rgb, 0 if self.lockstep else self.sync_tolerance_ns + ODOMETRY_SLACK_NS)
        if match is None and self.lockstep:
            return None   # the odometry of this frame is still on its way
        if match is None and self.odometry_silent_s(wall_s) is not None:
            return None   # real time: odometry stopped; where the robot is now is not known
        if not self.lockstep and self._holding(now_s):
            return None   # the previous action is still being carried out
        if not self.goal_has_depth and wall_s - self.goal_wall_s < self.goal_depth_wait_s:
            return None   # the goal's depth may still be on its way (topics are not ordered)
        return DecisionInput(t_rgb, rgb, depth, (match or self._newest_pose)[1])

    def frames_behind_goal_s(self, wall_s: float, after_s: float = 2.0) -> float | None:
        """Real time: how far (seconds, by stamp) the newest colour frame lies before the goal photo's stamp, when
        the goal has waited over `after_s` (by `wall_s`) without a decision on that account; else None. A goal
        stamped by another clock than the camera's (a computer's wall clock against a camera's hardware clock)
        waits for frames of its time, for ever if that clock lags."""
        if (self.lockstep or self.goal_stamp_ns is None or self._rgb is None or self._decided
                or wall_s - self.goal_wall_s <= after_s or self._rgb[0] >= self.goal_stamp_ns):
            return None
        return (self.goal_stamp_ns - self._rgb[0]) / 1e9

    def odometry_silent_s(self, wall_s: float) -> float | None:
        """Real time with `odometry_timeout_s`: how long ago (by `wall_s`) the newest odometry arrived when that is
        longer than the timeout, else None."""
        if self.lockstep or self.odometry_timeout_s <= 0 or self._pose_wall_s is None:
            return None
        silent = wall_s - self._pose_wall_s
        return silent if silent > self.odometry_timeout_s else None

    # --- the action ----------------------------------------------------------------------------
    def taking(self, stamp_ns: int) -> str | None:
        """A decision is being taken on the frame stamped `stamp_ns`; that frame is not decided on again, even
        if the decision fails. Returns, at the first decision on a goal that goes on without depth although a goal
        depth image came stamped beyond the tolerance of its photo, one line saying so (both stamps, the
        tolerance); else None."""
        first = not self._decided and self.goal_stamp_ns is not None and not self.goal_has_depth
        self.acted_ns = int(stamp_ns)
        self._decided = True
        if not first:
            return None
        tolerance = ("lock-step's exact stamp pairing" if self.lockstep
                     else f"sync_tolerance_s ({self.sync_tolerance_ns / 1e9:g} s)")
        return self._goal_depths.missed_warning(self.goal_stamp_ns, tolerance)

    def hold(self, velocity: tuple[float, float], now_s: float) -> None:
        """The decision's action: its velocity is held for `action_duration_s` from `now_s`."""
        self._velocity = velocity
        self._velocity_from_s, self._velocity_until_s = now_s, now_s + self.action_duration_s

    def _holding(self, now_s: float) -> bool:
        # a clock that went back before the action began (an NTP step on the robot, a simulator's /clock reset)
        # ends it: held until the old end, it would be driven blind for as long as the clock went back
        return self._velocity_from_s <= now_s < self._velocity_until_s

    def action_done(self, now_s: float) -> bool:
        """The last action has been carried out for its duration (or the clock went back to before it began)."""
        return not self._holding(now_s)

    def velocity(self, now_s: float) -> tuple[float, float]:
        """(v m/s, w rad/s) to command now: the last action's while it is being carried out, else zero (also once
        the clock has gone back to before it began)."""
        return self._velocity if self._holding(now_s) else (0.0, 0.0)
