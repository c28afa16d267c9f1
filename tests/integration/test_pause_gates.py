"""Host pause gates: a paused priority is held back by the kernel, not dropped."""

from __future__ import annotations

import json
import subprocess
import time

from emulator.fabric.builder import Fabric
from topologies import StarTopo

PRIORITY = 3
TOS_PRIORITY_3 = "0x60"  # DSCP 24: class selector 3


def _rx(net) -> int:
    """IPv4 frames the switch received from h1."""
    return sum(q["rx_frames"] for q in net.switch_stats("s1")["ports"]["s1-eth1"]["priorities"])


def test_pause_holds_a_udp_sender_without_loss_and_resume_restarts_it():
    with Fabric(StarTopo(n=2), link={"bw": "20mbit"}) as net:
        gates = net.gates("h1")
        server = net["h2"].popen(["iperf3", "-s", "-1", "--json"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        client = net["h1"].popen(
            ["iperf3", "-c", net["h2"].ip, "-u", "-b", "10M", "-t", "3", "-S", TOS_PRIORITY_3, "--json"],
            stdout=subprocess.PIPE, text=True,
        )
        time.sleep(1.0)
        gates.pause(PRIORITY)
        time.sleep(0.05)  # at most one frame leaves after the change
        held_from = _rx(net)
        # Other priorities are not paused: a DSCP 0 ping still answers.
        ping = net["h1"].run(["ping", "-c1", "-W1", net["h2"].ip])
        time.sleep(0.5)
        held_to = _rx(net)
        resumed_at = time.monotonic()
        gates.resume(PRIORITY)
        while _rx(net) <= held_to + 10 and time.monotonic() - resumed_at < 1:
            time.sleep(0.002)
        restart_s = time.monotonic() - resumed_at
        report = json.loads(client.communicate(timeout=15)[0])
        received = json.loads(server.communicate(timeout=15)[0])["end"]["sum"]
    assert ping.returncode == 0, ping.stdout
    # The ping's request is the only frame of h1 the switch saw while paused.
    assert held_to - held_from <= 1, (held_from, held_to)
    assert restart_s < 0.1, f"resumption took {restart_s:.3f} s (the kick is missing?)"
    assert received["lost_packets"] == 0
    sent_packets = report["end"]["sum"]["packets"]
    assert received["packets"] == sent_packets


def test_pause_for_expires_by_itself():
    with Fabric(StarTopo(n=2), link={"bw": "20mbit"}) as net:
        gates = net.gates("h1")
        gates.pause_for(0, 300_000_000)  # 0.3 s, like a PFC pause of many quanta
        began = time.monotonic()
        ping = net["h1"].run(["ping", "-c1", "-W2", net["h2"].ip])
        waited = time.monotonic() - began
        assert ping.returncode == 0
        assert 0.25 <= waited <= 0.6, waited
        assert gates.paused[0] is False
