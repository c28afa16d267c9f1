"""The slow receiver's NIC buffer (emulator.model.rx_pipeline) on a fake clock."""

from __future__ import annotations

import pytest

from emulator.model.rx_pipeline import RxPipeline

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
