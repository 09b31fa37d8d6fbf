import math

import pytest

from memnav.core.types import Action, Pose2D, wrap_angle


def test_action_parse_accepts_index_name_and_enum():
    assert Action.parse(1) is Action.MOVE_FORWARD
    assert Action.parse("turn_left") is Action.TURN_LEFT
    assert Action.parse(Action.STOP) is Action.STOP
    assert [a.value for a in Action] == [0, 1, 2, 3]  # habitat-lab's order


@pytest.mark.parametrize("bad", [7, -1, "JUMP", 1.5, None, True])
def test_unknown_action_names_the_value(bad):
    with pytest.raises(ValueError, match="unknown action"):
        Action.parse(bad)


def test_pose_rejects_non_finite():
    with pytest.raises(ValueError, match="Pose2D.x_m"):
        Pose2D(float("nan"), 0.0, 0.0)
    with pytest.raises(ValueError, match="Pose2D.yaw_rad"):
        Pose2D(0.0, 0.0, float("inf"))


def test_relative_pose():
    origin = Pose2D(1.0, 1.0, math.pi / 2)
    p = Pose2D(1.0, 3.0, math.pi / 2)
    rel = p.relative_to(origin)
    assert rel.x_m == pytest.approx(2.0)
    assert rel.y_m == pytest.approx(0.0, abs=1e-12)
    assert rel.yaw_rad == pytest.approx(0.0)


def test_compose_undoes_relative_to():
    origin = Pose2D(1.0, -2.0, 2.5)
    for p in (Pose2D(1.0, 3.0, math.pi / 2), Pose2D(-4.0, 0.5, -3.0)):
        back = origin.compose(p.relative_to(origin))
        assert (back.x_m, back.y_m) == (pytest.approx(p.x_m), pytest.approx(p.y_m))
        assert wrap_angle(back.yaw_rad - p.yaw_rad) == pytest.approx(0.0, abs=1e-12)
    ahead = Pose2D(0.0, 0.0, math.pi / 2).compose(Pose2D(2.0, 0.0, 0.0))   # 2 m ahead of a robot facing +y
    assert (ahead.x_m, ahead.y_m, ahead.yaw_rad) == (pytest.approx(0.0, abs=1e-12), pytest.approx(2.0),
                                                     pytest.approx(math.pi / 2))


def test_wrap_angle_range():
    for a in (-10.0, -math.pi, 0.0, math.pi, 7.0):
        w = wrap_angle(a)
        assert -math.pi <= w < math.pi
        assert math.isclose(math.cos(w), math.cos(a), abs_tol=1e-12)
