"""IB captures that Wireshark reads as native InfiniBand (``fabric-emu pcap``).

The fabric's captures are Ethernet (tcpdump on the veths), where our IB
packets sit behind EtherType 0x88B6 and a delimiter byte
(:mod:`emulator._core.ib`).  tshark 4.0 cannot open LINKTYPE_INFINIBAND
(247) files, but it dissects LINKTYPE_ERF (197) pcaps whose records are
ERF type 21 (InfiniBand: LRH through VCRC) and type 25 (InfiniBand link:
a flow-control packet, zero-padded to 64 bytes).  The padding is for
tshark 4.0: filling its summary columns, it reads a link packet as if it
began with an LRH (so Source/Destination show made-up LIDs for link
packets), and on 6 bytes that read runs past the end: Malformed.  This
module rewrites a capture into such a file, keeping the time stamps to
the nanosecond.

An ERF record is a 16-byte header and the packet: the time as 32.32 fixed
point seconds, little-endian (the only little-endian field), the type, the
flags (0x04 "varying length": each record is as long as its packet rather
than the capture card's fixed slot), rlen (header and packet), lctr (loss
counter, 0) and wlen (the packet's length), big-endian.

Captures may come from anywhere: they are read with the strict reader of
:mod:`emulator.study.pcapfile` and written with :class:`emulator.safefiles.Outputs`
(temporary files renamed into place once every capture converted, never
through a link), so a bad capture gives one line naming it and the offset
and leaves no output behind.  ERF and pcap hold seconds in 32 bits: a frame
time stamped after 2106 is refused.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from emulator.errors import FabricError, printable
from emulator._core.ib import FC_LEN, LRH_AT, SLP, data_end, is_ib
from emulator._core.mac import ETH_LEN
from emulator.study.pcapfile import read_frames
from emulator.safefiles import Outputs, list_inside, open_inside

LINKTYPE_ETHERNET = 1
LINKTYPE_ERF = 197
ERF_INFINIBAND = 21
ERF_INFINIBAND_LINK = 25
ERF_VARYING_LENGTH = 0x04
ERF_HEADER_LEN = 16
LINK_RECORD_LEN = 64  # a link packet's record payload: tshark wants more than its 6 bytes
NS = 1_000_000_000
CAPTURE_SUFFIX, OUTPUT_SUFFIX = ".pcapng", ".ib.pcap"

_PCAP_NS_MAGIC = 0xA1B23C4D
_PCAP_HEADER = struct.Struct("<IHHiIII")  # magic, version 2.4, zone, sigfigs, snaplen, linktype
_PCAP_RECORD = struct.Struct("<IIII")  # seconds, nanoseconds, captured and wire length
_ERF_FIELDS = struct.Struct("!BBHHH")  # type, flags, rlen, lctr, wlen (after the time stamp)
_SNAPLEN = 65535
MAX_SECONDS = 1 << 32  # ERF's 32.32 time stamp and pcap's seconds field


def erf_timestamp(timestamp_ns: int) -> int:
    """Nanoseconds as ERF's 32.32 fixed point seconds.

    Rounded to the nearest 2**-32 s, which Wireshark's rounding conversion
    turns back into the same nanosecond (a unit is 0.23 ns).
    """
    seconds, ns = divmod(timestamp_ns, NS)
    return seconds << 32 | ((ns << 32) + NS // 2) // NS


def erf_record(timestamp_ns: int, erf_type: int, payload: bytes) -> bytes:
    """One ERF record: header and payload."""
    fields = _ERF_FIELDS.pack(erf_type, ERF_VARYING_LENGTH, ERF_HEADER_LEN + len(payload), 0, len(payload))
    return erf_timestamp(timestamp_ns).to_bytes(8, "little") + fields + payload


def write_erf(f: BinaryIO, records: Iterable[tuple[int, int, bytes]]) -> int:
    """A nanosecond pcap (LINKTYPE_ERF) of records (time in ns, ERF type, payload) into ``f``; returns how many."""
    count = 0
    f.write(_PCAP_HEADER.pack(_PCAP_NS_MAGIC, 2, 4, 0, 0, _SNAPLEN, LINKTYPE_ERF))
    for timestamp_ns, erf_type, payload in records:
        record = erf_record(timestamp_ns, erf_type, payload)
        seconds, ns = divmod(timestamp_ns, NS)
        f.write(_PCAP_RECORD.pack(seconds, ns, len(record), len(record)) + record)
        count += 1
    return count


def ib_record(frame: bytes) -> tuple[int, bytes] | None:
    """(ERF type, payload) of an Ethernet frame of our IB encapsulation, or None for anything else.

    A data packet's payload is LRH..VCRC as LRH.PktLen gives it (the
    Ethernet padding dropped); a link packet's is its 6 bytes padded to 64.
    """
    end = data_end(frame)
    if end is not None:
        return ERF_INFINIBAND, frame[LRH_AT:end]
    if is_ib(frame) and frame[ETH_LEN] == SLP and len(frame) >= LRH_AT + FC_LEN:
        return ERF_INFINIBAND_LINK, frame[LRH_AT:LRH_AT + FC_LEN] + bytes(LINK_RECORD_LEN - FC_LEN)
    return None


def convert(pcap_path_in: str, erf_path_out: str) -> tuple[int, int]:
    """Write the IB packets of a pcap/pcapng capture of Ethernet frames to an ERF pcap.

    Other frames are skipped; returns (data packets, link packets) written.
    """
    counts: tuple[int, int] = (0, 0)

    def fill(out: BinaryIO) -> None:
        nonlocal counts
        counts = _convert(os.path.dirname(pcap_path_in) or ".", os.path.basename(pcap_path_in), out)

    with Outputs(os.path.dirname(erf_path_out) or ".") as outputs:
        outputs.write(os.path.basename(erf_path_out), fill)
    return counts


def convert_directory(directory: str) -> list[str]:
    """Every ``*.pcapng`` of a capture directory to ``<name>.ib.pcap`` beside it; the paths written.

    All or nothing: the outputs are renamed into place only when every
    capture converted.
    """
    captures = [name for name in list_inside(directory) if name.endswith(CAPTURE_SUFFIX) and not name.startswith(".")]
    with Outputs(directory) as outputs:
        return [outputs.write(name[:-len(CAPTURE_SUFFIX)] + OUTPUT_SUFFIX,
                              lambda out, name=name: _convert(directory, name, out))
                for name in captures]


def _convert(directory: str, name: str, out: BinaryIO) -> tuple[int, int]:
    """The IB packets of the capture ``directory/name`` into ``out``: (data packets, link packets)."""
    shown = printable(os.path.join(directory, name))
    capture = open_inside(directory, name)
    if capture is None:
        raise FabricError(f"no such capture: {shown}")
    counts = {ERF_INFINIBAND: 0, ERF_INFINIBAND_LINK: 0}

    def records() -> Iterator[tuple[int, int, bytes]]:
        for frame in read_frames(capture, shown):
            if frame.linktype != LINKTYPE_ETHERNET:
                continue
            record = ib_record(frame.data)
            if record is None:
                continue
            if not 0 <= frame.time_ns < MAX_SECONDS * NS:
                raise FabricError(f"{shown} offset {frame.offset}: time stamp {frame.time_ns} ns is after 2106, "
                                  "beyond what ERF and pcap hold")
            counts[record[0]] += 1
            yield frame.time_ns, *record

    with capture:
        write_erf(out, records())
    return counts[ERF_INFINIBAND], counts[ERF_INFINIBAND_LINK]
