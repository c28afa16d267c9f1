"""The fidelity monitor's own cost: a switch's per-frame work with the monitor on against off.

Run from the repository root (no root needed)::

    .venv/bin/python bench/bench_monitor.py [--frames 20000] [--rounds 7]

A switch agent (PFC and ECN on: lossless fabric, frames in priority 3 with
ECT(0)) runs on the unit tests' fake wire (tests/unit/fake_agents.py), in
this process: each round pushes the same frames from h1 to h2 through its
receive, MMU and drain path in batches, as its event loop would, once with
the monitor on and once off, in alternating order.  It prints the Python
time per frame of each and the median of the rounds' ratios.

Why not the real fabric: bench_fabric.py's flood of a real switch swings
from 5k to 40k frames/s from run to run on the 2-core VM (the kernel's
softirq work for the flood lands on whoever runs), far more than the
monitor could cost.  Here the kernel's share of a frame (a few us for the
socket calls) is left out, so the ratio is an upper bound on the monitor's
share of a real frame's cost.
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "unit")]

from emulator.wire.roce import Framer  # noqa: E402
from emulator.wire.transport import Opcode, Packet  # noqa: E402
from fake_agents import MAC_PEERS, MAC_S1, close_agent, make_switch, patch_wire  # noqa: E402

BATCH = 16  # frames a wake-up finds waiting (the switch reads up to 64)
DSCP_26 = 26  # priority 3, lossless on the lossless fabric; the framer sets ECT(0)


def per_frame_ns(frames: int, monitor: bool) -> float:
    """Push ``frames`` RoCEv2 frames h1 -> h2 through a fresh switch; Python ns per frame."""
    frame = Framer(MAC_PEERS[0], MAC_S1[0], "10.0.0.1", "10.0.0.2", 50000, dscp=DSCP_26).encode(
        Packet(Opcode.WRITE_MIDDLE, 0x11, 1, payload=bytes(1024)))
    with tempfile.TemporaryDirectory() as tmp:
        agent = make_switch(tmp, monitor=monitor)
        try:
            ingress, egress = agent.ports[0], agent.ports[1]
            now, forwarded = time.monotonic_ns(), 0
            began = time.perf_counter_ns()
            for _ in range(frames // BATCH):
                ingress.sock.inbox.extend([frame] * BATCH)
                agent._on_port(ingress.fd, select.EPOLLIN, now)
                agent.after_events(now)
                forwarded += len(egress.sock.sent)
                egress.sock.sent.clear()
                now += BATCH * 90_000  # the frames' time at 100 Mbit/s: the wire keeps up, nothing piles up
            elapsed = time.perf_counter_ns() - began
        finally:
            close_agent(agent)
    return elapsed / max(forwarded, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20000, help="frames per measurement")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of on against off")
    args = parser.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    ratios = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        patch_wire(monkeypatch)
        per_frame_ns(args.frames // 4, True)  # warm the interpreter's caches
        for i in range(args.rounds):
            order = (True, False) if i % 2 == 0 else (False, True)
            result = {on: per_frame_ns(args.frames, on) for on in order}
            for on in order:
                times[on].append(result[on])
            ratios.append(result[True] / result[False])
    for on in (True, False):
        print(f"monitor {'on ' if on else 'off'}: median {statistics.median(times[on]) / 1e3:.2f} us per frame "
              f"({', '.join(f'{t / 1e3:.2f}' for t in times[on])})")
    print(f"the monitor costs {statistics.median(ratios) - 1:+.1%} of the switch's Python per frame (median of "
          f"{args.rounds} back-to-back ratios on/off: {', '.join(f'{r:.3f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
