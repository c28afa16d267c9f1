"""The compiled simulation backend against the Python one with what `run_sim_variant` adds to a fabric: DCQCN,
injected loss, the PFC watchdog, the goodput watch and the stall fault.  Each case must give the same
iterations, counters (every key of ``sim_fabric.totals``), watchdog figures, per-host pause time and event count
on both backends.

The Python side is its backend's path (``run_sim_collective`` on ``build_sim_fabric``, or its variant runner, kept
in sim_python_twin.py, for the watched and faulted variants); the compiled side is ``build_rust_fabric`` with the
same settings, or the runner's own ``run_sim_variant``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from emulator.collectives.sim_ranks import run_rust_collective, run_sim_collective
from emulator.errors import FabricError
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo
from emulator.model.dcqcn import DcqcnParams
from emulator.study.experiment import Variant, load_experiment
from emulator.study.sim_fabric import build_rust_fabric, build_sim_fabric, totals
from emulator.study.sim_variant import SimOutcome, run_sim_variant
from sim_python_twin import run_python_variant

pytest.importorskip("emulator._core.sim")

LINK = {"bw": "10gbit", "delay": "1us", "mtu": "1500"}
PFC = {"alpha": "0", "threshold": "3000"}  # lossless: a static threshold, XOFF after a few frames
ECN = {"kmin": "3000", "kmax": "30000", "pmax": "1"}  # marks early, so DCQCN has CNPs to react to
DCQCN = DcqcnParams(cnp_interval_ns=4000, alpha_period_ns=1000, increase_period_ns=3000, byte_counter=32767,
                    fast_recovery=1, reference_bps=10_000_000_000)
CASES = [
    # (topology, fabric, collective, size, switch, link, cc, what must show)
    ("star,4", "lossless", "incast", 262144, PFC | ECN, LINK, DCQCN, "paced"),
    ("leafspine,2,1,hosts=3", "lossless", "alltoall", 196608, PFC | ECN, LINK, DCQCN, "cnps"),
    ("star,4", "lossy", "incast", 131072, ECN, LINK, DCQCN, "paced"),
    ("star,4", "lossy", "alltoall", 65536, {}, LINK | {"loss": "0.02"}, None, "loss"),
    ("leafspine,2,1,hosts=2", "lossy", "allreduce", 65536, {}, LINK | {"drop": "3:40:41:200"}, None, "loss"),
    ("leafspine,2,1,hosts=2", "lossless", "alltoall", 65536, PFC | ECN, LINK | {"loss": "0.01"}, DCQCN, "loss"),
]


def _fabric_run(topo: str, fabric: str, collective: str, size: int, switch: dict[str, str], link: dict[str, str],
                cc: DcqcnParams | None):
    """Both backends on one plan, 1 warm-up and 2 measured iterations: per backend the run, the totals at the end
    and when the measured iterations began, the events and simulated time, each host's pause time."""
    plan = make_plan(build_topo(topo), "sim", link)
    python = build_sim_fabric(plan, fabric, switch, cc=cc, seed=7)
    baseline: dict[str, int] = {}
    python_run = run_sim_collective(python.sim, python.hosts, collective, size, 2, 1, None, 1024,
                                    measured_from=lambda: baseline.update(totals(python)))
    paused = [sum(host.queue.pause.paused_time(p, python.sim.now) for p in range(8))
              for host in python.hosts.values()]
    rust = build_rust_fabric(plan, fabric, switch, cc=cc, seed=7)
    rust_run = run_rust_collective(rust, [node.name for node in plan.hosts()], collective, size, 2, 1, None, 1024)
    return ((python_run, totals(python), baseline, python.sim.events, python.sim.now, paused),
            (rust_run, rust.totals(), rust.baseline(), rust.events, rust.now, rust.paused_ns_by_host()))


@pytest.mark.parametrize("topo,fabric,collective,size,switch,link,cc,expect", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[7]}" for c in CASES])
def test_dcqcn_and_injected_loss_give_the_same_run(topo, fabric, collective, size, switch, link, cc, expect) -> None:
    python, rust = _fabric_run(topo, fabric, collective, size, switch, link, cc)
    assert rust[0] == python[0]  # every iteration's metrics and flows, warm-up included
    assert rust[1:] == python[1:]  # totals, baseline, events, simulated time, pause time per host
    run, counters = rust[0], rust[1]
    assert all(r.verified for r in run.iterations)
    if expect in ("cnps", "paced"):
        assert counters["cnps_received"] > 0 and counters["ecn_marked"] > 0
        assert (counters["paced_waits"] > 0) == (expect == "paced")  # many QPs take turns: none waits for its rate
    else:
        assert counters["drops"] > 0 and sum(r.retransmissions for r in run.iterations + run.warmup) > 0
    if cc is None:
        assert counters["cnps_received"] == counters["paced_waits"] == 0


def _figures(outcome: SimOutcome) -> dict[str, Any]:
    return {"run": outcome.run, "counters": outcome.counters, "events": outcome.engine["events"],
            "simulated_ms": outcome.engine["simulated_ms"], "stall": outcome.stall, "pfcwd": outcome.pfcwd,
            "faults": outcome.faults, "paused_ms_by_host": outcome.paused_ms_by_host}


def _rust_variant(variant: Variant) -> tuple[dict[str, Any], bool]:
    """``run_sim_variant``'s figures (the compiled backend the runner drives), and whether its watch stopped the
    run (the line it logs then)."""
    lines: list[str] = []
    outcome = run_sim_variant(variant, lines.append)
    return _figures(outcome), any(line.endswith("deadlocked; stopped") for line in lines)


