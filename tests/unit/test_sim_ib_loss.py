"""Injected link loss on the simulated ib fabric: a data packet lost from a host's link before the IB plane counts
it, or corrupted on its way to a host (the host drops it on its CRC); the credits are repaired by the next
flow-control packet and RC resends what was lost."""

from emulator.collectives.sim_ranks import run_rust_collective
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo
from emulator.study.sim_fabric import build_rust_fabric


def run(loss: str):
    plan = make_plan(build_topo("star,4"), "sim", {"bw": "10gbit", "delay": "1us", "mtu": "4200", "loss": loss})
    names = [node.name for node in plan.hosts()]
    fabric = build_rust_fabric(plan, "ib", {})
    return fabric, run_rust_collective(fabric, names, "allreduce", 4 << 20, 5, 1, None, 4096)


def test_a_lossy_ib_link_loses_packets_in_both_directions_and_rc_recovers_them():
    fabric, lossy = run("0.01")
    assert all(it.verified for it in lossy.iterations)  # every rank's sum came out right
    assert sum(it.retransmissions for it in lossy.iterations) > 0
    assert fabric.totals()["drops"] > 0
    clean_fabric, clean = run("0")
    assert clean_fabric.totals()["drops"] == 0 and sum(it.retransmissions for it in clean.iterations) == 0
    assert max(it.cct_us for it in lossy.iterations) > max(it.cct_us for it in clean.iterations)
