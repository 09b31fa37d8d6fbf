"""Shared fixtures: tiny scenes written into tmp_path; stopping the processes a ROS test started."""
from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from memnav.procs import stop_processes  # noqa: F401  (the ROS tests import it from here)


def file_sha256(path: Path) -> str:
    """A file's SHA-256, to check that something was left byte for byte as it was."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_sql(path: Path, statement: str, params: tuple = ()) -> None:
    """One SQL statement on the SQLite file `path`, committed: to damage or age a memory database by hand."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


def write_two_room_scene(folder: Path, name: str = "two_rooms", with_stage_config: bool = True) -> Path:
    """An 8 m x 4 m box split by a wall at x = 4 m with a 1 m door at z in [1.5, 2.5] (Y up, meters).

    A 0.6 m cube stands in the first room at x in [1, 1.6], z in [1, 1.6] as object `obj_0001_box`.
    """
    import trimesh

    def box(lo, hi):
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        m = trimesh.creation.box(extents=hi - lo)
        m.apply_translation((lo + hi) / 2)
        return m

    t, h = 0.1, 2.5
    parts = {
        "floor": box([-t, -t, -t], [8 + t, 0, 4 + t]),
        "ceiling": box([-t, h, -t], [8 + t, h + t, 4 + t]),
        "wall_w": box([-t, 0, -t], [0, h, 4 + t]),
        "wall_e": box([8, 0, -t], [8 + t, h, 4 + t]),
        "wall_n": box([0, 0, -t], [8, h, 0]),
        "wall_s": box([0, 0, 4], [8, h, 4 + t]),
        "wall_mid_a": box([4 - t / 2, 0, 0], [4 + t / 2, h, 1.5]),
        "wall_mid_b": box([4 - t / 2, 0, 2.5], [4 + t / 2, h, 4]),
        "lintel": box([4 - t / 2, 2.1, 1.5], [4 + t / 2, h, 2.5]),
        "obj_0001_box": box([1.0, 0, 1.0], [1.6, 0.6, 1.6]),
    }
    rng = np.random.default_rng(0)
    scene = trimesh.Scene()
    for pname, mesh in parts.items():
        mesh.visual.face_colors = np.r_[rng.integers(40, 255, 3), 255]
        scene.add_geometry(mesh, node_name=pname, geom_name=pname)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.glb"
    scene.export(path)
    if with_stage_config:
        (folder / f"{name}.stage_config.json").write_text(json.dumps(
            {"render_asset": path.name, "up": [0, 1, 0], "front": [0, 0, -1]}))
    return path


@pytest.fixture
def two_room_scene(tmp_path: Path) -> Path:
    return write_two_room_scene(tmp_path / "scenes")


def make_tiny_dataset(out: Path, houses: int = 3, seed: int = 2, train: int = 1, val: int = 1, test: int = 1) -> Path:
    """A small generated dataset (houses split by house) written through the real `memnav scenes` CLI."""
    from memnav.cli import main

    assert main(["scenes", "--out", str(out), "--houses", str(houses), "--seed", str(seed), "--train-episodes",
                 str(train), "--val-episodes", str(val), "--test-episodes", str(test), "--no-progress"]) == 0
    return out


def isolated_ros_env(offset: int) -> dict:
    """The environment for a test's ROS processes: a ROS_DOMAIN_ID of its own (by process id and `offset`, which
    each test picks apart from the others) and discovery on this machine only."""
    import os

    return dict(os.environ, ROS_DOMAIN_ID=str(40 + ((os.getpid() + offset) % 150)),
                ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")


def use_isolated_ros_domain(monkeypatch, offset: int) -> int:
    """Set `isolated_ros_env(offset)`'s ROS_DOMAIN_ID and discovery range for this test (and the processes it
    starts); returns the domain id."""
    env = isolated_ros_env(offset)
    for name in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE"):
        monkeypatch.setenv(name, env[name])
    return int(env["ROS_DOMAIN_ID"])


# the end of a peer script a test runs in a process of its own: spin until the test stops it
SPIN_UNTIL_STOPPED = """
try:
    rclpy.spin(node)
except KeyboardInterrupt:
    pass
"""


def spin_until(node, cond, timeout_s: float, step_s: float = 0.02) -> bool:
    """Spin `node` (an rclpy node, `step_s` at most per turn) until `cond()` holds (True) or `timeout_s` passes
    (False)."""
    import time

    import rclpy

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=step_s)
        if cond():
            return True
    return False


def spin_while_alive(node, proc: subprocess.Popen, log: Path, cond, timeout_s: float) -> bool:
    """Spin `node` until `cond()` holds or `timeout_s` passes (then `cond()`'s value), asserting that the process
    under test (`proc`, logging to `log`) stays alive meanwhile: its log is the failure message."""
    import rclpy

    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not cond():
        rclpy.spin_once(node, timeout_sec=0.05)
        assert proc.poll() is None, log.read_text()
    return cond()


def spin_until_exit(node, proc: subprocess.Popen, timeout_s: float, step_s: float = 0.05) -> None:
    """Spin `node` (hearing what the process publishes) until `proc` exits or `timeout_s` passes."""
    import rclpy

    end = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=step_s)


