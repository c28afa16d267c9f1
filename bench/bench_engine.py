"""The hold model on the Rust engine (issue 24: at least 5 M events/s on one core), natively and from Python.

Run from the repository root (no root needed; cargo builds the example)::

    .venv/bin/python bench/bench_engine.py [--events 10000000] [--python-events 1000000]
                                           [--pending 1000 100000 1000000]

The hold model (the classic event-set benchmark): ``--pending`` events are
outstanding at all times; each, when it runs, schedules one more at a
pseudo-random delay of 1 ns to 2^20 ns (the linear congruential sequence of
``bench/bench_sim_engine.py``), until the events asked for have run.  For
each queue size it prints:

- the Rust engine driven natively: ``crates/fabric-core/examples/hold.rs``,
  ``cargo run --release --example hold -- EVENTS PENDING...`` (typed events,
  no Python), the figure the issue's target is about;
- the compiled engine driven from Python (``emulator._core.engine``, each
  event a Python callback): what a callback from Rust into Python costs.

One process at a time, so each has a core to itself on the 2-core machine;
the figures move with the machine's load (docs/performance.md, "Simulation
engine").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import ModuleType

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator import flags  # noqa: E402
from emulator._core import engine as compiled_engine  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_DELAY_NS = 1 << 20


def delays(count: int) -> list[int]:
    """The hold model's delays, as examples/hold.rs draws them (bench_sim_engine.py uses these too)."""
    value, out = 12345, []
    for _ in range(count):
        value = (value * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(1 + value % MAX_DELAY_NS)
    return out


def hold(module: ModuleType, events: int, pending: int, table: list[int]) -> tuple[float, int]:
    """The hold model on ``module.Simulator`` with Python callbacks; (seconds, events run)."""
    sim = module.Simulator()
    index = [pending]

    def event() -> None:
        i = index[0]
        if i < len(table):
            index[0] = i + 1
            sim.after(table[i], event)

    for k in range(pending):
        sim.after(table[k], event)
    began = time.perf_counter()
    ran = sim.run(max_events=events)
    return time.perf_counter() - began, ran


def native(events: int, sizes: list[int]) -> None:
    """examples/hold.rs, built and run by cargo; its lines as they come."""
    command = ["cargo", "run", "--quiet", "--release", "-p", "fabric-core", "--example", "hold", "--",
               str(events), *map(str, sizes)]
    print("$ " + " ".join(command), flush=True)
    try:
        subprocess.run(command, cwd=REPO, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"bench_engine: the native hold model did not run: {error}", file=sys.stderr)


def main() -> None:
    parser = flags.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=flags.whole("--events", (1, 10**9)), default=10_000_000,
                        help="events the native engine runs per queue size (1 to 1e9, default 1e7)")
    parser.add_argument("--python-events", type=flags.whole("--python-events", (1, 10**8)), default=1_000_000,
                        help="events the engine driven from Python runs per queue size (1 to 1e8, default 1e6)")
    parser.add_argument("--pending", type=flags.whole("--pending", (1, 10**7)), nargs="+",
                        default=[1_000, 100_000, 1_000_000],
                        help="queue sizes: events pending at any time (1 to 1e7 each, default 1000 100000 1000000)")
    args = parser.parse_checked()
    native(args.events, args.pending)
    for pending in args.pending:
        table = delays(pending + args.python_events)
        seconds, ran = hold(compiled_engine, args.python_events, pending, table)
        print(f"emulator._core.engine (Python callbacks): {ran} events in {seconds:.3f} s: "
              f"{ran / seconds / 1e6:.2f} M events/s ({seconds / ran * 1e9:.1f} ns per event), {pending} pending",
              flush=True)


if __name__ == "__main__":
    main()
