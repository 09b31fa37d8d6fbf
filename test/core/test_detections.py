import json
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


def test_detections_json_round_trip_and_bad_fields_are_named():
    from memnav.core.detections import detections_from_dict, detections_to_dict
    from memnav.core.memory import ObjectDetection

    dets = [ObjectDetection(3, (1.0, -2.5, 0.4), instance_id=17, label="chair"),
            ObjectDetection(5, (0.0, 0.0, 1.0), instance_id=None, label="")]
    body = json.loads(json.dumps(detections_to_dict(123, dets)))
    assert detections_from_dict(body) == (123, dets)
    for bad, field in ((["x"], "JSON object"), ({"objects": []}, "stamp_ns"), ({"stamp_ns": 1}, "objects"),
                       ({"stamp_ns": 1, "objects": [{"class_id": "a", "position_m": [0, 0, 0]}]}, "class_id"),
                       ({"stamp_ns": 1, "objects": [{"class_id": 1, "position_m": [0, float("nan"), 0]}]},
                        "position_m"),
                       ({"stamp_ns": 1, "objects": [{"class_id": 1, "instance_id": 1.5, "position_m": [0, 0, 0]}]},
                        "instance_id")):
        with pytest.raises(ValueError, match=field):
            detections_from_dict(bad)
