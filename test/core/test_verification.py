import math

import numpy as np
import pytest

from memnav.core.verification import VerificationConfig, extract_features, verify_features, verify_pair


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    from memnav.sim.embedded import EmbeddedSimulator
    from memnav.sim.houses import generate_house, write_house

    glb = write_house(generate_house(2), tmp_path_factory.mktemp("house"))
    sim = EmbeddedSimulator(glb)
    rng = np.random.default_rng(4)
    out = []
    while len(out) < 6:
        p = sim.sample_navigable_point()
        q = p + np.array([0.15, 0.0, 0.1])
        far = sim.sample_navigable_point()
        if not sim.is_navigable(q) or np.linalg.norm(far - p) < 3.0:
            continue
        yaw = float(rng.uniform(-math.pi, math.pi))
        out.append((sim.render_at(p, yaw).rgb, sim.render_at(q, yaw + 0.1).rgb,
                    sim.render_at(far, yaw + 2.0).rgb))
    return out


def test_same_place_scores_higher_than_other_places(views):
    same = [verify_pair(a, b).score for a, b, _ in views]
    other = [verify_pair(a, c).score for a, _, c in views]
    assert np.median(same) > np.median(other) + 0.3
    # robust to a global brightness change
    a, b, _ = views[0]
    bright = np.clip(b.astype(int) * 13 // 10, 0, 255).astype(np.uint8)
    assert verify_pair(a, bright).inliers >= 0.5 * verify_pair(a, b).inliers


def test_cached_features_and_bad_input(views):
    a, b, _ = views[0]
    fa, fb = extract_features(a), extract_features(b)
    assert fa.keypoints.shape[1] == 2 and fa.descriptors.dtype == np.uint8
    assert verify_features(fa, fb).score == verify_pair(a, b).score
    blank = np.zeros((64, 64, 3), np.uint8)
    assert verify_pair(blank, a).score == 0.0
    with pytest.raises(ValueError, match="uint8"):
        extract_features(np.zeros((64, 64, 3), np.float32))


def test_images_are_scaled_until_their_longer_side_is_the_working_size():
    """ORB sees a 192 x 108 image at 256 x 144 (the pixels per degree a square image of its width gets), and a
    camera's 640 x 360 one shrunk to 256 x 144, with the keypoints given back in the image's own pixels;
    max_side_px 0 matches large images as they are."""
    import cv2

    rng = np.random.default_rng(0)
    img = cv2.resize(rng.integers(0, 255, (27, 48), dtype=np.uint8), (192, 108), interpolation=cv2.INTER_NEAREST)
    own = extract_features(img)
    by_hand = extract_features(cv2.resize(img, None, fx=256 / 192, fy=256 / 192, interpolation=cv2.INTER_LINEAR))
    assert len(own.keypoints) > 50
    assert np.allclose(own.keypoints, by_hand.keypoints * (192 / 256), atol=1e-3)
    assert np.array_equal(own.descriptors, by_hand.descriptors)
    assert own.keypoints[:, 0].max() < 192 and own.keypoints[:, 1].max() < 108
    big = cv2.resize(img, (640, 360), interpolation=cv2.INTER_LINEAR)
    shrunk = extract_features(big)
    by_hand = extract_features(cv2.resize(big, (256, 144), interpolation=cv2.INTER_AREA))
    assert len(shrunk.keypoints) > 50 and np.array_equal(shrunk.descriptors, by_hand.descriptors)
    assert np.allclose(shrunk.keypoints, by_hand.keypoints * (640 / 256), atol=1e-3)
    assert shrunk.keypoints[:, 0].max() > 400   # in the 640 x 360 image's pixels
    as_it_is = extract_features(big, VerificationConfig(max_side_px=0))
    assert np.array_equal(as_it_is.descriptors, extract_features(big, VerificationConfig(upscale_to_px=640,
                                                                                         max_side_px=640)).descriptors)
    assert not np.array_equal(as_it_is.descriptors[:50], shrunk.descriptors[:50])
    with pytest.raises(ValueError, match="max_side_px"):
        VerificationConfig(max_side_px=128)   # below upscale_to_px: the two would fight


def test_the_ransac_threshold_is_in_pixels_as_matched_so_image_size_does_not_move_the_score(views):
    """A pair of views at 512 x 512 (matched shrunk to 256) keeps about the inliers the same pair has at 128 x 128
    (matched upscaled to 256): `ransac_px` counts pixels of the images as matched, 2 of them being 1 pixel of a
    128 x 128 view and 4 of a 512 x 512 one. Held to 1 pixel of its own, the large pair lost inliers."""
    import cv2

    small, large, held_to_own_pixel = [], [], []
    for a, b, _ in views:
        fa, fb = extract_features(a), extract_features(b)
        assert fa.scale == 2.0
        small.append(verify_features(fa, fb).inliers)
        big = [cv2.resize(x, (512, 512), interpolation=cv2.INTER_LINEAR) for x in (a, b)]
        ga, gb = (extract_features(x) for x in big)
        assert ga.scale == 0.5 and ga.keypoints[:, 0].max() > 256   # keypoints in the 512 image's own pixels
        large.append(verify_features(ga, gb).inliers)
        held_to_own_pixel.append(verify_features(ga, gb, VerificationConfig(ransac_px=0.5)).inliers)
    assert sum(large) >= 0.85 * sum(small), (small, large)
    assert sum(held_to_own_pixel) < 0.85 * sum(large), (held_to_own_pixel, large)


def test_matches_no_fundamental_matrix_explains_hold_no_inliers():
    """24 matches that all map one pixel onto another (no epipolar geometry to fit): OpenCV finds no model and hands
    back a mask it never filled in; the pair is scored 0, not by the mask's leftover bytes (which once summed to
    a full score for two different rooms)."""
    import cv2

    from memnav.core.verification import Features

    none = Features(np.zeros((0, 2), np.float32), np.zeros((0, 32), np.uint8))
    for pa, pb in ((np.tile(np.float32([[10, 20]]), (24, 1)), np.tile(np.float32([[30, 40]]), (24, 1))),
                   (np.float32([[i, 2 * i] for i in range(24)]), np.float32([[i, 3 * i] for i in range(24)]))):
        fundamental, _ = cv2.findFundamentalMat(pa, pb, cv2.FM_RANSAC, 1.0, 0.99)
        assert fundamental is None or fundamental.size == 0   # the case this test is about
        result = verify_features(none, none, matches=(pa, pb))
        assert (result.score, result.inliers, result.matches) == (0.0, 0, 24)
