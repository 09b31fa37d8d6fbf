"""encoder_node: camera frames -> unit-norm embeddings (the perception encoder on topics).

Subscribes:
    /camera/color/image_raw     sensor_msgs/Image rgb8/bgr8/rgba8/bgra8/mono8     (sensor-data QoS)
    /camera/depth/image_raw     sensor_msgs/Image 32FC1 m or 16UC1/mono16 mm      (sensor-data QoS)
    /memnav/goal_image          sensor_msgs/Image (colour)                        (reliable, transient local)
    /memnav/goal_depth          sensor_msgs/Image 32FC1 m / 16UC1 mm, optional; stamped within sync_tolerance_s
                                of the goal image
                                                                                  (reliable, transient local)
Publishes:
    /memnav/embedding           sensor_msgs/Image 32FC1, height 1, width D        (reliable, depth 10)
    /memnav/goal_embedding      sensor_msgs/Image 32FC1, height 1, width D        (reliable, transient local)
    /memnav/encoder_checkpoint  std_msgs/String JSON {checkpoint, sha256}: the checkpoint this node encodes with and
                                its identity (memnav.core.checkpoint.checkpoint_sha256), once at start; stop_node
                                checks it against its calibration's                (reliable, transient local)
    /diagnostics                diagnostic_msgs/DiagnosticArray: this node's status every second (frames encoded,
                                the goal photo, the checkpoint's sha256; WARN on dropped messages;
                                memnav.core.diagnostics)
An embedding's header is a copy of its colour image's header (the goal embedding's, of the goal image's):
the stamp names the frame it was computed from, so the memory and stop nodes pair it by stamp with the
odometry and the colour image of that instant (see memnav.ros.embedding_msgs).
Parameters: the fields of EncoderNodeConfig below.
Pairing: each colour frame is paired with the depth frame of the same header.frame_id nearest in stamp within
`sync_tolerance_s` (memnav.core.stamp_sync.ColourDepthPairer): depth registered to the colour image carries its
frame_id, a depth image of another frame_id (another camera, or unregistered depth) is never paired, and a
throttled warning names both frame_ids while the two streams share none; an empty frame_id pairs by stamp alone.
The last `queue_size` unpaired frames of each stream wait for a partner, older ones are dropped unencoded.
A frame re-sent with the stamp of the last one encoded (the lock-step simulator re-sends for late joiners)
gets the same embedding message again without re-encoding.
Stamps: a camera image stamped 0 carries no time (a driver without a clock); it is stamped with its receive time
(the node's clock) instead, pairs and is encoded like any other, and its embedding carries that time; a warning
names the topic once.
Depth: a checkpoint trained without depth (EncoderConfig.use_depth false) encodes every colour frame at once;
one that uses depth waits for the matching depth frame (an empty depth channel would be out of its training
distribution). Goal: encoded with the /memnav/goal_depth image nearest its stamp within `sync_tolerance_s`
(memnav.core.stamp_sync.GoalDepthPairer, as policy_node and `memnav eval-bag` pair them; each depth image goes to
one goal image) when it comes within `goal_depth_wait_s` of the image (the simulator sends one), else with an
empty depth channel (a user's goal photo), as policy_node does, with a warning naming both stamps when a goal
depth came stamped beyond the tolerance; a depth arriving later re-publishes the goal embedding with depth.
Bad messages are dropped with a throttled warning and counted; the node never dies on one.
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from memnav.ros.qos import latched_qos
from memnav.ros.shell_node import MAX_WAIT_S
from memnav.threads import MAX_INFERENCE_THREADS


@dataclass
class EncoderNodeConfig:
    """Encoder checkpoint and frame pairing.

    Attributes:
        checkpoint: encoder checkpoint (`memnav train encoder`); relative paths are looked up under the package
            root, then the working directory.
        sync_tolerance_s: colour and depth frames closer than this in stamp form a pair, seconds; so do a goal
            image and its goal depth.
        queue_size: unpaired frames kept per stream while waiting for a partner.
        goal_depth_wait_s: how long a new goal image waits for its /memnav/goal_depth (within sync_tolerance_s)
            before it is encoded without depth (a goal photo from a user has none), seconds (wall clock).
        torch_threads: CPU threads of this process's torch and numpy BLAS (0 = their defaults, one per core; at
            most MAX_INFERENCE_THREADS). 1 by default: several nodes on few cores each spinning a thread per core were
            measured 50x slower.
    """

    checkpoint: str = "models/encoder.pt"
    sync_tolerance_s: float = 0.02
    queue_size: int = 10
    goal_depth_wait_s: float = 0.5
    torch_threads: int = 1

    def __post_init__(self) -> None:
        if not (self.sync_tolerance_s >= 0 and self.goal_depth_wait_s >= 0) or self.queue_size < 1:
            raise ValueError("EncoderNodeConfig: sync_tolerance_s and goal_depth_wait_s must be >= 0, queue_size >= 1; "
                             f"got {self.sync_tolerance_s!r}, {self.goal_depth_wait_s!r}, {self.queue_size!r}")
        if not math.isfinite(self.sync_tolerance_s) or self.sync_tolerance_s > MAX_WAIT_S:   # int64 nanoseconds
            raise ValueError(f"EncoderNodeConfig.sync_tolerance_s must be a number of seconds >= 0 and at most "
                             f"{MAX_WAIT_S:g}, got {self.sync_tolerance_s!r}")
        if not 0 <= self.torch_threads <= MAX_INFERENCE_THREADS:
            raise ValueError(f"EncoderNodeConfig.torch_threads must be >= 0 and at most {MAX_INFERENCE_THREADS}, got "
                             f"{self.torch_threads!r}")


# (prefix, dataclass) of every parameter group this node declares, in declaration order
PARAMETER_GROUPS = (("", EncoderNodeConfig),)


def main(argv: list[str] | None = None) -> int:
    from memnav.ros.stack_node import run_nodes

    return run_nodes([("encoder_node", build)], argv)


def build(node) -> Callable[[], None]:
    """Declare this node's parameters on `node` (an rclpy Node named encoder_node) and create its publishers,
    subscriptions and timer; nothing spins here. Returns the clean-up to call before the node is destroyed."""
    from dataclasses import replace

    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.core.checkpoint import checkpoint_sha256
    from memnav.core.diagnostics import encoder_diagnostic
    from memnav.core.encoder import Encoder
    from memnav.core.stamp_sync import ColourDepthPairer, GoalDepthPairer
    from memnav.core.stop import EncoderCheckpoint
    from memnav.ros import conversions as conv
    from memnav.ros import diagnostics_msgs
    from memnav.ros.embedding_msgs import embedding_to_image, stamp_to_ns
    from memnav.ros.model_paths import resolve_model_path
    from memnav.ros.params import declare_dataclass

    cfg = declare_dataclass(node, EncoderNodeConfig)
    if cfg.torch_threads > 0:
        from memnav.threads import set_inference_threads

        set_inference_threads(cfg.torch_threads)
    checkpoint = resolve_model_path(cfg.checkpoint, "checkpoint")
    try:
        encoder = Encoder.from_checkpoint(checkpoint)
    except ValueError as err:    # CheckpointError: another format, version or architecture, or not a checkpoint
        raise ValueError(f"parameter 'checkpoint': {err}") from None
    identity = EncoderCheckpoint(str(checkpoint), checkpoint_sha256(checkpoint))
    needs_depth = encoder.cfg.use_depth
    node.get_logger().info(f"encoder {checkpoint} (sha256 {identity.sha256}, D={encoder.embedding_dim}, "
                           f"{'RGB-D: waits for depth' if needs_depth else 'RGB only'})")
    latched = latched_qos()
    # latched: a stop node started later still hears which checkpoint its embeddings come from
    node.create_publisher(String, "memnav/encoder_checkpoint", latched).publish(String(data=identity.to_json()))
    pub_emb = node.create_publisher(Image, "memnav/embedding", 10)
    pub_goal = node.create_publisher(Image, "memnav/goal_embedding", latched)
    # raw colour and depth messages awaiting their partner
    tolerance_ns = int(round(cfg.sync_tolerance_s * 1e9))
    pairer: ColourDepthPairer = ColourDepthPairer(cfg.queue_size, tolerance_ns)
    goal_depths: GoalDepthPairer = GoalDepthPairer(tolerance_ns)   # goal depth images, for the goal images
    st = {"dropped": 0, "last": None, "frames": 0}   # last: (colour stamp, embedding message)
    unstamped: set[str] = set()   # topics whose images came stamped 0 (warned once each)
    # rgb: (stamp, array, header); published: (stamp, with depth) of the last goal embedding
    goal = {"rgb": None, "wall": 0.0, "published": None}

    def drop(what: str, err: Exception) -> None:
        st["dropped"] += 1
        node.get_logger().warning(f"dropped {what} ({st['dropped']} so far): {err}", throttle_duration_sec=2.0)

    def stamp_ns(msg: Image, topic: str) -> int:
        """The image's stamp; one stamped 0 (no time) is stamped with its receive time first."""
        t = stamp_to_ns(msg.header.stamp)
        if t != 0:
            return t
        now = node.get_clock().now()
        msg.header.stamp = now.to_msg()
        if topic not in unstamped:
            unstamped.add(topic)
            node.get_logger().warning(f"images on {topic} are stamped 0 (no time): stamping them with their receive "
                                      "time, which pairs them only as well as they arrive together (have the "
                                      "camera driver stamp its frames)")
        return now.nanoseconds

    def warn_unshared_frames() -> None:
        frames = pairer.unshared_frames()
        if frames is not None:
            node.get_logger().warning(
                f"no colour image pairs with a depth image: colour frame_id {', '.join(map(repr, frames[0]))} on "
                f"{sub_colour.topic_name}, depth frame_id {', '.join(map(repr, frames[1]))} on {sub_depth.topic_name};"
                " the depth must be registered to the colour image, in its frame (a RealSense's "
                "aligned_depth_to_color): nothing is encoded until they share a frame_id", throttle_duration_sec=5.0)

    def encode_and_publish(colour: Image, depth: Image | None) -> None:
        t = stamp_to_ns(colour.header.stamp)
        if t != 0 and st["last"] is not None and st["last"][0] == t:
            pub_emb.publish(st["last"][1])   # a re-sent frame (lock-step simulator, late joiners): same result
            return
        try:
            rgb = conv.image_to_rgb(colour)
            d = conv.image_to_depth(depth) if depth is not None else None
            if d is not None and d.shape != rgb.shape[:2]:
                raise conv.MessageError(f"depth image is {d.shape[1]}x{d.shape[0]}, colour image "
                                        f"{rgb.shape[1]}x{rgb.shape[0]}; they must match")
            emb = encoder.encode(rgb, d)
        except (conv.MessageError, ValueError) as err:
            drop("frame pair" if depth is not None else "colour image", err)
            return
        msg = embedding_to_image(emb, colour.header)
        pub_emb.publish(msg)
        st["last"] = (t, msg)
        st["frames"] += 1

    def on_colour(msg: Image) -> None:
        t = stamp_ns(msg, sub_colour.topic_name)
        if not needs_depth:
            encode_and_publish(msg, None)
            return
        pair = pairer.add_colour(t, msg.header.frame_id, msg)
        if pair is None:
            warn_unshared_frames()
            return
        encode_and_publish(*pair)

    def on_depth(msg: Image) -> None:
        if not needs_depth:
            return
        pair = pairer.add_depth(stamp_ns(msg, sub_depth.topic_name), msg.header.frame_id, msg)
        if pair is None:
            warn_unshared_frames()
            return
        encode_and_publish(*pair)

    def goal_size_error(depth, rgb) -> conv.MessageError | None:
        if depth.shape == rgb.shape[:2]:
            return None
        return conv.MessageError(f"goal depth is {depth.shape[1]}x{depth.shape[0]}, goal image "
                                 f"{rgb.shape[1]}x{rgb.shape[0]}; they must match")

    def goal_depth_for(t: int, rgb):
        """The goal depth of the goal image stamped `t` (GoalDepthPairer), or None; one of another size is dropped."""
        match = goal_depths.take(t)
        if match is None:
            return None
        err = goal_size_error(match[1], rgb)
        if err is not None:
            goal_depths.discard(match[0])
            drop("goal depth", err)
            return None
        return match[1]

    def encode_goal() -> None:
        if goal["rgb"] is None:
            return
        t, rgb, header = goal["rgb"]
        done = goal["published"]
        if done is not None and done[0] == t and (done[1] or not needs_depth):
            return   # this goal is encoded, with depth or with all there is
        depth = goal_depth_for(t, rgb) if needs_depth else None
        if done is not None and done[0] == t and depth is None:
            return   # encoded without depth, and still none has come
        if needs_depth and depth is None and time.monotonic() - goal["wall"] < cfg.goal_depth_wait_s:
            return   # its depth may still come (topics are not ordered); the timer retries
        try:
            emb = encoder.encode(rgb, depth)
        except ValueError as err:
            drop("goal image", err)
            return
        pub_goal.publish(embedding_to_image(emb, header))
        goal["published"] = (t, depth is not None)
        kind = "RGB-D" if depth is not None else "RGB"
        node.get_logger().info(f"goal embedding published ({kind}, goal stamp {t} ns)")
        missed = goal_depths.missed_warning(t, f"sync_tolerance_s ({cfg.sync_tolerance_s:g} s)") \
            if needs_depth and depth is None else None
        if missed is not None:
            node.get_logger().warning(missed)

    def on_goal_image(msg: Image) -> None:
        try:
            goal.update(rgb=(stamp_to_ns(msg.header.stamp), conv.image_to_rgb(msg), msg.header), wall=time.monotonic())
        except conv.MessageError as err:
            drop("goal image", err)
            return
        encode_goal()

    def on_goal_depth(msg: Image) -> None:
        t = stamp_to_ns(msg.header.stamp)
        try:
            depth = conv.image_to_depth(msg)
            err = None if goal["rgb"] is None or abs(goal["rgb"][0] - t) > tolerance_ns \
                else goal_size_error(depth, goal["rgb"][1])
            if err is not None:   # the goal image's (within the tolerance) but not its size
                raise err
        except conv.MessageError as err:
            drop("goal depth", err)
            return
        goal_depths.add(t, depth)
        encode_goal()

    sub_colour = node.create_subscription(Image, "camera/color/image_raw", on_colour, qos_profile_sensor_data)
    sub_depth = node.create_subscription(Image, "camera/depth/image_raw", on_depth, qos_profile_sensor_data)
    node.create_subscription(Image, "memnav/goal_image", on_goal_image, latched)
    node.create_subscription(Image, "memnav/goal_depth", on_goal_depth, latched)
    node.create_timer(0.05, encode_goal)

    def diagnose(new: int):
        diag = encoder_diagnostic(st["frames"], goal["published"] is not None, needs_depth, st["dropped"], new)
        return replace(diag, values={**diag.values, "checkpoint_sha256": identity.sha256})

    diagnostics_msgs.report_every_period(node, diagnose, lambda: st["dropped"])
    return lambda: None


if __name__ == "__main__":
    sys.exit(main())
