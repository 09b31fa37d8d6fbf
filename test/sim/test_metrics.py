import math

import pytest

from memnav.core.types import EpisodeStatus
from memnav.sim.metrics import EpisodeResult, PathByLayer, aggregate, is_success, path_summary, soft_spl, spl


def test_success_needs_stop_and_strictly_inside_radius():
    assert is_success(True, 0.99)
    assert not is_success(True, 1.0)
    assert not is_success(False, 0.1)


def test_spl_matches_definition():
    assert spl(True, 5.0, 5.0) == 1.0
    assert spl(True, 5.0, 10.0) == pytest.approx(0.5)
    assert spl(True, 5.0, 4.0) == 1.0  # path shorter than the geodesic (stopped early) caps at 1
    assert spl(False, 5.0, 5.0) == 0.0


def test_soft_spl_matches_habitat_lab():
    # progress 1 - 1/4 = 0.75, efficiency 4 / max(4, 8) = 0.5
    assert soft_spl(1.0, 4.0, 8.0) == pytest.approx(0.375)
    assert soft_spl(5.0, 4.0, 2.0) == 0.0  # ended farther than it started
    assert soft_spl(0.0, 4.0, 4.0) == pytest.approx(1.0)


def test_soft_spl_of_a_start_on_the_goal_scores_like_spl():
    # d_0 = 0: staying put scores 1, any path 0, as SPL does (it scored 1 wherever the agent ended)
    assert soft_spl(0.0, 0.0, 0.0) == spl(True, 0.0, 0.0) == 1.0
    assert soft_spl(5.0, 0.0, 10.0) == 0.0
    assert soft_spl(0.0, 0.0, 3.0) == spl(True, 0.0, 3.0) == 0.0


def test_aggregate_counts_episodes_and_successes_by_the_layer_that_ended_them():
    def r(success, layer):
        return EpisodeResult(episode_id="x", scene_id="s", success=success, spl=success, soft_spl=success,
                             distance_to_goal_m=0.5, geodesic_distance_m=3.0, path_length_m=3.0, steps=10,
                             status=EpisodeStatus.STOPPED, ended_by=layer)
    res = [r(1.0, "stop"), r(0.0, "stop"), r(1.0, "approach"), r(0.0, "best_view"), r(1.0, "stop")]
    assert aggregate(res)["ended_by"] == {"stop": {"episodes": 3, "successes": 2},
                                          "approach": {"episodes": 1, "successes": 1},
                                          "best_view": {"episodes": 1, "successes": 0}}
    assert list(aggregate(res)["ended_by"]) == ["stop", "approach", "best_view"]   # most frequent first
    assert "ended_by" not in aggregate([r(1.0, ""), r(0.0, "")])
    assert r(1.0, "stop").to_json()["ended_by"] == "stop"


def test_path_by_layer_charges_the_judging_layers_path_to_the_spot_given_up_next():
    acc = PathByLayer()
    for layer, m, given_up in (("look", 0.0, 0), ("explore", 1.0, 0), ("candidate", 0.5, 0), ("explore", 0.25, 0),
                               ("candidate", 0.5, 0),    # explore in between: still the same trip's path
                               ("candidate", 0.25, 1),   # the first spot was given up before this move
                               ("approach", 0.75, 1), ("stop", 0.0, 1)):
        acc.given_up(given_up)
        acc.moved(layer, m)
    fields = acc.result_fields()
    # layers that moved the robot, most path first; turning layers add nothing
    assert fields["path_by_layer_m"] == {"explore": 1.25, "candidate": 1.25, "approach": 0.75}
    assert list(fields["path_by_layer_m"]) == ["explore", "candidate", "approach"]
    # the 1.0 m of candidate path before the give-up led to a spot given up; what came after led to the end
    assert fields["path_given_up_m"] == {"candidate": 1.0}
    acc.given_up(1)   # the same count again charges nothing
    assert acc.result_fields()["path_given_up_m"] == {"candidate": 1.0}
    acc.given_up(2)
    assert acc.result_fields()["path_given_up_m"] == {"candidate": 1.25, "approach": 0.75}
    for bad in (-0.1, math.nan):
        with pytest.raises(ValueError, match="meters"):
            acc.moved("explore", bad)
    assert acc.result_fields()["path_by_layer_m"]["explore"] == 1.25   # a refused move changes nothing


