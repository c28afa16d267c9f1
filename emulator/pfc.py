"""802.1Qbb priority flow control: frames and the receiver's pause state.

Sans-I/O, shared by the switch agent (a paused egress port) and the host
agent (closing the host NIC's pause gates).  A PFC frame names, per
priority, whether its quanta field is valid (the class-enable vector) and
for how long to pause: quanta x 512 bit times at the receiving port's rate;
0 quanta (XON) resumes at once.  A new frame for a priority replaces its
running timer, as the standard says.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

PFC_DST = bytes.fromhex("0180c2000001")
ETH_MAC_CONTROL = b"\x88\x08"
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


@dataclass
class PauseState:
    """Which priorities a received PFC holds on one port, and until when.

    ``paused_ns`` accumulates, per priority, how long it was paused (for
    telemetry); intervals still running are counted up to ``now`` by
    :meth:`paused_time`.
    """

    rate_bps: int
    until: list[int | None] = field(default_factory=lambda: [None] * PRIORITIES)
    since: list[int] = field(default_factory=lambda: [0] * PRIORITIES)
    paused_ns: list[int] = field(default_factory=lambda: [0] * PRIORITIES)
    frames: int = 0

    def on_pfc(self, now: int, quanta: dict[int, int]) -> tuple[list[int], list[int]]:
        """Apply a received frame; returns (newly paused, resumed) priorities."""
        self.frames += 1
        paused, resumed = [], []
        for priority, value in quanta.items():
            was = self.until[priority] is not None
            if value:
                self.until[priority] = now + pause_ns(value, self.rate_bps)
                if not was:
                    self.since[priority] = now
                    paused.append(priority)
            elif was:
                self._resume(priority, now)
                resumed.append(priority)
        return paused, resumed

    def is_paused(self, priority: int) -> bool:
        return self.until[priority] is not None

    def next_expiry(self) -> int | None:
        pending = [t for t in self.until if t is not None]
        return min(pending) if pending else None

    def expire(self, now: int) -> list[int]:
        """Resume every priority whose pause has run out by ``now``."""
        resumed = []
        for priority, until in enumerate(self.until):
            if until is not None and until <= now:
                self._resume(priority, until)
                resumed.append(priority)
        return resumed

    def paused_time(self, priority: int, now: int) -> int:
        running = now - self.since[priority] if self.until[priority] is not None else 0
        return self.paused_ns[priority] + running

    def _resume(self, priority: int, at: int) -> None:
        self.paused_ns[priority] += at - self.since[priority]
        self.until[priority] = None
