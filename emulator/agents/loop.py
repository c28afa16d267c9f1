"""One epoll loop and one timerfd for every agent of a data-plane process.

Why one loop for many agents: with one process per node, 17 processes
shared the two cores of a star,8 all-reduce and the interpreter spent about
50 us per frame where the same switch code in one hot process spent 9 to 13
(context switches and cold caches), and every agent paid the interpreter's
memory and start-up (about 170 ms of CPU) again.  A socket opened inside a
namespace keeps that namespace, so one process can serve the sockets of
many nodes (:mod:`emulator.agents.worker`).

Each agent keeps its own handlers and its one deadline (:class:`AgentTimer`);
the loop keeps the deadlines in a heap and arms one timerfd for the earliest.
Only the agents that had an event (or whose deadline came) run their
``after_events``, so an idle node costs nothing.  The events of a batch are
taken agent by agent: each agent's handlers, then at once its
``after_events`` (what it sends); a deadline that comes meanwhile is
served after the handler or ``after_events`` during which it came.
Eight hosts of an IB all-reduce each had a frame in most batches, and when
every agent's ``after_events`` waited for all eight receive handlers, its
answers went out 1 to 3 ms late and its link timers (due during the other
agents' turns) were judged late by up to 4 ms at p99 (docs/performance.md).
"""

from __future__ import annotations

import heapq
import select
import time
from typing import Any, Callable, Protocol

from emulator.kernel.timerfd import TimerFd


class Served(Protocol):
    """What the loop asks of an agent (:class:`emulator.agents.base.AgentBase` is one)."""

    running: bool
    control_clients: dict[int, Any]
    timer: AgentTimer

    def after_events(self, now: int) -> None: ...
    def on_deadline(self, deadline: int, now: int) -> None: ...
    def expire_control(self, now: int) -> None: ...
    def finish(self) -> None: ...


Handler = Callable[[int, int, int], None]  # (fd, event mask, now_ns)
POLL_SECONDS = 0.5  # the longest sleep: a stop by signal, a control client past its time, noticed within this
HEAP_SLACK = 64  # stale deadlines kept in the heap before it is rebuilt from the live ones


class AgentTimer:
    """One agent's deadline (``time.monotonic_ns()``), or None; the loop's heap holds it."""

    __slots__ = ("loop", "owner", "deadline", "seq")

    def __init__(self, loop: Loop, owner: Served) -> None:
        self.loop = loop
        self.owner = owner
        self.deadline: int | None = None
        self.seq = 0  # which heap entry is this timer's live one

    def set(self, deadline: int | None) -> None:
        """Fire at ``deadline`` (absolute), or never with None."""
        if deadline == self.deadline:
            return
        self.deadline = deadline
        if deadline is not None:
            self.seq = self.loop.push(deadline, self)


