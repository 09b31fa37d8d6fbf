"""Habitat PointNav/ImageNav episode datasets: load (three layouts), validate, save deterministically."""
from __future__ import annotations

import gzip
import io
import json
import math
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memnav.core.files import replace_files
from memnav.core.frames import rotate_by_quat_xyzw, yaw_from_quat_xyzw

MAX_ROTATION_TILT_DEG = 30.0  # a start or goal rotation may tilt the agent's up axis this far from +Y, degrees


class EpisodeFormatError(ValueError):
    """An episode file is unreadable or an episode field is malformed (names file, episode, field)."""


@dataclass
class NavGoal:
    """A navigation goal: position (3,) in Habitat world coordinates, optional radius and camera rotation."""

    position: np.ndarray
    radius: float | None = None
    rotation: np.ndarray | None = None


@dataclass
class Episode:
    """One ImageNav/PointNav episode in Habitat's schema.

    Attributes:
        episode_id: unique id within the dataset.
        scene_id: the scene as written in the file (absolute, relative, or Habitat-style
            "data/scene_datasets/gibson/Adrian.glb").
        start_position: (3,) agent start in Habitat world coordinates, meters.
        start_rotation: (4,) start rotation quaternion [x, y, z, w].
        goals: one or more goals; `goal` is the first (the goal photo's), `nearest_goal` the one the
            metrics measure to.
        geodesic_distance: start-to-goal shortest path length from the file, meters (None if absent).
        info: the file's `info` object, kept for round trips.
        scene_path: the resolved scene file, or None when it was not found (see `require_scene`).
        scene_search_dirs: where the scene was looked for (for the error message).
    """

    episode_id: str
    scene_id: str
    start_position: np.ndarray
    start_rotation: np.ndarray
    goals: list[NavGoal]
    geodesic_distance: float | None = None
    info: dict = field(default_factory=dict)
    scene_path: Path | None = None
    scene_search_dirs: list[Path] = field(default_factory=list, repr=False, compare=False)

    @property
    def goal(self) -> NavGoal:
        """The first goal: the one the goal photo is taken at (habitat-lab's ImageGoal sensor). Success, SPL and
        the distance to the goal measure to the nearest of all goals instead (`nearest_goal`)."""
        return self.goals[0]

    def nearest_goal(self, position: np.ndarray, geodesic_distance: Callable[[np.ndarray, np.ndarray], float]
                     ) -> NavGoal:
        """The goal nearest `position` by `geodesic_distance(position, goal position)` (a simulator's): from the
        start, the goal that habitat-lab's DistanceToGoal, Success and SPL measure an episode against. The first
        of equally near goals; the first goal when none is reachable."""
        best, best_d = self.goals[0], math.inf
        for g in self.goals:
            d = float(geodesic_distance(np.asarray(position, dtype=np.float64), np.asarray(g.position, np.float64)))
            if d < best_d:
                best, best_d = g, d
        return best

    @property
    def scene_name(self) -> str:
        """The scene file's stem (e.g. house_020): the name a house goes by for `scene:=` and lifelong memory."""
        return Path(self.scene_id).stem

    def goal_yaw_rad(self) -> float:
        """Heading of the goal camera: from the goal's rotation, else a fixed hash of the episode."""
        if self.goal.rotation is not None:
            return yaw_from_quat_xyzw(self.goal.rotation)
        h = zlib.crc32(f"{self.scene_id}:{self.episode_id}".encode())
        return (h / 2**32) * 2.0 * math.pi - math.pi   # h < 2**32, so the result is in [-pi, pi)

    def to_json(self) -> dict:
        goals = []
        for g in self.goals:
            d: dict = {"position": [float(v) for v in g.position], "radius": g.radius}
            if g.rotation is not None:
                d["rotation"] = [float(v) for v in g.rotation]
            goals.append(d)
        info = dict(self.info)   # keeps the file's key order, so a load/save round trip reproduces its bytes
        if self.geodesic_distance is not None:
            info["geodesic_distance"] = float(self.geodesic_distance)
        return {
            "episode_id": self.episode_id,
            "scene_id": self.scene_id,
            "start_position": [float(v) for v in self.start_position],
            "start_rotation": [float(v) for v in self.start_rotation],
            "goals": goals,
            "info": info,
        }

    @classmethod
    def from_json(cls, d: object, *, source: str, index: int) -> Episode:
        where = f"{source}: episode {index}"
        if not isinstance(d, dict):
            raise EpisodeFormatError(f"{where}: expected an object, got {type(d).__name__}")
        if "episode_id" in d:
            where = f"{source}: episode {index} (id {d['episode_id']!r})"
        for key in ("episode_id", "scene_id", "start_position", "start_rotation", "goals"):
            if key not in d:
                raise EpisodeFormatError(f"{where}: missing field '{key}'")
        episode_id = d["episode_id"]
        if isinstance(episode_id, bool) or not isinstance(episode_id, (str, int)) or episode_id == "":
            raise EpisodeFormatError(f"{where}: field 'episode_id' must be a non-empty string or an integer, "
                                     f"got {episode_id!r}")
        scene_id = d["scene_id"]
        if not isinstance(scene_id, str) or not scene_id:
            raise EpisodeFormatError(f"{where}: field 'scene_id' must be a non-empty string")
        start = _vector(d["start_position"], 3, f"{where}: field 'start_position'")
        rot = _rotation(d["start_rotation"], f"{where}: field 'start_rotation'")
        goals_raw = d["goals"]
        if not isinstance(goals_raw, list) or not goals_raw:
            hint = " (a single goal goes in a list: [{...}])" if isinstance(goals_raw, dict) else ""
            raise EpisodeFormatError(f"{where}: field 'goals' must be a non-empty list of goals, got "
                                     f"{_json_type(goals_raw)}{hint}")
        goals = []
        for j, g in enumerate(goals_raw):
            gw = f"{where}: field 'goals[{j}]"
            if not isinstance(g, dict) or "position" not in g:
                raise EpisodeFormatError(f"{gw}.position' is missing")
            pos = _vector(g["position"], 3, f"{gw}.position'")
            radius = g.get("radius")
            if radius is not None:
                if not _is_number(radius) or not math.isfinite(radius) or radius <= 0:
                    raise EpisodeFormatError(f"{gw}.radius' must be a positive number or null, got {radius!r}")
                radius = float(radius)
            grot = g.get("rotation")
            if grot is not None:
                grot = _rotation(grot, f"{gw}.rotation'")
            goals.append(NavGoal(position=pos, radius=radius, rotation=grot))
        info = d.get("info") or {}
        if not isinstance(info, dict):
            raise EpisodeFormatError(f"{where}: field 'info' must be an object")
        geo = info.get("geodesic_distance")
        if geo is not None and (not _is_number(geo) or not math.isfinite(geo) or geo < 0):
            raise EpisodeFormatError(f"{where}: field 'info.geodesic_distance' must be a finite number >= 0")
        return cls(episode_id=str(episode_id), scene_id=scene_id, start_position=start,
                   start_rotation=rot, goals=goals, geodesic_distance=None if geo is None else float(geo),
                   info=info)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _vector(value: object, n: int, where: str) -> np.ndarray:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise EpisodeFormatError(f"{where} must be a list of {n} numbers, got {value!r}")
    if not all(_is_number(v) for v in value):
        raise EpisodeFormatError(f"{where} must hold numbers, got {value!r}")
    arr = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise EpisodeFormatError(f"{where} must be finite, got {value!r}")
    return arr


