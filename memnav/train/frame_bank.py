"""Frames rendered by the embedded simulator at sampled poses, for encoder training and evaluation."""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memnav.core.encoder import EncoderConfig, frames_to_array
from memnav.sim.base import SimConfig
from memnav.sim.metrics import view_median_depth

NEAR_MISS_M = (1.15, 2.0)  # default distance band of the near misses that moved, meters (success radius: 1)
NEAR_MISS_TURN_DEG = (40.0, 75.0)  # default turn band of the near misses that turned in place, degrees (allowed: 30)


@dataclass
class FrameSet:
    """Preprocessed frames with their poses.

    Attributes:
        frames: (N, 4, P, P) float16 network inputs.
        poses: (N, 3) map-frame (x_m, y_m, yaw_rad).
        house: (N,) int index of the house each frame comes from.
        rgb: (N, H, W, 3) uint8 raw colour frames (kept for baselines), or None.
        median_depth_m: (N,) median depth of each view's pixels, meters (below about 1 m: a close-up of a
            wall), or None.
    """

    frames: np.ndarray
    poses: np.ndarray
    house: np.ndarray
    rgb: np.ndarray | None = None
    median_depth_m: np.ndarray | None = None


def dataset_summary(data: Path) -> dict:
    """A generated dataset's splits.json (houses, seed, splits: house name -> split)."""
    splits_file = Path(data) / "splits.json"
    if not splits_file.is_file():
        raise FileNotFoundError(f"{splits_file} not found: generate houses first (memnav scenes --out {data})")
    try:
        summary = json.loads(splits_file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{splits_file} is not JSON ({err}): not a generated dataset") from err
    if not isinstance(summary, dict) or not isinstance(summary.get("splits"), dict):
        raise ValueError(f"{splits_file} has no 'splits' mapping (house name -> split): not a generated dataset")
    return summary


def houses_of_split(data: Path, split: str) -> list[Path]:
    """Scene files of the houses in a split of a generated dataset (from splits.json)."""
    splits = dataset_summary(data)["splits"]
    houses = [Path(data) / "scenes" / f"{name}.glb" for name, s in sorted(splits.items()) if s == split]
    if not houses:
        raise ValueError(f"{data}: no houses in split {split!r}")
    return houses


def checked_houses(data: Path, split: str, option: str) -> list[Path]:
    """`houses_of_split` for a command-line option: a missing or malformed dataset, or one without houses in
    `split`, is a ValueError naming `option` (as typed, e.g. "--val-data"); the message also names the path."""
    try:
        return houses_of_split(data, split)
    except (OSError, ValueError) as err:
        raise ValueError(f"{option}: {err}") from err


def along_path(path: np.ndarray, spacing_m: float,
               first_m: float | Callable[[], float] = 0.0) -> Iterator[tuple[np.ndarray, float]]:
    """(Habitat position, yaw facing along the path) every `spacing_m` along each segment of a shortest path
    (Habitat positions, (N, 3)), from `first_m` into each segment (a callable: drawn anew for each segment)."""
    for a, b in zip(path[:-1], path[1:]):
        seg = b - a
        length = float(np.hypot(seg[0], seg[2]))
        if length < 1e-6:
            continue
        yaw = math.atan2(-seg[0], -seg[2])
        for t in np.arange(first_m() if callable(first_m) else first_m, length, spacing_m):
            yield a + seg * (t / length), yaw


def sample_poses(sim, n: int, rng: np.random.Generator, path_fraction: float = 0.5) -> list[tuple[np.ndarray, float]]:
    """n (Habitat position, yaw) pairs: uniform random, and along shortest-path walks (heading along the path)."""
    poses: list[tuple[np.ndarray, float]] = []
    while len(poses) < n:
        if rng.random() < path_fraction:
            path = sim.shortest_path(sim.sample_navigable_point(), sim.sample_navigable_point())
            for p, yaw in along_path(path, 0.75, lambda: rng.uniform(0, 0.75)):
                if len(poses) < n and sim.is_navigable(p):
                    poses.append((p, yaw + rng.normal(0.0, 0.3)))
        else:
            poses.append((sim.sample_navigable_point(), float(rng.uniform(-math.pi, math.pi))))
    return poses


def jitter_pose(sim, pos: np.ndarray, yaw: float, rng: np.random.Generator, max_dist_m: float,
                max_angle_rad: float) -> tuple[np.ndarray, float]:
    """A navigable pose within max_dist_m and max_angle_rad of (pos, yaw) (the pose itself as fallback)."""
    for _ in range(20):
        r = max_dist_m * math.sqrt(rng.random())
        a = rng.uniform(-math.pi, math.pi)
        q = pos + np.array([r * math.cos(a), 0.0, r * math.sin(a)])
        if sim.is_navigable(q):
            return q, yaw + rng.uniform(-max_angle_rad, max_angle_rad)
    return pos.copy(), yaw + rng.uniform(-max_angle_rad, max_angle_rad)


def near_miss_pose(sim, pos: np.ndarray, yaw: float, rng: np.random.Generator, min_dist_m: float = NEAR_MISS_M[0],
                   max_dist_m: float = NEAR_MISS_M[1], max_angle_rad: float = math.radians(20),
                   turn_rad: tuple[float, float] = (math.radians(NEAR_MISS_TURN_DEG[0]),
                                                    math.radians(NEAR_MISS_TURN_DEG[1]))) -> tuple[np.ndarray, float]:
    """A navigable pose just outside the same-place criterion of (pos, yaw): a hard negative for training.

    Three times in four it is min_dist_m..max_dist_m away (half of those along the viewing axis, forwards or
    backwards, where views differ least) with a heading within max_angle_rad; otherwise it stands within
    0.3 m of pos, turned by turn_rad[0]..turn_rad[1] either way. Falls back to a turned view at pos itself.
    """
    forward = np.array([-math.sin(yaw), 0.0, -math.cos(yaw)])
    for _ in range(20):
        if rng.random() < 0.75:
            r = rng.uniform(min_dist_m, max_dist_m)
            if rng.random() < 0.5:
                direction = forward * rng.choice([-1.0, 1.0])
            else:
                a = rng.uniform(-math.pi, math.pi)
                direction = np.array([math.cos(a), 0.0, math.sin(a)])
            q = pos + r * direction
            qyaw = yaw + rng.uniform(-max_angle_rad, max_angle_rad)
        else:
            r = 0.3 * math.sqrt(rng.random())
            a = rng.uniform(-math.pi, math.pi)
            q = pos + np.array([r * math.cos(a), 0.0, r * math.sin(a)])
            qyaw = yaw + rng.choice([-1.0, 1.0]) * rng.uniform(*turn_rad)
        if sim.is_navigable(q):
            return q, qyaw
    return pos.copy(), yaw + rng.choice([-1.0, 1.0]) * turn_rad[1]


def _render_house_views(sim, scene: Path, per_house: int, enc_cfg: EncoderConfig, rng: np.random.Generator,
                        keep_rgb: bool, pair_jitter: tuple[float, float] | None, near_miss: bool,
                        near_miss_m: tuple[float, float], near_miss_turn_deg: tuple[float, float],
                        on_pose: Callable[[], None] | None = None) -> dict:
    """One house's views: {"main" / "pos" / "neg": (frames, poses, rgbs)} and "median_depth" (main views).

    Draws poses and pairs from `rng`; `on_pose` is called after each anchor (a progress bar's tick).
    """
    from memnav.core.frames import pose2d_from_habitat

    samplers = {}
    if pair_jitter is not None:
        samplers["pos"] = lambda pos, yaw: jitter_pose(sim, pos, yaw, rng, *pair_jitter)
    if near_miss:
        turn = (math.radians(near_miss_turn_deg[0]), math.radians(near_miss_turn_deg[1]))
        samplers["neg"] = lambda pos, yaw: near_miss_pose(sim, pos, yaw, rng, *near_miss_m, turn_rad=turn)
    views: dict = {k: ([], [], []) for k in ("main", *samplers)}
    median_depth: list[float] = []
    sim.load_scene(scene)
    for pos, yaw in sample_poses(sim, per_house, rng):
        for name in list(views):
            q, qyaw = (pos, yaw) if name == "main" else samplers[name](pos, yaw)
            obs = sim.render_at(q, qyaw)
            frames, poses, rgbs = views[name]
            frames.append(frames_to_array(obs.rgb, obs.depth, enc_cfg)[0].astype(np.float16))
            poses.append(pose2d_from_habitat(q, qyaw))
            if keep_rgb and name == "main":
                rgbs.append(obs.rgb)
            if name == "main":
                median_depth.append(view_median_depth(obs.depth) or 0.0)
        if on_pose is not None:
            on_pose()
    sim.close()
    views["median_depth"] = median_depth
    return views


def house_rng(seed: int, house_index: int) -> np.random.Generator:
    """The random stream of one house when houses are rendered independently (`render_set`'s workers >= 1):
    the same for a house whatever the number of workers."""
    return np.random.default_rng([seed, house_index])


def _render_one_house(job: tuple, on_pose: Callable[[], None] | None = None) -> dict:
    """One house with a simulator and a stream of its own (`house_rng`): `render_set` with workers >= 1, in this
    process or as a worker process's entry."""
    from memnav.sim.embedded import EmbeddedSimulator

    scene, index, per_house, enc_cfg, seed, renderer, camera, options = job
    sim = EmbeddedSimulator(config=SimConfig(seed=seed, renderer=renderer, **camera))
    return _render_house_views(sim, scene, per_house, enc_cfg, house_rng(seed, index), on_pose=on_pose, **options)


def render_set(houses: list[Path], per_house: int, enc_cfg: EncoderConfig, seed: int, keep_rgb: bool = False,
               pair_jitter: tuple[float, float] | None = None, progress: bool = True,
               desc: str = "render", near_miss: bool = False, near_miss_m: tuple[float, float] = NEAR_MISS_M,
               near_miss_turn_deg: tuple[float, float] = NEAR_MISS_TURN_DEG, renderer: str = "auto",
               workers: int = 0,
               camera: Mapping[str, float] | None = None) -> tuple[FrameSet, FrameSet | None, FrameSet | None]:
    """Render frames at sampled poses in each house; optionally a positive and a near-miss view of each.

    Returns (frames, positives or None, near misses or None). Positives lie within pair_jitter =
    (meters, radians); near misses come from `near_miss_pose` (with near_miss=True), near_miss_m and
    near_miss_turn_deg giving its distance and turn bands. `renderer` is SimConfig.renderer; `camera` sets
    SimConfig's camera fields (hfov_deg, sensor_height_m, width_px, height_px; by default the simulator's 90 deg
    128 x 128 camera at 1.25 m, which every encoder was trained on).

    workers = 0 (the default) renders every house in this process from one random stream seeded by `seed`.
    workers >= 1 gives each house a stream of its own (`house_rng`) and a simulator of its own (seeded with
    `seed`, so its navigable-point sampler starts alike in every house) and renders that many houses at once in
    worker processes (1: in this process): the frames then depend on the seed and the houses alone, not on
    the number of workers, but differ from the workers = 0 frames of the same seed.
    """
    from tqdm import tqdm

    from memnav.sim.embedded import EmbeddedSimulator

    if workers < 0:
        raise ValueError(f"workers must be >= 0 (0 = one stream in this process), got {workers!r}")
    options = {"keep_rgb": keep_rgb, "pair_jitter": pair_jitter, "near_miss": near_miss,
               "near_miss_m": tuple(near_miss_m), "near_miss_turn_deg": tuple(near_miss_turn_deg)}
    bar = tqdm(total=len(houses) * per_house, desc=desc, unit="frame", disable=not progress, file=sys.stderr)
    camera = dict(camera or {})
    jobs = [(scene, i, per_house, enc_cfg, seed, renderer, camera, options) for i, scene in enumerate(houses)]
    if workers == 0:
        rng = np.random.default_rng(seed)
        sim = EmbeddedSimulator(config=SimConfig(seed=seed, renderer=renderer, **camera))
        per = [_render_house_views(sim, scene, per_house, enc_cfg, rng, on_pose=lambda: bar.update(1), **options)
               for scene in houses]
    elif workers == 1 or len(houses) == 1:
        per = [_render_one_house(job, on_pose=lambda: bar.update(1)) for job in jobs]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn, not fork: the parent may hold torch's and numba's threads
        with ProcessPoolExecutor(min(workers, len(houses)), mp_context=multiprocessing.get_context("spawn")) as pool:
            per = []
            for views in pool.map(_render_one_house, jobs):
                per.append(views)
                bar.update(per_house)
    bar.close()
    idx = np.repeat(np.arange(len(houses)), per_house)
    median_depth = np.asarray([d for views in per for d in views["median_depth"]])

    def frame_set(name: str) -> FrameSet | None:
        if name not in per[0]:
            return None
        frames = [f for views in per for f in views[name][0]]
        poses = [q for views in per for q in views[name][1]]
        rgbs = [r for views in per for r in views[name][2]]
        return FrameSet(np.stack(frames), np.asarray(poses), idx, np.stack(rgbs) if rgbs else None,
                        median_depth if name == "main" else None)

    return frame_set("main"), frame_set("pos"), frame_set("neg")


def same_place(poses_a: np.ndarray, poses_b: np.ndarray, house_a: np.ndarray, house_b: np.ndarray,
               max_dist_m: float = 1.0, max_angle_rad: float = math.radians(30)) -> np.ndarray:
    """(Na, Nb) bool: pose pairs in the same house within max_dist_m and max_angle_rad."""
    d = np.hypot(poses_a[:, None, 0] - poses_b[None, :, 0], poses_a[:, None, 1] - poses_b[None, :, 1])
    dyaw = np.abs((poses_a[:, None, 2] - poses_b[None, :, 2] + math.pi) % (2 * math.pi) - math.pi)
    return (d <= max_dist_m) & (dyaw <= max_angle_rad) & (house_a[:, None] == house_b[None, :])


def recall_at_k(db_emb: np.ndarray, q_emb: np.ndarray, match: np.ndarray, k: int = 1) -> tuple[float, int]:
    """Fraction of queries (with at least one true match) with a true match among their k nearest database items."""
    valid = match.any(axis=1)
    if not valid.any():
        return math.nan, 0
    sims = q_emb[valid] @ db_emb.T
    top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    hits = np.take_along_axis(match[valid], top, axis=1).any(axis=1)
    return float(hits.mean()), int(valid.sum())


def recall_at_1(db_emb: np.ndarray, q_emb: np.ndarray, match: np.ndarray) -> tuple[float, int]:
    """Fraction of queries (with at least one true match) whose nearest database item is a true match."""
    return recall_at_k(db_emb, q_emb, match, 1)
