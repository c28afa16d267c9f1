"""Building fabrics for real: reachability, forwarding, supervision."""

from __future__ import annotations

import os
import signal
import time

import pytest

from emulator.errors import FabricError
from emulator.fabric.builder import Fabric
from emulator.kernel.netns import existing_namespaces
from topologies import FatTreeTopo, LeafSpineTopo, StarTopo


def test_star_pingall_and_switch_counters():
    with Fabric(StarTopo(n=3), link={"bw": "50mbit"}) as net:
        answered, total, failed = net.pingall()
        assert (answered, total, failed) == (6, 6, [])
        stats = net.switch_stats("s1")
        ports = stats["ports"]
        # Each host sent 2 requests and 2 replies into the switch: 4 frames per port.
        assert [sum(q["rx_frames"] for q in p["priorities"]) for p in ports.values()] == [4, 4, 4]
        assert [sum(q["tx_frames"] for q in p["priorities"]) for p in ports.values()] == [4, 4, 4]
        assert stats["totals"]["drops"] == 0
        namespaces = {n.netns for n in net.plan.nodes.values()}
        assert namespaces <= existing_namespaces()
    assert not namespaces & existing_namespaces()


def test_fattree4_all_pairs_reachable():
    with Fabric(FatTreeTopo(k=4)) as net:
        assert net.pingall() == (240, 240, [])
        net.check_agents()


def test_routed_hop_count_and_link_settings():
    with Fabric(LeafSpineTopo(leaves=2, spines=2, hosts=1), link={"bw": "20mbit", "mtu": 1400}) as net:
        out = net["h1"].run(["ping", "-c1", "-W2", net["h2"].ip]).stdout
        # Leaf, spine, leaf: three routers each take one from the TTL of 64.
        assert "ttl=61" in out
        link = net["h1"].run(["ip", "-o", "link", "show", "h1-eth0"]).stdout
        assert "mtu 1400" in link
        qdisc = net["s1"].run(["tc", "class", "show", "dev", "s1-eth1"]).stdout
        assert "class htb 1:1 root rate 20Mbit ceil 20Mbit" in qdisc
        features = net["h1"].run(["ethtool", "-k", "h1-eth0"]).stdout
        for feature in ("generic-segmentation-offload: off", "generic-receive-offload: off",
                        "tx-checksumming: off", "tx-tcp-segmentation: off"):
            assert feature in features


def test_dead_switch_agent_is_reported_by_name():
    with Fabric(StarTopo(n=2)) as net:
        os.kill(net.state.agents["s1"], signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                net.check_agents()
            except FabricError as err:
                assert "switch s1" in str(err) and "SIGKILL" in str(err)
                break
            time.sleep(0.05)
        else:
            pytest.fail("check_agents never noticed the dead agent")


def test_second_fabric_with_same_name_is_refused_and_first_survives():
    with Fabric(StarTopo(n=2), name="clash1") as first:
        with pytest.raises(FabricError, match="already exists"):
            Fabric(StarTopo(n=2), name="clash1").start()
        assert first.pingall()[0] == 2
