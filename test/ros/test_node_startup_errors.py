"""Nodes refuse a bad configuration at start-up with one line on stderr and exit status CONFIG_ERROR_EXIT (2):
values out of range, missing files, values of the wrong type, parameters they do not declare. An integer is
taken for a float parameter. Bugs keep their traceback."""
from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import close_ros_test, use_isolated_ros_domain  # noqa: E402

from memnav.ros.params import (  # noqa: E402
    ParameterTypeError,
    UnknownParameterError,
    check_overrides,
    coerce_parameter,
    declare_dataclass,
    misnamed_sections,
)
from memnav.ros.sim_bridge_node import BridgeConfig, check_runner_config  # noqa: E402
from memnav.ros.stack_node import CONFIG_ERROR_EXIT, run_nodes  # noqa: E402
from memnav.ros.stop_node import StopNodeConfig  # noqa: E402
from memnav.sim.runner import RunnerConfig  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.fixture
def ros_env(monkeypatch):
    return use_isolated_ros_domain(monkeypatch, 127)


@pytest.fixture
def make_node(ros_env):
    """Nodes on a private context (nothing spins), destroyed afterwards."""
    from rclpy.context import Context
    from rclpy.node import Node

    context = Context()
    rclpy.init(context=context, domain_id=ros_env)
    nodes = []

    def make(name: str, **overrides):
        from rclpy.parameter import Parameter

        nodes.append(Node(name, context=context,
                          parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()]))
        return nodes[-1]

    yield make
    for node in nodes:
        node.destroy_node()
    rclpy.shutdown(context=context)


# --- types: an integer for a float is taken, other mismatches are refused by name ---

def test_coerce_takes_an_integer_for_a_float_and_refuses_other_types():
    assert coerce_parameter("rate", 2, 1.0) == 2.0 and isinstance(coerce_parameter("rate", 2, 1.0), float)
    assert coerce_parameter("xs", [1, 2.5], [0.0]) == [1.0, 2.5]
    assert coerce_parameter("n", 3, 1) == 3 and coerce_parameter("on", False, True) is False
    cases = [("rate", "abc", 1.0, "parameter 'rate' expects a double, got string 'abc'"),
             ("rate", True, 1.0, "expects a double, got bool True"),
             ("n", 2.5, 1, "parameter 'n' expects an integer, got double 2.5"),
             ("on", 1, True, "expects a bool, got integer 1"),
             ("split", 1, "test", "expects a string, got integer 1"),
             ("xs", ["a"], [0.0], "parameter 'xs' expects a double array, got string array ['a']")]
    for name, value, default, message in cases:
        with pytest.raises(ParameterTypeError, match=message.replace("[", r"\[").replace("]", r"\]")):
            coerce_parameter(name, value, default)


def test_declare_dataclass_declares_an_integer_override_of_a_float_as_double(make_node):
    from rclpy.parameter import Parameter

    node = make_node("stop_node", verify_min_similarity=1, image_queue_size=5)
    cfg = declare_dataclass(node, StopNodeConfig)
    assert cfg.verify_min_similarity == 1.0 and isinstance(cfg.verify_min_similarity, float)
    assert cfg.image_queue_size == 5
    param = node.get_parameter("verify_min_similarity")
    assert param.type_ == Parameter.Type.DOUBLE and param.value == 1.0
    node.set_parameters([Parameter("verify_min_similarity", value=0.5)])   # stays a double parameter
    assert node.get_parameter("verify_min_similarity").value == 0.5


