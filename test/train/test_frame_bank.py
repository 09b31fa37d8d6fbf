"""Rendered frame banks for encoder training: positives inside, near misses just outside the same-place criterion."""
import math

import numpy as np
import pytest
from conftest import make_tiny_dataset

from memnav.core.encoder import EncoderConfig
from memnav.core.frames import pose2d_from_habitat
from memnav.sim.base import SimConfig
from memnav.sim.embedded import EmbeddedSimulator
from memnav.train.frame_bank import houses_of_split, near_miss_pose, recall_at_1, recall_at_k, render_set, same_place


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("bank") / "houses", houses=2, seed=3)


def test_near_miss_poses_are_navigable_and_never_the_same_place(tiny_data):
    sim = EmbeddedSimulator(config=SimConfig(seed=0))
    sim.load_scene(houses_of_split(tiny_data, "train")[0])
    rng = np.random.default_rng(0)
    anchors, misses, along_axis, turned = [], [], 0, 0
    for _ in range(200):
        pos, yaw = sim.sample_navigable_point(), float(rng.uniform(-math.pi, math.pi))
        q, qyaw = near_miss_pose(sim, pos, yaw, rng)
        assert sim.is_navigable(q)
        anchors.append(np.array(pose2d_from_habitat(pos, yaw)))
        misses.append(np.array(pose2d_from_habitat(q, qyaw)))
        a, b = anchors[-1], misses[-1]
        dist = math.hypot(a[0] - b[0], a[1] - b[1])
        dyaw = abs((a[2] - b[2] + math.pi) % (2 * math.pi) - math.pi)
        if dist >= 1.15:
            heading = np.array([math.cos(a[2]), math.sin(a[2])])
            along_axis += abs(float(heading @ (b[:2] - a[:2]))) / dist > 0.999
        else:
            assert dist <= 0.3 + 1e-9 and math.radians(40) - 1e-9 <= dyaw <= math.radians(75) + 1e-9
            turned += 1
    anchors, misses = np.asarray(anchors), np.asarray(misses)
    house = np.zeros(len(anchors), dtype=int)
    # each near miss lies outside 1 m / 30 deg of its own anchor
    assert not np.diag(same_place(anchors, misses, house, house)).any()
    # both kinds occur, and displaced ones often lie along the viewing axis (where views differ least)
    assert 20 <= turned <= 100 and along_axis >= 30


def test_render_set_returns_anchor_positive_and_near_miss_views(tiny_data):
    houses = houses_of_split(tiny_data, "train")
    cfg = EncoderConfig()
    main, pos, neg = render_set(houses, 6, cfg, seed=1, pair_jitter=(0.5, math.radians(15)), near_miss=True,
                                progress=False)
    for fs in (main, pos, neg):
        assert fs.frames.shape == (6, 4, cfg.input_px, cfg.input_px) and fs.frames.dtype == np.float16
        assert fs.poses.shape == (6, 3) and list(fs.house) == [0] * 6
    assert np.diag(same_place(main.poses, pos.poses, main.house, pos.house)).all()
    assert not np.diag(same_place(main.poses, neg.poses, main.house, neg.house)).any()
    # without the extra views the anchors are drawn exactly as before (same seed, same poses)
    only, none_pos, none_neg = render_set(houses, 6, cfg, seed=1, progress=False)
    assert none_pos is None and none_neg is None
    np.testing.assert_allclose(only.poses, main.poses)
    np.testing.assert_array_equal(only.frames, main.frames)


def test_render_set_near_miss_bands_and_renderer(tiny_data):
    houses = houses_of_split(tiny_data, "train")
    cfg = EncoderConfig()
    main, _, neg = render_set(houses, 40, cfg, seed=3, near_miss=True, near_miss_m=(1.0, 1.3),
                              near_miss_turn_deg=(31.0, 35.0), progress=False)
    dist = np.hypot(*(neg.poses[:, :2] - main.poses[:, :2]).T)
    turn = np.degrees(np.abs((neg.poses[:, 2] - main.poses[:, 2] + np.pi) % (2 * np.pi) - np.pi))
    moved = dist > 0.31
    assert moved.sum() >= 15 and (~moved).sum() >= 3      # both kinds, 3 in 4 moved
    assert np.all((dist[moved] >= 1.0 - 1e-6) & (dist[moved] <= 1.3 + 1e-6))
    assert np.all((turn[~moved] >= 31.0 - 1e-3) & (turn[~moved] <= 35.0 + 1e-3))
    # the two ray casters see the same poses, and their frames differ on a small fraction of pixels
    bvh, _, _ = render_set(houses, 6, cfg, seed=1, keep_rgb=True, progress=False, renderer="bvh")
    obj, _, _ = render_set(houses, 6, cfg, seed=1, keep_rgb=True, progress=False, renderer="object")
    np.testing.assert_array_equal(bvh.poses, obj.poses)
    differ = np.abs(bvh.rgb.astype(int) - obj.rgb.astype(int)).max(axis=-1) > 8
    assert differ.mean() < 0.01


