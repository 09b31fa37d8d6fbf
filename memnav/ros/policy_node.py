"""policy_node: the image-goal navigation agent (encoder -> memory -> attention policy -> VoI stop) on topics.

Subscribes:
    /camera/color/image_raw     sensor_msgs/Image (rgb8/bgr8/mono8/...)     (sensor-data QoS)
    /camera/depth/image_raw     sensor_msgs/Image 32FC1 m or 16UC1 mm       (sensor-data QoS)
    /odom                       nav_msgs/Odometry
    /memnav/goal_image          sensor_msgs/Image                           (reliable, transient local)
    /memnav/episode_result      std_msgs/String JSON (an episode ended: wait for the next goal)
Publishes:
    /memnav/action              std_msgs/String  STOP / MOVE_FORWARD / TURN_LEFT / TURN_RIGHT
    /cmd_vel                    geometry_msgs/Twist (each action as a velocity held for `action_duration_s`)
    /memnav/policy_state        std_msgs/String JSON {stamp_ns, action, belief, similarity, verification,
                                stop_reason, goal_probability, places}
Parameters: the fields of PolicyNodeConfig below.
Modes: `lockstep` true acts once per new frame pair (evaluation against sim_bridge_node in lock-step);
false decides at most every `action_duration_s` on the newest frames (robot-like, drives /cmd_vel).
The node holds its own Navigator (the same core the in-process `memnav eval` runs), so a lock-step run
over DDS takes the same decisions as the in-process evaluation of the same episodes.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass

from memnav.core.types import Action


@dataclass
class PolicyNodeConfig:
    """Agent and timing.

    Attributes:
        agent: learned agent: memnav, memnav-fixed, episodic or gru.
        policy_dir: folder with policy_<agent>.pt ("" = the package's models/).
        encoder_checkpoint: encoder checkpoint ("" = models/encoder.pt).
        calibration: stop-belief calibration JSON ("" = models/stop_calibration.json).
        lockstep: act once per new frame pair (True) or on a timer (False).
        action_duration_s: time one discrete action takes on /cmd_vel, seconds.
        forward_step_m: MOVE_FORWARD distance, meters.
        turn_angle_deg: TURN_LEFT / TURN_RIGHT angle, degrees.
        sync_tolerance_s: colour and depth frames closer than this in stamp form a pair, seconds.
    """

    agent: str = "memnav"
    policy_dir: str = ""
    encoder_checkpoint: str = ""
    calibration: str = ""
    lockstep: bool = True
    action_duration_s: float = 1.0
    forward_step_m: float = 0.25
    turn_angle_deg: float = 30.0
    sync_tolerance_s: float = 0.02

    def __post_init__(self) -> None:
        if self.action_duration_s <= 0 or self.sync_tolerance_s < 0:
            raise ValueError("PolicyNodeConfig: action_duration_s must be > 0 and sync_tolerance_s >= 0")


def action_velocity(action: Action, cfg: PolicyNodeConfig) -> tuple[float, float]:
    """(v m/s, w rad/s) that performs `action` in `action_duration_s` (STOP: zero)."""
    if action == Action.MOVE_FORWARD:
        return cfg.forward_step_m / cfg.action_duration_s, 0.0
    turn = math.radians(cfg.turn_angle_deg) / cfg.action_duration_s
    if action == Action.TURN_LEFT:
        return 0.0, turn
    if action == Action.TURN_RIGHT:
        return 0.0, -turn
    return 0.0, 0.0


def main(argv: list[str] | None = None) -> int:
    from pathlib import Path

    import rclpy
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.eval.learned_agents import MODELS, LearnedAgent, LearnedAgentOptions
    from memnav.ros import conversions as conv
    from memnav.ros.params import declare_dataclass

    rclpy.init(args=argv if argv is not None else sys.argv)
    node = Node("policy_node")
    cfg = declare_dataclass(node, PolicyNodeConfig)
    opts = LearnedAgentOptions(policy_dir=Path(cfg.policy_dir or MODELS),
                               encoder_checkpoint=Path(cfg.encoder_checkpoint or MODELS / "encoder.pt"),
                               calibration=Path(cfg.calibration or MODELS / "stop_calibration.json"))
    agent = LearnedAgent(cfg.agent, opts)
    nav = agent.navigator
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    pub_action = node.create_publisher(String, "/memnav/action", 10)
    pub_cmd = node.create_publisher(Twist, "/cmd_vel", 10)
    pub_state = node.create_publisher(String, "/memnav/policy_state", 10)
    st = {"rgb": None, "depth": None, "pose": None, "goal_ns": None, "acted_ns": -1, "last_ns": 0, "dropped": 0,
          "collided": False, "cmd": (0.0, 0.0), "cmd_until": 0.0}

    def drop(what: str, err: Exception) -> None:
        st["dropped"] += 1
        node.get_logger().warn(f"dropped {what} ({st['dropped']} so far): {err}", throttle_duration_sec=2.0)

    def stamp_ns(msg) -> int:
        return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec

    def on_goal(msg: Image) -> None:
        try:
            rgb = conv.image_to_rgb(msg)
            nav.reset(rgb, None)
        except (conv.MessageError, ValueError) as err:
            drop("goal image", err)
            return
        st["goal_ns"] = stamp_ns(msg)
        node.get_logger().info("new goal image: episode started")
        maybe_act()

    def on_result(msg: String) -> None:
        try:
            ended = int(json.loads(msg.data).get("goal_stamp_ns", -1))
        except (ValueError, TypeError, AttributeError) as err:
            drop("episode result", err)
            return
        if ended == st["goal_ns"]:
            st["goal_ns"] = None  # this goal's episode is over: act again only after the next goal

    def on_rgb(msg: Image) -> None:
        try:
            st["rgb"] = (stamp_ns(msg), conv.image_to_rgb(msg))
        except conv.MessageError as err:
            drop("colour image", err)
            return
        maybe_act()

    def on_depth(msg: Image) -> None:
        try:
            st["depth"] = (stamp_ns(msg), conv.image_to_depth(msg))
        except conv.MessageError as err:
            drop("depth image", err)
            return
        maybe_act()

    def on_odom(msg: Odometry) -> None:
        try:
            st["pose"] = conv.odometry_to_pose(msg)
        except conv.MessageError as err:
            drop("odometry", err)

    def maybe_act(timer: bool = False) -> None:
        if st["goal_ns"] is None or st["rgb"] is None or st["depth"] is None or st["pose"] is None:
            return
        (t_rgb, rgb), (t_depth, depth) = st["rgb"], st["depth"]
        if abs(t_rgb - t_depth) > cfg.sync_tolerance_s * 1e9 or t_rgb < st["goal_ns"] or t_rgb <= st["acted_ns"]:
            return
        if not cfg.lockstep and not timer:
            return
        st["acted_ns"] = t_rgb
        # memory time must not go backwards even if a bag or simulator restarts its clock
        st["last_ns"] = max(st["last_ns"] + 1, t_rgb)
        action, inp, goal_p = nav.act(rgb, depth, st["pose"], st["last_ns"], st["collided"])
        pub_action.publish(String(data=action.name))
        v, w = action_velocity(action, cfg)
        st["cmd"] = (v, w)
        st["cmd_until"] = node.get_clock().now().nanoseconds / 1e9 + cfg.action_duration_s
        publish_cmd()
        body = {"stamp_ns": t_rgb, "action": action.name, "belief": inp.belief, "similarity": inp.similarity,
                "verification": inp.verification, "stop_reason": inp.stop.reason.name, "goal_probability": goal_p,
                "places": nav.memory.stats().places if nav.memory is not None else 0}
        pub_state.publish(String(data=json.dumps(body)))
        if action == Action.STOP:
            st["goal_ns"] = None

    def publish_cmd() -> None:
        now = node.get_clock().now().nanoseconds / 1e9
        v, w = st["cmd"] if now < st["cmd_until"] else (0.0, 0.0)
        msg = Twist()
        msg.linear.x, msg.angular.z = float(v), float(w)
        pub_cmd.publish(msg)

    def on_tick() -> None:
        now = node.get_clock().now().nanoseconds / 1e9
        if now >= st["cmd_until"]:
            maybe_act(timer=True)
        publish_cmd()

    node.create_subscription(Image, "/camera/color/image_raw", on_rgb, qos_profile_sensor_data)
    node.create_subscription(Image, "/camera/depth/image_raw", on_depth, qos_profile_sensor_data)
    node.create_subscription(Odometry, "/odom", on_odom, 10)
    node.create_subscription(Image, "/memnav/goal_image", on_goal, latched)
    node.create_subscription(String, "/memnav/episode_result", on_result, latched)
    if not cfg.lockstep:
        node.create_timer(0.05, on_tick)
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
