"""`memnav estop engage|release|status`: the software emergency stop of robot.launch.yaml's safety node, from a shell.

Publishes std_msgs/Bool on `--topic` (/memnav/estop; reliable, volatile, as the safety node subscribes it) once
the safety node's own subscription has matched (the safety node: the node that publishes `--status-topic`; another
subscriber, a bag recorder, does not count: `reaches_publisher_of`), waits until the message is acknowledged, and
confirms from the safety node's own `/memnav/safety_status` that it took it (its `estop` field). Without
confirmation within `--timeout` (one deadline for finding the node, its acknowledgement and its confirmation) the
command fails (status 2) and says so: the robot may still be moving. It does not need the ros2 CLI (`ros2 topic
pub ...` does the same on a ROS 2 install, without the confirmation). `status` prints the safety node's next status
(JSON) on stdout and changes nothing. A software stop: keep the robot's
hardware emergency stop.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from memnav.ros.shell_node import (
    Ros,
    add_exit_statuses,
    add_ros_args,
    check_seconds,
    reaches_publisher_of,
    shell_ros_args,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("state", choices=("engage", "release", "status"),
                        help="engage: zero velocity until released; release: the policy drives again; status: print "
                             "the safety node's state (JSON: estop, reason, commanded velocity, input ages)")
    parser.add_argument("--topic", default="memnav/estop", metavar="TOPIC",
                        help="the safety node's emergency-stop topic (robot.launch.yaml's estop_topic)")
    parser.add_argument("--status-topic", default="memnav/safety_status", metavar="TOPIC",
                        help="where the safety node reports its state (the confirmation is read there)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S",
                        help="fail when the safety node has not confirmed (status: reported) within this many seconds")
    add_ros_args(parser)
    add_exit_statuses("0 the safety node confirmed the change (status: reported its state); 2 it did not within "
                      "--timeout (no safety node, or no confirmation: the robot may still be moving), or a bad "
                      "option; 130 Ctrl-C", parser)


def run(args: argparse.Namespace) -> int:
    check_seconds(args.timeout, "--timeout")
    ros_args = shell_ros_args(args)
    from rclpy.duration import Duration
    from std_msgs.msg import Bool, String

    wanted = args.state == "engage"
    ros = Ros("memnav_estop", ros_args)
    # one deadline for finding the safety node, its acknowledgement and its confirmation together: each waited the
    # whole --timeout before, so a safety node that appeared late (respawning) and never confirmed made the command
    # fail only after twice the time a script behind it (then cutting the power) had allowed for
    deadline = time.monotonic() + args.timeout

    def left_s() -> float:
        return max(deadline - time.monotonic(), 1e-3)   # > 0: spin_until takes 0 as "no limit"
    ros.resolve_topics(args, "topic", "status_topic")
    seen: dict = {}

    def on_status(msg: String) -> None:
        try:
            body = json.loads(msg.data)
        except ValueError:
            return
        if isinstance(body, dict) and "estop" in body:
            seen.update(body)

    try:
        node = ros.node
        node.create_subscription(String, args.status_topic, on_status, 10)
        if args.state == "status":
            if not ros.spin_until(lambda: bool(seen), args.timeout):
                raise RuntimeError(f"no status on {args.status_topic} within {args.timeout:g} s: is the safety node "
                                   "running on this ROS_DOMAIN_ID?")
            print(json.dumps(seen, sort_keys=True))
            return 0
        pub = node.create_publisher(Bool, args.topic, 10)   # reliable, volatile: as the safety node subscribes
        if not ros.spin_until(lambda: reaches_publisher_of(node, pub, args.status_topic), left_s()):
            others = node.count_subscribers(args.topic)
            raise RuntimeError(f"no subscriber of {args.topic} within {args.timeout:g} s: is the safety node running "
                               f"(memnav launch robot.launch.yaml) on this ROS_DOMAIN_ID? Only the subscription of "
                               f"the node that publishes {args.status_topic} counts"
                               + (f" ({others} other subscriber(s), a recorder?, do not)" if others else "")
                               + f". Nothing was {'engaged' if wanted else 'released'}")
        pub.publish(Bool(data=wanted))
        if not pub.wait_for_all_acked(Duration(seconds=left_s())):
            raise RuntimeError(f"the safety node did not acknowledge the message on {args.topic} within "
                               f"{args.timeout:g} s: the emergency stop may not be "
                               f"{'engaged' if wanted else 'released'}")
        if not ros.spin_until(lambda: seen.get("estop") is wanted, left_s()):
            raise RuntimeError(f"the safety node did not confirm the emergency stop "
                               f"{'engaged' if wanted else 'released'} on {args.status_topic} within "
                               f"{args.timeout:g} s (last status: {json.dumps(seen) if seen else 'none'})")
    finally:
        ros.close()
    print(f"emergency stop {'ENGAGED' if wanted else 'released'} (safety node: {seen.get('reason')}, "
          f"commanding {seen.get('v_mps', 0.0):g} m/s, {seen.get('w_radps', 0.0):g} rad/s)", file=sys.stderr)
    return 0