def test_aggregate_means_the_path_by_layer_over_all_episodes():
    def r(path, given_up=None, length=4.0):
        return EpisodeResult(episode_id="x", scene_id="s", success=1.0, spl=0.5, soft_spl=0.5,
                             distance_to_goal_m=0.5, geodesic_distance_m=2.0, path_length_m=length, steps=10,
                             status=EpisodeStatus.STOPPED, ended_by="stop", path_by_layer_m=path,
                             path_given_up_m=given_up)
    res = [r({"explore": 3.0, "candidate": 1.0}, {"candidate": 1.0}), r({"explore": 2.0, "approach": 2.0})]
    s = aggregate(res)
    assert s["path_by_layer"] == {"explore": {"path_m": 2.5, "given_up_m": 0.0},
                                  "candidate": {"path_m": 0.5, "given_up_m": 0.5},
                                  "approach": {"path_m": 1.0, "given_up_m": 0.0}}
    assert sum(v["path_m"] for v in s["path_by_layer"].values()) == pytest.approx(s["path_length"])
    assert s["geodesic_distance"] == 2.0
    line = path_summary(s)
    assert line.startswith("path per episode 4.0 m (shortest 2.0 m): explore 2.5, approach 1.0, candidate 0.5 "
                           "(0.5 to spots given up)") and line.endswith("; 0.5 m to spots given up")
    assert "path_by_layer" not in aggregate([r(None)])   # agents without layers record none
    assert r({"explore": 1.0}).to_json()["path_by_layer_m"] == {"explore": 1.0}


def _visit(scene: str, spl_value: float) -> EpisodeResult:
    return EpisodeResult("e", scene, float(spl_value > 0), spl_value, spl_value, 0.5, 3.0, 3.0, 10,
                         EpisodeStatus.STOPPED)


def test_a_skipped_episode_takes_no_visit_but_keeps_its_place_in_a_run_of_visits():
    """`memnav eval` leaves an episode it could not run out (SkippedEpisode): no visit index, no SPL; with
    --lifelong-visits V its place still counts, so the next run of V episodes starts from a fresh memory as run."""
    from memnav.sim.metrics import SkippedEpisode, lifelong_known_house_spl, lifelong_spl_by_visit, visit_indices

    skip = SkippedEpisode("e1", "a", "episode e1 (a): the goal [0, 0, 0] is unreachable from the start")
    outcomes = [_visit("a", 0.2), skip, _visit("a", 0.4), _visit("a", 0.6), _visit("b", 0.8)]
    # one memory per house: the skipped episode is no visit, so the next is the house's second visit
    assert visit_indices(outcomes) == [0, None, 1, 2, 0]
    assert lifelong_spl_by_visit(outcomes) == pytest.approx([0.5, 0.4, 0.6])
    assert lifelong_known_house_spl(outcomes) == pytest.approx(0.5)
    # runs of 2: house a's are [0.2, skipped] and [0.4, 0.6] (each from an empty memory)
    assert visit_indices(outcomes, 2) == [0, None, 0, 1, 0]
    assert lifelong_spl_by_visit(outcomes, 2) == pytest.approx([(0.2 + 0.4 + 0.8) / 3, 0.6])
    assert lifelong_known_house_spl(outcomes, 2) == pytest.approx(0.6)
    # without skipped episodes, as before
    results = [o for o in outcomes if isinstance(o, EpisodeResult)]
    assert visit_indices(results, 2) == [0, 1, 0, 0]
    assert skip.to_json() == {"episode_id": "e1", "scene_id": "a", "reason": skip.reason}
