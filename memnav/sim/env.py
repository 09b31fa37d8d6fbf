"""ImageNav episode bookkeeping on top of any Simulator: step limit, path length, metrics."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from memnav.core.types import Action, EpisodeStatus, Observation
from memnav.sim.base import Simulator
from memnav.sim.metrics import EpisodeResult, is_success, soft_spl, spl, view_median_depth

if TYPE_CHECKING:
    from memnav.sim.episodes import Episode


class ImageNavEnv:
    """Runs one episode at a time: `reset(episode)`, then `step(action)` until `done`."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.episode: Episode | None = None
        self.done = True
        self._status = EpisodeStatus.RUNNING
        self._path_length = 0.0
        self._steps = 0
        self._last_position = np.zeros(3)
        self._geodesic_start = math.nan
        self._goal_view_depth: float | None = None

    @property
    def steps(self) -> int:
        """Actions taken in the current episode."""
        return self._steps

    @property
    def max_steps(self) -> int:
        return self.sim.config.max_episode_steps

    @property
    def goal_observation(self) -> Observation | None:
        return self.sim.goal_observation

    def reset(self, episode: Episode) -> Observation:
        obs = self.sim.reset(episode)
        self.episode = episode
        self.done = False
        self._status = EpisodeStatus.RUNNING
        self._path_length = 0.0
        self._steps = 0
        self._last_position = self.sim.agent_state.position
        self._geodesic_start = self._distance_to_goals(self._last_position)
        goal = self.sim.goal_observation
        self._goal_view_depth = view_median_depth(goal.depth) if goal is not None else None
        if not math.isfinite(self._geodesic_start):
            where = [np.asarray(g.position).tolist() for g in episode.goals]
            goals = f"the goal {where[0]} is" if len(where) == 1 else f"each of the goals {where} is"
            raise ValueError(f"episode {episode.episode_id} ({episode.scene_id}): {goals} unreachable from the start")
        return obs

    def step(self, action: Action | int | str) -> Observation:
        if self.done:
            raise RuntimeError("episode is over: call reset(episode) first")
        act = Action.parse(action)
        obs = self.sim.step(act)
        self._steps += 1
        pos = self.sim.agent_state.position
        self._path_length += float(np.linalg.norm(pos - self._last_position))
        self._last_position = pos
        self._end_if_over(act)
        return obs

    def count_action(self, action: Action | int | str) -> None:
        """Count a discrete action toward the step limit without moving the agent: in velocity mode the motion
        comes from `step_velocity` (a robot-like agent sends both), so the action must not move it a second time.
        STOP ends the episode as in `step`."""
        if self.done:
            raise RuntimeError("episode is over: call reset(episode) first")
        act = Action.parse(action)
        self._steps += 1
        self._end_if_over(act)

    def _end_if_over(self, act: Action) -> None:
        if act == Action.STOP:
            self.done, self._status = True, EpisodeStatus.STOPPED
        elif self._steps >= self.max_steps:
            self.done, self._status = True, EpisodeStatus.STEP_LIMIT

    def step_velocity(self, v_mps: float, w_radps: float, dt_s: float) -> Observation:
        """Apply a velocity command; it adds to the path length but not to the action count."""
        if self.done:
            raise RuntimeError("episode is over: call reset(episode) first")
        obs = self.sim.step_velocity(v_mps, w_radps, dt_s)
        pos = self.sim.agent_state.position
        self._path_length += float(np.linalg.norm(pos - self._last_position))
        self._last_position = pos
        return obs

    def distance_to_goal(self) -> float:
        """Geodesic distance from the agent to the nearest of the episode's goals, meters."""
        assert self.episode is not None
        return self._distance_to_goals(self.sim.agent_state.position)

    def _distance_to_goals(self, position: np.ndarray) -> float:
        # habitat-lab's DistanceToGoal measures to the nearest of an episode's goals (several goals: any one of
        # them is the goal); one goal at a time, as every backend takes a single end point
        assert self.episode is not None
        return min(self.sim.geodesic_distance(position, g.position) for g in self.episode.goals)

    def result(self) -> EpisodeResult:
        if self.episode is None:
            raise RuntimeError("no episode has been run")
        d = self.distance_to_goal()
        success = is_success(self._status == EpisodeStatus.STOPPED, d, self.sim.config.success_distance_m)
        g = self._geodesic_start
        return EpisodeResult(
            episode_id=str(self.episode.episode_id), scene_id=self.episode.scene_id,
            success=float(success), spl=spl(success, g, self._path_length),
            soft_spl=soft_spl(d, g, self._path_length), distance_to_goal_m=d, geodesic_distance_m=g,
            path_length_m=self._path_length, steps=self._steps,
            status=self._status, goal_view_depth_m=self._goal_view_depth)
