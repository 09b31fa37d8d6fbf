"""memnav.eval.bag_io: rosbag2 folders (metadata versions 5-9, sqlite3 and mcap), bare .mcap/.db3 files from
independent writers, damaged and foreign files, and the guarantee that reading never modifies the input."""
from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from memnav.eval.bag_io import BagError, BagFile, BagWriter, UnknownTypeError, qos_profile, typestore_for_distro

STORE = typestore_for_distro("kilted")
T = STORE.types
QOS_V5 = ("- history: 3\n  depth: 0\n  reliability: 1\n  durability: 2\n  deadline:\n    sec: 9223372036\n"
          "    nsec: 854775807\n  lifespan:\n    sec: 9223372036\n    nsec: 854775807\n  liveliness: 1\n"
          "  liveliness_lease_duration:\n    sec: 9223372036\n    nsec: 854775807\n"
          "  avoid_ros_namespace_conventions: false")


def _header(stamp_ns: int, frame: str = "map"):
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9,
                                                                        nanosec=stamp_ns % 10**9), frame_id=frame)


def image(i: int, size: int = 8):
    return T["sensor_msgs/msg/Image"](header=_header(10**9 + i * 10**8, "cam"), height=size, width=size,
                                      encoding="rgb8", is_bigendian=0, step=size * 3,
                                      data=np.full(size * size * 3, i % 256, np.uint8))


def odom(i: int):
    vec = T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0)
    pose = T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=0.1 * i, y=-0.2 * i, z=0.0),
                                       orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
    return T["nav_msgs/msg/Odometry"](
        header=_header(10**9 + i * 10**8, "odom"), child_frame_id="base_link",
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=T["geometry_msgs/msg/Twist"](linear=vec, angular=vec),
                                                         covariance=np.zeros(36)))


def raw_messages(n: int = 10) -> list[tuple[str, str, int, bytes]]:
    out = []
    for i in range(n):
        t = 10**9 + i * 10**8
        out.append(("/camera/color/image_raw", "sensor_msgs/msg/Image", t,
                    bytes(STORE.serialize_cdr(image(i), "sensor_msgs/msg/Image"))))
        out.append(("/odom", "nav_msgs/msg/Odometry", t + 1,
                    bytes(STORE.serialize_cdr(odom(i), "nav_msgs/msg/Odometry"))))
    return out


def tree_digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def read_all(path: Path, **kw) -> tuple[BagFile, list]:
    before = tree_digest(path)
    listing = sorted(path.parent.iterdir())
    with BagFile(path, **kw) as bag:
        msgs = list(bag.messages())
    assert tree_digest(path) == before, "reading modified the bag"
    assert sorted(path.parent.iterdir()) == listing, "reading created files next to the bag"
    return bag, msgs


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_writer_round_trip_keeps_bytes_types_and_qos(tmp_path, storage):
    msgs = raw_messages()
    with BagWriter(tmp_path / "bag", storage) as w:
        w.add_topic("/camera/color/image_raw", "sensor_msgs/msg/Image", [qos_profile(False, False, 5)])
        w.add_topic("/odom", "nav_msgs/msg/Odometry", [qos_profile(True, True, 1)])
        for topic, _, t, raw in msgs:
            w.write_raw(topic, t, raw)
    meta = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 8 and meta["storage_identifier"] == storage and meta["message_count"] == 20
    bag, got = read_all(tmp_path / "bag")
    assert [(m.topic, m.log_time_ns, m.raw) for m in got] == [(t, lt, r) for t, _, lt, r in msgs]
    assert got[2].msg.data.tolist() == [1] * 8 * 8 * 3 and got[3].msg.pose.pose.position.x == pytest.approx(0.1)
    assert bag.counts.read == {"/camera/color/image_raw": 10, "/odom": 10} and not bag.counts.truncated
    topics = bag.topics
    assert topics["/odom"].qos[0].durability.name == "TRANSIENT_LOCAL"
    assert topics["/camera/color/image_raw"].qos[0].reliability.name == "BEST_EFFORT"
    assert bag.describe()["format"] == "rosbag2" and bag.storage == storage
    with pytest.raises(BagError, match="exists already"):
        BagWriter(tmp_path / "bag")


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_writer_that_fails_before_its_first_message_removes_its_folder(tmp_path, storage):
    (tmp_path / "sibling.txt").write_text("kept")
    # opening: the folder is made, then its storage file's name is too long for the file system
    long_name = tmp_path / ("n" * 253)
    with pytest.raises(OSError if storage == "mcap" else BagError, match="too long|unable to open"):
        BagWriter(long_name, storage)
    assert not long_name.exists()
    # the first message: of a type no definition is known for, or not the type it is written as
    with pytest.raises(UnknownTypeError, match="nope_msgs/msg/Nope"), BagWriter(tmp_path / "unknown", storage) as w:
        w.write("/x", T["std_msgs/msg/String"](data="x"), 1, msgtype="nope_msgs/msg/Nope")
    assert not (tmp_path / "unknown").exists()
    with pytest.raises(AttributeError), BagWriter(tmp_path / "mistyped", storage) as w:
        w.write("/image", T["std_msgs/msg/String"](data="x"), 1, msgtype="sensor_msgs/msg/Image")
    assert not (tmp_path / "mistyped").exists()
    # the metadata of an empty bag (its temporary file's name taken by a folder)
    w = BagWriter(tmp_path / "empty", storage)
    w.add_topic("/chatter", "std_msgs/msg/String")
    (tmp_path / "empty" / "metadata.yaml.tmp").mkdir()
    with pytest.raises(IsADirectoryError):
        w.close()
    assert not (tmp_path / "empty").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sibling.txt"]
    assert (tmp_path / "sibling.txt").read_text() == "kept"


