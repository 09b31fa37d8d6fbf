"""What the shell commands that talk to a running robot share (`memnav goal`, `memnav estop`, `memnav check`): one
rclpy node spun until a condition holds, their common options, and robot.launch.yaml's default topics.

These commands are short-lived clients, not nodes of the stack: they spin one node in the foreground with a
deadline, and shut rclpy down when done.
"""
from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

from memnav.core.namespaces import absolute_namespace

# robot.launch.yaml's defaults (RealSense D4xx under realsense2_camera)
# (relative names: under --namespace NS they are /NS/camera/..., as the nodes' topics under the launch's namespace)
ROBOT_COLOR_TOPIC = "camera/camera/color/image_raw"
ROBOT_DEPTH_TOPIC = "camera/camera/aligned_depth_to_color/image_raw"
ROBOT_CAMERA_INFO_TOPIC = "camera/camera/color/camera_info"
ROBOT_ENCODER = "models/encoder_fov60.pt"   # config/robot.yaml's policy_node encoder_checkpoint
MAX_WAIT_S = 9e9   # ROS timers count int64 nanoseconds


class Ros:
    """rclpy initialised for one node; `close` shuts it down. Fast DDS gets the transports robot.launch.yaml gives
    its nodes (`memnav.ros.launcher.use_large_image_transports`, unless the environment says otherwise), so
    full-size images arrive here as they do there."""

    def __init__(self, name: str, ros_args: list[str]) -> None:
        from memnav.ros.launcher import use_large_image_transports

        use_large_image_transports()
        import rclpy
        from rclpy.signals import SignalHandlerOptions

        self.rclpy = rclpy
        # Ctrl-C raises KeyboardInterrupt here (within a spin's 0.1 s) with the node still up, so a command can
        # still talk to the robot (goal send --wait cancels its goal); rclpy's own handler would shut it down first
        rclpy.init(args=[name, "--ros-args", *ros_args] if ros_args else [name],
                   signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name)

    def resolve_topics(self, args: argparse.Namespace, *options: str) -> None:
        """Replace each named topic option of `args` (if set) by its full name under this node's namespace and
        remaps, the name the graph and the messages to the user go by (`odom` -> /odom or /robot1/odom)."""
        for option in options:
            if getattr(args, option):
                setattr(args, option, self.node.resolve_topic_name(getattr(args, option)))

    def spin_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Spin until `done()` (True) or `timeout_s` seconds pass (False; 0 = no limit)."""
        end = time.monotonic() + timeout_s if timeout_s > 0 else math.inf
        while self.rclpy.ok() and not done():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.rclpy.spin_once(self.node, timeout_sec=min(0.1, left))
        return bool(done())

    def call(self, client: Any, request: Any, timeout_s: float, unavailable: str) -> Any:
        """`client`'s service called with `request`: its response. Raises RuntimeError: `unavailable` when the
        service is not there within `timeout_s`, or saying it did not answer within `timeout_s` more."""
        if not self.spin_until(client.service_is_ready, timeout_s):
            raise RuntimeError(unavailable)
        future = client.call_async(request)
        if not self.spin_until(future.done, timeout_s):
            raise RuntimeError(f"{client.service_name} did not answer within {timeout_s:g} s")
        return future.result()

    def close(self) -> None:
        self.node.destroy_node()
        if self.rclpy.ok():
            self.rclpy.shutdown()


def check_seconds(value: float, option: str, zero_ok: bool = False) -> None:
    """Refuse a duration option that is not a number of seconds > 0 (>= 0 with `zero_ok`), naming the option."""
    low_ok = value >= 0 if zero_ok else value > 0
    if not (low_ok and value <= MAX_WAIT_S):   # NaN fails every comparison
        raise ValueError(f"{option} must be a number of seconds {'>= 0' if zero_ok else '> 0'} and at most "
                         f"{MAX_WAIT_S:g}, got {value:g}")


def add_robot_topic_arguments(parser: argparse.ArgumentParser, odom_help: str) -> None:
    """--color-topic, --depth-topic and --odom-topic, defaulting to robot.launch.yaml's."""
    parser.add_argument("--color-topic", default=ROBOT_COLOR_TOPIC, metavar="TOPIC",
                        help="colour image topic (robot.launch.yaml color_topic; the simulator bridge's: "
                             "camera/color/image_raw)")
    parser.add_argument("--depth-topic", default=ROBOT_DEPTH_TOPIC, metavar="TOPIC",
                        help="depth registered to the colour image (robot.launch.yaml depth_topic; the simulator "
                             "bridge's: camera/depth/image_raw)")
    parser.add_argument("--odom-topic", default="odom", metavar="TOPIC", help=odom_help)


