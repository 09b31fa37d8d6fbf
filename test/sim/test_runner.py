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
