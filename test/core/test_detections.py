import math

import numpy as np
import pytest

from memnav.core.detections import detections_from_semantic
from memnav.core.types import Pose2D


def test_object_position_back_projected_into_odometry_frame():
    h = w = 64
    f = 32.0  # hfov 90 deg
    sem = np.zeros((h, w), np.int32)
    depth = np.full((h, w), 3.0, np.float32)
    sem[30:34, 30:34] = 7            # centre of the image, 2 m ahead
    depth[30:34, 30:34] = 2.0
    sem[0:3, 0:3] = 9                # too few pixels (9 < 10)
    dets = detections_from_semantic(sem, depth, Pose2D(1.0, 2.0, math.pi / 2), f, 1.25,
                                    classes={7: (3, "chair")}, min_pixels=10)
    assert len(dets) == 1
    d = dets[0]
    assert d.instance_id == 7 and d.class_id == 3 and d.label == "chair"
    # facing +y: 2 m ahead of (1, 2) is (1, 4); the centre row is at camera height
    assert d.position_m[0] == pytest.approx(1.0, abs=0.05)
    assert d.position_m[1] == pytest.approx(4.0, abs=0.05)
    assert d.position_m[2] == pytest.approx(1.25, abs=0.1)


def test_no_objects_and_bad_shapes():
    assert detections_from_semantic(np.zeros((4, 4), int), np.ones((4, 4), np.float32), Pose2D(0, 0, 0), 2.0, 1.0) == []
    with pytest.raises(ValueError, match="same"):
        detections_from_semantic(np.zeros((4, 4), int), np.ones((4, 5), np.float32), Pose2D(0, 0, 0), 2.0, 1.0)
