"""Bad options of `memnav launch`, `record` and `replay`: one line naming the option as typed, exit status 2, before
any work starts; a recording that fails before its first message leaves no folder behind."""
from __future__ import annotations

import math
import os
import signal

import pytest

from memnav.cli import main

NAN, INF = "nan", "inf"


@pytest.mark.parametrize("value", [NAN, INF, "-1"])
def test_launch_refuses_a_bad_shutdown_timeout_before_reading_the_file(tmp_path, capsys, value):
    # the file does not exist: the option is refused first
    assert main(["launch", str(tmp_path / "missing.launch.yaml"), "--shutdown-timeout", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memnav launch: error: --shutdown-timeout ") and "missing" not in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_supervisor_refuses_a_shutdown_timeout_that_would_never_escalate(value):
    from memnav.ros.launcher import Supervisor

    with pytest.raises(ValueError, match="shutdown_timeout_s"):
        Supervisor([], shutdown_timeout_s=value)
    assert Supervisor([], shutdown_timeout_s=0.0).shutdown_timeout_s == 0.0   # 0: escalate without waiting


@pytest.mark.parametrize("options, named", [
    (["--duration", NAN], "--duration"),
    (["--duration", INF], "--duration"),
    (["--duration", "-1"], "--duration"),
    (["--discovery-interval", NAN], "--discovery-interval"),
    (["--discovery-interval", "0"], "--discovery-interval"),
    (["--duration", "5", "--discovery-interval", INF], "--discovery-interval"),
])
def test_record_refuses_bad_options_and_creates_nothing(tmp_path, capsys, options, named):
    out = tmp_path / "bag"
    assert main(["record", "--out", str(out), *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memnav record: error: {named} ") and len(err.splitlines()) == 1
    assert not out.exists()
    assert main(["record", "--out", str(out), *options]) == 2   # a re-run is refused for the same reason
    assert "exists already" not in capsys.readouterr().err


def test_record_refuses_an_existing_folder_and_leaves_it_alone(tmp_path, capsys):
    out = tmp_path / "bag"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["record", "--out", str(out), "--duration", "1"]) == 2
    assert "exists already" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.ros
def test_record_failing_before_any_message_removes_the_bag_it_created(tmp_path, capsys, monkeypatch):
    rclpy = pytest.importorskip("rclpy")
    monkeypatch.setenv("ROS_DOMAIN_ID", str(40 + (os.getpid() + 71) % 150))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

    def fail(*_args, **_kwargs):
        raise RuntimeError("spin failed")

    monkeypatch.setattr(rclpy, "spin_once", fail)
    sigterm = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "bag"
    assert main(["record", "--out", str(out), "--duration", "5"]) == 2
    assert "spin failed" in capsys.readouterr().err
    assert not out.exists() and not rclpy.ok()
    assert signal.getsignal(signal.SIGTERM) is sigterm   # the recorder's SIGTERM handler is gone too


@pytest.mark.parametrize("options, named", [
    (["--rate", "0"], "--rate"),
    (["--rate", NAN], "--rate"),
    (["--rate", INF], "--rate"),
    (["--clock-hz", NAN], "--clock-hz"),
    (["--clock-hz", "0"], "--clock-hz"),
    (["--delay", "-1"], "--delay"),
    (["--delay", NAN], "--delay"),
    (["--wait-timeout", "-1"], "--wait-timeout"),
    (["--wait-timeout", INF], "--wait-timeout"),
])
def test_replay_names_the_one_bad_option(tmp_path, capsys, options, named):
    assert main(["replay", str(tmp_path / "no_bag"), *options]) == 2   # refused before the bag is looked at
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memnav replay: error: {named} ") and len(err.splitlines()) == 1
    assert "ReplayConfig" not in err and "no_bag" not in err


@pytest.mark.parametrize("field", ["rate", "clock_hz", "delay_s", "wait_timeout_s"])
def test_replay_config_names_its_field(field):
    from memnav.ros.replay_command import ReplayConfig

    with pytest.raises(ValueError, match=f"ReplayConfig.{field} "):
        ReplayConfig(bag="b", **{field: math.nan})


@pytest.mark.parametrize("ros_args, rule", [
    (["-r", "/camera/color/image_raw:=/cam/rgb"], "/camera/color/image_raw:=/cam/rgb"),
    (["--remap", "odom:=/robot/odom"], "odom:=/robot/odom"),
    (["-p", "use_sim_time:=true", "-r", "__ns:=/robot1", "-r", "memnav_record:/odom:=/o"], "memnav_record:/odom:=/o"),
    (["-r", "rostopic://odom:=wheel_odom"], "rostopic://odom:=wheel_odom"),
])
def test_record_refuses_a_topic_remap_and_says_how_to_rename(tmp_path, capsys, ros_args, rule):
    """ROS would apply a topic remap to the recorder's own subscriptions: a named topic looked for under one name and
    subscribed under the other records nothing, and a recording of every topic writes one topic's messages under
    another's name. Refused before anything starts, pointing at the topics as the graph has them and at replay's
    --remap."""
    out = tmp_path / "bag"
    assert main(["record", "--out", str(out), "/camera/color/image_raw", "--ros-args", *ros_args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memnav record: error: --ros-args -r {rule}: memnav record takes no topic remaps")
    assert len(err.splitlines()) == 1 and not out.exists()
    source, target = rule.split("://")[-1].split(":=")
    source = source.split(":")[-1]
    assert f"memnav record --out BAG {target}" in err and f"memnav replay BAG --remap {target}:={source}" in err


def test_record_tells_topic_remaps_from_its_own_name_and_namespace():
    from memnav.ros.record_command import topic_remaps

    assert topic_remaps(["-r", "__node:=rec", "-r", "__ns:=/robot1", "--remap", "memnav_record:__name:=r2"]) == []
    assert topic_remaps(["-p", "use_sim_time:=true", "--params-file", "p.yaml", "--log-level", "debug"]) == []
    assert topic_remaps(["-p", "a:=-r", "-r", "x:=y"]) == ["x:=y"]   # a value is not an option
    assert topic_remaps(["-r", "__ns:=/a", "--", "-r", "b:=c"]) == []   # after --: not ROS's
    assert topic_remaps(["--", "-r", "b:=c", "--ros-args", "-r", "d:=e"]) == ["d:=e"]
    assert topic_remaps(["-r", "no_rule"]) == []   # not a rule: rcl refuses it itself
