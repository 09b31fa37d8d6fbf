"""House rules that keep the layers apart."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROS_IMPORT = re.compile(r"^\s*(import|from)\s+(rclpy|[a-z_]+_msgs)\b", re.MULTILINE)


def test_core_and_sim_never_import_ros():
    offenders = []
    for folder in ("memnav/core", "memnav/sim"):
        for path in (ROOT / folder).rglob("*.py"):
            if ROS_IMPORT.search(path.read_text()):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], f"ROS imports belong in memnav/ros only: {offenders}"


def test_package_files_present():
    for rel in ("package.xml", "setup.py", "setup.cfg", "resource/memnav", "Makefile", ".ci/run"):
        assert (ROOT / rel).exists(), rel
    xml = (ROOT / "package.xml").read_text()
    assert 'format="3"' in xml
    for dep in ("rclpy", "sensor_msgs", "geometry_msgs", "nav_msgs", "std_msgs", "visualization_msgs", "std_srvs",
                "diagnostic_msgs"):
        assert f"<exec_depend>{dep}</exec_depend>" in xml
