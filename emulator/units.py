"""Parse and print rates, sizes and times: the project's one units module.

Inside the emulator every quantity is an integer in one base unit, so that
arithmetic is exact and no two modules disagree about scale:

- rates in bit/s,
- sizes in bytes,
- times in nanoseconds.

Text from users follows tc(8) where tc has a convention, because the people
who use this tool already type tc units.  Unit names are case-insensitive
(``50Mbit`` == ``50mbit``), a space may separate number and unit, and a
value must come out as a whole number of the base unit (``1.5KiB`` is fine,
``0.5ns`` is rejected rather than rounded behind the user's back).

Rates (``parse_rate``):
    ``bit kbit mbit gbit tbit`` are bits per second in powers of 1000;
    ``bit/s kbit/s ...`` are accepted too so printed rates parse back.
    ``bps kbps mbps gbps tbps`` are *bytes* per second, exactly as in tc:
    ``1gbps`` is 8 Gbit/s.  A bare int or float (not text) is Mbit/s, the
    Mininet ``TCLink(bw=10)`` convention.  Text without a unit is rejected
    because nobody agrees what it means.  Rates must be greater than zero.

Sizes (``parse_size``):
    ``B`` (or tc's ``b``) bytes; ``KB MB GB`` are SI (1000); ``KiB MiB
    GiB`` are binary (1024); the tc-style single letters ``k m g`` are
    binary (1024), as in tc.  Unlike tc, ``kb`` means 1000 bytes: it is the
    same unit as ``KB``.
    A bare int or a digit string is bytes.

Times (``parse_time``):
    ``ns us ms s`` and tc's ``nsec usec msec sec``.  A bare number (or
    digit string) is rejected unless it is zero: Mininet writes delays as
    ``'5ms'``, and guessing seconds or microseconds for ``5`` would be
    wrong half of the time.  Times must not be negative.

Every parsed value is below 2**63 (``MAX_VALUE``: what the kernel, tc and
the agents take), and text of more than 64 characters is refused unread;
the ranges of particular options (a link's rate, a switch's buffer) are
checked where they are used.

Invalid input raises :class:`FabricError` with one line naming the value
(shortened, if long) and what was expected.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Context, Decimal, localcontext
from typing import TypeGuard

from emulator.errors import FabricError, shown

MAX_VALUE = 2**63 - 1
MAX_TEXT = 64  # characters of a quantity's text
# Exact arithmetic for any text of MAX_TEXT characters (the default context rounds to 28 digits).
_EXACT = Context(prec=2 * MAX_TEXT)
_NUMBER_WITH_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z/]*)")


@dataclass(frozen=True)
class _Kind:
    """What one kind of quantity accepts, for parsing and error messages."""

    name: str
    base_unit: str
    units: dict[str, int]
    expected: str
    unit_required: bool = True


_RATE = _Kind("rate", "bit/s", {
    "bit": 1,
    "kbit": 10**3,
    "mbit": 10**6,
    "gbit": 10**9,
    "tbit": 10**12,
    "bit/s": 1,
    "kbit/s": 10**3,
    "mbit/s": 10**6,
    "gbit/s": 10**9,
    "tbit/s": 10**12,
    "bps": 8,
    "kbps": 8 * 10**3,
    "mbps": 8 * 10**6,
    "gbps": 8 * 10**9,
    "tbps": 8 * 10**12,
}, "expected a number with a unit such as 100mbit or 1gbit")

_SIZE = _Kind("size", "bytes", {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
}, "expected a number of bytes such as 1500, 64KiB or 1MB",
   unit_required=False)

_TIME = _Kind("time", "ns", {
    "ns": 1,
    "nsec": 1,
    "us": 10**3,
    "usec": 10**3,
    "ms": 10**6,
    "msec": 10**6,
    "s": 10**9,
    "sec": 10**9,
}, "expected a number with a unit such as 5us or 1.5ms")

_RATE_LADDER = [(1, "bit/s"), (10**3, "kbit/s"), (10**6, "Mbit/s"),
                (10**9, "Gbit/s"), (10**12, "Tbit/s")]
_SIZE_LADDER = [(1, "B"), (2**10, "KiB"), (2**20, "MiB"), (2**30, "GiB"),
                (2**40, "TiB")]
_TIME_LADDER = [(1, "ns"), (10**3, "us"), (10**6, "ms"), (10**9, "s")]

# Below this many bytes a size prints exactly: frame and MTU sizes such as
# 1500 or 9000 read better in bytes than as 1.46 KiB.
_WHOLE_BYTES_BELOW = 10_000


def parse_rate(text: str | int | float) -> int:
    """Return a rate in bit/s; a bare number is Mbit/s (see module doc)."""
    if _is_number(text):
        bps = _whole(_RATE, text, _EXACT.multiply(_number_value(_RATE, text), 10**6))
    else:
        bps = _parse_text(_RATE, text)
    if bps <= 0:
        raise FabricError(f"bad rate {shown(text)}: must be greater than 0")
    return bps


def parse_size(text: str | int) -> int:
    """Return a size in bytes; a bare int or digit string is bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise FabricError(f"bad size {shown(text)}: must not be negative")
        return _bounded(_SIZE, text, text)
    return _parse_text(_SIZE, text)


