"""The range of every number a user gives, and the cap on a topology's size.

Both are checked before anything is built, so a mistake costs a second
and one line, not minutes of building followed by a traceback.  What the
machine itself can hold is :mod:`emulator.fabric.capacity`.

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
options sit with their parsers (:mod:`emulator.fabric.plan`,
:mod:`emulator.model.switch_params`); the README lists them all.
"""

from __future__ import annotations

import math
import re

from emulator.errors import FabricError, shown

MAX_NODES = 2048

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
    """The plain node cap, for any topology (also where nothing is built)."""
    if nodes > MAX_NODES:
        raise FabricError(f"{what}: {nodes} nodes (hosts and switches); at most {MAX_NODES} on one machine")
