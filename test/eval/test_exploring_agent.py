"""The memnav agent finds a goal photo's place in an unseen two-room scene by exploring its own map."""
import dataclasses
import math

import numpy as np
import pytest

from memnav.core.exploration import ExplorerConfig
from memnav.core.types import Action
from memnav.eval.exploring_defaults import (
    EXPLORING_AGREEING_SIMILARITY,
    EXPLORING_CANDIDATE_COLOUR_FIT,
    EXPLORING_CANDIDATE_MIN_COLOUR,
    EXPLORING_CANDIDATE_NEAR_M,
    EXPLORING_COLOUR_POOL,
    EXPLORING_COLOUR_WEIGHT,
    EXPLORING_CORROBORATED_SIMILARITY,
    EXPLORING_FRONTIER_COLOUR_WEIGHT,
    EXPLORING_FRONTIER_LOOK_TURNS,
    EXPLORING_HOMING,
    EXPLORING_KEEP_UNSEEN_OBSTACLES,
    EXPLORING_KNOWN_CORROBORATED_SIMILARITY,
    EXPLORING_MAP_RANGE_M,
    EXPLORING_SWEEP_PRIOR_WEIGHT,
)
from memnav.eval.learned_agents import LearnedAgent, LearnedAgentOptions
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator


def _run(sim, agent, start, start_yaw, goal_pos, goal_yaw, max_steps=300):
    goal = sim.render_at(goal_pos, goal_yaw)
    sim.set_agent_pose(start, start_yaw)
    obs = sim.render_at(start, start_yaw)
    agent.begin("two_rooms", goal.rgb, goal.depth)
    modes = []
    for _ in range(max_steps):
        action = agent.act(obs)
        modes.append(agent.navigator.mode)
        if action == Action.STOP:
            break
        obs = sim.step(action)
    return action, sim.agent_state.position, modes


def test_memnav_explores_into_the_other_room_and_stops_at_the_goal(two_room_scene):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    agent = LearnedAgent("memnav", LearnedAgentOptions())
    try:
        goal_pos = np.array([7.0, 0.0, 3.0])
        action, pos, modes = _run(sim, agent, np.array([1.0, 0.0, 3.0]), 0.0, goal_pos, 1.57)
        assert action == Action.STOP
        assert sim.geodesic_distance(pos, goal_pos) < 1.0
        assert "explore" in modes               # it had to search: the goal is behind the wall
        assert agent.navigator.explorer.map is not None
    finally:
        agent.close()
        sim.close()


def _behind_the_wall(scene, config: SimConfig, check_reset=None) -> None:
    """The memnav agent in `scene` with the simulator's camera `config`: from the first room to a goal photo taken
    behind the wall in the second, it stops within 1 m of the goal in 300 steps. `check_reset(agent)` runs after
    the agent's reset (what it took from the simulator)."""
    from types import SimpleNamespace

    sim = EmbeddedSimulator(scene, config)
    agent = LearnedAgent("memnav", LearnedAgentOptions())
    try:
        goal_pos, start = np.array([7.0, 0.0, 3.0]), np.array([1.0, 0.0, 3.0])
        goal = sim.render_at(goal_pos, 1.57)
        sim.set_agent_pose(start, 0.0)
        obs = sim.render_at(start, 0.0)
        agent.reset(SimpleNamespace(scene_name="two_rooms"), goal, sim)
        if check_reset is not None:
            check_reset(agent)
        for _ in range(300):
            action = agent.act(obs)
            if action == Action.STOP:
                break
            obs = sim.step(action)
        assert action == Action.STOP
        assert sim.geodesic_distance(sim.agent_state.position, goal_pos) < 1.0
    finally:
        agent.close()
        sim.close()


