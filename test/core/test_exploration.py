"""Occupancy mapping, frontier exploration and goal scan matching on a real ray-cast scene."""
import dataclasses
import math

import numpy as np
import pytest

from memnav.core.exploration import Explorer, ExplorerConfig, face, steer
from memnav.core.frames import habitat_position_from_map
from memnav.core.types import Action, Pose2D
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator


@pytest.fixture
def sim(two_room_scene):
    s = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    yield s
    s.close()


def _start(sim, x_hab: float, z_hab: float, yaw: float = 0.0):
    pos = np.array([x_hab, 0.0, z_hab])
    sim.set_agent_pose(pos, yaw)
    return sim.render_at(pos, yaw)


def _explore(sim, explorer: Explorer, obs, max_steps: int = 300, colour: bool = False):
    explorer.reset()
    prev = None
    collisions = 0
    for _ in range(max_steps):
        blocked = prev is not None and prev == Action.MOVE_FORWARD and obs.collided
        collisions += int(blocked)
        explorer.update(obs.depth, obs.pose, blocked=blocked, rgb=obs.rgb if colour else None)
        plan = explorer.explore(obs.pose)
        if plan.action is None:
            return obs, collisions, True
        prev = plan.action
        obs = sim.step(plan.action)
    return obs, collisions, False


def _turn_and_map(sim, explorer: Explorer, x_hab: float, z_hab: float) -> tuple[np.ndarray, int]:
    """Map one full turn in place at (x_hab, z_hab): the Habitat positions (N, 3) of the free cells it mapped
    (map x = -hab z, y = -hab x), and how many cells it mapped at all."""
    obs = _start(sim, x_hab, z_hab)
    for _ in range(12):
        explorer.update(obs.depth, obs.pose)
        obs = sim.step(Action.TURN_LEFT)
    m = explorer.map
    win = m.window(obs.pose)
    known = m.known(win)
    rows, cols = np.nonzero(known & ~m.obstacles(win))
    xs = m.origin[0] + (cols + win[1].start + 0.5) * m.cfg.cell_m
    ys = m.origin[1] + (rows + win[0].start + 0.5) * m.cfg.cell_m
    return np.stack([habitat_position_from_map(x, y, 0.0) for x, y in zip(xs, ys)]), int(known.sum())


def test_map_walls_are_obstacles_and_free_space_is_navigable(sim):
    explorer = Explorer(ExplorerConfig())
    hab, known = _turn_and_map(sim, explorer, 2.0, 2.5)
    m = explorer.map
    # free cells lie inside the house; in the middle wall only at the door
    inside = (hab[:, 0] > -0.1) & (hab[:, 0] < 8.1) & (hab[:, 2] > -0.1) & (hab[:, 2] < 4.1)
    assert known > 500
    assert inside.mean() > 0.98
    in_wall = (np.abs(hab[:, 0] - 4.0) < 0.03) & ((hab[:, 2] < 1.4) | (hab[:, 2] > 2.6))
    assert in_wall.sum() <= 2
    # the cube (x 1-1.6, z 1-1.6, 0.6 m high) is an obstacle on the map
    cx, cy = -1.3, -1.3                        # map coordinates of the cube centre
    r, c, _ = m.to_cells(np.array([cx + 0.3, cx - 0.3, cx]), np.array([cy, cy, cy + 0.3]))
    assert m.obstacles((slice(None), slice(None)))[r, c].any()


def test_a_narrower_camera_is_mapped_where_the_walls_are_once_set(two_room_scene):
    """A robot camera of 60 deg instead of the simulator's 90 (a D435's colour camera is about 69): mapped with
    the simulator's field of view, its walls land off the walls; after `set_camera` they land on them."""
    def obstacles(explorer: Explorer, hfov: float) -> set[tuple[int, int]]:
        sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3, hfov_deg=hfov))
        try:
            obs = _start(sim, 2.0, 2.5)
            for _ in range(3):                     # three views, 60 deg of turn
                explorer.update(obs.depth, obs.pose)
                obs = sim.step(Action.TURN_LEFT)
        finally:
            sim.close()
        m = explorer.map
        rows, cols = np.nonzero(m.obstacles((slice(None), slice(None))))
        return set(zip(rows.tolist(), cols.tolist()))

    def on_walls(cells: set, truth: set) -> float:
        near = {(r + dr, c + dc) for r, c in truth for dr in (-1, 0, 1) for dc in (-1, 0, 1)}
        return sum(cell in near for cell in cells) / len(cells)

    truth = obstacles(Explorer(ExplorerConfig()), 90.0)       # the simulator's own camera: the reference walls
    wrong = obstacles(Explorer(ExplorerConfig()), 60.0)       # a 60 deg camera taken for 90
    right = Explorer(ExplorerConfig())
    right.set_camera(60.0, ExplorerConfig().camera_height_m)
    assert right.cfg.hfov_deg == 60.0
    fixed = obstacles(right, 60.0)
    assert len(fixed) > 30 and on_walls(fixed, truth) > 0.95
    assert on_walls(wrong, truth) < on_walls(fixed, truth) - 0.2
    with pytest.raises(ValueError, match="hfov_deg"):
        right.set_camera(180.0, 1.25)


