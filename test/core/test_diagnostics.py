"""memnav.core.diagnostics: the status every memnav node puts on /diagnostics."""
from memnav.core.diagnostics import (
    INPUT_SILENT_S,
    DiagnosticLevel,
    PolicyHealth,
    bridge_diagnostic,
    encoder_diagnostic,
    memory_diagnostic,
    policy_diagnostic,
    safety_diagnostic,
    stop_diagnostic,
)

FRESH = {"color": 0.1, "depth": 0.1, "odom": 0.02}


def health(**kw) -> PolicyHealth:
    base = dict(hfov_deg=69.4, waiting_s=30.0, camera_mismatch=None, input_age_s=dict(FRESH), lockstep=False,
                encoder="models/encoder_fov60.pt")
    return PolicyHealth(**{**base, **kw})


def test_a_healthy_policy_node_says_what_it_does():
    idle = policy_diagnostic(health())
    assert idle.level is DiagnosticLevel.OK and idle.message == "waiting for a goal"
    assert idle.values["goal"] == "none" and idle.values["camera_hfov_deg"] == "69.4"
    assert idle.values["color_age_s"] == "0.10" and idle.values["localised"] == "no memory"
    busy = policy_diagnostic(health(goal={"status": "active", "actions": 12, "mode": "explore"}, places=30,
                                    localised=True))
    assert busy.level is DiagnosticLevel.OK and busy.message == "working on a goal: 12 actions"
    assert (busy.values["mode"], busy.values["places"], busy.values["localised"]) == ("explore", "30", "true")
    resumed = policy_diagnostic(health(goal={"status": "active", "actions": 31, "mode": "explore", "resumed": 1}))
    assert resumed.message == "working on a goal: 31 actions (resumed after 1 restart of this node)"
    assert resumed.values["resumed"] == "1" and busy.values["resumed"] == "0"
    done = policy_diagnostic(health(goal={"status": "stopped", "actions": 80, "mode": "stop"}))
    assert done.message == "waiting for a goal (the last one: stopped after 80 actions)"


def test_what_stops_the_policy_node_is_an_error_and_a_caveat_a_warning():
    blind = policy_diagnostic(health(hfov_deg=None, waiting_s=6.0))
    assert blind.level is DiagnosticLevel.ERROR and blind.message.startswith("no camera_info")
    assert blind.values["camera_hfov_deg"] == "unknown" and blind.values["doing"] == "waiting for a goal"
    assert policy_diagnostic(health(hfov_deg=None, waiting_s=2.0)).level is DiagnosticLevel.OK   # still starting
    silent = {**FRESH, "color": INPUT_SILENT_S + 1.0, "odom": None}
    working = policy_diagnostic(health(input_age_s=silent, goal={"status": "active", "actions": 3}))
    assert working.level is DiagnosticLevel.ERROR and working.message == (
        f"no color, odom for over {INPUT_SILENT_S:g} s: no decisions")
    assert working.values["odom_age_s"] == "never"
    idle = policy_diagnostic(health(input_age_s=silent))
    assert idle.level is DiagnosticLevel.WARN and "no decisions" not in idle.message
    # lock-step evaluation: frames come only when the simulator steps, so silence is not reported
    assert policy_diagnostic(health(input_age_s=silent, lockstep=True)).level is DiagnosticLevel.OK
    narrow = policy_diagnostic(health(camera_mismatch="the camera's 60.0 deg field of view is narrower", dropped_new=2,
                                      dropped_total=5))
    assert narrow.level is DiagnosticLevel.WARN and narrow.values["dropped"] == "5"
    assert narrow.message == ("the camera's 60.0 deg field of view is narrower; 2 messages dropped since the last "
                              "report (see the node's log)")
    full = policy_diagnostic(health(memory_error="database or disk is full", places=40, localised=True))
    assert full.level is DiagnosticLevel.ERROR and "no longer saved (database or disk is full)" in full.message
    unkept = policy_diagnostic(health(goal_state_error="[Errno 30] Read-only file system"))
    assert unkept.level is DiagnosticLevel.WARN and unkept.message == (
        "the goal is not kept on disk ([Errno 30] Read-only file system): a restart of this node would lose it")
    mount = policy_diagnostic(health(mount_warning="the floor in view puts the camera 0.90 m above it: set "
                                                   "camera_height_m 0.90 (set: 1.25)"))
    assert mount.level is DiagnosticLevel.WARN and mount.message.startswith("camera mount: the floor in view")
    both = policy_diagnostic(health(hfov_deg=None, waiting_s=9.0, dropped_new=1))
    assert both.level is DiagnosticLevel.ERROR and both.message.startswith("no camera_info")   # worst first


