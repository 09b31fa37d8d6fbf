"""memnav.core.stack_status: the summary `memnav status` prints from what the stack's nodes publish."""
from memnav.core.stack_status import GraphSettle, Heard, summarize


def test_a_robot_at_work_is_summarised_with_its_goal_decision_safety_and_memory():
    heard = Heard(namespace="/robot1", listened_s=2.0, now_s=110.0,
                  nodes=[("policy_node", "/robot1"), ("safety_node", "/robot1"), ("memnav_status", "/robot1"),
                         ("policy_node", "/robot2"), ("camera", "/robot1")],
                  goal_status={"goal_stamp_ns": 100_000_000_000, "status": "active", "actions": 45, "mode": None},
                  policy_state={"action": "MOVE_FORWARD", "mode": "explore", "belief": 0.123, "places": 34,
                                "localised": True},
                  policy_state_age_s=0.3,
                  safety={"estop": True, "v_mps": 0.0, "w_radps": 0.0, "reason": "estop",
                          "age_s": {"color": 0.03, "depth": None, "odom": 0.01}},
                  scene_graph={"places": 12, "objects": 3, "rooms": 2, "localised": True},
                  diagnostics={"/robot1/safety_node": ("WARN", "emergency stop engaged"),
                               "/robot2/policy_node": ("ERROR", "no camera_info"),    # another robot's
                               "/robot1/camera": ("OK", "streaming")})               # not the stack's
    lines, body, ok = summarize(heard)
    text = "\n".join(lines)
    assert ok and body["nodes"] == ["policy_node", "safety_node"]   # other nodes are not the stack's
    assert "diagnostics: safety_node WARN: emergency stop engaged" in text and "no camera_info" not in text
    assert body["diagnostics"] == {"safety_node": {"level": "WARN", "message": "emergency stop engaged"}}
    assert "goal: working on it, 45 actions, sent 10.0 s ago" in text
    assert "last decision 0.3 s ago: MOVE_FORWARD, mode explore, belief 0.12, memory 34 places" in text
    assert "safety: e-stop ENGAGED; commanding 0.00 m/s, 0.00 rad/s (estop); input ages: color 0.03 s, depth -, " \
           "odom 0.01 s" in text
    assert "memory node: 12 places, 3 objects, 2 rooms" in text
    assert "not running: sim_bridge_node" in text and "not running: policy_node" not in text
    assert body["goal_status"]["actions"] == 45 and body["policy_node_elsewhere"] == ["/robot2"]
    assert "/robot2/policy_node" in body["node_names"]
    # forward held by the depth image: the nearest surface in the path is named
    heard.safety = {"estop": False, "v_mps": 0.0, "w_radps": 0.4, "reason": "obstacle_ahead", "ahead_m": 0.214,
                    "age_s": {}}
    assert "safety: e-stop released; commanding 0.00 m/s, 0.40 rad/s (obstacle_ahead); nearest in the path " \
           "0.21 m" in summarize(heard)[0]


def test_no_policy_node_in_the_namespace_names_where_one_runs():
    heard = Heard(namespace="/robot9", listened_s=1.0, now_s=5.0, nodes=[("policy_node", "/")])
    lines, body, ok = summarize(heard)
    assert not ok and not body["nodes"] and "nodes: none of memnav's" in lines
    assert "  a policy node runs in /: try no --namespace" in lines and "goal: -" in lines
    heard = Heard(namespace="/", listened_s=1.0, now_s=5.0, nodes=[("policy_node", "/robot1")])
    assert "  a policy node runs in /robot1: try --namespace robot1" in summarize(heard)[0]


def test_an_ended_goal_and_a_quiet_policy_node_are_said_as_such():
    heard = Heard(namespace="/", listened_s=2.0, now_s=1e9, nodes=[("policy_node", "/")],
                  goal_status={"goal_stamp_ns": 5, "status": "cancelled", "actions": 7, "mode": None})
    text = "\n".join(summarize(heard)[0])
    assert "goal: ended: cancelled, 7 actions" in text and ", sent" not in text   # a stamp from another clock
    assert "last decision: none while listening" in text
    heard = Heard(namespace="/", listened_s=2.0, now_s=1.0, nodes=[("policy_node", "/")])
    assert "goal: none since the policy node started" in summarize(heard)[0]
    heard = Heard(namespace="/", listened_s=2.0, now_s=1e9, nodes=[("policy_node", "/")],
                  goal_status={"goal_stamp_ns": 5, "status": "active", "actions": 48, "mode": "explore",
                               "resumed": 2})
    assert ("goal: working on it, 48 actions, mode explore, resumed after 2 restarts of the policy node"
            in summarize(heard)[0])


def test_a_node_running_twice_in_the_namespace_is_warned_of():
    heard = Heard(namespace="/", listened_s=1.0, now_s=5.0,
                  nodes=[("policy_node", "/"), ("policy_node", "/"), ("safety_node", "/"), ("policy_node", "/r2")])
    lines, body, ok = summarize(heard)
    assert ok and body["nodes"] == ["policy_node", "safety_node"] and body["running_twice"] == ["policy_node"]
    assert any(line.startswith("  WARNING: 2 nodes named policy_node in /") for line in lines)
    assert summarize(Heard(namespace="/", listened_s=1.0, now_s=5.0, nodes=[("policy_node", "/")]))[1][
        "running_twice"] == []


def test_the_node_list_is_listened_to_until_it_has_not_changed_for_the_settle_time():
    settle = GraphSettle(listen_end_s=2.0, settle_s=1.0)
    policy = [("policy_node", "/")]
    assert not settle.update(policy, 0.0)
    assert not settle.update(policy, 1.9)                 # the listen window is not over
    bridge_late = policy + [("sim_bridge_node", "/")]
    assert not settle.update(bridge_late, 2.1)            # a node discovered late restarts the wait ...
    assert not settle.update(list(reversed(bridge_late)), 2.9)   # ... order alone is no change
    assert settle.update(bridge_late, 3.1)
    quiet = GraphSettle(listen_end_s=2.0, settle_s=1.0)
    assert not quiet.update(policy, 0.0) and quiet.update(policy, 2.0)   # a still list ends with the window


def test_a_node_heard_on_diagnostics_runs_even_before_the_graph_lists_it():
    heard = Heard(namespace="/", listened_s=2.0, now_s=10.0, nodes=[("policy_node", "/")],
                  diagnostics={"/sim_bridge_node": ("OK", "episode 1 of 3 (house_016_0): 4 actions")})
    lines, body, ok = summarize(heard)
    assert ok and body["nodes"] == ["policy_node", "sim_bridge_node"] and "sim_bridge_node" not in body["not_running"]
    assert "diagnostics: sim_bridge_node OK: episode 1 of 3" in "\n".join(lines)
