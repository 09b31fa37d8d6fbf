"""StampedQueue: nearest-within-tolerance and latest-at-or-before lookups, bounded, order-independent."""
import pytest

from memnav.core.stamp_sync import GoalDepthPairer, StampedQueue


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


def test_nearest_only_among_the_items_where_accepts():
    q = StampedQueue(5)
    for stamp, frame in ((100, "a"), (101, "b"), (130, "a")):
        q.push(stamp, frame)
    assert q.nearest(101, 50, lambda f: f == "a") == (100, "a")
    assert q.nearest(101, 50, lambda f: f == "c") is None


def test_pairer_pairs_colour_and_depth_of_one_frame_only():
    from memnav.core.stamp_sync import ColourDepthPairer

    pairer = ColourDepthPairer(queue_size=5, tolerance_ns=20)
    # a depth image of another camera, stamped exactly like the colour image: never its partner
    assert pairer.add_colour(1000, "cam_a", "colour@1000") is None
    assert pairer.add_depth(1000, "cam_b", "depthB@1000") is None
    assert pairer.unshared_frames() == (["cam_a"], ["cam_b"])
    # the colour camera's own (registered) depth, a little later, in either arrival order
    assert pairer.add_depth(1005, "cam_a", "depthA@1005") == ("colour@1000", "depthA@1005")
    assert pairer.unshared_frames() is None
    assert pairer.add_depth(2000, "cam_b", "depthB@2000") is None
    assert pairer.add_depth(2003, "cam_a", "depthA@2003") is None
    assert pairer.add_colour(2000, "cam_a", "colour@2000") == ("colour@2000", "depthA@2003")
    # an empty frame_id (a driver that fills none) pairs by stamp alone
    assert pairer.add_colour(3000, "", "colour@3000") is None
    assert pairer.add_depth(3010, "cam_b", "depthB@3010") == ("colour@3000", "depthB@3010")
    with pytest.raises(ValueError, match="tolerance_ns"):
        ColourDepthPairer(queue_size=5, tolerance_ns=-1)


def test_pairer_reports_streams_that_share_no_frame_id():
    from memnav.core.stamp_sync import ColourDepthPairer

    pairer = ColourDepthPairer(queue_size=3, tolerance_ns=0)
    assert pairer.unshared_frames() is None
    pairer.add_colour(1, "", "c")                       # no frame named yet
    pairer.add_depth(1, "cam_depth_optical_frame", "d")
    assert pairer.unshared_frames() is None
    for t in range(2, 30):                              # more frames than the queues keep: the report stays
        pairer.add_colour(t, "cam_color_optical_frame", "c")
        pairer.add_depth(t, "cam_depth_optical_frame", "d")
    assert pairer.unshared_frames() == (["cam_color_optical_frame"], ["cam_depth_optical_frame"])
    for t in range(100, 120):                           # a stream naming a new frame each time stays bounded
        pairer.add_depth(t, f"frame_{t}", "d")
    colour, depth = pairer.unshared_frames()
    assert colour == ["cam_color_optical_frame"] and len(depth) <= 8


def test_goal_depth_pairer_pairs_the_nearest_within_tolerance_each_depth_once():
    """As `memnav eval-bag`'s pair_goal_depths: nearest within the tolerance (ties: the earlier), in any arrival
    order, each depth image to one goal photo; exact stamps still pair, and a tolerance of 0 pairs only them."""
    p = GoalDepthPairer(20)
    p.add(1_008, "d1008")
    p.add(995, "d995")                                   # arrives later, nearer goal 1000
    assert p.nearest(1_000) == (995, "d995")
    assert p.take(1_000) == (995, "d995")
    assert p.take(1_000) == (995, "d995")                # the same goal asking again: the same depth
    assert p.nearest(990) == (1_008, "d1008")            # d995 is goal 1000's; d1008 is 18 away
    assert p.take(1_030) is None                         # d1008 is 22 away: beyond the tolerance
    p.add(1_000, "d1000")                                # a nearer one for goal 1000: it moves there
    assert p.take(1_000) == (1_000, "d1000")
    assert p.take(990) == (995, "d995")                  # ... and d995 is free again
    p.add(1_000, "d1000 again")                          # delivered again: replaces, stays goal 1000's
    assert p.take(1_000) == (1_000, "d1000 again")
    assert p.nearest(1_001) == (1_008, "d1008")          # d1000 and d995 are taken: the free one
    p.discard(1_008)
    assert p.take(1_010) is None
    exact = GoalDepthPairer(0)
    exact.add(5, "d5"), exact.add(6, "d6")
    assert exact.take(5) == (5, "d5") and exact.take(7) is None
    with pytest.raises(ValueError, match="tolerance_ns"):
        GoalDepthPairer(-1)


def test_goal_depth_pairer_names_the_depth_a_goal_missed():
    p = GoalDepthPairer(20_000_000)                      # 20 ms
    assert p.missed(1_000_000_000) is None and p.missed_warning(1_000_000_000, "t") is None   # no depth came
    p.add(1_050_000_000, "late")
    assert p.missed(1_000_000_000) == 1_050_000_000
    line = p.missed_warning(1_000_000_000, "sync_tolerance_s (0.02 s)")
    assert "goal 1000000000 goes on without depth" in line and "stamped 1050000000" in line
    assert "50.0 ms" in line and "sync_tolerance_s (0.02 s)" in line
    assert p.missed(1_040_000_000) is None               # within the tolerance: not missed
    p.take(1_040_000_000)
    assert p.missed(1_000_000_000) is None               # another goal's depth now: not this goal's to miss
