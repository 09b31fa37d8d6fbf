"""What the nodes say on ROS's standard /diagnostics topic: one status per node, OK / WARN / ERROR, a message and
key-value pairs, for rqt_robot_monitor, diagnostic_aggregator, Foxglove's diagnostics panel or a fleet monitor.

Pure logic (no ROS): the node shells (every memnav node: policy, safety, memory, encoder, stop, simulator
bridge) gather what they know
(their status bodies, input ages, drop counts) into the dataclasses here and publish what comes out as
diagnostic_msgs/DiagnosticArray once a second.

Levels (diagnostic_msgs/DiagnosticStatus):
    ERROR   the node cannot do its job: the policy node does not know the camera's field of view, its camera or
            odometry went silent while it works on a goal, or its long-term memory can no longer be saved (a full
            disk: it goes on in RAM); the memory node's memory can no longer be saved; the safety node holds the
            robot still because a sensor went silent (its watchdog)
    WARN    it works, with a caveat: an input silent while no goal is worked on, messages dropped since the last
            report, a camera narrower than the encoder was trained on, the goal not kept on disk (goal_state_file),
            the e-stop engaged, no command from the policy
    OK      anything else; the message says what the node is doing
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

__all__ = ["INPUT_SILENT_S", "DiagnosticLevel", "NodeDiagnostic", "PolicyHealth", "bridge_diagnostic",
           "encoder_diagnostic", "memory_diagnostic", "policy_diagnostic", "safety_diagnostic", "stop_diagnostic"]

INPUT_SILENT_S = 2.0   # the policy node reports an input (colour, depth, odometry) silent after this long, seconds


class DiagnosticLevel(IntEnum):
    """diagnostic_msgs/DiagnosticStatus levels (the same numbers)."""

    OK = 0
    WARN = 1
    ERROR = 2
    STALE = 3

    @staticmethod
    def name_of(raw: bytes | int) -> str:
        """The name of a level as a DiagnosticStatus carries it (a one-byte `bytes` in rclpy, or an int); an
        unknown one as `level N`."""
        value = raw[0] if isinstance(raw, (bytes, bytearray)) and len(raw) == 1 else raw
        try:
            return DiagnosticLevel(int(value)).name
        except (ValueError, TypeError):
            return f"level {value!r}"


@dataclass(frozen=True)
class NodeDiagnostic:
    """One node's status: its level, one line saying why, and key-value details (all strings, as on the wire)."""

    level: DiagnosticLevel
    message: str
    values: dict[str, str] = field(default_factory=dict)


def _age(age_s: float | None) -> str:
    return "never" if age_s is None or not math.isfinite(age_s) else f"{age_s:.2f}"


def _report(findings: list[tuple[DiagnosticLevel, str]], doing: str, values: dict[str, str],
            dropped_new: int = 0) -> NodeDiagnostic:
    """The status of a node that is `doing` something, with `findings` (level, text) against it and
    `dropped_new` messages dropped since the last report (a warning): the worst level, the findings' texts worst
    first (`doing` when there are none, else also kept as the value `doing`), and `values`."""
    if dropped_new:
        findings = [*findings, (DiagnosticLevel.WARN, f"{dropped_new} messages dropped since the last report (see "
                                                      "the node's log)")]
    if not findings:
        return NodeDiagnostic(DiagnosticLevel.OK, doing, values)
    findings = sorted(findings, key=lambda f: -f[0])
    return NodeDiagnostic(findings[0][0], "; ".join(text for _, text in findings), {**values, "doing": doing})


@dataclass
class PolicyHealth:
    """What the policy node knows about itself when it reports.

    Attributes:
        hfov_deg: the camera's horizontal field of view in use, degrees (None: not known yet).
        waiting_s: how long the node has been running, seconds (a missing camera_info is an error after 5 s).
        camera_mismatch: Encoder.camera_mismatch's sentence for the camera, or None.
        input_age_s: seconds since the newest colour frame, depth frame and odometry arrived (None: never).
        lockstep: evaluation in lock-step with a simulator, where frames come only when an action was taken:
            silent inputs are not reported then.
        goal: the newest /memnav/goal_status body ({status, actions, mode, ...}) or None (no goal yet).
        dropped_total: messages dropped since the start; dropped_new: since the last report.
        places: places in the long-term memory; localised: whether it knows where the robot is (None: no memory).
        memory_error: why the long-term memory stopped writing to its database and went on in RAM
            (SceneGraphMemory.persist_error), or None.
        encoder: the encoder checkpoint's path, for the record.
        goal_state_error: why the goal could not be kept in goal_state_file (a restart of the node would lose it),
            or None.
        odometry_jumps: odometry jumps seen since the start (each relocalised the agent).
        mount_warning: the camera's height or pitch as the floor in view shows them differ from the ones it maps
            with (`sensor_check.check_camera_mount`'s warning), or None.
    """

    hfov_deg: float | None
    waiting_s: float
    camera_mismatch: str | None
    input_age_s: dict[str, float | None]
    lockstep: bool
    goal: dict | None = None
    dropped_total: int = 0
    dropped_new: int = 0
    places: int = 0
    localised: bool | None = None
    memory_error: str | None = None
    encoder: str = ""
    goal_state_error: str | None = None
    odometry_jumps: int = 0
    mount_warning: str | None = None


