"""The embedded simulator on a tiny two-room scene written by the fixture (see test/conftest.py)."""
import math

import numpy as np
import pytest

from memnav.core.types import Action
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator
from memnav.sim.mesh import SceneLoadError, frame_rotation, load_scene_mesh


@pytest.fixture
def sim(two_room_scene):
    s = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    yield s
    s.close()


def test_navigable_area_respects_walls_radius_and_door(sim):
    grid = sim.grid
    assert grid.floor_height_m == pytest.approx(0.0, abs=1e-6)
    assert sim.is_navigable(np.array([2.0, 0.0, 3.0]))
    assert sim.is_navigable(np.array([4.0, 0.0, 2.0]))         # in the door opening
    assert not sim.is_navigable(np.array([4.0, 0.0, 3.2]))     # inside the middle wall
    assert not sim.is_navigable(np.array([0.1, 0.0, 2.0]))     # within the radius of the outer wall
    assert not sim.is_navigable(np.array([1.3, 0.0, 1.3]))     # inside the box
    assert not sim.is_navigable(np.array([1.3, 0.0, 1.75]))    # within 0.18 m of the box
    assert sim.is_navigable(np.array([1.3, 0.0, 1.85]))
    # two 4 x 4 m rooms less a clearance band and the box
    assert 23.0 < grid.navigable_area_m2 < 27.5
    assert grid.num_components == 1


def test_geodesic_goes_through_the_door(sim):
    a, b = np.array([1.0, 0.0, 3.0]), np.array([7.0, 0.0, 3.0])
    # through the door corner at z = 2.5 - 0.18: two straight legs
    expected = 2 * math.hypot(3.0, 3.0 - (2.5 - 0.18))
    assert sim.geodesic_distance(a, b) == pytest.approx(expected, rel=0.01)
    assert sim.geodesic_distance(a, a + [0.5, 0, 0]) == pytest.approx(0.5, abs=0.03)
    path = sim.shortest_path(a, b)
    assert np.allclose(path[0], a) and np.allclose(path[-1], b)
    length = np.sum(np.linalg.norm(np.diff(path[:, [0, 2]], axis=0), axis=1))
    assert length == pytest.approx(expected, rel=0.02)
    for p, q in zip(path[:-1], path[1:]):
        assert sim.grid.line_of_sight(p, q)


def test_geodesic_does_not_depend_on_what_was_asked_before(two_room_scene):
    """Two targets in one grid cell each get their own distance field (a field cached by cell made the second
    target's distances those of the first, so an episode's metrics depended on the episodes run before it)."""
    a = np.array([1.0, 0.0, 3.0])
    first, second = np.array([7.0, 0.0, 3.0]), np.array([7.015, 0.0, 3.015])
    fresh = EmbeddedSimulator(two_room_scene)
    assert fresh.grid.to_cell(first) == fresh.grid.to_cell(second)
    alone = fresh.geodesic_distance(a, second)
    after = EmbeddedSimulator(two_room_scene)
    after.geodesic_distance(a, first)
    assert after.geodesic_distance(a, second) == alone
    assert after.geodesic_distance(a, first) != alone   # the two targets are told apart


def test_geodesic_from_a_cell_joined_only_diagonally(sim):
    """Components are 8-connected while the fast march is 4-connected: a target cell whose four side
    neighbours are blocked still gets a field (it used to raise 'no zero contour')."""
    from scipy import ndimage

    grid = sim.grid
    r, c = grid.to_cell(np.array([2.0, 0.0, 3.0]))
    grid.navigable[r - 1:r + 2, c - 1:c + 2] = False
    grid.navigable[r, c] = grid.navigable[r + 1, c + 1] = True   # joined to the room through one corner
    grid.labels, grid.num_components = ndimage.label(grid.navigable, structure=np.ones((3, 3)))
    grid._fields.clear()
    target = grid.cell_center(r, c)
    assert grid.labels[r, c] == grid.labels[grid.to_cell(np.array([7.0, 0.0, 3.0]))]
    far = sim.geodesic_distance(np.array([7.0, 0.0, 3.0]), target)
    assert math.isfinite(far) and far >= math.hypot(7.0 - target[0], 3.0 - target[2])
    path = sim.shortest_path(np.array([2.5, 0.0, 3.5]), target)
    assert len(path) >= 2 and np.allclose(path[-1], target)