def test_the_agent_maps_with_the_simulators_camera_as_a_robot_with_its_camera_info(two_room_scene):
    """`memnav eval --hfov-deg 60 --camera-height-m 0.8`: the agent reads the camera from the simulator at reset,
    as the policy node reads a robot's camera_info, and still finds the goal behind the wall."""
    def took_the_camera(agent) -> None:
        nav = agent.navigator
        assert (nav.cfg.hfov_deg, nav.cfg.camera_height_m) == (60.0, 0.8)
        assert (nav.explorer.cfg.hfov_deg, nav.explorer.cfg.camera_height_m) == (60.0, 0.8)
        assert nav.localizer_cfg.hfov_deg == 60.0

    _behind_the_wall(two_room_scene, SimConfig(seed=3, hfov_deg=60.0, sensor_height_m=0.8), took_the_camera)


def test_a_camera_mounted_ahead_of_the_turning_axis_still_finds_the_goal(two_room_scene):
    """`memnav eval --camera-forward-m 0.15`: the simulator's camera 0.15 m ahead of the agent's axis; the agent
    reads the offset from the simulator at reset, as the policy node is given camera_forward_m, maps from the
    camera's pose, finds the goal behind the wall and stops within 1 m."""
    def took_the_offset(agent) -> None:
        assert agent.navigator.cfg.camera_forward_m == agent.navigator.explorer.cfg.camera_forward_m == 0.15

    _behind_the_wall(two_room_scene, SimConfig(seed=3, sensor_forward_m=0.15), took_the_offset)


def test_without_exploration_the_policy_drives_alone(two_room_scene):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    agent = LearnedAgent("memnav", LearnedAgentOptions(explore=False))
    try:
        _, _, modes = _run(sim, agent, np.array([1.0, 0.0, 3.0]), 0.0, np.array([6.5, 0.0, 1.0]), 0.6,
                           max_steps=20)
        assert set(modes) <= {"policy", "homing", "stop"}
        assert agent.navigator.explorer.map is None
        assert math.isfinite(agent.navigator.last.similarity)
    finally:
        agent.close()
        sim.close()