def shell_ros_args(args: argparse.Namespace) -> list[str]:
    """The ROS arguments of a command line made by `add_ros_args`: --namespace as `-r __ns:=/NS`, then --ros-args.
    Call it before any ROS work: a bad namespace raises ValueError naming it, and so does a `--json` path (if the
    command has that option) that cannot be written."""
    if getattr(args, "json", None) is not None:
        from memnav.paths import check_output_file

        check_output_file(args.json, "--json")
    ns = ["-r", f"__ns:={absolute_namespace(args.namespace)}"] if args.namespace else []
    return ns + list(args.ros_args)


def add_actions(parser: argparse.ArgumentParser, helps: dict[str, str]) -> dict[str, argparse.ArgumentParser]:
    """A required ACTION sub-command per entry of `helps` (action -> one-line help, also its description);
    action -> its parser, for the caller's own arguments."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    return {action: sub.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".",
                                   formatter_class=parser.formatter_class) for action, text in helps.items()}


def add_exit_statuses(text: str, *parsers: argparse.ArgumentParser) -> None:
    """Say at the end of each parser's --help what the command's exit statuses mean (`text`: "0 ...; 1 ...")."""
    for parser in parsers:
        parser.epilog = f"Exit status: {text}."


def add_ros_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", default="", metavar="NS",
                        help="the robot's namespace (the launch file's namespace:=NS): relative topic names, "
                             "the defaults among them, resolve under /NS; none by default")
    parser.add_argument("--ros-args", nargs=argparse.REMAINDER, default=[], dest="ros_args",
                        help="everything after this goes to ROS (e.g. -p use_sim_time:=true); none by default")


def reaches_publisher_of(node: Any, pub: Any, owner_topic: str) -> bool:
    """Whether a message `pub` publishes now reaches the node that publishes `owner_topic` (the safety node by its
    status topic, the policy node by its goal status).

    True once that node has a subscription of `pub`'s topic in the graph and `pub` has matched at least as many
    subscriptions as the graph holds that can take its messages (same type; reliability and durability
    compatible: the graph reports infinite deadlines as set, so rclpy's `qos_check_compatible` refuses every pair),
    so that the one of that node is among them. "Any subscriber matched" is not enough: a bag recorder counts, and
    the node that matters may still be undiscovered when a volatile message goes out (it never gets it), or when the
    command ends (a latched message leaves with its publisher).
    """
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    offered = pub.qos_profile

    def takes(sub_qos: Any) -> bool:
        return not ((offered.reliability == ReliabilityPolicy.BEST_EFFORT
                     and sub_qos.reliability == ReliabilityPolicy.RELIABLE)
                    or (offered.durability == DurabilityPolicy.VOLATILE
                        and sub_qos.durability == DurabilityPolicy.TRANSIENT_LOCAL))

    cls = pub.msg_type
    msg_type = f"{cls.__module__.split('.')[0]}/msg/{cls.__name__}"
    owners = {(i.node_namespace, i.node_name) for i in node.get_publishers_info_by_topic(owner_topic)}
    subs = [i for i in node.get_subscriptions_info_by_topic(pub.topic_name)
            if i.topic_type == msg_type and takes(i.qos_profile)]
    return (any((i.node_namespace, i.node_name) in owners for i in subs)
            and pub.get_subscription_count() >= len(subs))


def sim_clock_missing(node: Any) -> bool:
    """Whether `node` runs on /clock (use_sim_time) and none has come yet: its time stands at 0."""
    clock = node.get_clock()
    return bool(getattr(clock, "ros_time_is_active", False)) and clock.now().nanoseconds == 0