def test_a_change_at_run_time_is_refused_when_read_at_start_and_checked_and_applied_when_live(make_node):
    from rclpy.parameter import Parameter

    from memnav.core.velocity_guard import VelocityGuardConfig
    from memnav.ros.params import guard_parameter_changes, live_group

    node = make_node("safety_node")
    declare_dataclass(node, StopNodeConfig)
    declare_dataclass(node, VelocityGuardConfig, prefix="guard.")
    applied = []
    live_group(node, "guard.", applied.append)
    with pytest.raises(KeyError, match="no parameters under 'limits.'"):
        live_group(node, "limits.", applied.append)
    guard_parameter_changes(node)
    # read at start only: refused, naming it, the value in force kept
    result = node.set_parameters([Parameter("verify_min_similarity", value=0.5)])[0]
    assert not result.successful and "verify_min_similarity is read when safety_node starts" in result.reason
    assert node.get_parameter("verify_min_similarity").value != 0.5
    # live: built anew and applied; two limits of one request together
    result = node.set_parameters_atomically([Parameter("guard.max_linear_mps", value=0.3),
                                             Parameter("guard.watchdog_s", value=0.8)])
    assert result.successful, result.reason
    assert len(applied) == 1 and (applied[0].max_linear_mps, applied[0].watchdog_s) == (0.3, 0.8)
    # refused by the dataclass: nothing of the request is set, nothing applied
    result = node.set_parameters_atomically([Parameter("guard.max_angular_radps", value=0.5),
                                             Parameter("guard.max_linear_mps", value=-1.0)])
    assert not result.successful and "VelocityGuardConfig.max_linear_mps must be finite and >= 0" in result.reason
    assert len(applied) == 1 and node.get_parameter("guard.max_angular_radps").value == 1.0
    assert node.get_parameter("guard.max_linear_mps").value == 0.3
    # a live change after a refused one starts from what is in force
    assert node.set_parameters([Parameter("guard.max_angular_radps", value=0.5)])[0].successful
    assert (applied[-1].max_angular_radps, applied[-1].max_linear_mps, applied[-1].watchdog_s) == (0.5, 0.3, 0.8)
    # not memnav's: left to rclpy
    assert node.set_parameters([Parameter("use_sim_time", value=False)])[0].successful


def test_declare_dataclass_refuses_a_string_for_a_float_by_name(make_node):
    node = make_node("stop_node", verify_min_similarity="high")
    with pytest.raises(ParameterTypeError, match="parameter 'verify_min_similarity' expects a double, got string"):
        declare_dataclass(node, StopNodeConfig)


# --- unknown parameters: refused when addressed to the node, with the closest declared name ---

def _ros(*options: str) -> list[str]:
    return ["stop_node", "--ros-args", *options]


def test_unknown_command_line_parameter_is_refused_with_a_suggestion(make_node):
    node = make_node("stop_node")
    declare_dataclass(node, StopNodeConfig)
    check_overrides([node], _ros("-p", "verify_min_similarity:=0.5", "-p", "use_sim_time:=true",
                                 "-p", "other_node:anything:=1", "-r", "-p:=/x"))   # the remap is not a -p
    with pytest.raises(UnknownParameterError,
                       match="unknown parameter 'verify_min_similaity' for stop_node .*did you mean "
                             "'verify_min_similarity'"):
        check_overrides([node], _ros("-p", "verify_min_similaity:=0.5"))
    with pytest.raises(UnknownParameterError, match="'calibraton'.*did you mean 'calibration'"):
        check_overrides([node], _ros("-p", "stop_node:calibraton:=x"))


def test_process_wide_parameter_needs_one_node_that_declares_it(make_node):
    stop, other = make_node("stop_node"), make_node("encoder_node")
    declare_dataclass(stop, StopNodeConfig)
    check_overrides([stop, other], _ros("-p", "image_queue_size:=3"))   # declared by stop_node only: fine
    with pytest.raises(UnknownParameterError, match="'image_queue_sise' for stop_node, encoder_node"):
        check_overrides([stop, other], _ros("-p", "image_queue_sise:=3"))
    with pytest.raises(UnknownParameterError, match="'image_queue_size' for encoder_node"):
        check_overrides([stop, other], _ros("-p", "encoder_node:image_queue_size:=3"))


