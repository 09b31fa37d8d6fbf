"""`memnav eval`: run agents on ImageNav episodes and report Success, SPL, SoftSPL (habitat-lab definitions)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from memnav.cli import add_camera_arguments, camera_options
from memnav.core.files import json_safe, replace_files
from memnav.core.navigator import NavigatorConfig
from memnav.core.types import Action, EpisodeStatus
from memnav.eval.agents import AGENTS, LEARNED_AGENTS, Agent, make_agent
from memnav.eval.eval_report import EpisodeTrace, FloorPlan, RunTraces, episodes_run_by_every_agent, thumbnail
from memnav.eval.exploring_defaults import (
    EXPLORING_AGREEING_SIMILARITY,
    EXPLORING_CANDIDATE_COLOUR_FIT,
    EXPLORING_CANDIDATE_MIN_COLOUR,
    EXPLORING_CANDIDATE_NEAR_M,
    EXPLORING_CANDIDATE_POOL,
    EXPLORING_COLOUR_POOL,
    EXPLORING_COLOUR_WEIGHT,
    EXPLORING_CORROBORATED_SIMILARITY,
    EXPLORING_FRONTIER_COLOUR_WEIGHT,
    EXPLORING_FRONTIER_LOOK_TURNS,
    EXPLORING_KNOWN_CORROBORATED_SIMILARITY,
    EXPLORING_MAP_PIXEL_SPACING_DEG,
    EXPLORING_MAP_RANGE_M,
    EXPLORING_SWEEP_PRIOR_WEIGHT,
    ExploringTuning,
)
from memnav.eval.learned_agents import MODELS, LearnedAgentOptions
from memnav.paths import check_output_dir, check_output_file, earlier_memories
from memnav.sim.base import OBJECT_ORDER_MAX_TRIANGLES, ODOMETRY_ORIGINS, RENDERERS, SimConfig
from memnav.sim.dataset import default_data_dir
from memnav.sim.env import ImageNavEnv
from memnav.sim.metrics import (
    EpisodeResult,
    PathByLayer,
    SkippedEpisode,
    aggregate,
    lifelong_known_house_spl,
    lifelong_spl_by_visit,
    lifelong_summary,
    path_summary,
    results_document,
)


def add_data_arguments(parser: argparse.ArgumentParser, run_options: bool = True) -> None:
    """Options shared by every command that reads episodes (`run_options`: also the backend, step limit and
    seed of commands that run agents in them)."""
    parser.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                        help="dataset: memnav's generated set (DIR/episodes/{split}.json.gz), Habitat's split "
                             "layout (DIR/{split}/{split}.json.gz + content/*.json.gz) or one .json.gz file "
                             "(env MEMNAV_DATA sets the default)")
    parser.add_argument("--scenes-dir", type=Path, default=None, metavar="DIR",
                        help="where to look for the scene files named by scene_id "
                             "(default: beside the data)%(default).0s")
    parser.add_argument("--split", default="test", help="dataset split: train, val or test")
    parser.add_argument("--episodes", type=int, default=None, metavar="N",
                        help="take the first N episodes of the split (default: all)%(default).0s")
    parser.add_argument("--episode-ids", default=None, metavar="ID,ID,...",
                        help="only these episodes of the split, in the split's order (e.g. the failures a report "
                             "lists; --episodes and --spread then choose among them)")
    parser.add_argument("--spread", action="store_true",
                        help="with --episodes N: take the N episodes round-robin over the split's houses "
                             "instead of the first N (a fair sample when N is small)")
    if run_options:
        parser.add_argument("--backend", choices=("embedded", "habitat"), default="embedded",
                            help="simulator: the embedded CPU ray caster, or habitat-sim (installed with conda)")
    parser.add_argument("--renderer", choices=RENDERERS, default="auto",
                        help="embedded simulator's ray caster (SimConfig.renderer): auto = object-order up to "
                             f"{OBJECT_ORDER_MAX_TRIANGLES:,} triangles, open3d's Embree BVH above; bvh reproduces "
                             "the renders the shipped models were trained on and README's agent figures were "
                             "measured on")
    if run_options:
        parser.add_argument("--max-steps", type=int, default=500, metavar="STEPS",
                            help="step limit per episode, actions (Habitat ImageNav uses 500)")
        add_camera_arguments(parser, "that views and goal photos are rendered with; agents are told it as the "
                                     "policy node is by a robot's camera_info, camera_height_m, "
                                     "camera_forward_m and camera_pitch_deg")
        parser.add_argument("--camera-mount-untold", action="store_true",
                            help="with --camera-forward-m or --camera-pitch-deg: the exploring agents are not told "
                                 "them and map depth as if the camera sat on the turning axis, level (what a policy "
                                 "node whose camera_forward_m and camera_pitch_deg are left at 0 does)")
        parser.add_argument("--seed", type=int, default=0, help="random seed (agents, odometry noise)")


DEFAULT_ENCODER = MODELS / "encoder.pt"
DEFAULT_CALIBRATION = MODELS / "stop_calibration.json"


def add_model_arguments(parser: argparse.ArgumentParser, whose: str) -> None:
    """--encoder and --calibration: the model files of `whose` agents (e.g. "the learned agents"), the shipped
    ones by default (DEFAULT_ENCODER, DEFAULT_CALIBRATION); `model_name` names them in a results file;
    `check_model_files` refuses missing ones."""
    parser.add_argument("--encoder", type=Path, default=DEFAULT_ENCODER, metavar="PATH",
                        help=f"encoder checkpoint of {whose}")
    parser.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION, metavar="PATH",
                        help=f"stop-belief calibration of {whose}")


def check_model_files(args: argparse.Namespace) -> None:
    """A ValueError naming --encoder or --calibration when its file does not exist."""
    for name in ("encoder", "calibration"):
        if not Path(getattr(args, name)).is_file():
            raise ValueError(f"--{name} {getattr(args, name)}: no such file")


def add_map_pixel_spacing_argument(parser: argparse.ArgumentParser) -> None:
    """--map-pixel-spacing-deg (ExploringTuning.map_pixel_spacing_deg), for `memnav eval` and `memnav bench agent`."""
    parser.add_argument("--map-pixel-spacing-deg", type=float, default=EXPLORING_MAP_PIXEL_SPACING_DEG, metavar="DEG",
                        help="memnav agents that explore: the occupancy map integrates a frame's pixels at least DEG "
                             "apart (0.7: every 6th pixel of a 69 deg 640 x 360 frame, 7 ms less a step; the "
                             "simulator's 128 x 128 view keeps every 2nd); 0 = every 2nd pixel at any size "
                             "(NavigatorConfig.map_pixel_spacing_deg; default: %(default)s)")


def model_name(path: Path) -> str:
    """A model file as a results file names it: "models/NAME" for the package's shipped models, else as given."""
    try:
        return f"models/{Path(path).resolve().relative_to(MODELS.resolve())}"
    except ValueError:
        return str(path)


