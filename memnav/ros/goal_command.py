"""`memnav goal capture|send`: take a goal photo with the robot's camera, and send a goal photo to the robot.

The workflow on a robot (robot.launch.yaml running): drive the robot to a spot, `memnav goal capture
goals/kitchen.png` saves what its camera sees there (colour, registered depth, the capture's record); later, from
anywhere in the building, `memnav goal send goals/kitchen.png --wait` sends it and follows the robot until it
calls STOP. Photos from elsewhere (a phone, another robot) can be sent as well: any image OpenCV reads, any
size; without depth the agent goes by appearance only.

capture subscribes:
    --color-topic   sensor_msgs/Image rgb8/bgr8/...                 (sensor-data QoS, as the nodes)
    --depth-topic   sensor_msgs/Image 16UC1 mm or 32FC1 m, registered to the colour image
    --odom-topic    nav_msgs/Odometry (optional: the pose at the capture goes into NAME.json)
send publishes (reliable, transient local, depth 1: a policy node started later still gets the goal while the
command runs):
    /memnav/goal_depth  sensor_msgs/Image 32FC1 (when the photo has depth), then
    /memnav/goal_image  sensor_msgs/Image rgb8, both with the same stamp
send --wait subscribes /memnav/action and /memnav/policy_state (std_msgs/String).

The goal's stamp matters: the policy node acts only on camera frames stamped at or after it. By default it is
this computer's clock (the node's: `--ros-args -p use_sim_time:=true` takes /clock); `--stamp-topic` stamps
it just after the newest message on a topic instead (the camera's), for a computer whose clock is not the
robot's.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from memnav.core.goal_photo import GoalPhoto, GoalPhotoError, read_goal_photo, refuse_overwriting, write_goal_photo

# robot.launch.yaml's defaults (RealSense D4xx under realsense2_camera)
ROBOT_COLOR_TOPIC = "/camera/camera/color/image_raw"
ROBOT_DEPTH_TOPIC = "/camera/camera/aligned_depth_to_color/image_raw"
GOAL_IMAGE_TOPIC = "/memnav/goal_image"
GOAL_DEPTH_TOPIC = "/memnav/goal_depth"
MAX_WAIT_S = 9e9   # ROS timers count int64 nanoseconds
QUIET_HINT_S = 10.0   # send --wait: say what to check when the policy node has not acted after this long
ODOM_TOLERANCE_NS = 500_000_000   # the capture's recorded pose: odometry stamped within this of the frame


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    cap = sub.add_parser(
        "capture", help="save what the robot's camera sees now as a goal photo (NAME.png, NAME.depth.png, "
                        "NAME.json)",
        description="Save the robot's current view as a goal photo: the next colour frame with a depth frame "
                    "within --sync-tolerance of it becomes NAME.png (colour), NAME.depth.png (16-bit, mm) and "
                    "NAME.json (stamp, topics, frame id, the odometry pose then). Existing files are not "
                    "overwritten unless --overwrite.",
        formatter_class=parser.formatter_class)
    cap.add_argument("out", type=Path, metavar="NAME.png", help="the photo to write (its suffix becomes .png)")
    cap.add_argument("--color-topic", default=ROBOT_COLOR_TOPIC, metavar="TOPIC",
                     help="colour image topic (the simulator bridge: /camera/color/image_raw)")
    cap.add_argument("--depth-topic", default=ROBOT_DEPTH_TOPIC, metavar="TOPIC",
                     help="depth registered to the colour image (the simulator bridge: /camera/depth/image_raw)")
    cap.add_argument("--odom-topic", default="/odom", metavar="TOPIC",
                     help="odometry whose pose at the capture is recorded in NAME.json (\"\" = none)")
    cap.add_argument("--no-depth", action="store_true", help="save the colour image only")
    cap.add_argument("--sync-tolerance", type=float, default=0.02, metavar="S",
                     help="largest stamp difference between the colour and the depth frame, seconds")
    cap.add_argument("--timeout", type=float, default=10.0, metavar="S",
                     help="give up when no frame (pair) has arrived after this many seconds")
    cap.add_argument("--overwrite", action="store_true", help="replace the files of an earlier capture of NAME")
    _ros_args(cap)

    snd = sub.add_parser(
        "send", help="send a goal photo to the robot (optionally follow it until STOP)",
        description="Publish a goal photo (and its depth) for policy_node: the robot drives to where it was "
                    "taken. Depth is read from --depth, else from NAME.depth.png or NAME.depth.npy beside the "
                    "photo. Without --wait the command ends once the policy node has received the goal; with "
                    "--wait it stays, prints the robot's progress and ends at its STOP (status 0) or at "
                    "--timeout (status 1).",
        formatter_class=parser.formatter_class)
    snd.add_argument("photo", type=Path, metavar="PHOTO", help="goal photo: png, jpg, ... (any size)")
    snd.add_argument("--depth", type=Path, default=None, metavar="FILE",
                     help="its depth: 16-bit PNG in millimetres or .npy float metres, the photo's size "
                          "(default: PHOTO's NAME.depth.png / NAME.depth.npy when there is one)")
    snd.add_argument("--no-depth", action="store_true", help="send the colour image only, even if depth is there")
    snd.add_argument("--wait", action="store_true",
                     help="stay until the robot calls STOP, printing its actions and belief")
    snd.add_argument("--timeout", type=float, default=0.0, metavar="S",
                     help="with --wait: give up after this many seconds (0 = no limit)")
    snd.add_argument("--match-timeout", type=float, default=30.0, metavar="S",
                     help="fail when no policy node has taken the goal within this many seconds")
    snd.add_argument("--stamp-topic", default="", metavar="TOPIC",
                     help="stamp the goal just after the newest message on TOPIC (e.g. the robot's colour "
                          "topic) instead of this computer's clock")
    snd.add_argument("--frame-id", default="goal_camera", help="header.frame_id of the goal messages")
    snd.add_argument("--json", type=Path, default=None, metavar="PATH",
                     help="with --wait: write how the goal ended (stopped, actions, seconds, last policy state)")
    snd.add_argument("--no-progress", action="store_true", help="with --wait: no progress line on stderr")
    _ros_args(snd)


def _ros_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ros-args", nargs=argparse.REMAINDER, default=[], dest="ros_args",
                        help="everything after this goes to ROS (e.g. -p use_sim_time:=true)")


def _seconds(value: float, option: str, zero_ok: bool) -> None:
    low_ok = value >= 0 if zero_ok else value > 0
    if not (low_ok and value <= MAX_WAIT_S):   # NaN fails every comparison
        raise ValueError(f"{option} must be a number of seconds {'>= 0' if zero_ok else '> 0'} and at most "
                         f"{MAX_WAIT_S:g}, got {value:g}")


def run(args: argparse.Namespace) -> int:
    if args.action == "capture":
        return capture(args)
    return send(args)


class Ros:
    """rclpy initialised for one node; shut down on exit."""

    def __init__(self, name: str, ros_args: list[str]) -> None:
        import rclpy

        self.rclpy = rclpy
        rclpy.init(args=[name, "--ros-args", *ros_args] if ros_args else [name])
        self.node = rclpy.create_node(name)

    def spin_until(self, done, timeout_s: float) -> bool:
        """Spin until `done()` (True) or `timeout_s` seconds pass (False; 0 = no limit)."""
        end = time.monotonic() + timeout_s if timeout_s > 0 else math.inf
        while self.rclpy.ok() and not done():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.rclpy.spin_once(self.node, timeout_sec=min(0.1, left))
        return bool(done())

    def close(self) -> None:
        self.node.destroy_node()
        if self.rclpy.ok():
            self.rclpy.shutdown()


def capture(args: argparse.Namespace) -> int:
    _seconds(args.timeout, "--timeout", zero_ok=False)
    _seconds(args.sync_tolerance, "--sync-tolerance", zero_ok=True)
    out = args.out.with_suffix(".png")
    if not args.overwrite:   # before any ROS work: nothing stored is touched
        refuse_overwriting(out)
    if out.parent.exists() and not out.parent.is_dir():
        raise GoalPhotoError(f"{out.parent} is a file, not a folder for {out.name}")
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from memnav.core.stamp_sync import StampedQueue
    from memnav.ros import conversions as conv
    from memnav.ros.embedding_msgs import stamp_to_ns

    ros = Ros("memnav_goal_capture", args.ros_args)
    node = ros.node
    colours: deque = deque(maxlen=30)
    depths: StampedQueue = StampedQueue(30)
    poses: StampedQueue = StampedQueue(200)
    heard = {args.color_topic: 0, args.depth_topic: 0}
    bad: list[str] = []
    got: dict[str, Any] = {}
    tol_ns = int(args.sync_tolerance * 1e9)

    def take(what: str, topic: str, convert, keep):
        def callback(msg) -> None:
            heard[topic] += 1
            try:
                keep(stamp_to_ns(msg.header.stamp), (convert(msg), msg.header.frame_id))
            except conv.MessageError as err:
                bad.append(f"{what} on {topic}: {err}")
                return
            match()
        return callback

    def match() -> None:
        """The newest colour frame with a depth frame within the tolerance (any colour frame with --no-depth)."""
        for t_rgb, (rgb, frame) in reversed(colours):
            if got:
                return
            near = None if args.no_depth else depths.nearest(t_rgb, tol_ns)
            if args.no_depth or near is not None:
                got.update(stamp_ns=t_rgb, rgb=rgb, frame_id=frame, depth=near[1][0] if near else None,
                           depth_stamp_ns=near[0] if near else None)

    try:
        node.create_subscription(Image, args.color_topic,
                                 take("colour image", args.color_topic, conv.image_to_rgb,
                                      lambda *item: colours.append(item)), qos_profile_sensor_data)
        if not args.no_depth:
            node.create_subscription(Image, args.depth_topic,
                                     take("depth image", args.depth_topic, conv.image_to_depth, depths.push),
                                     qos_profile_sensor_data)
        if args.odom_topic:
            node.create_subscription(
                Odometry, args.odom_topic,
                lambda msg: poses.push(stamp_to_ns(msg.header.stamp), conv.odometry_to_pose(msg)),
                QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
        print(f"waiting for a colour{'' if args.no_depth else ' and depth'} frame on {args.color_topic}"
              f"{'' if args.no_depth else ' and ' + args.depth_topic} ...", file=sys.stderr)
        if not ros.spin_until(lambda: bool(got), args.timeout):
            raise RuntimeError(_no_frame_text(args, heard, bad, node))
        if args.odom_topic:   # the pose of the capture: wait briefly for odometry at or after the frame
            ros.spin_until(lambda: (poses.newest_stamp_ns or -1) >= got["stamp_ns"], ODOM_TOLERANCE_NS / 1e9)
    finally:
        ros.close()
    pose = poses.nearest(got["stamp_ns"], ODOM_TOLERANCE_NS) if args.odom_topic else None
    if args.odom_topic and pose is None:
        print(f"memnav goal capture: no odometry on {args.odom_topic} within "
              f"{ODOM_TOLERANCE_NS / 1e9:g} s of the frame; NAME.json records none", file=sys.stderr)
    meta = {"stamp_ns": got["stamp_ns"], "color_topic": args.color_topic, "frame_id": got["frame_id"],
            "depth_topic": None if args.no_depth else args.depth_topic, "depth_stamp_ns": got["depth_stamp_ns"],
            "odom_topic": args.odom_topic or None,
            "odom_pose": None if pose is None else {"x_m": pose[1].x_m, "y_m": pose[1].y_m,
                                                    "yaw_rad": pose[1].yaw_rad, "stamp_ns": pose[0]},
            "captured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    written = write_goal_photo(out, GoalPhoto(got["rgb"], got["depth"], meta), overwrite=args.overwrite)
    h, w = got["rgb"].shape[:2]
    print(f"wrote {', '.join(map(str, written))} ({w}x{h} px"
          f"{', depth' if got['depth'] is not None else ''}"
          f"{'' if pose is None else f', odometry x {pose[1].x_m:.2f} m y {pose[1].y_m:.2f} m'})")
    return 0


def _no_frame_text(args: argparse.Namespace, heard: dict[str, int], bad: list[str], node) -> str:
    """Why no frame (pair) came: which topic was silent or unpublished, or what was wrong with its messages."""
    parts = []
    for topic, n in heard.items():
        if topic == args.depth_topic and args.no_depth:
            continue
        pubs = node.count_publishers(topic)
        if n:
            parts.append(f"{topic}: {n} messages")
        else:
            parts.append(f"{topic}: no message ({pubs} publisher{'s' if pubs != 1 else ''})")
    text = f"no usable frame within {args.timeout:g} s ({'; '.join(parts)})"
    if bad:
        text += f"; last bad message: {bad[-1]}"
    elif all(heard.values()):
        text += f"; no colour frame had a depth frame within --sync-tolerance {args.sync_tolerance:g} s"
    else:
        text += ("; check the topic names, that the camera driver runs, and for images over ~512 KB between "
                 "processes FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA (README)")
    return text


def send(args: argparse.Namespace) -> int:
    _seconds(args.timeout, "--timeout", zero_ok=True)
    _seconds(args.match_timeout, "--match-timeout", zero_ok=False)
    if args.no_depth and args.depth is not None:
        raise ValueError(f"--depth {args.depth}: contradicts --no-depth")
    for option in ("timeout", "json"):
        if getattr(args, option) and not args.wait:
            raise ValueError(f"--{option}: has effect only with --wait")
    if args.json is not None:
        from memnav.paths import check_output_file

        check_output_file(args.json, "--json")
    goal = read_goal_photo(args.photo, args.depth, find_depth=not args.no_depth)   # before any ROS work
    from rclpy.duration import Duration
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.ros import conversions as conv
    from memnav.ros.embedding_msgs import stamp_to_ns

    ros = Ros("memnav_goal_send", args.ros_args)
    node = ros.node
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    state: dict[str, Any] = {"actions": 0, "stopped": False, "policy_state": None, "last_action": None,
                             "counting": False, "states": 0}
    try:
        stamp = node.get_clock().now()
        if args.stamp_topic:
            stamp = _stamp_after(ros, args.stamp_topic, args.match_timeout, qos_profile_sensor_data)
        if args.wait:
            def on_action(msg: String) -> None:
                if not state["counting"]:
                    return
                state["actions"] += 1
                state["last_action"] = msg.data
                if msg.data == "STOP":
                    state["stopped"] = True

            def on_state(msg: String) -> None:
                if state["counting"]:
                    try:
                        state["policy_state"] = json.loads(msg.data)
                    except ValueError:
                        return
                    state["states"] += 1

            node.create_subscription(String, "/memnav/action", on_action, 10)
            node.create_subscription(String, "/memnav/policy_state", on_state, 10)
        pub_image = node.create_publisher(Image, GOAL_IMAGE_TOPIC, latched)
        pub_depth = node.create_publisher(Image, GOAL_DEPTH_TOPIC, latched) \
            if goal.depth_m is not None else None
        msg_stamp = stamp.to_msg()
        if pub_depth is not None:   # depth first: the policy node pairs it with the photo of the same stamp
            pub_depth.publish(conv.depth_to_image(goal.depth_m, msg_stamp, args.frame_id))
        pub_image.publish(conv.rgb_to_image(goal.rgb, msg_stamp, args.frame_id))
        sent_s = time.monotonic()
        if not ros.spin_until(lambda: pub_image.get_subscription_count() > 0, args.match_timeout):
            raise RuntimeError(f"no subscriber of {GOAL_IMAGE_TOPIC} within {args.match_timeout:g} s: is policy_node "
                               "running (memnav launch robot.launch.yaml) on this ROS_DOMAIN_ID?")
        for pub in (pub_depth, pub_image):
            if pub is not None and not pub.wait_for_all_acked(Duration(seconds=args.match_timeout)):
                raise RuntimeError(f"{pub.topic_name}: the subscribers did not acknowledge the goal within "
                                   f"{args.match_timeout:g} s")
        state["counting"] = True
        h, w = goal.rgb.shape[:2]
        print(f"goal sent: {args.photo} ({w}x{h} px, {'RGB-D' if pub_depth is not None else 'colour only'}, "
              f"stamp {stamp_to_ns(msg_stamp)} ns); taken by {pub_image.get_subscription_count()} "
              f"subscriber(s)", file=sys.stderr)
        if not args.wait:
            return 0
        ok = _follow(ros, state, args.timeout, not args.no_progress)
        took_s = time.monotonic() - sent_s
    finally:
        ros.close()
    result = {"stopped": ok, "actions": state["actions"], "seconds": round(took_s, 2),
              "photo": str(args.photo), "depth": pub_depth is not None, "goal_stamp_ns": stamp_to_ns(msg_stamp),
              "policy_state": state["policy_state"]}
    belief = (state["policy_state"] or {}).get("belief")
    if ok:
        print(f"STOP after {state['actions']} actions, {took_s:.1f} s"
              + (f"; belief {belief:.2f}" if isinstance(belief, (int, float)) else ""))
    else:
        print(f"memnav goal send: no STOP within {args.timeout:g} s ({state['actions']} actions)", file=sys.stderr)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


def _stamp_after(ros: Ros, topic: str, timeout_s: float, qos) -> Any:
    """A stamp 1 ns after the newest message's on `topic` (its type found in the graph)."""
    from rclpy.time import Time

    from memnav.ros.embedding_msgs import stamp_to_ns
    from memnav.ros.record_command import message_class

    node, newest = ros.node, []

    def types() -> list[str]:
        return next((t for name, t in node.get_topic_names_and_types() if name == topic), [])

    if not ros.spin_until(lambda: bool(types()), timeout_s):
        raise RuntimeError(f"--stamp-topic {topic}: no publisher within {timeout_s:g} s")
    node.create_subscription(message_class(types()[0]), topic,
                             lambda msg: newest.append(stamp_to_ns(msg.header.stamp)), qos)
    if not ros.spin_until(lambda: bool(newest), timeout_s):
        raise RuntimeError(f"--stamp-topic {topic}: no message within {timeout_s:g} s")
    return Time(nanoseconds=max(newest) + 1, clock_type=node.get_clock().clock_type)


