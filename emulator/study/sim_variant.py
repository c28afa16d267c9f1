"""One variant of an experiment on the simulation backend: the plan, the simulated fabric, the ranks, the counters.

The runner's counterpart of building a fabric and running the coordinator:
the same topology plan, the same switch settings, the same RC attributes
(the path MTU, the local ACK timeout the RNIC would give the QPs at the
link's rate), the same collective plans, so the results are comparable
figure for figure.  Every frame is simulated by the compiled core
(``emulator._core.sim``, built by :func:`~emulator.study.sim_fabric.build_rust_fabric`);
the engine runs with the GIL released, a slice of events at a time, and
this module says between slices how far it got.  What comes back is what
the emulator's path gives the runner: the collective's run and the
fabric's counters over the measured iterations, plus what the engine did
(events, wall time and OMNeT++'s three figures: events per wall second,
simulated seconds per wall second, events per simulated second).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from emulator.collectives.coordinator import CollectiveRun
from emulator.collectives.workload_plan import WorkloadPlan
from emulator.collectives.sim_ranks import SimProgress, run_rust_collective, run_rust_workload
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo
from emulator.model.dcqcn import parse_cc
from emulator.model.nscc import parse_nscc
from emulator.study.experiment import Variant, host_count, needs_of, plan_needs, topology
from emulator.study.sim_fabric import build_rust_fabric, link_faults, rust_pfcwd, uplink_bytes
from emulator.study.stall import GIVE_UP_AFTER_DEADLOCK_NS, SAMPLE_S, StallTracker
from emulator.study.workload_step import step_plan

TICK_S = 10.0  # wall seconds between progress lines
# Memory a simulated variant takes, measured on the compiled backend at fattree,16 (peak RSS of one variant
# alone, bench/bench_sim_rust.py): a QP with its rank's bookkeeping and its flow's record (alltoall-ib, whose
# credits keep the switches' buffers nearly empty: 2.8 GB for 1.05 M QPs, about 1.8 kB each, before the RC
# queues' first buffers held one item: 0.5 GB less since, kept as margin); a node with its
# ports, queues, routes and its share of the frames an all-to-all's incast keeps queued on Ethernet
# (alltoall-lossless 6.0 GB, lossy 5.6 GB: about 1 MiB more per node than IB's; the all-reduce's ring keeps
# few).  The ranks' regions are counted whole, though a page only zeros were written to costs nothing (an
# all-to-all's): that makes up for the estimate's node share on the all-reduce's side (2.3 GB measured).
QP_BYTES = 1_800
NODE_BYTES = 1 << 20
ROUTE_BYTES = 420  # a switch's route to one host, while the builder hands the routes over
BASE_BYTES = 300 << 20  # the interpreter, numpy, the plan


def variant_step(variant: Variant) -> WorkloadPlan | None:
    """A workload variant's step placed on its hosts (None for a collective): made once per process
    (:func:`~emulator.study.workload_step.step_plan`)."""
    if variant.workload is None:
        return None
    return step_plan(variant.workload, host_count(variant.topo), variant.parallel, variant.placement, variant.scale,
                     variant.dilation if variant.model is not None else 1.0)


def sim_variant_bytes(variant: Variant) -> int:
    """About how much memory simulating ``variant`` takes: its QPs, its ranks' regions, its nodes and routes (the
    plan's needs as the experiment's checks found them)."""
    topo = topology(variant.topo)
    hosts = len(topo.hosts(sort=False))
    switches = len(topo.switches(sort=False))
    step = variant_step(variant)
    if step is not None:
        needs = needs_of(step.ranks)
    else:
        needs = plan_needs(variant.collective, hosts, variant.size, variant.senders)
    return (BASE_BYTES + needs.qps * QP_BYTES + sum(map(sum, needs.regions)) + (hosts + switches) * NODE_BYTES
            + hosts * switches * ROUTE_BYTES)


@dataclass
class SimOutcome:
    run: CollectiveRun
    counters: dict[str, int]  # the fabric's counters over the measured iterations
    engine: dict[str, Any]  # events, wall and simulated time, and the rates made of them
    stall: dict[str, Any] | None = None  # with ``deadlock``: the goodput watch's verdict (StallTracker.verdict)
    pfcwd: dict[str, Any] | None = None  # with ``deadlock`` or faults: the PFC watchdogs' storms, restorations, drops
    faults: int = 0  # faults injected
    paused_ms_by_host: dict[str, float] | None = None  # with faults: each host's time paused, over the whole run
    uplinks: dict[str, int] | None = None  # bytes each uplink sent over the whole run (sim_fabric.uplink_bytes)


def engine_figures(events: int, wall_s: float, simulated_ns: int) -> dict[str, float | None]:
    """OMNeT++'s three figures of a run: events per wall second, simulated seconds per wall second, events per
    simulated second (the last one is the model's, whatever the machine)."""
    simulated_s = simulated_ns / 1e9
    return {"events_per_s": round(events / wall_s) if wall_s > 0 else None,
            "simsec_per_s": round(simulated_s / wall_s, 9) if wall_s > 0 else None,
            "events_per_simsec": round(events / simulated_s) if simulated_s > 0 else None}


def run_sim_variant(variant: Variant, log: Callable[[str], None],
                    clock: Callable[[], float] = time.monotonic) -> SimOutcome:
    """Run ``variant`` in simulated time, saying every TICK_S how far it got and about how long is left."""
    began = clock()
    fabric_plan = make_plan(build_topo(variant.topo), "sim", variant.link)
    names = [node.name for node in fabric_plan.hosts()]
    uet = variant.fabric == "uet"  # its cc is NSCC's
    fabric = build_rust_fabric(fabric_plan, variant.fabric, dict(variant.switch),
                               cc=None if uet else parse_cc(variant.cc), nscc=parse_nscc(variant.cc) if uet else None,
                               dilation=variant.dilation if variant.model is not None else None, seed=variant.seed,
                               spray=variant.spray, mtu=variant.mtu, routing=variant.routing, rccc=variant.rccc)
    built = clock()
    log(f"  {variant.name}: simulated fabric of {len(fabric_plan.nodes)} nodes built in {built - began:.1f} s")
    total = variant.warmup + variant.iterations
    ticks = {"next": built + TICK_S}

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

    tracker = None
    if variant.deadlock_ns is not None:  # the goodput watch, in simulated time
        tracker = _watch_goodput(fabric, StallTracker(variant.deadlock_ns,
                                                      variant.deadlock_ns + GIVE_UP_AFTER_DEADLOCK_NS))
    # "stall" and "down": experiment.py refuses the others for this backend
    fabric.set_faults([(names.index(f.host), f.at_ns, f.duration_ns) for f in variant.faults if f.kind == "stall"])
    fabric.set_link_faults(link_faults(fabric_plan, variant.faults,
                                       variant.routing if variant.fabric == "ib" else None))
    step = variant_step(variant)
    if step is None:
        run = run_rust_collective(fabric, names, variant.collective, variant.size, variant.iterations,
                                  variant.warmup, variant.senders, variant.mtu, progress, ticker)
    else:
        run = run_rust_workload(fabric, names, step, variant.iterations, variant.warmup, variant.mtu, progress,
                                ticker)
    if fabric.stuck:
        log(f"  {variant.name}: no frame reached any host for "
            f"{(variant.deadlock_ns + GIVE_UP_AFTER_DEADLOCK_NS) / 1e9:g} s (simulated): deadlocked; stopped")
    after, baseline = fabric.totals(), fabric.baseline() or {}
    wall = clock() - built
    engine = {"events": fabric.events, "wall_s": round(wall, 3), "build_s": round(built - began, 3),
              **engine_figures(fabric.events, wall, fabric.now),
              "simulated_ms": round(fabric.now / 1e6, 6), "nodes": len(fabric_plan.nodes)}
    log(f"  {variant.name}: {fabric.events:,} events in {wall:.1f} s: {engine['events_per_s'] or 0:,} events/s, "
        f"{engine['simsec_per_s'] or 0:.3g} simulated s per s, {engine['events_per_simsec'] or 0:,} events per "
        f"simulated s")
    return SimOutcome(run, {key: after[key] - baseline.get(key, 0) for key in after}, engine,
                      None if tracker is None else tracker.verdict(),
                      rust_pfcwd(fabric_plan, fabric) if tracker is not None or variant.faults else None,
                      fabric.faults_injected,
                      {name: round(ns / 1e6, 3) for name, ns in sorted(zip(names, fabric.paused_ns_by_host()))}
                      if variant.faults else None, uplink_bytes(fabric_plan, fabric) or None)


def _watch_goodput(fabric: Any, tracker: StallTracker) -> StallTracker:
    """Sample the RDMA frames the hosts received every SAMPLE_S of simulated time, as the emulator's watch does
    in real time; the engine stops once the tracker says nothing more will come (``fabric.stuck``).  The first
    sample is taken now, before the first frame, as the emulator's watch starts first."""

    def sample(now: int, frames: int) -> bool:
        tracker.sample(now, frames)
        return tracker.stuck(now)

    fabric.watch(int(SAMPLE_S * 1e9), sample)
    return tracker
