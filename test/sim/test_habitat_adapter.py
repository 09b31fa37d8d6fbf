"""The habitat-sim adapter: everything that does not need habitat-sim itself.

Pure functions are tested directly. The thin habitat-touching glue runs against `_FakeHabitat`, a stand-in
for the few habitat_sim names the adapter uses (one empty 10 m x 10 m room); it checks the adapter's own
logic (state handling, STOP, collisions, odometry, goal rendering), not habitat-sim.
"""
import importlib
import math
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from memnav.core.frames import heading_habitat, quat_xyzw_from_yaw
from memnav.core.types import Action, Pose2D
from memnav.sim import habitat as hab
from memnav.sim.base import SimConfig, Simulator
from memnav.sim.episodes import Episode, NavGoal
from memnav.sim.factory import make_simulator
from memnav.sim.odometry import apply_odometry, body_motion


def test_module_import_does_not_import_habitat_sim():
    sys.modules.pop("habitat_sim", None)
    importlib.reload(hab)
    assert "habitat_sim" not in sys.modules


def test_missing_habitat_sim_says_how_to_install():
    if importlib.util.find_spec("habitat_sim") is not None:
        pytest.skip("habitat-sim is installed here")
    with pytest.raises(hab.HabitatUnavailableError, match="conda") as info:
        hab.HabitatSimulator(SimConfig())
    msg = str(info.value)
    assert "conda create -n habitat python=3.9 cmake=3.14.0" in msg
    assert "conda install habitat-sim headless -c conda-forge -c aihabitat" in msg
    assert "pip" in msg and "--backend embedded" in msg
    with pytest.raises(ImportError, match="embedded"):
        make_simulator("habitat", SimConfig())


@pytest.mark.parametrize("failure, shown", [
    ("raise ImportError('libEGL.so.1: cannot open shared object file')", "ImportError: libEGL.so.1"),
    ("import magnum_not_here_for_the_test", "No module named 'magnum_not_here_for_the_test'"),
    ("raise AttributeError(\"module 'numpy' has no attribute 'float'\")", "AttributeError: module 'numpy'"),
])
def test_a_habitat_sim_that_fails_to_import_is_not_called_missing(tmp_path, monkeypatch, failure, shown):
    """An installed but broken habitat-sim (the pip wheel without magnum, no EGL) was reported as not installed
    (or, for errors other than ImportError, as a traceback)."""
    package = tmp_path / "habitat_sim"
    package.mkdir()
    (package / "__init__.py").write_text(failure + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "habitat_sim", raising=False)
    with pytest.raises(hab.HabitatUnavailableError, match="installed .*but fails to import") as info:
        hab.HabitatSimulator(SimConfig())
    msg = str(info.value)
    assert str(package / "__init__.py") in msg and shown in msg and "is not installed" not in msg
    assert "conda install habitat-sim headless" in msg


def test_unknown_backend():
    with pytest.raises(ValueError, match="'nope'.*embedded, habitat"):
        make_simulator("nope", SimConfig())


def test_sensor_action_and_navmesh_specs_follow_config():
    cfg = SimConfig(width_px=160, height_px=120, hfov_deg=79, sensor_height_m=0.88, turn_angle_deg=15,
                    agent_radius_m=0.2, agent_height_m=1.2, max_climb_m=0.1, navmesh_cell_m=0.03)
    specs = hab.sensor_specs(cfg, semantic=True)
    assert [s["uuid"] for s in specs] == ["color", "depth", "semantic"]
    assert all(s["resolution"] == [120, 160] and s["position"] == [0.0, 0.88, 0.0] and s["hfov"] == 79 for s in specs)
    assert [s["uuid"] for s in hab.sensor_specs(cfg, semantic=False)] == ["color", "depth"]
    # a camera ahead of the agent: habitat-sim agents look along -Z
    spec = hab.sensor_specs(SimConfig(sensor_forward_m=0.15, sensor_pitch_deg=20.0), semantic=False)[0]
    assert spec["position"] == [0.0, 1.25, -0.15]
    assert spec["orientation"] == pytest.approx([-math.radians(20.0), 0.0, 0.0])   # looking down: about -x
    acts = hab.action_space_spec(cfg)
    assert acts["move_forward"] == ("move_forward", 0.25)
    assert acts["turn_left"] == ("turn_left", 15) and acts["turn_right"] == ("turn_right", 15)
    assert hab.navmesh_spec(cfg) == {"agent_radius": 0.2, "agent_height": 1.2, "agent_max_climb": 0.1,
                                     "cell_size": 0.03}


