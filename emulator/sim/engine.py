"""A discrete-event engine: a heap of timed callbacks, simulated time in integer nanoseconds.

The simulation backend drives the same sans-I/O models the emulator's
agents drive (they take ``now`` and return what to send), so the engine
needs little: schedule a callback at a time, cancel it, run in time order.
Events at the same time run in the order they were scheduled, so a run is
deterministic.  A cancelled event stays in the heap and is skipped when it
comes up (cancelling is O(1); a model that re-arms a timer often leaves a
few stale entries).

Two heaps: events due within WINDOW_NS of the last refill in the *near*
heap, later ones in the *far* heap, moved over when the near one runs dry.
A fattree,12 all-to-all keeps 186,192 retransmission timers pending (one
per QP, 67 ms away) while its frames come and go within microseconds; in
one heap every frame's push and pop climbed through all of them (the
engine's loop was 15% of the profile).

Why not SimPy: measured by ``bench/bench_sim_engine.py`` (the hold model,
docs/performance.md "Simulation engine"), this heap runs 1.1 to 1.3 times
as many events a second as SimPy with a process per timer: no gain that
would pay for a dependency, and the models are callbacks, not processes.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable


WINDOW_NS = 10_000_000  # the near heap's span: frames and pause timers in it, retransmission timers (67 ms+) not

# A scheduled event's handle: [callback, args]; the callback is None once it ran or was cancelled.  A list,
# not an object: creating it is most of an event's cost after the heap's (bench/bench_sim_engine.py).
Handle = list


class Simulator:
    """Simulated time and the events to come."""

    def timer(self, callback: Callable[[], Any]) -> "Timer":
        """A model's one wake-up (its next deadline), re-armed as the model's answer changes."""
        return Timer(self, callback)

    def __init__(self) -> None:
        self.now = 0
        self.events = 0  # callbacks run so far
        self._heap: list[tuple[int, int, Handle]] = []  # the near events: due before _edge
        self._far: list[tuple[int, int, Handle]] = []  # the rest
        self._edge = WINDOW_NS
        self._seq = 0
        self._stopped = False

    def at(self, time: int, callback: Callable[..., Any], *args: Any) -> Handle:
        """Run ``callback(*args)`` at ``time`` (ns, not before now); the handle cancels it."""
        if time < self.now:
            raise ValueError(f"event at {time} ns is before now ({self.now} ns)")
        handle = [callback, args]
        self._seq += 1
        heapq.heappush(self._heap if time < self._edge else self._far, (time, self._seq, handle))
        return handle

    def after(self, delay: int, callback: Callable[..., Any], *args: Any) -> Handle:
        """Run ``callback(*args)`` ``delay`` ns from now."""
        return self.at(self.now + delay, callback, *args)

    @staticmethod
    def cancel(handle: Handle | None) -> None:
        """Keep a scheduled event from running (nothing if it ran already)."""
        if handle is not None:
            handle[0] = None

    @staticmethod
    def pending(handle: Handle) -> bool:
        return handle[0] is not None

    def next_time(self) -> int | None:
        """When the next pending event is due, or None when none is."""
        heap = self._heap
        while True:
            while heap and heap[0][2][0] is None:
                heapq.heappop(heap)
            if heap or not self._refill():
                return heap[0][0] if heap else None

    def entries(self) -> int:
        """Entries in the heaps, cancelled ones not yet popped included: what the engine holds in memory."""
        return len(self._heap) + len(self._far)

    def _refill(self) -> bool:
        """The near heap is empty: move the far events of the next window over; whether there were any."""
        far, near, pop, push = self._far, self._heap, heapq.heappop, heapq.heappush
        while far and far[0][2][0] is None:
            pop(far)
        if not far:
            return False
        self._edge = far[0][0] + WINDOW_NS
        while far and far[0][0] < self._edge:
            entry = pop(far)
            if entry[2][0] is not None:
                push(near, entry)
        return True

    def run(self, until: int | None = None, max_events: int | None = None) -> int:
        """Run events in time order until none is left, the next is after ``until`` (then now = until),
        ``max_events`` have run or a callback called :meth:`stop`; how many ran."""
        heap, pop = self._heap, heapq.heappop
        limit = max_events if max_events is not None else 1 << 62
        ran = 0
        self._stopped = False
        while ran < limit and not self._stopped:
            if not heap and not self._refill():
                break
            if until is not None and heap[0][0] > until:
                break
            time, _seq, handle = pop(heap)
            callback = handle[0]
            if callback is None:
                continue
            handle[0] = None
            self.now = time
            callback(*handle[1])
            ran += 1
        if until is not None and until > self.now and ran < limit and not self._stopped:
            self.now = until
        self.events += ran
        return ran

    def stop(self) -> None:
        """End :meth:`run` after the event now running (the rest stay pending)."""
        self._stopped = True


class Timer:
    """One callback at a deadline that moves (:meth:`set`), run when the deadline comes.

    A deadline that moves later keeps its heap entry: when the entry comes
    up early it re-arms for the deadline then.  A retransmission timer is
    pushed back by every ACK and seldom fires; re-scheduling it each time
    left a stale entry per ACK in the heap (millions in a fattree,16
    all-to-all), where now there is one per timer.
    """

    def __init__(self, sim: Simulator, callback: Callable[[], Any]) -> None:
        self.sim, self.callback = sim, callback
        self._handle: Handle | None = None
        self._scheduled = 0  # when the pending entry, if any, comes up
        self._at: int | None = None  # the deadline

    def set(self, deadline: int | None) -> None:
        self._at = deadline
        if deadline is None:
            return  # a pending entry comes up and finds nothing to do
        handle = self._handle
        if handle is not None and handle[0] is not None and self._scheduled <= deadline:
            return  # comes up early and re-arms then (or on time)
        self.sim.cancel(handle)
        self._scheduled = max(deadline, self.sim.now)
        self._handle = self.sim.at(self._scheduled, self._fire)

    def _fire(self) -> None:
        self._handle = None
        deadline = self._at
        if deadline is None:
            return
        if deadline > self.sim.now:  # moved later since the entry was made
            self._scheduled = deadline
            self._handle = self.sim.at(deadline, self._fire)
            return
        self._at = None
        self.callback()
