"""Differential test: DCQCN's Python model (emulator.model.dcqcn) against its Rust twin (emulator._core.dcqcn).

Both get the same constants and the same random sequence of CNPs, CE marks, frames sent and timer wake-ups at
the same times, and must agree after every step on rates, alpha (bit for bit), timers, pacing and counters.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import emulator._core.dcqcn as rust
import emulator.model.dcqcn as python

US = 1000

params = st.builds(
    dict,
    cnp_interval_ns=st.integers(1, 200 * US),
    alpha_period_ns=st.integers(5 * US, 200 * US),
    g=st.sampled_from([1 / 256, 1 / 16, 0.5, 1.0, 1e-6]) | st.floats(1e-6, 1.0),
    increase_period_ns=st.integers(5 * US, 200 * US),
    byte_counter=st.integers(1, 1 << 20),
    fast_recovery=st.integers(0, 8),
    rai_bps=st.integers(1, 10**9),
    rhai_bps=st.integers(1, 10**10),
    min_rate_bps=st.integers(1, 10**9),
    reference_bps=st.integers(1, 10**13),
)
line_rates = st.sampled_from([10**6, 10**8, 10**9, 25 * 10**9, 40 * 10**9, 400 * 10**9]) | st.integers(1, 10**12)
events = st.lists(st.tuples(st.sampled_from(["cnp", "sent", "timer", "wait"]), st.integers(0, 300 * US),
                            st.integers(1, 9000)), max_size=80)


def rp_state(rp: Any) -> tuple:
    return (rp.rate_bps, rp.target_bps, rp.alpha, rp.limited, rp.timer_events, rp.byte_events, rp._alpha_since,
            rp.alpha_deadline, rp.increase_deadline, rp.ready_at, rp.next_deadline(), dict(rp.counters),
            rp.line_bps)


@settings(max_examples=400, deadline=None)
@given(fields=params, line=line_rates, steps=events)
def test_reaction_points_agree(fields: dict, line: int, steps: list) -> None:
    py_params = python.DcqcnParams(**fields)
    twins = (python.ReactionPoint(py_params, line), rust.ReactionPoint(rust.DcqcnParams(**fields), line),
             rust.ReactionPoint(py_params, line))  # the Rust model driven by the Python params, as callers will
    now = 0
    for kind, step, size in steps:
        now += step
        for rp in twins:
            if kind == "cnp":
                rp.on_cnp(now)
            elif kind == "sent":
                if rp.may_send(now):
                    rp.on_sent(now, size)
            elif kind == "timer":
                deadline = rp.next_deadline()
                if deadline is not None and deadline <= now:
                    rp.on_timer(now)
            else:
                rp.on_timer(now)  # a wake-up whether due or not
        expected = rp_state(twins[0])
        assert rp_state(twins[1]) == expected, (kind, now)
        assert rp_state(twins[2]) == expected, (kind, now)
        assert [rp.may_send(now) for rp in twins[1:]] == [twins[0].may_send(now)] * 2


@settings(max_examples=100, deadline=None)
@given(interval=st.integers(0, 100 * US),
       steps=st.lists(st.tuples(st.booleans(), st.integers(0, 60 * US), st.integers(0, 4)), max_size=60))
def test_notification_points_agree(interval: int, steps: list) -> None:
    a, b = python.NotificationPoint(interval), rust.NotificationPoint(interval)
    now = 0
    for ce, step, qpn in steps:
        now += step
        if ce:
            assert a.on_ce(now, qpn) == b.on_ce(now, qpn)
        else:
            a.forget(qpn)
            b.forget(qpn)
        assert (a.ce_received, a.cnps, a.interval_ns) == (b.ce_received, b.cnps, b.interval_ns)


def outcome(make: Any, fields: dict, factor: float) -> tuple:
    """The emulated constants' fields, or the error's type and message."""
    try:
        p = make(**fields).emulated(factor)
    except Exception as err:  # noqa: BLE001 - the type is what is compared
        return type(err).__name__, str(err)
    return tuple(getattr(p, name) for name in fields)


@settings(max_examples=200, deadline=None)
@given(fields=params, factor=st.floats(allow_nan=True, allow_infinity=True)
       | st.sampled_from([1.0, 2.0, 2000.0, 0.5, 1e-9, 1e9, 0.0]))
def test_dilation_agrees(fields: dict, factor: float) -> None:
    assert outcome(rust.DcqcnParams, fields, factor) == outcome(python.DcqcnParams, fields, factor)


@settings(max_examples=30, deadline=None)
@given(fields=params)
def test_describe_agrees(fields: dict) -> None:
    assert rust.DcqcnParams(**fields).describe() == python.DcqcnParams(**fields).describe()
