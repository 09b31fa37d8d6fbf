"""The agent's per-step loop without ROS or simulator: encode -> update memory -> policy -> stop.

`Navigator` owns the memories of one robot and turns each observation into the policy's inputs
(`StepInput`), then into an action:

- memory kind `none` (the `gru` baseline): no memory tokens;
- `episodic`: the last M observations of this episode, FIFO (attention over an episodic memory of past
  embeddings, no scene graph);
- `scene_graph` (memnav): the working buffer (KARMA-style replacement) plus the top-k places of the
  long-term scene-graph memory most similar to the goal image, each with its pose relative to the robot.

With `homing` on (the memnav agents), a long-term place whose embedding matches the goal photo
(cosine similarity >= `homing_min_similarity`, e.g. remembered from an earlier visit to the house) becomes
a target. Without an occupancy map (`explore` off) the robot follows the scene graph's traversability edges
from its nearest place to it, turns to the heading the place was seen with, and lets the stop rule decide
there; a collision on the way, or arriving without the stop rule stopping, drops that target for the
episode and hands control back to the policy, which also drives whenever no place matches. With
`homing_via_map` and the map (`explore` on) the place becomes the next candidate instead (mode "homing"):
the map's planner drives around what a straight graph edge runs into, and the robot first faces the
remembered heading, then judges the place like a scan-matched candidate (below), each place once per
episode (off by default: on lifelong val runs it found more goals but cost SPL, README).

With `explore` on (the memnav agents), the robot also keeps its own occupancy map from depth and odometry
(`memnav.core.exploration`) and, when no remembered place matches, drives to the nearest unexplored frontier
instead of leaving the search to the policy; the policy drives when nothing is left to explore. With
`localize` on and a goal depth image, every step that runs geometric verification also tries to place the goal
camera metrically (`memnav.core.goal_localization`: RGB-D matches, planar RANSAC); once it succeeds, the robot
drives to that pose on its map and judges it as a candidate (below; mode "approach"). With `scan_match` on,
the goal's depth is also matched as a 2D scan against that map (`memnav.core.scan_match`) every
`match_every_steps` steps: a pose where it fits well (score at least `candidate_min_score`, or any fit once
nothing is reachable to explore from where the robot is) becomes a candidate (with `candidate_prior`, of the
`candidate_pool` best fits the one whose surroundings the long-term memory remembers as most like the goal
photo comes first: the best similarity among places within `prior_radius_m` that faced its way); the robot
drives there and turns a full circle (turns add no path length, and the scan's heading can be off by half a
turn): it faces the view most similar to the goal photo and stops when the stop rule agrees or that similarity
is at least `candidate_stop_similarity` (or `corroborated_stop_similarity` with an RGB-D goal estimate within
`corroborate_radius_m`; `known_corroborated_stop_similarity` on a map kept from an earlier visit), else it
rejects the candidate and goes on (mode "candidate"). An exploring episode starts with the same full turn in
place (mode "look"). When the stop rule wants to stop but the goal scan fits the map clearly better
within `refine_radius_m`, that pose becomes the candidate instead; likewise, with `stop_approach_min_inliers`,
when an RGB-D goal estimate with that much support lies farther than
`stop_approach_min_m`. When nothing is left to explore or check, the robot first stands at positions at least
`sweep_spacing_m` from everywhere it has been and judges each like a candidate (mode "sweep": a place seen
from afar was not seen from where it stands), then returns to the episode's view most similar to the goal
photo and stops there (mode "best_view"). With `persistent_map` the occupancy map is kept across episodes in
the odometry frame (lifelong visits). Priority: stop rule > approach > homing > look > candidate > explore >
sweep > best view > policy.

The stop controller reads a calibrated belief from the cosine similarity of the current and goal
embeddings and a geometric verification score (ORB + RANSAC, computed when the similarity makes a stop
plausible and, with `verify_every_steps`, on every n-th frame besides, since it costs milliseconds).
Time comes in as `stamp_ns`; nothing here reads a clock.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np
import torch

from memnav.core.encoder import Encoder
from memnav.core.exploration import Explorer, ExplorerConfig, face, steer
from memnav.core.frames import check_camera_forward, check_camera_pitch
from memnav.core.goal_localization import GoalLocalizerConfig, localize_goal, to_odometry_frame
from memnav.core.goal_photo import check_goal_image
from memnav.core.memory.scene_graph import Retrieval, SceneGraphMemory
from memnav.core.memory.working_buffer import WorkingBuffer
from memnav.core.policy import (
    MOVES,
    NUM_TOKEN_TYPES,
    TOKEN_EPISODIC,
    TOKEN_GEOMETRY,
    TOKEN_PLACE,
    TOKEN_WORKING,
    MemoryPolicy,
    depth_profile,
    step_vector,
)
from memnav.core.scan_match import Candidate, GoalScan, ScanMatchConfig
from memnav.core.stop import FixedThresholdStop, GoalBeliefCalibrator, StopDecision, VoIStopController
from memnav.core.types import Action, Pose2D, wrap_angle
from memnav.core.verification import (
    Features,
    VerificationConfig,
    extract_features,
    match_features,
    verify_features,
)

_SPIN_TURNS = 11   # TURN_LEFTs of a full look around (12 views, 30 degrees apart)
_REJECT_RADIUS_M = 0.75   # candidates and goal estimates this close to a rejected one are not visited again
# scan matching around a stop the stop rule wants: every cell, the single best fit, only a clear one
_REFINE_MATCH = ScanMatchConfig(position_stride=1, min_score=0.8, max_candidates=1)


class MemoryKind(Enum):
    """Which memory the policy reads."""

    NONE = "none"
    EPISODIC = "episodic"
    SCENE_GRAPH = "scene_graph"


@dataclass
class NavigatorConfig:
    """Per-step behaviour of the agent.

    Attributes:
        memory: none | episodic | scene_graph (see the module docstring).
        buffer_capacity: working-buffer items given to the policy (scene_graph memory).
        retrieval_k: long-term places retrieved by goal similarity per step (scene_graph memory).
        verify_min_similarity: run geometric verification (and goal localization) at or above this embedding
            cosine similarity.
        verify_every_steps: below verify_min_similarity, still run them on every n-th frame (0 = never): the
            goal can show in ORB matches well before the embeddings agree (from 1.5 m behind the goal spot,
            say, or across a room), and each run costs several milliseconds, so not on every frame.
        stop_rule: "voi" (value of information) or "fixed" (belief threshold baseline).
        fixed_threshold: belief at which the fixed rule stops.
        max_depth_m: depth profile scale, meters.
        forward_step_m: MOVE_FORWARD distance, meters.
        collision_fraction: a forward action that moved the odometry less than this fraction of
            forward_step_m counts as a collision when the caller gives no collision flag (0.9 for discrete
            steps; lower on a robot whose velocity ramps make each step fall short, e.g. 0.4).
        greedy: take the most likely action (evaluation) instead of sampling.
        homing: follow the scene graph to a remembered place that matches the goal photo (scene_graph memory).
        homing_min_similarity: cosine similarity of a place's embedding to the goal embedding for the place
            to become a homing target.
        homing_via_map: with explore on, a homing target becomes the next candidate, reached over the
            occupancy map and judged with a look-around (mode "homing"), instead of a route over graph edges.
        waypoint_reach_m: a route waypoint counts as reached within this distance, meters.
        heading_tolerance_rad: turn towards a waypoint (or the target heading) while off by more than
            this, radians (half a 30 deg turn, plus a margin, so a heading is always reachable).
        explore: drive to unexplored frontiers of the robot's own occupancy map when no remembered place
            matches the goal (the policy drives once nothing is left to explore).
        localize: place the goal metrically from RGB-D matches with the goal image and drive there.
        hfov_deg: horizontal field of view of the camera (mapping and localization), degrees.
        camera_height_m: camera height above the floor (mapping), meters.
        camera_forward_m: how far ahead of the turning axis (the pose odometry gives) the camera is mounted,
            meters (0: on it, as the simulator's by default). Depth is mapped and the goal placed from the camera's
            pose; plans, look-arounds, memories and goal poses stay the robot's (`ExplorerConfig.camera_forward_m`).
        camera_pitch_deg: how far the camera looks down from level, degrees (0: level, as the simulator's by
            default): depth is turned level for mapping, the goal's scan and RGB-D goal localization.
        memory_in_ram_on_write_failure: when the long-term memory's database write fails (a full disk), go on
            with the memory in RAM (`SceneGraphMemory.keep_in_ram`; the file keeps its last commit and
            `memory.persist_error` says why) instead of raising MemoryStoreError at every step, so a robot keeps
            navigating.
        localize_min_inliers: matches that must agree on one planar motion to accept a goal pose.
        scan_match: match the goal depth against the occupancy map for goal candidates (needs explore).
        match_every_steps: steps between two scan-matching searches (each takes tens of milliseconds).
        candidate_min_score: scan-match score (0-1) at which a candidate interrupts exploration.
        candidate_near_m: while exploring, a candidate within this straight-line distance of the robot interrupts
            exploration already at candidate_near_min_score (checking a nearby fit costs little path; 0 = off),
            meters.
        candidate_near_min_score: see candidate_near_m (0-1; the matcher reports no fit below
            ScanMatchConfig.min_score, 0.6, so lower values act as 0.6).
        candidate_colour_fit: while exploring, a candidate whose colour fit (see colour_weight) is at least this
            interrupts exploration already at candidate_colour_min_score: a fit in both depth and colour is
            rarely a look-alike, and the map's colours can confirm a goal spot before its shape fits clearly
            (0 = off).
        candidate_colour_min_score: see candidate_colour_fit (0-1).
        candidate_stop_similarity: embedding cosine similarity to the goal that confirms a candidate on arrival.
        corroborated_stop_similarity: a lower similarity that confirms a candidate when an RGB-D goal estimate
            (`localize`, at least localize_min_inliers agreeing matches) lies within corroborate_radius_m of
            where the robot stands: two independent cues put the goal here (0 = off).
        known_corroborated_stop_similarity: the corroborated bar in a known house, i.e. when the episode began on
            an occupancy map kept from an earlier visit (`persistent_map`); 0 = corroborated_stop_similarity
            there too; off wherever corroborated_stop_similarity is 0. A lower bar there was tried: it gained on
            the val houses and lost on others (README "Corroborated stops").
        corroborate_radius_m: see corroborated_stop_similarity, meters.
        agreeing_stop_similarity: a still lower similarity that confirms a look-around when two geometric cues
            agree on the spot: an RGB-D goal estimate (as for corroborated_stop_similarity) and a pending
            scan-matched goal candidate both lie within corroborate_radius_m of the robot (0 = off).
        candidate_pool: scan-matched candidates considered at each match (best scan fits, spread apart).
        colour_weight: candidates are taken in the order of scan-match score + colour_weight x colour fit (the
            goal scan's colours against the map's surface colours at the candidate pose,
            `Explorer.colour_fit`): the occupancy map keeps what colour each wall and piece of furniture was,
            which tells apart rooms of the same shape. 0 = the scan-match score alone.
        candidate_min_colour: a candidate whose colour fit is below this is not visited (candidates where the
            map holds too few colours to compare are kept); 0 = off.
        colour_sigma: colour-difference scale of the colour fit (RGB in 0-1).
        candidate_prior: visit the candidate whose surroundings the long-term memory remembers as most like the
            goal photo first (scene_graph memory): the best embedding similarity to the goal among remembered
            places within prior_radius_m of the candidate that faced within prior_angle_deg of its heading;
            places are remembered across episodes in lifelong mode. False: the best scan fit first.
        prior_radius_m: see candidate_prior, meters.
        prior_angle_deg: see candidate_prior, degrees.
        prior_unseen: the prior of a candidate no remembered place looked at (similarity scale, -1 to 1).
        refine_radius_m: when the stop rule wants to stop and the goal scan fits the map clearly (score >= 0.8)
            at a pose within this distance but farther than waypoint_reach_m, the robot goes there and judges it
            as a candidate instead (0 turns this off; needs scan_match), meters.
        stop_approach_min_inliers: when the stop rule wants to stop but the goal localized from RGB-D matches
            (with at least this many agreeing matches) lies farther than stop_approach_min_m, the robot drives
            there and judges it as a candidate instead (0 turns this off; needs localize).
        stop_approach_min_m: see stop_approach_min_inliers, meters.
        sweep_spacing_m: once everything is explored and no goal candidate is left, the robot stands at
            reachable positions at least this far from everywhere it has been, nearest first, and judges each
            like a candidate (look around; mode "sweep") before falling back to the best view (0 turns this
            off), meters.
        sweep_prior_weight: in a known house, which sweep position comes first: each is ranked by its path
            distance minus this many meters per unit of goal similarity above sweep_prior_floor of the most
            goal-like remembered place within sweep_prior_radius_m (the sweep_prior_k places the long-term
            memory retrieves for the goal photo, first seen before this episode began). 0 = nearest first. A
            first visit, whose memory holds only this episode's places, sweeps nearest first whatever the weight.
        sweep_prior_floor: see sweep_prior_weight (similarity scale, -1 to 1).
        sweep_prior_radius_m: see sweep_prior_weight, meters.
        sweep_prior_k: see sweep_prior_weight.
        best_view_after_steps: from this many actions into an episode, the robot stops searching (candidates,
            exploration, sweep) and goes to the best view, so that it stops somewhere before an episode's
            step limit instead of being cut off mid-search (0 turns this off).
        frontier_look_turns: while exploring, on reaching a frontier the robot turns this many times on the spot
            (TURN_LEFT; 11 is a full look around) before choosing the next frontier on the map those views
            filled in: turns add no path length, and a look around maps what lies on either side of the
            frontier, which forward driving alone leaves unknown (0 turns this off).
        frontier_look_spacing_m: a reached frontier closer than this to where the robot already looked around
            (the start included) gets no look around, meters.
        map_range_m: depth readings up to this range go into the occupancy map (`ExplorerConfig.max_range_m`):
            free space up to the nearest obstacle or this range, obstacles within it. A clean depth image (the
            simulator's) can be trusted farther than a real sensor's noisy far readings, meters.
        frontier_colour_weight: frontiers near mapped surfaces in the goal photo's colours count this many meters
            nearer per unit of colour likeness (`ExplorerConfig.frontier_colour_weight`; 0 = nearest first).
        keep_unseen_obstacles: free space marked below the camera's view does not clear obstacles the camera saw
            there (`ExplorerConfig.keep_unseen_obstacles`): low furniture stays on the map as the robot nears it.
        map_pixel_spacing_deg: the occupancy map integrates a frame's pixels at least this far apart, degrees
            (`ExplorerConfig.pixel_spacing_deg`; 0 = every 2nd pixel at any image size): less map work on a large
            frame.
        persistent_map: keep the occupancy map across episodes, in the odometry frame (lifelong visits that
            share one odometry frame; `explorer.save_map` / `load_map` keep it across runs). False: each
            episode maps from scratch in the frame of its first pose.
    """

    memory: str = MemoryKind.SCENE_GRAPH.value
    buffer_capacity: int = 16
    retrieval_k: int = 8
    verify_min_similarity: float = 0.6
    verify_every_steps: int = 0
    stop_rule: str = "voi"
    fixed_threshold: float = 0.5
    max_depth_m: float = 5.0
    forward_step_m: float = 0.25
    collision_fraction: float = 0.9
    greedy: bool = True
    homing: bool = False
    homing_min_similarity: float = 0.9
    homing_via_map: bool = False
    waypoint_reach_m: float = 0.3
    heading_tolerance_rad: float = math.radians(16.0)
    explore: bool = False
    localize: bool = False
    hfov_deg: float = 90.0
    camera_height_m: float = 1.25
    camera_forward_m: float = 0.0
    camera_pitch_deg: float = 0.0
    memory_in_ram_on_write_failure: bool = True
    localize_min_inliers: int = 10
    scan_match: bool = False
    match_every_steps: int = 10
    candidate_min_score: float = 0.85
    candidate_near_m: float = 0.0
    candidate_near_min_score: float = 0.6
    candidate_colour_fit: float = 0.0
    candidate_colour_min_score: float = 0.7
    candidate_stop_similarity: float = 0.8
    corroborated_stop_similarity: float = 0.0
    known_corroborated_stop_similarity: float = 0.0
    corroborate_radius_m: float = 0.5
    agreeing_stop_similarity: float = 0.0
    candidate_pool: int = 4
    colour_weight: float = 0.0
    candidate_min_colour: float = 0.0
    colour_sigma: float = 0.1
    candidate_prior: bool = False
    prior_radius_m: float = 1.0
    prior_angle_deg: float = 45.0
    prior_unseen: float = 0.5
    persistent_map: bool = False
    refine_radius_m: float = 1.5
    stop_approach_min_inliers: int = 0
    stop_approach_min_m: float = 0.6
    sweep_spacing_m: float = 0.0
    sweep_prior_weight: float = 0.0
    sweep_prior_floor: float = 0.5
    sweep_prior_radius_m: float = 1.0
    sweep_prior_k: int = 64
    best_view_after_steps: int = 0
    frontier_look_turns: int = 0
    frontier_look_spacing_m: float = 1.5
    map_range_m: float = ExplorerConfig.max_range_m
    frontier_colour_weight: float = 0.0
    keep_unseen_obstacles: bool = False
    map_pixel_spacing_deg: float = 0.0

    def __post_init__(self) -> None:
        MemoryKind(self.memory)
        check_camera_forward("NavigatorConfig.camera_forward_m", self.camera_forward_m)
        check_camera_pitch("NavigatorConfig.camera_pitch_deg", self.camera_pitch_deg)
        for name in ("verify_every_steps", "frontier_look_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"NavigatorConfig.{name} must be an integer >= 0, got {value!r}")
        for name in ("candidate_pool", "sweep_prior_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"NavigatorConfig.{name} must be an integer >= 1, got {value!r}")
        for name, top in (("prior_radius_m", math.inf), ("prior_angle_deg", 180.0), ("candidate_near_m", math.inf),
                          ("candidate_near_min_score", 1.0), ("colour_weight", math.inf),
                          ("corroborated_stop_similarity", 1.0), ("known_corroborated_stop_similarity", 1.0),
                          ("corroborate_radius_m", math.inf), ("agreeing_stop_similarity", 1.0),
                          ("candidate_min_colour", 1.0), ("candidate_colour_fit", 1.0),
                          ("candidate_colour_min_score", 1.0), ("sweep_prior_weight", math.inf),
                          ("sweep_prior_radius_m", math.inf), ("frontier_look_spacing_m", math.inf),
                          ("frontier_colour_weight", math.inf), ("map_pixel_spacing_deg", math.inf)):
            value = getattr(self, name)
            if not 0.0 <= value <= top:
                raise ValueError(f"NavigatorConfig.{name} must be in [0, {top}], got {value!r}")
        if not -1.0 <= self.sweep_prior_floor <= 1.0:
            raise ValueError(f"NavigatorConfig.sweep_prior_floor must be in [-1, 1], got {self.sweep_prior_floor!r}")
        for name in ("colour_sigma", "map_range_m"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"NavigatorConfig.{name} must be a positive number, got {value!r}")
        if self.stop_rule not in ("voi", "fixed"):
            raise ValueError(f"NavigatorConfig.stop_rule must be 'voi' or 'fixed', got {self.stop_rule!r}")

    @property
    def memory_tokens(self) -> int:
        """Tokens the policy must accept for this memory kind."""
        kind = MemoryKind(self.memory)
        if kind is MemoryKind.NONE:
            return 0
        return self.buffer_capacity + self.retrieval_k


@dataclass
class SearchView:
    """What an exploring Navigator holds about its search, in the odometry frame, for a user to look at
    (`Navigator.search_view`; the policy node publishes it for RViz).

    Attributes:
        grid: occupancy grid (`OccupancyMap.grid_view`: rows follow the origin's y axis, columns its x axis; -1
            unknown, 0 free, 100 obstacle); (0, 0) before the first frame.
        resolution_m: the grid's cell size, meters.
        origin: pose of the corner of cell (0, 0); its yaw turns the grid when the map is drawn in the frame
            of the episode's first pose.
        plan_kind: what this step's planned path leads to: "frontier", "target", or "" when none was planned.
        plan: the path's corners (robot first), (x, y) meters; empty when none was planned this step.
        goal_estimate: the RGB-D goal estimate, if any.
        candidate: the goal candidate being driven to or judged, if any.
        candidate_kind: "candidate" (scan-matched), "sweep" or "homing"; "" without a candidate.
        best_view: where the view most like the goal photo was seen this episode, if any.
    """

    grid: np.ndarray
    resolution_m: float
    origin: Pose2D
    plan_kind: str = ""
    plan: tuple[tuple[float, float], ...] = ()
    goal_estimate: Pose2D | None = None
    candidate: Pose2D | None = None
    candidate_kind: str = ""
    best_view: Pose2D | None = None


@dataclass
class StepInput:
    """Everything the policy and the stop rule read at one step (numpy, ready to batch)."""

    step: np.ndarray            # [step_dim]
    tokens: np.ndarray          # [M, token_features]
    token_mask: np.ndarray      # [M] bool
    similarity: float           # cosine(current, goal)
    verification: float         # geometric verification score (0 when not computed)
    belief: float               # calibrated P(goal within the success radius)
    stop: StopDecision
    collided: bool = False      # the last move was blocked (given, or inferred from odometry)


class Navigator:
    """Encoder + memory + stop rule (+ policy for `act`) for one agent.

    Args:
        encoder: frame encoder.
        calibrator: goal-belief calibrator (features: similarity, verification).
        config: behaviour.
        policy: the trained policy (needed by `act`, not by `observe`).
        memory: long-term scene graph (scene_graph kind; default: a new RAM-only memory). Pass an opened
            persistent memory to keep it across episodes (lifelong mode).
        stop_params: keyword arguments of VoIStopController.
    """

    def __init__(self, encoder: Encoder, calibrator: GoalBeliefCalibrator, config: NavigatorConfig | None = None,
                 policy: MemoryPolicy | None = None, memory: SceneGraphMemory | None = None,
                 stop_params: dict | None = None) -> None:
        self.cfg = cfg = config or NavigatorConfig()
        self.encoder = encoder
        self.calibrator = calibrator
        self.policy = policy
        if policy is not None and policy.cfg.memory_tokens != cfg.memory_tokens:
            raise ValueError(f"policy reads {policy.cfg.memory_tokens} memory tokens, the {cfg.memory} memory "
                             f"gives {cfg.memory_tokens}")
        self.kind = MemoryKind(cfg.memory)
        self.stop_rule = (VoIStopController(**(stop_params or {})) if cfg.stop_rule == "voi"
                          else FixedThresholdStop(cfg.fixed_threshold))
        self.verification_cfg = VerificationConfig()
        dim = encoder.embedding_dim
        self.memory: SceneGraphMemory | None = None
        self.buffer: WorkingBuffer | None = None
        if self.kind is MemoryKind.SCENE_GRAPH:
            self.memory = memory if memory is not None else SceneGraphMemory()
            self.buffer = WorkingBuffer(cfg.buffer_capacity, dim)
        self._episodic: deque[tuple[np.ndarray, Pose2D, int]] = deque(maxlen=max(1, cfg.memory_tokens))
        self.goal = np.zeros(dim, np.float32)
        self._goal_features: Features | None = None
        self.prev_action = -1
        self.hidden: torch.Tensor | None = None
        self._goal_p = 0.0       # the policy's last goal-reached probability
        self.last: StepInput | None = None
        self._prev_pose: Pose2D | None = None
        self._retrieved: list[Retrieval] = []
        self._target: int | None = None
        self._target_yaw = 0.0
        self._route: list[Pose2D] = []
        self._failed: set[int] = set()
        self._homing_dropped = 0  # remembered places that route homing gave up this episode
        self.mode = "policy"  # what chose the last move (see the module docstring's priority of layers)
        self.explorer = Explorer(ExplorerConfig(hfov_deg=cfg.hfov_deg, camera_height_m=cfg.camera_height_m,
                                                camera_forward_m=cfg.camera_forward_m,
                                                camera_pitch_deg=cfg.camera_pitch_deg,
                                                forward_step_m=cfg.forward_step_m, max_range_m=cfg.map_range_m,
                                                heading_tolerance_rad=cfg.heading_tolerance_rad,
                                                frontier_colour_weight=cfg.frontier_colour_weight,
                                                keep_unseen_obstacles=cfg.keep_unseen_obstacles,
                                                pixel_spacing_deg=cfg.map_pixel_spacing_deg))
        self._match_cfg = ScanMatchConfig(max_candidates=cfg.candidate_pool)
        self.localizer_cfg = GoalLocalizerConfig(hfov_deg=cfg.hfov_deg, pitch_deg=cfg.camera_pitch_deg,
                                                 min_inliers=cfg.localize_min_inliers)
        self._goal_depth: np.ndarray | None = None
        self._scan: GoalScan | None = None
        self._candidate = None
        self._rejected = []
        self._explored = False   # exploration found no frontier left
        self.known_map = False   # the episode began on an occupancy map kept from an earlier visit
        self._spin: list | None = None   # look-around at a candidate: [turns left, best similarity, its yaw]
        self._look_left = 0      # turns left of the look-around at the start of an episode
        self._match_now = False  # scan-match at the next step (the start's look-around is done)
        self._refining = False   # the candidate is a stop the stop rule wanted, moved to a better fit
        self._best_view: tuple[float, Pose2D] | None = None   # (similarity, map pose) of the best view
        self._visited: list[tuple[float, float]] = []   # map positions of the episode's moves (one per action)
        self._cand_kind = "candidate"   # what the candidate is: a scan match, a "sweep" position or a "homing" place
        self._steps = 0
        self._frames = 0         # frames observed this episode (verify_every_steps)
        self._anchor: Pose2D | None = None   # first pose of the episode: the occupancy map's origin
        self.goal_estimate: Pose2D | None = None   # localized goal pose in the odometry frame
        self._goal_support = 0

    # -- episode -----------------------------------------------------------------------------------------
    def map_became_known(self) -> None:
        """The occupancy map has just gained an earlier run's evidence (a rebooted robot's memory relocalised
        and its house map was laid on this run's frame): from now on the house counts as known, and the goal
        is scan-matched on the whole map at the next step."""
        self.known_map = True
        self._match_now = True

    def map_became_unknown(self) -> None:
        """An earlier run's evidence was taken back out of the occupancy map (it had been laid in the wrong
        place): the house counts as unknown again, a candidate chosen on that map is dropped without counting
        as rejected, exploration starts over on what is left, and the goal is scan-matched there at the next
        step. Views the robot judged itself stay judged."""
        self.known_map = False
        self._match_now = True
        self._explored = False
        self._candidate, self._spin, self._refining, self._cand_kind = None, None, False, "candidate"

    def reset(self, goal_rgb: np.ndarray, goal_depth: np.ndarray | None = None) -> None:
        """Start an episode towards the place shown by the goal image (long-term memory is kept).

        Raises:
            ValueError: an empty or malformed goal image.
        """
        goal_rgb = check_goal_image(goal_rgb)
        if goal_depth is not None and np.asarray(goal_depth).shape != goal_rgb.shape[:2]:
            goal_depth = None  # a depth map of another size cannot be paired with this image
        self.goal = self.encoder.encode(goal_rgb, goal_depth).astype(np.float32)
        self._goal_features = extract_features(goal_rgb, self.verification_cfg)
        self._goal_depth = None if goal_depth is None else np.asarray(goal_depth, np.float32)
        self.goal_estimate = None
        self._goal_support = 0
        self.explorer.reset(keep_map=self.cfg.persistent_map)
        self.known_map = self.explorer.map is not None   # a map kept from an earlier visit: a known house
        self._scan = (self.explorer.goal_scan(self._goal_depth, rgb=goal_rgb)
                      if self._goal_depth is not None and self.cfg.scan_match else None)
        self._candidate: Candidate | None = None
        self._rejected: list[Pose2D] = []
        self._explored = False
        self._steps = 0
        self._frames = 0
        self._spin = None
        self._look_left = _SPIN_TURNS if self.cfg.explore else 0
        self._looked_at: list[tuple[float, float]] = []
        self._match_now = False
        self._refining = False
        self._best_view = None
        self._visited = []
        self._cand_kind = "candidate"
        self._anchor = None
        self._episode_start_ns: int | None = None   # the stamp of the episode's first frame
        self.prev_action = -1
        self.hidden = None
        self._goal_p = 0.0
        self.last = None
        self._prev_pose = None
        self._retrieved = []
        self._target = None
        self._route = []
        self._failed = set()
        self._homing_dropped = 0
        self.mode = "policy"
        self._episodic.clear()
        if self.buffer is not None:
            self.buffer.clear()
            self.buffer.set_goal(self.goal)

    # -- per step ----------------------------------------------------------------------------------------
    def set_camera(self, hfov_deg: float, camera_height_m: float, camera_forward_m: float | None = None,
                   camera_pitch_deg: float | None = None) -> None:
        """The robot's camera: its horizontal field of view (from its camera_info), its height above the floor and
        (given; else as configured) how far ahead of the turning axis it sits and how far it looks down, for
        mapping depth, the goal's scan and RGB-D goal localization from the next frame on (the defaults are the
        simulator's camera: 90 deg at 1.25 m, on the axis, level).

        Raises:
            ValueError: a field of view outside (0, 180) degrees, a height <= 0, an offset beyond 2 m or a pitch
                beyond 45 degrees, naming the field.
        """
        self.explorer.set_camera(hfov_deg, camera_height_m, camera_forward_m, camera_pitch_deg)
        cam = self.explorer.cfg
        self.cfg = replace(self.cfg, hfov_deg=float(hfov_deg), camera_height_m=float(camera_height_m),
                           camera_forward_m=cam.camera_forward_m, camera_pitch_deg=cam.camera_pitch_deg)
        self.localizer_cfg = replace(self.localizer_cfg, hfov_deg=float(hfov_deg), pitch_deg=cam.camera_pitch_deg)

    def observe(self, rgb: np.ndarray, depth: np.ndarray, pose: Pose2D, stamp_ns: int,
                collided: bool | None = None) -> StepInput:
        """Encode the frame, update the memories, and build the policy input and stop decision.

        `collided` None infers a collision from odometry (a forward action that fell short), as on a
        robot without bumpers; the simulator and the ROS node then see the same input.
        """
        if collided is None:
            prev = self._prev_pose
            collided = (self.prev_action == int(Action.MOVE_FORWARD) and prev is not None
                        and math.hypot(pose.x_m - prev.x_m, pose.y_m - prev.y_m)
                        < self.cfg.collision_fraction * self.cfg.forward_step_m)
        self._prev_pose = pose
        if self._episode_start_ns is None:
            self._episode_start_ns = int(stamp_ns)
        emb = self.encoder.encode(rgb, depth).astype(np.float32)
        sim = float(np.dot(emb, self.goal))
        verification = 0.0
        self._frames += 1
        every = self.cfg.verify_every_steps
        if self._goal_features is not None and (sim >= self.cfg.verify_min_similarity
                                                or (every > 0 and self._frames % every == 0)):
            feats = extract_features(rgb, self.verification_cfg)
            # goal first, as `memnav train stop` calibrated it (ratio-test matching is not symmetric)
            matches = match_features(self._goal_features, feats, self.verification_cfg)
            verification = verify_features(self._goal_features, feats, self.verification_cfg, matches).score
            if self.cfg.localize and self._goal_depth is not None:
                self._localize(feats, depth, self._map_pose(pose), matches)
        if self.cfg.explore or self.cfg.localize:
            self.explorer.update(depth, self._map_pose(pose), blocked=collided, rgb=rgb)
        belief = float(self.calibrator.predict(np.array([[sim, verification]]))[0])
        decision = self.stop_rule.decide(belief)
        tokens, mask = self._update_memory(emb, pose, stamp_ns, rgb)
        step = step_vector(emb, self.goal, depth_profile(depth, self._depth_bins(), self.cfg.max_depth_m),
                           self.prev_action, collided)
        self.last = StepInput(step, tokens, mask, sim, verification, belief, decision, collided)
        return self.last

    @property
    def spots_given_up(self) -> int:
        """How many spots this episode's judging layers (candidate, approach, sweep, homing) gave up so far: judged
        by a look-around and rejected, found unreachable, or (route homing) dropped. It only grows within an
        episode, so an evaluation can tell which stretches of the path led to a spot that was not the goal."""
        return len(self._rejected) + self._homing_dropped

    def search_view(self, margin_cells: int = 2) -> SearchView:
        """The occupancy map, this step's planned path, the goal estimate, the candidate and the best view so
        far, all in the odometry frame (see SearchView); `margin_cells` of unknown cells around the map."""
        m, cell = self.explorer.map, self.explorer.cfg.cell_m
        if m is None:
            grid, corner = np.zeros((0, 0), np.int8), np.zeros(2)
        else:
            grid, corner = m.grid_view(margin_cells)
        anchor = self._anchor or Pose2D(0.0, 0.0, 0.0)

        def odom(p: Pose2D | None) -> Pose2D | None:
            return None if p is None else anchor.compose(p)

        plan = self.explorer.last_plan
        path = () if plan is None else tuple((float(x), float(y)) for x, y in zip(*anchor.apply(
            np.array([q[0] for q in plan.path]), np.array([q[1] for q in plan.path]))))
        cand = self._candidate
        return SearchView(grid, cell, anchor.compose(Pose2D(float(corner[0]), float(corner[1]), 0.0)),
                          plan.kind if path else "", path, odom(self.goal_estimate),
                          odom(None if cand is None else cand.pose), self._cand_kind if cand is not None else "",
                          odom(None if self._best_view is None else self._best_view[1]))

    def _map_pose(self, pose: Pose2D) -> Pose2D:
        """The pose in the occupancy map's frame: relative to the episode's first pose, rounded to a micrometre.

        Whether odometry starts at the episode's start (a ROS odom frame) or not (the simulator's map frame),
        the robot's map is then the same grid, so lock-step runs over DDS reproduce in-process ones.
        """
        if self._anchor is None:
            self._anchor = Pose2D(0.0, 0.0, 0.0) if self.cfg.persistent_map else pose
        rel = pose.relative_to(self._anchor)
        return Pose2D(round(rel.x_m, 6), round(rel.y_m, 6), round(rel.yaw_rad, 6))

    def _localize(self, feats: Features, depth: np.ndarray, pose: Pose2D,
                  matches: tuple[np.ndarray, np.ndarray]) -> None:
        """Place the goal on the robot's map from RGB-D matches; the best-supported estimate wins."""
        assert self._goal_features is not None and self._goal_depth is not None
        est = localize_goal(self._goal_features, self._goal_depth, feats, depth, self.localizer_cfg,
                            self.verification_cfg, matches)
        if est is None or est.inliers < self._goal_support or (self.goal_estimate is not None and self._spin):
            return                              # nothing better, or the current estimate is being judged
        goal = to_odometry_frame(est, pose, self.cfg.camera_forward_m)
        if self._was_rejected(goal):
            return                              # looked there already: not the goal
        old = self.goal_estimate
        if old is None or math.hypot(goal.x_m - old.x_m, goal.y_m - old.y_m) > 0.5:
            self._spin = None                   # a new place to judge
        self.goal_estimate = goal
        self._goal_support = est.inliers

    def _depth_bins(self) -> int:
        return self.policy.cfg.depth_bins if self.policy is not None else 16

    def _update_memory(self, emb: np.ndarray, pose: Pose2D, stamp_ns: int,
                       rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = self.cfg.memory_tokens
        feats = emb.shape[0] + TOKEN_GEOMETRY + NUM_TOKEN_TYPES
        tokens = np.zeros((m, feats), np.float32)
        mask = np.zeros(m, bool)
        if self.kind is MemoryKind.NONE:
            return tokens, mask
        if self.kind is MemoryKind.EPISODIC:
            self._episodic.append((emb, pose, stamp_ns))
            for i, (e, p, t) in enumerate(self._episodic):
                self._fill(tokens[i], e, p.relative_to(pose), (stamp_ns - t) / 1e9, TOKEN_EPISODIC)
                mask[i] = True
            return tokens, mask
        assert self.memory is not None and self.buffer is not None
        self.memory.insert_observation(stamp_ns, pose, emb, thumbnail=rgb,
                                       keep_in_ram_on_failure=self.cfg.memory_in_ram_on_write_failure)
        self.buffer.add(stamp_ns, emb, pose)
        b_emb, b_rel, b_age, b_mask = self.buffer.as_arrays(origin=pose, now_ns=stamp_ns)
        n = int(b_mask.sum())
        for i in range(n):
            self._fill(tokens[i], b_emb[i], Pose2D(*b_rel[i].tolist()), float(b_age[i]), TOKEN_WORKING)
        mask[:n] = True
        robot = self.memory.to_memory_frame(pose)
        base = self.cfg.buffer_capacity
        self._retrieved = self.memory.retrieve(self.goal, self.cfg.retrieval_k)
        for j, hit in enumerate(self._retrieved):
            place = self.memory.place(hit.node_id)
            age_s = max(0.0, (stamp_ns - place.last_seen_ns) / 1e9)
            self._fill(tokens[base + j], place.embedding, hit.pose.relative_to(robot), age_s, TOKEN_PLACE)
            mask[base + j] = True
        return tokens, mask

    def _fill(self, row: np.ndarray, emb: np.ndarray, rel: Pose2D, age_s: float, kind: int) -> None:
        d = emb.shape[0]
        row[:d] = emb
        dist = math.hypot(rel.x_m, rel.y_m)
        row[d: d + TOKEN_GEOMETRY] = (rel.x_m / 5.0, rel.y_m / 5.0, math.cos(rel.yaw_rad), math.sin(rel.yaw_rad),
                                      math.log1p(max(age_s, 0.0)) / 5.0, float(np.dot(emb, self.goal)),
                                      math.log1p(dist))
        row[d + TOKEN_GEOMETRY + kind] = 1.0

    @torch.inference_mode()
    def act(self, rgb: np.ndarray, depth: np.ndarray, pose: Pose2D, stamp_ns: int,
            collided: bool | None = None, rng: np.random.Generator | None = None) -> tuple[Action, StepInput, float]:
        """One decision: STOP when the stop rule says so, else the planned layers' or the policy's move.

        Without exploration the recurrent policy runs every step (its state follows every frame). With it, the
        policy is the last resort and runs only on the steps it drives, which keeps its cost off the others;
        the goal-reached probability returned on the other steps is the last one it gave.

        Returns:
            (action, the step input, the policy's goal-reached probability).
        """
        if self.policy is None:
            raise RuntimeError("Navigator.act needs a policy; observe() works without one")
        self.explorer.last_plan = None
        inp = self.observe(rgb, depth, pose, stamp_ns, collided)
        logits = None if self.cfg.explore else self._run_policy(inp)
        if self.cfg.explore:
            self._note_view(pose, inp.similarity)
        # the stop rule's stop, unless the goal scan fits the map clearly better a few steps away (mode
        # "candidate") or a well-supported RGB-D goal estimate lies farther off (mode "approach"): go there and
        # judge it, which also keeps the stop rule quiet on the way
        stop = inp.stop.stop and not self._refining and not self._refine(pose) and not self._approach_instead(pose)
        move, self.mode = (Action.STOP, "stop") if stop else self._planned_move(pose, inp.collided)
        if move is not None:
            action = move
        else:
            self.mode = "policy"
            if logits is None:
                logits = self._run_policy(inp)
            if self.cfg.greedy or rng is None:
                idx = int(torch.argmax(logits[0]))
            else:
                probs = torch.softmax(logits[0], 0).numpy().astype(np.float64)
                idx = int(rng.choice(len(MOVES), p=probs / probs.sum()))
            action = MOVES[idx]
        goal_p = self._goal_p
        self.prev_action = int(action)
        return action, inp, goal_p


    def _run_policy(self, inp: StepInput) -> torch.Tensor:
        """One recurrent policy step on `inp`: move logits [1, 3]; updates the hidden state and goal-reached p."""
        assert self.policy is not None
        if self.hidden is None:
            self.hidden = self.policy.initial_state(1)
        tokens = torch.from_numpy(inp.tokens).unsqueeze(0) if self.cfg.memory_tokens else None
        mask = torch.from_numpy(inp.token_mask).unsqueeze(0) if self.cfg.memory_tokens else None
        logits, _, goal_logit, self.hidden = self.policy(torch.from_numpy(inp.step).unsqueeze(0), tokens, mask,
                                                         self.hidden)
        self._goal_p = float(torch.sigmoid(goal_logit)[0])
        return logits

    def _note_view(self, pose: Pose2D, similarity: float) -> None:
        """Remember the episode's view most similar to the goal (the fallback when the search runs dry)."""
        if self._best_view is None or similarity > self._best_view[0]:
            self._best_view = (similarity, self._map_pose(pose))

    def _refine(self, pose: Pose2D) -> bool:
        """The stop rule wants to stop: is there a clearly better goal-scan fit within `refine_radius_m`? If
        so it becomes the candidate (True)."""
        if self._scan is None or self.explorer.map is None or self.cfg.refine_radius_m <= 0:
            return False
        here = self._map_pose(pose)
        best = self.explorer.match_goal(here, self._scan, _REFINE_MATCH, radius_m=self.cfg.refine_radius_m)
        if not best or self._was_rejected(best[0].pose) or math.hypot(
                best[0].pose.x_m - here.x_m, best[0].pose.y_m - here.y_m) <= self.cfg.waypoint_reach_m:
            return False
        self._candidate, self._spin, self._refining = best[0], None, True
        return True

    def _approach_instead(self, pose: Pose2D) -> bool:
        """The stop rule wants to stop: does a well-supported goal estimate lie farther off? If so the robot
        drives there and judges it (True), with the stop rule quiet on the way."""
        goal, need = self.goal_estimate, self.cfg.stop_approach_min_inliers
        if need <= 0 or goal is None or self._goal_support < need or self._spin is not None:
            return False
        here = self._map_pose(pose)
        if math.hypot(goal.x_m - here.x_m, goal.y_m - here.y_m) <= self.cfg.stop_approach_min_m:
            return False
        self._refining = True
        return True

    def _was_rejected(self, pose: Pose2D) -> bool:
        """A candidate or goal estimate was judged and rejected within _REJECT_RADIUS_M of this position."""
        return any(math.hypot(pose.x_m - r.x_m, pose.y_m - r.y_m) < _REJECT_RADIUS_M for r in self._rejected)

    def _best_view_move(self, pose: Pose2D) -> Action | None:
        """Nothing left to explore or check: go back to the view most similar to the goal, face it, STOP."""
        if self._best_view is None:
            return None
        view = self._best_view[1]
        plan = self.explorer.go_to(pose, view.x_m, view.y_m)
        if plan.action is not None:
            return plan.action
        if plan.kind == "none" or plan.waypoint is None:
            self._best_view = None
            return None
        turn = face(pose, view.yaw_rad, self.cfg.heading_tolerance_rad)
        return turn if turn is not None else Action.STOP

    def _planned_move(self, pose: Pose2D, collided: bool) -> tuple[Action | None, str]:
        """A move from the non-learned layers (approach > homing > candidate > explore), or (None, "policy").

        `pose` is the odometry pose (homing maps it into the scene graph's frame); the occupancy-map layers
        use it relative to the episode's first pose.
        """
        odom, pose = pose, self._map_pose(pose)
        self._visited.append((pose.x_m, pose.y_m))
        if self.goal_estimate is not None:
            move = self._approach_move(pose)
            if move is not None:
                return move, "approach"
        move = self._homing_move(odom, collided)
        if move is not None:
            return move, "homing"
        late = self.cfg.best_view_after_steps
        if self.cfg.explore and late > 0 and len(self._visited) > late:
            move = self._best_view_move(pose)    # time is nearly up: stop at the best guess
            if move is not None:
                return move, "best_view"
        self._steps += 1
        if self.cfg.explore and self._look_left > 0:
            # look around first (turns cost no path length): a map all around, views for the stop rule
            if not self._looked_at:
                self._looked_at.append((pose.x_m, pose.y_m))
            return self._look_turn()
        move = self._candidate_move(pose)
        if move is not None:
            return move, self._cand_kind
        if self.cfg.explore:
            reached = self.explorer.frontiers_reached
            colours = self._scan.colours if self._scan is not None else None
            move = self.explorer.explore(pose, colours, self.cfg.colour_sigma).action
            self._explored = move is None
            if (move is not None and self.cfg.frontier_look_turns > 0 and self.explorer.frontiers_reached > reached
                    and all(math.hypot(pose.x_m - x, pose.y_m - y) >= self.cfg.frontier_look_spacing_m
                            for x, y in self._looked_at)):
                # a frontier reached: look around there (turns add no path length), then choose the next one
                self._looked_at.append((pose.x_m, pose.y_m))
                self._look_left = self.cfg.frontier_look_turns
                self.explorer.drop_frontier()
                return self._look_turn()
            if move is not None:
                return move, "explore"
            # nothing left to explore from here: any fitting pose is worth a look
            move = self._candidate_move(pose)
            if move is not None:
                return move, self._cand_kind
            move = self._sweep_move(pose)
            if move is not None:
                return move, "sweep"
            move = self._best_view_move(pose)
            if move is not None:
                return move, "best_view"
        return None, "policy"

    def _look_turn(self) -> tuple[Action, str]:
        """One turn of a look-around; after the last one, look for candidates at once (all around seen)."""
        self._look_left -= 1
        self._match_now = self._look_left == 0
        return Action.TURN_LEFT, "look"

    def _candidate_move(self, pose: Pose2D) -> Action | None:
        """Drive to, face and judge the best scan-matched goal candidate; None when there is none."""
        if self._scan is not None and self._candidate is None and (
                self._explored or self._match_now or self._steps % self.cfg.match_every_steps == 1):
            self._match_now = False
            cands = [cand for cand in self.explorer.match_goal(pose, self._scan, self._match_cfg)
                     if not self._was_rejected(cand.pose)]
            cfg = self.cfg
            order = cfg.colour_weight > 0 or cfg.candidate_min_colour > 0
            fits = (self.explorer.colour_fits(self._scan, [c.pose for c in cands], cfg.colour_sigma)
                    if order or cfg.candidate_colour_fit > 0 else [None] * len(cands))
            rated = [(c, f) for c, f in zip(cands, fits) if self._candidate_worth(c, pose, f)]
            pool = self._colour_order(rated) if order else [c for c, _ in rated]
            if pool:
                self._candidate = (max(pool, key=lambda c: (self._view_prior(c.pose), c.score))
                                   if self.cfg.candidate_prior else pool[0])
        if self._candidate is None:
            return None
        goal = self._candidate.pose
        plan = self.explorer.go_to(pose, goal.x_m, goal.y_m)
        if plan.action is not None:
            return plan.action
        if plan.waypoint is not None:          # arrived: look all around, then judge the best view
            if self._cand_kind == "homing" and self._spin is None:
                turn = face(pose, goal.yaw_rad, self.cfg.heading_tolerance_rad)   # first the remembered view
                if turn is not None:
                    return turn
            move = self._look_around(pose)
            if move is not None:
                return move
        self._rejected.append(goal)
        self._candidate = None
        self._spin = None
        self._refining = False
        self._cand_kind = "candidate"
        return None

    def _colour_order(self, rated: list[tuple[Candidate, float | None]]) -> list[Candidate]:
        """Of (candidate, colour fit) pairs, the candidates whose colours do not contradict the goal's, best
        score + colour_weight x fit first."""
        keep = [(c.score + self.cfg.colour_weight * (f if f is not None else 0.0), c) for c, f in rated
                if f is None or f >= self.cfg.candidate_min_colour]
        return [c for _, c in sorted(keep, key=lambda kc: -kc[0])]

    def _candidate_worth(self, cand: Candidate, pose: Pose2D, colour_fit: float | None = None) -> bool:
        """Whether a scan-matched candidate is worth a trip now: any fit once nothing is left to explore, else a
        score of at least candidate_min_score, candidate_near_min_score within candidate_near_m, or
        candidate_colour_min_score with a colour fit (given) of at least candidate_colour_fit."""
        cfg = self.cfg
        if self._explored or cand.score >= cfg.candidate_min_score:
            return True
        near = math.hypot(cand.pose.x_m - pose.x_m, cand.pose.y_m - pose.y_m) <= cfg.candidate_near_m
        if near and cand.score >= cfg.candidate_near_min_score:
            return True
        return (cfg.candidate_colour_fit > 0 and cand.score >= cfg.candidate_colour_min_score
                and colour_fit is not None and colour_fit >= cfg.candidate_colour_fit)

    def _view_prior(self, pose: Pose2D) -> float:
        """How much what the long-term memory saw around a map pose, facing its way, looked like the goal photo
        (see NavigatorConfig.candidate_prior)."""
        if self.memory is None or not self.memory.localised:   # unlocalised: where it saw things is unknown
            return self.cfg.prior_unseen
        odom = pose if self._anchor is None else self._anchor.compose(pose)
        here = self.memory.to_memory_frame(odom)
        limit = math.radians(self.cfg.prior_angle_deg)
        sims = [float(np.dot(p.embedding, self.goal)) for p in self.memory.places_within(here, self.cfg.prior_radius_m)
                if abs(wrap_angle(p.pose.yaw_rad - here.yaw_rad)) <= limit]
        return max(sims, default=self.cfg.prior_unseen)

    def _sweep_move(self, pose: Pose2D) -> Action | None:
        """Nothing left to explore or match: stand where the robot has not been (`sweep_spacing_m` from its
        path), look around and judge it as a candidate; None when no such position is left."""
        if self.cfg.sweep_spacing_m <= 0:
            return None
        bonus = self._sweep_bonus(pose)
        for _ in range(3):    # a position that cannot be reached is rejected (and then avoided): try another
            been = np.array(self._visited + [(r.x_m, r.y_m) for r in self._rejected])
            spot = self.explorer.unvisited_point(pose, been, self.cfg.sweep_spacing_m, bonus=bonus,
                                                 bonus_radius_m=self.cfg.sweep_prior_radius_m)
            if spot is None:
                return None
            self._candidate, self._cand_kind = Candidate(Pose2D(spot[0], spot[1], 0.0), 0.0), "sweep"
            move = self._candidate_move(pose)
            if move is not None:
                return move
        return None

    def _sweep_bonus(self, pose: Pose2D) -> np.ndarray | None:
        """(N, 3) map-frame x, y and bonus in meters of the remembered places that look like the goal (see
        NavigatorConfig.sweep_prior_weight), or None. Remembered: first seen before this episode began, so a
        first visit sweeps nearest first."""
        cfg = self.cfg
        if cfg.sweep_prior_weight <= 0 or self.memory is None or self.goal is None or not self.memory.localised:
            return None
        odom = pose if self._anchor is None else self._anchor.compose(pose)
        robot_mem = self.memory.to_memory_frame(odom)
        rows = []
        for hit in self.memory.retrieve(self.goal, k=cfg.sweep_prior_k):    # best first
            if hit.similarity <= cfg.sweep_prior_floor:
                break
            start = self._episode_start_ns
            if start is not None and self.memory.place(hit.node_id).first_seen_ns >= start:
                continue                     # seen this episode: not what an earlier visit remembers
            spot = pose.compose(hit.pose.relative_to(robot_mem))
            rows.append((spot.x_m, spot.y_m, cfg.sweep_prior_weight * (hit.similarity - cfg.sweep_prior_floor)))
        return np.array(rows, dtype=np.float64) if rows else None

    def _look_around(self, pose: Pose2D) -> Action | None:
        """At a candidate: turn a full circle (no path length) noting the view most similar to the goal; then
        face it and STOP if it is similar enough. None = the candidate is rejected."""
        sim = self.last.similarity if self.last is not None else -1.0
        if self._spin is None:
            self._spin = [_SPIN_TURNS, sim, pose.yaw_rad]
        elif self._spin[0] >= 0 and sim > self._spin[1]:
            self._spin[1], self._spin[2] = sim, pose.yaw_rad
        if self._spin[0] > 0:
            self._spin[0] -= 1
            return Action.TURN_LEFT
        self._spin[0] = -1                      # spin done: from now on only face the best heading
        if self._spin[1] < self.cfg.candidate_stop_similarity and not self._corroborated(pose, self._spin[1]):
            return None
        turn = face(pose, self._spin[2], self.cfg.heading_tolerance_rad)
        return turn if turn is not None else Action.STOP

    def _corroborated(self, pose: Pose2D, similarity: float) -> bool:
        """Whether a look-around's best similarity, below candidate_stop_similarity, still confirms the spot: at
        least corroborated_stop_similarity (known_corroborated_stop_similarity in a known house) with an RGB-D goal
        estimate near `pose` (map frame), or at least agreeing_stop_similarity with such an estimate and a pending
        scan-matched candidate both near it."""
        cfg, goal = self.cfg, self.goal_estimate
        bar = cfg.corroborated_stop_similarity
        if self.known_map and cfg.known_corroborated_stop_similarity > 0 and bar > 0:
            bar = cfg.known_corroborated_stop_similarity
        estimate_near = (goal is not None and self._goal_support >= cfg.localize_min_inliers
                         and math.hypot(goal.x_m - pose.x_m, goal.y_m - pose.y_m) <= cfg.corroborate_radius_m)
        if bar > 0 and similarity >= bar and estimate_near:
            return True
        cand = self._candidate
        return (cfg.agreeing_stop_similarity > 0 and similarity >= cfg.agreeing_stop_similarity and estimate_near
                and cand is not None and self._cand_kind == "candidate"
                and math.hypot(cand.pose.x_m - pose.x_m, cand.pose.y_m - pose.y_m) <= cfg.corroborate_radius_m)

    def _approach_move(self, pose: Pose2D) -> Action | None:
        """Drive to the localized goal and judge it as a candidate (look around, STOP facing the best view if
        it is similar enough); None when it cannot be reached or is rejected (then it is forgotten)."""
        goal = self.goal_estimate
        assert goal is not None
        plan = self.explorer.go_to(pose, goal.x_m, goal.y_m)
        if plan.action is not None:
            return plan.action
        move = self._look_around(pose) if plan.kind != "none" and plan.waypoint is not None else None
        if move is None:                   # unreachable on the map, or not the goal: forget it, keep searching
            self._rejected.append(goal)
            self.goal_estimate = None
            self._goal_support = 0
            self._spin = None
            self._refining = False
        return move

    # -- homing over the scene graph --------------------------------------------------------------------
    def _homing_move(self, pose: Pose2D, collided: bool) -> Action | None:
        """The next move towards a remembered place that matches the goal, or None (the policy drives)."""
        if not self.cfg.homing or self.memory is None or not self.memory.localised:
            return None                  # no memory, or not yet known where the robot is in it
        if self.cfg.explore and self.cfg.homing_via_map:
            self._home_as_candidate(pose)
            return None
        if self._target is not None and self.mode == "homing" and collided:
            self._drop_target()          # the remembered route is blocked here
        robot = self.memory.to_memory_frame(pose)
        if self._target is None and not self._plan(robot):
            return None
        reach = self.cfg.waypoint_reach_m
        while self._route and math.hypot(self._route[0].x_m - robot.x_m, self._route[0].y_m - robot.y_m) < reach:
            self._route.pop(0)
        tol = self.cfg.heading_tolerance_rad
        if not self._route:              # at the target place: face the way it was seen
            turn = face(robot, self._target_yaw, tol)
            if turn is None:
                self._drop_target()      # the stop rule looked from here and did not stop
            return turn
        return steer(robot, self._route[0].x_m, self._route[0].y_m, tol)

    def _home_as_candidate(self, odom: Pose2D) -> None:
        """With an occupancy map: make the best remembered place that matches the goal the candidate to judge.

        The map's planner then drives around what a straight graph edge runs into (furniture, a door post),
        and the look-around there judges the place like any candidate. Each place is tried once an episode;
        a candidate being looked around from is not interrupted.
        """
        assert self.memory is not None
        if self._spin is not None or self._cand_kind == "homing":
            return
        robot_mem, robot_map = self.memory.to_memory_frame(odom), self._map_pose(odom)
        for hit in self._retrieved:      # best first
            if hit.similarity < self.cfg.homing_min_similarity:
                return
            if hit.node_id in self._failed:
                continue
            self._failed.add(hit.node_id)
            spot = robot_map.compose(hit.pose.relative_to(robot_mem))
            if self._was_rejected(spot):
                continue
            self._candidate, self._cand_kind, self._refining = Candidate(spot, hit.similarity), "homing", False
            return

    def _plan(self, robot: Pose2D) -> bool:
        """Pick the best-matching remembered place and a route to it over traversability edges."""
        assert self.memory is not None
        start = None
        for hit in self._retrieved:      # best first
            if hit.similarity < self.cfg.homing_min_similarity:
                break
            if hit.node_id in self._failed:
                continue
            if start is None:
                start = self.memory.nearest_place(robot)
                if start is None:
                    return False
            path = self.memory.shortest_path(start[0], hit.node_id)
            if path is None:
                self._failed.add(hit.node_id)
                continue
            self._target = hit.node_id
            self._target_yaw = hit.pose.yaw_rad
            self._route = [self.memory.place(n).pose for n in path.node_ids]
            return True
        return False

    def _drop_target(self) -> None:
        if self._target is not None:
            self._failed.add(self._target)
            self._homing_dropped += 1
        self._target = None
        self._route = []
