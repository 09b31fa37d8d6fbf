"""The `memnav` command: one entry point, one subcommand per job.

Each subcommand lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`
(bench targets: `run(args) -> dict` of results). `main` imports only the module of the subcommand on its
command line (`memnav --help` none), so every command starts without the others' imports (torch, numba: about
2 s on these machines, which `memnav estop engage` should not wait for) and a missing optional dependency
affects only its own command.

A bench measures in parts (sizes, resolutions, baselines, modes) and, on Ctrl-C, raises `BenchInterrupted` with
the parts it finished (`BenchParts` does the bookkeeping): `main` prints and writes those results marked
`"interrupted": true`, says on stderr what was left out, and exits 130, as `memnav eval` keeps its finished
episodes.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from memnav import __version__

T = TypeVar("T")

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "scenes": ("memnav.sim.dataset", "generate procedural multi-room houses and ImageNav episodes"),
    "eval": ("memnav.eval.evaluate", "evaluate an agent on ImageNav episodes (success, SPL, SoftSPL)"),
    "eval-report": ("memnav.eval.eval_report",
                    "report (HTML + figures) of a saved `memnav eval --json` run: intervals, paired differences"),
    "launch": ("memnav.ros.launch_command",
               "run a ROS 2 YAML launch file (args, nodes, params, remaps) and supervise its processes"),
    "check": ("memnav.ros.check_command",
              "listen to a robot's camera, depth and odometry and say whether memnav can run on them"),
    "goal": ("memnav.ros.goal_command",
             "capture a goal photo with the robot's camera; send one to the robot (and follow it to its STOP); "
             "cancel the goal it works on"),
    "estop": ("memnav.ros.estop_command", "engage or release the safety node's emergency stop, confirmed"),
    "topic": ("memnav.ros.topic_command",
              "list topics, show a topic's publishers and subscribers with their QoS, measure its rate, print its "
              "messages (what `ros2 topic` does)"),
    "rviz": ("memnav.ros.rviz_command",
             "write the RViz 2 view of a namespaced robot (or the robot profile's camera) from config/memnav.rviz"),
    "param": ("memnav.ros.param_command",
              "list, read, change or dump a running node's parameters (what `ros2 param` does)"),
    "status": ("memnav.ros.status_command",
               "what the running stack is doing: its nodes, the goal, the last decision, the safety node, memory"),
    "record": ("memnav.ros.record_command", "record live topics into a rosbag2 bag (mcap or sqlite3)"),
    "replay": ("memnav.ros.replay_command", "publish a bag into the live graph with /clock (rate, loop, remaps)"),
    "eval-bag": ("memnav.eval.eval_bag",
                 "offline evaluation of a bag: place recognition, loop closures, memory growth, stop, latency"),
    "goal-audit": ("memnav.eval.goal_audit",
                   "find goal photos that another spot in the house reproduces; split eval results by them"),
    "memory": ("memnav.eval.memory_report",
               "inspect a stored long-term memory (read-only): info, a top-down figure, GraphML / JSON export, "
               "a consistent backup"),
}

# bench target -> (module, one-line help); each module has add_arguments(parser) and run(args) -> dict
STDOUT_ONLY = Path("-")   # `memnav bench X --json` with no PATH: the JSON goes to stdout only


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a bench, with what it measured before: `results` (JSON-ready: the run's settings and the keys
    of the parts it finished, named as a whole run names them), `measured` and `left_out` (the parts, in words, for
    the message on stderr). `memnav bench` prints and writes `results` with `"interrupted": true` and `"left_out"`,
    and exits 130; where nothing was measured it writes nothing."""

    def __init__(self, results: dict, measured: Iterable[str], left_out: Iterable[str]) -> None:
        self.results, self.measured, self.left_out = results, list(measured), list(left_out)
        super().__init__(f"interrupted after {len(self.measured)} measured parts")

    def __reduce__(self):   # picklable, like any exception that crosses a process
        return BenchInterrupted, (self.results, self.measured, self.left_out)