def policy_diagnostic(h: PolicyHealth) -> NodeDiagnostic:
    """The policy node's status from `h` (see the module docstring for the levels)."""
    working = h.goal is not None and h.goal.get("status") == "active"
    findings: list[tuple[DiagnosticLevel, str]] = []
    if h.hfov_deg is None and h.waiting_s > 5.0:
        findings.append((DiagnosticLevel.ERROR, "no camera_info: the camera's field of view is unknown, so no goal "
                                                "is started and nothing is decided (remap camera_info or set "
                                                "camera_hfov_deg)"))
    if not h.lockstep:
        silent = [name for name, age in h.input_age_s.items() if age is None or age > INPUT_SILENT_S]
        if silent:
            level = DiagnosticLevel.ERROR if working else DiagnosticLevel.WARN
            findings.append((level, f"no {', '.join(silent)} for over {INPUT_SILENT_S:g} s"
                                    + (": no decisions" if working else "")))
    if h.memory_error:
        findings.append((DiagnosticLevel.ERROR, f"the long-term memory is no longer saved ({h.memory_error}): it goes "
                                                "on in RAM; free the disk and restart the node to save again"))
    if h.camera_mismatch:
        findings.append((DiagnosticLevel.WARN, h.camera_mismatch))
    if h.mount_warning:
        findings.append((DiagnosticLevel.WARN, f"camera mount: {h.mount_warning}"))
    if h.goal_state_error:
        findings.append((DiagnosticLevel.WARN, f"the goal is not kept on disk ({h.goal_state_error}): a restart of "
                                               "this node would lose it"))
    if h.goal is None:
        doing = "waiting for a goal"
    elif working:
        doing = f"working on a goal: {h.goal.get('actions', 0)} actions" + (
            f" (resumed after {h.goal['resumed']} restart{'s' if h.goal['resumed'] > 1 else ''} of this node)"
            if h.goal.get("resumed") else "")
    else:
        doing = f"waiting for a goal (the last one: {h.goal.get('status')} after {h.goal.get('actions', 0)} actions)"
    values = {"goal": "none" if h.goal is None else str(h.goal.get("status")),
              "actions": str(0 if h.goal is None else h.goal.get("actions", 0)),
              "mode": str((h.goal or {}).get("mode") or ""),
              "resumed": str((h.goal or {}).get("resumed", 0)),
              "camera_hfov_deg": "unknown" if h.hfov_deg is None else f"{h.hfov_deg:.1f}",
              **{f"{name}_age_s": _age(age) for name, age in h.input_age_s.items()},
              "dropped": str(h.dropped_total), "places": str(h.places),
              "localised": "no memory" if h.localised is None else str(h.localised).lower(),
              "encoder": h.encoder, "lockstep": str(h.lockstep).lower(), "odometry_jumps": str(h.odometry_jumps)}
    return _report(findings, doing, values, h.dropped_new)


# the safety node's reasons (memnav.core.velocity_guard.GuardReason values) and what each means here
_SAFETY_REASONS = {
    "estop": (DiagnosticLevel.WARN, "emergency stop engaged: the robot is held still (`memnav estop release`)"),
    "stale_color": (DiagnosticLevel.ERROR, "no colour image within the watchdog: the robot is held still"),
    "stale_depth": (DiagnosticLevel.ERROR, "no depth image within the watchdog: the robot is held still"),
    "stale_odom": (DiagnosticLevel.ERROR, "no odometry within the watchdog: the robot is held still"),
    "stale_command": (DiagnosticLevel.WARN, "no command from the policy: the robot is held still (is policy_node "
                                            "running?)"),
    "obstacle_ahead": (DiagnosticLevel.WARN, "forward held: a surface in the robot's path nearer than "
                                             "guard.stop_distance_m, or no depth image measured yet (turns pass)"),
    "limited": (DiagnosticLevel.OK, "passing the policy's command, limited by the speed or acceleration limits"),
    "ok": (DiagnosticLevel.OK, "passing the policy's command"),
}