def test_params_file_sections_by_name_are_checked_wildcards_are_not(make_node, tmp_path):
    node = make_node("safety_node")
    from memnav.ros.safety_node import PARAMETER_GROUPS

    for prefix, cls in PARAMETER_GROUPS:
        declare_dataclass(node, cls, prefix=prefix)
    shared = tmp_path / "shared.yaml"
    shared.write_text("/**:\n  ros__parameters:\n    frame_id: map\n"
                      "policy_node:\n  ros__parameters:\n    agent: memnav\n"
                      "/safety_node:\n  ros__parameters:\n    rate_hz: 20\n    guard:\n      max_linear_mps: 0.3\n")
    check_overrides([node], _ros("--params-file", str(shared)))
    typo = tmp_path / "typo.yaml"
    typo.write_text("safety_node:\n  ros__parameters:\n    max_linear_mp: 0.2\n")
    with pytest.raises(UnknownParameterError, match=f"'max_linear_mp' for safety_node \\(from {typo}\\); did you "
                                                    "mean 'guard.max_linear_mps'"):
        check_overrides([node], _ros("--params-file", str(typo)))
    nested = tmp_path / "nested.yaml"   # a section under a namespace key that is not this node's: not addressed
    nested.write_text("/robot2:\n  safety_node:\n    ros__parameters:\n      bogus: 1\n")
    check_overrides([node], _ros("--params-file", str(nested)))
    misnamed = tmp_path / "misnamed.yaml"
    misnamed.write_text("safty_node:\n  ros__parameters:\n    rate_hz: 20.0\n")
    assert misnamed_sections([node], _ros("--params-file", str(shared))) == []
    [warning] = misnamed_sections([node], _ros("--params-file", str(misnamed)))
    assert "'safty_node'" in warning and "did you mean 'safety_node'" in warning


# --- run_nodes: one line, exit status 2, rclpy shut down; bugs keep their traceback ---

def test_run_nodes_reports_a_configuration_error_in_one_line_and_shuts_rclpy_down(ros_env, capsys):
    closed = []

    def build(node):
        declare_dataclass(node, StopNodeConfig)
        return lambda: closed.append(node.get_name())

    assert run_nodes([("stop_node", build)], _ros("-p", "image_queue_size:=0")) == CONFIG_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.startswith("[stop_node] error: bad configuration: StopNodeConfig:") and len(err.splitlines()) == 1
    assert not rclpy.ok() and closed == []
    assert run_nodes([("stop_node", build)], _ros("-p", "image_queue_sise:=2")) == CONFIG_ERROR_EXIT
    assert "did you mean 'image_queue_size'" in capsys.readouterr().err
    assert not rclpy.ok() and closed == ["stop_node"]   # built, then refused: its clean-up ran


def test_run_nodes_lets_a_bug_through_and_still_shuts_rclpy_down(ros_env):
    def build(node):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run_nodes([("stop_node", build)], _ros())
    assert not rclpy.ok()


# A process SIGTERMed while its nodes are built: rclpy's handler shuts the context down, and the build's next rcl
# call (here a subscription) fails, or none comes and the node would start on a dead context. Or SIGTERMed while it
# runs, an rcl call of a callback racing the shutdown.
_SIGTERM_WHILE_BUILDING = """
import os, signal, sys, time
import rclpy
from memnav.ros.stack_node import run_nodes

def terminated():
    os.kill(os.getpid(), signal.SIGTERM)
    end = time.monotonic() + 10.0
    while rclpy.ok() and time.monotonic() < end:
        time.sleep(0.01)

def build(node):
    from std_msgs.msg import String
    closed = lambda: print("closed", flush=True)
    if sys.argv[1] == "spinning":   # a callback's publish, once the stack runs, meets the shut-down context
        pub = node.create_publisher(String, "chatter", 10)
        ticks = []
        def tick():
            ticks.append(1)
            if len(ticks) == 20:
                terminated()
            pub.publish(String(data="x"))
        node.create_timer(0.005, tick)
        return closed
    terminated()
    if sys.argv[1] == "subscribe":
        node.create_subscription(String, "chatter", lambda msg: None, 10)
    return closed

sys.exit(run_nodes([("sigterm_probe", build)], [sys.argv[0]]))
"""


