"""`memnav record` and `memnav replay` as real processes over DDS on an isolated domain: a bag replayed (with a
remap and /clock) is recorded again byte for byte, latched topics stay latched, bad options exit 2."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import use_isolated_ros_domain  # noqa: E402

from memnav.eval.bag_io import BagFile, BagWriter, qos_profile, typestore_for_distro  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

STORE = typestore_for_distro()
T = STORE.types
N = 20
T0 = 1_700_000_000 * 10**9


@pytest.fixture
def ros_env(monkeypatch):
    return use_isolated_ros_domain(monkeypatch, 0)


def _header(t: int, frame: str):
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9),
                                    frame_id=frame)


def _image(i: int, t: int):
    return T["sensor_msgs/msg/Image"](header=_header(t, "cam"), height=16, width=16, encoding="rgb8", is_bigendian=0,
                                      step=48, data=np.full(16 * 16 * 3, i, np.uint8))


def _odom(i: int, t: int):
    vec = T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0)
    pose = T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=float(i), y=0.0, z=0.0),
                                       orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
    return T["nav_msgs/msg/Odometry"](
        header=_header(t, "odom"), child_frame_id="base_link",
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=T["geometry_msgs/msg/Twist"](linear=vec, angular=vec),
                                                         covariance=np.zeros(36)))


@pytest.fixture
def source_bag(tmp_path) -> Path:
    """2 s at 10 Hz: best-effort images, reliable odometry, one latched goal image."""
    with BagWriter(tmp_path / "source", "sqlite3") as w:
        w.add_topic("/camera/color/image_raw", "sensor_msgs/msg/Image", [qos_profile(False, False, 5)])
        w.add_topic("/odom", "nav_msgs/msg/Odometry", [qos_profile(True, False, 10)])
        w.add_topic("/memnav/goal_image", "sensor_msgs/msg/Image", [qos_profile(True, True, 1)])
        w.write("/memnav/goal_image", _image(200, T0), T0)
        for i in range(N):
            t = T0 + i * 10**8
            w.write("/camera/color/image_raw", _image(i, t), t)
            w.write("/odom", _odom(i, t), t + 1000)
    return tmp_path / "source"


def _memnav(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memnav.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _close(node, proc: subprocess.Popen) -> None:
    """Tear down this test's ROS node and kill the process under test if it is still running."""
    node.destroy_node()
    rclpy.shutdown()
    if proc.poll() is None:
        proc.kill()


