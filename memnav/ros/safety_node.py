"""safety_node: the last node before the robot's base; speed/acceleration limits, sensor watchdog, e-stop.

Subscribes:
    /memnav/cmd_vel_raw         geometry_msgs/Twist  the policy's command (reliable, depth 10)
    /camera/color/image_raw     sensor_msgs/Image    colour stream watched for freshness (sensor-data QoS)
    /camera/depth/image_raw     sensor_msgs/Image    depth stream watched for freshness  (sensor-data QoS), and with
                                guard.stop_distance_m for surfaces in the robot's path (32FC1 -inf, too near to
                                measure by REP 117, is a surface at the camera)
    /camera/color/camera_info   sensor_msgs/CameraInfo  with guard.stop_distance_m and camera_hfov_deg 0: the field
                                of view the depth image (registered to the colour image) is measured with
    /odom                       nav_msgs/Odometry    odometry watched for freshness      (sensor-data QoS)
    /memnav/estop               std_msgs/Bool        true engages the emergency stop, false releases it; it stays
                                as last set, across restarts of the node too when estop_state_file is set. Three
                                subscriptions: reliable, best effort (micro-ROS) and transient local, which alone
                                hears what a latched publisher sent before this node (re)started or matched it: such
                                a stop engages, such a release does not (`EstopInbox`)
Publishes:
    /cmd_vel                    geometry_msgs/Twist  every 1/rate_hz: the guarded command, zero on any fault
                                (geometry_msgs/TwistStamped with cmd_vel_stamped: ros2_control's diff_drive_controller
                                on Jazzy and later takes only that); a last zero when the node ends (Ctrl-C, SIGTERM
                                from a launcher, an exception)
    /memnav/safety_status       std_msgs/String JSON {reason, v_mps, w_radps, requested_v_mps,
                                requested_w_radps, estop, age_s: {color, depth, odom} (null = never), dropped,
                                ahead_m: the nearest surface in the robot's path in the newest depth image, meters
                                (null: none there, or not measured: stop_distance_m 0 or no field of view yet),
                                blind_share: that image's share of no return in the middle third of its view}
                                on every change of reason and every status_period_s (reliable, depth 10)
    /diagnostics                diagnostic_msgs/DiagnosticArray: this node's status (ERROR while a silent sensor
                                holds the robot still, WARN on the e-stop, no policy command or dropped messages,
                                else OK) every second and on every change of reason (memnav.core.diagnostics)
Parameters: the fields of SafetyNodeConfig, and of memnav.core.velocity_guard.VelocityGuardConfig with the
prefix "guard." (see config/robot.yaml). Remap the topics to the robot's drivers (launch/robot.launch.yaml).
Freshness is the arrival time on this node's monotonic clock (robot clocks need not be synchronised).
Invalid messages (an image whose data size does not match its header, a non-finite odometry or command) are
dropped with a throttled warning and counted, and do not count as fresh; the node never dies on one.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from memnav.core.files import state_path_in_namespace
from memnav.core.frames import camera_hfov_deg, check_robot_camera
from memnav.core.velocity_guard import (
    EstopInbox,
    GuardOutput,
    GuardReason,
    Source,
    VelocityGuard,
    VelocityGuardConfig,
    blind_share,
    nearest_ahead_m,
    read_estop_state,
    write_estop_state,
)


@dataclass
class SafetyNodeConfig:
    """Node timing.

    Attributes:
        rate_hz: /cmd_vel publishing (and watchdog checking) rate, Hz.
        status_period_s: /memnav/safety_status is also published this often when nothing changes, seconds.
        estop_state_file: keep the emergency stop's state in this file ("~" expands; "" = not kept): the node
            writes it whenever it changes and reads it at start, so a node restarted (respawned after a
            crash, or the robot rebooted) while the stop is engaged starts engaged, until a release. A file that
            cannot be read starts it engaged too; one that cannot be written is logged as an error at each change.
            In a namespace other than the root, the file is kept in a folder of that name beside the path given
            (`~/.ros/memnav/robot1/estop_state.json` under /robot1), one per robot.
        cmd_vel_stamped: publish geometry_msgs/TwistStamped on /cmd_vel instead of Twist (stamped with this node's
            clock), for bases that take only that (ros2_control's diff_drive_controller on Jazzy and later by
            default; `memnav check` says which one the base subscribes).
        cmd_vel_frame_id: header.frame_id of the stamped command (the robot's base frame).
        camera_hfov_deg: the depth image's horizontal field of view, for guard.stop_distance_m (which pixels lie in
            the robot's path), degrees; 0 = from camera/color/camera_info (the depth image registered to the
            colour image, as the policy node takes it), forward held until one has come.
        camera_height_m: the camera's height above the floor, for guard.stop_distance_m (floor is not an
            obstacle), meters: the policy node's camera_height_m.
        camera_pitch_deg: how far the camera looks down from level, for guard.stop_distance_m, degrees: the
            policy node's camera_pitch_deg.
    """

    rate_hz: float = 50.0
    status_period_s: float = 1.0
    estop_state_file: str = ""
    cmd_vel_stamped: bool = False
    cmd_vel_frame_id: str = "base_link"
    camera_hfov_deg: float = 90.0
    camera_height_m: float = 1.25
    camera_pitch_deg: float = 0.0

    def __post_init__(self) -> None:
        # the base's command stream: inf would busy-loop the timer, a rate below 1 Hz would leave the base without
        # a fresh /cmd_vel for seconds
        if not (math.isfinite(self.rate_hz) and 1.0 <= self.rate_hz <= 1000.0):
            raise ValueError(f"SafetyNodeConfig.rate_hz must be in [1, 1000] Hz, got {self.rate_hz!r}")
        if not (math.isfinite(self.status_period_s) and self.status_period_s > 0):
            raise ValueError(f"SafetyNodeConfig.status_period_s must be a finite number > 0, got "
                             f"{self.status_period_s!r}")
        check_robot_camera("SafetyNodeConfig", self.camera_hfov_deg, self.camera_height_m, self.camera_pitch_deg)


CLOSE_ACK_S = 0.5   # at the node's end: wait at most this long for the base to acknowledge the last, zero command

PARAMETER_GROUPS = (("", SafetyNodeConfig), ("guard.", VelocityGuardConfig))


def status_body(guard: VelocityGuard, out: GuardOutput, requested: tuple[float, float], now_s: float,
                dropped: dict[str, int]) -> dict:
    """The JSON body of /memnav/safety_status."""
    ages = {s.value: (None if math.isinf(a := guard.age_s(s, now_s)) else round(a, 4)) for s in Source}
    ahead = guard.ahead_m
    return {"reason": out.reason.value, "v_mps": out.v_mps, "w_radps": out.w_radps,
            "requested_v_mps": requested[0], "requested_w_radps": requested[1], "estop": guard.estop,
            "age_s": ages, "dropped": dict(dropped),
            "ahead_m": None if ahead is None or math.isinf(ahead) else round(ahead, 3),
            "blind_share": round(guard.blind, 3)}


def main(argv: list[str] | None = None) -> int:
    from memnav.ros.stack_node import run_nodes

    return run_nodes([("safety_node", build)], argv)


def build(node) -> Callable[[], None]:
    """Declare this node's parameters on `node` (an rclpy Node named safety_node) and create its publishers,
    subscriptions and timer; nothing spins here. Returns the clean-up to call before the node is destroyed."""
    import rclpy
    from geometry_msgs.msg import Twist, TwistStamped
    from nav_msgs.msg import Odometry
    from rclpy.clock import Clock, ClockType
    from rclpy.duration import Duration
    from rclpy.event_handler import SubscriptionEventCallbacks
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo, Image
    from std_msgs.msg import Bool, String

    from memnav.core.diagnostics import safety_diagnostic
    from memnav.ros import conversions as conv
    from memnav.ros import diagnostics_msgs
    from memnav.ros.params import declare_dataclass, live_group
    from memnav.ros.qos import events_qos

    cfg = declare_dataclass(node, SafetyNodeConfig)
    guard = VelocityGuard.from_config(declare_dataclass(node, VelocityGuardConfig, prefix="guard."))
    # the limits may change while the robot runs (`memnav param set safety_node guard.max_linear_mps 0.3`): checked
    # as at a start, then in force from the next control tick
    def new_limits(new: VelocityGuardConfig) -> None:
        guard.config = new
        guard.obstacle(None)      # measured afresh with the new corridor from the next depth image

    live_group(node, "guard.", new_limits)
    # one file per namespace: two robots' safety nodes on one computer keep separate states
    cfg = dataclasses.replace(cfg, estop_state_file=state_path_in_namespace(cfg.estop_state_file,
                                                                            node.get_namespace()))
    kept = {"state": None, "failed": False}   # what estop_state_file holds as this node last wrote it
    if cfg.estop_state_file:
        engaged, why = read_estop_state(cfg.estop_state_file)
        guard.set_estop(engaged)
        (node.get_logger().warning if engaged else node.get_logger().info)(
            why + ("; `memnav estop release` to drive" if engaged else ""))
    pub_cmd = node.create_publisher(TwistStamped if cfg.cmd_vel_stamped else Twist, "cmd_vel", 10)

    def command(v_mps: float, w_radps: float):
        """The base's command message: a Twist, or with cmd_vel_stamped a TwistStamped of now."""
        twist = Twist()
        twist.linear.x, twist.angular.z = float(v_mps), float(w_radps)
        if not cfg.cmd_vel_stamped:
            return twist
        msg = TwistStamped(twist=twist)
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.header.frame_id = cfg.cmd_vel_frame_id
        return msg
    pub_status = node.create_publisher(String, "memnav/safety_status", 10)
    pub_diag = diagnostics_msgs.create_publisher(node)
    st = {"requested": (0.0, 0.0), "reason": None, "status_s": -math.inf, "diag_s": -math.inf, "reported": 0,
          "hfov": cfg.camera_hfov_deg or None}
    dropped = {"command": 0, "color": 0, "depth": 0, "odom": 0, "camera_info": 0}

    warned = dict.fromkeys(dropped, -math.inf)

    def drop(what: str, err: Exception) -> None:
        # throttled per input (rclpy's throttle is per call site: one bad stream would hide another)
        dropped[what] += 1
        if time.monotonic() - warned[what] >= 2.0:
            warned[what] = time.monotonic()
            node.get_logger().warning(f"dropped {what} ({dropped[what]} so far): {err}")

    def on_command(msg: Twist) -> None:
        try:
            v, w = conv.twist_to_command(msg)
        except conv.MessageError as err:
            drop("command", err)
            return
        guard.command(v, w, time.monotonic())
        st["requested"] = (v, w)

    def watch(source: Source, convert):
        def callback(msg) -> None:
            try:
                convert(msg)
            except conv.MessageError as err:
                drop(source.value, err)
                return
            guard.heard(source, time.monotonic())
        return callback

    def on_depth(msg: Image) -> None:
        try:
            depth = conv.image_to_depth(msg, keep_too_near=True)   # -inf: a surface too near to measure
        except conv.MessageError as err:
            drop("depth", err)
            return
        guard.heard(Source.DEPTH, time.monotonic())
        if guard.config.stop_distance_m > 0 and st["hfov"] is not None:
            guard.obstacle(nearest_ahead_m(depth, st["hfov"], cfg.camera_height_m,
                                           guard.config.corridor_half_width_m, pitch_deg=cfg.camera_pitch_deg),
                           blind_share(depth))

    def on_camera_info(msg: CameraInfo) -> None:
        hfov = camera_hfov_deg(int(msg.width), float(msg.k[0]))
        if hfov is None or not 0.0 < hfov < 180.0:
            drop("camera_info", ValueError(f"no field of view from width {msg.width} and K[0] {msg.k[0]!r}"))
            return
        if st["hfov"] is None or abs(hfov - st["hfov"]) >= 0.1:
            node.get_logger().info(f"depth image: {hfov:.1f} deg horizontal field of view (camera_info), for "
                                   "guard.stop_distance_m")
            st["hfov"] = hfov

    inbox = EstopInbox()

    def estop_callback(latched: bool) -> Callable:
        def callback(msg: Bool, info: dict) -> None:
            gid = info.get("publisher_gid")
            if inbox.take(bool(msg.data), None if not gid else bytes(gid["data"]),
                          info.get("publication_sequence_number"), latched=latched):
                on_estop(msg)
        return callback

    def on_estop(msg: Bool) -> None:
        changed = bool(msg.data) != guard.estop
        if changed:
            node.get_logger().warning(f"emergency stop {'ENGAGED' if msg.data else 'released'}")
        guard.set_estop(bool(msg.data))
        on_tick()  # act at once, not at the next tick, and before the synced write below (slow on an SD card)
        # kept at a change (an e-stop button repeating its state would otherwise sync the file at its rate), and
        # again after a failed write
        if cfg.estop_state_file and (changed or kept["failed"] or kept["state"] is None):
            try:
                write_estop_state(cfg.estop_state_file, guard.estop, time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                    time.gmtime()))
                kept.update(state=guard.estop, failed=False)
            except OSError as err:
                kept["failed"] = True
                node.get_logger().error(f"could not keep the emergency-stop state in {cfg.estop_state_file}: {err}; "
                                        "a restarted safety node would not know it")

    def on_tick() -> None:
        now = time.monotonic()
        out = guard.update(now)
        pub_cmd.publish(command(out.v_mps, out.w_radps))
        changed = out.reason != st["reason"]
        if changed and out.reason.stops and st["reason"] is not None:
            node.get_logger().warning(f"commanding zero velocity: {out.reason.value}")
        elif changed and out.reason is GuardReason.OBSTACLE:
            ahead, c = guard.ahead_m, guard.config
            if ahead is None:
                why = "no depth image measured yet" + ("" if st["hfov"] is not None else
                                                       " (no camera_info: field of view unknown)")
            elif ahead < c.stop_distance_m:
                why = f"a surface {ahead:.2f} m ahead in the robot's path" + (
                    " (too near to measure, or under the camera)" if ahead == 0.0 else "")
            else:
                why = (f"no return in {100 * guard.blind:.0f}% of the middle of the depth image (more than "
                       f"guard.max_blind_share {c.max_blind_share:g}): a surface inside the camera's minimum range?")
            node.get_logger().info(f"forward held: {why} (guard.stop_distance_m {c.stop_distance_m:g}); turns pass")
        elif changed and st["reason"] is not None and (st["reason"].stops or st["reason"] is GuardReason.OBSTACLE):
            node.get_logger().info(f"driving again ({out.reason.value})")
        status_due = changed or now - st["status_s"] >= cfg.status_period_s
        diag_due = changed or now - st["diag_s"] >= diagnostics_msgs.PERIOD_S
        if not (status_due or diag_due):
            return
        body = status_body(guard, out, st["requested"], now, dropped)
        if status_due:
            st["reason"], st["status_s"] = out.reason, now
            pub_status.publish(String(data=json.dumps(body)))
        if diag_due:
            total = sum(dropped.values())
            st["diag_s"], new, st["reported"] = now, total - st["reported"], total
            pub_diag.publish(diagnostics_msgs.diagnostic_array(node, safety_diagnostic(body, new)))

    node.create_subscription(Twist, "memnav/cmd_vel_raw", on_command, 10)
    node.create_subscription(Image, "camera/color/image_raw", watch(Source.COLOR, conv.image_to_rgb),
                             qos_profile_sensor_data)
    node.create_subscription(Image, "camera/depth/image_raw", on_depth, qos_profile_sensor_data)
    if not cfg.camera_hfov_deg:
        node.create_subscription(CameraInfo, "camera/color/camera_info", on_camera_info, qos_profile_sensor_data)
    node.create_subscription(Odometry, "odom", watch(Source.ODOM, conv.odometry_to_pose), qos_profile_sensor_data)
    # reliable (memnav estop, a latched state) and best effort (micro-ROS's default, many joystick drivers): a
    # best-effort publisher matches no reliable-only subscription, and its stop would never be heard. A reliable
    # publisher reaches both; the last copy taken restores the newest state.
    # And transient local: a volatile subscription never gets what a latched publisher (a button node, `ros2 topic
    # pub --qos-durability transient_local`) sent before it matched, so a stop pressed while this node was down
    # (respawning), or sent before discovery matched them, went unheard and the node started released (what it
    # hears, `EstopInbox` decides: a latched stop engages, a latched release does not). A publisher
    # that one of the three cannot match is heard by another: no "No messages will be received" warning for it.
    quiet = SubscriptionEventCallbacks(incompatible_qos=lambda _event: None)
    node.create_subscription(Bool, "memnav/estop", estop_callback(latched=False), 10, event_callbacks=quiet)
    node.create_subscription(Bool, "memnav/estop", estop_callback(latched=False), qos_profile_sensor_data)
    node.create_subscription(Bool, "memnav/estop", estop_callback(latched=True), events_qos(),
                             event_callbacks=quiet)
    # on the steady clock, as the watchdog measures input ages: with use_sim_time a tick on the node's clock waits
    # for /clock, and a stalled simulator or an ended replay would leave the base without its zero command
    node.create_timer(1.0 / cfg.rate_hz, on_tick, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def close() -> None:
        if rclpy.ok():                 # leave the base commanded to stand still
            pub_cmd.publish(command(0.0, 0.0))
            # delivered before the process ends (a reliable base subscriber acknowledges it; bounded)
            pub_cmd.wait_for_all_acked(Duration(seconds=CLOSE_ACK_S))

    return close


if __name__ == "__main__":
    sys.exit(main())
