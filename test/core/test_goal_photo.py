"""Goal photos on disk: what `memnav goal capture` writes is what `memnav goal send` reads, and bad files are named."""
import json

import cv2
import numpy as np
import pytest
from conftest import file_sha256

from memnav.core.goal_photo import (
    GoalPhoto,
    GoalPhotoError,
    depth_path_for,
    existing_outputs,
    meta_path_for,
    read_goal_photo,
    write_goal_photo,
)


def _goal(h: int = 48, w: int = 64, seed: int = 0) -> GoalPhoto:
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    depth = rng.uniform(0.3, 8.0, (h, w)).astype(np.float32)
    depth[0, :5] = 0.0           # no reading
    depth[1, 0] = np.nan         # no reading either
    return GoalPhoto(rgb, depth, {"stamp_ns": 123, "color_topic": "/c"})


def test_write_then_read_gives_the_same_photo_depth_to_the_millimetre_and_the_record(tmp_path):
    goal = _goal()
    written = write_goal_photo(tmp_path / "kitchen.png", goal)
    assert written == [tmp_path / "kitchen.png", tmp_path / "kitchen.depth.png", tmp_path / "kitchen.json"]
    back = read_goal_photo(tmp_path / "kitchen.png")   # the depth beside it is found by name
    np.testing.assert_array_equal(back.rgb, goal.rgb)
    expected = np.where(np.isfinite(goal.depth_m) & (goal.depth_m > 0), np.round(goal.depth_m * 1000) / 1000, 0)
    np.testing.assert_allclose(back.depth_m, expected, atol=1e-6)
    assert back.depth_m[0, 0] == 0.0 and back.depth_m[1, 0] == 0.0
    assert back.meta["stamp_ns"] == 123 and back.meta["width"] == 64 and back.meta["height"] == 48
    assert back.meta["depth"] is True and back.meta["depth_file"] == str(tmp_path / "kitchen.depth.png")
    # the photo's channels are stored in the right order: a PNG viewer shows red as red
    bgr = cv2.imread(str(tmp_path / "kitchen.png"))
    np.testing.assert_array_equal(bgr[:, :, ::-1], goal.rgb)
    # and the depth PNG is the 16-bit millimetre image camera drivers write
    mm = cv2.imread(str(depth_path_for(tmp_path / "kitchen.png")), cv2.IMREAD_UNCHANGED)
    assert mm.dtype == np.uint16 and mm.shape == (48, 64)


def test_a_photo_alone_any_format_reads_without_depth_and_find_depth_can_be_refused(tmp_path):
    yy, xx = np.mgrid[0:40, 0:50]
    rgb = np.stack([xx * 5, yy * 6, np.full_like(xx, 90)], axis=2).astype(np.uint8)   # smooth: jpeg keeps it
    cv2.imwrite(str(tmp_path / "phone.jpg"), rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 100])
    back = read_goal_photo(tmp_path / "phone.jpg")
    assert back.depth_m is None and back.meta == {} and back.rgb.shape == (40, 50, 3)
    assert np.abs(back.rgb.astype(int) - rgb).mean() < 4   # jpeg, near lossless
    grey = tmp_path / "grey.png"
    cv2.imwrite(str(grey), rgb[:, :, 0])
    assert read_goal_photo(grey).rgb.shape == (40, 50, 3)
    write_goal_photo(tmp_path / "g.png", _goal())
    assert read_goal_photo(tmp_path / "g.png", find_depth=False).depth_m is None


def test_depth_as_npy_metres_is_read_and_checked(tmp_path):
    goal = _goal()
    write_goal_photo(tmp_path / "g.png", GoalPhoto(goal.rgb))
    depth = np.full((48, 64), 2.5, np.float32)
    depth[3, 3] = np.inf
    np.save(tmp_path / "g.depth.npy", depth)
    back = read_goal_photo(tmp_path / "g.png")
    assert back.depth_m[0, 0] == pytest.approx(2.5) and back.depth_m[3, 3] == 0.0
    np.save(tmp_path / "neg.npy", -depth)
    with pytest.raises(GoalPhotoError, match=r"neg\.npy has negative depths"):
        read_goal_photo(tmp_path / "g.png", tmp_path / "neg.npy")
    np.save(tmp_path / "ints.npy", np.ones((48, 64), np.int32))
    with pytest.raises(GoalPhotoError, match=r"ints\.npy must be a 2-D float array of metres"):
        read_goal_photo(tmp_path / "g.png", tmp_path / "ints.npy")


