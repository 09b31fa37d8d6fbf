"""Navigator: memory tokens per memory kind, stop decisions, goal-image checks (real encoder network)."""
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from memnav.core.encoder import Encoder
from memnav.core.navigator import MemoryKind, Navigator, NavigatorConfig, check_goal_image
from memnav.core.policy import MOVES, TOKEN_GEOMETRY, MemoryPolicy, PolicyConfig
from memnav.core.stop import GoalBeliefCalibrator
from memnav.core.types import Action, Pose2D

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="module")
def encoder():
    # the shipped encoder: an untrained one maps all random frames to nearly the same embedding
    return Encoder.from_checkpoint(MODELS / "encoder.pt")


def _calibrator():
    # p > 0.5 only for (near-)identical views
    return GoalBeliefCalibrator(np.array([4000.0, 2.0, -3997.0]), ("similarity", "verification"))


def _frame(seed: int):
    rng = np.random.default_rng(seed)
    rgb = (rng.random((64, 64, 3)) * 255).astype(np.uint8)
    depth = rng.uniform(0.5, 4.0, (64, 64)).astype(np.float32)
    return rgb, depth


def _nav(encoder, kind: MemoryKind, **kw):
    cfg = NavigatorConfig(memory=kind.value, buffer_capacity=4, retrieval_k=3, **kw)
    policy = MemoryPolicy(PolicyConfig(memory_tokens=cfg.memory_tokens, hidden_dim=32, token_dim=16, heads=2))
    return Navigator(encoder, _calibrator(), cfg, policy=policy)


def test_scene_graph_tokens_hold_buffer_items_and_retrievals(encoder):
    nav = _nav(encoder, MemoryKind.SCENE_GRAPH)
    goal_rgb, goal_depth = _frame(99)
    nav.reset(goal_rgb, goal_depth)
    for i in range(6):
        rgb, depth = _frame(i)
        inp = nav.observe(rgb, depth, Pose2D(1.5 * i, 0.0, 0.0), (i + 1) * 10**9)
    assert inp.tokens.shape == (7, encoder.embedding_dim + TOKEN_GEOMETRY + 3)
    assert inp.token_mask[:4].all()          # working buffer full (capacity 4)
    assert inp.token_mask[4:].sum() == 3     # top-3 long-term places
    assert nav.memory.stats().places == 6    # every frame was 1.5 m apart: all new places
    # the newest buffer item is the robot itself: relative pose zero
    d = encoder.embedding_dim
    assert np.allclose(inp.tokens[3, d:d + 2], 0.0)
    # a retrieved place's geometry is relative to the robot (behind it: x < 0)
    assert (inp.tokens[4:, d] <= 0).all()


def test_a_full_disk_under_the_memory_does_not_stop_the_robot(encoder, tmp_path):
    """The long-term memory's database fills up (SQLite's page limit, as a full disk): the navigator goes on
    with the memory in RAM and says why; with memory_in_ram_on_write_failure off, the step raises."""
    from memnav.core.memory import MemoryStoreError, SceneGraphConfig, SceneGraphMemory

    for keep in (True, False):
        nav = _nav(encoder, MemoryKind.SCENE_GRAPH, memory_in_ram_on_write_failure=keep)
        nav.memory.close()
        nav.memory = SceneGraphMemory(SceneGraphConfig(embedding_dim=encoder.embedding_dim,
                                                       db_path=str(tmp_path / f"m{keep}.db")))
        nav.reset(*_frame(99))
        nav.observe(*_frame(0), Pose2D(0.0, 0.0, 0.0), 10**9)
        pages = nav.memory._store._conn.execute("PRAGMA page_count").fetchone()[0]
        nav.memory._store._conn.execute(f"PRAGMA max_page_count = {pages}")
        frames = [(*_frame(i), Pose2D(1.5 * i, 0.0, 0.0), (i + 1) * 10**9) for i in range(1, 12)]
        if not keep:
            with pytest.raises(MemoryStoreError, match="full"):
                for frame in frames:
                    nav.observe(*frame)
            continue
        for frame in frames:
            nav.observe(*frame)                      # every step goes through
        assert nav.memory.persist_error is not None and "full" in nav.memory.persist_error
        assert nav.memory.stats().places == 12       # 1.5 m apart: every frame a new place, in RAM


def test_episodic_tokens_fifo_and_none_has_no_tokens(encoder):
    nav = _nav(encoder, MemoryKind.EPISODIC)
    nav.reset(*_frame(50))
    for i in range(10):
        inp = nav.observe(*_frame(i), Pose2D(0.25 * i, 0.0, 0.0), (i + 1) * 10**9)
    assert inp.token_mask.all() and len(inp.token_mask) == 7   # FIFO of the last 7
    d = encoder.embedding_dim
    assert inp.tokens[0, d] == pytest.approx(-6 * 0.25 / 5.0)   # oldest kept is 6 steps behind
    gru = _nav(encoder, MemoryKind.NONE)
    gru.reset(*_frame(50))
    inp = gru.observe(*_frame(1), Pose2D(0, 0, 0), 1)
    assert inp.tokens.shape[0] == 0 and gru.memory is None


