"""The receiver's pause state of 802.1Qbb PFC, sans-I/O.

Shared by the switch agent (a paused egress port) and the host agent
(closing the host NIC's pause gates).  A new frame for a priority replaces
its running timer, as the standard says; 0 quanta (XON) resumes at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emulator.wire.pfc import PRIORITIES, pause_ns


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

    def release(self, now: int, priority: int) -> None:
        """End ``priority``'s pause at ``now`` without a frame (a PFC watchdog takes PFC away from it)."""
        if self.until[priority] is not None:
            self._resume(priority, now)

    def paused_time(self, priority: int, now: int) -> int:
        running = now - self.since[priority] if self.until[priority] is not None else 0
        return self.paused_ns[priority] + running

    def _resume(self, priority: int, at: int) -> None:
        self.paused_ns[priority] += at - self.since[priority]
        self.until[priority] = None