def test_candidate_prior_homing_via_map_and_nearby_candidates_are_options_of_exploring_agents_only():
    plain = LearnedAgent("memnav", LearnedAgentOptions())
    ranked = LearnedAgent("memnav", LearnedAgentOptions(candidate_prior=True, homing_via_map=True))
    blind = LearnedAgent("memnav", LearnedAgentOptions(candidate_prior=True, explore=False,
                                                       known_corroborated_similarity=0.7, frontier_colour_weight=15.0,
                                                       agreeing_similarity=0.7, keep_unseen_obstacles=True,
                                                       map_pixel_spacing_deg=0.7))
    grey = LearnedAgent("memnav", LearnedAgentOptions(colour_weight=0.0, candidate_min_colour=0.0,
                                                      known_corroborated_similarity=0.7, frontier_colour_weight=15.0,
                                                      agreeing_similarity=0.7, keep_unseen_obstacles=True,
                                                      map_pixel_spacing_deg=0.7))
    homer = LearnedAgent("memnav", LearnedAgentOptions(explore_homing=True))
    try:
        # exploring agents home over the scene graph only when asked to; without a map homing stays on
        assert not plain.navigator.cfg.homing and not EXPLORING_HOMING
        assert homer.navigator.cfg.homing and ranked.navigator.cfg.homing and blind.navigator.cfg.homing
        assert plain.navigator.cfg.candidate_pool == EXPLORING_COLOUR_POOL and not plain.navigator.cfg.candidate_prior
        assert plain.navigator.cfg.colour_weight == EXPLORING_COLOUR_WEIGHT > 0
        assert plain.navigator.cfg.candidate_min_colour == EXPLORING_CANDIDATE_MIN_COLOUR > 0
        assert plain.navigator.cfg.candidate_colour_fit == EXPLORING_CANDIDATE_COLOUR_FIT > 0
        assert not plain.navigator.cfg.homing_via_map
        assert (ranked.navigator.cfg.candidate_prior, ranked.navigator.cfg.candidate_pool) == (True, 8)
        assert ranked.navigator.cfg.homing_via_map and ranked.navigator._match_cfg.max_candidates == 8
        assert not blind.navigator.cfg.candidate_prior     # no map, no scan-matched candidates to rank
        assert plain.navigator.cfg.candidate_near_m == EXPLORING_CANDIDATE_NEAR_M > 0
        assert blind.navigator.cfg.candidate_near_m == 0.0
        assert blind.navigator.cfg.colour_weight == blind.navigator.cfg.candidate_min_colour == 0.0
        assert blind.navigator.cfg.candidate_colour_fit == 0.0
        assert plain.navigator.cfg.corroborated_stop_similarity == EXPLORING_CORROBORATED_SIMILARITY > 0
        assert blind.navigator.cfg.corroborated_stop_similarity == 0.0
        # in a known house the first-visit bar by default; another one when asked for, with exploration only
        assert plain.navigator.cfg.known_corroborated_stop_similarity == EXPLORING_KNOWN_CORROBORATED_SIMILARITY == 0
        assert grey.navigator.cfg.known_corroborated_stop_similarity == 0.7
        assert blind.navigator.cfg.known_corroborated_stop_similarity == 0.0
        # two agreeing cues' bar: off by default; asked for, with exploration only
        assert plain.navigator.cfg.agreeing_stop_similarity == EXPLORING_AGREEING_SIMILARITY == 0.0
        assert grey.navigator.cfg.agreeing_stop_similarity == 0.7
        assert blind.navigator.cfg.agreeing_stop_similarity == 0.0
        assert plain.navigator.cfg.sweep_prior_weight == EXPLORING_SWEEP_PRIOR_WEIGHT > 0
        assert blind.navigator.cfg.sweep_prior_weight == 0.0
        assert plain.navigator.cfg.frontier_look_turns == EXPLORING_FRONTIER_LOOK_TURNS > 0
        assert blind.navigator.cfg.frontier_look_turns == 0
        # exploring agents map depth farther than the map's own default; the map really uses that range
        assert plain.navigator.cfg.map_range_m == plain.navigator.explorer.cfg.max_range_m == EXPLORING_MAP_RANGE_M
        assert EXPLORING_MAP_RANGE_M > ExplorerConfig.max_range_m == blind.navigator.cfg.map_range_m
        # colour-guided frontiers: off by default; asked for, the explorer of an exploring agent really uses it
        assert plain.navigator.explorer.cfg.frontier_colour_weight == EXPLORING_FRONTIER_COLOUR_WEIGHT == 0.0
        assert grey.navigator.cfg.frontier_colour_weight == grey.navigator.explorer.cfg.frontier_colour_weight == 15.0
        assert blind.navigator.cfg.frontier_colour_weight == 0.0 == ExplorerConfig.frontier_colour_weight
        assert (grey.navigator.cfg.colour_weight, grey.navigator.cfg.candidate_pool) == (0.0, 4)
        # obstacles below the camera's view kept: off by default; asked for, the explorer really keeps them
        assert not plain.navigator.explorer.cfg.keep_unseen_obstacles and not EXPLORING_KEEP_UNSEEN_OBSTACLES
        assert grey.navigator.cfg.keep_unseen_obstacles and grey.navigator.explorer.cfg.keep_unseen_obstacles
        assert not blind.navigator.cfg.keep_unseen_obstacles
        # sparser map sampling of large frames: off by default; asked for, the explorer's stride follows it
        assert plain.navigator.explorer.cfg.pixel_spacing_deg == 0.0 == blind.navigator.cfg.map_pixel_spacing_deg
        assert grey.navigator.explorer.cfg.pixel_spacing_deg == 0.7
    finally:
        for agent in (plain, ranked, blind, grey, homer):
            agent.close()


