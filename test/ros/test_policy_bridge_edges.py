"""Edge cases of policy_node and sim_bridge_node a robot user meets: time parameters ROS timers cannot hold,
use_sim_time without /clock, a new goal while one is worked on. The process tests feed a real policy node
camera frames, odometry and goal photos from the test over DDS on an isolated domain."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import isolated_ros_env, spin_until, stop_processes  # noqa: E402

from memnav.core.types import Pose2D  # noqa: E402
from memnav.ros.policy_node import PolicyNodeConfig  # noqa: E402
from memnav.ros.sim_bridge_node import BridgeConfig  # noqa: E402

pytestmark = pytest.mark.ros


# --- time parameters: ROS timers and stamps count int64 nanoseconds (up to ~9.2e9 s) ---

@pytest.mark.parametrize("field", ["action_duration_s", "sync_tolerance_s", "goal_depth_wait_s",
                                   "subscriber_wait_s", "map_period_s", "mount_check_s"])
def test_policy_time_parameters_beyond_int64_nanoseconds_are_refused_by_name(field):
    # sync_tolerance_s 1e300 was a traceback at start in real time (OverflowError: infinity ns to an integer)
    with pytest.raises(ValueError, match=f"PolicyNodeConfig.{field} must be .* at most 9e\\+09"):
        PolicyNodeConfig(**{field: 1e300})
    PolicyNodeConfig(**{field: 9e9})


@pytest.mark.parametrize("field, value", [("republish_s", 1e300), ("cmd_timeout_s", 1e300),
                                          ("rate_hz", 1e-300), ("rate_hz", 1e-10), ("rate_hz", 1e12)])
def test_bridge_time_parameters_ros_timers_cannot_hold_are_refused_by_name(field, value):
    # republish_s 1e300 and rate_hz 1e-300 were a traceback at start (OverflowError in create_timer); rate_hz 1e12
    # a timer of 0 ns (a busy loop)
    with pytest.raises(ValueError, match=f"BridgeConfig.{field} must be"):
        BridgeConfig(**{field: value})
    BridgeConfig(republish_s=9e9, cmd_timeout_s=9e9, rate_hz=1000.0)
    BridgeConfig(rate_hz=0.001)


# --- a real policy node fed by the test ---

class Feeder:
    """Publishes what a robot gives a policy node (colour, depth, odometry at 10 Hz, stamped with the wall clock),
    goal photos, and optionally /clock; records /cmd_vel, /memnav/action and /memnav/goal_status."""

    def __init__(self, node) -> None:
        from geometry_msgs.msg import Twist
        from nav_msgs.msg import Odometry
        from rclpy.qos import qos_profile_sensor_data
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import Image
        from std_msgs.msg import String

        from memnav.ros.qos import events_qos, latched_qos

        self.node = node
        self.rgb = np.random.default_rng(0).integers(0, 255, (96, 128, 3), dtype=np.uint8)
        self.pub_rgb = node.create_publisher(Image, "/camera/color/image_raw", qos_profile_sensor_data)
        self.pub_depth = node.create_publisher(Image, "/camera/depth/image_raw", qos_profile_sensor_data)
        self.pub_odom = node.create_publisher(Odometry, "/odom", 10)
        self.pub_goal = node.create_publisher(Image, "/memnav/goal_image", latched_qos())
        self.pub_clock = node.create_publisher(Clock, "/clock", 10)
        self.clock = False
        self.depth_frame = "camera_color_optical_frame"   # depth registered to the colour image
        self.cmd: list[tuple[float, float, float]] = []
        self.actions: list[str] = []
        self.statuses: list[dict] = []
        node.create_subscription(Twist, "/cmd_vel", lambda m: self.cmd.append((time.monotonic(), m.linear.x,
                                                                                m.angular.z)), 50)
        node.create_subscription(String, "/memnav/action", lambda m: self.actions.append(m.data), 50)
        node.create_subscription(String, "/memnav/goal_status", lambda m: self.statuses.append(json.loads(m.data)),
                                 events_qos())
        node.create_timer(0.1, self.tick)

    def tick(self) -> None:
        from rosgraph_msgs.msg import Clock

        from memnav.ros import conversions as conv

        stamp = self.node.get_clock().now().to_msg()
        if self.clock:
            self.pub_clock.publish(Clock(clock=stamp))
        self.pub_rgb.publish(conv.rgb_to_image(self.rgb, stamp))
        self.pub_depth.publish(conv.depth_to_image(np.full((96, 128), 2.0, np.float32), stamp, self.depth_frame))
        self.pub_odom.publish(conv.pose_to_odometry(Pose2D(0.0, 0.0, 0.0), stamp))

    def send_goal(self, seed: int) -> int:
        from memnav.ros import conversions as conv
        from memnav.ros.embedding_msgs import stamp_to_ns

        now = self.node.get_clock().now().to_msg()
        photo = np.random.default_rng(seed).integers(0, 255, (96, 128, 3), dtype=np.uint8)
        self.pub_goal.publish(conv.rgb_to_image(photo, now))
        return stamp_to_ns(now)


@pytest.fixture
def fed_policy(tmp_path):
    """(a Feeder on its own node, the policy node's log, its process args -> process starter)."""
    env = isolated_ros_env(167)
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("edge_feeder")
    feeder = Feeder(node)
    log = tmp_path / "policy.log"
    procs = []

    def start(*args: str) -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, "-m", "memnav.ros.policy_node", "--ros-args",
                                       "-p", "lockstep:=false", "-p", "action_duration_s:=0.25",
                                       "-p", "map_period_s:=0.0", "-p", "goal_depth_wait_s:=0.0", *args],
                                      stdout=log.open("w"), stderr=subprocess.STDOUT, env=env))
        return procs[-1]

    yield feeder, log, start
    stop_processes(procs)
    node.destroy_node()
    rclpy.shutdown()