def test_a_failed_writer_keeps_messages_and_never_removes_a_folder_it_did_not_make(tmp_path):
    # a bag holding messages outlives a failure while writing it, and one while writing its metadata
    with pytest.raises(AttributeError), BagWriter(tmp_path / "partial") as w:
        w.write("/chatter", T["std_msgs/msg/String"](data="hello"), 1_000)
        w.write("/image", T["std_msgs/msg/String"](data="x"), 2_000, msgtype="sensor_msgs/msg/Image")
    with BagFile(tmp_path / "partial") as bag:
        assert [m.msg.data for m in bag.messages()] == ["hello"]
    w = BagWriter(tmp_path / "no_metadata")
    w.write("/chatter", T["std_msgs/msg/String"](data="hi"), 5)
    (tmp_path / "no_metadata" / "metadata.yaml.tmp").mkdir()
    with pytest.raises(IsADirectoryError):
        w.close()
    with BagFile(tmp_path / "no_metadata") as bag:
        assert [m.msg.data for m in bag.messages()] == ["hi"] and "no metadata.yaml" in bag.warnings[0]
    # abandon(): finishes a bag with messages, removes an empty one, and leaves a finished bag alone
    empty = BagWriter(tmp_path / "empty")
    empty.add_topic("/chatter", "std_msgs/msg/String")
    empty.abandon()
    assert not (tmp_path / "empty").exists()
    finished = BagWriter(tmp_path / "finished")
    finished.add_topic("/chatter", "std_msgs/msg/String")
    finished.close()
    finished.abandon()
    assert (tmp_path / "finished" / "metadata.yaml").is_file()
    # a folder that exists is refused before anything is written, and survives whatever fails next
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    with pytest.raises(BagError, match="exists already"), BagWriter(existing) as w:
        w.write("/x", T["std_msgs/msg/String"](data="x"), 1, msgtype="nope_msgs/msg/Nope")
    assert [p.name for p in existing.iterdir()] == ["notes.txt"] and (existing / "notes.txt").read_text() == "mine"


def _humble_db3(path: Path, msgs, with_schema_table: bool, types: dict[str, str] | None = None) -> None:
    """A .db3 laid out as rosbag2 of Foxy/Humble writes it (no stored message definitions)."""
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, "
        "serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL);"
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL, timestamp INTEGER NOT NULL, "
        "data BLOB NOT NULL);"
        "CREATE INDEX timestamp_idx ON messages (timestamp ASC);")
    if with_schema_table:
        con.executescript("CREATE TABLE schema(schema_version INTEGER PRIMARY KEY, ros_distro TEXT NOT NULL);"
                          "INSERT INTO schema VALUES (3, 'humble');"
                          "CREATE TABLE metadata(id INTEGER PRIMARY KEY, metadata_version INTEGER NOT NULL, "
                          "metadata TEXT NOT NULL);")
    ids: dict[str, int] = {}
    for topic, msgtype, t, raw in msgs:
        if topic not in ids:
            ids[topic] = len(ids) + 1
            con.execute("INSERT INTO topics VALUES (?, ?, ?, 'cdr', ?)",
                        (ids[topic], topic, (types or {}).get(topic, msgtype), QOS_V5))
        con.execute("INSERT INTO messages (topic_id, timestamp, data) VALUES (?, ?, ?)", (ids[topic], t, raw))
    con.commit()
    con.close()


def _metadata(version: int, storage: str, file: str, msgs, types: dict[str, str] | None = None) -> dict:
    counts: dict[str, int] = {}
    for topic, *_ in msgs:
        counts[topic] = counts.get(topic, 0) + 1
    typ = {t: m for t, m, *_ in msgs} | (types or {})
    start = min(m[2] for m in msgs)
    duration = max(m[2] for m in msgs) - start
    topics = []
    for name, n in counts.items():
        meta = {"name": name, "type": typ[name], "serialization_format": "cdr", "offered_qos_profiles": QOS_V5}
        if version >= 7:
            meta["type_description_hash"] = ""
        topics.append({"topic_metadata": meta, "message_count": n})
    info = {"version": version, "storage_identifier": storage, "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start}, "message_count": len(msgs),
            "topics_with_message_count": topics, "compression_format": "", "compression_mode": "",
            "relative_file_paths": [file],
            "files": [{"path": file, "starting_time": {"nanoseconds_since_epoch": start},
                       "duration": {"nanoseconds": duration}, "message_count": len(msgs)}]}
    if version >= 6:
        info["custom_data"] = None
    if version >= 8:
        info["ros_distro"] = "jazzy"
    return {"rosbag2_bagfile_information": info}