def test_exploring_agent_looks_around_first_and_at_a_candidate(two_room_scene):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    agent = LearnedAgent("memnav", LearnedAgentOptions())
    try:
        _, _, modes = _run(sim, agent, np.array([1.0, 0.0, 3.0]), 0.0, np.array([7.0, 0.0, 3.0]), 1.57)
        # a full turn in place before anything else (turns add no path length), unless the stop rule stops
        assert modes[:11] == ["look"] * 11
    finally:
        agent.close()
        sim.close()


def test_lifelong_agent_keeps_the_house_map_across_visits(two_room_scene, tmp_path):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    goal_pos = np.array([7.0, 0.0, 3.0])
    agent = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=tmp_path))
    try:
        action, pos, _ = _run(sim, agent, np.array([1.0, 0.0, 3.0]), 0.0, goal_pos, 1.57)
        assert action == Action.STOP
        first = agent.navigator.explorer.map.known(np.s_[:, :]).sum()
    finally:
        agent.close()
    assert (tmp_path / "two_rooms.map.npz").is_file() and (tmp_path / "two_rooms.db").is_file()
    # a new process (a new agent) on the next visit starts from the saved map, in the odometry frame
    again = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=tmp_path))
    try:
        goal = sim.render_at(goal_pos, 1.57)
        again.begin("two_rooms", goal.rgb, goal.depth)
        assert again.navigator.explorer.map.known(np.s_[:, :]).sum() == first
        action, pos, modes = _run(sim, again, np.array([1.0, 0.0, 3.0]), 0.0, goal_pos, 1.57)
        assert action == Action.STOP and sim.geodesic_distance(pos, goal_pos) < 1.0
        # the known house needs no search first: the robot homes over the scene graph, or looks around once
        # and drives to the goal it recognises on the saved map
        first_moves = modes[:modes.index("look") + 12] if "look" in modes else modes
        assert "explore" not in first_moves and "sweep" not in first_moves
    finally:
        again.close()
        sim.close()


def test_a_robot_whose_odometry_restarts_relocalises_its_stored_memory_and_map(two_room_scene, tmp_path):
    from memnav.core.exploration import ExplorerConfig, OccupancyMap

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    start, goal_pos = np.array([1.0, 0.0, 3.0]), np.array([7.0, 0.0, 3.0])
    opts = LearnedAgentOptions(lifelong_dir=tmp_path, odometry_persists=False)
    agent = LearnedAgent("memnav", opts)
    try:   # the first run creates the memory: its odometry frame is the memory's, and the map is saved
        assert _run(sim, agent, start, 0.0, goal_pos, 1.57)[0] == Action.STOP
    finally:
        agent.close()
    saved = tmp_path / "two_rooms.map.npz"
    everything = np.s_[:, :]
    before = OccupancyMap.load(saved, ExplorerConfig())
    known_before = before.known(everything)
    # the next boot: odometry starts again at (0, 0, 0) where the robot stands
    again = LearnedAgent("memnav", opts)
    try:
        goal = sim.render_at(goal_pos, 1.57)
        sim.set_agent_pose(start, 0.0)
        obs = sim.render_at(start, 0.0)
        origin = obs.pose
        again.begin("two_rooms", goal.rgb, goal.depth)
        nav = again.navigator
        memory = nav.memory
        assert nav.explorer.map is None and not memory.localised and not nav.known_map   # nothing trusted yet
        localised_at, laid_at, action, known_then = None, None, None, 0
        for step in range(300):
            action = again.act(dataclasses.replace(obs, pose=obs.pose.relative_to(origin)))
            if localised_at is None and memory.localised:
                localised_at = step
            if laid_at is None and nav.known_map:
                laid_at, known_then = step, int(nav.explorer.map.known(everything).sum())
            if action == Action.STOP:
                break
            obs = sim.step(action)
        assert localised_at is not None, "the stored memory never relocalised"
        # the memory's frame is the first run's odometry, the simulator's map frame: the relocalised
        # correction maps this run's odometry back onto it
        here = memory.to_memory_frame(obs.pose.relative_to(origin))
        assert math.hypot(here.x_m - obs.pose.x_m, here.y_m - obs.pose.y_m) < 1.0
        # once relocalised, the first run's house map is fitted to this run's and laid on it: the house is known
        assert laid_at is not None and laid_at >= localised_at and known_then >= 0.9 * known_before.sum()
        assert action == Action.STOP and sim.geodesic_distance(sim.agent_state.position, goal_pos) < 1.0
        # saving extends the file, not the laid house map the laid check compares with (a policy node with one
        # memory_key saves at every goal and stays laid)
        again._save_map()
        assert again.house_map == "laid" and np.array_equal(again._laid.house.known(everything), known_before)
    finally:
        again.close()
        sim.close()
    # a rebooted run that laid the saved map extends it where it had no evidence, and leaves what it saw as it was
    after = OccupancyMap.load(saved, ExplorerConfig())
    assert np.array_equal(after.origin, before.origin) and after.known(everything)[known_before].all()
    for name in ("free", "occ", "colour_hits"):
        assert np.array_equal(getattr(after, name)[known_before], getattr(before, name)[known_before])
    assert np.array_equal(after.colour_sum[known_before], before.colour_sum[known_before])


