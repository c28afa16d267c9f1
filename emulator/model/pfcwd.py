"""The PFC watchdog's settings, as the agents' JSON config carries them (``MmuConfig.pfcwd``).

The watchdog (SONiC pfcwd's semantics), the checks of its settings and the parsing of ``--switch pfcwd=``
are compiled: :mod:`emulator._core.pfcwd`.  :class:`WatchdogConfig` stays a Python dataclass because
:mod:`emulator.agents.config` writes dataclasses to an agent's JSON config and reads them back, and the
compiled ``WatchdogConfig`` is no dataclass; the compiled MMU and watchdog take this one by its fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator._core.pfcwd import WatchdogConfig as CompiledWatchdogConfig
from emulator._core.pfcwd import parse_pfcwd as compiled_parse_pfcwd


@dataclass(frozen=True)
class WatchdogConfig:
    """Detection and restoration time (ns) and the action on a storm (drop, forward or alert)."""

    detection_ns: int
    restoration_ns: int
    action: str = "drop"

    def __post_init__(self) -> None:
        # The compiled config's checks and its ValueError naming the field (a config file's bad value too).
        CompiledWatchdogConfig(self.detection_ns, self.restoration_ns, self.action)


def parse_pfcwd(text: str) -> WatchdogConfig | None:
    """``off``, ``on`` or ``DETECTION[:RESTORATION[:ACTION]]`` as the compiled parser reads it; FabricError
    in one line otherwise."""
    parsed = compiled_parse_pfcwd(text)
    if parsed is None:
        return None
    return WatchdogConfig(parsed.detection_ns, parsed.restoration_ns, parsed.action)
