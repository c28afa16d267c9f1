"""The InfiniBand-like fabric for real: credits instead of pause frames, LFT routing, IB captures."""

from __future__ import annotations

import subprocess

from emulator.collectives.coordinator import run_collective
from emulator.fabric.capture import malformed_count
from emulator.fabric.builder import Fabric
from emulator.study.erf import convert_directory
from emulator._core.ib import decode_data, decode_fc, icrc_native, vcrc
from emulator.apps.perf import run_pair
from topologies import LeafSpineTopo, StarTopo

VL_BUFFER = 8 << 10  # per VL and port: far smaller than a 7 x 256 KiB burst


def _tshark(path: str, *fields: str) -> list[list[str]]:
    args = ["tshark", "-r", path, "-T", "fields", "-E", "occurrence=f"]
    for field in fields:
        args += ["-e", field]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def _ib_counters(stats: dict) -> tuple[int, int]:
    """(credit stalls of every sender, switches and RNICs; highest VL occupancy of any switch port, in blocks)."""
    stalls = highest = 0
    for switch in stats["switches"].values():
        for port in switch["ports"].values():
            credits = port["ib"]["credits"]
            stalls += sum(vl["stalls"] for vl in credits)
            highest = max([highest] + [vl["max_occupancy_blocks"] for vl in credits])
    for host in stats["hosts"].values():
        stalls += sum(vl["stalls"] for vl in host["rnic"]["link"]["credits"])
    return stalls, highest


def test_incast_on_small_vl_buffers_has_no_drops_and_no_pause_frames(tmp_path):
    with Fabric(StarTopo(8), link={"bw": "20mbit"}, fabric="ib", switch={"vl_buffer": str(VL_BUFFER)},
                capture=str(tmp_path / "pcap")) as net:
        run = run_collective(net, "incast", 256 << 10, iterations=2, warmup=0)
        stats = net.stats()
    assert all(it.verified for it in run.iterations)
    assert sum(it.retransmissions for it in run.iterations) == 0
    assert stats["totals"]["drops"] == 0 and stats["totals"]["pfc_sent"] == 0
    stalls, highest = _ib_counters(stats)
    assert stalls > 0, "the senders never waited for credit: the buffers were not small"
    assert highest <= VL_BUFFER // 64  # the receiver never held more than it advertised
    # Converted captures decode as native InfiniBand, credits included, nothing malformed.
    converted = convert_directory(str(tmp_path / "pcap"))
    assert len(converted) == 16
    receiver = str(tmp_path / "pcap" / "s1-eth1.ib.pcap")
    data = _tshark(receiver, "infiniband.lrh.dlid", "infiniband.lrh.slid", "infiniband.lrh.vl",
                   "infiniband.bth.opcode", "infiniband.bth.destqp")
    writes = [row for row in data if row[3] in ("6", "7", "8", "9", "10", "11")]
    assert {row[0] for row in writes} == {"1"}  # every WRITE goes to h1 (LID 1) ...
    assert {row[1] for row in writes} == {str(lid) for lid in range(2, 9)}  # ... from the seven others
    assert {row[3] for row in data if row[0] not in ("1", "")} == {"17"}  # and h1 only ACKs (link packets have no LRH)
    links = [row for row in _tshark(receiver, "infiniband_link.op", "infiniband_link.fctbs", "infiniband_link.vl",
                                    "infiniband_link.fccl") if row[0]]
    assert links, "no flow-control packet in the capture"
    for path in converted:
        assert malformed_count(path) == 0, path


def test_every_ib_packet_of_a_capture_has_good_crcs(tmp_path):
    from scapy.utils import rdpcap

    with Fabric(LeafSpineTopo(), fabric="ib", capture=str(tmp_path / "pcap")) as net:
        write, server = run_pair(net["h4"], net["h1"], "write", 2 << 20)
        read, _ = run_pair(net["h3"], net["h2"], "read", 1 << 20)
    assert write["verified"] and server["verified"] and read["verified"]
    assert write["retransmissions"] == 0 and read["retransmissions"] == 0
    checked = links = 0
    for pcap in sorted((tmp_path / "pcap").iterdir()):
        for frame in (bytes(p) for p in rdpcap(str(pcap))):
            decoded = decode_data(frame)
            if decoded is not None:
                assert decoded.icrc_ok and decoded.vcrc_ok, pcap
                size = (int.from_bytes(frame[19:21], "big") & 0x7FF) * 4
                assert icrc_native(frame) == int.from_bytes(frame[15 + size - 4:15 + size], "little")
                assert vcrc(frame) == int.from_bytes(frame[15 + size:15 + size + 2], "little")
                checked += 1
            elif (fc := decode_fc(frame)) is not None:
                assert fc.lpcrc_ok
                links += 1
    assert checked > 3000 and links > 0