class Loop:
    """The epoll loop of one process: fds owned by agents, their deadlines, the agents to run after a batch."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.handlers: dict[int, Handler] = {}
        self.owners: dict[int, Served | None] = {}
        self.agents: list[Served] = []
        self._heap: list[tuple[int, int, AgentTimer]] = []
        self._seq = 0
        self._timerfd = TimerFd()
        self._touched: dict[Served | None, None] = {}  # agents with an event this batch, in order
        self._served: dict[Served, None] = {}  # agents whose deadline was served this batch
        self.stopping = False  # set by a signal: every agent ends
        self.watch(self._timerfd.fd, select.EPOLLIN, self._on_timerfd, None)

    # --- what agents call ------------------------------------------------------------------

    def add(self, agent: Served) -> None:
        self.agents.append(agent)

    def timer(self, owner: Served) -> AgentTimer:
        return AgentTimer(self, owner)

    def watch(self, fd: int, mask: int, handler: Handler, owner: Served | None) -> None:
        self.epoll.register(fd, mask)
        self.handlers[fd] = handler
        self.owners[fd] = owner

    def modify(self, fd: int, mask: int) -> None:
        self.epoll.modify(fd, mask)

    def unwatch(self, fd: int) -> None:
        self.epoll.unregister(fd)
        del self.handlers[fd]
        del self.owners[fd]

    def push(self, deadline: int, timer: AgentTimer) -> int:
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, timer))
        return self._seq

    # --- running ---------------------------------------------------------------------------

    def run(self) -> None:
        """Serve every agent until all have stopped (a ``stop`` request each, or :attr:`stopping`)."""
        now = time.monotonic_ns()
        for agent in self.agents:
            agent.after_events(now)
        self._arm()
        handlers, owners, touched, served = self.handlers, self.owners, self._touched, self._served
        control_due = now
        while self.agents:
            events = self.epoll.poll(POLL_SECONDS)
            now = time.monotonic_ns()
            by_owner: dict[Served | None, list[tuple[int, int]]] = {}
            for fd, mask in events:
                by_owner.setdefault(owners.get(fd), []).append((fd, mask))
            for owner, ready in by_owner.items():
                now = time.monotonic_ns()  # each agent's turn at its own time (the clock never runs back)
                for fd, mask in ready:
                    handler = handlers.get(fd)
                    if handler is not None:  # None: an earlier handler of this batch closed it
                        handler(fd, mask, now)
                        now = self._serve_come(now)
                if owner is not None:
                    touched[owner] = None
                    owner.after_events(now)
                    now = self._serve_come(now)
            if now >= control_due:  # control clients too slow to finish are dropped, idle agents' too
                control_due = now + POLL_SECONDS * 1e9
                for agent in self.agents:
                    if agent.control_clients:
                        agent.expire_control(now)
            if self.stopping:
                touched.update(dict.fromkeys(self.agents))
            ended = [agent for agent in {**touched, **served} if not agent.running or self.stopping]
            touched.clear()
            served.clear()
            for agent in ended:
                self._end(agent)
            self._arm()

    def _serve_come(self, now: int) -> int:
        """Serve the deadlines that came while a handler or an ``after_events`` ran; the time to go on at.

        A deadline does not wait for the rest of the batch (other agents' turns, or the other
        descriptors of this one: a switch's eight ports).  What runs after goes on at the later time,
        so that no agent's clock runs backwards.
        """
        heap = self._heap
        if heap and heap[0][0] <= (clock := time.monotonic_ns()):
            self._serve_due(clock)
            return clock
        return now

    def _on_timerfd(self, _fd: int, _mask: int, now: int) -> None:
        self._timerfd.consume()
        self._serve_due(now)

    def _serve_due(self, now: int) -> None:
        """Every agent whose deadline has come by ``now`` runs its timer, then its ``after_events``, at once.

        Lateness counts from the agent's own deadline.  A batch of events can hold several agents'
        work (eight hosts' frames on star,8), so a deadline is served as soon as the handler running
        when it came returns, with what it sends (an IB credit update goes out in ``after_events``),
        not after the rest of the batch.  Every due timer runs before any of those ``after_events``:
        hosts whose timed posts start at one instant release them together, then send.  Deadlines
        armed meanwhile wait for the next look, so an agent that re-arms "now" cannot hold the loop.
        """
        heap, due = self._heap, []
        while heap and heap[0][0] <= now:
            deadline, seq, timer = heapq.heappop(heap)
            if timer.seq == seq and timer.deadline is not None:
                due.append((deadline, timer))
        for deadline, timer in due:
            timer.deadline = None
            timer.owner.on_deadline(deadline, now)
        for _deadline, timer in due:  # after every due timer: simultaneous starts are released together
            timer.owner.after_events(now)
            self._served[timer.owner] = None

    def _arm(self) -> None:
        """Arm the timerfd for the earliest live deadline; drop stale heap entries on the way."""
        heap = self._heap
        while heap and (heap[0][2].seq != heap[0][1] or heap[0][2].deadline is None):
            heapq.heappop(heap)
        if len(heap) > 2 * len(self.agents) + HEAP_SLACK:
            self._heap = heap = [entry for entry in heap if entry[2].seq == entry[1] and entry[2].deadline is not None]
            heapq.heapify(heap)
        self._timerfd.set(heap[0][0] if heap else None)

    def _end(self, agent: Served) -> None:
        """Stop serving ``agent``: its descriptors leave the loop, it writes its final counters."""
        for fd in [fd for fd, owner in self.owners.items() if owner is agent]:
            self.unwatch(fd)
        agent.timer.set(None)
        self.agents.remove(agent)
        agent.finish()

    def close(self) -> None:
        self._timerfd.close()
        self.epoll.close()
