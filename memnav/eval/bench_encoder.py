"""`memnav bench encoder`: place recognition on the TEST houses, against two baselines, and latency.

A database of views at sampled poses (random and along shortest paths) and a separate set of query
views are rendered in the test houses. A query counts when its nearest database view (cosine
similarity, over all test houses together) lies in the same house within 1 m and 30 deg; queries with no
such database view are left out. Baselines in the same run: downsampled raw pixels (16x16 RGB,
zero-mean, unit norm) and an ORB bag of visual words (k-means vocabulary on train-house frames, tf-idf).

With `--audit-queries`, each query's pose also goes through the look-alike search of `memnav goal-audit`
(`memnav.sim.goal_lookalikes`): a query is ambiguous when some view more than 1 m (geodesic) away reproduces
it at least as well as the query's own camera nudged by 5 cm and 2 deg (look-alike ratio <= 1), and recall@1
is split by that label as well as by closeness.

`recall_at_1_verified` re-ranks each query's `--verify-top` nearest views by embedding similarity plus
`ScanVerifyConfig.weight` times their depth-and-colour scan fit (`memnav.core.scan_verification`), computed
from the same 64x64 RGB-D input the encoder sees; `recall_at_1` stays the encoder's nearest view alone.

`--threads N` (default 2) sets the threads of torch and of numpy's, OpenCV's and SciPy's OpenBLAS
(`memnav.threads`) that the embeddings and the `encode_ms_*` latency run on; the JSON's `threads` and `blas_threads`
say what they were.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from memnav.cli import BenchParts, add_camera_arguments, camera_options
from memnav.core.encoder import Encoder, EncoderConfig
from memnav.core.scan_verification import ScanVerifyConfig, ViewScan, scan_fit, verified_order, view_scan
from memnav.core.verification import VerificationConfig, extract_features
from memnav.sim.base import RENDERERS, SimConfig
from memnav.sim.dataset import add_lookalike_grid_arguments, default_data_dir, lookalike_grid
from memnav.sim.goal_lookalikes import GoalAuditConfig
from memnav.threads import MAX_INFERENCE_THREADS, blas_threads, check_inference_threads, set_inference_threads
from memnav.train.encoder_train import embed
from memnav.train.frame_bank import houses_of_split, recall_at_1, recall_at_k, render_set, same_place

CLOSE_UP_M = 1.0   # a query whose median depth is below this is a close-up (`recall_at_1_close_up_queries`)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=Path("models/encoder.pt"), help="encoder checkpoint")
    parser.add_argument("--data", type=Path, default=default_data_dir(),
                        metavar="DIR", help="generated dataset (its --split houses are evaluated)")
    parser.add_argument("--split", choices=("train", "val", "test"), default="test",
                        help="houses whose views are retrieved (default test: never trained on); train shows how "
                             "far an encoder is from what it does on houses it saw")
    parser.add_argument("--max-houses", type=int, default=0, metavar="N",
                        help="only the first N houses of the split (0 = all)")
    parser.add_argument("--db-per-house", type=int, default=300, help="database views per house")
    parser.add_argument("--queries-per-house", type=int, default=100, help="query views per house")
    parser.add_argument("--vocab-words", type=int, default=256, help="ORB bag-of-words vocabulary size")
    parser.add_argument("--seed", type=int, default=123, help="random seed of the sampled poses")
    parser.add_argument("--renderer", choices=RENDERERS, default="auto",
                        help="the simulator's ray caster (SimConfig.renderer); the two differ on a few tenths of a "
                             "percent of pixels, enough to move scan verification and the baselines slightly")
    parser.add_argument("--render-workers", type=int, default=0, metavar="N",
                        help="render the houses' views in N processes (0 = this one; on a many-core machine). Each "
                             "house then draws its poses from a random stream of its own (as `memnav train encoder "
                             "--render-workers`), so the views, and the figures, differ from the one-process "
                             "default the README's figures use; any N > 0 gives the same views")
    add_camera_arguments(parser, "the database, query and vocabulary views are rendered with")
    parser.add_argument("--threads", type=int, default=2,
                        help="CPU threads of torch and of the OpenBLAS builds of numpy, OpenCV and SciPy "
                             f"(memnav.threads; 1 to {MAX_INFERENCE_THREADS}) while embedding and timing "
                             "encode_ms_p50; the JSON's `threads` and `blas_threads` (encoder_node runs on "
                             "`torch_threads`, default 1)")
    parser.add_argument("--verify-top", type=int, default=10, metavar="K",
                        help="re-rank the K nearest views by scan verification for recall_at_1_verified (0 = skip)")
    parser.add_argument("--audit-queries", action="store_true",
                        help="also search each query's look-alikes (`memnav goal-audit`) and split recall@1 into "
                             "ambiguous queries (another spot reproduces the view at least as well as the query's "
                             "camera nudged by 5 cm) and the rest; renders a grid of views per house first, about "
                             "5 min more on the default test houses")
    add_lookalike_grid_arguments(parser, "--audit-queries")


def frame_view_scan(frame: np.ndarray, enc_cfg: EncoderConfig, cfg: ScanVerifyConfig) -> ViewScan:
    """Scan of one preprocessed encoder input (4, P, P): RGB in [0, 1] and depth / max_depth_m."""
    rgb = np.clip(frame[:3].astype(np.float64), 0.0, 1.0).transpose(1, 2, 0)
    return view_scan(rgb, frame[3].astype(np.float32) * enc_cfg.max_depth_m, cfg)


def verified_recall(db_frames: np.ndarray, q_frames: np.ndarray, db_emb: np.ndarray, q_emb: np.ndarray,
                    match: np.ndarray, enc_cfg: EncoderConfig, top_k: int,
                    cfg: ScanVerifyConfig | None = None, progress: bool = True) -> tuple[float, list[float]]:
    """recall@1 after re-ranking each query's top_k nearest views by scan verification; per-pair fit times, ms."""
    from tqdm import tqdm

    cfg = cfg or ScanVerifyConfig()  # its camera defaults are the simulator's that rendered the frames
    valid = np.flatnonzero(match.any(axis=1))
    sims = q_emb[valid] @ db_emb.T
    top = np.argsort(-sims, axis=1, kind="stable")[:, :top_k]
    scans: dict[int, ViewScan] = {}
    hits, times = [], []
    for row, qi in enumerate(tqdm(valid, desc="scan verification", unit="query", file=sys.stderr,
                                      disable=not progress)):
        query = frame_view_scan(q_frames[qi], enc_cfg, cfg)
        fits = np.zeros(len(top[row]))
        for j, di in enumerate(top[row]):
            if di not in scans:
                scans[di] = frame_view_scan(db_frames[di], enc_cfg, cfg)
            t0 = time.perf_counter()
            fits[j] = scan_fit(query, scans[di], cfg)
            times.append((time.perf_counter() - t0) * 1000.0)
        best = top[row][verified_order(sims[row, top[row]], fits, cfg.weight)[0]]
        hits.append(bool(match[qi, best]))
    return (float(np.mean(hits)) if hits else math.nan), times


