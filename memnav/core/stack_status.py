"""What a running memnav stack is doing, from what its nodes publish: the summary `memnav status` prints.

Pure logic (no ROS): the shell command listens to the graph and the nodes' status topics for a moment and hands
what it heard here; `summarize` turns it into lines for a person and one JSON object for a script.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["STACK_NODES", "GraphSettle", "Heard", "summarize"]

# the nodes of the stack, by their launch-file names, and what each one's absence means
STACK_NODES = {
    "policy_node": "needed: it decides every action",
    "safety_node": "the robot profile's guard between the policy and the base (the simulation runs without it)",
    "memory_node": "the scene graph on topics (the policy node keeps its own memory; optional)",
    "encoder_node": "embeddings on topics (optional)",
    "stop_node": "the stop decision on topics (optional)",
    "sim_bridge_node": "the simulator (absent on a robot)",
}


class GraphSettle:
    """When the node list has been listened to long enough: the listen window is over and the list has not changed
    for `settle_s` seconds.

    DDS discovery of the other nodes goes on after the first one's: on a busy machine a node can show up a second or
    more later, and a status that leaves it out says it is not running.
    """

    def __init__(self, listen_end_s: float, settle_s: float):
        self.listen_end_s, self.settle_s = listen_end_s, settle_s
        self.nodes: list[tuple[str, str]] | None = None
        self.changed_s = -float("inf")

    def update(self, nodes: list[tuple[str, str]], now_s: float) -> bool:
        """Record the node list seen at `now_s` (monotonic seconds); True once the list has settled."""
        nodes = sorted(nodes)
        if nodes != self.nodes:
            self.nodes, self.changed_s = nodes, now_s
        return now_s >= self.listen_end_s and now_s - self.changed_s >= self.settle_s


@dataclass
class Heard:
    """What the command heard while it listened.

    Attributes:
        namespace: the namespace looked at ("/" or "/robot1").
        nodes: (name, namespace) of every node in the graph.
        now_s: the node clock when the listening ended, seconds (ages are taken against it).
        goal_status: the newest /memnav/goal_status body, or None.
        policy_state: the newest /memnav/policy_state body, or None; `policy_state_age_s`: how long ago it came.
        safety: the newest /memnav/safety_status body, or None.
        scene_graph: the newest /memnav/scene_graph body's `counts` (and `localised`), or None.
        listened_s: how long the command listened, seconds.
        diagnostics: the newest /diagnostics status of each node that publishes one, by its full name
            (/policy_node): (level name OK / WARN / ERROR / STALE, message).
    """

    namespace: str
    nodes: list[tuple[str, str]]
    now_s: float
    listened_s: float
    goal_status: dict | None = None
    policy_state: dict | None = None
    policy_state_age_s: float | None = None
    safety: dict | None = None
    scene_graph: dict | None = None
    diagnostics: dict[str, tuple[str, str]] = field(default_factory=dict)


def _join(namespace: str, name: str) -> str:
    return f"{namespace.rstrip('/')}/{name}"


def summarize(heard: Heard) -> tuple[list[str], dict[str, Any], bool]:
    """(lines to print, the JSON object, whether a policy node runs in the namespace)."""
    ours = [name for name, ns in heard.nodes if ns == heard.namespace and name in STACK_NODES]
    # a node whose /diagnostics status came is running too: on a busy machine DDS can deliver a node's messages
    # before the graph lists its name
    reporting = {name for name in STACK_NODES if _join(heard.namespace, name) in heard.diagnostics}
    here = sorted(set(ours) | reporting)
    twice = sorted(name for name in here if ours.count(name) > 1)
    elsewhere = sorted({ns for name, ns in heard.nodes if name == "policy_node" and ns != heard.namespace})
    missing = [n for n in STACK_NODES if n not in here]
    ok = "policy_node" in here
    lines = [f"memnav status of namespace {heard.namespace} (listened {heard.listened_s:g} s)"]
    lines.append("nodes: " + (", ".join(here) if here else "none of memnav's"))
    for name in missing:
        lines.append(f"  not running: {name} ({STACK_NODES[name]})")
    for name in twice:
        lines.append(f"  WARNING: {ours.count(name)} nodes named {name} in {heard.namespace}: they read and write the "
                     "same topics (two launches of one robot?); stop all but one")
    if not ok and elsewhere:
        hint = "--namespace " + elsewhere[0].strip("/") if elsewhere[0] != "/" else "no --namespace"
        lines.append(f"  a policy node runs in {', '.join(elsewhere)}: try {hint}")
    goal = heard.goal_status
    if goal is None:
        lines.append("goal: none since the policy node started" if ok else "goal: -")
    else:
        age = heard.now_s - int(goal.get("goal_stamp_ns", 0)) / 1e9
        when = f", sent {age:.1f} s ago" if 0 <= age < 86400 else ""
        state = goal.get("status")
        doing = "working on it" if state == "active" else "ended: " + str(state)
        resumed = goal.get("resumed") or 0
        lines.append(f"goal: {doing}, {goal.get('actions', 0)} actions"
                     + (f", mode {goal['mode']}" if goal.get("mode") else "") + when
                     + (f", resumed after {resumed} restart{'s' if resumed > 1 else ''} of the policy node"
                        if resumed else ""))
    ps = heard.policy_state
    if ps is not None:
        belief = ps.get("belief")
        lines.append(f"last decision {heard.policy_state_age_s:.1f} s ago: {ps.get('action')}, mode {ps.get('mode')}"
                     + (f", belief {belief:.2f}" if isinstance(belief, (int, float)) else "")
                     + f", memory {ps.get('places', 0)} places"
                     + ("" if ps.get("localised") in (None, True) else ", not localised"))
    elif ok:
        lines.append("last decision: none while listening (no goal, or waiting for camera frames)")
    safety = heard.safety
    if safety is not None:
        ages = ", ".join(f"{k} {'-' if v is None else f'{v:.2f} s'}" for k, v in (safety.get("age_s") or {}).items())
        ahead = safety.get("ahead_m")
        lines.append(f"safety: e-stop {'ENGAGED' if safety.get('estop') else 'released'}; commanding "
                     f"{safety.get('v_mps', 0):.2f} m/s, {safety.get('w_radps', 0):.2f} rad/s ({safety.get('reason')})"
                     + (f"; nearest in the path {ahead:.2f} m" if isinstance(ahead, (int, float)) else "")
                     + (f"; input ages: {ages}" if ages else ""))
    elif "safety_node" in here:
        lines.append("safety: no status heard (it publishes one every second)")
    graph = heard.scene_graph
    if graph is not None:
        lines.append(f"memory node: {graph.get('places', 0)} places, {graph.get('objects', 0)} objects, "
                     f"{graph.get('rooms', 0)} rooms")
    diagnosed = {name: heard.diagnostics[_join(heard.namespace, name)] for name in here
                 if _join(heard.namespace, name) in heard.diagnostics}
    for name, (level, message) in diagnosed.items():
        lines.append(f"diagnostics: {name} {level}: {message}")
    body = {"namespace": heard.namespace, "ok": ok, "nodes": here, "not_running": missing, "running_twice": twice,
            "policy_node_elsewhere": elsewhere, "goal_status": goal, "policy_state": ps,
            "policy_state_age_s": heard.policy_state_age_s, "safety": safety, "scene_graph": graph,
            "listened_s": heard.listened_s, "node_names": sorted(_join(ns, n) for n, ns in heard.nodes),
            "diagnostics": {name: {"level": level, "message": message} for name, (level, message) in diagnosed.items()}}
    return lines, body, ok
