"""StampedQueue: nearest-within-tolerance and latest-at-or-before lookups, bounded, order-independent."""
import pytest

from memnav.core.stamp_sync import StampedQueue


def test_nearest_within_tolerance_in_any_arrival_order():
    q = StampedQueue(5)
    for stamp in (300, 100, 200):
        q.push(stamp, f"m{stamp}")
    assert q.nearest(205, 10) == (200, "m200")
    assert q.nearest(250, 50) == (200, "m200")      # a tie goes to the earlier stamp
    assert q.nearest(250, 49) is None
    assert q.nearest(100, 0) == (100, "m100")
    assert q.newest_stamp_ns == 300


def test_at_or_before_takes_the_latest_not_after():
    q = StampedQueue(10)
    for stamp in (10, 30, 20):
        q.push(stamp, stamp * 2)
    assert q.at_or_before(25) == (20, 40)
    assert q.at_or_before(30) == (30, 60)
    assert q.at_or_before(9) is None
    q.push(30, 61)
    assert q.at_or_before(1000) == (30, 61)         # equal stamps: the last pushed


def test_bounded_and_drop_through():
    q = StampedQueue(3)
    for stamp in range(5):
        q.push(stamp, stamp)
    assert len(q) == 3 and q.at_or_before(1) is None
    q.drop_through(3)
    assert len(q) == 1 and q.nearest(4, 0) == (4, 4)
    q.clear()
    assert q.newest_stamp_ns is None
    with pytest.raises(ValueError, match="maxlen"):
        StampedQueue(0)
