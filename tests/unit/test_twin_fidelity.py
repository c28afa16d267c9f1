"""Port by proof: emulator/model/fidelity.py against its compiled twin emulator._core.fidelity, on the same
random samples, wires, thresholds and timeouts (deleted together with the Python module).

Both get the same sequence of operations and must give the same histograms (every bucket, count, maximum,
quantile), the same wire figures, and the same verdicts with the same reasons to the character.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import fidelity as core_fidelity
from emulator.model import fidelity as py_fidelity

IMPLS = (py_fidelity, core_fidelity)


def _outcome(call, *args):
    """What a call gave: its value, or the type of the exception it raised."""
    try:
        return call(*args)
    except Exception as err:  # noqa: BLE001 - the twins must fail alike, whatever the failure
        return type(err)


# Durations as agents see them: negative lateness (early), exact bucket edges, up to the 64-bit top.
DURATION = st.one_of(st.integers(-(10**6), 10**7), st.integers(0, 2**64 - 1),
                     st.integers(0, 63).map(lambda bit: 1 << bit), st.integers(1, 63).map(lambda bit: (1 << bit) - 1))
QUANTILE = st.one_of(st.sampled_from([0.5, 0.9, 0.99, 0.999, 1.0]), st.floats(-2.0, 3.0),
                     st.sampled_from([0.0, float("nan"), float("inf"), float("-inf"), 1e300]))


def _histograms(values_a: list[int], values_b: list[int]) -> list[tuple]:
    """(a, b) of each implementation, filled with the same samples."""
    out = []
    for impl in IMPLS:
        a, b = impl.Durations(), impl.Durations()
        for value in values_a:
            a.add(value)
        for value in values_b:
            b.add(value)
        out.append((a, b))
    return out


def _figures(durations) -> tuple:
    return (list(durations.counts), durations.count, durations.max_ns, durations.summary())


@settings(max_examples=300)
@given(values_a=st.lists(DURATION, max_size=60), values_b=st.lists(DURATION, max_size=30),
       quantiles=st.lists(QUANTILE, max_size=6), merge=st.sampled_from(["none", "other", "self"]))
def test_same_histograms_and_quantiles(values_a, values_b, quantiles, merge):
    (py_a, py_b), (core_a, core_b) = _histograms(values_a, values_b)
    if merge == "other":
        py_a.merge(py_b), core_a.merge(core_b)
    elif merge == "self":
        py_a.merge(py_a), core_a.merge(core_a)
    assert _figures(py_a) == _figures(core_a)
    for q in quantiles:
        assert _outcome(py_a.quantile, q) == _outcome(core_a.quantile, q), q


WIRE_STEP = st.one_of(
    st.tuples(st.just("departed"), st.integers(0, 2**60), st.integers(0, 2**60), st.integers(0, 2**58),
              st.integers(0, 1000)),
    st.tuples(st.just("stalled"), st.integers(0, 2**60)),
    st.tuples(st.just("merge")),
    st.tuples(st.just("set"), st.sampled_from(["busy_ns", "frames", "stall_ns", "longest_stall_ns"]),
              st.integers(0, 2**58)))


def _wires(steps: list[tuple]) -> list:
    """Each implementation's wire after the same steps (``merge`` adds a second wire that took the same)."""
    wires = []
    for impl in IMPLS:
        wire, other = impl.EgressWire(), impl.EgressWire()
        for step in steps:
            if step[0] == "departed":
                wire.departed(*step[1:])
                other.departed(step[1], step[2], step[3])
            elif step[0] == "stalled":
                wire.stalled(step[1])
            elif step[0] == "merge":
                wire.merge(other)
            else:
                setattr(wire, step[1], step[2])
        wires.append(wire)
    return wires


@settings(max_examples=300)
@given(steps=st.lists(WIRE_STEP, max_size=8))
def test_same_wire_figures(steps):
    py_wire, core_wire = _wires(steps)
    assert py_wire.summary() == core_wire.summary()
    assert (py_wire.busy_ns, py_wire.stall_ns, py_wire.longest_stall_ns, py_wire.frames) == \
        (core_wire.busy_ns, core_wire.stall_ns, core_wire.longest_stall_ns, core_wire.frames)


THRESHOLD = st.one_of(st.floats(0.0, 4.0), st.floats(1e-9, 1e-3), st.sampled_from([0.01, 1.0, 1e6, 0.5]),
                      st.floats(allow_nan=True, allow_infinity=True))
FRAME_NS = st.one_of(st.integers(0, 10**7), st.integers(0, 2**63), st.sampled_from([605_600, 121_120, 1]))
LATENESS = st.lists(st.one_of(st.integers(0, 3 * 10**7), DURATION), max_size=40)


@settings(max_examples=400)
@given(steps=st.lists(WIRE_STEP, max_size=6), lag=LATENESS, timers=LATENESS, starts=st.none() | LATENESS,
       timeouts=st.none() | LATENESS, frame_ns=FRAME_NS, timeout_ns=FRAME_NS,
       thresholds=st.none() | st.lists(THRESHOLD, min_size=5, max_size=5), monitored=st.booleans())
def test_same_verdicts(steps, lag, timers, starts, timeouts, frame_ns, timeout_ns, thresholds, monitored):
    wires = _wires(steps)
    verdicts = []
    for impl, wire in zip(IMPLS, wires):
        def filled(values):
            if values is None:
                return None
            durations = impl.Durations()
            for value in values:
                durations.add(value)
            return durations
        kwargs = {} if thresholds is None else {"thresholds": impl.Thresholds(*thresholds)}
        verdicts.append(impl.verdict(wire, filled(lag), filled(timers), frame_ns, starts=filled(starts),
                                     timeouts=filled(timeouts), timeout_ns=timeout_ns, monitored=monitored, **kwargs))
    py_verdict, core_verdict = verdicts
    assert (py_verdict.faithful, py_verdict.reasons) == (core_verdict.faithful, core_verdict.reasons)
    assert repr(py_verdict) == repr(core_verdict)


@given(st.lists(THRESHOLD, min_size=5, max_size=5))
def test_same_thresholds(values):
    py_t, core_t = py_fidelity.Thresholds(*values), core_fidelity.Thresholds(*values)
    assert repr(py_t) == repr(core_t)
    if not any(math.isnan(value) for value in values):  # a NaN hashes by identity, and equals only itself
        assert hash(py_t) == hash(core_t) and core_t == core_fidelity.Thresholds(*values)
    assert core_fidelity.Thresholds() == core_fidelity.Thresholds(0.01, 1.0, 1.0, 1.0, 0.01)
    assert repr(py_fidelity.Thresholds()) == repr(core_fidelity.Thresholds())
