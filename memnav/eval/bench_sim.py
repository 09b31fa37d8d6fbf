"""`memnav bench sim`: embedded simulator RGB-D steps per second.

Three measurements, each the median over `--chunks` chunks of `--steps` actions (forward/turn mix):
a generated house at 128x128 and 256x256, and a >= 1M-triangle mesh at 128x128 (the generated house
subdivided and jittered like a scan, written to .ply and loaded through the normal scene loader).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memnav.cli import BenchParts
from memnav.core.types import Action
from memnav.sim.base import OBJECT_ORDER_MAX_TRIANGLES, RENDERERS, SimConfig
from memnav.sim.dataset import default_data_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=default_data_dir(),
                        metavar="DIR", help="dataset whose first house is used (generated if absent)")
    parser.add_argument("--steps", type=int, default=300, help="actions per timing chunk")
    parser.add_argument("--chunks", type=int, default=5, help="timing chunks; the median is reported")
    parser.add_argument("--heavy-triangles", type=int, default=1_000_000,
                        help="minimum triangle count of the heavy mesh")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the action sequence")
    parser.add_argument("--renderer", choices=RENDERERS, default="auto",
                        help="the simulator's ray caster (SimConfig.renderer): auto = object-order up to "
                             f"{OBJECT_ORDER_MAX_TRIANGLES:,} triangles, open3d's Embree BVH above; each "
                             "figure's is reported as <key>_renderer")
    parser.add_argument("--render-threads", type=int, default=1,
                        help="threads of the object-order ray caster (SimConfig.render_threads; 0 = one per core)")
    parser.add_argument("--scene", type=Path, default=None, metavar="MESH",
                        help="also time 128x128 RGB-D steps on this mesh (any file the simulator loads: .glb, "
                             ".gltf, .ply, .obj; a Habitat *.stage_config.json beside it is honoured); "
                             "reported as scene_128_steps_per_s, scene_128_triangles, scene_128_renderer")


def _house_scene(data: Path, workdir: Path) -> Path:
    scenes = sorted((data / "scenes").glob("*.glb")) if (data / "scenes").is_dir() else []
    if scenes:
        return scenes[0]
    from memnav.sim.houses import generate_house, write_house

    return write_house(generate_house(0, name="bench_house"), workdir)


def make_heavy_mesh(scene: Path, min_triangles: int, out_dir: Path, seed: int = 0) -> Path:
    """Subdivide a scene until it has >= min_triangles, jitter vertices by ~5 mm, save as .ply.

    Like a scan's mesh, the result is one indexed surface: coincident corners are welded first and each
    edge's midpoint is one vertex shared by both triangles on it, so the jitter moves the triangles on both
    sides of an edge alike and opens no cracks. (Until 2026-11 every triangle had its own corners and the
    jitter opened cracks that about 3.5% of the camera rays passed through; README gives figures on both.)
    """
    import trimesh

    from memnav.sim.mesh import load_scene_mesh

    mesh = load_scene_mesh(scene)
    vertices, faces = _weld(mesh.vertices.astype(np.float64), mesh.faces.astype(np.int64))
    colors = (np.clip(mesh.face_colors[:, 0, :], 0, 1) * 255).astype(np.uint8)
    while len(faces) < min_triangles:
        vertices, faces, colors = _subdivide(vertices, faces, colors)
    rng = np.random.default_rng(seed)
    vertices = vertices + rng.normal(0.0, 0.005, vertices.shape) * np.array([1.0, 0.0, 1.0])
    tm = trimesh.Trimesh(vertices=vertices, faces=faces, face_colors=colors, process=False)
    out = out_dir / f"heavy_{len(faces)}.ply"
    tm.export(out)
    (out_dir / f"{out.stem}.stage_config.json").write_text('{"up": [0, 1, 0], "front": [0, 0, -1]}')
    return out


def _weld(vertices: np.ndarray, faces: np.ndarray, tol_m: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Merge vertices that lie within tol_m of each other on a grid (texture seams duplicate corners)."""
    keys = np.round(vertices / tol_m).astype(np.int64)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    return vertices[first], inverse.reshape(-1)[faces]


