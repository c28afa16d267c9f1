"""The switch's L3 forwarding decisions, as pure functions on frame bytes.

Per-frame code: plain bytes slicing and a dict lookup, no parsing library.
Frames come from the wire and are hostile until checked: the agent calls
:func:`ipv4_ok` before the other functions here see an IPv4 frame, and they
index only what it checked.  A switch forwards IPv4 by destination host
address to one of the equal-cost ports the plan computed, chosen by a
CRC-32 of the 5-tuple seeded with the switch's own number (so a flow keeps
its path and neighbouring switches do not polarise).  It answers ARP for
fabric addresses with its own port MAC (proxy ARP), as the hosts' gateway.
"""

from __future__ import annotations

import ipaddress
import zlib

from emulator.wire.mac import ETH_LEN

ETH_IPV4 = b"\x08\x00"
ETH_ARP = b"\x08\x06"
ETH_CONTROL = b"\x88\xb5"  # hosts' pause-gate and kick frames
IPPROTO_TCP, IPPROTO_UDP = 6, 17
IPV4_MIN = ETH_LEN + 20
FABRIC_NET = ipaddress.IPv4Network("10.0.0.0/8")


def ipv4_ok(frame: bytes) -> bool:
    """Whether an IPv4 frame has a header the functions below may index.

    Version 4, a header of at least 20 bytes, and a total length that
    covers the header and fits in the frame (what follows is Ethernet
    padding).  The header checksum is not verified, unlike RFC 1812 asks
    of a router: it costs about a tenth of the switch's time per frame, and
    a frame with a bad one harms nothing on its way (the TTL update keeps
    it wrong) before the receiving host's kernel drops it.
    """
    if len(frame) < IPV4_MIN:
        return False
    version_ihl = frame[14]
    total = frame[16] << 8 | frame[17]
    return version_ihl >> 4 == 4 and 20 <= (version_ihl & 0x0F) * 4 <= total <= len(frame) - ETH_LEN


def ecmp_index(frame: bytes, seed: int, choices: int) -> int:
    """Which of ``choices`` equal-cost ports this IPv4 frame's flow takes (after :func:`ipv4_ok`)."""
    proto = frame[23]
    key = frame[26:34] + frame[23:24]
    if proto in (IPPROTO_TCP, IPPROTO_UDP):
        l4 = 14 + (frame[14] & 0x0F) * 4
        key += frame[l4:l4 + 4]
    return zlib.crc32(key, seed) % choices


def routed(frame: bytes, src_mac: bytes, dst_mac: bytes) -> bytes | None:
    """``frame`` as it leaves a router: new MACs, TTL - 1, checksum fixed.

    None if the TTL has run out.  The header checksum is updated
    incrementally (RFC 1624), as the kernel's ip_decrease_ttl does.
    """
    ttl = frame[22]
    if ttl <= 1:
        return None
    check = int.from_bytes(frame[24:26], "big") + 0x0100
    check = (check + (check >= 0xFFFF)) & 0xFFFF
    return dst_mac + src_mac + frame[12:22] + bytes((ttl - 1,)) + frame[23:24] + check.to_bytes(2, "big") + frame[26:]


def priority(frame: bytes) -> int:
    """The traffic class of an IPv4 frame: DSCP >> 3, as on the hosts' tc."""
    return frame[15] >> 5


def arp_reply(frame: bytes, port_mac: bytes) -> bytes | None:
    """A proxy-ARP reply to a request for a fabric address, else None."""
    if len(frame) < 42 or frame[20:22] != b"\x00\x01":
        return None
    target_ip = frame[38:42]
    if ipaddress.IPv4Address(target_ip) not in FABRIC_NET:
        return None
    sender_mac, sender_ip = frame[22:28], frame[28:32]
    return (
        sender_mac + port_mac + ETH_ARP
        + b"\x00\x01\x08\x00\x06\x04\x00\x02"
        + port_mac + target_ip + sender_mac + sender_ip
    ).ljust(60, b"\0")


def is_ect(frame: bytes) -> bool:
    """Whether an IPv4 frame is ECN-capable (ECT(0) or ECT(1))."""
    return (frame[15] & 3) in (1, 2)


def mark_ce(frame: bytes) -> bytes:
    """An ECT IPv4 frame with its ECN bits set to CE and the checksum fixed.

    RFC 1624: HC' = ~(~HC + ~m + m') for the changed 16-bit word m.
    """
    old = frame[14] << 8 | frame[15]
    new = old | 3
    total = (~int.from_bytes(frame[24:26], "big") & 0xFFFF) + (~old & 0xFFFF) + new
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return frame[:15] + bytes((new & 0xFF,)) + frame[16:24] + (~total & 0xFFFF).to_bytes(2, "big") + frame[26:]
