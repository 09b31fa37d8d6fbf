"""`memnav check`: listen to a robot's camera, depth and odometry for a few seconds and say whether memnav can run
on them (before `memnav launch robot.launch.yaml`).

Subscribes, as policy_node and safety_node do (sensor-data QoS; Fast DDS with FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA
as robot.launch.yaml sets it, unless the environment sets it otherwise):
    --color-topic   sensor_msgs/Image      every message converted as the nodes convert it
    --depth-topic   sensor_msgs/Image      likewise; valid share and median depth per frame
    --odom-topic    nav_msgs/Odometry
and counts the publishers and subscribers of --cmd-vel-topic. The colour camera's field of view (from
--camera-info-topic) is checked against the ones the --encoder checkpoint was trained on, and the floor in the
newest depth images gives the camera's height and pitch, checked against --camera-height-m and --camera-pitch-deg
(the policy node's camera_height_m and camera_pitch_deg). The timed window starts
once every stream has delivered a message (or after DISCOVERY_S), so DDS discovery does not count as a gap. The
findings (memnav.core.sensor_check) use the robot profile's thresholds: the safety node's watchdog (0.5 s) and the
policy node's colour-depth pairing tolerance (0.02 s); a stream silent for the watchdog's time at the end of the
window (it stopped), a depth 1000 times off (millimetres in 32FC1, metres in 16UC1) and a camera_info whose K's
principal point is far from the image centre (K of another resolution) FAIL. Exit status 0 when nothing FAILs, 1
otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path

from memnav.core.files import json_safe, replace_files
from memnav.core.frames import camera_hfov_deg, check_robot_camera
from memnav.core.sensor_check import (
    CheckConfig,
    Finding,
    Level,
    StreamLog,
    check_camera_for_encoder,
    check_camera_info,
    check_camera_mount,
    check_command_topic,
    check_streams,
    fit_floor,
    stream_summary,
)
from memnav.ros.shell_node import (
    ROBOT_CAMERA_INFO_TOPIC,
    ROBOT_ENCODER,
    Ros,
    add_exit_statuses,
    add_robot_topic_arguments,
    add_ros_args,
    check_seconds,
    shell_ros_args,
)

DISCOVERY_S = 5.0   # at most this long for the first message of every stream before the timed window


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_robot_topic_arguments(parser, "odometry (robot.launch.yaml odom_topic)")
    parser.add_argument("--camera-info-topic", default=ROBOT_CAMERA_INFO_TOPIC, metavar="TOPIC",
                        help="the colour camera's sensor_msgs/CameraInfo (robot.launch.yaml camera_info_topic; the "
                             "simulator bridge's: camera/color/camera_info)")
    parser.add_argument("--cmd-vel-topic", default="cmd_vel", metavar="TOPIC",
                        help="the base's velocity input (robot.launch.yaml cmd_vel_topic)")
    parser.add_argument("--cmd-vel-stamped", action="store_true",
                        help="the safety node will publish geometry_msgs/TwistStamped (robot.launch.yaml "
                             "cmd_vel_stamped:=true), not Twist: check that the base takes that")
    parser.add_argument("--encoder", default=ROBOT_ENCODER, metavar="PATH",
                        help="the encoder checkpoint the policy node will run (its encoder_checkpoint; config/"
                             "robot.yaml's by default): the camera's field of view is checked against the ones it "
                             f"was trained on (default {ROBOT_ENCODER})")
    parser.add_argument("--camera-height-m", type=float, default=1.25, metavar="M",
                        help="the camera height the policy node will map with (its camera_height_m, config/"
                             "robot.yaml: 1.25), checked against the floor in the depth image")
    parser.add_argument("--camera-pitch-deg", type=float, default=0.0, metavar="DEG",
                        help="how far down the policy node will take the camera to look (its camera_pitch_deg, "
                             "config/robot.yaml: 0), checked against the floor in the depth image")
    parser.add_argument("--duration", type=float, default=5.0, metavar="S", help="how long to listen, seconds")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the per-topic figures and the findings to this JSON file")
    add_ros_args(parser)
    add_exit_statuses(f"0 nothing FAILs; 1 something FAILs (a topic nobody publishes among them); 2 a bad option or "
                      f"--encoder; 130 Ctrl-C. It takes --duration plus up to {DISCOVERY_S:g} s waiting for the "
                      "first message of every stream", parser)


def run(args: argparse.Namespace) -> int:
    check_seconds(args.duration, "--duration")
    check_mount_options(args)
    ros_args = shell_ros_args(args)   # before any ROS work
    trained_hfov, trained_aspect = encoder_camera(args.encoder)   # a wrong path is said before listening
    color, depth, odom, cmd, info, frames = listen(args, ros_args)   # Ros: Fast DDS as the launch file runs them
    transports = os.environ.get("FASTDDS_BUILTIN_TRANSPORTS", "")
    findings = check_streams(color, depth, odom, duration_s=args.duration, cfg=CheckConfig())
    findings.append(check_camera_info(args.camera_info_topic, info and info[:3],
                                      (color.width, color.height) if color.width else None, info and info[3:]))
    camera = None if info is None else {"topic": args.camera_info_topic, "width": info[0], "height": info[1],
                                        "fx_px": info[2], "cx_px": info[3], "cy_px": info[4],
                                        "hfov_deg": camera_hfov_deg(info[0], info[2])}
    encoder = check_camera_for_encoder(args.camera_info_topic, camera and camera["hfov_deg"], args.encoder,
                                       trained_hfov, info and (info[0], info[1]), trained_aspect)
    findings += [encoder] if encoder is not None else []
    if camera is not None and camera["hfov_deg"] is not None and frames:
        # the newest depth image that shows enough floor (a person walking past the camera hides it in some)
        fit = next((f for f in (fit_floor(d, camera["hfov_deg"]) for d in reversed(frames)) if f is not None), None)
        findings.append(check_camera_mount(args.depth_topic, fit, args.camera_height_m, args.camera_pitch_deg))
    findings += check_command_topic(cmd["topic"], cmd["subscribers"], cmd["publishers"], cmd["subscriber_types"],
                                    args.cmd_vel_stamped)
    return report(args, (color, depth, odom), cmd, camera, findings, transports)


def check_mount_options(args: argparse.Namespace) -> None:
    """Refuse a --camera-height-m or --camera-pitch-deg the policy node would refuse as camera_height_m or
    camera_pitch_deg (memnav.core.frames.check_robot_camera), naming the option: a NaN compared with the floor
    fit is never "off by more than the tolerance", so it came out as an OK mount."""
    try:
        check_robot_camera("check", 0.0, args.camera_height_m, args.camera_pitch_deg)
    except ValueError as err:
        raise ValueError(str(err).replace("check.camera_height_m", "--camera-height-m")
                         .replace("check.camera_pitch_deg", "--camera-pitch-deg")) from None


def encoder_camera(path: str) -> tuple[tuple[float, float], float]:
    """The horizontal fields of view and the image shape (width / height) the encoder checkpoint at `path` was
    trained on, found as the policy node finds its encoder_checkpoint."""
    from memnav.core.encoder import load_checkpoint_with_extra  # torch: only once the options are good
    from memnav.core.frames import trained_aspect_from, trained_hfov_from
    from memnav.paths import resolve_model_path

    extra = load_checkpoint_with_extra(resolve_model_path(path, "--encoder"))[1]
    return trained_hfov_from(extra), trained_aspect_from(extra)


def listen(args: argparse.Namespace, ros_args: list[str]) -> tuple:
    """Record the three streams for --duration seconds; (colour, depth, odometry StreamLogs, /cmd_vel counts, the
    newest camera_info's (width, height, fx, cx, cy) or None, the newest depth images)."""
    import numpy as np
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo, Image

    from memnav.ros import conversions as conv
    from memnav.ros.embedding_msgs import stamp_to_ns

    ros = Ros("memnav_check", ros_args)
    # full names under --namespace (and remaps), as the graph and the report name them
    ros.resolve_topics(args, "color_topic", "depth_topic", "odom_topic", "camera_info_topic", "cmd_vel_topic")
    color = StreamLog(args.color_topic, "color")
    depth = StreamLog(args.depth_topic, "depth")
    frames: deque = deque(maxlen=5)   # the newest depth images, for the floor
    odom = StreamLog(args.odom_topic, "odom")

    def record(log: StreamLog, convert):
        def callback(msg) -> None:
            now = time.time()
            try:
                value = convert(msg)
            except conv.MessageError as err:
                log.errors += 1
                log.last_error = str(err)
                return
            log.arrival_s.append(now)
            log.stamp_s.append(stamp_to_ns(msg.header.stamp) / 1e9)
            log.frame_id = msg.header.frame_id
            if log.kind != "odom":
                log.width, log.height, log.encoding = int(msg.width), int(msg.height), msg.encoding
            if log.kind == "depth":
                frames.append(value)
                valid = value[value > 0]
                log.valid_depth.append(valid.size / value.size)
                if valid.size:
                    log.median_depth_m.append(float(np.median(valid)))
        return callback

    try:
        node = ros.node
        node.create_subscription(Image, color.topic, record(color, conv.image_to_rgb), qos_profile_sensor_data)
        node.create_subscription(Image, depth.topic, record(depth, conv.image_to_depth), qos_profile_sensor_data)
        node.create_subscription(Odometry, odom.topic, record(odom, conv.odometry_to_pose), qos_profile_sensor_data)
        infos: list[tuple[int, int, float, float, float]] = []
        node.create_subscription(CameraInfo, args.camera_info_topic,
                                 lambda m: infos.append((int(m.width), int(m.height), float(m.k[0]), float(m.k[2]),
                                                         float(m.k[5]))),
                                 qos_profile_sensor_data)
        # discovery first (a second or two on a busy graph): the window measures the streams, not DDS matching
        ros.spin_until(lambda: all(log.count for log in (color, depth, odom)), DISCOVERY_S)
        for log in (color, depth, odom):
            log.clear_messages()
        print(f"listening for {args.duration:g} s to {color.topic}, {depth.topic}, {odom.topic} ...", file=sys.stderr)
        start = time.time()   # the callbacks' clock
        ros.spin_until(lambda: False, args.duration)
        for log in (color, depth, odom):   # a stream that stopped during the window is silent up to its end
            log.window_s = (start, time.time())
        graph = node.get_topic_names_and_types()
        for log, msgtype in ((color, "sensor_msgs/msg/Image"), (depth, "sensor_msgs/msg/Image"),
                             (odom, "nav_msgs/msg/Odometry")):
            log.publishers = node.count_publishers(log.topic)
            log.same_type_topics = sorted(name for name, types in graph if msgtype in types and name != log.topic
                                          and node.count_publishers(name))
        cmd = {"topic": args.cmd_vel_topic, "subscribers": node.count_subscribers(args.cmd_vel_topic),
               "publishers": node.count_publishers(args.cmd_vel_topic),
               "subscriber_types": sorted({i.topic_type for i in
                                           node.get_subscriptions_info_by_topic(args.cmd_vel_topic)})}
    finally:
        ros.close()
    return color, depth, odom, cmd, infos[-1] if infos else None, list(frames)


def report(args: argparse.Namespace, logs: tuple[StreamLog, ...], cmd: dict, camera: dict | None,
           findings: list[Finding], transports: str) -> int:
    """Print the per-topic table and the findings; write --json; 1 if anything FAILed."""
    rows = [stream_summary(log) for log in logs]
    print(f"{'topic':<52} {'msgs':>5} {'rate':>8} {'max gap':>8} {'stamp age':>9}  image")
    for r in rows:
        rate = f"{r['rate_hz']:.1f} Hz" if r["rate_hz"] is not None else "-"
        gap = f"{r['max_gap_s']:.2f} s" if r["max_gap_s"] is not None else "-"
        age = f"{r['clock_offset_s']:+.2f} s" if r["clock_offset_s"] is not None else "-"
        image = f"{r['width']}x{r['height']} {r['encoding']}" if r["width"] else ""
        print(f"{r['topic']:<52} {r['messages']:>5} {rate:>8} {gap:>8} {age:>9}  {image}")
    print()
    for f in sorted(findings, key=lambda f: [Level.FAIL, Level.WARN, Level.OK].index(f.level)):
        print(f"{f.level.value:<4}  {f.topic}: {f.text}")
    failed = any(f.level is Level.FAIL for f in findings)
    print(f"\n{'FAIL: memnav cannot run on these inputs as they are' if failed else 'memnav can run on these inputs'}"
          f" (listened {args.duration:g} s; FASTDDS_BUILTIN_TRANSPORTS={transports})")
    if args.json is not None:   # strict JSON (a camera_info's K can hold NaN), written whole
        body = {"ok": not failed, "duration_s": args.duration, "topics": rows, "cmd_vel": cmd, "camera_info": camera,
                "findings": [{"level": f.level.value, "topic": f.topic, "text": f.text} for f in findings]}
        replace_files({args.json: (json.dumps(json_safe(body), indent=2, allow_nan=False) + "\n").encode()})
    return 1 if failed else 0
