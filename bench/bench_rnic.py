"""RNIC benchmark: frames per second and CPU per GB of the emulated RNIC.

Run as root from the repository root::

    sudo .venv/bin/python bench/bench_rnic.py [--size 64MiB] [--rate 10gbit] [--mtu 1024]

First the cost of building and parsing one frame (timeit, best of 5).
Then two hosts on one switch, links at ``--rate`` (default 10 Gbit/s, far above
what Python agents move, so the RNICs and the switch set the pace, not tc).
One RDMA WRITE of ``--size`` from h1 to h2, then one READ.  For each it
prints the goodput, the requester's and the responder's frames per second
(RoCE frames out of h1's RNIC, into h2's), and the CPU seconds the two host
agents (the RNICs) and the switch spent, per GB moved, read from
/proc/PID/stat before and after.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator.fabric import runstate  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from emulator.apps.perf import run_pair  # noqa: E402
from emulator._core.rdma_params import PATHS_MTU  # noqa: E402
from emulator.units import parse_rate, parse_size  # noqa: E402
from topologies import StarTopo  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def rnic_counters(net: Fabric, host: str) -> dict:
    return net.stats()["hosts"][host]["rnic"]


def measure(net: Fabric, test: str, size: int, mtu: int) -> None:
    agents = runstate.load(net.run_name).agents
    pids = {name: agents[name] for name in ("h1", "h2", "s1")}
    before_cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    before = {h: rnic_counters(net, h) for h in ("h1", "h2")}
    result, _ = run_pair(net["h2"], net["h1"], test, size, mtu=mtu)
    after = {h: rnic_counters(net, h) for h in ("h1", "h2")}
    cpu = {name: cpu_seconds(pid) - before_cpu[name] for name, pid in pids.items()}
    seconds = result["seconds"]
    gigabytes = result["bytes"] / 1e9
    # WRITE: data leaves h1's RNIC; READ: data leaves h2's (the responder).
    data_host = "h1" if test == "write" else "h2"
    ack_host = "h2" if test == "write" else "h1"
    data_frames = after[data_host]["frames_sent"] - before[data_host]["frames_sent"]
    received = after[ack_host]["frames_received"] - before[ack_host]["frames_received"]
    print(f"{test:5} {result['bytes'] >> 20} MiB mtu {mtu}: {result['goodput_bps'] / 1e6:7.1f} Mbit/s goodput, "
          f"{data_frames / seconds:8.0f} data frames/s sent, {received / seconds:8.0f} frames/s received, "
          f"verified {result['verified']}, retransmissions {result['retransmissions']}")
    print(f"      CPU per GB: sender RNIC ({data_host}) {cpu[data_host] / gigabytes:6.2f} s, "
          f"receiver RNIC ({ack_host}) {cpu[ack_host] / gigabytes:6.2f} s, switch {cpu['s1'] / gigabytes:6.2f} s "
          f"(busy: {cpu[data_host] / seconds:.0%}, {cpu[ack_host] / seconds:.0%}, {cpu['s1'] / seconds:.0%} of a core)")


def codec_microseconds() -> None:
    """Encode and decode of one WRITE_MIDDLE frame with a 1 KiB payload."""
    import timeit

    from emulator._core.transport import Opcode, Packet
    from emulator._core.roce import Framer, decode

    framer = Framer("02:00:00:00:01:00", "02:01:00:00:01:01", "10.0.0.1", "10.0.0.2", 49200)
    packet = Packet(Opcode.WRITE_MIDDLE, 0x11, 1000, payload=bytes(1024))
    frame = framer.encode(packet)
    n = 20000
    encode = min(timeit.repeat(lambda: framer.encode(packet), number=n, repeat=5)) / n * 1e6
    parse = min(timeit.repeat(lambda: decode(frame), number=n, repeat=5)) / n * 1e6
    print(f"frame of {len(frame)} bytes: encode {encode:.1f} us, decode with ICRC check {parse:.1f} us")


def main() -> None:
    parser = flags.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="64MiB")
    parser.add_argument("--rate", default="10gbit")
    parser.add_argument("--mtu", type=flags.whole("--mtu", (min(PATHS_MTU), max(PATHS_MTU))), default=1024,
                        choices=PATHS_MTU, help="RDMA path MTU (default 1024)")
    args = parser.parse_checked()
    size = parse_size(args.size)
    parse_rate(args.rate)  # a bad rate fails here, before the fabric is built
    codec_microseconds()
    link_mtu = max(1500, args.mtu + 64)
    with Fabric(StarTopo(2), link={"bw": args.rate, "mtu": link_mtu}) as net:
        print(f"star,2, links {args.rate}, link MTU {link_mtu}")
        for test in ("write", "read"):
            measure(net, test, size, args.mtu)


if __name__ == "__main__":
    main()
