"""Agents behind one interface, so every agent runs in the same evaluation harness."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np

from memnav.core.types import Action, Observation

if TYPE_CHECKING:
    from memnav.sim.base import Simulator
    from memnav.sim.episodes import Episode


class Agent(Protocol):
    """An ImageNav agent: told about each new episode, then asked for one action per observation."""

    name: str

    def reset(self, episode: Episode, goal: Observation, sim: Simulator) -> None:
        """Start an episode. `sim` is given for privileged agents (oracle) and must not be used by others."""

    def act(self, obs: Observation) -> Action:
        """Next action for this observation."""


class RandomAgent:
    """Samples uniformly from the four ImageNav actions (Habitat's `action_space.sample()`)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def reset(self, episode: Episode, goal: Observation, sim: Simulator) -> None:
        del episode, goal, sim

    def act(self, obs: Observation) -> Action:
        return Action(int(self._rng.integers(len(Action))))


class OracleAgent:
    """Privileged agent: follows the shortest path to the goal and stops there.

    The goal is the one the metrics measure against: of an episode with several goals, the nearest to the start
    by geodesic distance (`Episode.nearest_goal`; Success, SPL and DistanceToGoal take the nearest goal, while the
    goal photo shows the first), so that its SPL is the upper reference for every agent.

    Each step it scores the twelve headings it can reach by turning (30 deg apart) by the geodesic
    distance to the goal after one forward step in that heading (skipping steps that would cross
    non-navigable space); it moves forward when its own heading is the best one, else turns toward the best
    one. It calls STOP once the geodesic distance to the goal is below `stop_distance_m`. Greedy descent of
    the geodesic distance is the shortest path, discretised to the action set.
    """

    name = "oracle"

    def __init__(self, stop_distance_m: float = 0.5) -> None:
        self.stop_distance_m = stop_distance_m
        self._sim: Simulator | None = None
        self._goal = np.zeros(3)

    def reset(self, episode: Episode, goal: Observation, sim: Simulator) -> None:
        self._sim = sim
        goal = episode.nearest_goal(sim.agent_state.position, sim.geodesic_distance)
        self._goal = np.asarray(goal.position, dtype=np.float64)

    def act(self, obs: Observation) -> Action:
        sim = self._sim
        assert sim is not None, "OracleAgent.reset must be called first"
        state = sim.agent_state
        pos = state.position
        here = sim.geodesic_distance(pos, self._goal)
        if here < self.stop_distance_m:
            return Action.STOP
        turn = sim.config.turn_angle_rad
        n_headings = max(1, round(2 * math.pi / turn))
        step = sim.config.forward_step_m
        best_k, best_d = 0, math.inf
        # k turns left (k > 0) or right (k < 0); prefer fewer turns on ties
        for k in sorted(range(-(n_headings // 2) + 1, n_headings // 2 + 1), key=abs):
            yaw = state.yaw_rad + k * turn
            delta = step * np.array([-math.sin(yaw), 0.0, -math.cos(yaw)])
            ahead = pos + delta
            # the whole step must stay navigable, or the agent would slide along an obstacle
            if not all(sim.is_navigable(pos + f * delta) for f in (0.25, 0.5, 0.75, 1.0)):
                continue
            d = sim.geodesic_distance(ahead, self._goal)
            if d < best_d - 1e-6:
                best_k, best_d = k, d
        if best_k == 0:
            return Action.MOVE_FORWARD
        return Action.TURN_LEFT if best_k > 0 else Action.TURN_RIGHT


class ForwardAgent:
    """Baseline: always MOVE_FORWARD (never stops, so it never succeeds; it shows what motion alone gives)."""

    name = "forward"

    def reset(self, episode: Episode, goal: Observation, sim: Simulator) -> None:
        del episode, goal, sim

    def act(self, obs: Observation) -> Action:
        return Action.MOVE_FORWARD


SIMPLE_AGENTS = {"random": RandomAgent, "forward": ForwardAgent, "oracle": OracleAgent}
LEARNED_AGENTS = ("gru", "episodic", "memnav", "memnav-fixed")
AGENTS = (*SIMPLE_AGENTS, *LEARNED_AGENTS)


def make_agent(name: str, seed: int = 0, options: object | None = None, encoder: object | None = None) -> Agent:
    """Build an agent by name (learned agents take LearnedAgentOptions and may share one encoder).

    Raises:
        ValueError: for an unknown name, listing the known ones.
        CheckpointError, FileNotFoundError: a learned agent's checkpoint is missing or does not fit.
    """
    if name in LEARNED_AGENTS:
        from memnav.eval.learned_agents import LearnedAgent

        return LearnedAgent(name, options, encoder)  # type: ignore[arg-type]
    if name not in SIMPLE_AGENTS:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(AGENTS)}")
    if name == "random":
        return RandomAgent(seed=seed)
    return SIMPLE_AGENTS[name]()
