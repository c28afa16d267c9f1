"""A switch-to-switch link pulled in a running fabric (fabric-emu link): routes go round it, and come back."""

from __future__ import annotations

import subprocess
import sys

from emulator.fabric.builder import Fabric
from emulator.fabric.link_state import load_graph
from topologies import LeafSpineTopo


def _link(net: Fabric, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", "link", "--run", net.run_name, *args],
                          capture_output=True, text=True, timeout=60)


def _tx(net: Fabric, switch: str, ifname: str) -> int:
    return sum(q["tx_frames"] for q in net.stats()["switches"][switch]["ports"][ifname]["priorities"])


def _pings(net: Fabric, count: int = 10) -> subprocess.CompletedProcess:
    return net["h1"].run(["ping", "-c", str(count), "-i", "0.05", "-W", "1", net["h2"].ip])


def test_a_link_down_sends_traffic_round_it_and_up_brings_it_back():
    with Fabric(LeafSpineTopo(leaves=2, spines=2, hosts=1), link={"bw": "50mbit"}) as net:
        graph = load_graph(net.directory)
        via_s3, via_s4 = graph.link("s1", "s3")[0], graph.link("s1", "s4")[0]
        done = _link(net, "s1", "s3", "down")
        assert done.returncode == 0, done.stderr
        assert "link s1-s3 down: routes of 4 switches recomputed" in done.stderr
        assert "state DOWN" in net["s1"].run(["ip", "link", "show", via_s3]).stdout
        before = (_tx(net, "s1", via_s3), _tx(net, "s1", via_s4))
        ping = _pings(net)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
        after = (_tx(net, "s1", via_s3), _tx(net, "s1", via_s4))
        assert after[0] == before[0] and after[1] >= before[1] + 10  # every request went by s4
        # The other uplink too would cut s1 off: refused in one line, nothing changed.
        refused = _link(net, "s1", "s4", "down")
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1
        assert "link s1-s4 stays up: without it the topology is not connected" in refused.stderr
        assert "state UP" in net["s1"].run(["ip", "link", "show", via_s4]).stdout
        done = _link(net, "s1", "s3", "up")
        assert done.returncode == 0 and "link s1-s3 up" in done.stderr, done.stderr
        assert "state UP" in net["s1"].run(["ip", "link", "show", via_s3]).stdout
        ping = _pings(net)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
        stats = net.stats()
        assert stats["totals"]["malformed"] == 0
