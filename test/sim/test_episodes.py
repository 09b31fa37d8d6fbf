"""Episode datasets: Habitat schema, three layouts, scene resolution, bad input."""
import gzip
import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest

from memnav.core.frames import quat_xyzw_from_yaw
from memnav.sim.episodes import Episode, EpisodeFormatError, NavGoal, load_episodes, require_scene, save_episodes


def _episode(i: int, scene_id: str = "scenes/a.glb") -> Episode:
    return Episode(episode_id=str(i), scene_id=scene_id, start_position=np.array([1.0, 0.0, 2.0 + i]),
                   start_rotation=quat_xyzw_from_yaw(0.3), goals=[NavGoal(np.array([3.0, 0.0, 1.0]), None,
                                                                          quat_xyzw_from_yaw(-1.0))],
                   geodesic_distance=2.5, info={"geodesic_distance": 2.5})


def _raw(i: int, scene_id: str) -> dict:
    return {"episode_id": i, "scene_id": scene_id, "start_position": [0.0, 0.1, 1.0],
            "start_rotation": [0.0, 0.0, 0.0, 1.0], "goals": [{"position": [1.0, 0.1, 2.0], "radius": None}],
            "info": {"geodesic_distance": 1.6}}


def test_round_trip_and_byte_determinism(tmp_path):
    eps = [_episode(i) for i in range(3)]
    save_episodes(tmp_path / "a.json.gz", eps)
    save_episodes(tmp_path / "b.json.gz", eps)
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    back = load_episodes(tmp_path / "a.json.gz", "ignored")
    assert [e.to_json() for e in back] == [e.to_json() for e in eps]
    assert back[0].goal_yaw_rad() == pytest.approx(-1.0)


def test_habitat_split_layout_with_content_and_scene_resolution(tmp_path):
    # Habitat's public layout: val/val.json.gz (empty) + val/content/<scene>.json.gz, scene ids relative
    # to a data/scene_datasets root
    data = tmp_path / "imagenav" / "gibson" / "v1"
    (data / "val" / "content").mkdir(parents=True)
    with gzip.open(data / "val" / "val.json.gz", "wt") as f:
        json.dump({"episodes": []}, f)
    for name in ("Bbb", "Aaa"):
        with gzip.open(data / "val" / "content" / f"{name}.json.gz", "wt") as f:
            json.dump({"episodes": [_raw(k, f"data/scene_datasets/gibson/{name}.glb") for k in range(2)]}, f)
    scenes = tmp_path / "scene_datasets" / "gibson"
    scenes.mkdir(parents=True)
    (scenes / "Aaa.glb").write_bytes(b"x")
    eps = load_episodes(data, "val", scenes_dir=tmp_path / "scene_datasets")
    assert len(eps) == 4
    assert eps[0].scene_id.endswith("Aaa.glb")  # content files in sorted order
    assert eps[0].scene_path == scenes / "Aaa.glb"
    assert eps[2].scene_path is None
    with pytest.raises(FileNotFoundError, match="Bbb.glb"):
        require_scene(eps[2])
    assert len(load_episodes(data, "val", limit=3)) == 3


def test_missing_split_lists_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="train") as info:
        load_episodes(tmp_path, "train")
    assert str(tmp_path / "episodes" / "train.json.gz") in str(info.value)
    assert str(tmp_path / "train" / "train.json.gz") in str(info.value)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_episodes(tmp_path / "nowhere", "train")


def test_memnav_layout_resolves_relative_and_bare_scene_ids(tmp_path):
    (tmp_path / "scenes" / "sub").mkdir(parents=True)
    (tmp_path / "scenes" / "a.glb").write_bytes(b"x")
    (tmp_path / "scenes" / "sub" / "deep.glb").write_bytes(b"x")
    eps = [_episode(0, "scenes/a.glb"), _episode(1, "a.glb"), _episode(2, "elsewhere/deep.glb"),
           _episode(3, str(tmp_path / "scenes" / "a.glb"))]
    save_episodes(tmp_path / "episodes" / "val.json.gz", eps)
    back = load_episodes(tmp_path, "val")
    assert [e.scene_path for e in back] == [tmp_path / "scenes" / "a.glb", tmp_path / "scenes" / "a.glb",
                                            tmp_path / "scenes" / "sub" / "deep.glb", tmp_path / "scenes" / "a.glb"]
    assert all(require_scene(e).is_file() for e in back)


