"""Where memnav's own files live: the package root and the shipped models.

An editable install (`pip install -e .`, `make setup`) uses the repository: `<repo>/models`. A regular
install (`pip install .`, colcon) copies the models to `<prefix>/share/memnav/models` (setup.py
data_files); that folder is used when the repository's is absent. No ROS imports here.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def shipped_file(relative: str) -> Path:
    """A file or folder memnav ships (`models`, `config/memnav.rviz`): the repository's in an editable install,
    else the installed copy under `<prefix>/share/memnav` (setup.py data_files); the repository's path when
    neither exists."""
    repo = PACKAGE_ROOT / relative
    if repo.exists():
        return repo
    installed = Path(sys.prefix) / "share" / "memnav" / relative
    return installed if installed.exists() else repo


MODELS = shipped_file("models")


def resolve_model_path(path: str, parameter: str, folder: bool = False) -> Path:
    """The file (or with `folder`, the folder) a model parameter names: absolute as is, relative under the
    package root, the models folder, then the working directory (a node started by a launch file runs in an
    arbitrary folder).

    Args:
        path: the parameter value.
        parameter: the parameter name, for the error message.
        folder: the parameter names a folder of models (policy_dir), not a file.

    Raises:
        FileNotFoundError: naming the parameter and every place looked at (a folder where a file belongs, or a
            file where a folder belongs, is named as such).
    """
    kind = "model folder" if folder else "model file"
    if not path:
        raise FileNotFoundError(f"parameter {parameter!r} is empty; expected a {kind} path")
    p = Path(path).expanduser()
    if p.is_absolute():
        candidates = [p]
    else:
        candidates = [PACKAGE_ROOT / p, Path.cwd() / p]
        if p.parts and p.parts[0] == "models" and MODELS != PACKAGE_ROOT / "models":
            candidates.insert(1, MODELS.joinpath(*p.parts[1:]))
    for c in candidates:
        if (c.is_dir() if folder else c.is_file()):
            return c
    wrong = next((c for c in candidates if c.exists()), None)
    if wrong is not None:
        raise FileNotFoundError(f"parameter {parameter!r}: {wrong} is a {'file' if folder else 'directory'}, "
                                f"not a {kind}")
    raise FileNotFoundError(f"parameter {parameter!r}: {kind} {path!r} not found (looked at "
                            f"{', '.join(str(c) for c in candidates)})")


def lifelong_memory_path(folder: str | Path, key: str) -> Path:
    """The database a lifelong run keeps the environment `key`'s long-term memory in (e.g. house_020.db)."""
    return Path(folder) / f"{key}.db"


def lifelong_map_path(folder: str | Path, key: str) -> Path:
    """The occupancy map a lifelong run keeps beside the environment `key`'s memory (e.g. house_020.map.npz)."""
    return Path(folder) / f"{key}.map.npz"


def earlier_memories(folder: str | Path | None, keys) -> list[str]:
    """Those of `keys` whose lifelong memory database in `folder` already exists: a run continuing earlier
    runs' memory, whose first visit to them is not their first."""
    if folder is None:
        return []
    return sorted(k for k in set(keys) if lifelong_memory_path(folder, k).is_file())


def check_output_file(path: Path | None, option: str) -> None:
    """Refuse an output file path that could not be written, before any work is done for it: an existing
    directory, a path below an existing file, or one whose nearest existing folder does not take a new file
    (read-only, no permission; a missing folder on the way is created when the file is written).

    Raises:
        ValueError: naming `option` and the path.
    """
    if path is None or str(path) == "-":
        return
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a directory; give the path of a file to write")
    _check_writable(path.parents, path, option)


def same_file(a: Path, b: Path) -> bool:
    """Whether paths `a` and `b` name one file: the same path once resolved (one relative, one absolute; a
    symlink), or, both existing, one file under two names (a hard link)."""
    a, b = Path(a), Path(b)
    return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))


def check_output_dir(path: Path | None, option: str) -> None:
    """Refuse an output folder path that exists as something other than a folder, lies below a file, or whose
    nearest existing folder (itself, when it exists) does not take a new file, before any work is done for it.

    Raises:
        ValueError: naming `option` and the path.
    """
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path}: exists and is not a directory; give a folder path")
    _check_writable((path, *path.parents), path, option)


def _check_writable(folders, path: Path, option: str) -> None:
    """The first existing one of `folders` (nearest first) must be a folder that takes a new file."""
    folder = next((f for f in folders if f.exists()), None)
    if folder is None:
        return
    if not folder.is_dir():
        raise ValueError(f"{option} {path}: {folder} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot write in {folder} ({err.strerror or err})") from err