class BenchParts:
    """The parts of a bench's run, measured one after another into `results` (the dict it returns):

        with BenchParts(results, ["size 1k", "size 10k", "patrol"]) as parts:
            ...
            parts.add("size 1k", {"insert_ms_p50_1k": ...})

    A Ctrl-C (KeyboardInterrupt) anywhere inside the `with` becomes `BenchInterrupted` carrying `results` with the
    parts added so far: a part's keys go into `results` only when the whole part is measured. `add` may replace keys
    of an earlier part (a summary over the houses finished so far). `BenchParts.latest` is the last one entered:
    a Ctrl-C after its `with` (in the bench's clean-up: temporary folders, closing the simulator) still keeps what
    it measured (`main`)."""

    latest: BenchParts | None = None

    def __init__(self, results: dict, names: Iterable[str]) -> None:
        self.results = results
        self.measured: list[str] = []
        self.left: list[str] = list(dict.fromkeys(names))

    def add(self, name: str, values: Mapping[str, Any]) -> None:
        """Part `name` is measured: its `values` go into the results."""
        if name not in self.left:
            raise ValueError(f"bench part {name!r} is not one still to measure: {self.left}")
        self.results.update(values)
        self.left.remove(name)
        self.measured.append(name)

    def __enter__(self) -> BenchParts:
        BenchParts.latest = self
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(err, KeyboardInterrupt) and not isinstance(err, BenchInterrupted):
            raise BenchInterrupted(self.results, self.measured, self.left) from err


def config_from_options(cls: type[T], options: Mapping[str, str], **fields: Any) -> T:
    """`cls(**fields)` for a command line: a ValueError the config raises naming its field (`Cls.field ...`)
    names the option the user typed instead (`options`: field -> option, e.g. "--batch-size")."""
    try:
        return cls(**fields)
    except ValueError as err:
        text = str(err)
        for name, option in options.items():
            text = text.replace(f"{cls.__name__}.{name} ", f"{option} ")
        raise ValueError(text) from None


def add_camera_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """--hfov-deg, --camera-height-m, --image-px and --camera-forward-m: the simulated camera `what` (e.g. "the
    views are rendered with"), for measuring what a robot's own camera changes; SimConfig's camera is the default.
    `camera_options` reads them back. (SimConfig is imported here, not at the top: `memnav estop` and the like
    never need it.)"""
    from memnav.sim.base import SimConfig

    parser.add_argument("--hfov-deg", type=float, default=SimConfig.hfov_deg, metavar="DEG",
                        help=f"horizontal field of view of the simulated camera {what} (SimConfig.hfov_deg): 90 is "
                             "the simulator's, which the shipped models were trained and measured on; a robot's "
                             "camera is often narrower (about 69 for a RealSense D435's colour stream)")
    parser.add_argument("--camera-height-m", type=float, default=SimConfig.sensor_height_m, metavar="M",
                        help=f"height above the floor of the simulated camera {what} (SimConfig.sensor_height_m): "
                             "1.25 is the simulator's; a small robot's camera sits lower")
    parser.add_argument("--image-px", type=int, nargs=2, default=[SimConfig.width_px, SimConfig.height_px],
                        metavar=("W", "H"),
                        help=f"image size of the simulated camera {what} (SimConfig.width_px, height_px; square "
                             "pixels, so 160 120 is a 4:3 camera whose vertical field of view is narrower than "
                             "--hfov-deg): the encoder stretches any image to its square input, as it does a "
                             "robot's")
    parser.add_argument("--camera-forward-m", type=float, default=SimConfig.sensor_forward_m, metavar="M",
                        help=f"offset ahead of the agent's turning axis of the simulated camera {what} "
                             "(SimConfig.sensor_forward_m; less than the agent's 0.18 m radius): 0 is the "
                             "simulator's; a robot's camera is often 0.1-0.3 m ahead")
    parser.add_argument("--camera-pitch-deg", type=float, default=SimConfig.sensor_pitch_deg, metavar="DEG",
                        help=f"pitch down from level of the simulated camera {what} (SimConfig.sensor_pitch_deg; "
                             "negative: up): 0 is the simulator's; a robot's camera often looks 5-20 deg down to see "
                             "the floor near it")