def test_more_specific_scene_match_wins(tmp_path):
    # Replica-style ids share a file name: "apartment_0/mesh.ply" must not resolve to another scene's mesh.ply
    (tmp_path / "mesh.ply").write_bytes(b"wrong")   # DATA itself is searched before DATA/scenes
    right = tmp_path / "scenes" / "apartment_0" / "mesh.ply"
    right.parent.mkdir(parents=True)
    right.write_bytes(b"right")
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"episodes": [_raw(0, "apartment_0/mesh.ply")]}))
    assert load_episodes(path, "x")[0].scene_path == right


def test_habitat_style_scene_ids(tmp_path, monkeypatch):
    # Habitat's data/ tree: episodes under data/datasets/..., scenes under data/scene_datasets/...
    root = tmp_path / "data"
    data = root / "datasets" / "pointnav" / "gibson" / "v1"
    gib = root / "scene_datasets" / "gibson"
    gib.mkdir(parents=True)
    (gib / "Adrian.glb").write_bytes(b"x")
    ids = ["data/scene_datasets/gibson/Adrian.glb", "gibson/Adrian.glb",
           "/home/someone/habitat/data/scene_datasets/gibson/Adrian.glb"]   # absolute, from another machine
    (data / "val").mkdir(parents=True)
    with gzip.open(data / "val" / "val.json.gz", "wt") as f:
        json.dump({"episodes": [_raw(k, sid) for k, sid in enumerate(ids)]}, f)
    monkeypatch.chdir(tmp_path)
    eps = load_episodes(data, "val")   # no scenes_dir: found through data/scene_datasets
    assert [e.scene_path.resolve() for e in eps] == [(gib / "Adrian.glb").resolve()] * 3
    monkeypatch.setenv("MEMNAV_SCENES_DIR", str(gib))
    elsewhere = tmp_path / "ep.json"
    elsewhere.write_text(json.dumps({"episodes": [_raw(0, "Adrian.glb")]}))
    assert load_episodes(elsewhere, "x")[0].scene_path == gib / "Adrian.glb"


def test_unresolved_scene_error_names_episode_and_dirs(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"episodes": [_raw(42, "gibson/Nowhere.glb")]}))
    (ep,) = load_episodes(path, "x", scenes_dir=tmp_path / "my_scenes")
    assert ep.scene_path is None
    with pytest.raises(FileNotFoundError) as info:
        require_scene(ep)
    msg = str(info.value)
    assert "episode 42" in msg and "gibson/Nowhere.glb" in msg and str(tmp_path / "my_scenes") in msg


def test_goal_yaw_from_rotation():
    for yaw in (-3.0, -1.0, 0.0, 0.5, 3.0):
        e = _episode(0)
        e.goals[0].rotation = quat_xyzw_from_yaw(yaw)
        assert e.goal_yaw_rad() == pytest.approx(yaw)