def _turn_on_the_spot(scene, sim_cfg: SimConfig, cfg: ExplorerConfig) -> Explorer:
    """An explorer of `cfg` that mapped a full turn on the spot at (2.0, 2.5) of `scene` with the camera `sim_cfg`."""
    explorer = Explorer(cfg)
    sim = EmbeddedSimulator(scene, sim_cfg)
    try:
        obs = _start(sim, 2.0, 2.5)
        for _ in range(12):
            explorer.update(obs.depth, obs.pose)
            obs = sim.step(Action.TURN_LEFT)
    finally:
        sim.close()
    return explorer


def _obstacle_cells(explorer: Explorer) -> set[tuple[int, int]]:
    rows, cols = np.nonzero(explorer.map.obstacles((slice(None), slice(None))))
    return set(zip(rows.tolist(), cols.tolist()))


def test_a_large_image_sampled_sparser_in_angle_maps_the_same_cells(two_room_scene):
    """pixel_spacing_deg 0.7 grows the pixel stride with the image's angular resolution: 2 on the simulator's
    128 x 128 90 deg view and a 192 x 108 69 deg one, 6 on a 640 x 360 69 deg frame, whose map then holds the same
    walls and free space as one integrated at every second pixel (9 times the points). Off (0) by default."""
    spaced = dataclasses.replace(ExplorerConfig(hfov_deg=69.0), pixel_spacing_deg=0.7)
    assert dataclasses.replace(ExplorerConfig(), pixel_spacing_deg=0.7).stride_for(128) == 2
    assert spaced.stride_for(192) == 2 and spaced.stride_for(640) == 6
    assert ExplorerConfig(hfov_deg=69.0).pixel_spacing_deg == 0.0 and ExplorerConfig(hfov_deg=69.0).stride_for(640) == 2
    camera = SimConfig(seed=3, hfov_deg=69.0, width_px=640, height_px=360)
    sparse = _turn_on_the_spot(two_room_scene, camera, spaced)
    dense = _turn_on_the_spot(two_room_scene, camera, ExplorerConfig(hfov_deg=69.0))

    def near(cells: set, other: set) -> float:    # share of `cells` within one cell of `other`
        grown = {(r + dr, c + dc) for r, c in other for dr in (-1, 0, 1) for dc in (-1, 0, 1)}
        return sum(cell in grown for cell in cells) / len(cells)

    a, b = _obstacle_cells(sparse), _obstacle_cells(dense)
    assert len(a) > 100 and near(a, b) > 0.98 and near(b, a) > 0.95
    everywhere = (slice(None), slice(None))
    known_a, known_b = sparse.map.known(everywhere), dense.map.known(everywhere)
    assert (known_a & known_b).sum() > 0.95 * known_b.sum()
    with pytest.raises(ValueError, match="pixel_spacing_deg"):
        ExplorerConfig(pixel_spacing_deg=-1.0)


def test_a_camera_ahead_of_the_turning_axis_is_mapped_where_the_walls_are_from_its_own_pose(two_room_scene):
    """A camera mounted 0.15 m ahead of the robot's turning axis (where odometry is), turning on the spot: mapped
    as if it sat on the axis, the walls it sees land a cell or so off the cells a camera on the axis maps them in;
    told `camera_forward_m` 0.15, the map takes depth from the camera's pose and they land in them (README "What
    the robot must provide"). The robot's own footprint is still marked where odometry puts it, not under the
    camera."""
    def obstacles(forward_m: float, told_m: float) -> tuple[set, Explorer]:
        explorer = _turn_on_the_spot(two_room_scene, SimConfig(seed=3, sensor_forward_m=forward_m),
                                     ExplorerConfig(camera_forward_m=told_m))
        return _obstacle_cells(explorer), explorer

    truth, _ = obstacles(0.0, 0.0)                       # the camera on the axis, as the simulator's
    wrong, _ = obstacles(0.15, 0.0)                      # 0.15 m ahead, mapped as if on the axis
    fixed, explorer = obstacles(0.15, 0.15)              # ... told where it is
    assert min(len(truth), len(wrong), len(fixed)) > 100
    share_wrong, share_fixed = (len(cells & truth) / len(cells) for cells in (wrong, fixed))
    assert share_fixed > 0.85 and share_wrong < 0.6, (share_wrong, share_fixed)   # measured: 0.39, 0.91
    # one frame facing +x: the camera sees nothing behind itself, so the cell 0.15 m behind the axis is free only
    # by the robot's footprint, marked around the axis (one around the camera would reach 0.03 m behind it)
    one = Explorer(ExplorerConfig(camera_forward_m=0.15))
    one.update(np.full((64, 64), 3.0, np.float32), Pose2D(0.0, 0.0, 0.0))
    r, c, inside = one.map.to_cells(np.array([-0.15]), np.array([0.0]))
    assert inside[0] and one.map.free[r[0], c[0]] > 0
    with pytest.raises(ValueError, match="ExplorerConfig.camera_forward_m"):
        ExplorerConfig(camera_forward_m=float("nan"))
    with pytest.raises(ValueError, match="camera_forward_m"):
        explorer.set_camera(90.0, 1.25, 2.5)
    assert explorer.cfg.camera_forward_m == 0.15          # a refused offset changes nothing
    explorer.set_camera(60.0, 1.25)                       # camera_info: field of view only, the offset stays
    assert (explorer.cfg.hfov_deg, explorer.cfg.camera_forward_m) == (60.0, 0.15)