def _spin_for(node, seconds: float) -> None:
    """Spin the test's node for `seconds` (what is on its way arrives)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)


def _finish(proc: subprocess.Popen, timeout: float, sig: int | None = None) -> str:
    if sig is not None:
        proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"process did not finish in {timeout} s:\n{out}")
    return out


def test_replayed_bag_is_recorded_byte_for_byte_with_clock(source_bag, tmp_path, ros_env):
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    rec_path = tmp_path / "recorded"
    recorder = _memnav("record", "--out", str(rec_path), "--duration", "60", "/camera/color/image_raw",
                       "/robot/odom", "/memnav/goal_image")
    rclpy.init(domain_id=ros_env)
    from rclpy.parameter import Parameter

    node = rclpy.create_node("test_clock_listener", parameter_overrides=[Parameter("use_sim_time", value=True)])
    sim_times: list[int] = []
    clocks: list[int] = []
    node.create_subscription(Clock, "/clock", lambda m: clocks.append(m.clock.sec * 10**9 + m.clock.nanosec),
                             QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT))   # as TimeSource
    try:
        time.sleep(1.0)   # let the recorder start its discovery
        replay = _memnav("replay", str(source_bag), "--rate", "2", "--delay", "4", "--remap", "/odom:=/robot/odom")
        end = time.monotonic() + 60
        while replay.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
            sim_times.append(node.get_clock().now().nanoseconds)
        out = _finish(replay, 5)
        assert replay.returncode == 0, out
        assert f"published {2 * N + 1} messages" in out and "/robot/odom: 20" in out
        rec_out = _finish(recorder, 20, signal.SIGINT)
        assert recorder.returncode == 0, rec_out
    finally:
        _close(node, recorder)

    src = BagFile(source_bag)
    src_raw = {t: [m.raw for m in src.messages([t])] for t in src.topics}
    with BagFile(rec_path) as bag:
        assert set(bag.topics) == {"/camera/color/image_raw", "/robot/odom", "/memnav/goal_image"}
        got = {t: [m.raw for m in bag.messages([t])] for t in bag.topics}
        qos = bag.topics["/memnav/goal_image"].qos[0]
    assert got["/robot/odom"] == src_raw["/odom"]                     # reliable: all, in order, same bytes
    assert got["/memnav/goal_image"] == src_raw["/memnav/goal_image"]  # latched and recorded
    assert qos.durability.name == "TRANSIENT_LOCAL" and qos.reliability.name == "RELIABLE"
    images = got["/camera/color/image_raw"]
    assert len(images) >= N - 2 and set(images) <= set(src_raw["/camera/color/image_raw"])
    assert clocks, "no /clock received"
    assert T0 <= min(clocks) and max(clocks) <= T0 + (N + 2) * 10**8
    assert all(a <= b for a, b in zip(clocks, clocks[1:]))
    assert T0 <= max(sim_times) <= T0 + (N + 2) * 10**8   # a use_sim_time node runs on the bag's time


def test_bad_options_exit_2_before_touching_ros(source_bag, tmp_path):
    from memnav.cli import main

    assert main(["record", "--out", str(source_bag)]) == 2                         # never overwrites a bag
    assert main(["replay", str(source_bag), "--remap", "/odom"]) == 2              # not FROM:=TO
    assert main(["replay", str(source_bag), "--topics", "/nope"]) == 2
    assert main(["replay", str(tmp_path / "missing")]) == 2
    assert main(["replay", str(source_bag), "--wait-for", "/nope"]) == 2           # not a topic of the bag
    assert main(["replay", str(source_bag), "--namespace", "9lives"]) == 2        # not a ROS namespace
    garbage = tmp_path / "garbage.mcap"
    garbage.write_bytes(b"\x00garbage" * 20)
    assert main(["replay", str(garbage)]) == 2                                     # not a bag: BagError
    assert garbage.read_bytes() == b"\x00garbage" * 20
    assert (source_bag / "metadata.yaml").is_file() and len(list(source_bag.iterdir())) == 2


def test_replay_loop_starts_over_and_clock_jumps_back(source_bag, ros_env):
    """`--loop`: after the last message the bag plays again from the first, every message each time in order, and
    /clock, having run to the last message's log time, jumps back to the first one (documented in replay_command)."""
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_loop_listener")
    xs: list[float] = []
    clocks: list[int] = []
    node.create_subscription(Odometry, "/odom", lambda m: xs.append(m.pose.pose.position.x), 1000)
    node.create_subscription(Clock, "/clock", lambda m: clocks.append(m.clock.sec * 10**9 + m.clock.nanosec),
                             QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT))
    replay = _memnav("replay", str(source_bag), "--loop", "--rate", "4", "--wait-for", "/odom", "--delay", "1")
    try:
        end = time.monotonic() + 60
        while xs.count(0.0) < 3 and replay.poll() is None and time.monotonic() < end:   # into the third pass
            rclpy.spin_once(node, timeout_sec=0.05)
        assert replay.poll() is None, "replay --loop ended by itself:\n" + _finish(replay, 5)
        out = _finish(replay, 20, signal.SIGINT)
    finally:
        _close(node, replay)
    assert replay.returncode == 0, out
    assert xs.count(0.0) >= 3, f"odometry x seen: {xs}\n{out}"
    starts = [k for k, x in enumerate(xs) if x == 0.0]
    passes = [xs[a:b] for a, b in zip(starts, starts[1:])]
    assert len(passes) >= 2 and all(p == [float(i) for i in range(N)] for p in passes), xs   # reliable: all, in order
    published = dict(re.findall(r"(/[\w/]+): (\d+)", out.split("published", 1)[1]))   # the summary line
    assert int(published["/odom"]) >= 2 * N and int(published["/memnav/goal_image"]) >= 2, out

    jumps = [k for k in range(1, len(clocks)) if clocks[k] < clocks[k - 1]]
    assert len(jumps) >= 2, f"no jump back of /clock in {len(clocks)} messages"
    for k in jumps:
        assert clocks[k - 1] >= T0 + (N - 1) * 10**8            # a pass ends after the last message's log time...
        assert T0 <= clocks[k] <= T0 + 2 * 10**8                 # ...and the next starts again at the first one
    assert T0 <= min(clocks) and max(clocks) <= T0 + N * 10**8 + 10**9   # never far past the bag's end


