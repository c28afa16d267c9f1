"""RoCEv2 frames from emulator._core.roce, checked against independent decoders.

Every frame must round-trip through our decoder, equal byte for byte what
scapy builds (scapy.contrib.roce computes the ICRC its own way, scapy the IP
checksum; the UDP checksum is zero, as Linux's rxe sends it), and dissect
cleanly in tshark with the fields we wrote.
"""

import random
import shutil
import struct
import subprocess

import pytest
import scapy.contrib.roce as roce
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulator._core import roce as wire
from emulator._core.forwarding import mark_ce, routed
from emulator._core.transport import HAS_AETH, HAS_IMM, HAS_PAYLOAD, HAS_RETH, Opcode, Packet
from emulator.wire.scapy_layers import AETH, BTH, DETH, RETH, ImmDt

SRC_MAC, DST_MAC = "02:00:00:00:01:01", "02:00:00:00:02:01"
SRC_IP, DST_IP = "10.0.1.1", "10.0.2.1"
SRC_PORT = 49152  # tshark: source ports below 4791 may be claimed by other dissectors
DSCP = 26


def framer() -> wire.Framer:
    return wire.Framer(SRC_MAC, DST_MAC, SRC_IP, DST_IP, SRC_PORT, dscp=DSCP)


def sample(opcode: Opcode, payload: bytes = b"", **fields) -> Packet:
    """A packet with every header field of ``opcode`` set to something distinctive."""
    values = dict(dest_qp=0x12A5C3, psn=0xFEDCBA, ack_req=True, solicited=opcode in HAS_IMM, pkey=0x8001,
                  va=0x1122334455667788, rkey=0xDEADBEEF, dma_len=0x12345, imm=0xCAFEBABE,
                  syndrome=0x1F, msn=0xABCDEF)
    values.update(fields)
    return Packet(opcode, payload=payload, **values)


def payloads(opcode: Opcode) -> list[bytes]:
    """Lengths 0..7 exercise every pad count; only opcodes with payload get one."""
    return [bytes(range(1, n + 1)) for n in range(8)] if opcode in HAS_PAYLOAD else [b""]


def expected(packet: Packet) -> Packet:
    """What the decoder should return for ``packet``: only the headers its opcode carries."""
    op = packet.opcode
    return Packet(op, packet.dest_qp, packet.psn, packet.ack_req, packet.solicited, packet.pkey,
                  packet.va if op in HAS_RETH else 0, packet.rkey if op in HAS_RETH else 0,
                  packet.dma_len if op in HAS_RETH else 0, packet.imm if op in HAS_IMM else 0,
                  packet.syndrome if op in HAS_AETH else 0, packet.msn if op in HAS_AETH else 0,
                  bytes(packet.payload))


def ip_header_ok(frame: bytes) -> bool:
    """A valid IPv4 header checksum sums (ones' complement) to 0xFFFF."""
    return int.from_bytes(frame[14:34], "big") % 0xFFFF == 0


# -- round trip ---------------------------------------------------------------


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda op: op.name)
def test_round_trip_every_opcode_and_pad(opcode):
    f = framer()
    for payload in payloads(opcode):
        packet = sample(opcode, payload)
        frame = f.encode(packet)
        decoded = wire.decode(frame)
        assert decoded is not None
        assert decoded.packet == expected(packet)
        assert decoded.icrc_ok
        assert (decoded.src_mac, decoded.src_ip, decoded.dst_ip, decoded.src_port) == (
            SRC_MAC, SRC_IP, DST_IP, SRC_PORT)
        assert len(frame) % 2 == 0 and (len(frame) - 14 - 20 - 8) % 4 == 0
        assert wire.icrc(frame) == int.from_bytes(frame[-4:], "little")
        assert ip_header_ok(frame)


def test_decode_accepts_any_buffer_and_returns_a_payload_independent_of_it():
    """The decoded payload is a copy (the compiled Packet holds bytes): a buffer reused for the next frame
    does not change a packet already decoded from it."""
    frame = framer().encode(sample(Opcode.SEND_ONLY, b"hello"))
    for buffer in (frame, memoryview(frame), bytearray(frame), memoryview(bytearray(frame))):
        decoded = wire.decode(buffer)
        assert decoded.icrc_ok and decoded.packet.payload == b"hello"
    for writable in (bytearray(frame), memoryview(bytearray(frame))):
        decoded = wire.decode(writable)
        writable[:] = bytes(len(writable))
        assert decoded.packet.payload == b"hello"


