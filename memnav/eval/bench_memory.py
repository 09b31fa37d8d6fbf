"""`memnav bench memory`: latency, size and growth of the scene-graph memory (JSON results).

Three measurements, all on synthetic data (no simulator needed):

1. Scale: for each size N (default 1k, 10k, 100k, 1M place nodes) a graph is bulk-built (vectorised
   `add_places_bulk`, SQLite file in a temporary folder), then
   * `insert_ms_p50_<N>`: single `insert_observation` calls through the real API (validation, place
     matching, loop-closure search, graph/index update and one committed SQLite transaction with a 32x32
     PNG thumbnail), for a robot walking through the mapped area;
   * `retrieve_ms_p50_<N>`: top-10 `retrieve` for noisy views of mapped places, with `retrieve_recall_at_10_<N>`
     against exact search (1.0 below `index_exact_max_size`, where retrieval is exact);
   * `load_s_<N>`: reopening the database (the restart path).
2. `bytes_per_node`: Python + numpy memory per place node after a bulk build (tracemalloc; excludes
   SQLite's page cache), and `rss_bytes_per_node_<N>` from the process RSS for the largest size.
3. Patrol: a robot repeats routes through a four-room house for `--patrol-hours` (default 2 h) with
   drifting odometry; `nodes_after_first_loop` vs `nodes_after_patrol` (graph nodes: places, objects, rooms)
   shows whether revisits are recognised instead of growing the graph.

Synthetic appearance: embeddings are a smooth function of the true pose: random Fourier features of
(x, y, heading) at a coarse (8 m, room-like) and a fine (2 m, view-like) length scale, plus per-view noise,
normalised to 256-d unit vectors. Views 1 m apart have cosine similarity ~0.9, 30 degrees apart ~0.83,
unrelated places ~0 (see `SmoothPlaceEmbedder`).
"""
from __future__ import annotations

import argparse
import gc
import itertools
import math
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from memnav.cli import BenchParts
from memnav.core.memory.scene_graph import (
    InsertKind,
    ObjectDetection,
    SceneGraphConfig,
    SceneGraphMemory,
)
from memnav.core.types import Pose2D, wrap_angle
from memnav.paths import check_output_dir

DEFAULT_SIZES = "1k,10k,100k,1m"
QUICK_SIZES = "1k,5k"
DEFAULT_QUERIES, QUICK_QUERIES = 200, 50
DEFAULT_PATROL_HOURS, QUICK_PATROL_HOURS = 2.0, 10 / 60
_NS = 1_000_000_000


def parse_size(text: str) -> int:
    """'1k' -> 1000, '1m' -> 1000000, '2500' -> 2500."""
    t = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if mult > 1 else t) * mult
    except ValueError as err:
        raise ValueError(f"--sizes: cannot parse {text!r} (expected e.g. 1k, 100k, 1m)") from err
    if not (math.isfinite(value) and value >= 10 and value == int(value)):   # inf, nan: no OverflowError
        raise ValueError(f"--sizes: {text!r} must be a whole number >= 10")
    return int(value)