def test_goal_yaw_fallback_is_deterministic():
    e = _episode(0)
    e.goals[0].rotation = None
    yaw = e.goal_yaw_rad()
    expected = zlib.crc32(b"scenes/a.glb:0") / 2**32 * 2 * math.pi - math.pi   # fixed across runs and machines
    assert yaw == pytest.approx(expected) and -math.pi <= yaw < math.pi
    copy = Episode(e.episode_id, e.scene_id, e.start_position, e.start_rotation, [NavGoal(e.goal.position)])
    assert copy.goal_yaw_rad() == yaw
    others = {Episode(str(i), "s.glb", e.start_position, e.start_rotation, [NavGoal(e.goal.position)]).goal_yaw_rad()
              for i in range(20)}
    assert len(others) == 20 and all(-math.pi <= y < math.pi for y in others)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("scene_id"), "scene_id"),
    (lambda d: d.update(start_position=[0, 1]), "start_position"),
    (lambda d: d.update(start_position=[0, float("nan"), 1]), "start_position"),
    (lambda d: d.update(start_rotation=[0, 0, 0, 0]), "start_rotation"),
    (lambda d: d.update(goals=[]), "goals"),
    (lambda d: d.update(goals=[{"position": [0, 0, "a"]}]), "goals\\[0\\].position"),
    (lambda d: d.update(goals=[{"position": [0, 0, 0], "radius": -1}]), "goals\\[0\\].radius"),
    (lambda d: d.update(goals=[{"position": [0, 0, 0], "radius": True}]), "goals\\[0\\].radius"),
    (lambda d: d.update(goals=[{"position": [0, 0, 0], "rotation": [0, 0, 0, 0]}]), "goals\\[0\\].rotation"),
    (lambda d: d.update(goals=[{"radius": 1.0}]), "goals\\[0\\].position"),
    (lambda d: d.update(goals={"position": [0, 0, 0]}), "goals"),
    (lambda d: d.update(episode_id=None), "episode_id"),
    (lambda d: d.update(scene_id=""), "scene_id"),
    (lambda d: d.update(start_rotation=[0, 0, 1]), "start_rotation"),
    (lambda d: d.update(start_position="0 0 0"), "start_position"),
    (lambda d: d.update(info=[1]), "info"),
    (lambda d: d.update(info={"geodesic_distance": -2.0}), "geodesic_distance"),
    # [w, x, y, z] order (numpy-quaternion's) read as Habitat's [x, y, z, w]: upside down
    (lambda d: d.update(start_rotation=[1.0, 0.0, 0.0, 0.0]), "start_rotation.*\\[x, y, z, w\\]"),
    (lambda d: d.update(start_rotation=[math.cos(0.5), 0.0, math.sin(0.5), 0.0]), "start_rotation.*180 deg"),
    (lambda d: d.update(goals=[{"position": [0, 0, 0], "rotation": [0.7071, 0.0, 0.7071, 0.0]}]),
     "goals\\[0\\].rotation.*from \\+Y"),
])
def test_bad_fields_are_named(tmp_path, mutate, field):
    raw = _raw(7, "x.glb")
    mutate(raw)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"episodes": [_raw(1, "x.glb"), raw]}))
    with pytest.raises(EpisodeFormatError, match=field) as info:
        load_episodes(path, "any")
    assert "bad.json" in str(info.value) and "episode 1" in str(info.value)


@pytest.mark.parametrize("name, payload", [
    ("broken.json.gz", b"\x1f\x8b\x08\x00garbage"),
    ("truncated.json.gz", gzip.compress(b'{"episodes": [')[:-6]),
    ("bad.json", b'{"episodes": [}'),
    ("latin1.json", '{"episodes": [], "n": "\u00e9"}'.encode("latin-1")),
    ("list.json", b"[1, 2]"),
    ("episodes_not_list.json", b'{"episodes": {}}'),
    ("no_episodes_key.json", b'{"scenes": ["a.glb"]}'),   # not an episode file: was read as zero episodes
])
def test_corrupt_file_is_named(tmp_path, name, payload):
    path = tmp_path / name
    path.write_bytes(payload)
    with pytest.raises(EpisodeFormatError, match=name.replace(".", "\\.")):
        load_episodes(path, "any")


def test_gzip_detected_by_content_not_name(tmp_path):
    path = tmp_path / "really_gzip.json"
    path.write_bytes(gzip.compress(json.dumps({"episodes": [_raw(1, "x.glb")]}).encode()))
    assert load_episodes(path, "any")[0].episode_id == "1"


def test_save_header_is_deterministic_and_round_trip_reproduces_bytes(tmp_path):
    save_episodes(tmp_path / "a.json.gz", [_episode(i) for i in range(2)])
    raw = (tmp_path / "a.json.gz").read_bytes()
    assert raw[4:8] == b"\x00\x00\x00\x00"   # gzip mtime field zeroed
    assert raw[3] & 0x08 == 0                  # no file name in the header
    assert not list(tmp_path.glob("*.tmp"))
    save_episodes(tmp_path / "b.json.gz", load_episodes(tmp_path / "a.json.gz", "x"))
    assert (tmp_path / "b.json.gz").read_bytes() == raw