def test_a_decoded_packet_encodes_to_the_same_frame():
    for opcode in Opcode:
        frame = framer().encode(sample(opcode, payloads(opcode)[-1]))
        assert framer().encode(wire.decode(frame).packet) == frame


def test_header_fields_on_the_wire():
    frame = framer().encode(sample(Opcode.WRITE_ONLY, b"abc", solicited=True))
    assert frame[12:14] == b"\x08\x00"
    assert frame[14] == 0x45 and frame[15] == DSCP << 2 | 0b10  # IHL 5, ECT(0)
    assert frame[20:22] == b"\x40\x00"  # DF
    assert frame[22] == 64 and frame[23] == 17
    assert struct.unpack_from("!HHH", frame, 34) == (SRC_PORT, 4791, len(frame) - 34)
    assert struct.unpack_from("!H", frame, 40)[0] == 0  # no UDP checksum: the ICRC covers the payload (as rxe)
    opcode, flags, pkey, byte4 = frame[42], frame[43], frame[44:46], frame[46]
    assert (opcode, flags, pkey, byte4) == (Opcode.WRITE_ONLY, 0x80 | 1 << 4, b"\x80\x01", 0)


def test_ip_identification_increments_per_framer():
    a, b = framer(), framer()
    packet = sample(Opcode.ACK)
    ids = [struct.unpack_from("!H", a.encode(packet), 18)[0] for _ in range(3)]
    assert ids[1] == ids[0] + 1 and ids[2] == ids[0] + 2
    assert struct.unpack_from("!H", b.encode(packet), 18)[0] == ids[0]


def test_cnp_carries_becn_and_sixteen_zero_bytes():
    frame = framer().encode(Packet(Opcode.CNP, dest_qp=0x42, psn=0))
    assert frame[46] == 0x40
    assert frame[54:70] == bytes(16) and len(frame) == 54 + 16 + 4
    decoded = wire.decode(frame)
    assert decoded.icrc_ok and decoded.packet.opcode == Opcode.CNP and decoded.packet.dest_qp == 0x42
    assert decoded.packet.payload == b""


@pytest.mark.parametrize("packet", [
    Packet(Opcode.ACK, 1, 1, payload=b"x"),
    Packet(Opcode.CNP, 1, 0, payload=b"x"),
    Packet(0x12, 1, 1),  # atomic ACK: not an opcode we speak
    Packet(Opcode.SEND_ONLY, 1 << 24, 1),
    Packet(Opcode.SEND_ONLY, 1, 1 << 24),
    Packet(Opcode.ACK, 1, 1, msn=1 << 24),
])
def test_encode_refuses_what_it_cannot_frame(packet):
    with pytest.raises(ValueError):
        framer().encode(packet)


# -- cross-check with scapy ----------------------------------------------------


def scapy_frame(packet: Packet, ident: int) -> bytes:
    """``packet`` built by scapy, every length and the IP checksum left to scapy (UDP's zero)."""
    op = packet.opcode
    pad = -len(packet.payload) & 3
    transport = BTH(opcode=op, solicited=packet.solicited, padcount=pad, pkey=packet.pkey,
                    becn=op == Opcode.CNP, dqpn=packet.dest_qp, ackreq=packet.ack_req, psn=packet.psn)
    if op == Opcode.CNP:
        transport /= roce.CNPPadding()
    if op in HAS_RETH:
        transport /= RETH(va=packet.va, rkey=packet.rkey, dmalen=packet.dma_len)
    if op in HAS_IMM:
        transport /= ImmDt(imm=packet.imm)
    if op in HAS_AETH:
        transport /= AETH(syndrome=packet.syndrome, msn=packet.msn)
    if packet.payload:
        transport /= Raw(bytes(packet.payload) + bytes(pad))
    return bytes(Ether(src=SRC_MAC, dst=DST_MAC)
                 / IP(src=SRC_IP, dst=DST_IP, tos=DSCP << 2 | 0b10, ttl=64, id=ident, flags="DF")
                 / UDP(sport=SRC_PORT, dport=4791, chksum=0) / transport)


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda op: op.name)
def test_frame_equals_scapys(opcode):
    f = framer()
    for payload in payloads(opcode)[::3] + [bytes(range(256)) * 4 + b"x" if opcode in HAS_PAYLOAD else b""]:
        packet = sample(opcode, payload) if opcode != Opcode.CNP else Packet(Opcode.CNP, 0x42, 0)
        frame = f.encode(packet)
        ident = struct.unpack_from("!H", frame, 18)[0]
        assert frame == scapy_frame(packet, ident), f"{opcode.name} payload {len(payload)}"


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda op: op.name)
def test_scapy_dissects_and_recomputes_the_same_checksums(opcode):
    packet = sample(opcode, b"xyzzy" if opcode in HAS_PAYLOAD else b"")
    frame = framer().encode(packet)
    parsed = Ether(frame)
    bth = parsed[BTH]
    assert (bth.opcode, bth.dqpn, bth.psn, bth.pkey, bth.ackreq) == (
        opcode, packet.dest_qp, packet.psn, packet.pkey, packet.ack_req)
    if opcode in HAS_RETH:
        assert (parsed[RETH].va, parsed[RETH].rkey, parsed[RETH].dmalen) == (packet.va, packet.rkey, packet.dma_len)
    if opcode in HAS_IMM:
        assert parsed[ImmDt].imm == packet.imm
    if opcode in HAS_AETH:
        assert (parsed[AETH].syndrome, parsed[AETH].msn) == (packet.syndrome, packet.msn)
    assert parsed[UDP].chksum == 0
    parsed[IP].chksum = None
    bth.icrc = None
    assert bytes(parsed) == frame