@pytest.mark.parametrize("env, gpu, expected", [
    ({}, False, -1),
    ({}, True, 0),
    ({"HSIM_DISABLE_CUDA_DEVICE": "1"}, True, -1),
    ({"HSIM_DISABLE_CUDA_DEVICE": "0"}, True, 0),
    ({"CUDA_VISIBLE_DEVICES": ""}, True, -1),
    ({"CUDA_VISIBLE_DEVICES": "1"}, True, 0),
])
def test_gpu_device_id(env, gpu, expected):
    assert hab.choose_gpu_device_id(env, gpu) == expected


def test_semantic_assets_by_convention(tmp_path):
    mp3d = tmp_path / "mp3d" / "17DR"
    mp3d.mkdir(parents=True)
    (mp3d / "17DR.glb").write_bytes(b"x")
    assert hab.semantic_mesh_for(mp3d / "17DR.glb") is None
    (mp3d / "17DR_semantic.ply").write_bytes(b"x")
    assert hab.semantic_mesh_for(mp3d / "17DR.glb") == mp3d / "17DR_semantic.ply"
    assert hab.uses_semantic_sensor(mp3d / "17DR.glb", None)

    hm3d = tmp_path / "hm3d" / "val" / "00800-TEE"
    hm3d.mkdir(parents=True)
    (hm3d / "TEE.basis.glb").write_bytes(b"x")
    (hm3d / "TEE.semantic.glb").write_bytes(b"x")
    assert hab.semantic_mesh_for(hm3d / "TEE.basis.glb") == hm3d / "TEE.semantic.glb"
    assert hab.find_scene_dataset_config(hm3d / "TEE.basis.glb") is None
    assert not hab.uses_semantic_sensor(hm3d / "TEE.basis.glb", None)   # HM3D semantics need the dataset config
    cfg = tmp_path / "hm3d" / "hm3d_annotated_basis.scene_dataset_config.json"
    cfg.write_text("{}")
    assert hab.find_scene_dataset_config(hm3d / "TEE.basis.glb") == cfg
    assert hab.uses_semantic_sensor(hm3d / "TEE.basis.glb", cfg)


def test_quaternion_and_path_point_conversions():
    q = quat_xyzw_from_yaw(0.7)
    numpy_quaternion_like = SimpleNamespace(x=q[0], y=q[1], z=q[2], w=q[3])
    magnum_like = SimpleNamespace(vector=(q[0], q[1], q[2]), scalar=q[3])
    for rot in (numpy_quaternion_like, magnum_like, list(q)):
        np.testing.assert_allclose(hab.quat_xyzw(rot), q)
    pts = hab.path_points([np.array([1.0, 0.0, 2.0], dtype=np.float32), (3.0, 0.5, 4.0)])
    assert pts.dtype == np.float64 and pts.tolist() == [[1.0, 0.0, 2.0], [3.0, 0.5, 4.0]]
    assert hab.path_points([]).shape == (0, 3)