def test_rendering_shapes_depth_and_semantics(sim):
    sim.set_agent_pose(np.array([3.0, 0.0, 1.3]), math.pi / 2)   # looking along -X toward the box
    obs = sim.step(Action.STOP)
    assert obs.rgb.shape == (128, 128, 3) and obs.rgb.dtype == np.uint8
    assert obs.depth.shape == (128, 128) and obs.depth.dtype == np.float32
    # the box's near face is at x = 1.6, 1.4 m ahead; the centre pixel row at 1.25 m height is above it
    # (box is 0.6 m tall) so the centre sees the west wall at x = 0: depth 3.0 m along the axis
    assert obs.depth[64, 64] == pytest.approx(3.0, abs=0.03)
    # looking down at the bottom rows, the box occupies the lower middle of the image
    assert obs.semantic is not None
    assert (obs.semantic == 1).sum() > 50
    box_depth = obs.depth[obs.semantic == 1]
    assert box_depth.min() == pytest.approx(1.4, abs=0.03) and box_depth.max() < 2.05  # near face .. top
    assert obs.rgb.std() > 5


def test_depth_is_z_depth_not_ray_length(sim):
    sim.set_agent_pose(np.array([2.0, 0.0, 3.0]), math.pi / 2)    # facing the west wall at 2.0 m
    obs = sim.step(Action.TURN_LEFT)
    obs = sim.step(Action.TURN_RIGHT)
    row = obs.depth[64]
    # a flat wall facing the camera has the same z-depth across the row (sides see the side walls)
    assert np.allclose(row[45:83], 2.0, atol=0.02)


def test_actions_move_and_turn_exactly(sim):
    sim.set_agent_pose(np.array([2.0, 0.0, 2.0]), 0.0)
    obs = sim.step(Action.MOVE_FORWARD)
    assert np.allclose(sim.agent_state.position, [2.0, 0.0, 1.75])
    assert not obs.collided
    sim.step(Action.TURN_LEFT)
    assert sim.agent_state.yaw_rad == pytest.approx(math.radians(30))
    sim.step(Action.TURN_RIGHT)
    sim.step(Action.TURN_RIGHT)
    assert sim.agent_state.yaw_rad == pytest.approx(math.radians(-30))
    # map-frame pose: habitat -Z forward is map +x
    assert obs.gt_pose.x_m == pytest.approx(-1.75) and obs.gt_pose.y_m == pytest.approx(-2.0)
    with pytest.raises(ValueError, match="unknown action"):
        sim.step("FLY")


def test_agent_slides_along_walls_and_never_crosses_them(sim):
    # facing the middle wall at 45 degrees: it must slide along it, not pass through
    sim.set_agent_pose(np.array([3.6, 0.0, 3.5]), math.radians(-135))   # heading (+x, +z)
    start = sim.agent_state.position
    collided = False
    for _ in range(10):
        obs = sim.step(Action.MOVE_FORWARD)
        collided |= obs.collided
        assert sim.agent_state.position[0] < 4.0 - 0.05 - 0.17
    assert collided
    assert sim.agent_state.position[2] > start[2]   # slid along +z


def test_random_walk_stays_navigable_and_never_tunnels(sim):
    rng = np.random.default_rng(0)
    prev = sim.agent_state.position
    for _ in range(400):
        sim.step(rng.choice([Action.MOVE_FORWARD, Action.MOVE_FORWARD, Action.TURN_LEFT, Action.TURN_RIGHT]))
        pos = sim.agent_state.position
        assert sim.is_navigable(pos)
        # the straight segment between consecutive positions never crosses a surface at knee height
        d = pos - prev
        dist = float(np.linalg.norm(d))
        if dist > 1e-6:
            origin = prev + [0, 0.5, 0]
            hit = sim.scene.caster.cast(origin[None].astype(np.float32), (d / dist)[None].astype(np.float32))
            assert not hit["t_hit"][0] < dist
        prev = pos


def test_velocity_commands_integrate_unicycle(sim):
    sim.set_agent_pose(np.array([2.0, 0.0, 3.0]), 0.0)
    sim.step_velocity(0.5, 0.0, 1.0)
    assert np.allclose(sim.agent_state.position, [2.0, 0.0, 2.5], atol=1e-6)
    sim.step_velocity(0.0, math.pi / 2, 1.0)
    assert sim.agent_state.yaw_rad == pytest.approx(math.pi / 2)
    with pytest.raises(ValueError, match="dt_s"):
        sim.step_velocity(0.1, 0.0, 0.0)
    with pytest.raises(ValueError, match="v_mps"):
        sim.step_velocity(float("nan"), 0.0, 0.1)


