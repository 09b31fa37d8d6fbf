"""Pinhole RGB-D(-semantic) rendering of a SceneMesh by ray casting (open3d RaycastingScene, Embree, CPU)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit

from memnav.sim.mesh import SceneMesh

AMBIENT = 0.35  # share of light that reaches surfaces at grazing angles (keeps walls readable)


@dataclass(frozen=True)
class Camera:
    """Pinhole camera: square pixels, optical axis along the agent heading, -Z forward (Habitat)."""

    width_px: int
    height_px: int
    hfov_deg: float

    @property
    def focal_px(self) -> float:
        return self.width_px / (2.0 * np.tan(np.deg2rad(self.hfov_deg) / 2.0))


@lru_cache(maxsize=16)
def camera_rays(camera: Camera) -> np.ndarray:
    """(H*W, 3) ray directions in the camera frame with unit forward component (z = -1).

    With this scaling the ray parameter at a hit equals depth along the optical axis.
    """
    f = camera.focal_px
    cols = (np.arange(camera.width_px) + 0.5 - camera.width_px / 2.0) / f
    rows = -(np.arange(camera.height_px) + 0.5 - camera.height_px / 2.0) / f
    xx, yy = np.meshgrid(cols, rows)
    dirs = np.stack([xx, yy, -np.ones_like(xx)], axis=-1).reshape(-1, 3)
    dirs.setflags(write=False)
    return dirs.astype(np.float32)


@dataclass
class Frame:
    """One rendered view: rgb (H, W, 3) uint8, depth (H, W) float32 meters, semantic (H, W) int32."""

    rgb: np.ndarray
    depth: np.ndarray
    semantic: np.ndarray | None


class RayCaster:
    """Renders views of one scene; build once per scene (the BVH build is the costly part)."""

    def __init__(self, mesh: SceneMesh) -> None:
        import open3d as o3d

        self._o3d = o3d
        self.mesh = mesh
        self._scene = o3d.t.geometry.RaycastingScene()
        self._scene.add_triangles(o3d.core.Tensor(np.ascontiguousarray(mesh.vertices, dtype=np.float32)),
                                  o3d.core.Tensor(np.ascontiguousarray(mesh.faces, dtype=np.uint32)))
        # Per-face affine texture mapping: uv = uv0 + w1 * duv1 + w2 * duv2.
        fuv = mesh.face_uv.astype(np.float32)
        self._uv0 = np.ascontiguousarray(fuv[:, 0])
        self._duv1 = np.ascontiguousarray(fuv[:, 1] - fuv[:, 0])
        self._duv2 = np.ascontiguousarray(fuv[:, 2] - fuv[:, 0])
        self._colors = np.ascontiguousarray(mesh.face_colors, dtype=np.float32)
        tex = mesh.textures if mesh.textures.shape[0] else np.zeros((1, 1, 1, 3), np.uint8)
        self._tex_size = int(tex.shape[1])
        self._tex_flat = np.ascontiguousarray(tex.reshape(-1, 3))

    def cast(self, origins: np.ndarray, directions: np.ndarray) -> dict[str, np.ndarray]:
        """Raw ray cast: (N,3) origins and directions -> t_hit, primitive_ids, primitive_uvs, normals."""
        rays = np.concatenate([origins, directions], axis=1).astype(np.float32, copy=False)
        out = self._scene.cast_rays(self._o3d.core.Tensor(rays))
        return {k: v.numpy() for k, v in out.items()}

    def render(self, positions: np.ndarray, yaws_rad: np.ndarray, camera: Camera,
               max_depth_m: float = 10.0, semantic: bool = False) -> list[Frame]:
        """Render B views in one ray cast.

        Args:
            positions: (B, 3) camera centres in Habitat world coordinates, meters.
            yaws_rad: (B,) headings about +Y, radians.
            camera: intrinsics.
            max_depth_m: depth is clipped to this; misses read 0.
            semantic: also return per-pixel semantic ids.
        """
        positions = np.atleast_2d(np.asarray(positions, dtype=np.float32))
        yaws = np.atleast_1d(np.asarray(yaws_rad, dtype=np.float64))
        b = positions.shape[0]
        base = camera_rays(camera)
        n = base.shape[0]
        rays = np.empty((b * n, 6), dtype=np.float32)
        _make_rays(base, positions, yaws, rays)
        out = self._scene.cast_rays(self._o3d.core.Tensor.from_numpy(rays))
        hits = {k: v.numpy() for k, v in out.items()}
        rgb = np.empty((b * n, 3), dtype=np.uint8)
        depth = np.empty(b * n, dtype=np.float32)
        sem = np.empty(b * n, dtype=np.int32)
        _shade(hits["t_hit"], hits["primitive_ids"], hits["primitive_uvs"], hits["primitive_normals"],
               rays, self._uv0, self._duv1, self._duv2, self.mesh.face_texture,
               self._colors, self._tex_flat, self._tex_size, self.mesh.face_semantic,
               np.float32(max_depth_m), rgb, depth, sem)
        h, w = camera.height_px, camera.width_px
        rgb = rgb.reshape(b, h, w, 3)
        depth = depth.reshape(b, h, w)
        sem = sem.reshape(b, h, w) if semantic else None
        return [Frame(rgb[i], depth[i], sem[i] if sem is not None else None) for i in range(b)]


# fastmath without nnan/ninf: misses are inf and must stay detectable
@njit(cache=True, nogil=True, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"}, error_model="numpy")
def _shade(t_hit, prim_ids, prim_uvs, normals, rays, uv0, duv1, duv2, face_tex, colors, tex_flat,
           tex_size, face_sem, max_depth, rgb_out, depth_out, sem_out):  # pragma: no cover - compiled
    """Texture lookup, colour interpolation and headlight shading for every ray, in one pass."""
    n = t_hit.shape[0]
    for i in range(n):
        t = t_hit[i]
        if not np.isfinite(t):
            rgb_out[i, 0] = 0
            rgb_out[i, 1] = 0
            rgb_out[i, 2] = 0
            depth_out[i] = 0.0
            sem_out[i] = 0
            continue
        f = prim_ids[i]
        w1 = prim_uvs[i, 0]
        w2 = prim_uvs[i, 1]
        w0 = 1.0 - w1 - w2
        dx, dy, dz = rays[i, 3], rays[i, 4], rays[i, 5]
        cos = abs(normals[i, 0] * dx + normals[i, 1] * dy + normals[i, 2] * dz) / np.sqrt(dx * dx + dy * dy + dz * dz)
        shade = AMBIENT + (1.0 - AMBIENT) * cos
        tid = face_tex[f]
        k = -1
        s = shade
        if tid >= 0:
            u = uv0[f, 0] + w1 * duv1[f, 0] + w2 * duv2[f, 0]
            v = uv0[f, 1] + w1 * duv1[f, 1] + w2 * duv2[f, 1]
            u = u - np.floor(u)
            v = 1.0 - (v - np.floor(v))
            col = min(int(u * tex_size), tex_size - 1)
            row = min(int(v * tex_size), tex_size - 1)
            k = (tid * tex_size + row) * tex_size + col
            s = shade / 255.0
        for ch in range(3):
            a = w0 * colors[f, 0, ch] + w1 * colors[f, 1, ch] + w2 * colors[f, 2, ch]
            if k >= 0:
                a = a * tex_flat[k, ch]
            val = a * s * 255.0 + 0.5
            rgb_out[i, ch] = 255 if val >= 255.0 else (0 if val <= 0.0 else np.uint8(val))
        depth_out[i] = t if t < max_depth else max_depth
        sem_out[i] = face_sem[f]


@njit(cache=True, nogil=True)
def _make_rays(base, positions, yaws, rays):  # pragma: no cover - compiled
    """rays[b*n + j] = (origin_b, R_y(yaw_b) @ base_j): rotation about +Y, x' = c x + s z, z' = -s x + c z."""
    n = base.shape[0]
    for b in range(positions.shape[0]):
        c = np.cos(yaws[b])
        s = np.sin(yaws[b])
        for j in range(n):
            k = b * n + j
            rays[k, 0] = positions[b, 0]
            rays[k, 1] = positions[b, 1]
            rays[k, 2] = positions[b, 2]
            rays[k, 3] = c * base[j, 0] + s * base[j, 2]
            rays[k, 4] = base[j, 1]
            rays[k, 5] = -s * base[j, 0] + c * base[j, 2]
