"""Goal photos on disk: the colour image a robot is sent to, its depth, and what was known when it was taken.

A goal photo is three files beside each other (`memnav goal capture` writes them, `memnav goal send` reads them):

    NAME.png         the colour image (any format OpenCV reads: png, jpg, bmp, ...; any size)
    NAME.depth.png   optional: its depth, 16-bit PNG in millimetres (0 = no reading), the size of the photo;
                     a float32 NumPy array in metres (`NAME.depth.npy`) is read as well
    NAME.json        optional: the capture's record (stamp, topics, frame id, the odometry pose then)

Depth registered to the photo lets the agent match the goal's shape against its map (goal candidates); a photo
alone (from a phone, say) still works, by appearance only. No ROS here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memnav.core.files import replace_files

__all__ = ["DEPTH_SUFFIXES", "GoalPhoto", "GoalPhotoError", "check_goal_image", "depth_path_for", "existing_outputs",
           "meta_path_for", "read_goal_photo", "refuse_overwriting", "write_goal_photo"]

DEPTH_SUFFIXES = (".depth.png", ".depth.npy")   # looked for beside NAME.png, in this order
MAX_DEPTH_MM = 65535                              # what a 16-bit PNG holds: 65.535 m


class GoalPhotoError(ValueError):
    """A goal photo file that cannot be used: the message names the file and what is wrong."""


@dataclass
class GoalPhoto:
    """A goal view.

    Attributes:
        rgb: uint8 (H, W, 3) colour image.
        depth_m: float32 (H, W) depth in metres registered to `rgb` (0 = no reading), or None.
        meta: what the capture recorded (stamp_ns, topics, frame_id, odometry pose, ...); {} when unknown.
    """

    rgb: np.ndarray
    depth_m: np.ndarray | None = None
    meta: dict = field(default_factory=dict)


def depth_path_for(photo: Path | str) -> Path:
    """Where `memnav goal capture` puts the depth of NAME.png: NAME.depth.png."""
    p = Path(photo)
    return p.with_name(p.stem + DEPTH_SUFFIXES[0])


def meta_path_for(photo: Path | str) -> Path:
    """Where the capture's record of NAME.png goes: NAME.json."""
    p = Path(photo)
    return p.with_name(p.stem + ".json")


def _found_depth(photo: Path) -> Path | None:
    for suffix in DEPTH_SUFFIXES:
        cand = photo.with_name(photo.stem + suffix)
        if cand.is_file():
            return cand
    return None


def _check_file(path: Path, what: str) -> None:
    if not path.exists():
        raise GoalPhotoError(f"{what} {path} does not exist")
    if not path.is_file():
        raise GoalPhotoError(f"{what} {path} is not a file")
    if path.stat().st_size == 0:
        raise GoalPhotoError(f"{what} {path} is empty")


def check_goal_image(image: object) -> np.ndarray:
    """A goal image as uint8 (H, W, 3): grey and RGBA are converted, unsigned integers scaled from their full range
    (a 16-bit image divided by 257), floats from [0, 1] when no value exceeds 1 (else taken as 0-255), signed
    integers taken as 0-255.

    Raises:
        ValueError: empty, not an image, or not finite.
    """
    img = np.asarray(image)
    if img.size == 0:
        raise ValueError("goal image is empty")
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ValueError(f"goal image must be (H, W), (H, W, 3) or (H, W, 4), got shape {img.shape}")
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    img = img[:, :, :3]
    if img.dtype != np.uint8:
        f = img.astype(np.float64)
        if not np.isfinite(f).all():
            raise ValueError("goal image has non-finite values")
        if np.issubdtype(img.dtype, np.unsignedinteger):
            f = f * (255.0 / np.iinfo(img.dtype).max)   # full range to 0-255
        elif np.issubdtype(img.dtype, np.integer):
            if f.min() < 0 or f.max() > 255:
                raise ValueError(f"goal image of signed integers ({img.dtype}) must hold 0-255, got "
                                 f"{f.min():g}-{f.max():g}")
        elif f.max() <= 1.0:                       # floats: 0-1 if no value exceeds 1, else 0-255
            f = f * 255.0
        img = np.clip(f, 0, 255).astype(np.uint8)
    if min(img.shape[:2]) < 8:
        raise ValueError(f"goal image of {img.shape[1]}x{img.shape[0]} px is too small to encode")
    return np.ascontiguousarray(img)


def _no_constant(name: str) -> None:
    """json.loads reads NaN, Infinity and -Infinity, which JSON has not (write_goal_photo never writes them)."""
    raise ValueError(f"{name} is not a JSON value")


def _read_rgb(path: Path) -> np.ndarray:
    import cv2

    _check_file(path, "goal photo")
    raw = np.fromfile(path, dtype=np.uint8)
    img = cv2.imdecode(raw, cv2.IMREAD_COLOR)   # 16-bit and grey files come back as 8-bit BGR
    if img is None:
        raise GoalPhotoError(f"goal photo {path} is not an image OpenCV can read (png, jpg, bmp, tiff, ...)")
    try:
        return check_goal_image(img[:, :, ::-1])
    except ValueError as err:
        raise GoalPhotoError(f"goal photo {path}: {err}") from None


