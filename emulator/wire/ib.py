"""Native InfiniBand packets carried over the emulator's Ethernet veths, on the hot path.

Encapsulation (``--fabric ib``): an Ethernet II frame with EtherType 0x88B6
(IEEE 802 local experimental EtherType 2; 0x88B5 carries the hosts' pause
gate frames), then one delimiter byte, as IB's physical layer marks where a
packet starts, then the IB packet exactly as it would be on an IB link::

    dst MAC, src MAC, 0x88B6, 0xFB (SDP, like K27.7): a data packet
        LRH(8) BTH(12) [RETH(16)] [ImmDt(4)] [AETH(4)] payload pad ICRC(4) VCRC(2)
    dst MAC, src MAC, 0x88B6, 0x5C (SLP, like K28.2): a link packet
        Op:4 FCTBS:12 | VL:4 FCCL:12 | LPCRC(2)            (flow control, 6 bytes)

Frames under 60 bytes are zero-padded at the end (the Ethernet minimum);
decoders go by LRH.PktLen or the link packet's fixed 6 bytes and ignore it.
The LRH carries VL, LVer 0, SL, LNH 2 ("IBA local": no GRH), DLID, PktLen
(LRH through ICRC in 4-byte words) and SLID.

CRCs (IBTA 7.8; ../shared/reference.md), each appended least significant
byte first:

- ICRC: the Ethernet CRC-32 over LRH..pad with LRH.VL and BTH byte 4
  (FECN, BECN) set to ones, so a switch may move a packet to another VL or
  mark congestion without breaking it; SL is covered.
- VCRC: CRC-16 (polynomial 0x100B, reflected, init and final xor 0xFFFF)
  over LRH..ICRC, nothing masked; recomputed at every hop (:func:`set_vl`).
- LPCRC: the same CRC-16 over a link packet's first 4 bytes.

Only :mod:`struct`, :mod:`zlib` and crcmod's C extension here (no scapy):
every frame of an IB fabric goes through these functions.
"""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass

import crcmod

from emulator.wire.mac import ETH_LEN, mac_bytes, mac_text
from emulator.wire.transport import Opcode, Packet
from emulator.wire.roce import BECN, pack_transport, unpack_transport

ETHERTYPE_IB = 0x88B6
ETH_IB = ETHERTYPE_IB.to_bytes(2, "big")  # as it sits in a frame
SDP = 0xFB  # start of data packet (IB's K27.7)
SLP = 0x5C  # start of link packet (IB's K28.2)
LNH_LOCAL = 2  # LRH.LNH "IBA local": BTH follows the LRH
FECN = 0x80  # BTH byte 4: a switch on the path saw congestion
OP_NORMAL, OP_INIT = 0, 1
SLS = 16  # service levels: LRH.SL is 4 bits, and an SL-to-VL map has an entry for each
MANAGEMENT_VL = 15  # carries subnet management only; data VLs are 0 to 14

LRH_AT = ETH_LEN + 1  # after the Ethernet header and the delimiter
LRH_LEN, BTH_LEN, ICRC_LEN, VCRC_LEN, FC_LEN = 8, 12, 4, 2, 6
BTH_AT = LRH_AT + LRH_LEN
MIN_FRAME = 60
MIN_WORDS = (LRH_LEN + BTH_LEN + ICRC_LEN) // 4
MAX_WORDS = 0x7FF  # PktLen is 11 bits

_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_ZEROS = bytes(MIN_FRAME)
_CNP = int(Opcode.CNP)
_LRH = struct.Struct("!BBHHH")  # VL|LVer, SL|LNH, DLID, PktLen, SLID
_FC = struct.Struct("!HH")  # Op|FCTBS, VL|FCCL

# crcmod's C extension: about 2.5 us per KiB, against 46 us for a Python table
# loop.  Its initCrc is the register's start XORed with xorOut, hence 0 for a
# start of 0xFFFF; chaining calls (crc16(b, crc16(a)) == crc16(a + b)) works.
crc16 = crcmod.mkCrcFun(0x1100B, initCrc=0, rev=True, xorOut=0xFFFF)
"""IB's VCRC and LPCRC: CRC-16 0x100B reflected, init and final xor 0xFFFF."""

# The ICRC's first byte is LRH byte 0 with VL masked: only LVer remains.
_ICRC_FIRST = tuple(zlib.crc32(bytes((0xF0 | lver,))) for lver in range(16))


@functools.lru_cache(maxsize=1024)
def _head(src_mac: str, dst_mac: str, delimiter: int) -> bytes:
    """Ethernet header and delimiter byte: a port talks to one peer, so this is cached."""
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + ETH_IB + bytes((delimiter,))


def _check_lrh(dlid: int, slid: int, sl: int, vl: int) -> None:
    if dlid >> 16 or slid >> 16 or sl >> 4 or vl >> 4:  # a negative number shifts to -1, also refused
        raise ValueError(f"bad LRH field: DLID {dlid}, SLID {slid}, SL {sl}, VL {vl}")


