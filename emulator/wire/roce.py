"""RoCEv2 over IPv4: :class:`Packet` to Ethernet frame and back, on the hot path.

Every frame the emulated RNIC sends or receives goes through here, so this
module builds and parses bytes with :mod:`struct` and :mod:`zlib` only
(no scapy: importing it costs about a second; :mod:`emulator.wire.scapy_layers`
has the scapy view for tests and analysis).

Frames are complete Ethernet II frames without FCS and without padding to
the 60-byte minimum (the decoder ignores any trailer after the IP datagram).
The IPv4 header checksum is real; the UDP checksum is zero ("none" in
IPv4), as Linux's software RoCE (rxe, ``prepare_udp_hdr``) sends it: the
ICRC covers the UDP payload, and summing 4 KiB per frame in Python cost the
RNIC about 8 us of its frame time (docs/performance.md).  The ICRC is the
CRC-32 that RoCE receivers check over the invariant fields (IBTA Annex A17,
RoCEv2):

- the ICRC covers 8 bytes of ones (the pseudo-LRH), the IP header with TOS,
  TTL and checksum set to ones, the UDP header with checksum set to ones,
  the BTH with byte 4 (FECN, BECN, reserved) set to ones, and everything
  after it up to the end of the pad; it is appended least significant byte
  first.  Switches may therefore mark CE and decrement TTL without breaking
  it, but not change anything else.
- ones'-complement sums use the identity 2**16 = 1 (mod 0xFFFF): the sum of
  the big-endian 16-bit words of an even-length string is congruent to the
  string read as one big integer, so one ``int.from_bytes`` and one ``%``
  replace a Python loop over words.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from dataclasses import dataclass

from emulator.wire.mac import ETH_LEN, mac_bytes
from emulator.wire.transport import HAS_AETH, HAS_IMM, HAS_PAYLOAD, HAS_RETH, Opcode, Packet

ROCE_PORT = 4791
DATA_DSCP = 26  # RoCE's traffic class (priority 3 in this fabric)
CNP_DSCP = 48  # DCQCN's CNPs (priority 6, strict)
ETH_IPV4 = b"\x08\x00"
IPPROTO_UDP = 17
ECT0 = 0b10
ECN_CE = 0b11
IP_DF = 0x4000
BECN = 0x40  # BTH byte 4 of a CNP
CNP_BODY_LEN = 16  # reserved zero bytes after a CNP's BTH
_CNP = int(Opcode.CNP)  # an int compares faster than the enum member

IP_LEN, UDP_LEN, BTH_LEN, ICRC_LEN = 20, 8, 12, 4
IP_AT = ETH_LEN
MIN_FRAME = ETH_LEN + IP_LEN + UDP_LEN + BTH_LEN + ICRC_LEN

_PSEUDO_LRH = b"\xff" * 8
_PSEUDO_LRH_CRC = zlib.crc32(_PSEUDO_LRH)
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")

# The BTH and the extension headers each opcode carries, in wire order
# (RETH before ImmDt on WRITE_ONLY_IMM), as one struct per opcode.
_TRANSPORT: dict[int, struct.Struct] = {
    op: struct.Struct(
        "!BBHII" + ("QII" if op in HAS_RETH else "") + ("I" if op in HAS_IMM else "")
        + ("I" if op in HAS_AETH else "") + (f"{CNP_BODY_LEN}x" if op == _CNP else "")
    )
    for op in Opcode
}
_OPCODES = {int(op): op for op in Opcode}

# Ethernet, IP and UDP headers from per-Framer constant pieces and the IP total
# length and identification, IP checksum, UDP length and checksum.  The masked
# twin (IP and UDP headers after the pseudo-LRH) is what the ICRC sees.
_HEADERS = struct.Struct("!16sHH4sH12sHH")
_MASKED = struct.Struct("!BBHH18sHH")
_IP = struct.Struct("!BxH2xHxB")  # version and IHL, total length, flags and fragment offset, protocol
_UDP = struct.Struct("!2xHH")  # destination port, length


def _ones_sum(data: bytes) -> int:
    """The 16-bit words of ``data`` (even length) summed modulo 0xFFFF."""
    return int.from_bytes(data, "big") % 0xFFFF


class Framer:
    """Encodes packets of one flow (one source to one destination) as frames.

    Everything in the Ethernet, IPv4 and UDP headers but the lengths, the IP
    identification (incremented per frame) and the IP checksum is fixed per
    Framer, so it is packed, and its share of that checksum summed, once.
    The TOS carries ``dscp`` and ECT(0), so switches may mark CE.  CNPs go
    at their own DSCP (48 in this fabric, priority 6): a second Framer.
    """

    def __init__(self, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, src_port: int,
                 dscp: int = DATA_DSCP, ttl: int = 64) -> None:
        if not 0 <= dscp < 64 or not 0 < ttl < 256 or not 0 <= src_port < 65536:
            raise ValueError(f"bad Framer parameters: dscp {dscp}, ttl {ttl}, port {src_port}")
        src, dst = ipaddress.IPv4Address(src_ip).packed, ipaddress.IPv4Address(dst_ip).packed
        tos = dscp << 2 | ECT0
        self._ident = 0
        self._eth_ip = mac_bytes(dst_mac) + mac_bytes(src_mac) + ETH_IPV4 + bytes((0x45, tos))
        self._ip_mid = struct.pack("!HBB", IP_DF, ttl, IPPROTO_UDP)
        self._addrs_ports = src + dst + struct.pack("!HH", src_port, ROCE_PORT)
        self._masked_mid = struct.pack("!HBBH", IP_DF, 0xFF, IPPROTO_UDP, 0xFFFF) + self._addrs_ports
        # Ones'-complement sums of the constant words; lengths, id and data are added per frame.
        self._ip_sum = _ones_sum(self._eth_ip[14:] + self._ip_mid + src + dst)

    def encode(self, packet: Packet) -> bytes:
        """The Ethernet frame of ``packet``, with its IP checksum and ICRC (UDP checksum zero)."""
        op = packet.opcode
        payload = packet.payload
        headers = pack_transport(packet)
        pad = -len(payload) & 3
        transport = _TRANSPORT[op]

        udp_len = UDP_LEN + transport.size + len(payload) + pad + ICRC_LEN
        total_len = IP_LEN + udp_len
        ident = self._ident = (self._ident + 1) & 0xFFFF
        masked = _MASKED.pack(0x45, 0xFF, total_len, ident, self._masked_mid, udp_len, 0xFFFF)
        crc = zlib.crc32(masked, _PSEUDO_LRH_CRC)
        crc = zlib.crc32(_PADS[pad], zlib.crc32(payload, zlib.crc32(headers, crc)))
        headers[4] = BECN if op == _CNP else 0

        ip_check = -(self._ip_sum + total_len + ident) % 0xFFFF
        return b"".join((_HEADERS.pack(self._eth_ip, total_len, ident, self._ip_mid, ip_check,
                                       self._addrs_ports, udp_len, 0),
                         headers, payload, _PADS[pad], crc.to_bytes(4, "little")))  # one copy of the payload


def pack_transport(packet: Packet) -> bytearray:
    """BTH and extension headers of ``packet``, BTH byte 4 all ones as the ICRC sees it.

    Shared by RoCEv2 and native IB framing; the caller sets byte 4 (FECN,
    BECN) after computing the ICRC.
    """
    op = packet.opcode
    payload = packet.payload
    transport = _TRANSPORT.get(op)
    if transport is None or (payload and op not in HAS_PAYLOAD):
        raise ValueError(f"cannot encode opcode {op:#x} with {len(payload)} payload bytes")
    if (packet.dest_qp | packet.psn) >> 24:
        raise ValueError(f"DestQP {packet.dest_qp:#x} or PSN {packet.psn:#x} exceeds 24 bits")
    pad = -len(payload) & 3
    # BTH byte 4 and its DestQP share a word; it is packed all ones for the ICRC.
    words = [op, packet.solicited << 7 | pad << 4, packet.pkey,
             0xFF000000 | packet.dest_qp, packet.ack_req << 31 | packet.psn]
    if op in HAS_RETH:
        words += (packet.va, packet.rkey, packet.dma_len)
    if op in HAS_IMM:
        words.append(packet.imm)
    if op in HAS_AETH:
        if packet.syndrome >> 8 or packet.msn >> 24:
            raise ValueError(f"AETH syndrome {packet.syndrome:#x} or MSN {packet.msn:#x} out of range")
        words.append(packet.syndrome << 24 | packet.msn)
    headers = bytearray(transport.size)
    transport.pack_into(headers, 0, *words)
    return headers


def unpack_transport(frame: bytes | bytearray | memoryview, bth_at: int, end: int) -> Packet | None:
    """The packet whose BTH starts at ``bth_at`` and whose payload and pad end at ``end``."""
    op = _OPCODES.get(frame[bth_at])
    if op is None:
        return None
    transport = _TRANSPORT[op]
    at = bth_at + transport.size
    payload_end = end - (frame[bth_at + 1] >> 4 & 3)
    if payload_end < at:
        return None
    _, flags, pkey, dest_qp, psn, *ext = transport.unpack_from(frame, bth_at)
    va = rkey = dma_len = imm = syndrome = msn = 0
    if op in HAS_RETH:
        va, rkey, dma_len = ext[:3]
    if op in HAS_IMM:
        imm = ext[-1]
    if op in HAS_AETH:
        syndrome, msn = ext[-1] >> 24, ext[-1] & 0xFFFFFF
    return Packet(op, dest_qp & 0xFFFFFF, psn & 0xFFFFFF, psn >> 31 == 1, flags >> 7 == 1, pkey,
                  va, rkey, dma_len, imm, syndrome, msn, memoryview(frame)[at:payload_end])


@dataclass(slots=True)
class Decoded:
    """A received :class:`Packet` and the addressing the RNIC needs to answer it."""

    packet: Packet
    src_mac: str
    src_ip: str
    dst_ip: str
    src_port: int
    icrc_ok: bool


def _locate(frame: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(offset of the BTH, end of the IP datagram) of a RoCEv2/IPv4 frame, else None.

    The end comes from the IP total length, not the frame length: a frame
    may carry an Ethernet trailer (padding to 60 bytes) after the datagram.
    Fragments are refused: their UDP payload is not all here.
    """
    if len(frame) < MIN_FRAME or frame[12:14] != ETH_IPV4:
        return None
    version_ihl, total_len, frag, proto = _IP.unpack_from(frame, IP_AT)
    ihl = (version_ihl & 0x0F) * 4
    if version_ihl >> 4 != 4 or ihl < IP_LEN or proto != IPPROTO_UDP or frag & 0x3FFF:
        return None
    udp_at = IP_AT + ihl
    end = IP_AT + total_len
    if end > len(frame) or end < udp_at + UDP_LEN + BTH_LEN + ICRC_LEN:
        return None
    dport, udp_len = _UDP.unpack_from(frame, udp_at)
    if dport != ROCE_PORT or udp_len != total_len - ihl:
        return None
    return udp_at + UDP_LEN, end