def test_stop_fires_on_the_goal_view_and_not_elsewhere(encoder):
    nav = _nav(encoder, MemoryKind.NONE)
    goal = _frame(7)
    nav.reset(*goal)
    action, inp, goal_p = nav.act(*_frame(3), Pose2D(0, 0, 0), 1)
    assert action in MOVES and not inp.stop.stop and 0.0 <= goal_p <= 1.0
    action, inp, _ = nav.act(*goal, Pose2D(0, 0, 0), 2)
    assert inp.similarity == pytest.approx(1.0, abs=1e-4)
    assert action == Action.STOP and inp.belief > 0.5


def test_fixed_threshold_rule(encoder):
    nav = _nav(encoder, MemoryKind.NONE, stop_rule="fixed", fixed_threshold=0.99)
    nav.reset(*_frame(7))
    _, inp, _ = nav.act(*_frame(7), Pose2D(0, 0, 0), 1)
    assert inp.stop.stop == (inp.belief >= 0.99)


def test_policy_memory_size_must_match(encoder):
    policy = MemoryPolicy(PolicyConfig(memory_tokens=3, hidden_dim=32, token_dim=16, heads=2))
    with pytest.raises(ValueError, match="memory tokens"):
        Navigator(encoder, _calibrator(), NavigatorConfig(memory="scene_graph"), policy=policy)


def test_goal_image_checks():
    with pytest.raises(ValueError, match="empty"):
        check_goal_image(np.zeros((0, 0, 3), np.uint8))
    with pytest.raises(ValueError, match="shape"):
        check_goal_image(np.zeros((4, 4, 4, 4)))
    grey = check_goal_image(np.full((20, 30), 0.5))
    assert grey.shape == (20, 30, 3) and grey.dtype == np.uint8 and grey[0, 0, 0] == 127
    rgba = check_goal_image(np.zeros((16, 16, 4), np.uint8))
    assert rgba.shape == (16, 16, 3)
    # integers: unsigned ones from their full range (a 16-bit image is not clipped white), signed ones as 0-255
    wide = check_goal_image(np.full((16, 16, 3), [1000, 30000, 65535], np.uint16))
    assert wide[0, 0].tolist() == [3, 116, 255]
    assert check_goal_image(np.full((16, 16), 1, np.int64))[0, 0, 0] == 1     # not stretched to 255
    with pytest.raises(ValueError, match="signed integers"):
        check_goal_image(np.full((16, 16, 3), 300, np.int32))


def test_goal_of_another_size_is_resized(encoder):
    nav = _nav(encoder, MemoryKind.NONE)
    big = (np.random.default_rng(0).random((240, 320, 3)) * 255).astype(np.uint8)
    nav.reset(big, np.ones((10, 10), np.float32))   # mismatched depth is dropped, not an error
    assert nav.goal.shape == (encoder.embedding_dim,)
    assert np.linalg.norm(nav.goal) == pytest.approx(1.0, abs=1e-4)


def _move(pose: Pose2D, action: Action) -> Pose2D:
    import math
    if action is Action.MOVE_FORWARD:
        return Pose2D(pose.x_m + 0.25 * math.cos(pose.yaw_rad), pose.y_m + 0.25 * math.sin(pose.yaw_rad), pose.yaw_rad)
    turn = {Action.TURN_LEFT: math.radians(30), Action.TURN_RIGHT: -math.radians(30)}.get(action, 0.0)
    return Pose2D(pose.x_m, pose.y_m, pose.yaw_rad + turn)


def _remember_route(nav, goal_frame):
    """An earlier visit: places every 1.5 m along +x, the last one seen as the goal photo (facing +y)."""
    nav.reset(*_frame(77))
    poses = [Pose2D(0.0, 0.0, 0.0), Pose2D(1.5, 0.0, 0.0), Pose2D(3.0, 0.0, 1.5708)]
    for i, p in enumerate(poses):
        nav.observe(*(goal_frame if i == 2 else _frame(10 + i)), p, (i + 1) * 10**9)
    return poses[-1]


def test_homing_follows_the_scene_graph_to_a_remembered_goal_view_and_stops(encoder):
    nav = _nav(encoder, MemoryKind.SCENE_GRAPH, homing=True, homing_min_similarity=0.99)
    goal = _frame(99)
    target = _remember_route(nav, goal)
    nav.reset(*goal)                                   # a new episode; the long-term memory is kept
    pose, stamp, actions, modes = Pose2D(0.0, 0.0, 3.1416), 10 * 10**9, [], []
    for _ in range(40):
        near = abs(pose.x_m - target.x_m) < 0.3 and abs(pose.y_m - target.y_m) < 0.3
        facing = abs(((pose.yaw_rad - target.yaw_rad + 3.1416) % 6.2832) - 3.1416) < 0.3
        frame = goal if near and facing else _frame(200 + len(actions))   # the goal view only from there
        action, _, _ = nav.act(*frame, pose, stamp)
        actions.append(action)
        modes.append(nav.mode)
        if action is Action.STOP:
            break
        pose, stamp = _move(pose, action), stamp + 10**9
    assert actions[-1] is Action.STOP, actions
    assert abs(pose.x_m - target.x_m) < 0.3 and abs(pose.y_m - target.y_m) < 0.3
    assert set(modes[:-1]) == {"homing"}               # every move came from the route, none from the policy
    assert actions[0] is Action.TURN_RIGHT or actions[0] is Action.TURN_LEFT   # it started facing away


