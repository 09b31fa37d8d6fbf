"""VelocityGuard: limits, ramps, watchdog, command timeout and latched e-stop, all on explicit times."""
import math

import numpy as np
import pytest

from memnav.core.velocity_guard import (
    EstopInbox,
    GuardReason,
    Source,
    VelocityGuard,
    VelocityGuardConfig,
    blind_share,
    nearest_ahead_m,
)


def fresh_guard(**kw) -> VelocityGuard:
    guard = VelocityGuard(**kw)
    for s in Source:
        guard.heard(s, 0.0)
    return guard


def drive(guard: VelocityGuard, v: float, w: float, t0: float, t1: float, dt: float = 0.02):
    """Command (v, w) and feed all sensors every dt from t0 to t1; returns the outputs."""
    outs, t = [], t0
    while t <= t1 + 1e-9:
        for s in Source:
            guard.heard(s, t)
        guard.command(v, w, t)
        outs.append(guard.update(t))
        t += dt
    return outs


def test_nothing_heard_yet_sends_zero():
    guard = VelocityGuard()
    guard.command(0.3, 0.0, 0.0)
    out = guard.update(0.0)
    assert (out.v_mps, out.w_radps, out.reason) == (0.0, 0.0, GuardReason.STALE_COLOR)
    assert out.reason.stops and not GuardReason.OK.stops and not GuardReason.LIMITED.stops


def test_ramps_up_at_the_acceleration_limit_then_passes_the_command():
    guard = fresh_guard(max_linear_accel_mps2=0.5, max_angular_accel_radps2=2.0)
    outs = drive(guard, 0.25, 0.4, 0.0, 1.0)
    assert outs[0].v_mps == 0.0 and outs[0].reason == GuardReason.LIMITED   # first update: dt = 0
    steps = [b.v_mps - a.v_mps for a, b in zip(outs, outs[1:])]
    assert max(steps) <= 0.5 * 0.02 + 1e-12
    # 0.25 m/s at 0.5 m/s^2 takes 0.5 s; 0.4 rad/s at 2 rad/s^2 takes 0.2 s
    assert outs[24].v_mps == pytest.approx(0.24) and outs[24].reason == GuardReason.LIMITED
    assert outs[-1].v_mps == pytest.approx(0.25) and outs[-1].w_radps == pytest.approx(0.4)
    assert outs[-1].reason == GuardReason.OK


def test_speed_limits_and_no_reverse():
    guard = fresh_guard(max_linear_mps=0.3, max_angular_radps=0.5, max_linear_accel_mps2=100.0,
                        max_angular_accel_radps2=100.0)
    out = drive(guard, 2.0, -3.0, 0.0, 0.1)[-1]
    assert (out.v_mps, out.w_radps, out.reason) == (0.3, -0.5, GuardReason.LIMITED)
    out = drive(guard, -0.2, 0.0, 0.12, 0.2)[-1]
    assert out.v_mps == 0.0 and out.reason == GuardReason.LIMITED
    guard = fresh_guard(max_reverse_mps=0.1, max_linear_accel_mps2=100.0)
    assert drive(guard, -0.2, 0.0, 0.0, 0.1)[-1].v_mps == pytest.approx(-0.1)


def test_decelerates_at_the_limit_when_the_command_drops():
    guard = fresh_guard(max_linear_accel_mps2=0.5)
    drive(guard, 0.25, 0.0, 0.0, 1.0)
    outs = drive(guard, 0.0, 0.0, 1.02, 1.2)
    assert outs[0].v_mps == pytest.approx(0.24)
    assert outs[-1].v_mps == pytest.approx(0.25 - 0.5 * 0.2)


def test_a_stalled_loop_does_not_allow_a_jump():
    guard = fresh_guard(max_linear_accel_mps2=0.5, max_dt_s=0.1, watchdog_s=5.0, cmd_timeout_s=5.0)
    guard.command(0.5, 0.0, 0.0)
    guard.update(0.0)
    assert guard.update(3.0).v_mps == pytest.approx(0.05)


@pytest.mark.parametrize("source,reason", [(Source.COLOR, GuardReason.STALE_COLOR),
                                           (Source.DEPTH, GuardReason.STALE_DEPTH),
                                           (Source.ODOM, GuardReason.STALE_ODOM)])