@pytest.mark.parametrize("version", [5, 6, 7])
def test_reads_humble_and_iron_sqlite3_layouts(tmp_path, version):
    """`ros2 bag record` of Humble (metadata 5) and Iron (6, 7) with sqlite3 files that store no definitions."""
    msgs = raw_messages(6)
    folder = tmp_path / f"rosbag2_v{version}"
    folder.mkdir()
    _humble_db3(folder / "rosbag2_v_0.db3", msgs, with_schema_table=version == 5)
    (folder / "metadata.yaml").write_text(yaml.safe_dump(_metadata(version, "sqlite3", "rosbag2_v_0.db3", msgs)))
    bag, got = read_all(folder)
    assert bag.metadata_version == version and bag.distro == ("humble" if version == 5 else "iron")
    assert len(got) == 12 and [m.raw for m in got] == [m[3] for m in msgs]
    assert got[-1].msg.pose.pose.position.y == pytest.approx(-1.0)
    assert bag.topics["/odom"].qos[0].reliability.name == "RELIABLE"


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_reads_jazzy_and_kilted_metadata(tmp_path, version, storage):
    from rosbags.rosbag2 import StoragePlugin, Writer

    msgs = raw_messages(4)
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(tmp_path / "bag", version=version, storage_plugin=plugin) as w:
        conns = {}
        for topic, msgtype, t, raw in msgs:
            if topic not in conns:
                conns[topic] = w.add_connection(topic, msgtype, typestore=STORE,
                                                offered_qos_profiles=[qos_profile(True, False, 10)])
            w.write(conns[topic], t, raw)
    bag, got = read_all(tmp_path / "bag")
    assert bag.metadata_version == version and [m.raw for m in got] == [m[3] for m in msgs]


def test_bare_storage_files_and_folder_without_metadata(tmp_path):
    msgs = raw_messages(3)
    _humble_db3(tmp_path / "lonely.db3", msgs, with_schema_table=True)
    bag, got = read_all(tmp_path / "lonely.db3")
    assert bag.format == "sqlite3" and len(got) == 6

    with BagWriter(tmp_path / "killed", "mcap") as w:   # a recorder killed before writing metadata.yaml
        for topic, msgtype, t, raw in msgs:
            w.add_topic(topic, msgtype)
            w.write_raw(topic, t, raw)
    (tmp_path / "killed" / "metadata.yaml").unlink()
    bag, got = read_all(tmp_path / "killed")
    assert len(got) == 6 and any("no metadata.yaml" in w for w in bag.warnings)
    bag, got = read_all(next((tmp_path / "killed").glob("*.mcap")))
    assert bag.format == "mcap" and len(got) == 6


CUSTOM_DEF = "uint32 count\nstring label\nfloat64[] values\n"


