#!/usr/bin/env python3
"""The InfiniBand-like fabric's incast: credits instead of pause frames.

    sudo .venv/bin/python scripts/ib_incast.py [--vl-buffer 8KiB] [--iterations 5]

star,8 with 20 Mbit/s links on --fabric ib, per-VL receive buffers far
smaller than the burst (seven hosts WRITE 256 KiB each into h1). Prints
the CCT of each iteration, drops, pause frames and retransmissions (all
0 when credits work), how often each sender waited for credit, the fullest
VL buffer of the switch against what it advertised, and the flow-control
packets the switch sent.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import bounds, flags  # noqa: E402
from emulator.collectives.coordinator import run_collective  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from emulator.units import parse_size  # noqa: E402
from topologies import StarTopo  # noqa: E402


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vl-buffer", default="8KiB")
    parser.add_argument("--iterations", type=flags.whole("--iterations", bounds.ITERATIONS), default=5)
    args = parser.parse_checked()
    blocks = parse_size(args.vl_buffer) // 64
    with Fabric(StarTopo(8), spec="star,8", link={"bw": "20mbit"}, fabric="ib",
                switch={"vl_buffer": args.vl_buffer}) as net:
        run = run_collective(net, "incast", 256 << 10, args.iterations, warmup=1)
        stats = net.stats()
    ports = stats["switches"]["s1"]["ports"].values()
    print(f"CCT ms: {[round(it.cct_us / 1e3, 1) for it in run.iterations]}, "
          f"verified {all(it.verified for it in run.iterations)}")
    print(f"drops {stats['totals']['drops']}, PFC sent {stats['totals']['pfc_sent']}, "
          f"retransmissions {sum(it.retransmissions for it in run.iterations)}")
    stalls = {h: sum(vl["stalls"] for vl in s["rnic"]["link"]["credits"]) for h, s in sorted(stats["hosts"].items())}
    print(f"credit stalls per host: {stalls}")
    print(f"fullest switch VL buffer: {max(vl['max_occupancy_blocks'] for p in ports for vl in p['ib']['credits'])} "
          f"of {blocks} advertised blocks")
    print(f"flow-control packets sent by the switch: {sum(vl['fc_sent'] for p in ports for vl in p['ib']['credits'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
