"""Native IB frames from emulator._core.ib and their ERF captures, checked independently.

The CRCs are recomputed here from plain definitions (a bit-by-bit CRC-16,
the ICRC masking applied to a copy), and tshark, which knows InfiniBand
but not our Ethernet encapsulation, reads the ERF captures back.
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import zlib

import pytest

from capture_files import classic_pcap, pcapng
from emulator.study import erf
from emulator._core.ib import (
    LRH_AT, SDP, FcPacket, decode_data, decode_fc, encode_data, encode_fc, icrc_native, is_ib, set_vl, vcrc,
)
from emulator._core.transport import HAS_AETH, HAS_IMM, HAS_PAYLOAD, HAS_RETH, Opcode, Packet

A, B = "02:00:00:00:01:00", "02:01:00:00:01:01"
RC_OPCODES = [op for op in Opcode if op != Opcode.CNP]
T0 = 1_700_000_000_123_456_789  # ns


def plain_crc16(data: bytes) -> int:
    """CRC-16, polynomial 0x100B, bit by bit (reflected: 0xD008), init 0xFFFF, final xor 0xFFFF."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD008 if crc & 1 else crc >> 1
    return crc ^ 0xFFFF


def packet_bytes(frame: bytes) -> bytes:
    """LRH..VCRC, by LRH.PktLen (in 4-byte words, LRH..ICRC), read here without the module."""
    words = int.from_bytes(frame[LRH_AT + 4:LRH_AT + 6], "big") & 0x7FF
    return frame[LRH_AT:LRH_AT + words * 4 + 2]


def plain_icrc(frame: bytes) -> int:
    """CRC-32 over LRH..pad of a local packet with LRH.VL and BTH byte 4 set to ones."""
    masked = bytearray(packet_bytes(frame)[:-6])
    masked[0] |= 0xF0
    masked[8 + 4] = 0xFF
    return zlib.crc32(masked)


def sample(op: Opcode, payload: bytes = b"") -> Packet:
    """A packet with every header field set to something other than its default."""
    return Packet(op, 0x123456, 0xABCDEF, ack_req=True, solicited=op == Opcode.SEND_ONLY, pkey=0x8001,
                  va=0x1122334455667788, rkey=0x99AABBCC, dma_len=len(payload) + 4096, imm=0xDEADBEEF,
                  syndrome=0x1F, msn=77, payload=payload)


def data_frame(op: Opcode, payload: bytes = b"", vl: int = 2, sl: int = 3) -> bytes:
    return encode_data(A, B, dlid=9, slid=0xC004, sl=sl, vl=vl, packet=sample(op, payload))


def payload_of(length: int) -> bytes:
    return bytes((i * 7 + 1) & 0xFF for i in range(length))


@pytest.mark.parametrize("op", RC_OPCODES, ids=lambda op: op.name)
@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 5, 6, 7, 1024])
def test_round_trip_keeps_every_field_both_crcs_and_a_copy_of_the_payload(op, length):
    payload = payload_of(length) if op in HAS_PAYLOAD else b""
    frame = data_frame(op, payload)
    assert len(frame) >= 60 and frame[12:15] == b"\x88\xb6\xfb" and is_ib(frame)
    d = decode_data(frame)
    assert (d.dlid, d.slid, d.sl, d.vl, d.src_mac, d.icrc_ok, d.vcrc_ok) == (9, 0xC004, 3, 2, A, True, True)
    p, sent = d.packet, sample(op, payload)
    assert (p.opcode, p.dest_qp, p.psn, p.ack_req, p.solicited, p.pkey, p.ecn_ce) == (
        op, 0x123456, 0xABCDEF, True, op == Opcode.SEND_ONLY, 0x8001, False)
    assert p.payload == payload
    reused = bytearray(frame)  # a receive buffer, overwritten by the next frame: what was decoded keeps its bytes
    held = decode_data(reused).packet
    reused[:] = bytes(len(reused))
    assert held.payload == payload
    if op in HAS_RETH:
        assert (p.va, p.rkey, p.dma_len) == (sent.va, sent.rkey, sent.dma_len)
    if op in HAS_IMM:
        assert p.imm == sent.imm
    if op in HAS_AETH:
        assert (p.syndrome, p.msn) == (0x1F, 77)
    assert icrc_native(frame) == int.from_bytes(packet_bytes(frame)[-6:-2], "little")
    assert vcrc(frame) == int.from_bytes(packet_bytes(frame)[-2:], "little")
    if payload:
        corrupt = bytearray(frame)
        corrupt[LRH_AT + len(packet_bytes(frame)) - 6 - (-len(payload) & 3) - len(payload)] ^= 0x01
        bad = decode_data(bytes(corrupt))
        assert not bad.icrc_ok and not bad.vcrc_ok


