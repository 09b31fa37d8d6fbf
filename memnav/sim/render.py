"""Pinhole RGB-D(-semantic) rendering of a SceneMesh by ray casting on the CPU.

Two ways to find each pixel ray's nearest hit, with the same results up to float rounding (they differ only
where a ray meets two triangles at the same distance, on shared edges or coplanar overlaps, and each breaks
the tie its own way):
- "bvh": open3d's RaycastingScene (Embree), one ray at a time through a bounding-volume hierarchy;
- "object": object-order ray casting for level cameras (memnav's own numba kernel): each triangle, brought
  into the camera frame, tests only the pixel rays inside its projected bounds (per image row, the span
  where its three edge inequalities can hold) and keeps the nearest positive hit per ray. Its cost grows
  with the triangle count, so it is the faster one for small scenes (the generated houses) only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import numba
import numpy as np
from numba import njit, prange

from memnav.sim.base import OBJECT_ORDER_MAX_TRIANGLES, RENDERERS
from memnav.sim.mesh import SceneMesh

AMBIENT = 0.35  # share of light that reaches surfaces at grazing angles (keeps walls readable)
NEAR_M = 1e-4  # object-order casting ignores hits closer than this (the BVH reports them)
RECORD_FLOATS = 16  # float32 columns of a face's shading record (face_records): 64 bytes, one cache line
SHADE_CHUNK = 2048  # rays per shading chunk (one parallel task; its hit faces' records fit in L2)
GATHER_MIN_FACES = 65_536  # shading gathers face records in a pass of their own above this (> 4 MB of records)
BANDS = 8      # object-order casting splits the image into this many row bands, spread over the threads

if "NUMBA_THREADING_LAYER" not in os.environ and "NUMBA_THREADING_LAYER_PRIORITY" not in os.environ:
    # OpenMP, else numba's own work queue; numba would try TBB first, and the TBB in this environment is too
    # old for it, which costs a warning on every run
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]


@dataclass(frozen=True)
class Camera:
    """Pinhole camera: square pixels, optical axis along the agent heading, -Z forward (Habitat), pitched
    `pitch_deg` down from level (negative: up)."""

    width_px: int
    height_px: int
    hfov_deg: float
    pitch_deg: float = 0.0

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
    if camera.pitch_deg:   # turned down about the camera's x axis: still unit along the (pitched) optical axis
        c, s = np.cos(np.deg2rad(camera.pitch_deg)), np.sin(np.deg2rad(camera.pitch_deg))
        y, z = dirs[:, 1].copy(), dirs[:, 2].copy()
        dirs[:, 1], dirs[:, 2] = c * y + s * z, -s * y + c * z
    dirs.setflags(write=False)
    return dirs.astype(np.float32)


@dataclass
class Frame:
    """One rendered view: rgb (H, W, 3) uint8, depth (H, W) float32 meters, semantic (H, W) int32."""

    rgb: np.ndarray
    depth: np.ndarray
    semantic: np.ndarray | None


def face_records(mesh: SceneMesh) -> np.ndarray:
    """Everything shading reads of a face, packed in one 64-byte-aligned float32 row of RECORD_FLOATS.

    Columns: uv0 (2), uv1 - uv0 (2), uv2 - uv0 (2), corner albedo (3 corners x RGB), texture index (-1 for
    none). One record is one cache line, so one load in shading's gather pass (_shade_chunk) brings all of a
    face's data into cache. Costs 64 bytes per face (about 110 MB for the 1.74M-face bench mesh).
    """
    n = int(mesh.faces.shape[0])
    flat = np.empty(n * RECORD_FLOATS + RECORD_FLOATS, dtype=np.float32)
    skip = (-flat.ctypes.data % 64) // flat.itemsize
    rec = flat[skip:skip + n * RECORD_FLOATS].reshape(n, RECORD_FLOATS)
    fuv = mesh.face_uv.astype(np.float32)
    rec[:, 0:2] = fuv[:, 0]
    rec[:, 2:4] = fuv[:, 1] - fuv[:, 0]
    rec[:, 4:6] = fuv[:, 2] - fuv[:, 0]
    rec[:, 6:15] = np.asarray(mesh.face_colors, dtype=np.float32).reshape(n, 9)
    rec[:, 15] = mesh.face_texture
    return rec


class RayCaster:
    """Renders views of one scene; build once per scene (the BVH build is the costly part).

    `renderer` picks how `render` finds the hits (module docstring): "auto" (object-order up to
    OBJECT_ORDER_MAX_TRIANGLES triangles), "object" or "bvh". `threads` is the thread count of the object-order
    kernels, casting and shading (0 = numba's default, one per core). The BVH casts on open3d's own threads
    and shades on one. `cast` (arbitrary rays, used by the navigable grid) always goes through the BVH.
    """

    def __init__(self, mesh: SceneMesh, renderer: str = "auto", threads: int = 1) -> None:
        import open3d as o3d

        if renderer not in RENDERERS:
            raise ValueError(f"renderer must be one of {', '.join(RENDERERS)}; got {renderer!r}")
        if threads < 0:
            raise ValueError(f"threads must be >= 0 (0 = one per core), got {threads!r}")
        n_faces = int(mesh.faces.shape[0])
        self.renderer = ("object" if n_faces <= OBJECT_ORDER_MAX_TRIANGLES else "bvh") if renderer == "auto" \
            else renderer
        self.threads = min(threads, numba.config.NUMBA_NUM_THREADS) if threads else numba.config.NUMBA_NUM_THREADS

        self._o3d = o3d
        self.mesh = mesh
        self._scene = o3d.t.geometry.RaycastingScene()
        self._scene.add_triangles(o3d.core.Tensor(np.ascontiguousarray(mesh.vertices, dtype=np.float32)),
                                  o3d.core.Tensor(np.ascontiguousarray(mesh.faces, dtype=np.uint32)))
        self._face_records = face_records(mesh)
        tex = mesh.textures if mesh.textures.shape[0] else np.zeros((1, 1, 1, 3), np.uint8)
        self._tex_size = int(tex.shape[1])
        self._tex_flat = np.ascontiguousarray(tex.reshape(-1, 3))
        if self.renderer == "object":   # float64 geometry and unit face normals (the BVH path needs neither)
            self._verts64 = np.ascontiguousarray(mesh.vertices, dtype=np.float64)
            self._faces64 = np.ascontiguousarray(mesh.faces, dtype=np.int64)
            e1 = self._verts64[self._faces64[:, 1]] - self._verts64[self._faces64[:, 0]]
            e2 = self._verts64[self._faces64[:, 2]] - self._verts64[self._faces64[:, 0]]
            normals = np.cross(e1, e2)
            length = np.linalg.norm(normals, axis=1, keepdims=True)
            self._face_normals = (normals / np.where(length > 0, length, 1.0)).astype(np.float32)

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
        # the object-order caster draws level views only: a pitched camera goes through the BVH
        object_order = self.renderer == "object" and camera.pitch_deg == 0
        if object_order:
            hits = self._object_cast(positions, yaws, camera)
        else:
            out = self._scene.cast_rays(self._o3d.core.Tensor.from_numpy(rays))
            hits = {k: v.numpy() for k, v in out.items()}
        rgb = np.empty((b * n, 3), dtype=np.uint8)
        depth = np.empty(b * n, dtype=np.float32)
        sem = np.empty(b * n, dtype=np.int32)
        shade = _shade
        if self.threads > 1 and object_order:
            # Behind the BVH shading stays on one thread: numba's OpenMP workers spin for a while after a
            # parallel region and took the cores from Embree's threads in the next cast (on the bench's old
            # heavy mesh, 197-213 steps/s with 2 shading threads, 280-392 with one).
            numba.set_num_threads(self.threads)   # numba's thread count is process-wide: set it for each call
            shade = _shade_parallel
        shade(hits["t_hit"], hits["primitive_ids"], hits["primitive_uvs"], hits["primitive_normals"],
              object_order, rays, self._face_records, self._tex_flat, self._tex_size,
              self.mesh.face_semantic, semantic, np.float32(max_depth_m), rgb, depth, sem)
        h, w = camera.height_px, camera.width_px
        rgb = rgb.reshape(b, h, w, 3)
        depth = depth.reshape(b, h, w)
        sem = sem.reshape(b, h, w) if semantic else None
        return [Frame(rgb[i], depth[i], sem[i] if sem is not None else None) for i in range(b)]

    def _object_cast(self, positions: np.ndarray, yaws: np.ndarray, camera: Camera) -> dict[str, np.ndarray]:
        """Object-order hits of B level views, in cast_rays' layout (t_hit inf on a miss)."""
        w, h, n = camera.width_px, camera.height_px, camera.width_px * camera.height_px
        b = positions.shape[0]
        t_hit = np.empty(b * n, dtype=np.float32)
        ids = np.zeros(b * n, dtype=np.int64)
        uvs = np.zeros((b * n, 2), dtype=np.float32)
        n_faces = self._faces64.shape[0]
        coef = np.empty((n_faces, 10))
        box = np.empty((n_faces, 4), dtype=np.int64)
        numba.set_num_threads(self.threads)
        for i in range(b):
            _triangle_setup(self._verts64, self._faces64, positions[i].astype(np.float64), float(np.cos(yaws[i])),
                            float(np.sin(yaws[i])), camera.focal_px, w, h, NEAR_M, coef, box)
            _object_sweep(coef, box, camera.focal_px, w, h, BANDS, t_hit, ids, uvs, i * n)
        # normals per face, not per ray: _shade looks them up by primitive id
        return {"t_hit": t_hit, "primitive_ids": ids, "primitive_uvs": uvs, "primitive_normals": self._face_normals}


# fastmath without nnan/ninf: misses are inf and must stay detectable
_SHADE_MATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(cache=True, nogil=True, fastmath=_SHADE_MATH, error_model="numpy")
def _shade(t_hit, prim_ids, prim_uvs, normals, normals_per_face, rays, rec, tex_flat, tex_size, face_sem,
           semantic, max_depth, rgb_out, depth_out, sem_out):  # pragma: no cover - compiled
    """Texture lookup, colour interpolation and headlight shading for every ray, in one pass.

    normals: (N, 3) per ray, or (F, 3) per face when normals_per_face; rec: face_records(mesh);
    sem_out is written only when `semantic`. One thread; _shade_parallel spreads the chunks over numba's."""
    n = t_hit.shape[0]
    for chunk in range((n + SHADE_CHUNK - 1) // SHADE_CHUNK):
        _shade_chunk(chunk * SHADE_CHUNK, min(n, (chunk + 1) * SHADE_CHUNK), t_hit, prim_ids, prim_uvs, normals,
                     normals_per_face, rays, rec, tex_flat, tex_size, face_sem, semantic, max_depth, rgb_out,
                     depth_out, sem_out)


@njit(cache=True, nogil=True, parallel=True, fastmath=_SHADE_MATH, error_model="numpy")
def _shade_parallel(t_hit, prim_ids, prim_uvs, normals, normals_per_face, rays, rec, tex_flat, tex_size, face_sem,
                    semantic, max_depth, rgb_out, depth_out, sem_out):  # pragma: no cover - compiled
    """_shade on numba's current thread count."""
    n = t_hit.shape[0]
    for chunk in prange((n + SHADE_CHUNK - 1) // SHADE_CHUNK):
        _shade_chunk(chunk * SHADE_CHUNK, min(n, (chunk + 1) * SHADE_CHUNK), t_hit, prim_ids, prim_uvs, normals,
                     normals_per_face, rays, rec, tex_flat, tex_size, face_sem, semantic, max_depth, rgb_out,
                     depth_out, sem_out)


@njit(cache=True, nogil=True, fastmath=_SHADE_MATH, error_model="numpy")
def _shade_chunk(start, stop, t_hit, prim_ids, prim_uvs, normals, normals_per_face, rays, rec, tex_flat, tex_size,
                 face_sem, semantic, max_depth, rgb_out, depth_out, sem_out):  # pragma: no cover - compiled
    """Shade rays start..stop-1 in two passes.

    On meshes of more than GATHER_MIN_FACES faces the first pass reads only each hit face's texture index.
    Those loads do not depend on each other, so the CPU keeps many cache misses in flight, and the second pass
    finds every face record in cache. On a mesh of a million faces, shading one ray at a time waited on one miss
    at a time, which was most of its cost. Smaller meshes' records stay in cache, and the extra pass would only
    cost time.
    """
    gather = rec.shape[0] > GATHER_MIN_FACES
    tids = np.empty(stop - start if gather else 0, dtype=np.int32)
    if gather:
        for i in range(start, stop):
            tids[i - start] = int(rec[prim_ids[i], 15]) if np.isfinite(t_hit[i]) else -1
    for i in range(start, stop):
        t = t_hit[i]
        if not np.isfinite(t):
            rgb_out[i, 0] = 0
            rgb_out[i, 1] = 0
            rgb_out[i, 2] = 0
            depth_out[i] = 0.0
            if semantic:
                sem_out[i] = 0
            continue
        f = prim_ids[i]
        tid = tids[i - start] if gather else int(rec[f, 15])
        w1 = prim_uvs[i, 0]
        w2 = prim_uvs[i, 1]
        w0 = 1.0 - w1 - w2
        dx, dy, dz = rays[i, 3], rays[i, 4], rays[i, 5]
        j = f if normals_per_face else i
        cos = abs(normals[j, 0] * dx + normals[j, 1] * dy + normals[j, 2] * dz) / np.sqrt(dx * dx + dy * dy + dz * dz)
        shade = AMBIENT + (1.0 - AMBIENT) * cos
        k = -1
        s = shade
        if tid >= 0:
            u = rec[f, 0] + w1 * rec[f, 2] + w2 * rec[f, 4]
            v = rec[f, 1] + w1 * rec[f, 3] + w2 * rec[f, 5]
            u = u - np.floor(u)
            v = 1.0 - (v - np.floor(v))
            col = min(int(u * tex_size), tex_size - 1)
            row = min(int(v * tex_size), tex_size - 1)
            k = (tid * tex_size + row) * tex_size + col
            s = shade / 255.0
        for ch in range(3):
            a = w0 * rec[f, 6 + ch] + w1 * rec[f, 9 + ch] + w2 * rec[f, 12 + ch]
            if k >= 0:
                a = a * tex_flat[k, ch]
            val = a * s * 255.0 + 0.5
            rgb_out[i, ch] = 255 if val >= 255.0 else (0 if val <= 0.0 else np.uint8(val))
        depth_out[i] = t if t < max_depth else max_depth
        if semantic:
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


@njit(cache=True, nogil=True)
def _triangle_setup(verts, faces, pos, c, s, f, w, h, near, coef, box):  # pragma: no cover - compiled
    """Object-order casting, per triangle of one view (camera at `pos`, heading cos c / sin s about +Y).

    With a pixel ray r = (u, v, -1) in the camera frame and the triangle's edges e1, e2 and offset
    o = -v0, the ray-triangle test reads det = r.(e2 x e1), U det = r.(e2 x o), V det = r.(o x e1),
    t det = e2.(o x e1): three functions affine in (u, v) and a constant. coef[k] holds their
    coefficients (the constant last); box[k] = (row0, row1, col0, col1) bounds the pixels the triangle
    can cover (its part at depth >= near, projected), empty (row0 > row1) when it is out of view.
    """
    cam = np.empty((3, 3))
    for k in range(faces.shape[0]):
        behind = 0
        for j in range(3):
            x = verts[faces[k, j], 0] - pos[0]
            z = verts[faces[k, j], 2] - pos[2]
            cam[j, 0] = c * x - s * z          # the inverse of render's rotation about +Y
            cam[j, 1] = verts[faces[k, j], 1] - pos[1]
            cam[j, 2] = s * x + c * z
            if -cam[j, 2] <= near:
                behind += 1
        box[k, 0], box[k, 1] = 1, 0
        if behind == 3:
            continue
        umin, umax, vmin, vmax = 1e30, -1e30, 1e30, -1e30
        for j in range(3):                     # the polygon clipped to depth >= near, projected
            da = -cam[j, 2]
            if da > near:
                umin, umax = min(umin, cam[j, 0] / da), max(umax, cam[j, 0] / da)
                vmin, vmax = min(vmin, cam[j, 1] / da), max(vmax, cam[j, 1] / da)
            jn = (j + 1) % 3
            db = -cam[jn, 2]
            if (da > near) != (db > near):
                a = (near - da) / (db - da)
                x = (cam[j, 0] + a * (cam[jn, 0] - cam[j, 0])) / near
                y = (cam[j, 1] + a * (cam[jn, 1] - cam[j, 1])) / near
                umin, umax, vmin, vmax = min(umin, x), max(umax, x), min(vmin, y), max(vmax, y)
        # pixel centre (row i, col j) is u = (j + 0.5 - w/2) / f, v = -(i + 0.5 - h/2) / f; clamp as floats
        # first (an out-of-range float converted to int is undefined)
        c0 = max(int(np.floor(min(max(umin * f + w / 2.0 - 0.5, -1.0), w + 1.0))), 0)
        c1 = min(int(np.ceil(min(max(umax * f + w / 2.0 - 0.5, -1.0), w + 1.0))), w - 1)
        r0 = max(int(np.floor(min(max(-vmax * f + h / 2.0 - 0.5, -1.0), h + 1.0))), 0)
        r1 = min(int(np.ceil(min(max(-vmin * f + h / 2.0 - 0.5, -1.0), h + 1.0))), h - 1)
        if c0 > c1:
            continue
        box[k, 0], box[k, 1], box[k, 2], box[k, 3] = r0, r1, c0, c1
        e1x, e1y, e1z = cam[1, 0] - cam[0, 0], cam[1, 1] - cam[0, 1], cam[1, 2] - cam[0, 2]
        e2x, e2y, e2z = cam[2, 0] - cam[0, 0], cam[2, 1] - cam[0, 1], cam[2, 2] - cam[0, 2]
        ox, oy, oz = -cam[0, 0], -cam[0, 1], -cam[0, 2]
        qx, qy, qz = oy * e1z - oz * e1y, oz * e1x - ox * e1z, ox * e1y - oy * e1x
        coef[k, 0] = e2y * e1z - e2z * e1y     # r.(n) = n_x u + n_y v - n_z
        coef[k, 1] = e2z * e1x - e2x * e1z
        coef[k, 2] = -(e2x * e1y - e2y * e1x)
        coef[k, 3] = e2y * oz - e2z * oy
        coef[k, 4] = e2z * ox - e2x * oz
        coef[k, 5] = -(e2x * oy - e2y * ox)
        coef[k, 6], coef[k, 7], coef[k, 8] = qx, qy, -qz
        coef[k, 9] = e2x * qx + e2y * qy + e2z * qz


@njit(cache=True, nogil=True, parallel=True)
def _object_sweep(coef, box, f, w, h, bands, t_out, id_out, uv_out, off):  # pragma: no cover - compiled
    """Nearest hit per pixel ray of one view into t_out/id_out/uv_out[off:off + h*w]; row bands in parallel."""
    band_h = (h + bands - 1) // bands
    for band in prange(bands):
        ra, rb = band * band_h, min(h - 1, band * band_h + band_h - 1)
        for i in range(off + ra * w, off + (rb + 1) * w):
            t_out[i] = np.inf
        for k in range(coef.shape[0]):
            r0, r1 = max(box[k, 0], ra), min(box[k, 1], rb)
            big_k = coef[k, 9]
            if r0 > r1 or big_k == 0.0:
                continue
            sg = 1.0 if big_k > 0.0 else -1.0   # a hit (t > 0) has det of the sign of t det
            c0, c1 = box[k, 2], box[k, 3]
            a0, a1, a2 = sg * coef[k, 0], sg * coef[k, 1], sg * coef[k, 2]
            b0, b1, b2 = sg * coef[k, 3], sg * coef[k, 4], sg * coef[k, 5]
            q0, q1, q2 = sg * coef[k, 6], sg * coef[k, 7], sg * coef[k, 8]
            sk = sg * big_k
            for r in range(r0, r1 + 1):
                v = -(r + 0.5 - h / 2.0) / f
                da, ua, va = a1 * v + a2, b1 * v + b2, q1 * v + q2
                # the span of u where U det >= 0, V det >= 0 and (1 - U - V) det >= 0 can all hold
                lo, hi = (c0 + 0.5 - w / 2.0) / f, (c1 + 0.5 - w / 2.0) / f
                for m in range(3):
                    if m == 0:
                        al, be = b0, ua
                    elif m == 1:
                        al, be = q0, va
                    else:
                        al, be = a0 - b0 - q0, da - ua - va
                    if al > 0.0:
                        lo = max(lo, -be / al)
                    elif al < 0.0:
                        hi = min(hi, -be / al)
                    elif be < 0.0:
                        hi = lo - 1.0
                if not hi >= lo:   # also NaN
                    continue
                # one pixel of margin each side: every pixel in the span still gets the exact test
                cl = max(int(np.floor(min(max(lo * f + w / 2.0 - 0.5, c0 - 1.0), c1 + 1.0))), c0)
                cr = min(int(np.ceil(min(max(hi * f + w / 2.0 - 0.5, c0 - 1.0), c1 + 1.0))), c1)
                for col in range(cl, cr + 1):
                    u = (col + 0.5 - w / 2.0) / f
                    det = a0 * u + da
                    un = b0 * u + ua
                    vn = q0 * u + va
                    if un < 0.0 or vn < 0.0 or un + vn > det or det <= 0.0:
                        continue
                    i = off + r * w + col
                    if sk >= t_out[i] * det:   # t = sk / det is not nearer than the nearest hit so far
                        continue
                    inv = 1.0 / det
                    t_out[i] = sk * inv
                    id_out[i] = k
                    uv_out[i, 0] = un * inv
                    uv_out[i, 1] = vn * inv
