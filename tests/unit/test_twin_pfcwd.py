"""Port by proof: emulator/model/pfcwd.py against emulator._core.pfcwd: the watchdog on the same random
stalls, progress, pause frames and timers; configs and ``--switch pfcwd=`` texts refused alike, with the same
messages (deleted with the Python module)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import pfcwd as core
from emulator.errors import FabricError
from emulator.model import pfcwd as py

KEY = st.tuples(st.integers(0, 3), st.integers(0, 7))
STEP = st.tuples(st.integers(0, 60), st.sampled_from(["stalled", "progressed", "pause_received", "on_timer"]), KEY)
TIME = st.one_of(st.integers(-5, 80), st.integers(py.MAX_TIME_NS - 2, py.MAX_TIME_NS + 2), st.integers(-2**70, 2**70))
ACTION = st.one_of(st.sampled_from(py.ACTIONS), st.text(max_size=8), st.integers(0, 3), st.none())


def outcome(call, *args):
    try:
        return call(*args)
    except (ValueError, FabricError) as err:
        return type(err), str(err)


def observed(wd, keys) -> tuple:
    return (wd.next_deadline(), wd.storms, wd.restorations,
            [(wd.stormed(k), wd.dropping(k)) for k in keys])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 80), st.integers(1, 80), st.sampled_from(py.ACTIONS), st.lists(STEP, max_size=60))
def test_same_storms_and_restorations(detection, restoration, action, steps):
    a = py.Watchdog(py.WatchdogConfig(detection, restoration, action))
    b = core.Watchdog(core.WatchdogConfig(detection, restoration, action))
    keys = sorted({key for _, _, key in steps})
    now = 0
    for dt, op, key in steps:
        now += dt
        if op == "on_timer":
            assert a.on_timer(now) == b.on_timer(now)
        elif op == "progressed":
            assert a.progressed(key) == b.progressed(key)
        else:
            assert getattr(a, op)(now, key) == getattr(b, op)(now, key)
        assert observed(a, keys) == observed(b, keys)


@settings(max_examples=300, deadline=None)
@given(TIME, TIME, ACTION)
def test_configs_refused_alike(detection, restoration, action):
    args = (detection, restoration) if action is None else (detection, restoration, action)
    a, b = outcome(py.WatchdogConfig, *args), outcome(core.WatchdogConfig, *args)
    if isinstance(a, tuple):
        assert a == b
    else:
        assert (b.detection_ns, b.restoration_ns, b.action, b.describe()) == (
            a.detection_ns, a.restoration_ns, a.action, a.describe())
        assert repr(b) == repr(a)


PART = st.one_of(st.sampled_from(["50ms", "1s", "200 us", "0ms", "soon", "3601s", "", " 2h ", "drop", "forward",
                                  "alert", "reboot"]), st.text(max_size=6))
TEXT = st.one_of(st.sampled_from(["off", "on", " on ", "\x1con\x1f", "ON"]), st.lists(PART, min_size=1, max_size=4)
                 .map(":".join), st.text(max_size=12))


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_pfcwd_texts_parsed_alike(text):
    a, b = outcome(py.parse_pfcwd, text), outcome(core.parse_pfcwd, text)
    if a is None or isinstance(a, tuple):
        assert a == b
    else:
        assert (b.detection_ns, b.restoration_ns, b.action) == (a.detection_ns, a.restoration_ns, a.action)


def test_constants():
    assert (core.ACTIONS, core.MAX_TIME_NS, core.SONIC_DETECTION_NS) == (
        py.ACTIONS, py.MAX_TIME_NS, py.SONIC_DETECTION_NS)
