"""AgentStates: the sim bridge's episode results get the layer that ended each episode and the belief at its STOP
from the agent's policy states, whichever arrives first, in lock-step and in real time."""
import pytest


def test_agent_states_fill_the_results_whichever_arrives_first():
    from memnav.core.types import EpisodeStatus
    from memnav.sim.agent_states import AgentStates
    from memnav.sim.metrics import EpisodeResult

    def result(status):
        return EpisodeResult(episode_id="e", scene_id="s", success=1.0, spl=1.0, soft_spl=1.0, distance_to_goal_m=0.1,
                             geodesic_distance_m=2.0, path_length_m=2.0, steps=5, status=status)
    results = [result(EpisodeStatus.STOPPED), result(EpisodeStatus.STEP_LIMIT), result(EpisodeStatus.STOPPED)]
    states = AgentStates(results, keep=2)
    states.add({"stamp_ns": 10, "action": "STOP", "mode": "candidate", "belief": 0.7})   # the state comes first
    states.expect(10, 0)
    states.expect(20, 1)                                                                 # the episode ends first
    assert states.waiting
    states.add({"stamp_ns": 20, "action": "MOVE_FORWARD", "mode": "explore", "belief": 0.2})
    assert not states.waiting
    assert (results[0].ended_by, results[0].stop_belief) == ("candidate", 0.7)
    assert (results[1].ended_by, results[1].stop_belief) == ("explore", None)   # no STOP: no belief at a STOP
    for stamp in (30, 40, 50):                                                   # only the newest `keep` are kept
        states.add({"stamp_ns": stamp, "action": "TURN_LEFT", "mode": "look", "belief": 0.1})
    states.expect(10, 2)
    assert states.waiting and results[2].ended_by == ""
    with pytest.raises((KeyError, TypeError, ValueError)):
        states.add({"mode": "look"})


def test_agent_states_in_real_time_match_the_stop_of_each_goal():
    """Real time: the bridge does not know the frame of the agent's last decision. A STOP ending takes the agent's
    STOP state of that goal (before or after the result, never one of the next goal's); a step-limit ending the
    newest state of that goal that has arrived."""
    from memnav.core.types import EpisodeStatus
    from memnav.sim.agent_states import AgentStates
    from memnav.sim.metrics import EpisodeResult

    def result(status):
        return EpisodeResult(episode_id="e", scene_id="s", success=1.0, spl=1.0, soft_spl=1.0, distance_to_goal_m=0.1,
                             geodesic_distance_m=2.0, path_length_m=2.0, steps=5, status=status)

    results = [result(EpisodeStatus.STOPPED)]
    states = AgentStates(results)
    states.goal_started(100)
    states.add({"stamp_ns": 90, "action": "STOP", "mode": "stop", "belief": 0.9})         # an earlier goal's
    states.add({"stamp_ns": 110, "action": "MOVE_FORWARD", "mode": "explore", "belief": 0.1})
    states.add({"stamp_ns": 130, "action": "STOP", "mode": "candidate", "belief": 0.8})  # the state comes first
    states.add({"stamp_ns": 140, "action": "TURN_LEFT", "mode": "look", "belief": 0.2})  # a late frame's decision
    states.expect_real_time(0, 100)
    assert not states.waiting and (results[0].ended_by, results[0].stop_belief) == ("candidate", 0.8)

    results.append(result(EpisodeStatus.STOPPED))                                       # the episode ends first
    states.goal_started(200)
    states.add({"stamp_ns": 210, "action": "TURN_LEFT", "mode": "look", "belief": 0.3})
    states.expect_real_time(1, 200)
    assert states.waiting and results[1].ended_by == ""
    states.goal_started(300)                                                            # the next goal is out
    states.add({"stamp_ns": 310, "action": "STOP", "mode": "approach", "belief": 0.95})  # the next goal's STOP
    assert states.waiting and results[1].ended_by == ""
    states.add({"stamp_ns": 250, "action": "STOP", "mode": "stop", "belief": 0.85})      # its own, late
    assert not states.waiting and (results[1].ended_by, results[1].stop_belief) == ("stop", 0.85)

    results.append(result(EpisodeStatus.STEP_LIMIT))
    states.goal_started(400)
    states.add({"stamp_ns": 420, "action": "MOVE_FORWARD", "mode": "best_view", "belief": 0.4})
    states.add({"stamp_ns": 410, "action": "TURN_LEFT", "mode": "explore", "belief": 0.1})  # out of order
    states.expect_real_time(2, 400)
    assert not states.waiting and (results[2].ended_by, results[2].stop_belief) == ("best_view", None)