def size_label(n: int) -> str:
    """1000 -> '1k', 1000000 -> '1m' (the suffix of the JSON keys)."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


class SmoothPlaceEmbedder:
    """Synthetic place appearance: unit vectors that vary smoothly with pose, plus per-view noise.

    Random Fourier features approximate a Gaussian kernel, so cos(e(p), e(q)) ~ sum_s w_s exp(-|phi_s(p) -
    phi_s(q)|^2 / 2) with phi_s = (x / l_s, y / l_s, c_s cos yaw, c_s sin yaw). A coarse scale makes places
    in the same area alike (as rooms are), a fine scale separates nearby views.

    Args:
        dim: embedding length.
        scales: (length_scale_m, heading_factor, weight) per scale; weights sum to 1.
        noise: per-view noise, relative to the unit signal.
        seed: seed of the random features.
    """

    def __init__(self, dim: int = 256, scales: tuple[tuple[float, float, float], ...] = ((8.0, 0.3, 0.4),
                                                                                          (2.0, 1.3, 0.6)),
                 noise: float = 0.2, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.dim, self.noise = dim, noise
        self._parts = []
        left = dim
        for i, (ell, heading, weight) in enumerate(scales):
            d = left if i == len(scales) - 1 else round(dim * weight)
            left -= d
            w = rng.standard_normal((4, d)).astype(np.float32)
            b = rng.uniform(0, 2 * np.pi, d).astype(np.float32)
            self._parts.append((ell, heading, math.sqrt(2 * weight / d), w, b))

    def clean(self, poses: np.ndarray, chunk: int = 65_536) -> np.ndarray:
        """Noise-free (N, dim) float32 unit embeddings of (N, 3) poses."""
        poses = np.atleast_2d(np.asarray(poses, np.float64))
        out = np.empty((len(poses), self.dim), np.float32)
        for s in range(0, len(poses), chunk):
            p = poses[s : s + chunk]
            cols, cy, sy = [], np.cos(p[:, 2]), np.sin(p[:, 2])
            for ell, heading, amp, w, b in self._parts:
                phi = np.stack([p[:, 0] / ell, p[:, 1] / ell, heading * cy, heading * sy], 1).astype(np.float32)
                cols.append(amp * np.cos(phi @ w + b))
            block = np.concatenate(cols, 1)
            out[s : s + chunk] = block / np.linalg.norm(block, axis=1, keepdims=True)
        return out

    def observe(self, poses: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noisy (N, dim) float32 unit embeddings, as a camera would see the places at `poses`."""
        e = self.clean(poses)
        e += rng.standard_normal(e.shape, dtype=np.float32) * np.float32(self.noise / math.sqrt(self.dim))
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        return e


# ---------------------------------------------------------------------------------------------------------
# scale benchmark


def synthetic_routes(n: int, rng: np.random.Generator, route_len: int = 1000, step_m: float = 1.0) -> np.ndarray:
    """(n, 3) poses of places along random-walk routes (1 m apart) filling a square of ~1 place per m^2."""
    side = max(math.sqrt(n), 10.0)
    starts = rng.uniform(0, side, (math.ceil(n / route_len), 2))
    heading = np.cumsum(rng.normal(0, 0.3, (len(starts), route_len)), axis=1) + rng.uniform(-np.pi, np.pi,
                                                                                            (len(starts), 1))
    xy = starts[:, None, :] + np.cumsum(step_m * np.stack([np.cos(heading), np.sin(heading)], -1), axis=1)
    xy = np.abs(np.mod(xy + side, 2 * side) - side)  # reflect at the borders: stays in [0, side]
    poses = np.concatenate([xy, wrap_angle_array(heading)[..., None]], -1).reshape(-1, 3)
    return poses[:n]


def wrap_angle_array(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2 * np.pi) - np.pi


