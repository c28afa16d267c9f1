"""NSCC's settings on the uet fabric, and ``cc`` as the uet fabric reads it.

NSCC itself (uet-htsim's sender-side window from ECN and delay) is compiled: ``model::nscc``, which the RNIC
agent and the simulator run.  Its defaults come from the path (uet-htsim's: a target queueing delay of 0.75
of the network RTT on a trimming fabric, a multiplicative decrease factor of 0.8); ``cc`` sets them as
``--cc``/``cc`` sets DCQCN's on the RoCE fabrics:

- ``nscc`` (the uet fabric's default): NSCC with its defaults;
- ``nscc,target_delay=10us,gamma=0.5``: with the target queueing delay and the decrease factor given;
- ``none``: no congestion control, a fixed window of 1,024 packets (receiver credits, if on, still apply).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.errors import FabricError, shown
from emulator.units import parse_time

MAX_TARGET_NS = 86_400 * 10**9  # a target queueing delay of at most a day: longer is a mistake
NSCC_OPTIONS = ("target_delay", "gamma")


@dataclass(frozen=True)
class NsccSettings:
    """What ``cc`` sets of NSCC; None keeps the path's default."""

    target_delay_ns: int | None = None
    gamma: float | None = None


def parse_nscc(text: Any) -> NsccSettings | None:
    """``nscc[,target_delay=TIME,gamma=X]`` to settings, ``none`` to None (NSCC off); one-line errors."""
    if not isinstance(text, str):
        raise FabricError(f"bad congestion control {shown(text)}: the uet fabric takes nscc[,key=value...] or none")
    name, *items = [part.strip() for part in text.split(",")]
    if name == "none" and not items:
        return None
    if name != "nscc":
        raise FabricError(f"congestion control {shown(name)}: the uet fabric's RNICs run nscc[,target_delay=TIME,"
                          "gamma=X], or none")
    values: dict[str, Any] = {}
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not value:
            raise FabricError(f"bad nscc option {shown(item)}: expected key=value, e.g. target_delay=10us")
        if key == "target_delay":
            try:
                ns = parse_time(value)
            except FabricError as err:  # the units' own one line
                raise FabricError(f"nscc target_delay: {err}") from None
            if not 1 <= ns <= MAX_TARGET_NS:
                raise FabricError(f"nscc target_delay {shown(value)}: choose 1 ns to a day")
            values["target_delay_ns"] = ns
        elif key == "gamma":
            try:
                gamma = float(value)
            except ValueError:
                raise FabricError(f"bad nscc gamma {shown(value)}: a number above 0 and at most 1") from None
            if not 0 < gamma <= 1:
                raise FabricError(f"nscc gamma {shown(value)}: above 0 and at most 1")
            values["gamma"] = gamma
        else:
            raise FabricError(f"unknown nscc option {shown(key)}; known: {', '.join(NSCC_OPTIONS)}")
    return NsccSettings(**values)
