"""A switch MMU's settings, as the agents' JSON config carries them.

The MMU itself (shared-buffer admission, PFC, ECN, scheduling, the PFC watchdog) is compiled:
:class:`emulator._core.mmu.Mmu`.  Its settings stay a Python dataclass here because
:mod:`emulator.agents.config` writes dataclasses to an agent's JSON config and reads them back field by
field (``fabric/agent_config.py`` and ``switch_params.derive_config`` build this one), and the compiled
:class:`emulator._core.mmu.MmuConfig` is no dataclass.  Nothing converts it: the compiled ``Mmu`` takes
this class as it takes its own, reading the same fields (``pfcwd`` the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from emulator._core.mmu import MmuConfig as CompiledMmuConfig
from emulator._core.credits import FABRIC_MIN_INTERVAL_NS
from emulator.model.pfcwd import WatchdogConfig


@dataclass(frozen=True)
class MmuConfig:
    """Buffer, threshold, PFC, scheduling and ECN settings of one switch."""

    buffer: int
    reserve: int
    headroom: int
    alpha: float
    threshold: int
    xon_delta: int
    lossless: frozenset[int]
    quanta: int
    strict: frozenset[int]
    weights: tuple[int, ...]
    mtu_frame: int
    ecn: bool
    kmin: int
    kmax: int
    pmax: float
    vl_buffer: int = 0  # --fabric ib: receive buffer per VL per port (the IB plane's, not the MMU's)
    fc_floor: int = FABRIC_MIN_INTERVAL_NS  # --fabric ib: the least time a grown credit grant waits for more
    pfcwd: WatchdogConfig | None = None  # the PFC watchdog of the lossless queues, or none
    trim: bool = False  # --fabric uet: a lossy frame over its threshold goes on as its headers, at priority 6

    def shared_pool(self, ports: int) -> int:
        """Bytes left for sharing after every reserve and headroom: the compiled MMU's own sum."""
        return CompiledMmuConfig(**{f.name: getattr(self, f.name) for f in fields(self)}).shared_pool(ports)