def test_watchdog_zeroes_at_once_when_one_input_goes_stale(source, reason):
    guard = fresh_guard(watchdog_s=0.5)
    drive(guard, 0.25, 0.3, 0.0, 1.0)
    # from t = 1.0 `source` is silent; everything else (and the command) keeps coming
    others = [s for s in Source if s != source]
    t, outs = 1.0, []
    while t < 1.8:
        t += 0.02
        for s in others:
            guard.heard(s, t)
        guard.command(0.25, 0.3, t)
        outs.append((t, guard.update(t)))
    first_zero = next(t for t, o in outs if o.reason == reason)
    assert first_zero - 1.0 == pytest.approx(0.52)   # the first check after 0.5 s without it
    assert all(o.v_mps > 0.2 for t, o in outs if t < first_zero)
    assert all((o.v_mps, o.w_radps) == (0.0, 0.0) for t, o in outs if t >= first_zero)
    # it comes back: the guard ramps up from zero again
    guard.heard(source, 2.0)
    guard.update(2.0)
    assert 0.0 < drive(guard, 0.25, 0.3, 2.02, 2.02)[-1].v_mps <= 0.5 * (0.1 + 0.02) + 1e-9  # max_dt_s, then dt


def test_silent_policy_means_zero():
    guard = fresh_guard(cmd_timeout_s=0.5)
    drive(guard, 0.25, 0.0, 0.0, 1.0)
    for s in Source:
        guard.heard(s, 1.6)
    out = guard.update(1.6)
    assert (out.v_mps, out.reason) == (0.0, GuardReason.STALE_COMMAND)


def test_estop_is_latched_until_released():
    guard = fresh_guard()
    drive(guard, 0.25, 0.0, 0.0, 1.0)
    guard.set_estop(True)
    outs = drive(guard, 0.25, 0.0, 1.02, 2.0)
    assert all((o.v_mps, o.w_radps, o.reason) == (0.0, 0.0, GuardReason.ESTOP) for o in outs)
    assert guard.estop
    guard.set_estop(False)
    outs = drive(guard, 0.25, 0.0, 2.02, 3.0)
    assert outs[0].reason == GuardReason.LIMITED and outs[0].v_mps == pytest.approx(0.01)  # ramps from zero
    assert outs[-1].reason == GuardReason.OK


def test_bad_commands_and_configs_are_refused():
    guard = fresh_guard()
    drive(guard, 0.2, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        guard.command(math.nan, 0.0, 1.01)
    assert guard.update(1.02).v_mps == pytest.approx(0.2)   # the last good command still holds
    with pytest.raises(ValueError, match="watchdog_s"):
        VelocityGuardConfig(watchdog_s=0.0)
    with pytest.raises(ValueError, match="max_linear_mps"):
        VelocityGuardConfig(max_linear_mps=-1.0)
    with pytest.raises(ValueError, match="max_angular_radps"):
        VelocityGuardConfig(max_angular_radps=math.inf)


def _wall(distance_m: float, cols: slice = slice(None), size: int = 64) -> np.ndarray:
    """A depth image (90 deg, camera 1.25 m up) of a floor, with a wall `distance_m` ahead in columns `cols` and
    no return elsewhere above the floor."""
    from memnav.core.frames import pixel_ray_offsets

    _, up = pixel_ray_offsets(np.arange(size), np.arange(size), size, size, 90.0)
    floor = np.where(up < 0, 1.25 / np.maximum(-up, 1e-9), 0.0).astype(np.float32)   # the floor's z-depth per row
    depth = np.repeat(floor[:, None], size, axis=1)
    wall = np.zeros_like(depth)
    wall[:, cols] = distance_m
    nearer = (wall > 0) & ((depth == 0) | (wall < depth))
    depth[nearer] = wall[nearer]
    return depth


def test_nearest_ahead_is_the_nearest_surface_in_the_robots_path():
    """Floor, ceiling, surfaces beside the path and no-returns do not count; a wall across the path does."""
    args = (90.0, 1.25, 0.25)
    assert math.isinf(nearest_ahead_m(_wall(0.0), *args))                          # floor only
    assert nearest_ahead_m(_wall(1.0), *args) == pytest.approx(1.0)                # a wall 1 m ahead
    # a wall 1 m ahead only in the leftmost columns: 0.5-1.0 m left of the axis, beside a 0.25 m path
    assert math.isinf(nearest_ahead_m(_wall(1.0, slice(0, 16)), *args))
    assert nearest_ahead_m(_wall(1.0, slice(0, 16)), 90.0, 1.25, 0.8) == pytest.approx(1.0)   # a wider robot
    hole = _wall(0.5)
    hole[:, 16:49] = 0.0                             # no return across the path (the wall stays beside it)
    hole[:2, :] = 1.0                                # a shelf 1 m ahead, 2.2 m up: above the robot
    assert math.isinf(nearest_ahead_m(hole, *args))
    hole[:, 30:34] = np.nan
    hole[40:44, 30:34] = 0.4                                                       # a box on the floor
    assert nearest_ahead_m(hole, *args) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="2-D"):
        nearest_ahead_m(np.zeros((4, 4, 3)), *args)


