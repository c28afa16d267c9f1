"""The switch's queueing core: per-port, per-priority egress queues.

Sans-I/O: it never touches a socket or a clock.  The agent hands it frames
that could not go straight to the wire, asks for the head frame when a
port's kernel queue has room and pops it once the kernel took it.
Accounting is in bytes per egress port and priority; a frame that does
not fit in its port's buffer is tail-dropped and counted.  Scheduling is strict priority, 7 highest.  The lossless-fabric
work replaces the per-port buffer with a shared-buffer MMU behind the same
calls.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

PRIORITIES = 8


@dataclass
class QueueCounters:
    """What happened on one (egress port, priority) queue."""

    enqueued: int = 0
    dequeued: int = 0
    tx_bytes: int = 0
    drops: int = 0
    peak_bytes: int = 0


@dataclass
class _Port:
    queues: list[deque] = field(default_factory=lambda: [deque() for _ in range(PRIORITIES)])
    queued_bytes: list[int] = field(default_factory=lambda: [0] * PRIORITIES)
    counters: list[QueueCounters] = field(default_factory=lambda: [QueueCounters() for _ in range(PRIORITIES)])
    total_bytes: int = 0
    frames: int = 0


class EgressQueues:
    """Egress queues of all ports of one switch, with a byte buffer per port."""

    def __init__(self, ports: list[str], buffer_bytes: int) -> None:
        if buffer_bytes <= 0:
            raise ValueError("buffer must be positive")
        self.buffer_bytes = buffer_bytes
        self._ports = {name: _Port() for name in ports}

    def enqueue(self, port: str, priority: int, frame: bytes) -> bool:
        """Queue ``frame``; False (and a counted drop) if the buffer is full."""
        state = self._ports[port]
        counters = state.counters[priority]
        size = len(frame)
        if state.total_bytes + size > self.buffer_bytes:
            counters.drops += 1
            return False
        state.queues[priority].append(frame)
        state.queued_bytes[priority] += size
        state.total_bytes += size
        state.frames += 1
        counters.enqueued += 1
        if state.queued_bytes[priority] > counters.peak_bytes:
            counters.peak_bytes = state.queued_bytes[priority]
        return True

    def has_backlog(self, port: str) -> bool:
        return self._ports[port].frames > 0

    def head(self, port: str) -> tuple[int, bytes] | None:
        """The (priority, frame) that goes next on ``port`` by strict priority.

        The frame stays queued until :meth:`pop`, so a frame the wire refuses
        (kernel queue full) keeps its place.
        """
        state = self._ports[port]
        if not state.frames:
            return None
        for priority in range(PRIORITIES - 1, -1, -1):
            queue = state.queues[priority]
            if queue:
                return priority, queue[0]
        raise AssertionError("frame count and queues disagree")

    def pop(self, port: str, priority: int) -> None:
        """Remove the head frame of (``port``, ``priority``): it was sent."""
        state = self._ports[port]
        frame = state.queues[priority].popleft()
        size = len(frame)
        state.queued_bytes[priority] -= size
        state.total_bytes -= size
        state.frames -= 1
        counters = state.counters[priority]
        counters.dequeued += 1
        counters.tx_bytes += size

    def backlog_bytes(self, port: str, priority: int | None = None) -> int:
        state = self._ports[port]
        return state.total_bytes if priority is None else state.queued_bytes[priority]

    def counters(self, port: str, priority: int) -> QueueCounters:
        return self._ports[port].counters[priority]