def test_relocalise_drops_the_map_and_starts_the_search_over(two_room_scene, tmp_path):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    goal_pos = np.array([7.0, 0.0, 3.0])
    agent = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=tmp_path))
    try:
        assert _run(sim, agent, np.array([1.0, 0.0, 3.0]), 0.0, goal_pos, 1.57, max_steps=20)[0] != Action.STOP
        assert agent.navigator.explorer.map is not None and agent.navigator.memory.localised
        goal = sim.render_at(goal_pos, 1.57)
        agent.relocalise(goal.rgb, goal.depth)       # carried elsewhere mid-search
        nav = agent.navigator
        assert nav.explorer.map is None and not nav.memory.localised and nav.last is None   # a new search
        agent.act(sim.render_at(np.array([1.5, 0.0, 3.0]), 0.0))
        assert nav.mode == "look"                     # it begins again by looking around
    finally:
        agent.close()
        sim.close()
    assert not (tmp_path / "two_rooms.map.npz").exists()   # out of register with the memory: not saved


def test_odometry_restarts_reopen_the_memory_in_a_new_frame_every_visit(two_room_scene, tmp_path):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    start, goal_pos = np.array([1.0, 0.0, 3.0]), np.array([7.0, 0.0, 3.0])
    agent = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=tmp_path, odometry_restarts=True))
    try:
        _run(sim, agent, start, 0.0, goal_pos, 1.57, max_steps=30)          # visit 1 creates the memory
        memory, places, frame = agent.navigator.memory, agent.navigator.memory.stats().places, agent._odom_frame
        goal = sim.render_at(goal_pos, 1.57)
        agent.begin("two_rooms", goal.rgb, goal.depth)                      # visit 2: a reboot
        again = agent.navigator.memory
        assert again is not memory and again.stats().places == places > 0 and not again.localised
        assert agent.navigator.explorer.map is None                        # no map carried over
        assert frame is not None and agent._odom_frame not in (None, frame)  # odometry in a new frame
    finally:
        agent.close()
        sim.close()


def test_odometry_restarts_in_the_simulators_own_restarted_frame(two_room_scene, tmp_path):
    """random_odometry_frame False (SimConfig.odometry_origin "start", as the sim bridge gives the policy node):
    every visit still reopens the memory unlocalised, and act() takes odometry as the simulator gives it."""
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3, odometry_origin="start"))
    start, goal_pos = np.array([1.0, 0.0, 3.0]), np.array([7.0, 0.0, 3.0])
    agent = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=tmp_path, odometry_restarts=True,
                                                       random_odometry_frame=False))
    try:
        _run(sim, agent, start, 0.0, goal_pos, 1.57, max_steps=20)
        places = agent.navigator.memory.stats().places
        goal = sim.render_at(goal_pos, 1.57)
        agent.begin("two_rooms", goal.rgb, goal.depth)
        assert agent.navigator.memory.stats().places == places > 0 and not agent.navigator.memory.localised
        assert agent._odom_frame is None
    finally:
        agent.close()
        sim.close()


