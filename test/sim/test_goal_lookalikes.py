"""Look-alikes of goal photos elsewhere in a house (`memnav.sim.goal_lookalikes`)."""
import math

import numpy as np
import pytest

from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator
from memnav.sim.goal_lookalikes import (
    GoalAuditConfig,
    HouseLookalikes,
    ViewGrid,
    distinct_candidates,
    half_resolution,
    rms_difference,
    view_stack,
)

COARSE = GoalAuditConfig(grid_m=0.25, heading_deg=15.0, candidates=3)


def test_config_refuses_bad_values_by_name():
    with pytest.raises(ValueError, match="grid_m"):
        GoalAuditConfig(grid_m=0.0)
    with pytest.raises(ValueError, match="nudge_deg"):
        GoalAuditConfig(nudge_deg=float("nan"))
    with pytest.raises(ValueError, match="image_px"):
        GoalAuditConfig(image_px=33)
    with pytest.raises(ValueError, match="candidates"):
        GoalAuditConfig(candidates=0)
    for heading in (1e-6, 400.0):        # 1e-6 built 3.6e8 headings per grid position (memory ran out)
        with pytest.raises(ValueError, match="heading_deg must be between 1 and 360 degrees"):
            GoalAuditConfig(heading_deg=heading)


def test_ratio_of_exact_copies_missing_look_alikes_and_blank_photos():
    from memnav.sim.goal_lookalikes import GoalAudit

    assert GoalAudit(0.1, 0.05, (0.0, 0.0, 0.0), 0.0, 2.0).ratio == pytest.approx(0.5)
    assert GoalAudit(0.0, 0.0, (0.0, 0.0, 0.0), 0.0, 2.0).ratio == 0.0    # an exact copy, even of a blank view
    assert GoalAudit(0.0, 0.2, (0.0, 0.0, 0.0), 0.0, 2.0).ratio == math.inf
    missing = GoalAudit(0.1, math.inf, None, None, None)
    assert missing.ratio == math.inf
    row = missing.to_json(GoalAuditConfig())
    assert row["lookalike_ratio"] is None and not row["ambiguous"] and row["lookalike_position"] is None


def test_view_stack_scales_depth_like_a_colour_and_differences_are_rms():
    cfg = GoalAuditConfig(depth_clip_m=5.0, depth_scale_m=2.0)
    rgb = np.full((1, 4, 4, 3), 255, np.uint8)
    depth = np.array([[[1.0, 9.0, 0.0, 2.0]] * 4], np.float32)
    v = view_stack(rgb, depth, cfg)
    assert v.shape == (1, 4, 4, 4) and np.allclose(v[..., :3], 1.0)
    assert np.allclose(v[0, 0, :, 3], [0.5, 2.5, 0.0, 1.0])   # 9 m clipped to 5 m
    other = v.copy()
    other[..., 0] = 0.0                                        # red off everywhere: a quarter of the channels
    assert rms_difference(v[0], np.concatenate([v, other]))[0] == 0.0
    assert math.isclose(float(rms_difference(v[0], other)[0]), 0.5, rel_tol=1e-6)
    assert half_resolution(v).shape == (1, 2 * 2 * 4)


def test_distinct_candidates_keep_spacing_and_stay_outside():
    cfg = GoalAuditConfig(heading_deg=180.0, candidates=3, candidate_spacing_m=0.5)   # two headings per spot
    positions = np.array([[0.0, 0, 0], [0.1, 0, 0], [1.0, 0, 0], [1.2, 0, 0], [2.0, 0, 0]])
    grid = ViewGrid(positions, cfg.headings_rad, np.zeros((10, 4), np.float32))
    rank_of_spot = np.array([0.0, 1.0, 3.0, 2.0, 4.0])       # spot 0 best, then 1, 3, 2, 4
    sq = np.repeat(rank_of_spot, 2)
    outside = np.array([False, True, True, True, True])
    spots = [i // 2 for i in distinct_candidates(grid, sq, outside, cfg)]
    # spot 0 is inside the success region; spot 2 is 0.2 m from the better-ranked spot 3
    assert spots == [1, 3, 4]


@pytest.fixture(scope="module")
def two_rooms(tmp_path_factory):
    from conftest import write_two_room_scene

    path = write_two_room_scene(tmp_path_factory.mktemp("lookalikes") / "scenes")
    sim = EmbeddedSimulator(path, SimConfig())
    announced, rendered = [], []
    finder = HouseLookalikes(sim, COARSE, progress=rendered.append, total=announced.append)
    assert len(finder.positions) > 100 and all(sim.grid.is_navigable(p) for p in finder.positions)
    views = len(finder.positions) * len(COARSE.headings_rad)
    assert finder.grid.descriptors.shape == (views, 32 * 32 * 4)
    assert announced == [views] and sum(rendered) == views     # a progress bar's total, then its batches
    return sim, finder


def _audit(two_rooms, goal_xz, yaw):
    sim, finder = two_rooms
    return finder.audit(np.array([goal_xz[0], sim.grid.floor_height_m, goal_xz[1]]), yaw)


def test_a_bare_wall_is_reproduced_in_the_next_room(two_rooms):
    # 0.6 m from the north wall, facing it (yaw 0 looks along -z): the view is that wall only, and the wall
    # (one part, one colour) runs through both rooms
    found = _audit(two_rooms, (2.0, 0.6), 0.0)
    assert found.lookalike_geodesic_m is not None and found.lookalike_geodesic_m > 1.0
    assert found.ratio <= COARSE.near_identical_ratio
    row = found.to_json(COARSE)
    assert row["near_identical"] and row["ambiguous"]


def test_a_view_of_the_only_box_has_no_look_alike(two_rooms):
    # facing west across the first room at its box, which nothing else in the scene resembles
    found = _audit(two_rooms, (3.0, 2.0), math.pi / 2)
    assert found.lookalike_geodesic_m is not None and found.lookalike_geodesic_m > 1.0
    assert found.ratio > 1.0
    row = found.to_json(COARSE)
    assert not row["ambiguous"] and not row["near_identical"]
