"""One collective on the simulation backend, timed: wall time, events, events per second, peak memory.

Run from the repository root (no root needed)::

    .venv/bin/python bench/bench_sim_collective.py fattree,8 lossless alltoall 1MiB 400gbit [--delay 0us]

One iteration, no warm-up, on one core: the backend's own pieces
(``build_sim_fabric``, ``run_sim_collective``) without the runner, so a
profiler sees the simulation alone (``py-spy record -f raw -- .venv/bin/python
bench/bench_sim_collective.py ...``).  Prints the build and run times, the
events, the CCT, whether the data added up, the fabric's counters, the
heap's pending entries at the end and the process's peak memory.  Figures:
docs/performance.md ("The simulation backend at scale").
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.collectives.sim_ranks import run_sim_collective  # noqa: E402
from emulator.fabric.plan import make_plan  # noqa: E402
from emulator.fabric.topospec import build_topo  # noqa: E402
from emulator.study.sim_fabric import build_sim_fabric, totals  # noqa: E402
from emulator.units import parse_size  # noqa: E402

MTU = 4096
LINK_MTU = "4200"  # the experiments' link MTU for a 4096-byte path MTU


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topo", help="a topology spec, e.g. fattree,8")
    parser.add_argument("fabric", choices=("lossless", "lossy", "ib"))
    parser.add_argument("collective", help="incast, alltoall, allreduce, ...")
    parser.add_argument("size", help="bytes as nccl-tests counts them, e.g. 1MiB")
    parser.add_argument("bw", help="every link's rate, e.g. 400gbit")
    parser.add_argument("--delay", default="0us", help="every link's delay (default 0us)")
    args = parser.parse_args()
    began = time.perf_counter()
    plan = make_plan(build_topo(args.topo), "sim", {"bw": args.bw, "delay": args.delay, "mtu": LINK_MTU})
    planned = time.perf_counter()
    fabric = build_sim_fabric(plan, args.fabric)
    built = time.perf_counter()
    run = run_sim_collective(fabric.sim, fabric.hosts, args.collective, parse_size(args.size), 1, 0, None, MTU)
    ran = time.perf_counter()
    [iteration] = run.iterations
    events = fabric.sim.events
    print(f"{args.topo} {args.fabric} {args.collective} {args.size} at {args.bw}: plan {planned - began:.1f} s, "
          f"build {built - planned:.1f} s, run {ran - built:.1f} s, {events:,} events ({events / (ran - built):,.0f}/s)")
    print(f"CCT {iteration.cct_us:.1f} us, verified {iteration.verified}, retransmissions {iteration.retransmissions}")
    print(f"counters {totals(fabric)}")
    print(f"heap entries pending {fabric.sim.entries()}, peak memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")


if __name__ == "__main__":
    main()
