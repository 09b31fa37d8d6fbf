"""Scene loading (`memnav.sim.mesh`): the frame habitat-sim would give a scene, and glTF files trimesh cannot decode."""
from __future__ import annotations

import base64
import importlib.util
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import write_two_room_scene

from memnav.sim.mesh import SceneLoadError, load_scene_mesh

_QUAD = np.array([[0, 0, 0], [1, 0, 0], [1, 0, 1], [0, 0, 1]], dtype=np.float32)
_QUAD_UV = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=np.float32)
_QUAD_FACES = np.array([0, 1, 2, 0, 2, 3], dtype=np.uint32)


def _quad_document(extra: dict | None = None, primitive: dict | None = None) -> tuple[dict, bytes]:
    """A glTF document of one textured 1 m quad (positions, uvs, indices in one buffer) and its buffer bytes."""
    blob = _QUAD.tobytes() + _QUAD_UV.tobytes() + _QUAD_FACES.tobytes()
    prim = {"attributes": {"POSITION": 0, "TEXCOORD_0": 1}, "indices": 2, **(primitive or {})}
    doc = {"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}], "nodes": [{"mesh": 0}],
           "meshes": [{"primitives": [prim]}],
           "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": 48},
                           {"buffer": 0, "byteOffset": 48, "byteLength": 32},
                           {"buffer": 0, "byteOffset": 80, "byteLength": 24}],
           "accessors": [{"bufferView": 0, "componentType": 5126, "count": 4, "type": "VEC3",
                          "min": [0, 0, 0], "max": [1, 0, 1]},
                         {"bufferView": 1, "componentType": 5126, "count": 4, "type": "VEC2"},
                         {"bufferView": 2, "componentType": 5125, "count": 6, "type": "SCALAR"}],
           **(extra or {})}
    return doc, blob


def _write_glb(path: Path, doc: dict, blob: bytes) -> Path:
    blob = blob + b"\0" * ((4 - len(blob) % 4) % 4)
    doc = dict(doc, buffers=[{"byteLength": len(blob)}])
    js = json.dumps(doc).encode()
    js += b" " * ((4 - len(js) % 4) % 4)
    out = struct.pack("<4sII", b"glTF", 2, 12 + 8 + len(js) + 8 + len(blob))
    out += struct.pack("<I4s", len(js), b"JSON") + js + struct.pack("<I4s", len(blob), b"BIN\0") + blob
    path.write_bytes(out)
    return path


def _write_textured_gltf(folder: Path, name: str, image: dict) -> Path:
    """A .gltf quad (buffer embedded as a data: URI) whose material's base colour texture is `image`."""
    doc, blob = _quad_document({
        "materials": [{"name": "floor", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}}],
        "textures": [{"source": 0}], "images": [image]}, {"material": 0})
    doc["buffers"] = [{"byteLength": len(blob),
                       "uri": "data:application/octet-stream;base64," + base64.b64encode(blob).decode()}]
    path = folder / f"{name}.gltf"
    path.write_text(json.dumps(doc))
    return path


def test_a_stage_config_listed_by_the_scene_dataset_config_sets_the_frame(tmp_path):
    """ReplicaCAD keeps its Y-up stage configs in configs/stages/, pointing at ../../stages/X.glb: the embedded
    simulator looked only beside the mesh, took the scene as Z-up and laid it on its side (the 2.5 m walls along
    -Z, the 4 m wide rooms 4 m tall), while habitat-sim, given the dataset config, stands it upright."""
    glb = write_two_room_scene(tmp_path / "stages", "apt", with_stage_config=False)   # a Y-up file
    (tmp_path / "configs" / "stages").mkdir(parents=True)
    (tmp_path / "configs" / "stages" / "apt.stage_config.json").write_text(json.dumps(
        {"render_asset": "../../stages/apt.glb", "up": [0, 1, 0], "front": [0, 0, -1]}))
    (tmp_path / "rcad.scene_dataset_config.json").write_text(json.dumps(
        {"stages": {"paths": {".json": ["configs/stages"]}}}))
    lo, hi = load_scene_mesh(glb).bounds
    np.testing.assert_allclose([lo[1], hi[1]], [-0.1, 2.6], atol=1e-5)   # floor underside to ceiling top
    np.testing.assert_allclose([lo[2], hi[2]], [-0.1, 4.1], atol=1e-5)


def test_the_dataset_configs_default_stage_attributes_set_the_frame(tmp_path):
    """`stages.default_attributes` of a scene dataset config applies to every stage of the dataset (habitat-sim);
    without one (and without a stage config) a scene stays Z-up, as habitat-sim takes a bare .glb."""
    glb = write_two_room_scene(tmp_path / "data" / "scenes", "apt", with_stage_config=False)
    np.testing.assert_allclose(load_scene_mesh(glb).bounds[1][1], 4.1, atol=1e-5)   # Z-up default: on its side
    (tmp_path / "data" / "mine.scene_dataset_config.json").write_text(json.dumps(
        {"stages": {"default_attributes": {"up": [0, 1, 0], "front": [0, 0, -1]}}}))
    np.testing.assert_allclose(load_scene_mesh(glb).bounds[1][1], 2.6, atol=1e-5)
    (tmp_path / "data" / "mine.scene_dataset_config.json").write_text(json.dumps(
        {"stages": {"default_attributes": {"up": [0, 1]}}}))
    with pytest.raises(SceneLoadError, match=r"mine.scene_dataset_config.json: field 'up' must be a 3-vector"):
        load_scene_mesh(glb)
    (tmp_path / "data" / "mine.scene_dataset_config.json").write_text(json.dumps(
        {"stages": {"default_attributes": {"up": [0, 1, 0], "front": [0, 1, 0]}}}))
    with pytest.raises(SceneLoadError, match=r"apt.glb: stage config up .* and front .* are not orthogonal"):
        load_scene_mesh(glb)


