"""The fabric plan of a topology, and an experiment's checks on it, timed.

Run from the repository root (no root needed), one topology per process so the peak is its own::

    .venv/bin/python bench/bench_plan.py fattree,24 [--checks allreduce 1MiB]

Prints the topology's size (nodes, hosts, switches, routes = switches x hosts), the wall time to build the
topology, to plan it without routes and to compute the routes, and the process's peak memory.  With
``--checks COLLECTIVE SIZE`` it then times the checks ``fabric-emu run`` makes before running a one-variant
experiment of that collective on the simulation backend (load_experiment, as the command line calls it), in
a fresh process of their own: nothing is simulated.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.fabric.plan import compute_routes, make_plan  # noqa: E402
from emulator.fabric.topospec import build_topo  # noqa: E402

LINK = {"bw": "400gbit", "delay": "1us", "mtu": "4200"}
EXPERIMENT = """name = "bench"
topo = "{topo}"
collective = "{collective}"
size = "{size}"
backend = "sim"
link = {{ bw = "400gbit", delay = "1us" }}

[[variants]]
name = "a"
"""


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def plan(spec: str) -> None:
    began = time.perf_counter()
    topo = build_topo(spec, backend="sim")
    built = time.perf_counter()
    fabric = make_plan(topo, "bench", LINK, routes=False)
    planned = time.perf_counter()
    fabric.routes = compute_routes(fabric)
    routed = time.perf_counter()
    hosts, switches = len(fabric.hosts()), len(fabric.switches())
    print(f"{spec}: {hosts + switches} nodes ({hosts} hosts, {switches} switches, {hosts * switches:,} routes); "
          f"topology {built - began:.2f} s, plan without routes {planned - built:.2f} s, routes "
          f"{routed - planned:.2f} s, make_plan {routed - built:.2f} s; peak {_peak_mib():.0f} MiB")


def checks(spec: str, collective: str, size: str) -> None:
    """The experiment's checks, in this (fresh) process."""
    from emulator.study.experiment import load_experiment

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "bench.toml")
        with open(path, "w", encoding="ascii") as f:
            f.write(EXPERIMENT.format(topo=spec, collective=collective, size=size))
        began = time.perf_counter()
        experiment = load_experiment(path)
        took = time.perf_counter() - began
    [variant] = experiment.variants
    print(f"{spec} {collective} {size} on the simulation backend: checks {took:.2f} s "
          f"({variant.backend}, {variant.fabric}, path MTU {variant.mtu}); peak {_peak_mib():.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topo", help="a topology spec, e.g. fattree,24")
    parser.add_argument("--checks", nargs=2, metavar=("COLLECTIVE", "SIZE"),
                        help="also time an experiment's checks of this collective and size (e.g. allreduce 1MiB)")
    parser.add_argument("--only-checks", action="store_true", help=argparse.SUPPRESS)  # the --checks process
    args = parser.parse_args()
    if args.only_checks:
        checks(args.topo, *args.checks)
        return
    plan(args.topo)
    if args.checks:
        subprocess.run([sys.executable, os.path.abspath(__file__), args.topo, "--checks", *args.checks,
                        "--only-checks"], check=True)


if __name__ == "__main__":
    main()