def exploring_options_changed(args: argparse.Namespace) -> dict:
    """The exploring agents' options (ExploringTuning) that `args` set to other than their defaults, by field name
    ({} = all defaults): with the camera settings, what a results file needs to say how it was run."""
    defaults = ExploringTuning.values_of(ExploringTuning())
    return {name: value for name, value in ExploringTuning.values_of(args).items() if value != defaults[name]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", default=None, choices=AGENTS,
                        help="agent to evaluate (learned agents read models/policy_<agent>.pt; default: oracle)")
    parser.add_argument("--compare", default=None, metavar="A,B,...",
                        help="evaluate several agents on the same episodes and print one table, e.g. "
                             "random,gru,episodic,memnav,oracle (memnav-fixed = memnav with the fixed-threshold "
                             "stop instead of the value-of-information stop)")
    add_data_arguments(parser)
    parser.add_argument("--lifelong", action="store_true",
                        help="keep the long-term memory across consecutive episodes in the same house, in one "
                             "SQLite database per house under --memory-dir; reports SPL against visit index")
    parser.add_argument("--lifelong-visits", type=int, default=0, metavar="V",
                        help="with --lifelong: start each house's memory afresh every V visits. A house's episodes, "
                             "in order, then form sequences of V visits, each with memory folders of its own "
                             "(--memory-dir/AGENT/seqNNN), and lifelong_spl_by_visit averages visit k over every "
                             "sequence (500 test episodes, V 5: 100 fifth visits instead of one per house); 0 = one "
                             "sequence per house (default: %(default)s)")
    parser.add_argument("--odometry-restarts", action="store_true",
                        help="with --lifelong: a robot that reboots before every goal; each episode reopens the "
                             "house's memory (which must relocalise from loop closures) with odometry in a new "
                             "random frame, and no occupancy map is carried over between episodes")
    parser.add_argument("--odometry-origin", choices=ODOMETRY_ORIGINS, default="house",
                        help="where the simulator's odometry starts each episode: house (the house frame) or start "
                             "(zero at the start pose, as the sim bridge with sim.odometry_origin start); with "
                             "--odometry-restarts, start takes that frame as the rebooted visit's instead of a "
                             "random one, as the policy node over DDS sees it (default: %(default)s)")
    parser.add_argument("--map-checks-in-background", action="store_true",
                        help="with --odometry-restarts: check the visit's map against the saved house map in a "
                             "worker thread, as the policy node does in real time, instead of inside the step "
                             "(no step waits for a check, but runs are no longer exactly reproducible)")
    parser.add_argument("--memory-dir", type=Path, default=None, metavar="DIR",
                        help="lifelong memory databases (default: a fresh temporary folder, so a run starts "
                             "with empty memories; give a folder to continue from an earlier run)%(default).0s")
    parser.add_argument("--no-explore", action="store_true",
                        help="memnav agents: no frontier exploration of the robot's own occupancy map and no "
                             "driving to a goal localized from RGB-D matches (the policy searches alone)")
    parser.add_argument("--no-homing", action="store_true",
                        help="memnav agents: leave every move to the policy (no scene-graph homing to a "
                             "remembered place that matches the goal photo)")
    parser.add_argument("--explore-homing", action="store_true",
                        help="memnav agents that explore: home over the scene graph too (off by default: the "
                             "occupancy map's goal candidates find remembered goals, and homing drove to "
                             "look-alike places first; README \"Homing\")")
    parser.add_argument("--candidate-prior", action="store_true",
                        help=f"memnav agents: of the {EXPLORING_CANDIDATE_POOL} best scan-matched goal candidates "
                             "visit first the one whose "
                             "surroundings the long-term memory remembers as most like the goal photo "
                             "(NavigatorConfig.candidate_prior; default: the best scan fit first)")
    parser.add_argument("--homing-via-map", action="store_true",
                        help="memnav agents: reach a remembered place that matches the goal photo over the "
                             "occupancy map and judge it with a look-around (NavigatorConfig.homing_via_map; "
                             "default: a route over the scene graph's edges)")
    parser.add_argument("--candidate-near-m", type=float, default=EXPLORING_CANDIDATE_NEAR_M, metavar="M",
                        help="memnav agents: while exploring, judge a scan-matched goal candidate within this "
                             f"straight-line distance already when its fit is moderate (score >= "
                             f"{NavigatorConfig.candidate_near_min_score} instead of "
                             f"{NavigatorConfig.candidate_min_score}), since a nearby check costs little path; "
                             "meters, 0 = off "
                             "(NavigatorConfig.candidate_near_m; default: %(default)s)")
    parser.add_argument("--colour-weight", type=float, default=EXPLORING_COLOUR_WEIGHT, metavar="W",
                        help="memnav agents: take scan-matched goal candidates in the order of scan score + W x "
                             "colour fit (the goal photo's colours against the colours the occupancy map kept "
                             f"of each surface), from the {EXPLORING_COLOUR_POOL} best scan fits; 0 = the scan "
                             "score alone, from the 4 best (NavigatorConfig.colour_weight; default: %(default)s)")
    parser.add_argument("--candidate-min-colour", type=float, default=EXPLORING_CANDIDATE_MIN_COLOUR, metavar="C",
                        help="memnav agents: skip scan-matched goal candidates whose colour fit (0-1) is below C; "
                             "0 = off (NavigatorConfig.candidate_min_colour; default: %(default)s)")
    parser.add_argument("--candidate-colour-fit", type=float, default=EXPLORING_CANDIDATE_COLOUR_FIT, metavar="F",
                        help="memnav agents: while exploring, judge a scan-matched goal candidate whose colour fit "
                             "is at least F already at a scan score of "
                             f"{NavigatorConfig.candidate_colour_min_score} instead of "
                             f"{NavigatorConfig.candidate_min_score}; 0 = off "
                             "(NavigatorConfig.candidate_colour_fit; default: %(default)s)")
    parser.add_argument("--corroborated-similarity", type=float, default=EXPLORING_CORROBORATED_SIMILARITY,
                        metavar="S",
                        help="memnav agents that explore: a look-around at a candidate or goal estimate whose best "
                             f"similarity to the goal photo is at least S (below the "
                             f"{NavigatorConfig.candidate_stop_similarity} that confirms a spot alone) confirms "
                             "it when an RGB-D goal estimate lies within "
                             f"{NavigatorConfig.corroborate_radius_m} m; 0 = off "
                             "(NavigatorConfig.corroborated_stop_similarity; default: %(default)s)")
    parser.add_argument("--known-corroborated-similarity", type=float,
                        default=EXPLORING_KNOWN_CORROBORATED_SIMILARITY, metavar="S",
                        help="memnav agents that explore, in a known house (--lifelong, from a house's second "
                             "visit on, when the occupancy map is kept): the --corroborated-similarity bar there; "
                             "0 = the same bar as on a first visit "
                             "(NavigatorConfig.known_corroborated_stop_similarity; default: %(default)s)")
    parser.add_argument("--sweep-prior-weight", type=float, default=EXPLORING_SWEEP_PRIOR_WEIGHT, metavar="M",
                        help="memnav agents that explore, in a known house (--lifelong): once nothing is left to "
                             "explore or match, sweep first the positions within "
                             f"{NavigatorConfig.sweep_prior_radius_m} m of remembered places that look like the "
                             f"goal photo, M meters nearer per unit of similarity above "
                             f"{NavigatorConfig.sweep_prior_floor}; 0 = nearest first "
                             "(NavigatorConfig.sweep_prior_weight; default: %(default)s)")
    parser.add_argument("--frontier-look-turns", type=int, default=EXPLORING_FRONTIER_LOOK_TURNS, metavar="N",
                        help="memnav agents that explore: on reaching a frontier, turn N times on the spot "
                             "(11 = a full look around; turns add no path length) before choosing the next one, "
                             f"unless they looked around within {NavigatorConfig.frontier_look_spacing_m} m "
                             "already; 0 = off (NavigatorConfig.frontier_look_turns; default: %(default)s)")
    parser.add_argument("--map-range-m", type=float, default=EXPLORING_MAP_RANGE_M, metavar="M",
                        help="memnav agents that explore: depth readings up to M meters go into the occupancy map "
                             "(the simulator's depth is clean to 10 m; a real sensor's far readings are noisier) "
                             "(NavigatorConfig.map_range_m; default: %(default)s)")
    parser.add_argument("--frontier-colour-weight", type=float, default=EXPLORING_FRONTIER_COLOUR_WEIGHT, metavar="M",
                        help="memnav agents that explore: a frontier near mapped surfaces in the goal photo's colours "
                             "counts up to M meters nearer (0 = nearest frontier first) "
                             "(NavigatorConfig.frontier_colour_weight; default: %(default)s)")
    parser.add_argument("--keep-unseen-obstacles", action="store_true",
                        help="memnav agents that explore: free space marked below the camera's view (near the "
                             "robot, where its lowest pixel is still above obstacle height) does not clear obstacles "
                             "the camera saw there, so low furniture stays on the map as the robot nears it "
                             "(NavigatorConfig.keep_unseen_obstacles; off by default, on in config/robot.yaml)")
    add_map_pixel_spacing_argument(parser)
    parser.add_argument("--agreeing-similarity", type=float, default=EXPLORING_AGREEING_SIMILARITY, metavar="S",
                        help="memnav agents that explore: a look-around confirms the spot at this similarity to the "
                             "goal photo when an RGB-D goal estimate and a pending scan-matched goal candidate both "
                             "lie within 0.5 m of it, two geometric cues agreeing (0 = off) "
                             "(NavigatorConfig.agreeing_stop_similarity; default: %(default)s)")
    parser.add_argument("--policy-dir", type=Path, default=MODELS, metavar="DIR",
                        help="folder with the learned agents' policy_<agent>.pt checkpoints")
    add_model_arguments(parser, "the learned agents")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="write summary + per-episode results to this JSON file; - writes them to stdout (the "
                             "table then goes to stderr: `memnav eval ... --json - | jq .spl`)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="run the episodes in N processes (0 = one per CPU core; each takes about 0.7 GB with "
                             "the memnav agent). Each house's episodes keep their order (with --lifelong a "
                             "house, or with --lifelong-visits a sequence, is one process's job), and the results "
                             "equal a "
                             "serial run's except where a random stream is split: the random agent's actions and "
                             "odometry noise")
    parser.add_argument("--trace", type=Path, default=None, metavar="DIR",
                        help="write a per-step log of every episode to DIR/<agent>/<house>__<episode id>.jsonl: "
                             "action, position, geodesic distance left and, for the learned agents, the layer "
                             "that decided, similarity, belief, goal estimate and candidate")
    parser.add_argument("--report", type=Path, default=None, metavar="DIR",
                        help="also write an HTML report with figures into DIR: intervals, paired differences "
                             "between agents, results by distance, how episodes ended, lifelong SPL by visit, "
                             "the stop belief's reliability, top-down paths and last views of the worst episodes "
                             "(`memnav eval-report` makes the same from a --json file, without the paths and views)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


Outcome = EpisodeResult | SkippedEpisode
"""What running an agent on an episode gives: its result, or the record of an episode that could not be run."""


def episode_results(outcomes: list[Outcome]) -> list[EpisodeResult]:
    """The results among `outcomes` (the episodes that were run), in their order."""
    return [o for o in outcomes if isinstance(o, EpisodeResult)]


def skipped_episodes(outcomes: list[Outcome]) -> list[SkippedEpisode]:
    """The episodes among `outcomes` that could not be run, in their order."""
    return [o for o in outcomes if isinstance(o, SkippedEpisode)]


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during an evaluation, with the episodes that finished before it (in episode order: results,
    and the records of episodes skipped, `SkippedEpisode`) and their traces, so that `memnav eval` still prints,
    writes and reports them (marked interrupted)."""

    def __init__(self, results: list[Outcome], traces: RunTraces | None = None) -> None:
        super().__init__(f"interrupted after {len(results)} finished episodes")
        self.results = results
        self.traces = traces

    def __reduce__(self):   # a worker process's Ctrl-C travels back to the pool as this
        return EvalInterrupted, (self.results, self.traces)


def unrunnable_reason(env: ImageNavEnv, episode, err: ValueError) -> str | None:
    """Why `episode` cannot be run at all, when `env.reset(episode)` raised `err` for that (its goals are all
    unreachable from its start, or its start or a goal is off the scene's navigable floor, as either backend
    reports it), else None (`err` is another error, to be raised)."""
    from memnav.sim.base import OffFloorError, StartNotNavigableError

    if isinstance(err, (StartNotNavigableError, OffFloorError)):
        return str(err)
    if env.episode is episode:   # the simulator took the episode; the goals' distances were measured from its start
        start = env.sim.agent_state.position
        if not math.isfinite(min(env.sim.geodesic_distance(start, g.position) for g in episode.goals)):
            return str(err)
    return None


def run_episodes(agent: Agent, episodes: list, config: SimConfig, backend: str = "embedded",
                 progress: bool = True, desc: str = "eval", traces: RunTraces | None = None,
                 trace_dir: Path | None = None) -> list[Outcome]:
    """Run `agent` on each episode, returning one outcome per episode: its `EpisodeResult`, or for an episode
    that cannot be run (`unrunnable_reason`: no navigable path from its start to a goal, a start or goal off the
    navigable floor) a `SkippedEpisode` with the reason, after a warning naming it; the agent is not told of
    a skipped episode, and the run goes on.

    `traces`, when given, collects each run episode's path (under the agent name `desc`) and each scene's floor
    plan for the report's path figure. `trace_dir`, when given, gets one JSON-lines file per episode
    (`trace_dir/<agent>/<house>__<episode id>.jsonl`, see `StepLog`).

    Raises:
        EvalInterrupted: on Ctrl-C, with the episodes finished before it.
    """
    from tqdm import tqdm

    from memnav.sim.factory import make_simulator

    sim = make_simulator(backend, config, None)
    env = ImageNavEnv(sim)
    results: list[Outcome] = []
    bar = tqdm(episodes, desc=desc, unit="ep", disable=not progress, file=sys.stderr)
    storage_warned = False
    try:
        for ep in bar:
            try:
                obs = env.reset(ep)
            except ValueError as err:
                reason = unrunnable_reason(env, ep, err)
                if reason is None:
                    raise
                results.append(SkippedEpisode(str(ep.episode_id), ep.scene_id, reason))
                print(f"memnav eval: warning: {desc}: {reason}; the episode is skipped (not run, and left out of "
                      "the means; skipped_episodes in the results)", file=sys.stderr, flush=True)
                continue
            goal = env.goal_observation
            assert goal is not None
            agent.reset(ep, goal, sim)
            path = [sim.agent_state.position] if traces is not None else None
            log = StepLog(trace_dir, desc, ep, sim) if trace_dir is not None else None
            account = PathByLayer() if hasattr(agent, "mode") else None
            try:
                while not env.done:
                    action = agent.act(obs)
                    before = sim.agent_state.position
                    if account is not None:
                        account.given_up(getattr(agent, "spots_given_up", 0))
                    obs = env.step(action)
                    if account is not None:
                        account.moved(agent.mode, float(np.linalg.norm(sim.agent_state.position - before)))
                    if path is not None:
                        path.append(sim.agent_state.position)
                    if log is not None:
                        log.step(env, agent, action)
            finally:
                if log is not None:
                    log.close()
            result = env.result()
            layer = getattr(agent, "mode", None)   # agents with decision layers say which one ended it
            if layer:
                result = replace(result, ended_by=layer)
            if account is not None:
                result = replace(result, **account.result_fields())
            belief = getattr(agent, "stop_belief", None)   # agents with a calibrated goal belief
            if belief is not None and result.status is EpisodeStatus.STOPPED:
                result = replace(result, stop_belief=float(belief))
            results.append(result)
            if traces is not None and path is not None:
                _keep_trace(traces, sim, desc, ep, path, goal.rgb, obs.rgb)
            summary = aggregate(episode_results(results))
            bar.set_postfix(success=f"{summary['success']:.2f}", spl=f"{summary['spl']:.2f}")
            lost = getattr(agent, "storage_error", None)   # lifelong: a full disk under --memory-dir
            if lost and not storage_warned:
                storage_warned = True
                print(f"memnav eval: warning: {desc}: from episode {ep.episode_id} on, {lost}; the memory goes on "
                      "in RAM, so what later visits remember is not saved", file=sys.stderr, flush=True)
    except EvalInterrupted:
        raise
    except KeyboardInterrupt as err:
        raise EvalInterrupted(results, traces) from err
    finally:
        sim.close()
    return results


class StepLog:
    """One episode's per-step log (`memnav eval --trace DIR`): JSON lines, the first {"episode": {...}} (ids,
    start and goal in Habitat world x, z; of several goals the one nearest the start, which the metrics and
    distance_to_goal_m measure to), then one {"step": ...} per action with the action, the agent's
    position and heading afterwards, the geodesic distance left, and what the agent says its decision rested on
    (`step_info()` of the learned agents: layer, similarity, verification, belief, goal estimate, candidate)."""

    def __init__(self, trace_dir: Path, agent: str, episode, sim) -> None:
        folder = Path(trace_dir) / agent
        folder.mkdir(parents=True, exist_ok=True)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{episode.scene_name}__"
                       f"{episode.episode_id}")
        self.path = folder / f"{safe}.jsonl"
        self._file = self.path.open("w")
        start = sim.agent_state.position
        goal = np.asarray(episode.nearest_goal(start, sim.geodesic_distance).position, dtype=np.float64)
        self._write({"episode": {"episode_id": str(episode.episode_id), "scene_id": episode.scene_id, "agent": agent,
                                 "start_xz": [round(float(start[0]), 3), round(float(start[2]), 3)],
                                 "goal_xz": [round(float(goal[0]), 3), round(float(goal[2]), 3)]}})

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")

    def step(self, env: ImageNavEnv, agent: Agent, action) -> None:
        state = env.sim.agent_state
        info = agent.step_info() if hasattr(agent, "step_info") else {}
        self._write({"step": env.steps, "action": Action.parse(action).name,
                     "x_m": round(float(state.position[0]), 3), "z_m": round(float(state.position[2]), 3),
                     "yaw_rad": round(float(state.yaw_rad), 4),
                     "distance_to_goal_m": round(env.distance_to_goal(), 3), **info})

    def close(self) -> None:
        self._file.close()


def _keep_trace(traces: RunTraces, sim, agent: str, episode, path: list, goal_rgb, final_rgb) -> None:
    """Add an episode's path (x, z), goal (of several, the one nearest the start, which SPL measures against),
    shortest path, goal photo and last view (thumbnails), and its scene's floor plan once."""
    xyz = np.asarray(path, dtype=np.float32)
    goal = np.asarray(episode.nearest_goal(np.asarray(path[0], dtype=np.float64), sim.geodesic_distance).position,
                      dtype=np.float64)
    try:
        shortest = np.asarray(sim.shortest_path(xyz[0].astype(np.float64), goal), dtype=np.float32)
    except (ValueError, RuntimeError):
        shortest = np.zeros((0, 3), np.float32)
    shortest = shortest[:, [0, 2]] if shortest.ndim == 2 and len(shortest) else np.zeros((0, 2), np.float32)
    traces.episodes.append(EpisodeTrace(agent, str(episode.episode_id), episode.scene_id, xyz[:, [0, 2]],
                                        (float(goal[0]), float(goal[2])), shortest, thumbnail(goal_rgb),
                                        thumbnail(final_rgb)))
    grid = getattr(sim, "grid", None)   # the embedded simulator's navigable grid; habitat-sim has none here
    if grid is not None and episode.scene_id not in traces.floor_plans:
        traces.floor_plans[episode.scene_id] = FloorPlan(grid.navigable.copy(), (float(grid.origin[0]),
                                                         float(grid.origin[1])), float(grid.config.cell_m))


