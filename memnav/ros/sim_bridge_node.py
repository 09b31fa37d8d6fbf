"""sim_bridge_node: the embedded (or Habitat) simulator as a robot on ROS 2 topics.

Publishes (REP-103/105 frames: odom -> base_link):
    /camera/color/image_raw     sensor_msgs/Image rgb8            (sensor-data QoS)
    /camera/depth/image_raw     sensor_msgs/Image 32FC1, meters   (sensor-data QoS)
    /camera/color/camera_info   sensor_msgs/CameraInfo            (sensor-data QoS)
    /odom                       nav_msgs/Odometry (odometry, noisy if configured)
    /memnav/ground_truth_pose   nav_msgs/Odometry (ground truth, frame "map")
    /memnav/goal_image          sensor_msgs/Image rgb8            (reliable, transient local)
    /memnav/goal_depth          sensor_msgs/Image 32FC1, meters   (reliable, transient local; same stamp)
    /memnav/episode_result      std_msgs/String JSON              (reliable, transient local; includes
                                goal_stamp_ns, the stamp of the goal image of the episode it ends)
Subscribes:
    /cmd_vel                    geometry_msgs/Twist  (velocity mode: applied every tick; zero when stale)
    /memnav/action              std_msgs/String      (STOP / MOVE_FORWARD / TURN_LEFT / TURN_RIGHT or index)
Services (std_srvs/Trigger): ~/reset (restart the episode), ~/next_episode.
Parameters: the fields of RunnerConfig, SimConfig (prefix "sim.") and BridgeConfig below.
Modes: `lockstep` true publishes one observation after each action (evaluation, deterministic);
false publishes at `rate_hz` and applies /cmd_vel every tick (real-time, robot-like).
Bad messages are dropped with a throttled warning and counted; the node never dies on one.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

from memnav.core.types import Action, Observation
from memnav.sim.base import SimConfig
from memnav.sim.metrics import aggregate
from memnav.sim.runner import EpisodeRunner, RunnerConfig


@dataclass
class BridgeConfig:
    """Node behaviour.

    Attributes:
        lockstep: publish only after each discrete action (True) or at rate_hz in real time (False).
        rate_hz: publishing and /cmd_vel integration rate in real-time mode, Hz.
        cmd_timeout_s: a /cmd_vel older than this is treated as zero, seconds.
        camera_frame: frame_id of the camera images.
        auto_next: start the next episode as soon as one ends.
        exit_when_done: exit after the last episode (with `episodes` set), after logging the summary.
        republish_s: lock-step: re-send the current observation (same stamp) after this long without an
            action, so a late-joining agent gets it (0 = never), seconds.
    """

    lockstep: bool = True
    rate_hz: float = 10.0
    cmd_timeout_s: float = 0.5
    camera_frame: str = "camera_color_optical_frame"
    auto_next: bool = True
    exit_when_done: bool = False
    republish_s: float = 1.0


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo, Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    from memnav.ros import conversions as conv
    from memnav.ros.params import declare_dataclass

    rclpy.init(args=argv if argv is not None else sys.argv)
    node = Node("sim_bridge_node")
    run_cfg = declare_dataclass(node, RunnerConfig)
    sim_cfg = declare_dataclass(node, SimConfig, prefix="sim.")
    cfg = declare_dataclass(node, BridgeConfig)
    runner = EpisodeRunner(run_cfg, sim_cfg)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    pub_rgb = node.create_publisher(Image, "/camera/color/image_raw", qos_profile_sensor_data)
    pub_depth = node.create_publisher(Image, "/camera/depth/image_raw", qos_profile_sensor_data)
    pub_info = node.create_publisher(CameraInfo, "/camera/color/camera_info", qos_profile_sensor_data)
    pub_odom = node.create_publisher(Odometry, "/odom", 10)
    pub_gt = node.create_publisher(Odometry, "/memnav/ground_truth_pose", 10)
    pub_goal = node.create_publisher(Image, "/memnav/goal_image", latched)
    pub_goal_depth = node.create_publisher(Image, "/memnav/goal_depth", latched)
    pub_result = node.create_publisher(String, "/memnav/episode_result", latched)
    dropped = {"count": 0}
    cmd = {"v": 0.0, "w": 0.0, "stamp": 0.0}

    def drop(what: str, err: Exception) -> None:
        dropped["count"] += 1
        node.get_logger().warn(f"dropped {what} ({dropped['count']} so far): {err}", throttle_duration_sec=2.0)

    last = {"obs": None, "stamp": None, "wall": 0.0}
    done = {"flag": False}

    def publish(obs: Observation, stamp=None) -> None:
        stamp = stamp if stamp is not None else node.get_clock().now().to_msg()
        last.update(obs=obs, stamp=stamp, wall=time.monotonic())
        pub_rgb.publish(conv.rgb_to_image(obs.rgb, stamp, cfg.camera_frame))
        pub_depth.publish(conv.depth_to_image(obs.depth, stamp, cfg.camera_frame))
        info = CameraInfo(height=sim_cfg.height_px, width=sim_cfg.width_px, distortion_model="plumb_bob")
        f = sim_cfg.focal_px
        info.k = [f, 0.0, sim_cfg.width_px / 2.0, 0.0, f, sim_cfg.height_px / 2.0, 0.0, 0.0, 1.0]
        info.p = [f, 0.0, sim_cfg.width_px / 2.0, 0.0, 0.0, f, sim_cfg.height_px / 2.0, 0.0, 0.0, 0.0, 1.0, 0.0]
        info.header.stamp, info.header.frame_id = stamp, cfg.camera_frame
        pub_info.publish(info)
        pub_odom.publish(conv.pose_to_odometry(obs.pose, stamp))
        pub_gt.publish(conv.pose_to_odometry(obs.gt_pose, stamp, frame_id="map"))

    goal_stamp = {"ns": 0}

    def start(obs: Observation) -> None:
        goal = runner.goal
        if goal is not None:
            now = node.get_clock().now()
            goal_stamp["ns"] = now.nanoseconds
            pub_goal.publish(conv.rgb_to_image(goal.rgb, now.to_msg(), cfg.camera_frame))
            pub_goal_depth.publish(conv.depth_to_image(goal.depth, now.to_msg(), cfg.camera_frame))
        publish(obs)

    def on_action(msg: String) -> None:
        try:
            action = Action.parse(msg.data.strip() if not msg.data.strip().isdigit() else int(msg.data))
        except ValueError as err:
            drop("action", err)
            return
        if runner.env.done:
            drop("action", RuntimeError("no episode running"))
            return
        obs, result = runner.act(action)
        if result is not None:
            # goal_stamp_ns tells agents which goal this result ends (the topics are not ordered)
            body = dict(result.to_json(), index=runner.index, goal_stamp_ns=goal_stamp["ns"])
            pub_result.publish(String(data=json.dumps(body)))
            node.get_logger().info(f"episode {result.episode_id}: success {result.success:.0f} spl {result.spl:.3f} "
                                   f"soft_spl {result.soft_spl:.4f} steps {result.steps}")
            if runner.finished:
                summary = aggregate(runner.results)
                node.get_logger().info(
                    f"summary over {summary['episodes']} episodes: success {summary['success']:.3f} "
                    f"spl {summary['spl']:.3f} soft_spl {summary['soft_spl']:.3f} "
                    f"mean_steps {summary['mean_steps']:.1f}")
                if cfg.exit_when_done:
                    done["flag"] = True
                    return
            if cfg.auto_next and not runner.finished:
                start(runner.next_episode())
                return
        publish(obs)

    def on_cmd(msg: Twist) -> None:
        try:
            cmd["v"], cmd["w"] = conv.twist_to_command(msg)
            cmd["stamp"] = time.monotonic()
        except conv.MessageError as err:
            drop("cmd_vel", err)

    def on_tick() -> None:
        if runner.env.done:
            return
        fresh = time.monotonic() - cmd["stamp"] <= cfg.cmd_timeout_s
        v, w = (cmd["v"], cmd["w"]) if fresh else (0.0, 0.0)
        publish(runner.drive(v, w, 1.0 / cfg.rate_hz))

    def srv_reset(_req, resp):
        start(runner.restart_episode())
        resp.success, resp.message = True, f"episode {runner.episodes[runner.index].episode_id} restarted"
        return resp

    def srv_next(_req, resp):
        start(runner.next_episode())
        resp.success, resp.message = True, f"episode {runner.episodes[runner.index].episode_id} started"
        return resp

    node.create_subscription(String, "/memnav/action", on_action, 10)
    node.create_subscription(Twist, "/cmd_vel", on_cmd, 10)
    node.create_service(Trigger, "~/reset", srv_reset)
    node.create_service(Trigger, "~/next_episode", srv_next)
    def on_idle() -> None:
        # lock-step: an agent that subscribed after the last publish would wait forever (sensor QoS is
        # volatile), so re-send the current observation with its original stamp when no action came
        if last["obs"] is not None and not runner.env.done and time.monotonic() - last["wall"] >= cfg.republish_s:
            publish(last["obs"], last["stamp"])

    if not cfg.lockstep:
        node.create_timer(1.0 / cfg.rate_hz, on_tick)
    elif cfg.republish_s > 0:
        node.create_timer(cfg.republish_s / 2.0, on_idle)
    start(runner.next_episode())
    try:
        while rclpy.ok() and not done["flag"]:
            rclpy.spin_once(node, timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