def query_lookalike_ratios(houses: list[Path], poses: np.ndarray, house_of: np.ndarray, cfg: GoalAuditConfig,
                           renderer: str, progress: bool = True) -> np.ndarray:
    """The look-alike ratio (`memnav.sim.goal_lookalikes.GoalAudit.ratio`) of each query view: `poses` (N, 3)
    map-frame (x, y, yaw) on the floor of house `houses[house_of[i]]`."""
    from tqdm import tqdm

    from memnav.core.frames import habitat_position_from_map
    from memnav.eval.goal_audit import house_lookalikes
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    ratios = np.full(len(poses), math.nan)
    sim = EmbeddedSimulator(config=SimConfig(renderer=renderer))
    with tqdm(total=len(poses), desc="query look-alikes", unit="query", disable=not progress,
              file=sys.stderr) as bar:
        for h, scene in enumerate(houses):
            queries = np.flatnonzero(house_of == h)
            if not len(queries):
                continue
            sim.load_scene(scene)
            finder = house_lookalikes(sim, cfg, scene.stem, progress)
            for i in queries:
                x, y, yaw = poses[i]
                ratios[i] = finder.audit(habitat_position_from_map(x, y, sim.grid.floor_height_m), float(yaw)).ratio
                bar.update(1)
    sim.close()
    return ratios


def pixel_descriptors(rgb: np.ndarray, size: int = 16) -> np.ndarray:
    import cv2

    out = np.stack([cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA).astype(np.float32).ravel()
                    for img in rgb])
    out -= out.mean(axis=1, keepdims=True)
    return out / (np.linalg.norm(out, axis=1, keepdims=True) + 1e-9)


def _orb_bits(rgb: np.ndarray) -> list[np.ndarray]:
    cfg = VerificationConfig()
    return [np.unpackbits(extract_features(img, cfg).descriptors, axis=1).astype(np.float32) for img in rgb]


