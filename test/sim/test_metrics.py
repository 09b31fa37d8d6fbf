import pytest

from memnav.sim.metrics import is_success, soft_spl, spl


def test_success_needs_stop_and_strictly_inside_radius():
    assert is_success(True, 0.99)
    assert not is_success(True, 1.0)
    assert not is_success(False, 0.1)


def test_spl_matches_definition():
    assert spl(True, 5.0, 5.0) == 1.0
    assert spl(True, 5.0, 10.0) == pytest.approx(0.5)
    assert spl(True, 5.0, 4.0) == 1.0  # path shorter than the geodesic (stopped early) caps at 1
    assert spl(False, 5.0, 5.0) == 0.0


def test_soft_spl_matches_habitat_lab():
    # progress 1 - 1/4 = 0.75, efficiency 4 / max(4, 8) = 0.5
    assert soft_spl(1.0, 4.0, 8.0) == pytest.approx(0.375)
    assert soft_spl(5.0, 4.0, 2.0) == 0.0  # ended farther than it started
    assert soft_spl(0.0, 4.0, 4.0) == pytest.approx(1.0)
