"""Port by proof: emulator/model/rx_pipeline.py against emulator._core.rx_pipeline on the same random arrivals,
rate changes, takes and drains; answers, frames and every attribute compared after each step (deleted with the
Python module)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import rx_pipeline as core
from emulator.model import rx_pipeline as py

SETTING = st.one_of(st.integers(-2, 12_000), st.sampled_from([0, 1000, 3000, 5000, 10_000]))
STEP = st.tuples(st.integers(0, 3_000_000), st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from([64, 500, 1000, 1500, 4000])),
    st.tuples(st.just("arrive"), st.integers(0, 9000)),
    st.tuples(st.just("set_rate"), st.one_of(st.integers(-1, 10**10), st.sampled_from([4_000_000, 8_000_000]))),
    st.tuples(st.just("take"), st.none()),
    st.tuples(st.just("at_deadline"), st.none()),
    st.tuples(st.just("drain"), st.none()),
))


def outcome(call, *args):
    try:
        return call(*args)
    except ValueError as err:
        return str(err)


def observed(p) -> tuple:
    return (p.rate_bps, p.buffer_bytes, p.xoff_bytes, p.xon_bytes, list(p.frames), p.bytes, p.head_done,
            p.next_deadline(), p.paused, p.dropped, p.peak)


@settings(max_examples=300, deadline=None)
@given(SETTING, SETTING, SETTING, SETTING)
def test_settings_refused_alike(rate, buffer, xoff, xon):
    a, b = outcome(py.RxPipeline, rate, buffer, xoff, xon), outcome(core.RxPipeline, rate, buffer, xoff, xon)
    assert (a if isinstance(a, str) else observed(a)) == (b if isinstance(b, str) else observed(b))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1_000_000, 8_000_000, 10**9, 3]), st.integers(1000, 12_000), st.integers(1, 12_000),
       st.integers(0, 11_999), st.lists(STEP, min_size=5, max_size=80))
def test_same_frames_times_and_pauses(rate, buffer, xoff, xon, steps):
    xoff = min(xoff, buffer)
    xon = min(xon, xoff - 1)
    a, b = py.RxPipeline(rate, buffer, xoff, xon), core.RxPipeline(rate, buffer, xoff, xon)
    now = count = 0
    for dt, (op, arg) in steps:
        now += dt
        if op == "arrive":
            count += 1
            assert a.arrive(now, count, arg) == b.arrive(now, count, arg)
        elif op == "set_rate":
            assert outcome(a.set_rate, now, arg) == outcome(b.set_rate, now, arg)
        elif op == "drain":
            assert a.drain() == b.drain()
        else:
            if op == "at_deadline":
                now = max(now, a.next_deadline() or 0)
            assert a.take(now) == b.take(now)
        assert observed(a) == observed(b)
