"""A NIC receive pipeline slower than its link, with PFC on its buffer, sans-I/O.

The slow-receiver fault (Guo et al., SIGCOMM 2016: a NIC whose receive
path falls behind, e.g. on cache misses, pauses its switch port): frames
enter a buffer of ``buffer_bytes`` and leave it at ``rate_bps`` (a fraction
of the link's), one after the other.  When the buffer holds ``xoff_bytes``
the NIC asks its switch to pause (XOFF); once it has drained to
``xon_bytes`` it lets it go (XON); a frame that does not fit is dropped and
counted (the switch ignored the pause, or the headroom was too small).
The caller reads no clock into it: ``now`` comes in, frames come out.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class RxPipeline:
    """The frames a slow NIC holds, when each is taken, and the pause it asks for."""

    def __init__(self, rate_bps: int, buffer_bytes: int, xoff_bytes: int, xon_bytes: int) -> None:
        if not 0 < rate_bps or not 0 <= xon_bytes < xoff_bytes <= buffer_bytes:
            raise ValueError(f"bad receive pipeline: rate {rate_bps}, buffer {buffer_bytes}, XOFF {xoff_bytes}, "
                             f"XON {xon_bytes} (need XON < XOFF <= buffer)")
        self.rate_bps, self.buffer_bytes = rate_bps, buffer_bytes
        self.xoff_bytes, self.xon_bytes = xoff_bytes, xon_bytes
        self.frames: deque[Any] = deque()
        self.bytes = 0
        self.head_done: int | None = None  # when the head frame has been taken
        self.paused = False  # XOFF asserted towards the switch
        self.dropped = 0
        self.peak = 0

    def arrive(self, now: int, frame: Any, size: int) -> bool | None:
        """A frame of ``size`` bytes came in; the pause to assert (True), release (False) or None for no change.

        A frame that does not fit is dropped (counted)."""
        if self.bytes + size > self.buffer_bytes:
            self.dropped += 1
            return None
        self.frames.append((frame, size))
        self.bytes += size
        self.peak = max(self.peak, self.bytes)
        if self.head_done is None:
            self.head_done = now + size * 8_000_000_000 // self.rate_bps
        if not self.paused and self.bytes >= self.xoff_bytes:
            self.paused = True
            return True
        return None

    def set_rate(self, now: int, rate_bps: int) -> None:
        """Take frames at ``rate_bps`` from ``now`` on: the rest of the head frame and every frame behind it."""
        if not 0 < rate_bps:
            raise ValueError(f"bad receive pipeline rate {rate_bps}")
        if self.head_done is not None and self.head_done > now:
            self.head_done = now + (self.head_done - now) * self.rate_bps // rate_bps
        self.rate_bps = rate_bps

    def next_deadline(self) -> int | None:
        return self.head_done

    def take(self, now: int) -> tuple[list[Any], bool | None]:
        """The frames the pipeline has finished by ``now``, in order, and a pause change as :meth:`arrive`."""
        done = []
        while self.head_done is not None and self.head_done <= now:
            frame, size = self.frames.popleft()
            self.bytes -= size
            done.append(frame)
            if self.frames:
                self.head_done += self.frames[0][1] * 8_000_000_000 // self.rate_bps
            else:
                self.head_done = None
        if self.paused and self.bytes <= self.xon_bytes:
            self.paused = False
            return done, False
        return done, None

    def drain(self) -> list[Any]:
        """Every frame held (the fault ends: the pipeline catches up at once)."""
        frames = [frame for frame, _ in self.frames]
        self.frames.clear()
        self.bytes, self.head_done = 0, None
        return frames
