"""A minimal, byte-deterministic binary glTF 2.0 (.glb) writer: one node + mesh per part, one textured material."""
from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

_FLOAT, _UINT32 = 5126, 5125
_ARRAY_BUFFER, _ELEMENT_ARRAY_BUFFER = 34962, 34963
_LINEAR, _LINEAR_MIPMAP_LINEAR, _CLAMP = 9729, 9987, 33071


class MeshPartLike(Protocol):
    name: str
    vertices: np.ndarray
    normals: np.ndarray
    uvs: np.ndarray
    faces: np.ndarray
    semantic_id: int


def _check(part: MeshPartLike) -> None:
    n = len(part.vertices)
    for field, arr, width in (("vertices", part.vertices, 3), ("normals", part.normals, 3), ("uvs", part.uvs, 2)):
        arr = np.asarray(arr)
        if arr.ndim != 2 or arr.shape != (n, width):
            raise ValueError(f"part {part.name!r}: field {field} must have shape ({n}, {width}), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"part {part.name!r}: field {field} holds NaN or inf")
    faces = np.asarray(part.faces)
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0:
        raise ValueError(f"part {part.name!r}: field faces must have shape (M, 3) with M > 0, got {faces.shape}")
    if faces.min() < 0 or faces.max() >= n:
        raise ValueError(f"part {part.name!r}: field faces indexes vertices outside [0, {n})")


def write_glb(path: Path, parts: Sequence[MeshPartLike], atlas: np.ndarray, *, generator: str = "memnav") -> None:
    """Write `parts` sharing one baseColor texture (`atlas`, uint8 HxWx3) to a .glb file.

    UVs are in glTF's convention (origin at the image's top-left corner).
    """
    import cv2

    if not parts:
        raise ValueError("write_glb: no parts to write")
    atlas = np.asarray(atlas)
    if atlas.dtype != np.uint8 or atlas.ndim != 3 or atlas.shape[2] != 3:
        raise ValueError(f"write_glb: atlas must be uint8 (H, W, 3), got {atlas.dtype} {atlas.shape}")
    blob = bytearray()
    views: list[dict] = []
    accessors: list[dict] = []

    def add_view(data: bytes, target: int | None) -> int:
        while len(blob) % 4:
            blob.append(0)
        view = {"buffer": 0, "byteOffset": len(blob), "byteLength": len(data)}
        if target is not None:
            view["target"] = target
        blob.extend(data)
        views.append(view)
        return len(views) - 1

    def add_accessor(arr: np.ndarray, kind: str, component: int, target: int, minmax: bool = False) -> int:
        view = add_view(arr.tobytes(), target)
        acc = {"bufferView": view, "componentType": component, "count": int(arr.shape[0]), "type": kind}
        if minmax:
            acc["min"] = [float(v) for v in arr.min(axis=0)]
            acc["max"] = [float(v) for v in arr.max(axis=0)]
        accessors.append(acc)
        return len(accessors) - 1

    nodes, meshes = [], []
    for i, part in enumerate(parts):
        _check(part)
        pos = add_accessor(np.ascontiguousarray(part.vertices, dtype=np.float32), "VEC3", _FLOAT, _ARRAY_BUFFER, True)
        nrm = add_accessor(np.ascontiguousarray(part.normals, dtype=np.float32), "VEC3", _FLOAT, _ARRAY_BUFFER)
        uv = add_accessor(np.ascontiguousarray(part.uvs, dtype=np.float32), "VEC2", _FLOAT, _ARRAY_BUFFER)
        idx_arr = np.ascontiguousarray(np.asarray(part.faces, dtype=np.uint32).reshape(-1))
        view = add_view(idx_arr.tobytes(), _ELEMENT_ARRAY_BUFFER)
        accessors.append({"bufferView": view, "componentType": _UINT32, "count": int(idx_arr.size), "type": "SCALAR"})
        meshes.append({"name": part.name, "primitives": [{
            "attributes": {"POSITION": pos, "NORMAL": nrm, "TEXCOORD_0": uv},
            "indices": len(accessors) - 1, "material": 0}]})
        nodes.append({"name": part.name, "mesh": i, "extras": {"semantic_id": int(part.semantic_id)}})

    ok, png = cv2.imencode(".png", np.ascontiguousarray(atlas[..., ::-1]))
    if not ok:
        raise ValueError("write_glb: PNG encoding of the atlas failed")
    image_view = add_view(png.tobytes(), None)
    while len(blob) % 4:
        blob.append(0)
    doc = {
        "asset": {"version": "2.0", "generator": generator},
        "scene": 0,
        "scenes": [{"nodes": list(range(len(nodes)))}],
        "nodes": nodes,
        "meshes": meshes,
        "materials": [{"name": "atlas", "pbrMetallicRoughness": {
            "baseColorTexture": {"index": 0}, "metallicFactor": 0.0, "roughnessFactor": 1.0}}],
        "textures": [{"source": 0, "sampler": 0}],
        "images": [{"bufferView": image_view, "mimeType": "image/png"}],
        "samplers": [{"magFilter": _LINEAR, "minFilter": _LINEAR_MIPMAP_LINEAR, "wrapS": _CLAMP, "wrapT": _CLAMP}],
        "buffers": [{"byteLength": len(blob)}],
        "bufferViews": views,
        "accessors": accessors,
    }
    js = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    js += b" " * ((4 - len(js) % 4) % 4)
    total = 12 + 8 + len(js) + 8 + len(blob)
    out = bytearray()
    out += struct.pack("<4sII", b"glTF", 2, total)
    out += struct.pack("<I4s", len(js), b"JSON") + js
    out += struct.pack("<I4s", len(blob), b"BIN\x00") + bytes(blob)
    Path(path).write_bytes(bytes(out))
