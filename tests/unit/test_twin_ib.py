"""Port by proof: emulator/wire/ib.py against its compiled twin emulator._core.ib, on the same random input.

Data packets of every opcode with any LRH fields (some past their bits) and flow-control packets with any
fields must frame to the same bytes or be refused with the same exception type; frames, valid, damaged,
random or hostile (hostile_frames.py), as bytes, bytearray or memoryview, must decode, size, check and
rewrite alike (None and exceptions included).  Deleted together with the Python module.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import ib as core_ib
from emulator._core import transport as core_transport
from emulator.wire import ib as py_ib
from emulator.wire import transport as py_transport
from hostile_frames import frames
from test_twin_roce import BITS_24, OPCODES, fields_of, outcome

A, B = "02:00:00:00:01:00", "02:01:00:00:01:01"
LRH_FIELD = st.one_of(st.integers(0, 15), st.integers(-1, 0x10000))
PACKETS = st.fixed_dictionaries({
    "opcode": st.sampled_from(OPCODES), "dest_qp": BITS_24, "psn": BITS_24, "ack_req": st.booleans(),
    "solicited": st.booleans(), "pkey": st.integers(0, 0xFFFF), "va": st.integers(0, 2**64 - 1),
    "rkey": st.integers(0, 2**32 - 1), "dma_len": st.integers(0, 2**32 - 1), "imm": st.integers(0, 2**32 - 1),
    "syndrome": st.integers(0, 255), "msn": BITS_24,
    "payload": st.one_of(st.binary(max_size=40), st.integers(8150, 8200).map(bytes)),  # past PktLen, for some
})


def decoded_of(decoded) -> tuple | None:
    """A decode_data result of either twin as plain values."""
    if decoded is None or isinstance(decoded, type):
        return decoded
    return (fields_of(decoded.packet), decoded.dlid, decoded.slid, decoded.sl, decoded.vl, decoded.src_mac,
            decoded.icrc_ok, decoded.vcrc_ok)


def fc_of(fc) -> tuple | type:
    """A flow-control packet of either twin, or the exception type that refused it."""
    return fc if isinstance(fc, type) else (fc.op, fc.fctbs, fc.vl, fc.fccl)


def fc_decoded_of(decoded) -> tuple | None:
    return decoded if decoded is None else (fc_of(decoded.packet), decoded.lpcrc_ok, decoded.src_mac)


@settings(max_examples=200)
@given(PACKETS, LRH_FIELD, LRH_FIELD, LRH_FIELD, LRH_FIELD, st.booleans())
def test_data_frames_are_the_same_bytes(fields, dlid, slid, sl, vl, compiled_packet):
    packet = core_transport.Packet(**fields) if compiled_packet else py_transport.Packet(**fields)
    py_frame = outcome(py_ib.encode_data, A, B, dlid, slid, sl, vl, py_transport.Packet(**fields))
    assert outcome(core_ib.encode_data, A, B, dlid, slid, sl, vl, packet) == py_frame
    if isinstance(py_frame, bytes):
        assert decoded_of(core_ib.decode_data(py_frame)) == decoded_of(py_ib.decode_data(py_frame))


COUNT = st.one_of(st.integers(0, 4095), st.integers(-2, 5000))


@given(st.integers(-1, 3), COUNT, st.integers(-1, 17), COUNT)
def test_flow_control_packets_alike(op, fctbs, vl, fccl):
    core_fc, py_fc = outcome(core_ib.FcPacket, op, fctbs, vl, fccl), outcome(py_ib.FcPacket, op, fctbs, vl, fccl)
    assert fc_of(core_fc) == fc_of(py_fc)
    if not isinstance(py_fc, type):
        assert repr(core_fc) == repr(py_fc) and core_fc == core_ib.FcPacket(op, fctbs, vl, fccl)
        frame = py_ib.encode_fc(A, B, py_fc)
        assert core_ib.encode_fc(A, B, core_fc) == frame
        assert fc_decoded_of(core_ib.decode_fc(frame)) == fc_decoded_of(py_ib.decode_fc(frame))


def _valid_frames() -> list[bytes]:
    out = []
    for i, op in enumerate(py_transport.Opcode):
        packet = py_transport.Packet(op, 0x123456, 0xABCDEF, True, True, 0x8001, 0x1122334455667788, 0x99AABBCC,
                                     4096, 0xDEADBEEF, 0x1F, 77, b"payload!"[:i % 8] if op in py_transport.HAS_PAYLOAD
                                     else b"")
        out.append(py_ib.encode_data(A, B, 9, 0xC004, i % 16, (i * 7) % 16, packet))
    out.append(py_ib.encode_fc(A, B, py_ib.FcPacket(1, 5, 2, 9)))
    out.append(py_ib.encode_fc(A, B, py_ib.FcPacket(0, 4095, 15, 0)))
    return out


VALID = _valid_frames()


def _damaged(frame: bytes, edits: list[tuple[int, int]], cut: int | None, tail: bytes) -> bytes:
    data = bytearray(frame)
    for position, value in edits:
        data[position % len(data)] = value
    if cut is not None:
        del data[cut % (len(data) + 1):]
    return bytes(data) + tail


IB_HEAD = bytes(12) + b"\x88\xb6"
FRAMES = st.one_of(
    st.sampled_from(VALID),
    st.builds(_damaged, st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 120), st.integers(0, 255)),
                                                        max_size=3),
              st.none() | st.integers(0, 120), st.binary(max_size=8)),
    st.builds(lambda delimiter, body: IB_HEAD + bytes((delimiter,)) + body,
              st.sampled_from([py_ib.SDP, py_ib.SLP, 0]), st.binary(max_size=80)),
    st.binary(max_size=80),
    frames(B, A),
)


@given(FRAMES, st.sampled_from([bytes, bytearray, memoryview]), st.integers(-1, 16))
def test_frames_decode_alike(frame, kind, vl):
    frame = kind(frame)
    assert decoded_of(outcome(core_ib.decode_data, frame)) == decoded_of(outcome(py_ib.decode_data, frame))
    assert fc_decoded_of(outcome(core_ib.decode_fc, frame)) == fc_decoded_of(outcome(py_ib.decode_fc, frame))
    for name in ("data_end", "packet_size", "icrc_native", "vcrc", "is_ib"):
        assert outcome(getattr(core_ib, name), frame) == outcome(getattr(py_ib, name), frame), name
    assert outcome(core_ib.set_vl, frame, vl) == outcome(py_ib.set_vl, frame, vl)


@given(st.binary(max_size=100), st.integers(0, 0xFFFF), st.integers(0, 100))
def test_crc16_alike_and_chains(data, crc, split):
    assert core_ib.crc16(data, crc) == py_ib.crc16(data, crc)
    assert core_ib.crc16(data[split:], core_ib.crc16(data[:split])) == py_ib.crc16(data)


def test_constants():
    for name in ("ETHERTYPE_IB", "ETH_IB", "SDP", "SLP", "LNH_LOCAL", "FECN", "OP_NORMAL", "OP_INIT", "SLS",
                 "MANAGEMENT_VL", "LRH_AT", "LRH_LEN", "BTH_LEN", "ICRC_LEN", "VCRC_LEN", "FC_LEN", "BTH_AT",
                 "MIN_FRAME", "MIN_WORDS", "MAX_WORDS"):
        assert getattr(core_ib, name) == getattr(py_ib, name), name


def test_a_difference_is_seen():
    """The comparison itself can fail: a frame with its VCRC off decodes flagged, one moved to VL 15 differs."""
    frame = VALID[4]
    end = py_ib.data_end(frame)
    bad = frame[:end - 1] + bytes((frame[end - 1] ^ 1,)) + frame[end:]
    assert decoded_of(core_ib.decode_data(bad)) != decoded_of(py_ib.decode_data(frame))
    assert core_ib.set_vl(frame, 15) != py_ib.set_vl(frame, 14)
    with pytest.raises(ValueError):
        core_ib.vcrc(VALID[-1])