def test_a_one_pixel_wide_obstacle_is_seen_wherever_it_lies():
    """A chair leg one pixel wide at an odd column, a table edge one pixel high at an odd row: every pixel counts
    (sampling every 2nd pixel missed both)."""
    args = (90.0, 1.25, 0.25)
    assert nearest_ahead_m(_wall(0.6, slice(33, 34)), *args) == pytest.approx(0.6)   # a leg just right of the axis
    edge = _wall(0.0)
    edge[31, 20:44] = 1.0                            # row 31: just above the axis, 1.27 m up at 1 m
    assert nearest_ahead_m(edge, *args) == pytest.approx(1.0)


def _points_reference(depth, hfov_deg, camera_height_m, half_width_m, pitch_deg):
    """nearest_ahead_m computed the plain way: every pixel's point, then the path's bounds on it."""
    from memnav.core.frames import level_points, pixel_ray_offsets
    from memnav.core.velocity_guard import OBSTACLE_MAX_HEIGHT_M, OBSTACLE_MIN_HEIGHT_M

    h, w = depth.shape
    left, up = pixel_ray_offsets(np.arange(w), np.arange(h), w, h, hfov_deg)
    d = depth.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ahead, lat, rise = level_points(d, left[None, :], up[:, None], pitch_deg)
        height = camera_height_m + rise
        inside = (np.isfinite(d) & (d > 0) & (np.abs(lat) <= half_width_m)
                  & (height >= OBSTACLE_MIN_HEIGHT_M) & (height <= OBSTACLE_MAX_HEIGHT_M))
    return max(0.0, float(ahead[inside].min())) if inside.any() else math.inf


@pytest.mark.parametrize("seed", range(6))
def test_nearest_ahead_is_that_of_every_pixels_point(seed):
    """Against the plain computation over every pixel's point, on random images with holes (0, NaN, +inf) and on
    images of one measured pixel each (whether that one point is in the path), with odd sizes (a level middle
    row), pitched cameras and cameras below or above the obstacle band."""
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(5, 60)) | 1, int(rng.integers(5, 80))
    depth = rng.uniform(0.05, 6.0, (h, w)).astype(np.float32)
    holes = rng.random((h, w)) < 0.7
    depth[holes] = rng.choice(np.array([0.0, np.nan, np.inf, 9.0], np.float32), int(holes.sum()))
    for hfov, height, half_width, pitch in ((90.0, 1.25, 0.25, 0.0), (120.0, 0.4, 0.3, 30.0),
                                            (60.0, 1.8, 0.5, -10.0), (100.0, 0.05, 0.2, 45.0),
                                            (float(rng.uniform(30, 150)), float(rng.uniform(0.05, 2.0)),
                                             float(rng.uniform(0.05, 1.0)), float(rng.uniform(-45, 45)))):
        camera = (hfov, height, half_width, pitch)
        assert nearest_ahead_m(depth, hfov, height, half_width, pitch_deg=pitch) == pytest.approx(
            _points_reference(depth, *camera), rel=1e-5), camera
        for _ in range(40):
            one = np.full((h, w), np.nan, np.float32)
            r, c = int(rng.integers(h)), int(rng.integers(w))
            one[r, c] = rng.uniform(0.05, 4.0)
            assert nearest_ahead_m(one, hfov, height, half_width, pitch_deg=pitch) == pytest.approx(
                _points_reference(one, *camera), rel=1e-5), (camera, r, c, one[r, c])


