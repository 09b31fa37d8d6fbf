"""policy_node: the image-goal navigation agent (encoder -> memory -> attention policy -> VoI stop) on topics.

Subscribes:
    /camera/color/image_raw     sensor_msgs/Image (rgb8/bgr8/mono8/...)     (sensor-data QoS)
    /camera/depth/image_raw     sensor_msgs/Image 32FC1 m or 16UC1 mm       (sensor-data QoS)
    /odom                       nav_msgs/Odometry
    /memnav/goal_image          sensor_msgs/Image                           (reliable, transient local; a photo
                                with the stamp of the goal worked on, or of one that ended, is not a new goal)
    /memnav/goal_depth          sensor_msgs/Image 32FC1, optional: depth of the goal view, stamped within
                                sync_tolerance_s of the photo (exactly alike in lock-step); a goal that goes on
                                without depth although one came stamped beyond that logs a warning
    /memnav/episode_result      std_msgs/String JSON (an episode ended: wait for the next goal)
Publishes:
    /memnav/action              std_msgs/String  STOP / MOVE_FORWARD / TURN_LEFT / TURN_RIGHT
    /cmd_vel                    geometry_msgs/Twist (each action as a velocity held for `action_duration_s`)
    /memnav/goal_status         std_msgs/String JSON {goal_stamp_ns, status, actions, mode, resumed}: "active" when
                                a goal starts; then "stopped" (the agent's STOP), "budget" (real time: max_steps
                                spent, a STOP), "cancelled" (~/cancel_goal; or a new goal photo replaced it, before
                                that goal's "active": then with `replaced_by`, the new goal's stamp), "ended" (the
                                simulator's episode result)
                                or "abandoned" (goal_state_file: the node restarted more than max_goal_resumes times
                                while working on it; a node killed after a goal's ending went out, before it removed
                                the kept goal, publishes that ending again at its restart instead of resuming it);
                                `resumed`: how often a restarted node took this goal up again
                                (reliable, transient local, depth 10, `qos.events_qos`: statuses
                                sent back to back all arrive; a late subscriber gets the last 10, newest last)
    /memnav/policy_state        std_msgs/String JSON {stamp_ns, action, belief, similarity, verification,
                                stop_reason, goal_probability, places, mode: "policy", "homing",
                                "look", "explore", "candidate", "approach", "sweep", "best_view", "stop" or
                                "budget" (real time: the goal's max_steps-th action, made a STOP),
                                localised: the long-term memory knows where the robot is in its frame,
                                house_map: "laid", "waiting" or "none" (LearnedAgent.house_map)}
    /diagnostics                diagnostic_msgs/DiagnosticArray: this node's status every second (ERROR without
                                camera_info, with a silent camera or odometry during a goal, or with a memory no
                                longer saved, a full disk: it goes on in RAM; WARN on a silent input while idle,
                                dropped messages or a camera narrower than the encoder was trained on; else OK,
                                saying what it does; memnav.core.diagnostics)
    (exploring agents, for RViz; in the frame of /odom; none of them with map_period_s 0:)
    /memnav/map                 nav_msgs/OccupancyGrid: the agent's own occupancy map (-1 unknown, 0 free,
                                100 obstacle), at most every map_period_s and at each STOP
                                (reliable, transient local)
    /memnav/plan                nav_msgs/Path: the path planned at this decision (robot first; no poses when
                                the decision planned none)
    /memnav/search_markers      visualization_msgs/MarkerArray: the RGB-D goal estimate, the goal candidate
                                being checked and the best view so far
Services (std_srvs/Trigger):
    ~/cancel_goal the goal being worked on is given up: zero velocity at once, no more actions until the next
                  goal, goal status "cancelled" (no STOP action: a STOP would tell a simulator the agent thinks it
                  has arrived); fails, saying so, when no goal is being worked on
    ~/relocalise  the robot was moved without its odometry knowing (carried, kidnapped): the long-term memory
                  relocalises from agreeing loop closures, the occupancy map is dropped, and the current goal's
                  search starts over from where the robot stands
Parameters: the fields of PolicyNodeConfig below.
Modes: `lockstep` true acts once per new frame pair (evaluation against sim_bridge_node in lock-step);
false decides on the newest frames once the previous action has had its `action_duration_s`: on the first new
frame pair that arrives after that (so the command answers a frame within the decision time, not a timer
period), or on the 20 Hz timer if a pair arrived while the action was running (robot-like, drives /cmd_vel).
When a decision is due, on which frame and pose, is memnav.core.decision_gate.DecisionGate's to say.
The policy state's `stamp_ns` names the colour frame a decision was computed from (camera-to-command latency).
The node holds its own Navigator (the same core the in-process `memnav eval` runs), so a lock-step run
over DDS takes the same decisions as the in-process evaluation of the same episodes.
Bad messages (and frames the agent cannot take) are dropped with a throttled warning and counted; the node
never dies on one.
"""
from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memnav.core.decision_gate import DecisionGate, action_velocity
from memnav.core.files import state_path_in_namespace
from memnav.core.frames import camera_hfov_deg, check_camera_forward, check_robot_camera
from memnav.core.stamp_sync import same_camera_frame
from memnav.core.types import Action
from memnav.eval.exploring_defaults import ExploringTuning
from memnav.ros.goal_status import ENDED_STATUSES, GoalStatus
from memnav.ros.qos import events_qos, latched_qos
from memnav.ros.shell_node import MAX_WAIT_S, sim_clock_missing
from memnav.threads import MAX_INFERENCE_THREADS

# a kept goal's action count is brought up to date this often (goal_state_file): a synced write of the photo at every
# action would cost more than it is worth. Each action is recorded beside it before it goes out (one line in the page
# cache, microseconds: memnav.core.goal_state.record_actions), so a restarted node counts exactly; only where that
# record cannot vouch for the count does it count these actions as taken (the worst case): a kill between two writes
# never lets the goal overspend max_steps
KEEP_EVERY_ACTIONS = 10


