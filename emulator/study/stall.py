"""Goodput stalls of a running collective: is the fabric deadlocked, and did it recover?

A deadlock (a cycle of lossless buffers each paused by the next) shows as
goodput at zero: no RDMA frame reaches any host while the collective still
runs.  :class:`StallTracker` is pure bookkeeping over samples of the
fabric's delivered-frame count (time and count in, verdict out), unit-tested
on made-up samples; :class:`GoodputWatch` samples the hosts' RNICs every
SAMPLE_S and tells the runner to give up on a fabric that stayed stalled
for ``give_up_ns``.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

SAMPLE_S = 0.1
GIVE_UP_AFTER_DEADLOCK_NS = 5 * 10**9  # a deadlock is watched this much longer: does it stay?


class StallTracker:
    """Stretches without progress.  ``deadlock_ns``: a stall at least that long is a deadlock."""

    def __init__(self, deadlock_ns: int, give_up_ns: int) -> None:
        self.deadlock_ns, self.give_up_ns = deadlock_ns, give_up_ns
        self._last: int | None = None  # the count at the previous sample
        self._since: int | None = None  # when the current stall began (the last sample that saw progress)
        self._progress_at: int | None = None
        self.longest_ns = 0  # the longest stall so far, ended or not
        self.recovered_ns: int | None = None  # the longest stall that ended with goodput back
        self.deadlocked = False

    def sample(self, now: int, delivered: int) -> None:
        """The count of delivered frames at ``now``; stalls are counted from the first progress on (the set-up
        before the first frame is no stall)."""
        if self._last is None:
            self._last = delivered
            return
        if delivered != self._last:
            if self._since is not None:
                self.recovered_ns = max(self.recovered_ns or 0, now - self._since)
            self._since = None
            self._progress_at = now
        elif self._since is None and self._progress_at is not None:
            self._since = self._progress_at
        self._last = delivered
        if self._since is not None:
            stalled = now - self._since
            self.longest_ns = max(self.longest_ns, stalled)
            self.deadlocked = self.deadlocked or stalled >= self.deadlock_ns

    def stuck(self, now: int) -> bool:
        """Whether the current stall has lasted ``give_up_ns``: nothing more will come."""
        return self._since is not None and now - self._since >= self.give_up_ns

    def verdict(self) -> dict[str, object]:
        """What results.json says: deadlocked (a stall of deadlock_ns or more), recovered_after_ms (the longest
        stall that ended; null if a deadlock never ended), longest_stall_ms."""
        recovered = self.recovered_ns
        if self.deadlocked and (recovered is None or recovered < self.deadlock_ns):
            recovered = None  # the deadlock itself never ended
        return {"deadlocked": self.deadlocked,
                "recovered_after_ms": None if recovered is None else round(recovered / 1e6, 1),
                "longest_stall_ms": round(self.longest_ns / 1e6, 1)}


class GoodputWatch:
    """A thread that samples ``delivered()`` (frames the hosts received so far) until stopped; sets ``abort`` once
    the fabric stayed stalled for the tracker's give-up time."""

    def __init__(self, tracker: StallTracker, delivered: Callable[[], int], abort: threading.Event) -> None:
        self.tracker, self._delivered, self.abort = tracker, delivered, abort
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="goodput-watch", daemon=True)

    def __enter__(self) -> "GoodputWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            now = time.monotonic_ns()
            try:
                count = self._delivered()
            except (OSError, ValueError):  # an agent that no longer answers: the runner will hear of it
                return
            self.tracker.sample(now, count)
            if self.tracker.stuck(now):
                self.abort.set()
                return
