"""Adapter: memnav's Simulator interface on habitat-sim (0.2.x and 0.3.x), imported lazily.

habitat-sim is distributed through conda only; this module imports without it, and constructing
`HabitatSimulator` without it raises `HabitatUnavailableError` explaining how to install it.

Everything that does not need habitat-sim itself is a plain function tested without it: sensor, agent and
navmesh specs, GPU choice, semantic-asset discovery, observation conversion. The builders that do touch
it take the `habitat_sim` module as an argument. The habitat-touching code follows the API both 0.2.x and
0.3.x share: SimulatorConfiguration (scene_id, scene_dataset_config_file, gpu_device_id, enable_physics,
random_seed, allow_sliding, load_semantic_mesh), CameraSensorSpec (hfov as magnum.Deg; SensorSpec with
parameters["hfov"] on versions before it), agent.AgentConfiguration / ActionSpec / ActuationSpec,
Simulator / reconfigure / get_sensor_observations, step() returning observations with a "collided" flag,
NavMeshSettings + recompute_navmesh(pathfinder, settings), AgentState with rotation coefficients [x, y, z, w],
pathfinder.find_path(ShortestPath | MultiGoalShortestPath) / get_random_navigable_point / is_navigable /
try_step / snap_point / seed.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from memnav.core.frames import heading_habitat, pose2d_from_habitat, quat_xyzw_from_yaw, yaw_from_quat_xyzw
from memnav.core.types import Action, Observation, Pose2D, wrap_angle
from memnav.sim.base import AgentState, SimConfig, StartNotNavigableError
from memnav.sim.episodes import Episode, require_scene
from memnav.sim.odometry import apply_odometry, body_motion, check_velocity_command, start_odometry

INSTALL_STEPS = (
    "    conda create -n habitat python=3.9 cmake=3.14.0\n"
    "    conda activate habitat\n"
    "    conda install habitat-sim headless -c conda-forge -c aihabitat\n"
    "then install memnav into that environment with pip (pip install -e . from the memnav checkout).\n"
    "The default backend (--backend embedded) needs none of this."
)
INSTALL_MESSAGE = "habitat-sim is not installed. It is distributed through conda only, e.g.:\n" + INSTALL_STEPS
ACTION_NAMES = {Action.MOVE_FORWARD: "move_forward", Action.TURN_LEFT: "turn_left",
                Action.TURN_RIGHT: "turn_right"}
START_SNAP_M = 0.2   # same tolerance as the embedded backend: a start this close to the navmesh is snapped onto it
COLLISION_EPS_M = 1e-5


class HabitatUnavailableError(ImportError):
    """habitat-sim cannot be imported (the message says how to install it)."""


def import_habitat_sim() -> Any:
    """Import habitat_sim, or raise HabitatUnavailableError with install instructions.

    A habitat_sim that is there but fails to import (a missing magnum, libEGL, a numpy it was not built for) is
    told apart from one that is absent, naming where it is and what failed.
    """
    try:
        import habitat_sim  # optional, conda-only dependency
    except Exception as err:   # a broken build raises ImportError, OSError, AttributeError, ... while importing
        if isinstance(err, ModuleNotFoundError) and err.name == "habitat_sim":
            raise HabitatUnavailableError(f"{INSTALL_MESSAGE}\n(import error: {err})") from err
        where = _habitat_sim_location()
        raise HabitatUnavailableError(
            f"habitat-sim is installed{f' ({where})' if where else ''} but fails to import: {type(err).__name__}: "
            f"{err}\nIts conda package brings what it needs (magnum, EGL); a pip wheel or a build from another "
            f"environment may not. Reinstall it with conda, e.g.:\n{INSTALL_STEPS}") from err
    return habitat_sim


def _habitat_sim_location() -> str:
    """Where the habitat_sim package lies, or "" when that cannot be told."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("habitat_sim")
    except (ImportError, ValueError):
        return ""
    return str(spec.origin or "") if spec is not None else ""


