"""Lossless Ethernet for real: PFC under incast, spreading, captures, telemetry."""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import time

import pytest

from emulator.fabric.capture import malformed_count
from emulator.fabric.builder import Fabric
from emulator.study.incast import run_incast
from emulator.apps.iperf import TOS_PRIORITY_3, run_flows
from faithful import judge_only_if_faithful
from topologies import DumbbellTopo, StarTopo

SECONDS = 3


def _tshark_fields(path: str, display_filter: str, *fields: str, options: tuple[str, ...] = ()) -> list[list[str]]:
    args = ["tshark", "-r", path, *options, "-Y", display_filter, "-T", "fields", "-E", "occurrence=f"]
    for field in fields:
        args += ["-e", field]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


# The incasts run at 10 Mbit/s: at 50 Mbit/s the emulator alone kept both cores of this 2-core VM 97% busy
# (measured 2026-12-03 with /proc/stat around an iperf3 through a leaf-spine), so goodput and PFC response
# measured the CPU, not the fabric; at 20 Mbit/s with eight tcpdumps the UDP incast's goodput fell to
# 84 to 91% of the link in 6 of 9 runs one evening, the code before and after that day's changes alike
# (the fidelity monitor's envelope for a star,8 incast on this machine is 5 to 10 Mbit/s:
# docs/performance.md "Fidelity").  How fast the emulator goes is for the benchmarks.
INCAST_BW = "10mbit"
INCAST_BPS = 10_000_000
FRAME = 1514

# Headroom for a PFC response of 30 ms instead of the default 10 ms (5 F + C r).  With eight tcpdumps on
# two cores the senders' reaction now and then took 12 ms and more: with the default headroom this test
# lost datagrams to headroom drops in 22 of 58 runs (measured 2026-12-03), always with PFC
# working (the lossy fabric loses thousands).  What is tested here is that PFC stops the senders; the
# default headroom's formula is the MMU model's (tests/unit/test_mmu.py).
HEADROOM_30MS = 5 * FRAME + INCAST_BPS * 30 // 8 // 1000

# A small shared pool: with 16 KiB to share among 4 ports, the lossless fabric pauses the senders many
# times a second.  Every port also keeps a reserve of one frame per priority, and, on the lossless fabric,
# the headroom of priority 3.
SHARED = 16 * 1024
RESERVES = 4 * 8 * FRAME


def test_udp_incast_lossless_has_no_loss_and_keeps_the_receiver_busy(tmp_path):
    result = run_incast("lossless", "udp", bw=INCAST_BW, seconds=SECONDS, capture=str(tmp_path / "pcap"),
                        telemetry=str(tmp_path / "telemetry"),
                        switch={"quanta": "30000", "headroom": str(HEADROOM_30MS)})
    assert [f.lost_packets for f in result.flows] == [0, 0, 0]
    assert result.totals["drops"] == 0
    assert result.totals["pfc_sent"] > 0
    assert result.totals["host_paused_ns"] > 0
    # Every capture decodes cleanly; PFC frames enable class 3 with the configured quanta.
    pcaps = sorted((tmp_path / "pcap").iterdir())
    assert len(pcaps) == 8
    for pcap in pcaps:
        assert malformed_count(str(pcap)) == 0, pcap
    pfc = _tshark_fields(str(tmp_path / "pcap" / "h1-eth0.pcapng"), "macc",
                         "macc.opcode", "macc.cbfc.enbv", "macc.cbfc.enbv.c3", "macc.cbfc.pause_time.c3")
    assert pfc, "no PFC frame reached h1"
    assert {row[0] for row in pfc} == {"0x0101"}
    assert {row[1] for row in pfc} == {"0x0008"}
    assert {row[2] for row in pfc} == {"1"}
    assert {row[3] for row in pfc} == {"30000", "0"}  # XOFF with the quanta, XON
    # Telemetry at teardown: totals and an occupancy series of the congested port.
    stats = json.loads((tmp_path / "telemetry" / "stats.json").read_text())
    assert stats["totals"]["drops"] == 0 and stats["totals"]["pfc_sent"] >= result.totals["pfc_sent"]
    # Every agent's final counters, hosts' too (a host's RNIC once closed its socket before they were read).
    assert sorted(stats["hosts"]) == ["h1", "h2", "h3", "h4"] and sorted(stats["switches"]) == ["s1"]
    assert sum(sum(h["pfc_received"]) for h in stats["hosts"].values()) > 0
    with open(tmp_path / "telemetry" / "occupancy.csv") as f:
        rows = list(csv.DictReader(f))
    egress = [int(r["egress_bytes"]) for r in rows if r["port"] == "s1-eth4" and r["priority"] == "3"]
    assert max(egress) > 100_000
    assert any(r["xoff"] == "1" for r in rows if r["port"] == "s1-eth1")
    # iperf3 counts UDP payload: 1448 of each 1490-byte frame (97.2%).
    judge_only_if_faithful(result.stats["fidelity"], "the receiver's goodput")
    assert result.aggregate_bps >= 0.95 * result.rate_bps * 1448 / 1490


