#!/usr/bin/env python3
"""The smallest PFC headroom with zero drops under incast, against the formula.

    sudo .venv/bin/python scripts/headroom_sweep.py [--bw 50mbit] [--seconds 3]
        [--delay 0us] [--mtu 1500] [--headrooms 1514,3028,...] [--repeat 2]
        [--switch alpha=0.5,...] [--response-us N]

Runs the lossless incast of star,4 (three UDP senders at the full link rate
into h4, priority 3) once per headroom H (``--switch headroom=H``) and
prints, for each, the headroom drops (drops.headroom summed over the
switch's ports and priorities), the UDP datagrams lost and the PFC frames.
By default H starts at one frame (MTU + 14 bytes) and doubles until a run
has no drops, then bisects down to half a frame; ``--headrooms`` gives a
fixed list instead.  An H counts as drop-free only if all ``--repeat`` runs
of it are.

Next to the smallest drop-free H it prints the headroom formula of
docs (../shared/reference.md, emulator/model/switch_params.py):

    2 x rate x delay  +  2 x (MTU + 14)  +  rate x response

with the configured rate, delay and MTU, and the response time of both ends
measured first from a captured incast (emulator/study/pfc_response.py: (a) the
switch's XOFF generation plus (b) the sender's reaction, added per XOFF;
median, p99 and max), unless ``--response-us`` gives it.

The shared pool and the threshold must leave the headroom something to do:
if the smallest H of the sweep has no drops, the threshold is too high for
any frame to reach the headroom, and the sweep says so and is repeated with
a lower dynamic threshold (alpha divided by 4) unless ``--switch`` already
sets alpha or threshold.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator.study import pfc_analysis as pa  # noqa: E402
from emulator.study.incast import run_incast  # noqa: E402
from emulator.study.pfc_response import headroom_drops, measure_response  # noqa: E402
from emulator.fabric.plan import MAX_MTU, MIN_MTU  # noqa: E402
from emulator.model.switch_params import RESPONSE_NS, default_headroom  # noqa: E402
from emulator.units import format_rate, parse_rate, parse_size, parse_time  # noqa: E402

MAX_FRAMES = 256  # give up doubling beyond this many frames of headroom


@dataclass
class Trial:
    headroom: int
    drops: list[int]
    lost: list[int]
    pfc_sent: list[int]
    goodput_bps: list[float]

    @property
    def clean(self) -> bool:
        return not any(self.drops)


def parse_switch(text: str) -> dict[str, str]:
    options = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"bad --switch item {item!r}: expected key=value")
        options[key.strip()] = value.strip()
    return options


def formula(rate_bps: int, delay_ns: int, mtu: int, response_ns: float) -> int:
    """2 x rate x delay + 2 x frame + rate x response, in bytes."""
    return int(2 * rate_bps * delay_ns / 8e9 + 2 * (mtu + 14) + rate_bps * response_ns / 8e9)


class Sweep:
    def __init__(self, args: argparse.Namespace, switch: dict[str, str]) -> None:
        self.args = args
        self.switch = switch
        self.frame = args.mtu + 14
        self.trials: dict[int, Trial] = {}

    def run(self, headroom: int) -> Trial:
        if headroom in self.trials:
            return self.trials[headroom]
        trial = Trial(headroom, [], [], [], [])
        for _ in range(self.args.repeat):
            incast = run_incast("lossless", "udp", bw=self.args.bw, seconds=self.args.seconds, delay=self.args.delay,
                                mtu=self.args.mtu, switch={**self.switch, "headroom": str(headroom)})
            trial.drops.append(headroom_drops(incast.stats))
            trial.lost.append(sum(f.lost_packets or 0 for f in incast.flows))
            trial.pfc_sent.append(incast.totals["pfc_sent"])
            trial.goodput_bps.append(incast.aggregate_bps)
            if trial.drops[-1] and not self.args.headrooms:
                break  # one run with drops settles it
        self.trials[headroom] = trial
        frames = headroom / self.frame
        goodput = sum(trial.goodput_bps) / len(trial.goodput_bps)
        print(f"{headroom:>9} {frames:>7.2f} {'/'.join(map(str, trial.drops)):>15} "
              f"{'/'.join(map(str, trial.lost)):>15} {'/'.join(map(str, trial.pfc_sent)):>17} "
              f"{format_rate(int(goodput)):>16}", flush=True)
        return trial

    def search(self) -> int | None:
        """The smallest drop-free headroom found; None if none up to the limit."""
        if self.args.headrooms:
            for h in self.args.headrooms:
                self.run(h)
            clean = [h for h, t in self.trials.items() if t.clean]
            return min(clean) if clean else None
        low, high = None, None
        h = self.frame
        while h <= MAX_FRAMES * self.frame:
            if self.run(h).clean:
                high = h
                break
            low = h
            h *= 2
        if high is None:
            return None
        if low is None:
            return high
        while high - low > self.frame // 2:
            middle = (low + high) // 2
            if self.run(middle).clean:
                high = middle
            else:
                low = middle
        return high

    def smallest_dropped(self) -> bool:
        """Whether the smallest headroom tried had drops (the headroom mattered)."""
        return not self.trials[min(self.trials)].clean


def header() -> None:
    print(f"{'HEADROOM':>9} {'FRAMES':>7} {'HEADROOM DROPS':>15} {'UDP LOST':>15} {'PFC FRAMES SENT':>17} "
          f"{'RECEIVER GOODPUT':>16}")


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bw", default="50mbit", help="link rate (default 50mbit)")
    parser.add_argument("--seconds", type=flags.whole("--seconds", (1, 3600)), default=3,
                        help="incast duration per run (1 to 3600, default 3)")
    parser.add_argument("--delay", default="0us", help="link delay, modelled by the switch (default 0us)")
    parser.add_argument("--mtu", type=flags.whole("--mtu", (MIN_MTU, MAX_MTU)), default=1500,
                        help=f"link MTU ({MIN_MTU} to {MAX_MTU}, default 1500)")
    parser.add_argument("--headrooms", type=lambda t: [parse_size(x) for x in t.split(",")],
                        help="fixed list of headrooms (sizes: 1514, 6KiB, ...) instead of the search")
    parser.add_argument("--repeat", type=flags.whole("--repeat", (1, 100)), default=2,
                        help="runs per headroom that must all be drop-free (1 to 100, default 2)")
    parser.add_argument("--switch", default="", help="other --switch overrides, e.g. alpha=0.5 or threshold=30000")
    parser.add_argument("--response-us", type=flags.real("--response-us", (0.0, 1e6)),
                        help="response time to put in the formula, 0 to 1e6 us (skip measuring it)")
    args = parser.parse_checked()
    rate = parse_rate(args.bw)
    delay = parse_time(args.delay)
    frame = args.mtu + 14
    switch = parse_switch(args.switch)
    print(f"lossless incast star,4: 3 UDP senders at {format_rate(rate)} into h4, priority 3, "
          f"{args.seconds} s per run, delay {args.delay}, MTU {args.mtu} "
          f"(frame {frame} B, {pa.frame_time_ns(rate, frame) / 1000:.1f} us)"
          + (f", --switch {args.switch}" if args.switch else ""), flush=True)

    if args.response_us is not None:
        responses = {"given": args.response_us * 1000}
    else:
        result = measure_response(args.bw, args.seconds, delay=args.delay, mtu=args.mtu, switch=switch or None)
        s = pa.summarize(result.combined_ns)
        if s is None:
            print("no XOFF with a visible stop in the captured incast: cannot measure the response time")
            return 1
        responses = {"median": s.median, "p99": s.p99, "max": s.max}
        print(f"response time (a)+(b) from a captured incast (default headroom), {s.count} XOFFs: "
              f"median {s.median / 1000:.0f} us, p99 {s.p99 / 1000:.0f} us, max {s.max / 1000:.0f} us; "
              f"headroom drops in that run {result.headroom_drops}", flush=True)

    header()
    sweep = Sweep(args, switch)
    smallest = sweep.search()
    if not sweep.smallest_dropped():
        print(f"no drops even at H={min(sweep.trials)} B: the threshold keeps frames out of the headroom, "
              f"so the sweep says nothing about it", flush=True)
        if "alpha" in switch or "threshold" in switch:
            print("(--switch sets alpha/threshold already: lower it and rerun)")
            return 1
        switch = {**switch, "alpha": "0.25"}
        print("repeating with a lower dynamic threshold: --switch alpha=0.25 (default 1)", flush=True)
        header()
        sweep = Sweep(args, switch)
        smallest = sweep.search()
        if not sweep.smallest_dropped():
            print(f"still no drops at H={min(sweep.trials)} B with alpha=0.25: lower it further with --switch")

    print()
    if smallest is None:
        print("no headroom tried was drop-free")
    else:
        print(f"smallest headroom with zero drops: {smallest} B = {smallest / frame:.2f} frames "
              f"(largest with drops: {max((h for h, t in sweep.trials.items() if not t.clean), default=0)} B)")
    for label, response in responses.items():
        value = formula(rate, delay, args.mtu, response)
        print(f"formula 2*rate*delay + 2*frame + rate*response, response {label} {response / 1000:.0f} us: "
              f"{value} B = {value / frame:.2f} frames")
    default = default_headroom(rate, delay, args.mtu)
    print(f"emulator default (params.default_headroom, RESPONSE_NS = {RESPONSE_NS / 1e6:g} ms): "
          f"{default} B = {default / frame:.2f} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
