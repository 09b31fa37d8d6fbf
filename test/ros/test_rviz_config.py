"""config/memnav.rviz shows topics memnav publishes, each with a display of its message type and compatible QoS."""
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# RViz display class -> message type it shows
DISPLAY_TYPES = {"rviz_default_plugins/Map": "OccupancyGrid", "rviz_default_plugins/Path": "Path",
                 "rviz_default_plugins/MarkerArray": "MarkerArray", "rviz_default_plugins/Odometry": "Odometry",
                 "rviz_default_plugins/Image": "Image"}


def _published() -> dict[str, tuple[str, bool | None, bool | None]]:
    """topic -> (message type, reliable, transient local; None where the source does not say) of memnav's nodes."""
    from memnav.ros.sim_bridge_node import TOPICS

    out = {topic: (mtype.rsplit("/", 1)[-1], rel, lat) for topic, (mtype, rel, lat, _) in TOPICS.items()}
    aliases = {"PathMsg": "Path"}
    for src in (ROOT / "memnav" / "ros").glob("*.py"):
        for mtype, topic, qos in re.findall(r'create_publisher\((\w+), "(/?[a-z][^"]*)", (\w+)', src.read_text()):
            # a history depth alone is rclpy's default: reliable, volatile; `latched` is reliable, transient local
            known = qos.isdigit() or qos == "latched"
            topic = "/" + topic.lstrip("/")   # the nodes' relative names, in the root namespace RViz shows
            out[topic] = (aliases.get(mtype, mtype), True if known else None, qos == "latched" if known else None)
    return out


