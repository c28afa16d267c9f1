"""``fabric-emu run``: every variant of an experiment on a fresh fabric.

Each variant builds its own fabric (so no variant inherits another's queues
or counters), runs its collective through the coordinator, and appends its
summary to ``results.json`` and its rows to the CSV files at once: an
interrupted run keeps every finished variant (``complete`` stays false).
At the end the report (:mod:`emulator.study.report`) prints the table and draws
the plots from the directory alone, as ``fabric-emu report`` does later.
"""

from __future__ import annotations

import contextlib
import csv
import io
import multiprocessing
import multiprocessing.connection
import json
import math
import os
import pickle
import shutil
import signal
import statistics
import threading
import time
from collections import deque
from datetime import datetime, timezone
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterator

from emulator.fabric.capacity import KEEP_FREE_BYTES, check_capacity, meminfo_bytes
from emulator._core.sim import message_counts
from emulator.collectives.algorithms import RankPlan, bus_factor, plan, slice_span, victim_flow
from emulator.collectives.coordinator import CollectiveRun, IterationResult, run_collective
from emulator.errors import FabricError
from emulator.study.experiment import (Experiment, Fault, Variant, host_count, results_directory, run_config,
                                       topology)
from emulator.fabric.agent_control import query_agent
from emulator.fabric.builder import Fabric
from emulator.fabric.link_state import set_link
from emulator.fabric.plan import hop_distances, link_params, make_plan
from emulator.fabric.stats import explained_by_faults, uplink_bytes
from emulator.model.dcqcn import parse_cc
from emulator.model.nscc import parse_nscc
from emulator.study.sim_variant import run_sim_variant, sim_variant_bytes, variant_step
from emulator.study.workload_step import ideal_step_us, op_link_us, step_figures
from emulator.study.stall import GIVE_UP_AFTER_DEADLOCK_NS, GoodputWatch, StallTracker
from emulator._core.rc import RcConfig, default_timeout_ns
from emulator.model.dilation import modelled_us
from emulator._core.rdma_params import ROCE_OVERHEAD, message_wire_bytes
from emulator.fabric.topospec import build_topo
from emulator.safefiles import Outputs, append_inside
from emulator.study import calibration
from emulator.study.stats import percentile
from emulator.units import format_rate, format_size

ITERATION_FIELDS = ["variant", "iteration", "start_ns", "cct_us", "start_skew_us", "last_src", "last_dst", "cause",
                    "retransmissions", "paused_us"]
FLOW_FIELDS = ["variant", "iteration", "src", "dst", "bytes", "fct_us", "retransmissions", "timeouts"]
COUNTERS = ("drops", "pfc_sent", "ecn_marked", "host_paused_ns", "cnps_received", "paced_waits", "ib_credit_stalls",
            "host_pfc_sent", "tx_frames", "trimmed")


def run_experiment(experiment: Experiment, out_root: str, log: Callable[[str], None]) -> str:
    """Run every variant; returns the results directory.

    Before anything is written or built: every variant must fit on this
    machine (:func:`_check_fits`), and the results directory must be
    created with its first files.
    """
    workers = _check_fits(experiment, log)
    now = datetime.now(timezone.utc)
    directory = results_directory(out_root, experiment.name, now)
    config = run_config(experiment, None, now)
    results: dict[str, Any] = {"experiment": experiment.name, "created_utc": config["created_utc"],
                               "complete": False, "variants": []}
    try:
        os.makedirs(directory)
    except OSError as err:
        raise FabricError(f"--out {out_root!r}: cannot create {err.filename or directory!r}: "
                          f"{err.strerror or err}") from None
    try:
        _write_json(os.path.join(directory, "config.json"), config)
        _write_json(os.path.join(directory, "results.json"), results)
        for name, fields in (("iterations.csv", ITERATION_FIELDS), ("flows.csv", FLOW_FIELDS)):
            _write_file(os.path.join(directory, name), _csv([fields]))
    except FabricError as err:
        shutil.rmtree(directory, ignore_errors=True)
        raise FabricError(f"--out {out_root!r}: {err}") from None
    log(f"results go to {directory}")
    numbers = {variant.name: number for number, variant in enumerate(experiment.variants, start=1)}

    def finished(summary: dict[str, Any], rows: tuple[bytes, bytes]) -> None:
        results["variants"].append(summary)
        _write_json(os.path.join(directory, "results.json"), results)
        _append_rows(directory, rows)

    def announce(variant: Variant) -> None:
        log(f"variant {numbers[variant.name]}/{len(experiment.variants)} {variant.name}: {variant.collective} of "
            f"{variant.size} bytes on {variant.topo}, {variant.fabric}, {variant.warmup}+{variant.iterations} "
            f"iterations{', simulated' if variant.backend == 'sim' else ''}")

    # Emulated variants one after another: each needs every core to itself.  Then the simulated ones, in
    # parallel over the cores (each is one process's work, and none can be made unfaithful by the others).
    for number, variant in enumerate((v for v in experiment.variants if v.backend == "emulator"), start=1):
        announce(variant)
        summary, run = _run_variant(variant, directory, config, log)
        finished(summary, csv_rows(variant.name, run.iterations))
        if number == 1:  # the first fabric's kernel probe stands for the run's machine
            _write_json(os.path.join(directory, "config.json"), config)
    simulated = [v for v in experiment.variants if v.backend == "sim"]
    for variant in simulated:
        announce(variant)
    for summary, rows in _run_simulated(simulated, workers, log):
        finished(summary, rows)
    order = {name: index for index, name in enumerate(numbers)}
    results["variants"].sort(key=lambda summary: order[summary["name"]])
    _add_predictions(experiment, results["variants"])
    results["complete"] = True
    _write_json(os.path.join(directory, "results.json"), results)
    _calibrate(experiment, results, log)
    return directory


