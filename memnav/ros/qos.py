"""QoS profiles the memnav nodes and commands share (rclpy is imported only when one is asked for)."""
from __future__ import annotations

from typing import Any


def latched_qos() -> Any:
    """Reliable, transient local, depth 1: a "latched" topic (goal photos, goal status, maps, snapshots), whose
    newest message a subscriber that joins later still gets."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