def test_homing_drops_a_blocked_target_and_is_off_by_default(encoder):
    nav = _nav(encoder, MemoryKind.SCENE_GRAPH, homing=True, homing_min_similarity=0.99)
    goal = _frame(99)
    _remember_route(nav, goal)
    nav.reset(*goal)
    pose = Pose2D(0.0, 0.0, 0.0)                       # facing the route: homing moves forward
    action, _, _ = nav.act(*_frame(300), pose, 10 * 10**9)
    assert (action, nav.mode) == (Action.MOVE_FORWARD, "homing")
    nav.act(*_frame(301), pose, 11 * 10**9)            # the forward move did not move: blocked
    assert nav.mode == "policy" and nav._target is None and len(nav._failed) == 1, nav._failed
    plain = _nav(encoder, MemoryKind.SCENE_GRAPH)
    _remember_route(plain, goal)
    plain.reset(*goal)
    plain.act(*_frame(300), Pose2D(0.0, 0.0, 0.0), 10 * 10**9)
    assert plain.mode == "policy"


def test_candidate_prior_is_what_the_memory_saw_there_facing_that_way(encoder):
    nav = _nav(encoder, MemoryKind.SCENE_GRAPH, candidate_prior=True, prior_unseen=0.5)
    goal = _frame(99)
    target = _remember_route(nav, goal)                # the goal photo was seen at (3, 0) facing +y
    nav.reset(*goal)
    assert nav._view_prior(Pose2D(target.x_m + 0.2, 0.3, target.yaw_rad)) == pytest.approx(1.0, abs=1e-5)
    assert nav._view_prior(Pose2D(target.x_m + 0.2, 0.3, -target.yaw_rad)) == 0.5   # facing away: unseen
    assert nav._view_prior(Pose2D(10.0, 10.0, 0.0)) == 0.5                          # nothing remembered there
    other = nav._view_prior(Pose2D(1.5, 0.0, 0.2))   # the place at (1.5, 0) shows something else
    assert other < 0.99 and other == pytest.approx(float(np.dot(encoder.encode(*_frame(11)), nav.goal)), abs=1e-5)
    for bad in ({"candidate_pool": 0}, {"prior_angle_deg": 200.0}, {"prior_radius_m": float("nan")}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            NavigatorConfig(**bad)


def test_the_cameras_offset_ahead_of_the_axis_reaches_the_map_and_stays_through_camera_info(encoder):
    """NavigatorConfig.camera_forward_m (and camera_pitch_deg, also to the RGB-D goal localizer) goes to the
    occupancy map; a camera_info (field of view and height only) keeps them; an offset beyond 2 m is refused
    naming the field, and changes nothing."""
    nav = _nav(encoder, MemoryKind.SCENE_GRAPH, camera_forward_m=0.3, camera_pitch_deg=15.0)
    assert nav.explorer.cfg.camera_forward_m == 0.3
    assert nav.explorer.cfg.camera_pitch_deg == nav.localizer_cfg.pitch_deg == 15.0
    nav.set_camera(60.0, 0.9)
    assert (nav.cfg.hfov_deg, nav.cfg.camera_forward_m, nav.explorer.cfg.camera_forward_m) == (60.0, 0.3, 0.3)
    assert (nav.cfg.camera_pitch_deg, nav.explorer.cfg.camera_pitch_deg, nav.localizer_cfg.pitch_deg) == (15.0,) * 3
    with pytest.raises(ValueError, match="camera_forward_m"):
        nav.set_camera(60.0, 0.9, 2.5)
    assert (nav.cfg.camera_forward_m, nav.explorer.cfg.camera_forward_m) == (0.3, 0.3)
    nav.set_camera(90.0, 1.25, 0.0)
    assert (nav.cfg.camera_forward_m, nav.explorer.cfg.camera_forward_m) == (0.0, 0.0)
    with pytest.raises(ValueError, match="NavigatorConfig.camera_forward_m"):
        NavigatorConfig(camera_forward_m=float("inf"))


def test_sweep_bonus_comes_from_remembered_places_that_look_like_the_goal(encoder):
    nav = _nav(encoder, MemoryKind.SCENE_GRAPH, sweep_prior_weight=20.0, sweep_prior_floor=0.5)
    goal = _frame(99)
    target = _remember_route(nav, goal)                # the goal photo was seen at (3, 0)
    nav.reset(*goal)
    bonus = nav._sweep_bonus(Pose2D(0.0, 0.0, 0.0))
    sims = [float(np.dot(encoder.encode(*_frame(10 + i)), nav.goal)) for i in range(2)]
    above = sum(s > 0.5 for s in sims)                 # the other two places count only if they look alike
    assert bonus is not None and bonus.shape == (1 + above, 3)
    assert bonus[0, :2] == pytest.approx([target.x_m, target.y_m], abs=1e-4)   # no anchor: the map frame
    assert bonus[0, 2] == pytest.approx(20.0 * (1.0 - 0.5), abs=1e-3)           # similarity 1: 10 m nearer
    nav._anchor = Pose2D(1.0, 0.0, 0.0)                # an episode that began at (1, 0): its map frame is shifted
    shifted = nav._sweep_bonus(Pose2D(-1.0, 0.0, 0.0))
    assert shifted[0, :2] == pytest.approx([target.x_m - 1.0, target.y_m], abs=1e-4)
    nav._anchor = None
    # the goal view seen again in this episode, far from the route: a new place, but not a remembered one
    nav.observe(*goal, Pose2D(9.0, 6.0, 0.0), 10 * 10**9)
    assert nav.memory.stats().places == 4
    again = nav._sweep_bonus(Pose2D(0.0, 0.0, 0.0))
    assert again.shape == bonus.shape and np.allclose(again, bonus)
    assert _nav(encoder, MemoryKind.SCENE_GRAPH)._sweep_bonus(Pose2D(0.0, 0.0, 0.0)) is None   # weight 0: off
    for bad in ({"sweep_prior_weight": -1.0}, {"sweep_prior_floor": 1.5}, {"sweep_prior_k": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            NavigatorConfig(**bad)


def test_a_nearby_candidate_is_worth_a_trip_at_a_lower_scan_score(encoder):
    from memnav.core.scan_match import Candidate

    here = Pose2D(1.0, 1.0, 0.0)
    near, far = Pose2D(3.0, 2.0, 0.0), Pose2D(6.0, 1.0, 0.0)      # 2.2 m and 5 m from the robot
    nav = _nav(encoder, MemoryKind.NONE, candidate_min_score=0.85, candidate_near_m=3.0,
               candidate_near_min_score=0.65)
    assert nav._candidate_worth(Candidate(near, 0.7), here)
    assert not nav._candidate_worth(Candidate(near, 0.6), here)      # near, but fits too poorly
    assert not nav._candidate_worth(Candidate(far, 0.7), here)       # fits as well, but too far for its score
    assert nav._candidate_worth(Candidate(far, 0.9), here)           # a clear fit is worth any trip
    nav._explored = True                                             # nothing left to explore: any fit
    assert nav._candidate_worth(Candidate(far, 0.61), here)
    off = _nav(encoder, MemoryKind.NONE, candidate_min_score=0.85)   # the default: no nearby exception
    assert not off._candidate_worth(Candidate(near, 0.84), here)
    for bad in ({"candidate_near_m": -1.0}, {"candidate_near_min_score": 1.5}, {"colour_weight": -1.0},
                {"candidate_min_colour": 1.5}, {"colour_sigma": 0.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            NavigatorConfig(**bad)


def test_with_a_map_homing_drives_around_the_wall_a_graph_edge_crosses(encoder, two_room_scene):
    """An earlier visit remembered two places whose traversability edge runs straight through the wall between
    the rooms; with an occupancy map the remembered goal place becomes a candidate reached through the door."""
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    a, b = np.array([2.5, 0.0, 3.5]), np.array([5.0, 0.0, 3.5])     # the wall at x = 4 m, door at z 1.5-2.5
    cfg = NavigatorConfig(memory=MemoryKind.SCENE_GRAPH.value, buffer_capacity=4, retrieval_k=3, explore=True,
                          scan_match=False, homing=True, homing_min_similarity=0.95, persistent_map=True,
                          homing_via_map=True)
    policy = MemoryPolicy(PolicyConfig(memory_tokens=cfg.memory_tokens, hidden_dim=32, token_dim=16, heads=2))
    nav = Navigator(encoder, _calibrator(), cfg, policy=policy)
    goal = sim.render_at(b, math.pi / 2)
    nav.reset(*_frame(5))                              # the earlier visit
    for i, (pos, yaw) in enumerate(((a, 0.0), (a, math.pi), (b, 0.0), (b, math.pi / 2))):
        view = sim.render_at(pos, yaw)
        nav.observe(view.rgb, view.depth, view.pose, (i + 1) * 10**9)
    ids = [int(n) for n in nav.memory.place_ids()]     # one place per view, in the order seen
    edge = nav.memory.shortest_path(ids[1], ids[2])    # the 2.5 m traversability edge through the wall
    assert len(ids) == 4 and edge is not None and list(edge.node_ids) == [ids[1], ids[2]]
    nav.reset(goal.rgb, goal.depth)                    # a new episode from room 1, memory and map kept
    sim.set_agent_pose(a, math.pi)
    obs = sim.render_at(a, math.pi)
    modes = []
    for t in range(300):
        action, _, _ = nav.act(obs.rgb, obs.depth, obs.pose, (10 + t) * 10**9)
        modes.append(nav.mode)
        if action is Action.STOP:
            break
        obs = sim.step(action)
    here = sim.agent_state.position
    sim.close()
    assert action is Action.STOP and modes[-1] == "homing", modes
    assert math.hypot(here[0] - b[0], here[2] - b[2]) < 0.5
    assert "homing" in modes[:20] and "explore" not in modes and "policy" not in modes


_APPROACH_START = np.array([2.5, 0.0, 3.5])   # where _approach_setup's robot starts, facing the goal 1.5 m ahead


def _approach_setup(encoder, two_room_scene, min_inliers: int, stop_rule_stops: bool = True, **cfg_kw):
    """A robot whose stop rule always (or never) wants to stop, 1.5 m short of where the goal photo was taken,
    with a well-supported goal estimate there (as RGB-D localization would give it): (sim, navigator, the
    robot's first frame, the goal frame)."""
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    sim.set_agent_pose(_APPROACH_START, 0.0)
    first = sim.render_at(_APPROACH_START, 0.0)
    obs = first
    for _ in range(6):
        obs = sim.step(Action.MOVE_FORWARD)
    goal_pose = obs.pose.relative_to(first.pose)
    assert goal_pose.x_m == pytest.approx(1.5, abs=0.05)
    cfg = NavigatorConfig(memory=MemoryKind.NONE.value, explore=True, localize=False,
                          stop_approach_min_inliers=min_inliers, **cfg_kw)
    bias = 10.0 if stop_rule_stops else -10.0
    calibrator = GoalBeliefCalibrator(np.array([0.0, 0.0, bias]), ("similarity", "verification"))
    nav = Navigator(encoder, calibrator, cfg, policy=MemoryPolicy(PolicyConfig(memory_tokens=0, hidden_dim=32)))
    nav.reset(obs.rgb, obs.depth)
    sim.set_agent_pose(_APPROACH_START, 0.0)
    # a kept map lives in the odometry frame, a fresh one in the frame of the episode's first pose
    nav.goal_estimate, nav._goal_support = (obs.pose if cfg.persistent_map else goal_pose), 20
    return sim, nav, first, obs


def test_a_stop_short_of_a_localized_goal_drives_there_and_stops_facing_it(encoder, two_room_scene):
    sim, nav, obs, _ = _approach_setup(encoder, two_room_scene, min_inliers=10)
    action, inp, _ = nav.act(obs.rgb, obs.depth, obs.pose, 1)
    assert inp.stop.stop and action != Action.STOP and nav.mode == "approach"
    for t in range(2, 60):
        obs = sim.step(action)
        action, inp, _ = nav.act(obs.rgb, obs.depth, obs.pose, t)
        if action == Action.STOP:
            break
    assert action == Action.STOP and nav.mode == "approach"
    here = obs.pose.relative_to(sim.render_at(_APPROACH_START, 0.0).pose)
    assert math.hypot(here.x_m - 1.5, here.y_m) < 0.5 and inp.similarity > 0.9
    sim.close()


def test_without_stop_approach_or_with_too_little_support_the_stop_rule_stops_at_once(encoder, two_room_scene):
    for need in (0, 25):                      # off; the estimate's 20 inliers are fewer than needed
        sim, nav, obs, _ = _approach_setup(encoder, two_room_scene, min_inliers=need)
        action, _, _ = nav.act(obs.rgb, obs.depth, obs.pose, 1)
        assert action == Action.STOP and nav.mode == "stop"
        sim.close()


@pytest.mark.parametrize("cfg_kw, candidate_there, confirmed", [
    ({"corroborated_stop_similarity": 0.5}, False, True),    # the estimate there confirms a lower similarity
    ({"corroborated_stop_similarity": 0.0}, False, False),   # off: rejected
    # the corroborated bar out of reach: a scan-matched candidate agreeing with the estimate confirms at 0.5
    ({"corroborated_stop_similarity": 1.0, "agreeing_stop_similarity": 0.5}, True, True),
    ({"corroborated_stop_similarity": 1.0, "agreeing_stop_similarity": 0.5}, False, False),
])
def test_a_localized_goal_corroborates_a_look_around_below_the_candidate_similarity(encoder, two_room_scene, cfg_kw,
                                                                                     candidate_there, confirmed):
    """The stop rule never stops; the look-around at the goal estimate cannot reach a similarity of 1.0. With
    corroborated_stop_similarity the estimate there confirms a lower one, and with agreeing_stop_similarity
    the estimate and a pending candidate there together do: STOP; otherwise the spot is rejected."""
    from memnav.core.scan_match import Candidate

    sim, nav, obs, _ = _approach_setup(encoder, two_room_scene, min_inliers=10, stop_rule_stops=False,
                                       candidate_stop_similarity=1.0, **cfg_kw)
    if candidate_there:
        nav._candidate, nav._cand_kind = Candidate(nav.goal_estimate, 0.9), "candidate"
    action, inp, obs = _judge_estimate(sim, nav, obs)
    if confirmed:
        assert action == Action.STOP and nav.mode == "approach" and 0.5 <= inp.similarity < 1.0
    else:
        assert action != Action.STOP and nav.goal_estimate is None    # rejected and forgotten
    sim.close()


def test_corroborating_bars_are_similarities():
    for name in ("corroborated_stop_similarity", "agreeing_stop_similarity"):
        with pytest.raises(ValueError, match=name):
            NavigatorConfig(**{name: 1.5})


def _judge_estimate(sim, nav, obs, first_stamp: int = 1):
    """From _approach_setup's start, act until the robot stops or has judged the goal estimate and moved on;
    check that it got there and looked around. Returns (last action, last step input, last frame)."""
    modes = []
    for t in range(first_stamp, first_stamp + 60):
        action, inp, _ = nav.act(obs.rgb, obs.depth, obs.pose, t)
        modes.append(nav.mode)
        if action == Action.STOP or (modes[-1] != "approach" and "approach" in modes):
            break
        obs = sim.step(action)
    here = obs.pose.relative_to(sim.render_at(_APPROACH_START, 0.0).pose)
    assert math.hypot(here.x_m - 1.5, here.y_m) < 0.5 and modes.count("approach") >= 11   # there, looked around
    return action, inp, obs


def test_a_known_house_has_its_own_corroborated_bar(encoder, two_room_scene):
    """The same look-around at the same goal estimate: on a first visit the corroborated bar (1.0, out of reach)
    rejects it; in the next episode, on the map kept from the first, known_corroborated_stop_similarity (0.5)
    confirms it."""
    sim, nav, first, goal = _approach_setup(encoder, two_room_scene, min_inliers=10, stop_rule_stops=False,
                                            persistent_map=True, candidate_stop_similarity=1.0,
                                            corroborated_stop_similarity=1.0, known_corroborated_stop_similarity=0.5)
    assert not nav.known_map
    action, _, _ = _judge_estimate(sim, nav, first)
    assert action != Action.STOP and nav.goal_estimate is None          # a first visit: rejected
    nav.reset(goal.rgb, goal.depth)                                      # the next visit: the map is kept
    assert nav.known_map
    sim.set_agent_pose(_APPROACH_START, 0.0)
    nav.goal_estimate, nav._goal_support = goal.pose, 20
    action, inp, _ = _judge_estimate(sim, nav, sim.render_at(_APPROACH_START, 0.0), first_stamp=100)
    assert action == Action.STOP and nav.mode == "approach" and 0.5 <= inp.similarity < 1.0
    sim.close()
    # without a kept map every episode is a first visit
    sim, nav, first, goal = _approach_setup(encoder, two_room_scene, min_inliers=10, stop_rule_stops=False,
                                            known_corroborated_stop_similarity=0.5)
    nav.reset(goal.rgb, goal.depth)
    assert not nav.known_map
    sim.close()
    with pytest.raises(ValueError, match="known_corroborated_stop_similarity"):
        NavigatorConfig(known_corroborated_stop_similarity=-0.1)


def _search_two_rooms(encoder, two_room_scene, max_actions: int = 700, **cfg):
    """Explore the two-room scene for a goal photo of nowhere in it (the stop rule never fires): the modes,
    positions and last action of every step."""
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    start = np.array([1.0, 0.0, 3.0])
    sim.set_agent_pose(start, 0.0)
    obs = sim.render_at(start, 0.0)
    never = GoalBeliefCalibrator(np.array([0.0, 0.0, -10.0]), ("similarity", "verification"))
    nav = Navigator(encoder, never, NavigatorConfig(memory=MemoryKind.NONE.value, explore=True, scan_match=False,
                                                    **cfg),
                    policy=MemoryPolicy(PolicyConfig(memory_tokens=0, hidden_dim=32)))
    nav.reset(*_frame(7))
    modes, path = [], []
    for t in range(1, max_actions):
        action, _, _ = nav.act(obs.rgb, obs.depth, obs.pose, t)
        modes.append(nav.mode)
        path.append((obs.pose.x_m, obs.pose.y_m))
        if action == Action.STOP:
            break
        obs = sim.step(action)
    sim.close()
    return modes, path, action, nav


def test_sweep_stands_away_from_the_path_once_everything_is_explored_then_falls_back_to_the_best_view(
        encoder, two_room_scene):
    modes, path, action, nav = _search_two_rooms(encoder, two_room_scene, sweep_spacing_m=1.5)
    assert action == Action.STOP and modes[-1] == "best_view"
    first = modes.index("sweep")
    assert "explore" in modes[:first] and "explore" not in modes[first:]
    # each sweep position (where the robot turned a full circle on the spot) was about 1.5 m or more from the
    # path before the sweep began (less one 0.1 m cell and the distance at which a target counts as reached)
    runs = [(p, len(list(g))) for p, g in itertools.groupby(path[first:])]
    spots = [p for p, n in runs if n >= 11]
    assert len(spots) >= 2
    before = np.array(path[:first])
    for p in spots:
        assert np.min(np.hypot(*(before - np.array(p)).T)) >= 1.5 - 0.1 - nav.explorer.cfg.target_reach_m


def test_a_reached_frontier_gets_a_look_around_unless_the_robot_looked_around_nearby(encoder, two_room_scene):
    modes, path, _, nav = _search_two_rooms(encoder, two_room_scene, frontier_look_turns=11)
    runs, i = [], 0     # (first index, length) of each run of look-around turns
    for mode, group in itertools.groupby(modes):
        n = len(list(group))
        if mode == "look":
            runs.append((i, n))
        i += n
    assert runs[0] == (0, 11) and len(runs) >= 2           # the start, then at least one frontier
    for first, n in runs[1:]:
        assert n == 11 and len(set(path[first:first + n])) == 1    # a full turn on the spot
        assert modes[first - 1] == "explore" and modes[first + n] == "explore"    # on the way, then on again
    spots = np.array([path[first] for first, _ in runs])
    gaps = np.hypot(*(spots[:, None, :] - spots[None, :, :]).transpose(2, 0, 1))
    assert gaps[np.triu_indices(len(spots), 1)].min() >= nav.cfg.frontier_look_spacing_m
    plain, *_ = _search_two_rooms(encoder, two_room_scene)      # off by default: only the start look-around
    assert plain.count("look") == 11 and "look" not in plain[11:]
    for bad in ({"frontier_look_turns": -1}, {"frontier_look_turns": 1.5}, {"frontier_look_spacing_m": -1.0},
                {"map_range_m": 0.0}, {"map_range_m": float("inf")}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            NavigatorConfig(**bad)


def test_late_in_the_episode_the_search_gives_way_to_the_best_view(encoder, two_room_scene):
    modes, _, action, _ = _search_two_rooms(encoder, two_room_scene, sweep_spacing_m=1.5, best_view_after_steps=40)
    assert action == Action.STOP and "sweep" not in modes
    assert set(modes[40:]) == {"best_view"} and "explore" in modes[:40]


def test_verification_runs_below_the_similarity_gate_only_every_nth_frame(encoder, two_room_scene):
    """1.5 m behind the goal spot, facing the same way (towards the door), the embeddings disagree (similarity
    near 0) but ORB matches do: verify_every_steps lets the verification see it on every n-th frame only."""
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    start = np.array([1.0, 0.0, 2.0])
    sim.set_agent_pose(start, -math.pi / 2)
    here = sim.render_at(start, -math.pi / 2)
    goal = here
    for _ in range(6):
        goal = sim.step(Action.MOVE_FORWARD)
    sim.close()
    never = GoalBeliefCalibrator(np.array([0.0, 0.0, -10.0]), ("similarity", "verification"))
    scores = {}
    for every in (0, 2):
        cfg = NavigatorConfig(memory=MemoryKind.NONE.value, verify_min_similarity=0.99, verify_every_steps=every)
        nav = Navigator(encoder, never, cfg, policy=MemoryPolicy(PolicyConfig(memory_tokens=0, hidden_dim=32)))
        nav.reset(goal.rgb, goal.depth)
        scores[every] = [nav.observe(here.rgb, here.depth, here.pose, t).verification for t in range(1, 5)]
        assert nav.last.similarity < 0.99
    assert scores[0] == [0.0] * 4
    assert scores[2][0] == scores[2][2] == 0.0 and scores[2][1] > 0.5 and scores[2][3] > 0.5
    with pytest.raises(ValueError, match="verify_every_steps"):
        NavigatorConfig(verify_every_steps=-1)


def _coloured_two_rooms(encoder, two_room_scene, **kw):
    """A Navigator whose map has seen both rooms of the two-room scene (a look-around at four spots), its goal
    a view into the second room's back-left corner; returns (navigator, last observation, goal observation)."""
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    try:
        nav = _nav(encoder, MemoryKind.NONE, explore=True, scan_match=True, persistent_map=True, candidate_pool=8,
                   colour_weight=1.0, **kw)
        goal = sim.render_at(np.array([6.5, 0.0, 1.0]), 0.6)
        nav.reset(goal.rgb, goal.depth)
        for x, z in ((1.0, 3.0), (2.5, 1.0), (6.0, 3.0), (6.0, 1.5)):
            sim.set_agent_pose(np.array([x, 0.0, z]), 0.0)
            obs = sim.render_at(np.array([x, 0.0, z]), 0.0)
            for _ in range(12):
                nav.observe(obs.rgb, obs.depth, obs.pose, stamp_ns=1)
                obs = sim.step(Action.TURN_LEFT)
        return nav, obs, goal
    finally:
        sim.close()


def test_colour_fit_orders_and_filters_scan_matched_candidates(encoder, two_room_scene):
    """The robot's map keeps surface colours as it observes; candidates are then ranked by scan score + colour
    fit and those whose colours contradict the goal's are skipped."""
    nav, obs, goal = _coloured_two_rooms(encoder, two_room_scene, candidate_min_colour=0.3)
    cands = nav.explorer.match_goal(obs.pose, nav._scan, nav._match_cfg)
    fits = [nav.explorer.colour_fit(nav._scan, c.pose) for c in cands]
    g = goal.gt_pose

    def is_goal(c):
        return math.hypot(c.pose.x_m - g.x_m, c.pose.y_m - g.y_m) < 0.35

    assert any(f is not None and f < 0.3 for f in fits) and sum(map(is_goal, cands)) == 1
    assert nav.explorer.colour_fits(nav._scan, [c.pose for c in cands]) == fits     # one batch, the same fits
    ordered = nav._colour_order(list(zip(cands, fits)))
    assert is_goal(ordered[0])
    assert len(ordered) == sum(f is None or f >= 0.3 for f in fits) < len(cands)
    keys = [c.score + (f or 0.0) for c, f in zip(cands, fits)]
    assert [round(c.score + (nav.explorer.colour_fit(nav._scan, c.pose) or 0.0), 9) for c in ordered] == \
        sorted((round(k, 9) for k, f in zip(keys, fits) if f is None or f >= 0.3), reverse=True)


def test_a_candidate_whose_colours_fit_interrupts_exploration_at_a_moderate_scan_score(encoder, two_room_scene):
    """While exploring, a scan fit below candidate_min_score is worth a trip when its colour fit is at least
    candidate_colour_fit (and its score at least candidate_colour_min_score); a look-alike in another colour
    is not, and with the option off neither is."""
    from memnav.core.scan_match import Candidate

    nav, obs, goal = _coloured_two_rooms(encoder, two_room_scene, candidate_colour_fit=0.6,
                                         candidate_colour_min_score=0.7)
    cands = nav.explorer.match_goal(obs.pose, nav._scan, nav._match_cfg)
    fits = nav.explorer.colour_fits(nav._scan, [c.pose for c in cands])
    g = goal.gt_pose
    true = [(c, f) for c, f in zip(cands, fits) if math.hypot(c.pose.x_m - g.x_m, c.pose.y_m - g.y_m) < 0.35]
    other = [(c, f) for c, f in zip(cands, fits) if f is not None and f < 0.6]
    assert len(true) == 1 and true[0][1] >= 0.6 and other
    (goal_pose, goal_fit), (other_pose, other_fit) = (true[0][0].pose, true[0][1]), (other[0][0].pose, other[0][1])
    far = Pose2D(-20.0, -20.0, 0.0)          # candidate_near_m plays no part
    nav._explored = False
    assert nav.cfg.candidate_near_m == 0 and nav.cfg.candidate_min_score == 0.85
    assert nav._candidate_worth(Candidate(goal_pose, 0.75), far, goal_fit)
    assert not nav._candidate_worth(Candidate(goal_pose, 0.75), far, None)        # no colours to compare
    assert not nav._candidate_worth(Candidate(goal_pose, 0.65), far, goal_fit)    # below candidate_colour_min_score
    assert not nav._candidate_worth(Candidate(other_pose, 0.75), far, other_fit)  # colours disagree
    assert nav._candidate_worth(Candidate(other_pose, 0.9), far, other_fit)       # a clear scan fit, as before
    nav.cfg.candidate_colour_fit = 0.0
    assert not nav._candidate_worth(Candidate(goal_pose, 0.75), far, goal_fit)
    for bad in ({"candidate_colour_fit": -0.1}, {"candidate_colour_min_score": 1.2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            NavigatorConfig(**bad)


def test_search_view_draws_the_map_plan_and_markers_in_the_odometry_frame(encoder, two_room_scene):
    """The map is kept in the frame of the episode's first pose (turned 0.7 rad here); what search_view gives a
    user lies on the house's walls and free floor in the odometry frame all the same."""
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    start = np.array([1.0, 0.0, 3.0])
    sim.set_agent_pose(start, 0.7)
    obs = sim.render_at(start, 0.7)
    never = GoalBeliefCalibrator(np.array([0.0, 0.0, -10.0]), ("similarity", "verification"))
    nav = Navigator(encoder, never, NavigatorConfig(memory=MemoryKind.NONE.value, explore=True, scan_match=False),
                    policy=MemoryPolicy(PolicyConfig(memory_tokens=0, hidden_dim=32)))
    nav.reset(*_frame(7))
    assert nav.search_view().grid.shape == (0, 0)           # no frame yet: no map
    planned = 0
    for t in range(1, 40):
        action, _, _ = nav.act(obs.rgb, obs.depth, obs.pose, t)
        view, here = nav.search_view(), obs.pose
        if view.plan:
            planned += 1
            assert view.plan_kind == "frontier" and nav.mode == "explore"
            assert view.plan[0] == pytest.approx((obs.pose.x_m, obs.pose.y_m), abs=1e-5)   # starts at the robot
        obs = sim.step(action)
    sim.close()
    assert planned >= 5 and view.resolution_m == nav.explorer.cfg.cell_m
    assert view.origin.yaw_rad == pytest.approx(0.7)        # the first pose's heading in odometry
    grid = view.grid
    assert {-1, 0, 100} <= set(np.unique(grid).tolist())

    def odometry_xy(rows, cols):
        return view.origin.apply((cols + 0.5) * view.resolution_m, (rows + 0.5) * view.resolution_m)

    # the house in odometry (x = -z, y = -x of the scene): walls at x = 0 / -4 and y = 0 / -8, the middle wall at
    # y = -4 (door at x in [-2.5, -1.5]) and the box at x, y in [-1.6, -1.0]
    x, y = odometry_xy(*np.nonzero(grid == 100))
    to_wall = np.minimum.reduce([np.abs(x), np.abs(x + 4), np.abs(y), np.abs(y + 8), np.abs(y + 4),
                                 np.hypot(np.clip(np.abs(x + 1.3) - 0.3, 0, None),
                                          np.clip(np.abs(y + 1.3) - 0.3, 0, None))])
    assert np.quantile(to_wall, 0.95) <= 0.15
    x, y = odometry_xy(*np.nonzero(grid == 0))
    assert ((x > -4.1) & (x < 0.1) & (y > -8.1) & (y < 0.1)).all()     # free floor only inside the house
    rel = here.relative_to(view.origin)
    assert grid[int(rel.y_m // view.resolution_m), int(rel.x_m // view.resolution_m)] == 0   # robot on free floor
