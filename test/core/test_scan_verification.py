"""Scan verification of RGB-D view pairs on a real ray-cast scene (the two-room box of conftest)."""
import math

import numpy as np
import pytest

from memnav.core.scan_verification import ScanVerifyConfig, scan_fit, verified_order, view_scan
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator

EAST = -math.pi / 2     # Habitat yaw facing +x (into the second room, through the door)
WEST = math.pi / 2


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    from conftest import write_two_room_scene

    scene = write_two_room_scene(tmp_path_factory.mktemp("scan_verify"))
    sim = EmbeddedSimulator(scene, SimConfig(seed=1))
    poses = {
        "a": ((2.0, 2.0), EAST),                       # room 1, facing the door
        "a_near": ((2.4, 1.8), EAST + math.radians(12)),  # 0.45 m and 12 deg away
        "a_turned": ((2.0, 2.0), EAST + math.radians(70)),  # same spot, turned past the 30 deg box
        "west": ((2.5, 2.5), WEST),                    # room 1, facing the west wall and the box
        "open": ((7.6, 2.0), EAST),                    # 0.4 m from the east wall: a blank wall
    }
    out = {}
    for name, ((x, z), yaw) in poses.items():
        obs = sim.render_at(np.array([x, 0.0, z]), yaw)
        out[name] = (obs.rgb, obs.depth)
    sim.close()
    return out


def _scan(views, name, cfg=None):
    rgb, depth = views[name]
    return view_scan(rgb, depth, cfg)


def test_a_view_fits_itself_and_a_nearby_view_better_than_other_places(views):
    a = _scan(views, "a")
    assert len(a.endpoints) >= 32 and a.colours.shape == (len(a.endpoints), 3)
    self_fit = scan_fit(a, a)
    near = scan_fit(a, _scan(views, "a_near"))
    turned = scan_fit(a, _scan(views, "a_turned"))
    west = scan_fit(a, _scan(views, "west"))
    assert self_fit > 0.9
    assert near > 0.5
    assert near > turned + 0.2 and near > west + 0.2, (near, turned, west)


def test_the_fit_is_symmetric(views):
    a, b = _scan(views, "a"), _scan(views, "a_near")
    assert scan_fit(a, b) == pytest.approx(scan_fit(b, a))


def test_colour_separates_views_whose_geometry_agrees(views):
    rgb, depth = views["a"]
    recoloured = view_scan(255 - rgb, depth)     # same geometry, other colours
    a = _scan(views, "a")
    assert scan_fit(a, recoloured) < 0.5 * scan_fit(a, a)
    depth_only = ScanVerifyConfig(colour_sigma=0.0)
    assert scan_fit(_scan(views, "a", depth_only), view_scan(255 - rgb, depth, depth_only), depth_only) > 0.9


def test_a_view_with_too_few_surface_points_fits_nothing(views):
    rgb, depth = views["a"]
    nothing = view_scan(rgb, np.full_like(depth, np.nan))
    assert len(nothing.endpoints) == 0
    assert scan_fit(_scan(views, "a"), nothing) == 0.0


def test_float_colours_in_unit_range_equal_uint8(views):
    rgb, depth = views["a_near"]
    a = _scan(views, "a")
    assert scan_fit(a, view_scan(rgb / 255.0, depth)) == pytest.approx(scan_fit(a, view_scan(rgb, depth)))


def test_verified_order_lets_the_fit_overrule_a_small_similarity_lead():
    order = verified_order(np.array([0.80, 0.78, 0.5]), np.array([0.2, 0.7, 0.9]), weight=1.5)
    assert order.tolist() == [2, 1, 0]
    assert verified_order(np.array([0.80, 0.78]), np.array([0.2, 0.7]), weight=0.0).tolist() == [0, 1]
    with pytest.raises(ValueError, match="matching 1-D"):
        verified_order(np.zeros(3), np.zeros(2), 1.0)


@pytest.mark.parametrize("rgb_shape, depth_shape, match", [
    ((8, 8, 3), (8,), "depth must be"),
    ((8, 9, 3), (8, 8), "rgb must be"),
    ((8, 8), (8, 8), "rgb must be"),
])
def test_bad_shapes_are_named(rgb_shape, depth_shape, match):
    with pytest.raises(ValueError, match=match):
        view_scan(np.zeros(rgb_shape, np.uint8), np.ones(depth_shape, np.float32))


def test_float_colours_out_of_range_are_refused():
    with pytest.raises(ValueError, match="rgb must be uint8 or float in"):
        view_scan(np.full((8, 8, 3), 2.0), np.ones((8, 8), np.float32))


@pytest.mark.parametrize("field, value", [
    ("cell_m", 0.0), ("sigma_m", -1.0), ("colour_sigma", -0.1), ("max_shift_m", math.nan), ("weight", -1.0),
    ("hfov_deg", 180.0), ("columns", True),
])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"ScanVerifyConfig.{field}"):
        ScanVerifyConfig(**{field: value})


def test_max_height_must_exceed_min_height():
    with pytest.raises(ValueError, match="max_height_m"):
        ScanVerifyConfig(min_height_m=1.0, max_height_m=0.5)
