"""The range of every number a user gives, and the caps on a topology's size.

Both are checked before anything is built, so a mistake costs a second
and one line, not minutes of building followed by a traceback.  What the
machine itself can hold is :mod:`emulator.fabric.capacity`.

Caps, one set per backend (:func:`check_topology`), each set by what
that backend does with a node:

- the emulator (``MAX_NODES``): every node is a network namespace with an
  agent, every link a veth pair with tc; 2048 nodes is far more than a
  machine holds (capacity: fattree,12's 612 nodes take 455 MiB) and keeps
  every per-node table of the builder small;
- the simulation backend (``SIM_MAX_NODES``, ``SIM_MAX_ROUTES``): a node
  is a few objects in one process, and planning is per edge switch
  (fattree,24's 4,176 nodes plan in about half a second and 45 MB,
  fattree,48's 30,528 in 14 s and 270 MB), but the builders still hand
  every switch one route per host to the engine, about 420 B and 4 to 10
  us each (fattree,24: 2.5 million routes, 11.5 s and 1.0 GB; fattree,28:
  5.4 million, 55 s and 2.3 GB), and a ring with a host per switch plans
  per host (ring,2828: 8 million routes, 35 s and 1 GB).  Routes
  (switches x hosts) are capped at 8 million, about 3.5 GB and a minute
  and a half: fattree,30 (7.6 million) passes, fattree,32 (10.5 million)
  does not.  Nodes are capped at 16384, where the plan without routes
  takes 2 s and a built-in topology well under one.

``MOST_NODES`` is the largest cap of any backend: a built-in topology
counts its nodes against it before it adds one (``star,100000`` is
refused at once), and a command that knows its backend checks that
backend's caps right after the topology is built, before any plan.

Ranges.  :func:`whole` and :func:`real` take a number (or its text) and
return it only inside its documented range; anything else is one line
naming the input, shortened if it is long (a seed of 5000 digits is shown
by its first digits and its length: Python cannot even print it).  The
ranges of the command line's flags are here; those of link and switch
options sit with their parsers (:mod:`emulator.fabric.plan`,
:mod:`emulator.model.switch_params`); the README lists them all.
"""

from __future__ import annotations

import math
import re

from emulator.errors import FabricError, shown

MAX_NODES = 2048  # the emulator's: namespaces and agents on one machine
SIM_MAX_NODES = 16_384  # the simulation backend's
SIM_MAX_ROUTES = 8_000_000  # the simulation backend's: switches x hosts, a route each
NODE_CAPS = {"emulator": MAX_NODES, "sim": SIM_MAX_NODES}
MOST_NODES = max(NODE_CAPS.values())  # any backend's

SEED = (0, 2**32 - 1)  # every --seed and experiment seed
PORT = (1, 65535)  # perf --port
PERF_ITERS = (1, 1_000_000)  # perf --iters
PING_TIMEOUT_S = (0.1, 60.0)  # pingall --timeout
PING_SAMPLE = (1, 10_000_000)  # pingall --sample
WORKERS = (1, 256)  # --workers: data-plane processes
DEMO_SECONDS = (1, 3600)  # demo --seconds
ITERATIONS = (1, 10_000)  # experiment iterations
WARMUP = (0, 1_000)  # experiment warm-up iterations
SLOW_FRACTION = (1e-6, 0.999999)  # fault slow: the share of its link rate a host takes (the command line and the agent)

_WHOLE_TEXT = re.compile(r"[+-]?\d+")
_MAX_DIGITS = 30  # a range's bounds have fewer; longer digit strings are out of range unread


def whole(what: str, value: object, bounds: tuple[int, int]) -> int:
    """``value`` (an int, or its decimal text) if it is within ``bounds``."""
    low, high = bounds
    number = value
    if isinstance(value, str):
        text = value.strip()
        if not _WHOLE_TEXT.fullmatch(text):
            raise FabricError(f"{what} {shown(value)}: expected a whole number, {low} to {high}")
        if len(text.lstrip("+-")) > _MAX_DIGITS:
            raise FabricError(f"{what} {shown(value)}: must be {low} to {high}")
        number = int(text)
    if isinstance(number, bool) or not isinstance(number, int):
        raise FabricError(f"{what} {shown(value)}: expected a whole number, {low} to {high}")
    if not low <= number <= high:
        raise FabricError(f"{what} {shown(value)}: must be {low} to {high}")
    return number


def real(what: str, value: object, bounds: tuple[float, float]) -> float:
    """``value`` (a number, or its text) as a float if it is finite and within ``bounds``."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise FabricError(f"{what} {shown(value)}: expected a number, {low:g} to {high:g}")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise FabricError(f"{what} {shown(value)}: expected a number, {low:g} to {high:g}") from None
    if not (math.isfinite(number) and low <= number <= high):
        raise FabricError(f"{what} {shown(value)}: must be {low:g} to {high:g}")
    return number


def check_nodes(what: str, nodes: int) -> None:
    """The emulator's node cap, for a fabric about to be built (hosts and switches counted together)."""
    if nodes > MAX_NODES:
        raise FabricError(f"{what}: {nodes} nodes (hosts and switches); {_cap_text('emulator')}")


def check_topology(what: str, hosts: int, switches: int, backend: str | None) -> None:
    """``backend``'s caps (any backend's, the widest, when None) on a topology of ``hosts`` and ``switches``."""
    refused = over_caps(hosts, switches, backend)
    if refused is not None:
        raise FabricError(f"{what}: {refused}")


def over_caps(hosts: int, switches: int, backend: str | None) -> str | None:
    """Why a topology is over ``backend``'s caps (the widest when None), in words; None if it is not."""
    nodes = hosts + switches
    if nodes > (MOST_NODES if backend is None else NODE_CAPS[backend]):
        return f"{shown(nodes)} nodes ({shown(hosts)} hosts, {shown(switches)} switches); {_cap_text(backend)}"
    if backend == "sim" and hosts * switches > SIM_MAX_ROUTES:
        return (f"{switches:,} switches x {hosts:,} hosts = {hosts * switches:,} routes; the simulation backend "
                f"plans and builds at most {SIM_MAX_ROUTES:,}")
    return None


def _cap_text(backend: str | None) -> str:
    if backend is None:
        return f"at most {MOST_NODES} on any backend (the emulator runs {MAX_NODES})"
    if backend == "sim":
        return f"the simulation backend runs at most {SIM_MAX_NODES}"
    return f"at most {MAX_NODES} on one machine (the emulator)"
