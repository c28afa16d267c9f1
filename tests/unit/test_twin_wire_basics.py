"""Port by proof: emulator/wire/{mac,pfc,transport}.py and emulator/model/rdma_params.py against their compiled
twins in emulator._core, on the same random inputs (deleted together with the Python modules)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import mac as core_mac
from emulator._core import pfc as core_pfc
from emulator._core import rdma_params as core_rdma
from emulator._core import transport as core_transport
from emulator.model import rdma_params as py_rdma
from emulator.wire import mac as py_mac
from emulator.wire import pfc as py_pfc
from emulator.wire import transport as py_transport


def _outcome(call, *args):
    """What a call gave: its value, or the type of the exception it raised."""
    try:
        return call(*args)
    except Exception as err:  # noqa: BLE001 - the twins must fail alike, whatever the failure
        return type(err)


MAC_TEXT = st.one_of(st.text(max_size=24), st.binary(min_size=6, max_size=6).map(lambda b: b.hex(":")),
                     st.binary(min_size=6, max_size=6).map(bytes.hex))


@given(MAC_TEXT)
def test_mac_bytes(text):
    assert _outcome(core_mac.mac_bytes, text) == _outcome(py_mac.mac_bytes, text)


@given(st.binary(min_size=6, max_size=6))
def test_mac_text(raw):
    assert core_mac.mac_text(raw) == py_mac.mac_text(raw)
    assert core_mac.ETH_LEN == py_mac.ETH_LEN


QUANTA = st.dictionaries(st.integers(-2, 9), st.integers(-2, 0x10001), max_size=9)


@given(st.binary(min_size=6, max_size=6), QUANTA)
def test_encode_pfc(src, quanta):
    assert _outcome(core_pfc.encode_pfc, src, quanta) == _outcome(py_pfc.encode_pfc, src, quanta)


@given(st.one_of(st.binary(max_size=80),
                 st.builds(py_pfc.encode_pfc, st.binary(min_size=6, max_size=6),
                           st.dictionaries(st.integers(0, 7), st.integers(0, 0xFFFF)))
                 .flatmap(lambda f: st.integers(0, len(f)).map(lambda n: f[:n]))))
def test_decode_pfc(frame):
    assert core_pfc.decode_pfc(frame) == py_pfc.decode_pfc(frame)


@given(st.integers(0, 0xFFFF), st.integers(0, 10**12))
def test_pause_ns(quanta, rate):
    assert _outcome(core_pfc.pause_ns, quanta, rate) == _outcome(py_pfc.pause_ns, quanta, rate)


def test_pfc_constants():
    for name in ("PFC_DST", "ETHERTYPE_MAC_CONTROL", "ETH_MAC_CONTROL", "OPCODE_PFC", "PRIORITIES", "MAX_QUANTA",
                 "MIN_FRAME"):
        assert getattr(core_pfc, name) == getattr(py_pfc, name), name


@given(st.integers(0, py_transport.PSN_MASK), st.integers(-(1 << 30), 1 << 30))
def test_psn_add(psn, n):
    assert core_transport.psn_add(psn, n) == py_transport.psn_add(psn, n)


@given(st.integers(0, py_transport.PSN_MASK), st.integers(0, py_transport.PSN_MASK))
def test_psn_diff(a, b):
    assert core_transport.psn_diff(a, b) == py_transport.psn_diff(a, b)


def test_transport_constants_and_opcodes():
    assert {o.name: int(o) for o in core_transport.Opcode} == {o.name: int(o) for o in py_transport.Opcode}
    for name in ("HAS_RETH", "HAS_IMM", "HAS_AETH", "HAS_PAYLOAD", "PSN_MASK", "DEFAULT_PKEY", "SYNDROME_ACK",
                 "SYNDROME_RNR_NAK", "NAK_PSN_SEQUENCE_ERROR", "NAK_INVALID_REQUEST", "NAK_REMOTE_ACCESS_ERROR",
                 "NAK_REMOTE_OPERATIONAL_ERROR"):
        assert getattr(core_transport, name) == getattr(py_transport, name), name
    assert core_transport.Opcode(0x11) == core_transport.Opcode.ACK == 0x11


FIELDS = {"ack_req": st.booleans(), "solicited": st.booleans(), "pkey": st.integers(0, 0xFFFF),
          "va": st.integers(0, 2**64 - 1), "rkey": st.integers(0, 2**32 - 1), "dma_len": st.integers(0, 2**32 - 1),
          "imm": st.integers(0, 2**32 - 1), "syndrome": st.integers(0, 255), "msn": st.integers(0, 2**24 - 1),
          "payload": st.binary(max_size=64), "ecn_ce": st.booleans()}


@given(st.integers(0, 255), st.integers(0, 2**24 - 1), st.integers(0, 2**24 - 1),
       st.fixed_dictionaries({}, optional=FIELDS))
def test_packet_fields_and_equality(opcode, qp, psn, fields):
    core = core_transport.Packet(opcode, qp, psn, **fields)
    py = py_transport.Packet(opcode, qp, psn, **fields)
    for name in ("opcode", "dest_qp", "psn", *FIELDS):
        assert getattr(core, name) == getattr(py, name), name
    assert core == core_transport.Packet(opcode, qp, psn, **fields)
    core.psn = psn ^ 1
    assert core != core_transport.Packet(opcode, qp, psn, **fields)


@settings(max_examples=200)
@given(st.integers(0, 1 << 31), st.sampled_from(py_rdma.PATHS_MTU), st.booleans())
def test_rdma_params(length, mtu, native_ib):
    assert core_rdma.message_wire_bytes(length, mtu, native_ib) == py_rdma.message_wire_bytes(length, mtu, native_ib)
    for name in ("PATHS_MTU", "MAX_MR_BYTES", "RETH_LEN", "IMMDT_LEN", "ROCE_OVERHEAD", "IB_OVERHEAD"):
        assert getattr(core_rdma, name) == getattr(py_rdma, name), name


def test_a_difference_is_seen():
    """The comparison itself can fail: a frame one byte off is not equal."""
    frame = py_pfc.encode_pfc(b"\x02" * 6, {3: 7})
    assert core_pfc.decode_pfc(frame[:-27]) != py_pfc.decode_pfc(frame)
    with pytest.raises(ValueError):
        core_pfc.encode_pfc(b"\x02" * 6, {8: 1})