def test_a_surface_too_near_to_measure_is_0_m_ahead_and_holds_forward():
    """REP 117: -inf in a 32FC1 depth image is too near to measure (inside the sensor's minimum range); it holds
    forward wherever it lies in the image, where +inf (no return) and NaN (invalid) count for nothing."""
    args = (90.0, 1.25, 0.25)
    depth = _wall(2.0)
    depth[5, 60] = np.inf
    depth[6, 61] = np.nan
    assert nearest_ahead_m(depth, *args) == pytest.approx(2.0)
    depth[37, 3] = -np.inf                           # low and far left, beside the path were it measured
    assert nearest_ahead_m(depth, *args) == 0.0
    guard = VelocityGuard(stop_distance_m=0.3)
    guard.obstacle(nearest_ahead_m(depth, *args), blind_share(depth))
    assert guard.obstacle_ahead
    assert math.isinf(nearest_ahead_m(np.full((8, 8), np.inf, np.float32), *args))


def test_a_surface_under_a_wide_camera_pitched_far_down_is_0_m_ahead_and_holds_forward():
    """120 deg 4:3 camera pitched 45 deg down: its bottom rows look behind its vertical plane. A box right under
    the lens lies at a negative distance ahead; it reads 0 m (the guard refused the negative value, and the
    safety node's depth callback died with it)."""
    depth = np.full((48, 64), 3.0, np.float32)
    depth[-4:, :] = 0.3
    ahead = nearest_ahead_m(depth, 120.0, 1.25, 0.25, pitch_deg=45.0)
    assert ahead == 0.0
    guard = VelocityGuard(stop_distance_m=0.5)
    guard.obstacle(ahead, blind_share(depth))
    assert guard.obstacle_ahead


def test_a_camera_looking_down_sees_the_floor_as_floor_once_told_its_pitch():
    """A camera pitched 20 deg down over an empty floor: told, nothing is in the path; taken as level, the floor
    a few meters ahead comes out at obstacle height and would hold the robot."""
    from memnav.core.frames import level_points, pixel_ray_offsets

    size, pitch = 64, 20.0
    left, up = pixel_ray_offsets(np.arange(size), np.arange(size), size, size, 90.0)
    _, _, rise = level_points(np.ones((size, size)), left[None, :], up[:, None], pitch)   # per meter of depth
    floor = np.where(rise < 0, 1.25 / np.maximum(-rise, 1e-9), 0.0).astype(np.float32)
    assert math.isinf(nearest_ahead_m(floor, 90.0, 1.25, 0.25, pitch_deg=pitch))
    assert nearest_ahead_m(floor, 90.0, 1.25, 0.25) < 5.0