def test_the_safety_nodes_guard_reason_sets_its_level():
    body = {"reason": "limited", "v_mps": 0.4, "w_radps": 0.2, "requested_v_mps": 0.6, "requested_w_radps": 0.2,
            "estop": False, "age_s": {"color": 0.03, "depth": 0.04, "odom": None}, "dropped": {"command": 1}}
    ok = safety_diagnostic(body)
    assert ok.level is DiagnosticLevel.OK and "limited by the speed" in ok.message
    assert ok.values["v_mps"] == "0.400" and ok.values["odom_age_s"] == "never" and ok.values["dropped_command"] == "1"
    stale = safety_diagnostic({**body, "reason": "stale_depth", "v_mps": 0.0})
    assert stale.level is DiagnosticLevel.ERROR and stale.message.startswith("no depth image within the watchdog")
    estop = safety_diagnostic({**body, "reason": "estop", "estop": True}, dropped_new=3)
    assert estop.level is DiagnosticLevel.WARN and estop.values["estop"] == "true"
    assert estop.message.startswith("emergency stop engaged") and "3 messages dropped" in estop.message
    assert safety_diagnostic({**body, "reason": "stale_command"}).level is DiagnosticLevel.WARN
    assert safety_diagnostic({**body, "reason": "ok"}, dropped_new=1).level is DiagnosticLevel.WARN
    assert safety_diagnostic({**body, "reason": "???"}).level is DiagnosticLevel.ERROR
    held = safety_diagnostic({**body, "reason": "obstacle_ahead", "ahead_m": 0.24})
    assert held.level is DiagnosticLevel.WARN and held.message.startswith("forward held")
    assert held.values["ahead_m"] == "0.240" and ok.values["ahead_m"] == ""


def test_levels_are_named_as_the_message_carries_them():
    assert DiagnosticLevel.name_of(b"\x01") == "WARN" and DiagnosticLevel.name_of(2) == "ERROR"
    assert DiagnosticLevel.name_of(b"\x07") == "level 7"


def test_the_memory_nodes_status_is_its_size_until_it_can_no_longer_save():
    size = {"places": 40, "objects": 3, "rooms": 2}
    ok = memory_diagnostic(size, True, "/data/house.db", None, dropped_total=1)
    assert ok.level is DiagnosticLevel.OK and ok.message == "40 places, 3 objects, 2 rooms, localised"
    assert ok.values == {"places": "40", "objects": "3", "rooms": "2", "localised": "true",
                         "db_path": "/data/house.db", "dropped": "1"}
    in_ram = memory_diagnostic(size, False, None, None)
    assert in_ram.message == "40 places, 3 objects, 2 rooms, relocalising, in RAM only"
    full = memory_diagnostic(size, True, "/data/house.db", "database or disk is full", dropped_new=2)
    assert full.level is DiagnosticLevel.ERROR and full.message.startswith("the memory is no longer saved")
    assert "2 messages dropped" in full.message and full.values["doing"].startswith("40 places")


def test_the_simulator_bridge_says_which_episode_it_serves():
    running = bridge_diagnostic(3, 12, "house_016_2", 45, False, 1, 2, lockstep=True)
    assert running.level is DiagnosticLevel.OK
    assert running.message == "episode 3 of 12 (house_016_2): 45 actions; 1 of 2 ended episodes successful"
    assert running.values["episode"] == "house_016_2" and running.values["lockstep"] == "true"
    first = bridge_diagnostic(1, 12, "house_016_0", 0, False, 0, 0, lockstep=False)
    assert first.message == "episode 1 of 12 (house_016_0): 0 actions"
    over = bridge_diagnostic(12, 12, "house_017_11", 80, True, 9, 12, lockstep=True, dropped_new=4)
    assert over.level is DiagnosticLevel.WARN and over.values["doing"].startswith("episode 12 of 12 (house_017_11): "
                                                                                  "over after 80 actions")


def test_the_encoder_and_stop_nodes_count_what_they_did():
    enc = encoder_diagnostic(120, True, rgbd=True, dropped_total=2)
    assert enc.level is DiagnosticLevel.OK and enc.message == "120 colour-depth pairs encoded; goal photo encoded"
    assert enc.values == {"frames": "120", "goal": "true", "rgbd": "true", "dropped": "2"}
    assert encoder_diagnostic(0, False, rgbd=False).message == "0 colour frames encoded; no goal photo yet"
    assert encoder_diagnostic(5, True, rgbd=True, dropped_new=1).level is DiagnosticLevel.WARN
    stop = stop_diagnostic(30, True, {"stop": False, "belief": 0.234})
    assert stop.level is DiagnosticLevel.OK and stop.message == "30 stop decisions; the last: go on at belief 0.23"
    assert (stop.values["last_stop"], stop.values["last_belief"]) == ("false", "0.234")
    assert stop_diagnostic(0, False, None).message == "0 stop decisions; no goal embedding yet"
