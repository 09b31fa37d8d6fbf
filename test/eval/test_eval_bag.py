"""`memnav eval-bag`: a simulated patrol bag through encoder, memory and stop controller, with reports, determinism
and bad input (missing topics, stamps going backwards, invalid images, odometry gaps, a truncated file)."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import write_two_room_scene

from memnav.eval.bag_io import BagFile, BagWriter, typestore_for_distro
from memnav.eval.eval_bag import EvalConfig, evaluate_bag, load_calibrator

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parents[2] / "models"
VOLATILE = ("latency_ms", "timing")


@pytest.fixture(scope="module")
def bags(tmp_path_factory) -> dict[str, Path]:
    """A 16 s, 10 Hz patrol in the two-room scene with drifting odometry: annotated and plain bags."""
    from memnav.eval.bench_replay import PatrolConfig, record_patrol_bag
    from memnav.sim.base import SimConfig

    root = tmp_path_factory.mktemp("eval_bag")
    scene = write_two_room_scene(root / "scenes")
    store = typestore_for_distro()
    annotated, plain = BagWriter(root / "annotated", "mcap", store), BagWriter(root / "plain", "sqlite3", store)
    rec = record_patrol_bag(scene, [(annotated, True), (plain, False)], PatrolConfig(frames=160, waypoints=3, seed=1),
                            SimConfig(seed=1, odom_noise_trans_std=0.05, odom_noise_rot_std=0.05))
    annotated.close()
    plain.close()
    assert rec["frames"] == 160 and rec["legs"] >= 3
    return {"annotated": root / "annotated", "plain": root / "plain"}


@pytest.fixture(scope="module")
def models():
    from memnav.core.encoder import Encoder

    return Encoder.from_checkpoint(MODELS / "encoder.pt"), load_calibrator(MODELS / "stop_calibration.json")


def digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


CFG = EvalConfig(revisit_min_age_s=4.0)


def test_cli_writes_report_and_scores_the_patrol(bags, tmp_path, capsys):
    from memnav.cli import main

    before = digest(bags["annotated"])
    report = tmp_path / "report"
    assert main(["eval-bag", str(bags["annotated"]), "--report", str(report), "--revisit-min-age", "4",
                 "--no-progress"]) == 0
    assert digest(bags["annotated"]) == before, "the input bag was modified"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"], "files written outside the report folder"
    names = {p.name for p in report.iterdir()}
    assert {"report.html", "metrics.json", "trajectory.png", "metrics_over_time.png", "latency.png"} <= names
    for png in report.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    html = (report / "report.html").read_text()
    assert "trajectory.png" in html and "metrics_over_time.png" in html and "Place recognition" in html

    m = json.loads((report / "metrics.json").read_text())
    assert m["input"]["frames"] == 160 and m["input"]["reference"] == "ground_truth"
    assert m["bag"]["storage"] == "mcap" and m["bag"]["topics"]["/odom"]["count"] == 160
    pr = m["place_recognition"]
    assert pr["queries_with_match"] > 20 and pr["recall_at_1"] >= 0.8 and pr["recall_at_5"] >= pr["recall_at_1"]
    lc = m["loop_closure"]
    assert lc["revisit_frames"] > 20 and 0.0 <= lc["recall"] <= 1.0
    assert lc["events"] == 0 or lc["precision"] is not None
    mem = m["memory"]
    assert 10 <= mem["places"] < 160 and sum(mem["inserts"].values()) == 160
    growth = mem["growth"]
    assert [g["places"] for g in growth][-1] == mem["places"] and growth[-1]["t_s"] == pytest.approx(15.9)
    assert all(a["frames"] <= b["frames"] for a, b in zip(growth, growth[1:]))
    stop = m["stop"]
    assert stop["available"] and stop["labelled"] and stop["frames_labelled"] == 160
    assert 0 < stop["frames_at_goal"] < 160 and len(stop["episodes"]) == m["input"]["goals"] >= 3
    assert stop["voi"]["precision"] is None or 0.0 <= stop["voi"]["precision"] <= 1.0
    for stage in ("read_decode", "encode", "memory_insert", "retrieve", "stop", "total"):
        assert m["latency_ms"][stage]["count"] == 160 and m["latency_ms"][stage]["p50"] >= 0
    assert m["timing"]["bag_duration_s"] == pytest.approx(15.9, abs=0.01) and m["timing"]["realtime_factor"] > 1
    out = capsys.readouterr().out
    assert "place recognition recall@1" in out and "report.html" in out


def test_same_bag_same_metrics(bags, models):
    enc, cal = models
    a = evaluate_bag(bags["annotated"], CFG, encoder=enc, calibrator=cal).to_json()
    b = evaluate_bag(bags["annotated"], CFG, encoder=enc, calibrator=cal).to_json()
    strip = lambda m: json.dumps({k: v for k, v in m.items() if k not in VOLATILE}, sort_keys=True, default=str)  # noqa: E731
    assert strip(a) == strip(b)


def test_without_annotations_uses_odometry_and_skips_stop(bags, models):
    enc, cal = models
    m = evaluate_bag(bags["plain"], CFG, encoder=enc, calibrator=cal).to_json()
    assert m["bag"]["storage"] == "sqlite3" and m["input"]["reference"] == "odometry"
    assert m["stop"] == {"available": False, "reason": "no goal images on /memnav/goal_image"}
    assert m["input"]["frames"] == 160 and m["place_recognition"]["queries_with_match"] > 0


def test_missing_topic_is_a_clear_error_and_writes_nothing(bags, tmp_path, capsys):
    from memnav.cli import main

    report = tmp_path / "report"
    assert main(["eval-bag", str(bags["plain"]), "--report", str(report), "--rgb-topic", "/nope"]) == 2
    err = capsys.readouterr().err
    assert "/nope" in err and "/camera/color/image_raw" in err and not report.exists()
    assert main(["eval-bag", str(bags["plain"]), "--report", str(bags["plain"] / "r")]) == 2
    assert "inside the bag" in capsys.readouterr().err and not (bags["plain"] / "r").exists()
    assert main(["eval-bag", str(tmp_path / "missing"), "--report", str(report)]) == 2


def test_bad_messages_are_skipped_and_counted(bags, models, tmp_path):
    """Stamps going backwards, an image whose data does not match its header, an odometry gap."""
    enc, cal = models
    src = BagFile(bags["plain"])
    store = src.typestore
    out = BagWriter(tmp_path / "bad", "mcap", typestore_for_distro())
    rgb_i = depth_i = 0
    for m in src.messages():
        msg = m.msg
        if m.topic == "/camera/color/image_raw":
            rgb_i += 1
            if rgb_i == 50:   # stamped 3 s before its predecessor
                msg.header.stamp.sec -= 3
        if m.topic == "/camera/depth/image_raw":
            depth_i += 1
            if depth_i == 50:
                msg.header.stamp.sec -= 3
            if depth_i == 80:
                msg.data = msg.data[:100]
        if m.topic == "/odom" and 1.0 * 10**9 < m.log_time_ns - src.start_ns < 2.2 * 10**9:
            continue   # 1.2 s without odometry
        out.add_topic(m.topic, m.msgtype, src.topics[m.topic].qos)
        out.write_raw(m.topic, m.log_time_ns, bytes(store.serialize_cdr(msg, m.msgtype)))
    out.close()
    src.close()
    m = evaluate_bag(tmp_path / "bad", CFG, encoder=enc, calibrator=cal).to_json()
    skipped = m["input"]["skipped"]
    assert skipped["out_of_order"] == {"/camera/color/image_raw": 1}
    assert skipped["invalid_message"] == {"/camera/depth/image_raw: MessageError": 1}
    assert skipped["rgb_without_depth"] == 1 and "depth_without_rgb" not in skipped
    assert 8 <= skipped["frame_without_odometry"] <= 12
    assert m["input"]["frames"] == 160 - 2 - skipped["frame_without_odometry"]


def test_truncated_bag_is_evaluated_up_to_the_damage(bags, models, tmp_path):
    enc, cal = models
    data = next(bags["annotated"].glob("*.mcap")).read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: len(data) // 2])
    m = evaluate_bag(cut, CFG, encoder=enc, calibrator=cal).to_json()
    assert cut.read_bytes() == data[: len(data) // 2]
    assert m["input"]["truncated"] and m["bag"]["salvaged"]
    assert 20 < m["input"]["frames"] < 100
    assert m["bag"]["format"] == "mcap" and m["memory"]["places"] > 0


def _mcap_rows(store, path: Path, rows: list[tuple[str, str, bytes, int]]) -> None:
    """(topic, type, bytes, log time) rows, in this order, as a bare .mcap written by the independent `mcap`
    writer; a type `store` does not know gets an empty schema (unknown to every reader)."""
    from mcap.writer import Writer

    channels: dict[str, int] = {}
    with path.open("wb") as f:
        w = Writer(f)
        w.start(profile="ros2", library="memnav-test")

        def channel(topic: str, msgtype: str) -> int:
            if topic not in channels:
                known = msgtype in store.types
                text = store.generate_msgdef(msgtype, ros_version=2)[0] if known else ""
                sid = w.register_schema(name=msgtype, encoding="ros2msg", data=text.encode())
                channels[topic] = w.register_channel(topic=topic, message_encoding="cdr", schema_id=sid)
            return channels[topic]

        for topic, msgtype, raw, t in rows:
            w.add_message(channel(topic, msgtype), log_time=t, data=raw, publish_time=t)
        w.finish()


def _bare_mcap(src: BagFile, path: Path, extra: list[tuple[str, str, bytes, int]]) -> None:
    """`src` plus `extra` (topic, type, bytes, log time) messages as a bare .mcap, in log-time order."""
    rows = [(m.topic, m.msgtype, m.raw, m.log_time_ns) for m in src.messages(decode=False)] + extra
    _mcap_rows(src.typestore, path, sorted(rows, key=lambda r: r[3]))


def test_a_bag_of_a_namespaced_robot_is_read_with_namespace(bags, models, tmp_path, capsys):
    """The patrol recorded as a robot in namespace /robot1 would be (`memnav record` of its topics): with
    `--namespace robot1` the same frames, goals and metrics as the root-namespace bag; without it, the missing
    topic is named beside the bag's own."""
    from memnav.cli import main

    src = BagFile(bags["annotated"])
    rows = [("/robot1" + m.topic, m.msgtype, m.raw, m.log_time_ns) for m in src.messages(decode=False)]
    namespaced = tmp_path / "robot1.mcap"
    _mcap_rows(src.typestore, namespaced, sorted(rows, key=lambda r: r[3]))
    enc, cal = models
    root = evaluate_bag(bags["annotated"], CFG, encoder=enc, calibrator=cal).to_json()
    assert main(["eval-bag", str(namespaced), "--namespace", "robot1", "--report", str(tmp_path / "r"),
                 "--revisit-min-age", "4", "--no-progress"]) == 0
    got = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert got["input"]["frames"] == root["input"]["frames"] == 160 and got["input"]["goals"] == root["input"]["goals"]
    for key in ("place_recognition", "loop_closure", "stop"):
        assert json.dumps(got[key], sort_keys=True) == json.dumps(root[key], sort_keys=True, default=str), key
    assert got["memory"]["places"] == root["memory"]["places"]
    assert main(["eval-bag", str(namespaced), "--report", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert "/camera/color/image_raw" in err and "/robot1/camera/color/image_raw" in err
    assert main(["eval-bag", str(namespaced), "--namespace", "robot 1", "--report", str(tmp_path / "r3")]) == 2
    assert "--namespace must be a ROS namespace" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists() and not (tmp_path / "r3").exists()


def test_unknown_types_and_undecodable_messages_are_skipped_and_reported(bags, models, tmp_path):
    """A topic of a type no definition is known for, and odometry messages whose bytes are cut short."""
    enc, cal = models
    with BagFile(bags["annotated"]) as src:
        t0 = src.start_ns
        extra = [("/acme/secret", "acme_msgs/msg/Secret", b"\x00\x01\x00\x00abcd", t0 + i * 10**9) for i in range(3)]
        extra += [("/odom", "nav_msgs/msg/Odometry", b"\x00\x01\x00\x00\x01", t0 + 5 * 10**8 + i) for i in range(2)]
        _bare_mcap(src, tmp_path / "foreign.mcap", extra)
    before = digest(tmp_path / "foreign.mcap")
    result = evaluate_bag(tmp_path / "foreign.mcap", CFG, encoder=enc, calibrator=cal)
    m = result.to_json()
    assert digest(tmp_path / "foreign.mcap") == before
    inp = m["input"]
    assert inp["skipped"]["deserialize_error"] == {"/odom": 2}
    # a topic the evaluation does not use is not read: it is listed with its count, not decoded
    assert inp["unknown_type_topics"] == {"/acme/secret": "acme_msgs/msg/Secret"}
    assert m["bag"]["topics"]["/acme/secret"] == {"type": "acme_msgs/msg/Secret", "count": 3, "known_type": False}
    assert m["bag"]["format"] == "mcap" and inp["skipped"]["unknown_type"] == {}
    assert inp["frames"] == 160 and inp["reference"] == "ground_truth"   # the rest of the bag is intact
    from memnav.eval.report import write_report

    write_report(result, tmp_path / "report")
    html = (tmp_path / "report" / "report.html").read_text()
    assert "unknown type, skipped" in html and "/acme/secret" in html and "deserialize_error" in html


@pytest.mark.parametrize("name, content, match", [
    ("noise.mcap", b"\x00garbage" * 50, "not an MCAP file"),
    ("broken.db3", b"SQLite format 3\x00" + b"\x00" * 50, "cannot read bag"),
])
def test_corrupt_bag_is_a_clear_error_and_writes_nothing(tmp_path, capsys, name, content, match):
    from memnav.cli import main

    bag = tmp_path / name
    bag.write_bytes(content)
    report = tmp_path / "report"
    assert main(["eval-bag", str(bag), "--report", str(report), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert name in err and match in err
    assert not report.exists() and bag.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_pose_track_interpolates_yaw_across_pi():
    from memnav.core.types import Pose2D
    from memnav.eval.eval_bag import PoseTrack

    track = PoseTrack(max_gap_ns=10**9)
    assert track.add(0, Pose2D(0.0, 0.0, 3.0)) and track.add(10**8, Pose2D(1.0, 2.0, -3.0))
    assert not track.add(10**8, Pose2D(5.0, 5.0, 0.0))
    mid = track.at(5 * 10**7)
    assert (mid.x_m, mid.y_m) == pytest.approx((0.5, 1.0))
    assert abs(abs(mid.yaw_rad) - np.pi) < 1e-6
    assert track.at(5 * 10**9) is None


def test_bench_replay_keys(tmp_path):
    """`memnav bench replay` on tiny settings: it records its own bags (a house is generated) and times them."""
    from memnav.cli import main

    out = tmp_path / "replay.json"
    assert main(["bench", "replay", "--data", str(tmp_path / "no_data"), "--seconds", "3", "--repeats", "1",
                 "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["frames"] == 31 and res["bag_duration_s"] == pytest.approx(3.0) and res["image_px"] == 128
    assert res["realtime_factor"] > 0 and res["realtime_factor_annotated"] > 0
    assert set(res["latency_ms_p50"]) >= {"read_decode", "encode", "memory_insert", "total"}
    assert res["targets"] == {"realtime_factor": 20}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay.json"]   # the bags lived in a temp folder


# a square patrol of 16 m per lap (4 m sides), a frame every second and every 2 m (x, y, yaw): lap 1 creates a place
# per frame, lap 2 comes by the same poses again
_E, _N, _W, _S = 0.0, np.pi / 2, np.pi, -np.pi / 2
LAP = [(0, 0, _E), (2, 0, _E), (4, 0, _N), (4, 2, _N), (4, 4, _W), (2, 4, _W), (0, 4, _S), (0, 2, _S)]


def _frame(t_s: int, pose: tuple | None, kind: str, place: int):
    from memnav.core.memory.scene_graph import InsertKind
    from memnav.core.types import Pose2D
    from memnav.eval.eval_bag import FrameRecord

    ref = None if pose is None else Pose2D(float(pose[0]), float(pose[1]), float(pose[2]))
    return FrameRecord(t_s * 10**9, ref or Pose2D(0.0, 0.0, 0.0), ref, InsertKind(kind), place)


def test_loop_closure_metrics_on_a_patrol_with_known_revisits():
    """Revisits are frames 8-13 (lap 2 at a lap-1 pose at least 5 s older, within 1 m and 45 deg); the memory's
    scripted answers make 2 of 4 loop closures correct and 3 of 6 revisits recognised."""
    from memnav.eval.eval_bag import loop_closure_metrics

    frames = [_frame(i, p, "new_place", 100 + i) for i, p in enumerate(LAP)]   # lap 1: places 100-107
    frames += [
        _frame(8, LAP[0], "loop_closure", 100),    # right place: true positive, recognised
        _frame(9, LAP[1], "updated_place", 101),   # an old place updated: recognised without a loop closure
        _frame(10, LAP[2], "loop_closure", 106),   # aliasing: closed onto (0, 4) from (4, 0): false positive
        _frame(11, LAP[3], "new_place", 108),      # revisit missed
        _frame(12, LAP[3], "updated_place", 108),  # paused: the right spot, but a place created 1 s ago
        _frame(13, LAP[4], "loop_closure", 104),   # right place: true positive, recognised
        _frame(14, (2, 4, _E), "loop_closure", 105),   # turned around at (2, 4): 180 deg off, false positive
        _frame(15, None, "updated_place", 106),    # no reference pose: not judged as a revisit
    ]
    kw = dict(min_age_ns=5 * 10**9, dist_m=1.0, angle_rad=np.radians(45.0))
    m = loop_closure_metrics(frames, **kw)
    assert m == {"events": 4, "true_positives": 2, "precision": 0.5,
                 "revisit_frames": 6, "recognised_revisits": 3, "recall": 0.5}
    assert loop_closure_metrics(frames, **kw, chunk=3) == m     # chunking does not change the result
    # a wider angle bound makes the turned-around closure at (2, 4) correct and that frame a recognised revisit
    wide = loop_closure_metrics(frames, min_age_ns=5 * 10**9, dist_m=1.0, angle_rad=np.radians(180.0))
    assert (wide["true_positives"], wide["revisit_frames"], wide["recognised_revisits"]) == (3, 7, 4)
    # with a minimum age of 9 s only frames 12 and 13 have an old enough frame at their pose; 12 updated a young
    # place: 1 of 2 recognised (precision does not depend on the age)
    old = loop_closure_metrics(frames, min_age_ns=9 * 10**9, dist_m=1.0, angle_rad=np.radians(45.0))
    assert (old["revisit_frames"], old["recognised_revisits"], old["precision"]) == (2, 1, 0.5)
    # lap 1 alone never comes back: no revisit even when any earlier frame counts (a frame is not its own revisit)
    lap1 = loop_closure_metrics(frames[:8], min_age_ns=0, dist_m=1.0, angle_rad=np.radians(45.0))
    assert lap1 == {"events": 0, "true_positives": 0, "precision": None,
                    "revisit_frames": 0, "recognised_revisits": 0, "recall": None}


def test_place_recognition_never_counts_a_frame_as_its_own_match():
    """With no minimum age (any earlier frame may match) a path that never comes back has nothing to recall; a
    frame seen again later is found among the earlier ones only."""
    from memnav.eval.eval_bag import place_recognition

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(12, 16))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    stamps = np.arange(12, dtype=np.int64) * 10**9
    ref = np.c_[np.arange(12) * 5.0, np.zeros(12), np.zeros(12)]   # a straight line, 5 m per frame
    valid = np.ones(12, bool)
    kw = dict(min_age_ns=0, dist_m=1.0, angle_rad=np.radians(30.0))
    assert place_recognition(emb, stamps, ref, valid, **kw) == {"recall_at_1": None, "recall_at_5": None,
                                                                "queries_with_match": 0}
    ref[11] = ref[3]            # the last frame comes back to frame 3's pose and looks like it
    emb[11] = emb[3]
    assert place_recognition(emb, stamps, ref, valid, **kw) == {"recall_at_1": 1.0, "recall_at_5": 1.0,
                                                                "queries_with_match": 1}


def test_backwards_odometry_and_log_times_out_of_order_are_skipped_and_counted(bags, models, tmp_path):
    """A recorder killed mid-write (a .mcap without its footer is read in storage order) whose file holds odometry
    stamped back in time or twice with the same stamp (carrying a bogus pose) and messages stored out of log-time
    order: odometry samples that do not advance are dropped and counted, a colour frame older than the previous
    one is dropped and counted, log times going back are counted, everything else is evaluated."""
    enc, cal = models
    with BagFile(bags["plain"]) as src:
        store = src.typestore
        rows, odom_i, odom_stamps = [], 0, []
        for m in src.messages():
            msg = m.msg
            if m.topic == "/odom":
                st = msg.header.stamp
                odom_stamps.append((st.sec, st.nanosec))
                if odom_i in (40, 60):         # 3 s back in time; the same stamp as the previous sample
                    st.sec, st.nanosec = (st.sec - 3, st.nanosec) if odom_i == 40 else odom_stamps[59]
                    msg.pose.pose.position.x = 50.0
                odom_i += 1
            rows.append([m.topic, m.msgtype, bytes(store.serialize_cdr(msg, m.msgtype)), m.log_time_ns])
        seen: Counter = Counter()
        position = {}                          # (topic, index within the topic) -> row
        for k, r in enumerate(rows):
            position[(r[0], seen[r[0]])] = k
            seen[r[0]] += 1
        for topic, a, b in (("/odom", 100, 101), ("/camera/color/image_raw", 120, 121)):   # stored swapped
            ka, kb = position[(topic, a)], position[(topic, b)]
            rows[ka], rows[kb] = rows[kb], rows[ka]
    _mcap_rows(store, tmp_path / "full.mcap", [tuple(r) for r in rows])
    data = (tmp_path / "full.mcap").read_bytes()
    killed = tmp_path / "killed.mcap"
    killed.write_bytes(data[: len(data) - 40])   # the footer is lost: read sequentially, as stored
    before = digest(killed)
    result = evaluate_bag(killed, CFG, encoder=enc, calibrator=cal)
    m = result.to_json()
    assert digest(killed) == before
    inp = m["input"]
    assert m["bag"]["salvaged"] and inp["truncated"]
    # dropped: odometry 40 (back in time), 60 (same stamp), 100 (stored after 101); colour frame 120 (after 121)
    assert inp["skipped"]["out_of_order"] == {"/odom": 3, "/camera/color/image_raw": 1}
    assert {k: v for k, v in inp["skipped"].items() if v and k != "out_of_order"} == {}
    # log times going back, per reading pass: odometry 100 after 101; depth 120 and colour 120 after colour 121
    assert inp["log_time_out_of_order"] == 3
    assert inp["frames"] == 159 and len(result.frames) == 159
    stamps = [f.stamp_ns for f in result.frames]
    assert stamps == sorted(stamps) and len(set(stamps)) == 159
    assert max(abs(f.odom.x_m) for f in result.frames) < 9.0    # the bogus x = 50 m poses were never used


@pytest.mark.parametrize("options, named", [
    (["--batch-size", "0"], "--batch-size"),
    (["--threads", "0"], "--threads"),
    (["--max-frames", "-1"], "--max-frames"),
    (["--sync-tolerance", "-1"], "--sync-tolerance"),
    (["--sync-tolerance", "nan"], "--sync-tolerance"),
    (["--place-distance", "inf"], "--place-distance"),
    (["--place-angle", "0"], "--place-angle"),
    (["--revisit-min-age", "nan"], "--revisit-min-age"),
    (["--loop-distance", "nan"], "--loop-distance"),
    (["--success-distance=-inf"], "--success-distance"),
    (["--rgb-topic", ""], "--rgb-topic"),
    (["--odom-topic", ""], "--odom-topic"),
])
def test_cli_names_the_one_bad_option_and_writes_nothing(tmp_path, capsys, options, named):
    from memnav.cli import main

    report = tmp_path / "report"
    assert main(["eval-bag", str(tmp_path / "no_bag"), "--report", str(report), "--no-progress", *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memnav eval-bag: error: {named} ") and len(err.splitlines()) == 1
    assert "EvalConfig" not in err and not report.exists()


@pytest.mark.parametrize("options, named", [
    (["--rate", "nan"], "--rate"),
    (["--rate", "0"], "--rate"),
    (["--seconds", "inf"], "--seconds"),
    (["--repeats", "0"], "--repeats"),
    (["--batch-size", "0"], "--batch-size"),
    (["--threads", "0"], "--threads"),
])
def test_bench_replay_names_the_one_bad_option(tmp_path, capsys, options, named):
    from memnav.cli import main

    assert main(["bench", "replay", "--data", str(tmp_path / "no_data"), *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memnav bench: error: {named} ") and len(err.splitlines()) == 1
    assert "EvalConfig" not in err and list(tmp_path.iterdir()) == []


def test_eval_config_still_names_its_fields():
    with pytest.raises(ValueError, match=r"EvalConfig.batch_size must be >= 1"):
        EvalConfig(batch_size=0)
    with pytest.raises(ValueError, match=r"EvalConfig.revisit_min_age_s must be a finite number"):
        EvalConfig(revisit_min_age_s=float("nan"))


def test_help_describes_empty_values_in_words(capsys):
    from memnav.cli import main

    with pytest.raises(SystemExit):
        main(["eval-bag", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "{," not in text and "--distro DISTRO" in text and "humble, iron, jazzy, kilted" in text
    assert "goal depth images ('' = none" in text and "goal pose annotations, map frame ('' = none" in text


def test_a_stop_exactly_at_the_success_radius_is_outside_it_as_in_live_evaluation():
    """Live success is strictly within success_distance_m (after habitat-lab); eval-bag's at-goal label too."""
    from memnav.core.memory.scene_graph import InsertKind
    from memnav.core.types import Pose2D
    from memnav.eval.eval_bag import FrameRecord, Goal, _stop_metrics
    from memnav.sim.metrics import is_success

    cfg = EvalConfig()
    goal = Goal(0, np.zeros((4, 4, 3), np.uint8), None, Pose2D(0.0, 0.0, 0.0))
    for x_m, inside in ((cfg.success_distance_m, False), (cfg.success_distance_m - 1e-6, True)):
        frame = FrameRecord(10, Pose2D(x_m, 0, 0), Pose2D(x_m, 0, 0), InsertKind.NEW_PLACE, 0, goal_index=0,
                            similarity=0.9, belief=0.99, stop=True, stop_fixed=True)
        metrics = _stop_metrics([frame], [goal], np.array([[x_m, 0.0, 0.0]]), np.array([True]), cfg)
        assert metrics["episodes"][0]["first_stop_within_radius"] is inside
        assert is_success(True, x_m, cfg.success_distance_m) is inside


def _without_ground_truth(bag: Path, out: Path, *, odom_frame: str, from_start: bool) -> None:
    """`bag` without its ground-truth topic, as a bare .mcap, its odometry stamped in `odom_frame`; with
    `from_start` the odometry is re-expressed from its first pose, zero where the robot started (what a stack run
    with odometry_origin: start records), while the goal poses stay in the map frame."""
    import math

    from memnav.eval.eval_bag import pose_of

    rows, origin = [], None
    with BagFile(bag) as src:
        store = src.typestore
        for m in src.messages():
            if m.topic == "/memnav/ground_truth_pose":
                continue
            msg = m.msg
            if m.topic == "/odom":
                msg.header.frame_id = odom_frame
                if from_start:
                    pose = pose_of(msg, m.msgtype)
                    origin = origin or pose
                    rel = pose.relative_to(origin)
                    p, q = msg.pose.pose.position, msg.pose.pose.orientation
                    p.x, p.y = rel.x_m, rel.y_m
                    q.x, q.y, q.z, q.w = 0.0, 0.0, math.sin(rel.yaw_rad / 2), math.cos(rel.yaw_rad / 2)
            rows.append((m.topic, m.msgtype, bytes(store.serialize_cdr(msg, m.msgtype)), m.log_time_ns))
    _mcap_rows(store, out, sorted(rows, key=lambda r: r[3]))


def _reference_warnings(metrics: dict) -> list[str]:
    return [w for w in metrics["input"]["warnings"] if w.startswith("stop labels may be wrong")]


def test_goal_poses_scored_against_odometry_not_in_their_frame_are_warned_about(bags, models, tmp_path, capsys):
    """A bag without ground truth from a stack whose odometry starts at zero where the robot started
    (odometry_origin: start): its goal poses are in the map frame, its odometry is not, so the distance-to-goal
    labels are wrong. eval-bag says so on stderr and in input.warnings (metrics.json, the report); it does not for
    ground truth, nor for odometry stamped in the goal poses' frame."""
    import html
    from dataclasses import replace

    from memnav.cli import main

    enc, cal = models
    start = tmp_path / "start.mcap"
    _without_ground_truth(bags["annotated"], start, odom_frame="odom", from_start=True)
    report = tmp_path / "report"
    assert main(["eval-bag", str(start), "--report", str(report), "--revisit-min-age", "4", "--no-progress"]) == 0
    err = capsys.readouterr().err
    m = json.loads((report / "metrics.json").read_text())
    assert m["input"]["reference"] == "odometry" and m["input"]["goals_with_pose"] == m["input"]["goals"] >= 3
    (warning,) = _reference_warnings(m)
    assert "frame 'map'" in warning and "frame 'odom'" in warning and "odometry_origin: start" in warning
    assert "none on /memnav/ground_truth_pose" in warning
    assert f"memnav eval-bag: warning: {warning}" in err.splitlines()
    assert html.escape(warning) in (report / "report.html").read_text()
    # the labels are indeed off: against ground truth the same frames are at their goals elsewhere
    truth = evaluate_bag(bags["annotated"], CFG, encoder=enc, calibrator=cal).to_json()
    assert _reference_warnings(truth) == [] and truth["input"]["reference"] == "ground_truth"
    assert m["stop"]["frames_at_goal"] != truth["stop"]["frames_at_goal"], (m["stop"], truth["stop"])

    short = EvalConfig(revisit_min_age_s=4.0, max_frames=10)
    # ground truth left out on purpose: the same odometry ('odom') and goal poses ('map') are flagged
    dropped = evaluate_bag(bags["annotated"], replace(short, gt_topic=""), encoder=enc, calibrator=cal).to_json()
    (warning,) = _reference_warnings(dropped)
    assert "--gt-topic ''" in warning and "frame 'odom'" in warning
    # odometry stamped in the map frame, as the goal poses: nothing to flag
    in_map = tmp_path / "in_map.mcap"
    _without_ground_truth(bags["annotated"], in_map, odom_frame="map", from_start=False)
    m = evaluate_bag(in_map, short, encoder=enc, calibrator=cal).to_json()
    assert m["input"]["reference"] == "odometry" and m["input"]["goals_with_pose"] >= 3
    assert _reference_warnings(m) == []
    # no goal poses to score: nothing to flag either
    assert _reference_warnings(evaluate_bag(bags["plain"], short, encoder=enc, calibrator=cal).to_json()) == []


T0_NS = 1_700_000_000 * 10**9


def _tiny_bag(path: Path, frames: int, *, depth_px=lambda i: (32, 32), depth_msgs: bool = True,
              late_topic_s: float = 0.0) -> Path:
    """A 10 Hz bag of `frames` random 32x32 colour images, depth images of `depth_px(i)` (height, width) px (the
    topic declared but left empty unless `depth_msgs`), odometry 0.1 m apart; with `late_topic_s` a message on
    another topic that long after the last frame (a bag whose other topics were recorded longer)."""
    from memnav.core.types import Pose2D
    from memnav.eval.bench_replay import _Msgs

    store = typestore_for_distro()
    msgs, rng = _Msgs(store), np.random.default_rng(0)
    with BagWriter(path, "mcap", store) as w:
        for topic in ("/camera/color/image_raw", "/camera/depth/image_raw"):
            w.add_topic(topic, "sensor_msgs/msg/Image")
        for i in range(frames):
            t = T0_NS + i * 10**8
            w.write("/camera/color/image_raw", msgs.rgb(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), t), t)
            if depth_msgs:
                w.write("/camera/depth/image_raw", msgs.depth(rng.uniform(0.5, 5.0, depth_px(i)).astype(np.float32),
                                                              t), t)
            w.write("/odom", msgs.odometry(Pose2D(0.1 * i, 0.0, 0.0), t, "odom"), t)
        if late_topic_s:
            t = T0_NS + (frames - 1) * 10**8 + int(late_topic_s * 1e9)
            w.write("/status", store.types["std_msgs/msg/String"](data="still recording"), t)
    return path


def test_realtime_factor_is_over_the_evaluated_frames_not_the_whole_bag(models, tmp_path):
    """--max-frames, or a topic recorded a minute longer than the camera: the realtime factor divides the time of the
    frames evaluated by the wall time (it divided the whole bag's span: hundreds of times 'real time' claimed)."""
    enc, cal = models
    bag = _tiny_bag(tmp_path / "bag", 40, late_topic_s=60.0)
    for max_frames, evaluated_s in ((10, 0.9), (0, 3.9)):
        tm = evaluate_bag(bag, EvalConfig(max_frames=max_frames), encoder=enc, calibrator=cal).to_json()["timing"]
        assert tm["realtime_factor"] == pytest.approx(evaluated_s / tm["wall_s"])
        assert tm["bag_duration_s"] == pytest.approx(63.9) and tm["evaluated_duration_s"] == pytest.approx(evaluated_s)


def test_a_depth_topic_without_messages_is_left_out_with_a_warning(models, tmp_path):
    """A declared but silent depth topic (a camera's depth stream switched off) skipped every colour frame as
    'rgb_without_depth': a report of zero frames without a word."""
    enc, cal = models
    m = evaluate_bag(_tiny_bag(tmp_path / "bag", 20, depth_msgs=False), EvalConfig(), encoder=enc,
                     calibrator=cal).to_json()
    assert m["input"]["frames"] == 20 and "rgb_without_depth" not in m["input"]["skipped"]
    assert "depth topic /camera/depth/image_raw holds no messages: frames are encoded without depth" \
        in m["input"]["warnings"]


def test_depth_of_another_size_is_skipped_as_live_and_results_do_not_depend_on_batch_size(models, tmp_path):
    """A depth image of another size than its colour image (unregistered depth) made its whole encoder batch go
    without depth, silently: the places found depended on --batch-size. Such a pair is dropped, as the live encoder
    node drops it, counted and warned about."""
    enc, cal = models
    bag = _tiny_bag(tmp_path / "bag", 16, depth_px=lambda i: (24, 32) if i == 5 else (32, 32))
    runs = [evaluate_bag(bag, EvalConfig(batch_size=b), encoder=enc, calibrator=cal).to_json() for b in (1, 8)]
    for m in runs:
        assert m["input"]["frames"] == 15 and m["input"]["skipped"]["depth_size_mismatch"] == 1
        (warning,) = m["input"]["warnings"]
        assert "depth images on /camera/depth/image_raw are 32x24 px" in warning and "32x32 px" in warning
    strip = lambda m: json.dumps({k: v for k, v in m.items() if k not in (*VOLATILE, "config")},  # noqa: E731
                                 sort_keys=True, default=str)
    assert strip(runs[0]) == strip(runs[1])


def test_a_report_of_zero_frames_keeps_the_metrics_keys(models, tmp_path):
    """Every depth image of another size: nothing is evaluated; metrics.json has the same keys as ever (recall@k
    null, no realtime factor) and the report is written."""
    from memnav.eval.report import write_report

    enc, cal = models
    bag = _tiny_bag(tmp_path / "bag", 10, depth_px=lambda i: (24, 32))
    result = evaluate_bag(bag, EvalConfig(), encoder=enc, calibrator=cal)
    m = result.to_json()
    assert m["input"]["frames"] == 0 and m["input"]["skipped"]["depth_size_mismatch"] == 10
    assert m["place_recognition"]["recall_at_1"] is None and m["place_recognition"]["recall_at_5"] is None
    assert m["timing"]["realtime_factor"] is None and m["timing"]["evaluated_duration_s"] == 0.0
    write_report(result, tmp_path / "report")
    html = (tmp_path / "report" / "report.html").read_text()
    assert "recall_at_1" in html and "depth_size_mismatch" in html


def _goal_bag(path: Path, goal_depths: list[tuple[int, tuple[int, int]] | None], frames: int = 40) -> list:
    """`_tiny_bag`'s 10 Hz frames (colour, depth, odometry) with a goal image every 10 frames; goal k's depth image
    (if any) is stamped `goal_depths[k][0]` ns after it and is `goal_depths[k][1]` (height, width) px. Returns the
    goal depth arrays written (None where none)."""
    from memnav.core.types import Pose2D
    from memnav.eval.bench_replay import _Msgs

    store = typestore_for_distro()
    msgs, rng = _Msgs(store), np.random.default_rng(1)
    written = []
    with BagWriter(path, "mcap", store) as w:
        for i in range(frames):
            t = T0_NS + i * 10**8
            if i % 10 == 0:
                w.write("/memnav/goal_image", msgs.rgb(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), t), t)
                spec = goal_depths[i // 10]
                written.append(None if spec is None else rng.uniform(0.5, 5.0, spec[1]).astype(np.float32))
                if spec is not None:
                    w.write("/memnav/goal_depth", msgs.depth(written[-1], t + spec[0]), t + max(0, spec[0]))
            w.write("/camera/color/image_raw", msgs.rgb(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), t), t)
            w.write("/camera/depth/image_raw", msgs.depth(rng.uniform(0.5, 5.0, (32, 32)).astype(np.float32), t), t)
            w.write("/odom", msgs.odometry(Pose2D(0.1 * i, 0.0, 0.0), t, "odom"), t)
    return written


def test_goal_depth_pairs_by_nearest_stamp_within_the_tolerance_and_goals_without_it_are_counted(models, tmp_path):
    """Goal depth was paired with its goal image by an exact stamp only: a depth image 5 ms off (another driver, a
    re-stamped photo) left its goal without depth, silently. It pairs now as live colour and depth frames do:
    nearest stamp within --sync-tolerance. Goals left without depth are counted and warned about."""
    from dataclasses import replace

    enc, cal = models
    bag = tmp_path / "bag"
    written = _goal_bag(bag, [(5_000_000, (32, 32)), (-15_000_000, (32, 32)), (50_000_000, (32, 32)),
                              (0, (24, 32))])
    result = evaluate_bag(bag, EvalConfig(), encoder=enc, calibrator=cal)
    m = result.to_json()
    assert [g.depth is not None for g in result.goals] == [True, True, False, False]
    assert np.array_equal(result.goals[0].depth, written[0]) and np.array_equal(result.goals[1].depth, written[1])
    inp = m["input"]
    assert inp["goals"] == 4 and inp["goals_without_depth"] == 2 and inp["frames"] == 40
    assert inp["skipped"]["goal_depth_without_goal_image"] == 1 and inp["skipped"]["goal_depth_size_mismatch"] == 1
    (warning,) = inp["warnings"]
    assert warning == ("2 of 4 goal image(s) on /memnav/goal_image are encoded without depth: 1 have no goal depth "
                       "image on /memnav/goal_depth within --sync-tolerance (0.02 s) of their stamp and 1 have one "
                       "of another size than the goal image; 1 goal depth image(s) matched no goal image")
    # a wider tolerance takes the depth image 50 ms off as well
    wide = evaluate_bag(bag, EvalConfig(sync_tolerance_s=0.06), encoder=enc, calibrator=cal)
    assert [g.depth is not None for g in wide.goals] == [True, True, True, False]
    assert wide.to_json()["input"]["goals_without_depth"] == 1
    assert "goal_depth_without_goal_image" not in wide.to_json()["input"]["skipped"]
    # no goal depth asked for: goals go without depth, counted, not warned about (a goal photo without depth)
    m = evaluate_bag(bag, replace(CFG, goal_depth_topic=""), encoder=enc, calibrator=cal).to_json()
    assert m["input"]["goals_without_depth"] == 4 and m["input"]["warnings"] == []
    assert "goal_depth_without_goal_image" not in m["input"]["skipped"]


def test_goal_depth_nearest_in_stamp_wins_and_is_used_once():
    """Two goal images 30 ms apart, their depth images 10 ms after each: each goal takes its own (the nearest), not
    the first within the tolerance; and every goal with depth counts none without."""
    from memnav.eval.eval_bag import Goal, pair_goal_depths

    rgb = np.zeros((4, 4, 3), np.uint8)
    goals = [Goal(1_000_000_000, rgb), Goal(1_030_000_000, rgb)]
    depths = {1_010_000_000: np.full((4, 4), 1.0, np.float32), 1_040_000_000: np.full((4, 4), 2.0, np.float32)}
    skipped = Counter()
    pair_goal_depths(goals, depths, 20_000_000, skipped)
    assert [float(g.depth[0, 0]) for g in goals] == [1.0, 2.0] and skipped == Counter()
    goals = [Goal(1_000_000_000, rgb), Goal(1_030_000_000, rgb)]
    pair_goal_depths(goals, {1_015_000_000: np.ones((4, 4), np.float32)}, 20_000_000, skipped)
    # equally near both: goals take their depth in stamp order, so the earlier one; it is used once
    assert goals[0].depth is not None and goals[1].depth is None and skipped == Counter()


def _topics(*argv: str) -> dict[str, str]:
    import argparse

    from memnav.eval.eval_bag import TOPIC_FIELDS, add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(parser.parse_args(["bag", "--report", "r", *argv]))
    return {f.removesuffix("_topic"): getattr(cfg, f) for f in TOPIC_FIELDS}


def test_topic_options_resolve_as_ros_names_and_namespace_never_moves_an_explicit_absolute_one():
    """`--namespace /robot1 --rgb-topic /camera/color/image_raw`: the user asked for the root camera; it was moved
    under /robot1 all the same, since it equals the default. Relative names never matched the bag's absolute ones;
    they resolve under the namespace (or /) as ROS resolves them."""
    root = {"rgb": "/camera/color/image_raw", "depth": "/camera/depth/image_raw", "odom": "/odom",
            "gt": "/memnav/ground_truth_pose", "goal": "/memnav/goal_image", "goal_depth": "/memnav/goal_depth",
            "goal_pose": "/memnav/goal_pose"}
    robot1 = {k: "/robot1" + v for k, v in root.items()}
    assert _topics() == root
    assert _topics("--namespace", "robot1") == _topics("--namespace", "/robot1/") == robot1
    assert _topics("--namespace", "/robot1", "--rgb-topic", "/camera/color/image_raw",
                   "--gt-topic", "/memnav/ground_truth_pose") == \
        dict(robot1, rgb="/camera/color/image_raw", gt="/memnav/ground_truth_pose")
    assert _topics("--namespace", "robot1", "--rgb-topic", "front/color/image_raw", "--odom-topic", "odom") == \
        dict(robot1, rgb="/robot1/front/color/image_raw", odom="/robot1/odom")
    assert _topics("--namespace", "fleet/robot1", "--odom-topic", "wheel/odom") == \
        dict({k: "/fleet/robot1" + v for k, v in root.items()}, odom="/fleet/robot1/wheel/odom")
    assert _topics("--rgb-topic", "camera/color/image_raw", "--odom-topic", "wheel/odom", "--gt-topic", "") == \
        dict(root, odom="/wheel/odom", gt="")
    assert _topics("--namespace", "robot1", "--goal-topic", "", "--goal-pose-topic", "goal") == \
        dict(robot1, goal="", goal_pose="/robot1/goal")
    with pytest.raises(ValueError, match=r"^--odom-topic '~/odom': a private name"):
        _topics("--odom-topic", "~/odom")
    with pytest.raises(ValueError, match="--namespace must be a ROS namespace"):   # even with every topic given
        _topics("--namespace", "robot 1", *[x for k in root for x in (f"--{k.replace('_', '-')}-topic", "/t")])


def test_a_namespaced_robot_with_root_annotations_and_relative_topic_names(bags, models, tmp_path, capsys):
    """The robot's topics under /robot1, the annotations (ground truth, goals) recorded as the simulator publishes
    them, in the root namespace: `--namespace robot1` with the annotation topics given absolute reads both, and
    scores as the root-namespace bag; relative names given resolve under the namespace (under / without one)."""
    from memnav.cli import main

    with BagFile(bags["annotated"]) as src:
        rows = [(m.topic if m.topic.startswith("/memnav/") else "/robot1" + m.topic, m.msgtype, m.raw, m.log_time_ns)
                for m in src.messages(decode=False)]
        store = src.typestore
    mixed = tmp_path / "mixed.mcap"
    _mcap_rows(store, mixed, sorted(rows, key=lambda r: r[3]))
    enc, cal = models
    root = evaluate_bag(bags["annotated"], CFG, encoder=enc, calibrator=cal).to_json()
    annotations = ["--gt-topic", "/memnav/ground_truth_pose", "--goal-topic", "/memnav/goal_image",
                   "--goal-depth-topic", "/memnav/goal_depth", "--goal-pose-topic", "/memnav/goal_pose"]
    assert main(["eval-bag", str(mixed), "--namespace", "robot1", "--rgb-topic", "camera/color/image_raw",
                 *annotations, "--report", str(tmp_path / "r"), "--revisit-min-age", "4", "--no-progress"]) == 0
    got = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert got["input"]["topics"] == {
        "rgb": "/robot1/camera/color/image_raw", "odom": "/robot1/odom", "depth": "/robot1/camera/depth/image_raw",
        "gt": "/memnav/ground_truth_pose", "goal": "/memnav/goal_image", "goal_depth": "/memnav/goal_depth",
        "goal_pose": "/memnav/goal_pose"}
    assert got["input"]["frames"] == 160 and got["input"]["reference"] == "ground_truth"
    assert got["input"]["goals"] == got["input"]["goals_with_pose"] == root["input"]["goals"] >= 3
    for key in ("place_recognition", "loop_closure", "stop"):
        assert json.dumps(got[key], sort_keys=True) == json.dumps(root[key], sort_keys=True, default=str), key
    # the annotations left at their defaults are looked for under /robot1, and missing there: no stop scoring
    assert main(["eval-bag", str(mixed), "--namespace", "robot1", "--report", str(tmp_path / "r2"),
                 "--max-frames", "10", "--no-progress"]) == 0
    m = json.loads((tmp_path / "r2" / "metrics.json").read_text())
    assert m["input"]["reference"] == "odometry" and m["stop"]["available"] is False
    # relative names without a namespace: under /
    capsys.readouterr()
    assert main(["eval-bag", str(bags["plain"]), "--rgb-topic", "camera/color/image_raw", "--odom-topic", "odom",
                 "--report", str(tmp_path / "r3"), "--max-frames", "10", "--no-progress"]) == 0
    m = json.loads((tmp_path / "r3" / "metrics.json").read_text())
    assert m["input"]["frames"] == 10 and m["input"]["topics"]["odom"] == "/odom"


def test_a_split_recording_without_metadata_is_evaluated_as_the_whole(bags, models, tmp_path, capsys):
    """The patrol recorded with file splitting by a recorder killed before it wrote metadata.yaml: three .mcap files
    (written by the independent mcap writer, as rosbag2's mcap storage does). Its folder, or its files given one by
    one, evaluate as the whole bag does."""
    from memnav.cli import main

    with BagFile(bags["annotated"]) as src:
        rows = [(m.topic, m.msgtype, m.raw, m.log_time_ns) for m in src.messages(decode=False)]
        store, t0 = src.typestore, src.start_ns
    folder = tmp_path / "patrol"
    folder.mkdir()
    edges = [t0 + 5 * 10**9, t0 + 11 * 10**9]          # split every ~5 s of the 16 s patrol
    files = [folder / f"patrol_{k}.mcap" for k in range(3)]
    for k, f in enumerate(files):
        lo, hi = ([0, *edges][k], [*edges, 2**63][k])
        _mcap_rows(store, f, [r for r in rows if lo <= r[3] < hi])
    before = digest(folder)
    enc, cal = models
    whole = evaluate_bag(bags["annotated"], CFG, encoder=enc, calibrator=cal).to_json()
    assert main(["eval-bag", str(folder), "--report", str(tmp_path / "r"), "--revisit-min-age", "4",
                 "--no-progress"]) == 0
    assert main(["eval-bag", *map(str, files[::-1]), "--report", str(tmp_path / "r2"), "--revisit-min-age", "4",
                 "--no-progress"]) == 0
    assert digest(folder) == before and sorted(p.name for p in folder.iterdir()) == [f.name for f in files]
    err = capsys.readouterr().err
    assert "reading its 3 mcap files as the parts of one split recording" in err
    for report in ("r", "r2"):
        m = json.loads((tmp_path / report / "metrics.json").read_text())
        assert m["bag"]["parts"] == [str(f) for f in files]
        assert m["bag"]["message_count"] == whole["bag"]["message_count"]
        assert m["input"]["frames"] == 160 and m["input"]["goals"] == whole["input"]["goals"]
        assert m["timing"]["bag_duration_s"] == pytest.approx(whole["timing"]["bag_duration_s"])
        for key in ("place_recognition", "loop_closure", "stop", "memory"):
            assert json.dumps(m[key], sort_keys=True) == json.dumps(whole[key], sort_keys=True, default=str), key
