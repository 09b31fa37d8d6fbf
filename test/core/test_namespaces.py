"""memnav.core.namespaces: ROS namespaces checked and applied as text."""
import pytest

from memnav.core.namespaces import absolute_namespace, under_namespace


def test_namespaces_are_made_absolute_and_topics_put_under_them():
    assert absolute_namespace("robot1") == "/robot1" == absolute_namespace("/robot1/")
    assert absolute_namespace("fleet/robot_2") == "/fleet/robot_2"
    assert under_namespace("/odom", "robot1") == "/robot1/odom" == under_namespace("odom", "/robot1")
    assert under_namespace("/camera/color/image_raw", "/fleet/r1") == "/fleet/r1/camera/color/image_raw"
    assert under_namespace("", "robot1") == ""   # no topic stays none


@pytest.mark.parametrize("bad", ["", "/", "1robot", "robot-1", "robot 1", "a//b", "robot1/2x"])
def test_what_is_not_a_namespace_is_refused_naming_the_option_and_value(bad):
    with pytest.raises(ValueError, match=r"--ns must be a ROS namespace .* got " + repr(bad).replace("\\", "\\\\")):
        absolute_namespace(bad, option="--ns")
