import pytest

from memnav.core.types import EpisodeStatus
from memnav.sim.metrics import EpisodeResult, aggregate, is_success, soft_spl, spl


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