def _calibrate(experiment: Experiment, results: dict[str, Any], log: Callable[[str], None],
               path: str | None = None) -> None:
    """A run swept over the link rate measured where this machine keeps up: into the machine's calibration.

    Emulated variants only (a simulated one is faithful at any rate).  A cache that cannot be used is replaced;
    one that cannot be written is one line, and the results stand without it.
    """
    swept = {v.name: v.params["bw"] for v in experiment.variants if "bw" in v.params}
    if not swept:
        return
    shapes = calibration.measured(results["variants"], swept)
    if not shapes:
        log("calibration: nothing recorded; only emulated variants with a fidelity verdict are (a simulation is "
            "faithful at any rate)")
        return
    try:
        old = calibration.load(path)
    except calibration.UnusableCache as err:
        log(f"{err.problem}: replaced")
        old = None
    try:
        calibration.save(calibration.merge(old, shapes, results["created_utc"]), path)
    except FabricError as err:
        log(f"calibration not saved: {err}")
        return
    for key, entry in shapes.items():
        rate = entry["fastest_faithful_bps"]
        log(f"calibration: {key}: fastest faithful rate {format_rate(rate) if rate else 'none of those swept'}")
    log(f"calibration saved to {path or calibration.CACHE} (`fabric-emu calibration` shows it; "
        'bw = "calibrated" uses it)')


