"""memnav.core.sensor_check: what `memnav check` concludes from recorded streams, on explicit times."""
import numpy as np
import pytest
import yaml

from memnav.core.sensor_check import (
    CheckConfig,
    FloorFit,
    Level,
    StreamLog,
    check_camera_mount,
    check_command_topic,
    check_streams,
    fit_floor,
    stream_summary,
)


def _stream(topic: str, kind: str, hz: float, seconds: float = 5.0, stamp_lag_s: float = 0.0, start_s: float = 100.0,
            size: tuple[int, int] = (640, 480), encoding: str = "rgb8", gaps_at: float | None = None) -> StreamLog:
    log = StreamLog(topic, kind, publishers=1)
    t = start_s
    while t < start_s + seconds:
        log.arrival_s.append(t)
        log.stamp_s.append(t - stamp_lag_s)
        t += 1.0 / hz
        if gaps_at is not None and abs(t - gaps_at) < 0.5 / hz:
            t += 0.8    # the driver stalls
    if kind != "odom":
        log.width, log.height, log.encoding = size[0], size[1], encoding
    if kind == "depth":
        log.valid_depth = [0.9] * log.count
        log.median_depth_m = [2.1] * log.count
    return log


def _good():
    return (_stream("/c", "color", 30), _stream("/d", "depth", 30, encoding="16UC1"), _stream("/o", "odom", 50))


def test_healthy_streams_pass_with_their_rates_and_pairing():
    findings = check_streams(*_good(), duration_s=5.0)
    assert all(f.level is Level.OK for f in findings), findings
    texts = [f.text for f in findings]
    assert "30.0 Hz, 640x480 rgb8" in texts and "50.0 Hz" in texts
    assert any("100% of the colour frames have a depth frame" in t for t in texts)
    s = stream_summary(_good()[0])
    assert s["rate_hz"] == pytest.approx(30.0, abs=0.1) and s["max_gap_s"] == pytest.approx(1 / 30, abs=1e-3)


def test_silence_unregistered_depth_bad_sync_stalls_and_clock_offsets_are_named():
    color, depth, odom = _good()
    silent = StreamLog("/camera/color", "color", publishers=0, same_type_topics=["/cam/rgb"])
    findings = check_streams(silent, depth, odom, duration_s=5.0)
    fail = next(f for f in findings if f.topic == "/camera/color")
    assert fail.level is Level.FAIL and "no publisher" in fail.text and "/cam/rgb" in fail.text
    quiet = StreamLog("/c", "color", publishers=2)
    assert "LARGE_DATA" in next(f.text for f in check_streams(quiet, depth, odom, 5.0) if f.topic == "/c")
    small = _stream("/d", "depth", 30, size=(320, 240), encoding="16UC1")
    assert any(f.level is Level.FAIL and "must be registered" in f.text for f in check_streams(color, small, odom, 5))
    # the same size, but the depth camera's own frame: unregistered depth, which the encoder node never pairs
    color.frame_id, depth.frame_id = "camera_color_optical_frame", "camera_depth_optical_frame"
    assert any(f.level is Level.FAIL and f.topic == "/d" and "depth is in frame_id 'camera_depth_optical_frame', "
               "colour in 'camera_color_optical_frame'" in f.text for f in check_streams(color, depth, odom, 5))
    depth.frame_id = "camera_color_optical_frame"
    assert not any("frame_id" in f.text for f in check_streams(color, depth, odom, 5))
    # 10 Hz streams whose depth is stamped 50 ms off the colour frames: no pair within 20 ms (at 30 Hz any offset
    # finds some depth frame within half a period, 17 ms)
    color10 = _stream("/c", "color", 10)
    late = _stream("/d", "depth", 10, stamp_lag_s=0.05, encoding="16UC1")
    pairing = next(f for f in check_streams(color10, late, odom, 5) if "colour frames have" in f.text)
    assert pairing.level is Level.FAIL and pairing.text.startswith("0%")
    stall = _stream("/o", "odom", 50, gaps_at=102.0)
    assert any(f.level is Level.FAIL and "gap of 0.8" in f.text for f in check_streams(color, depth, stall, 5))
    slow = _stream("/c", "color", 2)
    assert any(f.level is Level.WARN and "2.0 Hz" in f.text for f in check_streams(slow, depth, odom, 5))
    skewed = _stream("/o", "odom", 50, stamp_lag_s=3.0)
    assert any(f.level is Level.WARN and "+3.00 s off this computer's clock" in f.text and "--stamp-topic /c" in f.text
               for f in check_streams(color, depth, skewed, 5))
    mm_as_m = _stream("/d", "depth", 30, encoding="32FC1")
    mm_as_m.median_depth_m = [2100.0] * mm_as_m.count
    assert any(f.level is Level.FAIL and "(16UC1 = millimetres, 32FC1 = metres)" in f.text
               for f in check_streams(color, mm_as_m, odom, 5))
    broken = _stream("/c", "color", 30)
    broken.errors, broken.last_error = 3, "Image.encoding 'yuv422' is not supported"
    assert any(f.level is Level.FAIL and "yuv422" in f.text for f in check_streams(broken, depth, odom, 5))


