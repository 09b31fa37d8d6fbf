"""The goal statuses policy_node publishes on /memnav/goal_status, in one place for every node and command that
reads them (stop_node, `memnav goal`). Nothing heavy is imported here: no rclpy, no messages."""
from __future__ import annotations

from enum import Enum


class GoalStatus(str, Enum):
    """What became of a goal (the `status` of a /memnav/goal_status body). A str: it compares equal to, and is
    written to JSON as, its value ("stopped" == GoalStatus.STOPPED)."""

    ACTIVE = "active"        # the goal started (or a restarted node took it up again)
    STOPPED = "stopped"      # the agent's STOP
    BUDGET = "budget"        # the goal's max_steps-th action, made a STOP
    CANCELLED = "cancelled"  # ~/cancel_goal, or a new goal photo replaced it
    ENDED = "ended"          # the simulator's episode result
    ABANDONED = "abandoned"  # the policy node restarted more than max_goal_resumes times while working on it

    def __str__(self) -> str:   # the value, on every Python (3.12 formats a mixed-in enum as "GoalStatus.X")
        return self.value


# statuses that end a goal with the robot's STOP (the budget's STOP is one too, not the agent's own)
ENDED_BY_STOP: frozenset[GoalStatus] = frozenset({GoalStatus.STOPPED, GoalStatus.BUDGET})
# statuses that end a goal without a STOP (nothing tells a simulator the robot thinks it arrived)
ENDED_WITHOUT_STOP: frozenset[GoalStatus] = frozenset({GoalStatus.CANCELLED, GoalStatus.ENDED,
                                                      GoalStatus.ABANDONED})
# every status after which a goal gets nothing more: all but "active"
ENDED_STATUSES: frozenset[GoalStatus] = ENDED_BY_STOP | ENDED_WITHOUT_STOP
