"""Plain data types shared by every memnav layer (no ROS, no simulator)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum, IntEnum

import numpy as np


class Action(IntEnum):
    """Habitat ImageNav discrete actions, in habitat-lab's index order."""

    STOP = 0
    MOVE_FORWARD = 1
    TURN_LEFT = 2
    TURN_RIGHT = 3

    @classmethod
    def parse(cls, value: object) -> Action:
        """Accept an Action, its index, or its (case-insensitive) name.

        Raises:
            ValueError: naming the unknown action and the valid ones.
        """
        if isinstance(value, Action):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            try:
                return cls(int(value))
            except ValueError as err:
                raise ValueError(f"unknown action index {value}; expected one of "
                                 f"{[f'{a.value}={a.name}' for a in cls]}") from err
        if isinstance(value, str):
            key = value.strip().upper()
            if key in cls.__members__:
                return cls[key]
        raise ValueError(f"unknown action {value!r}; expected one of {[a.name for a in cls]}")


class EpisodeStatus(Enum):
    """How an episode ended."""

    RUNNING = "running"
    STOPPED = "stopped"          # the agent called STOP
    STEP_LIMIT = "step_limit"    # max_episode_steps reached without STOP


@dataclass(frozen=True)
class Pose2D:
    """Planar pose in the map frame (REP-103: x forward/east, y left/north, z up).

    Attributes:
        x_m: position along map x, meters.
        y_m: position along map y, meters.
        yaw_rad: heading about +z, radians, counter-clockwise from +x.
    """

    x_m: float
    y_m: float
    yaw_rad: float

    def __post_init__(self) -> None:
        for name in ("x_m", "y_m", "yaw_rad"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"Pose2D.{name} must be finite, got {value}")

    def as_array(self) -> np.ndarray:
        return np.array([self.x_m, self.y_m, self.yaw_rad], dtype=np.float64)

    def relative_to(self, origin: Pose2D) -> Pose2D:
        """This pose expressed in the frame of `origin` (x forward, y left)."""
        dx, dy = self.x_m - origin.x_m, self.y_m - origin.y_m
        c, s = math.cos(origin.yaw_rad), math.sin(origin.yaw_rad)
        return Pose2D(c * dx + s * dy, -s * dx + c * dy, wrap_angle(self.yaw_rad - origin.yaw_rad))

    def apply(self, x, y):
        """Points (x, y) given in this pose's frame (x forward, y left; floats or numpy arrays), expressed in the
        frame this pose is in."""
        c, s = math.cos(self.yaw_rad), math.sin(self.yaw_rad)
        return self.x_m + c * x - s * y, self.y_m + s * x + c * y

    def compose(self, relative: Pose2D) -> Pose2D:
        """A pose given in this pose's frame, expressed in the frame this pose is in (inverse of relative_to)."""
        x, y = self.apply(relative.x_m, relative.y_m)
        return Pose2D(x, y, wrap_angle(self.yaw_rad + relative.yaw_rad))


def wrap_angle(angle_rad: float) -> float:
    """Wrap an angle to [-pi, pi)."""
    return (angle_rad + math.pi) % (2.0 * math.pi) - math.pi


@dataclass
class Observation:
    """What a simulator (or robot) gives the agent at one step.

    Attributes:
        rgb: uint8 array (H, W, 3).
        depth: float32 array (H, W), meters along the optical axis; 0 where nothing was hit.
        pose: odometry pose in the map frame (noisy when odometry noise is configured).
        step: number of actions taken since reset.
        gt_pose: ground-truth pose in the map frame.
        semantic: int32 array (H, W) of semantic object ids (0 = none), or None.
        collided: whether the last action was (partly) blocked by an obstacle.
    """

    rgb: np.ndarray
    depth: np.ndarray
    pose: Pose2D
    step: int
    gt_pose: Pose2D
    semantic: np.ndarray | None = None
    collided: bool = False
    info: dict = field(default_factory=dict)
