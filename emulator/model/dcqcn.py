"""DCQCN congestion control (Zhu et al., SIGCOMM 2015): its settings, and the ``--cc`` option.

Three parts, of which the switch's is the MMU's ECN marking on a RED ramp; the two an RNIC plays, the
*notification point* (a CE-marked packet earns the QP's peer a CNP, at most once per CNP interval) and the
*reaction point* (per QP, DCQCN's rate limiter and state machine) are compiled:
:mod:`emulator._core.dcqcn`, which the RNIC agent and the simulator run.

What stays here is configuration.  :class:`DcqcnParams` holds DCQCN's constants in the modelled fabric's
units; it is a Python dataclass because :mod:`emulator.agents.config` writes it to a host agent's JSON config
and reads it back (the compiled reaction point takes it by its fields).  :meth:`DcqcnParams.emulated` turns
it into the emulated link's units (times x D, rates / D, sizes unchanged: :mod:`emulator.model.dilation`),
:func:`at_link` picks D for a link, and :func:`parse_cc`, :func:`check_fabric` and :func:`check_link` refuse,
before anything is built, what would not run: an unknown option, DCQCN on the ib fabric, a time over a day
once multiplied, a timer shorter than a frame.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from emulator.errors import FabricError, shown
from emulator._core.mac import ETH_LEN
from emulator.units import format_rate, format_size, format_time, parse_rate, parse_size, parse_time

CC_NAMES = ("none", "dcqcn")
MAX_PERIOD_NS = 86_400 * 10**9  # a DCQCN time constant of at most a day (after dilation)
MAX_RATE_BPS = 10**13
# Each field's range, checked on construction: the command line's values, and a config file's.
_RANGES: dict[str, tuple[float, float]] = {
    "cnp_interval_ns": (1, MAX_PERIOD_NS), "alpha_period_ns": (1, MAX_PERIOD_NS), "g": (1e-6, 1.0),
    "increase_period_ns": (1, MAX_PERIOD_NS), "byte_counter": (1, 1 << 40), "fast_recovery": (0, 1000),
    "rai_bps": (1, MAX_RATE_BPS), "rhai_bps": (1, MAX_RATE_BPS), "min_rate_bps": (1, MAX_RATE_BPS),
    "reference_bps": (1, MAX_RATE_BPS),
}


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN's constants, by default the DCQCN authors' own (their ns-3 configuration, for 40 Gbit/s links).

    ``reference_bps`` is the link rate the set was tuned for: a fabric given
    no modelled rate is taken to be that fast for congestion control (the
    caller says so), since R_AI and R_HAI are absolute rates.
    """

    cnp_interval_ns: int = 50_000
    alpha_period_ns: int = 55_000
    g: float = 1 / 256
    increase_period_ns: int = 55_000
    byte_counter: int = 10_000_000
    fast_recovery: int = 5
    rai_bps: int = 40_000_000
    rhai_bps: int = 200_000_000
    min_rate_bps: int = 1_000_000
    reference_bps: int = 40_000_000_000

    def __post_init__(self) -> None:
        for name, (low, high) in _RANGES.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{name} {shown(value)}: expected {low:g} to {high:g}")

    def emulated(self, factor: float) -> "DcqcnParams":
        """The same constants at time dilation D = ``factor``: times x D, rates / D, sizes and counts as they are.

        A time within its range as written may leave it once multiplied (60 s at D = 2000 is 33 hours): that is
        one line (FabricError) naming the option, as a value out of range on the command line is.
        """
        for name in TIMES:
            written = getattr(self, name)
            if round(written * factor) > MAX_PERIOD_NS:
                raise FabricError(f"dcqcn {_KEYS[name]} {format_time(written)} is {format_time(round(written * factor))} "
                                  f"at time dilation D = {factor:g} (times x D), over the "
                                  f"{format_time(MAX_PERIOD_NS)} a DCQCN time may be: lower it, or D")
        return dataclasses.replace(
            self,
            cnp_interval_ns=max(1, round(self.cnp_interval_ns * factor)),
            alpha_period_ns=max(1, round(self.alpha_period_ns * factor)),
            increase_period_ns=max(1, round(self.increase_period_ns * factor)),
            rai_bps=max(1, round(self.rai_bps / factor)), rhai_bps=max(1, round(self.rhai_bps / factor)),
            min_rate_bps=max(1, round(self.min_rate_bps / factor)), reference_bps=max(1, round(self.reference_bps / factor)),
        )

    def describe(self) -> str:
        return (f"CNP interval {format_time(self.cnp_interval_ns)}, alpha period {format_time(self.alpha_period_ns)}, "
                f"g {self.g:g}, increase timer {format_time(self.increase_period_ns)}, byte counter "
                f"{format_size(self.byte_counter)}, F {self.fast_recovery}, R_AI {format_rate(self.rai_bps)}, "
                f"R_HAI {format_rate(self.rhai_bps)}, min rate {format_rate(self.min_rate_bps)}")