def test_lrh_and_bth_bytes_are_where_the_layout_says():
    frame = data_frame(Opcode.SEND_ONLY, b"abcde", vl=5, sl=12)
    assert frame[:15] == bytes.fromhex("020100000101" "020000000100" "88b6" "fb")
    lrh = frame[LRH_AT:LRH_AT + 8]
    assert lrh == bytes((0x50, 0xC2)) + (9).to_bytes(2, "big") + (8).to_bytes(2, "big") + (0xC004).to_bytes(2, "big")
    bth = frame[LRH_AT + 8:LRH_AT + 20]
    assert bth == bytes.fromhex("04" "b0" "8001" "00123456" "80abcdef")  # SE, PadCnt 3; byte 4 zero; AckReq
    assert frame[LRH_AT + 20:LRH_AT + 28] == b"abcde\0\0\0"
    assert frame[LRH_AT + 28 + 6:] == bytes(60 - (LRH_AT + 28 + 6))  # Ethernet padding


def test_crcs_agree_with_plain_implementations():
    rng = random.Random(7)
    for op, length in [(Opcode.WRITE_FIRST, 1024), (Opcode.ACK, 0), (Opcode.SEND_LAST_IMM, 333)]:
        frame = data_frame(op, rng.randbytes(length) if op in HAS_PAYLOAD else b"", vl=rng.randrange(16))
        ib = packet_bytes(frame)
        assert icrc_native(frame) == plain_icrc(frame) == int.from_bytes(ib[-6:-2], "little")
        assert vcrc(frame) == plain_crc16(ib[:-2]) == int.from_bytes(ib[-2:], "little")


def test_vl_rewrite_keeps_the_icrc_but_sl_is_covered():
    frame = data_frame(Opcode.SEND_ONLY, b"x" * 100, vl=0)
    for vl in range(16):
        moved = set_vl(frame, vl)
        d = decode_data(moved)
        assert (d.vl, d.sl, d.icrc_ok, d.vcrc_ok) == (vl, 3, True, True)
        assert moved[:LRH_AT] == frame[:LRH_AT] and moved[LRH_AT + 1:-2] == frame[LRH_AT + 1:-2]
    resl = bytearray(frame)
    resl[LRH_AT + 1] ^= 0x10  # SL 3 -> 2: a switch may not do that
    d = decode_data(set_vl(bytes(resl), 0))  # even with the VCRC made good
    assert d.sl == 2 and not d.icrc_ok and d.vcrc_ok
    assert not decode_data(bytes(resl)).vcrc_ok
    with pytest.raises(ValueError):
        set_vl(frame, 16)
    with pytest.raises(ValueError):
        set_vl(b"\0" * 60, 1)


def test_fecn_is_masked_in_the_icrc_and_decoded_as_ecn_ce():
    frame = bytearray(data_frame(Opcode.WRITE_MIDDLE, b"y" * 64))
    frame[LRH_AT + 8 + 4] |= 0x80  # a switch marks FECN ...
    d = decode_data(set_vl(bytes(frame), 2))  # ... and recomputes the VCRC
    assert d.packet.ecn_ce and d.icrc_ok and d.vcrc_ok


