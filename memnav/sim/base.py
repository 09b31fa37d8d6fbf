"""The simulator interface every backend implements, and its typed configuration.

Positions passed to and returned from a simulator are Habitat world coordinates (+Y up, -Z forward),
as in episode files; observations carry poses in the REP-103 map frame (see memnav.core.frames).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from memnav.core.frames import check_camera_forward, check_camera_pitch
from memnav.core.types import Action, Observation

if TYPE_CHECKING:
    from memnav.sim.episodes import Episode

RENDERERS = ("auto", "object", "bvh")  # SimConfig.renderer choices (memnav.sim.render)
ODOMETRY_ORIGINS = ("house", "start")  # SimConfig.odometry_origin choices
OBJECT_ORDER_MAX_TRIANGLES = 15_000  # "auto" casts object-order up to this many triangles, else through the BVH


class StartNotNavigableError(ValueError):
    """An episode's start position is off the navigable area, with nothing navigable near enough to snap it onto
    (raised by every backend's `reset`; `memnav eval` skips such an episode with a warning)."""


class OffFloorError(ValueError):
    """An episode's start or goal lies above or below the one floor a backend maps (the embedded simulator maps
    one floor per scene; `memnav eval` skips such an episode with a warning)."""


@dataclass
class SimConfig:
    """Simulator settings shared by all backends.

    Attributes:
        width_px: camera image width, pixels.
        height_px: camera image height, pixels.
        hfov_deg: horizontal field of view, degrees.
        sensor_height_m: camera height above the floor, meters.
        sensor_forward_m: camera ahead of the agent's centre (its turning axis, where odometry is), meters (0: on
            it, as Habitat's agents; a robot's camera is often mounted 0.1-0.3 m ahead). Less than agent_radius_m:
            a camera outside the body passes into the walls the body touches. The exploring agents are told it
            as the policy node is by camera_forward_m (README "What the robot must provide").
        forward_step_m: MOVE_FORWARD distance, meters.
        turn_angle_deg: TURN_LEFT / TURN_RIGHT angle, degrees.
        sensor_pitch_deg: how far the camera looks down from level, degrees (negative: up; 0: level, as Habitat's
            agents). The embedded simulator renders a pitched camera with its BVH ray caster (the object-order
            one draws level views). The exploring agents are told it as the policy node is by camera_pitch_deg.
        agent_radius_m: radius of the agent's collision cylinder, meters.
        agent_height_m: height of the agent's collision cylinder, meters.
        max_climb_m: largest floor step the agent may climb, meters.
        navmesh_cell_m: resolution of the navigable-area grid, meters.
        max_episode_steps: step limit per episode (actions counted, STOP included).
        success_distance_m: geodesic distance to goal within which STOP counts as success, meters.
        odom_noise_trans_std: odometry translation noise, std in meters per meter travelled.
        odom_noise_rot_std: odometry rotation noise, std in radians per radian turned (plus per meter).
        max_depth_m: depth readings beyond this are clipped, meters.
        seed: random seed for odometry noise and navigable-point sampling.
        renderer: how the embedded simulator finds each pixel's nearest surface (memnav.sim.render): "auto"
            (object-order ray casting for meshes up to OBJECT_ORDER_MAX_TRIANGLES triangles, open3d's Embree
            BVH above), "object" or "bvh".
        render_threads: threads of the object-order ray caster, casting and shading (0 = one per core; the
            BVH casts on open3d's threads and shades on one either way). 1 by default leaves the other cores to
            the agent and the ROS nodes; README gives the speed with 1 and with all.
        odometry_origin: where odometry starts when an episode starts (or the agent is placed): "house" (the
            house frame: odometry starts at the ground-truth pose, as for a robot localised in a fixed map, and
            keeps that frame from episode to episode) or "start" (zero at the start pose, as wheel odometry at
            boot: a robot carried to each episode's start and switched on there, whose long-term memory must
            relocalise; the policy node's `odometry_restarts`, which sim.launch.yaml sets with it, reopens a
            lifelong memory at every goal for that, as `memnav eval --odometry-restarts --odometry-origin start`).
    """

    width_px: int = 128
    height_px: int = 128
    hfov_deg: float = 90.0
    sensor_height_m: float = 1.25
    sensor_forward_m: float = 0.0
    sensor_pitch_deg: float = 0.0
    forward_step_m: float = 0.25
    turn_angle_deg: float = 30.0
    agent_radius_m: float = 0.18
    agent_height_m: float = 1.5
    max_climb_m: float = 0.2
    navmesh_cell_m: float = 0.05
    max_episode_steps: int = 500
    success_distance_m: float = 1.0
    odom_noise_trans_std: float = 0.0
    odom_noise_rot_std: float = 0.0
    max_depth_m: float = 10.0
    seed: int = 0
    renderer: str = "auto"
    render_threads: int = 1
    odometry_origin: str = "house"

    def __post_init__(self) -> None:
        # counts must be integers: a float image size or step limit otherwise fails deep in rendering or numpy
        for name in ("width_px", "height_px", "max_episode_steps", "seed", "render_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"SimConfig.{name} must be an integer, got {value!r}")
        if self.seed < 0:
            raise ValueError(f"SimConfig.seed must be >= 0, got {self.seed!r}")
        positive = ("width_px", "height_px", "hfov_deg", "sensor_height_m", "forward_step_m",
                    "turn_angle_deg", "agent_radius_m", "agent_height_m", "navmesh_cell_m",
                    "max_episode_steps", "success_distance_m", "max_depth_m")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(value) or value <= 0:
                raise ValueError(f"SimConfig.{name} must be a positive number, got {value!r}")
        if not 0 < self.hfov_deg < 180:
            raise ValueError(f"SimConfig.hfov_deg must be in (0, 180), got {self.hfov_deg}")
        check_camera_forward("SimConfig.sensor_forward_m", self.sensor_forward_m)
        check_camera_pitch("SimConfig.sensor_pitch_deg", self.sensor_pitch_deg)
        if abs(self.sensor_forward_m) >= self.agent_radius_m:
            raise ValueError(f"SimConfig.sensor_forward_m must be less than agent_radius_m ({self.agent_radius_m:g} "
                             f"m), got {self.sensor_forward_m!r}: a camera outside the simulated body passes into the "
                             "walls the body touches (a robot's camera sits within its footprint; simulate a larger "
                             "robot with agent_radius_m)")
        for name in ("odom_noise_trans_std", "odom_noise_rot_std", "max_climb_m"):
            if getattr(self, name) < 0:
                raise ValueError(f"SimConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.renderer not in RENDERERS:
            raise ValueError(f"SimConfig.renderer must be one of {', '.join(RENDERERS)}; got {self.renderer!r}")
        if self.odometry_origin not in ODOMETRY_ORIGINS:
            raise ValueError(f"SimConfig.odometry_origin must be one of {', '.join(ODOMETRY_ORIGINS)}; "
                             f"got {self.odometry_origin!r}")
        if self.render_threads < 0:
            raise ValueError(f"SimConfig.render_threads must be >= 0 (0 = one per core), got {self.render_threads!r}")

    @property
    def turn_angle_rad(self) -> float:
        return float(np.deg2rad(self.turn_angle_deg))

    @property
    def focal_px(self) -> float:
        """Pinhole focal length in pixels (same for x and y: square pixels)."""
        return self.width_px / (2.0 * np.tan(np.deg2rad(self.hfov_deg) / 2.0))


@dataclass
class AgentState:
    """Ground-truth agent state in Habitat world coordinates.

    Attributes:
        position: (3,) float64 position of the agent's base (on the floor), meters.
        rotation: (4,) quaternion [x, y, z, w], a rotation about +Y.
        yaw_rad: heading about +Y (equal to the map-frame yaw), radians.
    """

    position: np.ndarray
    rotation: np.ndarray
    yaw_rad: float


@runtime_checkable
class Simulator(Protocol):
    """What memnav needs from a simulator backend (embedded ray caster or habitat-sim)."""

    config: SimConfig

    def reset(self, episode: Episode) -> Observation:
        """Place the agent at the episode start; render the goal image; return the first observation."""

    def step(self, action: Action | int | str) -> Observation:
        """Apply one discrete ImageNav action (STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT)."""

    def step_velocity(self, v_mps: float, w_radps: float, dt_s: float) -> Observation:
        """Apply a continuous velocity command for dt_s seconds (robot-like control)."""

    def geodesic_distance(self, a: np.ndarray, b: np.ndarray) -> float:
        """Shortest navigable path length between two Habitat points, meters (inf if unreachable)."""

    def shortest_path(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(N, 3) waypoints of the shortest navigable path from a to b (empty if unreachable)."""

    def sample_navigable_point(self) -> np.ndarray:
        """A random navigable (3,) Habitat point."""

    def is_navigable(self, point: np.ndarray) -> bool:
        """Whether the agent can stand at this Habitat point."""

    def render_at(self, position: np.ndarray, yaw_rad: float) -> Observation:
        """Render the view from an arbitrary navigable pose without moving the agent."""

    @property
    def agent_state(self) -> AgentState:
        """Ground-truth state of the agent."""

    @property
    def goal_observation(self) -> Observation | None:
        """The goal image rendered at the current episode's goal pose (None before reset)."""

    def close(self) -> None:
        """Release resources."""
