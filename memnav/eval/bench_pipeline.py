"""`memnav bench pipeline`: camera-to-command latency of the ROS 2 stack at 10 Hz, separate processes vs fused.

The stack (policy_node, encoder_node, memory_node, stop_node with config/memnav.yaml) is started twice on an
isolated ROS domain with localhost discovery: as four processes talking over DDS (`multiprocess`) and as one
stack_node process with one executor (`fused`). The policy runs in real-time mode (lockstep false) with an
action duration shorter than the frame period, so it decides on every frame as soon as the frame's colour and
depth images are both in. This process plays the robot: it publishes RGB-D frames (rgb8, 32FC1 meters)
and their odometry at `--rate-hz`, rendered beforehand by the embedded simulator along one test episode and
then cycled, plus a goal image and goal depth (latched; re-sent with a new stamp whenever the policy stops).
The frames are the simulator camera's 128x128 by default; the camera options (`--image-px 640 360 --hfov-deg 69`,
...) render them with a robot's camera and give policy_node its camera_* parameters, and `--encoder` /
`--calibration` the models for it. Frames whose depth image exceeds LARGE_MESSAGE_BYTES are sent as
robot.launch.yaml sends them: with FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_large_images.xml (shared memory
with a 16 MB segment) and FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA, each unless the environment sets it. Fast DDS's
default transports, and LARGE_DATA alone, lost most of them between processes (README "Full-size images").

Latency of a frame: from this process starting to publish that frame (odometry, colour, depth, all stamped with
the same ROS time, which names the frame) to this process receiving the /memnav/policy_state whose `stamp_ns`
names the frame. policy_node publishes that state right after the /memnav/action and /cmd_vel of the same
decision, so this is camera-to-command latency over DDS, both DDS hops and this process's executor included.
Frames published during the `--duration` window after `--warmup` seconds of answers count; a frame never
answered (the policy can be busy, or between a STOP and the next goal) is counted, not timed. The memory event
and stop decision of each frame are timed the same way (extra keys). CPU use is the CPU time (user + system,
all threads) of the stack processes over the window divided by its wall time: 100 % is one core busy.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memnav.cli import BenchParts, add_camera_arguments, camera_options
from memnav.eval.evaluate import (
    DEFAULT_CALIBRATION,
    DEFAULT_ENCODER,
    add_model_arguments,
    check_model_files,
    model_name,
)
from memnav.procs import stop_processes
from memnav.ros.qos import latched_qos
from memnav.sim.dataset import default_data_dir

if TYPE_CHECKING:   # rclpy is imported only when a mode runs
    from rclpy.context import Context

MODES = ("multiprocess", "fused")
STACK_NODES = ("policy_node", "encoder_node", "memory_node", "stop_node")
MAX_DOMAIN_ID = 232   # Fast DDS on Linux: higher ids give ports above 65535
RECOMMENDED_MAX_DOMAIN_ID = 101   # ROS 2 recommends 0-101: higher ids can collide with ephemeral ports
TARGETS_MS = {"latency_ms_p99_multiprocess": 50.0, "latency_ms_p99_fused": 20.0}
LARGE_MESSAGE_BYTES = 500_000   # best-effort Fast DDS messages above about 512 KB are lost with its default transports


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                        help="generated dataset whose first episode of --split provides the frames")
    parser.add_argument("--split", default="test", help="dataset split")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                        help="stack layouts to measure: four processes over DDS, and/or one fused process")
    parser.add_argument("--duration", type=float, default=60.0, metavar="SECONDS",
                        help="timed window per mode, seconds of frames (x --rate-hz frames)")
    parser.add_argument("--warmup", type=float, default=5.0, metavar="SECONDS",
                        help="seconds of answered frames before the window opens (caches, allocators, DDS)")
    parser.add_argument("--rate-hz", type=float, default=10.0, metavar="HZ", help="camera frame rate, Hz")
    parser.add_argument("--frames", type=int, default=60, metavar="N",
                        help="distinct frames rendered by the embedded simulator, then published in a cycle")
    parser.add_argument("--size-px", type=int, default=None, metavar="PX",
                        help="frame width and height, pixels: a square --image-px (default: 128)")
    add_camera_arguments(parser, "the frames and the goal are rendered with, and policy_node's camera_* parameters "
                                 "(a robot camera's 640 360 frames cost the stack more than the simulator's 128 128)")
    add_model_arguments(parser, "the stack (policy_node's encoder_checkpoint and calibration, encoder_node's "
                                "checkpoint, stop_node's calibration)")
    parser.add_argument("--action-duration", type=float, default=0.02, metavar="SECONDS",
                        help="policy_node action_duration_s; shorter than the frame period so every frame gets "
                             "a decision (nothing drives the frames here, so the velocities do not matter)")
    parser.add_argument("--params", type=Path, default=None, metavar="FILE",
                        help="node parameters (default: config/memnav.yaml of the memnav package)")
    parser.add_argument("--startup-timeout", type=float, default=180.0, metavar="SECONDS",
                        help="longest wait for the stack's first answer, seconds")
    parser.add_argument("--domain", type=int, default=None, metavar="ID",
                        help=f"ROS_DOMAIN_ID of the first mode, 0 to {MAX_DOMAIN_ID} (the next mode uses ID+1); "
                             f"default: from the pid, so that every mode's id is within 1 to "
                             f"{RECOMMENDED_MAX_DOMAIN_ID} (ROS 2's recommended range, without the domain 0 that "
                             "a ROS graph uses when ROS_DOMAIN_ID is unset)")
    parser.add_argument("--log-dir", type=Path, default=None, metavar="DIR",
                        help="where the nodes' output goes (default: a temporary folder, named on failure)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulator and of the rendered path")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="progress lines on stderr")


def default_domain(pid: int, modes: int) -> int:
    """The ROS_DOMAIN_ID of the first of `modes` runs (run i uses the id + i) when --domain is not given.

    Spread by `pid` so that concurrent benches rarely share a domain, and kept within 1 to
    RECOMMENDED_MAX_DOMAIN_ID for every run: domain 0 is where a ROS graph without ROS_DOMAIN_ID lives, and ids
    above 101 can collide with the operating system's ephemeral ports.
    """
    if modes < 1:
        raise ValueError(f"modes must be >= 1, got {modes}")
    return 1 + pid % (RECOMMENDED_MAX_DOMAIN_ID - modes + 1)


@dataclass
class Frames:
    """What the bench publishes: the goal view and a path of RGB-D frames with odometry."""

    goal_rgb: np.ndarray
    goal_depth: np.ndarray
    rgb: list[np.ndarray] = field(default_factory=list)
    depth: list[np.ndarray] = field(default_factory=list)
    poses: list = field(default_factory=list)


def render_frames(data: Path, split: str, n: int, camera: dict, seed: int) -> Frames:
    """`n` frames along the first episode of `split` (random moves; restarted when it ends), and its goal, rendered
    with `camera` (SimConfig fields, `memnav.cli.camera_options`)."""
    from memnav.core.types import Action
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.env import ImageNavEnv
    from memnav.sim.episodes import load_episodes

    episode = load_episodes(data, split, limit=1)[0]
    sim = EmbeddedSimulator(config=SimConfig(seed=seed, **camera))
    rng = np.random.default_rng(seed)
    try:
        env = ImageNavEnv(sim)
        obs = env.reset(episode)
        goal = env.goal_observation
        frames = Frames(goal_rgb=goal.rgb, goal_depth=goal.depth)
        moves = (Action.MOVE_FORWARD, Action.TURN_LEFT, Action.TURN_RIGHT)
        while len(frames.rgb) < n:
            frames.rgb.append(obs.rgb)
            frames.depth.append(obs.depth)
            frames.poses.append(obs.pose)
            obs = env.step(moves[int(rng.choice(3, p=[0.5, 0.25, 0.25]))])
            if env.done:
                obs = env.reset(episode)
    finally:
        sim.close()
    return frames


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) and its reaped children, seconds."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rfind(")") + 2:].split()   # fields[11..14]: utime stime cutime cstime (clock ticks)
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text()[-chars:]
    except OSError:
        return ""


class _Stack:
    """The stack processes of one mode, with their logs."""

    def __init__(self, mode: str, params: Path, overrides: dict[str, dict[str, str]], domain: int,
                 log_dir: Path) -> None:
        """`overrides`: parameter values (ROS command-line text) by node name (`node_overrides`)."""
        def args_of(values: dict[str, str]) -> list[str]:
            return [arg for name, value in values.items() for arg in ("-p", f"{name}:={value}")]

        if mode == "fused":   # a -p reaches every part that declares the name (calibration: policy and stop)
            merged = {name: value for node in STACK_NODES for name, value in overrides.get(node, {}).items()}
            commands = {"stack_node": ["memnav.ros.stack_node", *args_of(merged)]}
        else:
            commands = {n: [f"memnav.ros.{n}", *args_of(overrides.get(n, {}))] for n in STACK_NODES}
        env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                   PYTHONUNBUFFERED="1")
        self.logs = {name: log_dir / f"{mode}_{name}.log" for name in commands}
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            for name, (module, *extra) in commands.items():
                with open(self.logs[name], "w") as log:
                    self.procs[name] = subprocess.Popen(
                        [sys.executable, "-m", module, "--ros-args", "--params-file", str(params), *extra],
                        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except BaseException:   # no orphans: stop the ones already started
            self.stop()
            raise

    def dead(self) -> list[str]:
        return [name for name, p in self.procs.items() if p.poll() is not None]

    def cpu_seconds(self) -> dict[str, float]:
        return {name: _cpu_seconds(p.pid) for name, p in self.procs.items()}

    def tails(self) -> str:
        return "\n".join(f"--- {name} ({path}):\n{_tail(path)}" for name, path in self.logs.items())

    def stop(self) -> None:
        stop_processes(self.procs.values())


def _percentiles(values_s: list[float]) -> dict[str, float | None]:
    if not values_s:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "max": None}
    ms = np.asarray(values_s) * 1e3
    return {"p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "mean": float(ms.mean()), "max": float(ms.max())}


def node_overrides(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """The stack's parameters this bench sets on the command line, by node: policy_node decides on every frame
    (real-time mode, `--action-duration`) without an action budget (max_steps 0: its STOP would end a goal the timed
    window goes on feeding); the camera and model options, where they differ from their defaults (else the
    parameter file's values stand)."""
    from memnav.sim.base import SimConfig

    policy = {"lockstep": "false", "action_duration_s": f"{args.action_duration}", "max_steps": "0"}
    out: dict[str, dict[str, str]] = {"policy_node": policy}
    camera = {"camera_hfov_deg": ("hfov_deg", args.hfov_deg), "camera_height_m": ("sensor_height_m",
                                                                                  args.camera_height_m),
              "camera_forward_m": ("sensor_forward_m", args.camera_forward_m),
              "camera_pitch_deg": ("sensor_pitch_deg", args.camera_pitch_deg)}
    for name, (field_name, value) in camera.items():
        if value != getattr(SimConfig, field_name):
            policy[name] = f"{float(value)!r}"
    if args.encoder != DEFAULT_ENCODER:
        policy["encoder_checkpoint"] = str(args.encoder)
        out["encoder_node"] = {"checkpoint": str(args.encoder)}
    if args.calibration != DEFAULT_CALIBRATION:
        policy["calibration"] = str(args.calibration)
        out["stop_node"] = {"calibration": str(args.calibration)}
    return out


def measure_mode(mode: str, frames: Frames, args: argparse.Namespace, params: Path, domain: int,
                 log_dir: Path, say) -> dict:
    """Start the stack in `mode`, publish frames, time the answers; returns this mode's results (unsuffixed).

    The stack's processes are stopped when this returns or raises.
    """
    from rclpy.context import Context

    stack = _Stack(mode, params, node_overrides(args), domain, log_dir)
    context = Context()
    try:   # whatever happens from here on (a ROS error, Ctrl-C), the stack's processes are stopped
        say(f"{mode}: started {', '.join(f'{n} (pid {p.pid})' for n, p in stack.procs.items())} on domain {domain}")
        _init_localhost(context, domain)
        return _drive(stack, context, mode, frames, args, say)
    finally:
        context.try_shutdown()
        stack.stop()


def _init_localhost(context: Context, domain: int) -> None:
    """rclpy.init of `context` on `domain` with discovery limited to this machine (as the stack's processes)."""
    import rclpy

    saved = os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE")
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"   # read once, by init
    try:
        rclpy.init(context=context, domain_id=domain)
    finally:
        if saved is None:
            del os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"]
        else:
            os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = saved


def _drive(stack: _Stack, context: Context, mode: str, frames: Frames, args: argparse.Namespace, say) -> dict:
    """Play the robot against the running `stack` on `context`: publish frames, time the answers."""
    import rclpy
    from nav_msgs.msg import Odometry
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from memnav.ros import conversions as conv

    node = rclpy.create_node("bench_pipeline", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    latched = latched_qos()
    pub_rgb = node.create_publisher(Image, "camera/color/image_raw", qos_profile_sensor_data)
    pub_depth = node.create_publisher(Image, "camera/depth/image_raw", qos_profile_sensor_data)
    pub_odom = node.create_publisher(Odometry, "odom", 10)
    pub_goal = node.create_publisher(Image, "memnav/goal_image", latched)
    pub_goal_depth = node.create_publisher(Image, "memnav/goal_depth", latched)
    rgb_msgs = [conv.rgb_to_image(x) for x in frames.rgb]
    depth_msgs = [conv.depth_to_image(x) for x in frames.depth]
    odom_msgs = [conv.pose_to_odometry(p) for p in frames.poses]
    goal_msgs = (conv.rgb_to_image(frames.goal_rgb), conv.depth_to_image(frames.goal_depth))

    # stamp_ns -> [publish perf_counter, inside the window]; latencies in seconds of frames inside the window
    sent: dict[int, list] = {}
    lat: dict[str, list[float]] = {"state": [], "memory": [], "stop": []}
    st = {"i": 0, "first_answer": None, "open": None, "close": None, "publishing": True, "goals": 0,
          "stops": 0, "sent_in_window": 0, "answered": set()}

    def publish_goal() -> None:
        stamp = node.get_clock().now().to_msg()
        for msg in goal_msgs:
            msg.header.stamp = stamp
        pub_goal.publish(goal_msgs[0])
        pub_goal_depth.publish(goal_msgs[1])
        st["goals"] += 1

    def on_tick() -> None:
        if not st["publishing"]:
            return
        k = st["i"] % len(rgb_msgs)
        st["i"] += 1
        now = node.get_clock().now()
        stamp = now.to_msg()
        for msg in (odom_msgs[k], rgb_msgs[k], depth_msgs[k]):
            msg.header.stamp = stamp
        t = time.perf_counter()
        inside = st["open"] is not None and st["open"] <= t < st["close"]
        sent[now.nanoseconds] = [t, inside]
        st["sent_in_window"] += inside
        pub_odom.publish(odom_msgs[k])
        pub_rgb.publish(rgb_msgs[k])
        pub_depth.publish(depth_msgs[k])

    def timed(key: str):
        def callback(msg: String) -> None:
            t = time.perf_counter()
            body = json.loads(msg.data)
            frame = sent.get(int(body.get("stamp_ns", -1)))
            if key == "state":
                if st["first_answer"] is None:
                    st["first_answer"] = t
                if body.get("action") == "STOP":   # the episode is over for the policy: give it the goal again
                    st["stops"] += 1
                    publish_goal()
            if frame is not None and frame[1]:
                if key == "state":
                    st["answered"].add(int(body["stamp_ns"]))
                lat[key].append(t - frame[0])
        return callback

    node.create_subscription(String, "memnav/policy_state", timed("state"), 100)
    node.create_subscription(String, "memnav/memory_event", timed("memory"), 100)
    node.create_subscription(String, "memnav/stop_decision", timed("stop"), 100)
    node.create_timer(1.0 / args.rate_hz, on_tick)
    publish_goal()
    start = time.perf_counter()
    cpu0, cpu1 = {}, {}
    try:
        while st["first_answer"] is None:
            executor.spin_once(timeout_sec=0.05)
            if stack.dead():
                raise RuntimeError(f"{mode}: {stack.dead()} exited before answering\n{stack.tails()}")
            if time.perf_counter() - start > args.startup_timeout:
                raise RuntimeError(f"{mode}: no /memnav/policy_state within --startup-timeout "
                                   f"{args.startup_timeout:g} s\n{stack.tails()}")
        startup_s = st["first_answer"] - start
        st["open"] = st["first_answer"] + args.warmup
        st["close"] = st["open"] + args.duration
        say(f"{mode}: first answer after {startup_s:.1f} s; warm-up {args.warmup:g} s, then {args.duration:g} s timed")
        next_report = st["open"] + 10.0
        grace_end = st["close"] + 1.0   # answers to the last frames of the window
        while (t := time.perf_counter()) < grace_end:
            executor.spin_once(timeout_sec=0.01)
            if not cpu0 and t >= st["open"]:
                cpu0, wall0 = stack.cpu_seconds(), t
            if not cpu1 and t >= st["close"]:
                cpu1, wall1 = stack.cpu_seconds(), t
                st["publishing"] = False
            if t >= next_report and t < st["close"]:
                p = _percentiles(lat["state"])
                say(f"{mode}: {t - st['open']:.0f}/{args.duration:g} s, {st['sent_in_window']} frames, "
                    f"{len(st['answered'])} answered, p50 {p['p50'] or 0:.1f} ms, p99 {p['p99'] or 0:.1f} ms")
                next_report += 10.0
            if stack.dead():
                raise RuntimeError(f"{mode}: {stack.dead()} exited during the measurement\n{stack.tails()}")
    finally:
        node.destroy_node()
        executor.shutdown(timeout_sec=1.0)
    wall = wall1 - wall0
    cpu = {name: (cpu1[name] - cpu0[name]) / wall * 100.0 for name in cpu1}
    published = [v[0] for v in sent.values() if v[1]]
    rate = (len(published) - 1) / (max(published) - min(published)) if len(published) > 1 else 0.0
    result = {f"latency_ms_{k}": v for k, v in _percentiles(lat["state"]).items()}
    result.update({
        "memory_event_ms_p50": _percentiles(lat["memory"])["p50"],
        "stop_decision_ms_p50": _percentiles(lat["stop"])["p50"],
        "frames_sent": st["sent_in_window"],
        "frames_answered": len(st["answered"]),
        "publish_rate_hz": rate,
        "cpu_percent": sum(cpu.values()),
        "cpu_percent_by_process": cpu,
        "startup_s": startup_s,
        "policy_stops": st["stops"],
    })
    p = _percentiles(lat["state"])
    say(f"{mode}: {result['frames_answered']}/{result['frames_sent']} frames answered, latency p50 "
        f"{p['p50'] or float('nan'):.1f} ms p99 {p['p99'] or float('nan'):.1f} ms, CPU {result['cpu_percent']:.0f} %")
    return result


def run(args: argparse.Namespace) -> dict:
    from memnav.ros.launcher import find_package_share, use_large_image_transports
    from memnav.sim.base import SimConfig

    for option, value in (("--duration", args.duration), ("--rate-hz", args.rate_hz),
                          ("--action-duration", args.action_duration), ("--startup-timeout", args.startup_timeout)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{option} must be positive and finite, got {value:g}")
    if not (math.isfinite(args.warmup) and args.warmup >= 0):
        raise ValueError(f"--warmup must be >= 0 and finite, got {args.warmup:g}")
    if args.frames < 1:
        raise ValueError(f"--frames must be >= 1, got {args.frames}")
    if args.size_px is not None:
        if args.size_px < 8:
            raise ValueError(f"--size-px must be >= 8, got {args.size_px}")
        if list(args.image_px) != [SimConfig.width_px, SimConfig.height_px]:
            raise ValueError(f"--size-px {args.size_px} and --image-px {args.image_px[0]} {args.image_px[1]}: give "
                             "one of them (--size-px N is --image-px N N)")
        args.image_px = [args.size_px, args.size_px]
    camera = camera_options(args)
    if min(camera["width_px"], camera["height_px"]) < 8:
        raise ValueError(f"--image-px must be at least 8 x 8, got {camera['width_px']} {camera['height_px']}")
    check_model_files(args)
    modes = [m for m in MODES if m in args.modes]
    last_id = MAX_DOMAIN_ID - (len(modes) - 1)   # mode i runs on domain ID+i
    if args.domain is not None and not 0 <= args.domain <= last_id:
        raise ValueError(f"--domain must be from 0 to {last_id}, got {args.domain} (ROS 2 domain ids 0-"
                         f"{MAX_DOMAIN_ID} work with Fast DDS on Linux, 0-101 are recommended"
                         f"{'; the second mode uses ID+1' if len(modes) > 1 else ''})")
    params = args.params or find_package_share("memnav") / "config" / "memnav.yaml"
    if not Path(params).is_file():
        raise FileNotFoundError(f"--params: parameter file not found: {params}")

    def say(message: str) -> None:
        if args.progress:
            print(f"[bench pipeline] {message}", file=sys.stderr, flush=True)

    frames = render_frames(args.data, args.split, args.frames, camera, args.seed)
    width, height = camera["width_px"], camera["height_px"]
    say(f"rendered {len(frames.rgb)} frames of {width}x{height} px ({camera['hfov_deg']:g} deg) from {args.data} "
        f"({args.split})")
    if frames.depth[0].nbytes > LARGE_MESSAGE_BYTES:   # for this process and, through _Stack, the stack's
        use_large_image_transports()
        say(f"depth frames of {frames.depth[0].nbytes / 1e3:.0f} KB: Fast DDS profile "
            f"{os.environ['FASTDDS_DEFAULT_PROFILES_FILE']}, as robot.launch.yaml sets it")
    domain = args.domain if args.domain is not None else default_domain(os.getpid(), len(modes))
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="memnav_bench_pipeline_"))
    log_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "rate_hz": args.rate_hz, "duration_s": args.duration, "warmup_s": args.warmup,
        "frame_px": width if width == height else None, "image_px": [width, height], "hfov_deg": camera["hfov_deg"],
        "encoder": model_name(args.encoder),
        "fastdds_builtin_transports": os.environ.get("FASTDDS_BUILTIN_TRANSPORTS"),
        "fastdds_profiles_file": os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE"),
        "distinct_frames": len(frames.rgb), "action_duration_s": args.action_duration, "cpu_count": os.cpu_count(),
        "load_avg_1min_at_start": os.getloadavg()[0], "targets_ms": TARGETS_MS, "log_dir": str(log_dir),
        "latency_definition": "publish of a frame (odometry, colour, depth with one stamp) -> receipt of the "
                              "/memnav/policy_state naming that stamp (published right after its action)",
    }
    for mode in MODES:
        for key in ("latency_ms_p50", "latency_ms_p99", "cpu_percent"):
            result[f"{key}_{mode}"] = None
    result["targets_met"] = {}
    # Ctrl-C: the modes measured before it are still printed and written (marked interrupted); the stack of the
    # mode it interrupts is stopped
    with BenchParts(result, modes) as parts:
        for i, mode in enumerate(modes):
            try:
                measured = measure_mode(mode, frames, args, Path(params), domain + i, log_dir, say)
            except RuntimeError as err:
                raise RuntimeError(f"{err}\n(node logs in {log_dir})") from err
            part = {f"{k}_{mode}": v for k, v in measured.items()}
            done = {**result, **part}
            parts.add(mode, {**part, "targets_met": {k: done[k] <= v for k, v in TARGETS_MS.items()
                                                     if done[k] is not None}})
    return result
