"""Episode sequencing for a simulator served to a robot stack (used by the sim bridge node)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memnav.core.types import Action, Observation
from memnav.sim.base import SimConfig
from memnav.sim.env import ImageNavEnv
from memnav.sim.metrics import EpisodeResult


@dataclass
class RunnerConfig:
    """Which episodes to serve.

    Attributes:
        data: dataset folder or episode file (see `memnav eval --data`).
        split: dataset split.
        scene: serve only the split's episodes in this scene, by its file's stem (e.g. house_020; "" = all);
            first_episode and episodes then count within them.
        first_episode: index of the first episode served.
        episodes: how many episodes to serve (0 = all from first_episode on).
        backend: "embedded" or "habitat".
        scenes_dir: where scene files live when not beside the data ("" = beside the data).
    """

    data: str = "data/houses"
    split: str = "test"
    scene: str = ""
    first_episode: int = 0
    episodes: int = 0
    backend: str = "embedded"
    scenes_dir: str = ""


class EpisodeRunner:
    """Serves episodes one after another; actions and velocity commands go to the current one.

    `results` holds one result per episode served, in the order they ended: an episode restarted
    (`restart_episode`) keeps one, of the attempt that ended last (an attempt given up before it ended records
    nothing; one that ended is replaced, in its place, when the restarted one ends). An episode served again
    after the last wrapped around (`next_episode`) is a new visit, with a result of its own.
    """

    def __init__(self, cfg: RunnerConfig, sim_cfg: SimConfig) -> None:
        from memnav.sim.episodes import load_episodes
        from memnav.sim.factory import make_simulator

        episodes = load_episodes(Path(cfg.data), cfg.split, Path(cfg.scenes_dir) if cfg.scenes_dir else None)
        if cfg.scene:
            stems = sorted({e.scene_name for e in episodes})
            episodes = [e for e in episodes if e.scene_name == cfg.scene]
            if not episodes:
                raise ValueError(f"RunnerConfig.scene: no episode of split {cfg.split!r} in {cfg.data} is in scene "
                                 f"{cfg.scene!r}; its scenes: {', '.join(stems)}")
        end = len(episodes) if cfg.episodes <= 0 else cfg.first_episode + cfg.episodes
        self.episodes = episodes[cfg.first_episode:end]
        if not self.episodes:
            raise ValueError(f"{cfg.data}: no episodes in split {cfg.split!r} from index {cfg.first_episode}")
        self.env = ImageNavEnv(make_simulator(cfg.backend, sim_cfg))
        self.index = -1
        self.results: list[EpisodeResult] = []
        self.observation: Observation | None = None
        self._ended_at: int | None = None   # where in `results` the current episode's ended attempt is, if one ended

    @property
    def finished(self) -> bool:
        return self.index >= len(self.episodes) - 1 and self.env.done

    @property
    def goal(self) -> Observation | None:
        return self.env.goal_observation

    def next_episode(self) -> Observation:
        """Start the next episode (wrapping around after the last)."""
        self.index = (self.index + 1) % len(self.episodes)
        self.observation = self.env.reset(self.episodes[self.index])
        self._ended_at = None
        return self.observation

    def restart_episode(self) -> Observation:
        """Start the current episode again (the first, before any was started). Its result stays the one of the
        attempt that ended last: one that ended before is replaced in `results`, in its place (which is the
        last), when this one ends; if this one is given up too, the earlier result stands."""
        self.observation = self.env.reset(self.episodes[max(self.index, 0)])
        self.index = max(self.index, 0)
        return self.observation

    def act(self, action: Action | int | str, move: bool = True) -> tuple[Observation, EpisodeResult | None]:
        """Apply a discrete action; returns the observation and the result when the episode ended. `move` False
        only counts it (velocity mode: the agent's motion comes from `drive`; STOP still ends the episode)."""
        if self.env.done:
            raise RuntimeError("the episode is over: start the next one")
        if move:
            self.observation = self.env.step(action)
        else:
            self.env.count_action(action)
        result = None
        if self.env.done:
            result = self.env.result()
            if self._ended_at is None:
                self._ended_at = len(self.results)
                self.results.append(result)
            else:   # a restarted episode: its result replaces the earlier attempt's (the last result, so the
                self.results[self._ended_at] = result   # index of the episode's result is len(results) - 1 still)
        return self.observation, result

    def drive(self, v_mps: float, w_radps: float, dt_s: float) -> Observation:
        """Apply a velocity command (robot-like control); episodes then end by STOP on the action topic."""
        if self.env.done:
            raise RuntimeError("the episode is over: start the next one")
        self.observation = self.env.step_velocity(v_mps, w_radps, dt_s)
        return self.observation
