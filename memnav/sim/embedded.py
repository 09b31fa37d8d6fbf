"""The embedded simulator: any triangle-mesh scene, ray cast on the CPU, Habitat ImageNav actions.

No GPU, no habitat-sim: a CPU ray caster renders RGB-D(-semantic) views (memnav.sim.render: object-order
for small meshes, open3d's Embree BVH for large ones), a navigable grid
computed from the mesh gives collisions (the agent is a cylinder that slides along obstacles),
geodesic distances and shortest paths.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memnav.core.frames import heading_habitat, pose2d_from_habitat, quat_xyzw_from_yaw, yaw_from_quat_xyzw
from memnav.core.types import Action, Observation, Pose2D, wrap_angle
from memnav.sim.base import AgentState, OffFloorError, SimConfig, StartNotNavigableError
from memnav.sim.mesh import SceneLoadError, SceneMesh, load_scene_mesh
from memnav.sim.navmesh import NavGrid, NavGridConfig
from memnav.sim.odometry import apply_odometry, body_motion, check_velocity_command, start_odometry
from memnav.sim.render import Camera, RayCaster

if TYPE_CHECKING:
    from memnav.sim.episodes import Episode

# StartNotNavigableError and OffFloorError live in memnav.sim.base, as every backend raises them; importing them
# from here keeps working
START_SNAP_M = 0.2  # a start within this distance of the navigable area is moved onto it
GOAL_SNAP_M = 0.5   # geodesic distances to a goal start from the navigable cell this close to it (NavGrid.snap)
SUBSTEP_M = 0.02    # collision checks along a motion every this many meters
MAX_NAVGRID_CELLS = 10_000_000  # about 1 kB each while the grid is built: 10 GB; 158 m x 158 m at 5 cm


def navgrid_cells(mesh: SceneMesh, cell_m: float) -> int:
    """How many cells the navigable grid of `mesh` has at `cell_m` (NavGrid's shape: the mesh's x-z bounds plus a
    cell of margin on each side)."""
    lo, hi = mesh.bounds
    return (int(math.ceil((hi[2] - lo[2]) / cell_m)) + 3) * (int(math.ceil((hi[0] - lo[0]) / cell_m)) + 3)


class _LoadedScene:
    """Everything built once per scene file: mesh, ray caster, navigable grid."""

    def __init__(self, path: Path, config: SimConfig) -> None:
        self.path = path
        self.mesh: SceneMesh = load_scene_mesh(path)
        self.caster = RayCaster(self.mesh, config.renderer, config.render_threads)
        self.has_semantics = self.mesh.has_semantics  # a scan over every face: once per scene, not per frame
        cells = navgrid_cells(self.mesh, config.navmesh_cell_m)
        if cells > MAX_NAVGRID_CELLS:
            lo, hi = self.mesh.bounds
            raise SceneLoadError(
                f"{path}: the scene spans {hi[0] - lo[0]:.1f} m x {hi[2] - lo[2]:.1f} m (x from {lo[0]:.1f} to "
                f"{hi[0]:.1f}, z from {lo[2]:.1f} to {hi[2]:.1f}), a navigable grid of {cells:,} cells at "
                f"{config.navmesh_cell_m:g} m (at most {MAX_NAVGRID_CELLS:,}): remove stray far-away geometry from "
                f"the mesh, or coarsen SimConfig.navmesh_cell_m")
        self.grid = NavGrid(self.mesh, self.caster, NavGridConfig(
            cell_m=config.navmesh_cell_m, agent_radius_m=config.agent_radius_m,
            agent_height_m=config.agent_height_m, max_climb_m=config.max_climb_m))


class EmbeddedSimulator:
    """CPU simulator implementing memnav.sim.base.Simulator on a mesh scene."""

    def __init__(self, scene_path: Path | str | None = None, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self._rng = np.random.default_rng(self.config.seed)
        self._camera = Camera(self.config.width_px, self.config.height_px, self.config.hfov_deg,
                              self.config.sensor_pitch_deg)
        self._scenes: dict[Path, _LoadedScene] = {}
        self._scene: _LoadedScene | None = None
        self._position = np.zeros(3)
        self._yaw = 0.0
        self._odom = Pose2D(0.0, 0.0, 0.0)
        self._steps = 0
        self._collided = False
        self._goal_obs: Observation | None = None
        if scene_path is not None:
            self.load_scene(scene_path)

    # --- scene --------------------------------------------------------------------------------
    def load_scene(self, scene_path: Path | str) -> None:
        """Load (or reuse) a scene and place the agent at a random navigable point."""
        self._use_scene(Path(scene_path).resolve())
        self._position = self.sample_navigable_point()
        self._yaw = 0.0

    def _use_scene(self, path: Path) -> None:
        """Make `path` the current scene, building it on first use and reusing it after."""
        if path not in self._scenes:
            self._scenes[path] = _LoadedScene(path, self.config)
        self._scene = self._scenes[path]

    @property
    def scene(self) -> _LoadedScene:
        if self._scene is None:
            raise RuntimeError("no scene loaded: call load_scene(path) or reset(episode) first")
        return self._scene

    @property
    def grid(self) -> NavGrid:
        return self.scene.grid

    # --- episode ------------------------------------------------------------------------------
    def reset(self, episode: Episode) -> Observation:
        from memnav.sim.episodes import require_scene

        self._use_scene(require_scene(episode).resolve())
        start = np.asarray(episode.start_position, dtype=np.float64)
        if not self.grid.is_navigable(start):
            cell = self.grid.snap(start, START_SNAP_M)
            if cell is None:
                raise StartNotNavigableError(
                    f"episode {episode.episode_id} ({episode.scene_id}): start_position {start.tolist()} "
                    f"is not on the navigable area (nothing navigable within {START_SNAP_M} m)")
            self._check_on_floor(episode, "start_position", start, cell)
            start = self.grid.cell_center(*cell)
        for j, goal in enumerate(episode.goals):
            cell = self.grid.snap(goal.position, GOAL_SNAP_M)
            if cell is not None:   # None: unreachable, which the episode's bookkeeping reports
                self._check_on_floor(episode, f"goals[{j}].position", goal.position, cell)
        self._position = start.copy()
        self._position[1] = self.grid.height_at(start)
        self._yaw = yaw_from_quat_xyzw(episode.start_rotation)
        self._steps = 0
        self._collided = False
        self._odom = start_odometry(self._gt_pose(), self.config)
        goal = np.asarray(episode.goal.position, dtype=np.float64)
        self._goal_obs = self.render_at(goal, episode.goal_yaw_rad())
        return self._observe()

    def step(self, action: Action | int | str) -> Observation:
        act = Action.parse(action)
        self._steps += 1
        self._collided = False
        if act == Action.MOVE_FORWARD:
            self._translate(self.config.forward_step_m)
        elif act == Action.TURN_LEFT:
            self._rotate(self.config.turn_angle_rad)
        elif act == Action.TURN_RIGHT:
            self._rotate(-self.config.turn_angle_rad)
        return self._observe()

    def step_velocity(self, v_mps: float, w_radps: float, dt_s: float) -> Observation:
        check_velocity_command(v_mps, w_radps, dt_s)
        self._steps += 1
        self._collided = False
        n = max(1, int(math.ceil(abs(v_mps) * dt_s / SUBSTEP_M)), int(math.ceil(abs(w_radps) * dt_s / 0.05)))
        for _ in range(n):
            self._rotate(w_radps * dt_s / n)
            self._translate(v_mps * dt_s / n)
        return self._observe()

    # --- queries ------------------------------------------------------------------------------
    def geodesic_distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return self.grid.geodesic_distance(a, b)

    def shortest_path(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.grid.shortest_path(a, b)

    def sample_navigable_point(self) -> np.ndarray:
        return self.grid.sample(self._rng)

    def is_navigable(self, point: np.ndarray) -> bool:
        return self.grid.is_navigable(point)

    def render_at(self, position: np.ndarray, yaw_rad: float) -> Observation:
        pos = np.asarray(position, dtype=np.float64)
        frame = self._render(pos, yaw_rad)
        x, y, yaw = pose2d_from_habitat(pos, yaw_rad)
        pose = Pose2D(x, y, wrap_angle(yaw))
        return Observation(rgb=frame.rgb, depth=frame.depth, pose=pose, step=0, gt_pose=pose,
                           semantic=frame.semantic)

    @property
    def agent_state(self) -> AgentState:
        return AgentState(position=self._position.copy(), rotation=quat_xyzw_from_yaw(self._yaw),
                          yaw_rad=self._yaw)

    @property
    def goal_observation(self) -> Observation | None:
        return self._goal_obs

    @property
    def steps(self) -> int:
        return self._steps

    def set_agent_pose(self, position: np.ndarray, yaw_rad: float) -> None:
        """Teleport the agent (used by data generation); odometry restarts there (`SimConfig.odometry_origin`)."""
        pos = np.asarray(position, dtype=np.float64)
        if not self.grid.is_navigable(pos):
            raise ValueError(f"set_agent_pose: position {pos.tolist()} is not navigable")
        self._position = pos.copy()
        self._yaw = float(yaw_rad)
        self._odom = start_odometry(self._gt_pose(), self.config)

    def close(self) -> None:
        self._scenes.clear()
        self._scene = None

    # --- internals ----------------------------------------------------------------------------
    def _check_on_floor(self, episode: Episode, field_name: str, point: np.ndarray, cell: tuple[int, int]) -> None:
        """Refuse a point whose height is off the mapped floor at its nearest navigable cell (the grid is one floor:
        snapped in x-z only, a start or goal upstairs would silently land on the floor below)."""
        p = np.asarray(point, dtype=np.float64)
        floor_y = float(self.grid.floor_y[cell])
        tolerance_m = self.config.max_climb_m + 0.5   # as NavGrid.is_navigable
        if abs(p[1] - floor_y) > tolerance_m:
            raise OffFloorError(
                f"episode {episode.episode_id} ({episode.scene_id}): {field_name} {p.tolist()} is "
                f"{p[1] - floor_y:+.2f} m off the floor the embedded simulator maps there (y = {floor_y:.2f}; "
                f"at most {tolerance_m:g} m allowed): it maps one floor per scene, the lowest large one; "
                "episodes on other floors need --backend habitat")

    def _render(self, position: np.ndarray, yaw_rad: float):
        eye = (position + np.array([0.0, self.config.sensor_height_m, 0.0])
               + heading_habitat(yaw_rad) * self.config.sensor_forward_m)
        return self.scene.caster.render(eye[None], np.array([yaw_rad]), self._camera,
                                        max_depth_m=self.config.max_depth_m,
                                        semantic=self.scene.has_semantics)[0]

    def _gt_pose(self) -> Pose2D:
        x, y, yaw = pose2d_from_habitat(self._position, self._yaw)
        return Pose2D(x, y, wrap_angle(yaw))

    def _observe(self) -> Observation:
        frame = self._render(self._position, self._yaw)
        return Observation(rgb=frame.rgb, depth=frame.depth, pose=self._odom, step=self._steps,
                           gt_pose=self._gt_pose(), semantic=frame.semantic, collided=self._collided)

    def _rotate(self, angle_rad: float) -> None:
        self._yaw = wrap_angle(self._yaw + angle_rad)
        if angle_rad != 0.0:
            self._odom = apply_odometry(self._odom, 0.0, 0.0, angle_rad, self.config, self._rng)

    def _translate(self, distance_m: float) -> None:
        """Move along the heading, sliding along obstacles; records a collision when blocked."""
        if distance_m == 0.0:
            return
        grid = self.grid
        n = max(1, int(math.ceil(abs(distance_m) / SUBSTEP_M)))
        step = heading_habitat(self._yaw) * (distance_m / n)
        start = self._position.copy()
        pos = start.copy()
        for _ in range(n):
            cand = pos + step
            if grid.is_navigable(cand):
                pos = cand
                continue
            self._collided = True
            # slide: keep the larger axis-aligned component that stays navigable
            slides = [pos + np.array([step[0], 0.0, 0.0]), pos + np.array([0.0, 0.0, step[2]])]
            slides.sort(key=lambda p: -float(np.hypot(*(p - pos)[[0, 2]])))
            for cand in slides:
                if np.hypot(*(cand - pos)[[0, 2]]) > 1e-6 and grid.is_navigable(cand):
                    pos = cand
                    break
            else:
                break
        pos[1] = grid.height_at(pos)
        self._position = pos
        fwd, left, _ = body_motion(start, self._yaw, pos, self._yaw)
        self._odom = apply_odometry(self._odom, fwd, left, 0.0, self.config, self._rng)

