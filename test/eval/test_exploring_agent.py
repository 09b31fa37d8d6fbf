"""The memnav agent finds a goal photo's place in an unseen two-room scene by exploring its own map."""
import math

import numpy as np

from memnav.core.types import Action
from memnav.eval.learned_agents import LearnedAgent, LearnedAgentOptions
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator


def _run(sim, agent, start, start_yaw, goal_pos, goal_yaw, max_steps=300):
    goal = sim.render_at(goal_pos, goal_yaw)
    sim.set_agent_pose(start, start_yaw)
    obs = sim.render_at(start, start_yaw)
    agent.begin("two_rooms", goal.rgb, goal.depth)
    modes = []
    for _ in range(max_steps):
        action = agent.act(obs)
        modes.append(agent.navigator.mode)
        if action == Action.STOP:
            break
        obs = sim.step(action)
    return action, sim.agent_state.position, modes


def test_memnav_explores_into_the_other_room_and_stops_at_the_goal(two_room_scene):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    agent = LearnedAgent("memnav", LearnedAgentOptions())
    try:
        goal_pos = np.array([7.0, 0.0, 3.0])
        action, pos, modes = _run(sim, agent, np.array([1.0, 0.0, 3.0]), 0.0, goal_pos, 1.57)
        assert action == Action.STOP
        assert sim.geodesic_distance(pos, goal_pos) < 1.0
        assert "explore" in modes               # it had to search: the goal is behind the wall
        assert agent.navigator.explorer.map is not None
    finally:
        agent.close()
        sim.close()


def test_without_exploration_the_policy_drives_alone(two_room_scene):
    sim = EmbeddedSimulator(two_room_scene, SimConfig(seed=3))
    agent = LearnedAgent("memnav", LearnedAgentOptions(explore=False))
    try:
        _, _, modes = _run(sim, agent, np.array([1.0, 0.0, 3.0]), 0.0, np.array([6.5, 0.0, 1.0]), 0.6,
                           max_steps=20)
        assert set(modes) <= {"policy", "homing", "stop"}
        assert agent.navigator.explorer.map is None
        assert math.isfinite(agent.navigator.last.similarity)
    finally:
        agent.close()
        sim.close()
