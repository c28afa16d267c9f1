"""The simulation backend on the compiled engine (emulator._core.engine) against the Python engine: the same
collectives on the same planned fabrics (lossless with PFC, lossy with drops and retransmission timers, IB
with credits) give the same completion times, the same events and the same counters."""

from __future__ import annotations

import pytest

from emulator._core import engine as compiled_engine
from emulator.collectives.sim_ranks import run_sim_collective
from emulator.fabric.plan import make_plan
from emulator.sim import engine as python_engine
from emulator.study import sim_fabric
from topologies.fabrics import StarTopo

KIB = 1024


def outcome(monkeypatch, engine, fabric_name: str, collective: str, size: int) -> tuple:
    """Everything a run shows: per iteration the CCT, bytes, retransmissions; the engine's time and events;
    the fabric's counters."""
    monkeypatch.setattr(sim_fabric, "Simulator", engine.Simulator)
    plan = make_plan(StarTopo(n=4), "sim", {"bw": "100mbit", "mtu": "4200"})
    fabric = sim_fabric.build_sim_fabric(plan, fabric_name, {"buffer": "512KiB", "headroom": "72KiB"})
    assert isinstance(fabric.sim, engine.Simulator)
    result = run_sim_collective(fabric.sim, fabric.hosts, collective, size, 2, 1, None, 4096)
    iterations = [(it.cct_us, it.verified, it.retransmissions, sorted((f.src, f.bytes) for f in it.flows))
                  for it in [*result.warmup, *result.iterations]]
    return iterations, fabric.sim.now, fabric.sim.events, sim_fabric.totals(fabric)


@pytest.mark.parametrize("fabric_name, collective, size", [
    ("lossless", "incast", 256 * KIB),
    ("lossy", "incast", 256 * KIB),
    ("ib", "alltoall", 64 * KIB),
    ("lossless", "allreduce", 96 * KIB),
])
def test_a_collective_runs_the_same_on_both_engines(monkeypatch, fabric_name, collective, size):
    python = outcome(monkeypatch, python_engine, fabric_name, collective, size)
    compiled = outcome(monkeypatch, compiled_engine, fabric_name, collective, size)
    assert compiled == python