@dataclass
class PolicyNodeConfig(ExploringTuning):
    """Agent and timing. The exploring agents' tuning fields (explore_homing through frontier_colour_weight) are
    ExploringTuning's, so this node and `memnav eval` share their names and defaults.

    Attributes:
        agent: learned agent: memnav, memnav-fixed, episodic or gru.
        policy_dir: folder with policy_<agent>.pt ("" = the package's models/).
        encoder_checkpoint: encoder checkpoint ("" = models/encoder.pt).
        calibration: stop-belief calibration JSON ("" = models/stop_calibration.json).
        lockstep: act once per new frame pair (True) or in real time, at most every action_duration_s (False).
            In real time a rebooted run's checks of its map against the saved house map run in a worker thread
            (`LearnedAgentOptions.map_checks_in_background`), so no decision waits for one.
        action_duration_s: time one discrete action takes on /cmd_vel, seconds.
        forward_step_m: MOVE_FORWARD distance, meters.
        turn_angle_deg: TURN_LEFT / TURN_RIGHT angle, degrees.
        sync_tolerance_s: colour and depth frames closer than this in stamp form a pair in real time, seconds,
            and so do a goal photo and its goal depth (lock-step pairs colour, depth and odometry, and a goal photo
            and its depth, of exactly the same stamp).
        goal_depth_wait_s: wait this long for /memnav/goal_depth of a new goal before acting on its RGB
            alone (a goal photo from a user has no depth), seconds.
        lifelong_dir: keep the long-term memory in a database under this folder across episodes and runs
            ("" = a fresh memory for every goal, as in evaluation).
        memory_key: name of this environment's database in lifelong_dir (e.g. the building).
        odometry_persists: /odom keeps one frame across runs (the simulator bridge; a robot whose odometry is
            localised in a fixed map). False (the default: wheel odometry restarts at boot): a stored memory
            relocalises from agreeing loop closures before its places guide the search, and the occupancy map
            saved in the memory's frame is laid on this run's map only then, fitted by correlating walls (a
            saved map that contradicts every fit near the memory's pose retracts the relocalisation; one
            candidate's pose that the saved map fits well localises the memory without waiting for a second);
            this run's map then extends the saved one where it had no evidence.
        odometry_restarts: every new goal photo comes with odometry restarted where the robot stands (the sim
            bridge with sim.odometry_origin "start", which sim.launch.yaml passes on; a robot rebooted between
            goals): with lifelong_dir the house's memory is reopened for each goal and relocalises from loop
            closures, and the saved map is laid once it has, as after a boot (`memnav eval --lifelong
            --odometry-restarts`); odometry_persists is then taken as false. Without lifelong_dir every goal
            starts a fresh memory anyway, and this changes nothing.
        explore: memnav agents explore frontiers of their own occupancy map, check scan-matched goal
            candidates and drive to an RGB-D-localized goal (false: the learned policy searches alone).
        collision_fraction: a MOVE_FORWARD after which odometry moved less than this fraction of
            forward_step_m counts as blocked (0.9 in lock-step, where a step is exact; in real time velocity
            and acceleration limits make every step fall a little short: use about 0.4).
        max_steps: the episode's step limit in actions (the sim bridge's sim.max_episode_steps; 0 = none): an
            exploring agent stops searching and heads for its best view 50 actions before it
            (memnav.eval.exploring_defaults.EXPLORING_BEST_VIEW_RESERVE). In real time (lockstep false, a robot)
            the goal's max_steps-th action is a STOP (policy state mode "budget") if no STOP came before: nothing
            else would end a search that finds nothing. In lock-step the bridge ends the episode at its limit.
        torch_threads: CPU threads of this process's torch and numpy BLAS (0 = their defaults, one per core; at
            most memnav.threads.MAX_INFERENCE_THREADS). 1 by default: several nodes on few cores each spinning a
            thread per core were measured 50x slower.
        candidate_prior: exploring agents visit first the scan-matched candidate the long-term memory saw as
            most like the goal photo (`memnav eval --candidate-prior`; off, as measured in README).
        explore_homing: exploring agents also home over the scene graph to a remembered place that matches the
            goal photo (`memnav eval --explore-homing`; off, as measured in README).
        homing_via_map: exploring agents reach a remembered matching place over the occupancy map
            (`memnav eval --homing-via-map`; off, as measured in README).
        candidate_near_m: exploring agents judge a scan-matched goal candidate this close (straight line,
            meters) already at a moderate fit (`memnav eval --candidate-near-m`; 0 = off).
        colour_weight: exploring agents take scan-matched goal candidates in the order of scan score + this x
            colour fit against the occupancy map's surface colours (`memnav eval --colour-weight`; 0 = off).
        candidate_min_colour: exploring agents skip candidates whose colour fit is below this
            (`memnav eval --candidate-min-colour`; 0 = off).
        candidate_colour_fit: while exploring, exploring agents judge a candidate with at least this colour fit
            already at a moderate scan score (`memnav eval --candidate-colour-fit`; 0 = off).
        corroborated_similarity: exploring agents accept a look-around at this similarity to the goal photo when
            an RGB-D goal estimate lies within 0.5 m (`memnav eval --corroborated-similarity`; 0 = off).
        known_corroborated_similarity: the same bar in a known house, from a goal on after the first when the
            occupancy map is kept (`lifelong_dir`; `memnav eval --known-corroborated-similarity`; 0 = the
            corroborated_similarity there too).
        agreeing_similarity: exploring agents accept a look-around at this similarity to the goal photo when an
            RGB-D goal estimate and a pending scan-matched goal candidate both lie within 0.5 m
            (`memnav eval --agreeing-similarity`; 0 = off).
        sweep_prior_weight: exploring agents in a known house sweep first the positions near remembered places
            that look like the goal photo (`memnav eval --sweep-prior-weight`, meters per unit of similarity;
            0 = nearest first).
        frontier_look_turns: exploring agents turn this many times on the spot at each frontier they reach
            (`memnav eval --frontier-look-turns`; 11 = a full look around, 0 = off).
        map_range_m: exploring agents put depth readings up to this range into the occupancy map, meters
            (`memnav eval --map-range-m`; lower it for a depth sensor whose far readings are noisy).
        frontier_colour_weight: exploring agents choose frontiers near mapped surfaces in the goal photo's colours
            sooner, this many meters per unit of colour likeness (`memnav eval --frontier-colour-weight`; 0 =
            nearest frontier first).
        keep_unseen_obstacles: exploring agents do not let free space marked below the camera's view (near the
            robot, where the camera's lowest pixel is still above obstacle height: 3 m ahead for a 69 deg 16:9
            camera at 1.25 m) clear obstacles the camera saw there, so a low table mapped from afar stays on the
            map as the robot nears it (`memnav eval --keep-unseen-obstacles`; config/robot.yaml: true).
        map_pixel_spacing_deg: exploring agents integrate a depth frame's pixels at least this far apart into the
            occupancy map, degrees (`memnav eval --map-pixel-spacing-deg`; 0 = every 2nd pixel): 0.7 saves about
            7 ms a decision on 640 x 360 frames, for a computer short of CPU.
        min_action_subscribers: hold the actions of a new goal until /memnav/action has at least this many
            matched subscribers (the robot bridge, plus e.g. a bag recorder or a monitor started alongside:
            volatile actions published before a subscriber is matched never reach it; 0 = do not wait).
        min_state_subscribers: the same for /memnav/policy_state.
        subscriber_wait_s: wait at most this long after a goal arrives for those subscribers, then act anyway
            (with a warning), seconds.
        map_period_s: exploring agents publish their occupancy map on /memnav/map at most this often (and at
            each STOP), and their plan and search markers at every decision, seconds (0 = publish none of them).
        odom_frame: frame_id of those messages ("" = the frame_id of the /odom messages, "odom" before one
            arrives); the agent's map is drawn in the odometry frame.
        camera_hfov_deg: the colour camera's horizontal field of view, degrees, which depth is mapped with (the
            depth is registered to the colour image): 90 is the simulator's camera; 0 = from the first
            /camera/color/camera_info (2 atan(width / 2 fx)), and no goal is started and no decision taken before
            one has arrived (the robot profile: a RealSense D435's colour camera is well under 90 deg).
        camera_height_m: the camera's height above the floor, meters (1.25: the simulator's); the map tells floor
            from obstacles by it.
        camera_forward_m: how far ahead of the robot's turning axis (odometry's origin, base_link) the camera is
            mounted, meters (0: on it, as the simulator's; measure yours). Depth is mapped, and goal photos are
            matched and placed, from the camera's pose; plans, look-arounds and memories stay the robot's
            (`NavigatorConfig.camera_forward_m`). Left at 0 for a camera 0.3 m ahead, walls seen while turning land
            on the floor out in the room.
        camera_pitch_deg: how far the camera looks down from level, degrees (negative: up; 0: level, as the
            simulator's; measure yours): depth is turned level before it is mapped, scanned for the goal and
            lifted for RGB-D goal localization. Left at 0 for a camera looking 10 deg down, the floor 3 m ahead
            comes out 0.5 m high: an obstacle.
        goal_state_file: keep the goal being worked on in this file ("~" expands; "" = not kept; in a namespace, in
            a folder of its name beside the path, one file per robot): a policy node that restarts while working on a
            goal (a crash and `respawn: true`, a reboot) resumes it. Its search starts over from where the robot stands
            (with lifelong_dir, from what the memory holds), and its action budget (max_steps) counts on from the
            actions taken before. Written when a goal starts and every KEEP_EVERY_ACTIONS actions; each action is
            recorded beside it (`<file>.actions`, one line written in place, not synced: microseconds) before it goes
            out, so the restarted node counts the actions taken exactly (the one in flight included): a node killed
            while idle loses none of the budget. Only without a usable record (a reboot since, as a power cut may have
            lost it; a failed write) does it count the KEEP_EVERY_ACTIONS actions after the last write as taken, at most
            max_steps - 1, so the goal keeps to its budget and at worst stops that many actions early. A goal's ending
            (its STOP, cancel, episode result, given up) is recorded before it goes out, and the files removed after: a
            node killed in between does not act on the ended goal again, it publishes its status again
            (memnav.core.goal_state). A write that fails removes the older copy, whose count would be behind.
        max_goal_resumes: resume a kept goal at most this many times: a goal at which the node dies each time is
            then given up (goal status "abandoned") instead of restarting it forever.
        odometry_jump_m: two consecutive /odom poses farther apart than this are a jump, not motion (a base driver
            restarted at zero, a localiser's correction): the node relocalises as ~/relocalise does (the memory
            from agreeing loop closures, the occupancy map dropped, a goal's search started over from where the
            robot stands), and decides on no frame taken before the jump; meters, 0 = off (the robot profile: 0.5,
            ten times a 10 Hz odometry's step at the safety node's 0.5 m/s).
        odometry_jump_deg: ... or turned by more than this between them, degrees (0 = off; the robot profile: 45).
        odometry_timeout_s: real time: while no /odom message has arrived for this long, frames without odometry
            of their instant are not decided on (the robot stands, logged) instead of on the last pose heard,
            where the robot no longer is; seconds, 0 = off (lock-step waits for each frame's odometry anyway).
        mount_check_s: every this many seconds until a depth image shows enough floor, fit the floor
            (`sensor_check.fit_floor`, as `memnav check` does) and compare the camera's height and pitch it gives
            with camera_height_m and camera_pitch_deg: a difference is logged and reported on /diagnostics (WARN,
            naming the values to set); 0 = never.
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
    goal_depth_wait_s: float = 0.5
    lifelong_dir: str = ""
    memory_key: str = "default"
    odometry_persists: bool = False
    odometry_restarts: bool = False
    torch_threads: int = 1
    explore: bool = True
    collision_fraction: float = 0.9
    max_steps: int = 500
    min_action_subscribers: int = 0
    min_state_subscribers: int = 0
    subscriber_wait_s: float = 30.0
    map_period_s: float = 1.0
    odom_frame: str = ""
    camera_hfov_deg: float = 90.0
    camera_height_m: float = 1.25
    camera_forward_m: float = 0.0
    camera_pitch_deg: float = 0.0
    goal_state_file: str = ""
    max_goal_resumes: int = 3
    odometry_jump_m: float = 0.0
    odometry_jump_deg: float = 0.0
    odometry_timeout_s: float = 1.0
    mount_check_s: float = 5.0

    def __post_init__(self) -> None:
        check_robot_camera("PolicyNodeConfig", self.camera_hfov_deg, self.camera_height_m, self.camera_pitch_deg)
        check_camera_forward("PolicyNodeConfig.camera_forward_m", self.camera_forward_m)
        if not (math.isfinite(self.mount_check_s) and 0 <= self.mount_check_s <= MAX_WAIT_S):
            raise ValueError(f"PolicyNodeConfig.mount_check_s must be a number of seconds >= 0 (0 = never) and at most "
                             f"{MAX_WAIT_S:g}, got {self.mount_check_s!r}")
        if not 0.0 < self.collision_fraction <= 1.0:
            raise ValueError(f"PolicyNodeConfig.collision_fraction must be in (0, 1], got {self.collision_fraction!r}")
        # one message per field: a negative step would drive MOVE_FORWARD backwards, a negative turn swap left and
        # right, NaN or inf durations stall every action
        for name, low, strict in (("action_duration_s", 0.0, True), ("forward_step_m", 0.0, True),
                                  ("turn_angle_deg", 0.0, True), ("sync_tolerance_s", 0.0, False),
                                  ("goal_depth_wait_s", 0.0, False), ("subscriber_wait_s", 0.0, False),
                                  ("odometry_jump_m", 0.0, False), ("odometry_jump_deg", 0.0, False),
                                  ("odometry_timeout_s", 0.0, False)):
            value = getattr(self, name)
            # durations also within int64 nanoseconds (the decision gate counts the sync tolerance in them)
            most = MAX_WAIT_S if name.endswith("_s") else math.inf
            if not (isinstance(value, (int, float)) and math.isfinite(value)
                    and (value > low if strict else value >= low) and value <= most):
                raise ValueError(f"PolicyNodeConfig.{name} must be a finite number {'>' if strict else '>='} "
                                 f"{low:g}" + (f" and at most {most:g}" if most < math.inf else "")
                                 + f", got {value!r}")
        if self.turn_angle_deg >= 180.0:
            raise ValueError(f"PolicyNodeConfig.turn_angle_deg must be below 180, got {self.turn_angle_deg!r}")
        for name in ("max_steps", "torch_threads", "min_action_subscribers", "min_state_subscribers",
                     "max_goal_resumes"):
            if getattr(self, name) < 0:
                raise ValueError(f"PolicyNodeConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.torch_threads > MAX_INFERENCE_THREADS:
            raise ValueError(f"PolicyNodeConfig.torch_threads must be at most {MAX_INFERENCE_THREADS}, got "
                             f"{self.torch_threads!r}")
        if self.lifelong_dir and not self.memory_key:
            raise ValueError("PolicyNodeConfig.memory_key must name the environment's memory when lifelong_dir is set "
                             "(sim.launch.yaml: pass scene:=house_NNN)")
        if self.lifelong_dir and Path(self.lifelong_dir).exists() and not Path(self.lifelong_dir).is_dir():
            raise ValueError(f"PolicyNodeConfig.lifelong_dir {self.lifelong_dir!r} is a file, not a folder for the "
                             "memories")
        if not (math.isfinite(self.map_period_s) and 0 <= self.map_period_s <= MAX_WAIT_S):
            raise ValueError(f"PolicyNodeConfig.map_period_s must be a number of seconds >= 0 (0 = off) and at most "
                             f"{MAX_WAIT_S:g}, got {self.map_period_s!r}")


def main(argv: list[str] | None = None) -> int:
    from memnav.ros.stack_node import run_nodes

    return run_nodes([("policy_node", build)], argv)


def build(node) -> Callable[[], None]:
    """Declare this node's parameters on `node` (an rclpy Node named policy_node) and create its publishers,
    subscriptions and timer; nothing spins here. Returns the clean-up (closes the agent's memory)."""
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import OccupancyGrid, Odometry
    from nav_msgs.msg import Path as PathMsg
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo, Image
    from std_msgs.msg import String
    from std_srvs.srv import Trigger
    from visualization_msgs.msg import MarkerArray

    from memnav.core.diagnostics import PolicyHealth, policy_diagnostic
    from memnav.core.goal_state import (
        KeptGoal,
        counted_actions,
        drop_kept_goal,
        mark_ended,
        read_kept_goal,
        record_actions,
        resume_or_give_up,
        set_aside,
        write_kept_goal,
    )
    from memnav.core.memory import MemoryStoreError
    from memnav.core.sensor_check import Level, check_camera_mount, fit_floor
    from memnav.core.stop import loaded_encoder_mismatch
    from memnav.eval.learned_agents import MODELS, LearnedAgent, LearnedAgentOptions
    from memnav.paths import resolve_model_path
    from memnav.ros import conversions as conv
    from memnav.ros import diagnostics_msgs, search_msgs
    from memnav.ros.embedding_msgs import stamp_to_ns
    from memnav.ros.params import declare_dataclass

    cfg = declare_dataclass(node, PolicyNodeConfig)
    if cfg.torch_threads > 0:
        from memnav.threads import set_inference_threads

        set_inference_threads(cfg.torch_threads)
    # relative model paths resolve as encoder_node's and stop_node's do: package root, models/, working directory
    opts = LearnedAgentOptions(policy_dir=resolve_model_path(cfg.policy_dir, "policy_dir", folder=True)
                               if cfg.policy_dir else MODELS,
                               encoder_checkpoint=resolve_model_path(cfg.encoder_checkpoint, "encoder_checkpoint")
                               if cfg.encoder_checkpoint else MODELS / "encoder.pt",
                               calibration=resolve_model_path(cfg.calibration, "calibration")
                               if cfg.calibration else MODELS / "stop_calibration.json",
                               lifelong_dir=Path(cfg.lifelong_dir) if cfg.lifelong_dir else None,
                               odometry_persists=cfg.odometry_persists,
                               odometry_restarts=cfg.odometry_restarts,
                               explore=cfg.explore, collision_fraction=cfg.collision_fraction,
                               max_steps=cfg.max_steps, map_checks_in_background=not cfg.lockstep,
                               **ExploringTuning.values_of(cfg))
    agent = LearnedAgent(cfg.agent, opts)
    nav = agent.navigator
    # the stop belief is calibrated on one encoder's similarities: say so when this node runs another
    calibration_note = loaded_encoder_mismatch(opts.calibration, opts.encoder_checkpoint,
                                               runner="this node's encoder_checkpoint is",
                                               give_to="set it as this node's calibration")
    if calibration_note is not None:
        log = node.get_logger().warning if calibration_note[0] else node.get_logger().info
        log(calibration_note[1])

    def check_camera(hfov: float, image_px: tuple[int, int] | None = None) -> None:
        """Warn when the camera is narrower than the fields of view the encoder was trained on, or (its image size
        known) of another shape than a non-square-trained encoder's."""
        mismatch = st["mismatch"] = agent.encoder.camera_mismatch(hfov, image_px)
        if mismatch is not None:
            node.get_logger().warning(f"{mismatch} ({opts.encoder_checkpoint}; README \"A camera narrower than the "
                                      f"simulator's\")")

    st = {"dropped": 0, "waited_goal": None, "odom_frame": cfg.odom_frame or "odom", "map_wall": -math.inf,
          "actions": 0, "hfov": cfg.camera_hfov_deg or None, "goal_held": False, "started_s": time.monotonic(),
          "mismatch": None, "goal": None, "heard": dict.fromkeys(("color", "depth", "odom")),
          "memory_error": None, "resumes": 0, "resume": None, "started_utc": "", "kept_actions": 0,
          "goal_file_error": None, "odometry_jumps": 0, "mount": None, "mount_tried": -math.inf}
    # the goal kept across restarts of this node; one file per namespace, as the safety node's e-stop state
    goal_file = state_path_in_namespace(cfg.goal_state_file, node.get_namespace())
    nav.set_camera(cfg.camera_hfov_deg if cfg.camera_hfov_deg > 0 else nav.cfg.hfov_deg, cfg.camera_height_m,
                   cfg.camera_forward_m, cfg.camera_pitch_deg)
    if cfg.camera_hfov_deg > 0:
        check_camera(cfg.camera_hfov_deg)
    latched = latched_qos()
    pub_action = node.create_publisher(String, "memnav/action", 10)
    pub_cmd = node.create_publisher(Twist, "cmd_vel", 10)
    pub_state = node.create_publisher(String, "memnav/policy_state", 10)
    pub_status = node.create_publisher(String, "memnav/goal_status", events_qos())   # back-to-back statuses
    show_search = nav.cfg.explore and cfg.map_period_s > 0
    if show_search:
        pub_map = node.create_publisher(OccupancyGrid, "memnav/map", latched)
        pub_plan = node.create_publisher(PathMsg, "memnav/plan", 10)
        pub_markers = node.create_publisher(MarkerArray, "memnav/search_markers", 10)
    gate = DecisionGate(lockstep=cfg.lockstep, sync_tolerance_s=cfg.sync_tolerance_s,
                        odometry_jump_m=cfg.odometry_jump_m, odometry_jump_deg=cfg.odometry_jump_deg,
                        odometry_timeout_s=cfg.odometry_timeout_s,
                        action_duration_s=cfg.action_duration_s, goal_depth_wait_s=cfg.goal_depth_wait_s)

    def drop(what: str, err: Exception) -> None:
        st["dropped"] += 1
        node.get_logger().warning(f"dropped {what} ({st['dropped']} so far): {err}", throttle_duration_sec=2.0)

    def now_s() -> float:
        return node.get_clock().now().nanoseconds / 1e9

    def goal_status(status: GoalStatus, goal_stamp_ns: int | None, mode: str | None = None,
                    replaced_by: int | None = None, marked: bool = False) -> None:
        """Say what became of the goal stamped `goal_stamp_ns` (see the module's docstring). An ending is recorded
        in goal_state_file before it goes out (`marked`: already, before its STOP), and the kept goal removed after;
        not for a goal `replaced_by` another, whose kept copy the new goal's has replaced already."""
        if goal_stamp_ns is None:
            return
        ending = status != GoalStatus.ACTIVE and replaced_by is None
        if ending and not marked:
            mark_end(status, goal_stamp_ns)
        st["goal"] = {"goal_stamp_ns": goal_stamp_ns, "status": status, "actions": st["actions"], "mode": mode,
                      "resumed": st["resumes"]}
        if replaced_by is not None:
            st["goal"]["replaced_by"] = replaced_by
        pub_status.publish(String(data=json.dumps(st["goal"])))
        if ending:
            forget_goal()

    def mark_end(status: GoalStatus, goal_stamp_ns: int) -> None:
        """Before a goal's ending goes out (its STOP, its status): recorded in goal_state_file, so that a node killed
        before the kept goal is removed does not resume it (memnav.core.goal_state.mark_ended)."""
        if goal_file:
            try:
                mark_ended(goal_file, goal_stamp_ns, st["actions"], status.value)
            except (OSError, ValueError) as err:
                node.get_logger().error(f"{err}: a restarted node would resume the ended goal")

    def record_action(goal_stamp_ns: int | None) -> None:
        """Before an action goes out: the goal's action count, that action included, recorded beside the kept goal
        (microseconds), so that a restarted node counts the actions taken exactly (memnav.core.goal_state)."""
        if not goal_file or goal_stamp_ns is None or st["goal_file_error"] is not None:
            return   # no kept goal of this count to record for (a failed write): its next write records again
        try:
            record_actions(goal_file, int(goal_stamp_ns), st["actions"])
        except (OSError, ValueError) as err:
            node.get_logger().error(str(err))
            st["goal_file_error"] = str(err)

    def keep_goal() -> None:
        """Keep the goal being worked on in goal_state_file (a restarted node resumes it); a failed write is
        logged once and reported on /diagnostics, and the goal goes on."""
        photo = gate.goal_photo
        if not goal_file or photo is None:
            return
        try:   # up to KEEP_EVERY_ACTIONS more are taken before the next write: a resume without a record of them
            # counts them all as taken
            write_kept_goal(goal_file, KeptGoal(int(gate.goal_stamp_ns), photo[0], photo[1], st["actions"],
                                                st["resumes"], st["started_utc"], KEEP_EVERY_ACTIONS))
        except (OSError, ValueError) as err:
            # the copy kept before counts fewer actions than are taken from now on: a restart would overspend the
            # budget with it, so it goes (a later write that succeeds keeps the goal again)
            try:
                drop_kept_goal(goal_file)
                lost = "would lose it"
            except OSError:
                lost = "would resume it with an older, too low action count (it could not be removed either)"
            if st["goal_file_error"] is None:
                node.get_logger().error(f"could not keep the goal in {goal_file}: {err}; a restart of this node "
                                        + lost)
            st["goal_file_error"] = str(err)
            return
        st["kept_actions"], st["goal_file_error"] = st["actions"], None
        record_action(gate.goal_stamp_ns)   # the record says the kept count: exact again

    def forget_goal() -> None:
        """The goal ended: nothing for a restarted node to resume."""
        if not goal_file:
            return
        try:
            drop_kept_goal(goal_file)
        except OSError as err:
            node.get_logger().error(f"could not remove the ended goal from {goal_file}: {err}; a restarted node "
                                    "would resume it")

    def begin(depth_followed: bool = False) -> None:
        """Start the newest goal; `depth_followed`: it started without depth and its depth came before any
        decision, so the same episode goes on with an RGB-D goal (no new visit: the memory stays as it is)."""
        t_goal, rgb, depth = gate.goal_to_start()
        previous = gate.goal_stamp_ns
        try:
            if depth_followed:
                agent.set_goal(rgb, depth)
            else:
                agent.begin(cfg.memory_key, rgb, depth)
        except ValueError as err:
            drop("goal depth" if depth_followed else "goal image", err)
            return
        replaced = not depth_followed and previous is not None and previous != t_goal
        if replaced:
            node.get_logger().info(f"goal {previous} given up after {st['actions']} actions: a new goal replaces it")
            done = (st["actions"], st["resumes"])
        gate.goal_started(t_goal, rgb, depth, time.monotonic())
        resume = st["resume"]
        if resume is not None and resume.goal_stamp_ns == t_goal:   # the goal kept before this node restarted
            st["actions"], st["resumes"], st["started_utc"] = resume.actions, resume.resumes, resume.started_utc
        elif not depth_followed:
            st["actions"], st["resumes"], st["resume"] = 0, 0, None
            st["started_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        keep_goal()   # replaces the goal kept before, in one step: a kill leaves one of them, never neither
        if replaced:
            # the replaced goal's end goes out after the new goal is kept: a node killed before does not resume it
            # (a client waiting on it, `memnav goal send --wait`, hears it)
            now = st["actions"], st["resumes"]
            st["actions"], st["resumes"] = done
            goal_status(GoalStatus.CANCELLED, previous, replaced_by=t_goal)
            st["actions"], st["resumes"] = now
        goal_status(GoalStatus.ACTIVE, t_goal)
        if depth_followed:
            node.get_logger().info("goal depth arrived before any decision: the episode goes on with an RGB-D goal")
        else:
            node.get_logger().info(("resumed goal" if st["resumes"] else "new goal image")
                                   + f" ({'RGB-D' if depth is not None else 'RGB'}): episode started" + memory_note())
        maybe_act()

    def memory_note() -> str:
        """Where a lifelong memory stands at a goal's start: how much it holds and whether it is localised."""
        memory = nav.memory
        if not cfg.lifelong_dir or memory is None:
            return ""
        places = memory.sizes()[0]
        where = "localised" if memory.localised or not places else "relocalising"
        return f"; memory {cfg.memory_key}: {places} places, {where}"

    def convert(what: str, convert_msg, msg):
        try:
            return stamp_to_ns(msg.header.stamp), convert_msg(msg)
        except conv.MessageError as err:
            drop(what, err)
            return None

    def on_goal(msg: Image) -> None:
        got = convert("goal image", conv.image_to_rgb, msg)
        if got is not None:
            if got[0] == gate.goal_stamp_ns:   # e.g. `memnav goal send --wait` still latching a goal resumed here
                node.get_logger().info(f"goal {got[0]} is already being worked on: the same photo again is ignored")
                return
            if gate.ended(got[0]):   # a repeating publisher, a latched photo delivered again: the robot stays put
                node.get_logger().info(f"goal {got[0]} has ended: the same photo again is ignored (a goal sent anew, "
                                       "with a new stamp, starts)", throttle_duration_sec=5.0)
                return
            gate.goal_image(*got)
            if st["hfov"] is None:   # the goal's scan needs the camera: start it once camera_info has come
                st["goal_held"] = True
                node.get_logger().warning(f"goal held until the camera's field of view is known: no camera_info on "
                                          f"{sub_info.topic_name} yet (or set camera_hfov_deg)")
                return
            begin()

    def on_goal_depth(msg: Image) -> None:
        got = convert("goal depth", conv.image_to_depth, msg)
        if got is not None and gate.goal_depth(*got) and st["hfov"] is not None:
            begin(depth_followed=True)   # the depth of the current goal arrived after its image, before any action

    def on_camera_info(msg: CameraInfo) -> None:
        """The colour camera's horizontal field of view, from its intrinsics (camera_hfov_deg 0)."""
        fx, width = float(msg.k[0]), int(msg.width)
        hfov = camera_hfov_deg(width, fx)
        if hfov is None:
            drop("camera_info", ValueError(f"no focal length or width (K[0] {fx!r}, width {width})"))
            return
        if st["hfov"] is not None and abs(hfov - st["hfov"]) < 0.1:
            return
        try:
            nav.set_camera(hfov, cfg.camera_height_m)
        except ValueError as err:
            drop("camera_info", err)
            return
        node.get_logger().info(f"camera: {hfov:.1f} deg horizontal field of view ({width} px wide, fx {fx:.1f} px "
                               f"on {sub_info.topic_name}), {cfg.camera_height_m:g} m above the floor, "
                               f"{cfg.camera_forward_m:g} m ahead of the turning axis, "
                               f"{cfg.camera_pitch_deg:g} deg down"
                               + ("" if st["hfov"] is None else f"; was {st['hfov']:.1f} deg"))
        st["hfov"] = hfov
        check_camera(hfov, (width, int(msg.height)))
        if st["goal_held"]:
            st["goal_held"] = False
            begin()

    def on_result(msg: String) -> None:
        try:
            ended = int(json.loads(msg.data).get("goal_stamp_ns", -1))
        except (ValueError, TypeError, AttributeError, OverflowError) as err:   # OverflowError: int(1e400)
            drop("episode result", err)
            return
        if ended == gate.goal_stamp_ns:
            goal_status(GoalStatus.ENDED, ended)
        gate.episode_ended(ended)

    def on_rgb(msg: Image) -> None:
        got = convert("colour image", conv.image_to_rgb, msg)
        if got is not None:
            st["heard"]["color"] = time.monotonic()
            st["color_frame"] = msg.header.frame_id
            gate.colour(*got)
            maybe_act()

    def on_depth(msg: Image) -> None:
        colour_frame = st.get("color_frame", "")
        if not same_camera_frame(colour_frame, msg.header.frame_id):
            # unregistered depth (or another camera's): its pixels are not the colour image's; as the encoder node
            node.get_logger().warning(
                f"depth image in frame_id {msg.header.frame_id!r} on {sub_depth.topic_name}, colour in "
                f"{colour_frame!r}: not used; the depth must be registered to the colour image, in its frame (a "
                "RealSense's aligned_depth_to_color)", throttle_duration_sec=5.0)
            return
        got = convert("depth image", conv.image_to_depth, msg)
        if got is not None:
            st["heard"]["depth"] = time.monotonic()
            gate.depth(*got)
            maybe_act()
            check_mount(got[-1])

    def check_mount(depth) -> None:
        """Now and then until a depth image shows enough floor: the camera's height and pitch as the floor shows
        them, against camera_height_m and camera_pitch_deg (memnav check's finding), logged once; a difference
        stays on /diagnostics."""
        now = time.monotonic()
        if (not cfg.mount_check_s or st["mount"] is not None or st["hfov"] is None
                or now - st["mount_tried"] < cfg.mount_check_s):
            return
        st["mount_tried"] = now
        fit = fit_floor(depth, st["hfov"])
        if fit is None:
            return
        st["mount"] = check_camera_mount(sub_depth.topic_name, fit, cfg.camera_height_m, cfg.camera_pitch_deg)
        (node.get_logger().warning if st["mount"].level is Level.WARN else node.get_logger().info)(
            f"camera mount: {st['mount'].text}")

    def on_odom(msg: Odometry) -> None:
        got = convert("odometry", conv.odometry_to_pose, msg)
        if got is None:
            return
        st["heard"]["odom"] = time.monotonic()
        if not cfg.odom_frame and msg.header.frame_id:
            st["odom_frame"] = msg.header.frame_id
        jump = gate.odometry(*got, wall_s=st["heard"]["odom"])
        if jump is not None:
            st["odometry_jumps"] += 1
            goal = gate.goal_photo
            agent.relocalise(*(goal or (None, None)))
            node.get_logger().warning(f"{jump} (a restarted base driver? a localiser's correction?): relocalising, "
                                      "as ~/relocalise does" + ("; the goal's search starts over from here"
                                                                if goal is not None else ""))
        maybe_act()

    def maybe_act() -> None:
        if not cfg.lockstep and clock_missing():
            return
        if st["hfov"] is None:
            if time.monotonic() - st["started_s"] > 5.0:
                node.get_logger().warning(f"no camera_info on {sub_info.topic_name}: the camera's field of view is "
                                          "unknown, so nothing is mapped or decided (remap the camera's camera_info "
                                          "there, or set camera_hfov_deg)", throttle_duration_sec=5.0)
            return
        wall = time.monotonic()
        frame = gate.due(now_s(), wall)
        silent = gate.odometry_silent_s(wall) if frame is None and gate.goal_stamp_ns is not None else None
        if silent is not None:
            node.get_logger().warning(f"no odometry on {sub_odom.topic_name} for {silent:.1f} s "
                                      f"(odometry_timeout_s {cfg.odometry_timeout_s:g}): standing still until it "
                                      "is back", throttle_duration_sec=5.0)
        behind = gate.frames_behind_goal_s(wall) if frame is None else None
        if behind is not None:
            node.get_logger().warning(f"the goal photo is stamped {behind:.2f} s after the newest camera frame on "
                                      f"{sub_rgb.topic_name}: no decision until frames of its time come (stamp goal "
                                      "photos by the camera's clock: memnav goal send --stamp-topic, or synchronise "
                                      "the clocks)", throttle_duration_sec=5.0)
        if frame is None or not subscribers_ready():
            return  # lock-step: the bridge re-sends this frame; real time: the timer asks again
        missed_depth = gate.taking(frame.stamp_ns)
        if missed_depth is not None:
            node.get_logger().warning(missed_depth)
        # lock-step: memory time advances one second per action, exactly as in the in-process evaluation
        try:
            action, inp, goal_p = agent.step(frame.rgb, frame.depth, frame.pose,
                                             None if cfg.lockstep else frame.stamp_ns)
        except (ValueError, MemoryStoreError) as err:   # e.g. colour and depth of one stamp, different sizes
            drop("frame", err)
            return
        st["actions"] += 1
        mode = nav.mode
        if over_budget(st["actions"]) and action != Action.STOP:
            action, mode = Action.STOP, "budget"
            node.get_logger().warning(f"the goal's action budget (max_steps {cfg.max_steps}) is spent: STOP here "
                                      f"(belief {inp.belief:.2f})")
        ending = (GoalStatus.BUDGET if mode == "budget" else GoalStatus.STOPPED) if action == Action.STOP else None
        if ending is not None:   # the ending recorded before the STOP goes out: a killed node does not act again
            mark_end(ending, gate.goal_stamp_ns)
        else:
            record_action(gate.goal_stamp_ns)
        pub_action.publish(String(data=action.name))
        gate.hold(action_velocity(action, cfg.forward_step_m, cfg.turn_angle_deg, cfg.action_duration_s), now_s())
        publish_cmd()
        body = {"stamp_ns": frame.stamp_ns, "action": action.name, "belief": inp.belief,
                "similarity": inp.similarity, "verification": inp.verification, "stop_reason": inp.stop.reason.name,
                "goal_probability": goal_p, "places": nav.memory.sizes()[0] if nav.memory is not None else 0,
                "mode": mode, "localised": nav.memory.localised if nav.memory is not None else None,
                "house_map": agent.house_map}
        pub_state.publish(String(data=json.dumps(body)))
        if show_search:
            publish_search(final=action == Action.STOP)
        if ending is not None:
            goal_status(ending, gate.goal_stamp_ns, mode, marked=True)
            gate.goal_over()
        elif goal_file and st["actions"] - st["kept_actions"] >= KEEP_EVERY_ACTIONS:
            keep_goal()

    def clock_missing() -> bool:
        """Real time under use_sim_time before the first /clock: the node's time stands at 0, and an action taken
        then would be held (driven on /cmd_vel) until that time passes action_duration_s, that is for ever."""
        if not sim_clock_missing(node):
            return False
        node.get_logger().warning("use_sim_time is set but no /clock has arrived: nothing is decided until it does "
                                  "(start the simulator or bag player that publishes /clock, or set use_sim_time "
                                  "false)", throttle_duration_sec=5.0)
        return True

    def over_budget(actions: int) -> bool:
        """Real time (a robot): the goal's last action allowed by max_steps is a STOP, so the robot does not search
        on forever. In lock-step the simulator bridge ends the episode at its own step limit."""
        return not cfg.lockstep and cfg.max_steps > 0 and actions >= cfg.max_steps

    def publish_search(final: bool) -> None:
        """The plan and markers of this decision; the map when map_period_s has passed, and at an episode's end."""
        view, frame, stamp = nav.search_view(), st["odom_frame"], node.get_clock().now().to_msg()
        pub_plan.publish(search_msgs.plan_path(view, frame, stamp))
        pub_markers.publish(search_msgs.search_markers(view, frame, stamp))
        if final or time.monotonic() - st["map_wall"] >= cfg.map_period_s:
            grid = search_msgs.occupancy_grid(view, frame, stamp)
            if grid is not None:
                pub_map.publish(grid)
                st["map_wall"] = time.monotonic()

    def subscribers_ready() -> bool:
        short = [f"{topic} has {n} of {need}" for topic, n, need in (
            (pub_action.topic_name, pub_action.get_subscription_count(), cfg.min_action_subscribers),
            (pub_state.topic_name, pub_state.get_subscription_count(), cfg.min_state_subscribers)) if n < need]
        if not short:
            return True
        if time.monotonic() - gate.goal_wall_s < cfg.subscriber_wait_s:
            node.get_logger().info(f"waiting for subscribers: {', '.join(short)}", throttle_duration_sec=2.0)
            return False
        if st["waited_goal"] != gate.goal_stamp_ns:
            st["waited_goal"] = gate.goal_stamp_ns
            node.get_logger().warning(f"acting after {cfg.subscriber_wait_s:.0f} s without the subscribers asked for: "
                                      + ", ".join(short))
        return True

    def publish_cmd() -> None:
        v, w = gate.velocity(now_s())
        msg = Twist()
        msg.linear.x, msg.angular.z = float(v), float(w)
        pub_cmd.publish(msg)

    def on_tick() -> None:
        if gate.action_done(now_s()):
            maybe_act()
        publish_cmd()

    sub_rgb = node.create_subscription(Image, "camera/color/image_raw", on_rgb, qos_profile_sensor_data)
    sub_depth = node.create_subscription(Image, "camera/depth/image_raw", on_depth, qos_profile_sensor_data)
    # the camera's field of view from its intrinsics only when not given (camera_hfov_deg 0): a value set wins
    sub_info = node.create_subscription(CameraInfo, "camera/color/camera_info", on_camera_info,
                                        qos_profile_sensor_data) if not cfg.camera_hfov_deg else None
    # best effort: matches reliable and best-effort odometry publishers alike (robot drivers use both)
    sub_odom = node.create_subscription(Odometry, "odom", on_odom,
                                        QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
    node.create_subscription(Image, "memnav/goal_image", on_goal, latched)
    node.create_subscription(Image, "memnav/goal_depth", on_goal_depth, latched)
    node.create_subscription(String, "memnav/episode_result", on_result, latched)

    def srv_relocalise(_req, resp):
        goal = gate.goal_photo
        agent.relocalise(*(goal or (None, None)))
        resp.success = True
        resp.message = json.dumps({"localised": False, "search_restarted": goal is not None})
        node.get_logger().info(f"relocalising: {resp.message}")
        return resp

    def srv_cancel_goal(_req, resp):
        goal = gate.goal_stamp_ns
        if goal is None:
            resp.success, resp.message = False, "no goal is being worked on"
            return resp
        gate.goal_over()
        gate.hold((0.0, 0.0), now_s())   # zero at once, not at the end of the action being carried out
        publish_cmd()
        goal_status(GoalStatus.CANCELLED, goal)
        resp.success = True
        resp.message = json.dumps({"goal_stamp_ns": goal, "actions": st["actions"]})
        node.get_logger().info(f"goal cancelled after {st['actions']} actions: waiting for the next goal")
        return resp

    def health(new: int):
        now = time.monotonic()
        memory = nav.memory
        if st["goal"] is not None and st["goal"]["status"] == GoalStatus.ACTIVE:
            st["goal"]["actions"] = st["actions"]
        h = PolicyHealth(hfov_deg=st["hfov"], waiting_s=now - st["started_s"], camera_mismatch=st["mismatch"],
                         input_age_s={k: None if t is None else now - t for k, t in st["heard"].items()},
                         lockstep=cfg.lockstep, goal=st["goal"], dropped_total=st["dropped"], dropped_new=new,
                         places=memory.sizes()[0] if memory is not None else 0,
                         localised=memory.localised if memory is not None else None,
                         memory_error=agent.storage_error, encoder=str(opts.encoder_checkpoint),
                         goal_state_error=st["goal_file_error"], odometry_jumps=st["odometry_jumps"],
                         mount_warning=st["mount"].text if st["mount"] is not None and st["mount"].level is Level.WARN
                         else None)
        if h.memory_error and st["memory_error"] != h.memory_error:
            st["memory_error"] = h.memory_error
            node.get_logger().error(f"the long-term memory is no longer saved: {h.memory_error}; it goes on in RAM "
                                    "(free the disk, then restart the node to save again)")
        return policy_diagnostic(h)

    def resume_kept_goal() -> None:
        """At start: take up the goal a previous run of this node kept in goal_state_file, unless it was resumed
        max_goal_resumes times already (then it is given up: status "abandoned"), ended (killed after recording its
        ending, before removing it: the ending is published again) or cannot be read (set aside)."""
        kept, why = read_kept_goal(goal_file)
        if kept is None:
            if Path(goal_file).expanduser().exists():
                aside = set_aside(goal_file)
                node.get_logger().error(why + (f"; moved to {aside}" if aside else "; it could not be moved aside"))
            return
        node.get_logger().info(why)
        # the actions recorded (or, without a record, that may have gone unwritten) count as taken, up to the
        # budget's last (over_budget's)
        budget = cfg.max_steps if not cfg.lockstep and cfg.max_steps > 0 else 0
        taken, why = resume_or_give_up(kept, cfg.max_goal_resumes, budget)
        if taken is None:
            # an ended goal's count is its recorded ending's; an abandoned one's as a resume would count it (the
            # actions recorded since the last write, or without a record the worst case)
            st["actions"] = kept.actions if kept.ended else counted_actions(kept, budget)
            st["resumes"] = kept.resumes
            # logged once done (the kept goal removed)
            if kept.ended:   # killed after recording its ending: published (again), not acted on
                status = GoalStatus(kept.ended) if kept.ended in ENDED_STATUSES else GoalStatus.ENDED
                goal_status(status, kept.goal_stamp_ns, "budget" if status == GoalStatus.BUDGET else None,
                            marked=True)
                node.get_logger().warning(why)
            else:
                goal_status(GoalStatus.ABANDONED, kept.goal_stamp_ns)
                node.get_logger().error(why)
            # a latched copy of its photo (a goal publisher still running) is not a new goal: not started from 0
            gate.given_up(kept.goal_stamp_ns)
            return
        node.get_logger().warning(why)
        st["resume"] = taken
        try:   # the resume is counted on disk before the goal starts: a start that kills the node counts too
            write_kept_goal(goal_file, taken)
            record_actions(goal_file, taken.goal_stamp_ns, taken.actions)
        except OSError as err:
            node.get_logger().error(f"could not count the resume in {goal_file}: {err}")
        gate.goal_image(taken.goal_stamp_ns, taken.rgb)
        if taken.depth is not None:
            gate.goal_depth(taken.goal_stamp_ns, taken.depth)
        if st["hfov"] is None:
            st["goal_held"] = True
            node.get_logger().info("the resumed goal starts once camera_info has come")
        else:
            begin()

    diagnostics_msgs.report_every_period(node, health, lambda: st["dropped"])
    node.create_service(Trigger, "~/relocalise", srv_relocalise)
    node.create_service(Trigger, "~/cancel_goal", srv_cancel_goal)
    if not cfg.lockstep:
        node.create_timer(0.05, on_tick)
    if goal_file:
        resume_kept_goal()
    return agent.close


if __name__ == "__main__":
    sys.exit(main())