def safety_diagnostic(body: dict, dropped_new: int = 0) -> NodeDiagnostic:
    """The safety node's status from its /memnav/safety_status body (memnav.ros.safety_node.status_body);
    `dropped_new`: messages dropped since the last report."""
    reason = str(body.get("reason"))
    level, text = _SAFETY_REASONS.get(reason, (DiagnosticLevel.ERROR, f"unknown guard reason {reason!r}"))
    findings = [] if level is DiagnosticLevel.OK else [(level, text)]
    ages = body.get("age_s") or {}
    values = {"reason": reason, "estop": str(bool(body.get("estop"))).lower(),
              "v_mps": f"{body.get('v_mps', 0.0):.3f}", "w_radps": f"{body.get('w_radps', 0.0):.3f}",
              "requested_v_mps": f"{body.get('requested_v_mps', 0.0):.3f}",
              "requested_w_radps": f"{body.get('requested_w_radps', 0.0):.3f}",
              **{f"{name}_age_s": _age(age) for name, age in ages.items()},
              "ahead_m": "" if body.get("ahead_m") is None else f"{body['ahead_m']:.3f}",
              **{f"dropped_{name}": str(n) for name, n in (body.get("dropped") or {}).items()}}
    return _report(findings, text, values, dropped_new)


def memory_diagnostic(stats: dict, localised: bool, db_path: str | None, persist_error: str | None,
                      dropped_total: int = 0, dropped_new: int = 0) -> NodeDiagnostic:
    """The memory node's status: ERROR once its memory can no longer be saved (`persist_error`: a full disk; it
    goes on in RAM), WARN on messages dropped since the last report, else OK with the scene graph's size.
    `stats`: places, objects and rooms."""
    size = f"{stats.get('places', 0)} places, {stats.get('objects', 0)} objects, {stats.get('rooms', 0)} rooms"
    doing = f"{size}, {'localised' if localised else 'relocalising'}" + ("" if db_path else ", in RAM only")
    findings: list[tuple[DiagnosticLevel, str]] = []
    if persist_error:
        findings.append((DiagnosticLevel.ERROR, f"the memory is no longer saved ({persist_error}): it goes on in "
                                                "RAM; free the disk and restart the node to save again"))
    values = {**{k: str(stats.get(k, 0)) for k in ("places", "objects", "rooms")},
              "localised": str(localised).lower(), "db_path": db_path or "", "dropped": str(dropped_total)}
    return _report(findings, doing, values, dropped_new)


def bridge_diagnostic(episode: int, episodes: int, episode_id: str, actions: int, over: bool, successes: int,
                      ended: int, lockstep: bool, dropped_total: int = 0, dropped_new: int = 0) -> NodeDiagnostic:
    """The simulator bridge's status: the episode it serves (`episode` counts from 1, of `episodes`), its
    actions so far and whether it is `over`; `successes` of the `ended` episodes so far. WARN on messages dropped
    since the last report, else OK."""
    doing = (f"episode {episode} of {episodes} ({episode_id}): "
             + (f"over after {actions} actions" if over else f"{actions} actions")
             + (f"; {successes} of {ended} ended episodes successful" if ended else ""))
    values = {"episode": episode_id, "episode_index": str(episode), "episodes": str(episodes), "actions": str(actions),
              "over": str(over).lower(), "ended": str(ended), "successes": str(successes),
              "lockstep": str(lockstep).lower(), "dropped": str(dropped_total)}
    return _report([], doing, values, dropped_new)


def encoder_diagnostic(frames: int, goal_encoded: bool, rgbd: bool, dropped_total: int = 0,
                       dropped_new: int = 0) -> NodeDiagnostic:
    """The encoder node's status: how many frames it encoded (`rgbd`: colour-depth pairs, else colour alone)
    and whether it encoded a goal photo. WARN on messages dropped since the last report, else OK."""
    doing = (f"{frames} {'colour-depth pairs' if rgbd else 'colour frames'} encoded; "
             + ("goal photo encoded" if goal_encoded else "no goal photo yet"))
    return _report([], doing, {"frames": str(frames), "goal": str(goal_encoded).lower(),
                               "rgbd": str(rgbd).lower(), "dropped": str(dropped_total)}, dropped_new)


def stop_diagnostic(decisions: int, has_goal: bool, last: dict | None, dropped_total: int = 0,
                    dropped_new: int = 0) -> NodeDiagnostic:
    """The stop node's status: how many stop decisions it made, whether it has a goal embedding, and the last
    decision (`last`: its /memnav/stop_decision body). WARN on messages dropped since the last report, else OK."""
    doing = f"{decisions} stop decisions" + ("" if has_goal else "; no goal embedding yet")
    values = {"decisions": str(decisions), "goal": str(has_goal).lower(), "dropped": str(dropped_total)}
    if last is not None:
        doing += f"; the last: {'STOP' if last.get('stop') else 'go on'} at belief {last.get('belief', 0.0):.2f}"
        values.update(last_stop=str(bool(last.get("stop"))).lower(), last_belief=f"{last.get('belief', 0.0):.3f}")
    return _report([], doing, values, dropped_new)