def test_udp_incast_lossy_drops():
    result = run_incast("lossy", "udp", bw=INCAST_BW, seconds=SECONDS)
    assert all(f.lost_packets > 0 for f in result.flows)
    assert result.totals["drops"] > 0
    assert result.totals["pfc_sent"] == 0


@pytest.mark.parametrize("fabric", ["lossless", "lossy"])
def test_tcp_incast_with_a_small_buffer(fabric):
    """A shared pool of 16 KiB: PFC keeps TCP lossless; without it the switch drops and TCP retransmits.

    The headroom is the 30 ms allowance of the UDP test: with 24 KiB (a 4 ms allowance at 50 Mbit/s) this
    test began to fail on 2026-12-03 with old and new code alike, 24 headroom drops in a CI run, while TCP
    senders' pauses took up to about 45 KB of headroom at 50 Mbit/s (measured from ingress peaks).
    """
    switch = {"buffer": str(RESERVES + SHARED)}
    if fabric == "lossless":  # the lossy fabric keeps no headroom
        switch = {"buffer": str(RESERVES + SHARED + 4 * HEADROOM_30MS), "headroom": str(HEADROOM_30MS)}
    result = run_incast(fabric, "tcp", bw=INCAST_BW, seconds=SECONDS, switch=switch)
    retransmits = sum(f.retransmits for f in result.flows)
    if fabric == "lossless":
        assert retransmits == 0 and result.totals["drops"] == 0
        assert result.totals["pfc_sent"] > 0
    else:
        assert retransmits > 0 and result.totals["drops"] > 0


def test_congestion_spreads_hop_by_hop_on_a_dumbbell(tmp_path):
    """h1, h2 (on s1) and h4 (on s2) all send to h3 (on s2).

    s2's port to h3 congests; s2 pauses s1 over the inter-switch link and
    h4; s1's queue to s2 then fills and s1 pauses h1 and h2.
    """
    with Fabric(DumbbellTopo(n=2), link={"bw": "30mbit"}, capture=str(tmp_path)) as net:
        receiver = net["h3"]
        run_flows([(net[h], receiver) for h in ("h1", "h2", "h4")], SECONDS, udp_bps=30_000_000,
                  tos=TOS_PRIORITY_3)
        stats = net.stats()
    ports = {(sw, ifname): port for sw in ("s1", "s2") for ifname, port in stats["switches"][sw]["ports"].items()}

    def xoff(sw: str, ifname: str) -> int:
        return ports[(sw, ifname)]["priorities"][3]["pfc_sent"]["xoff"]

    peer = {p.ifname: p.peer_node for p in net.plan.nodes["s2"].ports}
    s2_to_s1 = next(i for i, n in peer.items() if n == "s1")
    s1_to_s2 = next(p.ifname for p in net.plan.nodes["s1"].ports if p.peer_node == "s2")
    assert stats["totals"]["drops"] == 0
    assert xoff("s2", s2_to_s1) > 0, "s2 did not pause s1"
    assert ports[("s1", s1_to_s2)]["priorities"][3]["pfc_received"] > 0
    assert ports[("s1", s1_to_s2)]["priorities"][3]["paused_ns"] > 0
    for host in ("h1", "h2", "h4"):
        assert stats["hosts"][host]["pfc_received"][3] > 0, f"{host} was never paused"
    # On the wire: pause frames on each hop.
    for capture in (f"{s2_to_s1}.pcapng", "h1-eth0.pcapng", "h2-eth0.pcapng", "h4-eth0.pcapng"):
        assert _tshark_fields(str(tmp_path / capture), "macc.cbfc.pause_time.c3 > 0", "frame.number"), capture


