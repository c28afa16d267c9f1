"""The host agent: the emulated RNIC's verbs, its faults and its figures.

One per host, in a data-plane process (:mod:`emulator.agents.worker`).  It serves the host's RNIC
(:mod:`emulator.agents.rnic`: verbs for applications) over the compiled one, which the loop drives on the
wire with RC transport and obeys PFC: the MAC control frames (EtherType 0x8808) the switch sends are read
with their kernel time stamps, and each paused priority's tc pause gate (:mod:`emulator.kernel.tc`) is
closed from the frame's arrival until an XON or until its quanta run out, all in the loop, no frame through
Python.  Because the gate is in the kernel, every application on the host, iperf3 or a kernel UDP socket,
is held back and never dropped, the RNIC's own frames included.

A fault can be injected through the control socket: ``stall`` makes the
NIC's receive pipeline hang (the RNIC takes no frame from the wire) and the
NIC pause its switch port on the lossless priority without end (XOFF,
refreshed at half its pause time): SIGCOMM 2016's NIC pause storm.
``slow FRACTION`` makes the RNIC take frames at that fraction of its link
rate through a NIC buffer of RX_BUFFER bytes that pauses the switch port
(XOFF) when it fills to its headroom and lets it go (XON) once drained
(:mod:`emulator._core.rx_pipeline`): the slow receiver; ``slow`` again
changes the rate (FRACTION in :data:`emulator.bounds.SLOW_FRACTION`, the
command line's range).  ``resume`` ends either: XON, and every held frame
taken at once.
"""

from __future__ import annotations

import socket
from typing import Any

from emulator import bounds
from emulator.agents.base import AgentBase
from emulator._core.dataplane import Loop, Nic
from emulator.agents.config import HostConfig
from emulator._core.fidelity import Durations, verdict
from emulator.model.switch_params import DEFAULT_LOSSLESS, default_headroom
from emulator._core.mac import mac_bytes
from emulator._core.pfc import MAX_QUANTA, PRIORITIES, encode_pfc, pause_ns
from emulator.agents.rnic import Rnic
from emulator.kernel.packet_socket import unbound_packet_socket
from emulator.kernel.rps import keep_flows_in_order
from emulator.kernel.netns import entered
from emulator.kernel.tc import gate_requests, leaf_class
from emulator.kernel.drop_counters import NamespaceDrops

RX_BUFFER = 256 << 10  # the slow receiver's NIC buffer (a ConnectX-class NIC has a few hundred KiB per port)


