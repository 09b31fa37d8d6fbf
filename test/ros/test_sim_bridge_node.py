"""sim_bridge_node as a real process over DDS on an isolated domain: topics, services, actions, bad input."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import make_tiny_dataset  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("bridge") / "houses", houses=2, seed=4, test=3)


@pytest.fixture
def ros_env(monkeypatch):
    domain = 40 + (os.getpid() % 150)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return domain


def _wait(node, cond, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
        if cond():
            return True
    return False


def test_bridge_serves_episodes_over_dds(data, ros_env):
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args",
                             "-p", f"data:={data}", "-p", "split:=test", "-p", "lockstep:=true"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_client")
    got = {"odom": [], "rgb": [], "goal": [], "result": []}
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(Odometry, "/odom", lambda m: got["odom"].append(m), 10)
    node.create_subscription(Image, "/camera/color/image_raw", lambda m: got["rgb"].append(m), qos_profile_sensor_data)
    node.create_subscription(Image, "/memnav/goal_image", lambda m: got["goal"].append(m), latched)
    node.create_subscription(String, "/memnav/episode_result", lambda m: got["result"].append(m), latched)
    pub = node.create_publisher(String, "/memnav/action", 10)
    reset = node.create_client(Trigger, "/sim_bridge_node/reset")
    try:
        assert reset.wait_for_service(timeout_sec=30.0), "sim_bridge_node did not come up"
        fut = reset.call_async(Trigger.Request())
        assert _wait(node, lambda: fut.done() and got["odom"] and got["rgb"] and got["goal"])
        assert fut.result().success
        img = got["rgb"][-1]
        assert (img.height, img.width, img.encoding) == (128, 128, "rgb8")
        assert got["goal"][-1].encoding == "rgb8"

        from memnav.ros.conversions import odometry_to_pose

        before = odometry_to_pose(got["odom"][-1])
        n = len(got["odom"])
        _wait(node, lambda: pub.get_subscription_count() > 0, 10)
        pub.publish(String(data="TURN_LEFT"))
        assert _wait(node, lambda: len(got["odom"]) > n)
        after = odometry_to_pose(got["odom"][-1])
        dyaw = (after.yaw_rad - before.yaw_rad + math.pi) % (2 * math.pi) - math.pi
        assert dyaw == pytest.approx(math.radians(30), abs=1e-3)

        pub.publish(String(data="JUMP"))          # bad input: dropped, node keeps running
        pub.publish(String(data="STOP"))
        assert _wait(node, lambda: got["result"])
        result = json.loads(got["result"][-1].data)
        assert {"success", "spl", "soft_spl", "steps"} <= set(result) and result["steps"] == 2
        assert proc.poll() is None
        fut = reset.call_async(Trigger.Request())
        assert _wait(node, lambda: fut.done()) and fut.result().success
    finally:
        node.destroy_node()
        rclpy.shutdown()
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert "dropped action" in out