def _percentiles(samples_s: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples_s) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bench_size(n: int, args: argparse.Namespace, embedder: SmoothPlaceEmbedder, workdir: Path | None,
               bar: tqdm) -> dict:
    """Build an n-place memory, then time single inserts and top-10 retrievals."""
    label = size_label(n)
    rng = np.random.default_rng(args.seed + n)
    bar.set_postfix_str(f"{label}: generating")
    poses = synthetic_routes(n, rng)
    embs = embedder.observe(poses, rng)
    stamps = np.arange(n, dtype=np.int64) * _NS
    db = None if workdir is None else workdir / f"memory_{label}.sqlite"
    cfg = SceneGraphConfig(embedding_dim=args.dim, db_path=None if db is None else str(db), consolidate_every=0,
                           seed=args.seed)
    gc.collect()
    rss0 = _rss_bytes()
    bar.set_postfix_str(f"{label}: building")
    t0 = time.perf_counter()
    memory = SceneGraphMemory(cfg)
    memory.add_places_bulk(stamps, poses, embs)
    build_s = time.perf_counter() - t0
    rss_per_node = (_rss_bytes() - rss0) / n
    del embs
    gc.collect()

    # single inserts: a robot walking through the mapped area, 0.5 m per observation, with a thumbnail
    side = max(math.sqrt(n), 10.0)
    xy = rng.uniform(0.2 * side, 0.8 * side, 2)
    yaw = rng.uniform(-np.pi, np.pi)
    stamp = int(stamps[-1]) + _NS
    insert_s, kinds = [], {k: 0 for k in InsertKind}
    bar.set_postfix_str(f"{label}: inserting")
    for _ in range(args.queries):
        yaw += rng.normal(0, 0.2)
        xy = np.clip(xy + 0.5 * np.array([math.cos(yaw), math.sin(yaw)]), 0, side)
        pose = np.array([xy[0], xy[1], wrap_angle(yaw)])
        emb = embedder.observe(pose[None], rng)[0]
        thumb = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        t = time.perf_counter()
        result = memory.insert_observation(stamp, pose, emb, thumbnail=thumb)
        insert_s.append(time.perf_counter() - t)
        kinds[result.kind] += 1
        stamp += _NS // 2
        bar.update(1)

    # top-10 retrieval for noisy views near mapped places; recall against exact search
    idx = rng.integers(0, n, args.queries)
    qposes = poses[idx] + np.column_stack([rng.normal(0, 0.3, (args.queries, 2)), rng.normal(0, 0.1, args.queries)])
    queries = embedder.observe(qposes, rng)
    retrieve_s, recall = [], []
    bar.set_postfix_str(f"{label}: retrieving")
    for q in queries:
        t = time.perf_counter()
        hits = memory.retrieve(q, 10)
        retrieve_s.append(time.perf_counter() - t)
        exact = {h.node_id for h in memory.retrieve(q, 10, exact=True)}
        recall.append(len(exact & {h.node_id for h in hits}) / max(len(exact), 1))
        bar.update(1)
    stats = memory.stats()
    memory.close()
    del memory
    gc.collect()
    load_s = None
    if db is not None:   # restart: load the whole memory back from SQLite (index retrained if IVF)
        bar.set_postfix_str(f"{label}: reloading")
        t0 = time.perf_counter()
        reopened = SceneGraphMemory(cfg)
        load_s = time.perf_counter() - t0
        if reopened.stats().places != stats.places:
            raise RuntimeError(f"reloaded {reopened.stats().places} places, expected {stats.places}")
        reopened.close()
        del reopened
        gc.collect()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)

    ins50, ins99 = _percentiles(insert_s)
    ret50, ret99 = _percentiles(retrieve_s)
    return {
        f"build_s_{label}": round(build_s, 3),
        f"load_s_{label}": None if load_s is None else round(load_s, 3),
        f"insert_ms_p50_{label}": round(ins50, 4),
        f"insert_ms_p99_{label}": round(ins99, 4),
        f"insert_new_place_fraction_{label}": round(kinds[InsertKind.NEW_PLACE] / max(args.queries, 1), 3),
        f"retrieve_ms_p50_{label}": round(ret50, 4),
        f"retrieve_ms_p99_{label}": round(ret99, 4),
        f"retrieve_recall_at_10_{label}": round(float(np.mean(recall)), 4),
        f"index_mode_{label}": stats.index_mode.value,
        f"rss_bytes_per_node_{label}": round(rss_per_node, 1),
    }