def test_scapy_deth_binding():
    for opcode, tail in ((0x64, Raw), (0x65, ImmDt)):
        transport = BTH(opcode=opcode) / DETH(qkey=0x11112222, srcqp=0xABCDEF)
        if tail is ImmDt:
            transport /= ImmDt(imm=7)
        frame = bytes(Ether() / IP(src=SRC_IP, dst=DST_IP) / UDP(sport=SRC_PORT, dport=4791)
                      / transport / Raw(b"data"))
        parsed = Ether(frame)
        assert (parsed[DETH].qkey, parsed[DETH].srcqp) == (0x11112222, 0xABCDEF)
        assert parsed[DETH].payload.__class__ is tail
        assert parsed[Raw].load == b"data"


# -- ICRC coverage -------------------------------------------------------------


def flipped(frame: bytes, at: int, mask: int = 0x01) -> bytes:
    return frame[:at] + bytes((frame[at] ^ mask,)) + frame[at + 1:]


def test_icrc_catches_a_payload_bit_flip():
    frame = framer().encode(sample(Opcode.SEND_ONLY, b"payload!"))
    decoded = wire.decode(flipped(frame, 60))
    assert decoded is not None and not decoded.icrc_ok


@pytest.mark.parametrize("at, what", [(18, "IP identification"), (42, "opcode"), (44, "P_Key"),
                                      (47, "DestQP"), (50, "A bit / PSN"), (-1, "ICRC itself")])
def test_icrc_covers_invariant_fields(at, what):
    frame = framer().encode(sample(Opcode.SEND_ONLY, b"payload!"))
    decoded = wire.decode(flipped(frame, at, 0x80 if at == 50 else 0x01))
    assert decoded is not None and not decoded.icrc_ok, what


def test_ce_marking_and_routing_keep_the_icrc():
    frame = framer().encode(sample(Opcode.WRITE_MIDDLE, b"0123456789"))
    marked = routed(mark_ce(frame), bytes(6), bytes(6))  # what switches do on the way
    assert ip_header_ok(marked) and marked[22] == 63
    decoded = wire.decode(marked)
    assert decoded.icrc_ok and decoded.packet.ecn_ce
    assert not wire.decode(frame).packet.ecn_ce


def test_bth_fecn_becn_byte_is_masked():
    frame = framer().encode(sample(Opcode.SEND_ONLY, b"abcd"))
    assert wire.decode(flipped(frame, 46, 0xC0)).icrc_ok


# -- garbage in, None out ------------------------------------------------------


def test_truncated_frames_decode_to_none():
    frame = framer().encode(sample(Opcode.WRITE_ONLY_IMM, b"some payload"))
    for n in range(len(frame)):
        assert wire.decode(frame[:n]) is None, n
    with pytest.raises(ValueError):
        wire.icrc(frame[:-1])


def test_ethernet_trailer_is_ignored():
    frame = framer().encode(sample(Opcode.SEND_ONLY))
    assert len(frame) < 60
    decoded = wire.decode(frame.ljust(60, b"\0"))
    assert decoded.icrc_ok and decoded.packet.payload == b""


