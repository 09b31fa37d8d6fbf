"""sim_bridge_node: the embedded (or Habitat) simulator as a robot on ROS 2 topics.

Publishes (REP-103/105 frames: odom -> base_link):
    /camera/color/image_raw     sensor_msgs/Image rgb8            (sensor-data QoS)
    /camera/depth/image_raw     sensor_msgs/Image 32FC1, meters   (sensor-data QoS)
    /camera/color/camera_info   sensor_msgs/CameraInfo            (sensor-data QoS)
    /odom                       nav_msgs/Odometry (odometry, noisy if configured)
    /memnav/ground_truth_pose   nav_msgs/Odometry (ground truth, frame "map")
    /memnav/goal_image          sensor_msgs/Image rgb8            (reliable, transient local)
    /memnav/goal_depth          sensor_msgs/Image 32FC1, meters   (reliable, transient local; same stamp)
    /memnav/goal_pose           geometry_msgs/PoseStamped, frame "map" (reliable, transient local; same stamp):
                                the ground-truth pose the goal image was taken from
    /memnav/episode_result      std_msgs/String JSON              (reliable, transient local; includes
                                goal_stamp_ns, the stamp of the goal image of the episode it ends)
    /tf                         tf2_msgs/TFMessage odom -> base_link, stamped like /odom (only when tf2_msgs
                                is importable, i.e. on a full ROS 2 install; it is not on PyPI)
    /memnav/detections          std_msgs/String JSON: the objects of the frame (class, instance id, odometry-
                                frame position) from the semantic ids, stamped like the frame (`detections`)
    /diagnostics                diagnostic_msgs/DiagnosticArray: this node's status every second (the episode it
                                serves and its actions, the successes so far; WARN on dropped messages; not
                                recorded into record.bag)
Subscribes:
    /cmd_vel                    geometry_msgs/Twist  (velocity mode: applied every tick; zero when stale)
    /memnav/action              std_msgs/String      (STOP / MOVE_FORWARD / TURN_LEFT / TURN_RIGHT or index;
                                lock-step: the action moves the robot; real time: it only counts toward the
                                step limit, the motion comes from /cmd_vel, and STOP ends the episode)
    /memnav/policy_state        std_msgs/String JSON (policy_node's: the layer and belief of each decision go
                                into the results file's ended_by and stop_belief; see AgentStates)
Services (std_srvs/Trigger): ~/reset (restart the episode), ~/next_episode.
Names: every topic above is relative to the node's namespace (/odom is /robot1/odom under `-r __ns:=/robot1` or
the launch files' `namespace` argument), as in every memnav node; a recorded bag keeps the names above.
Parameters: the fields of RunnerConfig, SimConfig (prefix "sim."), BridgeConfig and RecordConfig (prefix
"record.") below.
Modes: `lockstep` true publishes one observation after each action (evaluation, deterministic);
false publishes at `rate_hz` and applies /cmd_vel every tick (real-time, robot-like).
Recording: with `record.bag` set, every message above is also written, in-process and lossless, into that
rosbag2 bag (log time = the message's stamp; re-sent observations are not written twice) with the QoS the
bridge offers, so the bag replays like the live topics and `memnav eval-bag` scores it against the ground
truth and goal annotations. The bag is finished when the node exits (exit_when_done, Ctrl-C, SIGTERM).
Bad messages are dropped with a throttled warning and counted; the node never dies on one.
Start-up: a bad setting (a value out of range, a parameter it does not declare, missing data, a results_json or
record.bag path that cannot be written) is refused before any episode, as one line on stderr, with exit status
memnav.ros.stack_node.CONFIG_ERROR_EXIT (2).
Time: messages are stamped with the node's clock. Under use_sim_time the bridge is not the /clock source (a bag
player or another simulator is): until the first /clock its time stands at 0, so no episode starts (the services
answer failure) and a throttled warning says why; frames stamped 0 would all look like one frame to the stack.
Results file: the episodes cannot be run again, so a results_json write that fails at the end (a full disk, a
folder made read-only or removed meanwhile) does not crash the node: it logs an error naming the parameter, the
path and the cause (every episode's result and the summary are in the log above it), keeps the results in memory,
and with exit_when_done exits with status RESULTS_ERROR_EXIT (1), so a script sees that the file is missing.
A run ended before its last episode keeps the episodes that ended, as `memnav eval` does after Ctrl-C: on Ctrl-C
or SIGTERM the results_json file is written with them, marked `"interrupted": true` (with
`episodes_selected`; nothing is written before the first episode ended). An episode that cannot be started (its
scene missing, unreadable or removed meanwhile, no path to its goal) ends the run the same way: one error names
the episode and the cause, the file also gets `"error"`, the services answer failure from then on, and the node
exits with status EPISODE_ERROR_EXIT (3) (it died with a traceback, losing every result).
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memnav.core.detections import detections_from_semantic, detections_to_dict
from memnav.core.types import Action, Observation
from memnav.paths import check_output_file, earlier_memories
from memnav.ros.shell_node import MAX_WAIT_S, sim_clock_missing
from memnav.sim.agent_states import RESULTS_WAIT_S, AgentStates, write_results
from memnav.sim.base import SimConfig
from memnav.sim.houses import read_semantic_classes
from memnav.sim.metrics import aggregate, lifelong_known_house_spl, lifelong_spl_by_visit, lifelong_summary
from memnav.sim.runner import EpisodeRunner, RunnerConfig

# topic -> (message type, reliable, transient local, history depth): what the bridge offers (relative to its
# namespace) and records (under these names)
TOPICS = {
    "/camera/color/image_raw": ("sensor_msgs/msg/Image", False, False, 5),
    "/camera/depth/image_raw": ("sensor_msgs/msg/Image", False, False, 5),
    "/camera/color/camera_info": ("sensor_msgs/msg/CameraInfo", False, False, 5),
    "/odom": ("nav_msgs/msg/Odometry", True, False, 10),
    "/memnav/ground_truth_pose": ("nav_msgs/msg/Odometry", True, False, 10),
    "/memnav/goal_image": ("sensor_msgs/msg/Image", True, True, 1),
    "/memnav/goal_depth": ("sensor_msgs/msg/Image", True, True, 1),
    "/memnav/goal_pose": ("geometry_msgs/msg/PoseStamped", True, True, 1),
    "/memnav/episode_result": ("std_msgs/msg/String", True, True, 1),
    "/memnav/detections": ("std_msgs/msg/String", True, False, 10),
}
MAX_RATE_HZ = 1e9   # a timer period under 1 ns is 0 ns: a busy loop
RESULTS_ERROR_EXIT = 1   # exit status after the episodes when the results_json file could not be written
EPISODE_ERROR_EXIT = 3   # exit status when an episode could not be started (the run ended there)
NO_CLOCK = ("use_sim_time is set but no /clock has arrived: no episode starts until it does (the bridge does not "
            "publish /clock: start the bag player or simulator that does, or set use_sim_time false)")
TF_TOPICS = {"/tf": ("tf2_msgs/msg/TFMessage", True, False, 100)}   # as tf2_ros.TransformBroadcaster


@dataclass
class BridgeConfig:
    """Node behaviour.

    Attributes:
        lockstep: publish only after each discrete action, which moves the robot (True), or at rate_hz in real
            time, moving the robot by /cmd_vel alone (False: /memnav/action counts toward the step limit, STOP
            ends the episode).
        rate_hz: publishing and /cmd_vel integration rate in real-time mode, Hz.
        cmd_timeout_s: a /cmd_vel older than this is treated as zero, seconds.
        camera_frame: frame_id of the camera images.
        auto_next: start the next episode as soon as one ends.
        exit_when_done: exit after the last episode (with `episodes` set), after logging the summary.
        republish_s: lock-step: re-send the current observation (same stamp) after this long without an
            action, so a late-joining agent gets it (0 = never), seconds.
        detections: publish object detections from the simulator's semantic ids on /memnav/detections with
            each frame (JSON, memnav.core.detections.detections_to_dict; scenes without semantics send none).
        results_json: after the last episode (with `episodes` set), write the results to this file in the
            format of `memnav eval --json`, for `memnav eval-report` ("" = no file; its folder is created).
            Each episode's ended_by and stop_belief come from the agent's /memnav/policy_state (AgentStates).
        results_agent: the agent name that file gives the results (the launch files pass their `agent`).
        lifelong_dir: the folder the agent keeps its long-term memory in across these episodes, as given to
            policy_node ("" = none): the results file is then marked lifelong, with SPL by visit. It needs
            `scene` (policy_node keeps one memory, `memory_key`, for all the episodes it is served).
    """

    lockstep: bool = True
    rate_hz: float = 10.0
    cmd_timeout_s: float = 0.5
    camera_frame: str = "camera_color_optical_frame"
    auto_next: bool = True
    exit_when_done: bool = False
    republish_s: float = 1.0
    detections: bool = True
    results_json: str = ""
    results_agent: str = "ros"
    lifelong_dir: str = ""

    def __post_init__(self) -> None:
        # rate_hz 0 would divide by zero, a negative one is refused by the timer; inf would busy-loop it. ROS
        # timers count int64 nanoseconds: a period (1 / rate_hz, republish_s / 2) beyond MAX_WAIT_S overflows them,
        # one under 1 ns is a 0 ns timer (a busy loop)
        for name, least, strict, most in (("rate_hz", 1.0 / MAX_WAIT_S, False, MAX_RATE_HZ),
                                          ("cmd_timeout_s", 0.0, True, MAX_WAIT_S),
                                          ("republish_s", 0.0, False, MAX_WAIT_S)):
            value = getattr(self, name)
            if not (math.isfinite(value) and (value > least if strict else value >= least) and value <= most):
                raise ValueError(f"BridgeConfig.{name} must be a finite number {'>' if strict else '>='} {least:g} "
                                 f"and at most {most:g}, got {value!r}")
        for name in ("camera_frame", "results_agent"):
            if not getattr(self, name):
                raise ValueError(f"BridgeConfig.{name} must not be empty")


@dataclass
class RecordConfig:
    """Recording the bridge's own episodes (parameters prefixed "record.").

    Attributes:
        bag: rosbag2 folder to write every published message into ("" = no recording); must not exist.
        storage: storage of the bag, "mcap" or "sqlite3".
    """

    bag: str = ""
    storage: str = "mcap"

    def __post_init__(self) -> None:
        if self.storage not in ("mcap", "sqlite3"):
            raise ValueError(f"RecordConfig.storage must be 'mcap' or 'sqlite3', got {self.storage!r}")


def check_runner_config(cfg: RunnerConfig) -> None:
    """The bridge's limits on which episodes it serves (EpisodeRunner would slice a negative index from the end).

    Raises:
        ValueError: naming the parameter.
    """
    if cfg.first_episode < 0:
        raise ValueError(f"RunnerConfig.first_episode must be >= 0, got {cfg.first_episode}")
    if cfg.episodes < 0:
        raise ValueError(f"RunnerConfig.episodes must be >= 0 (0 = all from first_episode on), got {cfg.episodes}")


def tf_message_class() -> Any:
    """tf2_msgs/TFMessage, or None where tf2_msgs is not installed (it is not on PyPI)."""
    try:
        from tf2_msgs.msg import TFMessage
    except ImportError:
        return None
    return TFMessage


def odometry_to_tf(odom: Any, tf_class: Any) -> Any:
    """A TFMessage with the transform header.frame_id -> child_frame_id of a nav_msgs/Odometry."""
    from geometry_msgs.msg import TransformStamped

    t = TransformStamped(header=odom.header, child_frame_id=odom.child_frame_id)
    p, q = odom.pose.pose.position, odom.pose.pose.orientation
    t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = p.x, p.y, p.z
    t.transform.rotation = q
    return tf_class(transforms=[t])


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from geometry_msgs.msg import PoseStamped, Twist
    from rclpy.executors import ExternalShutdownException
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CameraInfo
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    from memnav.core.diagnostics import bridge_diagnostic
    from memnav.eval.bag_io import BagError, BagWriter, qos_profile
    from memnav.ros import conversions as conv
    from memnav.ros import diagnostics_msgs
    from memnav.ros.embedding_msgs import stamp_to_ns
    from memnav.ros.params import declare_dataclass
    from memnav.ros.record_command import message_class
    from memnav.ros.replay_command import publisher_qos
    from memnav.ros.stack_node import shut_down, start_nodes
    from memnav.sim.habitat import HabitatUnavailableError
    from memnav.sim.mesh import SceneLoadError

    def declare(node: Any) -> tuple[RunnerConfig, SimConfig, BridgeConfig, RecordConfig]:
        return (declare_dataclass(node, RunnerConfig), declare_dataclass(node, SimConfig, prefix="sim."),
                declare_dataclass(node, BridgeConfig), declare_dataclass(node, RecordConfig, prefix="record."))

    def prepare(configs: list[tuple[RunnerConfig, SimConfig, BridgeConfig, RecordConfig]]) -> tuple:
        [(run_cfg, sim_cfg, cfg, rec_cfg)] = configs
        check_runner_config(run_cfg)
        if cfg.lifelong_dir and not run_cfg.scene:
            raise ValueError("lifelong_dir needs scene: the agent keeps one long-term memory for all the episodes, "
                             "so they must be of one house (e.g. scene:=house_020)")
        if cfg.results_json:   # before the episodes, not after them
            check_output_file(Path(cfg.results_json), "parameter 'results_json'")
        runner = EpisodeRunner(run_cfg, sim_cfg)
        # the memory the policy node will open: from an earlier launch, this launch's visit 1 is not the first
        earlier = earlier_memories(cfg.lifelong_dir or None, [run_cfg.scene])
        writer = None
        if rec_cfg.bag:
            try:
                writer = BagWriter(rec_cfg.bag, rec_cfg.storage)
            except BagError as err:
                raise ValueError(f"record.bag: {err}") from err
        return runner, earlier, writer

    started = start_nodes("sim_bridge_node", [("sim_bridge_node", declare)],
                          list(argv if argv is not None else sys.argv),
                          errors=(SceneLoadError, HabitatUnavailableError), then=prepare)
    if isinstance(started, int):
        return started
    [(node, (run_cfg, sim_cfg, cfg, rec_cfg))], (runner, earlier, writer) = started
    if earlier:
        node.get_logger().info(f"lifelong: {run_cfg.scene}'s memory in {cfg.lifelong_dir} holds earlier runs: "
                               "visits are counted from this launch's first episode")
    tf_class = tf_message_class()
    topics = TOPICS | (TF_TOPICS if tf_class is not None else {})
    # published under the node's namespace (`odom` is /odom, or /robot1/odom with __ns:=/robot1); a bag keeps
    # the names without it, which memnav eval-bag reads
    pubs = {name: node.create_publisher(message_class(mtype), name.lstrip("/"),
                                        publisher_qos((qos_profile(rel, lat, depth),)))
            for name, (mtype, rel, lat, depth) in topics.items()}
    if writer is not None:
        for name, (mtype, rel, lat, depth) in topics.items():
            writer.add_topic(name, mtype, [qos_profile(rel, lat, depth)])
        node.get_logger().info(f"recording episodes into {rec_cfg.bag} ({rec_cfg.storage})")
    dropped = {"count": 0}
    cmd = {"v": 0.0, "w": 0.0, "stamp": 0.0}

    def drop(what: str, err: Exception) -> None:
        dropped["count"] += 1
        node.get_logger().warning(f"dropped {what} ({dropped['count']} so far): {err}", throttle_duration_sec=2.0)

    def emit(topic: str, msg: Any, stamp: Any, record: bool = True) -> None:
        pubs[topic].publish(msg)
        if writer is not None and record:
            writer.write_raw(topic, stamp_to_ns(stamp), serialize_message(msg))

    last = {"obs": None, "stamp": None, "wall": 0.0}
    done = {"flag": False}

    def publish(obs: Observation, stamp=None, record: bool = True) -> None:
        stamp = stamp if stamp is not None else node.get_clock().now().to_msg()
        last.update(obs=obs, stamp=stamp, wall=time.monotonic())
        emit("/camera/color/image_raw", conv.rgb_to_image(obs.rgb, stamp, cfg.camera_frame), stamp, record)
        emit("/camera/depth/image_raw", conv.depth_to_image(obs.depth, stamp, cfg.camera_frame), stamp, record)
        info = CameraInfo(height=sim_cfg.height_px, width=sim_cfg.width_px, distortion_model="plumb_bob")
        f = sim_cfg.focal_px
        info.k = [f, 0.0, sim_cfg.width_px / 2.0, 0.0, f, sim_cfg.height_px / 2.0, 0.0, 0.0, 1.0]
        info.p = [f, 0.0, sim_cfg.width_px / 2.0, 0.0, 0.0, f, sim_cfg.height_px / 2.0, 0.0, 0.0, 0.0, 1.0, 0.0]
        info.header.stamp, info.header.frame_id = stamp, cfg.camera_frame
        emit("/camera/color/camera_info", info, stamp, record)
        odom = conv.pose_to_odometry(obs.pose, stamp)
        emit("/odom", odom, stamp, record)
        if tf_class is not None:
            emit("/tf", odometry_to_tf(odom, tf_class), stamp, record)
        emit("/memnav/ground_truth_pose", conv.pose_to_odometry(obs.gt_pose, stamp, frame_id="map"), stamp, record)
        if cfg.detections and obs.semantic is not None:
            dets = detections_from_semantic(obs.semantic, obs.depth, obs.pose, sim_cfg.focal_px,
                                            sim_cfg.sensor_height_m, scene_classes())
            body = detections_to_dict(stamp_to_ns(stamp), dets)
            emit("/memnav/detections", String(data=json.dumps(body)), stamp, record)

    classes: dict = {}

    def scene_classes() -> dict:
        """Semantic id -> (class id, name) of the current episode's scene (cached per scene)."""
        scene = runner.episodes[max(runner.index, 0)].scene_path
        if scene not in classes:
            try:
                classes[scene] = read_semantic_classes(scene) if scene is not None else {}
            except ValueError as err:
                node.get_logger().warning(f"detections without class names: {err}")
                classes[scene] = {}
        return classes[scene]

    goal_stamp = {"ns": 0}

    def start(obs: Observation) -> None:
        goal = runner.goal
        if goal is not None:
            now = node.get_clock().now()
            goal_stamp["ns"], stamp = now.nanoseconds, now.to_msg()
            agent_states.goal_started(goal_stamp["ns"])
            emit("/memnav/goal_image", conv.rgb_to_image(goal.rgb, stamp, cfg.camera_frame), stamp)
            emit("/memnav/goal_depth", conv.depth_to_image(goal.depth, stamp, cfg.camera_frame), stamp)
            pose = PoseStamped(pose=conv.pose_to_odometry(goal.gt_pose).pose.pose)
            pose.header.stamp, pose.header.frame_id = stamp, "map"
            emit("/memnav/goal_pose", pose, stamp)
        publish(obs)

    def on_action(msg: String) -> None:
        try:
            action = Action.parse(msg.data.strip() if not msg.data.strip().isdigit() else int(msg.data))
        except ValueError as err:
            drop("action", err)
            return
        if runner.env.done or failed["error"]:
            drop("action", RuntimeError("no episode running"))
            return
        # real time: the robot moves by /cmd_vel alone; an action only counts toward the step limit (a robot-like
        # agent sends both, and the action must not move it a second time), and STOP ends the episode
        obs, result = runner.act(action, move=cfg.lockstep)
        if result is not None:
            unsaved["flag"] = True
            decided = last["stamp"]   # lock-step: the frame this episode's last action was decided on
            if not cfg.lockstep:
                agent_states.expect_real_time(len(runner.results) - 1, goal_stamp["ns"])
            elif decided is not None:
                agent_states.expect(stamp_to_ns(decided), len(runner.results) - 1)
            # goal_stamp_ns tells agents which goal this result ends (the topics are not ordered)
            body = dict(result.to_json(), index=runner.index, goal_stamp_ns=goal_stamp["ns"])
            emit("/memnav/episode_result", String(data=json.dumps(body)), node.get_clock().now().to_msg())
            node.get_logger().info(f"episode {result.episode_id}: success {result.success:.0f} spl {result.spl:.3f} "
                                   f"soft_spl {result.soft_spl:.4f} steps {result.steps}")
            if runner.finished:
                summary = aggregate(runner.results)
                node.get_logger().info(
                    f"summary over {summary['episodes']} episodes: success {summary['success']:.3f} "
                    f"spl {summary['spl']:.3f} soft_spl {summary['soft_spl']:.3f} "
                    f"mean_steps {summary['mean_steps']:.1f}")
                if cfg.lifelong_dir:
                    node.get_logger().info(lifelong_summary(lifelong_spl_by_visit(runner.results),
                                                            lifelong_known_house_spl(runner.results)))
                if cfg.results_json:   # written once the last decision's policy state is in (or after 2 s)
                    finishing["deadline"] = time.monotonic() + RESULTS_WAIT_S
                    return
                if cfg.exit_when_done:
                    done["flag"] = True
                    return
            if cfg.auto_next and not runner.finished:
                serve(runner.next_episode, runner.index + 1)
                return
        if cfg.lockstep:   # real time: the timer publishes
            publish(obs)

    def on_cmd(msg: Twist) -> None:
        try:
            cmd["v"], cmd["w"] = conv.twist_to_command(msg)
            cmd["stamp"] = time.monotonic()
        except conv.MessageError as err:
            drop("cmd_vel", err)

    def on_tick() -> None:
        if runner.env.done or failed["error"]:
            return
        fresh = time.monotonic() - cmd["stamp"] <= cfg.cmd_timeout_s
        v, w = (cmd["v"], cmd["w"]) if fresh else (0.0, 0.0)
        publish(runner.drive(v, w, 1.0 / cfg.rate_hz))

    def serve(load: Any, index: int) -> str | None:
        """Start episode `index` of the runner with `load` (its next_episode or restart_episode); None when it
        started, else the error, after which the run is over (the results so far are written, the node exits)."""
        try:
            obs = load()
        except (SceneLoadError, HabitatUnavailableError, OSError, ValueError) as err:
            episode = runner.episodes[index]
            failed["error"] = (f"episode {episode.episode_id} ({episode.scene_id}) cannot be started: {err}; the run "
                               f"ends after {len(runner.results)} ended episodes")
            node.get_logger().error(failed["error"])
            finishing["deadline"] = time.monotonic() + RESULTS_WAIT_S
            return failed["error"]
        start(obs)
        return None

    def srv_reset(_req, resp):
        if failed["error"] or sim_clock_missing(node):
            resp.success, resp.message = False, failed["error"] or NO_CLOCK
            return resp
        error = serve(runner.restart_episode, max(runner.index, 0))
        resp.success = error is None
        resp.message = error or f"episode {runner.episodes[runner.index].episode_id} restarted"
        return resp

    def srv_next(_req, resp):
        if failed["error"] or sim_clock_missing(node):
            resp.success, resp.message = False, failed["error"] or NO_CLOCK
            return resp
        error = serve(runner.next_episode, (runner.index + 1) % len(runner.episodes))
        resp.success = error is None
        resp.message = error or f"episode {runner.episodes[runner.index].episode_id} started"
        return resp

    agent_states = AgentStates(runner.results)
    finishing = {"deadline": None}
    exit_status = {"code": 0}
    failed = {"error": ""}       # why the run ended before its last episode (an episode could not be started)
    unsaved = {"flag": False}    # an episode ended since results_json was last written

    def on_policy_state(msg: String) -> None:
        try:
            agent_states.add(json.loads(msg.data))
        except (ValueError, TypeError, KeyError) as err:
            drop("policy_state", err)

    def finish_results(interrupted: bool = False) -> None:
        """Write results_json once it is due (after the last episode, or the run ended early: `failed`), or at once
        (`interrupted`: Ctrl-C; marked so unless every episode had ended)."""
        if finishing["deadline"] is None and not interrupted:
            return
        if not interrupted and agent_states.waiting and time.monotonic() < finishing["deadline"]:
            return
        finishing["deadline"] = None
        if failed["error"]:
            exit_status["code"] = EPISODE_ERROR_EXIT
        if not cfg.results_json or not unsaved["flag"] or not runner.results:
            if cfg.exit_when_done or failed["error"]:
                done["flag"] = True
            return
        unsaved["flag"] = False
        meta: dict[str, Any] = {"odometry_origin": sim_cfg.odometry_origin}
        if cfg.lifelong_dir:
            meta["lifelong_earlier_memory"] = earlier
        if failed["error"] or not runner.finished:   # as `memnav eval` after Ctrl-C: only the episodes that ended
            meta.update(interrupted=True, episodes_selected=len(runner.episodes))
        if failed["error"]:
            meta["error"] = failed["error"]
        try:
            path = write_results(cfg.results_json, cfg.results_agent, runner.results, run_cfg,
                                 lifelong=bool(cfg.lifelong_dir), **meta)
        except OSError as err:   # see the module docstring: the run is over, only the file failed
            exit_status["code"] = RESULTS_ERROR_EXIT
            node.get_logger().error(f"parameter 'results_json': the results of {len(runner.results)} episodes could "
                                    f"not be written to {cfg.results_json}: {err} (each episode's result and the "
                                    "summary are logged above)")
        else:
            node.get_logger().info(f"results of {len(runner.results)} episodes written to {path}"
                                   f"{' (interrupted)' if 'interrupted' in meta else ''} "
                                   f"(`memnav eval-report {path} --out DIR`)")
        if cfg.exit_when_done or failed["error"]:
            done["flag"] = True

    node.create_subscription(String, "memnav/action", on_action, 10)
    node.create_subscription(String, "memnav/policy_state", on_policy_state, 50)
    node.create_subscription(Twist, "cmd_vel", on_cmd, 10)
    node.create_service(Trigger, "~/reset", srv_reset)
    node.create_service(Trigger, "~/next_episode", srv_next)

    def on_idle() -> None:
        # lock-step: an agent that subscribed after the last publish would wait forever (sensor QoS is
        # volatile), so re-send the current observation with its original stamp when no action came
        if last["obs"] is not None and not runner.env.done and time.monotonic() - last["wall"] >= cfg.republish_s:
            publish(last["obs"], last["stamp"], record=False)

    def health(new: int):
        env, results = runner.env, runner.results
        return bridge_diagnostic(runner.index + 1, len(runner.episodes),
                                 env.episode.episode_id if env.episode is not None else "-", env.steps, env.done,
                                 sum(r.success > 0 for r in results), len(results), cfg.lockstep, dropped["count"],
                                 new)

    diagnostics_msgs.report_every_period(node, health, lambda: dropped["count"])
    if not cfg.lockstep:
        node.create_timer(1.0 / cfg.rate_hz, on_tick)
    elif cfg.republish_s > 0:
        node.create_timer(cfg.republish_s / 2.0, on_idle)
    begun = {"flag": False}

    def begin() -> None:
        """Start the first episode once the node's time runs (under use_sim_time: after the first /clock)."""
        if sim_clock_missing(node):
            node.get_logger().warning(NO_CLOCK, throttle_duration_sec=5.0)
            return
        begun["flag"] = True
        serve(runner.next_episode, 0)

    try:
        while rclpy.ok() and not done["flag"]:
            if not begun["flag"]:
                begin()
            rclpy.spin_once(node, timeout_sec=0.1)
            finish_results()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if not shut_down():
            raise
    finally:
        # stopped before the results were written (Ctrl-C; SIGTERM, whose handler shuts rclpy down, ending the loop
        # by rclpy.ok()): the episodes that ended are kept
        finish_results(interrupted=True)
        if writer is not None:
            writer.close()
            counts = ", ".join(f"{t}: {n}" for t, n in sorted(writer.counts.items()))
            print(f"sim_bridge_node: wrote {rec_cfg.bag} ({counts})", flush=True)
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return exit_status["code"]


if __name__ == "__main__":
    sys.exit(main())