@pytest.mark.parametrize("case", ["missing", "folder", "empty", "text", "tiny"])
def test_a_bad_photo_is_named(tmp_path, case):
    path = tmp_path / "goal.png"
    if case == "folder":
        path.mkdir()
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "text":
        path.write_text("not an image")
    elif case == "tiny":
        cv2.imwrite(str(path), np.zeros((4, 4, 3), np.uint8))
    expected = {"missing": "does not exist", "folder": "is not a file", "empty": "is empty",
                "text": "is not an image OpenCV can read", "tiny": "too small"}[case]
    with pytest.raises(GoalPhotoError, match=expected) as err:
        read_goal_photo(path)
    assert str(path) in str(err.value)


def test_a_record_with_nan_or_infinity_is_refused_by_name(tmp_path):
    """JSON has no NaN or Infinity (the writer never writes them); a hand-edited record holding one is refused
    naming the file, instead of a NaN capture pose reaching `goal send`'s report."""
    path = tmp_path / "goal.png"
    write_goal_photo(path, _goal())
    for constant in ("NaN", "Infinity", "-Infinity"):
        meta_path_for(path).write_text('{"odom_pose": {"x_m": ' + constant + ', "y_m": 1.0, "yaw_rad": 0.0}}')
        with pytest.raises(GoalPhotoError, match=f"{meta_path_for(path)} is not JSON: {constant} is not a JSON"):
            read_goal_photo(path)


def test_a_bad_depth_is_named(tmp_path):
    goal = _goal()
    write_goal_photo(tmp_path / "g.png", GoalPhoto(goal.rgb))
    cv2.imwrite(str(tmp_path / "small.png"), np.ones((10, 10), np.uint16))
    with pytest.raises(GoalPhotoError, match=r"small\.png is 10x10 px but the photo is 64x48"):
        read_goal_photo(tmp_path / "g.png", tmp_path / "small.png")
    cv2.imwrite(str(tmp_path / "eight.png"), np.ones((48, 64), np.uint8))
    with pytest.raises(GoalPhotoError, match=r"eight\.png must be a one-channel 16-bit image of millimetres"):
        read_goal_photo(tmp_path / "g.png", tmp_path / "eight.png")
    with pytest.raises(GoalPhotoError, match=r"nowhere\.png does not exist"):
        read_goal_photo(tmp_path / "g.png", tmp_path / "nowhere.png")
    meta_path_for(tmp_path / "g.png").write_text("{broken")
    with pytest.raises(GoalPhotoError, match=r"g\.json is not JSON"):
        read_goal_photo(tmp_path / "g.png")


def test_an_earlier_capture_is_not_overwritten_unless_asked_and_its_stale_depth_goes_with_it(tmp_path):
    first = _goal(seed=1)
    write_goal_photo(tmp_path / "spot.png", first)
    before = {p: file_sha256(p) for p in existing_outputs(tmp_path / "spot.png")}
    assert len(before) == 3
    with pytest.raises(GoalPhotoError, match="not overwritten"):
        write_goal_photo(tmp_path / "spot.png", _goal(seed=2))
    assert {p: file_sha256(p) for p in existing_outputs(tmp_path / "spot.png")} == before
    # a stale depth file alone also counts: it would be read as the new photo's depth
    (tmp_path / "lone.depth.npy").write_bytes(b"x")
    with pytest.raises(GoalPhotoError, match=r"lone\.depth\.npy exists already"):
        write_goal_photo(tmp_path / "lone.png", GoalPhoto(first.rgb))
    # replacing with a colour-only capture removes the old depth, so it cannot pair with the new photo
    second = GoalPhoto(_goal(seed=3).rgb, None, {"stamp_ns": 9})
    assert write_goal_photo(tmp_path / "spot.png", second, overwrite=True) == [tmp_path / "spot.png",
                                                                                tmp_path / "spot.json"]
    assert not depth_path_for(tmp_path / "spot.png").exists()
    back = read_goal_photo(tmp_path / "spot.png")
    np.testing.assert_array_equal(back.rgb, second.rgb)
    assert back.depth_m is None and json.loads((tmp_path / "spot.json").read_text())["stamp_ns"] == 9
    assert not list(tmp_path.glob(".*tmp*"))   # no temporary file left behind


def test_write_refuses_what_is_not_a_goal_photo_and_writes_nothing(tmp_path):
    with pytest.raises(GoalPhotoError, match="uint8"):
        write_goal_photo(tmp_path / "a.png", GoalPhoto(np.zeros((8, 8), np.float32)))
    with pytest.raises(GoalPhotoError, match="does not match"):
        write_goal_photo(tmp_path / "a.png", GoalPhoto(np.zeros((8, 8, 3), np.uint8), np.zeros((4, 4), np.float32)))
    assert list(tmp_path.iterdir()) == []