def test_bare_mcap_from_mcap_ros2_support_with_custom_type(tmp_path):
    """An independent writer (mcap + mcap-ros2-support), including a type no ROS distribution defines."""
    pytest.importorskip("mcap_ros2")
    from mcap_ros2.writer import Writer

    path = tmp_path / "foreign.mcap"
    odom_def, _ = STORE.generate_msgdef("nav_msgs/msg/Odometry", ros_version=2)
    with path.open("wb") as f:
        w = Writer(f)
        tick = w.register_msgdef("acme_msgs/msg/Tick", CUSTOM_DEF)
        odo = w.register_msgdef("nav_msgs/msg/Odometry", odom_def)
        for i in range(5):
            w.write_message("/tick", tick, {"count": i, "label": f"t{i}", "values": [0.5 * i, 1.0]},
                            log_time=10**9 + i * 10**7)
            w.write_message("/odom", odo, {"header": {"stamp": {"sec": 1, "nanosec": i}, "frame_id": "odom"},
                                           "child_frame_id": "base_link",
                                           "pose": {"pose": {"position": {"x": float(i), "y": 0.0, "z": 0.0},
                                                             "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}},
                                                    "covariance": [0.0] * 36},
                                           "twist": {"twist": {"linear": {"x": 0.0, "y": 0.0, "z": 0.0},
                                                               "angular": {"x": 0.0, "y": 0.0, "z": 0.0}},
                                                     "covariance": [0.0] * 36}},
                            log_time=10**9 + i * 10**7 + 1)
        w.finish()
    bag, got = read_all(path)
    ticks = [m.msg for m in got if m.topic == "/tick"]
    assert [t.count for t in ticks] == list(range(5)) and ticks[3].label == "t3"
    assert ticks[2].values.tolist() == [1.0, 1.0]
    assert [m.msg.pose.pose.position.x for m in got if m.topic == "/odom"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert bag.topics["/tick"].known


def test_bags_we_write_are_read_by_the_independent_mcap_reader(tmp_path):
    pytest.importorskip("mcap_ros2")
    from mcap_ros2.reader import read_ros2_messages

    with BagWriter(tmp_path / "bag", "mcap") as w:
        for i in range(4):
            w.write("/odom", odom(i), 10**9 + i)
    decoded = list(read_ros2_messages(str(next((tmp_path / "bag").glob("*.mcap")))))
    assert [d.ros_msg.pose.pose.position.x for d in decoded] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert {d.channel.topic for d in decoded} == {"/odom"}


def test_truncated_mcap_is_read_up_to_the_damage(tmp_path):
    """A recorder killed mid-write: no footer or index, the last chunk cut short."""
    with BagWriter(tmp_path / "bag", "mcap") as w:
        for i in range(40):   # ~50 KB each: several 1 MiB chunks
            w.write("/camera/color/image_raw", image(i, 128), 10**9 + i * 10**8)
    full = next((tmp_path / "bag").glob("*.mcap"))
    data = full.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    bag, got = read_all(cut)
    assert bag.counts.truncated and bag.counts.truncated_reason
    assert 0 < len(got) < 40
    assert [m.msg.data[0] for m in got] == list(range(len(got)))    # what is read is intact and in order
    assert bag.describe()["salvaged"]

    folder = tmp_path / "cut_folder"
    folder.mkdir()
    (folder / full.name).write_bytes(data[: int(len(data) * 0.6)])
    (folder / "metadata.yaml").write_text((tmp_path / "bag" / "metadata.yaml").read_text())
    bag2, got2 = read_all(folder)
    assert bag2.counts.truncated and len(got2) == len(got)


def test_skips_unknown_types_and_undecodable_messages_with_counts(tmp_path):
    msgs = raw_messages(4)
    msgs.append(("/acme", "acme_msgs/msg/Secret", 2 * 10**9, b"\x00\x01\x00\x00abcd"))
    msgs.append(("/odom", "nav_msgs/msg/Odometry", 2 * 10**9 + 1, b"\x00\x01\x00\x00\x01"))   # cut short
    folder = tmp_path / "bag"
    folder.mkdir()
    _humble_db3(folder / "bag_0.db3", msgs, with_schema_table=True)
    (folder / "metadata.yaml").write_text(yaml.safe_dump(_metadata(5, "sqlite3", "bag_0.db3", msgs)))
    bag, got = read_all(folder)
    assert len(got) == 8
    assert bag.counts.unknown_type == {"/acme": 1}
    assert bag.counts.deserialize_error == {"/odom": 1}
    assert not bag.topics["/acme"].known and bag.topics["/odom"].known


@pytest.mark.parametrize("name, content, match", [
    ("noise.mcap", b"\x00garbage" * 50, "not an MCAP file"),
    ("empty.db3", b"", "empty"),
    ("text.db3", b"hello, I am not a database\n" * 10, "not an SQLite database"),
    ("bag.txt", b"x", "unsupported bag file"),
])
def test_foreign_files_are_refused_by_name(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BagError, match=match) as err:
        BagFile(path)
    assert name in str(err.value)
    assert path.read_bytes() == content


def test_missing_and_empty_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BagFile(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BagError, match="no metadata.yaml"):
        BagFile(tmp_path / "empty")
    folder = tmp_path / "badmeta"
    folder.mkdir()
    (folder / "metadata.yaml").write_text("just: text\n")
    with pytest.raises(BagError, match="metadata"):
        BagFile(folder)


def _sqlite3_bag(path: Path, msgs) -> Path:
    """A rosbag2 folder with sqlite3 storage; returns its .db3 file."""
    with BagWriter(path, "sqlite3") as w:
        for topic, msgtype, t, raw in msgs:
            w.add_topic(topic, msgtype)
            w.write_raw(topic, t, raw)
    return next(path.glob("*.db3"))


@pytest.mark.parametrize("layout", ["bare", "folder"])
def test_cut_short_db3_is_refused_naming_the_file(tmp_path, layout):
    """A .db3 cut anywhere (even by one byte: SQLite would hand out that row with a zero byte and no error) is
    refused with a BagError that names the file, and is left as it was."""
    db3 = _sqlite3_bag(tmp_path / "bag", raw_messages(30))
    data = db3.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    assert len(data) % page == 0 and len(data) // page >= 10
    pages = len(data) // page
    cuts = sorted({50, 100} | {k * page + d for k in range(1, pages) for d in (0, 100)}
                  | {k * page - 1 for k in range(1, pages + 1)})   # mid-header, page boundaries, one byte short
    for cut in cuts:
        folder = tmp_path / f"cut_{cut}"
        folder.mkdir()
        bad = folder / db3.name
        bad.write_bytes(data[:cut])
        if layout == "folder":
            (folder / "metadata.yaml").write_text((tmp_path / "bag" / "metadata.yaml").read_text())
        before = tree_digest(folder)
        with pytest.raises(BagError) as err:
            BagFile(folder if layout == "folder" else bad)
        assert str(bad) in str(err.value), f"cut at {cut} bytes: {err.value}"
        if cut >= 100:   # the header is whole: the size check names what is missing
            assert f"cut short: {cut} bytes" in str(err.value)
        assert tree_digest(folder) == before, f"cut at {cut} bytes: the input was modified (or files were added)"
    _, got = read_all(db3)   # the whole file still reads, byte for byte
    assert [m.raw for m in got] == [m[3] for m in raw_messages(30)]


def _mcap_file(path: Path, msgs, store, *, qos: str = "", type_hash: bool = False, chunk_size: int = 1 << 20) -> None:
    """Messages written, in the given order, into a .mcap as rosbag2's mcap plugin lays it out (profile ros2,
    ros2msg schemas from `store`, cdr, zstd chunks; offered QoS in the channel metadata when given)."""
    from mcap.writer import CompressionType, Writer

    with path.open("wb") as f:
        w = Writer(f, compression=CompressionType.ZSTD, chunk_size=chunk_size)
        w.start(profile="ros2", library="rosbag2")
        channels: dict[str, int] = {}
        for topic, msgtype, t, raw in msgs:
            if topic not in channels:
                sid = w.register_schema(name=msgtype, encoding="ros2msg",
                                        data=store.generate_msgdef(msgtype, ros_version=2)[0].encode())
                meta = {"offered_qos_profiles": qos} if qos else {}
                if type_hash:
                    meta["type_description_hash"] = ""
                channels[topic] = w.register_channel(topic=topic, message_encoding="cdr", schema_id=sid,
                                                     metadata=meta)
            w.add_message(channels[topic], log_time=t, publish_time=t, data=raw)
        w.finish()


@pytest.mark.parametrize("version", [5, 6, 7])
def test_reads_humble_and_iron_mcap_layouts(tmp_path, version):
    """`ros2 bag record -s mcap` of Humble (metadata 5) and Iron (6, 7): a folder with metadata.yaml and one
    zstd-chunked .mcap whose channels carry the offered QoS."""
    distro = "humble" if version == 5 else "iron"
    msgs = raw_messages(6)
    folder = tmp_path / f"rosbag2_mcap_v{version}"
    folder.mkdir()
    name = f"rosbag2_mcap_v{version}_0.mcap"
    _mcap_file(folder / name, msgs, typestore_for_distro(distro), qos=QOS_V5, type_hash=version >= 7)
    (folder / "metadata.yaml").write_text(yaml.safe_dump(_metadata(version, "mcap", name, msgs)))
    bag, got = read_all(folder)
    assert bag.metadata_version == version and bag.distro == distro
    assert bag.storage == "mcap" and bag.format == "rosbag2" and not bag.describe()["salvaged"]
    assert bag.warnings == [] and not bag.counts.truncated
    assert bag.message_count == 12 and (bag.start_ns, bag.end_ns) == (10**9, 10**9 + 5 * 10**8 + 1)
    assert [(m.topic, m.log_time_ns, m.raw) for m in got] == [(t, lt, r) for t, _, lt, r in msgs]
    assert got[-1].msg.pose.pose.position.y == pytest.approx(-1.0) and got[4].msg.data.tolist() == [2] * 8 * 8 * 3
    assert {t: (i.msgtype, i.count, i.known) for t, i in bag.topics.items()} == {
        "/camera/color/image_raw": ("sensor_msgs/msg/Image", 6, True), "/odom": ("nav_msgs/msg/Odometry", 6, True)}
    qos = bag.topics["/odom"].qos[0]
    assert qos.reliability.name == "RELIABLE" and qos.durability.name == "VOLATILE"


def test_log_times_out_of_order_are_counted_and_kept(tmp_path):
    """A recorder killed mid-write leaves messages in arrival order, which may go back in log time: read in storage
    order, each message earlier than one read before it is counted, and none is dropped or reordered. An indexed
    (complete) file is read in log-time order, so it has none."""
    msgs = raw_messages(6)     # image i at 1 s + i * 0.1 s, odometry 1 ns later
    order = [0, 1, 2, 3, 7, 5, 6, 4, 8, 9, 10, 11]   # the odometry of 1.3 s and the image of 1.2 s swap places
    stored = [msgs[k] for k in order]
    _mcap_file(tmp_path / "complete.mcap", stored, STORE, chunk_size=200)
    bag, got = read_all(tmp_path / "complete.mcap")
    assert [m.log_time_ns for m in got] == [m[2] for m in msgs] and bag.counts.log_time_out_of_order == 0

    data = (tmp_path / "complete.mcap").read_bytes()
    killed = tmp_path / "killed.mcap"
    killed.write_bytes(data[: len(data) - 40])   # footer lost: read sequentially
    bag, got = read_all(killed)
    assert bag.describe()["salvaged"] and bag.counts.truncated
    assert [(m.topic, m.log_time_ns, m.raw) for m in got] == [(t, lt, r) for t, _, lt, r in stored]
    # 1.3 s + 1 ns, then 1.2 s + 1 ns (earlier), 1.3 s (earlier than 1.3 s + 1 ns), 1.2 s (earlier)
    assert bag.counts.log_time_out_of_order == 3
    assert bag.counts.read == {"/camera/color/image_raw": 6, "/odom": 6}

    with BagFile(killed) as bag:   # per topic, only the odometry goes back (1.3 s + 1 ns, then 1.2 s + 1 ns)
        odom_times = [m.log_time_ns for m in bag.messages(["/odom"])]
        assert odom_times == [m[2] for m in stored if m[0] == "/odom"] and bag.counts.log_time_out_of_order == 1


# writes 3000 messages of 1 kB (about 3 MB) committing every 256 kB, then fails or dies as argv[3] says:
# "kill" leaves without closing (SIGKILL, OOM, power loss), "full" runs out of room at 2 MB (RLIMIT_FSIZE)
_WRITER_SCRIPT = """
import os, resource, signal, sys
from memnav.eval import bag_io
from memnav.eval.bag_io import BagError, BagWriter
bag_io.SQLITE_COMMIT_BYTES = 256 << 10
path, storage, how = sys.argv[1:4]
if how == "full":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))
w = BagWriter(path, storage)
String = w.typestore.types["std_msgs/msg/String"]
try:
    for i in range(3000):
        w.write("/chatter", String(data=f"{i:06d}" + "x" * 1000), 10**9 + i)
except BagError as err:
    print(err)
    w.abandon()
    sys.exit(3)
os._exit(0)
"""


def _run_writer(tmp_path: Path, storage: str, how: str) -> tuple[Path, subprocess.CompletedProcess]:
    path = tmp_path / f"{how}_{storage}"
    proc = subprocess.run([sys.executable, "-c", _WRITER_SCRIPT, str(path), storage, how], capture_output=True,
                          text=True, timeout=120)
    return path, proc


def test_a_killed_sqlite3_writer_keeps_what_it_committed(tmp_path):
    """rosbags commits a .db3 only at close: a recorder killed without it kept no message at all."""
    path, proc = _run_writer(tmp_path, "sqlite3", "kill")
    assert proc.returncode == 0, proc.stderr
    assert not (path / "metadata.yaml").exists()
    with BagFile(path) as bag:
        got = [m.msg.data for m in bag.messages()]
    assert 2000 <= len(got) < 3000 and got == [f"{i:06d}" + "x" * 1000 for i in range(len(got))]


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_full_disk_is_one_error_naming_the_bag_which_keeps_what_was_written(tmp_path, storage):
    path, proc = _run_writer(tmp_path, storage, "full")
    assert proc.returncode == 3, proc.stderr   # BagError, not a bare OSError / sqlite3.OperationalError
    assert proc.stdout.startswith(f"{path}: cannot write a message of /chatter") and "keeps" in proc.stdout
    with BagFile(path) as bag:
        got = [m.msg.data for m in bag.messages()]
        declared = bag.message_count
    assert len(got) >= 500 and got == [f"{i:06d}" + "x" * 1000 for i in range(len(got))]
    if storage == "sqlite3":   # rolled back to the last commit: the metadata says what the bag holds
        assert (path / "metadata.yaml").is_file() and declared == len(got)


_WAL_RECORDER = """
import os, sqlite3, sys
db, n = sys.argv[1], int(sys.argv[2])
con = sqlite3.connect(db)
assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
con.execute("PRAGMA wal_autocheckpoint=0")
topic_id, t, data = con.execute("SELECT topic_id, timestamp, data FROM messages ORDER BY timestamp DESC").fetchone()
for i in range(1, n + 1):
    con.execute("INSERT INTO messages (topic_id, timestamp, data) VALUES (?, ?, ?)", (topic_id, t + i, data))
con.commit()
os._exit(0)    # killed: the log is never checkpointed into the .db3
"""


@pytest.mark.parametrize("layout", ["folder", "no_metadata", "bare"])
def test_messages_only_in_a_killed_recorders_write_ahead_log_are_read(tmp_path, layout):
    # rosbag2's `resilient` preset records sqlite3 in WAL mode: what it committed since its last checkpoint is in
    # bag.db3-wal only, which an immutable open (rosbags) ignores
    msgs = raw_messages(5)
    db3 = _sqlite3_bag(tmp_path / "bag", msgs)
    subprocess.run([sys.executable, "-c", _WAL_RECORDER, str(db3), "7"], check=True, timeout=60)
    wal = db3.with_name(db3.name + "-wal")
    assert wal.stat().st_size > 0
    if layout != "folder":
        (tmp_path / "bag" / "metadata.yaml").unlink()
    path = db3 if layout == "bare" else tmp_path / "bag"
    bag, read = read_all(path)     # the input is not written, nothing is created beside it
    assert len(read) == len(msgs) + 7
    assert any("bag.db3-wal" in w and "temporary copy" in w for w in bag.warnings)
    assert bag._copy_dir is None   # the copy is gone once the bag is closed


def test_a_db3_without_a_write_ahead_log_is_read_in_place(tmp_path):
    msgs = raw_messages(3)
    _sqlite3_bag(tmp_path / "bag", msgs)
    bag, read = read_all(tmp_path / "bag")
    assert len(read) == len(msgs)
    assert not any("-wal" in w for w in bag.warnings)


def _split_recording(folder: Path, storage: str, chunks: list[list[tuple[str, str, int, bytes]]],
                     name: str = "rec", metadata: bool = False) -> list[Path]:
    """A recording split into one storage file per chunk (`ros2 bag record --max-bag-duration`): `folder` holds
    `{name}_0.mcap`, `{name}_1.mcap`, ... (each written as its own bag, then moved there) and, with `metadata`, the
    metadata.yaml rosbag2 writes for them all at the end (which a killed recorder never writes)."""
    folder.mkdir()
    ext = "mcap" if storage == "mcap" else "db3"
    files, infos = [], []
    for k, chunk in enumerate(chunks):
        part = folder.parent / f"{folder.name}_part{k}"
        with BagWriter(part, storage) as w:
            for topic, msgtype, t, raw in chunk:
                w.add_topic(topic, msgtype)
                w.write_raw(topic, t, raw)
        infos.append(yaml.safe_load((part / "metadata.yaml").read_text())["rosbag2_bagfile_information"])
        files.append(folder / f"{name}_{k}.{ext}")
        next(part.glob(f"*.{ext}")).rename(files[-1])
        (part / "metadata.yaml").unlink()
        part.rmdir()
    if metadata:
        info = infos[0]
        start = min(i["starting_time"]["nanoseconds_since_epoch"] for i in infos)
        end = max(i["starting_time"]["nanoseconds_since_epoch"] + i["duration"]["nanoseconds"] for i in infos)
        counts: dict[str, int] = {}
        topics = {}
        for i in infos:
            for t in i["topics_with_message_count"]:
                counts[t["topic_metadata"]["name"]] = counts.get(t["topic_metadata"]["name"], 0) + t["message_count"]
                topics.setdefault(t["topic_metadata"]["name"], t)
        info.update(relative_file_paths=[f.name for f in files], message_count=sum(i["message_count"] for i in infos),
                    files=[dict(i["files"][0], path=f.name) for i, f in zip(infos, files)],
                    starting_time={"nanoseconds_since_epoch": start}, duration={"nanoseconds": end - start},
                    topics_with_message_count=[dict(t, message_count=counts[n]) for n, t in topics.items()])
        (folder / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}))
    return files


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_split_recording_without_metadata_is_read_as_one_bag_in_order(tmp_path, storage):
    """A recorder that split its bag every few seconds and was killed before writing metadata.yaml: the folder of
    rec_0 ... rec_10 (rec_10 after rec_2) reads as the whole recording, as rosbag2's metadata would have it read;
    the files given as a list, in any order, too."""
    msgs = raw_messages(33)                                      # 66 messages, 1 s + i * 0.1 s
    chunks = [msgs[k:k + 6] for k in range(0, len(msgs), 6)]     # 11 files of 3 images + 3 odometry
    folder = tmp_path / "rec"
    files = _split_recording(folder, storage, chunks, metadata=True)
    with BagFile(folder) as bag:                                 # rosbag2's own layout: rosbags reads the split
        assert [m.raw for m in bag.messages()] == [m[3] for m in msgs] and bag.parts == []
    (folder / "metadata.yaml").unlink()                          # the killed recorder's folder
    bag, got = read_all(folder)
    assert [(m.topic, m.log_time_ns, m.raw) for m in got] == [(t, lt, r) for t, _, lt, r in msgs]
    assert got[-1].msg.pose.pose.position.x == pytest.approx(3.2)
    assert bag.parts == files and bag.format == bag.storage == storage and bag.path == folder
    assert bag.message_count == 66 and (bag.start_ns, bag.end_ns) == (10**9, 10**9 + 32 * 10**8 + 1)
    assert {t: (i.msgtype, i.count, i.known) for t, i in bag.topics.items()} == {
        "/camera/color/image_raw": ("sensor_msgs/msg/Image", 33, True), "/odom": ("nav_msgs/msg/Odometry", 33, True)}
    assert bag.counts.read == {"/camera/color/image_raw": 33, "/odom": 33} and not bag.counts.truncated
    d = bag.describe()
    assert d["parts"] == [str(f) for f in files] and not d["salvaged"] and d["message_count"] == 66
    (warning,) = bag.warnings
    assert "no metadata.yaml" in warning and "11 " in warning and warning.endswith(
        ", ".join(f.name for f in files))
    # the files given one by one, shuffled: read in the order of their first message
    shuffled = [files[k] for k in (7, 0, 10, 3, 1, 9, 2, 8, 4, 6, 5)]
    with BagFile(shuffled) as bag:
        assert [m.raw for m in bag.messages()] == [m[3] for m in msgs] and bag.parts == files
        assert [m.raw for m in bag.messages(["/odom"])] == [m[3] for m in msgs if m[0] == "/odom"]
    with BagFile([files[3]]) as bag:                            # one file of the list: a bare file
        assert bag.parts == [] and bag.message_count == 6 and bag.format == storage


