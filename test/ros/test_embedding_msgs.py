"""Embedding <-> sensor_msgs/Image 32FC1 1 x D and stamps, built from messages directly (no rclpy.init)."""
import numpy as np
import pytest

pytest.importorskip("sensor_msgs.msg")

from builtin_interfaces.msg import Time  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Header  # noqa: E402

from memnav.ros.conversions import MessageError  # noqa: E402
from memnav.ros.embedding_msgs import (  # noqa: E402
    embedding_to_image,
    image_to_embedding,
    ns_to_stamp,
    stamp_to_ns,
)


def test_embedding_round_trip_keeps_values_and_the_source_header():
    emb = np.random.default_rng(0).normal(size=256).astype(np.float32)
    header = Header(stamp=Time(sec=12, nanosec=345), frame_id="camera_color_optical_frame")
    msg = embedding_to_image(emb, header)
    assert (msg.height, msg.width, msg.encoding, msg.step) == (1, 256, "32FC1", 1024)
    assert stamp_to_ns(msg.header.stamp) == 12_000_000_345 and msg.header.frame_id == "camera_color_optical_frame"
    assert np.array_equal(image_to_embedding(msg, 256), emb)
    bare = embedding_to_image(emb[:3], stamp=ns_to_stamp(7), frame_id="x")
    assert stamp_to_ns(bare.header.stamp) == 7 and bare.header.frame_id == "x"


def test_big_endian_and_padded_rows_are_read():
    emb = np.arange(1, 5, dtype=np.float32)
    big = Image(height=1, width=4, encoding="32FC1", is_bigendian=1, step=20,
                data=emb.astype(">f4").tobytes() + b"\0" * 4)
    assert np.array_equal(image_to_embedding(big), emb)


def test_bad_embeddings_are_refused_by_field():
    ok = embedding_to_image(np.ones(4, np.float32), stamp=ns_to_stamp(0))
    with pytest.raises(MessageError, match="expected 8"):
        image_to_embedding(ok, 8)
    wrong = embedding_to_image(np.ones(4, np.float32))
    wrong.encoding = "16UC1"
    with pytest.raises(MessageError, match="32FC1 with height 1"):
        image_to_embedding(wrong)
    tall = Image(height=2, width=2, encoding="32FC1", step=8, data=np.ones(4, np.float32).tobytes())
    with pytest.raises(MessageError, match="height 1"):
        image_to_embedding(tall)
    short = Image(height=1, width=4, encoding="32FC1", step=16, data=np.ones(3, np.float32).tobytes())
    with pytest.raises(MessageError, match="bytes"):
        image_to_embedding(short)
    nan = Image(height=1, width=2, encoding="32FC1", step=8, data=np.array([1, np.nan], np.float32).tobytes())
    with pytest.raises(MessageError, match="non-finite"):
        image_to_embedding(nan)
    with pytest.raises(MessageError, match="all zeros"):
        image_to_embedding(embedding_to_image(np.zeros(4, np.float32)))
    with pytest.raises(MessageError, match="1-D"):
        embedding_to_image(np.ones((2, 2), np.float32))
    with pytest.raises(MessageError, match="non-finite"):
        embedding_to_image(np.array([1.0, np.inf]))


def test_stamps_round_trip():
    for ns in (0, 1, 999_999_999, 1_000_000_000, 1_763_000_000_123_456_789):
        assert stamp_to_ns(ns_to_stamp(ns)) == ns
    with pytest.raises(MessageError, match="negative"):
        ns_to_stamp(-1)
