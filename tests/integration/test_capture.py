"""Captures on every link end: pcapng files that tshark reads cleanly."""

from __future__ import annotations

import os
import subprocess

import pytest

from emulator.fabric.capture import Captures, malformed_count
from emulator.errors import FabricError
from emulator.fabric.builder import Fabric
from topologies import StarTopo

PCAPNG_MAGIC = bytes.fromhex("0a0d0d0a")


def _fields(path: str, *args: str) -> list[str]:
    out = subprocess.run(["tshark", "-r", path, *args], capture_output=True, text=True, check=True).stdout
    return out.split()


def test_ping_captured_on_every_link_end(tmp_path):
    with Fabric(StarTopo(n=2), link={"bw": "20mbit"}) as net:
        ports = [(net[name], port.ifname) for name, node in net.plan.nodes.items() for port in node.ports]
        caps = Captures(ports, str(tmp_path), net.directory)
        try:
            caps.start()
            for proc in caps._procs.values():  # -Z root: tcpdump did not become user tcpdump
                with open(f"/proc/{proc.pid}/status") as f:
                    assert next(line for line in f if line.startswith("Uid:")).split()[1:] == ["0"] * 4
            ping = net["h1"].run(["ping", "-c", "5", "-i", "0.2", net["h2"].ip])
        finally:
            paths = caps.stop()
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert caps.stop() == paths  # idempotent

    files = {os.path.basename(p): p for p in paths}
    assert sorted(files) == ["h1-eth0.pcapng", "h2-eth0.pcapng", "s1-eth1.pcapng", "s1-eth2.pcapng"]
    assert not list(tmp_path.glob("*.pcap"))
    assert caps.precision == dict.fromkeys(["h1-eth0", "h2-eth0", "s1-eth1", "s1-eth2"], "nano")
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(4) == PCAPNG_MAGIC, path
        assert malformed_count(path) == 0, path
        stamps = _fields(path, "-T", "fields", "-e", "frame.time_epoch")
        assert stamps and all(len(s.split(".")[1]) == 9 for s in stamps), (path, stamps[:3])

    types = _fields(files["h1-eth0.pcapng"], "-Y", "icmp", "-T", "fields", "-e", "icmp.type")
    assert types.count("8") >= 5 and types.count("0") >= 5, types

    def request_ttls(name: str) -> set[str]:
        return set(_fields(files[name], "-Y", "icmp.type == 8", "-T", "fields", "-e", "ip.ttl"))

    # h1 sends with TTL 64 into s1-eth1; the switch routes and sends 63 out of s1-eth2.
    assert request_ttls("s1-eth1.pcapng") == {"64"}
    assert request_ttls("s1-eth2.pcapng") == {"63"}
    assert request_ttls("h2-eth0.pcapng") == {"63"}


def test_failed_start_names_the_interface_and_leaves_nothing(tmp_path):
    with Fabric(StarTopo(n=1)) as net:
        caps = Captures([(net["h1"], "h1-eth0"), (net["h1"], "nosuch0")], str(tmp_path), net.directory)
        with pytest.raises(FabricError, match="h1 nosuch0.*nosuch0"):
            caps.start()
        assert caps.stop() == []
        assert list(tmp_path.iterdir()) == []
        assert caps._procs == {}