class OrbBagOfWords:
    """ORB descriptors quantised to a k-means vocabulary, tf-idf weighted, L2-normalised histograms."""

    def __init__(self, train_rgb: np.ndarray, words: int, seed: int) -> None:
        import cv2

        descs = [d for d in _orb_bits(train_rgb) if len(d)]
        data = np.concatenate(descs) if descs else np.zeros((0, 256), np.float32)
        if words > len(data):   # k-means needs a descriptor per word (cv2 failed with an assertion)
            raise ValueError(f"--vocab-words {words}: more words than the {len(data)} ORB descriptors of the "
                             "vocabulary views; give at most that")
        rng = np.random.default_rng(seed)
        if len(data) > 60_000:
            data = data[rng.choice(len(data), 60_000, replace=False)]
        cv2.setRNGSeed(seed)
        crit = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 20, 1e-3)
        _, _, self.centers = cv2.kmeans(data, words, None, crit, 1, cv2.KMEANS_PP_CENTERS)
        hist = self._hist(descs)
        df = (hist > 0).sum(axis=0)
        self.idf = np.log((1 + len(hist)) / (1 + df)).astype(np.float32)

    def _hist(self, descs: list[np.ndarray]) -> np.ndarray:
        k = len(self.centers)
        c2 = (self.centers ** 2).sum(axis=1)
        out = np.zeros((len(descs), k), dtype=np.float32)
        for i, d in enumerate(descs):
            if len(d):
                words = np.argmin(c2[None, :] - 2 * d @ self.centers.T, axis=1)
                out[i] = np.bincount(words, minlength=k)
        return out

    def describe(self, rgb: np.ndarray) -> np.ndarray:
        h = self._hist(_orb_bits(rgb)) * self.idf
        return h / (np.linalg.norm(h, axis=1, keepdims=True) + 1e-9)


