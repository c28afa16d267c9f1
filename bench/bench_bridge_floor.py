"""The floor: the compiled switch against a Linux bridge in its place, the same links, frames and load.

Run as root from the repository root::

    sudo .venv/bin/python bench/bench_bridge_floor.py [--rates 50000,100000,0] [--rounds 3] [--seconds 3]
        [--size 64]

star,2 at 10 Gbit/s (HTB on every port, as the fabric builds it), lossless fabric, a raw-socket generator in
h1 (bypassing h1's qdisc) offering UDP frames in priority 3 with ECT(0) to h2, at each ``--rates`` frame rate
(0: as fast as it can).  Three ways through s1, their order turned round by round:

  * switch: the compiled switch agent forwards (PFC and ECN on);
  * bridge: s1's agent is stopped and its two ports are enslaved to a Linux bridge in s1's namespace, which
    forwards in the kernel's receive path (no PFC, no MMU) through the same HTB trees;
  * none: s1's agent is stopped and nothing forwards: the frames die at s1's veth (the generator's and the
    receive's own cost, which the other two pay as well).

h2 is a sink (its kernel drops the frames as another host's, see bench_fabric.py).  Each line gives the frame
rate h2's veth received and the whole machine's busy time (/proc/stat, both cores: the kernel's work counts
wherever it ran, softirq on either core or ksoftirqd, the generator included) per frame offered, and that less
the same for "none": what forwarding a frame costs.  For the switch also its process's own CPU per frame.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator.fabric.agent_control import query_agent  # noqa: E402
from emulator.fabric import runstate  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from emulator._core.mac import mac_bytes  # noqa: E402
from emulator.kernel.netns import entered  # noqa: E402
from topologies import StarTopo  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fabric import PACKET_QDISC_BYPASS, SINK_MAC, SOL_PACKET, TOS_P3_ECT0, _cpu_ns, _udp_frame  # noqa: E402

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
BURST = 32  # frames the generator sends per look at the clock


def _machine_busy_ns() -> int:
    """Busy time of every CPU (all but idle and iowait), in ns."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) * TICK_NS


def _stop_switch(net: Fabric) -> None:
    query_agent(runstate.control_socket(net.state.run, "s1"), "stop")
    time.sleep(0.2)


def _bridge(net: Fabric) -> None:
    """s1's agent stopped, its ports enslaved to a bridge in s1's namespace."""
    _stop_switch(net)
    s1 = net["s1"]
    s1.run(["ip", "link", "add", "br0", "type", "bridge"], check=True)
    for port in ("s1-eth1", "s1-eth2"):
        s1.run(["ip", "link", "set", port, "master", "br0"], check=True)
    s1.run(["ip", "link", "set", "br0", "up"], check=True)


def measure(way: str, size: int, rate: float, seconds: float) -> dict[str, float]:
    """Frames/s h2 received and CPU per frame, with ``rate`` frames/s offered (0: flat out)."""
    with Fabric(StarTopo(n=2), link={"bw": "10gbit"}, fabric="lossless") as net:
        net["h2"].run(["ip", "link", "set", "h2-eth0", "address", SINK_MAC], check=True)
        if way == "bridge":
            _bridge(net)
        elif way == "none":
            _stop_switch(net)
        port = net.plan.nodes["h1"].ports[0]
        # Through the bridge a frame finds h2 by its own MAC (the bridge floods it until it learns where h2 is).
        dst = mac_bytes(port.peer_mac) if way == "switch" else mac_bytes(SINK_MAC)
        frame = _udp_frame(size, dst, mac_bytes(port.mac), net["h1"].ip, net["h2"].ip, TOS_P3_ECT0)
        with entered(net["h1"].netns):
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        tx.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
        tx.bind((port.ifname, 0))

        def received() -> int:
            return int(net["h2"].run(["cat", "/sys/class/net/h2-eth0/statistics/rx_packets"]).stdout)

        switch_pid = net.state.agents["s1"] if way == "switch" else None
        began = time.monotonic()
        warm, counted = began + 0.5, None
        due, offered = began, 0
        while True:
            now = time.monotonic()
            if counted is None and now >= warm:
                counted = (received(), offered, now, _machine_busy_ns(), _cpu_ns(switch_pid) if switch_pid else 0)
            if now >= warm + seconds:
                break
            if rate and now < due:
                continue
            due += BURST / rate if rate else 0
            for _ in range(BURST):
                try:
                    tx.send(frame)
                    offered += 1
                except BlockingIOError:
                    break
        frames0, offered0, time0, busy0, switch0 = counted
        elapsed = time.monotonic() - time0
        done = received() - frames0
        machine = _machine_busy_ns() - busy0
        switch_cpu = (_cpu_ns(switch_pid) - switch0) if switch_pid else 0
        tx.close()
    sent = offered - offered0
    return {"rate": done / elapsed, "offered": sent / elapsed,
            "machine_ns": machine / max(sent, 1), "switch_ns": switch_cpu / max(done, 1)}


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="50000,100000,0",
                        help="offered frame rates, comma-separated (0: as fast as the generator can)")
    parser.add_argument("--rounds", type=flags.whole("--rounds", (1, 20)), default=3)
    parser.add_argument("--seconds", type=flags.real("--seconds", (0.5, 60)), default=3.0)
    parser.add_argument("--size", type=flags.whole("--size", (64, 1500)), default=64)
    args = parser.parse_checked()
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates {args.rates!r}: expected numbers joined by commas")
    if any(r < 0 or r > 5e6 for r in rates):
        parser.error("--rates: each 0 to 5000000")
    print(f"kernel {os.uname().release}, {os.cpu_count()} cores, {args.size}-byte frames")
    ways = ("switch", "bridge", "none")
    for rate in rates:
        runs: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
        for i in range(args.rounds):
            for way in ways[i % 3:] + ways[:i % 3]:
                runs[way].append(measure(way, args.size, rate, args.seconds))
        offered = "flat out" if not rate else f"{rate:,.0f}/s offered"
        floor = statistics.median(r["machine_ns"] for r in runs["none"])
        for way, results in runs.items():
            frame_rates = ", ".join(f"{r['rate']:,.0f}" for r in results)
            cpu = ", ".join(f"{r['machine_ns'] / 1e3:.2f}" for r in results)
            median = statistics.median(r["machine_ns"] for r in results)
            line = (f"{offered}, {way}: median {statistics.median(r['rate'] for r in results):,.0f} frames/s "
                    f"forwarded ({frame_rates}), {statistics.median(r['offered'] for r in results):,.0f}/s "
                    f"offered; machine busy per frame offered median {median / 1e3:.2f} us ({cpu})")
            if way != "none":
                line += f", {(median - floor) / 1e3:.2f} us above none"
            if way == "switch":
                line += f"; s1's process {statistics.median(r['switch_ns'] for r in results) / 1e3:.2f} us per frame"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as err:
        sys.exit(f"bench_bridge_floor: {err}")
