"""Switch buffer, PFC and ECN settings: defaults derived from the links.

The defaults follow from a switch's fastest port rate C, the longest
one-way delay d of its links and the frame size F = MTU + 14:

* headroom per (port, lossless priority) = 5 F + 2 C d + C r
  (the frame being sent when XOFF is decided and the one being sent when
  it arrives, three more already in an upstream switch's kernel queue, the
  cable both ways, and r = the response time of both ends:
  ``RESPONSE_NS`` = 10 ms.  The headroom sweep (scripts/headroom_sweep.py)
  found 5 to 6 frames enough on an idle star, but a dumbbell with three
  senders overflowed 12 frames now and then (an agent stall of a few ms),
  so the default is generous; lower it with ``--switch headroom=...``);
* reserve per (port, priority) = F;
* shared pool = 64 F per port; buffer = pool + reserves + headrooms;
* dynamic threshold alpha = 1 (an ingress may hold as much of the pool as
  is still free); XON 2 F below the XOFF point;
* PFC quanta 65535 (the maximum; refreshed at half, cleared by XON);
* ECN (all priorities, ECT frames only): kmin = 10 F, kmax = 40 F,
  pmax = 0.2 on each egress queue;
* strict priority for 6 (CNP) and 7, DWRR with equal weights for 0..5;
* no PFC watchdog (``pfcwd=on`` gives SONiC's defaults: detection 200 ms,
  restoration 400 ms, action drop; ``pfcwd=DETECTION[:RESTORATION[:ACTION]]``
  sets them, :mod:`emulator.model.pfcwd`).

``--fabric lossless`` makes priority 3 lossless (RoCE's DSCP 26) and the
rest lossy; ``--fabric lossy`` has no lossless priority, so no PFC.
``uet`` is lossy with trimming: a UET request over its threshold goes on
as its headers at priority 6 (strict), and the RNICs run UET's RUD
transport with NSCC, spraying each packet over the paths by its entropy
value.
``--fabric ib`` carries RDMA as native IB packets under credit-based flow
control, with ``vl_buffer`` (default 16 MTU frames) of receive buffer per
virtual lane and port, a grown credit grant sent after two frame times and
at least ``fc_floor`` (default 500 us: what the agents can afford, see
:mod:`emulator._core.credits`; 0 lets the frames alone pace it); its IP
traffic is handled as on a lossy fabric.  Any
value can be overridden with ``--switch key=value,...``; ``vl_buffer`` and
``fc_floor`` only on ``--fabric ib`` (the Ethernet fabrics have no credits,
so the value would be ignored), ``pfcwd`` only on ``--fabric lossless``.
"""

from __future__ import annotations

import re
from typing import Any

from emulator import bounds
from emulator.errors import FabricError, shown
from emulator._core.pfc import MAX_QUANTA, PRIORITIES
from emulator._core.credits import FABRIC_REFRESH_NS
from emulator.model.mmu import MmuConfig
from emulator.model.pfcwd import parse_pfcwd
from emulator.units import format_size, format_time, parse_size, parse_time

FABRICS = ("lossless", "lossy", "ib", "uet")
VL_BUFFER_FRAMES = 16  # IB: receive buffer per VL per port, in MTU frames
MAX_VL_BUFFER = 2048 * 64  # IB credit accounting allows at most 2048 blocks of 64 bytes in flight
DEFAULT_LOSSLESS = (3,)
RESPONSE_NS = 10_000_000
# An upstream switch has up to about three frames in its port's kernel queue
# that a pause cannot recall (its send buffer); a dumbbell test without them
# overflowed the inter-switch headroom.
UPSTREAM_KERNEL_FRAMES = 3
SHARED_FRAMES_PER_PORT = 64
MAX_SWITCH_BYTES = 1 << 30  # any --switch size: the agent may hold that much in frames
_PRIORITY = re.compile(r"\d{1,3}")
SWITCH_OPTIONS = (
    "buffer", "reserve", "headroom", "alpha", "threshold", "xon_delta", "quanta",
    "lossless", "strict", "ecn", "kmin", "kmax", "pmax", "vl_buffer", "fc_floor", "pfcwd",
)
IB_OPTIONS = ("vl_buffer", "fc_floor")  # the credits' settings: refused on the Ethernet fabrics, which have none


def default_headroom(rate_bps: int, delay_ns: int, mtu: int, response_ns: int = RESPONSE_NS) -> int:
    """Bytes that still arrive after XOFF is decided (formula in the module doc)."""
    frame = mtu + 14
    in_flight = rate_bps * (2 * delay_ns + response_ns) // 8 // 1_000_000_000
    return (2 + UPSTREAM_KERNEL_FRAMES) * frame + in_flight