def _run_variant(variant: Variant, directory: str, config: dict[str, Any],
                 log: Callable[[str], None]) -> tuple[dict[str, Any], CollectiveRun]:
    telemetry = os.path.join(directory, "telemetry", variant.name)
    capture = os.path.join(directory, "pcap", variant.name) if variant.capture else None
    net = Fabric(build_topo(variant.topo), link=dict(variant.link), spec=variant.topo, fabric=variant.fabric,
                 switch=dict(variant.switch), seed=variant.seed, capture=capture, telemetry=telemetry, log=log,
                 cc=None if variant.fabric == "uet" else parse_cc(variant.cc),
                 nscc=parse_nscc(variant.cc) if variant.fabric == "uet" else None,
                 dilation=variant.dilation if variant.model is not None else None,
                 spray=variant.spray, routing=variant.routing, rccc=variant.rccc)
    with net:
        if config["features"] is None and net.features is not None:
            config["features"] = net.features.as_dict()
        baseline = deque([_counters(net)], maxlen=1)  # fabric counters when the measured iterations begin
        net.reset_fidelity()  # the monitor judges the iterations, not the build

        def progress(i: int, total: int, record: IterationResult) -> None:
            if i == variant.warmup - 1:
                baseline.append(_counters(net))
                net.reset_fidelity()
            phase = "warm-up" if i < variant.warmup else "iteration"
            log(f"  {variant.name} {phase} {i + 1}/{total}: CCT {record.cct_us / 1e3:.1f} ms, "
                f"start skew {record.start_skew_us:.0f} us, last {record.last_src}->{record.last_dst} "
                f"({record.cause})")

        def ready() -> None:  # no warm-up: the measured iterations begin now, after the ranks' start-up
            if not variant.warmup:
                baseline.append(_counters(net))
                net.reset_fidelity()

        faults = FaultSchedule(net, variant.faults, log)

        def started(i: int, start_ns: int) -> None:
            if i >= variant.warmup:
                faults.iteration(start_ns)

        tracker = abort = None
        if variant.deadlock_ns is not None:
            tracker = StallTracker(variant.deadlock_ns, variant.deadlock_ns + GIVE_UP_AFTER_DEADLOCK_NS)
            abort = threading.Event()
        with faults, GoodputWatch(tracker, lambda: _delivered(net), abort) if tracker is not None and abort \
                else contextlib.nullcontext():
            try:
                run = run_collective(net, variant.collective, variant.size, variant.iterations, variant.warmup,
                                     variant.senders, variant.mtu, progress, abort, ready, started,
                                     step=variant_step(variant))
            except FabricError:
                if abort is None or not abort.is_set():
                    raise
                log(f"  {variant.name}: no frame reached any host for "
                    f"{(variant.deadlock_ns + GIVE_UP_AFTER_DEADLOCK_NS) / 1e9:g} s: deadlocked; the ranks were stopped")
                run = CollectiveRun([node.name for node in net.hosts], [], [])
        stats = net.stats()
    if variant.faults:  # the variant's own faults explain a loss even where they left no trace in the counters
        stats = explained_by_faults(stats, "the variant's faults")
    after = {key: stats["totals"][key] for key in COUNTERS}
    fabric_delta = {key: after[key] - baseline[0][key] for key in COUNTERS}
    if not run.iterations:
        summary = stopped_summary(variant, run, fabric_delta, stats["fidelity"])
    else:
        summary = summarize_variant(variant, run, fabric_delta, stats["fidelity"])
    summary["losses"] = stats["losses"]
    sent_up = uplink_bytes(net.plan, stats["switches"])
    if any(sent_up.values()):  # the whole run's, warm-up included (the switches' counters are not reset)
        summary["uplinks"] = sent_up
        summary["uplink_balance"] = uplink_balance(sent_up)
    if tracker is not None:
        summary.update(tracker.verdict())
    if tracker is not None or variant.faults:
        summary["pfcwd"] = {key: stats["totals"][key] for key in ("pfcwd_storms", "pfcwd_restorations", "pfcwd_drops")}
        summary["pfcwd"]["stormed_ports"] = sorted(
            f"{switch}:{ifname}" for switch, counters in stats["switches"].items()
            for ifname, port in counters["ports"].items() if any(q["pfcwd_storms"] for q in port["priorities"]))
    if variant.faults:
        summary["faults"] = faults.injected
        summary["paused_ms_by_host"] = {host: round(sum(h["paused_ns"]) / 1e6, 3)
                                        for host, h in sorted(stats["hosts"].items())}
    return summary, run


def _check_fits(experiment: Experiment, log: Callable[[str], None]) -> int:
    """Every variant on this machine, before the first one runs (a refusal after an emulated variant ran left a
    results directory behind): the emulated ones' namespaces and processes, once per topology, and the
    simulated ones' memory.  Returns how many simulated variants run at once."""
    emulated: dict[str, Variant] = {}
    for variant in experiment.variants:
        if variant.backend == "emulator":
            emulated.setdefault(variant.topo, variant)
    for spec, variant in emulated.items():
        topo = topology(spec)
        check_capacity(f"variant {variant.name} ({spec})", len(topo.nodes(sort=False)), len(topo.links(sort=False)))
    return _simulation_workers([v for v in experiment.variants if v.backend == "sim"], log)


