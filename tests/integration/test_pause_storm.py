"""A NIC pause storm (fabric-emu fault HOST stall) spreads to an innocent sender; the PFC watchdog contains it.

On star,3: h1's NIC stalls and pauses its switch port without end; h2 sends
UDP on the lossless priority to h1 and, as the victim, to the idle h3.  The
switch's queue to h1 fills, the switch pauses h2, and h2's flow to h3
stops with it (head-of-line blocking at h2's NIC).  With the watchdog
(``--switch pfcwd=...``, drop) the switch flushes the stormed queue, drops
what arrives for it and ignores h1's pauses: h2 is let go and the victim
flows.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from emulator.apps.iperf import TOS_PRIORITY_3, run_flows
from emulator.fabric.builder import Fabric
from topologies import StarTopo

SECONDS = 3
OFFERED_BPS = 8_000_000  # each of h2's two flows, on 30 Mbit/s links


@pytest.mark.parametrize("pfcwd", ["off", "200ms:400ms:drop"])
def test_a_stalled_nic_pauses_a_victim_unless_the_watchdog_drops(pfcwd):
    with Fabric(StarTopo(n=3), link={"bw": "30mbit"}, switch={"pfcwd": pfcwd}) as net:
        stall = subprocess.run([sys.executable, "-m", "emulator", "fault", "--run", net.run_name, "h1", "stall"],
                               capture_output=True, text=True, timeout=30)
        assert stall.returncode == 0, stall.stderr
        assert "h1: stalled" in stall.stderr
        to_h1, victim = run_flows([(net["h2"], net["h1"]), (net["h2"], net["h3"])], SECONDS,
                                  udp_bps=OFFERED_BPS, tos=TOS_PRIORITY_3)
        stats = net.stats()
    h1, h2 = stats["hosts"]["h1"], stats["hosts"]["h2"]
    totals = stats["totals"]
    assert h1["fault"]["stalled"] and h1["fault"]["pfc_sent"] >= 1
    assert h2["pfc_received"][3] > 0, "the storm did not reach h2"
    share = victim.received_bps / OFFERED_BPS
    print(f"pfcwd {pfcwd}: victim {victim.received_bps / 1e6:.2f} Mbit/s ({share:.0%}), to h1 "
          f"{to_h1.received_bps / 1e6:.2f} Mbit/s, h2 paused {sum(h2['paused_ns']) / 1e9:.2f} s, storms "
          f"{totals['pfcwd_storms']}, restorations {totals['pfcwd_restorations']}, watchdog drops {totals['pfcwd_drops']}")
    if pfcwd == "off":
        assert totals["pfcwd_storms"] == totals["pfcwd_drops"] == 0
        assert totals["drops"] == 0  # lossless: nothing is dropped, everything stops
        assert share < 0.3, f"the victim got {share:.0%} of its offered load although h2 was paused"
        assert to_h1.received_bps < 0.05 * OFFERED_BPS
    else:
        assert totals["pfcwd_storms"] >= 1 and totals["pfcwd_drops"] > 0
        port = next(p for p in net.plan.nodes["s1"].ports if p.peer_node == "h1").ifname
        queue = stats["switches"]["s1"]["ports"][port]["priorities"][3]
        assert queue["pfcwd_storms"] >= 1 and queue["drops"]["pfcwd"] > 0  # the stalled host's queue, no other
        assert share > 0.7, f"the victim got only {share:.0%} of its offered load with the watchdog"