def test_a_camera_looking_down_maps_the_floor_as_floor_once_told_its_pitch(two_room_scene):
    """A camera pitched 20 deg down, turning on the spot: told `camera_pitch_deg` 20, depth is turned level and
    the walls land in the cells a level camera maps them in, the floor free; taken as level, the floor ahead
    comes out above obstacle height and fills the room with obstacles (README "What the robot must provide")."""
    def mapped(pitch_deg: float, told_deg: float) -> tuple[set, int]:
        """(obstacle cells, free cells) after a full turn on the spot."""
        explorer = _turn_on_the_spot(two_room_scene, SimConfig(seed=3, sensor_pitch_deg=pitch_deg),
                                     ExplorerConfig(camera_pitch_deg=told_deg))
        return _obstacle_cells(explorer), int((explorer.map.free > 0).sum())

    truth, truth_free = mapped(0.0, 0.0)
    told, told_free = mapped(20.0, 20.0)
    untold, untold_free = mapped(20.0, 0.0)
    assert len(told & truth) / len(told) > 0.8 and len(told & truth) / len(truth) > 0.95   # measured: 0.88, 1.0
    assert told_free > 0.9 * truth_free                                                     # 1847 against 1811
    assert len(untold) > 4 * len(truth) and untold_free < 0.5 * truth_free                  # 1992 / 280, 486
    with pytest.raises(ValueError, match="ExplorerConfig.camera_pitch_deg"):
        ExplorerConfig(camera_pitch_deg=50.0)


@pytest.mark.parametrize("near", [0.03, 0.0, float("nan")], ids=["3cm", "no-return", "nan"])
def test_a_wall_too_near_to_measure_clears_nothing_behind_it(near):
    """Columns the camera cannot measure (depth nearer than 5 cm: a camera ahead of the axis touching a wall;
    0 or NaN: a real depth camera's no-return, e.g. a wall inside its minimum range) mark no free space: before,
    they counted as seeing nothing up to the range limit and cleared the wall away."""
    depth = np.full((64, 64), 3.0, np.float32)            # a wall 3 m ahead
    depth[:, 24:41] = near                                 # ... and across the middle, one too near to measure
    explorer = Explorer(ExplorerConfig())
    explorer.update(depth, Pose2D(0.0, 0.0, 0.0))
    m = explorer.map
    r, c, _ = m.to_cells(np.array([1.5, 1.5, 0.0]), np.array([0.0, 1.2, 0.0]))
    assert m.free[r[0], c[0]] == 0 and m.occ[r[0], c[0]] == 0    # straight ahead, behind the near wall: unknown
    assert m.free[r[1], c[1]] > 0                                 # off to the side, where the far wall was seen
    assert m.free[r[2], c[2]] > 0                                 # the robot's own footprint


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "cleared"])
def test_low_furniture_seen_from_afar_is_not_cleared_by_frames_that_pass_over_it_up_close(two_room_scene, keep):
    """A 69 deg 16:9 camera at 1.25 m sees 21 deg below its axis, so nothing lower than 0.1 m within 3 m of it
    (`unseen_range_m`). The scene's 0.6 m cube is mapped from 2.3 m away; from 1 m, its columns look over it at
    the wall behind. Those frames still mark the ground around the robot free, but they do not clear the cube
    (`keep_unseen_obstacles`; before, a few of them erased it and the planner drove into it)."""
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3, width_px=192, height_px=108, hfov_deg=69.0))
    try:
        explorer = Explorer(ExplorerConfig(hfov_deg=69.0, keep_unseen_obstacles=keep))
        far = sim.render_at(np.array([1.3, 0.0, 3.9]), 0.0)        # looking along -z at the cube's face z = 1.6
        near = sim.render_at(np.array([1.3, 0.0, 2.6]), 0.0)
    finally:
        sim.close()
    assert np.median(near.depth[:, 80:112]) > 2.0                # up close the middle columns see the wall behind
    explorer.update(far.depth, far.pose)
    hab_x, hab_z = np.meshgrid([1.2, 1.3, 1.4], [1.55, 1.45])   # inside the cube's near half
    rows, cols, _ = explorer.map.to_cells(-hab_z.ravel(), -hab_x.ravel())   # map x = -hab z, y = -hab x

    def cube_obstacles() -> int:
        return int(explorer.map.obstacles((slice(None), slice(None)))[rows, cols].sum())

    assert cube_obstacles() == rows.size
    for _ in range(8):
        explorer.update(near.depth, near.pose)
    r, c, _ = explorer.map.to_cells(np.array([near.pose.x_m + 0.6]), np.array([near.pose.y_m]))
    assert explorer.map.free[r[0], c[0]] > 0                    # the ground just ahead is still known
    assert cube_obstacles() == (rows.size if keep else 0)


def test_the_range_below_the_cameras_view_follows_a_camera_set_later():
    """The unseen range is kept with the per-pixel rays, so a camera set once its camera_info arrives replaces it."""
    from memnav.core.frames import pixel_ray_offsets, unseen_range_m

    explorer = Explorer(ExplorerConfig(keep_unseen_obstacles=True))
    explorer.update(np.full((108, 192), 3.0, np.float32), Pose2D(0.0, 0.0, 0.0))   # mapped as 90 deg at first
    explorer.set_camera(69.0, 0.6)
    left, up = pixel_ray_offsets(np.arange(192), np.array([107]), 192, 108, 69.0)
    assert np.allclose(explorer.map._pixel_rays(108, 192)[3], unseen_range_m(left, float(up[0]), 0.0, 0.6, 0.1))


