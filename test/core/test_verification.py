import math

import numpy as np
import pytest

from memnav.core.verification import extract_features, verify_features, verify_pair


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