@pytest.mark.slow
def test_a_real_time_policy_node_under_use_sim_time_decides_nothing_before_the_first_clock(fed_policy):
    feeder, log, start = fed_policy
    start("-p", "use_sim_time:=true")
    node = feeder.node
    assert spin_until(node, lambda: node.count_subscribers("/memnav/goal_image") > 0, 60), log.read_text()[-2000:]
    goal = feeder.send_goal(1)
    assert spin_until(node, lambda: any(s["goal_stamp_ns"] == goal and s["status"] == "active"
                                        for s in feeder.statuses), 60), log.read_text()[-2000:]
    # no /clock: the node's time stands at 0, so an action once taken would be held (driven) for ever; it was
    spin_until(node, lambda: False, 4.0)
    assert feeder.actions == [], log.read_text()[-2000:]
    assert all(v == 0.0 and w == 0.0 for _, v, w in feeder.cmd)
    assert "use_sim_time is set but no /clock has arrived" in log.read_text()
    # with /clock the goal goes on, and each action's velocity ends after action_duration_s
    feeder.clock = True
    assert spin_until(node, lambda: len(feeder.actions) >= 3, 60), log.read_text()[-2000:]


@pytest.mark.slow
def test_a_new_goal_while_one_is_worked_on_cancels_it_saying_what_replaced_it(fed_policy):
    feeder, log, start = fed_policy
    start()
    node = feeder.node
    assert spin_until(node, lambda: node.count_subscribers("/memnav/goal_image") > 0, 60), log.read_text()[-2000:]
    first = feeder.send_goal(1)
    assert spin_until(node, lambda: len(feeder.actions) >= 2, 60), log.read_text()[-2000:]
    second = feeder.send_goal(2)
    assert spin_until(node, lambda: any(s["goal_stamp_ns"] == second and s["status"] == "active"
                                        for s in feeder.statuses), 30), log.read_text()[-2000:]
    ended = [s for s in feeder.statuses if s["goal_stamp_ns"] == first and s["status"] != "active"]
    # the first goal's status stayed "active" for ever: a `memnav goal send --wait` on it never heard its end
    assert [s["status"] for s in ended] == ["cancelled"] and ended[0]["replaced_by"] == second, feeder.statuses
    # it came before the new goal's "active" (the newest status, latched, is the goal being worked on)
    order = [(s["goal_stamp_ns"], s["status"]) for s in feeder.statuses]
    assert order.index((first, "cancelled")) < order.index((second, "active"))
