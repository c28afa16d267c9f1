"""Cables and transmit queues in simulated time.

:class:`Wire` is one direction of a cable: a frame takes its bytes x 8 /
rate to serialize (rounded up to the ns, as the models' pause times are),
one after another, and arrives ``delay_ns`` after its last bit left.
:class:`PortQueue` is what sends on a wire: per-priority FIFOs, strict
priority from 7 down, and the receiver's PFC pause state
(:class:`~emulator.model.pause.PauseState`, the model the emulator's host
agents drive) holding the priorities a PFC frame paused.  A switch's egress
is the MMU's business; hosts and tests use this queue.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from emulator.model.pause import PauseState
from emulator.sim.engine import Handle, Simulator
from emulator.wire.pfc import PRIORITIES


def serialization_ns(size: int, rate_bps: int) -> int:
    """How long ``size`` bytes take on a wire of ``rate_bps``, rounded up to the ns."""
    return -(-size * 8_000_000_000 // rate_bps)


class Wire:
    """One direction of a cable: ``deliver(frame)`` runs when a frame's last bit arrives."""

    def __init__(self, sim: Simulator, rate_bps: int, delay_ns: int, deliver: Callable[[bytes], None]) -> None:
        if rate_bps <= 0 or delay_ns < 0:
            raise ValueError(f"bad wire: rate {rate_bps} bit/s, delay {delay_ns} ns")
        self.sim, self.rate_bps, self.delay_ns, self.deliver = sim, rate_bps, delay_ns, deliver
        self.free_at = 0  # when the frame on the wire has left
        self.frames = 0
        self.bytes = 0

    def busy(self) -> bool:
        return self.free_at > self.sim.now

    def send(self, frame: bytes) -> int:
        """Put ``frame`` on the wire once it is free; when its last bit has left."""
        start = max(self.sim.now, self.free_at)
        self.free_at = start + serialization_ns(len(frame), self.rate_bps)
        self.frames += 1
        self.bytes += len(frame)
        self.sim.at(self.free_at + self.delay_ns, self.deliver, frame)
        return self.free_at


class PortQueue:
    """Per-priority FIFOs onto a wire, strict priority, PFC-paused priorities held back."""

    def __init__(self, sim: Simulator, wire: Wire) -> None:
        self.sim, self.wire = sim, wire
        self.queues: list[deque[bytes]] = [deque() for _ in range(PRIORITIES)]
        self.pause = PauseState(wire.rate_bps)
        self._wake: Handle | None = None  # the next look at the queues: a departure, a pause expiry, or now
        self._wake_at = 0
        self.departed: Callable[[], None] | None = None  # called after each frame leaves the queue

    def enqueue(self, frame: bytes, priority: int) -> None:
        self.queues[priority].append(frame)
        self._kick()

    def on_pfc(self, quanta: dict[int, int]) -> None:
        """A PFC frame from the peer: pause or resume its priorities (a frame being sent still finishes)."""
        self.pause.on_pfc(self.sim.now, quanta)
        self._kick()

    def queued(self, priority: int) -> int:
        return len(self.queues[priority])

    def _kick(self) -> None:
        """Look at the queues now (after the other events of this instant), unless that is already due."""
        if self._wake is not None and self.sim.pending(self._wake):
            if self._wake_at <= self.sim.now or self._wake_at == self.wire.free_at:  # due, or when the wire frees
                return
            self.sim.cancel(self._wake)  # a later look (a pause's expiry): something changed now
        self._at(max(self.sim.now, self.wire.free_at))  # a busy wire: nothing can go before it frees

    def _at(self, time: int) -> None:
        self._wake, self._wake_at = self.sim.at(time, self._send), time

    def _send(self) -> None:
        self._wake = None
        self.pause.expire(self.sim.now)
        if self.wire.busy():
            self._at(self.wire.free_at)
            return
        for priority in range(PRIORITIES - 1, -1, -1):
            if self.queues[priority] and not self.pause.is_paused(priority):
                free_at = self.wire.send(self.queues[priority].popleft())
                if self.departed is not None:
                    self.departed()  # may enqueue the next frame: its look is then due when the wire frees
                if self._wake is None and any(self.queues):
                    self._at(free_at)
                return
        expiry = self.pause.next_expiry()
        if expiry is not None and any(self.queues[p] for p in range(PRIORITIES) if self.pause.is_paused(p)):
            self._at(expiry)