def test_an_obstacle_ahead_holds_forward_speed_and_lets_turns_pass():
    guard = fresh_guard(stop_distance_m=0.3, max_reverse_mps=0.1, max_linear_accel_mps2=100.0,
                        max_angular_accel_radps2=100.0)
    out = drive(guard, 0.2, 0.4, 0.0, 0.1)[-1]           # no depth image measured yet: held
    assert (out.v_mps, out.w_radps, out.reason) == (0.0, pytest.approx(0.4), GuardReason.OBSTACLE)
    assert not out.reason.stops and guard.ahead_m is None
    guard.obstacle(1.0)
    assert drive(guard, 0.2, 0.4, 0.12, 0.2)[-1].v_mps == pytest.approx(0.2)
    guard.obstacle(0.25)                                   # at full speed: zero at once, not ramped down
    out = drive(guard, 0.2, 0.4, 0.22, 0.22)[-1]
    assert (out.v_mps, out.reason) == (0.0, GuardReason.OBSTACLE) and out.w_radps == pytest.approx(0.4)
    assert drive(guard, -0.1, 0.0, 0.24, 0.3)[-1].v_mps == pytest.approx(-0.1)   # backing away passes
    guard.obstacle(math.inf)                               # nothing in the path
    assert drive(guard, 0.2, 0.0, 0.32, 0.4)[-1].reason is GuardReason.OK
    # nothing in the path, but the middle of the view reads no return (a wall inside the minimum range): held
    blank = np.zeros((48, 64), np.float32)
    blank[:, :20] = 2.0                                    # only the left side sees something
    assert blind_share(blank) == 1.0 and blind_share(_wall(1.0)) == 0.0
    guard.obstacle(math.inf, blind_share(blank))
    assert drive(guard, 0.2, 0.0, 0.42, 0.5)[-1].reason is GuardReason.OBSTACLE and guard.blind == 1.0
    guard.obstacle(math.inf, 0.3)                          # some holes: below max_blind_share 0.5
    assert drive(guard, 0.2, 0.0, 0.52, 0.6)[-1].reason is GuardReason.OK
    with pytest.raises(ValueError, match="blind share"):
        guard.obstacle(1.0, 1.5)
    off = fresh_guard()                                    # stop_distance_m 0: off, nothing measured needed
    assert drive(off, 0.2, 0.0, 0.0, 1.0)[-1].v_mps == pytest.approx(0.2)
    with pytest.raises(ValueError, match="obstacle distance"):
        guard.obstacle(math.nan)
    for bad in ({"stop_distance_m": -0.1}, {"stop_distance_m": math.nan}, {"corridor_half_width_m": 0.0},
                {"max_blind_share": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            VelocityGuardConfig(**bad)


def test_from_config_round_trip():
    cfg = VelocityGuardConfig(max_linear_mps=0.7, watchdog_s=0.3, max_dt_s=0.05, stop_distance_m=0.4)
    assert VelocityGuard.from_config(cfg).config == cfg
    assert math.isinf(VelocityGuard().age_s(Source.ODOM, 10.0))


def test_estop_state_round_trips_and_an_unreadable_file_starts_engaged(tmp_path):
    import json

    from memnav.core.velocity_guard import read_estop_state, write_estop_state

    path = tmp_path / "state" / "estop.json"
    assert read_estop_state(path) == (False, f"no emergency-stop state in {path} (released)")
    write_estop_state(path, True, "2026-11-27T02:00:00Z")
    engaged, why = read_estop_state(path)
    assert engaged and "ENGAGED" in why and "2026-11-27T02:00:00Z" in why
    write_estop_state(path, False, "2026-11-27T02:01:00Z")
    assert read_estop_state(path)[0] is False
    assert json.loads(path.read_text()) == {"engaged": False, "since_utc": "2026-11-27T02:01:00Z"}
    assert sorted(p.name for p in path.parent.iterdir()) == ["estop.json"]   # no temporary file left
    for broken in ("{half", '{"engaged": "no"}', "[]", '{"since_utc": "x"}', ""):
        path.write_text(broken)
        engaged, why = read_estop_state(path)
        assert engaged and "unreadable" in why and str(path) in why, broken


def test_each_namespace_keeps_its_own_estop_state_file(tmp_path):
    from memnav.core.files import state_path_in_namespace
    from memnav.core.velocity_guard import read_estop_state, write_estop_state

    given = "~/.ros/memnav/estop_state.json"
    assert state_path_in_namespace(given, "/") == given and state_path_in_namespace(given, "") == given
    assert state_path_in_namespace(given, "/robot1") == "~/.ros/memnav/robot1/estop_state.json"
    assert state_path_in_namespace(given, "/fleet/robot2/") == "~/.ros/memnav/fleet/robot2/estop_state.json"
    assert state_path_in_namespace("", "/robot1") == ""        # not kept stays not kept
    # robot1 engaged does not start robot2 engaged, nor the robot of the root namespace
    root = str(tmp_path / "estop_state.json")
    write_estop_state(state_path_in_namespace(root, "/robot1"), True, "2026-11-27T05:00:00Z")
    assert read_estop_state(state_path_in_namespace(root, "/robot1"))[0] is True
    assert read_estop_state(state_path_in_namespace(root, "/robot2"))[0] is False and read_estop_state(root)[0] is False


def test_estop_inbox_acts_on_live_messages_and_on_latched_stops_not_yet_heard():
    inbox = EstopInbox()
    button, shell, joystick = b"button", b"memnav estop", b"joystick"
    # a latched button pressed before the node ran: heard on the transient-local subscription only, it engages
    assert inbox.take(True, button, 1, latched=True)
    # a reliable transient-local publisher reaches all three subscriptions: true (2), false (3); a transient-local
    # copy of the stop taken after the release must not engage again, nor its copy of the release count
    heard = [(True, button, 2, False), (False, button, 3, False), (True, button, 2, True), (False, button, 3, True)]
    assert [inbox.take(*m) for m in heard] == [True, True, False, False]
    # a latched release (what a publisher sent before the node heard it) never releases a kept stop
    assert not inbox.take(False, shell, 1, latched=True)
    # live messages are all acted on as they come, copies too: a best-effort joystick's stop came between the
    # reliable shell's release and its best-effort copy, which restores the release
    assert [inbox.take(*m) for m in [(False, shell, 2), (True, joystick, 5), (False, shell, 2)]] == [True] * 3
    # no publisher or sequence number from the middleware: a latched stop engages, a latched release does not
    assert inbox.take(True, latched=True) and inbox.take(True, button, None, latched=True)
    assert not inbox.take(False, None, 7, latched=True) and inbox.take(False)