def test_every_display_shows_a_memnav_topic_of_its_type_in_the_odometry_frame():
    pytest.importorskip("memnav.ros.sim_bridge_node")
    from memnav.ros.memory_node import MemoryNodeConfig

    cfg = yaml.safe_load((ROOT / "config" / "memnav.rviz").read_text())
    manager = cfg["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "odom" == MemoryNodeConfig().frame_id
    published = _published()
    shown = [d for d in manager["Displays"] if "Topic" in d]
    assert {"/memnav/map", "/memnav/plan", "/memnav/search_markers", "/memnav/scene_graph_markers"} <= {
        d["Topic"]["Value"] for d in shown}
    for display in shown:
        topic = display["Topic"]["Value"]
        assert topic in published, f"{display['Name']}: nothing in memnav publishes {topic}"
        mtype, reliable, latched = published[topic]
        assert DISPLAY_TYPES[display["Class"]] == mtype, f"{display['Name']}: {display['Class']} cannot show {mtype}"
        # a reliable reader needs a reliable writer (a best-effort one reads either), a transient-local reader a
        # transient-local writer, and a volatile reader of a latched topic would miss what came before RViz
        qos = display["Topic"]
        assert reliable is not None and latched is not None, f"{topic}: its publisher's QoS is not known here"
        if not reliable:
            assert qos["Reliability Policy"] == "Best Effort", topic
        assert qos["Durability Policy"] == ("Transient Local" if latched else "Volatile"), topic


def test_memnav_rviz_moves_every_display_to_a_namespaced_robots_topics(tmp_path):
    from memnav.cli import main
    from memnav.ros.rviz_command import resolve, rviz_config

    shipped = (ROOT / "config" / "memnav.rviz").read_text()
    out = tmp_path / "robot1.rviz"
    assert main(["rviz", "--namespace", "robot1", "--profile", "robot", "--out", str(out)]) == 0
    made = yaml.safe_load(out.read_text())
    root = yaml.safe_load(shipped)
    published = _published()
    displays = root["Visualization Manager"]["Displays"], made["Visualization Manager"]["Displays"]
    assert len(displays[0]) == len(displays[1])
    pairs = list(zip(*displays))
    for before, after in pairs:
        assert {k: v for k, v in before.items() if k != "Topic"} == {k: v for k, v in after.items() if k != "Topic"}
        if "Topic" not in before:
            continue
        topic = after["Topic"]["Value"]
        assert {k: v for k, v in before["Topic"].items() if k != "Value"} == {
            k: v for k, v in after["Topic"].items() if k != "Value"}   # the same QoS
        assert topic.startswith("/robot1/"), topic
        if before["Name"] == "Camera":   # the robot driver's topic, under the namespace
            assert topic == "/robot1/camera/camera/color/image_raw"
        else:   # what memnav's nodes publish there, as in the root namespace
            assert topic[len("/robot1"):] == before["Topic"]["Value"] and topic[len("/robot1"):] in published
    assert made["Visualization Manager"]["Global Options"] == root["Visualization Manager"]["Global Options"]
    # options: an absolute odometry topic stays as given, relative ones follow the namespace; the root namespace
    # with the simulator's camera gives back the shipped topics
    text = rviz_config(shipped, "/fleet/r2", {"Camera": "cam/rgb", "Odometry": "/wheel/odom"})
    topics = {d["Name"]: d["Topic"]["Value"] for d in yaml.safe_load(text)["Visualization Manager"]["Displays"]
              if "Topic" in d}
    assert topics["Camera"] == "/fleet/r2/cam/rgb" and topics["Odometry"] == "/wheel/odom"
    assert topics["Agent occupancy map"] == "/fleet/r2/memnav/map"
    same = rviz_config(shipped, "/", {"Camera": "camera/color/image_raw", "Odometry": "odom"})
    assert yaml.safe_load(same) == root
    assert resolve("odom", "/") == "/odom" and resolve("/x", "/r1") == "/x"
    with pytest.raises(ValueError, match="no display named 'Lidar'"):
        rviz_config(shipped, "/", {"Lidar": "scan"})
    with pytest.raises(ValueError, match="not an RViz configuration"):
        rviz_config("Panels: []\n", "/", {})
    assert main(["rviz", "--namespace", "9robot"]) == 2   # not a namespace: refused by name


def test_memnav_rviz_moves_displays_in_groups_and_displays_that_share_a_name():
    """A user's --template with displays in a group (rviz_common/Group) left those on the root namespace's topics,
    and of two displays with one name (RViz names a new display after its class) only the last was moved."""
    from memnav.ros.rviz_command import rviz_config

    cfg = yaml.safe_load((ROOT / "config" / "memnav.rviz").read_text())
    displays = cfg["Visualization Manager"]["Displays"]
    displays[3]["Name"] = displays[4]["Name"] = "MarkerArray"
    group = {"Class": "rviz_common/Group", "Name": "memnav", "Enabled": True, "Displays": displays[1:5]}
    cfg["Visualization Manager"]["Displays"] = [displays[0], group, *displays[5:]]
    made = yaml.safe_load(rviz_config(yaml.safe_dump(cfg), "/robot1", {"Camera": "camera/color/image_raw",
                                                                       "Odometry": "odom"}))
    top = made["Visualization Manager"]["Displays"]
    assert [d["Name"] for d in top[1]["Displays"]] == ["Agent occupancy map", "Planned path", "MarkerArray",
                                                       "MarkerArray"]
    topics = [d["Topic"]["Value"] for d in [*top, *top[1]["Displays"]] if "Topic" in d]
    assert len(topics) == 7 and all(t.startswith("/robot1/") for t in topics), topics
    assert "/robot1/memnav/search_markers" in topics and "/robot1/memnav/scene_graph_markers" in topics


@pytest.mark.parametrize("option, topic", [("--odom-topic", "a b"), ("--odom-topic", "1odom"),
                                           ("--odom-topic", "~/odom"), ("--color-topic", "cam//rgb"),
                                           ("--odom-topic", "")])
def test_memnav_rviz_refuses_a_topic_rviz_could_not_subscribe_to(option, topic, tmp_path, capsys):
    """`--odom-topic "a b"` wrote a display of topic "/a b", `~/odom` one of "/~/odom"."""
    from memnav.cli import main

    out = tmp_path / "robot.rviz"
    assert main(["rviz", option, topic, "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"memnav rviz: error: {option}: not a topic name: {topic!r}")
    assert not out.exists()
