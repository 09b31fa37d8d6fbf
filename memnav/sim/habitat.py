"""Adapter: memnav's Simulator interface on habitat-sim (0.2.x and 0.3.x), imported lazily.

habitat-sim is distributed through conda only; this module imports without it, and constructing
`HabitatSimulator` without it raises `HabitatUnavailableError` explaining how to install it. Everything
that does not touch habitat-sim (sensor/agent specs, observation conversion, odometry noise) is plain
functions tested without it; the habitat-touching code is kept thin and follows the documented API:
Simulator, SimulatorConfiguration, AgentConfiguration, CameraSensorSpec, NavMeshSettings +
recompute_navmesh, pathfinder.find_path / get_random_navigable_point / is_navigable / try_step /
snap_point, ShortestPath.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memnav.core.frames import pose2d_from_habitat, quat_xyzw_from_yaw, yaw_from_quat_xyzw
from memnav.core.types import Action, Observation, Pose2D, wrap_angle
from memnav.sim.base import AgentState, SimConfig
from memnav.sim.odometry import apply_odometry, body_motion, check_velocity_command

if TYPE_CHECKING:
    from memnav.sim.episodes import Episode

INSTALL_MESSAGE = (
    "habitat-sim is not installed. It is distributed through conda only, e.g.:\n"
    "    conda create -n habitat python=3.9 cmake=3.14.0\n"
    "    conda activate habitat\n"
    "    conda install habitat-sim headless -c conda-forge -c aihabitat\n"
    "then install memnav into that environment (pip install -e .). The default backend "
    "(--backend embedded) needs none of this."
)
ACTION_NAMES = {Action.MOVE_FORWARD: "move_forward", Action.TURN_LEFT: "turn_left",
                Action.TURN_RIGHT: "turn_right"}


class HabitatUnavailableError(ImportError):
    """habitat-sim cannot be imported."""


def import_habitat_sim() -> Any:
    try:
        import habitat_sim  # noqa: PLC0415 - optional, conda-only dependency
    except ImportError as err:
        raise HabitatUnavailableError(f"{INSTALL_MESSAGE}\n(import error: {err})") from err
    return habitat_sim


def sensor_specs(config: SimConfig, semantic: bool) -> list[dict]:
    """Plain description of the sensors: uuid, type, resolution [H, W], position [x, y, z], hfov (deg)."""
    base = {"resolution": [config.height_px, config.width_px], "position": [0.0, config.sensor_height_m, 0.0],
            "hfov": float(config.hfov_deg)}
    specs = [dict(base, uuid="color", sensor_type="COLOR"), dict(base, uuid="depth", sensor_type="DEPTH")]
    if semantic:
        specs.append(dict(base, uuid="semantic", sensor_type="SEMANTIC"))
    return specs


def action_space_spec(config: SimConfig) -> dict[str, tuple[str, float]]:
    """Habitat action name -> (actuation name, amount in meters or degrees)."""
    return {"move_forward": ("move_forward", config.forward_step_m),
            "turn_left": ("turn_left", config.turn_angle_deg),
            "turn_right": ("turn_right", config.turn_angle_deg)}


def rgba_to_rgb(rgba: np.ndarray) -> np.ndarray:
    """habitat-sim colour observations are RGBA uint8; memnav uses RGB uint8."""
    arr = np.asarray(rgba)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"colour observation must be (H, W, 3|4), got {arr.shape}")
    return np.ascontiguousarray(arr[..., :3].astype(np.uint8, copy=False))


def observation_from_sensors(sensors: dict, position: np.ndarray, yaw_rad: float, odom: Pose2D, step: int,
                             collided: bool, max_depth_m: float) -> Observation:
    """Convert a habitat-sim observation dict to a memnav Observation."""
    depth = np.asarray(sensors["depth"], dtype=np.float32)
    if depth.ndim == 3:
        depth = depth[..., 0]
    depth = np.where(np.isfinite(depth), np.minimum(depth, max_depth_m), 0.0).astype(np.float32)
    sem = sensors.get("semantic")
    x, y, yaw = pose2d_from_habitat(position, yaw_rad)
    return Observation(rgb=rgba_to_rgb(sensors["color"]), depth=depth, pose=odom, step=step,
                       gt_pose=Pose2D(x, y, wrap_angle(yaw)),
                       semantic=None if sem is None else np.asarray(sem).astype(np.int32), collided=collided)


class HabitatSimulator:
    """memnav.sim.base.Simulator on habitat-sim."""

    def __init__(self, config: SimConfig | None = None, scene_path: Path | str | None = None) -> None:
        self._hs = import_habitat_sim()
        self.config = config or SimConfig()
        self._rng = np.random.default_rng(self.config.seed)
        self._sim: Any = None
        self._scene: Path | None = None
        self._odom = Pose2D(0.0, 0.0, 0.0)
        self._steps = 0
        self._collided = False
        self._goal_obs: Observation | None = None
        if scene_path is not None:
            self._load(Path(scene_path))

    # --- habitat-touching code (thin) ----------------------------------------------------------
    def _load(self, scene: Path) -> None:
        hs = self._hs
        if self._sim is not None and self._scene == scene:
            return
        if self._sim is not None:
            self._sim.close()
        sim_cfg = hs.SimulatorConfiguration()
        sim_cfg.scene_id = str(scene)
        sim_cfg.enable_physics = False
        # headless without CUDA needs gpu_device_id = -1
        cuda_allowed = os.environ.get("HSIM_DISABLE_CUDA_DEVICE", "0") in ("0", "")
        sim_cfg.gpu_device_id = 0 if cuda_allowed and getattr(hs, "cuda_enabled", False) else -1
        semantic = scene.with_suffix("").with_name(scene.stem + ".semantic.glb").exists() or \
            scene.with_name(scene.stem + "_semantic.ply").exists()
        sensors = []
        for spec in sensor_specs(self.config, semantic):
            s = hs.CameraSensorSpec() if hasattr(hs, "CameraSensorSpec") else hs.SensorSpec()
            s.uuid = spec["uuid"]
            s.sensor_type = getattr(hs.SensorType, spec["sensor_type"])
            s.resolution = spec["resolution"]
            s.position = spec["position"]
            if hasattr(s, "hfov"):
                s.hfov = spec["hfov"]
            else:  # very old SensorSpec: parameters dict
                s.parameters["hfov"] = str(spec["hfov"])
            sensors.append(s)
        actions = {name: hs.agent.ActionSpec(act, hs.agent.ActuationSpec(amount=amount))
                   for name, (act, amount) in action_space_spec(self.config).items()}
        agent_cfg = hs.agent.AgentConfiguration(height=self.config.agent_height_m, radius=self.config.agent_radius_m,
                                                sensor_specifications=sensors, action_space=actions)
        self._sim = hs.Simulator(hs.Configuration(sim_cfg, [agent_cfg]))
        nav = hs.NavMeshSettings()
        nav.set_defaults()
        nav.agent_radius = self.config.agent_radius_m
        nav.agent_height = self.config.agent_height_m
        nav.agent_max_climb = self.config.max_climb_m
        nav.cell_size = self.config.navmesh_cell_m
        try:
            self._sim.recompute_navmesh(self._sim.pathfinder, nav)                                # 0.3.x
        except TypeError:
            self._sim.recompute_navmesh(self._sim.pathfinder, nav, include_static_objects=False)  # 0.2.x
        self._scene = scene

    def _agent(self) -> Any:
        if self._sim is None:
            raise RuntimeError("no scene loaded: call reset(episode) first")
        return self._sim.get_agent(0)

    def _set_state(self, position: np.ndarray, yaw_rad: float) -> None:
        state = self._hs.AgentState()
        state.position = np.asarray(position, dtype=np.float32)
        q = quat_xyzw_from_yaw(yaw_rad)
        from habitat_sim.utils.common import quat_from_coeffs  # noqa: PLC0415

        state.rotation = quat_from_coeffs(q)
        self._agent().set_state(state)

    def _sensors(self) -> dict:
        return self._sim.get_sensor_observations()

    # --- Simulator interface -------------------------------------------------------------------
    def reset(self, episode: Episode) -> Observation:
        from memnav.sim.episodes import require_scene

        self._load(require_scene(episode))
        start = np.asarray(episode.start_position, dtype=np.float64)
        if not self._sim.pathfinder.is_navigable(start):
            snapped = np.asarray(self._sim.pathfinder.snap_point(start), dtype=np.float64)
            if not np.all(np.isfinite(snapped)) or np.linalg.norm(snapped - start) > 0.2:
                raise ValueError(f"episode {episode.episode_id}: start_position {start.tolist()} is not navigable")
            start = snapped
        self._goal_obs = self.render_at(np.asarray(episode.goal.position), episode.goal_yaw_rad())
        self._set_state(start, yaw_from_quat_xyzw(episode.start_rotation))
        self._steps = 0
        self._collided = False
        st = self.agent_state
        x, y, yaw = pose2d_from_habitat(st.position, st.yaw_rad)
        self._odom = Pose2D(x, y, wrap_angle(yaw))
        return self._observe(self._sensors())

    def step(self, action: Action | int | str) -> Observation:
        act = Action.parse(action)
        self._steps += 1
        before = self.agent_state
        if act == Action.STOP:
            sensors = self._sensors()
            self._collided = False
        else:
            sensors = self._sim.step(ACTION_NAMES[act])
            self._collided = bool(getattr(self._sim, "previous_step_collided", False))
        after = self.agent_state
        fwd, left, dyaw = body_motion(before.position, before.yaw_rad, after.position, after.yaw_rad)
        self._odom = apply_odometry(self._odom, fwd, left, dyaw, self.config, self._rng)
        return self._observe(sensors)

    def step_velocity(self, v_mps: float, w_radps: float, dt_s: float) -> Observation:
        check_velocity_command(v_mps, w_radps, dt_s)
        self._steps += 1
        before = self.agent_state
        yaw = wrap_angle(before.yaw_rad + w_radps * dt_s)
        mid_yaw = before.yaw_rad + 0.5 * w_radps * dt_s
        target = before.position + v_mps * dt_s * np.array([-math.sin(mid_yaw), 0.0, -math.cos(mid_yaw)])
        end = np.asarray(self._sim.pathfinder.try_step(before.position, target), dtype=np.float64)
        self._collided = bool(np.linalg.norm(end - target) > 1e-3)
        self._set_state(end, yaw)
        fwd, left, dyaw = body_motion(before.position, before.yaw_rad, end, yaw)
        self._odom = apply_odometry(self._odom, fwd, left, dyaw, self.config, self._rng)
        return self._observe(self._sensors())

    def geodesic_distance(self, a: np.ndarray, b: np.ndarray) -> float:
        path = self._hs.ShortestPath()
        path.requested_start = np.asarray(a, dtype=np.float32)
        path.requested_end = np.asarray(b, dtype=np.float32)
        return float(path.geodesic_distance) if self._sim.pathfinder.find_path(path) else math.inf

    def shortest_path(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        path = self._hs.ShortestPath()
        path.requested_start = np.asarray(a, dtype=np.float32)
        path.requested_end = np.asarray(b, dtype=np.float32)
        if not self._sim.pathfinder.find_path(path):
            return np.zeros((0, 3))
        return np.asarray(path.points, dtype=np.float64).reshape(-1, 3)

    def sample_navigable_point(self) -> np.ndarray:
        return np.asarray(self._sim.pathfinder.get_random_navigable_point(), dtype=np.float64)

    def is_navigable(self, point: np.ndarray) -> bool:
        return bool(self._sim.pathfinder.is_navigable(np.asarray(point, dtype=np.float32)))

    def render_at(self, position: np.ndarray, yaw_rad: float) -> Observation:
        saved = self._agent().get_state()
        self._set_state(np.asarray(position, dtype=np.float64), yaw_rad)
        sensors = self._sensors()
        self._agent().set_state(saved)
        x, y, yaw = pose2d_from_habitat(np.asarray(position), yaw_rad)
        pose = Pose2D(x, y, wrap_angle(yaw))
        return observation_from_sensors(sensors, np.asarray(position), yaw_rad, pose, 0, False,
                                        self.config.max_depth_m)

    @property
    def agent_state(self) -> AgentState:
        st = self._agent().get_state()
        rot = st.rotation
        q = np.array([rot.x, rot.y, rot.z, rot.w]) if hasattr(rot, "x") else np.asarray(rot, dtype=np.float64)
        return AgentState(position=np.asarray(st.position, dtype=np.float64), rotation=q,
                          yaw_rad=yaw_from_quat_xyzw(q))

    @property
    def goal_observation(self) -> Observation | None:
        return self._goal_obs

    @property
    def steps(self) -> int:
        return self._steps

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None
            self._scene = None

    def _observe(self, sensors: dict) -> Observation:
        st = self.agent_state
        return observation_from_sensors(sensors, st.position, st.yaw_rad, self._odom, self._steps,
                                        self._collided, self.config.max_depth_m)
