"""What one machine can hold, and the range of every number a user gives.

Both are checked before anything is built, so a mistake costs a second
and one line, not minutes of building followed by a traceback.

Capacity.  Every node of a fabric is a network namespace with an agent
process (the switch, or the host's RNIC), and every link a veth pair with
tc on both ends.  Measured on this project's machine (MemAvailable before
``up`` and while the fabric was up): fattree,6 (99 nodes, 162 links) took
1166 MiB, fattree,4 (36 nodes, 48 links) 381 MiB, star,31 375 MiB: 11 to 12
MiB per node, links well under 1 MiB each, and each agent's RSS is 16.5 to
17.4 MiB (RSS counts the interpreter's shared pages in every process).  The
estimate takes the RSS, 16 MiB per node, and 512 KiB per link, and a
fabric must fit in MemAvailable less ``KEEP_FREE_BYTES`` for everything
else; it also needs a network namespace per node (and a probe namespace)
within the kernel's ``user.max_net_namespaces``.

``MAX_NODES`` caps every topology, even where nothing is built
(``ibroute``): planning routes grows with the square of the node count
(fattree,16, 1344 nodes, plans in 1.4 s and assigns LIDs and tables in
2.1 s), so a topology of 100000 nodes would run for hours before any
limit of the machine said no.

Ranges.  :func:`whole` and :func:`real` take a number (or its text) and
return it only inside its documented range; anything else is one line
naming the input, shortened if it is long (a seed of 5000 digits is shown
by its first digits and its length: Python cannot even print it).  The
ranges of the command line's flags are here; those of link and switch
options sit with their parsers (:mod:`emulator.plan`,
:mod:`emulator.switch.params`); the README lists them all.
"""

from __future__ import annotations

import math
import re

from emulator.errors import FabricError, shown
from emulator.netns import existing_namespaces
from emulator.units import format_size

MAX_NODES = 2048
NODE_BYTES = 16 << 20
LINK_BYTES = 512 << 10
KEEP_FREE_BYTES = 256 << 20

SEED = (0, 2**32 - 1)  # every --seed and experiment seed
PORT = (1, 65535)  # perf --port
PERF_ITERS = (1, 1_000_000)  # perf --iters
PING_TIMEOUT_S = (0.1, 60.0)  # pingall --timeout
DEMO_SECONDS = (1, 3600)  # demo --seconds
ITERATIONS = (1, 10_000)  # experiment iterations
WARMUP = (0, 1_000)  # experiment warm-up iterations

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
    """The plain node cap, for any topology (also where nothing is built)."""
    if nodes > MAX_NODES:
        raise FabricError(f"{what}: {nodes} nodes (hosts and switches); at most {MAX_NODES} on one machine")


def fabric_bytes(nodes: int, links: int) -> int:
    """The memory a running fabric is estimated to take (see the module doc)."""
    return nodes * NODE_BYTES + links * LINK_BYTES


def check_capacity(what: str, nodes: int, links: int, available: int | None = None,
                   namespaces: int | None = None) -> None:
    """Refuse a fabric this machine cannot hold, naming the limit.

    ``available`` (bytes) and ``namespaces`` (how many more network
    namespaces the kernel allows) default to what /proc says now.
    """
    check_nodes(what, nodes)
    need = fabric_bytes(nodes, links)
    if available is None:
        available = meminfo_bytes("MemAvailable")
    if available is not None and need > available - KEEP_FREE_BYTES:
        raise FabricError(
            f"{what} needs about {format_size(need)} of memory ({nodes} nodes x {format_size(NODE_BYTES)}, "
            f"{links} links x {format_size(LINK_BYTES)}); this machine has {format_size(max(available, 0))} "
            f"available and keeps {format_size(KEEP_FREE_BYTES)} free: use a smaller topology")
    if namespaces is None:
        namespaces = _namespaces_left()
    if namespaces is not None and nodes + 1 > namespaces:
        raise FabricError(f"{what} needs {nodes + 1} network namespaces; the kernel allows {namespaces} more "
                          "(sysctl user.max_net_namespaces)")


def meminfo_bytes(field: str, path: str = "/proc/meminfo") -> int | None:
    """One field of /proc/meminfo (``MemTotal``, ``MemAvailable``) in bytes; None if absent."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key == field and rest.split() and rest.split()[0].isdigit():
                    return int(rest.split()[0]) * 1024  # the kernel prints kB
    except OSError:
        return None
    return None


def _namespaces_left() -> int | None:
    """``user.max_net_namespaces`` less the named namespaces that exist (an
    upper bound: unnamed ones count against the limit too)."""
    try:
        with open("/proc/sys/user/max_net_namespaces") as f:
            limit = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return limit - len(existing_namespaces())
