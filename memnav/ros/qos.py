"""QoS profiles the memnav nodes and commands share (rclpy is imported only when one is asked for)."""
from __future__ import annotations

from typing import Any


def latched_qos() -> Any:
    """Reliable, transient local, depth 1: a "latched" topic (goal photos, maps, snapshots), whose
    newest message a subscriber that joins later still gets."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


EVENTS_DEPTH = 10


def events_qos() -> Any:
    """Reliable, transient local, depth EVENTS_DEPTH: a topic of events that can come back to back (goal statuses:
    a replaced goal's "cancelled", then the new one's "active"). With depth 1 the newer one could overwrite the
    older in the writer's history before it reached a reader, which then never heard it; a subscriber that joins
    later gets the last EVENTS_DEPTH, in order. Publishers and subscribers both use it (depth does not affect
    matching, so a depth-1 latched subscriber still connects, but may miss a burst)."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=EVENTS_DEPTH, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)
