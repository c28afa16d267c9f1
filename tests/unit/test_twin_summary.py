"""Differential test: the iteration summary the compiled simulation backend makes (fabric_core::sim::summary)
against the coordinator's own summarize() of the same run's raw reports.

The compiled fabric runs a collective with its ranks' logs kept (``begin_collective(..., raw=True)``): each
record then carries every rank's report as the rank process makes it and each host's pause time. summarize()
of those, with Python's plans, must give exactly the IterationResult the Rust summary gives (CCT, last flow,
cause, retransmissions, pause, skew, every flow), iteration after iteration (the retransmission counters are
deltas from the previous one).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.collectives.algorithms import plan
from emulator.collectives.coordinator import IterationResult, summarize
from emulator.collectives.sim_ranks import SLICE_EVENTS, rust_iteration
from emulator.errors import FabricError
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo
from emulator.study.sim_fabric import build_rust_fabric

pytest.importorskip("emulator._core.sim")

PFC = {"alpha": "0", "threshold": "3000"}  # lossless: a static threshold, XOFF after a few frames
SMALL = {"buffer": "60000"}  # lossy: tail drops, retransmissions


def both(topo: str, fabric: str, switch: dict[str, str], collective: str, size: int,
         senders: int | None, iterations: int = 3) -> list[tuple[IterationResult, IterationResult]]:
    """Per iteration: (the Rust summary's result, summarize() of the same iteration's reports)."""
    fabric_plan = make_plan(build_topo(topo), "sim", {"bw": "10gbit", "delay": "1us", "mtu": "1500"})
    names = [node.name for node in fabric_plan.hosts()]
    rust = build_rust_fabric(fabric_plan, fabric, switch)
    rust.begin_collective(collective, size, senders, iterations - 1, 1, 1024, raw=True)
    records = []
    while True:
        finished = rust.advance(SLICE_EVENTS)
        records += rust.take_records()
        if finished:
            break
    plans = plan(collective, len(names), size, senders)
    previous: dict[str, dict[str, list[int]]] = {name: {} for name in names}
    pairs = []
    for record in records:
        raw = record[12]
        expected = summarize(record[0], record[1], names, plans, dict(zip(names, raw["reports"])), previous,
                             dict(zip(names, raw["paused"])))
        pairs.append((rust_iteration(names, record), expected))
    assert len(pairs) == iterations
    return pairs


CASES = [
    ("star,5", "lossless", PFC, "incast", 131072, None),
    ("star,4", "lossy", SMALL, "incast", 65536, 2),
    ("leafspine,2,1,hosts=3", "lossless", PFC, "victim", 131072, None),
    ("leafspine,2,1,hosts=3", "lossy", SMALL, "multijob", 98304, None),
    ("leafspine,2,1,hosts=3", "lossless", PFC, "multijob", 65536, 0),
    ("ring,4", "lossless", PFC, "shift", 65536, None),
    ("leafspine,2,1,hosts=3", "lossy", SMALL, "alltoall", 98304, None),
    ("fattree,4", "lossy", SMALL, "allreduce", 65536, None),
    ("fattree,4", "lossless", PFC, "allgather", 65536, None),
]


@pytest.mark.parametrize("topo,fabric,switch,collective,size,senders", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_the_rust_summary_is_summarize(topo, fabric, switch, collective, size, senders) -> None:
    for rust, expected in both(topo, fabric, switch, collective, size, senders):
        assert rust == expected


def test_the_cases_reach_every_cause_and_retransmissions() -> None:
    """The cases above are not all quiet: the causes and retransmissions they give (so a summary that got
    them wrong would show)."""
    results = [rust for case in CASES for rust, _ in both(*case)]
    causes = Counter(r.cause for r in results)
    assert set(causes) == {"retransmission", "pause", "queueing"}, causes
    assert any(r.retransmissions for r in results) and any(r.paused_us for r in results)
    assert any(flow.timeouts or flow.retransmissions for r in results for flow in r.flows)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["incast", "victim", "multijob", "shift", "alltoall", "allreduce", "allgather"]),
       st.sampled_from([("lossless", PFC), ("lossy", SMALL)]), st.integers(1, 64).map(lambda kib: kib * 1024),
       st.none() | st.integers(0, 3))
def test_any_small_collective(collective: str, fabric: tuple[str, dict[str, str]], size: int,
                              senders: int | None) -> None:
    try:
        plan(collective, 6, size, senders)
    except FabricError:  # what plan refuses is test_twin_plans' business
        return
    for rust, expected in both("leafspine,2,1,hosts=3", fabric[0], fabric[1], collective, size, senders, 2):
        assert rust == expected