def test_a_goal_photo_from_a_camera_ahead_of_the_axis_matches_where_the_robot_stood(sim, two_room_scene):
    """The goal photo of a robot whose camera sits 0.15 m ahead of its turning axis: told `camera_forward_m`, the
    goal scan is placed that far ahead of the pose it is matched at, so the best fit near the goal is where the
    robot stood (the ImageNav goal); taken as a photo from the axis, it fits about where the camera was, 0.15 m
    on."""
    obs = _start(sim, 1.0, 3.0)
    explorer = Explorer(ExplorerConfig())
    _explore(sim, explorer, obs)                  # the map: both rooms, from a camera on the axis
    ahead = EmbeddedSimulator(two_room_scene, SimConfig(seed=3, sensor_forward_m=0.15))
    try:
        goal = ahead.render_at(np.array([6.5, 0.0, 1.0]), 0.6)   # second room, into its back-left corner
    finally:
        ahead.close()
    g = goal.gt_pose                             # the robot's pose; its camera is 0.15 m further on

    def best_near_goal(forward_m: float) -> tuple[float, float]:
        explorer.cfg = dataclasses.replace(explorer.cfg, camera_forward_m=forward_m)
        cands = explorer.match_goal(g, explorer.goal_scan(goal.depth), radius_m=0.45)
        assert cands
        c = cands[0]
        return math.hypot(c.pose.x_m - g.x_m, c.pose.y_m - g.y_m), c.score

    told_off, told_score = best_near_goal(0.15)
    untold_off, untold_score = best_near_goal(0.0)
    assert told_off < 0.1 and told_score > 0.85, (told_off, told_score)       # measured: 0.07 m, 0.90
    assert untold_off > told_off + 0.05, (untold_off, told_off)                # measured: 0.16 m
    on_axis = explorer.goal_scan(goal.depth)           # the offset last set is 0
    explorer.cfg = dataclasses.replace(explorer.cfg, camera_forward_m=0.15)
    moved = explorer.goal_scan(goal.depth)
    assert np.allclose(moved.endpoints, on_axis.endpoints + [0.15, 0.0])
    assert np.allclose(moved.free_points, on_axis.free_points + [0.15, 0.0])


def test_exploration_covers_both_rooms_through_the_door_without_collisions(sim):
    obs = _start(sim, 1.0, 3.0)
    explorer = Explorer(ExplorerConfig())
    obs, collisions, done = _explore(sim, explorer, obs)
    assert done, "exploration should finish in a two-room scene"
    assert collisions <= 2
    # it went through the door into the second room (habitat x > 4 is map y < -4)
    m = explorer.map
    win = m.window(obs.pose)
    known = m.known(win)
    rows, _ = np.nonzero(known)
    ys = m.origin[1] + (rows + win[0].start + 0.5) * m.cfg.cell_m
    assert ys.min() < -7.0


def test_goal_scan_matches_back_to_where_the_view_was_taken(sim):
    obs = _start(sim, 1.0, 3.0)
    explorer = Explorer(ExplorerConfig())
    obs, _, _ = _explore(sim, explorer, obs)
    goal_pos = np.array([6.5, 0.0, 1.0])     # second room, looking towards the back-left corner
    goal = sim.render_at(goal_pos, 0.6)
    scan = explorer.goal_scan(goal.depth)
    cands = explorer.match_goal(obs.pose, scan)
    assert cands, "the goal scan should fit somewhere on the explored map"
    assert all(0.0 < c.score <= 1.0 for c in cands)
    assert [c.score for c in cands] == sorted((c.score for c in cands), reverse=True)
    # depth alone: the two rooms are alike (the goal looks into a corner), so the look-alike corner of the
    # other room may rank first. The walls here lie exactly on map cell borders, so which cell a wall point
    # falls in flips with 1e-7 m of depth rounding. The two ray casters' renders differ by that much, and
    # starts moved by 1-4 cm rank the true place first, second or (once in six) not at all. The true
    # place must be among the first two candidates, which the Navigator checks in order.
    g = goal.gt_pose
    near = [i for i, c in enumerate(cands) if math.hypot(c.pose.x_m - g.x_m, c.pose.y_m - g.y_m) < 0.35
            and abs((c.pose.yaw_rad - g.yaw_rad + math.pi) % (2 * math.pi) - math.pi) < math.radians(12)]
    assert near and near[0] <= 1, [(round(c.pose.x_m, 2), round(c.pose.y_m, 2), round(c.score, 3)) for c in cands]