CAMERA_OPTIONS = {"hfov_deg": "--hfov-deg", "sensor_height_m": "--camera-height-m", "width_px": "--image-px",
                  "height_px": "--image-px", "sensor_forward_m": "--camera-forward-m",
                  "sensor_pitch_deg": "--camera-pitch-deg"}


def camera_options(args: argparse.Namespace) -> dict[str, float]:
    """The SimConfig fields of `add_camera_arguments`' options (the keys of CAMERA_OPTIONS), checked as SimConfig
    checks them (a ValueError names the option)."""
    from memnav.sim.base import SimConfig

    width, height = args.image_px
    cfg = config_from_options(SimConfig, CAMERA_OPTIONS, hfov_deg=args.hfov_deg, sensor_height_m=args.camera_height_m,
                              width_px=width, height_px=height, sensor_forward_m=args.camera_forward_m,
                              sensor_pitch_deg=args.camera_pitch_deg)
    return {name: getattr(cfg, name) for name in CAMERA_OPTIONS}


BENCH_TARGETS: dict[str, tuple[str, str]] = {
    "sim": ("memnav.eval.bench_sim", "simulator RGB-D steps/s at 128x128, 256x256 and on a >=1M-triangle mesh"),
    "memory": ("memnav.eval.bench_memory", "long-term memory insert/retrieve latency and patrol growth"),
    "relocalise": ("memnav.eval.bench_relocalise",
                   "kidnapped-robot relocalisation from a stored memory: how often, how fast, how often wrong"),
    "encoder": ("memnav.eval.bench_encoder", "encoder place-recognition recall@1 vs baselines, latency"),
    "agent": ("memnav.eval.bench_agent", "per-step latency of encoder + memory + policy + stop"),
    "replay": ("memnav.eval.bench_replay", "offline bag evaluation speed as a multiple of real time (10 Hz RGB-D)"),
    "pipeline": ("memnav.eval.bench_pipeline",
                 "camera-to-command latency of the ROS stack at 10 Hz: separate processes vs fused, and CPU use"),
}

# train target -> (module, one-line help)
TRAIN_TARGETS: dict[str, tuple[str, str]] = {
    "encoder": ("memnav.train.encoder_train", "self-supervised training of the perception encoder"),
    "stop": ("memnav.train.stop_calibration", "fit the stop controller's calibrated goal belief"),
    "policy": ("memnav.train.policy_train", "image-goal navigation policy: DAgger warm start, then PPO"),
}


def _load(module_name: str):
    return importlib.import_module(module_name)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help only where it says something: not for required options, not
    where the default is None (the help says what leaving the option out does), and not where the help already
    names its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required or action.default is None or "default" in text.lower():
            return text
        return super()._get_help_string(action)


def _os_error_text(err: OSError) -> str:
    """An OSError as one line: what went wrong and the path, without the errno prefix."""
    reason = err.strerror or str(err)
    if err.filename is None:
        return reason
    return f"{err.filename}: {reason.lower()}" if err.filename2 is None else \
        f"{err.filename} -> {err.filename2}: {reason.lower()}"


def _selected(argv: list[str]) -> tuple[str, ...]:
    """The subcommand (and bench / train target) an argument list names: its first one or two words."""
    words = []
    for arg in argv:
        if arg.startswith("-"):
            break
        words.append(arg)
        if len(words) == 2 or words[0] not in ("bench", "train"):
            break
    return tuple(words)