def test_replay_under_a_namespace_publishes_the_bag_there_and_clock_at_the_root(source_bag, ros_env):
    """`--namespace robot1`: the bag's /odom arrives on /robot1/odom, every message in order, nothing on /odom, and
    /clock stays at the root (nodes with use_sim_time listen there)."""
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_namespace_listener")
    got: dict[str, list[float]] = {"/robot1/odom": [], "/odom": []}
    for topic, xs in got.items():
        node.create_subscription(Odometry, topic, lambda m, xs=xs: xs.append(m.pose.pose.position.x), 1000)
    clocks: list[int] = []
    node.create_subscription(Clock, "/clock", lambda m: clocks.append(m.clock.sec), QoSProfile(
        depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT))
    replay = _memnav("replay", str(source_bag), "--namespace", "robot1", "--rate", "4", "--wait-for", "/odom",
                     "--delay", "1")
    try:
        end = time.monotonic() + 60
        while replay.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        out = _finish(replay, 10)
        for _ in range(20):
            rclpy.spin_once(node, timeout_sec=0.05)
    finally:
        _close(node, replay)
    assert replay.returncode == 0, out
    assert got["/robot1/odom"] == [float(i) for i in range(N)] and got["/odom"] == [], out
    assert clocks and "/robot1/odom: 20" in out and "/robot1/memnav/goal_image: 1" in out


