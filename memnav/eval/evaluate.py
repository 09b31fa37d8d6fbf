"""`memnav eval`: run agents on ImageNav episodes and report Success, SPL, SoftSPL (habitat-lab definitions)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memnav.eval.agents import AGENTS, Agent, make_agent
from memnav.sim.base import SimConfig
from memnav.sim.dataset import default_data_dir
from memnav.sim.env import ImageNavEnv
from memnav.sim.metrics import EpisodeResult, aggregate


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that reads episodes."""
    parser.add_argument("--data", type=Path, default=default_data_dir(), metavar="DIR",
                        help="dataset: memnav's generated set (DIR/episodes/{split}.json.gz), Habitat's split "
                             "layout (DIR/{split}/{split}.json.gz + content/*.json.gz) or one .json.gz file "
                             "(env MEMNAV_DATA sets the default)")
    parser.add_argument("--scenes-dir", type=Path, default=None, metavar="DIR",
                        help="where to look for the scene files named by scene_id "
                             "(default: beside the data)%(default).0s")
    parser.add_argument("--split", default="test", help="dataset split: train, val or test")
    parser.add_argument("--episodes", type=int, default=None, metavar="N",
                        help="evaluate the first N episodes of the split (default: all)%(default).0s")
    parser.add_argument("--backend", choices=("embedded", "habitat"), default="embedded",
                        help="simulator: the embedded CPU ray caster, or habitat-sim (installed with conda)")
    parser.add_argument("--max-steps", type=int, default=500, metavar="STEPS",
                        help="step limit per episode, actions (Habitat ImageNav uses 500)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (agents, odometry noise)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", default="oracle", choices=sorted(AGENTS),
                        help="agent to evaluate")
    add_data_arguments(parser)
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="write summary + per-episode results to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run_episodes(agent: Agent, episodes: list, config: SimConfig, backend: str = "embedded",
                 progress: bool = True, desc: str = "eval") -> list[EpisodeResult]:
    """Run `agent` on each episode, returning one result per episode."""
    from tqdm import tqdm

    from memnav.sim.factory import make_simulator

    sim = make_simulator(backend, config, None)
    env = ImageNavEnv(sim)
    results: list[EpisodeResult] = []
    bar = tqdm(episodes, desc=desc, unit="ep", disable=not progress, file=sys.stderr)
    try:
        for ep in bar:
            obs = env.reset(ep)
            goal = env.goal_observation
            assert goal is not None
            agent.reset(ep, goal, sim)
            while not env.done:
                obs = env.step(agent.act(obs))
            results.append(env.result())
            summary = aggregate(results)
            bar.set_postfix(success=f"{summary['success']:.2f}", spl=f"{summary['spl']:.2f}")
    finally:
        sim.close()
    return results


def format_table(rows: dict[str, dict]) -> str:
    """A fixed-width table of per-agent summaries."""
    cols = ("episodes", "success", "spl", "soft_spl", "mean_steps", "distance_to_goal")
    head = f"{'agent':<10}" + "".join(f"{c:>18}" for c in cols)
    lines = [head, "-" * len(head)]
    for name, s in rows.items():
        cells = "".join(f"{s[c]:>18d}" if isinstance(s[c], int) else f"{s[c]:>18.3f}" for c in cols)
        lines.append(f"{name:<10}{cells}")
    return "\n".join(lines)


def load_split(args: argparse.Namespace) -> list:
    from memnav.sim.episodes import load_episodes

    if args.episodes is not None and args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    return load_episodes(args.data, args.split, scenes_dir=args.scenes_dir, limit=args.episodes)


def run(args: argparse.Namespace) -> int:
    episodes = load_split(args)
    if not episodes:
        raise ValueError(f"{args.data}: split {args.split!r} has no episodes")
    config = SimConfig(max_episode_steps=args.max_steps, seed=args.seed)
    agent = make_agent(args.agent, seed=args.seed)
    results = run_episodes(agent, episodes, config, args.backend, progress=not args.no_progress,
                           desc=args.agent)
    summary = aggregate(results)
    print(format_table({args.agent: summary}))
    if args.json is not None:
        out = dict(summary, agent=args.agent, split=args.split, data=str(args.data), backend=args.backend,
                   per_episode=[r.to_json() for r in results])
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0