def test_a_goal_depth_that_follows_its_image_goes_on_with_the_same_visit(two_room_scene, tmp_path):
    """set_goal (the policy node, when a goal's depth arrives after its image and before any decision): the goal
    becomes RGB-D, while the memory, the visit count and the odometry frame stay as begin left them."""
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    agent = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=tmp_path, odometry_restarts=True))
    try:
        goal = sim.render_at(np.array([7.0, 0.0, 3.0]), 1.57)
        agent.begin("two_rooms", goal.rgb)
        memory, frame = agent.navigator.memory, agent._odom_frame
        assert agent.navigator._goal_depth is None
        agent.set_goal(goal.rgb, goal.depth)
        assert agent.navigator._goal_depth is not None and agent.navigator._scan is not None
        assert (agent.navigator.memory, agent._odom_frame, agent.visits) == (memory, frame, {"two_rooms": 1})
        with pytest.raises(ValueError):
            agent.set_goal(np.zeros((0, 0, 3), np.uint8))
    finally:
        agent.close()
        sim.close()


def test_when_the_search_runs_dry_the_agent_stops_at_its_best_view(two_room_scene):
    """A goal photo of no place in the scene (noise, no depth: no scan candidates): the robot explores both
    rooms, then goes back to its most goal-like view and stops there instead of wandering to the step limit."""
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    agent = LearnedAgent("memnav", LearnedAgentOptions())
    try:
        rng = np.random.default_rng(0)
        noise = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)
        start = np.array([1.0, 0.0, 3.0])
        sim.set_agent_pose(start, 0.0)
        obs = sim.render_at(start, 0.0)
        agent.begin("two_rooms", noise, np.zeros((128, 128), np.float32))
        modes, action = [], None
        for _ in range(500):
            action = agent.act(obs)
            modes.append(agent.navigator.mode)
            if action == Action.STOP:
                break
            obs = sim.step(action)
        assert action == Action.STOP and modes[-1] == "best_view"
        assert "explore" in modes and "policy" not in modes
        _, best = agent.navigator._best_view           # in the map frame (the episode's first pose)
        here = agent.navigator._map_pose(obs.pose)
        assert math.hypot(here.x_m - best.x_m, here.y_m - best.y_m) < 0.5
    finally:
        agent.close()
        sim.close()