def test_the_base_topic_must_have_a_listener_and_no_other_commander():
    assert [f.level for f in check_command_topic("/cmd_vel", 1, 0)] == [Level.OK]
    texts = [f.text for f in check_command_topic("/cmd_vel", 0, 1)]
    assert any("nothing subscribes" in t for t in texts) and any("teleop" in t for t in texts)


def test_the_base_must_take_the_message_type_the_safety_node_publishes():
    twist, stamped = "geometry_msgs/msg/Twist", "geometry_msgs/msg/TwistStamped"
    ok = check_command_topic("/cmd_vel", 1, 0, [twist])
    assert [f.level for f in ok] == [Level.OK] and "1 subscriber(s) of geometry_msgs/msg/Twist" in ok[0].text
    assert [f.level for f in check_command_topic("/cmd_vel", 1, 0, [stamped], stamped=True)] == [Level.OK]
    # a diff_drive_controller of Jazzy listens for TwistStamped: Twist would never reach it
    wrong = check_command_topic("/diff_drive_controller/cmd_vel", 1, 0, [stamped])
    assert wrong[0].level is Level.FAIL and "cmd_vel_stamped:=true" in wrong[0].text
    assert "the base subscribes geometry_msgs/msg/TwistStamped, but the safety node will publish " \
           "geometry_msgs/msg/Twist" in wrong[0].text
    back = check_command_topic("/cmd_vel", 1, 0, [twist], stamped=True)
    assert back[0].level is Level.FAIL and "cmd_vel_stamped:=false" in back[0].text
    other = check_command_topic("/cmd_vel", 1, 0, ["std_msgs/msg/Float64MultiArray"])
    assert other[0].level is Level.FAIL and "remap cmd_vel_topic" in other[0].text


def test_thresholds_are_the_robot_profiles():
    from pathlib import Path

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "robot.yaml").read_text())
    cfg = CheckConfig()
    assert cfg.watchdog_s == doc["safety_node"]["ros__parameters"]["guard"]["watchdog_s"]
    assert cfg.sync_tolerance_s == doc["policy_node"]["ros__parameters"]["sync_tolerance_s"]
    with pytest.raises(ValueError, match="CheckConfig.watchdog_s"):
        CheckConfig(watchdog_s=float("nan"))


def test_camera_info_gives_the_field_of_view_or_fails_naming_what_is_missing():
    import math

    from memnav.core.frames import camera_hfov_deg
    from memnav.core.sensor_check import check_camera_info

    assert camera_hfov_deg(128, 64.0) == pytest.approx(90.0)
    assert camera_hfov_deg(640, 320.0 / math.tan(math.radians(34.7))) == pytest.approx(69.4)
    assert camera_hfov_deg(0, 64.0) is None and camera_hfov_deg(128, 0.0) is None
    assert camera_hfov_deg(128, float("nan")) is None
    ok = check_camera_info("/cam/info", (640, 480, 615.0), (640, 480))
    assert ok.level is Level.OK and ok.text.startswith("55.0 deg horizontal field of view (640x480")
    missing = check_camera_info("/cam/info", None, (640, 480))
    assert missing.level is Level.FAIL and "camera_info_topic" in missing.text
    assert check_camera_info("/cam/info", (640, 480, 0.0), None).level is Level.FAIL
    other = check_camera_info("/cam/info", (1280, 720, 900.0), (640, 480))
    assert other.level is Level.WARN and "not the colour image's 640x480" in other.text