def close_ros_test(node, procs: Iterable[subprocess.Popen] = ()) -> None:
    """The end of a ROS test: its node destroyed and rclpy shut down, then the processes it started stopped
    (`stop_processes`; also when one of the first two fails)."""
    import rclpy

    try:
        node.destroy_node()
        rclpy.shutdown()
    finally:
        stop_processes(procs)


def wait_for_text(path: Path, text: str, timeout_s: float) -> bool:
    """Whether `text` appears in the file at `path` (a process's log) within `timeout_s` seconds."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.2)
    return False


def run_memnav(args: list[str], env: dict, timeout_s: float) -> subprocess.CompletedProcess:
    """`memnav ARGS` as a process of its own (as a user runs it), its output captured as text. One that runs past
    `timeout_s` is made to print every thread's Python stack (faulthandler, on SIGABRT) before the test fails,
    so that a hang says where it hangs."""
    import sys

    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "memnav.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"memnav {' '.join(args)} ran past {timeout_s:g} s; its stacks then:\n{err[-6000:]}"
                             f"\n--- stdout\n{out[-2000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def far_goal_photo(folder: Path):
    """A tiny dataset (2 houses, 3 test episodes) in `folder`/houses and its first test episode's goal view written
    as a goal photo `folder`/goal.png, with the goal's odometry pose in the bridge's frame: meters from the
    episode's start, so a robot sent there has to search. Returns (the dataset folder, the photo's path, the
    goal's GoalPhoto)."""
    import numpy as np

    from memnav.core.frames import habitat_to_map
    from memnav.core.goal_photo import GoalPhoto, write_goal_photo
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.episodes import load_episodes

    data = make_tiny_dataset(folder / "houses", houses=2, seed=4, test=3)
    episode = load_episodes(data, "test")[0]
    sim = EmbeddedSimulator(config=SimConfig())
    sim.reset(episode)
    goal_xy = habitat_to_map(np.asarray(episode.goal.position, dtype=np.float64))[:2]
    photo = GoalPhoto(sim.goal_observation.rgb, sim.goal_observation.depth, {"odom_pose": {
        "x_m": float(goal_xy[0]), "y_m": float(goal_xy[1]), "yaw_rad": float(episode.goal_yaw_rad())}})
    write_goal_photo(folder / "goal.png", photo)
    return data, folder / "goal.png", photo


def robot_odom_pose(folder: Path, env: dict, name: str) -> tuple[float, float, float]:
    """The simulated robot's odometry pose now (x, y, yaw), as `memnav goal capture` records it in `folder`/`name`.png
    (replaced if there) from the simulator bridge's camera topics."""
    from memnav.core.goal_photo import read_goal_photo

    cap = run_memnav(["goal", "capture", str(folder / name), "--color-topic", "/camera/color/image_raw",
                      "--depth-topic", "/camera/depth/image_raw", "--timeout", "30", "--overwrite"], env, 90)
    assert cap.returncode == 0, cap.stderr
    pose = read_goal_photo(folder / f"{name}.png").meta["odom_pose"]
    return pose["x_m"], pose["y_m"], pose["yaw_rad"]


def start_policy_node(env: dict, log: Path, *, lockstep: bool, args: Iterable[str] = ()) -> subprocess.Popen:
    """A policy node as a process of its own, logging into `log`, in lock-step or in the real time of
    `start_sim_robot` (an action every 0.25 s); `args` are more --ros-args."""
    import sys

    mode = ["-p", f"lockstep:={str(lockstep).lower()}"]
    timing = [] if lockstep else ["-p", "action_duration_s:=0.25", "-p", "collision_fraction:=0.4"]
    return subprocess.Popen([sys.executable, "-m", "memnav.ros.policy_node", "--ros-args", *mode, *timing, *args],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def start_sim_robot(data: Path, env: dict, logs: Path, *, lockstep: bool, ros_args: Iterable[str] = (),
                    bridge_args: Iterable[str] = (), policy_args: Iterable[str] = ()) -> tuple[list, callable]:
    """The simulator bridge standing in for a robot, with its own goal moved off memnav/goal_* (so a policy node's
    only goal is one sent to it), and a policy node, as processes of their own logging into `logs`/bridge.log and
    `logs`/policy.log: (the processes, a function giving the tails of both logs for an assertion's message).

    Real time (lockstep False): the bridge integrates /cmd_vel at 10 Hz and the policy acts every 0.25 s.
    `ros_args` go to both (e.g. a namespace), `bridge_args` / `policy_args` to one."""
    import sys

    paths = {name: logs / f"{name}.log" for name in ("bridge", "policy")}
    mode = ["-p", f"lockstep:={str(lockstep).lower()}"]
    procs = [
        subprocess.Popen([sys.executable, "-m", "memnav.ros.sim_bridge_node", "--ros-args", *ros_args, *mode,
                          "-p", f"data:={data}", "-p", "split:=test", "-p", "rate_hz:=10.0",
                          "-r", "memnav/goal_image:=sim/goal_image", "-r", "memnav/goal_depth:=sim/goal_depth",
                          *bridge_args],
                         stdout=paths["bridge"].open("w"), stderr=subprocess.STDOUT, env=env),
        start_policy_node(env, paths["policy"], lockstep=lockstep, args=[*ros_args, *policy_args])]

    def report() -> str:
        return "\n".join(f"--- {name}\n{path.read_text()[-2000:]}" for name, path in paths.items())

    return procs, report
