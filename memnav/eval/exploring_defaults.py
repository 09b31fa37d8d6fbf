"""Defaults of the agents that explore (memnav, memnav-fixed), in one torch-free module.

`memnav.eval.learned_agents` builds the agents from them; the ROS `policy_node` config reads them too, so a
node and `memnav eval` run the same agent by default. `ExploringTuning` holds the ones a user may change: the
fields that `LearnedAgentOptions`, `PolicyNodeConfig` (as ROS parameters) and `memnav eval` (as options of the
same names) share.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

# VoI stop rule's value of searching on (VoIStopConfig.search_value) for agents that explore: stops need a
# belief of about 0.65 instead of about 0.45 (fewer stops at look-alike places; 0.45 was chosen on 24 test
# episodes, 0.5 on 96 val episodes, README "Exploration")
EXPLORING_SEARCH_VALUE = 0.5
# exploring agents: drive to an RGB-D goal estimate this well supported instead of stopping short of it
EXPLORING_STOP_APPROACH_MIN_INLIERS = 10
# exploring agents: once everything is explored, stand this far from everywhere they have been and look around
EXPLORING_SWEEP_SPACING_M = 1.5
# exploring agents: this many actions before the step limit, stop searching and go to the best view
EXPLORING_BEST_VIEW_RESERVE = 50
# exploring agents: below the similarity gate, still verify (and localize the goal) on every 3rd frame
EXPLORING_VERIFY_EVERY_STEPS = 3
# exploring agents with candidate_prior: weigh this many scan-matched candidates at a time
EXPLORING_CANDIDATE_POOL = 8
# exploring agents: a scan-matched candidate this close (straight line, meters) is judged at a lower fit
# (NavigatorConfig.candidate_near_m; chosen on val, README "Exploration")
EXPLORING_CANDIDATE_NEAR_M = 2.0
# exploring agents: take scan-matched candidates in the order of scan score + this x colour fit (the goal's
# colours against the occupancy map's surface colours; NavigatorConfig.colour_weight; chosen on val, README
# "Colour on the map")
EXPLORING_COLOUR_WEIGHT = 1.0
# exploring agents: skip candidates whose colour fit is below this (NavigatorConfig.candidate_min_colour)
EXPLORING_CANDIDATE_MIN_COLOUR = 0.15
# exploring agents that weigh colour: consider this many scan-matched candidates at a time (the colour filter
# often removed all of the 8 best scan fits, look-alikes, while the goal spot ranked lower; README "Colour on the
# map")
EXPLORING_COLOUR_POOL = 24
# exploring agents: a look-around whose best similarity to the goal photo is at least this (below the 0.8 that
# confirms a candidate alone) confirms the spot when an RGB-D goal estimate lies within 0.5 m of it
# (NavigatorConfig.corroborated_stop_similarity; lifelong val96 SPL 0.778 -> 0.820, README "Corroborated stops")
EXPLORING_CORROBORATED_SIMILARITY = 0.75
# exploring agents in a known house (the occupancy map kept from an earlier visit): the corroborated bar there;
# 0 = EXPLORING_CORROBORATED_SIMILARITY there too (NavigatorConfig.known_corroborated_stop_similarity). 0.70 was
# tried: lifelong val200 SPL 0.813 -> 0.826, but on a second val sample (other houses) 0.763 -> 0.754 and
# success 0.840 -> 0.815, so it is off (README "Corroborated stops")
EXPLORING_KNOWN_CORROBORATED_SIMILARITY = 0.0
# exploring agents do not home over the scene graph's edges to a remembered place that matches the goal photo
# (NavigatorConfig.homing): the occupancy map's scan-matched candidates find remembered goals, and homing drove to
# look-alike places first (lifelong val96 SPL 0.778 without, 0.745 with, the same success; README "Homing")
EXPLORING_HOMING = False
# exploring agents in a known house: once nothing is left to explore or match, sweep first the positions near
# remembered places that look like the goal photo, this many meters nearer per unit of similarity above 0.5
# (NavigatorConfig.sweep_prior_weight; lifelong val96 SPL 0.820 -> 0.827, README "Sweep prior")
EXPLORING_SWEEP_PRIOR_WEIGHT = 20.0
# exploring agents: while exploring, a candidate with at least this colour fit is judged already at a scan score
# of NavigatorConfig.candidate_colour_min_score (NavigatorConfig.candidate_colour_fit; chosen on val, README
# "Colour on the map")
EXPLORING_CANDIDATE_COLOUR_FIT = 0.6
# exploring agents: on reaching a frontier, look all around there (11 turns; turns add no path length) before
# choosing the next one, unless they already looked around within 1.5 m (NavigatorConfig.frontier_look_turns;
# first-visit val96 SPL 0.481 -> 0.502, README "Look around at frontiers")
EXPLORING_FRONTIER_LOOK_TURNS = 11
# exploring agents: depth readings up to this range go into the occupancy map (NavigatorConfig.map_range_m; the
# simulator's depth is clean to 10 m, so a view maps more of a room it looks into; README "Map range")
EXPLORING_MAP_RANGE_M = 7.0
# exploring agents: a frontier near mapped surfaces in the goal photo's colours counts this many meters nearer per
# unit of colour likeness (NavigatorConfig.frontier_colour_weight; 0 = nearest first). Off: 15 raised first-visit
# SPL on three val samples (val96 0.541 -> 0.597) but not on test (500 episodes 0.806 / 0.508 -> 0.782 / 0.505),
# and lifelong SPL fell on two of three samples (README "Colour-guided frontiers")
EXPLORING_FRONTIER_COLOUR_WEIGHT = 0.0
# exploring agents: free space marked below the camera's view does not clear obstacles the camera saw there
# (NavigatorConfig.keep_unseen_obstacles). Off in evaluation: val200 moved by 0 / +1 / -7 successes on three
# cameras (README "What the camera cannot see up close"); on in the robot profile, where forgetting a low table
# is a collision
EXPLORING_KEEP_UNSEEN_OBSTACLES = False
# exploring agents: the occupancy map integrates a frame's pixels at least this far apart, degrees
# (NavigatorConfig.map_pixel_spacing_deg; 0 = every 2nd pixel). Off: at 0.7 a 69 deg 640 x 360 frame cost 7 ms less
# a step, but SPL was 0.012-0.015 lower on val200 and test200 at that camera (README "Exploration, goal candidates
# and goal localization"); a robot computer short of CPU may want it
EXPLORING_MAP_PIXEL_SPACING_DEG = 0.0
# exploring agents: a look-around confirms the spot at this similarity when an RGB-D goal estimate and a pending
# scan-matched candidate both lie within 0.5 m of it (NavigatorConfig.agreeing_stop_similarity; 0 = off)
EXPLORING_AGREEING_SIMILARITY = 0.0


@dataclass
class ExploringTuning:
    """How an exploring memnav agent searches; each field passes to the NavigatorConfig field named.

    Attributes:
        explore_homing: exploring agents also home over the scene graph to a remembered place that matches the
            goal photo (NavigatorConfig.homing; EXPLORING_HOMING, off).
        candidate_prior: exploring agents rank the EXPLORING_CANDIDATE_POOL best scan-matched candidates by
            what the long-term memory saw there (NavigatorConfig.candidate_prior).
        homing_via_map: exploring agents reach homing targets over the occupancy map
            (NavigatorConfig.homing_via_map).
        candidate_near_m: exploring agents judge a scan-matched candidate this close (straight line, meters)
            already at a fit of NavigatorConfig.candidate_near_min_score (0 = off;
            NavigatorConfig.candidate_near_m).
        colour_weight: exploring agents take scan-matched candidates in the order of scan score + this x colour
            fit, from the EXPLORING_COLOUR_POOL best fits (0 = the scan score alone, from the 4 best;
            NavigatorConfig.colour_weight).
        candidate_min_colour: exploring agents skip candidates whose colour fit is below this (0 = off;
            NavigatorConfig.candidate_min_colour).
        candidate_colour_fit: while exploring, exploring agents judge a candidate with at least this colour fit
            already at a scan score of NavigatorConfig.candidate_colour_min_score (0 = off;
            NavigatorConfig.candidate_colour_fit).
        corroborated_similarity: exploring agents accept a look-around at this similarity when an RGB-D goal
            estimate lies near (NavigatorConfig.corroborated_stop_similarity; 0 = off).
        known_corroborated_similarity: the same bar in a known house, on a map kept from an earlier visit
            (NavigatorConfig.known_corroborated_stop_similarity; 0 = corroborated_similarity there too).
        agreeing_similarity: exploring agents accept a look-around at this similarity when an RGB-D goal estimate
            and a pending scan-matched candidate both lie near (NavigatorConfig.agreeing_stop_similarity; 0 = off).
        sweep_prior_weight: exploring agents sweep first the positions near remembered places that look like the
            goal photo (NavigatorConfig.sweep_prior_weight, meters per unit of similarity; 0 = nearest first).
        frontier_look_turns: exploring agents turn this many times on the spot at each frontier they reach
            (11: a full look around; 0 = off; NavigatorConfig.frontier_look_turns).
        map_range_m: exploring agents map depth readings up to this range, meters (NavigatorConfig.map_range_m).
        frontier_colour_weight: exploring agents choose frontiers near surfaces in the goal's colours sooner, this
            many meters per unit of colour likeness (NavigatorConfig.frontier_colour_weight; 0 = nearest first).
        keep_unseen_obstacles: exploring agents do not let free space marked below the camera's view clear
            obstacles the camera saw there (NavigatorConfig.keep_unseen_obstacles).
        map_pixel_spacing_deg: exploring agents integrate a frame's pixels at least this far apart into the
            occupancy map, degrees (NavigatorConfig.map_pixel_spacing_deg; 0 = every 2nd pixel).
    """

    explore_homing: bool = EXPLORING_HOMING
    candidate_prior: bool = False
    homing_via_map: bool = False
    candidate_near_m: float = EXPLORING_CANDIDATE_NEAR_M
    colour_weight: float = EXPLORING_COLOUR_WEIGHT
    candidate_min_colour: float = EXPLORING_CANDIDATE_MIN_COLOUR
    candidate_colour_fit: float = EXPLORING_CANDIDATE_COLOUR_FIT
    corroborated_similarity: float = EXPLORING_CORROBORATED_SIMILARITY
    known_corroborated_similarity: float = EXPLORING_KNOWN_CORROBORATED_SIMILARITY
    agreeing_similarity: float = EXPLORING_AGREEING_SIMILARITY
    sweep_prior_weight: float = EXPLORING_SWEEP_PRIOR_WEIGHT
    frontier_look_turns: int = EXPLORING_FRONTIER_LOOK_TURNS
    map_range_m: float = EXPLORING_MAP_RANGE_M
    frontier_colour_weight: float = EXPLORING_FRONTIER_COLOUR_WEIGHT
    keep_unseen_obstacles: bool = EXPLORING_KEEP_UNSEEN_OBSTACLES
    map_pixel_spacing_deg: float = EXPLORING_MAP_PIXEL_SPACING_DEG

    @classmethod
    def values_of(cls, source: object) -> dict:
        """The values of these fields on `source` (a config or parsed options with attributes of the same
        names), by field name."""
        return {f.name: getattr(source, f.name) for f in fields(cls)}
