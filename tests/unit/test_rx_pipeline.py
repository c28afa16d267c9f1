"""The slow receiver's NIC buffer (emulator._core.rx_pipeline) on a fake clock."""

from __future__ import annotations

import pytest

from emulator._core.rx_pipeline import RxPipeline

US = 1000


def test_frames_leave_one_after_the_other_at_the_pipeline_rate():
    p = RxPipeline(rate_bps=8_000_000, buffer_bytes=10_000, xoff_bytes=5000, xon_bytes=1000)  # 1 byte per us
    assert p.arrive(0, "a", 1000) is None and p.arrive(10, "b", 500) is None
    assert p.next_deadline() == 1000 * US
    assert p.take(999 * US) == ([], None)
    assert p.take(1000 * US) == (["a"], None) and p.next_deadline() == 1500 * US
    assert p.take(2000 * US) == (["b"], None) and p.next_deadline() is None


def test_xoff_at_its_threshold_xon_once_drained_and_drops_past_the_buffer():
    p = RxPipeline(rate_bps=8_000_000, buffer_bytes=4000, xoff_bytes=3000, xon_bytes=1000)
    assert [p.arrive(0, i, 1000) for i in range(3)] == [None, None, True]  # 3000 held: pause the switch
    assert p.arrive(0, 3, 1000) is None and p.arrive(0, 4, 1000) is None  # 4000 held; the fifth does not fit
    assert p.dropped == 1 and p.peak == 4000 and p.paused
    assert p.take(2000 * US) == ([0, 1], None)  # 2000 held, still above XON
    assert p.take(3000 * US) == ([2], False) and not p.paused  # 1000: let it go
    assert p.drain() == [3] and p.bytes == 0 and p.next_deadline() is None


def test_thresholds_are_checked():
    with pytest.raises(ValueError, match="need XON < XOFF <= buffer"):
        RxPipeline(1000, 1000, 2000, 100)


def test_a_new_rate_takes_the_rest_of_the_head_frame_and_every_frame_behind_it():
    """Issue 23: `fault slow` a second time kept the first rate.  The frames held keep their order."""
    p = RxPipeline(rate_bps=8_000_000, buffer_bytes=10_000, xoff_bytes=5000, xon_bytes=1000)  # 1 byte per us
    p.arrive(0, "a", 1000)
    p.arrive(0, "b", 500)
    assert p.next_deadline() == 1000 * US
    p.set_rate(400 * US, 4_000_000)  # half the rate: the head's last 600 bytes take 1200 us
    assert p.rate_bps == 4_000_000 and p.next_deadline() == 1600 * US
    assert p.take(1600 * US) == (["a"], None) and p.next_deadline() == 2600 * US  # b: 500 bytes at 0.5 per us
    p.set_rate(3000 * US, 8_000_000)  # a deadline already past stays: the frame is due
    assert p.next_deadline() == 2600 * US and p.take(3000 * US) == (["b"], None)
    with pytest.raises(ValueError, match="bad receive pipeline rate 0"):
        p.set_rate(0, 0)
