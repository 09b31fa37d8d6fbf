"""Load any triangle-mesh scene (.glb/.gltf/.ply/.obj) into flat arrays the ray caster can shade.

Scenes are brought into Habitat's world frame (+Y up, -Z front) the way habitat-sim does it: a
`<stem>.stage_config.json` beside the file, or one of the nearest `*.scene_dataset_config.json`'s stage configs
whose `render_asset` is the file (ReplicaCAD keeps them in configs/stages/), may declare `up` and `front`; fields
it lacks come from that dataset config's `stages.default_attributes`; without either a mesh is taken as Z-up with
+Y front (Gibson / Matterport convention), so positions in public episode files line up.

glTF files that need what trimesh cannot decode (Draco without DracoPy, meshopt compression, triangle fans,
KTX2 / Basis textures, missing texture files), and .obj files whose material library or texture is missing, are
refused naming the file and the feature, instead of loading as placeholder
zeros or untextured white.
"""
from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
import struct
import urllib.parse
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


def _read_config(path: Path, what: str) -> dict:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SceneLoadError(f"{path}: unreadable {what}: {err}") from err
    if not isinstance(cfg, dict):
        raise SceneLoadError(f"{path}: unreadable {what}: expected a JSON object")
    return cfg


def _dataset_stage_config(scene_path: Path, dataset_cfg: Path, stages: dict) -> Path | None:
    """The stage config listed by a scene dataset config (`stages.paths[".json"]`: folders, files or globs, relative
    to the dataset config) whose `render_asset` is `scene_path` (or, lacking one, whose name is the scene's)."""
    paths = stages.get("paths")
    entries = paths.get(".json") if isinstance(paths, dict) else None
    if not isinstance(entries, list):
        return None
    scene = scene_path.resolve()
    base = dataset_cfg.parent
    for entry in entries:
        if not isinstance(entry, str):
            continue
        found = sorted(base.glob(entry)) if any(c in entry for c in "*?[") else [base / entry]
        candidates: list[Path] = []
        for item in found:
            if item.is_dir():
                candidates += sorted(item.glob("*.stage_config.json"))
            elif item.name.endswith(".stage_config.json") and item.is_file():
                candidates.append(item)
        for cand in candidates:
            asset = _read_config(cand, "stage config").get("render_asset")
            if isinstance(asset, str) and asset:
                if (cand.parent / asset).resolve() == scene:
                    return cand
            elif cand.name[: -len(".stage_config.json")] in (scene.stem, scene.name):
                return cand
    return None