# --cc dcqcn,KEY=VALUE,...: each settable constant, its field and how its text is read.
_OPTIONS: dict[str, tuple[str, Any]] = {
    "cnp_interval": ("cnp_interval_ns", parse_time),
    "alpha_period": ("alpha_period_ns", parse_time),
    "g": ("g", float),
    "increase_period": ("increase_period_ns", parse_time),
    "byte_counter": ("byte_counter", parse_size),
    "f": ("fast_recovery", int),
    "rai": ("rai_bps", parse_rate),
    "rhai": ("rhai_bps", parse_rate),
    "min_rate": ("min_rate_bps", parse_rate),
    "reference": ("reference_bps", parse_rate),
}
CC_OPTIONS = tuple(_OPTIONS)
_KEYS = {field_name: key for key, (field_name, _) in _OPTIONS.items()}  # a field's option, for messages
TIMES = ("cnp_interval_ns", "alpha_period_ns", "increase_period_ns")  # the constants dilation multiplies
# The reaction point's two timers.  Each wakes its QP every period while the QP is limited, whether frames
# leave or not; one shorter than a frame time acts more often than the QP can send (nothing to act on
# between two frames), and its wake-ups outnumber the QP's frames: with alpha_period = 1 ns a simulated
# 3-to-1 incast at 100 Mbit/s took 347,286 events for the CCT 858 gave at 55 us.  So each is at least one
# frame time of the link, the unit every other reaction of the model works in.  The CNP interval has no such floor: shorter than a frame,
# it means a CNP for each marked packet, and costs no work beyond those packets.
TIMERS = ("alpha_period_ns", "increase_period_ns")


def parse_cc(text: Any) -> DcqcnParams | None:
    """``none``, ``dcqcn`` or ``dcqcn,key=value,...`` (keys: CC_OPTIONS, modelled units) to params; one-line errors."""
    if not isinstance(text, str):
        raise FabricError(f"bad congestion control {shown(text)}: expected none or dcqcn[,key=value...]")
    name, *items = [part.strip() for part in text.split(",")]
    if name == "nscc":
        raise FabricError("nscc is the uet fabric's congestion control: use fabric uet, or cc none or dcqcn")
    if name not in CC_NAMES:
        raise FabricError(f"unknown congestion control {shown(name)}; known: {', '.join(CC_NAMES)}")
    if name == "none":
        if items:
            raise FabricError("congestion control none takes no options")
        return None
    values: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise FabricError(f"bad dcqcn option {shown(item)}: expected key=value, e.g. rai=40mbit")
        if key not in _OPTIONS:
            raise FabricError(f"unknown dcqcn option {shown(key)}; known: {', '.join(CC_OPTIONS)}")
        field_name, parse = _OPTIONS[key]
        try:
            values[field_name] = parse(value)
        except FabricError as err:  # the units' own one line
            raise FabricError(f"dcqcn {key}: {err}") from None
        except (ValueError, OverflowError):
            raise FabricError(f"bad dcqcn {key} {shown(value)}") from None
    try:
        return DcqcnParams(**values)
    except ValueError as err:
        raise FabricError(f"bad dcqcn {err}") from None


def check_fabric(params: DcqcnParams | None, fabric: str) -> None:
    """DCQCN reacts to ECN marks on RoCE: refuse it on the ib fabric (credits, no ECN) in one line."""
    if params is not None and fabric == "ib":
        raise FabricError("dcqcn is RoCE's congestion control; the ib fabric has credits, not ECN: "
                          "use fabric lossless or lossy, or cc none")


def at_link(params: DcqcnParams, link_bps: int, factor: float | None = None) -> tuple[DcqcnParams, float]:
    """``params`` for an emulated link of ``link_bps``, and the D used: the fabric's time dilation ``factor`` if
    it has one (a modelled rate), else the set's reference rate over the link's (at least 1)."""
    dilation = factor if factor is not None else max(1.0, params.reference_bps / link_bps)
    return params.emulated(dilation), dilation


def check_link(params: DcqcnParams, link_bps: int, link_mtu: int, factor: float | None = None) -> None:
    """Refuse in one line what :func:`at_link` would make of ``params`` on a link of ``link_bps`` and ``link_mtu``
    that no fabric should run: a time over MAX_PERIOD_NS once scaled, a timer (TIMERS) shorter than one frame
    of the link's MTU at its rate.  The floor is given back in the units written: modelled time, the frame
    time divided by D."""
    scaled, dilation = at_link(params, link_bps, factor)
    frame = link_mtu + ETH_LEN
    frame_ns = -(-frame * 8_000_000_000 // link_bps)
    for name in TIMERS:
        if getattr(scaled, name) < frame_ns:
            floor = f"{math.ceil(frame_ns / dilation)} ns"  # exact: format_time's rounding gave a floor it refused
            raise FabricError(
                f"dcqcn {_KEYS[name]} {format_time(getattr(params, name))} is shorter than one {frame}-byte frame at "
                f"the link rate, {floor} (D = {dilation:g}: {format_time(frame_ns)} on the {format_rate(link_bps)} "
                f"link); a timer that fires between frames has nothing to act on and only costs events: set at "
                f"least {floor}")