@pytest.mark.parametrize("then", ["subscribe", "nothing"])
def test_sigterm_while_starting_exits_cleanly_in_one_line(ros_env, then):
    """SIGTERM during a node's start-up (loading its models, say): exit status 0 and one line saying so, no
    traceback, whether the build's next rcl call fails on the shut-down context or no call comes before the
    executor would start (then the finished build's clean-up runs)."""
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_WHILE_BUILDING, then], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip() == ("[sigterm_probe] stopped while starting (rclpy was shut down, by SIGTERM or a "
                                   "shutdown request)"), proc.stderr[-3000:]
    assert proc.stdout.split() == ([] if then == "subscribe" else ["closed"])   # a build that returned is closed


def test_sigterm_racing_an_rcl_call_of_a_running_node_is_a_clean_exit(ros_env):
    """SIGTERM shuts rclpy down from another thread while the executor spins: the rcl call that meets the dead
    context (here a timer callback's publish; in a policy node once the executor's wait set) ends the process
    like the shutdown it is, status 0 and the node's clean-up run, not with a traceback and status 1."""
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_WHILE_BUILDING, "spinning"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout.split() == ["closed"]


# --- sim_bridge_node's own settings ---

@pytest.mark.parametrize("field, value", [("rate_hz", 0.0), ("rate_hz", -1.0), ("rate_hz", math.inf),
                                          ("cmd_timeout_s", -0.5), ("cmd_timeout_s", math.nan),
                                          ("republish_s", -1.0), ("camera_frame", "")])
def test_bridge_config_names_its_field(field, value):
    with pytest.raises(ValueError, match=f"BridgeConfig.{field} "):
        BridgeConfig(**{field: value})


def test_bridge_refuses_negative_episode_counts():
    check_runner_config(RunnerConfig(first_episode=2, episodes=0))
    for field in ("first_episode", "episodes"):
        with pytest.raises(ValueError, match=f"RunnerConfig.{field} must be >= 0"):
            check_runner_config(RunnerConfig(**{field: -1}))


# --- real processes ---