def build_parser(only: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """The `memnav` argument parser. `only`: the (command,) or (group, target) whose options are added (its module
    imported); the others keep their one-line help only. None: every command's options."""
    parser = argparse.ArgumentParser(
        prog="memnav",
        description="memnav: ROS 2 memory stack for image-goal navigation. "
                    "Run `memnav COMMAND --help` for the options of each command.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memnav {__version__}",
                        help="print the installed memnav version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=_HelpFormatter)
        p.set_defaults(_module=module)
        if only is None or only[:1] == (name,):
            _load(module).add_arguments(p)

    for group, targets, help_text in (("bench", BENCH_TARGETS, "benchmarks that print JSON results"),
                                      ("train", TRAIN_TARGETS, "training jobs (resumable, with curves)")):
        gp = sub.add_parser(group, help=help_text, description=help_text)
        gsub = gp.add_subparsers(dest="target", metavar="TARGET")
        gsub.required = True
        for tname, (module, thelp) in targets.items():
            tp = gsub.add_parser(tname, help=thelp, description=thelp,
                                 formatter_class=_HelpFormatter)
            tp.set_defaults(_module=module, _group=group)
            if only is not None and only != (group, tname):
                continue
            try:
                mod = _load(module)
            except ImportError as err:  # optional piece not installed: keep the rest usable
                tp.set_defaults(_import_error=str(err))
                continue
            mod.add_arguments(tp)
            if group == "bench" and not any(a.dest == "json" for a in tp._actions):
                tp.add_argument("--json", type=Path, nargs="?", const=STDOUT_ONLY, default=None, metavar="PATH",
                                help="also write the results to this JSON file (without PATH: JSON on stdout "
                                     "only, as always; progress goes to stderr)")
            if group == "bench" and not any(a.dest in ("no_progress", "progress") for a in tp._actions):
                tp.add_argument("--no-progress", action="store_true",
                                help="hide the progress bars on stderr (the JSON is the same)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_selected(argv))
    args = parser.parse_args(argv)
    if getattr(args, "_import_error", None):
        print(f"memnav: `{args.command} {args.target}` is unavailable: {args._import_error}", file=sys.stderr)
        return 2
    module = _load(args._module)
    bench = getattr(args, "_group", None) == "bench"
    interrupted: BenchInterrupted | None = None
    BenchParts.latest = None
    try:
        if bench:   # every bench's --json: refused before the run, not after
            from memnav.paths import check_output_file

            check_output_file(args.json, "--json")
        result = module.run(args)
    except BenchInterrupted as stop:   # Ctrl-C: what the bench measured before it is still printed and written
        interrupted, result = stop, stop.results
    except (ValueError, FileNotFoundError, KeyError, RuntimeError) as err:
        print(f"memnav {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:   # a path of the wrong kind (a directory for a file, ...), no permission, a full disk
        print(f"memnav {args.command}: error: {_os_error_text(err)}", file=sys.stderr)
        return 2
    except ImportError as err:   # an optional dependency (habitat-sim) is missing: its message says how to install it
        print(f"memnav {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # a bench: before its first part began, or in its clean-up after its parts
        parts = BenchParts.latest
        if not (bench and parts is not None and parts.measured):
            print(_interrupted_text(args.target, BenchInterrupted({}, [], [])) if bench else
                  f"memnav {args.command}: interrupted", file=sys.stderr)
            return 130
        interrupted = BenchInterrupted(parts.results, parts.measured, parts.left)
        result = parts.results
    if bench:
        from memnav.core.files import json_safe, replace_files

        if interrupted is not None:
            print(_interrupted_text(args.target, interrupted), file=sys.stderr, flush=True)
            if not interrupted.measured:
                return 130
            result = dict(result, interrupted=True, left_out=interrupted.left_out)
        text = json.dumps(json_safe(result), indent=2, sort_keys=True, allow_nan=False)   # NaN: null
        print(text)
        if args.json is not None and args.json != STDOUT_ONLY:
            replace_files({args.json: (text + "\n").encode()})
        return 130 if interrupted is not None else 0
    return int(result or 0)


def _interrupted_text(target: str, stop: BenchInterrupted) -> str:
    """The stderr line of a bench ended by Ctrl-C: what it measured, what it left out, what is written."""
    if not stop.measured:
        return f"memnav bench {target}: interrupted before anything was measured; nothing is written"
    left = f"; left out: {', '.join(stop.left_out)}" if stop.left_out else ""
    return (f"memnav bench {target}: interrupted: measured {', '.join(stop.measured)}{left}; the results (marked "
            "\"interrupted\": true) hold only what was measured")


if __name__ == "__main__":  # pragma: no cover
    # `python -m memnav.cli`: run the imported memnav.cli, not this __main__ copy of it, so that the BenchInterrupted
    # a bench raises (it imports memnav.cli) is the class main catches
    from memnav.cli import main as _main

    sys.exit(_main())