def test_odometry_noise_drifts_but_ground_truth_does_not(two_room_scene):
    s = EmbeddedSimulator(two_room_scene, SimConfig(odom_noise_trans_std=0.05, odom_noise_rot_std=0.05, seed=1))
    s.set_agent_pose(np.array([2.0, 0.0, 3.5]), 0.0)
    for _ in range(6):
        obs = s.step(Action.MOVE_FORWARD)
    assert obs.gt_pose.x_m == pytest.approx(-3.5 + 1.5)
    err = math.hypot(obs.pose.x_m - obs.gt_pose.x_m, obs.pose.y_m - obs.gt_pose.y_m)
    assert 0 < err < 0.5


def test_odometry_from_the_start_pose_starts_at_zero_in_every_episode(two_room_scene):
    from memnav.sim.episodes import Episode, NavGoal

    s = EmbeddedSimulator(two_room_scene, SimConfig(odometry_origin="start", seed=1))
    # facing map +y (habitat yaw +90 deg): odometry's x axis is that heading, whatever the house frame says
    s.set_agent_pose(np.array([2.0, 0.0, 3.0]), math.radians(90))
    obs = s.step(Action.MOVE_FORWARD)
    assert (obs.pose.x_m, obs.pose.y_m, obs.pose.yaw_rad) == pytest.approx((0.25, 0.0, 0.0), abs=1e-9)
    assert obs.gt_pose.yaw_rad == pytest.approx(math.radians(90))
    assert obs.gt_pose.y_m == pytest.approx(-2.0 + 0.25)
    for start, yaw_xyzw in (([2.0, 0.0, 2.0], [0, 0, 0, 1.0]), ([2.5, 0.0, 3.5], [0, 0.7071068, 0, 0.7071068])):
        ep = Episode("e1", "two_rooms.glb", np.array(start), np.array(yaw_xyzw),
                     [NavGoal(np.array([2.0, 0.0, 3.0]))], scene_path=two_room_scene)
        first = s.reset(ep)
        assert (first.pose.x_m, first.pose.y_m, first.pose.yaw_rad) == (0.0, 0.0, 0.0)
        assert (first.gt_pose.x_m, first.gt_pose.y_m) == pytest.approx((-start[2], -start[0]))
    house = EmbeddedSimulator(two_room_scene, SimConfig(seed=1)).reset(ep)
    assert (house.pose.x_m, house.pose.y_m, house.pose.yaw_rad) == pytest.approx(
        (house.gt_pose.x_m, house.gt_pose.y_m, house.gt_pose.yaw_rad))


def test_scene_loading_errors(tmp_path):
    with pytest.raises(SceneLoadError, match="not found"):
        load_scene_mesh(tmp_path / "missing.glb")
    bad = tmp_path / "corrupt.glb"
    bad.write_bytes(b"glTF\x02\x00\x00\x00garbage")
    with pytest.raises(SceneLoadError, match="corrupt.glb"):
        load_scene_mesh(bad)
    with pytest.raises(SceneLoadError, match="unsupported"):
        load_scene_mesh(tmp_path / "x.txt") if (tmp_path / "x.txt").write_text("x") else None
    (tmp_path / "folder.glb").mkdir()   # was reported as "not found"
    with pytest.raises(SceneLoadError, match="folder.glb: is a directory, not a scene file"):
        load_scene_mesh(tmp_path / "folder.glb")
    (tmp_path / "empty.glb").write_bytes(b"")
    with pytest.raises(SceneLoadError, match="empty.glb: cannot read mesh"):
        load_scene_mesh(tmp_path / "empty.glb")


def test_default_frame_is_z_up_like_habitat(tmp_path):
    # a bare file without stage config is Z-up, +Y front: file z becomes world y, file y becomes -z
    rot = frame_rotation([0, 0, 1], [0, 1, 0])
    assert np.allclose(rot @ [0, 0, 1], [0, 1, 0])
    assert np.allclose(rot @ [0, 1, 0], [0, 0, -1])
    assert np.allclose(rot @ [1, 0, 0], [1, 0, 0])
    from conftest import write_two_room_scene

    z_up = write_two_room_scene(tmp_path, "bare", with_stage_config=False)
    mesh = load_scene_mesh(z_up)
    lo, hi = mesh.bounds
    # the file's Y (height 2.6 m incl. slabs) is now along -Z
    assert hi[2] - lo[2] == pytest.approx(2.7, abs=1e-3)