def test_other_traffic_decodes_to_none():
    frame = framer().encode(sample(Opcode.SEND_ONLY, b"abcd"))
    others = [
        b"",
        bytes(100),
        frame[:12] + b"\x86\xdd" + frame[14:],  # not IPv4
        frame[:14] + b"\x65" + frame[15:],  # IP version 6 in an IPv4 frame
        frame[:14] + b"\x44" + frame[15:],  # IHL below 5
        frame[:23] + b"\x06" + frame[24:],  # TCP
        frame[:36] + b"\x00\x35" + frame[38:],  # UDP to port 53
        frame[:20] + b"\x20\x00" + frame[22:],  # a first fragment (MF)
        frame[:38] + b"\x00\x08" + frame[40:],  # UDP length disagrees with IP
        frame[:42] + b"\x12" + frame[43:],  # an opcode we do not speak
        frame[:16] + b"\xff\xff" + frame[18:],  # IP total length beyond the frame
    ]
    for other in others:
        assert wire.decode(other) is None


def test_decode_never_raises_on_mutated_frames():
    rng = random.Random(4791)
    originals = [framer().encode(sample(op, payloads(op)[-1])) for op in Opcode]
    for _ in range(5000):
        frame = bytearray(rng.choice(originals))
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(14, len(frame))] = rng.randrange(256)
        del frame[rng.randrange(len(frame) + 1):]
        result = wire.decode(frame)
        assert result is None or isinstance(result, wire.Decoded)


# -- tshark ----------------------------------------------------------------------


TSHARK_FIELDS = ["infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp",
                 "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
                 "infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.immdt",
                 "ip.checksum.status", "udp.checksum.status", "_ws.col.Info"]
# Wireshark's RPC-over-RDMA heuristic claims SEND payloads and calls any that
# are not RPC messages Malformed; nothing of ours is RPC, so it is turned off.
TSHARK_OPTIONS = ["--disable-heuristic", "rpcrdma_infiniband",
                  "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE"]


def write_pcap(path, frames: list[bytes]) -> None:
    """A classic pcap, LINKTYPE_ETHERNET, microsecond time stamps."""
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, frame in enumerate(frames):
            out.write(struct.pack("<IIII", i, 0, len(frame), len(frame)) + frame)


def tshark(*args: str) -> str:
    return subprocess.run(["tshark", *args], capture_output=True, text=True, check=True).stdout


def test_tshark_dissects_every_opcode_cleanly(tmp_path):
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed: cannot check frames against Wireshark's dissector")
    packets = [sample(op, b"tshark-payload"[:5 + i % 4] if op in HAS_PAYLOAD else b"", psn=0x100 + i)
               for i, op in enumerate(op for op in Opcode if op != Opcode.CNP)]
    packets.append(Packet(Opcode.CNP, dest_qp=0x42, psn=0))
    pcap = tmp_path / "roce.pcap"
    write_pcap(pcap, [framer().encode(p) for p in packets])

    fields = [arg for name in TSHARK_FIELDS for arg in ("-e", name)]
    out = tshark("-r", str(pcap), *TSHARK_OPTIONS, "-T", "fields", "-E", "occurrence=f", *fields)
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == len(packets)
    for packet, row in zip(packets, rows):
        got = dict(zip(TSHARK_FIELDS, row))
        op = packet.opcode
        assert "Malformed" not in got["_ws.col.Info"], got
        # IP's 1: Good; UDP's 3: Not present (zero, as rxe sends it; the ICRC covers the payload)
        assert (got["ip.checksum.status"], got["udp.checksum.status"]) == ("1", "3"), got
        assert int(got["infiniband.bth.opcode"]) == op
        assert int(got["infiniband.bth.psn"]) == packet.psn
        assert int(got["infiniband.bth.destqp"], 0) == packet.dest_qp
        reth = [got[f"infiniband.reth.{name}"] for name in ("va", "r_key", "dmalen")]
        if op in HAS_RETH:
            assert [int(v, 0) for v in reth] == [packet.va, packet.rkey, packet.dma_len]
        else:
            assert reth == ["", "", ""]
        aeth = [got["infiniband.aeth.syndrome"], got["infiniband.aeth.msn"]]
        assert ([int(v, 0) for v in aeth] == [packet.syndrome, packet.msn]) if op in HAS_AETH else aeth == ["", ""]
        immdt = got["infiniband.immdt"]
        assert (int(immdt, 16) == packet.imm) if op in HAS_IMM else immdt == ""
    assert "Unknown" in rows[-1][-1]  # Wireshark 4.0 does not name the CNP opcode

    expert = tshark("-r", str(pcap), *TSHARK_OPTIONS, "-q", "-z", "expert")
    assert "Error" not in expert and "Malformed" not in expert, expert
