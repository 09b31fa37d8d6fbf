"""`memnav bench agent`: per-step inference latency of the full agent (encoder + memory + policy + stop).

The memnav agent runs on test-house episodes of the embedded simulator; only its `act()` is timed (the
simulator's rendering is not part of the agent). Each step encodes the RGB-D frame, inserts it into the
long-term scene graph and the working buffer, retrieves the goal's top-k places, runs the attention
policy, computes the calibrated belief (with geometric verification when the view resembles the goal)
and the VoI stop decision. `--prefill N` first loads the long-term memory with N places, as a robot
that has mapped a building would have. The camera options (`--hfov-deg`, `--image-px`, ...) time the agent on
a robot's camera, e.g. a 640 x 360 stream with `--encoder models/encoder_69deg_16x9.pt`.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from memnav.cli import BenchInterrupted, add_camera_arguments, camera_options
from memnav.eval.evaluate import add_map_pixel_spacing_argument, add_model_arguments, check_model_files, model_name
from memnav.eval.learned_agents import MODELS, LearnedAgent, LearnedAgentOptions
from memnav.sim.base import SimConfig
from memnav.sim.dataset import default_data_dir
from memnav.threads import MAX_INFERENCE_THREADS, blas_threads, check_inference_threads, set_inference_threads


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", default="memnav", choices=("memnav", "episodic", "gru"), help="agent to time")
    parser.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                        help="generated dataset (test split episodes are used)")
    parser.add_argument("--policy-dir", type=Path, default=MODELS, metavar="DIR", help="policy checkpoints")
    parser.add_argument("--steps", type=int, default=600, help="timed steps (over as many episodes as needed)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    parser.add_argument("--prefill", type=int, default=2000, metavar="N",
                        help="places loaded into the long-term memory before timing (0 = start empty)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads of torch and of the OpenBLAS builds of numpy, OpenCV and SciPy "
                             f"(memnav.threads), 1 to {MAX_INFERENCE_THREADS}")
    add_model_arguments(parser, "the agent")
    add_map_pixel_spacing_argument(parser)
    add_camera_arguments(parser, "that the timed views and goal photos are rendered with (larger images cost the "
                                 "encoder's resize, ORB and the occupancy map more)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")


def run(args: argparse.Namespace) -> dict:
    import torch

    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.env import ImageNavEnv
    from memnav.sim.episodes import load_episodes

    if args.steps <= 0:
        raise ValueError(f"--steps must be positive, got {args.steps}")
    for name in ("warmup", "prefill"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name} must be >= 0, got {getattr(args, name)}")
    if not (math.isfinite(args.map_pixel_spacing_deg) and args.map_pixel_spacing_deg >= 0):
        raise ValueError(f"--map-pixel-spacing-deg must be a finite number >= 0, got {args.map_pixel_spacing_deg}")
    check_inference_threads(args.threads, "--threads")
    camera = camera_options(args)
    check_model_files(args)
    set_inference_threads(args.threads)
    episodes = load_episodes(args.data, "test")
    agent = LearnedAgent(args.agent, LearnedAgentOptions(policy_dir=args.policy_dir, encoder_checkpoint=args.encoder,
                                                         calibration=args.calibration,
                                                         map_pixel_spacing_deg=args.map_pixel_spacing_deg))
    rng = np.random.default_rng(args.seed)
    sim = EmbeddedSimulator(config=SimConfig(seed=args.seed, **camera))
    env = ImageNavEnv(sim)
    times: list[float] = []
    torch_threads: int | None = None
    total = args.steps + args.warmup
    interrupted: KeyboardInterrupt | None = None
    try:
        while len(times) < total:
            ep = episodes[int(rng.integers(len(episodes)))]
            obs = env.reset(ep)
            if not times:   # the simulator's first render (numba's thread pool) set torch's threads to one per core
                set_inference_threads(args.threads)
            agent.reset(ep, env.goal_observation, sim)
            memory = agent.navigator.memory
            if memory is not None and args.prefill > 0 and memory.stats().places == 0:
                _prefill(memory, args.prefill, agent.encoder.embedding_dim, rng)
                agent._stamp_ns = int(memory.stats().last_stamp_ns or 0)
            while not env.done and len(times) < total:
                t0 = time.perf_counter()
                action = agent.act(obs)
                times.append((time.perf_counter() - t0) * 1e3)
                torch_threads = torch.get_num_threads()
                obs = env.step(action)
    except KeyboardInterrupt as err:   # Ctrl-C: the steps timed before it are still reported (marked interrupted)
        interrupted = err
    finally:
        agent.close()
        sim.close()
    timed = np.array(times[args.warmup:])
    if interrupted is not None and not timed.size:
        raise BenchInterrupted({}, [], [f"{args.steps} timed steps"]) from interrupted
    memory = agent.navigator.memory
    result = {
        "agent": args.agent,
        "steps": int(timed.size),
        "step_ms_p50": float(np.percentile(timed, 50)),
        "step_ms_p99": float(np.percentile(timed, 99)),
        "step_ms_mean": float(timed.mean()),
        "prefill_places": args.prefill if memory is not None else 0,
        "threads": args.threads,
        "torch_threads": torch_threads,   # torch's thread count the last timed step ran on
        "blas_threads": blas_threads(),  # None where numpy's BLAS is not an OpenBLAS memnav.threads can reach
        "image_px": [camera["width_px"], camera["height_px"]],
        "hfov_deg": camera["hfov_deg"],
        "encoder": model_name(args.encoder),
        "map_pixel_spacing_deg": args.map_pixel_spacing_deg,
    }
    print(f"{args.agent}: step p50 {result['step_ms_p50']:.2f} ms, p99 {result['step_ms_p99']:.2f} ms",
          file=sys.stderr)
    if interrupted is not None:
        raise BenchInterrupted(result, [f"{timed.size} of {args.steps} timed steps"],
                               [f"{args.steps - timed.size} timed steps"] if timed.size < args.steps else []) \
            from interrupted
    return result


def _prefill(memory, n: int, dim: int, rng: np.random.Generator) -> None:
    """n places on a 0.8 m lattice far from the house (so they never merge with what the robot sees)."""
    side = int(np.ceil(np.sqrt(n)))
    idx = np.arange(n)
    poses = np.stack([1000.0 + 0.8 * (idx % side), 1000.0 + 0.8 * (idx // side), np.zeros(n)], axis=1)
    emb = rng.standard_normal((n, dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    memory.add_places_bulk(np.arange(1, n + 1, dtype=np.int64) * 1_000_000, poses, emb)