@pytest.mark.parametrize("extension, named", [("KHR_draco_mesh_compression", "Draco"),
                                              ("EXT_meshopt_compression", "meshopt")])
def test_compressed_geometry_is_refused_naming_the_extension(tmp_path, extension, named):
    """A Draco-compressed .glb (its accessors have no data of their own) loaded as two triangles of placeholder
    zeros: a scene of nothing, with no word of why."""
    if extension.startswith("KHR_draco") and importlib.util.find_spec("DracoPy") is not None:
        pytest.skip("DracoPy is installed: trimesh decodes Draco")
    doc, blob = _quad_document({"extensionsUsed": [extension], "extensionsRequired": [extension]},
                               {"extensions": {extension: {"bufferView": 0, "attributes": {"POSITION": 0}}}})
    for acc in doc["accessors"]:
        del acc["bufferView"]   # as compressors write them: the data lives in the extension's buffer view only
    glb = _write_glb(tmp_path / "packed.glb", doc, blob)
    with pytest.raises(SceneLoadError, match=rf"packed.glb: holds {named}-compressed geometry \({extension}\)"):
        load_scene_mesh(glb)


def test_triangle_fans_are_refused_rather_than_dropped(tmp_path):
    """trimesh skips TRIANGLE_FAN primitives: walls written as fans vanished and the agent walked through them."""
    doc, blob = _quad_document(primitive={"mode": 6, "indices": None})
    del doc["meshes"][0]["primitives"][0]["indices"]
    glb = _write_glb(tmp_path / "fan.glb", doc, blob)
    with pytest.raises(SceneLoadError, match=r"fan.glb: mesh 0 primitive 0 is a triangle fan \(mode 6\)"):
        load_scene_mesh(glb)


def test_textures_that_cannot_be_read_are_refused_naming_the_image(tmp_path):
    """A texture file left behind, or a KTX2 / Basis texture (HM3D's .basis.glb), rendered the scene plain white:
    every view alike, which an image-goal agent cannot tell apart."""
    import cv2

    red = np.zeros((8, 8, 3), np.uint8)
    red[..., 2] = 255
    cv2.imwrite(str(tmp_path / "red.png"), red)
    mesh = load_scene_mesh(_write_textured_gltf(tmp_path, "ok", {"uri": "red.png"}))
    assert mesh.textures.shape[0] == 1 and np.all(mesh.face_texture == 0)
    assert np.all(mesh.textures[0] == [255, 0, 0])

    missing = _write_textured_gltf(tmp_path, "missing", {"uri": "gone%20away.png"})
    with pytest.raises(SceneLoadError, match=r"missing.gltf: material 0 \('floor'\)'s base colour texture: image 0 "
                                             r"\(gone%20away.png\): texture file .*gone away.png not found"):
        load_scene_mesh(missing)
    (tmp_path / "t.ktx2").write_bytes(b"\xabKTX 20\xbb\r\n\x1a\n" + bytes(64))
    ktx = _write_textured_gltf(tmp_path, "ktx", {"uri": "t.ktx2", "mimeType": "image/ktx2"})
    with pytest.raises(SceneLoadError, match=r"ktx.gltf: .*image 0 \(t.ktx2\) is compressed for the GPU .*KTX2"):
        load_scene_mesh(ktx)
    (tmp_path / "junk.png").write_bytes(b"not an image")
    junk = _write_textured_gltf(tmp_path, "junk", {"uri": "junk.png"})
    with pytest.raises(SceneLoadError, match=r"junk.gltf: .*image 0 \(junk.png\) cannot be decoded"):
        load_scene_mesh(junk)


def test_an_obj_whose_texture_or_material_file_is_missing_is_refused(tmp_path):
    """An .obj copied without its .mtl or its textures loaded plain white, as the glTF files above did."""
    import cv2

    (tmp_path / "room.obj").write_text("mtllib room.mtl\nv 0 0 0\nv 1 0 0\nv 1 0 1\nvt 0 0\nvt 1 0\nvt 1 1\n"
                                       "usemtl wall\nf 1/1 2/2 3/3\n")
    with pytest.raises(SceneLoadError, match=r"room.obj: material library .*room.mtl not found"):
        load_scene_mesh(tmp_path / "room.obj")
    (tmp_path / "room.mtl").write_text("newmtl wall\nKd 1 1 1\nmap_Kd wall.png\n")
    with pytest.raises(SceneLoadError, match=r"room.obj: texture .*wall.png named by room.mtl \(map_Kd\) not found"):
        load_scene_mesh(tmp_path / "room.obj")
    cv2.imwrite(str(tmp_path / "wall.png"), np.full((4, 4, 3), 90, np.uint8))
    (tmp_path / "room.mtl").write_text("newmtl wall\nKd 1 1 1\nmap_Kd -s 1 1 1 wall.png\n")
    with pytest.raises(SceneLoadError, match=r"-s 1 1 1 wall.png named by room.mtl \(map_Kd\) not found: trimesh"):
        load_scene_mesh(tmp_path / "room.obj")
    (tmp_path / "room.mtl").write_text("newmtl wall\nKd 1 1 1\nmap_Kd wall.png\n")
    mesh = load_scene_mesh(tmp_path / "room.obj")
    assert mesh.textures.shape[0] == 1 and np.all(mesh.textures[0] == 90)
