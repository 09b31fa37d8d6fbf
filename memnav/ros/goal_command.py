"""`memnav goal capture|send|cancel`: take a goal photo with the robot's camera, send a goal photo to the robot,
and give up the goal it is working on.

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
and ends (without --wait) once the policy node, the node that publishes /memnav/goal_status, has matched and
acknowledged them: another subscriber (a bag recorder) does not count, since the latched goal leaves with the
command (`shell_node.reaches_publisher_of`).
send --wait subscribes /memnav/action, /memnav/policy_state and /memnav/goal_status (std_msgs/String); Ctrl-C
while it waits cancels the goal (policy_node's ~/cancel_goal), and a goal cancelled from elsewhere ends it too.
cancel calls ~/cancel_goal (std_srvs/Trigger) of the policy node (--node): the robot stops at once and waits for
the next goal.
All topic names are relative: under --namespace NS they are /NS/memnav/goal_image and so on.

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

from memnav.core.goal_photo import (
    DEPTH_SUFFIXES,
    GoalPhoto,
    GoalPhotoError,
    read_goal_photo,
    refuse_overwriting,
    write_goal_photo,
)
from memnav.ros.goal_status import ENDED_WITHOUT_STOP, GoalStatus
from memnav.ros.qos import events_qos, latched_qos
from memnav.ros.shell_node import (
    Ros,
    add_exit_statuses,
    add_robot_topic_arguments,
    add_ros_args,
    check_seconds,
    reaches_publisher_of,
    shell_ros_args,
)

GOAL_IMAGE_TOPIC = "memnav/goal_image"
GOAL_DEPTH_TOPIC = "memnav/goal_depth"
GOAL_STATUS_TOPIC = "memnav/goal_status"   # published by the policy node only: how the command knows it
QUIET_HINT_S = 10.0   # send --wait: say what to check when the policy node has not acted after this long
CANCEL_TIMEOUT_S = 5.0   # send --wait, Ctrl-C: how long the policy node's ~/cancel_goal may take to answer
ODOM_WAIT_S = 3.0   # send --wait: how long to wait for odometry (where the robot stops) before the first goal
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
    add_robot_topic_arguments(cap, "odometry whose pose at the capture is recorded in NAME.json (\"\" = none)")
    cap.add_argument("--no-depth", action="store_true", help="save the colour image only")
    cap.add_argument("--sync-tolerance", type=float, default=0.02, metavar="S",
                     help="largest stamp difference between the colour and the depth frame, seconds")
    cap.add_argument("--timeout", type=float, default=10.0, metavar="S",
                     help="give up when no frame (pair) has arrived after this many seconds")
    cap.add_argument("--overwrite", action="store_true", help="replace the files of an earlier capture of NAME")
    add_ros_args(cap)
    add_exit_statuses("0 written; 2 no usable frame (pair) within --timeout, files of NAME that exist already "
                      "(without --overwrite) or a bad option; 130 Ctrl-C", cap)

    snd = sub.add_parser(
        "send", help="send a goal photo to the robot (optionally follow it until STOP)",
        description="Publish a goal photo (and its depth) for policy_node: the robot drives to where it was "
                    "taken. Depth is read from --depth, else from NAME.depth.png or NAME.depth.npy beside the "
                    "photo. Without --wait the command ends once the policy node has received the goal; with "
                    "--wait it stays, prints the robot's progress and ends at its STOP (status 0; 1 when the "
                    "STOP came only because the goal's action budget was spent) or at --timeout (status 1), "
                    "saying how far from where the photo was taken it stopped when the photo's NAME.json "
                    "recorded an odometry pose. Several photos with --wait make a tour: each is sent after the "
                    "STOP at the one before (status 0 when every goal ended at the robot's own STOP).",
        formatter_class=parser.formatter_class)
    snd.add_argument("photos", type=Path, nargs="+", metavar="PHOTO",
                     help="goal photo: png, jpg, ... (any size); several (with --wait) are sent one after another, "
                          "each after the robot's STOP at the one before (a tour)")
    snd.add_argument("--depth", type=Path, default=None, metavar="FILE",
                     help="the photo's depth: 16-bit PNG in millimetres or .npy float metres, the photo's size "
                          "(default: NAME.depth.png / NAME.depth.npy beside each photo when there is one)")
    snd.add_argument("--no-depth", action="store_true", help="send the colour image only, even if depth is there")
    snd.add_argument("--wait", action="store_true",
                     help="stay until the robot calls STOP, printing its actions and belief")
    snd.add_argument("--timeout", type=float, default=0.0, metavar="S",
                     help="with --wait: give up on a goal after this many seconds (0 = no limit)")
    snd.add_argument("--odom-topic", default="odom", metavar="TOPIC",
                     help="with --wait: odometry whose pose at the STOP is compared with the pose the photo's "
                          "NAME.json recorded at its capture (\"\" = none)")
    snd.add_argument("--match-timeout", type=float, default=30.0, metavar="S",
                     help="fail when no policy node has taken the goal within this many seconds")
    snd.add_argument("--stamp-topic", default="", metavar="TOPIC",
                     help="stamp the goal just after the newest message on TOPIC (e.g. the robot's colour "
                          "topic) instead of this computer's clock (the default)")
    snd.add_argument("--frame-id", default="goal_camera", help="header.frame_id of the goal messages")
    snd.add_argument("--json", type=Path, default=None, metavar="PATH",
                     help="with --wait: write how each goal ended (stopped, actions, seconds, last policy state, "
                          "distance from where the photo was taken)")
    snd.add_argument("--no-progress", action="store_true", help="with --wait: no progress line on stderr")
    snd.add_argument("--node", default="policy_node", metavar="NAME",
                     help="with --wait: the policy node whose ~/cancel_goal Ctrl-C calls")
    add_ros_args(snd)
    add_exit_statuses("0 sent (with --wait: every goal ended at the robot's own STOP); 1 with --wait: a STOP at the "
                      "action budget, no STOP within --timeout, or a goal cancelled or given up; 2 no policy node "
                      "took the goal within --match-timeout, a photo that cannot be read or a bad option; 130 Ctrl-C "
                      "(with --wait: after cancelling the goal)", snd)

    can = sub.add_parser(
        "cancel", help="give up the goal the robot is working on: it stops and waits for the next goal",
        description="Call the policy node's ~/cancel_goal service: the robot's velocity goes to zero at once and "
                    "the policy node takes no more actions until the next goal (no STOP action is sent). Status 0 "
                    "when a goal was cancelled, 1 when none was being worked on, 2 when no policy node answered. "
                    "Ctrl-C during `memnav goal send --wait` does the same for the goal it sent.",
        formatter_class=parser.formatter_class)
    can.add_argument("--node", default="policy_node", metavar="NAME",
                     help="the policy node's name (robot.launch.yaml's and sim.launch.yaml's: policy_node)")
    can.add_argument("--timeout", type=float, default=10.0, metavar="S",
                     help="fail when the policy node has not answered within this many seconds")
    add_ros_args(can)
    add_exit_statuses("0 a goal was cancelled; 1 none was being worked on; 2 no policy node answered within --timeout "
                      "or a bad option; 130 Ctrl-C", can)


def run(args: argparse.Namespace) -> int:
    if args.action == "capture":
        return capture(args)
    if args.action == "cancel":
        return cancel(args)
    return send(args)


def cancel(args: argparse.Namespace) -> int:
    check_seconds(args.timeout, "--timeout")
    ros_args = shell_ros_args(args)
    ros = Ros("memnav_goal_cancel", ros_args)
    try:
        cancelled, message = cancel_goal(ros, args.node, args.timeout)
    finally:
        ros.close()
    if not cancelled:
        print(f"memnav goal cancel: {message}: nothing to cancel", file=sys.stderr)
        return 1
    body = json.loads(message)
    print(f"goal cancelled (stamp {body['goal_stamp_ns']} ns, after {body['actions']} actions): the robot stands "
          "and waits for the next goal", file=sys.stderr)
    return 0


def cancel_goal(ros: Ros, node_name: str, timeout_s: float) -> tuple[bool, str]:
    """Call `node_name`'s ~/cancel_goal; (whether a goal was cancelled, the service's message).

    Raises:
        RuntimeError: no such service, or no answer, within `timeout_s`.
    """
    from std_srvs.srv import Trigger

    client = ros.node.create_client(Trigger, f"{node_name}/cancel_goal")
    resp = ros.call(client, Trigger.Request(), timeout_s,
                    f"no service {client.service_name} within {timeout_s:g} s: is policy_node running (memnav launch "
                    "robot.launch.yaml) on this ROS_DOMAIN_ID, in this namespace (--namespace), under this name "
                    "(--node)? Nothing was cancelled")
    return bool(resp.success), str(resp.message)


def capture(args: argparse.Namespace) -> int:
    check_seconds(args.timeout, "--timeout")
    check_seconds(args.sync_tolerance, "--sync-tolerance", zero_ok=True)
    ros_args = shell_ros_args(args)
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

    ros = Ros("memnav_goal_capture", ros_args)
    ros.resolve_topics(args, "color_topic", "depth_topic", "odom_topic")   # full names, as NAME.json keeps them
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
            def on_odom(msg: Odometry) -> None:
                try:
                    poses.push(stamp_to_ns(msg.header.stamp), conv.odometry_to_pose(msg))
                except conv.MessageError:   # a NaN pose: not a pose to record
                    pass

            node.create_subscription(Odometry, args.odom_topic, on_odom,
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
    check_seconds(args.timeout, "--timeout", zero_ok=True)
    check_seconds(args.match_timeout, "--match-timeout")
    ros_args = shell_ros_args(args)
    if args.no_depth and args.depth is not None:
        raise ValueError(f"--depth {args.depth}: contradicts --no-depth")
    for option in ("timeout", "json"):
        if getattr(args, option) and not args.wait:
            raise ValueError(f"--{option}: has effect only with --wait")
    if len(args.photos) > 1 and not args.wait:
        raise ValueError(f"{len(args.photos)} photos: several goals go one after another, each after the robot's STOP "
                         "at the one before; pass --wait")
    if len(args.photos) > 1 and args.depth is not None:
        raise ValueError(f"--depth {args.depth}: names the depth of one photo, not of {len(args.photos)}")
    for photo in args.photos:
        refuse_depth_as_photo(photo)
    goals = [read_goal_photo(photo, args.depth, find_depth=not args.no_depth)   # all of them before any ROS work
             for photo in args.photos]
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from std_msgs.msg import String

    from memnav.ros import conversions as conv

    ros = Ros("memnav_goal_send", ros_args)
    ros.resolve_topics(args, "odom_topic", "stamp_topic")   # full names, as the graph names them
    node = ros.node
    # pose: (arrival s, Pose2D) of the newest odometry; statuses: goal stamp -> its newest status (goal_status)
    state: dict[str, Any] = {"counting": False, "pose": None, "statuses": {}, "goal_stamp_ns": None}
    results = []
    try:
        stamp = _stamp_source(ros, args.stamp_topic, args.match_timeout, qos_profile_sensor_data)
        if args.wait:
            def on_action(msg: String) -> None:
                if state["counting"]:
                    state["actions"] += 1
                    state["last_action"] = msg.data
                    if msg.data == "STOP" and not state["stopped"]:
                        # where it stopped: the newest odometry before the STOP (after it, a simulator may have
                        # moved on to its next episode)
                        state["stopped"], state["stop_pose"] = True, state["pose"]

            def on_state(msg: String) -> None:
                if state["counting"]:
                    try:
                        state["policy_state"] = json.loads(msg.data)
                    except ValueError:
                        return
                    state["states"] += 1

            def on_odom(msg: Odometry) -> None:
                try:
                    state["pose"] = (time.monotonic(), conv.odometry_to_pose(msg))
                except conv.MessageError:
                    pass

            def on_status(msg: String) -> None:
                try:
                    body = json.loads(msg.data)
                    state["statuses"][int(body["goal_stamp_ns"])] = str(body["status"])
                except (ValueError, TypeError, KeyError):
                    return

            node.create_subscription(String, "memnav/action", on_action, 10)
            node.create_subscription(String, "memnav/policy_state", on_state, 10)
            node.create_subscription(String, "memnav/goal_status", on_status, events_qos())
            if args.odom_topic:
                node.create_subscription(Odometry, args.odom_topic, on_odom, qos_profile_sensor_data)
                if not ros.spin_until(lambda: state["pose"] is not None, ODOM_WAIT_S):
                    print(f"memnav goal send: no odometry on {args.odom_topic} within {ODOM_WAIT_S:g} s: where the "
                          "robot stops is not reported (--odom-topic)", file=sys.stderr)
        publish = GoalPublisher(ros, args.frame_id, args.match_timeout)
        interrupted = False
        for i, (photo, goal) in enumerate(zip(args.photos, goals)):
            if len(goals) > 1:
                print(f"goal {i + 1} of {len(goals)}: {photo}", file=sys.stderr)
            state.update(counting=False, actions=0, stopped=False, policy_state=None, last_action=None, states=0,
                         stop_pose=None)
            goal_stamp_ns = publish(goal, stamp(), photo)
            state["counting"], state["goal_stamp_ns"] = True, goal_stamp_ns
            sent_s = time.monotonic()
            if not args.wait:
                return 0
            try:
                ok = _follow(ros, state, args.timeout, not args.no_progress)
            except KeyboardInterrupt:   # the user wants the robot to stop going there: cancel, as Nav2 clients do
                interrupted = True
                print("\nCtrl-C: cancelling the goal ...", file=sys.stderr)
                try:
                    cancelled, message = cancel_goal(ros, args.node, CANCEL_TIMEOUT_S)
                except RuntimeError as err:   # say so, and still write what is known (--json)
                    cancelled, message = False, str(err)
                if cancelled:
                    state["statuses"][goal_stamp_ns] = GoalStatus.CANCELLED
                else:
                    print(f"memnav goal send: the goal was not cancelled: {message}", file=sys.stderr)
                ok = False
            took_s = time.monotonic() - sent_s
            results.append(_goal_result(photo, goal, goal_stamp_ns, ok, took_s, state, args.odom_topic))
            _print_result(results[-1], args.timeout)
            if interrupted or results[-1]["ended_by"] == GoalStatus.CANCELLED:
                if i + 1 < len(goals):
                    print(f"the tour ends here: {len(goals) - i - 1} goal(s) not sent", file=sys.stderr)
                break
    finally:
        ros.close()
    stopped, reached = sum(r["stopped"] for r in results), sum(r["reached"] for r in results)
    summary: dict[str, Any] = {**results[0]} if len(goals) == 1 else {}
    summary.update(goals=results, goals_sent=len(results), goals_stopped=stopped, goals_reached=reached,
                   all_reached=reached == len(goals), interrupted=interrupted)
    if len(goals) > 1:
        print(f"{reached} of {len(goals)} goals ended at the robot's own STOP"
              + (f", {stopped - reached} at the action budget" if stopped > reached else ""))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    if interrupted:
        return 130
    return 0 if reached == len(goals) else 1


def refuse_depth_as_photo(photo: Path) -> None:
    """Raise GoalPhotoError for a PHOTO that is a capture's depth file (NAME.depth.png, picked by a tab completion):
    OpenCV reads its millimetres as a dark grey picture, and the robot would look for that."""
    suffix = next((s for s in DEPTH_SUFFIXES if photo.name.lower().endswith(s)), None)
    if suffix is not None and len(photo.name) > len(suffix):
        colour = photo.with_name(photo.name[:-len(suffix)] + ".png")
        raise GoalPhotoError(f"{photo} is the depth of a goal photo, not its colour image: send {colour} (its depth "
                             "beside it goes along)")


class GoalPublisher:
    """Publishes goal photos (depth first, one stamp) on the latched goal topics and waits until a policy node has
    acknowledged them; the publishers stay for the next goal."""

    def __init__(self, ros: Ros, frame_id: str, timeout_s: float) -> None:
        from sensor_msgs.msg import Image

        latched = latched_qos()
        self.ros, self.frame_id, self.timeout_s = ros, frame_id, timeout_s
        self.image = ros.node.create_publisher(Image, GOAL_IMAGE_TOPIC, latched)
        self._depth_pub = lambda: ros.node.create_publisher(Image, GOAL_DEPTH_TOPIC, latched)
        self.depth = None

    def __call__(self, goal: GoalPhoto, stamp, photo: Path) -> int:
        """Send `goal` stamped `stamp` (an rclpy Time); its stamp in nanoseconds once acknowledged.

        Raises:
            RuntimeError: no policy node took it within the timeout.
        """
        from rclpy.duration import Duration

        from memnav.ros import conversions as conv
        from memnav.ros.embedding_msgs import stamp_to_ns

        msg_stamp = stamp.to_msg()
        pubs = [self.image]
        if goal.depth_m is not None:   # depth first: the policy node pairs it with the photo of the same stamp
            self.depth = self.depth or self._depth_pub()
            self.depth.publish(conv.depth_to_image(goal.depth_m, msg_stamp, self.frame_id))
            pubs.insert(0, self.depth)
        self.image.publish(conv.rgb_to_image(goal.rgb, msg_stamp, self.frame_id))
        node = self.ros.node
        status_topic = node.resolve_topic_name(GOAL_STATUS_TOPIC)
        if not self.ros.spin_until(lambda: all(reaches_publisher_of(node, pub, status_topic) for pub in pubs),
                                   self.timeout_s):
            others = node.count_subscribers(self.image.topic_name)
            raise RuntimeError(f"no subscriber of {self.image.topic_name} within {self.timeout_s:g} s: is policy_node "
                               "running (memnav launch robot.launch.yaml) on this ROS_DOMAIN_ID, in this namespace "
                               f"(--namespace)? Only the node that publishes {status_topic} counts"
                               + (f" ({others} other subscriber(s), a recorder?, do not)" if others else ""))
        for pub in pubs:
            if not pub.wait_for_all_acked(Duration(seconds=self.timeout_s)):
                raise RuntimeError(f"{pub.topic_name}: the subscribers did not acknowledge the goal within "
                                   f"{self.timeout_s:g} s")
        h, w = goal.rgb.shape[:2]
        print(f"goal sent: {photo} ({w}x{h} px, {'RGB-D' if goal.depth_m is not None else 'colour only'}, stamp "
              f"{stamp_to_ns(msg_stamp)} ns); taken by {self.image.get_subscription_count()} subscriber(s)",
              file=sys.stderr)
        return stamp_to_ns(msg_stamp)


def _goal_result(photo: Path, goal: GoalPhoto, stamp_ns: int, stopped: bool, took_s: float, state: dict,
                 odom_topic: str) -> dict:
    """One goal's record: how it ended, and with odometry where the robot stopped against where the photo was
    taken (meaningful when both poses are in one odometry frame: the same boot, or odometry in a fixed map)."""
    status = state["statuses"].get(stamp_ns)
    ended_by = (state["policy_state"] or {}).get("mode") if stopped else \
        status if status in ENDED_WITHOUT_STOP else None
    out: dict[str, Any] = {"photo": str(photo), "stopped": stopped, "ended_by": ended_by,
                           "reached": stopped and ended_by != "budget", "actions": state["actions"],
                           "seconds": round(took_s, 2), "depth": goal.depth_m is not None, "goal_stamp_ns": stamp_ns,
                           "policy_state": state["policy_state"], "stop_pose": None, "capture_pose": None,
                           "distance_to_capture_m": None, "heading_to_capture_deg": None}
    captured = goal.meta.get("odom_pose") if isinstance(goal.meta.get("odom_pose"), dict) else None
    if captured is not None:
        out["capture_pose"] = {k: captured.get(k) for k in ("x_m", "y_m", "yaw_rad")}
    if stopped and odom_topic and state["stop_pose"] is not None:
        pose = state["stop_pose"][1]
        out["stop_pose"] = {"x_m": pose.x_m, "y_m": pose.y_m, "yaw_rad": pose.yaw_rad}
        try:
            cx, cy, cyaw = (float(captured[k]) for k in ("x_m", "y_m", "yaw_rad")) if captured else (None,) * 3
        except (TypeError, ValueError, KeyError):
            cx = None
        if cx is not None:
            out["distance_to_capture_m"] = round(math.hypot(pose.x_m - cx, pose.y_m - cy), 3)
            out["heading_to_capture_deg"] = round(abs(math.degrees(
                (pose.yaw_rad - cyaw + math.pi) % (2 * math.pi) - math.pi)), 1)
    return out


def _print_result(result: dict, timeout_s: float) -> None:
    if result["ended_by"] == GoalStatus.CANCELLED:
        print(f"the goal was cancelled after {result['actions']} actions, {result['seconds']:.1f} s: the robot "
              "stands and waits for the next goal", file=sys.stderr)
        return
    if result["ended_by"] == GoalStatus.ABANDONED:
        print(f"the policy node gave the goal up after {result['actions']} actions: it restarted while working on "
              "it more often than its max_goal_resumes allows (see its log); send it again to retry", file=sys.stderr)
        return
    if result["ended_by"] == GoalStatus.ENDED:
        print(f"the simulator ended the episode (its step limit, or a restart) after {result['actions']} actions",
              file=sys.stderr)
        return
    if not result["stopped"]:
        print(f"memnav goal send: no STOP within {timeout_s:g} s ({result['actions']} actions)", file=sys.stderr)
        return
    belief = (result["policy_state"] or {}).get("belief")
    where = ""
    if result["distance_to_capture_m"] is not None:
        where = (f"; {result['distance_to_capture_m']:.2f} m and {result['heading_to_capture_deg']:.0f} deg from where "
                 "the photo was taken (odometry)")
    gave_up = "" if result["reached"] else \
        "; the action budget was spent (policy_node max_steps): a STOP at its best guess"
    print(f"STOP after {result['actions']} actions, {result['seconds']:.1f} s"
          + (f"; belief {belief:.2f}" if isinstance(belief, (int, float)) else "") + where + gave_up)


def _stamp_source(ros: Ros, topic: str, timeout_s: float, qos):
    """A function giving each goal its stamp: this node's clock now, or with `topic`, 1 ns after the newest message
    on it (its type found in the graph)."""
    from rclpy.time import Time

    from memnav.ros.embedding_msgs import stamp_to_ns
    from memnav.ros.record_command import message_class

    node = ros.node
    if not topic:
        return lambda: node.get_clock().now()
    newest: list[int] = []

    def types() -> list[str]:
        return next((t for name, t in node.get_topic_names_and_types() if name == topic), [])

    if not ros.spin_until(lambda: bool(types()), timeout_s):
        raise RuntimeError(f"--stamp-topic {topic}: no publisher within {timeout_s:g} s")
    msg_class = message_class(types()[0])
    if msg_class.get_fields_and_field_types().get("header") != "std_msgs/Header":
        raise ValueError(f"--stamp-topic {topic}: its messages ({types()[0]}) have no std_msgs/Header stamp to go by; "
                         "name a stamped topic such as the robot's colour camera")
    node.create_subscription(msg_class, topic,
                             lambda msg: newest.append(stamp_to_ns(msg.header.stamp)), qos)

    def after_newest():
        n = len(newest)
        ros.spin_until(lambda: len(newest) > n, timeout_s)   # a fresh one if the topic still publishes
        if not newest:
            raise RuntimeError(f"--stamp-topic {topic}: no message within {timeout_s:g} s")
        return Time(nanoseconds=max(newest) + 1, clock_type=node.get_clock().clock_type)

    return after_newest


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
        return state["stopped"] or state["statuses"].get(state["goal_stamp_ns"]) in ENDED_WITHOUT_STOP

    try:
        stopped = ros.spin_until(done, timeout_s) and state["stopped"]
        if stopped:   # the STOP's policy state (its belief) travels on another topic: wait for it briefly
            n = state["states"]
            ros.spin_until(lambda: state["states"] > n and (state["policy_state"] or {}).get("action") == "STOP", 1.0)
        return stopped
    finally:
        if progress:
            print(file=sys.stderr)