def test_a_camera_narrower_than_the_encoder_was_trained_on_is_a_warning_naming_the_models_for_it():
    from memnav.core.sensor_check import check_camera_for_encoder

    simulator_only, fov60 = (90.0, 90.0), (60.0, 90.0)
    realsense = check_camera_for_encoder("/cam/info", 69.4, "models/encoder.pt", simulator_only)
    assert realsense.level is Level.WARN and "69.4 deg field of view is narrower than the 90 deg" in realsense.text
    assert "use encoder_checkpoint models/encoder_fov60.pt" in realsense.text
    assert realsense.text.endswith("(models/encoder.pt)")
    covered = check_camera_for_encoder("/cam/info", 69.4, "models/encoder_fov60.pt", fov60)
    assert covered.level is Level.OK and "trained on 60-90 deg fields of view" in covered.text
    wide = check_camera_for_encoder("/cam/info", 110.0, "models/encoder.pt", simulator_only)
    assert wide.level is Level.OK                        # recognition was measured to rise on a wider camera
    fisheye_narrow = check_camera_for_encoder("/cam/info", 45.0, "models/encoder_fov60.pt", fov60)
    assert fisheye_narrow.level is Level.WARN and "encoder_fov60.pt with" not in fisheye_narrow.text
    assert check_camera_for_encoder("/cam/info", None, "models/encoder.pt", simulator_only) is None


def test_the_image_shape_is_checked_against_the_encoders_and_a_16_9_camera_is_pointed_to_its_models():
    from memnav.core.sensor_check import check_camera_for_encoder

    fov60, wide = (60.0, 90.0), (60.0, 69.0)
    # the robot profile's encoder on a RealSense's 16:9 colour stream: fine, with the hint to the 16:9 models
    hd = check_camera_for_encoder("/cam/info", 69.4, "models/encoder_fov60.pt", fov60, (1280, 720), 1.0)
    assert hd.level is Level.OK and "models/encoder_69deg_16x9.pt and calibration" in hd.text
    # ... not on a 4:3 stream, nor on a 16:9 camera much wider than those models were trained for
    vga = check_camera_for_encoder("/cam/info", 69.4, "models/encoder_fov60.pt", fov60, (640, 480), 1.0)
    assert vga.level is Level.OK and "16:9" not in vga.text
    assert "16:9" not in check_camera_for_encoder("/cam/info", 87.0, "models/encoder_fov60.pt", fov60,
                                                  (1280, 720), 1.0).text
    # the 16:9 encoder itself: fine on 16:9 images of any size, a warning on another shape
    ok = check_camera_for_encoder("/cam/info", 69.4, "models/encoder_69deg_16x9.pt", wide, (848, 480), 16 / 9)
    assert ok.level is Level.OK and "60-69 deg" in ok.text and "navigated better" not in ok.text
    four_three = check_camera_for_encoder("/cam/info", 69.4, "models/encoder_69deg_16x9.pt", wide, (640, 480),
                                          16 / 9)
    assert four_three.level is Level.WARN and "trained on 1.78:1 images and the camera's 640x480 is 1.33:1" in \
        four_three.text and "models/encoder_fov60.pt" in four_three.text
    # no image size known: the field of view alone, as before
    assert check_camera_for_encoder("/cam/info", 69.4, "models/encoder_69deg_16x9.pt", wide).level is Level.OK


def test_the_checks_default_encoder_is_the_robot_profiles():
    from pathlib import Path

    from memnav.ros.shell_node import ROBOT_ENCODER

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "robot.yaml").read_text())
    assert ROBOT_ENCODER == doc["policy_node"]["ros__parameters"]["encoder_checkpoint"]


def test_the_floor_in_a_depth_image_gives_the_cameras_height_and_pitch(two_room_scene):
    """fit_floor on the simulator's views: a camera 0.8 m up, 69 deg wide, looking 12 deg down, and one 0.5 m up
    looking 25 deg down, are measured within 2 cm and 0.5 deg; a view of a wall alone shows no floor."""
    from memnav.sim.base import SimConfig
    from memnav.sim.embedded import EmbeddedSimulator

    for height, pitch, hfov in ((0.8, 12.0, 69.0), (0.5, 25.0, 60.0)):
        sim = EmbeddedSimulator(two_room_scene, SimConfig(sensor_height_m=height, sensor_pitch_deg=pitch,
                                                          hfov_deg=hfov, width_px=160, height_px=120))
        try:
            fit = fit_floor(sim.render_at(np.array([2.0, 0.0, 2.5]), 1.5708).depth, hfov)
        finally:
            sim.close()
        assert fit is not None and fit.height_m == pytest.approx(height, abs=0.02), fit
        assert fit.pitch_deg == pytest.approx(pitch, abs=0.5) and abs(fit.roll_deg) < 0.5 and fit.share > 0.2
    assert fit_floor(np.full((120, 160), 1.5, np.float32), 69.0) is None     # a wall 1.5 m ahead fills the view


