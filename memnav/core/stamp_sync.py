"""Pairing messages by stamp without message_filters (not on PyPI): a small bounded queue of stamped items.

Nodes push what they receive (raw messages, converted arrays, poses) with its stamp in nanoseconds and look
up the item nearest to, or latest at or before, another stamp. Arrival order does not matter; the queue
keeps the `maxlen` most recently pushed items. `ColourDepthPairer` pairs the colour and depth frames of one
camera on top of two such queues, `GoalDepthPairer` a goal photo with its goal depth image.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
C = TypeVar("C")
D = TypeVar("D")


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

    def __iter__(self) -> Iterator[tuple[int, T]]:
        """(stamp_ns, item) pairs, earliest pushed first."""
        return iter(list(self._items))

    def push(self, stamp_ns: int, item: T) -> None:
        self._items.append((int(stamp_ns), item))

    def remove(self, stamp_ns: int) -> None:
        """Remove every item stamped exactly `stamp_ns`."""
        kept = [(s, item) for s, item in self._items if s != int(stamp_ns)]
        self._items.clear()
        self._items.extend(kept)

    def clear(self) -> None:
        self._items.clear()

    @property
    def newest_stamp_ns(self) -> int | None:
        """Largest stamp held (None when empty)."""
        return max((s for s, _ in self._items), default=None)

    def nearest(self, stamp_ns: int, tolerance_ns: int,
                where: Callable[[T], bool] | None = None) -> tuple[int, T] | None:
        """The item whose stamp is closest to `stamp_ns` within `tolerance_ns` (ties: the earlier), or None;
        `where`: only among the items it accepts."""
        best: tuple[int, T] | None = None
        for s, item in self._items:
            if where is not None and not where(item):
                continue
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


# distinct frame_ids remembered per stream for `ColourDepthPairer.unshared_frames` (a bound against a stream
# that names a new frame in every message)
MAX_FRAME_IDS = 8


def same_camera_frame(a: str, b: str) -> bool:
    """Whether a colour and a depth frame_id may belong together: equal, or either empty (a driver that fills no
    frame_id says nothing against it)."""
    return a == b or not a or not b


class ColourDepthPairer(Generic[C, D]):
    """Pairs the colour and depth frames of one camera: the same frame_id, stamps within `tolerance_ns`.

    Depth registered to a colour image (RealSense aligned_depth_to_color, depth_image_proc/register) carries that
    image's frame_id, and only such depth lines up pixel for pixel with the colour image. A depth frame of another
    frame_id comes from another camera, or is not registered: it is never paired, however close its stamp. An
    empty frame_id pairs by stamp alone (`same_camera_frame`). Each stream keeps its last `queue_size` unpaired
    frames waiting for a partner, in any arrival order; a pair consumes both and every frame stamped before them.

    Args:
        queue_size: unpaired frames kept per stream (>= 1).
        tolerance_ns: largest stamp difference of a pair, nanoseconds (>= 0).
    """

    def __init__(self, queue_size: int, tolerance_ns: int) -> None:
        if tolerance_ns < 0:
            raise ValueError(f"ColourDepthPairer.tolerance_ns must be >= 0, got {tolerance_ns}")
        self._colours: StampedQueue[tuple[str, C]] = StampedQueue(queue_size)
        self._depths: StampedQueue[tuple[str, D]] = StampedQueue(queue_size)
        self._tolerance_ns = int(tolerance_ns)
        self._frames: tuple[set[str], set[str]] = (set(), set())   # non-empty frame_ids seen: colour, depth

    def add_colour(self, stamp_ns: int, frame_id: str, colour: C) -> tuple[C, D] | None:
        """A colour frame: (it, the depth frame it pairs with) when a waiting depth frame matches, else None (it
        waits for one)."""
        self._seen(0, frame_id)
        match = self._depths.nearest(stamp_ns, self._tolerance_ns, lambda d: same_camera_frame(frame_id, d[0]))
        if match is None:
            self._colours.push(stamp_ns, (frame_id, colour))
            return None
        self._depths.drop_through(match[0])
        self._colours.drop_through(stamp_ns)
        return colour, match[1][1]

    def add_depth(self, stamp_ns: int, frame_id: str, depth: D) -> tuple[C, D] | None:
        """A depth frame: (the colour frame it pairs with, it) when a waiting colour frame matches, else None (it
        waits for one)."""
        self._seen(1, frame_id)
        match = self._colours.nearest(stamp_ns, self._tolerance_ns, lambda c: same_camera_frame(c[0], frame_id))
        if match is None:
            self._depths.push(stamp_ns, (frame_id, depth))
            return None
        self._colours.drop_through(match[0])
        self._depths.drop_through(stamp_ns)
        return match[1][1], depth

    def unshared_frames(self) -> tuple[list[str], list[str]] | None:
        """(colour frame_ids, depth frame_ids) seen, sorted, when both streams have named frames and no frame_id is
        in both: no frame of the one can ever pair with a frame of the other. None otherwise."""
        colour, depth = self._frames
        if not colour or not depth or colour & depth:
            return None
        return sorted(colour), sorted(depth)

    def _seen(self, stream: int, frame_id: str) -> None:
        frames = self._frames[stream]
        if frame_id and len(frames) < MAX_FRAME_IDS:
            frames.add(frame_id)


GOAL_DEPTHS_KEPT = 8   # goal depth images kept to pair with goal photos (a goal is sent now and then, not streamed)


class GoalDepthPairer(Generic[D]):
    """Pairs goal photos with goal depth images (the live nodes, and `memnav eval-bag`: `pair_goal_depths`): a goal
    photo takes the goal depth image nearest its stamp within `tolerance_ns` (of two equally near, the earlier), and
    each depth image goes to one goal photo only. A goal publisher of its own, or a camera driver whose colour and
    depth of one moment carry stamps a few ms apart (a RealSense), stamps them differently; `memnav goal send` stamps
    them alike.

    A depth image delivered again with a stamp already held (a latched sample after a reconnection) replaces the
    one held and stays with the goal it went to.

    Args:
        tolerance_ns: largest stamp difference of a goal photo and its depth, nanoseconds (>= 0; 0 = exact).
        maxlen: goal depth images kept (>= 1); the earliest pushed goes first.
    """

    def __init__(self, tolerance_ns: int, maxlen: int = GOAL_DEPTHS_KEPT) -> None:
        if tolerance_ns < 0:
            raise ValueError(f"GoalDepthPairer.tolerance_ns must be >= 0, got {tolerance_ns}")
        self.tolerance_ns = int(tolerance_ns)
        self._depths: StampedQueue[list] = StampedQueue(maxlen)   # [depth, stamp of the goal it went to or None]

    def add(self, stamp_ns: int, depth: D) -> None:
        """A goal depth image arrived."""
        for s, item in self._depths:
            if s == int(stamp_ns):
                item[0] = depth
                return
        self._depths.push(stamp_ns, [depth, None])

    def nearest(self, goal_stamp_ns: int) -> tuple[int, D] | None:
        """(stamp, depth) of the goal depth image for the goal photo stamped `goal_stamp_ns`: the nearest within the
        tolerance that no other goal photo took; None when there is none. Takes nothing (see `take`)."""
        match = self._depths.nearest(goal_stamp_ns, self.tolerance_ns, self._free_for(goal_stamp_ns))
        return None if match is None else (match[0], match[1][0])

    def take(self, goal_stamp_ns: int) -> tuple[int, D] | None:
        """`nearest`, now given to that goal photo: no other goal photo gets it. Asked again for the same goal
        photo, the same answer (or a nearer one come since, which it then takes instead)."""
        match = self._depths.nearest(goal_stamp_ns, self.tolerance_ns, self._free_for(goal_stamp_ns))
        for _, item in self._depths:
            if item[1] == int(goal_stamp_ns):
                item[1] = None
        if match is None:
            return None
        match[1][1] = int(goal_stamp_ns)
        return match[0], match[1][0]

    def discard(self, stamp_ns: int) -> None:
        """Forget the goal depth image stamped `stamp_ns` (e.g. one of another size than its goal photo)."""
        self._depths.remove(stamp_ns)

    def missed(self, goal_stamp_ns: int) -> int | None:
        """The stamp of the goal depth image no other goal photo took that lies nearest `goal_stamp_ns` when it is
        beyond the tolerance (a goal photo that goes without depth although one came: say so), else None."""
        free = self._free_for(goal_stamp_ns)
        near = self._depths.nearest(goal_stamp_ns, 2 ** 63, free)
        if near is None or abs(near[0] - int(goal_stamp_ns)) <= self.tolerance_ns:
            return None
        return near[0]

    def missed_warning(self, goal_stamp_ns: int, tolerance: str) -> str | None:
        """One line saying that the goal photo stamped `goal_stamp_ns` goes on without depth although a goal depth
        image came, stamped too far from it (`missed`), naming both stamps and `tolerance` (how the caller's setting
        reads, e.g. "sync_tolerance_s 0.02 s"); None when no such image came."""
        depth_ns = self.missed(goal_stamp_ns)
        if depth_ns is None:
            return None
        return (f"goal {goal_stamp_ns} goes on without depth: the nearest goal depth image is stamped {depth_ns}, "
                f"{abs(depth_ns - int(goal_stamp_ns)) / 1e6:.1f} ms from the goal photo, beyond {tolerance} (stamp "
                "the goal photo and its depth alike, or within the tolerance)")

    def _free_for(self, goal_stamp_ns: int) -> Callable[[list], bool]:
        goal = int(goal_stamp_ns)
        return lambda item: item[1] is None or item[1] == goal
