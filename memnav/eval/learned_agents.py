"""Learned agents for the evaluation harness: `gru`, `episodic`, `memnav` (and `memnav-fixed`).

Each wraps a `Navigator` (encoder -> memory -> policy -> stop rule) with a trained policy checkpoint. They
see only what a robot sees: RGB-D frames, odometry and the goal photo; the simulator handle given to
`reset` is not used. In lifelong mode the memnav agent keeps one long-term memory database per house under
`memory_dir` and reopens it on every visit, so the scene graph grows (and consolidates) across episodes;
with exploration on it also keeps the house's occupancy map there (`<house>.map.npz`, odometry frame).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memnav.core.encoder import Encoder
from memnav.core.exploration import MapEvidence, OccupancyMap
from memnav.core.memory.scene_graph import SceneGraphConfig, SceneGraphMemory
from memnav.core.memory.store import CorruptStoreError, MemoryStoreError, SchemaVersionError
from memnav.core.navigator import MemoryKind, Navigator, NavigatorConfig
from memnav.core.policy import load_policy
from memnav.core.stop import load_calibrator
from memnav.core.types import Action, Observation, Pose2D
from memnav.eval.exploring_defaults import (
    EXPLORING_BEST_VIEW_RESERVE,
    EXPLORING_CANDIDATE_POOL,
    EXPLORING_COLOUR_POOL,
    EXPLORING_SEARCH_VALUE,
    EXPLORING_STOP_APPROACH_MIN_INLIERS,
    EXPLORING_SWEEP_SPACING_M,
    EXPLORING_VERIFY_EVERY_STEPS,
    ExploringTuning,
)
from memnav.paths import MODELS, lifelong_map_path, lifelong_memory_path

if TYPE_CHECKING:
    from memnav.sim.base import Simulator
    from memnav.sim.episodes import Episode


# agent name -> (default checkpoint file in models/, memory kind, stop rule)
LEARNED: dict[str, tuple[str, MemoryKind, str]] = {
    "gru": ("policy_gru.pt", MemoryKind.NONE, "voi"),
    "episodic": ("policy_episodic.pt", MemoryKind.EPISODIC, "voi"),
    "memnav": ("policy_memnav.pt", MemoryKind.SCENE_GRAPH, "voi"),
    "memnav-fixed": ("policy_memnav.pt", MemoryKind.SCENE_GRAPH, "fixed"),
}


@dataclass
class LearnedAgentOptions(ExploringTuning):
    """Where an agent's files are and how it runs (the exploring agents' tuning: ExploringTuning).

    Attributes:
        policy_dir: folder holding policy_<variant>.pt checkpoints.
        encoder_checkpoint: encoder checkpoint.
        calibration: stop-belief calibration JSON.
        lifelong_dir: lifelong mode: one memory database per house here (None = fresh memory per episode).
        odometry_persists: lifelong mode: odometry keeps one frame across runs (the simulator's house frame; a
            robot localised in a fixed map), so a stored memory is localised from the start and the house's
            occupancy map from an earlier run is loaded. False (a robot whose odometry restarts at boot): the
            stored memory relocalises from agreeing loop closures (`SceneGraphConfig.start_localised`), its
            places guide the search only once it has, and the occupancy map saved by the run that created the
            memory (in the memory's frame) is laid on this run's map once the memory has relocalised and a wall
            correlation has confirmed and refined the transform (`OccupancyMap.align_to`); it is not
            overwritten.
        odometry_restarts: lifelong evaluation of a robot that reboots before every goal: each episode is a new
            run that reopens the house's memory, with odometry seen in a new random frame (act() maps the
            simulator's pose through it; seeded by `seed`, the house and the visit), and odometry_persists is
            taken as False.
        random_odometry_frame: with odometry_restarts, act() sees each visit's odometry in a new random frame up
            to 20 m and any heading away from the simulator's; False: as the simulator gives it (with
            SimConfig.odometry_origin "start" that is already a frame restarted at the start pose, as the sim
            bridge gives the policy node).
        seed: sampling seed (used only when not greedy).
        homing: memnav agents follow the scene graph to a remembered place matching the goal photo
            (NavigatorConfig.homing); False leaves every move to the policy. Agents that explore home only with
            explore_homing or homing_via_map.
        explore: memnav agents explore frontiers of their own occupancy map and drive to a goal localized
            from RGB-D matches (NavigatorConfig.explore / localize); False leaves the search to the policy.
        collision_fraction: a forward move shorter than this fraction of 0.25 m counts as blocked
            (NavigatorConfig.collision_fraction).
        max_steps: the episode's step limit, actions (0: none); an exploring agent heads for its best view
            EXPLORING_BEST_VIEW_RESERVE actions before it (NavigatorConfig.best_view_after_steps).
        map_checks_in_background: a rebooted run's checks of its map against the saved house map (the vote
            check, the tries at laying it, the check of a laid map; up to about 0.7 s each) run in a worker
            thread on a copy of the map, and their result is applied at the first step after they finish, so
            no step waits for one (the policy node in real time). False: each runs inside the step that starts
            it, so runs are reproducible (evaluation, lock-step).
        camera_mount_told: the agent reads how far ahead of its turning axis the simulator's camera sits and how
            far it looks down (SimConfig.sensor_forward_m, sensor_pitch_deg) as the policy node is given
            camera_forward_m and camera_pitch_deg; False: it maps depth as if the camera sat on the axis, level (a
            policy node with both left at 0).
    """

    policy_dir: Path = MODELS
    encoder_checkpoint: Path = MODELS / "encoder.pt"
    calibration: Path = MODELS / "stop_calibration.json"
    lifelong_dir: Path | None = None
    odometry_persists: bool = True
    odometry_restarts: bool = False
    random_odometry_frame: bool = True
    seed: int = 0
    homing: bool = True
    explore: bool = True
    collision_fraction: float = 0.9
    max_steps: int = 500
    map_checks_in_background: bool = False
    camera_mount_told: bool = True


_LAY_MIN_SCORE = 0.6     # share of this run's obstacle cells that must land on the saved map's to lay it
_LAY_RETRY_STEPS = 20    # steps between tries at laying the saved map
# a try where every transform near the memory's correction that lays at least _DOUBT_MIN_CELLS of this run's
# obstacle cells on cells the saved map saw puts _DOUBT_CONFLICT of them on its free floor refutes the memory's
# relocalisation (walls where it saw floor)
_DOUBT_MIN_CELLS = 150
_DOUBT_CONFLICT = 0.35
# while the memory is unlocalised, every _VOTE_CHECK_STEPS steps the corrections its first loop-closure candidates
# imply (at most _VOTES_CHECKED distinct ones) are fitted to the saved map: one that fits at least _VOTE_MIN_SCORE
# and puts at most _VOTE_MAX_CONFLICT of this run's walls on its free floor localises the memory at once
_VOTE_CHECK_STEPS = 10
_VOTES_CHECKED = 3
_VOTE_MIN_SCORE = 0.8
_VOTE_MAX_CONFLICT = 0.1
# once the saved map is laid, every _LAID_CHECK_STEPS steps this run's own walls are laid on it through the same
# transform: _DOUBT_CONFLICT of them (of at least _DOUBT_MIN_CELLS on cells it saw) on its free floor take the lay back
_LAID_CHECK_STEPS = 20


def _own_walls_contradict(own: OccupancyMap, house: OccupancyMap, own_to_house: Pose2D) -> bool:
    """Whether a run's own map, laid on the house map through `own_to_house`, puts _DOUBT_CONFLICT of its walls (of
    at least _DOUBT_MIN_CELLS landing on cells the house map saw) on the house map's free floor: the lay was wrong."""
    conflict = own.contradiction(house, own_to_house, _DOUBT_MIN_CELLS, 0.0, 0.0)
    return conflict is not None and conflict >= _DOUBT_CONFLICT


