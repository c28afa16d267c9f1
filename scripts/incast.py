#!/usr/bin/env python3
"""Incast, lossless against lossy: the table of the lossless-Ethernet issue.

    sudo .venv/bin/python scripts/incast.py [--seconds 5] [--bw 50mbit]
        [--tcp-buffer 160KiB] [--capture DIR]

Runs star,4 with three senders at full rate into one receiver, priority 3:
UDP (lossless, lossy), then TCP with a small switch buffer (lossless,
lossy), and prints per variant the loss or retransmissions, the switch's
drops, PFC frames and the receiver's goodput.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator.study.incast import run_incast  # noqa: E402
from emulator.units import format_rate  # noqa: E402


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=flags.whole("--seconds", (1, 3600)), default=5,
                        help="each variant's incast (1 to 3600, default 5)")
    parser.add_argument("--bw", default="50mbit")
    parser.add_argument("--tcp-buffer", default="160KiB", help="switch buffer of the TCP variants")
    parser.add_argument("--capture", metavar="DIR", help="pcapng per link end, one subdirectory per variant")
    args = parser.parse_checked()
    variants = [("udp", "lossless", {}), ("udp", "lossy", {}),
                ("tcp", "lossless", {"buffer": args.tcp_buffer, "headroom": "24KiB"}),
                ("tcp", "lossy", {"buffer": args.tcp_buffer, "headroom": "24KiB"})]
    print(f"{'VARIANT':22} {'LOST/RETRANSMITTED':>20} {'DROPS':>7} {'PFC SENT':>9} {'RECEIVER GOODPUT':>26}")
    for protocol, fabric, switch in variants:
        capture = os.path.join(args.capture, f"{protocol}-{fabric}") if args.capture else None
        result = run_incast(fabric, protocol, bw=args.bw, seconds=args.seconds, switch=switch, capture=capture)
        if protocol == "udp":
            lost = "/".join(str(f.lost_packets) for f in result.flows) + " lost"
        else:
            lost = "/".join(str(f.retransmits) for f in result.flows) + " retr"
        share = result.aggregate_bps / result.rate_bps
        name = f"{protocol} {fabric}" + (f" ({switch['buffer']})" if switch else "")
        print(f"{name:22} {lost:>20} {result.totals['drops']:>7} {result.totals['pfc_sent']:>9} "
              f"{format_rate(int(result.aggregate_bps)):>16} ({share:.1%})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