def _ping_rtts(net, src: str, dst: str, count: int, interval: float = 0.05) -> list[float]:
    out = net[src].run(["ping", "-c", str(count), "-i", str(interval), "-W", "1", net[dst].ip]).stdout
    return [float(part.split("=")[1]) for line in out.splitlines() for part in line.split() if part.startswith("time=")]


def test_link_delay_is_modelled_both_ways():
    with Fabric(StarTopo(n=2), link={"delay": "2ms"}) as net:
        rtts = _ping_rtts(net, "h1", "h2", 10)
    # Two links each way, 2 ms each: 8 ms, plus processing and timer lateness.  The median, not the
    # maximum: on a loaded 2-core machine one echo in ten now and then waits 2 ms more for a CPU, while a
    # delay applied once too often or not at all moves every echo by 2 ms or more.
    assert len(rtts) == 10
    assert 8.0 <= min(rtts) and statistics.median(rtts) < 10.0, rtts


def test_deterministic_drops_hit_the_chosen_frames():
    """drop=2 on both links loses the 2nd IPv4 frame of each of the 4 directions."""
    with Fabric(StarTopo(n=2), link={"drop": "2"}) as net:
        out = net["h1"].run(["ping", "-c", "5", "-i", "0.1", "-W", "1", net["h2"].ip]).stdout
        stats = net.stats()
    answered = sorted(int(part.split("=")[1]) for line in out.splitlines() for part in line.split()
                      if part.startswith("icmp_seq="))
    # h1 -> s1 drops request 2; s1 -> h2 carries requests 1, 3, 4, 5 and drops
    # request 3; h2 -> s1 carries replies 1, 4, 5 and drops reply 4; s1 -> h1
    # carries replies 1, 5 and drops reply 5.  Only echo 1 comes back.
    assert answered == [1]
    injected = sum(q["drops"]["injected"] for p in stats["switches"]["s1"]["ports"].values() for q in p["priorities"])
    assert injected == 4


def test_random_loss_is_seeded_and_reproducible():
    def lost(seed: int) -> tuple[int, int]:
        with Fabric(StarTopo(n=2), link={"loss": "0.2"}, seed=seed) as net:
            rtts = _ping_rtts(net, "h1", "h2", 40, interval=0.01)
            injected = net.stats()["totals"]["drops"]
        return len(rtts), injected

    first, again, other = lost(7), lost(7), lost(8)
    assert first == again
    assert 0 < first[1]
    # Each echo crosses 4 lossy link directions: about 1 - 0.8**4 = 59% lost.
    assert 5 <= first[0] <= 30
    assert other != first or other[0] != first[0]