def test_shipped_dataset_round_trips_byte_for_byte(tmp_path):
    shipped = Path(__file__).resolve().parents[2] / "data" / "houses" / "episodes" / "val.json.gz"
    if not shipped.is_file():
        pytest.skip("data/houses not generated")
    eps = load_episodes(shipped.parents[1], "val")
    assert eps and all(e.scene_path is not None and e.scene_path.is_file() for e in eps)
    save_episodes(tmp_path / "val.json.gz", eps)
    assert (tmp_path / "val.json.gz").read_bytes() == shipped.read_bytes()


def test_limit(tmp_path):
    save_episodes(tmp_path / "e.json.gz", [_episode(i) for i in range(5)])
    assert [e.episode_id for e in load_episodes(tmp_path / "e.json.gz", "x", limit=2)] == ["0", "1"]
    assert load_episodes(tmp_path / "e.json.gz", "x", limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        load_episodes(tmp_path / "e.json.gz", "x", limit=-1)


def test_goals_given_as_one_object_say_to_wrap_it_in_a_list(tmp_path):
    raw = _raw(1, "x.glb")
    raw["goals"] = {"position": [1.0, 0.1, 2.0]}
    (tmp_path / "e.json").write_text(json.dumps({"episodes": [raw]}))
    with pytest.raises(EpisodeFormatError, match="'goals' must be a non-empty list of goals, got an object.*in a list"):
        load_episodes(tmp_path / "e.json", "x")


@pytest.mark.parametrize("rotation, yaw", [
    ([0.0, math.sin(0.6), 0.0, math.cos(0.6)], 1.2),                      # about +Y: a heading
    ([0.0, 0.0, 0.0, -1.0], 0.0),                                         # -q is the same rotation
    ([0.0, 2 * math.sin(-0.4), 0.0, 2 * math.cos(-0.4)], -0.8),           # not unit length: normalised
    ([math.sin(math.radians(10)), 0.0, 0.0, math.cos(math.radians(10))], 0.0),   # a camera pitched 20 deg
])
def test_rotations_about_up_are_read_as_headings(tmp_path, rotation, yaw):
    raw = _raw(1, "x.glb")
    raw["start_rotation"] = rotation
    raw["goals"][0]["rotation"] = rotation
    (tmp_path / "e.json").write_text(json.dumps({"episodes": [raw]}))
    ep = load_episodes(tmp_path / "e.json", "x")[0]
    from memnav.core.frames import yaw_from_quat_xyzw

    assert yaw_from_quat_xyzw(ep.start_rotation) == pytest.approx(yaw, abs=1e-6)
    assert ep.goal_yaw_rad() == pytest.approx(yaw, abs=1e-6)


def test_nearest_goal_is_the_one_the_metrics_measure_to():
    """`goal` is the first (the goal photo's); `nearest_goal` the nearest by the given geodesic distance, as
    Success and SPL take it; unreachable goals (inf) are passed over, ties go to the first."""
    far, near, walled = (NavGoal(np.array(p)) for p in ([9.0, 0.0, 0.0], [2.0, 0.0, 0.0], [1.0, 0.0, 0.0]))
    e = Episode("1", "s.glb", np.zeros(3), quat_xyzw_from_yaw(0.0), [far, near, walled])

    def geodesic(a, b):
        return math.inf if b[0] == 1.0 else float(np.linalg.norm(b - a))

    assert e.goal is far
    assert e.nearest_goal(np.zeros(3), geodesic) is near
    assert e.nearest_goal(np.array([8.0, 0.0, 0.0]), geodesic) is far
    twin = Episode("2", "s.glb", np.zeros(3), quat_xyzw_from_yaw(0.0), [far, NavGoal(np.array([-9.0, 0.0, 0.0]))])
    assert twin.nearest_goal(np.zeros(3), geodesic) is far
    assert Episode("3", "s.glb", np.zeros(3), quat_xyzw_from_yaw(0.0), [walled]).nearest_goal(
        np.zeros(3), geodesic) is walled
