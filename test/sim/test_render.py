"""The two ray casters: object-order (memnav's numba kernel) against open3d's Embree BVH on the same rays."""
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from memnav.sim import render
from memnav.sim.base import SimConfig
from memnav.sim.houses import generate_house, write_house
from memnav.sim.mesh import SceneMesh, load_scene_mesh
from memnav.sim.navmesh import NavGrid, NavGridConfig
from memnav.sim.render import Camera, RayCaster


@pytest.fixture(scope="module")
def house_mesh(tmp_path_factory):
    return load_scene_mesh(write_house(generate_house(5, name="house_r"), tmp_path_factory.mktemp("house")))


def _views(mesh: SceneMesh, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    grid = NavGrid(mesh, RayCaster(mesh, "bvh"), NavGridConfig())
    rng = np.random.default_rng(seed)
    positions = np.array([grid.sample(rng) for _ in range(n)], np.float32)
    positions[:, 1] += 1.25
    return positions, rng.uniform(-np.pi, np.pi, n)


def _both(mesh: SceneMesh, positions, yaws, camera, semantic=False):
    obj, bvh = RayCaster(mesh, "object"), RayCaster(mesh, "bvh")
    assert (obj.renderer, bvh.renderer) == ("object", "bvh")
    return (obj.render(positions, yaws, camera, semantic=semantic),
            bvh.render(positions, yaws, camera, semantic=semantic))


@pytest.mark.parametrize("size", [(64, 64), (96, 48)])
def test_object_order_matches_the_bvh_in_a_house(house_mesh, size):
    positions, yaws = _views(house_mesh, 12, seed=2)
    camera = Camera(size[0], size[1], 90.0)
    frames_obj, frames_bvh = _both(house_mesh, positions, yaws, camera, semantic=True)
    assert len(frames_obj) == len(frames_bvh) == 12
    depth_o = np.stack([f.depth for f in frames_obj])
    depth_b = np.stack([f.depth for f in frames_bvh])
    assert depth_o.shape == (12, size[1], size[0])
    assert np.array_equal(depth_o > 0, depth_b > 0)            # the same rays hit something
    assert (depth_b > 0).mean() > 0.99                          # inside a closed house: nearly all do
    assert np.abs(depth_o - depth_b).max() < 1e-4
    # colour and semantics differ only where two triangles meet a ray at the same distance (shared edges,
    # coplanar overlaps) and the two casters break the tie differently
    same_rgb = np.all(np.stack([f.rgb for f in frames_obj]) == np.stack([f.rgb for f in frames_bvh]), axis=-1)
    assert same_rgb.mean() > 0.98
    same_sem = np.stack([f.semantic for f in frames_obj]) == np.stack([f.semantic for f in frames_bvh])
    assert same_sem.mean() > 0.98


def _quad_mesh(corners: np.ndarray) -> SceneMesh:
    faces = np.array([[0, 1, 2], [0, 2, 3]], np.int32)
    return SceneMesh(vertices=corners.astype(np.float32), faces=faces, face_uv=np.zeros((2, 3, 2), np.float32),
                     face_texture=np.full(2, -1, np.int32), face_colors=np.full((2, 3, 3), 0.8, np.float32),
                     textures=np.zeros((0, 1, 1, 3), np.uint8), face_semantic=np.array([7, 7], np.int32),
                     source=Path("quad"))


def test_a_floor_passing_under_the_camera_is_clipped_not_lost():
    # a large floor 1.25 m below the camera reaches behind it: only its part in front may be hit
    floor = _quad_mesh(np.array([[-200, 0, -200], [200, 0, -200], [200, 0, 200], [-200, 0, 200]]))
    camera = Camera(32, 32, 90.0)
    (fo,), (fb,) = _both(floor, np.array([[0.3, 1.25, -0.7]]), np.array([0.6]), camera, semantic=True)
    assert np.array_equal(fo.depth > 0, fb.depth > 0)
    assert (fo.depth[16:] > 0).all() and (fo.depth[:16] == 0).all()   # below the horizon only
    assert np.abs(fo.depth - fb.depth).max() < 1e-4
    assert (fo.semantic[16:] == 7).all()


def test_a_wall_behind_the_camera_or_beside_the_view_is_not_drawn():
    wall = _quad_mesh(np.array([[-1, 0, 2], [1, 0, 2], [1, 2, 2], [-1, 2, 2]]))  # at z = +2: behind a -Z camera
    camera = Camera(16, 16, 90.0)
    (behind,), _ = _both(wall, np.array([[0.0, 1.0, 0.0]]), np.array([0.0]), camera)
    assert (behind.depth == 0).all()
    (ahead,), (ahead_bvh,) = _both(wall, np.array([[0.0, 1.0, 0.0]]), np.array([np.pi]), camera)  # turned around
    assert (ahead.depth > 0).any() and np.allclose(ahead.depth, ahead_bvh.depth, atol=1e-5)
    assert np.allclose(ahead.depth[ahead.depth > 0], 2.0, atol=1e-5)   # depth along the optical axis


def test_auto_picks_by_triangle_count_and_bad_choices_are_refused(house_mesh, monkeypatch):
    assert RayCaster(house_mesh).renderer == "object"
    monkeypatch.setattr(render, "OBJECT_ORDER_MAX_TRIANGLES", house_mesh.num_triangles - 1)
    assert RayCaster(house_mesh).renderer == "bvh"
    with pytest.raises(ValueError, match="renderer"):
        RayCaster(house_mesh, "raster")
    with pytest.raises(ValueError, match="threads"):
        RayCaster(house_mesh, "object", threads=-1)
    with pytest.raises(ValueError, match="SimConfig.renderer"):
        SimConfig(renderer="gpu")
    with pytest.raises(ValueError, match="SimConfig.render_threads"):
        SimConfig(render_threads=-2)


def test_one_thread_and_all_cores_render_the_same_frames(house_mesh):
    positions, yaws = _views(house_mesh, 3, seed=4)
    camera = Camera(48, 48, 90.0)
    many = RayCaster(house_mesh, "object", threads=0).render(positions, yaws, camera)
    one = RayCaster(house_mesh, "object", threads=1).render(positions, yaws, camera)
    for a, b in zip(many, one):
        assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.depth, b.depth)


