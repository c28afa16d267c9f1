"""A strict reader of pcap and pcapng files, for captures someone else may have written.

``fabric-emu pcap`` converts captures copied from anywhere; a file may be
empty, cut short, not a capture at all, or crafted.  This reader checks
every length before it reads (a block or record may claim at most
:data:`MAX_BLOCK_LEN` bytes and must fit in the file), never holds more
than one block in memory, and stops at the first problem with a
:class:`FabricError` naming the file and the byte offset of the block or
record at fault.  A clean end of file is only at a block boundary.

pcapng (what ``fabric-emu up --capture`` writes): every section header
block sets the byte order and forgets the interfaces; interface
description blocks give the link type and the time resolution
(``if_tsresol``, 10^-6 s when absent); enhanced packet blocks give the
frames.  Simple packet blocks (no time stamp), obsolete packet blocks and
every other block type are skipped.  Classic pcap (either byte order,
microsecond or nanosecond magic) is read too.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

from emulator.errors import FabricError

NS = 1_000_000_000
MAX_BLOCK_LEN = 16 << 20  # a pcapng block or a pcap record; frames are at most 256 KiB (tcpdump's snaplen)

PCAPNG_SECTION = b"\x0a\x0d\x0d\x0a"
_BYTE_ORDER = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
_SECTION, _INTERFACE, _ENHANCED_PACKET = 0x0A0D0D0A, 1, 6
_SECTION_MIN_LEN = 28  # type, length, byte-order magic, version, section length, trailing length
_OPT_END, _OPT_TSRESOL = 0, 9
_DEFAULT_UNITS_PER_S = 1_000_000
# classic pcap magics: (byte order, nanoseconds per unit of the fraction field)
_PCAP_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1000), b"\xa1\xb2\xc3\xd4": (">", 1000),
               b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1)}


class Frame(NamedTuple):
    """One captured frame: where its block starts in the file, when it was captured, its link type and bytes."""

    offset: int
    time_ns: int
    linktype: int
    data: bytes


class _Reader:
    """Exact reads from a file, keeping the offset for messages."""

    def __init__(self, f: BinaryIO, name: str) -> None:
        self.f, self.name, self.offset = f, name, 0

    def take(self, n: int, what: str, at: int | None = None) -> bytes:
        data = self.f.read(n)
        if len(data) < n:
            self.fail(f"cut short in {what}", self.offset if at is None else at)
        self.offset += n
        return data

    def at_end(self) -> bool:
        """True at a clean end of file (no byte left), consuming nothing otherwise."""
        data = self.f.read(1)
        if data:
            self.f.seek(-1, 1)
        return not data

    def fail(self, problem: str, at: int) -> None:
        raise FabricError(f"{self.name} offset {at}: {problem}")


def read_frames(f: BinaryIO, name: str) -> Iterator[Frame]:
    """Every frame of the pcap or pcapng file ``f`` (``name`` is for messages)."""
    magic = f.read(4)
    if not magic:
        raise FabricError(f"{name}: empty file, not a capture")
    f.seek(0)
    if magic == PCAPNG_SECTION:
        yield from _pcapng(_Reader(f, name))
    elif magic in _PCAP_MAGIC:
        yield from _pcap(_Reader(f, name), *_PCAP_MAGIC[magic])
    else:
        raise FabricError(f"{name}: not a pcap or pcapng file (it begins with {magic.hex()})")


def _pcapng(r: _Reader) -> Iterator[Frame]:
    order = "<"
    interfaces: list[tuple[int, int]] = []  # (link type, time units per second) of the section's interfaces
    while not r.at_end():
        start = r.offset
        head = r.take(8, "a block header")
        if head[:4] == PCAPNG_SECTION:
            magic = r.take(4, "a section header's byte-order magic")
            if magic not in _BYTE_ORDER:
                r.fail(f"section header with a bad byte-order magic {magic.hex()}", start)
            order, interfaces = _BYTE_ORDER[magic], []
        kind, length = struct.unpack(order + "II", head)
        shortest = _SECTION_MIN_LEN if kind == _SECTION else 12
        if length % 4 or not shortest <= length <= MAX_BLOCK_LEN:
            r.fail(f"block of type {kind:#x} with a bad length {length} "
                   f"(a multiple of 4, {shortest} to {MAX_BLOCK_LEN})", start)
        body = r.take(length - (r.offset - start) - 4, f"a block of {length} bytes", start)
        (trailer,) = struct.unpack(order + "I", r.take(4, "a block's trailing length", start))
        if trailer != length:
            r.fail(f"block of type {kind:#x}: its trailing length {trailer} is not its length {length}", start)
        if kind == _SECTION:
            _section(r, order, body, start)
        elif kind == _INTERFACE:
            interfaces.append(_interface(r, order, body, start))
        elif kind == _ENHANCED_PACKET:
            yield _enhanced_packet(r, order, body, start, interfaces)


def _section(r: _Reader, order: str, body: bytes, start: int) -> None:
    (major,) = struct.unpack_from(order + "H", body)
    if major != 1:
        r.fail(f"section header of pcapng version {major}, not 1", start)


def _interface(r: _Reader, order: str, body: bytes, start: int) -> tuple[int, int]:
    """(link type, time units per second) of an interface description block."""
    if len(body) < 8:
        r.fail("interface description block shorter than 20 bytes", start)
    linktype = struct.unpack_from(order + "H", body)[0]
    units = _DEFAULT_UNITS_PER_S
    at = 8
    while at + 4 <= len(body):
        code, size = struct.unpack_from(order + "HH", body, at)
        value = body[at + 4:at + 4 + size]
        if len(value) < size:
            r.fail(f"interface description block: option {code} runs past the block", start)
        if code == _OPT_END:
            break
        if code == _OPT_TSRESOL:
            if size != 1:
                r.fail(f"interface description block: if_tsresol of {size} bytes, not 1", start)
            units = 1 << (value[0] & 0x7F) if value[0] & 0x80 else 10 ** value[0]
        at += 4 + size + (-size & 3)
    return linktype, units


def _enhanced_packet(r: _Reader, order: str, body: bytes, start: int, interfaces: list[tuple[int, int]]) -> Frame:
    if len(body) < 20:
        r.fail("enhanced packet block shorter than 32 bytes", start)
    interface, high, low, captured, _ = struct.unpack_from(order + "IIIII", body)
    if interface >= len(interfaces):
        r.fail(f"packet of interface {interface}, but the section describes {len(interfaces)}", start)
    if captured > len(body) - 20:
        r.fail(f"packet of {captured} bytes in a block with room for {len(body) - 20}", start)
    linktype, units = interfaces[interface]
    return Frame(start, (high << 32 | low) * NS // units, linktype, body[20:20 + captured])


def _pcap(r: _Reader, order: str, ns_per_fraction: int) -> Iterator[Frame]:
    header = r.take(24, "the file header")
    linktype = struct.unpack_from(order + "I", header, 20)[0] & 0x0FFFFFFF  # the top bits tell of an FCS
    while not r.at_end():
        start = r.offset
        seconds, fraction, captured, _ = struct.unpack(order + "IIII", r.take(16, "a record header"))
        if fraction * ns_per_fraction >= NS:
            r.fail(f"record whose sub-second part {fraction} is a second or more", start)
        if captured > MAX_BLOCK_LEN:
            r.fail(f"record of {captured} bytes (the limit is {MAX_BLOCK_LEN})", start)
        data = r.take(captured, f"a record of {captured} bytes", start)
        yield Frame(start, seconds * NS + fraction * ns_per_fraction, linktype, data)