def encode_data(src_mac: str, dst_mac: str, dlid: int, slid: int, sl: int, vl: int, packet: Packet) -> bytes:
    """The Ethernet frame of ``packet`` from LID ``slid`` to ``dlid`` on ``vl``, with ICRC and VCRC.

    BTH byte 4 goes out zero (BECN on a CNP); switches may set FECN.
    """
    _check_lrh(dlid, slid, sl, vl)
    headers = pack_transport(packet)  # byte 4 all ones, as the ICRC sees it
    payload = packet.payload
    pad = -len(payload) & 3
    words = (LRH_LEN + len(headers) + len(payload) + pad + ICRC_LEN) >> 2
    if words > MAX_WORDS:
        raise ValueError(f"packet of {words * 4} bytes exceeds LRH.PktLen")
    lrh = bytearray(_LRH.pack(0xF0, sl << 4 | LNH_LOCAL, dlid, words, slid))  # VL masked for the ICRC
    icrc = zlib.crc32(_PADS[pad], zlib.crc32(payload, zlib.crc32(headers, zlib.crc32(lrh))))
    lrh[0] = vl << 4
    headers[4] = BECN if packet.opcode == _CNP else 0
    icrc_bytes = icrc.to_bytes(4, "little")
    variant = crc16(icrc_bytes, crc16(_PADS[pad], crc16(payload, crc16(headers, crc16(lrh)))))
    short = MIN_FRAME - LRH_AT - words * 4 - VCRC_LEN
    return b"".join((_head(src_mac, dst_mac, SDP), lrh, headers, payload, _PADS[pad], icrc_bytes,
                     variant.to_bytes(2, "little"), _ZEROS[:max(short, 0)]))


@dataclass(slots=True)
class IbDecoded:
    """A received :class:`Packet`, its LRH fields and whether its CRCs held.

    ``packet.ecn_ce`` carries the BTH's FECN, IB's congestion mark.
    """

    packet: Packet
    dlid: int
    slid: int
    sl: int
    vl: int
    src_mac: str
    icrc_ok: bool
    vcrc_ok: bool


def data_end(frame: bytes | bytearray | memoryview) -> int | None:
    """Where the VCRC of a local-routed SDP frame ends (from LRH.PktLen), or None if it is not one.

    The packet is ``frame[LRH_AT:data_end(frame)]``; what follows is Ethernet padding.
    """
    if (len(frame) < BTH_AT + BTH_LEN + ICRC_LEN + VCRC_LEN or frame[12] != 0x88 or frame[13] != 0xB6
            or frame[ETH_LEN] != SDP or frame[LRH_AT + 1] & 3 != LNH_LOCAL):
        return None
    size = packet_size(frame)
    end = LRH_AT + size
    return end if size >= MIN_WORDS * 4 + VCRC_LEN and end <= len(frame) else None


def packet_size(frame: bytes | bytearray | memoryview) -> int:
    """Bytes of the IB packet in an SDP frame, what link credits count.

    LRH through ICRC (LRH.PktLen, in 4-byte words) and the VCRC.  Reads
    PktLen as it stands; :func:`data_end` checks it against the frame.
    """
    return ((frame[LRH_AT + 4] & 0x07) << 8 | frame[LRH_AT + 5]) * 4 + VCRC_LEN


def _icrc(frame: bytes | bytearray | memoryview, icrc_at: int) -> int:
    """The ICRC over LRH..pad with LRH.VL and BTH byte 4 masked to ones."""
    view = memoryview(frame)
    crc = zlib.crc32(view[LRH_AT + 1:BTH_AT + 4], _ICRC_FIRST[frame[LRH_AT] & 0x0F])
    return zlib.crc32(view[BTH_AT + 5:icrc_at], zlib.crc32(b"\xff", crc))


def icrc_native(frame: bytes | bytearray | memoryview) -> int:
    """The ICRC an SDP frame's packet should carry; compare with its 4 bytes read little-endian.

    Raises ValueError for anything that is not a local-routed IB data frame.
    """
    end = data_end(frame)
    if end is None:
        raise ValueError("not a native IB data frame")
    return _icrc(frame, end - VCRC_LEN - ICRC_LEN)


def vcrc(frame: bytes | bytearray | memoryview) -> int:
    """The VCRC an SDP frame's packet should carry; compare with its 2 bytes read little-endian.

    Raises ValueError for anything that is not a local-routed IB data frame.
    """
    end = data_end(frame)
    if end is None:
        raise ValueError("not a native IB data frame")
    return crc16(memoryview(frame)[LRH_AT:end - VCRC_LEN])


