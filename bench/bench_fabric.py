"""Fabric benchmark: build/teardown time, agent memory, switch frame rate.

Run as root from the repository root::

    sudo .venv/bin/python bench/bench_fabric.py [--max-k 12] [--memory-k 8] [--seconds 3] [--rounds 3]
        [--forwarding-only | --monitor-cost | --fattree-only | --bridge-floor [--rates 100000,0]]

It prints:
  * build and teardown time of fattree,4, then of fattree,k for growing k
    until a build takes longer than a minute (or --max-k);
  * the memory of the processes serving fattree,8's agents (``--memory-k``;
    RSS and PSS, since processes share the interpreter's pages);
  * frames per second one switch process forwards, for 64-byte and
    1500-byte frames, offered by a raw-socket generator in a host that
    bypasses its qdisc (on the other core), links set to 10 Gbit/s so that
    only the switch limits the rate;
  * the same with PFC and ECN on (lossless fabric, frames in priority 3
    and ECT(0), so the ECN check and the lossless accounting run) against
    plain forwarding (lossy fabric, ``--switch ecn=off``, priority 0),
    alternating the two for ``--rounds`` rounds;
  * the fidelity monitor's own cost: the PFC+ECN frame rate with the
    monitor on against off, back to back in each round (``--monitor-cost``
    runs only this);
  * the cost of closing and opening a host pause gate, and the time from
    resume until the paused UDP flow reaches the switch again;
  * ``--bridge-floor``: the floor, side by side.  star,2 at 10 Gbit/s (the
    same HTB trees), a generator in h1 offering 64-byte frames in priority
    3 with ECT(0) at each ``--rates`` rate (0: flat out), three ways through
    s1 in turn: the compiled switch (PFC and ECN on); a Linux bridge in
    s1's namespace with s1's agent stopped (no PFC, no MMU); nothing (the
    frames die at s1's veth: the generator's and the receive's own cost).
    Each gives the frames/s h2 received and the machine's busy time (both
    cores, /proc/stat) per frame offered, and that less the "none" run's:
    what forwarding a frame costs; for the switch also its process's CPU.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator.fabric import runstate  # noqa: E402
from emulator.fabric.agent_control import query_agent  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from emulator._core.mac import mac_bytes  # noqa: E402
from emulator.kernel.netns import entered  # noqa: E402
from topologies import FatTreeTopo, StarTopo  # noqa: E402

PACKET_QDISC_BYPASS = 20
SINK_MAC = "02:03:00:00:00:02"  # h2's veth under another address: its kernel drops what the switch forwards
SOL_PACKET = 263
FATTREE_K = (4, 18)  # fattree,18 is 1863 nodes; fattree,20 (2500) is over the node cap (bounds.MAX_NODES)


def build_and_teardown(k: int) -> tuple[float, float, Fabric]:
    net = Fabric(FatTreeTopo(k=k))
    net.start()
    net.check_agents()
    build = net.timings["build_s"]
    net.stop()
    return build, net.timings["teardown_s"], net


def _memory_kib(pid: int) -> tuple[int, int]:
    rss = pss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
    return rss, pss


def agent_memory(k: int) -> None:
    """RSS and PSS of the processes serving fattree,k's agents (many nodes to a process)."""
    with Fabric(FatTreeTopo(k=k)) as net:
        agents = len(net.state.agents)
        pids = sorted(set(net.state.agents.values()))
        totals = [_memory_kib(pid) for pid in pids]
    rss = sum(r for r, _ in totals) / 1024
    pss = sum(p for _, p in totals) / 1024
    print(f"fattree,{k} agents (switches and hosts): {agents} in {len(pids)} processes, RSS total {rss:.0f} MiB "
          f"({rss / agents:.2f} MiB per agent), PSS total {pss:.0f} MiB ({pss / agents:.2f} MiB per agent)")


