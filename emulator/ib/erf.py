"""IB captures that Wireshark reads as native InfiniBand (``fabric-emu pcap``).

The fabric's captures are Ethernet (tcpdump on the veths), where our IB
packets sit behind EtherType 0x88B6 and a delimiter byte.  tshark 4.0
cannot open LINKTYPE_INFINIBAND (247) files, but it dissects LINKTYPE_ERF
(197) files whose records are ERF type 21 (InfiniBand: LRH through VCRC)
and type 25 (InfiniBand link: a flow-control packet, zero-padded to 64
bytes, without which tshark calls it malformed).  This module rewrites a
capture into such a file with the original time stamps.
"""

from __future__ import annotations

import glob
import os
import struct
from typing import Iterable

from emulator.errors import FabricError
from emulator.ib.wire import FC_LEN, LRH_AT, SDP, SLP, VCRC_LEN, is_ib

LINKTYPE_ERF = 197
ERF_INFINIBAND = 21
ERF_INFINIBAND_LINK = 25
ERF_VARYING_LENGTH = 0x04
LINK_RECORD = 64
_PCAP_NS_MAGIC = 0xA1B23C4D


def erf_record(timestamp_ns: int, erf_type: int, payload: bytes) -> bytes:
    """One ERF record: the 16-byte header (time as 32.32 fixed point, little-endian) and the payload."""
    seconds, fraction_ns = divmod(timestamp_ns, 1_000_000_000)
    stamp = seconds << 32 | (fraction_ns << 32) // 1_000_000_000
    header = struct.pack("<Q", stamp) + struct.pack("!BBHHH", erf_type, ERF_VARYING_LENGTH, 16 + len(payload), 0,
                                                    len(payload))
    return header + payload


def write_erf(path: str, records: Iterable[tuple[int, int, bytes]]) -> int:
    """A nanosecond pcap of ERF records (time ns, ERF type, payload); returns how many."""
    count = 0
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", _PCAP_NS_MAGIC, 2, 4, 0, 0, 65535, LINKTYPE_ERF))
        for timestamp_ns, erf_type, payload in records:
            record = erf_record(timestamp_ns, erf_type, payload)
            seconds, nanoseconds = divmod(timestamp_ns, 1_000_000_000)
            f.write(struct.pack("<IIII", seconds, nanoseconds, len(record), len(record)) + record)
            count += 1
    return count


def ib_records(frames: Iterable[tuple[int, bytes]]) -> Iterable[tuple[int, int, bytes]]:
    """The ERF records of the IB frames among (time ns, Ethernet frame); others are skipped."""
    for timestamp_ns, frame in frames:
        if not is_ib(frame):
            continue
        if frame[14] == SDP and len(frame) >= LRH_AT + 8:
            end = LRH_AT + (int.from_bytes(frame[LRH_AT + 4:LRH_AT + 6], "big") & 0x7FF) * 4 + VCRC_LEN
            if end <= len(frame):
                yield timestamp_ns, ERF_INFINIBAND, frame[LRH_AT:end]
        elif frame[14] == SLP and len(frame) >= LRH_AT + FC_LEN:
            link = frame[LRH_AT:LRH_AT + FC_LEN]
            yield timestamp_ns, ERF_INFINIBAND_LINK, link + bytes(LINK_RECORD - FC_LEN)


def convert(capture: str, out: str) -> tuple[int, int]:
    """Write the IB packets of a pcap/pcapng capture to an ERF pcap; (data, link) packets written."""
    from scapy.utils import PcapReader  # reads pcapng too; only here: scapy is slow to import

    counts = {ERF_INFINIBAND: 0, ERF_INFINIBAND_LINK: 0}

    def frames() -> Iterable[tuple[int, bytes]]:
        with PcapReader(capture) as reader:
            for packet in reader:
                yield int(packet.time * 1_000_000_000), bytes(packet)

    def counted() -> Iterable[tuple[int, int, bytes]]:
        for record in ib_records(frames()):
            counts[record[1]] += 1
            yield record

    write_erf(out, counted())
    return counts[ERF_INFINIBAND], counts[ERF_INFINIBAND_LINK]


def convert_directory(directory: str) -> list[str]:
    """Every ``*.pcapng`` of a capture directory to ``<name>.ib.pcap`` beside it."""
    if not os.path.isdir(directory):
        raise FabricError(f"no such directory: {directory}")
    written = []
    for capture in sorted(glob.glob(os.path.join(directory, "*.pcapng"))):
        out = capture[:-len(".pcapng")] + ".ib.pcap"
        convert(capture, out)
        written.append(out)
    return written
