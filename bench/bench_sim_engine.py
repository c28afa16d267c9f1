"""Events per second of the simulation engine driven from Python, against SimPy, on one core (the hold model).

Run from the repository root (no root needed)::

    .venv/bin/python bench/bench_sim_engine.py [--events 1000000] [--pending 1000]

The hold model (the classic event-set benchmark): ``--pending`` events are
outstanding at all times; each, when it runs, schedules one more at a
pseudo-random delay (a fixed linear congruential sequence, the same for
both engines), until ``--events`` have run.  The compiled engine
(``emulator._core.engine``) schedules plain Python callbacks; SimPy runs the same as that many processes, each
yielding a timeout (SimPy's way: a generator resumed per event).  SimPy is
measured only if it is installed (`.venv/bin/pip install simpy`); it is no
dependency of the project.  Figures: docs/performance.md ("Simulation
engine").
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from bench_engine import delays, hold  # noqa: E402 - the hold model's delays and driver, shared
from emulator._core import engine as compiled_engine  # noqa: E402


def simpy_run(events: int, pending: int, table: list[int]) -> tuple[float, int] | None:
    try:
        import simpy
    except ImportError:
        return None
    env = simpy.Environment()
    index = [pending]
    ran = [0]

    def process(first: int):
        yield env.timeout(first)
        while True:
            ran[0] += 1
            i = index[0]
            if i >= events:
                return
            index[0] = i + 1
            yield env.timeout(table[i])

    for k in range(pending):
        env.process(process(table[k]))
    began = time.perf_counter()
    env.run()
    return time.perf_counter() - began, ran[0]


def main() -> None:
    parser = flags.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=flags.whole("--events", (1, 10**8)), default=1_000_000,
                        help="events to run (1 to 1e8, default 1000000)")
    parser.add_argument("--pending", type=flags.whole("--pending", (1, 10**8)), default=1000,
                        help="events pending at any time (1 to --events, default 1000)")
    args = parser.parse_checked()
    if args.pending > args.events:
        parser.error(f"--pending {args.pending}: must be at most --events ({args.events})")
    table = delays(args.events + args.pending)
    seconds, ran = hold(compiled_engine, args.events, args.pending, table)
    print(f"emulator._core.engine: {ran} events in {seconds:.2f} s: {ran / seconds / 1e3:.0f}k events/s "
          f"({seconds / ran * 1e9:.0f} ns per event), {args.pending} pending")
    measured = simpy_run(args.events, args.pending, table)
    if measured is None:
        print("simpy: not installed (.venv/bin/pip install simpy to compare)")
        return
    seconds_simpy, ran_simpy = measured
    print(f"simpy: {ran_simpy} events in {seconds_simpy:.2f} s: {ran_simpy / seconds_simpy / 1e3:.0f}k events/s "
          f"({seconds_simpy / ran_simpy * 1e9:.0f} ns per event); ours is {seconds_simpy / ran_simpy / (seconds / ran):.1f}x "
          "as fast per event")


if __name__ == "__main__":
    main()