def test_a_cnp_goes_out_with_becn_outside_the_icrc():
    frame = encode_data(A, B, 1, 2, 0, 0, Packet(Opcode.CNP, 0x77, 0))
    assert frame[LRH_AT + 8 + 4] == 0x40 and frame[LRH_AT + 20:LRH_AT + 36] == bytes(16)
    d = decode_data(frame)
    assert d.packet.opcode == Opcode.CNP and d.packet.dest_qp == 0x77 and d.icrc_ok and d.vcrc_ok


def test_padding_after_the_packet_is_ignored():
    frame = data_frame(Opcode.READ_RESPONSE_ONLY, b"z" * 70)
    d = decode_data(frame + b"\xee" * 20)
    assert d.icrc_ok and d.vcrc_ok and bytes(d.packet.payload) == b"z" * 70
    assert set_vl(frame + b"\xee" * 20, 1).endswith(b"\xee" * 20)


def test_decoding_a_memoryview():
    frame = data_frame(Opcode.WRITE_ONLY, b"m" * 40)
    d = decode_data(memoryview(frame))
    assert d.icrc_ok and d.vcrc_ok and bytes(d.packet.payload) == b"m" * 40


@pytest.mark.parametrize("args", [dict(dlid=0x10000), dict(slid=-1), dict(sl=16), dict(vl=16), dict(vl=-1)])
def test_bad_lrh_fields_are_refused(args):
    fields = dict(dlid=1, slid=2, sl=0, vl=0) | args
    with pytest.raises(ValueError):
        encode_data(A, B, packet=sample(Opcode.SEND_ONLY), **fields)


def test_a_packet_beyond_pktlen_is_refused():
    encode_data(A, B, 1, 2, 0, 0, sample(Opcode.SEND_ONLY, bytes(8188 - 24)))  # 2047 words: the largest
    with pytest.raises(ValueError):
        encode_data(A, B, 1, 2, 0, 0, sample(Opcode.SEND_ONLY, bytes(8188 - 23)))


@pytest.mark.parametrize("op,fctbs,vl,fccl", [(0, 0, 0, 0), (1, 4095, 15, 4095), (0, 100, 3, 2048), (1, 7, 1, 1)])
def test_link_packets_round_trip_and_carry_the_lpcrc(op, fctbs, vl, fccl):
    frame = encode_fc(A, B, FcPacket(op, fctbs, vl, fccl))
    assert len(frame) == 60 and frame[12:15] == b"\x88\xb6\x5c" and is_ib(frame)
    fields = frame[LRH_AT:LRH_AT + 4]
    assert fields == struct.pack("!HH", op << 12 | fctbs, vl << 12 | fccl)
    assert frame[LRH_AT + 4:LRH_AT + 6] == plain_crc16(fields).to_bytes(2, "little")
    assert frame[LRH_AT + 6:] == bytes(60 - LRH_AT - 6)
    fc = decode_fc(frame)
    assert (fc.packet, fc.lpcrc_ok, fc.src_mac) == (FcPacket(op, fctbs, vl, fccl), True, A)
    for at in range(6):
        bad = bytearray(frame)
        bad[LRH_AT + at] ^= 0x01
        assert decode_fc(bytes(bad)) is None or not decode_fc(bytes(bad)).lpcrc_ok


@pytest.mark.parametrize("args", [(2, 0, 0, 0), (-1, 0, 0, 0), (0, 4096, 0, 0), (0, -1, 0, 0), (0, 0, 16, 0),
                                  (0, 0, -1, 0), (0, 0, 0, 4096), (0, 0, 0, -1)])
def test_link_packet_fields_out_of_range_are_refused(args):
    with pytest.raises(ValueError):
        encode_fc(A, B, FcPacket(*args))


