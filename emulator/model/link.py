"""A switch port's side of a link: delay, injected loss and the virtual wire (sans-I/O).

The kernel links the namespaces with veth pairs, which have no delay and
lose nothing, so the switch agent models both on its ports (see
:mod:`emulator.agents.switch`).  A frame arriving on a port whose link has
delay d is processed d later: that covers both directions of
switch-to-switch links and the host-to-switch direction.  For the
switch-to-host direction nobody downstream delays, so a host-facing port
with delay also runs the wire itself: a frame leaves the port's queue when
a virtual wire of the port's rate is free, and reaches the kernel d after
it started on that wire.  Injected loss takes frames on the switch's side
of a link: on egress, and on ingress from hosts.  Which frames it takes is
a function of the seed and of each frame's number in its direction, so a
run repeats its losses.

The agent keeps the sockets, the timer and the send; this model says what
leaves when, given ``now``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from typing import Protocol

from emulator.wire.pfc import PRIORITIES


class EgressQueue(Protocol):
    """The port queues the virtual wire takes frames from (:class:`emulator.model.mmu.Mmu`)."""

    def head(self, egress: int) -> tuple[int, bytes] | None: ...

    def pop(self, egress: int, priority: int) -> None: ...


class Link:
    """Delay lines, loss draws and the virtual wire of one switch port.

    ``loss`` is the probability of losing each frame; ``drop`` lists frame
    numbers (from 1, per direction) that are always lost, for tests that need
    a loss at a known place.  ``seed`` makes the draws repeatable.
    """

    def __init__(self, rate_bps: int, delay_ns: int, host_facing: bool, loss: float, drop: Iterable[int],
                 seed: int) -> None:
        self.rate_bps = rate_bps
        self.delay_ns = delay_ns
        self.host_facing = host_facing
        self.paced = bool(delay_ns) and host_facing  # egress through the virtual wire and the delay line
        self.loss = loss
        self.drop_seq = set(drop)
        self.lossy = loss > 0 or bool(self.drop_seq)  # without loss no frame needs a draw (the common case)
        self.random = random.Random(seed)
        self.arrivals: deque[tuple[int, bytes]] = deque()  # (due, frame): received, not yet processed
        self.departures: deque[tuple[int, bytes]] = deque()  # (due, frame): on the wire, not yet at the kernel
        self.wire_free_at = 0
        self.cleared: bytes | None = None  # head frame that already passed the loss draw
        self.rx_seq = 0  # IPv4 frames received from a host
        self.tx_seq = 0  # frames sent onto the link
        self.injected_drops = [0] * PRIORITIES

    def _lost(self, seq: int) -> bool:
        """Whether injected loss takes the ``seq``-th frame in one direction."""
        return seq in self.drop_seq or (self.loss > 0 and self.random.random() < self.loss)

    # --- ingress ---------------------------------------------------------------------

    def arrive(self, now: int, frame: bytes) -> None:
        """A frame came off the wire at ``now``; it is processed once the link's delay has passed."""
        self.arrivals.append((now + self.delay_ns, frame))

    def arrived(self, now: int) -> tuple[int, bytes] | None:
        """The next frame whose delay has passed by ``now``, with the time it arrives; None if none has."""
        arrivals = self.arrivals
        if arrivals and arrivals[0][0] <= now:
            return arrivals.popleft()
        return None

    def lost_from_host(self, priority: int) -> bool:
        """Whether injected loss takes the next IPv4 frame from the host (counted if so)."""
        self.rx_seq += 1
        if self.lossy and self._lost(self.rx_seq):
            self.injected_drops[priority] += 1
            return True
        return False

    # --- egress ----------------------------------------------------------------------

    def lost_at_head(self, frame: bytes, priority: int) -> bool:
        """Whether injected loss takes ``frame``, the head of the port's queue (counted if so).

        A head the kernel could not take yet is asked about again; the draw
        happens once per frame.  The cleared frame stays referenced until the
        next one clears, so no later frame can be that same object.
        """
        if frame is self.cleared:
            return False
        self.tx_seq += 1
        if self.lossy and self._lost(self.tx_seq):
            self.injected_drops[priority] += 1
            return True
        self.cleared = frame
        return False

    def transmit(self, now: int, queue: EgressQueue, index: int) -> bytes | None:
        """Move frames from port ``index``'s queue onto the virtual wire while it is free at ``now``.

        Each frame holds the wire for its length at the port's rate, and is
        due at the kernel the link's delay after it started.  Returns the
        frame that reaches the kernel by ``now``, or None; it stays first
        until :meth:`left`.
        """
        while self.wire_free_at <= now:
            head = queue.head(index)
            if head is None:
                break
            prio, frame = head
            queue.pop(index, prio)
            start = max(now, self.wire_free_at)
            self.wire_free_at = start + len(frame) * 8_000_000_000 // self.rate_bps
            self.tx_seq += 1
            if self.lossy and self._lost(self.tx_seq):
                self.injected_drops[prio] += 1
                continue
            self.departures.append((start + self.delay_ns, frame))
        departures = self.departures
        return departures[0][1] if departures and departures[0][0] <= now else None

    def left(self, now: int) -> bytes | None:
        """The frame :meth:`transmit` (or this) gave is gone (sent, or refused for good); the next one due, or None."""
        departures = self.departures
        departures.popleft()
        return departures[0][1] if departures and departures[0][0] <= now else None

    def next_deadline(self, backlog: bool) -> int | None:
        """When this link next has something to do; ``backlog``: the port's queue holds frames."""
        deadline = self.arrivals[0][0] if self.arrivals else None
        if self.paced:
            if self.departures and (deadline is None or self.departures[0][0] < deadline):
                deadline = self.departures[0][0]
            if backlog and (deadline is None or self.wire_free_at < deadline):
                deadline = self.wire_free_at
        return deadline