def measure_bytes_per_node(n: int, args: argparse.Namespace, embedder: SmoothPlaceEmbedder) -> dict:
    """Python + numpy bytes per place node of a bulk-built memory (tracemalloc, in-RAM database excluded)."""
    rng = np.random.default_rng(args.seed)
    poses = synthetic_routes(n, rng)
    embs = embedder.observe(poses, rng)
    stamps = np.arange(n, dtype=np.int64) * _NS
    with tempfile.TemporaryDirectory(prefix="memnav_bench_bpn_") as tmp:
        cfg = SceneGraphConfig(embedding_dim=args.dim, db_path=str(Path(tmp) / "m.sqlite"), consolidate_every=0)
        gc.collect()
        tracemalloc.start()
        try:
            memory = SceneGraphMemory(cfg)
            memory.add_places_bulk(stamps, poses, embs)
            gc.collect()
            used = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        memory.close()
    return {"bytes_per_node": round(used / n, 1), "bytes_per_node_measured_at": n,
            "bytes_per_node_embedding_share": round(4 * args.dim / (used / n), 3)}


# ---------------------------------------------------------------------------------------------------------
# patrol benchmark

# four 6 m x 4 m rooms: A (0-6, 0-4), B (6-12, 0-4), C (0-6, 4-8), D (6-12, 4-8); doors A-B (6, 2),
# A-C (3, 4), B-D (9, 4), C-D (6, 6). One loop runs these routes in order and returns home.
PATROL_ROUTES: tuple[tuple[tuple[float, float], ...], ...] = (
    ((1.5, 1.5), (4.5, 1.5), (4.5, 2.0), (6.0, 2.0), (9.0, 2.0), (9.0, 4.0), (9.0, 6.0), (6.0, 6.0), (3.0, 6.0),
     (3.0, 4.0), (3.0, 2.5), (1.5, 1.5)),                                  # the ring through all four rooms
    ((1.5, 1.5), (1.5, 3.0), (3.0, 3.0), (3.0, 4.0), (3.0, 5.0), (1.0, 7.0), (5.0, 7.0), (3.0, 5.0), (3.0, 4.0),
     (3.0, 3.0), (1.5, 1.5)),                                              # A -> C and back
    ((1.5, 1.5), (4.5, 1.5), (4.5, 2.0), (6.0, 2.0), (10.5, 1.0), (10.5, 3.0), (9.0, 3.0), (9.0, 4.0), (11.0, 7.0),
     (7.0, 7.0), (9.0, 4.0), (9.0, 2.0), (6.0, 2.0), (4.5, 2.0), (1.5, 1.5)),  # A -> B -> D and back
)
# (class_id, instance_id, x, y, z): furniture the robot "detects" within 2.5 m in front of it
PATROL_OBJECTS = ((1, 101, 0.5, 0.5, 0.4), (2, 102, 5.5, 3.5, 0.8), (3, 103, 11.5, 0.5, 0.5),
                  (1, 104, 11.5, 7.5, 0.4), (4, 105, 0.5, 7.5, 1.0), (2, 106, 6.5, 7.5, 0.8))

# odometry error model: systematic scale and heading biases (unbounded drift) plus random noise per step
PATROL_ODOM_SCALE_BIAS = 0.01             # +1 % distance
PATROL_ODOM_YAW_BIAS_RAD_PER_M = 0.003    # ~0.17 degrees of heading error per metre travelled
PATROL_ODOM_SCALE_NOISE = 0.02            # std, relative
PATROL_ODOM_YAW_NOISE_RAD_PER_M = 0.01    # std per metre, plus 2 % of each turn


def _patrol_trajectory(speed_mps: float, rate_hz: float, turn_radps: float) -> np.ndarray:
    """(T, 3) true poses of one loop over PATROL_ROUTES, sampled at rate_hz (turning in place at corners)."""
    poses: list[tuple[float, float, float]] = []
    step_m, step_rad = speed_mps / rate_hz, turn_radps / rate_hz
    yaw = 0.0
    for route in PATROL_ROUTES:
        for (x0, y0), (x1, y1) in itertools.pairwise(route):
            target = math.atan2(y1 - y0, x1 - x0)
            while abs(wrap_angle(target - yaw)) > 1e-9:
                yaw = wrap_angle(yaw + float(np.clip(wrap_angle(target - yaw), -step_rad, step_rad)))
                poses.append((x0, y0, yaw))
            length = math.hypot(x1 - x0, y1 - y0)
            for k in range(1, max(1, round(length / step_m)) + 1):
                f = k / max(1, round(length / step_m))
                poses.append((x0 + f * (x1 - x0), y0 + f * (y1 - y0), yaw))
    return np.array(poses)


