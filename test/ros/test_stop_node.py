"""stop_node's calibration loading and config validation (the node itself runs in test_stack_nodes.py)."""
import json

import pytest

from memnav.ros.model_paths import PACKAGE_ROOT
from memnav.ros.stop_node import FEATURES, StopNodeConfig, load_calibrator


def test_shipped_calibration_uses_the_node_features():
    cal = load_calibrator(PACKAGE_ROOT / "models" / "stop_calibration.json")
    assert cal.feature_names == FEATURES
    near, far = cal.predict([0.95, 1.0])[0], cal.predict([0.2, 0.0])[0]
    assert 0.0 <= far < near <= 1.0


def test_other_calibrations_are_refused(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"feature_names": ["similarity"], "weights": [1.0, 0.0]}))
    with pytest.raises(ValueError, match=r"one\.json.*features \('similarity',\)"):
        load_calibrator(one)
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    with pytest.raises(ValueError, match="not a stop calibration"):
        load_calibrator(junk)


def test_config_validation():
    with pytest.raises(ValueError, match="verify_min_similarity"):
        StopNodeConfig(verify_min_similarity=1.5)
    with pytest.raises(ValueError, match="image_queue_size"):
        StopNodeConfig(image_queue_size=0)
