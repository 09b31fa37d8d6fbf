"""Every ROS params file under config/ builds its nodes' config dataclasses: no unknown keys, ROS-compatible types."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from memnav.ros import encoder_node, memory_node, safety_node, stop_node
from memnav.ros.params import flatten_parameters
from memnav.ros.policy_node import PolicyNodeConfig
from memnav.ros.sim_bridge_node import BridgeConfig, RecordConfig
from memnav.sim.base import SimConfig
from memnav.sim.runner import RunnerConfig

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"

# node name -> (prefix, dataclass) groups it declares as parameters (as in each node's main)
NODE_PARAMETERS = {
    "sim_bridge_node": (("", RunnerConfig), ("sim.", SimConfig), ("", BridgeConfig), ("record.", RecordConfig)),
    "policy_node": (("", PolicyNodeConfig),),
    "encoder_node": encoder_node.PARAMETER_GROUPS,
    "memory_node": memory_node.PARAMETER_GROUPS,
    "stop_node": stop_node.PARAMETER_GROUPS,
    "safety_node": safety_node.PARAMETER_GROUPS,
}


def _ros_compatible(value: object, default: object) -> bool:
    """Would a parameter declared with `default` accept `value` from a params file? (ROS types are strict.)"""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, (tuple, list)):
        return isinstance(value, list) and (not default or not value
                                            or all(_ros_compatible(v, default[0]) for v in value))
    return type(value) is type(default)


def build_node_configs(node: str, params: dict) -> list:
    """The node's config dataclasses from its ros__parameters (nested or dotted keys).

    Raises:
        KeyError: an unknown node name; ValueError: unknown keys, or a value of a type ROS would refuse
            (or the dataclass rejects).
    """
    groups = NODE_PARAMETERS[node]
    flat = flatten_parameters(params)
    known = {f"{prefix}{f.name}" for prefix, cls in groups for f in dataclasses.fields(cls)}
    unknown = sorted(set(flat) - known)
    if unknown:
        raise ValueError(f"{node}: unknown parameters {unknown}")
    built = []
    for prefix, cls in groups:
        values = {}
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            if key not in flat:
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            if not _ros_compatible(flat[key], default):
                raise ValueError(f"{node}: {key} = {flat[key]!r} ({type(flat[key]).__name__}); ROS declares it "
                                 f"{type(default).__name__} (write floats with a decimal point)")
            values[f.name] = tuple(flat[key]) if isinstance(default, tuple) else flat[key]
        built.append(cls(**values))
    return built


def _params_files() -> list[Path]:
    files = sorted(p for p in CONFIG_DIR.rglob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    return [p for p in files if isinstance(doc := yaml.safe_load(p.read_text()), dict)
            and doc and all(isinstance(v, dict) and "ros__parameters" in v for v in doc.values())]


def test_memnav_yaml_is_a_params_file_for_every_node():
    files = _params_files()
    assert CONFIG_DIR / "memnav.yaml" in files
    nodes = set(yaml.safe_load((CONFIG_DIR / "memnav.yaml").read_text()))
    assert {"sim_bridge_node", "encoder_node", "memory_node", "stop_node"} <= nodes


@pytest.mark.parametrize("path", _params_files(), ids=lambda p: p.name)
def test_every_params_file_builds_its_dataclasses(path):
    for key, section in yaml.safe_load(path.read_text()).items():
        node = key.rsplit("/", 1)[-1]
        assert node in NODE_PARAMETERS, f"{path.name}: section {key!r} names no memnav node"
        built = build_node_configs(node, section["ros__parameters"])
        assert len(built) == len(NODE_PARAMETERS[node])
        if node == "memory_node":
            _, graph, buffer = built
            assert graph.to_config().embedding_dim == buffer.embedding_dim


def test_memnav_yaml_lists_every_field_of_the_new_nodes():
    doc = yaml.safe_load((CONFIG_DIR / "memnav.yaml").read_text())
    for node in ("encoder_node", "memory_node", "stop_node", "sim_bridge_node", "policy_node"):
        flat = flatten_parameters(doc[node]["ros__parameters"])
        fields = {f"{prefix}{f.name}" for prefix, cls in NODE_PARAMETERS[node] for f in dataclasses.fields(cls)}
        assert fields == set(flat), f"{node}: missing {sorted(fields - set(flat))}"


def test_bad_sections_fail_by_name():
    with pytest.raises(ValueError, match="unknown parameters.*'voi.look_costs'"):
        build_node_configs("stop_node", {"voi": {"look_costs": 0.1}})
    with pytest.raises(ValueError, match="sync_tolerance_s = 1 .*float"):
        build_node_configs("encoder_node", {"sync_tolerance_s": 1})
    with pytest.raises(ValueError, match="retrieval_k"):
        build_node_configs("memory_node", {"retrieval_k": 0})
    with pytest.raises(ValueError, match="evidence_strength"):
        build_node_configs("stop_node", {"voi": {"evidence_strength": -1.0}})
    cfg, graph, _ = build_node_configs("memory_node", {"db_path": "", "buffer": {"capacity": 4}})
    assert graph.to_config().db_path is None and cfg.frame_id == "odom"


@pytest.mark.parametrize("make, field", [
    (lambda: PolicyNodeConfig(forward_step_m=-0.25), "forward_step_m"),     # would drive MOVE_FORWARD backwards
    (lambda: PolicyNodeConfig(turn_angle_deg=-30.0), "turn_angle_deg"),     # would swap left and right
    (lambda: PolicyNodeConfig(turn_angle_deg=200.0), "turn_angle_deg"),
    (lambda: PolicyNodeConfig(action_duration_s=float("inf")), "action_duration_s"),
    (lambda: PolicyNodeConfig(action_duration_s=float("nan")), "action_duration_s"),
    (lambda: PolicyNodeConfig(subscriber_wait_s=float("nan")), "subscriber_wait_s"),
    (lambda: PolicyNodeConfig(lifelong_dir=__file__), "lifelong_dir"),      # a file, not a folder
    (lambda: safety_node.SafetyNodeConfig(rate_hz=float("inf")), "rate_hz"),   # a 0 s timer: a busy loop
    (lambda: safety_node.SafetyNodeConfig(rate_hz=1e-6), "rate_hz"),           # /cmd_vel every 11 days
    (lambda: stop_node.VoIStopConfig(success_reward=float("nan")), "success_reward"),
    (lambda: stop_node.VerificationConfig(ratio=float("nan")), "ratio"),
    (lambda: stop_node.VerificationConfig(max_features=-5), "max_features"),
    (lambda: memory_node.MemoryNodeConfig(markers_period_s=float("inf")), "markers_period_s"),
    (lambda: memory_node.MemoryNodeConfig(frame_id=""), "frame_id"),
    (lambda: memory_node.SceneGraphParams(db_path="/tmp"), "db_path"),         # a folder, not a database file
])
def test_nonsense_node_settings_are_refused_naming_the_field(make, field):
    with pytest.raises(ValueError, match=rf"\.{field}\b"):
        make()
