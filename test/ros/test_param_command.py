"""`memnav param list|get|set|dump` against a real safety node process over DDS, the test feeding its sensors and a
command so that its output shows the limit in force.

1. get/list read the node's parameters; dump writes a params file, and a new safety node started from it has the
   limit that was in force.
2. set of a live limit (guard.max_linear_mps 0.5 -> 0.3) is applied at once: the node's /cmd_vel follows it.
3. A value the guard's dataclass refuses (-1), a parameter read only at start (rate_hz), a value of another type,
   an unknown parameter and an absent node are refused, by status and message, and the limit in force stays.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip("rclpy")

from conftest import spin_until, stop_processes  # noqa: E402

from memnav.core.types import Pose2D  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_param_reads_changes_and_dumps_a_running_nodes_parameters(monkeypatch, tmp_path):
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from memnav.ros import conversions as conv

    domain = 40 + ((os.getpid() + 131) % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args",
                             "-p", "guard.max_linear_accel_mps2:=100.0", "-p", "status_period_s:=0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("test_param_client")
    got = []
    node.create_subscription(Twist, "/cmd_vel", lambda m: got.append(m.linear.x), 100)
    pubs = [node.create_publisher(Image, "/camera/color/image_raw", qos_profile_sensor_data),
            node.create_publisher(Image, "/camera/depth/image_raw", qos_profile_sensor_data),
            node.create_publisher(Odometry, "/odom", qos_profile_sensor_data),
            node.create_publisher(Twist, "/memnav/cmd_vel_raw", 10)]
    msgs = [conv.rgb_to_image(np.zeros((8, 8, 3), np.uint8)), conv.depth_to_image(np.ones((8, 8), np.float32)),
            conv.pose_to_odometry(Pose2D(0.0, 0.0, 0.0)), Twist()]
    msgs[3].linear.x = 0.8   # above every limit below: the node sends its limit

    def feed() -> None:
        for pub, msg in zip(pubs, msgs):
            pub.publish(msg)

    node.create_timer(0.05, feed)

    def spin_for(cond, timeout_s: float) -> bool:
        return spin_until(node, cond, timeout_s)

    def param(*args: str) -> subprocess.CompletedProcess:
        """`memnav param ARGS` as its own process, the feed going on meanwhile."""
        run = subprocess.Popen([sys.executable, "-m", "memnav.cli", "param", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        spin_for(lambda: run.poll() is not None, 60.0)
        out, err = run.communicate(timeout=30)
        return subprocess.CompletedProcess(run.args, run.returncode, out, err)

    def sending(v: float):
        return lambda: len(got) >= 5 and got[-5:] == pytest.approx([v] * 5)

    try:
        assert spin_for(sending(0.5), 60.0), f"the default limit 0.5 is not in force: {got[-5:]}"
        # 1. reading
        read = param("get", "safety_node", "guard.max_linear_mps")
        assert read.returncode == 0 and read.stdout.strip() == "0.5", read.stderr
        listed = param("list", "safety_node", "--json", str(tmp_path / "list.json"))
        assert listed.returncode == 0 and "guard.watchdog_s: 0.5  (double)" in listed.stdout, listed.stderr
        assert json.loads((tmp_path / "list.json").read_text())["rate_hz"] == {"type": "double", "value": 50.0}
        # 2. a live limit: in force at once
        changed = param("set", "safety_node", "guard.max_linear_mps", "0.3")
        assert changed.returncode == 0, changed.stderr
        assert "/safety_node: guard.max_linear_mps = 0.3 (was 0.5)" in changed.stderr
        assert spin_for(sending(0.3), 5.0), got[-5:]
        # an integer for a double parameter is taken as the double
        assert param("set", "safety_node", "guard.max_angular_radps", "2").returncode == 0
        assert param("get", "/safety_node", "guard.max_angular_radps").stdout.strip() == "2.0"
        # 3. refusals: the limit in force stays
        bad = param("set", "safety_node", "guard.max_linear_mps", "-1")
        assert bad.returncode == 1 and "VelocityGuardConfig.max_linear_mps must be finite and >= 0" in bad.stderr
        at_start = param("set", "safety_node", "rate_hz", "10")
        assert at_start.returncode == 1 and "rate_hz is read when safety_node starts" in at_start.stderr
        typed = param("set", "safety_node", "guard.max_linear_mps", "fast")
        assert typed.returncode == 2 and "expects a double, got string 'fast'" in typed.stderr
        unknown = param("get", "safety_node", "guard.max_speed")
        assert unknown.returncode == 2 and "has no parameter guard.max_speed" in unknown.stderr
        absent = param("get", "no_such_node", "x", "--timeout", "1")
        assert absent.returncode == 2 and "no node /no_such_node answered within 1 s" in absent.stderr
        assert param("get", "safety_node", "guard.max_linear_mps").stdout.strip() == "0.3"
        assert param("get", "safety_node", "rate_hz").stdout.strip() == "50.0"
        n = len(got)
        spin_for(lambda: len(got) > n + 10, 5.0)
        assert got[-5:] == pytest.approx([0.3] * 5)
        # 1. dump: a params file with what is in force now, which a new node starts from
        dumped = param("dump", "safety_node", "--out", str(tmp_path / "safety.yaml"))
        assert dumped.returncode == 0, dumped.stderr
        doc = yaml.safe_load((tmp_path / "safety.yaml").read_text())
        assert doc["safety_node"]["ros__parameters"]["guard"]["max_linear_mps"] == 0.3
    finally:
        node.destroy_node()
        rclpy.shutdown()
        out = stop_processes([proc])[0]
    assert "parameter guard.max_linear_mps changed at run time: 0.5 -> 0.3" in out, out[-3000:]
    # the dumped file starts a new safety node with the limit that was in force
    again = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args", "--params-file",
                              str(tmp_path / "safety.yaml")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        read = subprocess.run([sys.executable, "-m", "memnav.cli", "param", "get", "safety_node",
                               "guard.max_linear_mps", "--timeout", "30"], capture_output=True, text=True, timeout=90)
    finally:
        out = stop_processes([again])[0]
    assert read.returncode == 0 and read.stdout.strip() == "0.3", read.stderr + out[-2000:]


def test_names_values_and_the_params_file_are_read_as_ros2_param_reads_them():
    from memnav.ros.param_command import node_name, params_file, to_type, yaml_value

    assert node_name("/", "safety_node") == "/safety_node"
    assert node_name("/robot1", "safety_node") == "/robot1/safety_node"
    assert node_name("/robot1", "/robot2/safety_node") == "/robot2/safety_node"
    for bad in ("", "robot1/", "/a//b"):
        with pytest.raises(ValueError, match="NODE must be a node name"):
            node_name("/", bad)
    assert [yaml_value(t) for t in ("0.3", "2", "true", "[1, 2]", "odom", "a: [")] == [0.3, 2, True, [1, 2], "odom",
                                                                                        "a: ["]
    assert to_type("x", 2, 0.5) == 2.0 and isinstance(to_type("x", 2, 0.5), float)
    assert to_type("frame", True, "odom") == "true" and to_type("frame", 5, "odom") == "5"
    assert to_type("xs", [1, 2], [0.5]) == [1.0, 2.0]
    with pytest.raises(ValueError, match="'x' expects a double"):
        to_type("x", "fast", 0.5)
    text = params_file("/robot1/safety_node", {"rate_hz": 50.0, "guard.max_linear_mps": 0.3, "unset": None})
    assert yaml.safe_load(text) == {"/robot1/safety_node": {"ros__parameters": {
        "rate_hz": 50.0, "guard": {"max_linear_mps": 0.3}}}}
    assert list(yaml.safe_load(params_file("/safety_node", {"rate_hz": 5.0}))) == ["safety_node"]


def test_set_refuses_an_integer_beyond_64_bits_and_takes_other_values_as_text_where_ros_has_no_type():
    """`memnav param set N n 99999999999999999999` and a value ROS parameters cannot hold (a mapping, a date, a list of
    mixed types) for a parameter not set ended in a traceback from rclpy (status 1: "refused")."""
    import datetime

    from memnav.ros.param_command import to_type, yaml_value

    for current in (3, [1, 2], None):
        with pytest.raises(ValueError, match="'n': 99999999999999999999 is beyond a 64-bit integer"):
            to_type("n", yaml_value("99999999999999999999" if current != [1, 2] else "[1, 99999999999999999999]"),
                    current)
    assert to_type("d", 10 ** 20, 0.5) == 1e20   # a double takes it
    assert isinstance(yaml_value("2020-01-01"), datetime.date)
    for text in ("{a: 1}", "[1, a]", "2020-01-01", "[]"):
        assert to_type("free", yaml_value(text), None, text=text) == text
    assert to_type("free", yaml_value("[1, 2.5]"), None, text="[1, 2.5]") == [1.0, 2.5]
    assert to_type("free", yaml_value("[1, 2]"), None, text="[1, 2]") == [1, 2]
    assert to_type("free", yaml_value("0.3"), None, text="0.3") == 0.3

    from rclpy.parameter import Parameter

    for text in ("{a: 1}", "[1, a]", "[1, 2.5]", "true"):   # each one a parameter message rclpy builds
        Parameter("free", value=to_type("free", yaml_value(text), None, text=text)).to_parameter_msg()
