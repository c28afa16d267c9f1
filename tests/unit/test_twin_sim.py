"""The compiled simulation backend against the Python one: the same small collectives, lossless (PFC) and lossy
(drops, retransmissions), must give identical iterations, counters and event counts.

Both backends schedule the same events at the same points of the same steps, so their engines order them the
same way (time, then scheduling sequence) and a run is the same run event for event.
"""

from __future__ import annotations

import pytest

from emulator.collectives.sim_ranks import run_rust_collective, run_sim_collective
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo
from emulator.study.sim_fabric import build_rust_fabric, build_sim_fabric, totals

pytest.importorskip("emulator._core.sim")

PFC = {"alpha": "0", "threshold": "3000"}  # lossless: a static threshold, XOFF after a few frames
SMALL = {"buffer": "60000"}  # lossy: tail drops
CASES = [
    ("star,4", "lossless", "incast", 262144, PFC, "pfc"),
    ("star,4", "lossy", "incast", 65536, SMALL, "drops"),
    ("leafspine,2,1,hosts=3", "lossless", "alltoall", 393216, PFC, "pfc"),
    ("leafspine,2,1,hosts=3", "lossy", "alltoall", 98304, SMALL, "drops"),
    ("fattree,4", "lossless", "allreduce", 65536, PFC, None),
    ("fattree,4", "lossy", "allreduce", 65536, SMALL, None),
]


def _both(topo: str, fabric: str, collective: str, size: int, switch: dict[str, str]):
    plan = make_plan(build_topo(topo), "sim", {"bw": "10gbit", "delay": "1us", "mtu": "1500"})
    python = build_sim_fabric(plan, fabric, switch)
    baseline: dict[str, int] = {}
    said: tuple[list, list] = ([], [])  # per backend: the progress and ticker calls
    python_run = run_sim_collective(python.sim, python.hosts, collective, size, 2, 1, None, 1024,
                                    lambda *args: said[0].append(args), said[0].append,
                                    measured_from=lambda: baseline.update(totals(python)))
    rust = build_rust_fabric(plan, fabric, switch)
    rust_run = run_rust_collective(rust, [node.name for node in plan.hosts()], collective, size, 2, 1, None, 1024,
                                   lambda *args: said[1].append(args), said[1].append)
    return (python_run, totals(python), baseline, python.sim.events, python.sim.now, said[0]), \
        (rust_run, rust.totals(), rust.baseline(), rust.events, rust.now, said[1])


@pytest.mark.parametrize("topo,fabric,collective,size,switch,expect", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_same_run_on_both_backends(topo, fabric, collective, size, switch, expect) -> None:
    python, rust = _both(topo, fabric, collective, size, switch)
    (python_run, python_totals, python_baseline, python_events, python_now, python_said) = python
    (rust_run, rust_totals, rust_baseline, rust_events, rust_now, rust_said) = rust
    assert [r.cct_us for r in rust_run.iterations] == [r.cct_us for r in python_run.iterations]
    assert rust_run == python_run  # every iteration's metrics and flows, warm-up included
    assert rust_totals == python_totals
    assert rust_baseline == python_baseline  # the counters when the measured iterations began
    assert (rust_events, rust_now) == (python_events, python_now)
    assert rust_said == python_said  # the runner's progress lines and ticks
    assert all(r.verified for r in rust_run.iterations)
    if expect == "pfc":
        assert rust_totals["pfc_sent"] > 0
    elif expect == "drops":
        assert rust_totals["drops"] > 0 and sum(r.retransmissions for r in rust_run.iterations) > 0


def test_refuses_what_it_does_not_simulate_yet() -> None:
    plan = make_plan(build_topo("star,2"), "sim", {"bw": "10gbit", "delay": "1us", "mtu": "1500"})
    with pytest.raises(ValueError, match="no 'ib' fabric"):
        build_rust_fabric(plan, "ib")
