"""test_rc.py and test_fuzz_rc.py again, on the compiled RC model (emulator._core.rc).

The same test functions, assertions unchanged: a fixture points the names the two files took from
emulator.model.rc and emulator.wire.transport at their compiled twins for the duration of each test, so
the harness builds compiled QPs, work requests, configs and packets.  ``dataclasses.replace`` (which the
harness uses to copy packets and spoil work requests) does the same on a compiled object by its Python
twin's fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import test_fuzz_rc
import test_rc
from emulator._core import rc as compiled_rc
from emulator._core import transport as compiled_transport
from emulator.model import rc as python_rc
from emulator.wire import transport as python_transport
from test_fuzz_rc import *  # noqa: F403 - the tests to run again
from test_rc import *  # noqa: F403

RC_NAMES = ("Completion", "RcConfig", "RcQueuePair", "RecvWR", "SendWR", "WcOpcode", "WcStatus", "WrOpcode")
TWINS = {getattr(compiled_rc, name): getattr(python_rc, name) for name in ("Completion", "RcConfig", "RecvWR",
                                                                            "SendWR")}
TWINS[compiled_transport.Packet] = python_transport.Packet


def replace(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` for the dataclasses and for their compiled twins."""
    twin = TWINS.get(type(obj))
    if twin is None:
        return dataclasses.replace(obj, **changes)
    fields = {f.name: changes.get(f.name, getattr(obj, f.name)) for f in dataclasses.fields(twin)}
    return type(obj)(**fields)


@pytest.fixture(autouse=True)
def compiled_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (test_rc, test_fuzz_rc):
        for name in RC_NAMES:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, getattr(compiled_rc, name))
        monkeypatch.setattr(module, "Packet", compiled_transport.Packet)
    monkeypatch.setattr(test_rc, "replace", replace)


def test_the_harness_builds_compiled_queue_pairs():
    """The fixture reaches the harness: pair() makes compiled QPs that send compiled packets."""
    net = test_rc.pair()
    assert type(net.a.qp) is compiled_rc.RcQueuePair
    net.a.qp.post_send(test_rc.write_wr(1, net.a, net.b, 0, 0, 10))
    net.run()
    assert all(type(t.packet) is compiled_transport.Packet for t in net.log)
    assert [type(c) for c in net.a.completions] == [compiled_rc.Completion]
