"""Port by proof: emulator/model/pause.py against emulator._core.pause on the same random PFC frames, expiries
and releases; every answer and every attribute compared after each step (deleted with the Python module)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import pause as core
from emulator.model import pause as py

PRIORITY = st.integers(0, 7)
# A decoded frame's dict is in priority order; quanta are what a frame carries, XON (0) often.
QUANTA = st.dictionaries(PRIORITY, st.one_of(st.just(0), st.integers(1, 0xFFFF)), max_size=8).map(
    lambda q: dict(sorted(q.items())))
STEP = st.tuples(st.integers(0, 200_000), st.one_of(
    st.tuples(st.just("pfc"), QUANTA), st.tuples(st.just("expire"), st.none()),
    st.tuples(st.just("at_expiry"), st.none()),
    st.tuples(st.just("release"), PRIORITY)))


def state(s) -> tuple:
    return (list(s.until), list(s.since), list(s.paused_ns), s.frames, s.rate_bps, s.next_expiry())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 400 * 10**9), st.lists(STEP, max_size=40))
def test_same_pauses_resumes_and_times(rate, steps):
    a, b = py.PauseState(rate), core.PauseState(rate)
    now = 0
    for dt, (op, arg) in steps:
        now += dt
        if op == "pfc":
            assert a.on_pfc(now, arg) == b.on_pfc(now, arg)
        elif op == "expire":
            assert a.expire(now) == b.expire(now)
        elif op == "at_expiry":  # exactly when the first pause ends
            now = max(now, a.next_expiry() or 0)
            assert a.expire(now) == b.expire(now)
        else:
            assert a.release(now, arg) == b.release(now, arg)
        assert state(a) == state(b)
        for p in range(8):
            assert (a.is_paused(p), a.paused_time(p, now)) == (b.is_paused(p), b.paused_time(p, now))
