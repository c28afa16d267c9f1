#!/usr/bin/env python3
"""PFC timing measured from packet captures: generation, reaction, pause hold.

    sudo .venv/bin/python scripts/pfc_timing.py [--bw 50mbit] [--seconds 3]
        [--pauses 2ms,5ms,20ms] [--repeat 3] [--capture DIR] [--only response|hold]

Response (a lossless incast: star,4, three UDP senders at the full link
rate into h4, priority 3, every link end captured):

  (a) generation: for every XOFF a switch port sends (s1-ethN capture; a
      pause for priority 3 at the start or after an XON), the time from the
      last data frame that port received before it to the XOFF on the wire;
  (b) reaction: for every XOFF arriving at a sender (hN-eth0 capture), the
      time from its arrival to the sender's last priority-3 UDP frame before
      its traffic stops (a silence of --gap frame times), and how many data
      frames and bytes it still sent after the pause arrived;
  and the two added per XOFF (a + b), the response time of both ends that
  the headroom must cover.

Pause hold (star,2, a priority-3 UDP flow h1->h2 at the full link rate, no
XON): the switch sends single PFC frames of quanta Q to h1 (--pauses gives
their lengths; Q = length x rate / 512), spaced by more than the pause; from
h1-eth0's capture, the time from each pause's arrival to the first data
frame h1 sends after it ends (the at most one MTU leaked right after the
arrival does not end the hold), against Q x 512 / rate.  The lossless
Ethernet issue requires each within 10% or one frame time.

Times are printed in microseconds and in frame times (a 1514-byte frame at
the link rate).  Every fabric is torn down before the script exits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import bounds, flags  # noqa: E402
from emulator.study import pfc_analysis as pa  # noqa: E402
from emulator.fabric.builder import Fabric  # noqa: E402
from emulator.apps.iperf import TOS_PRIORITY_3  # noqa: E402
from emulator.study.pfc_response import DEFAULT_GAP_FRAMES, PRIORITY, ResponseResult, measure_response  # noqa: E402
from emulator.study.stats import percentile  # noqa: E402
from emulator._core.pfc import pause_ns  # noqa: E402
from emulator.units import format_rate, parse_rate, parse_time  # noqa: E402
from topologies import StarTopo  # noqa: E402

HOLD_SPACING_NS = 250_000_000  # silence after each pause has ended, before the next


# --- pause hold ----------------------------------------------------------------------------------


def quanta_for(duration_ns: int, rate_bps: int) -> int:
    """The quanta closest to ``duration_ns`` at ``rate_bps`` (512 bit times each)."""
    return max(1, min(0xFFFF, round(duration_ns * rate_bps / 512 / 1e9)))


def measure_pause_hold(bw: str = "50mbit", pauses_ns: tuple[int, ...] = (2_000_000, 5_000_000, 20_000_000),
                       repeat: int = 3, capture: str | None = None,
                       log: Callable[[str], None] | None = None) -> tuple[list[pa.Hold], int, int]:
    """Single PFC frames from s1 to h1 during a full-rate priority-3 flow.

    Returns the holds found in h1-eth0's capture, the number of PFC frames
    sent, and how many XOFFs the switch generated itself (should be 0).
    """
    rate = parse_rate(bw)
    quanta = [quanta_for(ns, rate) for ns in pauses_ns]
    plan = [q for q in quanta for _ in range(repeat)]
    duration = 1 + sum(pause_ns(q, rate) + HOLD_SPACING_NS for q in plan) / 1e9
    directory = capture or tempfile.mkdtemp(prefix="pfc-hold-")
    try:
        with Fabric(StarTopo(n=2), link={"bw": bw}, fabric="lossless", capture=directory, spec="star,2",
                    log=log) as net:
            h1, h2 = net["h1"], net["h2"]
            server = h2.popen(["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client = None
            try:
                deadline = time.monotonic() + 5
                while not h2.run(["ss", "-Hltn", "sport = :5201"]).stdout.strip():
                    if time.monotonic() > deadline:
                        raise RuntimeError("iperf3 server on h2 did not start")
                    time.sleep(0.02)
                client = h1.popen(["iperf3", "-c", h2.ip, "-u", "-b", str(rate), "-S", str(TOS_PRIORITY_3),
                                   "-t", str(int(duration) + 2)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.7)  # the flow is running at the link rate
                for q in plan:
                    net.send_pfc("s1", "s1-eth1", PRIORITY, q)
                    time.sleep((pause_ns(q, rate) + HOLD_SPACING_NS) / 1e9)
                stats = net.switch_stats("s1")
            finally:
                for proc in (client, server):
                    if proc is not None and proc.poll() is None:
                        proc.kill()
                        proc.wait()
            own_xoff = stats["ports"]["s1-eth1"]["priorities"][PRIORITY]["pfc_sent"]["xoff"]
        holds = pa.pause_holds(pa.read_capture(os.path.join(directory, "h1-eth0.pcapng")), rate, PRIORITY)
    finally:
        if capture is None:
            shutil.rmtree(directory, ignore_errors=True)
    return holds, len(plan), own_xoff


# --- printing --------------------------------------------------------------------------------------


def fmt(ns: float, frame_ns: int) -> str:
    return f"{ns / 1000:8.1f} us ({ns / frame_ns:5.2f} fr)"


def summary_line(label: str, values: list[int], frame_ns: int) -> str:
    s = pa.summarize(values)
    if s is None:
        return f"{label:34} none"
    return (f"{label:34} n={s.count:<5} median {fmt(s.median, frame_ns)}  p99 {fmt(s.p99, frame_ns)}  "
            f"max {fmt(s.max, frame_ns)}")


def print_response(result: ResponseResult) -> None:
    frame_ns = result.frame_ns
    print(f"frame time: 1514 B at {format_rate(result.rate_bps)} = {frame_ns / 1000:.1f} us; "
          f"agents run {result.scheduling}")
    print(f"incast: {result.totals.get('pfc_sent', 0)} PFC frames sent, headroom drops {result.headroom_drops}, "
          f"UDP lost {'/'.join(str(n) for n in result.lost)}")
    for port, events in sorted(result.generation.items()):
        print(summary_line(f"(a) generation {port}", [g.delay_ns for g in events], frame_ns))
    print(summary_line("(a) generation, all ports", result.generation_ns(), frame_ns))
    stopped = result.stopped()
    every = result.all_reactions()
    for host, events in sorted(result.reaction.items()):
        print(summary_line(f"(b) reaction {host}", [r.reaction_ns for r in events if r.stopped], frame_ns))
    print(summary_line("(b) reaction, all hosts", [r.reaction_ns for r in stopped], frame_ns))
    frames = pa.summarize([r.leaked_frames for r in stopped])
    nbytes = pa.summarize([r.leaked_bytes for r in stopped])
    if frames and nbytes:
        print(f"{'(b) sent after the pause arrived':34} frames median {frames.median:.0f}, p99 {frames.p99:.0f}, "
              f"max {frames.max:.0f}; bytes median {nbytes.median:.0f}, p99 {nbytes.p99:.0f}, max {nbytes.max:.0f}")
        histogram: dict[int, int] = {}
        for r in stopped:
            histogram[r.leaked_frames] = histogram.get(r.leaked_frames, 0) + 1
        print(f"{'(b) frames sent after the pause':34} " +
              ", ".join(f"{k}: {v}" for k, v in sorted(histogram.items())) + " (frames: XOFFs)")
    short = [r for r in every if not r.stopped]
    print(f"{'(b) XOFFs without a visible stop':34} {len(short)} of {len(every)} (XON arrived before a silence "
          f"of the gap; the host sent {sum(r.leaked_frames for r in short)} frames in those windows)")
    print(f"{'(b) frames sent while paused':34} {sum(r.sent_while_paused for r in every)} "
          f"(after the stop, before the XON)")
    print(summary_line("(a)+(b) response, per XOFF", result.combined_ns, frame_ns))


def print_holds(holds: list[pa.Hold], sent: int, own_xoff: int, rate_bps: int) -> bool:
    frame_ns = pa.frame_time_ns(rate_bps)
    print(f"{sent} PFC frames sent to h1, {len(holds)} holds measured; switch's own XOFFs on s1-eth1: {own_xoff}")
    print(f"{'QUANTA':>7} {'EXPECTED':>11} {'MEASURED':>11} {'ERROR':>10} {'ERROR %':>8} {'FRAMES':>7} "
          f"{'LEAKED':>11} {'OK':>4}")
    all_ok = True
    for h in holds:
        if h.measured_ns is None:
            print(f"{h.quanta:>7} {h.expected_ns / 1000:>8.0f} us {'-':>11} (h1 never resumed in the capture)")
            all_ok = False
            continue
        err = h.error_ns
        ok = abs(err) <= max(h.expected_ns / 10, frame_ns)
        all_ok &= ok
        print(f"{h.quanta:>7} {h.expected_ns / 1000:>8.0f} us {h.measured_ns / 1000:>8.0f} us "
              f"{err / 1000:>7.0f} us {100 * err / h.expected_ns:>7.1f}% {err / frame_ns:>7.2f} "
              f"{h.leaked_frames:>2} fr {h.leaked_bytes:>5} B {'yes' if ok else 'NO':>4}")
    by_quanta: dict[int, list[pa.Hold]] = {}
    for h in holds:
        if h.measured_ns is not None:
            by_quanta.setdefault(h.quanta, []).append(h)
    for q, group in sorted(by_quanta.items()):
        errors = [h.error_ns for h in group]
        median = percentile(errors, 50, nearest_rank=True)
        print(f"Q={q}: expected {group[0].expected_ns / 1000:.0f} us, error median {median / 1000:.0f} us "
              f"({100 * median / group[0].expected_ns:.1f}%), max {max(errors) / 1000:.0f} us "
              f"({max(errors) / frame_ns:.2f} frame times)")
    leaky = [h for h in holds if h.leaked_bytes > pa.FULL_FRAME]
    if leaky:
        print(f"warning: {len(leaky)} pauses leaked more than one MTU before the gap")
    print(f"requirement (each within 10% or one frame time, {frame_ns / 1000:.0f} us): "
          f"{'met' if all_ok and holds else 'NOT met'}")
    return all_ok and bool(holds)


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bw", default="50mbit", help="link rate (default 50mbit)")
    parser.add_argument("--seconds", type=flags.whole("--seconds", (1, 3600)), default=3,
                        help="incast duration (1 to 3600, default 3)")
    parser.add_argument("--senders", type=flags.whole("--senders", (1, bounds.MAX_NODES - 2)), default=3,
                        help=f"incast senders (1 to {bounds.MAX_NODES - 2}: star,N+1 within the node cap; default 3)")
    parser.add_argument("--gap", type=flags.real("--gap", (1.0, 1000.0)), default=DEFAULT_GAP_FRAMES,
                        help="silence, in frame times, that counts as a sender stopped (1 to 1000, default 3)")
    parser.add_argument("--pauses", default="2ms,5ms,20ms",
                        help="pause lengths of the hold test (default 2ms,5ms,20ms)")
    parser.add_argument("--repeat", type=flags.whole("--repeat", (1, 100)), default=3,
                        help="PFC frames per pause length (1 to 100, default 3)")
    parser.add_argument("--capture", metavar="DIR", help="keep the pcapng files in DIR/response and DIR/hold")
    parser.add_argument("--only", choices=("response", "hold"), help="run one of the two measurements")
    args = parser.parse_checked()
    rate = parse_rate(args.bw)
    ok = True
    if args.only in (None, "response"):
        print(f"== PFC response: lossless incast star,{args.senders + 1}, {args.senders} UDP senders at "
              f"{format_rate(rate)}, priority {PRIORITY}, {args.seconds} s", flush=True)
        capture = os.path.join(args.capture, "response") if args.capture else None
        print_response(measure_response(args.bw, args.seconds, args.senders, capture=capture, gap_frames=args.gap))
    if args.only in (None, "hold"):
        pauses = tuple(parse_time(t) for t in args.pauses.split(","))
        print(f"== Pause hold: star,2, priority-{PRIORITY} UDP h1->h2 at {format_rate(rate)}, single PFC frames "
              f"from s1 to h1, no XON", flush=True)
        capture = os.path.join(args.capture, "hold") if args.capture else None
        holds, sent, own = measure_pause_hold(args.bw, pauses, args.repeat, capture)
        ok = print_holds(holds, sent, own, rate)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
