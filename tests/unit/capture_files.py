"""pcapng and pcap files built by hand from the format's definition, for the tests of the reader and of ERF.

Independent of emulator.study.pcapfile: these are the oracle.  pcapng blocks are
type, total length, body padded to 4 bytes, total length again.
"""

from __future__ import annotations

import struct

NS = 1_000_000_000
SECTION, INTERFACE, SIMPLE_PACKET, ENHANCED_PACKET = 0x0A0D0D0A, 1, 3, 6


def block(kind: int, body: bytes, order: str = "<") -> bytes:
    body += bytes(-len(body) & 3)
    return struct.pack(order + "II", kind, len(body) + 12) + body + struct.pack(order + "I", len(body) + 12)


def section(order: str = "<") -> bytes:
    return block(SECTION, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1), order)


def interface(order: str = "<", linktype: int = 1, tsresol: int | None = 9) -> bytes:
    """An interface description block; ``tsresol`` is if_tsresol's byte (None: no option, microseconds)."""
    options = b"" if tsresol is None else struct.pack(order + "HHB3x", 9, 1, tsresol) + bytes(4)
    return block(INTERFACE, struct.pack(order + "HHI", linktype, 0, 262144) + options, order)


def units_per_second(tsresol: int | None) -> int:
    if tsresol is None:
        return 1_000_000
    return 1 << (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol


def packet(units: int, frame: bytes, order: str = "<", interface_id: int = 0) -> bytes:
    """An enhanced packet block; ``units`` is the time stamp in the interface's resolution."""
    return block(ENHANCED_PACKET, struct.pack(order + "IIIII", interface_id, units >> 32, units & 0xFFFFFFFF,
                                              len(frame), len(frame)) + frame, order)


def pcapng(frames: list[tuple[int, bytes]], order: str = "<", tsresol: int | None = 9) -> bytes:
    """A pcapng file of Ethernet frames (time in ns, bytes) on one interface, as tcpdump writes them by default."""
    units = units_per_second(tsresol)
    return section(order) + interface(order, tsresol=tsresol) + b"".join(
        packet(ns * units // NS, frame, order) for ns, frame in frames)


def classic_pcap(frames: list[tuple[int, bytes]], order: str = "<", nanoseconds: bool = False) -> bytes:
    """A pcap file of Ethernet frames, microsecond (or nanosecond) time stamps."""
    magic, per_second = (0xA1B23C4D, NS) if nanoseconds else (0xA1B2C3D4, 1_000_000)
    out = struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, 1)
    for ns, frame in frames:
        out += struct.pack(order + "IIII", ns // NS, ns % NS * per_second // NS, len(frame), len(frame)) + frame
    return out
