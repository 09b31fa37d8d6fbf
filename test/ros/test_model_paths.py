"""Model parameters: relative paths resolve under the package root, then the working directory."""
import pytest

from memnav.ros.model_paths import PACKAGE_ROOT, resolve_model_path


def test_relative_paths_prefer_the_package_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("models/stop_calibration.json", "calibration") == \
        PACKAGE_ROOT / "models" / "stop_calibration.json"
    (tmp_path / "mine.pt").write_bytes(b"x")
    assert resolve_model_path("mine.pt", "checkpoint") == tmp_path / "mine.pt"
    assert resolve_model_path(str(tmp_path / "mine.pt"), "checkpoint") == tmp_path / "mine.pt"


def test_missing_files_name_the_parameter_and_the_places_looked_at(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'checkpoint'.*nothing\.pt.*looked at"):
        resolve_model_path("nothing.pt", "checkpoint")
    with pytest.raises(FileNotFoundError, match="empty"):
        resolve_model_path("", "calibration")


def test_a_folder_for_a_file_and_a_file_for_a_folder_are_named_as_such(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'calibration'.*is a directory, not a model file"):
        resolve_model_path(str(tmp_path), "calibration")
    assert resolve_model_path("models", "policy_dir", folder=True) == PACKAGE_ROOT / "models"
    with pytest.raises(FileNotFoundError, match=r"'policy_dir'.*is a file, not a model folder"):
        resolve_model_path("models/encoder.pt", "policy_dir", folder=True)