def test_the_camera_mount_is_checked_against_the_policy_nodes_settings():
    fit = FloorFit(height_m=0.81, pitch_deg=12.2, roll_deg=0.3, share=0.3)
    ok = check_camera_mount("/depth", fit, 0.8, 12.0)
    assert ok.level is Level.OK and "0.81 m above it, looking 12.2 deg down" in ok.text
    wrong = check_camera_mount("/depth", fit, 1.25, 0.0)
    assert wrong.level is Level.WARN and "set camera_height_m 0.81 (set: 1.25) and camera_pitch_deg 12.2 (set: 0)" \
        in wrong.text
    rolled = check_camera_mount("/depth", FloorFit(0.8, 12.0, 6.0, 0.3), 0.8, 12.0)
    assert rolled.level is Level.WARN and "rolled camera is not modelled" in rolled.text
    assert check_camera_mount("/depth", None, 0.8, 12.0).level is Level.WARN


def test_a_stream_that_stops_before_the_window_ends_fails():
    """Regular messages that stop partway through the listening had no gap between them and a good rate: the
    stream came out OK, though the safety node would stop the robot after its watchdog."""
    color, depth, odom = _good()
    for log in (color, depth, odom):
        log.window_s = (100.0, 105.0)
    assert all(f.level is Level.OK for f in check_streams(color, depth, odom, duration_s=5.0))
    assert stream_summary(odom)["silent_end_s"] == pytest.approx(0.0, abs=0.03)
    stopped = _stream("/o", "odom", 50, seconds=2.0)   # the driver died 2 s into the 5 s window
    stopped.window_s = (100.0, 105.0)
    assert stream_summary(stopped)["silent_end_s"] == pytest.approx(3.0, abs=0.03)
    found = [f for f in check_streams(color, depth, stopped, duration_s=5.0) if f.topic == "/o"]
    assert [f.level for f in found] == [Level.FAIL], found
    assert found[0].text.startswith("no message in the last 3.0") and "guard.watchdog_s" in found[0].text
    # without a window (the figures of a recording), only the gaps between messages count, as before
    stopped.window_s = None
    assert [f.level for f in check_streams(color, depth, stopped, duration_s=5.0) if f.topic == "/o"] == [Level.OK]


@pytest.mark.parametrize("median_m, encoding, level, said", [
    (2100.0, "32FC1", Level.FAIL, "millimetres in a 32FC1 image, which must hold metres?"),
    (0.0021, "16UC1", Level.FAIL, "metres in a 16UC1 image, which must hold millimetres?"),
    (15.0, "32FC1", Level.WARN, "outside 0.2-10 m: are the units right?"),
    (2.1, "16UC1", Level.OK, "30.0 Hz, 640x480 16UC1"),
])
def test_depth_in_the_wrong_units_fails_and_an_odd_median_warns(median_m, encoding, level, said):
    """Depth 1000 times off (millimetres written into 32FC1, metres into 16UC1) was only a warning, and the check
    ended "memnav can run on these inputs" with status 0, though the safety node would take every wall 1000 times
    too far (or too near)."""
    color, _, odom = _good()
    depth = _stream("/d", "depth", 30, encoding=encoding)
    depth.median_depth_m = [median_m] * depth.count
    found = [f for f in check_streams(color, depth, odom, duration_s=5.0) if f.topic == "/d"]
    assert found[0].level is level and said in found[0].text, found


def test_a_camera_info_whose_k_is_another_sizes_fails():
    """A K whose principal point is far from the image centre (the calibration of another resolution, its fx
    with it) gave an OK field of view, which the policy node would map with."""
    from memnav.core.sensor_check import check_camera_info

    ok = check_camera_info("/cam/info", (640, 480, 615.0), (640, 480), (322.5, 241.0))
    assert ok.level is Level.OK and ok.text.startswith("55.0 deg")
    for principal in ((640.0, 360.0), (160.0, 120.0), (320.0, float("nan"))):   # 1280x720's K; 320x240's; broken
        bad = check_camera_info("/cam/info", (640, 480, 615.0), (640, 480), principal)
        assert bad.level is Level.FAIL and bad.text.startswith("K does not fit the 640x480 image: its principal "
                                                               "point"), bad
        assert "set policy_node camera_hfov_deg" in bad.text