# --- pure functions (no habitat-sim) ------------------------------------------------------------------
def sensor_specs(config: SimConfig, semantic: bool) -> list[dict]:
    """Plain description of the sensors: uuid, sensor_type, resolution [H, W], position [x, y, z] (m), hfov (deg)."""
    # a habitat-sim agent looks along its -Z axis: a camera ahead of it is at -sensor_forward_m
    # its orientation is Euler angles about x, y, z: a camera looking down turns negatively about x
    base = {"resolution": [config.height_px, config.width_px],
            "position": [0.0, config.sensor_height_m, -config.sensor_forward_m],
            "orientation": [-math.radians(config.sensor_pitch_deg), 0.0, 0.0],
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


def navmesh_spec(config: SimConfig) -> dict[str, float]:
    """habitat_sim.NavMeshSettings fields set from the config (the rest keep habitat's defaults)."""
    return {"agent_radius": config.agent_radius_m, "agent_height": config.agent_height_m,
            "agent_max_climb": config.max_climb_m, "cell_size": config.navmesh_cell_m}


def nvidia_device_present() -> bool:
    """Whether this machine exposes an NVIDIA GPU (device nodes), without importing CUDA libraries."""
    dev = Path("/dev")
    return dev.is_dir() and any(dev.glob("nvidia[0-9]*"))


def choose_gpu_device_id(environ: Mapping[str, str], gpu_present: bool) -> int:
    """habitat-sim's gpu_device_id: 0 with a visible NVIDIA GPU, else -1 (headless rendering without CUDA).

    HSIM_DISABLE_CUDA_DEVICE (any value but "0") or an empty / "-1" CUDA_VISIBLE_DEVICES force -1.
    """
    if environ.get("HSIM_DISABLE_CUDA_DEVICE", "0") not in ("", "0"):
        return -1
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return -1
    return 0 if gpu_present else -1


def semantic_mesh_for(scene: Path) -> Path | None:
    """The semantic mesh habitat-sim pairs with a scene file by naming convention, if present.

    MP3D/Gibson: `{stem}_semantic.ply`; HM3D: `{name}.semantic.glb` beside `{name}.basis.glb` or `{name}.glb`.
    """
    scene = Path(scene)
    name = scene.name
    for suffix in (".basis.glb", ".glb", ".ply", ".obj"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    for cand in (scene.with_name(f"{name}_semantic.ply"), scene.with_name(f"{name}.semantic.glb")):
        if cand.is_file() and cand != scene:
            return cand
    return None


def find_scene_dataset_config(scene: Path, levels: int = 4) -> Path | None:
    """The nearest `*.scene_dataset_config.json` in the scene's folder or up to `levels` folders above it."""
    folder = Path(scene).resolve().parent
    for _ in range(levels + 1):
        found = sorted(folder.glob("*.scene_dataset_config.json"))
        if found:
            return found[0]
        if folder.parent == folder:
            break
        folder = folder.parent
    return None


def uses_semantic_sensor(scene: Path, dataset_config: Path | None) -> bool:
    """Add a semantic camera only where habitat-sim will find annotations for the scene.

    `.ply` semantic meshes (MP3D/Gibson) load by convention; HM3D's `.semantic.glb` needs its dataset config.
    """
    mesh = semantic_mesh_for(scene)
    return mesh is not None and (mesh.suffix == ".ply" or dataset_config is not None)


def quat_xyzw(rotation: object) -> np.ndarray:
    """[x, y, z, w] from a numpy-quaternion / magnum Quaternion / coefficient sequence [x, y, z, w]."""
    if all(hasattr(rotation, k) for k in ("x", "y", "z", "w")):
        return np.array([rotation.x, rotation.y, rotation.z, rotation.w], dtype=np.float64)
    if hasattr(rotation, "vector") and hasattr(rotation, "scalar"):
        v = rotation.vector
        return np.array([v[0], v[1], v[2], rotation.scalar], dtype=np.float64)
    return np.asarray(rotation, dtype=np.float64).reshape(4)


def path_points(points: object) -> np.ndarray:
    """(N, 3) float64 array from habitat's path points (numpy arrays or magnum Vector3)."""
    pts = [np.asarray(list(p), dtype=np.float64).reshape(3) for p in points]
    return np.stack(pts) if pts else np.zeros((0, 3))


def rgba_to_rgb(rgba: np.ndarray) -> np.ndarray:
    """habitat-sim colour observations are RGBA uint8; memnav uses RGB uint8."""
    arr = np.asarray(rgba)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"colour observation must be (H, W, 3|4), got {arr.shape}")
    return np.ascontiguousarray(arr[..., :3].astype(np.uint8, copy=False))


def observation_from_sensors(sensors: Mapping[str, Any], position: np.ndarray, yaw_rad: float, odom: Pose2D,
                             step: int, collided: bool, max_depth_m: float) -> Observation:
    """Convert a habitat-sim observation dict ("color", "depth", optional "semantic") to a memnav Observation.

    Depth beyond max_depth_m is clipped to it; non-finite depth becomes 0 (nothing hit).
    """
    for key in ("color", "depth"):
        if key not in sensors:
            raise KeyError(f"habitat observation has no '{key}' sensor (got {sorted(sensors)})")
    depth = np.asarray(sensors["depth"], dtype=np.float32)
    if depth.ndim == 3:
        depth = depth[..., 0]
    depth = np.where(np.isfinite(depth), np.minimum(depth, max_depth_m), 0.0).astype(np.float32)
    sem = sensors.get("semantic")
    x, y, yaw = pose2d_from_habitat(position, yaw_rad)
    return Observation(rgb=rgba_to_rgb(sensors["color"]), depth=depth, pose=odom, step=step,
                       gt_pose=Pose2D(x, y, wrap_angle(yaw)),
                       semantic=None if sem is None else np.asarray(sem).astype(np.int32), collided=collided)


# --- builders (take the habitat_sim module) -------------------------------------------------------------
def _deg(value: float) -> Any:
    try:
        import magnum as mn  # ships with habitat-sim
    except ImportError:
        return float(value)
    return mn.Deg(value)


def _sensor(hs: Any, spec: dict) -> Any:
    camera = getattr(hs, "CameraSensorSpec", None)
    s = camera() if camera is not None else hs.SensorSpec()
    s.uuid = spec["uuid"]
    s.sensor_type = getattr(hs.SensorType, spec["sensor_type"])
    s.resolution = list(spec["resolution"])
    s.position = list(spec["position"])
    s.orientation = list(spec["orientation"])
    if camera is not None:
        if hasattr(hs, "SensorSubType"):
            s.sensor_subtype = hs.SensorSubType.PINHOLE
        s.hfov = _deg(spec["hfov"])
    else:   # before CameraSensorSpec (< 0.2): string parameters
        s.parameters["hfov"] = str(spec["hfov"])
    return s


def build_configuration(hs: Any, config: SimConfig, scene: Path, *, gpu_device_id: int, semantic: bool,
                        dataset_config: Path | None) -> Any:
    """habitat_sim.Configuration for one agent with colour, depth (and semantic) cameras."""
    sim_cfg = hs.SimulatorConfiguration()
    sim_cfg.scene_id = str(scene)
    if dataset_config is not None:
        sim_cfg.scene_dataset_config_file = str(dataset_config)
    sim_cfg.enable_physics = False
    sim_cfg.gpu_device_id = gpu_device_id
    sim_cfg.random_seed = config.seed
    sim_cfg.allow_sliding = True
    sim_cfg.load_semantic_mesh = semantic
    sensors = [_sensor(hs, spec) for spec in sensor_specs(config, semantic)]
    actions = {name: hs.agent.ActionSpec(act, hs.agent.ActuationSpec(amount=amount))
               for name, (act, amount) in action_space_spec(config).items()}
    agent_cfg = hs.agent.AgentConfiguration(height=config.agent_height_m, radius=config.agent_radius_m,
                                            sensor_specifications=sensors, action_space=actions)
    return hs.Configuration(sim_cfg, [agent_cfg])


def recompute_navmesh(hs: Any, sim: Any, config: SimConfig, scene: Path) -> None:
    """Rebuild the navmesh for memnav's agent cylinder, so both backends agree on what is navigable.

    Raises:
        RuntimeError: if habitat-sim could not build a navmesh for the scene.
    """
    nav = hs.NavMeshSettings()
    nav.set_defaults()
    for key, value in navmesh_spec(config).items():
        setattr(nav, key, value)
    if hasattr(nav, "include_static_objects"):   # 0.3.x moved this flag into the settings
        nav.include_static_objects = False
    try:
        ok = sim.recompute_navmesh(sim.pathfinder, nav)
    except TypeError:   # builds whose signature still requires include_static_objects
        ok = sim.recompute_navmesh(sim.pathfinder, nav, False)
    if ok is False or not sim.pathfinder.is_loaded:
        raise RuntimeError(f"habitat-sim could not build a navmesh for {scene}")


def _vec3(p: np.ndarray) -> np.ndarray:
    return np.asarray(p, dtype=np.float32).reshape(3)


# --- the simulator ------------------------------------------------------------------------------------
class HabitatSimulator:
    """memnav.sim.base.Simulator on habitat-sim.

    Args:
        config: image, agent and action settings (shared with the embedded backend).
        scene_path: scene to load now (optional: reset(episode) loads the episode's scene).
        recompute_navmesh: rebuild the navmesh for config's agent cylinder (default). False keeps the
            scene's shipped `.navmesh`, as Habitat's published episodes were generated with it.
    """

    def __init__(self, config: SimConfig | None = None, scene_path: Path | str | None = None, *,
                 recompute_navmesh: bool = True) -> None:
        self._hs = import_habitat_sim()
        self.config = config or SimConfig()
        self._recompute = recompute_navmesh
        self._rng = np.random.default_rng(self.config.seed)
        self._sim: Any = None
        self._scene: Path | None = None
        self._odom = Pose2D(0.0, 0.0, 0.0)
        self._steps = 0
        self._collided = False
        self._goal_obs: Observation | None = None
        if scene_path is not None:
            self.load_scene(scene_path)

    # --- habitat-touching code (thin) ---------------------------------------------------------
    def _ensure_scene(self, scene: Path) -> None:
        scene = Path(scene).resolve()
        if self._sim is not None and self._scene == scene:
            return
        hs = self._hs
        dataset_config = find_scene_dataset_config(scene)
        cfg = build_configuration(hs, self.config, scene,
                                  gpu_device_id=choose_gpu_device_id(os.environ, nvidia_device_present()),
                                  semantic=uses_semantic_sensor(scene, dataset_config),
                                  dataset_config=dataset_config)
        if self._sim is None:
            self._sim = hs.Simulator(cfg)
        else:   # keeps the GL context; cheaper and safer than a second Simulator in one process
            self._sim.reconfigure(cfg)
        self._scene = None
        if self._recompute or not self._sim.pathfinder.is_loaded:
            recompute_navmesh(hs, self._sim, self.config, scene)
        self._sim.pathfinder.seed(self.config.seed)
        self._scene = scene

    def _agent(self) -> Any:
        if self._sim is None:
            raise RuntimeError("no scene loaded: call reset(episode) or load_scene(path) first")
        return self._sim.get_agent(0)

    def _set_state(self, position: np.ndarray, yaw_rad: float) -> None:
        state = self._hs.AgentState()
        state.position = _vec3(position)
        state.rotation = quat_xyzw_from_yaw(yaw_rad)   # set_state converts [x, y, z, w] coefficients
        self._agent().set_state(state)

    def _sensors(self) -> dict:
        return self._sim.get_sensor_observations()

    # --- scene and episode ----------------------------------------------------------------------
    def load_scene(self, scene_path: Path | str) -> None:
        """Load (or keep) a scene and place the agent at a random navigable point, heading 0."""
        self._ensure_scene(Path(scene_path))
        self.set_agent_pose(self.sample_navigable_point(), 0.0)

    def set_agent_pose(self, position: np.ndarray, yaw_rad: float) -> None:
        """Teleport the agent; odometry restarts at the new pose."""
        pos = np.asarray(position, dtype=np.float64)
        if not self.is_navigable(pos):
            raise ValueError(f"set_agent_pose: position {pos.tolist()} is not navigable")
        self._set_state(pos, float(yaw_rad))
        self._reset_odometry()

    def reset(self, episode: Episode) -> Observation:
        self._ensure_scene(require_scene(episode))
        start = np.asarray(episode.start_position, dtype=np.float64)
        if not self.is_navigable(start):
            snapped = np.asarray(list(self._sim.pathfinder.snap_point(_vec3(start))), dtype=np.float64)
            if not np.all(np.isfinite(snapped)) or np.linalg.norm(snapped - start) > START_SNAP_M:
                raise StartNotNavigableError(
                    f"episode {episode.episode_id} ({episode.scene_id}): start_position {start.tolist()} "
                    f"is not on the navigable area (nothing navigable within {START_SNAP_M} m)")
            start = snapped
        # no OffFloorError here: habitat's navmesh spans every floor of the scene; a goal that no path reaches
        # (another floor without stairs, off the navmesh) has an infinite geodesic distance, which ImageNavEnv reports
        self._goal_obs = self.render_at(np.asarray(episode.goal.position, dtype=np.float64),
                                        episode.goal_yaw_rad())
        self._set_state(start, yaw_from_quat_xyzw(episode.start_rotation))
        self._steps = 0
        self._collided = False
        self._reset_odometry()
        return self._observe(self._sensors())

    # --- actions ------------------------------------------------------------------------------
    def step(self, action: Action | int | str) -> Observation:
        act = Action.parse(action)
        self._steps += 1
        before = self.agent_state
        if act == Action.STOP:
            sensors = self._sensors()
            self._collided = False
        else:
            sensors = self._sim.step(ACTION_NAMES[act])
            self._collided = bool(sensors.get("collided", False))
        after = self.agent_state
        fwd, left, dyaw = body_motion(before.position, before.yaw_rad, after.position, after.yaw_rad)
        self._odom = apply_odometry(self._odom, fwd, left, dyaw, self.config, self._rng)
        return self._observe(sensors)

    def step_velocity(self, v_mps: float, w_radps: float, dt_s: float) -> Observation:
        check_velocity_command(v_mps, w_radps, dt_s)
        self._steps += 1
        before = self.agent_state
        yaw = wrap_angle(before.yaw_rad + w_radps * dt_s)
        end = before.position
        self._collided = False
        if v_mps != 0.0:
            # straight chord of the arc (heading at mid-turn); try_step slides along obstacles like habitat's
            # own move filter, and a shortened move counts as a collision, as in habitat's step filter
            target = before.position + v_mps * dt_s * heading_habitat(before.yaw_rad + 0.5 * w_radps * dt_s)
            end = np.asarray(list(self._sim.pathfinder.try_step(_vec3(before.position), _vec3(target))),
                             dtype=np.float64)
            wanted = float(np.hypot(*(target - before.position)[[0, 2]]))
            moved = float(np.hypot(*(end - before.position)[[0, 2]]))
            self._collided = wanted - moved > COLLISION_EPS_M
        self._set_state(end, yaw)
        fwd, left, dyaw = body_motion(before.position, before.yaw_rad, end, yaw)
        self._odom = apply_odometry(self._odom, fwd, left, dyaw, self.config, self._rng)
        return self._observe(self._sensors())

    # --- queries ------------------------------------------------------------------------------
    def geodesic_distance(self, a: np.ndarray, b: np.ndarray) -> float:
        """Shortest path length from a to b, meters; b may be (N, 3) goals (distance to the nearest)."""
        ends = np.asarray(b, dtype=np.float64)
        if ends.ndim == 2:
            path = self._hs.MultiGoalShortestPath()
            path.requested_ends = [_vec3(e) for e in ends]
        else:
            path = self._hs.ShortestPath()
            path.requested_end = _vec3(ends)
        path.requested_start = _vec3(a)
        if not self._sim.pathfinder.find_path(path):
            return math.inf
        dist = float(path.geodesic_distance)
        return dist if math.isfinite(dist) else math.inf

    def shortest_path(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        path = self._hs.ShortestPath()
        path.requested_start = _vec3(a)
        path.requested_end = _vec3(b)
        if not self._sim.pathfinder.find_path(path):
            return np.zeros((0, 3))
        return path_points(path.points)

    def sample_navigable_point(self) -> np.ndarray:
        point = np.asarray(list(self._sim.pathfinder.get_random_navigable_point()), dtype=np.float64)
        if not np.all(np.isfinite(point)):
            raise RuntimeError(f"habitat-sim found no navigable point in {self._scene}")
        return point

    def is_navigable(self, point: np.ndarray) -> bool:
        return bool(self._sim.pathfinder.is_navigable(_vec3(point)))

    def render_at(self, position: np.ndarray, yaw_rad: float) -> Observation:
        saved = self._agent().get_state()
        pos = np.asarray(position, dtype=np.float64)
        self._set_state(pos, yaw_rad)
        try:
            sensors = self._sensors()
        finally:
            self._agent().set_state(saved)
        x, y, yaw = pose2d_from_habitat(pos, yaw_rad)
        return observation_from_sensors(sensors, pos, yaw_rad, Pose2D(x, y, wrap_angle(yaw)), 0, False,
                                        self.config.max_depth_m)

    @property
    def agent_state(self) -> AgentState:
        st = self._agent().get_state()
        q = quat_xyzw(st.rotation)
        return AgentState(position=np.asarray(st.position, dtype=np.float64).reshape(3), rotation=q,
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

    # --- internals ----------------------------------------------------------------------------
    def _reset_odometry(self) -> None:
        st = self.agent_state
        x, y, yaw = pose2d_from_habitat(st.position, st.yaw_rad)
        self._odom = start_odometry(Pose2D(x, y, wrap_angle(yaw)), self.config)

    def _observe(self, sensors: Mapping[str, Any]) -> Observation:
        st = self.agent_state
        return observation_from_sensors(sensors, st.position, st.yaw_rad, self._odom, self._steps,
                                        self._collided, self.config.max_depth_m)