def _ones(*offsets: int) -> int:
    """A big-endian integer with the bytes at ``offsets`` all ones."""
    return sum(0xFF << 8 * offset for offset in offsets)


# The ICRC's masks over IP header..BTH, read as one big-endian integer, per IHL.
_ICRC_MASKS = {
    ihl: _ones(*(ihl + UDP_LEN + BTH_LEN - 1 - at for at in (1, 8, 10, 11, ihl + 6, ihl + 7, ihl + UDP_LEN + 4)))
    for ihl in range(IP_LEN, 64, 4)
}


def _icrc(frame: bytes | bytearray | memoryview, bth_at: int, end: int) -> int:
    """The ICRC over a located frame's invariant fields (see the module docstring)."""
    covered = bth_at + BTH_LEN - IP_AT
    masked = int.from_bytes(frame[IP_AT:bth_at + BTH_LEN], "big") | _ICRC_MASKS[covered - UDP_LEN - BTH_LEN]
    crc = zlib.crc32(masked.to_bytes(covered, "big"), _PSEUDO_LRH_CRC)
    return zlib.crc32(memoryview(frame)[bth_at + BTH_LEN:end - ICRC_LEN], crc)


def icrc(frame: bytes | bytearray | memoryview) -> int:
    """The ICRC a RoCEv2/IPv4 Ethernet frame should carry (as an integer).

    Compare with ``int.from_bytes(trailer, "little")``.  Raises ValueError
    for anything that is not a RoCEv2/IPv4 frame.
    """
    located = _locate(frame)
    if located is None:
        raise ValueError("not a RoCEv2/IPv4 frame")
    return _icrc(frame, *located)