def decode_data(frame: bytes | bytearray | memoryview) -> IbDecoded | None:
    """The packet of an SDP frame, or None if it is not one we speak; never raises on garbage.

    The payload is a memoryview into ``frame`` (no copy).  A packet whose
    CRCs fail is still returned, flagged, so that the caller can count it.
    """
    end = data_end(frame)
    if end is None:
        return None
    icrc_at = end - VCRC_LEN - ICRC_LEN
    packet = unpack_transport(frame, BTH_AT, icrc_at)
    if packet is None:
        return None
    packet.ecn_ce = frame[BTH_AT + 4] & FECN != 0
    vl_lver, sl_lnh, dlid, _, slid = _LRH.unpack_from(frame, LRH_AT)
    icrc_ok = _icrc(frame, icrc_at) == int.from_bytes(frame[icrc_at:icrc_at + ICRC_LEN], "little")
    vcrc_ok = crc16(memoryview(frame)[LRH_AT:end - VCRC_LEN]) == int.from_bytes(frame[end - VCRC_LEN:end], "little")
    return IbDecoded(packet, dlid, slid, sl_lnh >> 4, vl_lver >> 4, mac_text(frame[6:12]), icrc_ok, vcrc_ok)


def set_vl(frame: bytes | bytearray, vl: int) -> bytes:
    """A switch's egress rewrite: the frame's packet moved to ``vl``, its VCRC recomputed.

    The ICRC stays valid: it masks the VL.  Raises ValueError for a bad VL
    or anything that is not a local-routed IB data frame.
    """
    end = data_end(frame)
    if end is None or not 0 <= vl < 16:
        raise ValueError(f"not a native IB data frame, or a bad VL {vl}")
    view = memoryview(frame)
    first = bytes((vl << 4 | frame[LRH_AT] & 0x0F,))
    crc = crc16(view[LRH_AT + 1:end - VCRC_LEN], crc16(first))
    return b"".join((view[:LRH_AT], first, view[LRH_AT + 1:end - VCRC_LEN], crc.to_bytes(2, "little"), view[end:]))


@dataclass(frozen=True, slots=True)
class FcPacket:
    """One flow-control packet for one VL, its fields as on the wire.

    ``op`` is :data:`OP_INIT` until the sending end has heard from its peer
    on the VL, then :data:`OP_NORMAL`; ``fctbs`` is the sender's blocks sent
    and ``fccl`` its grant to the peer, both mod 4096 (what they mean to
    the ends of a link is :mod:`emulator.model.credits`).  A packet whose
    fields do not fit their bits cannot be made.
    """

    op: int
    fctbs: int
    vl: int
    fccl: int

    def __post_init__(self) -> None:
        if self.op not in (OP_NORMAL, OP_INIT):
            raise ValueError(f"flow-control op {self.op} is neither normal (0) nor init (1)")
        if self.fctbs >> 12 or self.fccl >> 12:  # a negative number shifts to -1, also refused
            raise ValueError(f"FCTBS {self.fctbs} or FCCL {self.fccl} is not a 12-bit value")
        if self.vl >> 4:
            raise ValueError(f"VL {self.vl} is not a 4-bit value")


@dataclass(frozen=True, slots=True)
class FcDecoded:
    """A received :class:`FcPacket`, whether its LPCRC held and who sent it."""

    packet: FcPacket
    lpcrc_ok: bool
    src_mac: str


def encode_fc(src_mac: str, dst_mac: str, fc: FcPacket) -> bytes:
    """The Ethernet frame of a flow-control packet: Op (0 normal, 1 init), FCTBS, VL, FCCL, LPCRC."""
    fields = _FC.pack(fc.op << 12 | fc.fctbs, fc.vl << 12 | fc.fccl)
    body = fields + crc16(fields).to_bytes(2, "little")
    return b"".join((_head(src_mac, dst_mac, SLP), body, _ZEROS[:MIN_FRAME - LRH_AT - FC_LEN]))


def decode_fc(frame: bytes | bytearray | memoryview) -> FcDecoded | None:
    """The link packet of an SLP frame, or None (also for a reserved Op); never raises on garbage."""
    if len(frame) < LRH_AT + FC_LEN or frame[12] != 0x88 or frame[13] != 0xB6 or frame[ETH_LEN] != SLP:
        return None
    first, second = _FC.unpack_from(frame, LRH_AT)
    if first >> 12 not in (OP_NORMAL, OP_INIT):
        return None
    ok = crc16(memoryview(frame)[LRH_AT:LRH_AT + 4]) == int.from_bytes(frame[LRH_AT + 4:LRH_AT + FC_LEN], "little")
    return FcDecoded(FcPacket(first >> 12, first & 0xFFF, second >> 12, second & 0xFFF), ok, mac_text(frame[6:12]))


def is_ib(frame: bytes | bytearray | memoryview) -> bool:
    """Whether an Ethernet frame carries our IB encapsulation (EtherType 0x88B6 and a delimiter)."""
    return len(frame) > ETH_LEN and frame[12] == 0x88 and frame[13] == 0xB6