def test_rays_that_miss_read_zero_depth_and_black(sim):
    from memnav.sim.render import Camera

    # far above the scene, looking level: nothing to hit
    frame = sim.scene.caster.render(np.array([[4.0, 50.0, 2.0]]), np.array([0.0]), Camera(16, 16, 90.0))[0]
    assert np.all(frame.depth == 0.0) and np.all(frame.rgb == 0)


def test_start_off_navigable_area_is_named(sim, two_room_scene):
    from memnav.sim.embedded import StartNotNavigableError
    from memnav.sim.episodes import Episode, NavGoal

    ep = Episode("e7", "two_rooms.glb", np.array([4.0, 0.0, 3.2]), np.array([0, 0, 0, 1.0]),
                 [NavGoal(np.array([2.0, 0.0, 2.0]))], scene_path=two_room_scene)
    with pytest.raises(StartNotNavigableError, match="e7.*start_position"):
        sim.reset(ep)


@pytest.mark.parametrize("field, value", [("width_px", 0), ("hfov_deg", 190.0), ("agent_radius_m", -0.1),
                                          ("odom_noise_trans_std", -1.0), ("max_episode_steps", 0),
                                          ("odometry_origin", "map"), ("width_px", 100.5), ("height_px", True),
                                          ("max_episode_steps", 2.5), ("seed", -1), ("seed", 1.0)])
def test_bad_config_fields_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        SimConfig(**{field: value})


def test_a_camera_ahead_of_the_turning_axis_renders_from_there(two_room_scene):
    """SimConfig.sensor_forward_m: the view of an agent whose camera is 0.15 m ahead of it is the view of an agent
    0.15 m further on with its camera on its axis; its odometry stays at the axis (memnav.core.frames.camera_pose
    gives the camera's pose from it)."""
    from memnav.core.frames import camera_pose, habitat_position_from_map

    ahead = EmbeddedSimulator(two_room_scene, SimConfig(sensor_forward_m=0.15))
    axis = EmbeddedSimulator(two_room_scene, SimConfig())
    try:
        for yaw in (0.0, 1.0, -2.5):
            base = np.array([2.0, 0.0, 2.5])
            seen = ahead.render_at(base, yaw)
            cam = camera_pose(seen.pose, 0.15)
            assert math.hypot(cam.x_m - seen.pose.x_m, cam.y_m - seen.pose.y_m) == pytest.approx(0.15)
            there = axis.render_at(habitat_position_from_map(cam.x_m, cam.y_m, 0.0), yaw)
            np.testing.assert_allclose(seen.depth, there.depth, atol=1e-4)
            assert not np.allclose(seen.depth, axis.render_at(base, yaw).depth, atol=1e-2)   # not the axis's view
    finally:
        ahead.close()
        axis.close()
    with pytest.raises(ValueError, match="sensor_forward_m"):
        SimConfig(sensor_forward_m=float("nan"))
    # ahead of the body (agent_radius_m 0.18), the camera would pass into the walls the body touches
    with pytest.raises(ValueError, match="sensor_forward_m must be less than agent_radius_m"):
        SimConfig(sensor_forward_m=0.2)
    assert SimConfig(sensor_forward_m=0.2, agent_radius_m=0.3).sensor_forward_m == 0.2   # a larger robot


