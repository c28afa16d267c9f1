"""Run a collective on a fabric: start the ranks, synchronize, measure.

The coordinator lives in the runner's process (root namespace) and starts
one rank process per host (:mod:`emulator.collectives.rank`).  Per
iteration it waits until every rank has posted its receives, picks the
start instant T a few milliseconds ahead on the shared CLOCK_MONOTONIC,
and collects what each rank saw: the RNIC's time stamp of every arrival,
when the RNIC released the rank's first sends (the achieved start), and its
QPs' retransmission counters.  It also reads each host agent's pause time
before and after, to say why the last flow was last.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from emulator.collectives.algorithms import RankPlan, plan
from emulator.collectives.workload_plan import plan_to_json
from emulator.errors import FabricError
from emulator.apps.jsonlines import JsonLines
from emulator.fabric.agent_control import query_agent

if TYPE_CHECKING:
    from emulator.collectives.workload_plan import WorkloadPlan
    from emulator.fabric.builder import Fabric

START_MARGIN_NS = 10_000_000  # T is this far ahead of the moment every rank is ready
MAX_START_MARGIN_NS = 1_000_000_000  # the margin grows (next_margin) up to this


def next_margin(margin_ns: int, late_ns: int) -> int:
    """The start margin after an iteration whose last rank's first sends were released ``late_ns`` after T.

    Every rank must have posted its timed sends before T.  Many ranks on few
    cores (fattree,4's all-to-all: 16 ranks, 15 posts each, each a request
    to its host's verbs server) take longer than START_MARGIN_NS, and then
    the starts are late by what the posting took: the run measures the
    machine.  So a start later than a tenth of the margin grows it by twice
    the lateness (the warm-up iterations are there to find it), never shrinks
    it, and stops at MAX_START_MARGIN_NS.
    """
    if late_ns <= margin_ns // 10:
        return margin_ns
    return min(MAX_START_MARGIN_NS, margin_ns + 2 * late_ns)


REPLY_TIMEOUT_S = 120.0


@dataclass
class Flow:
    src: str
    dst: str
    bytes: int
    fct_us: float
    retransmissions: int
    timeouts: int


@dataclass
class IterationResult:
    """One measured iteration of a collective."""

    iteration: int
    start_ns: int
    cct_us: float
    start_skew_us: float  # spread of the hosts' achieved starts (latest minus earliest)
    start_late_us: float  # how long after T the latest host started
    last_src: str
    last_dst: str
    cause: str  # why the last flow was last: retransmission, pause or queueing
    retransmissions: int
    paused_us: float
    verified: bool
    flows: list[Flow] = field(default_factory=list)
    # A training step's: per rank, each collective's (begun, done) and the rank's end, in ns after the start.
    timelines: list[tuple[list[tuple[int, int]], int]] | None = None


@dataclass
class CollectiveRun:
    hosts: list[str]
    iterations: list[IterationResult]
    warmup: list[IterationResult]


def run_collective(net: "Fabric", collective: str, size: int, iterations: int, warmup: int = 0,
                   senders: int | None = None, mtu: int = 1024,
                   progress: Callable[[int, int, IterationResult], None] | None = None,
                   abort: threading.Event | None = None, ready: Callable[[], None] | None = None,
                   started: Callable[[int, int], None] | None = None,
                   step: "WorkloadPlan | None" = None) -> CollectiveRun:
    """Run ``warmup + iterations`` iterations of ``collective`` over every host of ``net``.

    ``ready`` is called once the ranks are connected, before the first
    iteration (their start-up, a burst of CPU, is then over); ``started``
    with each iteration's number and start instant T (CLOCK_MONOTONIC ns)
    once the ranks have it.

    Setting ``abort`` (a deadlocked fabric: nothing more will come) kills the
    ranks; the wait for their reports then ends in a FabricError.

    With ``step`` (a training step placed by :func:`~emulator.collectives.workload_plan.workload_plan`), each
    rank is sent its part of the step instead of ``collective``'s (hosts beyond the job idle), and each
    result carries the ranks' timelines.
    """
    hosts = [node.name for node in net.hosts]
    if step is None:
        plans = plan(collective, len(hosts), size, senders)  # bad parameters fail before any process starts
    else:
        plans = [step.ranks[r] if r < len(step.ranks) else RankPlan(r, 1, 0, [], ops=()) for r in range(len(hosts))]
    path = os.path.join(net.directory, "collective.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(len(hosts))
    listener.settimeout(30)
    procs: list[subprocess.Popen] = []
    finished = threading.Event()
    try:
        for host in hosts:
            with open(os.path.join(net.directory, f"rank-{host}.log"), "w") as log:
                procs.append(net[host].popen([sys.executable, "-m", "emulator.collectives.rank", path, net.run_name,
                                              host], stdin=subprocess.DEVNULL, stdout=log, stderr=log))
        if abort is not None:
            threading.Thread(target=_kill_on_abort, args=(abort, finished, procs), name="rank-abort",
                             daemon=True).start()
        links = _accept(listener, len(hosts), procs, hosts)
        setup = {"collective": collective, "ranks": len(hosts), "size": size, "senders": senders, "mtu": mtu,
                 "iterations": warmup + iterations}
        infos = {}
        for rank, host in enumerate(hosts):
            part = {} if step is None else {"plan": plan_to_json(plans[rank]), "tail_ns": step.tail_ns}
            links[host].send({**setup, **part, "rank": rank})
        for rank, host in enumerate(hosts):
            infos[rank] = links[host].receive("its QPs")
        for rank, host in enumerate(hosts):
            peers = {str(peer): infos[peer] for peer in plans[rank].peers}
            links[host].send({"peers": peers})
        if ready is not None:
            ready()
        measured, warm = [], []
        previous = {host: {} for host in hosts}
        margin = START_MARGIN_NS
        for i in range(warmup + iterations):
            record = _iteration(net, links, hosts, plans, i, previous, margin, started)
            margin = next_margin(margin, round(record.start_late_us * 1e3))
            (warm if i < warmup else measured).append(record)
            if progress is not None:
                progress(i, warmup + iterations, record)
        for host in hosts:
            links[host].receive("its goodbye")
        for host in hosts:
            links[host].send({"end": True})
        return CollectiveRun(hosts, measured, warm)
    finally:
        finished.set()
        listener.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if os.path.exists(path):
            os.unlink(path)


def _kill_on_abort(abort: threading.Event, finished: threading.Event, procs: list[subprocess.Popen]) -> None:
    while not finished.is_set():
        if abort.wait(0.1):
            for proc in procs:
                proc.kill()
            return


def _accept(listener: socket.socket, count: int, procs: list[subprocess.Popen], hosts: list[str]) -> dict[str, JsonLines]:
    links = {}
    while len(links) < count:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            dead = [h for h, p in zip(hosts, procs) if p.poll() is not None]
            raise FabricError(f"ranks did not start within 30 s{': ' + ', '.join(dead) + ' exited' if dead else ''}"
                              " (see rank-<host>.log in the run directory)") from None
        conn.settimeout(REPLY_TIMEOUT_S)
        link = JsonLines(conn, "a rank")
        node = link.receive("hello")["hello"]
        link.peer = f"the rank on {node}"
        links[node] = link
    return links


def _paused_ns(net: "Fabric", hosts: list[str]) -> dict[str, int]:
    """Each host's total pause time so far (all priorities), from its agent."""
    return {host: sum(query_agent(net.control_path(host), "paused")["paused_ns"]) for host in hosts}


def _iteration(net: "Fabric", links: dict[str, JsonLines], hosts: list[str], plans: list, i: int,
               previous: dict[str, dict[str, list[int]]], margin_ns: int,
               started: Callable[[int, int], None] | None = None) -> IterationResult:
    for host in hosts:
        links[host].receive(f"ready for iteration {i}")
    paused_before = _paused_ns(net, hosts)
    start = time.monotonic_ns() + margin_ns
    for host in hosts:
        links[host].send({"start_ns": start})
    if started is not None:
        started(i, start)
    reports = {host: links[host].receive(f"iteration {i}") for host in hosts}
    paused_after = _paused_ns(net, hosts)
    return summarize(i, start, hosts, plans, reports, previous,
                     {h: paused_after[h] - paused_before[h] for h in hosts})


def summarize(i: int, start: int, hosts: list[str], plans: list, reports: dict[str, dict[str, Any]],
              previous: dict[str, dict[str, list[int]]], paused: dict[str, int]) -> IterationResult:
    """One iteration's metrics from the ranks' reports (pure: unit-tested)."""
    delta: dict[tuple[int, int], tuple[int, int]] = {}  # (src rank, dst rank) -> (retransmissions, timeouts)
    for rank, host in enumerate(hosts):
        for peer, (retrans, timeouts) in reports[host]["counters"].items():
            before = previous[host].get(peer, [0, 0])
            delta[(rank, int(peer))] = (retrans - before[0], timeouts - before[1])
        previous[host] = dict(reports[host]["counters"])
    sizes: dict[tuple[int, int], int] = {}
    for rank, rank_plan in enumerate(plans):
        for step in rank_plan.steps:
            for send in step.sends:
                sizes[(rank, send.dst)] = sizes.get((rank, send.dst), 0) + send.length
    last_arrival: dict[tuple[int, int], int] = {}
    for rank, host in enumerate(hosts):
        for src, _step, stamp in reports[host]["arrivals"]:
            key = (src, rank)
            last_arrival[key] = max(last_arrival.get(key, 0), stamp)
    if not last_arrival:
        raise FabricError(f"iteration {i}: no data arrived anywhere")
    measured = {key: stamp for key, stamp in last_arrival.items() if plans[key[1]].measured}
    if not measured:
        raise FabricError(f"iteration {i}: no data arrived at the measured job's ranks")
    flows = [Flow(hosts[s], hosts[d], sizes.get((s, d), 0), (stamp - start) / 1e3, *delta.get((s, d), (0, 0)))
             for (s, d), stamp in sorted(last_arrival.items())]
    (last_src, last_dst), last_stamp = max(measured.items(), key=lambda item: item[1])
    retrans, timeouts = delta.get((last_src, last_dst), (0, 0))
    if retrans or timeouts:
        cause = "retransmission"
    elif paused.get(hosts[last_src], 0) > 0:
        cause = "pause"
    else:
        cause = "queueing"
    released = [r["released_ns"] for r in reports.values() if r.get("released_ns")]
    skew = max(released) - min(released) if released else 0
    late = max(released) - start if released else 0
    timelines = None
    cct_ns = last_stamp - start
    if any("ops" in report for report in reports.values()):  # a training step: it ends with its last rank
        timelines = [([(a - start, b - start) for a, b in reports[host].get("ops", [])],
                      reports[host].get("end_ns", start) - start) for host in hosts]
        cct_ns = max(end for _, end in timelines)
    return IterationResult(
        timelines=timelines,
        iteration=i, start_ns=start, cct_us=cct_ns / 1e3, start_skew_us=skew / 1e3,
        start_late_us=max(late, 0) / 1e3,
        last_src=hosts[last_src], last_dst=hosts[last_dst], cause=cause,
        retransmissions=sum(r for (_, dst), (r, _) in delta.items() if plans[dst].measured),
        paused_us=sum(paused.values()) / 1e3,
        verified=all(r["verified"] for r in reports.values()), flows=flows)