def _json_type(value: object) -> str:
    """How JSON would name a value's type (for messages)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else type(value).__name__


def _rotation(value: object, where: str) -> np.ndarray:
    """A Habitat agent rotation [x, y, z, w]: non-zero, and turning about +Y (a heading), within
    MAX_ROTATION_TILT_DEG. Quaternions written [w, x, y, z] (numpy-quaternion's order) turn the agent
    upside down when read as [x, y, z, w]: they are refused here instead of giving a wrong heading."""
    rot = _vector(value, 4, where)
    norm = float(np.linalg.norm(rot))
    if norm < 1e-6:
        raise EpisodeFormatError(f"{where} must be a non-zero quaternion [x, y, z, w]")
    up = rotate_by_quat_xyzw(rot / norm, np.array([0.0, 1.0, 0.0]))
    tilt_deg = math.degrees(math.acos(min(1.0, max(-1.0, float(up[1])))))
    if tilt_deg > MAX_ROTATION_TILT_DEG:
        raise EpisodeFormatError(
            f"{where} {list(value)} tilts the agent's up axis {tilt_deg:.0f} deg from +Y (at most "
            f"{MAX_ROTATION_TILT_DEG:g} allowed): Habitat rotations are quaternions [x, y, z, w] about +Y, e.g. "
            f"[0, sin(yaw/2), 0, cos(yaw/2)]; one written [w, x, y, z] reads as upside down")
    return rot


def _read_json(path: Path) -> dict:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":   # gzip magic: decide by content, not by the file name
            raw = gzip.decompress(raw)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EpisodeFormatError(f"{path}: not a readable episode file ({type(err).__name__}: {err})") from err
    if not isinstance(data, dict) or not isinstance(data.get("episodes"), list):
        if not isinstance(data, dict):
            found = _json_type(data)
        elif "episodes" in data:
            found = f"'episodes' as {_json_type(data['episodes'])}"
        else:
            found = f"no 'episodes' key (keys: {', '.join(sorted(data)[:8]) or 'none'})"
        raise EpisodeFormatError(f"{path}: expected an object with an 'episodes' list, got {found}")
    return data


def _episodes_from(path: Path) -> list[Episode]:
    data = _read_json(path)
    return [Episode.from_json(d, source=str(path), index=i) for i, d in enumerate(data["episodes"])]


def episode_files(data: Path, split: str) -> list[Path]:
    """The files that hold a split, in load order (raises FileNotFoundError listing what was tried)."""
    data = Path(data)
    if data.is_file():
        return [data]
    tried = [data / "episodes" / f"{split}.json.gz", data / f"{split}" / f"{split}.json.gz",
             data / f"{split}.json.gz", data / "episodes" / f"{split}.json", data / f"{split}" / f"{split}.json"]
    for path in tried:
        if path.is_file():
            files = [path]
            content = path.parent / "content"
            if path.parent.name == split and content.is_dir():
                files += sorted(content.glob("*.json.gz")) + sorted(content.glob("*.json"))
            return files
    raise FileNotFoundError(f"no episodes for split {split!r} under {data}; tried: "
                            + ", ".join(str(p) for p in tried))


def search_dirs(data: Path, scenes_dir: Path | None = None) -> list[Path]:
    """Where scene ids are looked up, in order: scenes_dir, DATA, DATA/scenes, DATA/.., DATA/../..,
    every `scene_datasets` folder beside an ancestor of DATA (Habitat's data/ layout), $MEMNAV_SCENES_DIR, cwd."""
    data = Path(data)
    base = data.parent if data.is_file() else data
    dirs = [Path(scenes_dir)] if scenes_dir is not None else []
    dirs += [base, base / "scenes", base.parent, base.parent.parent]
    dirs += [a / "scene_datasets" for a in base.resolve().parents if (a / "scene_datasets").is_dir()]
    env = os.environ.get("MEMNAV_SCENES_DIR")
    if env:
        dirs.append(Path(env))
    dirs.append(Path.cwd())
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def resolve_scene(scene_id: str, dirs: list[Path], name_search_dirs: list[Path] | None = None) -> Path | None:
    """Find the scene file for a scene_id, or None.

    Tried in order: the path itself when absolute; then the full relative path and each shorter suffix
    of it (dropping leading components, so "data/scene_datasets/gibson/Adrian.glb" matches
    DIR/gibson/Adrian.glb, then DIR/Adrian.glb), longest suffix first across all `dirs` so that a more
    specific match beats a same-named file elsewhere; last, a recursive search by file name under
    `name_search_dirs` (default: the first two of `dirs`).
    """
    p = Path(scene_id)
    if p.is_absolute() and p.is_file():
        return p
    parts = p.parts[1:] if p.is_absolute() else p.parts   # an absolute path from another machine: try its tail
    for k in range(len(parts)):
        for d in dirs:
            cand = Path(d).joinpath(*parts[k:])
            if cand.is_file():
                return cand
    for d in dirs[:2] if name_search_dirs is None else name_search_dirs:
        if Path(d).is_dir():
            for cand in sorted(Path(d).rglob(p.name)):
                if cand.is_file():
                    return cand
    return None


def require_scene(episode: Episode) -> Path:
    """The episode's scene file.

    Raises:
        FileNotFoundError: naming the episode, its scene_id and the folders searched.
    """
    if episode.scene_path is None or not Path(episode.scene_path).is_file():
        searched = ", ".join(str(d) for d in episode.scene_search_dirs) or "nothing"
        raise FileNotFoundError(f"episode {episode.episode_id}: scene {episode.scene_id!r} not found "
                                f"(searched: {searched}); pass --scenes-dir or set MEMNAV_SCENES_DIR")
    return Path(episode.scene_path)


def load_episodes(data: Path | str, split: str, scenes_dir: Path | None = None,
                  limit: int | None = None) -> list[Episode]:
    """Load a split of an ImageNav/PointNav episode dataset and resolve each episode's scene file.

    Args:
        data: one of (a) memnav's layout, DATA/episodes/{split}.json.gz with scenes in DATA/scenes;
            (b) Habitat's split layout, DATA/{split}/{split}.json.gz plus the per-scene files
            DATA/{split}/content/*.json.gz (sorted, appended); (c) a single .json.gz or .json file
            (`split` is then ignored).
        split: split name, e.g. "train" or "val".
        scenes_dir: where scene files live (searched first); see `search_dirs` for the rest.
        limit: keep only the first `limit` episodes (later content files are then not read).

    Returns:
        The episodes in file order; `scene_path` is None where the scene was not found (`require_scene`
        raises for those).

    Raises:
        FileNotFoundError: DATA does not exist, or no file for the split (the message lists the paths tried).
        EpisodeFormatError: a file is not readable JSON, or a field is malformed (names file, episode, field).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    data = Path(data)
    if not data.exists():
        raise FileNotFoundError(f"dataset not found: {data}")
    episodes: list[Episode] = []
    for path in episode_files(data, split):
        episodes.extend(_episodes_from(path))
        if limit is not None and len(episodes) >= limit:
            break
    if limit is not None:
        episodes = episodes[:limit]
    dirs = search_dirs(data, scenes_dir)
    base = data.parent if data.is_file() else data
    by_name = ([Path(scenes_dir)] if scenes_dir is not None else []) + [base / "scenes"]
    cache: dict[str, Path | None] = {}
    for ep in episodes:
        if ep.scene_id not in cache:
            cache[ep.scene_id] = resolve_scene(ep.scene_id, dirs, by_name)
        ep.scene_path = cache[ep.scene_id]
        if ep.scene_path is None:
            ep.scene_search_dirs = list(dirs)
    return episodes


def save_episodes(path: Path, episodes: list[Episode]) -> None:
    """Write {"episodes": [...]} as gzip JSON, byte-identical for identical input."""
    path = Path(path)
    payload = json.dumps({"episodes": [e.to_json() for e in episodes]}, separators=(",", ":")).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as f:
        f.write(payload)
    replace_files({path: buf.getvalue()})