def _split_in_four(mesh: SceneMesh) -> SceneMesh:
    """The same surfaces in 4x the triangles: each split at its edge midpoints, uv and colour interpolated."""
    tri = mesh.vertices[mesh.faces]                                     # (F, 3, 3)
    corners = [(0, 3, 5), (3, 1, 4), (5, 4, 2), (3, 4, 5)]              # 0-2 corners, 3-5 midpoints ab, bc, ca

    def with_midpoints(a):                                              # (F, 3, ...) -> (F, 6, ...)
        return np.concatenate([a, (a[:, [0, 1, 2]] + a[:, [1, 2, 0]]) / 2], axis=1)

    def split(a):                                                       # (F, 3, ...) -> (4F, 3, ...)
        six = with_midpoints(a)
        return np.stack([six[:, list(c)] for c in corners], axis=1).reshape(-1, 3, *a.shape[2:])

    tris = split(tri)
    return SceneMesh(vertices=tris.reshape(-1, 3).astype(np.float32),
                     faces=np.arange(tris.shape[0] * 3, dtype=np.int32).reshape(-1, 3),
                     face_uv=split(mesh.face_uv).astype(np.float32), face_texture=np.repeat(mesh.face_texture, 4),
                     face_colors=split(mesh.face_colors).astype(np.float32), textures=mesh.textures,
                     face_semantic=np.repeat(mesh.face_semantic, 4), source=mesh.source)


def test_a_mesh_of_many_faces_shades_like_the_same_surfaces_in_few(house_mesh):
    # above GATHER_MIN_FACES shading gathers face records in a pass of its own; the picture must not change.
    # The generated houses texture every face from one atlas: untexture every third face to tell them apart
    coarse = replace(house_mesh, face_texture=np.where(np.arange(house_mesh.num_triangles) % 3 == 0, -1,
                                                       house_mesh.face_texture).astype(np.int32))
    fine = coarse
    while fine.num_triangles <= render.GATHER_MIN_FACES:
        fine = _split_in_four(fine)
    positions, yaws = _views(house_mesh, 4, seed=6)
    camera = Camera(64, 64, 90.0)
    for renderer in ("bvh", "object"):
        coarse_frames = RayCaster(coarse, renderer).render(positions, yaws, camera, semantic=True)
        fine_frames = RayCaster(fine, renderer).render(positions, yaws, camera, semantic=True)
        for a, b in zip(coarse_frames, fine_frames):
            assert np.abs(a.depth - b.depth).max() < 1e-3
            # 1 grey level of rounding; ties on the new shared edges may pick the other side's colour
            close = np.abs(a.rgb.astype(int) - b.rgb.astype(int)).max(axis=-1) <= 1
            assert close.mean() > 0.98
            assert (a.semantic == b.semantic).mean() > 0.98
