"""The fidelity monitor's own cost: a switch's per-frame work with the monitor on against off.

Run from the repository root (no root needed)::

    .venv/bin/python bench/bench_monitor.py [--frames 320000]

The compiled switch (PFC and ECN on: lossless fabric, frames in priority 3
with ECT(0)) runs on wires in memory
(:class:`emulator._core.dataplane.UnwiredSwitch`), in this process, twice:
one with the monitor on, one with it off.  The same frames go from h1 to h2
through each one's receive, MMU and drain path in batches of 16, as its
event loop would take them, one batch to each switch in turn (the order
alternating), so that the machine's drift (other tenants, the hypervisor's
steal) falls on both alike.  It prints the time per frame of each (the call
from Python included) and the median of the ratios per block of 1000
batches.

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
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "unit")]

from emulator import flags  # noqa: E402
from emulator._core.roce import Framer  # noqa: E402
from emulator._core.transport import Opcode, Packet  # noqa: E402
from fake_agents import MAC_PEERS, MAC_S1, make_switch  # noqa: E402

BATCH = 16  # frames a wake-up finds waiting (the switch reads up to 64)
BLOCK_BATCHES = 1000  # batches per measured block
BLOCK = BLOCK_BATCHES * BATCH  # frames per block
MIN_FRAMES = 2 * BLOCK  # the quartiles of the blocks' ratios need two blocks
DSCP_26 = 26  # priority 3, lossless on the lossless fabric; the framer sets ECT(0)


def _frame() -> bytes:
    return Framer(MAC_PEERS[0], MAC_S1[0], "10.0.0.1", "10.0.0.2", 50000, dscp=DSCP_26).encode(
        Packet(Opcode.WRITE_MIDDLE, 0x11, 1, payload=bytes(1024)))


def _batch(switch: Any, frame: bytes, now: int) -> int:
    """One wake-up: BATCH frames in on h1's port, through the MMU, out to h2; ns it took."""
    before = switch.frames_sent(1)
    began = time.perf_counter_ns()
    for _ in range(BATCH):
        switch.receive(now, 0, frame)
    switch.settle()  # each frame processed at its last bit's time, as the loop's deadline would
    switch.after_events(now)
    elapsed = time.perf_counter_ns() - began
    switch.forget_sent()
    if switch.frames_sent(1) - before != BATCH:
        raise RuntimeError(f"the switch forwarded {switch.frames_sent(1) - before} of {BATCH} frames")
    return elapsed


def measure(frames: int) -> dict[bool, list[float]]:
    """Two switches, monitor on and off, fed batch by batch in turn (the order alternating): ns per frame
    of each, per block of 1000 batches.  Interleaving at this grain cancels the machine's drift."""
    frame = _frame()
    per_block: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for on in ("on", "off"):
            os.mkdir(os.path.join(tmp, on))
        agents = {on: make_switch(os.path.join(tmp, "on" if on else "off"), monitor=on) for on in (True, False)}
        now = time.monotonic_ns()
        spent = {True: 0, False: 0}
        for i in range(1, frames // BATCH + 1):
            for on in ((True, False) if i % 2 else (False, True)):
                spent[on] += _batch(agents[on], frame, now)
            now += BATCH * 90_000  # the frames' time at 100 Mbit/s: the wire keeps up, nothing piles up
            if i % BLOCK_BATCHES == 0:
                for on in (True, False):
                    per_block[on].append(spent[on] / BLOCK)
                spent = {True: 0, False: 0}
    return per_block


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=flags.whole("--frames", (MIN_FRAMES, 10**9)), default=320_000,
                        help=f"frames through each switch, {BATCH} per batch ({MIN_FRAMES} to 1e9, default 320000)")
    args = parser.parse_checked()
    measure(BLOCK)  # warm the caches
    blocks = measure(args.frames)
    ratios = [on / off for on, off in zip(blocks[True], blocks[False])]
    for on in (True, False):
        print(f"monitor {'on ' if on else 'off'}: median {statistics.median(blocks[on]) / 1e3:.2f} us per frame over "
              f"{len(blocks[on])} blocks of {BLOCK:,} frames (min {min(blocks[on]) / 1e3:.2f}, "
              f"max {max(blocks[on]) / 1e3:.2f})")
    print(f"the monitor costs {statistics.median(ratios) - 1:+.1%} of the switch's time per frame (median of "
          f"{len(ratios)} blocks' ratios on/off; quartiles {statistics.quantiles(ratios, n=4)[0]:.3f} to "
          f"{statistics.quantiles(ratios, n=4)[2]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