@pytest.mark.parametrize("renderer", ["object", "bvh"])
def test_a_camera_pitched_down_sees_the_floor_where_its_geometry_puts_it(two_room_scene, renderer):
    """SimConfig.sensor_pitch_deg 30, 2 m from a wall: the centre ray meets the wall 2 / cos 30 = 2.31 m along
    the optical axis (z-depth), just above the floor, and the bottom row (45 deg below the axis) the floor at
    1.25 cos 45 / sin 75 = 0.92 m; a level camera sees the wall at 2.0 m and the floor at 1.26 m. The
    object-order caster draws level views only, so a pitched camera goes through the BVH."""
    pitched = EmbeddedSimulator(two_room_scene, SimConfig(sensor_pitch_deg=30.0, renderer=renderer))
    level = EmbeddedSimulator(two_room_scene, SimConfig(renderer=renderer))
    try:
        pos = np.array([2.0, 0.0, 2.5])
        down, flat = pitched.render_at(pos, math.pi / 2).depth, level.render_at(pos, math.pi / 2).depth
        h, w = down.shape
        assert flat[h // 2, w // 2] == pytest.approx(2.0, abs=0.02)
        assert flat[-1, w // 2] == pytest.approx(1.26, abs=0.02)
        assert down[h // 2, w // 2] == pytest.approx(2.0 / math.cos(math.radians(30.0)), abs=0.03)
        assert down[-1, w // 2] == pytest.approx(1.25 * math.cos(math.radians(45.0)) / math.sin(math.radians(75.0)),
                                                abs=0.02)
    finally:
        pitched.close()
        level.close()
    with pytest.raises(ValueError, match="sensor_pitch_deg"):
        SimConfig(sensor_pitch_deg=60.0)


@pytest.mark.parametrize("start_y, goal_y, field", [(3.0, 0.0, "start_position"), (0.0, 3.0, "goals\\[1\\].position"),
                                                     (-2.0, 0.0, "start_position")])
def test_a_start_or_goal_on_another_floor_is_refused(sim, two_room_scene, start_y, goal_y, field):
    """The grid maps one floor and snaps in x-z only: a point upstairs was moved silently onto the floor below (the
    agent started there, or distances were measured to the spot under the goal)."""
    from memnav.sim.embedded import OffFloorError
    from memnav.sim.episodes import Episode, NavGoal

    ep = Episode("e8", "two_rooms.glb", np.array([2.0, start_y, 3.0]), np.array([0, 0, 0, 1.0]),
                 [NavGoal(np.array([7.0, 0.0, 3.0])), NavGoal(np.array([6.0, goal_y, 3.0]))], scene_path=two_room_scene)
    with pytest.raises(OffFloorError, match=f"e8.*{field}.*off the floor"):
        sim.reset(ep)
    ep.start_position[1] = ep.goals[1].position[1] = 0.3   # within the tolerance (as is_navigable's): accepted
    assert sim.reset(ep) is not None and sim.agent_state.position[1] == pytest.approx(0.0, abs=1e-6)


def test_the_nearest_of_several_goals_counts(sim, two_room_scene):
    """habitat-lab measures the distance to the nearest goal; only the first one counted."""
    from memnav.sim.env import ImageNavEnv
    from memnav.sim.episodes import Episode, NavGoal

    env = ImageNavEnv(sim)
    ep = Episode("e9", "two_rooms.glb", np.array([2.0, 0.0, 3.0]), np.array([0, 0, 0, 1.0]),
                 [NavGoal(np.array([7.0, 0.0, 3.0])), NavGoal(np.array([2.6, 0.0, 3.0]))], scene_path=two_room_scene)
    env.reset(ep)
    env.step("STOP")
    result = env.result()
    assert result.geodesic_distance_m == pytest.approx(0.6, abs=0.03)
    assert result.distance_to_goal_m == pytest.approx(0.6, abs=0.03)
    assert result.success == 1.0 and result.spl == 1.0
    one = Episode("e9", "two_rooms.glb", ep.start_position, ep.start_rotation, ep.goals[:1], scene_path=two_room_scene)
    env.reset(one)
    assert env.distance_to_goal() == pytest.approx(sim.geodesic_distance(ep.start_position, ep.goals[0].position))


def test_a_scene_too_wide_for_the_grid_is_refused_before_building_it(tmp_path):
    """One stray triangle 5 km away made a 10^10-cell grid: numpy's MemoryError (or the machine swapping) instead
    of a message."""
    import json

    import trimesh

    floor = trimesh.creation.box(extents=[8.0, 0.1, 8.0])
    floor.apply_translation([4.0, -0.05, 4.0])
    stray = trimesh.Trimesh(vertices=[[5000, 0, 5000], [5000.1, 0, 5000], [5000, 0, 5000.1]], faces=[[0, 1, 2]])
    scene = trimesh.Scene()
    scene.add_geometry(floor, node_name="floor")
    scene.add_geometry(stray, node_name="stray")
    path = tmp_path / "stray.glb"
    scene.export(path)
    (tmp_path / "stray.stage_config.json").write_text(json.dumps({"up": [0, 1, 0], "front": [0, 0, -1]}))
    with pytest.raises(SceneLoadError, match="stray.glb: the scene spans 5000.1 m x 5000.1 m.*navmesh_cell_m"):
        EmbeddedSimulator(path)
