"""stop_node: is the robot at the goal? A calibrated goal belief and the value-of-information stop rule.

Subscribes:
    /memnav/embedding           sensor_msgs/Image 32FC1 1 x D (encoder_node; header = its colour frame's)
    /memnav/goal_embedding      sensor_msgs/Image 32FC1 1 x D                    (reliable, transient local)
    /camera/color/image_raw     sensor_msgs/Image rgb8/bgr8/... (for verification)  (sensor-data QoS)
    /memnav/goal_image          sensor_msgs/Image (for verification)              (reliable, transient local)
    /memnav/goal_status         std_msgs/String JSON (policy_node): a goal that ended (goal_status.ENDED_STATUSES:
                                "stopped", "budget", "cancelled", "ended", "abandoned") gets no more decisions
                                                                                             (qos.events_qos)
    /memnav/encoder_checkpoint  std_msgs/String JSON {checkpoint, sha256} (encoder_node): the checkpoint the
                                embeddings come from, checked against the calibration's   (reliable, transient local)
Publishes:
    /memnav/stop_decision       std_msgs/String JSON per embedding once a goal is known {stamp_ns, goal_stamp_ns,
                                stop, belief, reason (StopReason name), similarity, verification, verification_ran,
                                voi, value_stop, value_look}
    /diagnostics                diagnostic_msgs/DiagnosticArray: this node's status every second (its decisions
                                and the last one; WARN on dropped messages, and while the encoder runs another
                                checkpoint than the calibration's; memnav.core.diagnostics)
Parameters: the fields of StopNodeConfig, VoIStopConfig (prefix "voi.") and VerificationConfig (prefix
"verification.").
Belief: GoalBeliefCalibrator (`memnav train stop`) on the features it was fitted with: the cosine similarity
of the current and goal embeddings, and the ORB/RANSAC verification score of the goal image against the
current colour image (goal first, as in training). Verification costs milliseconds, so it runs only when
the similarity reaches `verify_min_similarity`; below that, and when the colour frame of the embedding's
stamp or the goal image of the goal embedding's stamp is not at hand, the score is 0 (`verification_ran` false).
Embeddings stamped before the goal image are skipped: they were taken before the goal was given (more than
GOAL_AHEAD_WARN_S before it: a throttled warning, the goal photo may be stamped by another clock). Once the goal
ended (its `/memnav/goal_status`), or if it had ended before this node heard its embedding, no decision is
published for it until the next goal embedding. An embedding
re-sent with the stamp of the last one decided (same goal) gets the same decision again, not recomputed.
Bad messages are dropped with a throttled warning and counted; the node never dies on one.
Embedding lengths: the node takes the length of the embeddings that come (checked with or without a goal). A
single embedding of another length is dropped as a bad one; when LENGTH_SWITCH_AFTER in a row have one new length,
or when the newest embedding has the length of a goal embedding refused for its length (in either order), the
encoder was restarted with another checkpoint: one warning names both lengths, and the new one is taken. A goal
embedding of a length other than the embeddings' is refused (a throttled warning, counted; the goal before it
stays) but held: it becomes the goal when the embeddings take its length (the restarted encoder re-encodes the
latched goal photo, often before its first frame). A goal that came before any embedding and differs from them is
named, with both lengths, in a throttled warning for each embedding left undecided (the goal was encoded by
another checkpoint than the embeddings), as is a goal left of the old length after a switch.
Checkpoint: the calibration was fitted on the similarities of one encoder checkpoint, whose sha256 it records
(`checkpoint_sha256`, memnav.core.checkpoint.checkpoint_sha256). When the encoder node announces another one, a
warning names both checkpoints and the `memnav train stop` command that fits a calibration for the running one
(once per checkpoint announced), and the diagnostics say WARN while it runs; decisions go on (a stack
mid-way through switching checkpoints is not stopped). A calibration without the field (older `memnav train stop`)
is not checked: one info line says so.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass

from memnav.core.stop import (
    STOP_FEATURES,
    EncoderCheckpoint,
    VoIStopConfig,
    calibrated_checkpoint,
    checkpoint_mismatch,
    load_calibrator,
    unchecked_calibration_note,
)
from memnav.core.verification import VerificationConfig
from memnav.ros.goal_status import ENDED_STATUSES
from memnav.ros.qos import events_qos, latched_qos

FEATURES = STOP_FEATURES
ENDED_KEPT = 32             # ended goals remembered (a late-joining node hears the last 10 statuses)
GOAL_AHEAD_WARN_S = 2.0     # embeddings this much older than the goal photo: warn (another clock?)
LENGTH_SWITCH_AFTER = 5     # embeddings in a row of one new length: the encoder's checkpoint changed, take it


@dataclass
class StopNodeConfig:
    """Calibration, verification gate and frame pairing.

    Attributes:
        calibration: goal-belief calibration JSON (`memnav train stop`); relative paths are looked up under the
            package root, then the working directory.
        verify_min_similarity: run geometric verification only at or above this embedding cosine similarity.
        image_queue_size: recent colour frames kept to find the one an embedding was computed from.
    """

    calibration: str = "models/stop_calibration.json"
    verify_min_similarity: float = 0.6
    image_queue_size: int = 30

    def __post_init__(self) -> None:
        if not -1.0 <= self.verify_min_similarity <= 1.0 or self.image_queue_size < 1:
            raise ValueError("StopNodeConfig: verify_min_similarity must be in [-1, 1] and image_queue_size >= 1, "
                             f"got {self.verify_min_similarity!r} and {self.image_queue_size!r}")


# (prefix, dataclass) of every parameter group this node declares, in declaration order
PARAMETER_GROUPS = (("", StopNodeConfig), ("voi.", VoIStopConfig), ("verification.", VerificationConfig))


def main(argv: list[str] | None = None) -> int:
    from memnav.ros.stack_node import run_nodes

    return run_nodes([("stop_node", build)], argv)


def build(node) -> Callable[[], None]:
    """Declare this node's parameters on `node` (an rclpy Node named stop_node) and create its publisher and
    subscriptions; nothing spins here. Returns the clean-up to call before the node is destroyed."""
    from dataclasses import replace

    import numpy as np
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.core.diagnostics import DiagnosticLevel, stop_diagnostic
    from memnav.core.stamp_sync import StampedQueue
    from memnav.core.stop import VoIStopController
    from memnav.core.verification import extract_features, verify_features
    from memnav.ros import conversions as conv
    from memnav.ros import diagnostics_msgs
    from memnav.ros.embedding_msgs import image_to_embedding, stamp_to_ns
    from memnav.ros.model_paths import resolve_model_path
    from memnav.ros.params import declare_dataclass

    cfg = declare_dataclass(node, StopNodeConfig)
    voi_cfg = declare_dataclass(node, VoIStopConfig, prefix="voi.")
    ver_cfg = declare_dataclass(node, VerificationConfig, prefix="verification.")
    calibration = resolve_model_path(cfg.calibration, "calibration")
    calibrator = load_calibrator(calibration, FEATURES)
    calibrated = calibrated_checkpoint(calibration)   # what the belief's similarity feature was fitted on
    note = unchecked_calibration_note(calibration, calibrated)
    if note is not None:
        node.get_logger().info(note)
    controller = VoIStopController.from_config(voi_cfg)
    latched = latched_qos()
    pub = node.create_publisher(String, "memnav/stop_decision", 10)
    colours: StampedQueue = StampedQueue(cfg.image_queue_size)   # raw colour messages by stamp
    # goal embedding (stamp, vector); goal image features (stamp, Features): they belong together when the
    # stamps agree (encoder_node copies the goal image's header)
    # dim: length of the embeddings (a goal embedding of another length is refused, and held until they take it);
    # run: (length, count) of the newest embeddings in a row of a length other than dim, None if the newest has dim;
    # held: (stamp, vector) of the newest goal embedding refused for its length, None when a goal came after it
    st = {"goal": None, "goal_features": None, "dropped": 0, "stale": 0, "last": None, "dim": None, "decisions": 0,
          "last_body": None, "run": None, "held": None, "encoder": None, "mismatch": None}
    warned_checkpoints: set[str] = set()   # sha256 of the checkpoints named in a mismatch warning
    ended: list[int] = []   # stamps of goals whose end policy_node announced (newest last, ENDED_KEPT at most)

    def drop(what: str, err: Exception) -> None:
        st["dropped"] += 1
        node.get_logger().warning(f"dropped {what} ({st['dropped']} so far): {err}", throttle_duration_sec=2.0)

    def verification(stamp_ns: int, goal_ns: int) -> float | None:
        """Verification score of the colour frame at `stamp_ns` against the goal, None if either is missing."""
        frame = colours.nearest(stamp_ns, 0)
        features = st["goal_features"]
        if frame is None or features is None or features[0] != goal_ns:
            return None
        try:
            current = extract_features(conv.image_to_rgb(frame[1]), ver_cfg)
        except (conv.MessageError, ValueError) as err:
            drop("colour image", err)
            return None
        return verify_features(features[1], current, ver_cfg).score

    def take_length(size: int, why: str) -> None:
        """The embeddings have length `size` from now on (the encoder was restarted with another checkpoint); a
        goal held for that length becomes the goal."""
        node.get_logger().warning(
            f"the embeddings on {sub_embedding.topic_name} now have length {size}, before {st['dim']} ({why}): was "
            f"the encoder restarted with another checkpoint? Length {size} is taken from here on")
        st.update(dim=size, run=None, last=None)
        held = st["held"]
        if held is not None and held[1].size == size:
            st.update(held=None, goal=None if held[0] in ended else held)
            if held[0] not in ended:
                node.get_logger().info(f"goal embedding (stamp {held[0]} ns) of length {size}: it is the goal now")

    def length_agrees(emb) -> bool:
        """Whether the embedding `emb` has the embeddings' length; if not, whether its length is taken now."""
        size = emb.size
        if st["dim"] is None and (st["goal"] is None or st["goal"][1].size == size):
            st["dim"] = size   # the first one; unless the goal differs: on_embedding names both lengths
        if st["dim"] is None or size == st["dim"]:
            st["run"] = None
            return True
        n = st["run"][1] + 1 if st["run"] is not None and st["run"][0] == size else 1
        st["run"] = (size, n)
        held = st["held"]   # newer than the goal: the encoder that sent it may be the one sending these now
        if n >= LENGTH_SWITCH_AFTER:
            take_length(size, f"{n} in a row")
        elif held is not None and held[1].size == size:
            take_length(size, f"as has the goal embedding, stamp {held[0]} ns")
        else:
            drop("embedding", conv.MessageError(
                f"its length is {size}, the embeddings' {st['dim']} ({n} in a row of length {size}; "
                f"{LENGTH_SWITCH_AFTER} in a row are taken as the new length)"))
            return False
        return True

    def on_embedding(msg: Image) -> None:
        try:
            emb = image_to_embedding(msg)
        except conv.MessageError as err:
            drop("embedding", err)
            return
        if not length_agrees(emb) or st["goal"] is None:
            return
        goal_ns, goal = st["goal"]
        if emb.size != goal.size:
            st["dropped"] += 1
            node.get_logger().warning(
                f"goal embedding (stamp {goal_ns} ns) has length {goal.size}, the embeddings on "
                f"{sub_embedding.topic_name} {emb.size}: no stop decision until a goal embedding of length {emb.size} "
                f"comes (was the goal encoded by another encoder checkpoint?) ({st['dropped']} dropped so far)",
                throttle_duration_sec=2.0)
            return
        t = stamp_to_ns(msg.header.stamp)
        if t < goal_ns:
            st["stale"] += 1
            if goal_ns - t > GOAL_AHEAD_WARN_S * 1e9:
                node.get_logger().warning(
                    f"embeddings are stamped {(goal_ns - t) / 1e9:.2f} s before the goal photo: frames taken before "
                    "the goal are not decided on; if this goes on, the goal photo was stamped by another clock than "
                    "the camera's (memnav goal send --stamp-topic)", throttle_duration_sec=5.0)
            return
        key = (t, goal_ns, st["goal_features"][0] if st["goal_features"] is not None else None)
        if st["last"] is not None and st["last"][0] == key:
            pub.publish(st["last"][1])   # a re-sent frame: the same decision, without re-verifying
            return
        # float64: in float32 the squares of an embedding's tiny (1e-30) or huge (1e20) values underflow or
        # overflow, and the similarity came out inf (a STOP at belief 1, published as invalid JSON), NaN (the node
        # died on the NaN belief) or 0 for the goal's own direction
        e64, g64 = emb.astype(np.float64), goal.astype(np.float64)
        sim = float(np.dot(e64, g64) / (np.linalg.norm(e64) * np.linalg.norm(g64)))
        score = verification(t, goal_ns) if sim >= cfg.verify_min_similarity else None
        belief = float(calibrator.predict(np.array([sim, score or 0.0]))[0])
        decision = controller.decide(belief)
        body = {"stamp_ns": t, "goal_stamp_ns": goal_ns, "stop": decision.stop, "belief": decision.belief,
                "reason": decision.reason.name, "similarity": sim, "verification": score or 0.0,
                "verification_ran": score is not None, "voi": decision.voi, "value_stop": decision.value_stop,
                "value_look": decision.value_look}
        st["last"] = (key, String(data=json.dumps(body)))
        st["decisions"] += 1
        st["last_body"] = body
        pub.publish(st["last"][1])

    def on_goal_embedding(msg: Image) -> None:
        try:
            goal = image_to_embedding(msg)
        except conv.MessageError as err:
            drop("goal embedding", err)
            return
        stamp = stamp_to_ns(msg.header.stamp)
        if stamp in ended:
            node.get_logger().info(f"goal embedding (stamp {stamp} ns): that goal has ended, no decisions for it")
            st.update(goal=None, last=None, held=None)
            return
        if st["dim"] is not None and goal.size != st["dim"]:
            if st["run"] is not None and st["run"][0] == goal.size:   # the newest embedding has its length too
                st["held"] = None
                take_length(goal.size, f"as has the goal embedding, stamp {stamp} ns")
            else:
                st["held"] = (stamp, goal)
                drop("goal embedding", conv.MessageError(
                    f"its length is {goal.size}, the embeddings' {st['dim']} (was it encoded by another encoder "
                    "checkpoint?); it becomes the goal if the embeddings take its length"))
                return
        st.update(goal=(stamp, goal), last=None, held=None)

    def on_goal_status(msg: String) -> None:
        try:
            status = json.loads(msg.data)
            stamp, what = int(status["goal_stamp_ns"]), str(status["status"])
        except (ValueError, TypeError, KeyError, OverflowError) as err:
            drop("goal status", err)
            return
        if what not in ENDED_STATUSES or stamp in ended:
            return
        ended.append(stamp)
        del ended[:-ENDED_KEPT]
        if st["held"] is not None and st["held"][0] == stamp:
            st["held"] = None
        if st["goal"] is not None and st["goal"][0] == stamp:
            node.get_logger().info(f"goal (stamp {stamp} ns) {what}: no more stop decisions until the next goal")
            st.update(goal=None, last=None)

    def on_goal_image(msg: Image) -> None:
        try:
            st["goal_features"] = (stamp_to_ns(msg.header.stamp), extract_features(conv.image_to_rgb(msg), ver_cfg))
        except (conv.MessageError, ValueError) as err:
            drop("goal image", err)

    def on_colour(msg: Image) -> None:
        colours.push(stamp_to_ns(msg.header.stamp), msg)   # converted only if verification needs it

    def on_encoder_checkpoint(msg: String) -> None:
        try:
            running = EncoderCheckpoint.from_json(msg.data)
        except ValueError as err:
            drop("encoder checkpoint", err)
            return
        mismatch = checkpoint_mismatch(calibration, calibrated, running)
        if mismatch is not None and running.sha256 not in warned_checkpoints:
            warned_checkpoints.add(running.sha256)
            node.get_logger().warning(mismatch)
        elif mismatch is None and st["mismatch"] is not None:
            node.get_logger().info(f"the encoder node now runs {running.describe()}, the checkpoint the stop "
                                   f"calibration {calibration} was fitted on")
        st.update(encoder=running, mismatch=mismatch)

    def diagnose(new: int):
        diag = stop_diagnostic(st["decisions"], st["goal"] is not None, st["last_body"], st["dropped"], new)
        values = dict(diag.values, calibration_checkpoint_sha256=calibrated.sha256 or "not recorded",
                      encoder_checkpoint_sha256=st["encoder"].sha256 if st["encoder"] is not None else "not heard")
        if st["mismatch"] is None:
            return replace(diag, values=values)
        return replace(diag, level=max(diag.level, DiagnosticLevel.WARN), values=values,
                       message=f"the encoder runs another checkpoint than the calibration's "
                               f"({st['encoder'].sha256} vs {calibrated.sha256}: recalibrate with memnav train "
                               f"stop); {diag.message}")

    diagnostics_msgs.report_every_period(node, diagnose, lambda: st["dropped"])
    sub_embedding = node.create_subscription(Image, "memnav/embedding", on_embedding, 10)
    node.create_subscription(Image, "memnav/goal_embedding", on_goal_embedding, latched)
    node.create_subscription(Image, "memnav/goal_image", on_goal_image, latched)
    node.create_subscription(String, "memnav/goal_status", on_goal_status, events_qos())
    node.create_subscription(Image, "camera/color/image_raw", on_colour, qos_profile_sensor_data)
    node.create_subscription(String, "memnav/encoder_checkpoint", on_encoder_checkpoint, latched)
    return lambda: None


if __name__ == "__main__":
    sys.exit(main())
