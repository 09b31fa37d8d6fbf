"""The heavy mesh of `memnav bench sim`: a welded surface, so its jitter opens no cracks."""
import numpy as np
import open3d as o3d
import trimesh

from memnav.eval.bench_sim import _subdivide, _weld, make_heavy_mesh
from memnav.sim.houses import generate_house, write_house
from memnav.sim.mesh import load_scene_mesh
from memnav.sim.render import Camera, camera_rays


def test_subdivision_shares_each_edge_midpoint():
    # two triangles sharing the edge 1-2; corners duplicated the way texture seams duplicate them
    vertices = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 1], [1, 0, 0], [0, 0, 1], [1, 0, 1]], float)
    faces = np.array([[0, 1, 2], [3, 5, 4]])
    vertices, faces = _weld(vertices, faces)
    assert len(vertices) == 4 and faces[1].tolist() == [faces[0, 1], 3, faces[0, 2]]
    v, f, c = _subdivide(vertices, faces, np.zeros((2, 3), np.uint8))
    assert f.shape == (8, 3) and c.shape == (8, 3)
    assert len(v) == 4 + 5                                   # 5 distinct edges, one midpoint each
    area = 0.5 * np.linalg.norm(np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]), axis=1)
    assert np.allclose(area, 0.125)                          # each triangle split into 4 equal ones


def test_heavy_mesh_is_welded_and_rays_do_not_leak(tmp_path):
    house = write_house(generate_house(3, name="house_h"), tmp_path / "house")
    path = make_heavy_mesh(house, 20_000, tmp_path, seed=0)
    mesh = trimesh.load(path, process=False)
    assert len(mesh.faces) >= 20_000
    edges = np.sort(mesh.edges, axis=1)
    _, uses = np.unique(edges[:, 0] * len(mesh.vertices) + edges[:, 1], return_counts=True)
    assert (uses == 2).mean() > 0.95   # nearly every edge joins two (the rest: where the house's parts meet)
    # a camera ray that meets the house's surfaces meets the heavy mesh's too: no see-through cracks
    casters = []
    for mesh_path in (house, path):
        scene = load_scene_mesh(mesh_path)
        caster = o3d.t.geometry.RaycastingScene()
        caster.add_triangles(o3d.core.Tensor(scene.vertices.astype(np.float32)),
                             o3d.core.Tensor(scene.faces.astype(np.uint32)))
        casters.append(caster)
    lo, hi = scene.bounds
    dirs = camera_rays(Camera(64, 64, 90.0))
    rng = np.random.default_rng(1)
    hits = leaks = 0
    for _ in range(8):
        yaw = rng.uniform(-np.pi, np.pi)
        rot = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
        origin = np.array([rng.uniform(lo[0] + 1, hi[0] - 1), lo[1] + 1.25, rng.uniform(lo[2] + 1, hi[2] - 1)])
        rays = o3d.core.Tensor(np.concatenate([np.broadcast_to(origin, dirs.shape), dirs @ rot.T],
                                              axis=1).astype(np.float32))
        house_hit, heavy_hit = (np.isfinite(c.cast_rays(rays)["t_hit"].numpy()) for c in casters)
        leaks += int((house_hit & ~heavy_hit).sum())
        hits += int(house_hit.sum())
    assert hits > 8 * 4096 * 0.5
    # at most a ray in 10^4 slips through where the house's parts meet in T-junctions (the mesh of
    # independent triangles before 2026-11 let 3.5% through)
    assert leaks <= hits * 1e-4
