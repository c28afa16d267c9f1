"""The compiled simulation backend against the Python one: the same small collectives, lossless (PFC), lossy
(drops, retransmissions) and ib (credits: the IB planes, the RNICs' IB ports), must give identical iterations,
counters and event counts.

Both backends schedule the same events at the same points of the same steps, so their engines order them the
same way (time, then scheduling sequence) and a run is the same run event for event.
"""

from __future__ import annotations

import pytest

from emulator.collectives.sim_ranks import run_rust_collective, run_sim_collective
from emulator.errors import FabricError
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
SCALE_IB = {"vl_buffer": "128KiB", "fc_floor": "0"}  # the scale experiment's IB switches
TIGHT_IB = {"vl_buffer": "2KiB"}  # one 1 KiB packet in flight per VL: senders wait for every grant
IB_CASES = [
    ("star,4", "ib", "incast", 65536, {}, "stalls"),  # the defaults: 16 frames a VL, grants paced at 500 us
    ("star,4", "ib", "incast", 262144, TIGHT_IB, "stalls"),
    ("star,4", "ib", "allgather", 65536, SCALE_IB, None),
    ("leafspine,2,1,hosts=3", "ib", "alltoall", 393216, {}, "stalls"),
    ("leafspine,2,1,hosts=3", "ib", "alltoall", 393216, SCALE_IB, None),
    ("fattree,4", "ib", "allreduce", 65536, {}, None),
    ("fattree,4", "ib", "alltoall", 32768, SCALE_IB, None),
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


@pytest.mark.parametrize("topo,fabric,collective,size,switch,expect", CASES + IB_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}-{'-'.join(c[4].values()) or 'defaults'}"
                              for c in CASES + IB_CASES])
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
    elif expect == "stalls":
        assert rust_totals["ib_credit_stalls"] > 0
    if fabric == "ib":  # every frame crossed the IB planes, none the MMUs: the planes' count is the whole
        assert rust_totals["tx_frames"] > 0 and rust_totals["pfc_sent"] == rust_totals["drops"] == 0


def test_refuses_a_fabric_it_does_not_know() -> None:
    plan = make_plan(build_topo("star,2"), "sim", {"bw": "10gbit", "delay": "1us", "mtu": "1500"})
    for build in (build_sim_fabric, build_rust_fabric):
        with pytest.raises(ValueError, match="no 'ethernet' fabric"):
            build(plan, "ethernet")


def test_ib_path_mtu_past_the_switch_buffer_fails_alike() -> None:
    """A path MTU whose packets no grant of the switch's VL buffer could cover is refused as the QPs are made,
    with the same message on both backends."""
    plan = make_plan(build_topo("star,2"), "sim", {"bw": "10gbit", "delay": "1us", "mtu": "1500"})
    python = build_sim_fabric(plan, "ib", TIGHT_IB)
    with pytest.raises(ValueError, match="path MTU 4096 does not fit") as python_error:
        run_sim_collective(python.sim, python.hosts, "alltoall", 8192, 1, 0, None, 4096)
    rust = build_rust_fabric(plan, "ib", TIGHT_IB)
    with pytest.raises(FabricError) as rust_error:
        run_rust_collective(rust, [node.name for node in plan.hosts()], "alltoall", 8192, 1, 0, None, 4096)
    assert str(rust_error.value) == str(python_error.value)
