"""Native InfiniBand packets, carried over the emulator's Ethernet veths.

Encapsulation (``--fabric ib``): an Ethernet II frame with EtherType 0x88B6
(IEEE 802 local experimental EtherType 2; 0x88B5 carries the hosts' pause
gate frames), then one delimiter byte, as IB's physical layer marks where a
packet starts, then the IB packet as it would be on an IB link:

    SDP 0xFB: a data packet   LRH BTH [RETH] [ImmDt] [AETH] payload pad ICRC VCRC
    SLP 0x5C: a link packet   Op:4 FCTBS:12 VL:4 FCCL:12 LPCRC:16   (flow control)

Frames under 60 bytes are zero-padded (the Ethernet minimum); decoders use
LRH.PktLen or the link packet's fixed 6 bytes and ignore the rest.

CRCs (reference.md): the ICRC is the Ethernet CRC-32 over LRH..pad with
LRH.VL and BTH byte 4 masked to ones (LNH = 2, no GRH), least significant
byte first; the VCRC is CRC-16 (polynomial 0x100B, reflected, init 0xFFFF,
final xor 0xFFFF) over LRH..ICRC, recomputed at every hop because a switch
may change the VL; the LPCRC is the same CRC-16 over a link packet's first
4 bytes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import crcmod

from emulator.mac import mac_bytes
from emulator.rdma.packet import Packet
from emulator.rdma.wire import pack_transport, unpack_transport

ETHERTYPE_IB = 0x88B6
SDP = 0xFB  # start of data packet (IB's K27.7)
SLP = 0x5C  # start of link packet (IB's K28.2)
LNH_LOCAL = 2
LRH_AT = 15  # after the Ethernet header and the delimiter
LRH_LEN, ICRC_LEN, VCRC_LEN, FC_LEN = 8, 4, 2, 6
MIN_FRAME = 60
_ETHERTYPE = ETHERTYPE_IB.to_bytes(2, "big")
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")


# crcmod's C extension: about 2 us per KiB against 46 us for a Python table loop.
# (Its initCrc is the initial register XORed with xorOut, hence 0 for init 0xFFFF.)
crc16 = crcmod.mkCrcFun(0x1100B, initCrc=0, rev=True, xorOut=0xFFFF)
"""IB's VCRC/LPCRC: CRC-16 0x100B reflected, init and final xor 0xFFFF."""


def _pad_frame(frame: bytes) -> bytes:
    return frame + bytes(MIN_FRAME - len(frame)) if len(frame) < MIN_FRAME else frame


def encode_data(src_mac: str, dst_mac: str, dlid: int, slid: int, sl: int, vl: int, packet: Packet) -> bytes:
    """An IB data packet from ``slid`` to ``dlid`` on ``vl``, in its Ethernet frame."""
    if not (0 <= dlid <= 0xFFFF and 0 <= slid <= 0xFFFF and 0 <= sl < 16 and 0 <= vl < 15):
        raise ValueError(f"bad LRH: DLID {dlid}, SLID {slid}, SL {sl}, VL {vl}")
    headers = pack_transport(packet)
    payload = packet.payload
    pad = -len(payload) & 3
    words = (LRH_LEN + len(headers) + len(payload) + pad + ICRC_LEN) // 4
    lrh = struct.pack("!BBHHH", vl << 4, sl << 4 | LNH_LOCAL, dlid, words, slid)
    masked_lrh = bytes((0xF0 | lrh[0] & 0x0F,)) + lrh[1:]  # VL masked to ones
    crc = zlib.crc32(_PADS[pad], zlib.crc32(payload, zlib.crc32(headers, zlib.crc32(masked_lrh))))
    headers[4] = 0
    body = b"".join((lrh, headers, payload, _PADS[pad], crc.to_bytes(4, "little")))
    frame = mac_bytes(dst_mac) + mac_bytes(src_mac) + _ETHERTYPE + bytes((SDP,)) + body
    return _pad_frame(frame + crc16(body).to_bytes(2, "little"))


@dataclass(slots=True)
class IbDecoded:
    packet: Packet
    dlid: int
    slid: int
    sl: int
    vl: int
    src_mac: str
    icrc_ok: bool
    vcrc_ok: bool


def _data_end(frame: bytes | bytearray | memoryview) -> int | None:
    """Where the VCRC of an SDP frame ends, or None if it is not one."""
    if len(frame) < LRH_AT + LRH_LEN + 12 + ICRC_LEN + VCRC_LEN or frame[12:14] != _ETHERTYPE or frame[14] != SDP:
        return None
    if frame[LRH_AT + 1] & 3 != LNH_LOCAL:
        return None
    words = int.from_bytes(frame[LRH_AT + 4:LRH_AT + 6], "big") & 0x7FF
    end = LRH_AT + words * 4 + VCRC_LEN
    if words * 4 < LRH_LEN + 12 + ICRC_LEN or end > len(frame):
        return None
    return end


