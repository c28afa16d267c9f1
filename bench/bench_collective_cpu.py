"""Where a collective's CPU goes: per agent, per frame, kernel against Python.

Run as root from the repository root::

    sudo .venv/bin/python bench/bench_collective_cpu.py [--fabric lossless] [--bw 20mbit]
        [--collective allreduce] [--size 1MiB] [--iterations 3] [--mtu 4096] [--workers N] [--perf DIR]

It builds star,8 (the headline's shape), runs one warm-up iteration, then
``--iterations`` measured ones, and prints for each data-plane process
(``--workers`` of them; the nodes it serves) its user and system CPU time
(from /proc/PID/stat) and context switches, CPU per frame, the whole machine's busy time (/proc/stat, with the
hypervisor's steal) against the agents' share, and the mean CCT.  With
``--perf DIR`` (needs perf) it records the switch's and h2's stacks with
``perf record -g`` during the measured iterations and prints how their
samples split between the interpreter, the kernel and libc.  Figures:
docs/performance.md ("Where a frame's time goes").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import bounds, flags  # noqa: E402
from emulator.collectives.coordinator import run_collective  # noqa: E402
from emulator._core.rdma_params import PATHS_MTU, ROCE_OVERHEAD  # noqa: E402
from emulator.study.experiment import EXPERIMENT_LINK_MTU  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from emulator.units import parse_size  # noqa: E402
from topologies import StarTopo  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[int, int, int, int]:
    """utime, stime (ticks), voluntary and involuntary context switches of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    switches = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if "ctxt_switches" in line:
                key, value = line.split(":")
                switches[key] = int(value)
    return int(fields[11]), int(fields[12]), switches["voluntary_ctxt_switches"], \
        switches["nonvoluntary_ctxt_switches"]


def _machine() -> tuple[int, int]:
    """Busy (all but idle and iowait) and steal ticks of the whole machine."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return sum(values) - values[3] - values[4], values[7]


def _dso_split(path: str) -> str:
    report = subprocess.run(["perf", "report", "-i", path, "--stdio", "--no-children", "--sort", "dso", "-g", "none"],
                            capture_output=True, text=True, check=False).stdout
    shares = [line.split(None, 1) for line in report.splitlines() if "%" in line and not line.startswith("#")]
    return ", ".join(f"{name.strip()} {share}" for share, name in shares[:4])


def _named(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 3 else f"{nodes[0]} and {len(nodes) - 1} more"


def _perf_targets(agents: dict[str, int]) -> dict[str, int]:
    """s1's and h2's processes, once each (they may be one)."""
    return {name: pid for pid, name in {agents["s1"]: "s1", agents["h2"]: "h2"}.items()}


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fabric", default="lossless", choices=("lossless", "lossy", "ib"))
    parser.add_argument("--bw", default="20mbit")
    parser.add_argument("--collective", default="allreduce")
    parser.add_argument("--size", default="1MiB")
    parser.add_argument("--iterations", type=flags.whole("--iterations", bounds.ITERATIONS), default=3)
    parser.add_argument("--mtu", type=flags.whole("--mtu", (min(PATHS_MTU), max(PATHS_MTU))), default=4096,
                        choices=PATHS_MTU,
                        help="RDMA path MTU (default 4096, the experiments'; links then 4200 bytes, else 1500)")
    parser.add_argument("--perf", metavar="DIR", help="record perf profiles of s1's and h2's processes into DIR")
    parser.add_argument("--workers", type=flags.whole("--workers", bounds.WORKERS), default=None,
                        help=f"data-plane processes serving the agents ({bounds.WORKERS[0]} to {bounds.WORKERS[1]}; default: one per core)")
    args = parser.parse_checked()
    if args.perf and shutil.which("perf") is None:
        print("bench_collective_cpu: --perf needs perf (linux-perf)", file=sys.stderr)
        return 1
    link_mtu = EXPERIMENT_LINK_MTU if args.mtu + ROCE_OVERHEAD > 1500 else 1500
    headroom = "72KiB" if link_mtu > 1500 else "48KiB"  # the headline's
    switch = {"buffer": "1MiB", "headroom": headroom} if args.fabric != "ib" else None
    with Fabric(StarTopo(n=8), link={"bw": args.bw, "mtu": link_mtu}, fabric=args.fabric, switch=switch,
                workers=args.workers) as net:
        agents = net.state.agents
        processes: dict[int, list[str]] = {}  # pid -> the nodes it serves
        for name, pid in agents.items():
            processes.setdefault(pid, []).append(name)
        size = parse_size(args.size)
        run_collective(net, args.collective, size, 1, 0, mtu=args.mtu)  # warm-up: QPs, caches, the first pauses
        stats0 = net.stats()
        before, machine0 = {pid: _cpu(pid) for pid in processes}, _machine()
        recorders = []
        if args.perf:
            os.makedirs(args.perf, exist_ok=True)
            recorders = [subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(pid), "-o",
                                           os.path.join(args.perf, f"{name}.perf")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                         for name, pid in _perf_targets(agents).items()]
        began = time.monotonic()
        run = run_collective(net, args.collective, size, args.iterations, 0, mtu=args.mtu)
        wall = time.monotonic() - began
        for recorder in recorders:
            recorder.send_signal(2)
            recorder.wait()
        after, machine1 = {pid: _cpu(pid) for pid in processes}, _machine()
        stats1 = net.stats()
    cct = sum(it.cct_us for it in run.iterations) / len(run.iterations) / 1e3
    print(f"{args.collective} of {args.size} on star,8, {args.fabric}, {args.bw}, path MTU {args.mtu}: {args.iterations} iterations, "
          f"mean CCT {cct:.1f} ms, {wall:.2f} s wall")
    sent = {name: stats1["hosts"][name]["rnic"]["frames_sent"] - stats0["hosts"][name]["rnic"]["frames_sent"]
            for name in stats1["hosts"]}
    switch_frames = sum(sent.values())  # every frame a host sends crosses s1 once on star,8
    for pid, nodes in processes.items():
        user, system = [(after[pid][i] - before[pid][i]) / TICK for i in (0, 1)]
        # A frame forwarded by s1, and one sent (and one received) by each host served here.
        frames = (switch_frames if "s1" in nodes else 0) + sum(sent.get(name, 0) for name in nodes)
        print(f"  process {pid} ({_named(nodes)}): user {user:.2f} s, sys {system:.2f} s; "
              f"{(user + system) / frames * 1e6:.0f} us of CPU per frame (s1 forwarded, hosts sent: {frames}); "
              f"context switches {after[pid][2] - before[pid][2]} voluntary, "
              f"{after[pid][3] - before[pid][3]} involuntary")
    agents_cpu = sum(after[p][0] - before[p][0] + after[p][1] - before[p][1] for p in processes) / TICK
    busy, steal = [(machine1[i] - machine0[i]) / TICK for i in (0, 1)]
    print(f"  machine: {busy:.2f} CPU s busy of {os.cpu_count() * wall:.2f} (steal {steal:.2f}); agents "
          f"{agents_cpu:.2f}, the rest (the ranks, their start-up included, the coordinator, unattributed softirq) "
          f"{busy - agents_cpu:.2f}")
    for name in _perf_targets(agents) if args.perf else ():
        print(f"  {name}'s process perf samples: {_dso_split(os.path.join(args.perf, f'{name}.perf'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