def _subdivide(vertices: np.ndarray, faces: np.ndarray, colors: np.ndarray):
    """Split every triangle into 4 at its edge midpoints; one midpoint vertex per edge, shared."""
    n = len(vertices)
    a, b, c = faces[:, 0], faces[:, 1], faces[:, 2]
    ends = np.stack([np.stack([a, b], 1), np.stack([b, c], 1), np.stack([c, a], 1)], 1)   # (F, 3 edges, 2)
    key = ends.min(axis=2) * n + ends.max(axis=2)
    edges, edge_of = np.unique(key.reshape(-1), return_inverse=True)
    mid = n + edge_of.reshape(-1, 3)                                                          # ab, bc, ca
    new_vertices = np.concatenate([vertices, (vertices[edges // n] + vertices[edges % n]) / 2])
    ab, bc, ca = mid[:, 0], mid[:, 1], mid[:, 2]
    new_faces = np.stack([np.stack([a, ab, ca], 1), np.stack([ab, b, bc], 1),
                          np.stack([ca, bc, c], 1), np.stack([ab, bc, ca], 1)], 1).reshape(-1, 3)
    return new_vertices, new_faces, np.repeat(colors, 4, axis=0)


def time_steps(scene: Path, config: SimConfig, steps: int, chunks: int, seed: int) -> dict:
    """Median steps/s over chunks of a random forward/turn action mix, plus the triangle count."""
    from memnav.sim.embedded import EmbeddedSimulator

    sim = EmbeddedSimulator(scene, config)
    rng = np.random.default_rng(seed)
    actions = rng.choice([Action.MOVE_FORWARD, Action.TURN_LEFT, Action.TURN_RIGHT], p=[0.6, 0.2, 0.2],
                         size=(chunks, steps))
    sim.step(Action.TURN_LEFT)  # warm-up (compiles the shading kernel)
    rates = []
    for chunk in actions:
        t0 = time.perf_counter()
        for a in chunk:
            sim.step(a)
        rates.append(len(chunk) / (time.perf_counter() - t0))
    return {"steps_per_s": float(np.median(rates)), "triangles": sim.scene.mesh.num_triangles,
            "renderer": sim.scene.caster.renderer}


def run(args: argparse.Namespace) -> dict:
    for name in ("steps", "chunks", "heavy_triangles"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.render_threads < 0:
        raise ValueError(f"--render-threads must be >= 0 (0 = one per core), got {args.render_threads}")
    if args.data.exists() and not args.data.is_dir():
        raise ValueError(f"--data {args.data}: not a dataset folder (memnav scenes --out DIR)")
    if args.scene is not None and not args.scene.is_file():
        raise FileNotFoundError(f"--scene: no mesh file at {args.scene}")
    from tqdm import tqdm

    with tempfile.TemporaryDirectory(prefix="memnav_bench_sim_") as tmp:
        work = Path(tmp)
        house = _house_scene(args.data, work)
        jobs = [("rgbd_128", house, 128), ("rgbd_256", house, 256), ("heavy_128", None, 128)]
        if args.scene is not None:
            jobs.append(("scene_128", args.scene, 128))
        out: dict = {"scene": str(house), "cpu_count": os.cpu_count(), "render_threads": args.render_threads,
                     "targets": {"rgbd_128_steps_per_s": 1000, "rgbd_256_steps_per_s": 300,
                                 "heavy_128_steps_per_s": 300}}
        # Ctrl-C: the meshes timed before it are still printed and written, marked interrupted
        with BenchParts(out, [key for key, _, _ in jobs]) as parts:
            for key, scene, size in tqdm(jobs, desc="bench sim", file=sys.stderr, disable=args.no_progress):
                if scene is None:
                    scene = make_heavy_mesh(house, args.heavy_triangles, work, args.seed)
                cfg = SimConfig(width_px=size, height_px=size, renderer=args.renderer,
                                render_threads=args.render_threads)
                res = time_steps(scene, cfg, args.steps, args.chunks, args.seed)
                part = {f"{key}_steps_per_s": round(res["steps_per_s"], 1), f"{key}_triangles": res["triangles"],
                        f"{key}_renderer": res["renderer"]}
                if key == "scene_128":
                    part["scene_128_mesh"] = str(args.scene)
                parts.add(key, part)
    return out