def test_decoders_never_raise_on_truncation_or_garbage():
    frames = [data_frame(Opcode.WRITE_ONLY_IMM, b"y" * 300), data_frame(Opcode.ACK),
              data_frame(Opcode.READ_REQUEST), encode_fc(A, B, FcPacket(1, 5, 2, 9))]
    for frame in frames:
        for cut in range(len(frame)):
            short = frame[:cut]
            assert decode_data(short) is None or cut >= LRH_AT + len(packet_bytes(frame))
            assert decode_fc(short) is None or cut >= LRH_AT + 6
    rng = random.Random(1)
    head = bytes(12) + b"\x88\xb6"
    for _ in range(3000):
        junk = head + bytes((rng.choice((SDP, 0x5C, 0)),)) + rng.randbytes(rng.randrange(80))
        decode_data(junk), decode_fc(junk)
        flipped = bytearray(rng.choice(frames))
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        decode_data(bytes(flipped)), decode_fc(bytes(flipped))
    assert decode_data(frames[3]) is None and decode_fc(frames[0]) is None
    assert decode_data(b"\xff" * 100) is None and decode_fc(b"") is None and not is_ib(b"\xff" * 100)
    with pytest.raises(ValueError):
        icrc_native(b"\xff" * 100)
    with pytest.raises(ValueError):
        vcrc(frames[3])


def test_erf_records_and_timestamps():
    frame = data_frame(Opcode.SEND_ONLY, b"q" * 20)
    kind, payload = erf.ib_record(frame)
    assert kind == erf.ERF_INFINIBAND and payload == packet_bytes(frame)
    kind, payload = erf.ib_record(encode_fc(A, B, FcPacket(0, 1, 2, 3)))
    assert kind == erf.ERF_INFINIBAND_LINK and len(payload) == 64 and payload[6:] == bytes(58)
    assert erf.ib_record(bytes(60)) is None
    record = erf.erf_record(T0, 21, b"abcd")
    assert record[8:] == bytes((21, 0x04)) + (20).to_bytes(2, "big") + bytes(2) + (4).to_bytes(2, "big") + b"abcd"
    rng = random.Random(3)
    for ns in [0, 1, 999_999_999, T0] + [rng.randrange(1 << 62) for _ in range(1000)]:
        stamp = erf.erf_timestamp(ns)
        back = (stamp & 0xFFFFFFFF) * 1_000_000_000
        back += (back & 0x80000000) << 1  # Wireshark's rounding (wiretap/pcap-common.c)
        assert (stamp >> 32) * 1_000_000_000 + (back >> 32) == ns


# --- tshark ---------------------------------------------------------------------------------------

FIELDS = ["infiniband.lrh.vl", "infiniband.lrh.sl", "infiniband.lrh.lnh", "infiniband.lrh.dlid",
          "infiniband.lrh.pktlen", "infiniband.lrh.slid", "infiniband.bth.opcode", "infiniband.bth.psn",
          "infiniband.bth.destqp", "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband_link.op",
          "infiniband_link.fctbs", "infiniband_link.vl", "infiniband_link.fccl", "infiniband_link.lpcrc",
          "_ws.col.Info", "infiniband.invariant.crc", "infiniband.variant.crc", "infiniband.reth.va",
          "infiniband.reth.r_key", "infiniband.immdt", "infiniband.aeth.msn", "frame.time_epoch"]


@pytest.fixture
def tshark() -> str:
    path = shutil.which("tshark") or shutil.which("tshark", path="/usr/bin")
    if path is None:
        pytest.skip("tshark is not installed (apt-get install tshark)")
    return path