def test_colour_fit_rates_the_goal_pose_above_the_depth_look_alikes(sim):
    obs = _start(sim, 1.0, 3.0)
    explorer = Explorer(ExplorerConfig())
    obs, _, _ = _explore(sim, explorer, obs, colour=True)
    m = explorer.map
    assert m.colour_hits.sum() > 1000 and (m.colour_hits > 0).sum() < (m.occ > 0).sum() + 1
    goal = sim.render_at(np.array([6.5, 0.0, 1.0]), 0.6)   # second room, looking into its back-left corner
    scan = explorer.goal_scan(goal.depth, rgb=goal.rgb)
    assert scan.colours is not None and scan.colours.shape == scan.endpoints.shape[:1] + (3,)
    assert explorer.goal_scan(goal.depth).colours is None
    g = goal.gt_pose
    cands = explorer.match_goal(obs.pose, explorer.goal_scan(goal.depth))
    fits = [explorer.colour_fit(scan, c.pose) for c in cands]
    assert len(cands) >= 3 and all(f is not None for f in fits)
    true = [i for i, c in enumerate(cands) if math.hypot(c.pose.x_m - g.x_m, c.pose.y_m - g.y_m) < 0.35]
    assert len(true) == 1, [(round(c.pose.x_m, 2), round(c.pose.y_m, 2)) for c in cands]
    # the walls of both rooms share colours, so the look-alike corner agrees in part; the true pose agrees best
    assert fits[true[0]] > 0.9 and all(f < fits[true[0]] - 0.05 for i, f in enumerate(fits) if i != true[0]), fits
    # a colour image of another resolution, registered to the depth image, colours the same cells
    a_, b_ = Explorer(ExplorerConfig()), Explorer(ExplorerConfig())
    a_.update(goal.depth, g, rgb=goal.rgb)
    b_.update(goal.depth, g, rgb=np.repeat(np.repeat(goal.rgb, 2, axis=0), 2, axis=1))
    assert a_.map.colour_hits.any() and np.array_equal(a_.map.colour_hits, b_.map.colour_hits)
    assert np.allclose(a_.map.colour_sum, b_.map.colour_sum)
    # a map without colours has nothing to compare
    grey = Explorer(ExplorerConfig())
    grey.update(goal.depth, g)
    assert grey.colour_fit(scan, g) is None


def test_go_to_reaches_a_point_and_reports_arrival(sim):
    obs = _start(sim, 1.0, 3.0)
    explorer = Explorer(ExplorerConfig())
    obs, _, _ = _explore(sim, explorer, obs)
    tx, ty = -3.0, -6.0                       # habitat (6, 3): second room
    for _ in range(200):
        explorer.update(obs.depth, obs.pose)
        plan = explorer.go_to(obs.pose, tx, ty)
        if plan.action is None:
            break
        obs = sim.step(plan.action)
    assert plan.action is None and plan.kind == "target"
    assert math.hypot(obs.pose.x_m - tx, obs.pose.y_m - ty) < 0.5


def test_steer_and_face():
    p = Pose2D(0.0, 0.0, 0.0)
    assert steer(p, 1.0, 0.05, math.radians(16)) == Action.MOVE_FORWARD
    assert steer(p, 0.0, 1.0, math.radians(16)) == Action.TURN_LEFT
    assert steer(p, 0.0, -1.0, math.radians(16)) == Action.TURN_RIGHT
    assert face(p, 0.1, math.radians(16)) is None
    assert face(p, -2.0, math.radians(16)) == Action.TURN_RIGHT


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="cell_m"):
        ExplorerConfig(cell_m=0.0)
    with pytest.raises(ValueError, match="hfov_deg"):
        ExplorerConfig(hfov_deg=200.0)
    with pytest.raises(ValueError, match="obstacle_max_height_m"):
        ExplorerConfig(obstacle_min_height_m=1.0, obstacle_max_height_m=0.5)
    with pytest.raises(ValueError, match="blocked_hits"):
        ExplorerConfig(blocked_hits=0)
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="frontier_size_weight"):
            ExplorerConfig(frontier_size_weight=bad)


def test_map_saves_and_loads_exactly_and_bad_files_are_refused_untouched(sim, tmp_path):
    from memnav.core.exploration import MAP_VERSION, MapFileError, OccupancyMap

    obs = _start(sim, 2.0, 2.5)
    explorer = Explorer(ExplorerConfig())
    for _ in range(6):
        explorer.update(obs.depth, obs.pose, rgb=obs.rgb)
        obs = sim.step(Action.TURN_LEFT)
    explorer.update(obs.depth, obs.pose, blocked=True)        # a bump: its hits are kept apart from seen ones
    path = tmp_path / "house.map.npz"
    assert explorer.save_map(path) and not (tmp_path / "house.map.npz.tmp").exists()
    other = Explorer(ExplorerConfig())
    assert other.save_map(tmp_path / "none.npz") is False      # no map yet: nothing written
    other.load_map(path)
    m, n = explorer.map, other.map
    assert np.array_equal(m.free, n.free) and np.array_equal(m.occ, n.occ) and np.allclose(m.origin, n.origin)
    assert other.explore(obs.pose).action == explorer.explore(obs.pose).action
    assert m.colour_hits.any() and np.array_equal(m.colour_hits, n.colour_hits)
    assert np.array_equal(m.colour_sum, n.colour_sum)
    assert m.bumped.any() and np.array_equal(m.bumped, n.bumped)
    # a version-1 map (before colours) loads, without colours
    old = tmp_path / "v1.map.npz"
    with np.load(path) as z:
        np.savez(old, **{k: z[k] for k in z.files if not k.startswith("colour_") and k != "bumped"}
                 | {"version": np.array(1)})
    v1 = OccupancyMap.load(old, ExplorerConfig())
    assert np.array_equal(v1.occ, m.occ) and not v1.colour_hits.any()
    assert not v1.bumped.any()           # written before bumps were kept apart: every hit counts as seen
    misshapen = tmp_path / "misshapen.map.npz"
    with np.load(path) as z:
        np.savez(misshapen, **{k: z[k] for k in z.files} | {"bumped": np.zeros((3, 3), np.uint16)})
    with pytest.raises(MapFileError, match="bump array"):
        OccupancyMap.load(misshapen, ExplorerConfig())
    # another grid, garbage, a newer version: clear errors naming the file, nothing overwritten
    with pytest.raises(MapFileError, match="cells of 0.2 m"):
        OccupancyMap.load(path, ExplorerConfig(cell_m=0.2))
    bad = tmp_path / "bad.map.npz"
    bad.write_bytes(b"not a map")
    with pytest.raises(MapFileError, match="bad.map.npz"):
        other.load_map(bad)
    assert bad.read_bytes() == b"not a map"
    newer = tmp_path / "newer.map.npz"
    with np.load(path) as z:
        np.savez(newer, **{k: z[k] for k in z.files} | {"version": np.array(MAP_VERSION + 1)})
    with pytest.raises(MapFileError, match="newer"):
        OccupancyMap.load(newer, ExplorerConfig())
    assert np.array_equal(other.map.free, m.free)               # a refused load keeps the map it had