def derive_config(fabric: str, rate_bps: int, delay_ns: int, mtu: int, ports: int,
                  overrides: dict[str, str] | None = None) -> MmuConfig:
    """The MMU settings of one switch: defaults, then ``overrides``."""
    if fabric not in FABRICS:
        raise FabricError(f"unknown fabric {fabric!r}; known: {', '.join(FABRICS)}")
    frame = mtu + 14
    pool = SHARED_FRAMES_PER_PORT * frame * ports
    settings: dict[str, Any] = dict(
        reserve=frame, headroom=default_headroom(rate_bps, delay_ns, mtu), alpha=1.0,
        threshold=pool // ports, xon_delta=2 * frame,
        lossless=frozenset(DEFAULT_LOSSLESS if fabric == "lossless" else ()), quanta=MAX_QUANTA,
        strict=frozenset({6, 7}), weights=(1,) * PRIORITIES, mtu_frame=frame,
        ecn=True, kmin=10 * frame, kmax=40 * frame, pmax=0.2, vl_buffer=min(VL_BUFFER_FRAMES * frame, MAX_VL_BUFFER),
        trim=fabric == "uet",
    )
    settings.update(parse_overrides(overrides or {}, fabric))
    if settings["lossless"] and fabric != "lossless":
        raise FabricError(f"--switch lossless=... contradicts --fabric {fabric}")
    if not frame + 64 <= settings["vl_buffer"] <= MAX_VL_BUFFER:
        raise FabricError(f"--switch vl_buffer={settings['vl_buffer']}: a VL must hold one packet of the link MTU "
                          f"({frame + 64} bytes) and at most {MAX_VL_BUFFER} bytes (2048 credits of 64 bytes)")
    if settings.get("pfcwd") is not None and fabric != "lossless":
        raise FabricError(f"--switch pfcwd=... watches PFC's lossless queues: --fabric {fabric} has none")
    if settings["kmax"] <= settings["kmin"]:
        raise FabricError(f"--switch kmax ({settings['kmax']}) must be above kmin ({settings['kmin']})")
    settings.setdefault(
        "buffer", pool + ports * (PRIORITIES * settings["reserve"] + len(settings["lossless"]) * settings["headroom"])
    )
    config = MmuConfig(**settings)
    if config.shared_pool(ports) <= 0:
        raise FabricError(f"--switch buffer={config.buffer} leaves no shared buffer after the reserves and "
                          f"headroom of {ports} ports")
    return config


def _priorities(text: str, key: str) -> frozenset[int]:
    if text in ("", "none"):
        return frozenset()
    items = text.split(":")
    if not all(_PRIORITY.fullmatch(p.strip()) for p in items):
        raise FabricError(f"bad --switch {key}={shown(text)}: expected priorities 0-7 joined by ':', e.g. 3:4")
    values = frozenset(int(p) for p in items)
    if not all(0 <= p < PRIORITIES for p in values):
        raise FabricError(f"bad --switch {key}={shown(text)}: priorities are 0 to 7")
    return values


def _number(text: str, key: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except (ValueError, OverflowError):
        raise FabricError(f"bad --switch {key}={shown(text)}: expected a number") from None
    if not low <= value <= high:
        raise FabricError(f"bad --switch {key}={shown(text)}: must be {low:g} to {high:g}")
    return value


def _bytes(text: str, key: str) -> int:
    size = parse_size(text)
    if size > MAX_SWITCH_BYTES:
        raise FabricError(f"bad --switch {key}={shown(text)}: at most {format_size(MAX_SWITCH_BYTES)}")
    return size


def _time(text: str, key: str, high: int) -> int:
    try:
        value = parse_time(text)
    except FabricError as err:
        raise FabricError(f"--switch {key}: {err}") from None
    if value > high:
        raise FabricError(f"bad --switch {key}={shown(text)}: at most {format_time(high)}")
    return value


def parse_overrides(overrides: dict[str, str], fabric: str | None = None) -> dict[str, Any]:
    """``--switch`` options as MmuConfig fields; every value checked, and with ``fabric`` the IB options refused
    on the Ethernet fabrics (their switches have no credits: the value would be ignored without a word)."""
    if fabric not in (None, "ib") and (ib_only := [key for key in IB_OPTIONS if key in overrides]):
        raise FabricError(f"--switch {ib_only[0]}=... sets IB's link credits: --fabric {fabric} has none")
    changes: dict[str, Any] = {}
    for key, text in overrides.items():
        if key not in SWITCH_OPTIONS:
            raise FabricError(f"unknown --switch option {shown(key)}; known: {', '.join(SWITCH_OPTIONS)}")
        if key in ("buffer", "reserve", "headroom", "threshold", "xon_delta", "kmin", "kmax", "vl_buffer"):
            changes[key] = _bytes(text, key)
        elif key == "alpha":
            changes[key] = _number(text, key, 0, 64)
        elif key == "pmax":
            changes[key] = _number(text, key, 0, 1)
        elif key == "quanta":
            changes[key] = bounds.whole(f"bad --switch {key} =", text, (1, MAX_QUANTA))
        elif key in ("lossless", "strict"):
            changes[key] = _priorities(text, key)
        elif key == "pfcwd":
            changes[key] = parse_pfcwd(text)
        elif key == "fc_floor":
            changes[key] = _time(text, key, FABRIC_REFRESH_NS)
        elif text in ("on", "off"):
            changes[key] = text == "on"
        else:
            raise FabricError(f"bad --switch {key}={shown(text)}: expected on or off")
    return changes