def _simulation_workers(variants: list[Variant], log: Callable[[str], None]) -> int:
    """How many simulated variants run at once: one per core, as many as the memory holds; one line if the
    largest does not fit alone."""
    workers = min(len(variants), os.cpu_count() or 1)
    available = meminfo_bytes("MemAvailable")
    if variants and available is not None:
        needs = {variant.name: sim_variant_bytes(variant) for variant in variants}
        largest = max(variants, key=lambda variant: needs[variant.name])
        need = needs[largest.name]
        room = available - KEEP_FREE_BYTES
        if need > room:
            raise FabricError(f"variant {largest.name} ({largest.collective} on {largest.topo}, simulated) needs about "
                              f"{format_size(need)} of memory; this machine has {format_size(max(available, 0))} "
                              f"available and keeps {format_size(KEEP_FREE_BYTES)} free: use a smaller topology")
        if workers > 1 and need * workers > room:
            workers = max(1, room // need)
            log(f"simulated variants: {workers} at a time (about {format_size(need)} each, "
                f"{format_size(max(room, 0))} of memory to use)")
    return workers


def _run_simulated(variants: list[Variant], workers: int,
                   log: Callable[[str], None]) -> Iterator[tuple[dict[str, Any], tuple[bytes, bytes]]]:
    """The simulated variants, ``workers`` at a time (a process each, forked: ``log`` goes with it); each as it
    finishes, its summary and its CSV rows (:func:`csv_rows`, made in the worker: an all-to-all on fattree,16
    has a million flows, and sending them to this process as objects, then formatting them here, took about
    ten seconds a variant with the other core idle).  The longest start first (:func:`_longest_first`), so
    that the last to finish is a short one."""
    variants = _longest_first(variants)
    if workers <= 1:
        for variant in variants:
            yield _sim_rows(variant, log)
        return
    # A fresh process per variant: one that ran an all-to-all keeps its heap, and the next variant's would come
    # on top of it.  Processes of our own, not a Pool: Pool.terminate raced its own worker handler, which could
    # start a replacement worker that then waited forever on a queue lock a killed worker held.
    context = multiprocessing.get_context("fork")
    waiting = deque(variants)
    running: dict[Connection, BaseProcess] = {}  # the result pipe's reading end -> its process
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                reader, writer = context.Pipe(duplex=False)
                process = context.Process(target=_sim_child, args=(waiting.popleft(), log, writer), daemon=True)
                process.start()
                writer.close()
                running[reader] = process
            for reader in multiprocessing.connection.wait(list(running)):
                process = running.pop(reader)
                try:
                    ok, value = reader.recv()
                except EOFError:
                    process.join()
                    raise FabricError(f"a simulation process ended without a result (exit code {process.exitcode})"
                                      ) from None
                finally:
                    reader.close()
                process.join()
                if not ok:
                    raise value
                yield value
    finally:  # Ctrl-C or a failed variant: the others stop now, not when they finish
        for process in running.values():
            process.terminate()
        for reader, process in running.items():
            process.join()
            reader.close()


def _sim_child(variant: Variant, log: Callable[[str], None], writer: Connection) -> None:
    """A simulation process: the variant's rows, or its error, through ``writer``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runner's to handle: it stops every process
    try:
        result: tuple[bool, Any] = (True, _sim_rows(variant, log))
    except Exception as error:  # handed to the runner, which raises it
        result = (False, error)
    try:
        writer.send(result)
    except (TypeError, AttributeError, pickle.PicklingError):  # an error that does not pickle: its text
        writer.send((False, FabricError(f"variant {variant.name}: {type(result[1]).__name__}: {result[1]}")))
    writer.close()


def _longest_first(variants: list[Variant]) -> list[Variant]:
    """The variants in the order to start them: the largest (most QPs and regions, the most frames) first, and
    of equal size an IB one first (its credit updates make it the slowest: a third more events than on
    Ethernet at fattree,16, docs/performance.md); the sort is stable, so the experiment's order otherwise."""
    return sorted(variants, key=lambda variant: (sim_variant_bytes(variant), variant.fabric == "ib"), reverse=True)


def _rank_plans(variant: Variant, hosts: int) -> list[RankPlan]:
    step = variant_step(variant)
    return plan(variant.collective, hosts, variant.size, variant.senders) if step is None else step.ranks


def _sim_rows(variant: Variant, log: Callable[[str], None]) -> tuple[dict[str, Any], tuple[bytes, bytes]]:
    summary, run = _run_sim_variant(variant, log)
    return summary, csv_rows(variant.name, run.iterations)


def _run_sim_variant(variant: Variant, log: Callable[[str], None]) -> tuple[dict[str, Any], CollectiveRun]:
    """A variant on the simulation backend: the same summary, its fidelity the engine's (simulated time cannot
    fall behind: nothing to judge), and what the engine did."""
    outcome = run_sim_variant(variant, log)
    if outcome.run.iterations:
        summary = summarize_variant(variant, outcome.run, outcome.counters)
    else:
        summary = stopped_summary(variant, outcome.run, outcome.counters, {})
    summary["fidelity"] = {"faithful": True, "unfaithful": {},
                           "why": "simulated time: the models run at the time they model, whatever the CPU"}
    summary["losses"] = None  # the simulation's drops are its switches' (``drops``); no kernel loses a frame
    if outcome.stall is not None:
        summary.update(outcome.stall)
    if outcome.pfcwd is not None:
        summary["pfcwd"] = outcome.pfcwd
    if variant.faults:
        summary["faults"] = outcome.faults
        summary["paused_ms_by_host"] = outcome.paused_ms_by_host
    if outcome.uplinks:
        summary["uplinks"] = outcome.uplinks
        summary["uplink_balance"] = uplink_balance(outcome.uplinks)
    summary["engine"] = outcome.engine
    return summary, outcome.run


def uplink_balance(uplinks: dict[str, int]) -> float | None:
    """How unevenly the uplinks carried the load: the busiest one's bytes over the mean (1.0: perfectly even;
    per-flow ECMP's collisions raise it, spraying brings it back); None when no byte went up."""
    mean = sum(uplinks.values()) / len(uplinks) if uplinks else 0
    return round(max(uplinks.values()) / mean, 3) if mean else None


class FaultSchedule:
    """The variant's faults, injected at their offsets into every measured iteration (timers), undone at the end."""

    def __init__(self, net: Fabric, faults: tuple[Fault, ...], log: Callable[[str], None]) -> None:
        self.net, self.faults, self.log = net, faults, log
        self.timers: list[threading.Timer] = []
        self.injected = 0  # fault requests the agents accepted
        self._lock = threading.Lock()

    def __enter__(self) -> "FaultSchedule":
        return self

    def iteration(self, start_ns: int) -> None:
        for fault in self.faults:
            self._at(start_ns + fault.at_ns, fault, False)
            if fault.duration_ns is not None:
                self._at(start_ns + fault.at_ns + fault.duration_ns, fault, True)

    def _at(self, when_ns: int, fault: Fault, undo: bool) -> None:
        if fault.link is not None:
            action: Callable[..., None] = self._link
            args: tuple[Any, ...] = (fault.link, undo)
        else:
            action, args = self._send, (fault.host, "resume" if undo else fault.request)
        timer = threading.Timer(max(0.0, (when_ns - time.monotonic_ns()) / 1e9), action, args)
        timer.daemon = True
        with self._lock:
            self.timers.append(timer)
        timer.start()

    def _link(self, link: tuple[str, str], up: bool) -> None:
        assert self.net.state is not None
        try:
            self.log(f"  {set_link(self.net.state, *link, up=up)}")
        except (FabricError, OSError) as err:
            self.log(f"  link {link[0]}-{link[1]} {'up' if up else 'down'} failed: {err}")
            return
        if not up:
            with self._lock:
                self.injected += 1

    def _send(self, host: str, request: str) -> None:
        try:
            reply = query_agent(self.net.control_path(host), request)
        except (OSError, ValueError) as err:
            self.log(f"  fault {request} on {host} not delivered: {err}")
            return
        if "error" in reply:
            self.log(f"  fault {request} on {host} refused: {reply['error']}")
        elif request != "resume":
            with self._lock:
                self.injected += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            timers, self.timers = self.timers, []
        for timer in timers:
            timer.cancel()
        for host in sorted({fault.host for fault in self.faults if fault.link is None}):
            self._send(host, "resume")
        for link in sorted({fault.link for fault in self.faults if fault.link is not None}):
            self._link(link, up=True)


def _delivered(net: Fabric) -> int:
    """RDMA frames every host's RNIC has received so far (the goodput watch's measure of progress)."""
    return sum(query_agent(net.control_path(host.name), "received")["frames_received"] for host in net.hosts)


def stopped_summary(variant: Variant, run: CollectiveRun, counters: dict[str, int],
                    fidelity: dict[str, Any]) -> dict[str, Any]:
    """The results.json entry of a variant whose collective never finished (a deadlock): no CCT, the counters."""
    return {**_setup_and_counters(variant, len(run.hosts), counters), "iterations": 0, "cct_us": None,
            "retransmissions": None, "fidelity": fidelity}


def _setup_and_counters(variant: Variant, hosts: int, counters: dict[str, int]) -> dict[str, Any]:
    """What every results.json entry has: the variant as set up, and the fabric's counters over its measured part."""
    return {
        "name": variant.name, "backend": variant.backend, "fabric": variant.fabric, "collective": variant.collective,
        "topo": variant.topo,
        "hosts": hosts, "size": variant.size, "senders": variant.senders, "warmup": variant.warmup,
        "params": variant.params, "link": variant.link, "switch": variant.switch, "mtu": variant.mtu,
        "drops": counters["drops"], "pfc_sent": counters["pfc_sent"], "ecn_marked": counters["ecn_marked"],
        "cc": variant.cc, "cnps": counters["cnps_received"], "paced_waits": counters["paced_waits"],
        "ib_credit_stalls": counters["ib_credit_stalls"], "paused_ms": round(counters["host_paused_ns"] / 1e6, 3),
        "trimmed": counters["trimmed"], "spray": variant.spray, "routing": variant.routing,
        "rccc": variant.rccc,
    }


def _counters(net: Fabric) -> dict[str, int]:
    totals = net.stats()["totals"]
    return {key: totals[key] for key in COUNTERS}


def summarize_variant(variant: Variant, run: CollectiveRun, counters: dict[str, int],
                      fidelity: dict[str, Any] | None = None) -> dict[str, Any]:
    """The results.json entry of one variant, from its measured iterations and the fabric's ``counters`` over them.

    ``fidelity`` is the monitor's verdict over the measured iterations (the agents' figures were reset
    when the warm-up ended).
    """
    step = variant_step(variant)
    ccts = [it.cct_us for it in run.iterations]
    skews = [it.start_skew_us for it in run.iterations]
    ranks = len(run.hosts)
    mean_s = statistics.fmean(ccts) / 1e6
    bound_us = link_time_us(variant)
    algbw = variant.size / mean_s * 8 / 1e9 if variant.collective not in ("incast", "victim") else \
        variant.size * (variant.senders or ranks - 1) / mean_s * 8 / 1e9
    causes = {"retransmission": 0, "pause": 0, "queueing": 0}
    for it in run.iterations:
        causes[it.cause] += 1
    return {
        **_setup_and_counters(variant, ranks, counters), "iterations": len(ccts),
        # to the ns: a simulated all-reduce of 8 B at 400 Gbit/s takes 0.1 us, and fabric-emu nccl's time is this mean
        "cct_us": {stat: round(value, 3) for stat, value in (
            ("p50", percentile(ccts, 50)), ("p99", percentile(ccts, 99)), ("max", max(ccts)),
            ("mean", statistics.fmean(ccts)), ("min", min(ccts)))},
        "algbw_gbps": round(algbw, 6), "busbw_gbps": round(algbw * bus_factor(variant.collective, ranks), 6),
        "retransmissions": sum(it.retransmissions for it in run.iterations),
        "timeouts": sum(f.timeouts for it in run.iterations for f in it.flows),
        "start_skew_us": round(max(skews), 1), "start_skew_p99_us": round(percentile(skews, 99), 1),
        "start_late_max_us": round(max(it.start_late_us for it in run.iterations), 1),
        "stragglers": causes, "verified": all(it.verified for it in run.iterations),
        "link_time_us": round(bound_us, 1), "cct_over_link_time": round(statistics.fmean(ccts) / bound_us, 3),
        "model": None if variant.model is None else modelled(variant, ccts, bound_us),
        "fidelity": fidelity if fidelity is None else with_bound_check(fidelity, statistics.fmean(ccts), bound_us,
                                                                         counters, run),
        "victim": victim_summary(variant, run) if variant.collective == "victim" else None,
        **({} if step is None else {"workload": step_figures(step, run)}),
    }


def modelled(variant: Variant, ccts: list[float], bound_us: float) -> dict[str, Any]:
    """The variant's times in the modelled fabric's time: emulated times divided by D (model.dilation)."""
    factor = variant.dilation
    return {"rate": variant.model, "dilation": factor, "link_time_us": round(modelled_us(bound_us, factor), 4),
            "cct_us": {stat: round(modelled_us(value, factor), 4) for stat, value in (
                ("p50", percentile(ccts, 50)), ("p99", percentile(ccts, 99)), ("max", max(ccts)),
                ("mean", statistics.fmean(ccts)), ("min", min(ccts)))}}


def victim_summary(variant: Variant, run: CollectiveRun) -> dict[str, Any]:
    """The victim flow's goodput per measured iteration (its bytes over its completion time), and as a share
    of its link's rate."""
    src, dst = (run.hosts[rank] for rank in victim_flow(len(run.hosts)))
    goodput = [f.bytes * 8 / f.fct_us for it in run.iterations for f in it.flows if (f.src, f.dst) == (src, dst)]
    rate_mbps = link_params({}, variant.link).bw_bps / 1e6
    mean = statistics.fmean(goodput)
    return {"src": src, "dst": dst, "goodput_mbps": {"mean": round(mean, 4), "p50": round(percentile(goodput, 50), 4),
                                                     "min": round(min(goodput), 4)},
            "link_share": round(mean / rate_mbps, 4)}


def link_time_us(variant: Variant) -> float:
    """The collective's link-time bound: the busiest host link's bytes of one iteration at the link rate.

    Every byte a host sends or receives crosses its own link, so no fabric
    can finish an iteration sooner (steps, ACKs and the switch's
    store-and-forward come on top: a few frame times per step).
    """
    rate = link_params({}, variant.link).bw_bps
    native_ib = variant.fabric == "ib"
    step = variant_step(variant)
    if step is not None:
        return ideal_step_us(step, op_link_us(step, lambda length: message_wire_bytes(length, variant.mtu, native_ib),
                                              rate, variant.mtu))
    try:  # counted by the compiled plans: Python's would make a ring all-reduce's million steps (10 s at 1,024)
        sent, received = message_counts(variant.collective, host_count(variant.topo), variant.size, variant.senders)
    except ValueError as error:
        raise FabricError(str(error)) from None
    return max(sum(count * message_wire_bytes(length, variant.mtu, native_ib) for length, count in link)
               for link in sent + received) * 8 / rate * 1e6


CREDIT_STALL_SHARE = 0.01  # measured: 1 to 6 stalls in thousands of frames uncongested, 15,922 in multi-job's IB
BOUND_SLACK = 1.10  # a mean CCT above 1.10x the link-time bound needs a cause in the fabric


def with_bound_check(fidelity: dict[str, Any], mean_us: float, bound_us: float, counters: dict[str, int],
                     run: CollectiveRun) -> dict[str, Any]:
    """The run's fidelity object, unfaithful too if the collective ran off its link-time bound unexplained.

    The agents' own measures can miss a CPU that paced every sender alike
    (nothing waited long enough anywhere to show); a collective above
    BOUND_SLACK times its bound with no drop or trim, no ECN mark (a queue in the fabric: an uplink two
    flows hashed onto, say), no retransmission, no pause
    (from a switch or a faulty host's NIC), no IB congestion (credit stalls
    on more than CREDIT_STALL_SHARE of the frames forwarded: an agent late
    with its credit updates stalls a few now and then, congestion
    thousands), no CNP and no sender held to its rate by congestion
    control (CNPs of earlier iterations hold a QP's rate down in later ones)
    has no fabric cause left, so the machine is the cause and the figures
    are not the fabric's.
    """
    ratio = mean_us / bound_us
    congested_ib = counters["ib_credit_stalls"] > CREDIT_STALL_SHARE * counters["tx_frames"]
    explained = (counters["drops"] or counters["trimmed"] or counters["ecn_marked"] or counters["pfc_sent"]
                 or counters["host_pfc_sent"] or counters["cnps_received"]
                 or counters["paced_waits"] or congested_ib or any(it.retransmissions for it in run.iterations))
    if ratio <= BOUND_SLACK or explained:
        return fidelity
    reason = (f"mean CCT {ratio:.2f}x the link-time bound ({bound_us / 1e3:.1f} ms) with no drop, "
              "retransmission, pause, credit stall or congestion control to explain it: the agents, not the links, paced the "
              "collective")
    return {**fidelity, "faithful": False, "unfaithful": {**fidelity["unfaithful"], "collective": [reason]}}


def csv_rows(name: str, iterations: list[IterationResult]) -> tuple[bytes, bytes]:
    """A variant's rows of iterations.csv and of flows.csv."""
    return (_csv([[name, it.iteration, it.start_ns, round(it.cct_us, 1), round(it.start_skew_us, 1),
                   it.last_src, it.last_dst, it.cause, it.retransmissions, round(it.paused_us, 1)]
                  for it in iterations]),
            _csv([[name, it.iteration, flow.src, flow.dst, flow.bytes, round(flow.fct_us, 1),
                   flow.retransmissions, flow.timeouts] for it in iterations for flow in it.flows]))


def _append_rows(directory: str, rows: tuple[bytes, bytes]) -> None:
    """A variant's rows (:func:`csv_rows`) onto iterations.csv and flows.csv, never through a link (the runner
    writes as root)."""
    for name, text in zip(("iterations.csv", "flows.csv"), rows):
        with append_inside(directory, name) as f:
            f.write(text)


def _csv(rows: list[list[Any]]) -> bytes:
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue().encode()


def _add_predictions(experiment: Experiment, summaries: list[dict[str, Any]]) -> None:
    """Straggler sweeps: measured mean CCT against 1 - (1 - p)^n times the recovery time.

    Only for variants swept over ``loss`` whose loss-0 sibling (same other
    parameters) ran: that sibling's mean is the baseline.
    """
    by_name = {v.name: v for v in experiment.variants}
    for summary in summaries:
        variant = by_name[summary["name"]]
        if "loss" not in variant.params:
            continue
        siblings = [s for s in summaries if "loss" in by_name[s["name"]].params
                    and float(by_name[s["name"]].params["loss"]) == 0
                    and {k: v for k, v in by_name[s["name"]].params.items() if k != "loss"}
                    == {k: v for k, v in variant.params.items() if k != "loss"}]
        if not siblings:
            continue
        summary["prediction"] = prediction(variant, siblings[0]["cct_us"]["mean"])
        summary["prediction"]["measured_mean_us"] = summary["cct_us"]["mean"]


def prediction(variant: Variant, baseline_mean_us: float) -> dict[str, Any]:
    """The straggler model of ../shared/reference.md for one variant.

    n counts every data packet of one iteration once per link it crosses
    (loss is drawn per link); the recovery time is either one go-back-N
    round (a window of frames resent at the link rate) or the local ACK
    timeout (a lost last packet or ACK is found only by the timer).
    """
    params = link_params({}, variant.link)
    p = params.loss
    fabric_plan = make_plan(build_topo(variant.topo), "predict", variant.link)
    hosts = [node.name for node in fabric_plan.hosts()]  # rank order, as the fabric numbers hosts
    links = {node.name: node.ports for node in fabric_plan.nodes.values()}
    distances = {host: hop_distances(links, host) for host in hosts}
    rank_plans = _rank_plans(variant, len(hosts))
    packets = 0
    for rank, rank_plan in enumerate(rank_plans):
        for step in rank_plan.steps:
            for send in step.sends:
                lengths = (slice_span(send.length, rank_plan.slices, j)[1] for j in range(rank_plan.slices))
                packets += sum(max(1, math.ceil(n / variant.mtu)) for n in lengths) * distances[hosts[send.dst]][hosts[rank]]
    hit = 1 - (1 - p) ** packets
    frame_s = (variant.mtu + ROCE_OVERHEAD + 14) * 8 / params.bw_bps
    largest = max((s.length for rp in rank_plans for st in rp.steps for s in st.sends), default=0)
    gbn_us = min(RcConfig.max_inflight, math.ceil(largest / variant.mtu)) * frame_s * 1e6
    rto_us = default_timeout_ns(params.bw_bps, variant.mtu) / 1e3
    return {"p": p, "packets": packets, "hit_probability": round(hit, 6),
            "recovery_gbn_us": round(gbn_us, 1), "recovery_rto_us": round(rto_us, 1),
            "baseline_mean_us": baseline_mean_us,
            "predicted_gbn_us": round(baseline_mean_us + hit * gbn_us, 1),
            "predicted_rto_us": round(baseline_mean_us + hit * rto_us, 1)}


def _write_file(path: str, data: bytes) -> None:
    """``path`` whole or not at all: a fresh temporary file beside it, renamed over it; never through a link."""
    with Outputs(os.path.dirname(path)) as outputs:
        outputs.write(os.path.basename(path), lambda f: f.write(data))


def _write_json(path: str, data: dict[str, Any]) -> None:
    _write_file(path, json.dumps(data, indent=1).encode())