def test_unvisited_point_is_reachable_far_from_the_path_and_none_once_everywhere_was_visited(sim):
    obs = _start(sim, 1.0, 3.0)
    explorer = Explorer(ExplorerConfig())
    obs, _, done = _explore(sim, explorer, obs)
    assert done
    path = np.array([[obs.pose.x_m, obs.pose.y_m]])
    spot = explorer.unvisited_point(obs.pose, path, 1.5)
    assert spot is not None and math.hypot(spot[0] - path[0, 0], spot[1] - path[0, 1]) >= 1.5 - 0.1   # 1 cell
    plan = explorer.go_to(obs.pose, *spot)                 # reachable: a plan that drives there
    assert plan.action is not None
    # the nearest such position: every reachable cell closer to the robot is within 1.5 m of the path
    nearer = explorer.unvisited_point(obs.pose, path, 0.5)
    assert nearer is not None and math.hypot(nearer[0] - obs.pose.x_m, nearer[1] - obs.pose.y_m) <= \
        math.hypot(spot[0] - obs.pose.x_m, spot[1] - obs.pose.y_m)
    # standing everywhere leaves nothing unvisited (the two rooms span x 0-8 m, z 0-4 m)
    xs, zs = np.meshgrid(np.arange(0.0, 8.0, 0.2), np.arange(0.0, 4.0, 0.2))
    everywhere = np.array([[p[0], p[1]] for p in (
        (lambda q: (q.x_m, q.y_m))(_map_xy(x, z)) for x, z in zip(xs.ravel(), zs.ravel()))])
    assert explorer.unvisited_point(obs.pose, everywhere, 0.5) is None
    # a bonus (a remembered goal-like place) pulls the choice to a farther position near it; a bonus point
    # nowhere near a far reachable position changes nothing
    other = explorer.unvisited_point(obs.pose, np.vstack([path, [spot]]), 1.5)   # the next one after `spot`
    assert other is not None and math.hypot(other[0] - spot[0], other[1] - spot[1]) > 1.0
    pulled = explorer.unvisited_point(obs.pose, path, 1.5, bonus=np.array([[other[0], other[1], 50.0]]),
                                      bonus_radius_m=0.3)
    assert pulled is not None and math.hypot(pulled[0] - other[0], pulled[1] - other[1]) <= 0.3 + 1e-6
    assert explorer.unvisited_point(obs.pose, path, 1.5, bonus=np.array([[999.0, 999.0, 50.0]])) == spot
    assert explorer.unvisited_point(obs.pose, path, 1.5, bonus=np.zeros((0, 3))) == spot


def _map_xy(x_hab: float, z_hab: float) -> Pose2D:
    from memnav.core.frames import pose2d_from_habitat

    x, y, yaw = pose2d_from_habitat(np.array([x_hab, 0.0, z_hab]), 0.0)
    return Pose2D(x, y, yaw)


def _reachable(explorer: Explorer, pose: Pose2D, x_m: float, y_m: float) -> bool:
    win, _, field, _, _ = explorer._fields(pose)
    r, c, _ = explorer.map.to_cells(np.array([x_m]), np.array([y_m]))
    return bool(np.isfinite(field[int(r[0]) - win[0].start, int(c[0]) - win[1].start]))


def test_a_bump_in_a_doorway_closes_it_until_the_camera_outvotes_it_and_repeated_bumps_keep_it_closed(sim):
    explorer = Explorer(ExplorerConfig())
    for x in (2.0, 2.4, 2.8, 3.2, 3.6):         # walking up to the door (habitat x = 4), looking through it
        obs = sim.render_at(np.array([x, 0.0, 2.0]), -math.pi / 2)
        explorer.update(obs.depth, obs.pose)
    pose = obs.pose
    target = _map_xy(5.5, 2.0)                   # in the second room
    assert _reachable(explorer, pose, target.x_m, target.y_m)
    explorer.update(obs.depth, pose, blocked=True)   # the robot brushed the door frame: the cells ahead are marked
    assert not _reachable(explorer, pose, target.x_m, target.y_m)
    views = 0
    while not _reachable(explorer, pose, target.x_m, target.y_m):
        explorer.update(obs.depth, pose)         # the camera keeps seeing the doorway free
        views += 1
        assert views <= 8, "free evidence should reopen a doorway closed by a single bump"
    for _ in range(3):                           # but bumping every time keeps the way closed
        explorer.update(obs.depth, pose, blocked=True)
        assert not _reachable(explorer, pose, target.x_m, target.y_m)