def test_stats_json_from_the_command_line(tmp_path):
    env = dict(os.environ)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cli = [sys.executable, "-m", "emulator"]
    up = subprocess.run([*cli, "up", "--topo", "star,2", "--name", "stats1", "--telemetry", str(tmp_path)],
                        cwd=repo, capture_output=True, text=True, env=env)
    assert up.returncode == 0, up.stderr
    try:
        subprocess.run([*cli, "exec", "h1", "--", "ping", "-c2", "-Q", "0x68", "10.0.0.2"], cwd=repo, check=True,
                       capture_output=True)
        time.sleep(0.1)
        stats = json.loads(subprocess.run([*cli, "stats", "--json"], cwd=repo, capture_output=True, text=True,
                                          check=True).stdout)
    finally:
        down = subprocess.run([*cli, "down", "--run", "stats1"], cwd=repo, capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    for key in ("drops", "pfc_sent", "pfc_received", "ecn_marked"):
        assert key in stats["totals"]
    s1 = stats["switches"]["s1"]["ports"]
    assert s1["s1-eth1"]["priorities"][3]["rx_frames"] == 2  # the two requests, in priority 3
    assert (tmp_path / "stats.json").exists() and (tmp_path / "occupancy.csv").exists()


def test_pause_without_xon_holds_the_host_for_its_quanta(tmp_path):
    """One PFC frame of Q quanta holds the upstream Q x 512 bit times."""
    rate, quanta = 20_000_000, 400  # 400 x 25.6 us = 10.24 ms
    expected = quanta * 512 / rate
    frame_time = 1514 * 8 / rate
    with Fabric(StarTopo(n=2), link={"bw": "20mbit"}, capture=str(tmp_path)) as net:
        server = net["h2"].popen(["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        client = net["h1"].popen(["iperf3", "-c", net["h2"].ip, "-u", "-b", "20M", "-t", "2", "-S", "0x68"],
                                 stdout=subprocess.DEVNULL)
        time.sleep(0.8)
        for _ in range(3):
            net.send_pfc("s1", "s1-eth1", 3, quanta)
            time.sleep(0.2)
        client.wait(timeout=10)
        server.wait(timeout=10)
        fidelity = net.stats()["fidelity"]
    rows = _tshark_fields(str(tmp_path / "h1-eth0.pcapng"), "macc || (udp && ip.src == 10.0.0.1)",
                          "frame.time_epoch", "macc.cbfc.pause_time.c3")
    pauses = [float(t) for t, q in rows if q == str(quanta)]
    data = [float(t) for t, q in rows if not q]
    assert len(pauses) == 3
    judge_only_if_faithful(fidelity, "how long a pause held the host")
    for pause in pauses:
        after = [t for t in data if t > pause]
        # At most one MTU's worth leaves after the pause arrives: the frame
        # HTB had already taken from the gate, serialised within one frame
        # time after the host's reaction (up to 1 ms); then nothing until
        # the pause runs out.
        leaked = [t for t in after if t - pause < frame_time + 0.001]
        resumed = after[len(leaked)]
        # What HTB takes from the gate during the host's reaction (up to
        # about 1 ms here, 1.7 frame times at 20 Mbit/s) still leaves.
        assert len(leaked) <= 2
        held = resumed - pause
        assert abs(held - expected) <= max(0.10 * expected, frame_time), (held, expected)


def test_ecn_marks_reach_tcp_receivers_intact(tmp_path):
    """ECN-capable TCP through a congested port: CE marks, valid checksums."""
    with Fabric(StarTopo(n=3), link={"bw": "20mbit"}, switch={"kmin": "6KiB", "kmax": "30KiB", "pmax": "0.5"},
                capture=str(tmp_path)) as net:
        for host in net.hosts:
            host.run(["sysctl", "-qw", "net.ipv4.tcp_ecn=1"], check=True)
        flows = run_flows([(net["h1"], net["h3"]), (net["h2"], net["h3"])], SECONDS, tos=TOS_PRIORITY_3)
        stats = net.stats()
    assert stats["totals"]["ecn_marked"] > 0
    assert stats["totals"]["drops"] == 0
    ce = _tshark_fields(str(tmp_path / "h3-eth0.pcapng"), "ip.dsfield.ecn == 3", "ip.checksum.status",
                        options=("-o", "ip.check_checksum:TRUE"))
    assert len(ce) >= stats["totals"]["ecn_marked"] * 0.9  # marked frames arrive (a few may be in flight at the end)
    assert {row[0] for row in ce} == {"1"}  # every rewritten IPv4 checksum is good
    # The receiver echoes congestion back (ECE in its ACKs): the marks were accepted.
    echoes = _tshark_fields(str(tmp_path / "h3-eth0.pcapng"), "tcp.flags.ece == 1 && ip.src == 10.0.0.3", "frame.number")
    assert echoes
    judge_only_if_faithful(stats["fidelity"], "TCP goodput through the marking port")
    assert sum(f.received_bps for f in flows) > 0.9 * 20_000_000 * 1448 / 1514
