"""The fidelity monitor on a real fabric: a starved run is flagged, a light run on a quiet machine is not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from emulator.apps.iperf import TOS_PRIORITY_3, run_flows
from emulator.fabric.builder import Fabric
from topologies import StarTopo

# A real-time task above the agents (SCHED_FIFO 10) on one CPU: busy 20 ms, asleep 20 ms, until killed.
HOG = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
while True:
    end = time.monotonic() + 0.02
    while time.monotonic() < end:
        pass
    time.sleep(0.02)
"""


def test_a_run_starved_by_other_real_time_work_is_flagged():
    with Fabric(StarTopo(n=4), link={"bw": "20mbit"}) as net:
        hogs = [subprocess.Popen([sys.executable, "-c", HOG, str(cpu)]) for cpu in sorted(os.sched_getaffinity(0))]
        try:
            time.sleep(0.2)
            run_flows([(net[h], net["h4"]) for h in ("h1", "h2", "h3")], 3, udp_bps=20_000_000, tos=TOS_PRIORITY_3)
            stats = net.stats()
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
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
