"""A training step as an experiment's variant runs it, and what its results say (pure but for reading the file).

A variant with ``workload = FILE`` runs the step of FILE (:mod:`emulator.workload`) instead of a collective:
its groups placed by :func:`~emulator.collectives.workload_plan.workload_plan` (``parallel``, ``placement``),
every message and compute time times ``scale`` (a step the emulator can carry: the published steps move tens
of GiB), and the compute times also times the variant's time dilation D, as its link delays are: a fabric
emulated at 20 Mbit/s that models 400 Gbit/s waits 20,000 times each compute gap.  Both backends run the same
plans.

From the ranks' timelines (each collective's begin and end) this module reads the step: its time (the last
rank's end, the CCT of every other result), the time in communication, and the *exposed* communication, the
time a rank's compute stream sat waiting for a collective, per collective type and group, and which
collective held the step (the one the slowest rank waited for longest).  A collective that overlaps compute
(a weight gradient's all-reduce) is exposed only for what the step's end waits for it.
"""

from __future__ import annotations

import os
import statistics
from typing import Any, Callable

from emulator.collectives.algorithms import OpSpan
from emulator.collectives.coordinator import CollectiveRun
from emulator.collectives.workload_plan import (DEFAULT_PLACEMENT, WorkloadPlan, issue_times, parse_parallel,
                                                parse_placement, workload_plan)
from emulator.errors import FabricError, printable
from emulator.workload.files import read_workload

_cache: dict[tuple[Any, ...], WorkloadPlan] = {}


def step_plan(path: str, hosts: int, parallel: str, placement: str, scale: float, dilation: float) -> WorkloadPlan:
    """The plans of the step in ``path`` on ``hosts`` hosts (a FabricError of one line for a bad file or
    placement); the same arguments give the same plans, made once per process."""
    try:
        stat = os.stat(path)
    except OSError as err:
        raise FabricError(f"{printable(path)}: {err.strerror}") from None
    key = (os.path.realpath(path), stat.st_mtime_ns, stat.st_size, hosts, parallel, placement, scale, dilation)
    if key not in _cache:
        _cache[key] = workload_plan(read_workload(path), hosts, parse_parallel(parallel) if parallel else None,
                                    parse_placement(placement) if placement else DEFAULT_PLACEMENT, scale, dilation)
    return _cache[key]


def step_bytes(step: WorkloadPlan) -> int:
    """Bytes the step's collectives move as files count them (the variant's ``size``)."""
    return sum(op.size for op in step.ops)


def op_link_us(step: WorkloadPlan, wire_bytes: Callable[[int], int], rate_bps: int, mtu: int) -> list[float]:
    """Each collective's link-time bound: the longest of its members' chains of steps.  A step cannot end
    before its rank's link carried what it sends or what it receives in it (in bytes on the wire:
    ``wire_bytes`` of each message), and its last frame crossed the receiver's link too (store and forward):
    a step's next one waits for its arrivals, so a ring's 2(G-1) steps add up, and a step of one small message
    costs two frame times, not one."""
    received: dict[tuple[int, int], list[int]] = {}  # (rank, step) -> the lengths arriving for it
    for rank_plan in step.ranks:
        for step_ in rank_plan.steps:
            for send in step_.sends:
                received.setdefault((send.dst, send.at_step), []).append(send.length)
    chains = [0] * len(step.ops)
    for rank_plan in step.ranks:
        for span in rank_plan.ops:
            chain = 0
            for k in range(span.first, span.first + span.steps):
                out = [send.length for send in rank_plan.steps[k].sends]
                into = received.get((rank_plan.rank, k), [])
                if out or into:
                    largest = max(out + into)
                    chain += max(sum(map(wire_bytes, out)), sum(map(wire_bytes, into))) + \
                        wire_bytes(min(largest, mtu))
            chains[span.op] = max(chains[span.op], chain)
    return [wire * 8 / rate_bps * 1e6 for wire in chains]


def ideal_step_us(step: WorkloadPlan, op_us: list[float]) -> float:
    """The step if every collective took ``op_us`` (its link-time bound): the longest rank's, compute included,
    as the executors run it (:func:`~emulator.collectives.workload_plan.issue_times`)."""
    ends = []
    for rank_plan in step.ranks:
        compute_free = previous_done = 0
        for span in rank_plan.ops:
            issue = compute_free + span.compute_ns
            done = max(issue, previous_done) + round(op_us[span.op] * 1e3)
            compute_free = max(done, issue) if span.blocking else issue
            previous_done = done
        ends.append(max(compute_free + step.tail_ns, previous_done))
    return max(ends) / 1e3


