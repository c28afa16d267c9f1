"""Cables in simulated time: what the compiled simulator's bindings refuse.

A host's transmit queue on its wire (one flow's link time, strict priority, a pause and an XON) is not exposed
to Python: crates/fabric-core/tests/sim_parts.rs pins it against the same closed forms.
"""

from __future__ import annotations

import pytest

from emulator._core.sim import SimFabric


def test_a_wire_needs_a_rate():
    with pytest.raises(ValueError, match="bad wire"):
        SimFabric([(0, 0, "host", 0, 0)], [], [])
    SimFabric([(1, 0, "host", 0, 0)], [], [])  # the same wire at 1 bit/s is taken
