"""The fidelity monitor on a real fabric: a starved run is flagged, a light run on a quiet machine is not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from emulator.apps.iperf import TOS_PRIORITY_3, run_flows
from emulator.collectives.coordinator import run_collective
from emulator.fabric.builder import Fabric
from topologies import StarTopo

# A real-time task above the agents (SCHED_FIFO 10) on one CPU: busy 40 ms, asleep 10 ms, until killed.  One
# per CPU, so that both are often taken at once and an agent cannot just move to the other.
HOG = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
while True:
    end = time.monotonic() + 0.04
    while time.monotonic() < end:
        pass
    time.sleep(0.01)
"""


def _hogs() -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", HOG, str(cpu)]) for cpu in sorted(os.sched_getaffinity(0))]


def _stop(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()
        hog.wait()


def test_a_run_starved_by_other_real_time_work_is_flagged():
    with Fabric(StarTopo(n=4), link={"bw": "20mbit"}) as net:
        hogs = _hogs()
        try:
            time.sleep(0.2)
            run_flows([(net[h], net["h4"]) for h in ("h1", "h2", "h3")], 3, udp_bps=20_000_000, tos=TOS_PRIORITY_3)
            stats = net.stats()
        finally:
            _stop(hogs)
    fidelity = stats["fidelity"]
    assert not fidelity["faithful"], fidelity
    assert "s1" in fidelity["unfaithful"], fidelity
    assert fidelity["longest_stall_ns"] >= 1_000_000  # the hogs held a port's wire idle for milliseconds


def test_a_light_run_on_a_quiet_machine_is_faithful():
    """One flow at a fifth of a 1 Mbit/s link: nothing queues, and a frame time is 12 ms."""
    with Fabric(StarTopo(n=2), link={"bw": "1mbit"}) as net:
        run_flows([(net["h1"], net["h2"])], 3, udp_bps=200_000, tos=TOS_PRIORITY_3)
        stats = net.stats()
    fidelity = stats["fidelity"]
    assert fidelity["faithful"], fidelity
    assert fidelity["lag_p99_ns"] is not None  # the switch measured something


def test_one_rdma_sender_keeping_its_link_busy_on_a_quiet_machine_is_faithful():
    """The RNIC's own wire: its kernel queue is full the whole transfer, and the agent keeps it so."""
    with Fabric(StarTopo(n=2), link={"bw": "2mbit"}) as net:
        run = run_collective(net, "incast", 96 << 10, iterations=2, warmup=0)
        stats = net.stats()
    sender = stats["hosts"]["h2"]["fidelity"]
    assert sender["wire"]["frames"] >= 2 * 96 and sender["wire"]["busy_ns"] > 0
    assert sender["wire"]["stall_share"] < 0.01, sender
    assert stats["fidelity"]["faithful"], stats["fidelity"]
    assert all(it.cct_us < 1.10 * 96 * 1082 * 8 / 2e6 * 1e6 for it in run.iterations)  # at its link time


def test_an_rdma_sender_starved_by_other_real_time_work_is_named():
    """At 20 Mbit/s the RNIC's kernel queue (32 KiB) covers 13 ms; the hogs take a CPU for 40 ms at a time."""
    with Fabric(StarTopo(n=2), link={"bw": "20mbit"}) as net:
        hogs = _hogs()
        try:
            time.sleep(0.2)
            run_collective(net, "incast", 512 << 10, iterations=1, warmup=0)
            stats = net.stats()
        finally:
            _stop(hogs)
    fidelity = stats["fidelity"]
    assert not fidelity["faithful"], fidelity
    assert any("the wire stalled" in reason for reason in fidelity["unfaithful"].get("h2", [])), fidelity
    assert stats["hosts"]["h2"]["fidelity"]["wire"]["longest_stall_ns"] >= 1_000_000