def test_record_every_topic_into_sqlite3(tmp_path, ros_env):
    """`memnav record --storage sqlite3` with no TOPIC: every topic of the graph (also ones it learns of after it
    started, and the nodes' own /rosout and /parameter_events) goes into a sqlite3 rosbag2 bag."""
    import yaml
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    rec_path = tmp_path / "all"
    recorder = _memnav("record", "--out", str(rec_path), "--storage", "sqlite3", "--duration", "60")
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_talker")
    try:
        latched = node.create_publisher(String, "/test/latched", QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        latched.publish(String(data="hello"))       # before the recorder subscribed: kept for it
        odom = node.create_publisher(Odometry, "/odom", 10)
        end = time.monotonic() + 30
        while (odom.get_subscription_count() == 0 or latched.get_subscription_count() == 0) \
                and recorder.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        assert odom.get_subscription_count() > 0, "the recorder never subscribed to /odom"
        for i in range(N):
            msg = Odometry()
            msg.header.frame_id = "odom"
            msg.pose.pose.position.x = float(i)
            odom.publish(msg)
            rclpy.spin_once(node, timeout_sec=0.01)
        _spin_for(node, 0.5)
        out = _finish(recorder, 20, signal.SIGINT)
    finally:
        _close(node, recorder)
    assert recorder.returncode == 0, out
    files = sorted(p.name for p in rec_path.iterdir())
    assert len(files) == 2 and files[0].endswith(".db3") and files[1] == "metadata.yaml", files
    meta = yaml.safe_load((rec_path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["storage_identifier"] == "sqlite3" and meta["version"] == 8
    with BagFile(rec_path) as bag:
        assert bag.storage == "sqlite3"
        assert {"/odom", "/test/latched", "/rosout", "/parameter_events"} <= set(bag.topics), sorted(bag.topics)
        assert bag.topics["/rosout"].msgtype == "rcl_interfaces/msg/Log"
        xs = [m.msg.pose.pose.position.x for m in bag.messages(["/odom"])]
        hello = [m.msg.data for m in bag.messages(["/test/latched"])]
        qos = bag.topics["/test/latched"].qos[0]
    assert xs == [float(i) for i in range(N)]                 # reliable: all, in order
    assert hello == ["hello"] and qos.durability.name == "TRANSIENT_LOCAL"
    assert "/odom: 20" in out


def test_replay_node_warns_of_a_params_file_section_one_typo_from_its_name(source_bag, tmp_path, ros_env):
    """A params-file section `memnav_reply:` gives replay_node (node memnav_replay) nothing: it says so in a warning
    (memnav.ros.params.misnamed_sections, as every node started through stack_node.start_nodes) and plays the bag."""
    params = tmp_path / "replay.yaml"
    params.write_text("memnav_reply:\n  ros__parameters:\n    rate: 4.0\n")
    run = subprocess.run([str(Path(sys.executable).parent / "replay_node"), "--ros-args", "--params-file",
                          str(params), "-p", f"bag:={source_bag}", "-p", "delay_s:=0.0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    [warning] = [line for line in run.stderr.splitlines() if "memnav_reply" in line]
    assert "WARN" in warning and "[memnav_replay]" in warning, warning
    assert (f"params file {params}: section 'memnav_reply' names no node of this process and gives memnav_replay "
            "nothing; did you mean 'memnav_replay'?") in warning
    assert f"published {2 * N + 1} messages" in run.stdout, run.stdout


def test_record_with_sim_time_and_no_clock_still_discovers_and_ends_on_wall_time(tmp_path, ros_env):
    """`--duration` and the discovery of topics that appear later count wall time, also with use_sim_time and no
    /clock (they ran on the node's clock: the recording never ended and saw no new topic); a relative TOPIC
    resolves in the recorder's namespace."""
    from std_msgs.msg import String

    rec_path = tmp_path / "sim_time"
    recorder = _memnav("record", "--out", str(rec_path), "--duration", "6", "--discovery-interval", "0.2", "chatter",
                       "--ros-args", "-p", "use_sim_time:=true", "-r", "__ns:=/robot1")
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_late_talker")
    try:
        time.sleep(1.5)   # the topic appears after the recorder started
        pub = node.create_publisher(String, "/robot1/chatter", 10)
        end = time.monotonic() + 5
        while pub.get_subscription_count() == 0 and recorder.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        assert pub.get_subscription_count() > 0, "the recorder never subscribed to /robot1/chatter"
        for i in range(5):
            pub.publish(String(data=f"m{i}"))
            rclpy.spin_once(node, timeout_sec=0.05)
        out = _finish(recorder, 20)   # ends by itself
    finally:
        _close(node, recorder)
    assert recorder.returncode == 0, out
    with BagFile(rec_path) as bag:
        assert [m.msg.data for m in bag.messages(["/robot1/chatter"])] == [f"m{i}" for i in range(5)]


def test_record_with_sim_time_stamps_messages_before_the_first_clock_with_it(tmp_path, ros_env):
    """With use_sim_time, a latched message delivered before any /clock was stamped 0: the bag then began decades
    before its other messages (a replay waited that long). It takes the time of the first /clock instead."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock
    from std_msgs.msg import String

    from memnav.ros.embedding_msgs import ns_to_stamp

    rec_path = tmp_path / "early"
    recorder = _memnav("record", "--out", str(rec_path), "--duration", "60", "--discovery-interval", "0.2",
                       "/latched", "/chatter", "--ros-args", "-p", "use_sim_time:=true")
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_early_talker")
    try:
        latched = node.create_publisher(String, "/latched", QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        latched.publish(String(data="goal"))
        chatter = node.create_publisher(String, "/chatter", 10)
        clock = node.create_publisher(Clock, "/clock", 10)
        end = time.monotonic() + 20
        while (chatter.get_subscription_count() == 0 or latched.get_subscription_count() == 0
               or clock.get_subscription_count() == 0) and recorder.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        time.sleep(0.5)   # the latched message reaches the recorder, still without a clock
        for i in range(5):
            clock.publish(Clock(clock=ns_to_stamp(T0 + i * 10**8)))
            rclpy.spin_once(node, timeout_sec=0.1)
            chatter.publish(String(data=f"m{i}"))
            rclpy.spin_once(node, timeout_sec=0.1)
        time.sleep(0.5)
        out = _finish(recorder, 20, signal.SIGINT)
    finally:
        _close(node, recorder)
    assert recorder.returncode == 0, out
    with BagFile(rec_path) as bag:
        got = {m.msg.data: m.log_time_ns for m in bag.messages()}
    assert set(got) == {"goal", "m0", "m1", "m2", "m3", "m4"}, got
    assert all(T0 <= t <= T0 + 5 * 10**8 for t in got.values()), got


def test_record_refuses_a_topic_remap_and_its_advice_records_and_replays_under_the_new_name(tmp_path, ros_env):
    """A camera publishing on /cam/rgb, recorded with `--ros-args -r /camera/color/image_raw:=/cam/rgb`: before, the
    recorder looked for /camera/color/image_raw in the graph, subscribed to /cam/rgb under that name, recorded
    nothing and exited 0 (with every topic, /cam/rgb's messages went into the bag as /camera/color/image_raw). Now
    it exits 2 with no bag, and what it advises works: record /cam/rgb, replay it with --remap under the name
    wanted."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    refused = tmp_path / "refused"
    run = subprocess.run([sys.executable, "-m", "memnav.cli", "record", "--out", str(refused), "--duration", "3",
                          "/camera/color/image_raw", "--ros-args", "-r", "/camera/color/image_raw:=/cam/rgb"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and not refused.exists(), run.stdout + run.stderr
    assert "memnav record --out BAG /cam/rgb" in run.stderr
    assert "memnav replay BAG --remap /cam/rgb:=/camera/color/image_raw" in run.stderr

    rec_path = tmp_path / "cam"
    recorder = _memnav("record", "--out", str(rec_path), "--duration", "60", "/cam/rgb")
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_camera")
    heard: list[int] = []
    try:
        pub = node.create_publisher(Image, "/cam/rgb", 10)
        node.create_subscription(Image, "/camera/color/image_raw", lambda m: heard.append(int(m.data[0])),
                                 QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
        end = time.monotonic() + 30
        while pub.get_subscription_count() == 0 and recorder.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        assert pub.get_subscription_count() > 0, "the recorder never subscribed to /cam/rgb"
        for i in range(5):
            msg = Image(height=2, width=2, encoding="rgb8", step=6, data=[i] * 12)
            msg.header.frame_id = "cam"
            pub.publish(msg)
            rclpy.spin_once(node, timeout_sec=0.05)
        _spin_for(node, 0.5)
        out = _finish(recorder, 20, signal.SIGINT)
        assert recorder.returncode == 0 and "/cam/rgb: 5" in out, out
        node.destroy_publisher(pub)   # the replay's publisher is the only one left
        replay = _memnav("replay", str(rec_path), "--wait-for", "/cam/rgb", "--delay", "1", "--remap",
                         "/cam/rgb:=/camera/color/image_raw")
        end = time.monotonic() + 60
        while replay.poll() is None and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        _spin_for(node, 0.5)
        out = _finish(replay, 5)
        assert replay.returncode == 0, out
    finally:
        _close(node, recorder)
    assert heard == list(range(5)), out
