"""EpisodeRunner (the sim bridge's core): discrete actions move the robot in lock-step; in velocity mode they only
count toward the step limit, so a robot-like agent sending both an action and its velocity moves once."""
import numpy as np
import pytest
from conftest import make_tiny_dataset


@pytest.fixture(scope="module")
def runner_cfg(tmp_path_factory):
    from memnav.sim.runner import RunnerConfig

    data = make_tiny_dataset(tmp_path_factory.mktemp("runner") / "houses", houses=2, seed=4, test=3)
    return RunnerConfig(data=str(data), split="test", episodes=1)


def _runner(runner_cfg, max_steps):
    from memnav.sim.base import SimConfig
    from memnav.sim.runner import EpisodeRunner

    runner = EpisodeRunner(runner_cfg, SimConfig(max_episode_steps=max_steps))
    runner.next_episode()
    return runner


def test_an_action_that_only_counts_leaves_the_robot_where_it_is(runner_cfg):
    runner = _runner(runner_cfg, 500)
    start = runner.env.sim.agent_state.position.copy()
    obs, result = runner.act("MOVE_FORWARD", move=False)
    assert result is None and runner.env.steps == 1
    np.testing.assert_array_equal(runner.env.sim.agent_state.position, start)
    # the velocity command is what moves it, and only that adds to the path
    runner.drive(0.25, 0.0, 1.0)
    moved = float(np.linalg.norm(runner.env.sim.agent_state.position - start))
    assert moved > 0.2
    runner.act("TURN_LEFT", move=False)
    obs, result = runner.act("STOP", move=False)
    assert result is not None and result.steps == 3
    assert result.path_length_m == pytest.approx(moved, abs=1e-6)
    assert runner.env.done


def test_counted_actions_reach_the_step_limit(runner_cfg):
    runner = _runner(runner_cfg, 3)
    for _ in range(2):
        assert runner.act("TURN_RIGHT", move=False)[1] is None
    result = runner.act("MOVE_FORWARD", move=False)[1]
    assert result is not None and result.steps == 3 and result.success == 0.0
    assert result.status.name == "STEP_LIMIT"
    with pytest.raises(RuntimeError, match="over"):
        runner.act("MOVE_FORWARD", move=False)


def test_a_lockstep_action_moves_the_robot(runner_cfg):
    import math

    runner = _runner(runner_cfg, 500)
    before = runner.observation.pose
    obs, _ = runner.act("TURN_LEFT")
    turned = math.remainder(obs.pose.yaw_rad - before.yaw_rad, math.tau)
    assert turned == pytest.approx(math.radians(30), abs=1e-6) and runner.env.steps == 1


def test_a_scene_serves_only_its_episodes_and_an_unknown_one_is_named(tmp_path):

    from memnav.sim.base import SimConfig
    from memnav.sim.episodes import load_episodes
    from memnav.sim.runner import EpisodeRunner, RunnerConfig

    data = make_tiny_dataset(tmp_path / "houses", houses=4, seed=4, train=2)
    episodes = load_episodes(data, "train")
    house = episodes[-1].scene_name
    theirs = [e.episode_id for e in episodes if e.scene_name == house]
    assert len(theirs) < len(episodes)              # the split holds other houses' episodes too
    runner = EpisodeRunner(RunnerConfig(data=str(data), split="train", scene=house), SimConfig())
    assert [e.episode_id for e in runner.episodes] == theirs
    runner = EpisodeRunner(RunnerConfig(data=str(data), split="train", scene=house, first_episode=1, episodes=1),
                           SimConfig())
    assert [e.episode_id for e in runner.episodes] == theirs[1:2]
    with pytest.raises(ValueError, match=f"scene 'house_999'.*{house}"):
        EpisodeRunner(RunnerConfig(data=str(data), split="train", scene="house_999"), SimConfig())


def test_a_restarted_episode_keeps_one_result_of_its_last_ended_attempt(runner_cfg):
    """~/reset restarts the episode: an attempt given up records nothing, and one that had ended is replaced, in
    its place, when the restarted attempt ends (it was counted twice, skewing the summary and the results file);
    if the restarted attempt is given up too, the earlier result stands."""
    from dataclasses import replace

    from memnav.sim.base import SimConfig
    from memnav.sim.runner import EpisodeRunner

    runner = EpisodeRunner(replace(runner_cfg, episodes=2), SimConfig(max_episode_steps=4))
    runner.next_episode()
    runner.act("TURN_LEFT")
    runner.restart_episode()                                     # given up partway: no result
    for _ in range(4):
        runner.act("TURN_LEFT")
    assert len(runner.results) == 1 and runner.results[0].path_length_m == 0.0
    runner.restart_episode()                                     # ended, then restarted
    assert len(runner.results) == 1                              # the ended attempt stands until the new one ends
    runner.act("MOVE_FORWARD")
    _, result = runner.act("STOP")
    assert runner.results == [result] and result.steps == 2 and result.path_length_m > 0.2
    runner.restart_episode()
    runner.act("TURN_LEFT")
    runner.next_episode()                                        # the restarted attempt given up: the last stands
    assert runner.results == [result]
    for _ in range(4):
        runner.act("TURN_RIGHT")
    assert [r.episode_id for r in runner.results] == [e.episode_id for e in runner.episodes] and runner.finished
    runner.next_episode()                                        # wrapped around: a new visit, a result of its own
    runner.act("STOP")
    assert len(runner.results) == 3 and runner.results[2].episode_id == runner.episodes[0].episode_id
