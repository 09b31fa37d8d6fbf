"""Procedural houses: determinism, Habitat files, closed walls, connected rooms."""
import json

import numpy as np
import pytest

from memnav.sim.houses import HouseConfig, generate_house, make_texture, write_house


@pytest.fixture(scope="module")
def house():
    return generate_house(11, name="house_t")


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = write_house(generate_house(3, name="h"), tmp_path / "a").read_bytes()
    b = write_house(generate_house(3, name="h"), tmp_path / "b").read_bytes()
    c = write_house(generate_house(4, name="h"), tmp_path / "c").read_bytes()
    assert a == b
    assert a != c


def test_habitat_files_and_trimesh_load(house, tmp_path):
    import trimesh

    glb = write_house(house, tmp_path)
    stage = json.loads((tmp_path / "house_t.stage_config.json").read_text())
    assert stage["up"] == [0, 1, 0] and stage["front"] == [0, 0, -1] and stage["render_asset"] == glb.name
    sem = json.loads((tmp_path / "house_t.semantic.json").read_text())
    assert [o["id"] for o in sem["objects"]] == [o.id for o in house.objects]
    scene = trimesh.load(glb, force="scene", process=False)
    names = set(scene.graph.nodes_geometry)
    assert {p.name for p in house.parts} == names
    geom = scene.geometry[house.parts[0].name]
    assert geom.visual.uv is not None and geom.visual.material.baseColorTexture is not None
    assert house.num_triangles < 30_000


def test_objects_unique_inside_their_rooms(house):
    ids = [o.id for o in house.objects]
    assert len(ids) == len(set(ids)) and min(ids) == 1
    rooms = {r.id: r for r in house.rooms}
    for o in house.objects:
        r = rooms[o.room_id]
        c = o.center[[0, 2]]
        assert np.all(c >= r.min_xz - 1e-6) and np.all(c <= r.max_xz + 1e-6), o
        assert 0 <= o.center[1] <= HouseConfig().wall_height_m


def test_every_room_reachable_through_doors():
    for seed in range(10):
        h = generate_house(seed)
        adj = {r.id: set() for r in h.rooms}
        for d in h.doors:
            a, b = d.rooms
            adj[a].add(b)
            adj[b].add(a)
        seen, todo = {0}, [0]
        while todo:
            for nxt in adj[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        assert seen == set(adj), f"seed {seed}: rooms {set(adj) - seen} unreachable"
        assert 3 <= len(h.rooms) <= 6


def test_house_is_closed_and_doors_are_open(house, tmp_path):
    from memnav.sim.mesh import load_scene_mesh
    from memnav.sim.render import RayCaster

    caster = RayCaster(load_scene_mesh(write_house(house, tmp_path)))
    angles = np.linspace(0, 2 * np.pi, 36, endpoint=False)
    dirs = np.stack([np.cos(angles), np.zeros_like(angles), np.sin(angles)], 1).astype(np.float32)
    for room in house.rooms:
        c = room.center_xz
        # above the door openings (2.1 m), below the ceiling (2.6 m): every ray meets a wall
        origins = np.tile([c[0], 2.3, c[1]], (36, 1)).astype(np.float32)
        t = caster.cast(origins, dirs)["t_hit"]
        diag = float(np.hypot(*(room.max_xz - room.min_xz)))
        assert np.all(t < diag), f"room {room.id} leaks"
    for door in house.doors:
        c = door.center_xz
        axis = np.array([1.0, 0, 0]) if door.axis == "x" else np.array([0, 0, 1.0])
        origin = np.array([c[0], 1.0, c[1]]) - 0.3 * axis
        t = caster.cast(origin[None].astype(np.float32), axis[None].astype(np.float32))["t_hit"][0]
        assert t > 0.6, f"door {door} is blocked"


def test_textures_differ_between_families():
    rng = np.random.default_rng(0)
    tiles = [make_texture(k, rng, 32) for k in ("wood", "tiles", "carpet", "stripes", "picture")]
    for t in tiles:
        assert t.shape == (32, 32, 3) and t.dtype == np.uint8
    means = [t.reshape(-1, 3).mean(0) for t in tiles]
    assert min(np.linalg.norm(a - b) for i, a in enumerate(means) for b in means[i + 1:]) > 1.0


def test_semantic_classes_map_mesh_ids_to_class_names(house, tmp_path):
    from memnav.sim.houses import read_semantic_classes
    from memnav.sim.mesh import load_scene_mesh

    glb = write_house(house, tmp_path)
    classes = read_semantic_classes(glb)
    names = json.loads(glb.with_name(f"{house.name}.semantic.json").read_text())["classes"]
    ids = set(np.unique(load_scene_mesh(glb).face_semantic)) - {0}
    assert ids and ids <= set(classes)                       # every semantic id of the mesh has its class
    assert all(names[c] == label for c, label in classes.values())
    assert read_semantic_classes(tmp_path / "nothing.glb") == {}
    (tmp_path / "broken.semantic.json").write_text("{}")
    with pytest.raises(ValueError, match="broken.semantic.json"):
        read_semantic_classes(tmp_path / "broken.glb")
