"""Episode datasets: Habitat schema, three layouts, scene resolution, bad input."""
import gzip
import json
import math

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
    with pytest.raises(FileNotFoundError, match="train"):
        load_episodes(tmp_path, "train")


def test_goal_yaw_fallback_is_deterministic():
    e = _episode(0)
    e.goals[0].rotation = None
    yaw = e.goal_yaw_rad()
    assert -math.pi <= yaw < math.pi and yaw == _episode_copy_yaw(e)


def _episode_copy_yaw(e: Episode) -> float:
    copy = Episode(e.episode_id, e.scene_id, e.start_position, e.start_rotation, [NavGoal(e.goal.position)])
    return copy.goal_yaw_rad()


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("scene_id"), "scene_id"),
    (lambda d: d.update(start_position=[0, 1]), "start_position"),
    (lambda d: d.update(start_position=[0, float("nan"), 1]), "start_position"),
    (lambda d: d.update(start_rotation=[0, 0, 0, 0]), "start_rotation"),
    (lambda d: d.update(goals=[]), "goals"),
    (lambda d: d.update(goals=[{"position": [0, 0, "a"]}]), "goals\\[0\\].position"),
    (lambda d: d.update(goals=[{"position": [0, 0, 0], "radius": -1}]), "goals\\[0\\].radius"),
])
def test_bad_fields_are_named(tmp_path, mutate, field):
    raw = _raw(7, "x.glb")
    mutate(raw)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"episodes": [_raw(1, "x.glb"), raw]}))
    with pytest.raises(EpisodeFormatError, match=field) as info:
        load_episodes(path, "any")
    assert "bad.json" in str(info.value) and "episode 1" in str(info.value)


def test_corrupt_file_is_named(tmp_path):
    path = tmp_path / "broken.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(EpisodeFormatError, match="broken.json.gz"):
        load_episodes(path, "any")