def parse_time(text: str | int | float) -> int:
    """Return a time in ns; a bare number is only accepted when it is 0."""
    if _is_number(text):
        if _number_value(_TIME, text) != 0:
            raise FabricError(f"bad time {shown(text)}: missing unit; "
                              f"{_TIME.expected}")
        return 0
    return _parse_text(_TIME, text)


def format_rate(bps: int) -> str:
    """Print a rate for people, e.g. ``50 Mbit/s`` or ``1.50 Gbit/s``."""
    return _format(bps, _RATE_LADDER)


def format_size(n: int) -> str:
    """Print a size for people, e.g. ``1500 B``, ``64 KiB``, ``1.50 MiB``."""
    if abs(n) < _WHOLE_BYTES_BELOW:
        return f"{n} B"
    return _format(n, _SIZE_LADDER)


def format_time(ns: int) -> str:
    """Print a time for people, e.g. ``27 us`` or ``1.50 ms``."""
    return _format(ns, _TIME_LADDER)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_value(kind: _Kind, value: int | float) -> Decimal:
    """Bare numbers go through ``repr`` so 0.1 stays 0.1, not its binary
    approximation."""
    if isinstance(value, float) and not math.isfinite(value):
        raise FabricError(f"bad {kind.name} {shown(value)}: {kind.expected}")
    if value < 0:
        raise FabricError(f"bad {kind.name} {shown(value)}: must not be negative")
    if value > MAX_VALUE:
        raise FabricError(f"bad {kind.name} {shown(value)}: too large")
    return Decimal(repr(value))


def _parse_text(kind: _Kind, text: object) -> int:
    """Parse '<number><unit>'; the sign is not part of the grammar, so
    negative values get the generic message."""
    if not isinstance(text, str):
        raise FabricError(f"bad {kind.name} {shown(text)}: {kind.expected}")
    if len(text) > MAX_TEXT:
        raise FabricError(f"bad {kind.name} {shown(text)}: longer than {MAX_TEXT} characters")
    match = _NUMBER_WITH_UNIT.fullmatch(text.strip().lower())
    if match is None:
        raise FabricError(f"bad {kind.name} {shown(text)}: {kind.expected}")
    number, unit = Decimal(match.group(1)), match.group(2)
    if unit:
        if unit not in kind.units:
            raise FabricError(
                f"bad {kind.name} {shown(text)}: unknown unit {shown(unit)}; "
                f"use one of {', '.join(kind.units)}")
        number = _EXACT.multiply(number, kind.units[unit])
    elif kind.unit_required and number != 0:
        raise FabricError(f"bad {kind.name} {shown(text)}: missing unit; "
                          f"{kind.expected}")
    return _whole(kind, text, number)


def _whole(kind: _Kind, text: object, value: Decimal) -> int:
    with localcontext(_EXACT):
        if value != value.to_integral_value():
            raise FabricError(f"bad {kind.name} {shown(text)}: not a whole number of "
                              f"{kind.base_unit} ({value.normalize():f})")
        return _bounded(kind, text, int(value))


def _bounded(kind: _Kind, text: object, value: int) -> int:
    if value > MAX_VALUE:
        raise FabricError(f"bad {kind.name} {shown(text)}: too large (at most 2**63 - 1 {kind.base_unit})")
    return value


def _format(value: int, ladder: list[tuple[int, str]]) -> str:
    """Use the largest unit not above the value; two decimals unless exact."""
    scale, name = ladder[0]
    for step, step_name in ladder:
        if abs(value) >= step:
            scale, name = step, step_name
    if value % scale == 0:
        return f"{value // scale} {name}"
    return f"{value / scale:.2f} {name}"