def test_render_set_sees_the_same_poses_through_another_camera_and_a_central_crop_stands_in_for_a_narrower_one(
        tiny_data):
    import torch

    from memnav.train.encoder_train import crop_fov

    houses = houses_of_split(tiny_data, "train")
    cfg = EncoderConfig()
    wide = render_set(houses, 12, cfg, seed=5, progress=False)[0]
    narrow = render_set(houses, 12, cfg, seed=5, progress=False, camera={"hfov_deg": 60.0})[0]
    low = render_set(houses, 12, cfg, seed=5, progress=False, camera={"sensor_height_m": 0.4})[0]
    np.testing.assert_array_equal(wide.poses, narrow.poses)
    np.testing.assert_array_equal(wide.poses, low.poses)
    frames = [torch.from_numpy(s.frames.astype(np.float32)) for s in (wide, narrow, low)]
    assert not torch.equal(frames[0], frames[1]) and not torch.equal(frames[0], frames[2])
    # the centre of a 90 deg view, enlarged, is what a 60 deg camera at the same pose sees (up to resampling):
    # far closer to it than the 90 deg view itself, and a 60 deg crop of a lower camera's view does not match it
    cropped = crop_fov(frames[0], 60.0)
    assert cropped.shape == frames[0].shape and crop_fov(frames[0], 90.0) is frames[0]

    def rgb_gap(a, b):
        return float((a[:, :3] - b[:, :3]).abs().mean())

    assert rgb_gap(cropped, frames[1]) < 0.5 * rgb_gap(frames[0], frames[1])
    assert rgb_gap(cropped, frames[1]) < 0.5 * rgb_gap(crop_fov(frames[2], 60.0), frames[1])
    # depth is resampled, never blended: every cropped reading is one the wide view had
    assert set(np.unique(cropped[:, 3].numpy())) <= set(np.unique(frames[0][:, 3].numpy()))


def test_a_crop_of_fewer_rows_stretched_square_stands_in_for_a_wide_image_camera(tiny_data):
    import torch

    from memnav.train.encoder_train import crop_fov

    houses = houses_of_split(tiny_data, "train")
    cfg = EncoderConfig()
    wide = render_set(houses, 12, cfg, seed=5, progress=False)[0]
    # a 16:9 60 deg camera at the same poses, its frames stretched to the encoder's square input
    sixteen_nine = render_set(houses, 12, cfg, seed=5, progress=False,
                              camera={"hfov_deg": 60.0, "width_px": 192, "height_px": 108})[0]
    frames = [torch.from_numpy(s.frames.astype(np.float32)) for s in (wide, sixteen_nine)]

    def rgb_gap(a, b):
        return float((a[:, :3] - b[:, :3]).abs().mean())

    stretched = crop_fov(frames[0], 60.0, aspect=192 / 108)
    assert stretched.shape == frames[0].shape
    assert rgb_gap(stretched, frames[1]) < 0.6 * rgb_gap(crop_fov(frames[0], 60.0), frames[1])
    # at the full field of view only the rows are cropped: each column holds the middle half of the same column
    rows_only = crop_fov(frames[0], 90.0, aspect=2.0)
    assert rows_only is not frames[0]
    p = frames[0].shape[-1]
    middle = frames[0][:, :3, p // 4:3 * p // 4].mean(dim=2)
    assert float((rows_only[:, :3].mean(dim=2) - middle).abs().max()) < 0.03
    assert float((frames[0][:, :3].mean(dim=2) - middle).abs().max()) > 0.1


def test_recall_at_k_counts_a_true_match_among_the_k_nearest_and_skips_queries_without_one():
    db = np.eye(4)
    q = np.array([[1.0, 0.9, 0.0, 0.0],      # nearest db 0 (a match)
                  [0.0, 1.0, 0.8, 0.7],      # ranks 1, 2, 3: only db 3 matches
                  [0.0, 0.0, 1.0, 0.0]])     # no true match at all: not counted
    match = np.array([[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=bool)
    assert recall_at_1(db, q, match) == (0.5, 2)
    assert recall_at_k(db, q, match, 2) == (0.5, 2)
    assert recall_at_k(db, q, match, 3) == (1.0, 2)
    r, n = recall_at_k(db, q, np.zeros((3, 4), dtype=bool), 5)
    assert math.isnan(r) and n == 0


def test_render_set_workers_give_each_house_its_own_stream_whatever_their_number(tiny_data):
    """workers >= 1: the frames depend on the seed and the houses alone (1 worker in this process, 2 in
    spawned processes, the same frames); workers = 0 keeps the single stream of earlier runs."""
    houses = sorted((tiny_data / "scenes").glob("*.glb"))[:2]
    cfg = EncoderConfig()
    kw = {"pair_jitter": (0.5, math.radians(15)), "near_miss": True, "progress": False, "keep_rgb": True}
    one = render_set(houses, 5, cfg, seed=4, workers=1, **kw)
    two = render_set(houses, 5, cfg, seed=4, workers=2, **kw)
    serial = render_set(houses, 5, cfg, seed=4, **kw)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a.frames, b.frames)
        np.testing.assert_array_equal(a.poses, b.poses)
        assert list(a.house) == [0] * 5 + [1] * 5
    np.testing.assert_array_equal(one[0].rgb, two[0].rgb)
    np.testing.assert_array_equal(one[0].median_depth_m, two[0].median_depth_m)
    # the first house's stream differs from the serial run's; positives and near misses keep their meaning
    assert not np.array_equal(one[0].poses, serial[0].poses)
    main, pos, neg = one
    assert np.diag(same_place(main.poses, pos.poses, main.house, pos.house)).all()
    assert not np.diag(same_place(main.poses, neg.poses, main.house, neg.house)).any()
    # a house's frames do not depend on which other houses are rendered beside it
    alone = render_set(houses[:1], 5, cfg, seed=4, workers=1, **kw)[0]
    np.testing.assert_array_equal(alone.frames, main.frames[:5])
    with pytest.raises(ValueError, match="workers must be >= 0"):
        render_set(houses, 5, cfg, seed=4, workers=-1, progress=False)