def test_observation_conversion():
    rgba = np.zeros((4, 6, 4), dtype=np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = 255
    depth = np.full((4, 6), 3.0, dtype=np.float32)
    depth[0, 0] = np.inf
    depth[0, 1] = 25.0
    sem = np.full((4, 6), 7, dtype=np.uint32)
    obs = hab.observation_from_sensors({"color": rgba, "depth": depth[..., None], "semantic": sem, "collided": True},
                                       np.array([1.0, 0.0, -2.0]), 0.5, Pose2D(0, 0, 0), 3, False, 10.0)
    assert obs.rgb.shape == (4, 6, 3) and obs.rgb.dtype == np.uint8 and np.all(obs.rgb[..., 0] == 200)
    assert obs.depth.dtype == np.float32 and obs.depth.shape == (4, 6)
    assert obs.depth[0, 0] == 0.0 and obs.depth[0, 1] == 10.0 and obs.depth[2, 2] == 3.0
    assert obs.semantic.dtype == np.int32 and np.all(obs.semantic == 7)
    assert obs.gt_pose.x_m == pytest.approx(2.0) and obs.gt_pose.y_m == pytest.approx(-1.0)
    assert obs.gt_pose.yaw_rad == pytest.approx(0.5) and obs.step == 3 and not obs.collided
    with pytest.raises(ValueError, match="colour"):
        hab.rgba_to_rgb(np.zeros((4, 4)))
    with pytest.raises(KeyError, match="depth"):
        hab.observation_from_sensors({"color": rgba}, np.zeros(3), 0.0, Pose2D(0, 0, 0), 0, False, 10.0)


def test_body_motion_and_noiseless_odometry_round_trip():
    p0 = np.array([0.0, 0.0, 0.0])
    yaw0 = math.radians(30)
    p1 = p0 + 0.25 * np.array([-math.sin(yaw0), 0.0, -math.cos(yaw0)])   # one step forward
    fwd, left, dyaw = body_motion(p0, yaw0, p1, yaw0)
    assert fwd == pytest.approx(0.25) and left == pytest.approx(0.0, abs=1e-12) and dyaw == 0.0
    odom = apply_odometry(Pose2D(0, 0, yaw0), fwd, left, dyaw, SimConfig(), np.random.default_rng(0))
    assert odom.x_m == pytest.approx(0.25 * math.cos(yaw0)) and odom.y_m == pytest.approx(0.25 * math.sin(yaw0))


# --- the glue, on a stand-in for habitat_sim ------------------------------------------------------------
class _Settable:
    """Any attribute can be set (like habitat's spec/config objects)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class _NavMeshSettings(_Settable):
    def set_defaults(self):
        self.cell_size, self.agent_radius, self.agent_height, self.agent_max_climb = 0.05, 0.1, 1.5, 0.2


class _PathFinder:
    """An empty room x, z in [-5, 5] on the floor y = 0."""

    lo, hi = -5.0, 5.0

    def __init__(self):
        self.is_loaded = False
        self.seeded = None

    def seed(self, s):
        self.seeded = s

    def is_navigable(self, p):
        p = np.asarray(p, dtype=np.float64)
        return bool(abs(p[1]) < 0.5 and self.lo <= p[0] <= self.hi and self.lo <= p[2] <= self.hi)

    def snap_point(self, p):
        p = np.asarray(p, dtype=np.float64)
        return np.array([np.clip(p[0], self.lo, self.hi), 0.0, np.clip(p[2], self.lo, self.hi)], dtype=np.float32)

    def try_step(self, a, b):   # slides: clamps the target into the room
        return self.snap_point(b)

    def get_random_navigable_point(self):
        return np.array([1.0, 0.0, 2.0], dtype=np.float32)

    def find_path(self, path):
        ends = path.requested_ends if hasattr(path, "requested_ends") else [path.requested_end]
        start = np.asarray(path.requested_start, dtype=np.float64)
        ok = [np.asarray(e, dtype=np.float64) for e in ends if self.is_navigable(e)]
        if not self.is_navigable(start) or not ok:
            path.geodesic_distance = math.inf
            return False
        end = min(ok, key=lambda e: np.linalg.norm(e - start))
        path.geodesic_distance = float(np.linalg.norm(end - start))
        path.points = [start.astype(np.float32), end.astype(np.float32)]
        return True


class _Agent:
    def __init__(self):
        self.position = np.zeros(3)
        self.rotation = np.array([0.0, 0.0, 0.0, 1.0])

    def get_state(self):
        q = self.rotation
        return _Settable(position=self.position.astype(np.float32), rotation=_Settable(x=q[0], y=q[1], z=q[2], w=q[3]))

    def set_state(self, state):
        self.position = np.asarray(state.position, dtype=np.float64)
        self.rotation = hab.quat_xyzw(state.rotation)


class _Sim:
    instances = 0

    def __init__(self, cfg):
        _Sim.instances += 1
        self.cfg, self.pathfinder, self.agent = cfg, _PathFinder(), _Agent()
        self.reconfigured, self.navmesh_settings, self.closed = 0, None, False

    def reconfigure(self, cfg):
        self.cfg, self.reconfigured = cfg, self.reconfigured + 1

    def recompute_navmesh(self, pathfinder, settings):
        self.navmesh_settings = settings
        pathfinder.is_loaded = True
        return True

    def get_agent(self, i):
        return self.agent

    def get_sensor_observations(self):
        h, w = self.cfg.agents[0].sensor_specifications[0].resolution
        p = self.agent.position
        color = np.zeros((h, w, 4), dtype=np.uint8)
        color[..., 0] = int(round((p[0] + 5) * 10))   # encodes where the camera was
        color[..., 1] = int(round((p[2] + 5) * 10))
        return {"color": color, "depth": np.full((h, w), 2.0, dtype=np.float32)}

    def step(self, name):
        amount = self.cfg.agents[0].action_space[name].actuation.amount
        yaw = hab.yaw_from_quat_xyzw(self.agent.rotation)
        collided = False
        if name == "move_forward":
            target = self.agent.position + amount * heading_habitat(yaw)
            end = np.asarray(self.pathfinder.try_step(self.agent.position, target), dtype=np.float64)
            collided = bool(np.linalg.norm(end - target) > 1e-6)
            self.agent.position = end
        else:
            sign = 1.0 if name == "turn_left" else -1.0
            self.agent.rotation = quat_xyzw_from_yaw(yaw + sign * math.radians(amount))
        obs = self.get_sensor_observations()
        obs["collided"] = collided
        return obs

    def close(self):
        self.closed = True


def _fake_habitat() -> SimpleNamespace:
    return SimpleNamespace(
        SimulatorConfiguration=_Settable, CameraSensorSpec=_Settable,
        SensorType=SimpleNamespace(COLOR="COLOR", DEPTH="DEPTH", SEMANTIC="SEMANTIC"),
        SensorSubType=SimpleNamespace(PINHOLE="PINHOLE"),
        agent=SimpleNamespace(ActionSpec=lambda name, actuation: _Settable(name=name, actuation=actuation),
                              ActuationSpec=_Settable, AgentConfiguration=_Settable),
        Configuration=lambda sim_cfg, agents: _Settable(sim_cfg=sim_cfg, agents=agents),
        NavMeshSettings=_NavMeshSettings, AgentState=_Settable, ShortestPath=_Settable,
        MultiGoalShortestPath=_Settable, Simulator=_Sim)


@pytest.fixture
def fake_habitat(monkeypatch):
    """`import habitat_sim` gives the stand-in, for the adapter and for whatever builds it (make_simulator)."""
    monkeypatch.setitem(sys.modules, "habitat_sim", _fake_habitat())
    monkeypatch.setenv("HSIM_DISABLE_CUDA_DEVICE", "1")


@pytest.fixture
def fake_sim(tmp_path, fake_habitat):
    scenes = [tmp_path / "a.glb", tmp_path / "b.glb"]
    for s in scenes:
        s.write_bytes(b"x")
    cfg = SimConfig(width_px=8, height_px=6, hfov_deg=70, sensor_height_m=0.9, agent_radius_m=0.2, seed=5)
    sim = hab.HabitatSimulator(cfg)
    yield sim, scenes
    sim.close()


def _episode(scene: Path, start=(0.0, 0.0, 0.0), yaw=0.0) -> Episode:
    return Episode(episode_id="e1", scene_id=scene.name, start_position=np.array(start),
                   start_rotation=quat_xyzw_from_yaw(yaw),
                   goals=[NavGoal(np.array([2.0, 0.0, -3.0]), rotation=quat_xyzw_from_yaw(1.0))],
                   scene_path=scene)


def test_glue_builds_the_configuration_and_navmesh(fake_sim):
    sim, scenes = fake_sim
    sim.reset(_episode(scenes[0]))
    assert isinstance(sim, Simulator)
    backend = sim._sim
    sim_cfg, agent_cfg = backend.cfg.sim_cfg, backend.cfg.agents[0]
    assert sim_cfg.scene_id == str(scenes[0].resolve()) and sim_cfg.gpu_device_id == -1
    assert sim_cfg.enable_physics is False and sim_cfg.load_semantic_mesh is False and sim_cfg.random_seed == 5
    assert [s.uuid for s in agent_cfg.sensor_specifications] == ["color", "depth"]
    color = agent_cfg.sensor_specifications[0]
    assert color.resolution == [6, 8] and color.position == [0.0, 0.9, 0.0] and color.hfov == 70.0
    assert agent_cfg.radius == 0.2 and agent_cfg.height == 1.5
    assert agent_cfg.action_space["turn_left"].actuation.amount == 30.0
    nav = backend.navmesh_settings
    assert (nav.agent_radius, nav.agent_height, nav.cell_size) == (0.2, 1.5, 0.05)
    assert backend.pathfinder.seeded == 5
    # same scene: nothing reloaded; another scene: the one simulator is reconfigured
    sim.reset(_episode(scenes[0]))
    assert backend.reconfigured == 0
    sim.reset(_episode(scenes[1]))
    assert sim._sim is backend and backend.reconfigured == 1 and backend.cfg.sim_cfg.scene_id.endswith("b.glb")


def test_glue_reset_step_and_goal_view(fake_sim):
    sim, scenes = fake_sim
    obs = sim.reset(_episode(scenes[0], start=(0.0, 0.0, 0.0), yaw=0.0))
    assert obs.step == 0 and obs.rgb.shape == (6, 8, 3) and obs.gt_pose == obs.pose
    goal = sim.goal_observation
    assert goal.gt_pose.yaw_rad == pytest.approx(1.0)
    assert goal.rgb[0, 0, 0] == 70 and goal.rgb[0, 0, 1] == 20      # rendered at the goal (x=2, z=-3) ...
    np.testing.assert_allclose(sim.agent_state.position, [0, 0, 0])  # ... and the agent put back

    obs = sim.step("move_forward")
    np.testing.assert_allclose(sim.agent_state.position, [0, 0, -0.25], atol=1e-6)
    assert obs.gt_pose.x_m == pytest.approx(0.25) and obs.pose.x_m == pytest.approx(0.25) and not obs.collided
    obs = sim.step(Action.TURN_LEFT)
    assert obs.gt_pose.yaw_rad == pytest.approx(math.radians(30))
    assert obs.pose.yaw_rad == pytest.approx(math.radians(30))
    before = sim.agent_state
    obs = sim.step(0)   # STOP does not move
    np.testing.assert_allclose(sim.agent_state.position, before.position)
    assert obs.step == 3 and sim.steps == 3


def test_glue_collisions_and_velocity_commands(fake_sim):
    sim, scenes = fake_sim
    sim.reset(_episode(scenes[0], start=(0.0, 0.0, -4.9), yaw=0.0))   # facing the wall at z = -5
    assert sim.step(Action.MOVE_FORWARD).collided                      # habitat's "collided" flag is used
    assert sim.agent_state.position[2] == pytest.approx(-5.0)
    sim.reset(_episode(scenes[0], start=(0.0, 0.0, -4.9), yaw=math.radians(45)))
    obs = sim.step_velocity(0.5, 0.0, 1.0)                             # slides along the wall
    p = sim.agent_state.position
    assert obs.collided and p[2] == pytest.approx(-5.0) and p[0] < -0.3
    obs = sim.step_velocity(0.0, 0.5, 1.0)                             # turning in place
    assert not obs.collided and obs.gt_pose.yaw_rad == pytest.approx(math.radians(45) + 0.5)
    with pytest.raises(ValueError, match="dt_s"):
        sim.step_velocity(0.1, 0.0, 0.0)


def test_glue_queries_and_bad_start(fake_sim):
    sim, scenes = fake_sim
    sim.reset(_episode(scenes[0]))
    a, b = np.array([0.0, 0.0, 0.0]), np.array([3.0, 0.0, 4.0])
    assert sim.geodesic_distance(a, b) == pytest.approx(5.0)
    assert sim.geodesic_distance(a, np.array([[3.0, 0.0, 4.0], [1.0, 0.0, 0.0]])) == pytest.approx(1.0)
    assert sim.geodesic_distance(a, np.array([9.0, 0.0, 0.0])) == math.inf
    assert sim.shortest_path(a, b).tolist() == [[0, 0, 0], [3, 0, 4]]
    assert sim.shortest_path(a, np.array([9.0, 0.0, 0.0])).shape == (0, 3)
    assert sim.is_navigable(b) and not sim.is_navigable(np.array([9.0, 0.0, 0.0]))
    assert sim.sample_navigable_point().tolist() == [1.0, 0.0, 2.0]
    sim.reset(_episode(scenes[0], start=(5.1, 0.0, 0.0)))              # just off the area: snapped onto it
    assert sim.agent_state.position[0] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="e1.*not on the navigable area"):
        sim.reset(_episode(scenes[0], start=(7.0, 0.0, 0.0)))
    sim.load_scene(scenes[1])
    np.testing.assert_allclose(sim.agent_state.position, [1.0, 0.0, 2.0])


def test_glue_bad_start_raises_the_error_every_backend_raises(fake_sim):
    """The habitat backend raised a plain ValueError for a start off the navmesh, which `memnav eval` does not take
    for an unrunnable episode; it raises the embedded simulator's StartNotNavigableError, now shared in base."""
    from memnav.sim import base, embedded

    assert embedded.StartNotNavigableError is base.StartNotNavigableError   # old imports keep working
    assert embedded.OffFloorError is base.OffFloorError
    sim, scenes = fake_sim
    with pytest.raises(base.StartNotNavigableError, match=r"e1 \(a.glb\): start_position \[7.0, 0.0, 0.0\] is not on"):
        sim.reset(_episode(scenes[0], start=(7.0, 0.0, 0.0)))


def test_eval_skips_unrunnable_episodes_on_the_habitat_backend(fake_habitat, tmp_path, capsys):
    """With --backend habitat, an episode whose start is off the navmesh ended the whole run with a ValueError
    (the embedded backend's run skips it). It is skipped with a warning, as is one whose goal is on a floor no path
    reaches (habitat maps every floor: the goal is unreachable, not off the floor), and the run goes on."""
    from memnav.eval.agents import ForwardAgent
    from memnav.eval.evaluate import run_episodes
    from memnav.sim.metrics import EpisodeResult, SkippedEpisode

    scene = tmp_path / "a.glb"
    scene.write_bytes(b"x")
    off_start = replace(_episode(scene, start=(7.0, 0.0, 0.0)), episode_id="off_start")
    upstairs = replace(_episode(scene), episode_id="upstairs",
                       goals=[NavGoal(np.array([2.0, 3.0, -3.0]), rotation=quat_xyzw_from_yaw(0.0))])
    episodes = [_episode(scene), off_start, upstairs, replace(_episode(scene), episode_id="e4")]
    cfg = SimConfig(width_px=8, height_px=6, max_episode_steps=4)
    out = run_episodes(ForwardAgent(), episodes, cfg, backend="habitat", progress=False)
    assert [(type(o), o.episode_id) for o in out] == [(EpisodeResult, "e1"), (SkippedEpisode, "off_start"),
                                                      (SkippedEpisode, "upstairs"), (EpisodeResult, "e4")]
    assert "start_position [7.0, 0.0, 0.0] is not on the navigable area" in out[1].reason
    assert "the goal [2.0, 3.0, -3.0] is unreachable from the start" in out[2].reason
    assert all(o.steps == 4 for o in (out[0], out[3]))
    err = capsys.readouterr().err
    assert "episode off_start (a.glb)" in err and "episode upstairs (a.glb)" in err and err.count("is skipped") == 2
