"""Native IB packets: fields, CRCs against plain implementations, link packets, ERF for tshark."""

from __future__ import annotations

import shutil
import subprocess
import zlib

import pytest

from emulator.ib.erf import ib_records, write_erf
from emulator.ib.wire import (
    LRH_AT, decode_data, decode_fc, encode_data, encode_fc, icrc_native, set_vl, vcrc,
)
from emulator.rdma.packet import HAS_PAYLOAD, Opcode, Packet

A, B = "02:00:00:00:01:00", "02:01:00:00:01:01"


def plain_crc16(data: bytes) -> int:
    """CRC-16, polynomial 0x100B, bit by bit (reflected), init 0xFFFF, final xor 0xFFFF."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD008 if crc & 1 else crc >> 1
    return crc ^ 0xFFFF


def _packet(op: Opcode, payload: bytes = b"") -> Packet:
    return Packet(op, 0x123456, 0xABCDEF, ack_req=True, va=0x1122334455667788, rkey=0x99AABBCC, dma_len=len(payload),
                  imm=0xDEADBEEF, syndrome=0x1F, msn=77, payload=payload)


@pytest.mark.parametrize("op", [op for op in Opcode if op != Opcode.CNP])
@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 7, 1024])
def test_round_trip_keeps_every_field_and_both_crcs(op, length):
    payload = bytes(range(length % 256)) * (length // 256 + 1)
    payload = payload[:length] if op in HAS_PAYLOAD else b""
    frame = encode_data(A, B, dlid=9, slid=4, sl=3, vl=2, packet=_packet(op, payload))
    assert len(frame) >= 60
    d = decode_data(frame)
    assert (d.dlid, d.slid, d.sl, d.vl, d.src_mac) == (9, 4, 3, 2, A)
    assert d.icrc_ok and d.vcrc_ok
    p = d.packet
    assert (p.opcode, p.dest_qp, p.psn, p.ack_req, bytes(p.payload)) == (op, 0x123456, 0xABCDEF, True, payload)


def test_crcs_agree_with_plain_implementations():
    frame = encode_data(A, B, 9, 4, 3, 2, _packet(Opcode.WRITE_FIRST, bytes(range(256)) * 4))
    words = int.from_bytes(frame[LRH_AT + 4:LRH_AT + 6], "big") & 0x7FF
    end = LRH_AT + words * 4
    masked = bytearray(frame[LRH_AT:end - 4])
    masked[0] |= 0xF0  # LRH.VL
    masked[8 + 4] = 0xFF  # BTH byte 4
    assert icrc_native(frame) == zlib.crc32(masked) == int.from_bytes(frame[end - 4:end], "little")
    assert vcrc(frame) == plain_crc16(frame[LRH_AT:end]) == int.from_bytes(frame[end:end + 2], "little")


def test_vl_rewrite_keeps_the_icrc_and_fixes_the_vcrc_but_sl_is_covered():
    frame = encode_data(A, B, 9, 4, 3, 0, _packet(Opcode.SEND_ONLY, b"x" * 100))
    moved = decode_data(set_vl(frame, 3))
    assert moved.vl == 3 and moved.icrc_ok and moved.vcrc_ok
    tampered = bytearray(frame)
    tampered[LRH_AT + 1] ^= 0x10  # SL is not masked in the ICRC
    d = decode_data(bytes(tampered))
    assert not d.icrc_ok and not d.vcrc_ok
    tampered = bytearray(frame)
    tampered[-10] ^= 1 if len(frame) > 80 else 0
    tampered[LRH_AT + 40] ^= 0x01  # payload
    d = decode_data(bytes(tampered))
    assert not d.icrc_ok and not d.vcrc_ok


def test_link_packets_round_trip_and_check_their_lpcrc():
    frame = encode_fc(A, B, op=1, fctbs=4095, vl=3, fccl=17)
    fc = decode_fc(frame)
    assert (fc.op, fc.fctbs, fc.vl, fc.fccl, fc.lpcrc_ok) == (1, 4095, 3, 17, True)
    assert int.from_bytes(frame[LRH_AT + 4:LRH_AT + 6], "big") == plain_crc16(frame[LRH_AT:LRH_AT + 4])
    bad = bytearray(frame)
    bad[LRH_AT + 1] ^= 1
    assert not decode_fc(bytes(bad)).lpcrc_ok
    for args in ((2, 0, 0, 0), (0, 4096, 0, 0), (0, 0, 16, 0), (0, 0, 0, 4096)):
        with pytest.raises(ValueError):
            encode_fc(A, B, *args)


def test_garbage_never_raises():
    frame = encode_data(A, B, 9, 4, 3, 0, _packet(Opcode.WRITE_ONLY_IMM, b"y" * 300))
    for cut in range(len(frame)):
        decode_data(frame[:cut])
        decode_fc(frame[:cut])
    assert decode_data(b"\xff" * 100) is None


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (apt-get install tshark)")
def test_tshark_decodes_the_erf_capture_as_infiniband(tmp_path):
    payload = bytes(range(256)) * 4
    frames = [
        encode_data(A, B, 3, 7, 0, 0, Packet(Opcode.WRITE_FIRST, 0x11, 5, va=0x1000, rkey=0x55, dma_len=4096,
                                             payload=payload)),
        encode_data(A, B, 3, 7, 1, 1, Packet(Opcode.WRITE_ONLY_IMM, 0x11, 6, va=0x1000, rkey=0x55, dma_len=10,
                                             imm=0xABC, payload=payload[:10])),
        encode_data(A, B, 7, 3, 0, 0, Packet(Opcode.ACK, 0x12, 6, syndrome=0x1F, msn=2)),
        encode_data(A, B, 7, 3, 0, 0, Packet(Opcode.READ_RESPONSE_MIDDLE, 0x12, 8, payload=payload)),
        encode_fc(A, B, 0, 100, 0, 200),
        encode_fc(A, B, 1, 4095, 3, 12),
    ]
    path = str(tmp_path / "ib.pcap")
    records = list(ib_records([(1_700_000_000_000_000_000 + i * 1000, f) for i, f in enumerate(frames)]))
    assert write_erf(path, records) == 6
    fields = ["infiniband.lrh.vl", "infiniband.lrh.sl", "infiniband.lrh.dlid", "infiniband.lrh.slid",
              "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp", "infiniband.reth.dmalen",
              "infiniband.aeth.syndrome", "infiniband_link.op", "infiniband_link.fctbs", "infiniband_link.vl",
              "infiniband_link.fccl", "_ws.col.Info"]
    args = ["tshark", "-r", path, "-T", "fields", "-E", "occurrence=f"] + [a for f in fields for a in ("-e", f)]
    rows = [line.split("\t") for line in subprocess.run(args, capture_output=True, text=True, check=True)
            .stdout.splitlines()]
    assert [r[:9] for r in rows[:4]] == [
        ["0x00", "0", "3", "7", "6", "5", "0x000011", "4096", ""],
        ["0x01", "1", "3", "7", "11", "6", "0x000011", "10", ""],
        ["0x00", "0", "7", "3", "17", "6", "0x000012", "", "31"],
        ["0x00", "0", "7", "3", "14", "8", "0x000012", "", ""],
    ]
    assert [r[9:13] for r in rows[4:]] == [["0", "100", "0", "200"], ["1", "4095", "3", "12"]]
    assert not any("Malformed" in r[-1] for r in rows)
    expert = subprocess.run(["tshark", "-r", path, "-q", "-z", "expert"], capture_output=True, text=True).stdout
    assert "Errors" not in expert