def _follow(ros: Ros, state: dict, timeout_s: float, progress: bool) -> bool:
    """Spin until the robot's STOP (True) or the timeout (False), with a progress line, and a hint when the policy
    node stays silent."""
    shown, hint_at = [-1], [time.monotonic() + QUIET_HINT_S]

    def done() -> bool:
        if hint_at[0] is not None and state["actions"] == 0 and time.monotonic() > hint_at[0]:
            hint_at[0] = None
            print(f"\nno action from the policy node after {QUIET_HINT_S:g} s: it acts only on colour and depth "
                  "frames stamped after the goal, with odometry; check that the camera and odometry publish "
                  "(policy_node's log tells more)", file=sys.stderr)
        if progress and state["actions"] != shown[0]:
            shown[0] = state["actions"]
            ps = state["policy_state"] or {}
            belief = ps.get("belief")
            print(f"\r{state['actions']} actions, last {state['last_action'] or '-'}, mode {ps.get('mode', '-')}"
                  + (f", belief {belief:.2f}" if isinstance(belief, (int, float)) else "") + "   ",
                  end="", file=sys.stderr, flush=True)
        return state["stopped"]

    try:
        stopped = ros.spin_until(done, timeout_s)
        if stopped:   # the STOP's policy state (its belief) travels on another topic: wait for it briefly
            n = state["states"]
            ros.spin_until(lambda: state["states"] > n and (state["policy_state"] or {}).get("action") == "STOP", 1.0)
        return stopped
    finally:
        if progress:
            print(file=sys.stderr)