def test_a_split_recording_is_ordered_by_time_not_name_and_its_cut_short_last_file_is_salvaged(tmp_path):
    """Files named against their order in time (a recorder naming them by index + time of day, or renamed)
    are read in time order; the last file of a killed recorder, cut short, is read up to the damage."""
    msgs = [("/camera/color/image_raw", "sensor_msgs/msg/Image", 10**9 + i * 10**8,
             bytes(STORE.serialize_cdr(image(i, 128), "sensor_msgs/msg/Image"))) for i in range(60)]
    files = _split_recording(tmp_path / "rec", "mcap", [msgs[:10], msgs[10:20], msgs[20:]])   # ~50 kB each
    names = ["b_late.mcap", "c_middle.mcap", "a_early.mcap"]   # name order: early, late, middle
    renamed = [f.rename(f.with_name(n)) for f, n in zip(files[::-1], names)]
    assert [f.name for f in renamed] == names
    last = tmp_path / "rec" / "b_late.mcap"                    # 20-59: several 1 MiB chunks
    data = last.read_bytes()
    last.write_bytes(data[: int(len(data) * 0.6)])
    bag, got = read_all(tmp_path / "rec")
    assert [p.name for p in bag.parts] == ["a_early.mcap", "c_middle.mcap", "b_late.mcap"]
    assert bag.describe()["salvaged"] and bag.counts.truncated and bag.counts.truncated_reason.startswith(
        "b_late.mcap: ")
    assert 20 < len(got) < 60 and [m.msg.data[0] for m in got] == list(range(len(got)))
    # killed just after it opened its next file: that file is empty, left out with a warning (it refused them all)
    (tmp_path / "rec" / "d_next.mcap").write_bytes(b"")
    bag, again = read_all(tmp_path / "rec")
    assert [p.name for p in bag.parts] == ["a_early.mcap", "c_middle.mcap", "b_late.mcap"] and len(again) == len(got)
    assert any("d_next.mcap: empty, left out" in w for w in bag.warnings), bag.warnings
    with pytest.raises(BagError, match="empty"):                 # an empty file alone is still refused
        BagFile(tmp_path / "rec" / "d_next.mcap")


