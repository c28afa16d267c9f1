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
import time

import pytest

from emulator._core.roce import Framer
from emulator._core.transport import Opcode, Packet
from emulator.apps.iperf import TOS_PRIORITY_3, run_flows
from emulator.fabric.agent_control import query_agent
from emulator.fabric.builder import Fabric
from emulator.fabric.runstate import control_socket
from topologies import StarTopo

SECONDS = 3
OFFERED_BPS = 8_000_000  # each of h2's two flows, on 30 Mbit/s links


SEND_FRAMES = """
import socket, sys
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((sys.argv[1], 0))
for frame in sys.argv[2:]:
    sock.send(bytes.fromhex(frame))
"""


def fault(net: Fabric, host: str, what: str) -> None:
    done = subprocess.run([sys.executable, "-m", "emulator", "fault", "--run", net.run_name, host, what],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


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


def test_a_stalled_rnic_reads_no_frame_until_it_resumes():
    """What reaches a stalled NIC's link waits unread, however it got there (here on priority 0, which its
    pause does not hold; in a storm, once the watchdog ignores its pauses): no ACK or NAK goes back until it
    resumes, and then it takes every frame that waited."""
    frames = 20
    with Fabric(StarTopo(n=2)) as net:
        h2 = net.plan.nodes["h2"].ports[0]
        framer = Framer(h2.mac, h2.peer_mac, "10.0.0.2", "10.0.0.1", 49152, dscp=0)
        sent = [framer.encode(Packet(Opcode.SEND_ONLY, 0x11, psn, payload=b"x" * 64)) for psn in range(frames)]
        control = control_socket(net.run_name, "h1")
        fault(net, "h1", "stall")
        before = query_agent(control, "received")["frames_received"]
        net["h2"].run([sys.executable, "-c", SEND_FRAMES, h2.ifname, *(f.hex() for f in sent)], check=True,
                      timeout=30)
        time.sleep(0.5)  # at 100 Mbit/s the 20 frames are on h1's link within a millisecond
        during = query_agent(control, "received")["frames_received"]
        fault(net, "h1", "resume")
        deadline = time.monotonic() + 5
        while (after := query_agent(control, "received")["frames_received"]) < before + frames \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = net.stats()
    assert stats["switches"]["s1"]["totals"]["drops"] == 0
    assert during == before, f"the stalled RNIC read {during - before} frames"
    assert after == before + frames
