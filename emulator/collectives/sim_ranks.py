"""A collective's ranks in simulated time: the same plans the rank processes execute, on simulated RNICs.

The simulation backend's counterpart of :mod:`emulator.collectives.rank`
and the coordinator's iteration loop.  Each rank gets its host's memory
laid out as the rank process lays out its regions (data, then staging),
one RC QP per peer, and per iteration: its receives posted, its first
step's WRITEs with immediate posted at the start instant T, and each next
step posted the moment the step's last expected arrival completes (after
the all-reduce's float32 sum, done on the data in simulated memory, so
``verified`` means the bytes that crossed the simulated fabric add up).
What a rank reports is what the rank process reports, so the iteration's
metrics come from the coordinator's own :func:`summarize`.

No CPU stands between a completion and the next post here: the simulated
ranks react in zero time, the emulated ones in tens of microseconds.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from emulator.collectives.algorithms import RankPlan, Step, plan
from emulator.collectives.coordinator import START_MARGIN_NS, CollectiveRun, Flow, IterationResult, summarize
from emulator.errors import FabricError
from emulator.model.rc import Completion, RcQueuePair, SendWR, RecvWR, WcOpcode, WcStatus, WrOpcode
from emulator.sim.engine import Simulator
from emulator.sim.host import FlatMemory, SimHost
from emulator.wire.pfc import PRIORITIES

SLICE_EVENTS = 200_000  # events between looks at the run: its progress, a watch that stopped it


class SimRank:
    """One rank's plan executed on a simulated host."""

    def __init__(self, rank: int, plans: list[RankPlan], host: SimHost, on_done: Callable[[int], None]) -> None:
        self.rank, self.plans, self.host, self.on_done = rank, plans, host, on_done
        self.plan = plans[rank]
        self.reduce = bool(self.plan.reduce_group)
        host.on_completion = self._completion
        self.qps: dict[int, RcQueuePair] = {}  # peer rank -> its QP
        self.peer_of: dict[int, int] = {}  # qpn -> peer rank
        self.iteration = -1
        self.start = 0
        self._reset()

    @staticmethod
    def qpn(peer: int) -> int:
        """The QP number that talks to ``peer`` (one QP per peer)."""
        return peer + 1

    def connect(self, ranks: list["SimRank"], mtu: int) -> None:
        for peer in sorted(self.plan.peers):
            self.qps[peer] = self.host.connect(self.qpn(peer), ranks[peer].host, self.qpn(self.rank), mtu)
            self.peer_of[self.qpn(peer)] = peer

    def _reset(self) -> None:
        self.arrived: dict[tuple[int, int], int] = {}  # (src, step) -> time stamp
        self.sends: list[list[int]] = []
        self.outstanding = 0
        self.step = 0
        self.done = False
        self.failure: str | None = None

    def begin(self, iteration: int, start: int) -> None:
        """Post the receives and fill the input now; the first step's WRITEs go at ``start``."""
        self._reset()
        self.iteration, self.start = iteration, start
        if self.reduce:
            self._values()[:] = self.plan.reduce_input(iteration)
        for src, count in self.plan.receives_by_peer.items():
            for _ in range(count):
                self.qps[src].post_recv(RecvWR(0, 0, 0, FlatMemory.KEY))
        self.host.sim.at(start, self._step_begins)

    def _values(self, offset: int = 0, count: int = -1) -> np.ndarray:
        return np.frombuffer(self.host.memory.data, dtype=np.float32, count=count, offset=offset)

    def _tag(self) -> int:
        return (self.iteration & 0xFFFF) << 16

    def _step_begins(self) -> None:
        """Post the current step's sends; then move on if it expects nothing."""
        while True:
            if self.step >= len(self.plan.steps):
                self._maybe_done()
                return
            step = self.plan.steps[self.step]
            for send in step.sends:
                base = self.plans[send.dst].data_bytes if send.region == "staging" else 0  # the peer's layout
                qp = self.qps[send.dst]
                qp.post_send(SendWR(self.step, WrOpcode.RDMA_WRITE_WITH_IMM, send.offset, send.length, FlatMemory.KEY,
                                    base + send.dst_offset, FlatMemory.KEY, self._tag() | self.step))
                self.outstanding += 1
                self.host.kick(self.qpn(send.dst))
            if not self._step_complete(step):
                return
            self._finish_step(step)

    def _step_complete(self, step: Step) -> bool:
        return all((src, self.step) in self.arrived for src in step.receives)

    def _finish_step(self, step: Step) -> None:
        if step.reduce is not None:
            staged, offset, length = step.reduce
            count = length // 4
            self._values(offset, count)[:] += self._values(self.plan.data_bytes + staged, count)
        self.step += 1

    def _completion(self, wc: Completion) -> None:
        if wc.status != WcStatus.SUCCESS:
            self.failure = f"rank {self.rank}: {wc.opcode.name} {wc.status.name}"
            self.done = True
            self.on_done(self.rank)
            return
        peer = self.peer_of[wc.qp_num]
        if wc.opcode == WcOpcode.RECV_RDMA_WITH_IMM:
            assert wc.imm is not None
            if wc.imm & 0xFFFF0000 != self._tag():
                self.failure = f"rank {self.rank}: immediate {wc.imm:#x} is not of iteration {self.iteration}"
            self.arrived[(peer, wc.imm & 0xFFFF)] = wc.timestamp
            if self.step < len(self.plan.steps) and self._step_complete(self.plan.steps[self.step]):
                self._finish_step(self.plan.steps[self.step])
                self._step_begins()
        else:
            self.outstanding -= 1
            self.sends.append([peer, wc.wr_id, wc.timestamp])
        self._maybe_done()

    def _maybe_done(self) -> None:
        if not self.done and self.step >= len(self.plan.steps) and self.outstanding == 0:
            self.done = True
            self.on_done(self.rank)

    def verified(self) -> bool:
        if not self.reduce:
            return True
        return bool(np.all(self._values(0, self.plan.data_bytes // 4) == self.plan.reduce_result(self.iteration)))

    def report(self) -> dict[str, Any]:
        """What the rank process reports for an iteration (:meth:`emulator.collectives.rank.Rank.run_iteration`)."""
        counters = {str(peer): [qp.counters["retransmitted_packets"], qp.counters["timeouts"]]
                    for peer, qp in self.qps.items()}
        released = self.start if self.plan.steps and self.plan.steps[0].sends else None
        return {"iteration": self.iteration, "released_ns": released,
                "arrivals": [[src, step, stamp] for (src, step), stamp in self.arrived.items()],
                "sends": self.sends, "counters": counters, "verified": self.verified()}


@dataclass
class SimProgress:
    """What a long simulation says while it runs: simulated time, events, iterations finished, and the
    current iteration's arrivals (a WRITE with immediate each) against those it expects."""

    now_ns: int
    events: int
    finished: int
    total: int
    arrived: int
    expected: int

    @property
    def done(self) -> float:
        """The share of the run behind it, counting the current iteration by its arrivals."""
        current = self.arrived / self.expected if self.expected and self.finished < self.total else 0.0
        return (self.finished + current) / self.total  # the last iteration's arrivals are in ``finished`` once done


def run_sim_collective(sim: Simulator, hosts: dict[str, SimHost], collective: str, size: int, iterations: int,
                       warmup: int, senders: int | None, mtu: int,
                       progress: Callable[[int, int, IterationResult], None] | None = None,
                       ticker: Callable[[SimProgress], None] | None = None,
                       measured_from: Callable[[], None] | None = None,
                       stopped: Callable[[], bool] | None = None,
                       started: Callable[[int, int], None] | None = None) -> CollectiveRun:
    """Run ``warmup + iterations`` iterations of ``collective`` over ``hosts`` (rank order) in simulated time.

    Iterations start START_MARGIN_NS after the previous one ended, as the
    coordinator spaces them.  ``measured_from`` is called when the measured
    iterations begin (the counters' baseline); ``started(i, start_ns)`` as
    iteration i is given its start instant (the coordinator's hook: faults
    are timed from it); ``ticker`` every SLICE_EVENTS events.  A fabric that stops delivering (a PFC deadlock) ends as the
    RNICs end it: retries run out, and the failed completion is a FabricError;
    unless a watch stops the engine first (``stopped()`` then says so) and the
    run returns with the iterations that finished.
    """
    names = list(hosts)
    plans = plan(collective, len(names), size, senders)
    total = warmup + iterations
    pending: set[int] = set()
    measured: list[IterationResult] = []
    warm: list[IterationResult] = []
    previous: dict[str, dict[str, list[int]]] = {name: {} for name in names}
    paused_before: dict[str, int] = {}
    state: dict[str, Any] = {"iteration": 0, "failure": None}

    def paused() -> dict[str, int]:
        now = sim.now
        return {name: sum(hosts[name].queue.pause.paused_time(p, now) for p in range(PRIORITIES)) for name in names}

    def start(i: int) -> None:
        state["iteration"] = i
        if i == warmup and measured_from is not None:
            measured_from()
        paused_before.update(paused())
        pending.update(range(len(ranks)))
        at = sim.now + START_MARGIN_NS
        if started is not None:
            started(i, at)
        for rank in ranks:
            rank.begin(i, at)

    def rank_done(rank: int) -> None:
        pending.discard(rank)
        if ranks[rank].failure is not None and state["failure"] is None:
            state["failure"] = ranks[rank].failure
            sim.stop()
        if pending:
            return
        i = state["iteration"]
        after = paused()
        reports = {name: ranks[r].report() for r, name in enumerate(names)}
        record = summarize(i, ranks[0].start, names, plans, reports, previous,
                           {name: after[name] - paused_before[name] for name in names})
        (warm if i < warmup else measured).append(record)
        if progress is not None:
            progress(i, total, record)
        if i + 1 < total and state["failure"] is None:
            start(i + 1)
        else:
            sim.stop()  # what is left (an IB link's refreshes) would run for ever

    for name, rank_plan in zip(names, plans):  # the rank process's regions: data, then staging
        hosts[name].provide_memory(rank_plan.data_bytes + rank_plan.staging_bytes)
    ranks = [SimRank(r, plans, hosts[name], rank_done) for r, name in enumerate(names)]
    for rank in ranks:
        rank.connect(ranks, mtu)
    expected = sum(rank_plan.receive_count for rank_plan in plans)
    start(0)
    while len(warm) + len(measured) < total and state["failure"] is None:
        if stopped is not None and stopped():
            break
        if not sim.run(max_events=SLICE_EVENTS):
            raise FabricError(f"simulation: iteration {state['iteration']} cannot finish: nothing more will happen "
                              f"(ranks {sorted(pending)[:8]} still wait)")
        if ticker is not None:
            ticker(SimProgress(sim.now, sim.events, len(warm) + len(measured), total,
                               sum(len(rank.arrived) for rank in ranks), expected))
    if state["failure"] is not None:
        raise FabricError(f"simulation: {state['failure']}")
    return CollectiveRun(names, measured, warm)


def rust_iteration(names: list[str], record: tuple) -> IterationResult:
    """The :class:`IterationResult` of one record of the compiled backend (``SimFabric.take_records``): its
    summary in integer ns, turned into microseconds as :func:`summarize` turns its own (the same floats)."""
    i, start, last, src, dst, cause, retransmissions, paused, verified, skew, late, columns, _raw = record
    # An all-to-all of 1,024 ranks has a million flows: the collector is paused while they are made (they are
    # acyclic), or the collections they set off take twice as long as making them and find nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        flows = [Flow(names[s], names[d], size, (stamp - start) / 1e3, r, t)
                 for s, d, size, stamp, r, t in zip(*columns)]
    finally:
        if collecting:
            gc.enable()
    return IterationResult(iteration=i, start_ns=start, cct_us=(last - start) / 1e3, start_skew_us=skew / 1e3,
                           start_late_us=late / 1e3, last_src=names[src], last_dst=names[dst], cause=cause,
                           retransmissions=retransmissions, paused_us=paused / 1e3, verified=verified, flows=flows)


def run_rust_collective(fabric: Any, names: list[str], collective: str, size: int, iterations: int, warmup: int,
                        senders: int | None, mtu: int,
                        progress: Callable[[int, int, IterationResult], None] | None = None,
                        ticker: Callable[[SimProgress], None] | None = None) -> CollectiveRun:
    """:func:`run_sim_collective` on the compiled backend (``emulator.study.sim_fabric.build_rust_fabric``):
    the ranks' plans made and run in Rust with the GIL released, SLICE_EVENTS at a time, each iteration
    summarized there as :func:`summarize` does.  ``names``: the hosts in rank order (the plan's host order).
    The counters at the start of the measured iterations are ``fabric.baseline()``.  A collective that
    ``plan`` refuses is a FabricError with its message."""
    measured: list[IterationResult] = []
    warm: list[IterationResult] = []
    total = warmup + iterations
    try:
        fabric.begin_collective(collective, size, senders, iterations, warmup, mtu)
        while True:
            finished = fabric.advance(SLICE_EVENTS)
            for record in fabric.take_records():
                result = rust_iteration(names, record)
                (warm if result.iteration < warmup else measured).append(result)
                if progress is not None:
                    progress(result.iteration, total, result)
            if ticker is not None:
                done, total_, arrived, expected = fabric.progress()
                ticker(SimProgress(fabric.now, fabric.events, done, total_, arrived, expected))
            if finished:
                break
    except (RuntimeError, ValueError) as error:
        raise FabricError(str(error)) from None
    return CollectiveRun(names, measured, warm)
