#!/usr/bin/env python3
"""Soak the lossless UDP incast: every datagram lost, and where the fabric counted it.

    sudo .venv/bin/python scripts/lossless_soak.py [--runs 100] [--captures both|on|off]
        [--seconds 4] [--bw 40mbit] [--prefix soak] [--details FILE]

Runs star,4 with ``--fabric lossless``, three iperf3 UDP senders at the
full link rate into h4 in DSCP 26 (priority 3, the lossless class),
``--runs`` times; ``--captures both`` alternates runs with a capture of
every link end (into a temporary directory, removed after each run) and
without.  One row per run: the datagrams each flow sent and lost
(iperf3's receiver), the fabric's losses by place (switch queues and
sockets, tc: the pause gates, veth, IPv4, sockets: UDP receive errors, the
RNIC) and UDP send errors, the verdict, and when it ended (UTC, to set
beside the kernel's log).  A run that lost datagrams with no
loss counted anywhere is UNACCOUNTED: the counting, not the fabric, is
then wrong.  A run that fails (a fabric that could not be built, an
iperf3 that failed) is a FAILED row, and the soak goes on.  A summary
follows; ``--details`` appends each run's loss places and verdict as a
JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator.errors import FabricError  # noqa: E402
from emulator.fabric.losses import KINDS  # noqa: E402
from emulator.fabric.runstate import check_run_name  # noqa: E402
from emulator.study.incast import IncastResult, run_incast  # noqa: E402
from emulator.units import parse_rate  # noqa: E402

RUNS = (1, 10_000)
SECONDS = (1, 3_600)


def row(number: int, capture: bool, result: IncastResult) -> tuple[str, dict[str, Any]]:
    """One run's line, and its record: datagrams sent/lost per flow, losses by place, the verdict."""
    stats = result.stats
    losses, fidelity = stats["losses"], stats["fidelity"]
    flows = " ".join(f"{f.client}:{f.sent_packets}/{f.lost_packets}" for f in result.flows)
    lost = sum(f.lost_packets or 0 for f in result.flows)
    counted = sum(losses["by_kind"].values())
    sndbuf = sum(h["kernel"]["udp"]["sndbuf_errors"] for h in stats["hosts"].values() if "udp" in h.get("kernel", {}))
    if lost and not counted:
        verdict = "UNACCOUNTED"
    else:
        verdict = "faithful" if fidelity["faithful"] else "NOT faithful"
    reasons = "; ".join(f"{node}: {line}" for node, lines in fidelity["unfaithful"].items() for line in lines)
    ended = time.strftime("%H:%M:%S", time.gmtime())
    text = (f"{number:4d} {ended} {'on ' if capture else 'off'} {flows:32} {lost:5d} "
            + " ".join(f"{losses['by_kind'][kind]:6d}" for kind in KINDS)
            + f" {sndbuf:6d}  {verdict}" + (f": {reasons}" if reasons else ""))
    record = {"run": number, "ended_utc": ended, "capture": capture,
              "flows": [{"client": f.client, "sent": f.sent_packets, "lost": f.lost_packets,
                         "out_of_order": f.out_of_order} for f in result.flows],
              "lost": lost, "counted": counted, "by_kind": losses["by_kind"], "sndbuf_errors": sndbuf,
              "places": losses["places"], "faithful": fidelity["faithful"], "unfaithful": fidelity["unfaithful"],
              "longest_stall_ns": fidelity["longest_stall_ns"], "lag_p99_ns": fidelity["lag_p99_ns"],
              "verdict": verdict}
    return text, record


def summary(records: list[dict[str, Any]]) -> str:
    lines = []
    for capture in (True, False):
        failed = [r for r in records if r["capture"] == capture and "failed" in r]
        runs = [r for r in records if r["capture"] == capture and "failed" not in r]
        if failed:
            lines.append(f"captures {'on ' if capture else 'off'}: {len(failed)} runs failed before their figures "
                         f"(not counted below): " + "; ".join(f"{r['run']}: {r['failed']}" for r in failed))
        if not runs:
            continue
        lossy = [r for r in runs if r["lost"]]
        flagged = [r for r in lossy if not r["faithful"]]
        unaccounted = [r for r in runs if r["verdict"] == "UNACCOUNTED"]
        counted = [r for r in runs if r["counted"]]
        lines.append(f"captures {'on ' if capture else 'off'}: {len(runs)} runs, {len(lossy)} lost datagrams "
                     f"({sum(r['lost'] for r in runs)} datagrams in all), {len(counted)} with a loss counted "
                     f"({sum(r['counted'] for r in runs)} frames), {len(flagged)} of the {len(lossy)} flagged, "
                     f"{len(unaccounted)} unaccounted, {sum(1 for r in runs if not r['faithful'])} not faithful "
                     "in all")
    return "\n".join(lines)


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=flags.whole("--runs", RUNS), default=100, help="runs (default 100)")
    parser.add_argument("--captures", choices=("both", "on", "off"), default="both",
                        help="capture every link end: on, off, or alternating (default)")
    parser.add_argument("--seconds", type=flags.whole("--seconds", SECONDS), default=4, help="seconds per run (default 4)")
    parser.add_argument("--bw", default="40mbit", help="link rate (default 40mbit)")
    parser.add_argument("--prefix", default="soak", help="run names are PREFIX and the run number (default soak)")
    parser.add_argument("--details", metavar="FILE", help="append each run's record as a JSON line")
    args = parser.parse_checked()
    try:
        parse_rate(args.bw)
        check_run_name(f"{args.prefix}{args.runs}")
    except FabricError as err:
        parser.exit(2, f"fabric-emu: {err}\n")
    try:
        details = open(args.details, "a") if args.details else None
    except OSError as err:
        parser.exit(2, f"fabric-emu: --details {args.details}: {err.strerror}\n")
    print(f"{'RUN':>4} {'END UTC':8} CAP {'SENT/LOST PER FLOW':32} {'LOST':>5} " + " ".join(f"{k.upper():>6}" for k in KINDS)
          + f" {'SNDBUF':>6}  VERDICT", flush=True)
    records: list[dict[str, Any]] = []
    began = time.monotonic()
    code = 0
    try:
        for number in range(1, args.runs + 1):
            capture = args.captures == "on" or (args.captures == "both" and number % 2 == 1)
            directory = tempfile.mkdtemp(prefix=f"{args.prefix}-pcap-") if capture else None
            try:
                result = run_incast("lossless", "udp", senders=3, bw=args.bw, seconds=args.seconds,
                                    capture=directory, name=f"{args.prefix}{number}")
                text, record = row(number, capture, result)
            except (FabricError, OSError, subprocess.SubprocessError) as err:  # on a shared machine a run another
                # process broke (its namespaces removed, its iperf3 killed) is a row, not the soak's end
                failure = str(err) if isinstance(err, FabricError) else f"{type(err).__name__}: {err}"
                text, record = f"{number:4d} {time.strftime('%H:%M:%S', time.gmtime())} " \
                    f"{'on ' if capture else 'off'} FAILED: {failure}", \
                    {"run": number, "capture": capture, "failed": failure}
            finally:
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)
            records.append(record)
            print(text, flush=True)
            if details is not None:
                details.write(json.dumps(record) + "\n")
                details.flush()
            elapsed = time.monotonic() - began
            print(f"lossless_soak: {number}/{args.runs} runs, {elapsed:.0f} s, about "
                  f"{elapsed / number * (args.runs - number):.0f} s left", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("lossless_soak: interrupted", file=sys.stderr)
        code = 130
    finally:
        if details is not None:
            details.close()
        print(summary(records), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
