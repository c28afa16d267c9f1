"""The Python simulation backend's variant runner: the twin the compiled one (``run_sim_variant``) is tested
against, figure for figure, until the Python backend is deleted (tests only).

This is ``emulator.study.sim_variant.run_sim_variant`` as it was before the runner moved onto the compiled
core, kept unchanged but for its name.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from emulator.collectives.sim_ranks import SimProgress, run_sim_collective
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo
from emulator.model.dcqcn import parse_cc
from emulator.study.experiment import Variant
from emulator.study.sim_fabric import SimFabric, build_sim_fabric, pfcwd, totals
from emulator.study.sim_variant import TICK_S, SimOutcome
from emulator.study.stall import GIVE_UP_AFTER_DEADLOCK_NS, SAMPLE_S, StallTracker
from emulator.wire.pfc import PRIORITIES


def run_python_variant(variant: Variant, log: Callable[[str], None],
                    clock: Callable[[], float] = time.monotonic) -> SimOutcome:
    """Run ``variant`` in simulated time, saying every TICK_S how far it got and about how long is left."""
    began = clock()
    fabric_plan = make_plan(build_topo(variant.topo), "sim", variant.link)
    fabric = build_sim_fabric(fabric_plan, variant.fabric, dict(variant.switch), cc=parse_cc(variant.cc),
                              dilation=variant.dilation if variant.model is not None else None, seed=variant.seed)
    built = clock()
    log(f"  {variant.name}: simulated fabric of {len(fabric_plan.nodes)} nodes built in {built - began:.1f} s")
    baseline: dict[str, int] = {}
    total = variant.warmup + variant.iterations
    ticks = {"next": built + TICK_S}

    def measured_from() -> None:
        baseline.update(totals(fabric))

    def progress(i: int, total_: int, record: Any) -> None:
        phase = "warm-up" if i < variant.warmup else "iteration"
        log(f"  {variant.name} {phase} {i + 1}/{total_}: CCT {record.cct_us / 1e3:.3f} ms (simulated), "
            f"last {record.last_src}->{record.last_dst} ({record.cause})")

    def ticker(state: SimProgress) -> None:
        now = clock()
        if now < ticks["next"]:
            return
        ticks["next"] = now + TICK_S
        done = state.done
        left = f"about {(now - built) * (1 - done) / done:.0f} s left" if done > 0 else "no arrival yet"
        log(f"  {variant.name}: {state.finished}/{total} iterations, {state.arrived:,}/{state.expected:,} arrivals "
            f"in this one, {state.now_ns / 1e6:.3f} ms simulated, {state.events / 1e6:.1f} M events "
            f"({state.events / (now - built):,.0f}/s), {left}")

    tracker = stuck = None
    if variant.deadlock_ns is not None:  # the goodput watch, in simulated time
        tracker = StallTracker(variant.deadlock_ns, variant.deadlock_ns + GIVE_UP_AFTER_DEADLOCK_NS)
        stuck = _watch_goodput(fabric, tracker)
    injected = {"faults": 0}

    def started(i: int, start_ns: int) -> None:
        """The variant's faults in every measured iteration, timed from its start as the emulator's schedule is."""
        if i < variant.warmup:
            return
        for fault in variant.faults:  # "stall" only: experiment.py refuses the others for this backend
            host = fabric.hosts[fault.host]
            fabric.sim.at(start_ns + fault.at_ns, host.stall)
            injected["faults"] += 1
            if fault.duration_ns is not None:
                fabric.sim.at(start_ns + fault.at_ns + fault.duration_ns, host.resume)

    run = run_sim_collective(fabric.sim, fabric.hosts, variant.collective, variant.size, variant.iterations,
                             variant.warmup, variant.senders, variant.mtu, progress, ticker, measured_from, stuck,
                             started)
    if tracker is not None and stuck is not None and stuck():
        log(f"  {variant.name}: no frame reached any host for "
            f"{(variant.deadlock_ns + GIVE_UP_AFTER_DEADLOCK_NS) / 1e9:g} s (simulated): deadlocked; stopped")
    after = totals(fabric)
    wall = clock() - built
    engine = {"events": fabric.sim.events, "wall_s": round(wall, 3), "build_s": round(built - began, 3),
              "events_per_s": round(fabric.sim.events / wall) if wall > 0 else None,
              "simulated_ms": round(fabric.sim.now / 1e6, 6), "nodes": len(fabric_plan.nodes)}
    now = fabric.sim.now
    return SimOutcome(run, {key: after[key] - baseline.get(key, 0) for key in after}, engine,
                      None if tracker is None else tracker.verdict(),
                      pfcwd(fabric) if tracker is not None or variant.faults else None, injected["faults"],
                      {name: round(sum(host.queue.pause.paused_time(p, now) for p in range(PRIORITIES)) / 1e6, 3)
                       for name, host in sorted(fabric.hosts.items())} if variant.faults else None)


def _watch_goodput(fabric: SimFabric, tracker: StallTracker) -> Callable[[], bool]:
    """Sample the RDMA frames the hosts received every SAMPLE_S of simulated time, as the emulator's watch does
    in real time; stop the engine once the tracker says nothing more will come.  Returns whether it did."""
    sim, interval = fabric.sim, int(SAMPLE_S * 1e9)
    state = {"stuck": False}

    def sample() -> None:
        tracker.sample(sim.now, sum(host.frames_received for host in fabric.hosts.values()))
        if tracker.stuck(sim.now):
            state["stuck"] = True
            sim.stop()
        else:
            sim.after(interval, sample)

    sample()  # before the first frame: the first progress counts from here, as the emulator's watch starts first
    return lambda: state["stuck"]