@dataclass
class AgentJob:
    """One agent on a list of episodes: what a worker process needs to build the agent and run them.

    Attributes:
        name: agent name (`AGENTS`).
        options: the learned agents' options (ignored by the others).
        seed: agent seed (the random agent's actions).
        config: simulator configuration.
        backend: "embedded" or "habitat".
        episodes: the episodes, in the order they are run.
        record: keep each episode's path for the report.
        torch_threads: torch threads in a worker process (0 = leave torch's default).
        trace_dir: per-step logs go here (`StepLog`), or None.
    """

    name: str
    options: LearnedAgentOptions
    seed: int
    config: SimConfig
    backend: str
    episodes: list
    record: bool = False
    torch_threads: int = 0
    trace_dir: Path | None = None


def run_job(job: AgentJob, encoder=None, progress: bool = False) -> tuple[list[Outcome], RunTraces | None]:
    """Build the job's agent, run its episodes in order, close the agent (lifelong: its maps are saved); one
    outcome per episode (`run_episodes`)."""
    if job.torch_threads > 0:
        import torch

        from memnav.threads import set_blas_threads

        torch.set_num_threads(job.torch_threads)
        set_blas_threads(job.torch_threads)
    traces = RunTraces() if job.record else None
    agent = make_agent(job.name, seed=job.seed, options=job.options, encoder=encoder)
    try:
        results = run_episodes(agent, job.episodes, job.config, job.backend, progress=progress, desc=job.name,
                               traces=traces, trace_dir=job.trace_dir)
    finally:
        close = getattr(agent, "close", None)
        if close is not None:
            close()
    return results, traces