def _same_pose(a: Pose2D, b: Pose2D) -> bool:
    """Two corrections (or poses) within 1 m and 15 deg of each other: the same, as far as the map checks go."""
    return (math.hypot(a.x_m - b.x_m, a.y_m - b.y_m) < 1.0
            and abs(math.remainder(a.yaw_rad - b.yaw_rad, math.tau)) < math.radians(15.0))


@dataclass
class _MapCheck:
    """A map check running in the background: its future, and what to do with its result."""

    future: Future
    apply: Callable[[object], None]


@dataclass(frozen=True)
class _LaidMap:
    """A rebooted run's laid house map: the saved map, this odometry frame -> its frame, and the evidence that was
    added to this run's map (taken back out if the lay proves wrong)."""

    house: OccupancyMap
    at: Pose2D
    evidence: MapEvidence


class LearnedAgent:
    """A trained policy behind the Agent interface (see memnav.eval.agents.Agent)."""

    def __init__(self, name: str, options: LearnedAgentOptions | None = None,
                 encoder: Encoder | None = None) -> None:
        if name not in LEARNED:
            raise ValueError(f"unknown learned agent {name!r}; available: {', '.join(sorted(LEARNED))}")
        self.name = name
        self.options = opts = options or LearnedAgentOptions()
        ckpt, kind, stop_rule = LEARNED[name]
        path = Path(opts.policy_dir) / ckpt
        policy, extra = load_policy(path)
        if extra.get("memory", kind.value) != kind.value:
            raise ValueError(f"{path}: trained with memory {extra.get('memory')!r}, agent {name!r} needs "
                             f"{kind.value!r}")
        self.encoder = encoder or Encoder.from_checkpoint(opts.encoder_checkpoint)
        calibrator = load_calibrator(opts.calibration)
        graph = kind is MemoryKind.SCENE_GRAPH
        explore = graph and opts.explore
        colour = opts.colour_weight > 0 or opts.candidate_min_colour > 0
        cfg = NavigatorConfig(memory=kind.value, stop_rule=stop_rule, greedy=True, homing=graph and opts.homing
                              and (not explore or opts.explore_homing or opts.homing_via_map),
                              explore=explore, localize=explore, scan_match=explore,
                              persistent_map=explore and opts.lifelong_dir is not None,
                              collision_fraction=opts.collision_fraction,
                              stop_approach_min_inliers=EXPLORING_STOP_APPROACH_MIN_INLIERS if explore else 0,
                              sweep_spacing_m=EXPLORING_SWEEP_SPACING_M if explore else 0.0,
                              sweep_prior_weight=opts.sweep_prior_weight if explore else 0.0,
                              frontier_look_turns=opts.frontier_look_turns if explore else 0,
                              map_range_m=opts.map_range_m if explore else NavigatorConfig.map_range_m,
                              frontier_colour_weight=opts.frontier_colour_weight if explore else 0.0,
                              keep_unseen_obstacles=explore and opts.keep_unseen_obstacles,
                              map_pixel_spacing_deg=opts.map_pixel_spacing_deg if explore else 0.0,
                              verify_every_steps=EXPLORING_VERIFY_EVERY_STEPS if explore else 0,
                              candidate_prior=explore and opts.candidate_prior,
                              candidate_pool=EXPLORING_CANDIDATE_POOL if explore and opts.candidate_prior
                              else EXPLORING_COLOUR_POOL if explore and colour else NavigatorConfig.candidate_pool,
                              colour_weight=opts.colour_weight if explore else 0.0,
                              candidate_min_colour=opts.candidate_min_colour if explore else 0.0,
                              candidate_colour_fit=opts.candidate_colour_fit if explore else 0.0,
                              corroborated_stop_similarity=opts.corroborated_similarity if explore else 0.0,
                              agreeing_stop_similarity=opts.agreeing_similarity if explore else 0.0,
                              known_corroborated_stop_similarity=opts.known_corroborated_similarity
                              if explore else 0.0,
                              homing_via_map=opts.homing_via_map,
                              candidate_near_m=opts.candidate_near_m if explore else 0.0,
                              best_view_after_steps=max(0, opts.max_steps - EXPLORING_BEST_VIEW_RESERVE)
                              if explore and opts.max_steps > 0 else 0)
        # an agent that explores has more to gain from searching on than one that leaves it to the policy
        stop_params = {"search_value": EXPLORING_SEARCH_VALUE} if explore else None
        self.navigator = Navigator(self.encoder, calibrator, cfg, policy=policy, stop_params=stop_params)
        self._scene: str | None = None
        self._map_in_memory_frame = True    # lifelong: the occupancy map may be saved beside the memory
        self._map_error: str | None = None  # why the occupancy map could not be saved (storage_error)
        self._odom_frame: Pose2D | None = None   # odometry_restarts: this visit's odometry frame in the map frame
        self._saved_map: OccupancyMap | None = None   # a rebooted run's house map, until the memory relocalises
        self._lay_tries = 0
        self._laid: _LaidMap | None = None      # the saved map laid on this run's, while it stays laid
        self._vote_tries = 0
        self._laid_steps = 0
        self._check: _MapCheck | None = None    # a map check running in the background
        self._checker = None                    # its worker thread (a ThreadPoolExecutor), made when first needed
        self._stamp_ns = 0
        self.visits: dict[str, int] = {}

    def reset(self, episode: Episode, goal: Observation, sim: Simulator) -> None:
        # not a privileged agent: of the simulator it reads only its camera, as a robot reads its camera_info
        cam, nav = sim.config, self.navigator.cfg
        told = self.options.camera_mount_told
        forward, pitch = (cam.sensor_forward_m, cam.sensor_pitch_deg) if told else (0.0, 0.0)
        if (nav.hfov_deg, nav.camera_height_m, nav.camera_forward_m, nav.camera_pitch_deg) != (
                cam.hfov_deg, cam.sensor_height_m, forward, pitch):
            self.navigator.set_camera(cam.hfov_deg, cam.sensor_height_m, forward, pitch)
        self.begin(episode.scene_name, goal.rgb, goal.depth)

    def begin(self, place_key: str, goal_rgb, goal_depth=None) -> None:
        """Start an episode towards a goal photo in the environment named `place_key` (lifelong: its database).

        Raises:
            ValueError: an empty or malformed goal image.
        """
        nav = self.navigator
        if nav.kind is MemoryKind.SCENE_GRAPH:
            lifelong = self.options.lifelong_dir
            if lifelong is None:
                nav.memory.close()
                nav.memory = SceneGraphMemory()
            else:
                self._save_map()
                if place_key != self._scene or self.options.odometry_restarts:
                    nav.memory.close()
                    Path(lifelong).mkdir(parents=True, exist_ok=True)
                    # odometry that keeps its frame from run to run (the simulator's house frame): the stored
                    # memory is localised from the start, and loop closures only refine it
                    persists = self.options.odometry_persists and not self.options.odometry_restarts
                    nav.memory = self._open_memory(lifelong_memory_path(lifelong, place_key),
                                                   SceneGraphConfig(start_localised=persists))
                    last = nav.memory.stats().last_stamp_ns
                    if last is not None:  # a database from an earlier run: continue its clock
                        self._stamp_ns = max(self._stamp_ns, last)
                    # this run's odometry frame is the memory's: it persists, or the memory is new
                    self._map_in_memory_frame = persists or last is None
                    saved = None
                    if nav.cfg.persistent_map:   # the house's occupancy map from earlier visits, if any
                        path = self._map_path(place_key)
                        if path.is_file() and persists:
                            nav.explorer.load_map(path)
                        else:
                            nav.explorer.reset()
                            if not self._map_in_memory_frame:
                                # drawn in the memory's frame: laid on this run's map once the memory relocalises
                                saved = path
                    self._await_saved_map(saved)
        self._scene = place_key
        self.visits[place_key] = self.visits.get(place_key, 0) + 1
        if self.options.odometry_restarts and self.options.random_odometry_frame:
            # this visit's odometry frame: up to 20 m and any heading away
            key = [self.options.seed, self.visits[place_key], *place_key.encode()]
            rng = np.random.default_rng(key)
            self._odom_frame = Pose2D(*rng.uniform(-20.0, 20.0, 2).tolist(), float(rng.uniform(-np.pi, np.pi)))
        nav.reset(goal_rgb, goal_depth)

    def set_goal(self, goal_rgb, goal_depth=None) -> None:
        """Replace the goal photo of the episode under way (e.g. its depth arrived after it, before any step),
        without starting a new visit: the memory, map and visit count stay as `begin` left them.

        Raises:
            ValueError: an empty or malformed goal image.
        """
        self.navigator.reset(goal_rgb, goal_depth)

    def relocalise(self, goal_rgb=None, goal_depth=None) -> None:
        """The robot was moved without its odometry knowing (carried, kidnapped): the long-term memory relocalises
        from agreeing loop closures (`SceneGraphMemory.relocalise`), the occupancy map, now out of register with
        odometry, is dropped (in lifelong mode the house map last saved is laid on the new one once the memory
        has relocalised), and with a goal photo the search for it starts over from here."""
        nav = self.navigator
        if nav.memory is not None:
            nav.memory.relocalise()
        nav.explorer.reset(keep_map=False)
        self._map_in_memory_frame = False
        # the house map last saved is laid on the new map again once the memory has relocalised
        self._await_saved_map(self._map_path(self._scene) if self._scene is not None and self.options.lifelong_dir
                              and nav.cfg.persistent_map else None)
        if goal_rgb is not None:
            nav.reset(goal_rgb, goal_depth)

    def _await_saved_map(self, path: Path | None) -> None:
        """Lay the house map saved at `path` (None, or no such file: none) on this run's map once it fits
        (`step`); nothing of an earlier one is kept."""
        self._wait_to_lay(OccupancyMap.load(path, self.navigator.explorer.cfg)
                          if path is not None and path.is_file() else None)

    def _wait_to_lay(self, house: OccupancyMap | None) -> None:
        self._saved_map = house
        self._lay_tries = self._vote_tries = self._laid_steps = 0
        self._laid = None
        self._check = None                      # a check still running was made for the state before: ignored

    def step(self, rgb, depth, pose, stamp_ns: int | None = None):
        """One decision on raw inputs; `stamp_ns` None advances the memory clock by one second per step.

        Returns:
            (action, step input, goal-reached probability) as `Navigator.act`.
        """
        self._stamp_ns = self._stamp_ns + 1_000_000_000 if stamp_ns is None else max(self._stamp_ns + 1, stamp_ns)
        # collisions are inferred from odometry (not the simulator's flag), as on a robot without bumpers
        out = self.navigator.act(rgb, depth, pose, self._stamp_ns)
        if self._check is not None and self._check.future.done():
            check, self._check = self._check, None
            check.apply(check.future.result())
        if self._saved_map is not None and self.navigator.memory.localised:
            self._lay_tries += 1
            if self._lay_tries % _LAY_RETRY_STEPS == 1:
                self._lay_saved_map()
        elif self._saved_map is not None:
            self._vote_tries += 1
            if self._vote_tries % _VOTE_CHECK_STEPS == 0:
                self._confirm_vote_by_map(pose)
        elif self._laid is not None:
            self._laid_steps += 1
            if self._laid_steps % _LAID_CHECK_STEPS == 0:
                self._check_laid_map()
        return out

    def _run_check(self, compute, apply) -> None:
        """Run `compute(run_map)` on this run's occupancy map and hand its result to `apply`: at once, or, with
        `map_checks_in_background`, in the worker thread on a copy of the map, applied at the first step after
        it finished (a check asked for while one is running is skipped; the schedule asks again)."""
        run = self.navigator.explorer.map
        if run is None:
            return
        if not self.options.map_checks_in_background:
            apply(compute(run))
            return
        if self._check is not None:
            return
        if self._checker is None:
            from concurrent.futures import ThreadPoolExecutor

            self._checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memnav-map-check")
        self._check = _MapCheck(self._checker.submit(compute, run.copy()), apply)

    def _check_laid_map(self) -> None:
        """The saved house map is laid: if this run's own walls (the map without what was laid) put
        _DOUBT_CONFLICT of them on the saved map's free floor through the laid transform, the lay was wrong (a
        look-alike room, a symmetric one turned round). Take the laid evidence back out of the map, retract the
        memory's relocalisation (`SceneGraphMemory.relocalise(retract=True)`), and wait to lay the house map
        again. The same test keeps a visit from extending the saved map at the end (`_save_map`); here it acts
        as soon as the walls show it."""
        laid = self._laid
        if laid is None:
            return

        def compute(run: OccupancyMap) -> bool:
            return _own_walls_contradict(run.without(laid.evidence), laid.house, laid.at)

        def apply(wrong: bool) -> None:
            nav, run = self.navigator, self.navigator.explorer.map
            if not wrong or self._laid is not laid or run is None:
                return
            run.add_evidence(laid.evidence, sign=-1)
            nav.explorer.map_changed()
            nav.memory.relocalise(retract=True)
            nav.map_became_unknown()
            self._wait_to_lay(laid.house)

        self._run_check(compute, apply)

    def _confirm_vote_by_map(self, pose: Pose2D) -> None:
        """The memory is still unlocalised, waiting for agreeing loop closures: fit this run's map to the saved
        house map at the corrections its candidates imply so far (`SceneGraphMemory.relocalisation_votes`), and
        where one fits well and contradicts nothing, localise the memory there (`set_pose`) and lay the map."""
        saved = self._saved_map
        tried: list[Pose2D] = []
        for correction, _ in self.navigator.memory.relocalisation_votes():
            if any(_same_pose(correction, t) for t in tried):
                continue                                 # the same pose as one fitted already
            tried.append(correction)
            if len(tried) == _VOTES_CHECKED:
                break
        if saved is None or not tried:
            return

        def compute(run: OccupancyMap) -> Pose2D | None:
            best: tuple[Pose2D, float] | None = None
            for correction in tried:
                aligned, score = run.align_to(saved, correction)
                if best is None or score > best[1]:
                    best = (aligned, score)
            if best is None or best[1] < _VOTE_MIN_SCORE:
                return None
            conflict = run.contradiction(saved, best[0], _DOUBT_MIN_CELLS, 0.0, 0.0)
            return None if conflict is None or conflict > _VOTE_MAX_CONFLICT else best[0]

        def apply(aligned: Pose2D | None) -> None:
            nav = self.navigator
            if aligned is None or self._saved_map is not saved or nav.memory.localised:
                return
            nav.memory.set_pose(pose, aligned.compose(pose))
            self._lay(aligned)

        self._run_check(compute, apply)

    def _lay_saved_map(self) -> None:
        """The memory of a rebooted robot has relocalised: lay the house map an earlier run saved (in the
        memory's frame) on this run's map, and treat the house as known. The memory's correction is only good
        near the places it was recognised at (a place's heading is known to about 15 deg), so it is refined by
        correlating this run's obstacles with the saved map's; below _LAY_MIN_SCORE the map is not laid yet and
        the next try comes _LAY_RETRY_STEPS steps later, with more of this run's map to match. If every transform
        near the correction puts this run's walls on the saved map's free floor (`OccupancyMap.contradiction`),
        the memory relocalised at a look-alike: the relocalisation is retracted
        (`SceneGraphMemory.relocalise(retract=True)`), and the memory relocalises again from what the robot
        sees next."""
        saved = self._saved_map
        guess = Pose2D(*self.navigator.memory.drift_correction)    # this odometry frame -> the memory's

        def compute(run: OccupancyMap) -> tuple[Pose2D, float, float | None]:
            return run.align_and_contradiction(saved, guess, _DOUBT_MIN_CELLS)

        def apply(fit: tuple[Pose2D, float, float | None]) -> None:
            nav = self.navigator
            if (self._saved_map is not saved or not nav.memory.localised
                    or not _same_pose(Pose2D(*nav.memory.drift_correction), guess)):
                return                                   # relocalised elsewhere meanwhile: the next try fits again
            aligned, score, conflict = fit
            if score < _LAY_MIN_SCORE:
                if conflict is not None and conflict >= _DOUBT_CONFLICT:
                    nav.memory.relocalise(retract=True)
                    self._lay_tries = 0
                return
            self._lay(aligned)

        self._run_check(compute, apply)

    def _lay(self, aligned: Pose2D) -> None:
        """Lay the saved house map on this run's through `aligned` (this odometry frame -> the saved map's)."""
        nav, saved = self.navigator, self._saved_map
        self._saved_map, self._laid_steps = None, 0
        self._laid = _LaidMap(saved, aligned, nav.explorer.map.evidence_from(saved, aligned))
        nav.explorer.map.add_evidence(self._laid.evidence)
        nav.explorer.map_changed()
        nav.map_became_known()

    def act(self, obs: Observation) -> Action:
        pose = obs.pose if self._odom_frame is None else self._odom_frame.compose(obs.pose)
        return self.step(obs.rgb, obs.depth, pose)[0]

    @property
    def mode(self) -> str:
        """The Navigator layer that chose the last action (`Navigator.mode`)."""
        return self.navigator.mode

    @property
    def spots_given_up(self) -> int:
        """Spots the Navigator's judging layers gave up this episode (`Navigator.spots_given_up`)."""
        return self.navigator.spots_given_up

    def step_info(self) -> dict:
        """What the last decision rested on, for `memnav eval --trace`: the layer, the view's similarity to the goal
        photo, its verification score and belief, the RGB-D goal estimate (odometry frame) and the candidate being
        checked (the map frame of the episode's first pose, or the kept house map's)."""
        nav, last = self.navigator, self.navigator.last
        est, cand = nav.goal_estimate, nav._candidate
        return {"mode": nav.mode,
                "similarity": None if last is None else round(float(last.similarity), 4),
                "verification": None if last is None else round(float(last.verification), 4),
                "belief": None if last is None else round(float(last.belief), 4),
                "goal_estimate": None if est is None else [round(est.x_m, 3), round(est.y_m, 3)],
                "candidate": None if cand is None else [round(cand.pose.x_m, 3), round(cand.pose.y_m, 3)]}

    def _open_memory(self, path: Path, config: SceneGraphConfig) -> SceneGraphMemory:
        """The house's memory database; when it cannot be written (a new file on a full disk, a folder without
        write permission) and the navigator goes on in RAM after write failures, a memory in RAM only that says
        why (`persist_error`). A file that is refused (damaged, another program's, a newer schema) still raises."""
        try:
            return SceneGraphMemory.open(path, config)
        except (CorruptStoreError, SchemaVersionError):
            raise
        except MemoryStoreError as err:
            if not self.navigator.cfg.memory_in_ram_on_write_failure:
                raise
            memory = SceneGraphMemory(replace(config, db_path=None))
            memory.persist_error = str(err)
            return memory

    @property
    def storage_error(self) -> str | None:
        """Why this run's long-term memory or occupancy map is no longer saved (a full disk; they go on in RAM), or
        None."""
        memory = self.navigator.memory
        return (memory.persist_error if memory is not None else None) or self._map_error

    @property
    def house_map(self) -> str:
        """Where a rebooted run stands with the house map an earlier run saved: "laid" on this run's map,
        "waiting" to be laid (the memory has not relocalised, or no fit was good enough yet), or "none" (no saved
        map to lay: odometry persists, the memory is new, or there is no lifelong memory)."""
        return "laid" if self._laid is not None else "waiting" if self._saved_map is not None else "none"

    @property
    def stop_belief(self) -> float | None:
        """The calibrated goal belief of the last step's view (`Navigator.last.belief`), None before any step."""
        last = self.navigator.last
        return None if last is None else float(last.belief)

    def _map_path(self, place_key: str) -> Path:
        assert self.options.lifelong_dir is not None
        return lifelong_map_path(self.options.lifelong_dir, place_key)

    def _save_map(self) -> None:
        """Lifelong mode: write the current house's occupancy map beside its memory database, when this run's
        odometry frame is the memory's (odometry persists, or this run created the memory). A rebooted run
        that laid the saved map only extends it: what it mapped itself where the saved map has no evidence is
        added through the fitted transform, and the cells the saved map had seen are left as they were.
        (Adding everything, the small misalignments of many runs piled up on the same walls: they thickened
        and doorways closed; README "Across reboots".) A rebooted run that never laid it, or whose own walls
        contradict it where both saw (the lay was wrong after all), writes nothing."""
        if self._scene is None or self.options.lifelong_dir is None or not self.navigator.cfg.persistent_map:
            return
        try:
            self._write_map()
        except OSError as err:   # a full disk: the map file keeps its last whole version (written atomically)
            if not self.navigator.cfg.memory_in_ram_on_write_failure:
                raise
            self._map_error = f"occupancy map not saved: {err}"

    def _write_map(self) -> None:
        path, run = self._map_path(self._scene), self.navigator.explorer.map
        if self._map_in_memory_frame:
            self.navigator.explorer.save_map(path)
        elif self._laid is not None and run is not None:
            laid = self._laid
            own = run.without(laid.evidence)             # what this run saw itself
            if _own_walls_contradict(own, laid.house, laid.at):
                return
            # the house map as loaded from `path` when this run began, extended in a copy: the laid check keeps
            # comparing with it, and one process may save at every goal (the policy node, one memory_key)
            house, at = laid.house.copy(), laid.at
            house.add_unseen(house.evidence_from(own, Pose2D(0.0, 0.0, 0.0).relative_to(at)))
            house.save(path)

    def close(self) -> None:
        self._check = None
        if self._checker is not None:
            self._checker.shutdown(wait=True, cancel_futures=True)
            self._checker = None
        self._save_map()
        if self.navigator.memory is not None:
            self.navigator.memory.close()