def run(args: argparse.Namespace) -> dict:
    if args.verify_top < 0:
        raise ValueError(f"--verify-top must be >= 0, got {args.verify_top}")
    if args.max_houses < 0:
        raise ValueError(f"--max-houses must be >= 0 (0 = all), got {args.max_houses}")
    if args.render_workers < 0:
        raise ValueError(f"--render-workers must be >= 0 (0 = render in this process), got {args.render_workers}")
    check_inference_threads(args.threads, "--threads")
    for name in ("db_per_house", "queries_per_house", "vocab_words"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    camera = camera_options(args)
    if args.audit_queries and camera != {name: getattr(SimConfig, name) for name in camera}:
        raise ValueError("--audit-queries searches look-alikes with the simulator's camera (90 deg, 128 x 128 px, "
                         "at 1.25 m); leave --hfov-deg, --camera-height-m and --image-px at their defaults with it")
    if args.verify_top > 0 and camera["width_px"] != camera["height_px"]:
        raise ValueError("scan verification reads the encoder's square input, which stretches a non-square image; "
                         "give --verify-top 0 with a non-square --image-px")
    lookalikes = lookalike_grid(args)
    encoder = Encoder.from_checkpoint(args.checkpoint)
    set_inference_threads(args.threads)   # the latency depends on it: the JSON says what it ran on
    houses = houses_of_split(args.data, args.split)[:args.max_houses or None]
    out: dict = {"test_houses": len(houses), "split": args.split, "checkpoint": str(args.checkpoint),
                 "renderer": args.renderer, "render_workers": args.render_workers, "threads": args.threads,
                 "blas_threads": blas_threads(),  # None where numpy's BLAS is not an OpenBLAS memnav.threads reaches
                 "hfov_deg": camera["hfov_deg"],
                 "camera_height_m": camera["sensor_height_m"], "image_px": [camera["width_px"], camera["height_px"]],
                 "targets": {"recall_at_1": 0.90, "encode_ms_p50": 3.0}}
    names = ["encoder recall", *(["look-alike split"] if args.audit_queries else []),
             *(["scan verification"] if args.verify_top > 0 else []), "pixel baseline", "ORB baseline", "latency"]
    # Ctrl-C: the parts measured before it (the encoder's recall first) are still printed and written
    with BenchParts(out, names) as parts:
        _measure(args, encoder, houses, camera, lookalikes, parts)
    return out


def _measure(args: argparse.Namespace, encoder: Encoder, houses: list[Path], camera: dict,
             lookalikes: GoalAuditConfig, parts: BenchParts) -> None:
    """Render the views and measure each part of `memnav bench encoder` into `parts`, in the order of its names."""
    import torch

    db = render_set(houses, args.db_per_house, encoder.cfg, args.seed, keep_rgb=True, desc="database",
                    renderer=args.renderer, progress=not args.no_progress, workers=args.render_workers,
                    camera=camera)[0]
    qs = render_set(houses, args.queries_per_house, encoder.cfg, args.seed + 1, keep_rgb=True, desc="queries",
                    renderer=args.renderer, progress=not args.no_progress, workers=args.render_workers,
                    camera=camera)[0]
    match = same_place(qs.poses, db.poses, qs.house, db.house)
    set_inference_threads(args.threads)   # again: the simulator's first render set torch's to one per core

    db_emb, q_emb = embed(encoder.model, db.frames), embed(encoder.model, qs.frames)
    r_enc, n_valid = recall_at_1(db_emb, q_emb, match)
    r_enc5, _ = recall_at_k(db_emb, q_emb, match, 5)
    # the same queries split by how far their view looks: close-ups of a wall show one texture, found all over
    close = qs.median_depth_m < CLOSE_UP_M
    r_close, n_close = recall_at_1(db_emb, q_emb, match & close[:, None])
    r_other, n_other = recall_at_1(db_emb, q_emb, match & ~close[:, None])
    parts.add("encoder recall", {
        "recall_at_1": round(r_enc, 4),
        "recall_at_5": round(r_enc5, 4),
        "recall_at_1_close_up_queries": round(r_close, 4) if n_close else None,
        "close_up_queries": n_close,
        "recall_at_1_other_queries": round(r_other, 4) if n_other else None,
        "other_queries": n_other,
        "queries_evaluated": n_valid,
        "database_size": int(len(db.poses))})
    if args.audit_queries:
        # the same queries split by whether another spot reproduces the view (memnav goal-audit's labels)
        ambiguity: dict = {}
        ratio = query_lookalike_ratios(houses, qs.poses, qs.house, lookalikes, args.renderer, not args.no_progress)
        for name, label in (("ambiguous", ratio <= lookalikes.ambiguous_ratio),
                            ("near_identical", ratio <= lookalikes.near_identical_ratio),
                            ("unambiguous", ratio > lookalikes.ambiguous_ratio)):
            r, n = recall_at_1(db_emb, q_emb, match & label[:, None])
            ambiguity.update({f"recall_at_1_{name}_queries": round(r, 4) if n else None, f"{name}_queries": n})
        ambiguity.update(lookalike_grid_m=lookalikes.grid_m, lookalike_heading_deg=lookalikes.heading_deg)
        parts.add("look-alike split", ambiguity)
    if args.verify_top > 0:
        scan_cfg = ScanVerifyConfig(hfov_deg=camera["hfov_deg"], camera_height_m=camera["sensor_height_m"])
        r_ver, fit_ms = verified_recall(db.frames, qs.frames, db_emb, q_emb, match, encoder.cfg, args.verify_top,
                                        scan_cfg, progress=not args.no_progress)
        parts.add("scan verification", {
            "recall_at_1_verified": round(r_ver, 4), "verify_top_k": args.verify_top,
            "verify_pair_ms_p50": round(float(np.median(fit_ms)), 3) if fit_ms else None})
    r_pix, _ = recall_at_1(pixel_descriptors(db.rgb), pixel_descriptors(qs.rgb), match)
    parts.add("pixel baseline", {"baseline_pixels_recall_at_1": round(r_pix, 4)})
    train_rgb = render_set(houses_of_split(args.data, "train"), 40, encoder.cfg, args.seed + 2, keep_rgb=True,
                           desc="orb vocabulary", renderer=args.renderer, progress=not args.no_progress,
                           workers=args.render_workers, camera=camera)[0].rgb
    bow = OrbBagOfWords(train_rgb, args.vocab_words, args.seed)
    r_orb, _ = recall_at_1(bow.describe(db.rgb), bow.describe(qs.rgb), match)
    parts.add("ORB baseline", {"baseline_orb_recall_at_1": round(r_orb, 4)})

    # latency: one 128x128 RGB-D frame at a time, preprocessing included
    rgb, depth = db.rgb[0], np.full(db.rgb.shape[1:3], 2.0, dtype=np.float32)
    for _ in range(20):
        encoder.encode(rgb, depth)
    times = []
    for i in range(300):
        t0 = time.perf_counter()
        encoder.encode(db.rgb[i % len(db.rgb)], depth)
        times.append((time.perf_counter() - t0) * 1000.0)
    parts.add("latency", {"encode_ms_p50": round(float(np.median(times)), 3),
                          "encode_ms_p99": round(float(np.percentile(times, 99)), 3),
                          "torch_threads": torch.get_num_threads()})   # what the latency ran on
    print(f"test houses: {len(houses)}, database {len(db.poses)}, queries {len(qs.poses)} ({n_valid} with a "
          f"true match)", file=sys.stderr)