def test_files_that_are_not_parts_of_one_recording_are_refused_or_warned_about(tmp_path):
    msgs = raw_messages(30)                                      # 1 s - 3.9 s
    # two robots (or two recordings at once) of the same topics over the same time: refused, naming both files
    a = _split_recording(tmp_path / "a", "mcap", [msgs])[0]
    b = _split_recording(tmp_path / "b", "mcap", [msgs[4:]])[0]
    both = tmp_path / "both"
    both.mkdir()
    a, b = a.rename(both / "robot1.mcap"), b.rename(both / "robot2.mcap")
    before = tree_digest(both)
    with pytest.raises(BagError, match=r"robot1.mcap and robot2.mcap both hold /camera/color/image_raw, /odom over "
                                       r"the same 2.7 s: not the parts of one split recording"):
        BagFile(both)
    with pytest.raises(BagError, match="not the parts of one split recording"):
        BagFile([b, a])
    assert tree_digest(both) == before
    # other topics over the same time (two recorders of one robot): one bag
    odom_only = [m for m in msgs if m[0] == "/odom"]
    images = [m for m in msgs if m[0] != "/odom"]
    c = _split_recording(tmp_path / "c", "mcap", [odom_only])[0]
    d = _split_recording(tmp_path / "d", "mcap", [images])[0]
    with BagFile([c, d]) as bag:
        assert [m.raw for m in bag.messages()] == [m[3] for m in msgs]
    # .mcap and .db3 files together, a file given twice, a folder in the list
    db3 = _split_recording(tmp_path / "e", "sqlite3", [msgs[:2]])[0]
    with pytest.raises(BagError, match=r"both .mcap and .db3 files"):
        BagFile([c, db3])
    with pytest.raises(BagError, match="given twice"):
        BagFile([c, d, tmp_path / "c" / ".." / "c" / c.name])
    with pytest.raises(BagError, match="a folder among several bag files"):
        BagFile([c, tmp_path / "d"])
    with pytest.raises(FileNotFoundError, match="nope.mcap"):
        BagFile([c, tmp_path / "nope.mcap"])
    # a part missing: the gap is warned about, the rest read
    late = [(t, ty, lt + 60 * 10**9, r) for t, ty, lt, r in msgs[40:]]
    files = _split_recording(tmp_path / "gap", "mcap", [msgs[:20], late])
    bag, got = read_all(tmp_path / "gap")
    assert len(got) == 40 and any(w.startswith(f"61.1 s pass between the last message of {files[0].name}")
                                  for w in bag.warnings)