def test_write_results_of_a_lifelong_run_gives_spl_by_visit_and_the_run_settings(tmp_path):
    import json

    from memnav.core.types import EpisodeStatus
    from memnav.sim.agent_states import write_results
    from memnav.sim.metrics import EpisodeResult
    from memnav.sim.runner import RunnerConfig

    results = [EpisodeResult(episode_id=f"h_{i}", scene_id="scenes/h.glb", success=1.0, spl=spl, soft_spl=spl,
                             distance_to_goal_m=0.1, geodesic_distance_m=2.0, path_length_m=2.0 / spl, steps=9,
                             status=EpisodeStatus.STOPPED) for i, spl in enumerate((0.5, 0.9))]
    path = write_results(str(tmp_path / "out" / "r.json"), "memnav", results, RunnerConfig(scene="h"), lifelong=True,
                         odometry_origin="start", lifelong_earlier_memory=["h"])
    doc = json.loads(path.read_text())
    assert doc["lifelong"] is True and doc["lifelong_spl_by_visit"] == pytest.approx([0.5, 0.9])
    assert doc["lifelong_spl_known_house"] == pytest.approx(0.9)
    assert (doc["odometry_origin"], doc["lifelong_earlier_memory"]) == ("start", ["h"])
    assert doc["source"] == "sim_bridge_node" and [e["episode_id"] for e in doc["per_episode"]] == ["h_0", "h_1"]
    assert doc["episodes"] == doc["episodes_run"] == 2   # the keys of `memnav eval --json`, same meaning
    assert not path.with_name("r.json.tmp").exists()   # written whole, then renamed into place


def test_write_results_is_strict_json_with_a_stop_belief_never_computed(tmp_path):
    import json

    from memnav.core.types import EpisodeStatus
    from memnav.sim.agent_states import write_results
    from memnav.sim.metrics import EpisodeResult
    from memnav.sim.runner import RunnerConfig

    result = EpisodeResult(episode_id="h_0", scene_id="scenes/h.glb", success=0.0, spl=0.0, soft_spl=0.1,
                           distance_to_goal_m=3.0, geodesic_distance_m=4.0, path_length_m=2.0, steps=9,
                           status=EpisodeStatus.STOPPED)
    result.stop_belief = float("nan")      # a policy state's belief that was never computed
    path = write_results(str(tmp_path / "r.json"), "memnav", [result], RunnerConfig(scene="h"))
    text = path.read_text()
    assert "NaN" not in text
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the results file"))
    assert doc["per_episode"][0]["stop_belief"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_late_state_of_a_restarted_episodes_earlier_attempt_leaves_the_new_attempts_result(tmp_path):
    """~/reset restarts an ended episode and the runner puts the new attempt's result in the earlier one's place: a
    policy state of the earlier attempt still awaited then, arriving after the new attempt's result was completed,
    overwrote it with the earlier attempt's layer and belief (in lock-step and in real time)."""
    from conftest import make_tiny_dataset

    from memnav.sim.agent_states import AgentStates
    from memnav.sim.base import SimConfig
    from memnav.sim.runner import EpisodeRunner, RunnerConfig

    cfg = RunnerConfig(data=str(make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)), split="test",
                       episodes=1)

    # lock-step: as sim_bridge_node's on_action, the result of the action decided on a frame awaits that frame's state
    runner = EpisodeRunner(cfg, SimConfig(max_episode_steps=2))
    runner.next_episode()
    states = AgentStates(runner.results)
    runner.act("TURN_LEFT")
    assert runner.act("TURN_LEFT")[1] is not None                           # attempt 1: the step limit, frame 11
    states.expect(11, len(runner.results) - 1)
    runner.restart_episode()
    runner.act("MOVE_FORWARD")
    runner.act("TURN_LEFT")                                                  # attempt 2: the step limit, frame 21
    states.add({"stamp_ns": 21, "action": "TURN_LEFT", "mode": "explore", "belief": 0.1})
    states.expect(21, len(runner.results) - 1)
    assert len(runner.results) == 1 and runner.results[0].ended_by == "explore"
    states.add({"stamp_ns": 11, "action": "TURN_LEFT", "mode": "look", "belief": 0.3})   # attempt 1's, late
    assert runner.results[0].ended_by == "explore" and runner.results[0].path_length_m > 0.2
    assert not states.waiting   # nor did the results file wait for attempt 1's state once attempt 2 had ended

    # real time: a STOP awaits the agent's STOP state of its goal
    runner = EpisodeRunner(cfg, SimConfig(max_episode_steps=5))
    runner.next_episode()
    states = AgentStates(runner.results)
    states.goal_started(100)
    runner.act("STOP", move=False)
    states.expect_real_time(len(runner.results) - 1, 100)                   # attempt 1's STOP state not in yet
    runner.restart_episode()
    states.goal_started(200)
    states.add({"stamp_ns": 210, "action": "STOP", "mode": "candidate", "belief": 0.6})
    runner.act("TURN_LEFT", move=False)
    runner.act("STOP", move=False)
    states.expect_real_time(len(runner.results) - 1, 200)
    assert (runner.results[0].ended_by, runner.results[0].stop_belief, runner.results[0].steps) == ("candidate", 0.6, 2)
    states.add({"stamp_ns": 150, "action": "STOP", "mode": "stop", "belief": 0.99})     # attempt 1's, late
    assert (runner.results[0].ended_by, runner.results[0].stop_belief) == ("candidate", 0.6)
    assert not states.waiting