def _niche_map(cfg: ExplorerConfig, gap_m: float = 0.4) -> Explorer:
    """A 4 x 3 m room above a one-cell wall (row y 0-0.1 m) with a gap of gap_m at x = 0 into a 0.6 m niche below
    it: at 0.4 m a doorway a 0.18 m robot fits through, narrower than robot + twice the 0.05 m clearance."""
    from memnav.core.exploration import OccupancyMap

    explorer = Explorer(cfg)
    m = explorer.map = OccupancyMap(cfg, Pose2D(0.0, 0.0, 0.0))
    xs, ys = np.meshgrid(np.arange(-1.95, 2.0, 0.1), np.arange(-0.65, 3.0, 0.1))
    xs, ys = xs.ravel(), ys.ravel()
    wall = (np.abs(ys - 0.05) < 0.01) & (np.abs(xs) > gap_m / 2)
    niche = ys < 0.0
    side = niche & ((np.abs(np.abs(xs) - 0.35) < 0.01) | (np.abs(ys + 0.65) < 0.01)) & (np.abs(xs) < 0.4)
    outside = niche & (np.abs(xs) > 0.4)
    walls = wall | side
    free = ~walls & ~outside
    m._add(m.free, xs[free], ys[free], 5)
    m._add(m.occ, xs[walls], ys[walls], 5)
    return explorer


def test_a_robot_boxed_in_by_the_clearance_margin_plans_its_way_out_with_the_radius_alone():
    robot = Pose2D(0.0, -0.3, math.pi / 2)
    out = (0.0, 1.5)                             # in the room, beyond the narrow doorway
    strict = _niche_map(ExplorerConfig(boxed_in_m2=0.0))
    assert not _reachable(strict, robot, *out)   # the margin closes the doorway: the robot is stuck in the niche
    assert strict.go_to(robot, *out).action is None
    explorer = _niche_map(ExplorerConfig())
    assert _reachable(explorer, robot, *out)
    assert explorer.go_to(robot, *out).action is not None
    outside = Pose2D(0.0, 1.5, 0.0)              # out in the room the margin applies again: the doorway is closed
    assert not _reachable(explorer, outside, 0.0, -0.3)
    # a wider doorway the robot came through, sealed by a bump (blocked_hits obstacle hits on cells the camera
    # saw free ten times): boxed in, it plans through the marks; out in the room they count again
    for boxed_in in (0.0, 1.0):
        sealed = _niche_map(ExplorerConfig(boxed_in_m2=boxed_in), gap_m=0.6)
        assert _reachable(sealed, robot, *out)
        m = sealed.map
        gap_x = np.arange(-0.25, 0.3, 0.1)
        m._add(m.occ, gap_x, np.full(gap_x.shape, 0.05), sealed.cfg.blocked_hits)
        m._add(m.free, gap_x, np.full(gap_x.shape, 0.05), 5)     # 5 + 5: ten free hits
        sealed._version += 1
        assert _reachable(sealed, robot, *out) == (boxed_in > 0)
    assert not _reachable(sealed, Pose2D(0.0, 1.5, 0.0), 0.0, -0.3)
    with pytest.raises(ValueError, match="boxed_in_m2"):
        ExplorerConfig(boxed_in_m2=-1.0)


def test_a_view_maps_free_space_up_to_the_map_range_and_no_farther(sim):
    reach = {}
    for max_range in (4.0, 7.0):
        # west room, level with the door in the middle wall
        hab, _ = _turn_and_map(sim, Explorer(ExplorerConfig(max_range_m=max_range)), 0.6, 2.0)
        reach[max_range] = float(np.hypot(hab[:, 0] - 0.6, hab[:, 2] - 2.0).max())
    assert 3.5 < reach[4.0] <= 4.0 + 0.1
    assert reach[7.0] > 6.0                      # through the door, deep into the east room


def _corridor_map(cfg: ExplorerConfig) -> Explorer:
    """A 6 m corridor (x -3..3, y -0.5..0.5, walls at y = +-0.65) open at both ends onto unknown space; its walls
    are blue at the west end (x < -1.5) and red at the east end (x > 1.5), grey between."""
    from memnav.core.exploration import OccupancyMap

    explorer = Explorer(cfg)
    m = explorer.map = OccupancyMap(cfg, Pose2D(0.0, 0.0, 0.0))
    xs, ys = np.meshgrid(np.arange(-2.95, 3.0, 0.1), np.arange(-0.65, 0.7, 0.1))
    xs, ys = xs.ravel(), ys.ravel()
    walls = np.abs(np.abs(ys) - 0.65) < 0.01
    m._add(m.free, xs[~walls], ys[~walls], 5)
    m._add(m.occ, xs[walls], ys[walls], 5)
    r, c, _ = m.to_cells(xs[walls], ys[walls])
    colour = np.where((xs[walls] > 1.5)[:, None], [0.8, 0.1, 0.1],
                      np.where((xs[walls] < -1.5)[:, None], [0.1, 0.1, 0.8], [0.5, 0.5, 0.5]))
    m.colour_sum[r, c] = colour * 5
    m.colour_hits[r, c] = 5
    return explorer