def _python_variant(variant: Variant) -> dict[str, Any]:
    """The same variant on the Python backend (its runner, kept as the twin in sim_python_twin.py)."""
    return _figures(run_python_variant(variant, lambda line: None))


@pytest.mark.parametrize("name,dilation", [("pfc", None), ("dcqcn", None), ("dcqcn-nvidia", None),
                                           ("dcqcn", 500.0)])
def test_the_dcqcn_experiment_gives_the_same_run(name: str, dilation: float | None) -> None:
    """The built-in `dcqcn` (D = 2000 from the constants' reference rate, or a modelled rate's ``dilation``)."""
    variant = next(v for v in load_experiment("dcqcn").variants if v.name == name)
    variant = dataclasses.replace(variant, iterations=1, warmup=1, capture=False, backend="sim")
    if dilation is not None:
        variant = dataclasses.replace(variant, model="10gbit", dilation=dilation)
    python, (rust, stuck) = _python_variant(variant), _rust_variant(variant)
    assert rust == python and not stuck
    assert (rust["counters"]["paced_waits"] > 0) == (name != "pfc")


def test_a_deadlock_stops_both_backends_at_the_same_instant() -> None:
    """The built-in `deadlock`'s PFC variant: the goodput watch, in simulated time, gives up at the same event."""
    pfc = next(v for v in load_experiment("deadlock", backend="sim").variants if v.name == "pfc")
    pfc = dataclasses.replace(pfc, size=1 << 20, iterations=1)
    python, (rust, stuck) = _python_variant(pfc), _rust_variant(pfc)
    assert rust == python
    assert stuck and rust["stall"]["deadlocked"] and not rust["run"].iterations
    assert rust["pfcwd"]["pfcwd_storms"] == 0 and rust["counters"]["pfc_sent"] > 0


def test_the_pfc_watchdog_breaks_the_deadlock_the_same_way() -> None:
    watchdog = next(v for v in load_experiment("deadlock", backend="sim").variants if v.name == "pfcwd")
    watchdog = dataclasses.replace(watchdog, size=1 << 20, iterations=1)
    python, (rust, stuck) = _python_variant(watchdog), _rust_variant(watchdog)
    assert rust == python
    assert not stuck and rust["stall"]["deadlocked"] is False and len(rust["run"].iterations) == 1
    figures = rust["pfcwd"]
    assert figures["pfcwd_storms"] > 0 and figures["pfcwd_drops"] > 0 and figures["pfcwd_restorations"] > 0
    assert figures["stormed_ports"] and all(port.startswith("s") for port in figures["stormed_ports"])


@pytest.mark.parametrize("name", ["storm", "storm-pfcwd"])
def test_a_stalled_nic_storms_the_same_way(name: str) -> None:
    """The built-in `pause-storm`: h8's NIC stalls 100 ms into each measured iteration for 1 s."""
    variant = next(v for v in load_experiment("pause-storm", backend="sim").variants if v.name == name)
    variant = dataclasses.replace(variant, iterations=2, warmup=1)
    python, (rust, stuck) = _python_variant(variant), _rust_variant(variant)
    assert rust == python and not stuck
    assert rust["faults"] == 2 and rust["counters"]["host_pfc_sent"] > 2  # XOFFs, refreshes and XONs
    assert rust["paused_ms_by_host"]["h8"] == 0  # the stalled NIC pauses, is not paused
    if name == "storm":
        assert rust["paused_ms_by_host"]["h6"] > 0 and rust["pfcwd"]["pfcwd_storms"] == 0  # it spread to h8's peers
    if name == "storm-pfcwd":
        assert rust["pfcwd"]["stormed_ports"] and rust["pfcwd"]["pfcwd_drops"] > 0


def test_a_stall_for_good_ends_both_runs_alike_and_a_watch_that_raises_ends_its_own() -> None:
    """A fault with no end holds h1's frames for good: its peers' retries run out at the same instant on both
    backends; a sampler's own exception ends the compiled run as itself."""
    storm = next(v for v in load_experiment("pause-storm", backend="sim").variants if v.name == "storm")
    variant = dataclasses.replace(storm, topo="star,3", collective="alltoall", size=1 << 16, iterations=1, warmup=0,
                                  deadlock_ns=10**9,
                                  faults=(dataclasses.replace(storm.faults[0], host="h1", at_ns=1000, duration_ns=None),))
    errors = []
    for run in (_python_variant, _rust_variant):
        with pytest.raises(FabricError, match="RETRY_EXC_ERR") as raised:
            run(variant)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]

    plan = make_plan(build_topo("star,2"), "sim", LINK)
    fabric = build_rust_fabric(plan, "lossless")

    def broken(now: int, frames: int) -> bool:
        if now:
            raise KeyError("the tracker broke")
        return False

    fabric.watch(1000, broken)
    with pytest.raises(RuntimeError, match="a goodput watch already"):
        fabric.watch(1000, broken)
    with pytest.raises(KeyError, match="the tracker broke"):
        run_rust_collective(fabric, ["h1", "h2"], "alltoall", 1 << 20, 1, 0, None, 1024)
    with pytest.raises(ValueError, match="a fault on host 2 of 2"):
        fabric.set_faults([(2, 0, None)])


def test_refuses_settings_for_other_nodes() -> None:
    from emulator._core.sim import SimFabric

    for key in ("losses", "pfcwd", "cc"):
        with pytest.raises(ValueError, match=f"1 {key} entries for 0"):
            SimFabric([], [], [], **{key: [None]})