def run_sequences(job: AgentJob, visits: int, encoder=None,
                  progress: bool = False) -> tuple[list[Outcome], RunTraces | None]:
    """`run_job` in this process for each run of `visits` consecutive visits of a house (`split_job`), each with
    an agent and memories of its own; results in episode order."""
    results: list[Outcome | None] = [None] * len(job.episodes)
    traces = RunTraces() if job.record else None
    for idx, piece in split_job(job, 1, lifelong=True, visits=visits):
        try:
            part, kept = run_job(piece, encoder=encoder, progress=progress)
        except KeyboardInterrupt as err:   # keep the sequences finished before, and this one's finished visits
            part, kept = (err.results, err.traces) if isinstance(err, EvalInterrupted) else ([], None)
            _place(results, idx, part, traces, kept)
            raise EvalInterrupted([r for r in results if r is not None], traces) from err
        _place(results, idx, part, traces, kept)
    return [r for r in results if r is not None], traces


def _place(results: list[Outcome | None], idx: list[int], part: list[Outcome],
           traces: RunTraces | None, kept: RunTraces | None) -> None:
    """Put a piece's results at its episodes' places (`split_job`'s indices) and take in its traces."""
    for i, r in zip(idx, part):
        results[i] = r
    if traces is not None:
        traces.add(kept)