def read_fields(tshark: str, path: str) -> list[dict[str, str]]:
    args = [tshark, "-r", path, "-T", "fields", "-E", "occurrence=f"] + [a for f in FIELDS for a in ("-e", f)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [dict(zip(FIELDS, (v.strip() for v in line.split("\t")))) for line in out.splitlines()]


def assert_no_errors(tshark: str, path: str) -> None:
    expert = subprocess.run([tshark, "-r", path, "-q", "-z", "expert"], capture_output=True, text=True,
                            check=True).stdout
    assert "Error" not in expert and "Malformed" not in expert, expert


def expected_data(frame: bytes, ns: int) -> dict[str, str]:
    """What tshark should show for our data frame, from the module-free reading of its bytes."""
    d = decode_data(frame)
    p = d.packet
    words = len(packet_bytes(frame)) // 4
    ib = packet_bytes(frame)
    row = {"infiniband.lrh.vl": f"0x{d.vl:02x}", "infiniband.lrh.sl": str(d.sl), "infiniband.lrh.lnh": "0x02",
           "infiniband.lrh.dlid": str(d.dlid), "infiniband.lrh.pktlen": str(words), "infiniband.lrh.slid": str(d.slid),
           "infiniband.bth.opcode": str(int(p.opcode)), "infiniband.bth.psn": str(p.psn),
           "infiniband.bth.destqp": f"0x{p.dest_qp:06x}",
           # tshark shows both CRCs as big-endian numbers: byte-swapped from the CRC values we append LSB first
           "infiniband.invariant.crc": f"0x{int.from_bytes(ib[-6:-2], 'big'):08x}",
           "infiniband.variant.crc": f"0x{int.from_bytes(ib[-2:], 'big'):04x}",
           "frame.time_epoch": f"{ns // 10**9}.{ns % 10**9:09d}"}
    assert int(row["infiniband.invariant.crc"], 16) == int.from_bytes(icrc_native(frame).to_bytes(4, "little"), "big")
    assert int(row["infiniband.variant.crc"], 16) == int.from_bytes(vcrc(frame).to_bytes(2, "little"), "big")
    if p.opcode in HAS_RETH:
        row |= {"infiniband.reth.dmalen": str(p.dma_len), "infiniband.reth.va": f"0x{p.va:016x}",
                "infiniband.reth.r_key": f"0x{p.rkey:08x}"}
    if p.opcode in HAS_IMM:
        row["infiniband.immdt"] = p.imm.to_bytes(4, "big").hex()
    if p.opcode in HAS_AETH:
        row |= {"infiniband.aeth.syndrome": str(p.syndrome), "infiniband.aeth.msn": str(p.msn)}
    return row


def expected_link(frame: bytes, ns: int) -> dict[str, str]:
    fc = decode_fc(frame).packet
    lpcrc = frame[LRH_AT + 4:LRH_AT + 6]
    return {"infiniband_link.op": str(fc.op), "infiniband_link.fctbs": str(fc.fctbs),
            "infiniband_link.vl": str(fc.vl), "infiniband_link.fccl": str(fc.fccl),
            "infiniband_link.lpcrc": f"0x{int.from_bytes(lpcrc, 'big'):04x}",  # big-endian view, as the CRCs
            "_ws.col.Info": "Flow Control Init" if fc.op else "Normal Flow Control",
            "frame.time_epoch": f"{ns // 10**9}.{ns % 10**9:09d}"}


INFO = {Opcode.WRITE_FIRST: "RC RDMA Write First", Opcode.WRITE_ONLY_IMM: "RC RDMA Write Only Immediate",
        Opcode.ACK: "RC Acknowledge", Opcode.READ_RESPONSE_MIDDLE: "RC RDMA Read Response Middle",
        Opcode.SEND_ONLY: "RC Send Only"}


def capture_frames() -> list[bytes]:
    """Data packets of several header sequences and link packets of both Ops on several VLs.

    The SEND carries 16 bytes or more: tshark 4.0's RPC-over-RDMA heuristic
    reads past shorter SEND payloads and marks them Malformed.
    """
    payload = payload_of(1024)
    return [
        encode_data(A, B, 3, 7, 0, 0, Packet(Opcode.WRITE_FIRST, 0x11, 5, va=0x7F0012345000, rkey=0x55,
                                             dma_len=4096, payload=payload)),
        encode_data(A, B, 3, 7, 1, 1, Packet(Opcode.WRITE_ONLY_IMM, 0x11, 6, va=0x1000, rkey=0x56, dma_len=10,
                                             imm=0xABC, payload=payload[:10])),
        encode_data(B, A, 7, 3, 0, 0, Packet(Opcode.ACK, 0x12, 6, syndrome=0x1F, msn=2)),
        encode_data(B, A, 7, 3, 0, 2, Packet(Opcode.ACK, 0x12, 7, syndrome=0x60, msn=3)),
        encode_data(A, B, 3, 7, 4, 3, Packet(Opcode.READ_RESPONSE_MIDDLE, 0x11, 0xFFFFFF, payload=payload)),
        encode_data(A, B, 0xBFFF, 1, 15, 14, Packet(Opcode.SEND_ONLY, 0xFFFFFF, 9, payload=payload[:17])),
        encode_fc(A, B, FcPacket(0, 100, 0, 200)),
        encode_fc(A, B, FcPacket(1, 4095, 3, 12)),
        encode_fc(B, A, FcPacket(0, 0, 7, 4095)),
        encode_fc(B, A, FcPacket(1, 2048, 14, 1)),
    ]


def check_capture(tshark: str, path: str, frames: list[bytes], stamps: list[int]) -> None:
    rows = read_fields(tshark, path)
    assert len(rows) == len(frames)
    for row, frame, ns in zip(rows, frames, stamps):
        if decode_data(frame) is not None:
            expected = expected_data(frame, ns)
            assert row["_ws.col.Info"].startswith(INFO[decode_data(frame).packet.opcode]), row
        else:
            expected = expected_link(frame, ns)
        assert {k: row[k] for k in expected} == expected
        assert all(not v for k, v in row.items() if k not in expected and k != "_ws.col.Info"), row
        assert "Malformed" not in row["_ws.col.Info"]
    assert_no_errors(tshark, path)


def test_tshark_reads_the_erf_capture_as_infiniband(tshark, tmp_path):
    frames = capture_frames()
    stamps = [T0 + i * 1_000_003 for i in range(len(frames))]
    path = str(tmp_path / "ib.pcap")
    with open(path, "wb") as out:
        assert erf.write_erf(out, ((ns, *erf.ib_record(f)) for ns, f in zip(stamps, frames))) == len(frames)
    check_capture(tshark, path, frames, stamps)


def ipv4_frame() -> bytes:
    header = bytes.fromhex("4500001c00010000401100000a0000010a000002")
    return bytes.fromhex("020100000101020000000100") + b"\x08\x00" + header + bytes(8) + bytes(18)


def test_convert_keeps_the_ib_packets_and_their_times(tshark, tmp_path):
    frames = capture_frames()
    mixed = frames[:3] + [ipv4_frame()] + frames[3:]
    stamps = [T0 + i * 1_000_003 for i in range(len(mixed))]
    (tmp_path / "s1-eth1.pcapng").write_bytes(pcapng(list(zip(stamps, mixed))))
    (tmp_path / "h1-eth0.pcapng").write_bytes(pcapng([(T0, frames[6])]))
    (tmp_path / "other.pcap").write_bytes(classic_pcap([(T0, frames[0])]))

    out = str(tmp_path / "s1.ib.pcap")
    assert erf.convert(str(tmp_path / "s1-eth1.pcapng"), out) == (6, 4)
    check_capture(tshark, out, frames, stamps[:3] + stamps[4:])

    assert erf.convert_directory(str(tmp_path)) == [str(tmp_path / "h1-eth0.ib.pcap"),
                                                     str(tmp_path / "s1-eth1.ib.pcap")]
    check_capture(tshark, str(tmp_path / "h1-eth0.ib.pcap"), frames[6:7], [T0])

    micro = str(tmp_path / "micro.ib.pcap")
    assert erf.convert(str(tmp_path / "other.pcap"), micro) == (1, 0)
    check_capture(tshark, micro, frames[:1], [T0 // 1000 * 1000])