def bench_patrol(args: argparse.Namespace, embedder: SmoothPlaceEmbedder, workdir: Path | None) -> dict:
    """Repeat the patrol loop for args.patrol_hours with drifting odometry; report graph growth."""
    rate_hz, speed, turn = 2.0, 0.5, math.radians(60.0)
    loop = _patrol_trajectory(speed, rate_hz, turn)
    steps = max(int(args.patrol_hours * 3600 * rate_hz), 2 * len(loop))  # at least two loops
    rng = np.random.default_rng(args.seed + 7)
    db = None if workdir is None else workdir / "memory_patrol.sqlite"
    cfg = SceneGraphConfig(embedding_dim=args.dim, db_path=None if db is None else str(db), seed=args.seed)
    memory = SceneGraphMemory(cfg)
    objects = np.array([o[2:4] for o in PATROL_OBJECTS])

    odom = np.array(loop[0], dtype=np.float64)     # odometry starts at the true pose, then drifts
    prev_true = loop[0]
    insert_s: list[float] = []
    kinds = {k: 0 for k in InsertKind}
    nodes_first = places_first = None
    corrected_err, odom_err = [], []
    with tqdm(total=steps, desc="patrol", unit="obs", file=sys.stderr, leave=False,
              disable=args.no_progress) as bar:
        for step in range(steps):
            true = loop[step % len(loop)]
            # odometry integrates the true body-frame motion with biased, noisy scale and heading
            dx, dy = true[0] - prev_true[0], true[1] - prev_true[1]
            c, s = math.cos(prev_true[2]), math.sin(prev_true[2])
            fwd, left = c * dx + s * dy, -s * dx + c * dy
            dist = math.hypot(fwd, left)
            dyaw = wrap_angle(true[2] - prev_true[2])
            fwd *= 1 + PATROL_ODOM_SCALE_BIAS + rng.normal(0, PATROL_ODOM_SCALE_NOISE)
            left *= 1 + PATROL_ODOM_SCALE_BIAS + rng.normal(0, PATROL_ODOM_SCALE_NOISE)
            dyaw += PATROL_ODOM_YAW_BIAS_RAD_PER_M * dist + rng.normal(
                0, 0.02 * abs(dyaw) + PATROL_ODOM_YAW_NOISE_RAD_PER_M * dist)
            co, so = math.cos(odom[2]), math.sin(odom[2])
            odom = np.array([odom[0] + co * fwd - so * left, odom[1] + so * fwd + co * left,
                             wrap_angle(odom[2] + dyaw)])
            prev_true = true

            emb = embedder.observe(true[None], rng)[0]
            dets = []
            rel = objects - true[:2]
            ahead = rel @ np.array([math.cos(true[2]), math.sin(true[2])])
            for k in np.flatnonzero((np.hypot(rel[:, 0], rel[:, 1]) < 2.5) & (ahead > 0)):
                cls, inst, ox, oy, oz = PATROL_OBJECTS[k]
                # object position seen from the robot, expressed in the odometry frame (+ 5 cm noise)
                bx, by = Pose2D(ox, oy, 0.0).relative_to(Pose2D(*true)).x_m, Pose2D(ox, oy, 0.0).relative_to(
                    Pose2D(*true)).y_m
                co, so = math.cos(odom[2]), math.sin(odom[2])
                pos = (odom[0] + co * bx - so * by + rng.normal(0, 0.05), odom[1] + so * bx + co * by
                       + rng.normal(0, 0.05), oz)
                dets.append(ObjectDetection(cls, pos, instance_id=inst))
            stamp = step * (_NS // int(rate_hz))
            t = time.perf_counter()
            result = memory.insert_observation(stamp, odom, emb, objects=dets)
            insert_s.append(time.perf_counter() - t)
            kinds[result.kind] += 1
            if step >= steps - len(loop):   # last loop: how far the memory frame is from the truth
                corr = memory.to_memory_frame(odom)
                corrected_err.append(math.hypot(corr.x_m - true[0], corr.y_m - true[1]))
                odom_err.append(math.hypot(odom[0] - true[0], odom[1] - true[1]))
            if step == len(loop) - 1:
                st = memory.stats()
                nodes_first, places_first = st.graph_nodes, st.places
            bar.update(1)
    st = memory.stats()
    # path queries between random places of the final graph
    ids = memory.place_ids()
    path_s = []
    for a, b in rng.choice(ids, size=(50, 2)):
        t = time.perf_counter()
        memory.shortest_path(int(a), int(b))
        path_s.append(time.perf_counter() - t)
    memory.close()
    if db is not None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    ins50, ins99 = _percentiles(insert_s)
    return {
        "patrol_hours": round(steps / rate_hz / 3600, 3),
        "patrol_observations": steps,
        "patrol_loops": round(steps / len(loop), 2),
        "nodes_after_first_loop": nodes_first,
        "nodes_after_patrol": st.graph_nodes,
        "places_after_first_loop": places_first,
        "places_after_patrol": st.places,
        "objects_after_patrol": st.objects,
        "rooms_after_patrol": st.rooms,
        "patrol_new_places": kinds[InsertKind.NEW_PLACE],
        "patrol_updates": kinds[InsertKind.UPDATED_PLACE],
        "patrol_loop_closures": kinds[InsertKind.LOOP_CLOSURE],
        "patrol_insert_ms_p50": round(ins50, 4),
        "patrol_insert_ms_p99": round(ins99, 4),
        "patrol_odometry_error_m_last_loop_p50": round(float(np.median(odom_err)), 3),
        "patrol_corrected_error_m_last_loop_p50": round(float(np.median(corrected_err)), 3),
        "path_query_ms_p50": round(_percentiles(path_s)[0], 4),
    }


# ---------------------------------------------------------------------------------------------------------
# CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help="comma-separated place counts to benchmark (k = 1e3, m = 1e6)")
    parser.add_argument("--queries", type=int, default=None,
                        help=f"timed inserts and retrievals per size (default {DEFAULT_QUERIES}; "
                             f"{QUICK_QUERIES} with --quick)")
    parser.add_argument("--dim", type=int, default=256, help="embedding dimension")
    parser.add_argument("--db", default=None, metavar="DIR",
                        help="folder for the benchmark databases (default: a temporary folder, removed "
                             "afterwards); ':memory:' keeps them in RAM")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--patrol-hours", type=float, default=None,
                        help=f"simulated patrol duration, hours (default {DEFAULT_PATROL_HOURS:g}; a 10-minute "
                             "patrol with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"small run for tests: sizes {QUICK_SIZES}, {QUICK_QUERIES} queries, a 10-minute "
                             "patrol (a smaller --queries or --patrol-hours is kept; a larger one is refused)")