def split_job(job: AgentJob, workers: int, lifelong: bool, visits: int = 0) -> list[tuple[list[int], AgentJob]]:
    """Cut a job into pieces for `workers` processes, each with the indices of its episodes in `job.episodes`.

    A house's episodes stay in their order: lifelong, each house is one piece (its memory and map pass from
    visit to visit), or with `visits` > 0 each run of `visits` consecutive episodes of a house is one, its
    memory in a folder of its own (`sequence_memory_dir`); otherwise a house's run is cut into consecutive
    pieces, about four per worker in all, so that a worker loads few scenes and the pieces even out.
    """
    by_scene: dict[str, list[int]] = {}
    for i, ep in enumerate(job.episodes):
        by_scene.setdefault(ep.scene_id, []).append(i)
    if lifelong and visits > 0:
        base = job.options.lifelong_dir
        return [(idx[k:k + visits], replace(job, episodes=[job.episodes[i] for i in idx[k:k + visits]],
                                            options=replace(job.options,
                                                            lifelong_dir=sequence_memory_dir(base, k // visits))))
                for idx in by_scene.values() for k in range(0, len(idx), visits)]
    size = len(job.episodes) if lifelong else max(1, math.ceil(len(job.episodes) / (4 * workers)))
    pieces = [idx[k:k + size] for idx in by_scene.values() for k in range(0, len(idx), size)]
    return [(idx, replace(job, episodes=[job.episodes[i] for i in idx])) for idx in pieces]


def sequence_memory_dir(memory_dir: Path, sequence: int) -> Path:
    """Where the memories of each house's `sequence`-th run of visits live with --lifelong-visits."""
    return Path(memory_dir) / f"seq{sequence:03d}"


_THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS")


def run_parallel(job: AgentJob, workers: int, lifelong: bool, progress: bool = True,
                 visits: int = 0) -> tuple[list[Outcome], RunTraces | None]:
    """`run_job` over `workers` processes (spawned, so torch starts clean in each); results in episode order.

    Raises:
        EvalInterrupted: on Ctrl-C, with the results of the pieces finished before it (a piece still running,
            with --lifelong a whole house, is lost).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    threads = max(1, (os.cpu_count() or 1) // workers)
    pieces = split_job(replace(job, torch_threads=threads), workers, lifelong, visits)
    results: list[Outcome | None] = [None] * len(job.episodes)
    traces = RunTraces() if job.record else None
    done: list[EpisodeResult] = []
    bar = tqdm(total=len(job.episodes), desc=f"{job.name} ({workers} workers)", unit="ep", disable=not progress,
               file=sys.stderr)
    # numba sizes its thread pool when imported, so the workers learn their share from the environment they
    # start with: with a pool per core in every worker, the idle pool threads spun and took ~40% of a core
    # each, and 2 workers on 2 cores were no faster than one process
    saved = {k: os.environ.get(k) for k in _THREAD_VARIABLES}
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        os.environ.update({k: str(threads) for k in _THREAD_VARIABLES})
        try:   # the workers start inside submit()
            futures = {pool.submit(run_job, piece): idx for idx, piece in pieces}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            for fut in as_completed(futures):
                part, kept = fut.result()
                for i, r in zip(futures[fut], part):
                    results[i] = r
                done += episode_results(part)
                if traces is not None:
                    traces.add(kept)
                summary = aggregate(done)
                bar.update(len(part))
                bar.set_postfix(success=f"{summary['success']:.2f}", spl=f"{summary['spl']:.2f}")
        except BaseException as err:   # Ctrl-C, SIGTERM or a failed piece: stop the workers now, not after their pieces
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            if isinstance(err, KeyboardInterrupt):
                raise EvalInterrupted([r for r in results if r is not None], traces) from err
            raise
        finally:
            bar.close()
    return [r for r in results if r is not None], traces


def format_table(rows: dict[str, dict]) -> str:
    """A fixed-width table of per-agent summaries."""
    cols = ("episodes", "success", "spl", "soft_spl", "mean_steps", "distance_to_goal")
    head = f"{'agent':<14}" + "".join(f"{c:>18}" for c in cols)
    lines = [head, "-" * len(head)]
    for name, s in rows.items():
        cells = "".join(f"{s[c]:>18d}" if isinstance(s[c], int) else f"{s[c]:>18.3f}" for c in cols)
        lines.append(f"{name:<14}{cells}")
    return "\n".join(lines)


def load_split(args: argparse.Namespace) -> list:
    from memnav.sim.episodes import load_episodes

    if args.episodes is not None and args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    spread = getattr(args, "spread", False) and args.episodes is not None
    wanted = [s.strip() for s in args.episode_ids.split(",") if s.strip()] \
        if getattr(args, "episode_ids", None) is not None else None
    if wanted == []:
        raise ValueError(f"--episode-ids {args.episode_ids!r}: no episode id in it (ID,ID,...)")
    if args.scenes_dir is not None and not args.scenes_dir.is_dir():
        raise FileNotFoundError(f"--scenes-dir {args.scenes_dir}: no such directory")
    episodes = load_episodes(args.data, args.split, scenes_dir=args.scenes_dir,
                             limit=None if spread or wanted else args.episodes)
    if wanted:
        known = {str(ep.episode_id) for ep in episodes}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise ValueError(f"--episode-ids: {', '.join(missing)} not in split {args.split!r} of {args.data}")
        episodes = [ep for ep in episodes if str(ep.episode_id) in set(wanted)]
        if not spread and args.episodes is not None:
            episodes = episodes[:args.episodes]
    return spread_over_scenes(episodes, args.episodes) if spread else episodes


def spread_over_scenes(episodes: list, n: int) -> list:
    """n episodes taken round-robin over scenes (each scene's in file order), grouped by scene."""
    by_scene: dict[str, list] = {}
    for ep in episodes:
        by_scene.setdefault(ep.scene_id, []).append(ep)
    queues = [list(v) for v in by_scene.values()]
    chosen: dict[int, list] = {i: [] for i in range(len(queues))}
    taken = 0
    while taken < n and any(queues):
        for i, q in enumerate(queues):
            if q and taken < n:
                chosen[i].append(q.pop(0))
                taken += 1
    return [ep for i in sorted(chosen) for ep in chosen[i]]


def run(args: argparse.Namespace) -> int:
    import tempfile

    if args.compare is not None and args.agent is not None:
        raise ValueError("--agent and --compare both name the agents to run: give one of them")
    names = [a.strip() for a in args.compare.split(",") if a.strip()] if args.compare is not None \
        else [args.agent or "oracle"]
    if not names:
        raise ValueError(f"--compare {args.compare!r}: no agent named (A,B,...)")
    unknown = [a for a in names if a not in AGENTS]
    if unknown:
        raise ValueError(f"--compare: unknown agent(s) {', '.join(unknown)}; available: {', '.join(AGENTS)}")
    repeated = sorted({a for a in names if names.count(a) > 1})
    if repeated:   # one row and one JSON entry per name (and, with --lifelong, one memory folder per name)
        raise ValueError(f"--compare: agent(s) named twice: {', '.join(repeated)}; each agent runs once")
    if args.lifelong_visits < 0:
        raise ValueError(f"--lifelong-visits must be >= 0 (0 = one sequence per house), got {args.lifelong_visits}")
    if args.lifelong_visits and not args.lifelong:
        raise ValueError("--lifelong-visits needs --lifelong (without it every episode starts afresh anyway)")
    if args.odometry_restarts and not args.lifelong:
        raise ValueError("--odometry-restarts needs --lifelong (without it every episode starts afresh anyway)")
    if args.lifelong and args.odometry_origin == "start" and not args.odometry_restarts:
        raise ValueError("--odometry-origin start with --lifelong needs --odometry-restarts: every episode's odometry "
                         "starts afresh at its start pose, so the house's memory must relocalise at each")
    if args.memory_dir is not None and not args.lifelong:
        raise ValueError("--memory-dir needs --lifelong (only a lifelong run keeps memories; without it every episode "
                         "starts afresh and nothing would be written there)")
    if args.map_checks_in_background and not args.odometry_restarts:
        raise ValueError("--map-checks-in-background needs --odometry-restarts (only a rebooted run checks its map "
                         "against a saved one)")
    check_output_file(args.json, "--json")    # before the run, not after it
    if args.max_steps < 1:
        raise ValueError(f"--max-steps must be >= 1, got {args.max_steps}")
    for name, value in ExploringTuning.values_of(args).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value)
                                                                                  and value >= 0):
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    check_output_dir(args.report, "--report")
    check_output_dir(args.trace, "--trace")
    check_output_dir(args.memory_dir, "--memory-dir")
    episodes = load_split(args)
    if not episodes:
        raise ValueError(f"{args.data}: split {args.split!r} has no episodes")
    config = SimConfig(max_episode_steps=args.max_steps, seed=args.seed, renderer=args.renderer,
                       odometry_origin=args.odometry_origin, **camera_options(args))
    if args.workers < 0:
        raise ValueError(f"--workers must be >= 0 (0 = one per CPU core), got {args.workers}")
    workers = min(args.workers or os.cpu_count() or 1, len(episodes))
    encoder = None
    if workers <= 1 and any(a in LEARNED_AGENTS for a in names):   # workers load their own
        from memnav.core.encoder import Encoder

        encoder = Encoder.from_checkpoint(args.encoder)
    summaries: dict[str, dict] = {}
    all_results: dict[str, list[EpisodeResult]] = {}
    all_skipped: dict[str, list[SkippedEpisode]] = {}   # episodes that could not be run, not in the means
    lifelong: dict[str, list[float]] = {}
    traces = RunTraces() if args.report is not None else None
    interrupted = False   # Ctrl-C: the finished episodes are still printed, written and reported
    with tempfile.TemporaryDirectory(prefix="memnav-lifelong-") as tmp:
        for name in names:
            memory_dir = None
            if args.lifelong:
                memory_dir = (args.memory_dir or Path(tmp)) / name
            earlier = earlier_memories(memory_dir, (e.scene_name for e in episodes)) if not args.lifelong_visits \
                else sorted({k for d in sorted(memory_dir.glob("seq*")) if d.is_dir()
                             for k in earlier_memories(d, (e.scene_name for e in episodes))})
            options = LearnedAgentOptions(policy_dir=args.policy_dir, encoder_checkpoint=args.encoder,
                                          calibration=args.calibration, lifelong_dir=memory_dir, seed=args.seed,
                                          odometry_restarts=args.odometry_restarts,
                                          random_odometry_frame=args.odometry_origin == "house",
                                          map_checks_in_background=args.map_checks_in_background,
                                          camera_mount_told=not args.camera_mount_untold,
                                          homing=not args.no_homing, explore=not args.no_explore,
                                          max_steps=args.max_steps, **ExploringTuning.values_of(args))
            job = AgentJob(name, options, args.seed, config, args.backend, episodes, traces is not None,
                           trace_dir=args.trace)
            try:
                if workers > 1:
                    outcomes, kept = run_parallel(job, workers, lifelong=args.lifelong,
                                                  progress=not args.no_progress, visits=args.lifelong_visits)
                elif args.lifelong_visits:   # one agent per sequence, so that each starts with empty memories
                    outcomes, kept = run_sequences(job, args.lifelong_visits, encoder, progress=not args.no_progress)
                else:
                    outcomes, kept = run_job(job, encoder=encoder, progress=not args.no_progress)
            except EvalInterrupted as stop:
                outcomes, kept, interrupted = stop.results, stop.traces, True
                results = episode_results(outcomes)
                print(f"memnav eval: interrupted: {name} finished {len(results)} of {len(episodes)} episodes"
                      + (f" ({len(outcomes) - len(results)} more skipped)" if len(outcomes) > len(results) else "")
                      + (f"; {', '.join(names[names.index(name) + 1:])} not run" if name != names[-1] else "")
                      + ("; nothing is written" if not results and not summaries else
                         "; the results below and the files written hold only the finished episodes"),
                      file=sys.stderr, flush=True)
                if not results:
                    break
            results, skipped = episode_results(outcomes), skipped_episodes(outcomes)
            if not results:   # not one episode could be run: nothing to measure (and the same for every agent)
                raise ValueError(f"none of the {len(skipped)} episodes could be run, so there is nothing to report; "
                                 f"the first: {skipped[0].reason}" if len(skipped) > 1 else
                                 f"the episode could not be run, so there is nothing to report: {skipped[0].reason}")
            if traces is not None:
                traces.add(kept)
            summaries[name] = aggregate(results)
            summaries[name]["skipped_episodes"] = [e.to_json() for e in skipped]
            all_results[name] = results
            all_skipped[name] = skipped
            if args.lifelong:   # skipped episodes keep their place in a house's runs of --lifelong-visits visits
                lifelong[name] = lifelong_spl_by_visit(outcomes, args.lifelong_visits)
                summaries[name]["lifelong_spl_by_visit"] = lifelong[name]
                summaries[name]["lifelong_spl_known_house"] = lifelong_known_house_spl(outcomes,
                                                                                      args.lifelong_visits)
                if args.lifelong_visits:
                    summaries[name]["lifelong_visits"] = args.lifelong_visits
                summaries[name]["lifelong_earlier_memory"] = earlier
            if interrupted:
                break
    if not summaries:   # interrupted before any episode finished
        return 130
    to_stdout = args.json is not None and str(args.json) == "-"   # the JSON on stdout, the table on stderr
    shown = sys.stderr if to_stdout else sys.stdout
    print(format_table(summaries), file=shown)
    skipped_ids = {name: [e.episode_id for e in skipped] for name, skipped in all_skipped.items() if skipped}
    same = len(all_skipped) > 1 and all(skipped_ids.get(n) == skipped_ids.get(names[0]) for n in all_skipped)
    for name, ids in list(skipped_ids.items())[:1] if same else skipped_ids.items():
        print(f"{'every agent' if same else name}: {len(ids)} episode{'s' if len(ids) > 1 else ''} skipped, not run "
              f"and not in the means above (skipped_episodes in the results): {', '.join(ids)}", file=shown)
    for name, summary in summaries.items():
        if "ended_by" in summary:
            rows = ", ".join(f"{layer} {r['episodes']} ({r['successes']} ok)"
                             for layer, r in summary["ended_by"].items())
            print(f"{name}: episodes ended by: {rows}", file=shown)
        if summary.get("path_by_layer"):
            print(f"{name}: {path_summary(summary)}", file=shown)
    if args.lifelong:
        for name, curve in lifelong.items():
            print(f"{name}: {lifelong_summary(curve, summaries[name]['lifelong_spl_known_house'])}", file=shown)
            earlier = summaries[name]["lifelong_earlier_memory"]
            if earlier:
                print(f"{name}: continues earlier runs' memory of {', '.join(earlier)} (lifelong_earlier_memory): "
                      "their visit 1 here is not their first", file=shown)
    # `episodes`: the episodes run (by every agent, with --compare), as an agent's summary counts them; the
    # selection's length beside it, and `data` also as an absolute path, so that `memnav eval-report` run from
    # another directory finds the dataset of a relative --data
    meta = {"split": args.split, "data": str(args.data), "data_absolute": os.path.abspath(args.data.expanduser()),
            "backend": args.backend, "episodes": None, "episodes_selected": len(episodes), "episodes_run": None,
            "lifelong": bool(args.lifelong), "odometry_origin": args.odometry_origin,
            "hfov_deg": config.hfov_deg, "camera_height_m": config.sensor_height_m,
            "camera_forward_m": config.sensor_forward_m, "camera_pitch_deg": config.sensor_pitch_deg,
            "camera_mount_told": not args.camera_mount_untold,
            "image_px": [config.width_px, config.height_px],
            "encoder": model_name(args.encoder), "calibration": model_name(args.calibration),
            "exploring_options": exploring_options_changed(args),
            # what else it takes to run it again: the step limit, seed, the agents' switches and the episodes chosen
            "max_steps": args.max_steps, "seed": args.seed, "renderer": args.renderer,
            "explore": not args.no_explore, "homing": not args.no_homing,
            "policy_dir": model_name(args.policy_dir).removesuffix("/."),
            "scenes_dir": None if args.scenes_dir is None else str(args.scenes_dir),
            "memory_dir": None if args.memory_dir is None else str(args.memory_dir),
            "episode_selection": {"episodes": args.episodes, "episode_ids": args.episode_ids,
                                  "spread": bool(args.spread)},
            "workers": workers, "map_checks_in_background": bool(args.map_checks_in_background)}
    if args.odometry_restarts:
        meta["odometry_restarts"] = True
    if interrupted:   # the per-episode results hold only the episodes finished before Ctrl-C
        meta["interrupted"] = True
    for summary in summaries.values():   # each agent's own count (after Ctrl-C, agents differ)
        summary.update(episodes_selected=len(episodes), episodes_run=summary["episodes"])
    if args.compare:
        ran = list(summaries)   # after Ctrl-C, the agents that finished an episode
        out = dict(meta, agents={n: dict(summaries[n], per_episode=[r.to_json() for r in all_results[n]])
                                 for n in ran})
        out["episodes"] = out["episodes_run"] = episodes_run_by_every_agent(out["agents"])
        out.update({n: summaries[n] for n in ran})  # per-agent summaries also at the top level
    else:
        extra = {k: v for k, v in summaries[names[0]].items()
                 if k.startswith("lifelong_") or k == "skipped_episodes"}
        out = dict(results_document(names[0], all_results[names[0]], **meta), **extra)
    # strict JSON (a NaN, e.g. of a mean over no episodes, is null) written whole or not at all
    text = (json.dumps(json_safe(out), indent=2, allow_nan=False) + "\n").encode()
    if to_stdout:
        sys.stdout.write(text.decode())
    elif args.json is not None:
        replace_files({args.json: text})
    if args.report is not None:
        from memnav.eval.eval_report import write_eval_report

        replace_files({args.report / "results.json": text})
        files = write_eval_report(out, args.report, traces=traces, command="memnav " + " ".join(sys.argv[1:]))
        print(f"report: {files[0]} ({len(files) - 1} figures)", file=shown)
    return 130 if interrupted else 0