def decode(frame: bytes | bytearray | memoryview) -> Decoded | None:
    """The packet in a RoCEv2/IPv4 frame, or None if it is not one we speak.

    None for anything but IPv4/UDP to port 4791 carrying a complete packet of
    an :class:`Opcode`; never raises on garbage.  The payload is a
    memoryview into ``frame`` (no copy): copy it before reusing the buffer.
    ``icrc_ok`` is False when the ICRC does not match; the packet is still
    returned so that the caller can count the error.
    """
    located = _locate(frame)
    if located is None:
        return None
    bth_at, end = located
    packet = unpack_transport(frame, bth_at, end - ICRC_LEN)
    if packet is None:
        return None
    packet.ecn_ce = frame[IP_AT + 1] & ECN_CE == ECN_CE
    udp_at = bth_at - UDP_LEN
    icrc_ok = _icrc(frame, bth_at, end) == int.from_bytes(frame[end - ICRC_LEN:end], "little")
    src_mac, src_ip, dst_ip = _addressing(b"".join((frame[6:12], frame[IP_AT + 12:IP_AT + 20])))
    return Decoded(packet, src_mac, src_ip, dst_ip, frame[udp_at] << 8 | frame[udp_at + 1], icrc_ok)


@functools.lru_cache(maxsize=1024)
def _addressing(raw: bytes) -> tuple[str, str, str]:
    """Source MAC, source and destination IP as text, from their 14 wire bytes.

    Cached: a host hears from few peers, and formatting them anew for every
    frame would be about a tenth of the decoding time.
    """
    return raw[:6].hex(":"), str(ipaddress.IPv4Address(raw[6:10])), str(ipaddress.IPv4Address(raw[10:14]))
