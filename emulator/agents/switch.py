"""The switch agent: one switch's control socket and counters; its frames are forwarded in compiled code.

The per-frame path (forwarding, the MMU with PFC, ECN and the watchdog,
the IB plane, link delay and injected loss, the fidelity monitor's figures,
occupancy sampling) is :class:`emulator._core.dataplane.Switch`
(``crates/fabric-core/src/agent/switch.rs`` on the sockets of
``crates/fabric-agents``), served by the process's compiled loop with the GIL
released.  Egress pacing is the kernel's: each port's HTB shapes at the link
rate and its data socket holds about two frames, so the backlog stays in the
MMU; PFC frames leave through a second socket per port in the highest tc
class, so they overtake the data backlog.

This agent is the switch's Python side: its control socket
(:class:`~emulator.agents.base.AgentBase`), its requests (``stats``,
``pfc``, ``routes``, ``held-routes``) and the counters the compiled switch
keeps, read as JSON.  It runs in a data-plane process
(:mod:`emulator.agents.worker`) beside other agents.  It imports only the
standard library and small project modules: scapy and pyroute2 cost about a
second and 100 MB each.
"""

from __future__ import annotations

from typing import Any

from emulator.agents.base import AgentBase, Loop
from emulator.errors import FabricError
from emulator.agents.config import IbSweeps, RouteTable, SwitchConfig, check_routes, read
from emulator._core.dataplane import Switch
from emulator._core.fidelity import verdict
from emulator._core.pfc import MAX_QUANTA, PRIORITIES
from emulator.kernel.rps import keep_flows_in_order
from emulator.kernel.tc import leaf_class
from emulator.kernel.drop_counters import NamespaceDrops
from emulator.model.switch_params import derive_config


