#!/usr/bin/env python3
"""The RDMA issue's table: perftest-style runs on the emulated RNIC.

    sudo .venv/bin/python scripts/rdma_perf.py [--topo leafspine] [--loss 1e-3] [--capture DIR]

On a lossless fabric (default leafspine, 100 Mbit/s links): a 64 MiB WRITE
h1 -> h2, a 16 MiB READ, eight 1 MiB SENDs h1 -> h4 (across a spine) and the
same 64 MiB over kernel TCP, with the CPU time of the receiving
application.  Then the 64 MiB WRITE h1 -> h4 again with random loss
``--loss`` on the link s2-h4 (both directions): go-back-N recovers it.
Last, an RDMA incast: h1, h2, h3 each WRITE 4 MiB into h4 at once on
star,4 with 30 Mbit/s links and a 512 KiB switch buffer, lossless (PFC
pauses the RNICs) against lossy (the switch drops, go-back-N resends).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from emulator.apps.perf import run_concurrent, run_pair  # noqa: E402
from emulator.fabric.topospec import build_topo  # noqa: E402
from emulator.units import format_size  # noqa: E402
from topologies import StarTopo  # noqa: E402


def row(label: str, result: dict, server: dict) -> None:
    cpu = server.get("server_cpu_s")
    print(f"{label:34} {format_size(result['bytes']):>9} {result['goodput_bps'] / 1e6:9.2f} "
          f"{result['retransmissions']:>8} {result.get('naks_received', 0):>5} {result.get('timeouts', 0):>8} "
          f"{'' if cpu is None else f'{cpu * 1e3:.2f} ms':>13} {str(result['verified']):>9}", flush=True)


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topo", default="leafspine")
    parser.add_argument("--loss", type=flags.real("--loss", (0.0, 1.0)), default=1e-3,
                        help="loss probability of the lossy run's s2-h4 link (0 to 1, default 1e-3)")
    parser.add_argument("--capture", metavar="DIR", help="pcapng per link end of the lossy run")
    args = parser.parse_checked()
    print(f"{'RUN':34} {'BYTES':>9} {'MBIT/S':>9} {'RETRANS':>8} {'NAKS':>5} {'TIMEOUTS':>8} "
          f"{'RECEIVER CPU':>13} {'VERIFIED':>9}")
    with Fabric(build_topo(args.topo), spec=args.topo) as net:
        row("write 64MiB h1->h2", *run_pair(net["h2"], net["h1"], "write", 64 << 20))
        row("read 16MiB h1<-h2", *run_pair(net["h2"], net["h1"], "read", 16 << 20))
        row("send 8x1MiB h1->h4", *run_pair(net["h4"], net["h1"], "send", 1 << 20, iters=8))
        row("tcp 64MiB h1->h2", *run_pair(net["h2"], net["h1"], "tcp", 64 << 20))
        print(f"switch drops {net.stats()['totals']['drops']}")
    topo = build_topo(args.topo)
    info = topo.linkInfo("s2", "h4")
    topo.setlinkInfo("s2", "h4", {**info, "loss": args.loss})
    with Fabric(topo, spec=args.topo, capture=args.capture, seed=3) as net:
        row(f"write 64MiB h1->h4, loss {args.loss:g}", *run_pair(net["h4"], net["h1"], "write", 64 << 20))
    print(f"\n{'INCAST 3 x 4MiB -> h4':24} {'DROPS':>6} {'PFC SENT':>9} {'PAUSED MS':>10} {'RETRANS':>8} "
          f"{'LAST DONE S':>12} {'VERIFIED':>9}")
    for fabric in ("lossless", "lossy"):
        with Fabric(StarTopo(4), spec="star,4", link={"bw": "30mbit"}, fabric=fabric,
                    switch={"buffer": "512KiB", "headroom": "64KiB", "alpha": "0.5"}) as net:
            pairs = run_concurrent(net["h4"], [net["h1"], net["h2"], net["h3"]], "write", 4 << 20)
            totals = net.stats()["totals"]
        clients = [client for client, _ in pairs]
        print(f"{fabric:24} {totals['drops']:>6} {totals['pfc_sent']:>9} {totals['host_paused_ns'] / 1e6:>10.1f} "
              f"{sum(c['retransmissions'] for c in clients):>8} {max(c['seconds'] for c in clients):>12.2f} "
              f"{str(all(c['verified'] and s['verified'] for c, s in pairs)):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