def _read_depth(path: Path, shape: tuple[int, int]) -> np.ndarray:
    import cv2

    _check_file(path, "goal depth")
    if path.suffix.lower() == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise GoalPhotoError(f"goal depth {path} is not a NumPy array file: {err}") from None
        if arr.ndim != 2 or arr.dtype.kind != "f":
            raise GoalPhotoError(f"goal depth {path} must be a 2-D float array of metres, got {arr.dtype} "
                                 f"{arr.shape}")
        depth = arr.astype(np.float32)
        if (depth < 0).any():
            raise GoalPhotoError(f"goal depth {path} has negative depths (min {float(np.nanmin(depth)):.3g} m)")
    else:
        img = cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
        if img is None:
            raise GoalPhotoError(f"goal depth {path} is not an image OpenCV can read")
        if img.ndim != 2 or img.dtype != np.uint16:
            raise GoalPhotoError(f"goal depth {path} must be a one-channel 16-bit image of millimetres, got "
                                 f"{img.dtype} with shape {img.shape}")
        depth = img.astype(np.float32) * 0.001
    if depth.shape != shape:
        raise GoalPhotoError(f"goal depth {path} is {depth.shape[1]}x{depth.shape[0]} px but the photo is "
                             f"{shape[1]}x{shape[0]}: depth must be registered to the photo")
    return np.where(np.isfinite(depth) & (depth > 0), depth, 0.0).astype(np.float32)


def read_goal_photo(photo: Path | str, depth: Path | str | None = None, find_depth: bool = True) -> GoalPhoto:
    """Read a goal photo, its depth and its capture record.

    Args:
        photo: the colour image.
        depth: its depth file (.png 16-bit millimetres or .npy float metres); None: NAME.depth.png or
            NAME.depth.npy beside the photo when `find_depth` and one exists, else no depth.
        find_depth: look for the depth beside the photo when `depth` is None.

    Raises:
        GoalPhotoError: naming the file that is missing, unreadable, of the wrong kind or of another size.
    """
    photo = Path(photo)
    rgb = _read_rgb(photo)
    depth_file = Path(depth) if depth is not None else (_found_depth(photo) if find_depth else None)
    depth_m = _read_depth(depth_file, rgb.shape[:2]) if depth_file is not None else None
    meta: dict = {}
    meta_file = meta_path_for(photo)
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text(), parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError) as err:
            raise GoalPhotoError(f"goal photo record {meta_file} is not JSON: {err}") from None
        if not isinstance(meta, dict):
            raise GoalPhotoError(f"goal photo record {meta_file} must hold a JSON object")
    if depth_file is not None:
        meta = {**meta, "depth_file": str(depth_file)}
    return GoalPhoto(rgb, depth_m, meta)


def _outputs(photo: Path) -> list[Path]:
    """Every file of the goal photo NAME: the photo, its record and any depth file beside it."""
    return [photo, meta_path_for(photo), *(photo.with_name(photo.stem + s) for s in DEPTH_SUFFIXES)]


def existing_outputs(photo: Path | str) -> list[Path]:
    """The files of goal photo `photo` (its suffix replaced by .png) that `write_goal_photo` would replace or
    remove: an old depth file stays a goal's depth only while it belongs to the same capture."""
    return [p for p in _outputs(Path(photo).with_suffix(".png")) if p.exists()]


def refuse_overwriting(photo: Path | str) -> None:
    """Raise GoalPhotoError naming the files of goal photo `photo` that exist already (see `existing_outputs`)."""
    there = existing_outputs(photo)
    if there:
        raise _exists_error(there)


def _exists_error(there: list[Path]) -> GoalPhotoError:
    return GoalPhotoError(f"{', '.join(map(str, there))} exist{'s' if len(there) == 1 else ''} already; a goal photo "
                          "is not overwritten (pass --overwrite to replace it)")


def _encode_png(img: np.ndarray, path: Path) -> bytes:
    import cv2

    ok, buf = cv2.imencode(".png", img)
    if not ok:
        raise GoalPhotoError(f"could not encode {path} as PNG")
    return buf.tobytes()


def write_goal_photo(photo: Path | str, goal: GoalPhoto, overwrite: bool = False) -> list[Path]:
    """Write NAME.png (lossless, whatever suffix `photo` has is replaced by .png), NAME.depth.png (when the goal
    has depth) and NAME.json; each through a temporary file renamed into place, so a failed write leaves no half
    file and no earlier file half-replaced.

    Returns:
        The paths written.

    Raises:
        GoalPhotoError: files of the goal photo exist (the photo, its record or a depth file) and `overwrite` is
            False (nothing is written then), or the images are not what a goal photo holds. With `overwrite`, a
            depth file of an earlier capture that this one does not replace is removed.
    """
    photo = Path(photo).with_suffix(".png")
    rgb = np.asarray(goal.rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise GoalPhotoError(f"goal photo must be uint8 (H, W, 3), got {rgb.dtype} {rgb.shape}")
    files: dict[Path, bytes] = {photo: _encode_png(np.ascontiguousarray(rgb[:, :, ::-1]), photo)}
    if goal.depth_m is not None:
        depth = np.asarray(goal.depth_m, dtype=np.float32)
        if depth.shape != rgb.shape[:2]:
            raise GoalPhotoError(f"goal depth {depth.shape} does not match the photo's {rgb.shape[:2]}")
        mm = np.where(np.isfinite(depth) & (depth > 0), np.rint(depth * 1000.0), 0.0)
        files[depth_path_for(photo)] = _encode_png(np.clip(mm, 0, MAX_DEPTH_MM).astype(np.uint16), photo)
    meta = {**goal.meta, "width": int(rgb.shape[1]), "height": int(rgb.shape[0]),
            "depth": goal.depth_m is not None}
    files[meta_path_for(photo)] = (json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
    there = existing_outputs(photo)
    if there and not overwrite:
        raise _exists_error(there)
    replace_files(files)
    for stale in there:
        if stale not in files:   # a depth file of an earlier capture (this one has none, or another kind)
            stale.unlink(missing_ok=True)
    return list(files)
