"""Agents behind one interface, so every agent runs in the same evaluation harness."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np

from memnav.core.types import Action, Observation, wrap_angle

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
    """Privileged agent: follows the simulator's shortest path and stops at the goal.

    Each step it looks at the shortest path from where it stands, takes the first waypoint more than
    `lookahead_m` away, turns toward it while the heading error exceeds half a turn, otherwise moves
    forward, and calls STOP once the geodesic distance to the goal is below `stop_distance_m`.
    """

    name = "oracle"

    def __init__(self, stop_distance_m: float = 0.5, lookahead_m: float = 0.1) -> None:
        self.stop_distance_m = stop_distance_m
        self.lookahead_m = lookahead_m
        self._sim: Simulator | None = None
        self._goal = np.zeros(3)

    def reset(self, episode: Episode, goal: Observation, sim: Simulator) -> None:
        self._sim = sim
        self._goal = np.asarray(episode.goal.position, dtype=np.float64)

    def act(self, obs: Observation) -> Action:
        sim = self._sim
        assert sim is not None, "OracleAgent.reset must be called first"
        state = sim.agent_state
        pos = state.position
        if sim.geodesic_distance(pos, self._goal) < self.stop_distance_m:
            return Action.STOP
        path = sim.shortest_path(pos, self._goal)
        if len(path) < 2:
            return Action.STOP
        target = path[-1]
        for p in path[1:]:
            if math.hypot(p[0] - pos[0], p[2] - pos[2]) > self.lookahead_m:
                target = p
                break
        desired = math.atan2(-(target[0] - pos[0]), -(target[2] - pos[2]))
        err = wrap_angle(desired - state.yaw_rad)
        half_turn = 0.5 * sim.config.turn_angle_rad
        if err > half_turn:
            return Action.TURN_LEFT
        if err < -half_turn:
            return Action.TURN_RIGHT
        return Action.MOVE_FORWARD


AGENTS = {"random": RandomAgent, "oracle": OracleAgent}


def make_agent(name: str, seed: int = 0) -> Agent:
    """Build an agent by name.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(sorted(AGENTS))}")
    cls = AGENTS[name]
    return cls(seed=seed) if cls is RandomAgent else cls()
