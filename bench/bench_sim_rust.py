"""One collective on the compiled simulation backend, timed.

Run from the repository root (no root needed)::

    .venv/bin/python bench/bench_sim_rust.py fattree,8 lossless alltoall 1MiB 400gbit --delay 1us
    .venv/bin/python bench/bench_sim_rust.py fattree,8 ib alltoall 1MiB 400gbit --delay 1us \
        --switch vl_buffer=128KiB,fc_floor=0

One iteration, no warm-up, at a 4096-byte path MTU on links of MTU 4200 (the experiments'), the backend's
own pieces (``build_rust_fabric``, ``run_rust_collective``) without the runner, so a profiler sees the
simulation alone. Prints the build and run wall times, the events and events per second (per wall and per
CPU second: on a busy machine the CPU time is the fairer figure), the CCT, whether the data added up, the
fabric's counters and the process's peak memory. Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.cli import parse_options  # noqa: E402
from emulator.collectives.sim_ranks import run_rust_collective  # noqa: E402
from emulator.fabric.plan import make_plan  # noqa: E402
from emulator.fabric.topospec import build_topo  # noqa: E402
from emulator.model.switch_params import SWITCH_OPTIONS  # noqa: E402
from emulator.study.sim_fabric import build_rust_fabric  # noqa: E402
from emulator.units import parse_size  # noqa: E402

MTU = 4096
LINK_MTU = "4200"  # the experiments' link MTU for a 4096-byte path MTU


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topo", help="a topology spec, e.g. fattree,8")
    parser.add_argument("fabric", choices=("lossless", "lossy", "ib"))
    parser.add_argument("collective", help="incast, alltoall, allreduce, ...")
    parser.add_argument("size", help="bytes as nccl-tests counts them, e.g. 1MiB")
    parser.add_argument("bw", help="every link's rate, e.g. 400gbit")
    parser.add_argument("--delay", default="0us", help="every link's delay (default 0us)")
    parser.add_argument("--switch", help="the switches' settings as fabric-emu's --switch, e.g. the scale "
                        "experiment's IB credits vl_buffer=128KiB,fc_floor=0 (default: the derived ones)")
    args = parser.parse_args()
    size = parse_size(args.size)
    switch = parse_options(args.switch, dict.fromkeys(SWITCH_OPTIONS), "--switch")
    plan = make_plan(build_topo(args.topo), "sim", {"bw": args.bw, "delay": args.delay, "mtu": LINK_MTU})
    names = [node.name for node in plan.hosts()]
    label = f"{args.topo} {args.fabric} {args.collective} {args.size} at {args.bw}, delay {args.delay}" \
        + (f", switch {args.switch}" if args.switch else "")

    began = time.perf_counter()
    fabric = build_rust_fabric(plan, args.fabric, switch)
    built = time.perf_counter()
    cpu = time.process_time()
    run = run_rust_collective(fabric, names, args.collective, size, 1, 0, None, MTU)
    ran, cpu = time.perf_counter(), time.process_time() - cpu
    [iteration] = run.iterations
    print(f"{label}: build {built - began:.2f} s, run {ran - built:.2f} s, {fabric.events:,} events "
          f"({fabric.events / (ran - built):,.0f}/s), CPU {cpu:.2f} s ({fabric.events / cpu:,.0f} events/CPU s), simulated {fabric.now / 1e6:.3f} ms")
    print(f"  CCT {iteration.cct_us:.1f} us, verified {iteration.verified}, "
          f"retransmissions {iteration.retransmissions}, peak memory {_peak_gb():.2f} GB")
    print(f"  counters {fabric.totals()}")


if __name__ == "__main__":
    main()