def test_frontiers_near_walls_in_the_goal_colours_are_explored_first_with_a_colour_weight():
    robot = Pose2D(-0.8, 0.0, 0.0)             # the west end is 2.2 m away, the east end 3.8 m
    red = np.array([[0.8, 0.1, 0.1]] * 6 + [[0.5, 0.5, 0.5]] * 2)   # the goal photo: mostly red walls

    def heading(cfg: ExplorerConfig, colours: np.ndarray | None) -> float:
        plan = _corridor_map(cfg).explore(robot, colours)
        assert plan.kind == "frontier" and plan.waypoint is not None
        return plan.waypoint[0] - robot.x_m

    assert heading(ExplorerConfig(), red) < 0                              # off: the nearest end first
    assert heading(ExplorerConfig(frontier_colour_weight=5.0), None) < 0    # no goal colours: the same
    assert heading(ExplorerConfig(frontier_colour_weight=5.0), red) > 0     # the red end first
    blue = red[:, ::-1].copy()
    assert heading(ExplorerConfig(frontier_colour_weight=5.0), blue) < 0
    with pytest.raises(ValueError, match="frontier_colour_weight"):
        ExplorerConfig(frontier_colour_weight=-1.0)
    with pytest.raises(ValueError, match="frontier_colour_radius_m"):
        ExplorerConfig(frontier_colour_radius_m=math.inf)


def test_a_map_from_another_frame_lands_where_the_same_views_would_put_it(sim):
    """The same turn mapped once in the simulator's frame and once through a rotated, shifted odometry frame:
    laying the first map on the second's grid through the frame change reproduces the second map."""
    frame = Pose2D(5.0, -3.0, 1.1)          # the second run's odometry = frame o true pose
    first, second = Explorer(ExplorerConfig()), Explorer(ExplorerConfig())
    obs = _start(sim, 2.0, 2.5)
    at = obs.pose                           # where the robot turns, in the first (the simulator's) frame
    for _ in range(12):
        first.update(obs.depth, obs.pose)
        second.update(obs.depth, frame.compose(obs.pose))
        obs = sim.step(Action.TURN_LEFT)
    from memnav.core.exploration import OccupancyMap

    target = OccupancyMap(ExplorerConfig(), Pose2D(0.0, 0.0, 0.0))      # an empty grid placed like the second
    target.origin = second.map.origin.copy()
    assert not target.known(np.s_[:, :]).any()
    # the first map's frame seen from the second's: first = frame^-1 o second
    ev = target.evidence_from(first.map, Pose2D(0.0, 0.0, 0.0).relative_to(frame))
    target.add_evidence(ev)
    everything = np.s_[:, :]
    want, got = second.map.obstacles(everything), target.obstacles(everything)
    assert want.sum() > 50 and (want & got).sum() >= 0.8 * want.sum()       # nearest-cell resampling
    assert got.sum() <= 1.4 * want.sum()      # a rotated wall comes out up to a cell thicker, not spread
    known = target.known(everything)
    assert abs(int(known.sum()) - int(second.map.known(everything).sum())) <= 0.1 * known.sum()
    target.add_evidence(ev, sign=-1)                                        # and back out again
    assert not target.known(everything).any()
    # extending a map only where it has no evidence: what it saw stays as it was, the rest is added
    half = dataclasses.replace(ev, free=ev.free.copy(), occ=ev.occ.copy())
    mid = int(np.nonzero(known.any(axis=0))[0].mean())
    half.free[:, mid:], half.occ[:, mid:] = 0, 0
    target.add_evidence(half)
    seen_before, free_before = target.known(everything), target.free.copy()
    doubled = dataclasses.replace(ev, free=ev.free * 2, occ=ev.occ * 2)     # disagrees with every seen cell
    target.add_unseen(doubled)
    assert np.array_equal(target.free[seen_before], free_before[seen_before])
    now = target.known(everything)
    assert (now == (seen_before | known)).all() and now.sum() > seen_before.sum()
    back = target.without(half)             # a copy with the first half taken back out: what was added
    assert (back.known(everything) == (now & ~seen_before)).all() and (target.known(everything) == now).all()
    # from a guess 0.6 m and 12 deg off, correlating the obstacles finds the frame change again
    true = Pose2D(0.0, 0.0, 0.0).relative_to(frame)                         # second's frame -> first's
    guess = true.compose(Pose2D(0.4, -0.45, math.radians(12)))
    found, share = second.map.align_to(first.map, guess)
    assert share > 0.9 and abs(math.degrees(found.yaw_rad - true.yaw_rad)) < 3.0
    rows, cols = np.nonzero(second.map.obstacles(everything))                # where the walls land, both ways
    for r, c in zip(rows[::25], cols[::25]):
        p = Pose2D(*second.map.cell_center(int(r), int(c)), 0.0)
        a, b = found.compose(p), true.compose(p)
        assert math.hypot(a.x_m - b.x_m, a.y_m - b.y_m) < 0.25
    # laid through the right transform the walls agree; turned 90 deg about the robot they stand on the floor
    # the first map saw (a wrong relocalisation), and through a transform 100 m away they land on nothing seen
    walls = int(second.map.obstacles(everything).sum())
    assert second.map.contradiction(first.map, true, walls // 2, 0.0, 0.0) < 0.05
    assert second.map.contradiction(first.map, guess, walls // 2) < 0.05   # some transform near the guess fits
    about = Pose2D(at.x_m, at.y_m, math.pi / 2).compose(Pose2D(-at.x_m, -at.y_m, 0.0))
    turned = about.compose(true)
    assert second.map.contradiction(first.map, turned, walls // 2, 0.0, 0.0) > 0.3
    assert second.map.contradiction(first.map, turned, walls // 2) > 0.3    # and none near the turned one
    assert second.map.contradiction(first.map, true.compose(Pose2D(100.0, 0.0, 0.0)), 1) is None  # nothing seen