def step_figures(step: WorkloadPlan, run: CollectiveRun) -> dict[str, Any]:
    """The results.json ``workload`` entry: per measured iteration, then their mean, the step, its compute,
    its communication and the exposed part of it (per collective type and group, on the rank that ended last),
    which collective held the step, and one iteration's timeline per rank with each collective's type and group,
    whether the compute after it waits for it, and the compute after the last (for the report's plot)."""
    per: list[dict[str, Any]] = [_iteration_figures(step, it.timelines or []) for it in run.iterations]
    if not per:
        return {}
    mean = lambda key: round(statistics.fmean(p[key] for p in per), 3)  # noqa: E731 (a short local reading)
    groups: dict[str, dict[str, float]] = {}
    for p in per:
        for name, figures in p["by_type"].items():
            into = groups.setdefault(name, {"count": figures["count"], "bytes": figures["bytes"], "comm_us": 0.0,
                                            "exposed_us": 0.0})
            into["comm_us"] += figures["comm_us"] / len(per)
            into["exposed_us"] += figures["exposed_us"] / len(per)
    holders = [p["held_by"] for p in per]
    held = max(set(h["op"] for h in holders), key=lambda op: sum(h["exposed_us"] for h in holders if h["op"] == op))
    median = sorted(per, key=lambda p: p["step_us"])[len(per) // 2]
    blocking = {span.op: span.blocking for rank_plan in step.ranks for span in rank_plan.ops}
    return {
        "ops": len(step.ops), "ranks": step.world, "parallelism": step.parallelism,
        "placement": ",".join(step.placement), "bytes": step_bytes(step),
        "step_us": mean("step_us"), "compute_us": mean("compute_us"), "comm_us": mean("comm_us"),
        "exposed_us": mean("exposed_us"), "exposed_share": round(mean("exposed_us") / max(mean("step_us"), 1e-9), 4),
        "critical_rank": median["critical_rank"],
        "by_type": {name: {key: round(value, 3) if isinstance(value, float) else value for key, value in g.items()}
                    for name, g in sorted(groups.items())},
        "held_by": {**_op_name(step, held),
                    "exposed_us": round(statistics.fmean(h["exposed_us"] if h["op"] == held else 0.0
                                                         for h in holders), 3),
                    "iterations": sum(h["op"] == held for h in holders)},
        "timeline": median["timeline"],
        # what the report's timeline plot needs to draw the compute stream and colour the collectives
        "op_kinds": [f"{op.kind} {op.group}" for op in step.ops],
        "op_blocking": [blocking.get(op, True) for op in range(len(step.ops))],
        "tail_us": round(step.tail_ns / 1e3, 3),
    }


def _op_name(step: WorkloadPlan, op: int) -> dict[str, Any]:
    o = step.ops[op]
    return {"op": op, "kind": o.kind, "group": o.group, "bytes": o.size, "label": o.label[:80]}


def _compute_free(spans: tuple[OpSpan, ...], times: list[tuple[int, int]], done: list[int]) -> int:
    """When the compute stream is free after the rank's last collective (its compute after it may begin)."""
    free = 0
    for span, (issue, _), end in zip(spans, times, done):
        free = max(end, issue) if span.blocking else issue
    return free


def _iteration_figures(step: WorkloadPlan, timelines: list[tuple[list[tuple[int, int]], int]]) -> dict[str, Any]:
    """One iteration's figures from its timelines (ns after the start)."""
    ranks = []
    for rank_plan, (ops, end) in zip(step.ranks, timelines):
        spans = rank_plan.ops
        done = [b for _, b in ops]
        times = issue_times(spans, 0, done)
        compute = sum(span.compute_ns for span in spans) + step.tail_ns
        exposed = [0] * len(spans)
        for i, span in enumerate(spans):
            if span.blocking:  # the compute after it waits from its issue to its end
                exposed[i] = max(0, done[i] - times[i][0])
        tail_begins = _compute_free(spans, times, done) + step.tail_ns
        waited_from = tail_begins  # the step's end waits for the collectives still running after its compute
        for i, span in enumerate(spans):
            if not span.blocking and done[i] > waited_from:
                exposed[i] += done[i] - waited_from
                waited_from = done[i]
        ranks.append({"end": end, "compute": compute, "ops": ops, "times": times, "exposed": exposed,
                      "comm": sum(b - a for a, b in ops)})
    critical = max(range(len(ranks)), key=lambda r: ranks[r]["end"])
    c = ranks[critical]
    by_type: dict[str, dict[str, Any]] = {}
    for span, (a, b), exposed in zip(step.ranks[critical].ops, c["ops"], c["exposed"]):
        op = step.ops[span.op]
        figures = by_type.setdefault(f"{op.kind} {op.group}", {"count": 0, "bytes": 0, "comm_us": 0.0,
                                                                "exposed_us": 0.0})
        figures["count"] += 1
        figures["bytes"] += op.size
        figures["comm_us"] += (b - a) / 1e3
        figures["exposed_us"] += exposed / 1e3
    worst = max(range(len(c["exposed"])), key=lambda i: c["exposed"][i]) if c["exposed"] else None
    held = {"op": step.ranks[critical].ops[worst].op if worst is not None else 0,
            "exposed_us": c["exposed"][worst] / 1e3 if worst is not None else 0.0}
    timeline = [[[round(issue / 1e3, 3), round(a / 1e3, 3), round(b / 1e3, 3), span.op]
                 for span, (issue, _), (a, b) in zip(step.ranks[r].ops, ranks[r]["times"], ranks[r]["ops"])]
                for r in range(len(ranks))]
    return {"step_us": c["end"] / 1e3, "compute_us": c["compute"] / 1e3, "comm_us": c["comm"] / 1e3,
            "exposed_us": sum(c["exposed"]) / 1e3, "critical_rank": critical, "by_type": by_type, "held_by": held,
            "timeline": {"ranks": timeline, "ends_us": [round(r["end"] / 1e3, 3) for r in ranks]}}