def read_stage_frame(scene_path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """(up, front, stage config) of a scene, looked up as habitat-sim does.

    The stage config is `<stem>.stage_config.json` beside the scene, else a stage config of the nearest
    `*.scene_dataset_config.json` (the scene's folder or up to 4 above) whose `render_asset` is the scene; `up` and
    `front` it lacks come from that dataset config's `stages.default_attributes`, then the Z-up default.
    """
    from memnav.sim.habitat import find_scene_dataset_config

    dataset_cfg = find_scene_dataset_config(scene_path)
    stages = _read_config(dataset_cfg, "scene dataset config").get("stages") if dataset_cfg else None
    stages = stages if isinstance(stages, dict) else {}
    defaults = stages.get("default_attributes")
    defaults = defaults if isinstance(defaults, dict) else {}
    beside = [scene_path.with_name(scene_path.stem + ".stage_config.json"),
              scene_path.with_name(scene_path.name + ".stage_config.json")]
    cfg_path = next((c for c in beside if c.is_file()), None)
    if cfg_path is None and dataset_cfg is not None:
        cfg_path = _dataset_stage_config(scene_path, dataset_cfg, stages)
    cfg = _read_config(cfg_path, "stage config") if cfg_path is not None else {}
    frame = []
    for key, default in (("up", DEFAULT_UP), ("front", DEFAULT_FRONT)):
        source = cfg_path if key in cfg else dataset_cfg if key in defaults else None
        value = cfg.get(key, defaults.get(key, default))
        try:
            vec = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            vec = np.full(1, np.nan)
        if vec.shape != (3,) or not np.all(np.isfinite(vec)):
            raise SceneLoadError(f"{source}: field '{key}' must be a 3-vector, got {value!r}")
        frame.append(vec)
    return frame[0], frame[1], cfg


# extensions trimesh cannot decode: it loads their primitives as placeholder zeros
_UNDECODABLE_EXTENSIONS = {
    "EXT_meshopt_compression": "meshopt-compressed geometry",
    "KHR_meshopt_compression": "meshopt-compressed geometry",
    "KHR_draco_mesh_compression": "Draco-compressed geometry",
}
_TRIANGLE_FAN = 6   # glTF primitive mode; trimesh reads triangle lists and strips only
_UNDECODABLE_IMAGES = (".ktx2", ".ktx", ".basis", ".dds")


def _gltf_document(path: Path) -> tuple[dict, bytes]:
    """The JSON document of a .gltf / .glb file and its binary chunk (empty for .gltf)."""
    raw = path.read_bytes()
    if raw[:4] == b"glTF":
        if len(raw) < 20:
            raise SceneLoadError(f"{path}: truncated glTF binary (a .glb needs a 12-byte header and a JSON chunk)")
        json_len, kind = struct.unpack_from("<I4s", raw, 12)
        if kind != b"JSON" or 20 + json_len > len(raw):
            raise SceneLoadError(f"{path}: corrupt glTF binary: its first chunk is not a complete JSON chunk")
        text, binary = raw[20:20 + json_len], b""
        rest = 20 + json_len
        if rest + 8 <= len(raw):
            bin_len, bin_kind = struct.unpack_from("<I4s", raw, rest)
            if bin_kind == b"BIN\x00":
                binary = raw[rest + 8:rest + 8 + bin_len]
    else:
        text, binary = raw, b""
    try:
        doc = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SceneLoadError(f"{path}: cannot read mesh: the glTF JSON is invalid: {err}") from err
    if not isinstance(doc, dict):
        raise SceneLoadError(f"{path}: cannot read mesh: the glTF JSON is not an object")
    return doc, binary


def _gltf_image_problem(path: Path, doc: dict, binary: bytes, index: int) -> str | None:
    """Why image `index` of a glTF document cannot be decoded, or None when it can."""
    import PIL.Image

    images = doc.get("images") or []
    if not isinstance(index, int) or not 0 <= index < len(images) or not isinstance(images[index], dict):
        return "it names no image of the file"
    img = images[index]
    uri, mime = img.get("uri"), str(img.get("mimeType", ""))
    where = f"image {index}" + (f" ({uri[:60]})" if isinstance(uri, str) and not uri.startswith("data:") else "")
    if mime in ("image/ktx2", "image/x-basis", "image/vnd-ms.dds") or (
            isinstance(uri, str) and uri.lower().endswith(_UNDECODABLE_IMAGES)):
        return (f"{where} is compressed for the GPU ({mime or Path(uri).suffix}: KTX2 / Basis Universal / DDS), "
                "which the embedded simulator cannot decode; use the scene's uncompressed variant (HM3D ships "
                "X.glb beside X.basis.glb) or convert the textures to PNG / JPEG")
    try:
        if isinstance(uri, str) and uri.startswith("data:"):
            blob = base64.b64decode(uri.split(",", 1)[1])
        elif isinstance(uri, str):
            file = path.parent / urllib.parse.unquote(uri)
            if not file.is_file():
                return f"{where}: texture file {file} not found"
            blob = file.read_bytes()   # read here: PIL.Image.open keeps a file it is given open
        elif "bufferView" in img:
            view = doc["bufferViews"][img["bufferView"]]
            start = int(view.get("byteOffset", 0))
            blob = binary[start:start + int(view["byteLength"])]
        else:
            return f"{where} has neither a uri nor a bufferView"
        PIL.Image.open(io.BytesIO(blob))
    except Exception as err:  # PIL raises many types for undecodable bytes
        return f"{where} cannot be decoded: {type(err).__name__}: {err}"
    return None


def check_gltf_supported(path: Path) -> None:
    """Refuse a .gltf / .glb that would load wrong: geometry compressed with an extension trimesh cannot decode,
    triangle fans (which it drops), or a base colour texture that cannot be read (the scene would render white where
    it is meant to be textured).

    Raises:
        SceneLoadError: naming the file, the extension or the image, and what to do.
    """
    doc, binary = _gltf_document(path)
    required = doc.get("extensionsRequired") or []
    for ext in required if isinstance(required, list) else []:
        if ext == "KHR_draco_mesh_compression" and importlib.util.find_spec("DracoPy") is not None:
            continue
        if ext in _UNDECODABLE_EXTENSIONS:
            hint = "`pip install DracoPy` (trimesh decodes Draco with it) or " if "draco" in ext.lower() else ""
            raise SceneLoadError(f"{path}: holds {_UNDECODABLE_EXTENSIONS[ext]} ({ext}), which the embedded "
                                 f"simulator cannot decode: {hint}export the scene again without compression")
    for i, mesh in enumerate(doc.get("meshes") or []):
        for j, prim in enumerate(mesh.get("primitives") or [] if isinstance(mesh, dict) else []):
            if isinstance(prim, dict) and prim.get("mode") == _TRIANGLE_FAN:
                raise SceneLoadError(f"{path}: mesh {i} primitive {j} is a triangle fan (mode 6), which trimesh "
                                     "drops without a word; export the scene again with triangle lists")
    textures = doc.get("textures") or []
    for m_index, material in enumerate(doc.get("materials") or []):
        pbr = material.get("pbrMetallicRoughness") if isinstance(material, dict) else None
        ref = pbr.get("baseColorTexture") if isinstance(pbr, dict) else None
        if not isinstance(ref, dict) or "index" not in ref:
            continue
        name = f"material {m_index}" + (f" ({material['name']!r})" if material.get("name") else "")
        t_index = ref["index"]
        texture = textures[t_index] if isinstance(t_index, int) and 0 <= t_index < len(textures) else None
        if not isinstance(texture, dict):
            raise SceneLoadError(f"{path}: {name}'s base colour texture {t_index!r} is not a texture of the file")
        source = texture.get("source")
        if source is None:   # only in an extension (KHR_texture_basisu, EXT_texture_webp, MSFT_texture_dds)
            exts = texture.get("extensions") or {}
            source = next((e.get("source") for e in exts.values() if isinstance(e, dict) and "source" in e), None)
        problem = _gltf_image_problem(path, doc, binary, source)
        if problem:
            raise SceneLoadError(f"{path}: {name}'s base colour texture: {problem}")


def check_obj_textures(path: Path) -> None:
    """Refuse an .obj whose material library or diffuse texture (`map_Kd`) is missing: trimesh loads it plain white.

    Raises:
        SceneLoadError: naming the .obj, the material file and the missing file.
    """
    try:
        with path.open(errors="replace") as f:   # streamed: a scanned .obj can hold hundreds of MB
            libraries = [line[len("mtllib"):].strip() for line in f if line.startswith("mtllib")]
    except OSError as err:
        raise SceneLoadError(f"{path}: cannot read mesh: {err}") from err
    for library in libraries:
        mtl = path.parent / library
        if not mtl.is_file():
            raise SceneLoadError(f"{path}: material library {mtl} not found (the scene would render white)")
        for entry in mtl.read_text(errors="replace").splitlines():
            words = entry.split()
            if len(words) > 1 and words[0].lower() == "map_kd":
                name = entry.strip()[len("map_kd"):].strip()   # all of it, as trimesh reads it (names with spaces)
                if not (mtl.parent / name).is_file():
                    options = (": trimesh takes the whole rest of the line as the file name, so map_Kd options "
                               "(-s, -o, ...) must go" if name.startswith("-") else "")
                    raise SceneLoadError(f"{path}: texture {mtl.parent / name} named by {mtl.name} (map_Kd) not "
                                         f"found{options} (the scene would render white)")


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
    try:
        rot = frame_rotation(up, front)
    except ValueError as err:
        raise SceneLoadError(f"{path}: {err}") from err
    if path.suffix.lower() in (".glb", ".gltf"):
        check_gltf_supported(path)
    elif path.suffix.lower() == ".obj":
        check_obj_textures(path)
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
