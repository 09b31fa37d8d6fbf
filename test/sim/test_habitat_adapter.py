"""The habitat-sim adapter: everything that does not need habitat-sim itself."""
import importlib
import math
import sys

import numpy as np
import pytest

from memnav.core.types import Pose2D
from memnav.sim import habitat as hab
from memnav.sim.base import SimConfig
from memnav.sim.factory import make_simulator
from memnav.sim.odometry import apply_odometry, body_motion


def test_module_import_does_not_import_habitat_sim():
    sys.modules.pop("habitat_sim", None)
    importlib.reload(hab)
    assert "habitat_sim" not in sys.modules


def test_missing_habitat_sim_says_how_to_install():
    if importlib.util.find_spec("habitat_sim") is not None:
        pytest.skip("habitat-sim is installed here")
    with pytest.raises(hab.HabitatUnavailableError, match="conda"):
        hab.HabitatSimulator(SimConfig())
    with pytest.raises(ImportError, match="embedded"):
        make_simulator("habitat", SimConfig())


def test_unknown_backend():
    with pytest.raises(ValueError, match="embedded, habitat"):
        make_simulator("unreal", SimConfig())


def test_sensor_and_action_specs_follow_config():
    cfg = SimConfig(width_px=160, height_px=120, hfov_deg=79, sensor_height_m=0.88, turn_angle_deg=15)
    specs = hab.sensor_specs(cfg, semantic=True)
    assert [s["uuid"] for s in specs] == ["color", "depth", "semantic"]
    assert all(s["resolution"] == [120, 160] and s["position"] == [0.0, 0.88, 0.0] and s["hfov"] == 79 for s in specs)
    assert [s["uuid"] for s in hab.sensor_specs(cfg, semantic=False)] == ["color", "depth"]
    acts = hab.action_space_spec(cfg)
    assert acts["move_forward"] == ("move_forward", 0.25)
    assert acts["turn_left"] == ("turn_left", 15) and acts["turn_right"] == ("turn_right", 15)


def test_observation_conversion():
    rgba = np.zeros((4, 6, 4), dtype=np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = 255
    depth = np.full((4, 6), 3.0, dtype=np.float32)
    depth[0, 0] = np.inf
    depth[0, 1] = 25.0
    obs = hab.observation_from_sensors({"color": rgba, "depth": depth[..., None]}, np.array([1.0, 0.0, -2.0]),
                                       0.5, Pose2D(0, 0, 0), 3, False, 10.0)
    assert obs.rgb.shape == (4, 6, 3) and np.all(obs.rgb[..., 0] == 200)
    assert obs.depth[0, 0] == 0.0 and obs.depth[0, 1] == 10.0 and obs.depth[2, 2] == 3.0
    assert obs.gt_pose.x_m == pytest.approx(2.0) and obs.gt_pose.y_m == pytest.approx(-1.0)
    assert obs.gt_pose.yaw_rad == pytest.approx(0.5)
    with pytest.raises(ValueError, match="colour"):
        hab.rgba_to_rgb(np.zeros((4, 4)))


def test_body_motion_and_noiseless_odometry_round_trip():
    p0 = np.array([0.0, 0.0, 0.0])
    yaw0 = math.radians(30)
    p1 = p0 + 0.25 * np.array([-math.sin(yaw0), 0.0, -math.cos(yaw0)])   # one step forward
    fwd, left, dyaw = body_motion(p0, yaw0, p1, yaw0)
    assert fwd == pytest.approx(0.25) and left == pytest.approx(0.0, abs=1e-12) and dyaw == 0.0
    odom = apply_odometry(Pose2D(0, 0, yaw0), fwd, left, dyaw, SimConfig(), np.random.default_rng(0))
    assert odom.x_m == pytest.approx(0.25 * math.cos(yaw0)) and odom.y_m == pytest.approx(0.25 * math.sin(yaw0))