@pytest.mark.parametrize("background", [False, True], ids=["in_the_step", "in_the_background"])
def test_a_wrong_lay_is_taken_back_once_the_robots_own_walls_contradict_it(two_room_scene, tmp_path, background):
    """Checked in the step (evaluation), or in the worker thread on a copy of the map (the policy node in real
    time), applied at the first step after it finished."""
    from memnav.core.exploration import cell_centers
    from memnav.core.types import Pose2D

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    start, goal_pos = np.array([1.0, 0.0, 3.0]), np.array([7.0, 0.0, 3.0])
    opts = LearnedAgentOptions(lifelong_dir=tmp_path, odometry_persists=False, map_checks_in_background=background)
    agent = LearnedAgent("memnav", opts)
    try:   # the first run creates the memory and the house map, in the simulator's frame
        assert _run(sim, agent, start, 0.0, goal_pos, 1.57)[0] == Action.STOP
    finally:
        agent.close()
    again = LearnedAgent("memnav", opts)          # a reboot: odometry starts at (0, 0, 0) where the robot stands
    try:
        goal = sim.render_at(goal_pos, 1.57)
        sim.set_agent_pose(start, 0.0)
        obs = sim.render_at(start, 0.0)
        origin = obs.pose                         # this run's odometry -> the saved map's frame
        again.begin("two_rooms", goal.rgb, goal.depth)
        nav = again.navigator
        for _ in range(5):
            obs = sim.step(again.act(dataclasses.replace(obs, pose=obs.pose.relative_to(origin))))
        assert again._saved_map is not None and not nav.memory.localised and again.house_map == "waiting"

        def known_outside_the_house() -> int:
            """Known cells more than 0.3 m outside the 8 m x 4 m house (x = -z, y = -x of the scene)."""
            m = nav.explorer.map
            rows, cols = np.nonzero(m.known(np.s_[:, :]))
            x, y = origin.apply(*cell_centers(m.origin, rows, cols, m.cfg.cell_m))
            return int(((x < -4.3) | (x > 0.3) | (y < -8.3) | (y > 0.3)).sum())

        own_outside = known_outside_the_house()
        # a look-alike lays the map turned 29 deg about the robot: the memory is set there and the map laid
        wrong = origin.compose(Pose2D(0.0, 0.0, -0.5))
        here = obs.pose.relative_to(origin)
        nav.memory.set_pose(here, wrong.compose(here))
        again._lay(wrong)
        assert nav.known_map and known_outside_the_house() > own_outside + 300   # the house turned off its walls
        assert again.house_map == "laid"
        taken_back = None
        for step in range(60):
            obs = sim.step(again.act(dataclasses.replace(obs, pose=obs.pose.relative_to(origin))))
            if again._check is not None:
                # a robot's action takes about a second, longer than a check: let it finish before the next step
                again._check.future.result(timeout=60)
            if again._laid is None and taken_back is None:
                taken_back = step
                # the laid evidence is out of the map, the memory's relocalisation retracted, the house unknown
                assert again._saved_map is not None and not nav.known_map and not nav.memory.localised
                assert known_outside_the_house() <= own_outside + 20
            if taken_back is not None and again._laid is not None:
                break
        assert taken_back is not None and taken_back < 2 * 20, "the wrong lay was never taken back"
        # the house map is laid again, this time where it belongs
        assert again._laid is not None
        assert math.hypot(again._laid.at.x_m - origin.x_m, again._laid.at.y_m - origin.y_m) < 0.5
        assert (again._checker is not None) == background       # the checks ran in the worker thread, or not
    finally:
        again.close()
        sim.close()


def test_a_memory_that_cannot_be_written_goes_on_in_ram_and_a_refused_one_still_stops_the_agent(tmp_path):
    """A house memory whose file cannot be created (here its folder is a file; on a robot, a full disk) becomes
    a memory in RAM only that says why (`storage_error`); a damaged file is refused as before."""
    from memnav.core.memory import CorruptStoreError, MemoryStoreError, SceneGraphConfig

    agent = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=str(tmp_path)))
    assert agent.storage_error is None
    (tmp_path / "not_a_folder").write_text("a file")
    memory = agent._open_memory(tmp_path / "not_a_folder" / "house.db", SceneGraphConfig())
    assert memory.persist_error is not None and "cannot" in memory.persist_error
    agent.navigator.memory = memory
    assert agent.storage_error == memory.persist_error
    memory.insert_observation(1, [0.0, 0.0, 0.0], np.ones(memory.config.embedding_dim))   # it works, in RAM
    assert memory.stats().places == 1
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"x" * 4096)
    with pytest.raises(CorruptStoreError):
        agent._open_memory(damaged, SceneGraphConfig())
    strict = LearnedAgent("memnav", LearnedAgentOptions(lifelong_dir=str(tmp_path)))
    strict.navigator.cfg = dataclasses.replace(strict.navigator.cfg, memory_in_ram_on_write_failure=False)
    with pytest.raises(MemoryStoreError):
        strict._open_memory(tmp_path / "not_a_folder" / "house.db", SceneGraphConfig())
