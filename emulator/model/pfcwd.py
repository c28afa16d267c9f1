"""A PFC watchdog with SONiC pfcwd's semantics, sans-I/O.

A lossless egress queue is *stormed* when it has been paused without a
break for the detection time while it held frames and sent none (a NIC that
stopped receiving and pauses its switch port without end, or a cycle of
buffer dependencies: a deadlock).  The action then:

- ``drop``: the queue is flushed, its new arrivals are dropped and the PFC
  frames received for it are ignored (SONiC's default);
- ``forward``: the PFC frames received for it are ignored, so it sends;
- ``alert``: nothing but the count.

The storm ends (*restoration*) once no PFC pause frame has arrived for the
queue for the restoration time.  The switch's MMU (:mod:`emulator.model.mmu`)
tells the watchdog when a queue is paused with frames, makes progress or
gets a pause frame, and acts on what :meth:`Watchdog.on_timer` returns.
Times are the emulator's, as written (an operator's timers, not the
fabric's physics: they are not scaled by a modelled rate's dilation).
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.errors import FabricError, shown
from emulator.units import format_time, parse_time

ACTIONS = ("drop", "forward", "alert")
MAX_TIME_NS = 3600 * 10**9
SONIC_DETECTION_NS = 200_000_000  # SONiC's start_default detection time
Key = tuple[int, int]  # (egress port, priority)


@dataclass(frozen=True)
class WatchdogConfig:
    """Detection and restoration time (ns) and the action on a storm."""

    detection_ns: int
    restoration_ns: int
    action: str = "drop"

    def __post_init__(self) -> None:
        for name in ("detection_ns", "restoration_ns"):
            value = getattr(self, name)
            if not 1 <= value <= MAX_TIME_NS:
                raise ValueError(f"{name} {shown(value)}: expected 1 ns to {format_time(MAX_TIME_NS)}")
        if self.action not in ACTIONS:
            raise ValueError(f"action {shown(self.action)}: expected one of {', '.join(ACTIONS)}")

    def describe(self) -> str:
        return (f"detection {format_time(self.detection_ns)}, restoration {format_time(self.restoration_ns)}, "
                f"action {self.action}")


def parse_pfcwd(text: str) -> WatchdogConfig | None:
    """``off``, ``on`` (SONiC's defaults: 200 ms, restoration twice that, drop) or
    ``DETECTION[:RESTORATION[:ACTION]]`` (restoration twice detection, action drop unless given)."""
    text = text.strip()
    if text == "off":
        return None
    if text == "on":
        return WatchdogConfig(SONIC_DETECTION_NS, 2 * SONIC_DETECTION_NS)
    parts = [part.strip() for part in text.split(":")]
    if len(parts) > 3 or not all(parts):
        raise FabricError(f"bad pfcwd {shown(text)}: expected off, on or DETECTION[:RESTORATION[:ACTION]], "
                          "e.g. 200ms:400ms:drop")
    detection = parse_time(parts[0])
    restoration = parse_time(parts[1]) if len(parts) > 1 else 2 * detection
    try:
        return WatchdogConfig(detection, restoration, parts[2] if len(parts) > 2 else "drop")
    except ValueError as err:
        raise FabricError(f"bad pfcwd {shown(text)}: {err}") from None


class Watchdog:
    """The storms of one switch's lossless egress queues."""

    def __init__(self, config: WatchdogConfig) -> None:
        self.config = config
        self._stalled: dict[Key, int] = {}  # queue -> since when it has been paused with frames and sent none
        self._stormed: dict[Key, int] = {}  # queue in a storm -> when its last PFC pause frame came
        self.storms = 0
        self.restorations = 0

    def stormed(self, key: Key) -> bool:
        """Whether ``key`` is in a storm whose action takes PFC away from it (drop or forward)."""
        return key in self._stormed and self.config.action != "alert"

    def dropping(self, key: Key) -> bool:
        return key in self._stormed and self.config.action == "drop"

    def stalled(self, now: int, key: Key) -> bool:
        """``key`` is paused and holds frames (a pause came with frames queued, or a frame came while paused);
        whether its detection time started now."""
        if key in self._stormed or key in self._stalled:
            return False
        self._stalled[key] = now
        return True

    def progressed(self, key: Key) -> bool:
        """``key`` sent a frame, or its pause ended: not stalled; whether it was."""
        return self._stalled.pop(key, None) is not None

    def pause_received(self, now: int, key: Key) -> None:
        """A PFC frame pausing ``key`` arrived: a storm's restoration starts over."""
        if key in self._stormed:
            self._stormed[key] = now

    def next_deadline(self) -> int | None:
        cfg = self.config
        times = [since + cfg.detection_ns for since in self._stalled.values()]
        times += [last + cfg.restoration_ns for last in self._stormed.values()]
        return min(times) if times else None

    def on_timer(self, now: int) -> tuple[list[Key], list[Key]]:
        """The queues whose storm was detected by ``now``, and those restored."""
        cfg = self.config
        detected = sorted(key for key, since in self._stalled.items() if since + cfg.detection_ns <= now)
        for key in detected:
            del self._stalled[key]
            self._stormed[key] = now
            self.storms += 1
        restored = sorted(key for key, last in self._stormed.items() if last + cfg.restoration_ns <= now)
        for key in restored:
            del self._stormed[key]
            self.restorations += 1
        return detected, restored