def run(args: argparse.Namespace) -> dict:
    """Run the memory benchmark; returns the JSON-ready results."""
    if args.quick and args.sizes != DEFAULT_SIZES:
        raise ValueError(f"--quick runs sizes {QUICK_SIZES}; leave --sizes out or drop --quick")
    if args.quick:   # --quick lowered a larger --queries / --patrol-hours without a word: refused, as --sizes is
        if args.queries is not None and args.queries > QUICK_QUERIES:
            raise ValueError(f"--quick runs at most {QUICK_QUERIES} queries, not --queries {args.queries}; "
                             "drop --quick or give fewer")
        if args.patrol_hours is not None and args.patrol_hours > QUICK_PATROL_HOURS:
            raise ValueError(f"--quick patrols at most 10 minutes, not --patrol-hours {args.patrol_hours:g}; "
                             "drop --quick or give less")
    default_queries, default_hours = (QUICK_QUERIES, QUICK_PATROL_HOURS) if args.quick else (DEFAULT_QUERIES,
                                                                                              DEFAULT_PATROL_HOURS)
    args = argparse.Namespace(**{**vars(args), "sizes": QUICK_SIZES if args.quick else args.sizes,
                                 "queries": default_queries if args.queries is None else args.queries,
                                 "patrol_hours": default_hours if args.patrol_hours is None else args.patrol_hours})
    sizes = sorted({parse_size(s) for s in str(args.sizes).split(",") if s.strip()})
    if not sizes:
        raise ValueError("--sizes: give at least one size")
    if args.queries < 1:
        raise ValueError(f"--queries must be >= 1, got {args.queries}")
    if args.dim < 8:
        raise ValueError(f"--dim must be >= 8, got {args.dim}")
    if not (math.isfinite(args.patrol_hours) and args.patrol_hours > 0):
        raise ValueError(f"--patrol-hours must be a positive number, got {args.patrol_hours}")
    if args.db not in (None, ":memory:"):
        check_output_dir(Path(args.db), "--db")   # the benchmark databases go in a folder
    embedder = SmoothPlaceEmbedder(args.dim, seed=args.seed)
    cleanup = None
    if args.db == ":memory:":
        workdir = None
    elif args.db:
        workdir = Path(args.db)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = cleanup = Path(tempfile.mkdtemp(prefix="memnav_bench_memory_"))
    results: dict = {"dim": args.dim, "queries": args.queries, "seed": args.seed, "sizes": sizes,
                     "db": "memory" if workdir is None else "sqlite-file",
                     "config": {k: v for k, v in vars(replace(SceneGraphConfig(), embedding_dim=args.dim)).items()
                                if k.startswith(("index_", "new_place", "loop_closure", "merge"))}}
    # Ctrl-C: the sizes (and the rest) measured before it are still printed and written, marked interrupted
    parts = BenchParts(results, [f"size {size_label(n)}" for n in sizes] + ["bytes_per_node", "patrol"])
    try:
        with parts:
            with tqdm(total=2 * args.queries * len(sizes), desc="memory bench", unit="op", file=sys.stderr,
                      disable=args.no_progress) as bar:
                for n in sizes:
                    part = bench_size(n, args, embedder, workdir, bar)
                    parts.add(f"size {size_label(n)}", {**part, "targets_met": targets_met({**results, **part})})
            parts.add("bytes_per_node", measure_bytes_per_node(min(max(sizes), 100_000), args, embedder))
            part = bench_patrol(args, embedder, workdir)
            parts.add("patrol", {**part, "targets_met": targets_met({**results, **part})})
    finally:
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)
        elif workdir is not None:   # --db DIR: a database a Ctrl-C left half-built would be loaded by the next run
            for name in [*map(size_label, sizes), "patrol"]:
                for suffix in ("", "-wal", "-shm"):
                    (workdir / f"memory_{name}.sqlite{suffix}").unlink(missing_ok=True)
    return results


def targets_met(results: dict) -> dict[str, bool]:
    """The targets of the figures `results` holds (100k and 1m: where those sizes were measured; the patrol's
    growth: once the patrol was)."""
    targets = {}
    for key, size, limit_ms in (("insert_ms_p50", "100k", 1.0), ("retrieve_ms_p50", "100k", 2.0),
                                ("retrieve_ms_p50", "1m", 10.0)):
        if f"{key}_{size}" in results:
            targets[f"{key}_{size}<={limit_ms:g}"] = results[f"{key}_{size}"] <= limit_ms
    if "nodes_after_patrol" in results:
        targets["nodes_after_patrol<=2x_first_loop"] = \
            results["nodes_after_patrol"] <= 2 * results["nodes_after_first_loop"]
    return targets
