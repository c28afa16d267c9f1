"""The switch's memory management unit: a shared buffer with PFC and ECN.

Sans-I/O (h11 style): no sockets, no clock.  The agent passes ``now`` in
nanoseconds into every call, sends the PFC frames it collects from
:meth:`Mmu.take_pfc`, and wakes at :meth:`Mmu.next_deadline`.

Admission is by ingress accounting, as in shared-buffer switch ASICs.
Every (ingress port, priority) owns a small reserve, then draws on one
shared pool up to a threshold: static (``threshold`` bytes) or dynamic
(``alpha`` x the shared bytes still free).  A lossy priority tail-drops
past it.  A lossless priority instead sends PFC XOFF out of its ingress
port when it reaches the threshold and keeps admitting into that port's
headroom (bytes still arriving while the pause travels and takes effect);
only a full headroom drops, and that is a headroom violation.  XON goes out
once the shared use is ``xon_delta`` below the threshold (or zero, if the
threshold is smaller) and the headroom is empty; while paused, XOFF is refreshed at half its pause time.

Egress: per (port, priority) FIFO queues.  Priorities in ``strict`` go
first, highest first; the rest share by deficit weighted round robin.  A
priority paused by a received PFC is skipped.  ECT frames are marked CE at
enqueue (the model rewrites the two ECN bits and the IPv4 checksum) with RED's ramp on the egress queue: none below ``kmin`` bytes,
``pmax`` at ``kmax``, all above.

With ``pfcwd`` set, a PFC watchdog (:mod:`emulator.model.pfcwd`) watches
every lossless egress queue: paused with frames and sending none for the
detection time, it is stormed, and its action flushes it and drops its
arrivals (``drop``), or lets it send (``forward``), ignoring its PFC until
the restoration time passes without a pause frame for it; or only counts
(``alert``).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from emulator.model.credits import FABRIC_MIN_INTERVAL_NS
from emulator.model.pause import PauseState
from emulator.model.pfcwd import Watchdog, WatchdogConfig
from emulator.wire.pfc import PRIORITIES, pause_ns
from emulator.model.forwarding import is_ect, mark_ce


@dataclass(frozen=True)
class MmuConfig:
    """Buffer, threshold, PFC, scheduling and ECN settings of one switch."""

    buffer: int
    reserve: int
    headroom: int
    alpha: float
    threshold: int
    xon_delta: int
    lossless: frozenset[int]
    quanta: int
    strict: frozenset[int]
    weights: tuple[int, ...]
    mtu_frame: int
    ecn: bool
    kmin: int
    kmax: int
    pmax: float
    vl_buffer: int = 0  # --fabric ib: receive buffer per VL per port (the IB plane's, not the MMU's)
    fc_floor: int = FABRIC_MIN_INTERVAL_NS  # --fabric ib: the least time a grown credit grant waits for more
    pfcwd: WatchdogConfig | None = None  # the PFC watchdog of the lossless queues, or none

    def shared_pool(self, ports: int) -> int:
        """Bytes left for sharing after every reserve and headroom."""
        return self.buffer - ports * (PRIORITIES * self.reserve + len(self.lossless) * self.headroom)


@dataclass
class Counters:
    """Telemetry of one (port, priority), ingress and egress side."""

    drops_threshold: int = 0  # lossy: over its threshold
    drops_headroom: int = 0  # lossless: headroom overflow (a PFC failure)
    pfc_xoff_sent: int = 0
    pfc_xon_sent: int = 0
    ingress_peak: int = 0
    tx_frames: int = 0
    tx_bytes: int = 0
    ecn_marked: int = 0
    egress_peak: int = 0
    pfcwd_drops: int = 0  # egress: frames the PFC watchdog flushed or refused during a storm
    pfcwd_storms: int = 0


class _Queue:
    __slots__ = ("frames", "bytes", "deficit")

    def __init__(self) -> None:
        self.frames: deque[tuple[bytes, int]] = deque()  # (frame, ingress port index)
        self.bytes = 0
        self.deficit = 0


@dataclass
class _Ingress:
    used: list[int] = field(default_factory=lambda: [0] * PRIORITIES)
    headroom: list[int] = field(default_factory=lambda: [0] * PRIORITIES)
    xoff: list[bool] = field(default_factory=lambda: [False] * PRIORITIES)
    refresh_at: list[int | None] = field(default_factory=lambda: [None] * PRIORITIES)


class Mmu:
    """Shared-buffer admission, PFC generation and reaction, ECN, scheduling."""

    def __init__(self, config: MmuConfig, port_rates: list[int], seed: int = 0) -> None:
        self.config = config
        self.pool = config.shared_pool(len(port_rates))
        if self.pool <= 0:
            raise ValueError(
                f"buffer {config.buffer} B leaves no shared pool after reserves and headroom of {len(port_rates)} ports"
            )
        self.rates = port_rates
        self.shared_used = 0
        self.ingress = [_Ingress() for _ in port_rates]
        self.queues = [[_Queue() for _ in range(PRIORITIES)] for _ in port_rates]
        self.pause = [PauseState(rate) for rate in port_rates]
        self.counters = [[Counters() for _ in range(PRIORITIES)] for _ in port_rates]
        self.backlog = [0] * len(port_rates)  # frames queued per egress port
        self._drr = [sorted((p for p in range(PRIORITIES) if p not in config.strict), reverse=True)
                     for _ in port_rates]
        self._drr_at = [0] * len(port_rates)
        self._strict = sorted(config.strict, reverse=True)
        self._quantum = [w * config.mtu_frame for w in config.weights]
        self._pfc_out: list[tuple[int, dict[int, int]]] = []
        self._random = random.Random(seed)
        self._refresh_ns = [pause_ns(config.quanta, rate) // 2 for rate in port_rates]
        self._deadline: int | None = None
        self._deadline_stale = False  # set when a pause, XOFF or watchdog timer changes
        self.watchdog = Watchdog(config.pfcwd) if config.pfcwd is not None else None

    # --- admission ---------------------------------------------------------------

    def _shared_part(self, port: int, priority: int) -> int:
        ing = self.ingress[port]
        return max(0, ing.used[priority] - ing.headroom[priority] - self.config.reserve)

    def _threshold(self) -> int:
        if self.config.alpha:
            return int(self.config.alpha * (self.pool - self.shared_used))
        return self.config.threshold

    def enqueue(self, now: int, ingress: int, egress: int, priority: int, frame: bytes) -> bool:
        """Admit ``frame`` from ``ingress`` for ``egress``; False if dropped.

        An admitted ECT frame may be stored CE-marked.
        """
        cfg = self.config
        size = len(frame)
        watchdog = self.watchdog
        if watchdog is not None and watchdog.dropping((egress, priority)):
            self.counters[egress][priority].pfcwd_drops += 1
            return False
        ing = self.ingress[ingress]
        used = ing.used[priority]
        before = max(0, used - ing.headroom[priority] - cfg.reserve)
        shared_after = max(0, used + size - ing.headroom[priority] - cfg.reserve)
        grow = shared_after - before
        fits = grow == 0 or (shared_after <= self._threshold() and self.shared_used + grow <= self.pool)
        counters = self.counters[ingress][priority]
        if priority in cfg.lossless:
            if fits:
                if grow and shared_after >= self._threshold():
                    self._xoff(now, ingress, priority)
            elif ing.headroom[priority] + size <= cfg.headroom:
                ing.headroom[priority] += size
                grow = 0
                self._xoff(now, ingress, priority)
            else:
                counters.drops_headroom += 1
                self._xoff(now, ingress, priority)
                return False
        elif not fits:
            counters.drops_threshold += 1
            return False
        ing.used[priority] = used + size
        self.shared_used += grow
        if ing.used[priority] > counters.ingress_peak:
            counters.ingress_peak = ing.used[priority]

        queue = self.queues[egress][priority]
        marked = cfg.ecn and is_ect(frame) and self._mark(queue.bytes)
        if marked:
            frame = mark_ce(frame)
        queue.frames.append((frame, ingress))
        queue.bytes += size
        self.backlog[egress] += 1
        out = self.counters[egress][priority]
        if queue.bytes > out.egress_peak:
            out.egress_peak = queue.bytes
        if marked:
            out.ecn_marked += 1
        if watchdog is not None and self.pause[egress].until[priority] is not None and priority in cfg.lossless \
                and watchdog.stalled(now, (egress, priority)):
            self._deadline_stale = True
        return True

    def _mark(self, queued: int) -> bool:
        cfg = self.config
        if queued <= cfg.kmin:
            return False
        if queued >= cfg.kmax:
            return True
        return self._random.random() < cfg.pmax * (queued - cfg.kmin) / (cfg.kmax - cfg.kmin)

    # --- PFC generation -----------------------------------------------------------------

    def _xoff(self, now: int, port: int, priority: int) -> None:
        ing = self.ingress[port]
        if ing.xoff[priority]:
            return
        ing.xoff[priority] = True
        ing.refresh_at[priority] = now + self._refresh_ns[port]
        self._deadline_stale = True
        self.counters[port][priority].pfc_xoff_sent += 1
        self._pfc_out.append((port, {priority: self.config.quanta}))

    def _maybe_xon(self, port: int, priority: int) -> None:
        ing = self.ingress[port]
        xon_point = max(0, self._threshold() - self.config.xon_delta)
        if ing.headroom[priority] or self._shared_part(port, priority) > xon_point:
            return
        ing.xoff[priority] = False
        ing.refresh_at[priority] = None
        self._deadline_stale = True
        self.counters[port][priority].pfc_xon_sent += 1
        self._pfc_out.append((port, {priority: 0}))

    def take_pfc(self) -> list[tuple[int, dict[int, int]]]:
        """PFC frames to send: (port, {priority: quanta}); clears the outbox."""
        out, self._pfc_out = self._pfc_out, []
        return out

    # --- egress ---------------------------------------------------------------------------

    def head(self, egress: int) -> tuple[int, bytes] | None:
        """The (priority, frame) to send next on ``egress``, or None.

        The choice stays the same until :meth:`pop` (or a pause or a new
        strict-priority frame), so a frame the wire refuses keeps its turn.
        """
        if not self.backlog[egress]:
            return None
        queues = self.queues[egress]
        paused = self.pause[egress].until
        for priority in self._strict:
            queue = queues[priority]
            if queue.frames and paused[priority] is None:
                return priority, queue.frames[0][0]
        order = self._drr[egress]
        at = self._drr_at[egress]
        for _ in range(len(order)):
            priority = order[at]
            queue = queues[priority]
            if queue.frames and paused[priority] is None:
                size = len(queue.frames[0][0])
                if queue.deficit < size:  # its turn: one quantum (more for an oversized frame)
                    queue.deficit += self._quantum[priority] * -(-(size - queue.deficit) // self._quantum[priority])
                self._drr_at[egress] = at
                return priority, queue.frames[0][0]
            elif not queue.frames:
                queue.deficit = 0
            at = (at + 1) % len(order)
        self._drr_at[egress] = at
        return None

    def pop(self, egress: int, priority: int) -> None:
        """The head frame of (``egress``, ``priority``) went to the wire."""
        queue = self.queues[egress][priority]
        size = self._remove_head(egress, priority, queue)
        if priority not in self.config.strict:
            queue.deficit -= size
            if not queue.frames or queue.deficit < len(queue.frames[0][0]):
                if not queue.frames:
                    queue.deficit = 0
                self._drr_at[egress] = (self._drr_at[egress] + 1) % len(self._drr[egress])
        out = self.counters[egress][priority]
        out.tx_frames += 1
        out.tx_bytes += size
        if self.watchdog is not None and self.watchdog.progressed((egress, priority)):
            self._deadline_stale = True

    def _remove_head(self, egress: int, priority: int, queue: _Queue) -> int:
        """Take the head frame of a queue out of the buffer (sent or flushed); its size."""
        frame, ingress = queue.frames.popleft()
        size = len(frame)
        queue.bytes -= size
        self.backlog[egress] -= 1
        ing = self.ingress[ingress]
        before = max(0, ing.used[priority] - ing.headroom[priority] - self.config.reserve)
        from_headroom = min(ing.headroom[priority], size)
        ing.headroom[priority] -= from_headroom
        ing.used[priority] -= size
        after = max(0, ing.used[priority] - ing.headroom[priority] - self.config.reserve)
        self.shared_used += after - before
        if ing.xoff[priority]:
            self._maybe_xon(ingress, priority)
        return size

    # --- PFC reception and timers ------------------------------------------------------

    def pfc_received(self, now: int, port: int, quanta: dict[int, int]) -> list[int]:
        """A PFC frame arrived on ``port``; returns priorities it resumed.

        With a watchdog, a stormed queue's priority is left out (its PFC is
        ignored, and restarts its restoration time); a pause of a queue that
        holds frames starts its detection time, a resume ends it.
        """
        watchdog = self.watchdog
        if watchdog is not None:
            quanta = dict(quanta)  # the caller's stays as received
            for priority, value in list(quanta.items()):
                key = (port, priority)
                if value:
                    watchdog.pause_received(now, key)
                if watchdog.stormed(key):
                    del quanta[priority]
                elif value and self.queues[port][priority].frames and priority in self.config.lossless:
                    watchdog.stalled(now, key)
                elif not value:
                    watchdog.progressed(key)
        _, resumed = self.pause[port].on_pfc(now, quanta)
        self._deadline_stale = True
        return resumed

    def next_deadline(self) -> int | None:
        """When :meth:`on_timer` must run next: a pause expiry or XOFF refresh.

        Cached: the agent asks after every batch of frames, and only PFC
        events move the answer.
        """
        if self._deadline_stale:
            times = [t for state in self.pause if (t := state.next_expiry()) is not None]
            times += [t for ing in self.ingress for t in ing.refresh_at if t is not None]
            if self.watchdog is not None and (t := self.watchdog.next_deadline()) is not None:
                times.append(t)
            self._deadline = min(times) if times else None
            self._deadline_stale = False
        return self._deadline

    def on_timer(self, now: int) -> list[int]:
        """Expire pauses and refresh XOFFs due by ``now``; ports to drain."""
        self._deadline_stale = True
        ready = []
        for port, state in enumerate(self.pause):
            resumed = state.expire(now)
            if resumed:
                ready.append(port)
                if self.watchdog is not None:
                    for priority in resumed:
                        self.watchdog.progressed((port, priority))
        if self.watchdog is not None:
            ready += self._watchdog_timer(now)
        for port, ing in enumerate(self.ingress):
            for priority, due in enumerate(ing.refresh_at):
                if due is not None and due <= now:
                    ing.refresh_at[priority] = now + self._refresh_ns[port]
                    self.counters[port][priority].pfc_xoff_sent += 1
                    self._pfc_out.append((port, {priority: self.config.quanta}))
        return ready

    def _watchdog_timer(self, now: int) -> list[int]:
        """Act on the storms detected by ``now``: flush (drop) or release (drop, forward) the queue; ports to drain."""
        assert self.watchdog is not None
        detected, _restored = self.watchdog.on_timer(now)
        ready = []
        action = self.watchdog.config.action
        for port, priority in detected:
            counters = self.counters[port][priority]
            counters.pfcwd_storms += 1
            if action == "alert":
                continue
            if action == "drop":
                queue = self.queues[port][priority]
                while queue.frames:
                    self._remove_head(port, priority, queue)
                    counters.pfcwd_drops += 1
                queue.deficit = 0
            self.pause[port].release(now, priority)
            ready.append(port)
        return ready

    # --- telemetry -----------------------------------------------------------------------------

    def ingress_bytes(self, port: int, priority: int) -> int:
        return self.ingress[port].used[priority]

    def egress_bytes(self, port: int, priority: int) -> int:
        return self.queues[port][priority].bytes

