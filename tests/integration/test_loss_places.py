"""Frames lost outside the switch model are counted where they went, and flag a lossless run."""

from __future__ import annotations

from emulator.fabric.builder import Fabric
from topologies import StarTopo

SEND = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x68)  # DSCP 26: priority 3, the lossless class
for _ in range(200):
    s.sendto(bytes(1400), ("{ip}", 9))
"""


def test_a_loss_at_a_host_pause_gate_is_counted_there_and_makes_the_run_unfaithful():
    with Fabric(StarTopo(n=2), link={"bw": "20mbit"}, name="satgate") as net:
        before = net.stats()
        # A gate queue of two frames under priority 3's gate (20+3:1): the UDP socket's buffer holds far more,
        # so the kernel drops at the gate, as it would with a gate queue limit below the sockets' buffers.
        for command in (["tc", "qdisc", "del", "dev", "h1-eth0", "parent", "23:1"],
                        ["tc", "qdisc", "add", "dev", "h1-eth0", "parent", "23:1", "handle", "33:", "pfifo",
                         "limit", "2"]):
            done = net["h1"].run(command)
            assert done.returncode == 0, done.stderr
        sent = net["h1"].run(["python3", "-c", SEND.format(ip=net["h2"].ip)])
        assert sent.returncode == 0, sent.stderr
        after = net.stats()
    assert before["fidelity"]["lost_lossless_unexplained"] == 0
    gate = [p for p in after["losses"]["places"] if p["node"] == "h1" and p["kind"] == "tc"]
    assert [(p["place"], p["priority"], p["class"]) for p in gate] == [("h1-eth0 pause gate of priority 3", 3,
                                                                         "lossless")]
    dropped = gate[0]["count"]
    assert 0 < dropped < 200
    # The sender's kernel said so too: each datagram the gate dropped is a UDP send error.
    assert after["hosts"]["h1"]["kernel"]["udp"]["sndbuf_errors"] == dropped
    assert after["losses"]["by_kind"]["tc"] == dropped
    assert after["totals"]["lost_lossless_unexplained"] == dropped
    assert after["fidelity"]["faithful"] is False
    assert any("pause gate of priority 3" in line and str(dropped) in line
               for line in after["fidelity"]["unfaithful"]["h1"])
