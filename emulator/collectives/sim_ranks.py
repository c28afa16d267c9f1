"""A collective's ranks in simulated time: the plans the rank processes execute, run by the compiled backend.

The simulation backend's counterpart of :mod:`emulator.collectives.rank`
and the coordinator's iteration loop.  The ranks live in Rust
(``emulator._core.sim.SimFabric``, crates/fabric-core/src/sim/ranks.rs):
each rank gets its host's memory laid out as the rank process lays out
its regions (data, then staging), one RC QP per peer, and per iteration
its receives posted, its first step's WRITEs with immediate posted at the
start instant T, and each slice of the next step posted the moment the
same slice of the step before has its last expected arrival (pipelined as
the rank process runs its plan; after the all-reduce's float32 sum, done on
the data in simulated memory, so ``verified`` means the bytes that crossed
the simulated fabric add up).  Each iteration is summarized there as the
coordinator's :func:`~emulator.collectives.coordinator.summarize` does; this module drives the run a slice
at a time and turns its records into the coordinator's results.

No CPU stands between a completion and the next post here: the simulated
ranks react in zero time, the emulated ones in tens of microseconds.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable

from emulator.collectives.coordinator import CollectiveRun, Flow, IterationResult
from emulator.collectives.workload_plan import WorkloadPlan
from emulator.errors import FabricError

SLICE_EVENTS = 200_000  # events between looks at the run: its progress, a watch that stopped it


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


def rust_iteration(names: list[str], record: tuple) -> IterationResult:
    """The :class:`IterationResult` of one record of the compiled backend (``SimFabric.take_records``): its
    summary in integer ns, turned into microseconds as :func:`~emulator.collectives.coordinator.summarize` turns its own (the same floats)."""
    i, start, last, src, dst, cause, retransmissions, paused, verified, skew, late, columns, _raw, lines = record
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
    timelines = None if lines is None else [([(a - start, b - start) for a, b in ops], end - start)
                                            for ops, end in lines]
    # a training step ends with its last rank (its compute after its last collective included)
    cct_ns = last - start if timelines is None else max(end for _, end in timelines)
    return IterationResult(iteration=i, start_ns=start, cct_us=cct_ns / 1e3, start_skew_us=skew / 1e3,
                           start_late_us=late / 1e3, last_src=names[src], last_dst=names[dst], cause=cause,
                           retransmissions=retransmissions, paused_us=paused / 1e3, verified=verified, flows=flows,
                           timelines=timelines)


def run_rust_collective(fabric: Any, names: list[str], collective: str, size: int, iterations: int, warmup: int,
                        senders: int | None, mtu: int,
                        progress: Callable[[int, int, IterationResult], None] | None = None,
                        ticker: Callable[[SimProgress], None] | None = None) -> CollectiveRun:
    """Run ``warmup + iterations`` iterations of ``collective`` on the compiled backend's ``fabric``
    (``emulator.study.sim_fabric.build_rust_fabric``), iterations spaced as the coordinator spaces them:
    the ranks' plans made and run in Rust with the GIL released, SLICE_EVENTS at a time, each iteration
    summarized there as :func:`~emulator.collectives.coordinator.summarize` does.  ``names``: the hosts in rank order (the plan's host order).
    The counters at the start of the measured iterations are ``fabric.baseline()``.  A collective that
    ``plan`` refuses is a FabricError with its message."""
    try:
        fabric.begin_collective(collective, size, senders, iterations, warmup, mtu)
    except (RuntimeError, ValueError) as error:
        raise FabricError(str(error)) from None
    return _drive(fabric, names, warmup, iterations, progress, ticker)


def run_rust_workload(fabric: Any, names: list[str], step: WorkloadPlan, iterations: int, warmup: int, mtu: int,
                      progress: Callable[[int, int, IterationResult], None] | None = None,
                      ticker: Callable[[SimProgress], None] | None = None) -> CollectiveRun:
    """Run ``warmup + iterations`` iterations of a training step (:func:`~emulator.collectives.workload_plan.
    workload_plan`'s plans, rank r on host r, hosts beyond the job idle) as :func:`run_rust_collective` runs a
    collective; each result carries the ranks' timelines."""
    ranks = []
    for rank in range(len(names)):
        rank_plan = step.ranks[rank] if rank < len(step.ranks) else None
        if rank_plan is None:
            ranks.append((1, 0, [], []))
            continue
        steps = [([(s.dst, s.offset, s.length, s.region == "staging", s.dst_offset, s.at_step) for s in st.sends],
                  list(st.receives)) for st in rank_plan.steps]
        ops = [(span.first, span.steps, span.compute_ns, span.blocking) for span in rank_plan.ops]
        ranks.append((rank_plan.data_bytes, rank_plan.staging_bytes, steps, ops))
    try:
        fabric.begin_workload(ranks, step.tail_ns, iterations, warmup, mtu)
    except (RuntimeError, ValueError) as error:
        raise FabricError(str(error)) from None
    return _drive(fabric, names, warmup, iterations, progress, ticker)


def _drive(fabric: Any, names: list[str], warmup: int, iterations: int,
           progress: Callable[[int, int, IterationResult], None] | None,
           ticker: Callable[[SimProgress], None] | None) -> CollectiveRun:
    """Runs what the fabric has begun, SLICE_EVENTS at a time with the GIL released, to its end."""
    measured: list[IterationResult] = []
    warm: list[IterationResult] = []
    total = warmup + iterations
    try:
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