def _udp_frame(size: int, dst_mac: bytes, src_mac: bytes, src_ip: str, dst_ip: str, tos: int = 0) -> bytes:
    """An Ethernet/IPv4/UDP frame of ``size`` bytes with a correct IP checksum."""
    payload = b"\0" * (size - 42)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, tos, size - 14, 0, 0, 64, 17, 0,
                     socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    words = sum(struct.unpack("!10H", ip))
    words = (words & 0xFFFF) + (words >> 16)
    ip = ip[:10] + struct.pack("!H", ~((words & 0xFFFF) + (words >> 16)) & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", 49152, 9, size - 34, 0)
    return dst_mac + src_mac + b"\x08\x00" + ip + udp + payload


def _forward(size: int, seconds: float, fabric: str = "lossless", switch: dict[str, str] | None = None,
             tos: int = 0, monitor: bool = True) -> dict[str, float]:
    """Offer frames to s1 from h1 as fast as possible; what s1 forwarded to h2."""
    with Fabric(StarTopo(n=2), link={"bw": "10gbit"}, fabric=fabric, switch=switch, monitor=monitor) as net:
        # h2 is a sink: its kernel takes the frames for another host's (another MAC on its veth) and drops them
        # first thing.  Each interface is received on its peer's CPU, so h2's receive runs on the switch's; with
        # h2's own address, its IP stack answered every frame to UDP port 9 with an ICMP error there, and the
        # switch was charged for it.  rx_packets counts the frames all the same.
        net["h2"].run(["ip", "link", "set", "h2-eth0", "address", SINK_MAC], check=True)
        port = net.plan.nodes["h1"].ports[0]
        frame = _udp_frame(size, mac_bytes(port.peer_mac), mac_bytes(port.mac), net["h1"].ip, net["h2"].ip, tos)
        with entered(net["h1"].netns):
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        tx.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
        tx.bind((port.ifname, 0))

        def forwarded() -> int:
            """Frames h2's NIC received: what the switch really forwarded."""
            out = net["h2"].run(["cat", "/sys/class/net/h2-eth0/statistics/rx_packets"]).stdout
            return int(out)

        offered = 0
        began = time.monotonic()
        warm = began + 0.5
        start_count = None
        while True:
            now = time.monotonic()
            if start_count is None and now >= warm:
                start_count, start_offered, start_time = forwarded(), offered, now
                start_cpu = _cpu_ns(net.state.agents["s1"])
            if now >= warm + seconds:
                break
            for _ in range(256):
                try:
                    tx.send(frame)
                    offered += 1
                except BlockingIOError:
                    break
        elapsed = time.monotonic() - start_time
        done = forwarded() - start_count
        cpu = _cpu_ns(net.state.agents["s1"]) - start_cpu
        stats = net.switch_stats("s1")
        tx.close()
    ingress = stats["ports"]["s1-eth1"]
    return {
        "rate": done / elapsed, "offered": (offered - start_offered) / elapsed,
        "cpu_ns_per_frame": cpu / max(done, 1),
        "kernel_drops": ingress["rx_kernel_drops"],
        "mmu_drops": sum(sum(q["drops"].values()) for p in stats["ports"].values() for q in p["priorities"]),
        "xoff": sum(q["pfc_sent"]["xoff"] for q in ingress["priorities"]),
        "ecn_marked": stats["totals"]["ecn_marked"],
    }


def _cpu_ns(pid: int) -> int:
    """The CPU time a process has run (ns, /proc/PID/schedstat): what its frames cost, however busy the machine."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def forwarding_rate(size: int, seconds: float) -> None:
    result = _forward(size, seconds)
    rate = result["rate"]
    print(f"{size}-byte frames: one switch process forwarded {rate:,.0f} frames/s "
          f"({rate * size * 8 / 1e6:,.0f} Mbit/s of frames); offered {result['offered']:,.0f}/s; "
          f"{result['kernel_drops']:,} dropped at its socket; {_per_core(result['cpu_ns_per_frame'])}")


def _per_core(cpu_ns_per_frame: float) -> str:
    """The switch process's CPU per forwarded frame, and the frame rate one core would give at that cost."""
    return (f"s1's process {cpu_ns_per_frame / 1000:.1f} us of CPU per frame forwarded "
            f"({1e9 / max(cpu_ns_per_frame, 1):,.0f} frames/s per core)")


TOS_P3_ECT0 = 0x68 | 0x02  # DSCP 26 (priority 3), ECN ECT(0)
FORWARDING_VARIANTS = {
    "plain": dict(fabric="lossy", switch={"ecn": "off"}, tos=0),
    "PFC+ECN": dict(fabric="lossless", switch=None, tos=TOS_P3_ECT0),
}


def pfc_ecn_cost(size: int, seconds: float, rounds: int) -> None:
    """Frames/s with PFC and ECN on against plain forwarding, alternated."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in FORWARDING_VARIANTS}
    for _ in range(rounds):
        for name, variant in FORWARDING_VARIANTS.items():
            runs[name].append(_forward(size, seconds, **variant))
    medians = {name: statistics.median(r["rate"] for r in results) for name, results in runs.items()}
    for name, results in runs.items():
        rates = ", ".join(f"{r['rate']:,.0f}" for r in results)
        print(f"{size}-byte frames, {name:7}: median {medians[name]:,.0f} frames/s over {rounds} runs ({rates}); "
              f"PFC XOFF sent {sum(r['xoff'] for r in results):,.0f}, "
              f"ECN marked {sum(r['ecn_marked'] for r in results):,.0f}, "
              f"MMU drops {sum(r['mmu_drops'] for r in results):,.0f}; "
              f"{_per_core(statistics.median(r['cpu_ns_per_frame'] for r in results))} (median)")
    ratio = medians["PFC+ECN"] / medians["plain"]
    print(f"{size}-byte frames: PFC+ECN forwards {ratio:.1%} of plain forwarding's frame rate ({ratio - 1:+.1%})")


def monitor_cost(size: int, seconds: float, rounds: int) -> None:
    """The switch's CPU per forwarded frame and its frame rate (PFC and ECN on), fidelity monitor on against off.

    The frame rate is the rate the switch could give at the CPU it got; on a
    machine whose speed drifts (other tenants, the hypervisor's steal, the
    generator on the other core) it swings by several times from run to
    run, so the monitor's cost is judged by the switch process's CPU time
    per forwarded frame (its scheduler statistics), alternated round by
    round: the median of the rounds' back-to-back ratios.
    """
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    ratios = []
    for i in range(rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        round_results = {on: _forward(size, seconds, **FORWARDING_VARIANTS["PFC+ECN"], monitor=on) for on in order}
        for on in order:
            results[on].append(round_results[on])
        ratios.append(round_results[True]["cpu_ns_per_frame"] / round_results[False]["cpu_ns_per_frame"])
    for on in (True, False):
        cpu = [r["cpu_ns_per_frame"] / 1e3 for r in results[on]]
        rates = [r["rate"] for r in results[on]]
        print(f"{size}-byte frames, PFC+ECN, monitor {'on ' if on else 'off'}: median {statistics.median(cpu):.2f} "
              f"us of switch CPU per frame ({', '.join(f'{c:.2f}' for c in cpu)}); median "
              f"{statistics.median(rates):,.0f} frames/s ({', '.join(f'{r:,.0f}' for r in rates)})")
    print(f"{size}-byte frames: the monitor costs {statistics.median(ratios) - 1:+.1%} switch CPU per frame "
          f"(median of {rounds} back-to-back ratios on/off: {', '.join(f'{r:.3f}' for r in ratios)})")


def pause_gate_timing(cycles: int = 30) -> None:
    """Cost of a gate change, and how soon traffic flows again after resume."""
    with Fabric(StarTopo(n=2), link={"bw": "20mbit"}) as net:
        gates = net.gates("h1")
        server = net["h2"].popen(["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        client = net["h1"].popen(["iperf3", "-c", net["h2"].ip, "-u", "-b", "10M", "-S", "0x60", "-t", "30"],
                                 stdout=subprocess.DEVNULL)
        time.sleep(0.5)

        def received() -> int:
            return sum(q["rx_frames"] for q in net.switch_stats("s1")["ports"]["s1-eth1"]["priorities"])

        pause_us, resume_us, restart_ms = [], [], []
        for _ in range(cycles):
            began = time.perf_counter()
            gates.pause(3)
            pause_us.append((time.perf_counter() - began) * 1e6)
            time.sleep(0.05)
            held = received()
            began = time.perf_counter()
            gates.resume(3)
            resume_us.append((time.perf_counter() - began) * 1e6)
            while received() <= held + 1:
                pass
            restart_ms.append((time.perf_counter() - began) * 1e3)
            time.sleep(0.05)
        client.kill(), server.kill()
        client.wait(), server.wait()
    print(f"pause gates ({cycles} cycles): pause call median {statistics.median(pause_us):.0f} us "
          f"(max {max(pause_us):.0f}), resume call median {statistics.median(resume_us):.0f} us "
          f"(max {max(resume_us):.0f}); resume to traffic at the switch median "
          f"{statistics.median(restart_ms):.2f} ms (max {max(restart_ms):.2f})")


TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
FLOOR_BURST = 32  # frames the floor's generator sends per look at the clock


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


def floor_run(way: str, size: int, rate: float, seconds: float) -> dict[str, float]:
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
            due += FLOOR_BURST / rate if rate else 0
            for _ in range(FLOOR_BURST):
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


def bridge_floor(rates: list[float], rounds: int, seconds: float, size: int = 64) -> None:
    """The compiled switch against a Linux bridge in its place and against nothing, at each offered rate."""
    print(f"the floor, {size}-byte frames:")
    ways = ("switch", "bridge", "none")
    for rate in rates:
        runs: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
        for i in range(rounds):
            for way in ways[i % 3:] + ways[:i % 3]:
                runs[way].append(floor_run(way, size, rate, seconds))
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


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-k", type=flags.whole("--max-k", FATTREE_K), default=12,
                        help="largest fat tree to try (4 to 18, default 12)")
    parser.add_argument("--memory-k", type=flags.whole("--memory-k", FATTREE_K), default=8,
                        help="the fat tree whose agents' memory is measured (4 to 18, default 8)")
    parser.add_argument("--fattree-only", action="store_true",
                        help="only the fat trees' build times and the agents' memory")
    parser.add_argument("--seconds", type=flags.real("--seconds", (0.1, 3600.0)), default=3.0,
                        help="measurement time of each frame-rate test (0.1 to 3600, default 3)")
    parser.add_argument("--rounds", type=flags.whole("--rounds", (1, 100)), default=3,
                        help="rounds of the PFC+ECN against plain comparison (1 to 100, default 3)")
    parser.add_argument("--forwarding-only", action="store_true",
                        help="only the frame-rate tests (skip fat trees, memory, pause gates)")
    parser.add_argument("--monitor-cost", action="store_true",
                        help="only the fidelity monitor's cost: frames/s with it on and off (PFC+ECN)")
    parser.add_argument("--bridge-floor", action="store_true",
                        help="only the floor: the switch against a Linux bridge and against nothing")
    parser.add_argument("--rates", default="100000,0",
                        help="--bridge-floor's offered frame rates, comma-separated (0: flat out; default 100000,0)")
    args = parser.parse_checked()
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates {args.rates!r}: expected numbers joined by commas")
    if any(not 0 <= r <= 5e6 for r in rates):
        parser.error("--rates: each 0 to 5000000")
    print(f"kernel {os.uname().release}, {os.cpu_count()} cores")
    if args.bridge_floor:
        bridge_floor(rates, args.rounds, args.seconds)
        return 0
    if args.monitor_cost:
        for size in (64, 1500):
            monitor_cost(size, args.seconds, args.rounds)
        return 0
    if args.forwarding_only:
        for size in (64, 1500):
            forwarding_rate(size, args.seconds)
        for size in (64, 1500):
            pfc_ecn_cost(size, args.seconds, args.rounds)
        return 0
    for k in range(4, args.max_k + 1, 2):
        build, teardown, net = build_and_teardown(k)
        plan = net.plan
        print(f"fattree,{k}: {len(plan.hosts())} hosts, {len(plan.switches())} switches, {len(plan.links)} links: "
              f"build {build:.2f} s, teardown {teardown:.2f} s", flush=True)
        if build > 60:
            break
    agent_memory(args.memory_k)
    if args.fattree_only:
        return 0
    for size in (64, 1500):
        forwarding_rate(size, args.seconds)
    for size in (64, 1500):
        pfc_ecn_cost(size, args.seconds, args.rounds)
    for size in (64, 1500):
        monitor_cost(size, args.seconds, args.rounds)
    pause_gate_timing()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as err:
        sys.exit(f"bench_fabric: {err}")
