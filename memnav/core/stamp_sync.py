"""Pairing messages by stamp without message_filters (not on PyPI): a small bounded queue of stamped items.

Nodes push what they receive (raw messages, converted arrays, poses) with its stamp in nanoseconds and look
up the item nearest to, or latest at or before, another stamp. Arrival order does not matter; the queue
keeps the `maxlen` most recently pushed items.
"""
from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class StampedQueue(Generic[T]):
    """Bounded queue of (stamp_ns, item), searched by stamp.

    Args:
        maxlen: items kept; pushing more drops the earliest pushed.
    """

    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError(f"StampedQueue.maxlen must be >= 1, got {maxlen}")
        self._items: deque[tuple[int, T]] = deque(maxlen=maxlen)

    def __len__(self) -> int:
        return len(self._items)

    def push(self, stamp_ns: int, item: T) -> None:
        self._items.append((int(stamp_ns), item))

    def clear(self) -> None:
        self._items.clear()

    @property
    def newest_stamp_ns(self) -> int | None:
        """Largest stamp held (None when empty)."""
        return max((s for s, _ in self._items), default=None)

    def nearest(self, stamp_ns: int, tolerance_ns: int) -> tuple[int, T] | None:
        """The item whose stamp is closest to `stamp_ns` within `tolerance_ns` (ties: the earlier), or None."""
        best: tuple[int, T] | None = None
        for s, item in self._items:
            d = abs(s - stamp_ns)
            if d <= tolerance_ns and (best is None or d < abs(best[0] - stamp_ns)
                                      or (d == abs(best[0] - stamp_ns) and s < best[0])):
                best = (s, item)
        return best

    def at_or_before(self, stamp_ns: int) -> tuple[int, T] | None:
        """The item with the largest stamp <= `stamp_ns` (the last pushed among equal stamps), or None."""
        best: tuple[int, T] | None = None
        for s, item in self._items:
            if s <= stamp_ns and (best is None or s >= best[0]):
                best = (s, item)
        return best

    def drop_through(self, stamp_ns: int) -> None:
        """Remove every item stamped at or before `stamp_ns` (consumed, or too old to pair any more)."""
        kept = [(s, item) for s, item in self._items if s > stamp_ns]
        self._items.clear()
        self._items.extend(kept)
