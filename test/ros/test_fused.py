"""Fused mode: `sim.launch.yaml fused:=true` runs policy, encoder, memory and stop nodes in one process (stack_node,
one executor). In lock-step its episodes end exactly as the in-process `memnav eval` ends them, which
test_sim_launch.py shows the multi-process stack does too: fused and multi-process take the same decisions."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memnav.ros.launcher import load_launch_file, resolve_launch

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "launch" / "sim.launch.yaml"


def test_fused_argument_selects_the_processes():
    launch = load_launch_file(LAUNCH)
    assert ("fused", "false") in [(a.name, a.default) for a in launch.args]
    separate = resolve_launch(launch, {})
    assert [n.executable for n in separate.nodes] == ["sim_bridge_node", "policy_node", "encoder_node", "memory_node",
                                                      "stop_node"]
    for value in ("true", "True", "1"):
        fused = resolve_launch(launch, {"fused": value}).nodes
        assert [n.executable for n in fused] == ["sim_bridge_node", "stack_node"]
        stack = fused[1]
        # no __node:= remap (it would rename every node of the process); the policy's overrides are kept
        assert stack.name is None and stack.output.value == "screen"
        assert {p.name: p.value for p in stack.params if hasattr(p, "name")} == {
            "agent": "memnav", "policy_dir": "", "explore": "true", "max_steps": "500", "lockstep": "true",
            "collision_fraction": "0.9", "lifelong_dir": "", "memory_key": "", "odometry_restarts": "false",
            "camera_forward_m": "0.0", "camera_pitch_deg": "0.0"}
    assert len(resolve_launch(launch, {"fused": "0"}).nodes) == 5


def test_stack_builders_cover_the_four_nodes():
    from memnav.ros.stack_node import stack_builders

    names = [name for name, _ in stack_builders()]
    assert names[0] == "policy_node"   # first in the executor: the camera-to-command path goes first
    assert sorted(names) == ["encoder_node", "memory_node", "policy_node", "stop_node"]


@pytest.mark.ros
@pytest.mark.slow
def test_fused_launch_matches_in_process_eval(tmp_path):
    pytest.importorskip("rclpy")
    import torch
    from conftest import make_tiny_dataset

    from memnav.core.policy import MemoryPolicy, PolicyConfig, save_policy

    data = make_tiny_dataset(tmp_path / "houses", houses=2, seed=4, test=3)
    torch.manual_seed(3)
    save_policy(MemoryPolicy(PolicyConfig(memory_tokens=24)), tmp_path / "policy_memnav.pt",
                extra={"variant": "memnav", "memory": "scene_graph"})
    env = dict(os.environ, ROS_DOMAIN_ID=str(40 + ((os.getpid() + 57) % 150)),
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    memnav = [sys.executable, "-m", "memnav.cli"]
    run = subprocess.run([*memnav, "launch", str(LAUNCH), "fused:=true", "episodes:=2", "max_steps:=60",
                          f"data:={data}", f"policy_dir:={tmp_path}"],
                         env=env, capture_output=True, text=True, timeout=240)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    # one stack process holding all four nodes, each under its own name
    assert "stack_node: started" in out and "policy_node: started" not in out and "encoder_node: started" not in out
    stack_lines = [line for line in out.splitlines() if line.startswith("[stack_node] ")]
    for text in ("[encoder_node]: encoder", "[memory_node]: memory in RAM only", "[encoder_node]: goal embedding",
                 "[policy_node]: new goal image"):
        assert any(text in line for line in stack_lines), text
    assert "stack_node: stopped (exit code 0)" in out or "stack_node: finished (exit code 0)" in out, out[-2000:]
    fused = {m[0]: (float(m[1]), float(m[2]), float(m[3]), int(m[4])) for m in
             re.findall(r"episode (\S+): success (\d) spl ([0-9.]+) soft_spl ([0-9.]+) steps (\d+)", out)}
    assert len(fused) == 2 and "summary over 2 episodes" in out, out[-3000:]

    res_path = tmp_path / "eval.json"
    subprocess.run([*memnav, "eval", "--agent", "memnav", "--data", str(data), "--episodes", "2",
                    "--max-steps", "60", "--policy-dir", str(tmp_path), "--json", str(res_path),
                    "--no-progress"],
                   check=True, timeout=240)
    in_process = {e["episode_id"]: e for e in json.loads(res_path.read_text())["per_episode"]}
    assert set(in_process) == set(fused)
    for ep, e in in_process.items():
        succ, spl, soft, steps = fused[ep]
        assert (succ, steps) == (e["success"], e["steps"])
        assert spl == pytest.approx(e["spl"], abs=1e-3) and soft == pytest.approx(e["soft_spl"], abs=1e-4)


@pytest.mark.ros
def test_executor_serves_nodes_in_the_order_they_were_added():
    rclpy = pytest.importorskip("rclpy")
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from memnav.ros.stack_node import _ordered_executor

    context = Context()
    rclpy.init(context=context, domain_id=40 + os.getpid() % 150)
    try:
        nodes = [rclpy.create_node(f"order_{i}", context=context) for i in range(6)]
        executor = _ordered_executor(SingleThreadedExecutor)(context=context)
        order = [nodes[i] for i in (3, 0, 5, 1, 4, 2)]
        for node in order:
            executor.add_node(node)
        assert executor.get_nodes() == order   # rclpy's own executor returns them in set order
        executor.remove_node(order[2])
        assert executor.get_nodes() == order[:2] + order[3:]
        executor.shutdown()
        for node in nodes:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