class HostAgent(AgentBase):
    """The RNIC and the PFC reaction of one host NIC."""

    def __init__(self, config: HostConfig, loop: Loop, nic: Nic | None = None) -> None:
        # The compiled RNIC and its pause gates (opened in this node's namespace, where the worker builds its
        # agents); tests hand in UnwiredNic(config), whose gate changes stay in memory.
        ifname = config.ifname
        if nic is None:
            nic = Nic(config)
            nic.wire_gates(*gate_requests(socket.if_nametoindex(ifname), config.rate_bps, config.mtu, config.mac,
                                          config.peer_mac))
        self.nic = nic
        super().__init__(config, loop)
        self.frame_ns = (config.mtu + 14) * 8_000_000_000 // config.rate_bps  # the fidelity monitor's unit
        self.rnic = Rnic(config, self.nic, self.watch, self.modify, self.unwatch)
        self.mac = mac_bytes(config.mac)
        self.pfc_sock = None  # the stall fault's PFC sender, opened at its first use (in priority 7's class)
        self.ifname, self.netns = ifname, config.netns
        self.storm_refresh: int | None = None  # while the NIC pauses its port: when the next XOFF goes
        self.storm_refresh_ns = pause_ns(MAX_QUANTA, config.rate_bps) // 2
        self.storm_pfc_sent = 0
        self.pausing: set[str] = set()  # why the NIC pauses its switch port: "stall", "slow"
        self.rate_bps, self.mtu = config.rate_bps, config.mtu
        self.unordered = keep_flows_in_order([ifname], whole_link=config.ib is not None, rx_cpus=[config.rx_cpu])
        self.kernel_counters: NamespaceDrops | None = None  # opened at the first stats request (most never come)

    def join(self, loop: Loop) -> None:
        loop.add_host(self, self.nic)

    def after_events(self, now: int) -> None:
        """Completions to their applications, the slow receiver's pause changes to the wire, the timer armed.

        The compiled RNIC's own deadlines (its pauses' expiries among them) are the loop's (``Loop.add_host``).
        """
        self.rnic.deliver(self.now())  # completions carry the time they are delivered
        for on in self.nic.pause_changes():
            self._nic_pause("slow", on)
        self.timer_kind = "link" if self.storm_refresh is not None else None
        self.arm(self.storm_refresh, now)

    def on_timer(self, now: int) -> None:
        if self.storm_refresh is not None and self.storm_refresh <= now:
            self._storm_pfc(MAX_QUANTA)
            self.storm_refresh = now + self.storm_refresh_ns

    def command(self, request: list[str]) -> dict[str, Any]:
        """``stall``: the NIC stops receiving and pauses its switch port without end; ``slow FRACTION``: it
        takes frames at that fraction of its link rate, pausing its port when its buffer fills; ``resume``
        ends either.  ``paused`` (the time paused so far per priority) and ``received`` (the RNIC's frames
        received) are the figures of ``stats`` a collective reads around every iteration and a deadlock watch
        every 100 ms: ``stats`` reads the kernel's counters too, and meanwhile every host of this process
        waits."""
        now = self.now()
        if request == ["paused"]:
            return {"paused_ns": self.nic.pfc_figures(now)["paused_ns"]}
        if request == ["received"]:
            return {"frames_received": self.nic.stats()["frames_received"]}
        if request == ["stall"]:
            if "stall" not in self.pausing:
                self.nic.stall(True)
                self._nic_pause("stall", True)
            return {"stalled": True}
        if request[:1] == ["slow"] and len(request) == 2:
            fraction = bounds.real("slow", request[1], bounds.SLOW_FRACTION)  # the command line's range
            rate_bps = max(1, round(self.rate_bps * fraction))
            if self.nic.set_slow_rate(now, rate_bps):  # slow already: the frames held keep their turn
                return {"slow": fraction}
            # The buffer keeps its headroom (what the switch still sends after XOFF, the switch's own formula)
            # free; at fast rates that headroom outgrows RX_BUFFER, and the buffer grows to twice it.
            headroom = default_headroom(self.rate_bps, 0, self.mtu)
            buffer = max(RX_BUFFER, 2 * headroom)
            xoff = buffer - headroom
            self.nic.start_slow(rate_bps, buffer, xoff, max(0, xoff - 2 * (self.mtu + 14)))
            return {"slow": fraction}
        if request == ["resume"]:
            self.nic.end_slow(now)
            for on in self.nic.pause_changes():
                self._nic_pause("slow", on)
            if "stall" in self.pausing:
                self.nic.stall(False)
                self._nic_pause("stall", False)
            return {"stalled": False}
        return super().command(request)

    def _nic_pause(self, reason: str, on: bool) -> None:
        """The NIC pauses its switch port while any reason holds: XOFF now and refreshed, XON when none is left."""
        before = bool(self.pausing)
        (self.pausing.add if on else self.pausing.discard)(reason)
        if self.pausing and not before:
            self._storm_pfc(MAX_QUANTA)
            self.storm_refresh = self.now() + self.storm_refresh_ns
            self.arm(self.storm_refresh, self.now())
        elif before and not self.pausing:
            self.storm_refresh = None
            self._storm_pfc(0)

    def _storm_pfc(self, quanta: int) -> None:
        if self.pfc_sock is None:
            with entered(self.netns):  # the process serves other nodes too: open it in this one's namespace
                self.pfc_sock = unbound_packet_socket()
            self.pfc_sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, leaf_class(PRIORITIES - 1))
            self.pfc_sock.bind((self.ifname, 0))
        self.pfc_sock.send(encode_pfc(self.mac, dict.fromkeys(DEFAULT_LOSSLESS, quanta)))
        self.storm_pfc_sent += 1

    def stats(self) -> dict[str, Any]:
        pfc = self.nic.pfc_figures(self.now())
        return {
            "fault": {"stalled": "stall" in self.pausing, "pfc_sent": self.storm_pfc_sent,
                      "slow": self.nic.slow_figures()},
            "host": self.name,
            "scheduling": self.scheduling,
            "cpu": self.cpu,
            "pfc_received": pfc["pfc_received"],
            "paused_ns": pfc["paused_ns"],
            "paused_now": pfc["paused_now"],
            "pause_gates": {"failures": pfc["gate_failures"], "error": pfc["gate_error"]},
            "drops": {"malformed": pfc["malformed"] + self.nic.malformed()},
            "rnic": self.rnic.stats(),
            "kernel": self._kernel_drops(),
            "rps_failed": self.unordered,
            "fidelity": self._fidelity(),
        }

    def _kernel_drops(self) -> dict[str, Any]:
        """What the host's kernel dropped: its NIC's tc tree (the pause gates), the veth, IPv4, UDP sockets."""
        try:
            if self.kernel_counters is None:
                self.kernel_counters = NamespaceDrops(self.netns, [self.ifname])
            return self.kernel_counters.read()
        except OSError as err:  # the namespace went first (a teardown): say so, the verdict counts it unaccounted
            return {"error": f"{type(err).__name__}: {err}"}

    def _fidelity(self) -> dict[str, Any]:
        """The monitor's figures of this host (its RNIC's wire and its timers so far) and their verdict."""
        wire, link, timeouts, shortest_timeout_ns, starts = self.nic.fidelity_figures()
        link.merge(self.timer_lateness["link"])  # the RNIC's link timers (its pauses' expiries) and the storm's
        judged = verdict(wire, Durations(), link, self.frame_ns, starts=starts, timeouts=timeouts,
                         timeout_ns=shortest_timeout_ns, monitored=self.monitor)
        reasons = list(judged.reasons)
        pfc = self.nic.pfc_figures(self.now())
        if pfc["gate_failures"]:  # PFC the host did not obey
            reasons.append(f"pause gates failed {pfc['gate_failures']} times (first: {pfc['gate_error']})")
        return {"faithful": judged.faithful and not pfc["gate_failures"], "reasons": reasons, "wire": wire.summary(),
                "timers": link.summary(), "starts": starts.summary(), "timeouts": timeouts.summary()}

    def reset_fidelity(self) -> None:
        super().reset_fidelity()
        self.nic.reset_fidelity()

    def close(self) -> None:
        self.rnic.close()
        if self.pfc_sock is not None:
            self.pfc_sock.close()
        if self.kernel_counters is not None:
            self.kernel_counters.close()
