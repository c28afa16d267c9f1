"""802.1Qbb priority flow control frames (MAC Control, EtherType 0x8808).

A PFC frame names, per priority, whether its quanta field is valid (the
class-enable vector) and for how long to pause: quanta x 512 bit times at
the receiving port's rate; 0 quanta (XON) resumes at once.  What a
receiver does with them is :mod:`emulator.model.pause`.
"""

from __future__ import annotations

import struct

PFC_DST = bytes.fromhex("0180c2000001")
ETHERTYPE_MAC_CONTROL = 0x8808
ETH_MAC_CONTROL = ETHERTYPE_MAC_CONTROL.to_bytes(2, "big")  # as it sits in a frame
OPCODE_PFC = b"\x01\x01"
PRIORITIES = 8
MAX_QUANTA = 0xFFFF
MIN_FRAME = 60  # without FCS, as written to the wire by software


def encode_pfc(src_mac: bytes, quanta: dict[int, int]) -> bytes:
    """A PFC frame from ``src_mac`` enabling each priority in ``quanta``."""
    vector = 0
    times = [0] * PRIORITIES
    for priority, value in quanta.items():
        if not 0 <= priority < PRIORITIES or not 0 <= value <= MAX_QUANTA:
            raise ValueError(f"bad PFC entry: priority {priority}, quanta {value}")
        vector |= 1 << priority
        times[priority] = value
    body = OPCODE_PFC + struct.pack("!H8H", vector, *times)
    return (PFC_DST + src_mac + ETH_MAC_CONTROL + body).ljust(MIN_FRAME, b"\0")


def decode_pfc(frame: bytes) -> dict[int, int] | None:
    """{priority: quanta} of the enabled classes of a PFC frame, else None."""
    if len(frame) < 34 or frame[12:14] != ETH_MAC_CONTROL or frame[14:16] != OPCODE_PFC:
        return None
    vector, *times = struct.unpack_from("!H8H", frame, 16)
    return {p: times[p] for p in range(PRIORITIES) if vector >> p & 1}


def pause_ns(quanta: int, rate_bps: int) -> int:
    """How long ``quanta`` pause a port of ``rate_bps``: quanta x 512 bit times."""
    return -(-quanta * 512 * 1_000_000_000 // rate_bps)
