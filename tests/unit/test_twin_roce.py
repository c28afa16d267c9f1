"""Port by proof: emulator/wire/roce.py against its compiled twin emulator._core.roce, on the same random input.

Packets of every opcode (and some we do not speak, with fields past their bits) go through a Python and a
compiled framer in the same order: the frames must be the same bytes, and a packet one refuses the other must
refuse with the same exception type.  Frames, valid, damaged, random or hostile (hostile_frames.py), and
handed over as bytes, bytearray or memoryview, must decode alike (None included).  Deleted together with the
Python module.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import roce as core_roce
from emulator._core import transport as core_transport
from emulator.wire import roce as py_roce
from emulator.wire import transport as py_transport
from hostile_frames import frames

SRC_MAC, DST_MAC = "02:00:00:00:01:01", "02:00:00:00:02:01"
FLOW = (SRC_MAC, DST_MAC, "10.0.1.1", "10.0.2.1", 49152)
OPCODES = [int(op) for op in py_transport.Opcode] + [0x12, 0x80, 0xFF]


def outcome(call, *args):
    """What a call gave: its value, or the type of the exception it raised."""
    try:
        return call(*args)
    except Exception as err:  # noqa: BLE001 - the twins must fail alike, whatever the failure
        return type(err)


def fields_of(packet) -> tuple:
    """A packet of either twin as plain values."""
    return (int(packet.opcode), packet.dest_qp, packet.psn, bool(packet.ack_req), bool(packet.solicited),
            packet.pkey, packet.va, packet.rkey, packet.dma_len, packet.imm, packet.syndrome, packet.msn,
            bytes(packet.payload), bool(packet.ecn_ce))


def decoded_of(decoded) -> tuple | None:
    """A decode result of either twin as plain values."""
    if decoded is None or isinstance(decoded, type):
        return decoded
    return (fields_of(decoded.packet), decoded.src_mac, decoded.src_ip, decoded.dst_ip, decoded.src_port,
            decoded.icrc_ok)


BITS_24 = st.one_of(st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 32) - 1))
PAYLOADS = st.one_of(st.binary(max_size=40), st.binary(min_size=1000, max_size=1100),
                     st.integers(65480, 65520).map(bytes))  # the last: past the IPv4 total length, for some
PACKETS = st.fixed_dictionaries({
    "opcode": st.sampled_from(OPCODES), "dest_qp": BITS_24, "psn": BITS_24, "ack_req": st.booleans(),
    "solicited": st.booleans(), "pkey": st.integers(0, 0xFFFF), "va": st.integers(0, 2**64 - 1),
    "rkey": st.integers(0, 2**32 - 1), "dma_len": st.integers(0, 2**32 - 1), "imm": st.integers(0, 2**32 - 1),
    "syndrome": st.integers(0, 255), "msn": BITS_24, "payload": st.one_of(st.just(b""), PAYLOADS),
    "ecn_ce": st.booleans(),
})


@settings(max_examples=150)
@given(st.lists(PACKETS, min_size=1, max_size=6), st.booleans())
def test_frames_are_the_same_bytes(packets, compiled_packets):
    """Both framers, fed the same packets in order (the IP identification counts), give the same frames."""
    py_framer, core_framer = py_roce.Framer(*FLOW), core_roce.Framer(*FLOW)
    for fields in packets:
        core_packet = (core_transport.Packet(**fields) if compiled_packets else py_transport.Packet(**fields))
        py_frame = outcome(py_framer.encode, py_transport.Packet(**fields))
        assert outcome(core_framer.encode, core_packet) == py_frame
        py_headers = outcome(py_roce.pack_transport, py_transport.Packet(**fields))
        assert outcome(core_roce.pack_transport, core_packet) == py_headers
        if isinstance(py_frame, bytes):
            assert decoded_of(core_roce.decode(py_frame)) == decoded_of(py_roce.decode(py_frame))


IPV4 = st.one_of(st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t))),
                 st.text(alphabet="0123456789.x ", max_size=16), st.sampled_from(["01.2.3.4", "1.2.3.256", ""]))
MAC = st.one_of(st.just(SRC_MAC), st.text(alphabet="0123456789abcdefABCDEF: ", max_size=20))


@given(MAC, MAC, IPV4, IPV4, st.integers(-1, 65536), st.integers(-1, 64), st.integers(-1, 256))
def test_framers_are_refused_alike(src_mac, dst_mac, src_ip, dst_ip, port, dscp, ttl):
    def build(module):
        framer = module.Framer(src_mac, dst_mac, src_ip, dst_ip, port, dscp=dscp, ttl=ttl)
        return framer.encode(py_transport.Packet(py_transport.Opcode.SEND_ONLY, 1, 2, payload=b"abc"))

    assert outcome(build, core_roce) == outcome(build, py_roce)


def _valid_frames() -> list[bytes]:
    framer = py_roce.Framer(*FLOW, dscp=py_roce.CNP_DSCP, ttl=7)
    samples = [py_transport.Packet(op, 0x12A5C3, 0xFEDCBA, True, True, 0x8001, 0x1122334455667788, 0xDEADBEEF,
                                   0x12345, 0xCAFEBABE, 0x1F, 0xABCDEF,
                                   b"payload" if op in py_transport.HAS_PAYLOAD else b"")
               for op in py_transport.Opcode]
    return [framer.encode(packet) for packet in samples]


VALID = _valid_frames()


def _damaged(frame: bytes, edits: list[tuple[int, int]], cut: int | None, tail: bytes) -> bytes:
    data = bytearray(frame)
    for position, value in edits:
        data[position % len(data)] = value
    if cut is not None:
        del data[cut % (len(data) + 1):]
    return bytes(data) + tail


FRAMES = st.one_of(
    st.sampled_from(VALID),
    st.builds(_damaged, st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)),
                                                        max_size=3),
              st.none() | st.integers(0, 200), st.binary(max_size=8)),
    st.binary(max_size=120),
    frames(DST_MAC, SRC_MAC),
)


@given(FRAMES, st.sampled_from([bytes, bytearray, memoryview]))
def test_frames_decode_alike(frame, kind):
    frame = kind(frame)
    assert decoded_of(outcome(core_roce.decode, frame)) == decoded_of(outcome(py_roce.decode, frame))
    assert outcome(core_roce.icrc, frame) == outcome(py_roce.icrc, frame)


@given(FRAMES, st.data())
def test_transport_unpacks_alike(frame, data):
    if len(frame) < 2:
        return
    bth_at = data.draw(st.integers(0, len(frame) - 2))
    end = data.draw(st.integers(bth_at, len(frame)))
    core = outcome(core_roce.unpack_transport, frame, bth_at, end)
    py = outcome(py_roce.unpack_transport, frame, bth_at, end)
    assert (fields_of(core) if core is not None else None) == (fields_of(py) if py is not None else None)


def test_constants():
    for name in ("ROCE_PORT", "DATA_DSCP", "CNP_DSCP", "ETH_IPV4", "IPPROTO_UDP", "ECT0", "ECN_CE", "IP_DF", "BECN",
                 "CNP_BODY_LEN", "IP_LEN", "UDP_LEN", "BTH_LEN", "ICRC_LEN", "IP_AT", "MIN_FRAME"):
        assert getattr(core_roce, name) == getattr(py_roce, name), name


def test_a_difference_is_seen():
    """The comparison itself can fail: a frame whose ICRC is off decodes flagged, and a cut one to None."""
    frame = VALID[4]
    bad = frame[:-1] + bytes((frame[-1] ^ 1,))
    assert decoded_of(core_roce.decode(bad)) != decoded_of(py_roce.decode(frame))
    assert decoded_of(core_roce.decode(frame[:-1])) != decoded_of(py_roce.decode(frame))
    with pytest.raises(ValueError):
        core_roce.icrc(frame[:20])
