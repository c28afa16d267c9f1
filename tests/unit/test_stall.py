"""Goodput stalls from made-up samples (emulator.study.stall)."""

from __future__ import annotations

from emulator.study.stall import StallTracker

MS = 1_000_000


def feed(tracker: StallTracker, counts: list[int], step_ms: int = 100) -> int:
    now = 0
    for count in counts:
        tracker.sample(now, count)
        now += step_ms * MS
    return now


def test_steady_progress_is_no_stall():
    t = StallTracker(5000 * MS, 10_000 * MS)
    feed(t, list(range(0, 1000, 10)))
    assert t.verdict() == {"deadlocked": False, "recovered_after_ms": None, "longest_stall_ms": 0.0}


def test_the_set_up_before_the_first_frame_is_no_stall():
    t = StallTracker(5000 * MS, 10_000 * MS)
    feed(t, [0] * 80 + [5, 9])
    assert t.verdict()["longest_stall_ms"] == 0.0 and not t.stuck(10**12)


def test_a_stall_that_ends_is_a_recovery():
    t = StallTracker(5000 * MS, 10_000 * MS)
    feed(t, [0, 10, 20] + [20] * 15 + [30, 40])  # progress at 200 ms, none until 1800 ms
    assert t.verdict() == {"deadlocked": False, "recovered_after_ms": 1600.0, "longest_stall_ms": 1500.0}


def test_a_deadlock_that_never_ends():
    t = StallTracker(5000 * MS, 8000 * MS)
    now = feed(t, [0, 10] + [10] * 90)
    assert t.deadlocked and t.stuck(now - 100 * MS)
    assert t.verdict() == {"deadlocked": True, "recovered_after_ms": None, "longest_stall_ms": 9000.0}


def test_a_deadlock_broken_after_six_seconds():
    t = StallTracker(5000 * MS, 20_000 * MS)
    feed(t, [0, 10] + [10] * 60 + [11, 12])
    assert t.verdict() == {"deadlocked": True, "recovered_after_ms": 6100.0, "longest_stall_ms": 6000.0}