class SwitchAgent(AgentBase):
    """One switch: the compiled switch in the loop, and its control socket here."""

    def __init__(self, config: SwitchConfig, loop: Loop) -> None:
        super().__init__(config, loop)
        self.core = Switch(config, leaf_class(PRIORITIES - 1))  # its sockets open in the caller's namespace
        self.ifnames = [port.ifname for port in config.ports]
        self.unordered = keep_flows_in_order(self.ifnames, whole_link=config.ib is not None,
                                             rx_cpus=[port.rx_cpu for port in config.ports])
        self.routes_file = config.routes_file
        self.ib_sweeps_file = config.ib_sweeps_file
        self.routes = dict(config.routes)  # what it forwards by, for ``held-routes``
        self.netns = config.netns
        self.kernel_counters: NamespaceDrops | None = None  # opened at the first stats request
        self.buffer_below_default = _buffer_below_default(config)
        loop.add_switch(self.core)

    def command(self, request: list[str]) -> dict[str, Any]:
        """``pfc IFNAME PRIORITY QUANTA``: send one PFC frame out of a port; ``routes``: take the routes file's
        table (a link went down or up), checked first: a bad file changes nothing; ``held-routes``: the table it
        forwards by (host address -> its ECMP ports), so that a check can compare it with the run's record;
        ``ib-tables KEY [IFNAME...]``: on ib, forward by the subnet manager's sweep KEY of the sweeps file ("-" no
        link down, "a-b" that link down), what was queued for the ports IFNAME lost with their link."""
        if request == ["held-routes"]:
            return {"routes": {ip: list(names) for ip, names in self.routes.items()}}
        if request == ["routes"]:
            if self.routes_file is None:
                raise ValueError("this switch has no routes file")
            table = read(self.routes_file, RouteTable)
            check_routes(table.routes, set(self.ifnames))
            self.core.set_routes(table.routes)
            self.routes = dict(table.routes)
            return {"routes": len(self.routes)}
        if request[:1] == ["ib-tables"] and len(request) >= 2:
            return self._ib_tables(request[1], request[2:])
        if request[:1] != ["pfc"] or len(request) != 4:
            return super().command(request)
        if request[1] not in self.ifnames:
            raise ValueError(f"no port {request[1]!r} on {self.name}")
        priority, quanta = int(request[2]), int(request[3])  # ValueError on a non-integer
        if not 0 <= priority < PRIORITIES or not 0 <= quanta <= MAX_QUANTA:
            raise ValueError(f"pfc: priority {priority} (0 to {PRIORITIES - 1}) or quanta {quanta} "
                             f"(0 to {MAX_QUANTA}) out of range")
        return {"sent": self.core.send_pfc(request[1], priority, quanta).hex()}


    def _ib_tables(self, key: str, down: list[str]) -> dict[str, Any]:
        """Sweep ``key`` of the IB sweeps file, checked first (a bad file or key changes nothing)."""
        if self.ib_sweeps_file is None:
            raise ValueError("this switch has no IB sweeps file")
        tables = read(self.ib_sweeps_file, IbSweeps).tables.get(key)
        if tables is None:
            raise ValueError(f"no IB sweep {key!r} in {self.ib_sweeps_file}")
        # the core refuses a port the switch lacks, by index or by name, and then changes nothing
        lost = self.core.set_ib_tables(sorted(tables.lft.items()),
                                       sorted((dlid, list(group)) for dlid, group in tables.ar.items()), down)
        return {"ib_tables": key, "lost": lost}
    def stats(self) -> dict[str, Any]:
        counters = self.core.stats(self.now())
        return {"switch": self.name, "scheduling": self.scheduling, "cpu": self.cpu, "ports": counters["ports"],
                "totals": counters["totals"], "lossless": counters["lossless"],
                "buffer_below_default": self.buffer_below_default, "kernel": self._kernel_drops(),
                "rps_failed": self.unordered, "fidelity": self._fidelity()}

    def _kernel_drops(self) -> dict[str, Any]:
        """What the switch's kernel dropped on its ports: their tc trees and veths (AF_PACKET's are the ports')."""
        try:
            if self.kernel_counters is None:
                self.kernel_counters = NamespaceDrops(self.netns, self.ifnames)
            return self.kernel_counters.read()
        except OSError as err:  # the namespace went first (a teardown): say so, the verdict counts it unaccounted
            return {"error": f"{type(err).__name__}: {err}"}

    def reset_fidelity(self) -> None:
        super().reset_fidelity()
        self.core.reset_fidelity()

    def _fidelity(self) -> dict[str, Any]:
        """The monitor's figures of this switch and its verdict (the fastest port's frame time is the bar)."""
        wire, lag, timers, frame_ns = self.core.fidelity_figures()  # every timer of a switch is a link's
        judged = verdict(wire, lag, timers, frame_ns, monitored=self.monitor)
        return {"faithful": judged.faithful, "reasons": list(judged.reasons), "wire": wire.summary(),
                "lag": lag.summary(), "timers": timers.summary()}

    def finish(self) -> None:
        self.core.stop()  # the compiled switch leaves the loop with its control socket
        super().finish()

    def close(self) -> None:
        self.core.close(self.now())
        if self.kernel_counters is not None:
            self.kernel_counters.close()


def _buffer_below_default(config: SwitchConfig) -> bool:
    """Whether ``--switch`` set this switch's headroom or buffer below the defaults its links derive.

    A lossless queue that overflows such a buffer lost frames as configured
    (the headroom sweep does it on purpose); with the defaults it is a defect.
    """
    mmu = config.mmu
    if not mmu.lossless:
        return False
    ports = config.ports
    lossless = ":".join(str(p) for p in sorted(mmu.lossless))
    try:
        default = derive_config("lossless", max(p.rate_bps for p in ports), max(p.delay_ns for p in ports),
                                max(p.mtu for p in ports), len(ports), {"lossless": lossless})
    except FabricError:  # no default to compare with: nothing explains a loss
        return False
    return mmu.headroom < default.headroom or mmu.buffer < default.buffer
