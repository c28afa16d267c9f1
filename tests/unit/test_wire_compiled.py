"""tests/unit/test_wire.py against the compiled RoCEv2 framing (emulator._core.roce), assertions unchanged.

Every test of test_wire.py runs here again with ``wire`` the compiled module and the transport names the
compiled ones (the frames, checked against scapy and tshark, must be the same bytes).  One is expected to
fail: the compiled ``Packet`` (emulator._core.transport) holds its payload as bytes, so a decoded payload is
a copy, not a view into the frame.
"""

import pytest

import test_wire
from emulator._core import roce, transport
from rebind import rebound

globals().update(rebound(test_wire, {
    "wire": roce, "Packet": transport.Packet, "Opcode": transport.Opcode, "HAS_AETH": transport.HAS_AETH,
    "HAS_IMM": transport.HAS_IMM, "HAS_PAYLOAD": transport.HAS_PAYLOAD, "HAS_RETH": transport.HAS_RETH,
}))

test_decode_accepts_any_buffer_and_returns_a_view = pytest.mark.xfail(
    strict=True, reason="the compiled Packet's payload is bytes (a copy), not a memoryview into the frame",
)(test_decode_accepts_any_buffer_and_returns_a_view)  # noqa: F821 - bound by rebound() above