def icrc_native(frame: bytes | bytearray | memoryview) -> int:
    """The ICRC an SDP frame's packet should carry (LNH = 2 masking)."""
    end = _data_end(frame)
    if end is None:
        raise ValueError("not an IB data frame")
    return _icrc(frame, end)


def _icrc(frame: bytes | bytearray | memoryview, end: int) -> int:
    lrh = bytes(frame[LRH_AT:LRH_AT + LRH_LEN])
    bth = bytearray(frame[LRH_AT + LRH_LEN:LRH_AT + LRH_LEN + 12])
    bth[4] = 0xFF
    crc = zlib.crc32(bytes((0xF0 | lrh[0] & 0x0F,)) + lrh[1:])
    crc = zlib.crc32(bth, crc)
    return zlib.crc32(frame[LRH_AT + LRH_LEN + 12:end - VCRC_LEN - ICRC_LEN], crc)


def vcrc(frame: bytes | bytearray | memoryview) -> int:
    """The VCRC an SDP frame's packet should carry."""
    end = _data_end(frame)
    if end is None:
        raise ValueError("not an IB data frame")
    return crc16(bytes(frame[LRH_AT:end - VCRC_LEN]))


def decode_data(frame: bytes | bytearray | memoryview) -> IbDecoded | None:
    """The packet of an SDP frame, or None (never raises on garbage)."""
    end = _data_end(frame)
    if end is None:
        return None
    icrc_at = end - VCRC_LEN - ICRC_LEN
    try:
        packet = unpack_transport(frame, LRH_AT + LRH_LEN, icrc_at)
    except Exception:  # a truncated extension header: garbage
        return None
    if packet is None:
        return None
    vl, sl = frame[LRH_AT] >> 4, frame[LRH_AT + 1] >> 4
    dlid = int.from_bytes(frame[LRH_AT + 2:LRH_AT + 4], "big")
    slid = int.from_bytes(frame[LRH_AT + 6:LRH_AT + 8], "big")
    icrc_ok = _icrc(frame, end) == int.from_bytes(frame[icrc_at:icrc_at + ICRC_LEN], "little")
    vcrc_ok = crc16(bytes(frame[LRH_AT:end - VCRC_LEN])) == int.from_bytes(frame[end - VCRC_LEN:end], "little")
    return IbDecoded(packet, dlid, slid, sl, vl, bytes(frame[6:12]).hex(":"), icrc_ok, vcrc_ok)


def set_vl(frame: bytes | bytearray, vl: int) -> bytes:
    """A switch's egress rewrite: the packet on ``vl``, VCRC recomputed (the ICRC masks VL)."""
    end = _data_end(frame)
    if end is None or not 0 <= vl < 15:
        raise ValueError("not an IB data frame, or a bad VL")
    out = bytearray(frame)
    out[LRH_AT] = vl << 4 | out[LRH_AT] & 0x0F
    out[end - VCRC_LEN:end] = crc16(bytes(out[LRH_AT:end - VCRC_LEN])).to_bytes(2, "little")
    return bytes(out)


@dataclass(frozen=True)
class FcDecoded:
    op: int
    fctbs: int
    vl: int
    fccl: int
    lpcrc_ok: bool
    src_mac: str


def encode_fc(src_mac: str, dst_mac: str, op: int, fctbs: int, vl: int, fccl: int) -> bytes:
    """A link flow-control packet in its Ethernet frame."""
    if not (op in (0, 1) and 0 <= fctbs < 4096 and 0 <= vl < 16 and 0 <= fccl < 4096):
        raise ValueError(f"bad flow-control packet: op {op}, FCTBS {fctbs}, VL {vl}, FCCL {fccl}")
    head = struct.pack("!HH", op << 12 | fctbs, vl << 12 | fccl)
    body = head + crc16(head).to_bytes(2, "big")
    return _pad_frame(mac_bytes(dst_mac) + mac_bytes(src_mac) + _ETHERTYPE + bytes((SLP,)) + body)


def decode_fc(frame: bytes | bytearray | memoryview) -> FcDecoded | None:
    """The link packet of an SLP frame, or None."""
    if len(frame) < LRH_AT + FC_LEN or frame[12:14] != _ETHERTYPE or frame[14] != SLP:
        return None
    first, second, lpcrc = struct.unpack_from("!HHH", frame, LRH_AT)
    ok = crc16(bytes(frame[LRH_AT:LRH_AT + 4])) == lpcrc
    return FcDecoded(first >> 12, first & 0xFFF, second >> 12, second & 0xFFF, ok, bytes(frame[6:12]).hex(":"))


def is_ib(frame: bytes | bytearray | memoryview) -> bool:
    return len(frame) > LRH_AT and frame[12:14] == _ETHERTYPE
