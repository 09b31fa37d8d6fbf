"""Write the goal view of a generated ImageNav episode as a goal photo (NAME.png, NAME.depth.png, NAME.json), as
`memnav goal capture` would have saved it standing at the goal, with the goal pose (map frame) as its odometry
pose: a goal for `memnav goal send` in the simulator.

    .venv/bin/python scripts/episode_goal_photo.py house_020_0 goals/house_020_0.png [--data data/houses] [--split test]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from memnav.core.frames import habitat_to_map
from memnav.core.goal_photo import GoalPhoto, write_goal_photo
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator
from memnav.sim.episodes import load_episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("episode_id")
    parser.add_argument("out", type=Path)
    parser.add_argument("--data", type=Path, default=Path("data/houses"))
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    episodes = {e.episode_id: e for e in load_episodes(args.data, args.split)}
    if args.episode_id not in episodes:
        parser.error(f"no episode {args.episode_id!r} in the {args.split} split of {args.data}")
    episode = episodes[args.episode_id]
    sim = EmbeddedSimulator(config=SimConfig())
    sim.reset(episode)
    goal = sim.goal_observation
    xy = habitat_to_map(np.asarray(episode.goal.position, dtype=np.float64))[:2]
    meta = {"episode": episode.episode_id, "odom_pose": {"x_m": float(xy[0]), "y_m": float(xy[1]),
                                                         "yaw_rad": float(episode.goal_yaw_rad())}}
    written = write_goal_photo(args.out, GoalPhoto(goal.rgb, goal.depth, meta))
    print("wrote " + ", ".join(map(str, written)))


if __name__ == "__main__":
    main()
