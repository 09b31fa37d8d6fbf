"""Embeddings and stamps on standard messages (the part of the message layer conversions.py does not cover).

An embedding travels as a `sensor_msgs/Image` with encoding 32FC1, height 1 and width D (the embedding
length): a standard type every ROS tool can record and replay, whose header carries the stamp of the
frame it was computed from, so consumers can pair it with that frame, the odometry at that instant or
another embedding by stamp. Conversions validate and raise `MessageError` naming the field.
"""
from __future__ import annotations

import numpy as np

from memnav.ros.conversions import MessageError, _image_array

EMBEDDING_ENCODING = "32FC1"


def stamp_to_ns(stamp) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_stamp(stamp_ns: int):
    """Integer nanoseconds (>= 0) -> builtin_interfaces/Time."""
    from builtin_interfaces.msg import Time

    if stamp_ns < 0:
        raise MessageError(f"stamp {stamp_ns} ns is negative; builtin_interfaces/Time starts at 0")
    return Time(sec=int(stamp_ns // 1_000_000_000), nanosec=int(stamp_ns % 1_000_000_000))


def embedding_to_image(embedding: np.ndarray, header=None, *, stamp=None, frame_id: str = ""):
    """(D,) float embedding -> sensor_msgs/Image 32FC1, 1 x D.

    Args:
        embedding: 1-D finite values.
        header: std_msgs/Header to copy (stamp and frame of the source frame); overrides stamp/frame_id.
        stamp: builtin_interfaces/Time when no header is given.
        frame_id: frame when no header is given.

    Raises:
        MessageError: not 1-D, empty or not finite.
    """
    from sensor_msgs.msg import Image

    emb = np.ascontiguousarray(embedding, dtype=np.float32)
    if emb.ndim != 1 or emb.size == 0:
        raise MessageError(f"embedding must be a non-empty 1-D array, got shape {emb.shape}")
    if not np.all(np.isfinite(emb)):
        raise MessageError("embedding has non-finite values")
    msg = Image(height=1, width=int(emb.size), encoding=EMBEDDING_ENCODING, is_bigendian=int(not np.little_endian),
                step=int(emb.size) * 4)
    msg.data = emb.tobytes()
    if header is not None:
        msg.header = header
    else:
        if stamp is not None:
            msg.header.stamp = stamp
        msg.header.frame_id = frame_id
    return msg


def image_to_embedding(msg, expected_dim: int | None = None) -> np.ndarray:
    """sensor_msgs/Image 32FC1 1 x D -> float32 (D,) (byte order and row padding handled).

    Raises:
        MessageError: another encoding or height, a size that does not match the header, non-finite
            values, an all-zero vector, or a length other than `expected_dim` (when given).
    """
    if msg.encoding != EMBEDDING_ENCODING or int(msg.height) != 1:
        raise MessageError(f"embedding Image must be {EMBEDDING_ENCODING} with height 1, got {msg.encoding!r} "
                           f"{msg.width}x{msg.height}")
    emb = _image_array(msg).reshape(-1)
    if expected_dim is not None and emb.size != expected_dim:
        raise MessageError(f"embedding Image.width is {emb.size}, expected {expected_dim}")
    if not np.all(np.isfinite(emb)):
        raise MessageError("embedding Image.data has non-finite values")
    if not np.any(emb):
        raise MessageError("embedding Image.data is all zeros")
    return emb.astype(np.float32, copy=False)