def _start(module: str, *ros_args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"memnav.ros.{module}", "--ros-args", *ros_args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("module, ros_args, named", [
    ("stop_node", ["-p", "calibration:=/nonexistent/stop.json"], "parameter 'calibration': model file"),
    ("stop_node", ["-p", "verify_min_similarity:=abc"], "parameter 'verify_min_similarity' expects a double"),
    ("safety_node", ["-p", "max_linear_mps:=0.2"], "unknown parameter 'max_linear_mps' for safety_node (from -p); "
                                                    "did you mean 'guard.max_linear_mps'?"),
    ("sim_bridge_node", ["-p", "sim.width_px:=0"], "SimConfig.width_px"),
    ("sim_bridge_node", ["-p", "rate_hz:=0"], "BridgeConfig.rate_hz"),
    ("sim_bridge_node", ["-p", "episodes:=-1"], "RunnerConfig.episodes"),
    # these three ended in a traceback (OverflowError: infinity or 10^309 ns to an integer) or a segfault
    ("encoder_node", ["-p", "sync_tolerance_s:=.inf"], "EncoderNodeConfig.sync_tolerance_s must be a number of "
                                                        "seconds >= 0 and at most 9e+09"),
    ("encoder_node", ["-p", "torch_threads:=100000000"], "EncoderNodeConfig.torch_threads must be >= 0 and at most"),
    ("policy_node", ["-p", "torch_threads:=100000000"], "PolicyNodeConfig.torch_threads must be at most 1024"),
    ("memory_node", ["-p", "markers_period_s:=1e300"], "MemoryNodeConfig.markers_period_s must be a number of "
                                                        "seconds >= 0 and at most 9e+09"),
    ("memory_node", ["-p", "odom_max_age_s:=1e300"], "MemoryNodeConfig.odom_max_age_s"),
    # was SQLite's "unable to open database file", naming neither the parameter nor the folder
    ("memory_node", ["-p", "db_path:=/nonexistent/memnav/house.db"],
     "parameter 'db_path' /nonexistent/memnav/house.db: the folder '/nonexistent/memnav' does not exist"),
])
def test_node_refuses_bad_configuration_in_one_line(ros_env, module, ros_args, named):
    run = _start(module, *ros_args)
    assert run.returncode == CONFIG_ERROR_EXIT, run.stderr[-2000:]
    assert "Traceback" not in run.stderr + run.stdout
    [line] = run.stderr.splitlines()
    assert line.startswith(f"[{module}] error: bad configuration: ") and named in line


@pytest.mark.parametrize("module, program", [("stop_node", "stop_node"), ("sim_bridge_node", "sim_bridge_node"),
                                             ("replay_command", "memnav_replay")])
def test_a_ros_argument_rcl_cannot_parse_is_one_line_not_a_traceback(ros_env, module, program):
    run = _start(module, "-p", "a")     # no :=value
    assert run.returncode == CONFIG_ERROR_EXIT and "Traceback" not in run.stderr + run.stdout
    ours = [line for line in run.stderr.splitlines() if line.startswith(f"[{program}] error: bad configuration: ")]
    assert len(ours) == 1 and "'-p a'" in ours[0]


def test_bridge_refuses_a_results_json_directory_before_any_episode(ros_env, tmp_path):
    run = _start("sim_bridge_node", "-p", f"results_json:={tmp_path}", "-p", "data:=/nonexistent/houses")
    assert run.returncode == CONFIG_ERROR_EXIT and "Traceback" not in run.stderr
    [line] = run.stderr.splitlines()
    assert f"parameter 'results_json' {tmp_path}: is a directory" in line
    assert not tmp_path.with_name(tmp_path.name + ".tmp").exists() and list(tmp_path.iterdir()) == []


def test_params_file_typo_stops_the_safety_node(ros_env, tmp_path):
    params = tmp_path / "robot.yaml"
    params.write_text("safety_node:\n  ros__parameters:\n    max_linear_mp: 0.2\n")
    run = _start("safety_node", "--params-file", str(params))
    assert run.returncode == CONFIG_ERROR_EXIT and "Traceback" not in run.stderr
    [line] = run.stderr.splitlines()
    assert "'max_linear_mp'" in line and "did you mean 'guard.max_linear_mps'" in line


def test_safety_node_takes_integers_for_its_float_limits(ros_env, tmp_path):
    """`-p guard.max_linear_mps:=1` and `rate_hz: 20` (integers) start the node with double parameters."""
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import GetParameters

    params = tmp_path / "safety.yaml"
    params.write_text("safety_node:\n  ros__parameters:\n    rate_hz: 20\n")
    proc = subprocess.Popen([sys.executable, "-m", "memnav.ros.safety_node", "--ros-args", "--params-file",
                             str(params), "-p", "guard.max_linear_mps:=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_startup_client")
    try:
        client = node.create_client(GetParameters, "/safety_node/get_parameters")
        assert client.wait_for_service(timeout_sec=20.0), "safety_node did not come up"
        future = client.call_async(GetParameters.Request(names=["guard.max_linear_mps", "rate_hz"]))
        end = time.monotonic() + 10.0
        while not future.done() and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.1)
        values = future.result().values
        assert [(v.type, v.double_value) for v in values] == [(ParameterType.PARAMETER_DOUBLE, 1.0),
                                                              (ParameterType.PARAMETER_DOUBLE, 20.0)]
        assert proc.poll() is None
    finally:
        close_ros_test(node, [proc])
