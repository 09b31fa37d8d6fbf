"""Load any triangle-mesh scene (.glb/.gltf/.ply/.obj) into flat arrays the ray caster can shade.

Scenes are brought into Habitat's world frame (+Y up, -Z front) the way habitat-sim does it: a
`<stem>.stage_config.json` beside the file may declare `up` and `front`; without one a mesh is taken
as Z-up with +Y front (Gibson / Matterport convention), so positions in public episode files line up.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SUPPORTED_SUFFIXES = (".glb", ".gltf", ".ply", ".obj")
DEFAULT_UP = (0.0, 0.0, 1.0)
DEFAULT_FRONT = (0.0, 1.0, 0.0)
MAX_TEXTURE_PX = 1024  # textures are resampled to one square size (the largest, capped) to stack in one array
_SEMANTIC_NAME = re.compile(r"obj_(\d+)")


class SceneLoadError(RuntimeError):
    """A scene file is missing, unreadable or holds no triangles."""


@dataclass
class SceneMesh:
    """A scene flattened for ray casting, in Habitat world coordinates.

    Attributes:
        vertices: (V, 3) float32 positions, meters.
        faces: (F, 3) int32 vertex indices.
        face_uv: (F, 3, 2) float32 texture coordinates per face corner (OpenGL convention, v up).
        face_texture: (F,) int32 index into `textures`, -1 for untextured faces.
        face_colors: (F, 3, 3) float32 per-corner albedo in [0, 1] used where face_texture is -1
            (and multiplied with the texture where there is one).
        textures: (T, S, S, 3) uint8 stack of textures (T may be 0).
        face_semantic: (F,) int32 semantic object id per face, 0 for none.
        source: the file it was loaded from.
    """

    vertices: np.ndarray
    faces: np.ndarray
    face_uv: np.ndarray
    face_texture: np.ndarray
    face_colors: np.ndarray
    textures: np.ndarray
    face_semantic: np.ndarray
    source: Path

    @property
    def num_triangles(self) -> int:
        return int(self.faces.shape[0])

    @property
    def has_semantics(self) -> bool:
        return bool(np.any(self.face_semantic > 0))

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return self.vertices.min(axis=0), self.vertices.max(axis=0)


def frame_rotation(up: np.ndarray, front: np.ndarray) -> np.ndarray:
    """Rotation taking a file's (up, front) axes to Habitat's (+Y, -Z)."""
    up = np.asarray(up, dtype=np.float64)
    front = np.asarray(front, dtype=np.float64)
    up /= np.linalg.norm(up)
    front /= np.linalg.norm(front)
    if abs(float(up @ front)) > 1e-6:
        raise ValueError(f"stage config up {up.tolist()} and front {front.tolist()} are not orthogonal")
    src = np.stack([np.cross(front, up), up, front], axis=1)
    dst = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]]).T
    return dst @ src.T


def read_stage_frame(scene_path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """(up, front, config) from `<stem>.stage_config.json` beside the scene, or the Z-up default."""
    candidates = [scene_path.with_name(scene_path.stem + ".stage_config.json"),
                  scene_path.with_name(scene_path.name + ".stage_config.json")]
    for cfg_path in candidates:
        if cfg_path.is_file():
            try:
                cfg = json.loads(cfg_path.read_text())
            except (OSError, json.JSONDecodeError) as err:
                raise SceneLoadError(f"{cfg_path}: unreadable stage config: {err}") from err
            up = np.asarray(cfg.get("up", DEFAULT_UP), dtype=np.float64)
            front = np.asarray(cfg.get("front", DEFAULT_FRONT), dtype=np.float64)
            if up.shape != (3,) or front.shape != (3,) or not np.all(np.isfinite(np.r_[up, front])):
                raise SceneLoadError(f"{cfg_path}: fields 'up' and 'front' must be 3-vectors")
            return up, front, cfg
    return np.asarray(DEFAULT_UP), np.asarray(DEFAULT_FRONT), {}


def _image_rgb(image: object) -> np.ndarray:
    arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    return np.ascontiguousarray(arr[..., :3].astype(np.uint8))


def _stack_textures(images: list[np.ndarray]) -> np.ndarray:
    """Resample textures to one square size (the largest side, capped) and stack them."""
    import cv2

    if not images:
        return np.zeros((0, 1, 1, 3), dtype=np.uint8)
    size = min(MAX_TEXTURE_PX, max(max(img.shape[:2]) for img in images))
    out = np.empty((len(images), size, size, 3), dtype=np.uint8)
    for i, img in enumerate(images):
        if img.shape[:2] == (size, size):
            out[i] = img
        else:
            interp = cv2.INTER_AREA if max(img.shape[:2]) > size else cv2.INTER_LINEAR
            out[i] = cv2.resize(img, (size, size), interpolation=interp)
    return out


def _material_parts(material: object) -> tuple[object | None, np.ndarray]:
    """(texture image or None, base colour RGB in [0,1]) of a trimesh material."""
    image = getattr(material, "baseColorTexture", None)
    if image is None:
        image = getattr(material, "image", None)
    factor = getattr(material, "baseColorFactor", None)
    if factor is None:
        factor = getattr(material, "diffuse", None)
    color = np.ones(3) if factor is None else np.asarray(factor, dtype=np.float64)[:3]
    if color.max() > 1.0:
        color = color / 255.0
    return image, color


def load_scene_mesh(path: Path | str) -> SceneMesh:
    """Load a scene file into a SceneMesh in Habitat world coordinates.

    Raises:
        SceneLoadError: naming the file when it is missing, of an unknown type, corrupt or empty.
    """
    import trimesh

    path = Path(path)
    if path.is_dir():
        raise SceneLoadError(f"{path}: is a directory, not a scene file ({', '.join(SUPPORTED_SUFFIXES)})")
    if not path.is_file():
        raise SceneLoadError(f"scene file not found: {path}")
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        raise SceneLoadError(f"{path}: unsupported scene type {path.suffix!r}; expected one of {SUPPORTED_SUFFIXES}")
    up, front, _ = read_stage_frame(path)
    rot = frame_rotation(up, front)
    try:
        scene = trimesh.load(str(path), force="scene", process=False)
    except Exception as err:  # trimesh raises many types for corrupt files
        raise SceneLoadError(f"{path}: cannot read mesh: {type(err).__name__}: {err}") from err

    verts, faces, uvs, tex_ids, colors, sems = [], [], [], [], [], []
    textures: list[np.ndarray] = []
    texture_keys: dict[int, int] = {}
    offset = 0
    for node in scene.graph.nodes_geometry:
        transform, geom_name = scene.graph[node]
        geom = scene.geometry[geom_name]
        if not isinstance(geom, trimesh.Trimesh) or len(geom.faces) == 0:
            continue
        v = np.asarray(geom.vertices, dtype=np.float64)
        v = v @ transform[:3, :3].T + transform[:3, 3]
        f = np.asarray(geom.faces, dtype=np.int64)
        n_f = len(f)
        visual = geom.visual
        face_uv = np.zeros((n_f, 3, 2), dtype=np.float32)
        tex_index = -1
        corner_colors = np.ones((n_f, 3, 3), dtype=np.float32)
        if getattr(visual, "kind", None) == "texture" and getattr(visual, "material", None) is not None:
            image, base = _material_parts(visual.material)
            corner_colors *= base.astype(np.float32)
            uv = getattr(visual, "uv", None)
            if image is not None and uv is not None and len(uv) == len(v):
                key = id(image)
                if key not in texture_keys:
                    texture_keys[key] = len(textures)
                    textures.append(_image_rgb(image))
                tex_index = texture_keys[key]
                face_uv = np.asarray(uv, dtype=np.float32)[f]
        elif getattr(visual, "kind", None) in ("vertex", "face"):
            vc = np.asarray(visual.vertex_colors, dtype=np.float32)[:, :3] / 255.0
            corner_colors = vc[f]
        for name in (str(node), str(geom_name)):
            match = _SEMANTIC_NAME.match(name)
            if match:
                sem = int(match.group(1))
                break
        else:
            sem = 0
        verts.append(v)
        faces.append(f + offset)
        uvs.append(face_uv)
        tex_ids.append(np.full(n_f, tex_index, dtype=np.int32))
        colors.append(corner_colors)
        sems.append(np.full(n_f, sem, dtype=np.int32))
        offset += len(v)
    if not faces:
        raise SceneLoadError(f"{path}: the file holds no triangles")
    vertices = (np.concatenate(verts) @ rot.T).astype(np.float32)
    if not np.all(np.isfinite(vertices)):
        raise SceneLoadError(f"{path}: vertices contain NaN or inf")
    tex_stack = _stack_textures(textures)
    return SceneMesh(
        vertices=vertices,
        faces=np.concatenate(faces).astype(np.int32),
        face_uv=np.concatenate(uvs),
        face_texture=np.concatenate(tex_ids),
        face_colors=np.concatenate(colors),
        textures=tex_stack,
        face_semantic=np.concatenate(sems),
        source=path,
    )
