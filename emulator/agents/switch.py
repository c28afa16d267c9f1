"""The switch agent: forwarding real frames between one switch's ports.

It wraps the sans-I/O pieces (forwarding decisions, the MMU, the links, the
IB plane: the compiled models of :mod:`emulator._core`) with AF_PACKET
sockets, an epoll loop and a timerfd.  Egress
pacing is the kernel's: each port's HTB shapes at the link rate, and the
port's data socket has a send buffer of about two full frames, so the kernel
queue holds one to three frames and the backlog stays in the MMU.  When the
kernel queue drains, the socket turns writable and the loop sends the next
frame the MMU chooses.  PFC frames leave through a second socket per port,
in the highest tc class, so they overtake the data backlog.

Link delay and injected loss are modelled here, on every kernel, by each
port's compiled :class:`~emulator._core.link.Link`: it says when a received frame is
processed and, on host-facing ports with delay, when a frame leaves the MMU
and when it reaches the kernel; this module receives and sends.

It runs in a data-plane process (:mod:`emulator.agents.worker`) beside
other agents.  It imports only the standard library and small project
modules: scapy and pyroute2 cost about a second and 100 MB each.
"""

from __future__ import annotations

import select
import socket
import time
from typing import Any

from emulator.agents.base import AgentBase
from emulator.errors import FabricError
from emulator.agents.loop import Loop
from emulator.agents.config import PortConfig, RouteTable, SwitchConfig, check_routes, read
from emulator._core.mac import ETH_LEN, mac_bytes
from emulator._core.ib import ETH_IB
from emulator._core.pfc import ETH_MAC_CONTROL, PRIORITIES, decode_pfc, encode_pfc
from emulator.kernel.packet_socket import (
    ETH_P_ALL, kernel_drops, last_receive_ns, open_packet_socket, unbound_packet_socket,
)
from emulator.kernel.rps import keep_flows_in_order
from emulator._core.forwarding import (
    ETH_ARP, ETH_CONTROL, ETH_IPV4, arp_reply, ecmp_index, ipv4_ok, priority, routed,
)
from emulator._core.fidelity import Durations, EgressWire, verdict
from emulator._core.ib_plane import IB_DROPS, IbPlane
from emulator._core.link import Link
from emulator._core.mmu import Mmu
from emulator.kernel.tc import leaf_class
from emulator.kernel.drop_counters import NamespaceDrops
from emulator.model.switch_params import derive_config

SEND_FRAMES = 2  # SO_SNDBUF in link-MTU frames (the kernel doubles it): about two frames queued in the kernel
RECV_BUFFER = 4 << 20
BATCH = 64
# The processing lag costs an ioctl and a clock read (2 to 4.5 us), so a port measures it on a wake-up at
# most every LAG_PERIOD_NS: at most 200 samples a second per port when frames come fast, and every wake-up
# on a slow link, where a p99 over one wake-up in eight was a p99 of a few dozen samples (one hiccup).
LAG_PERIOD_NS = 5_000_000
SAMPLE_NS = 1_000_000  # occupancy sampling period
PFC_FRAME_MIN = 34  # Ethernet header, opcode, class-enable vector and eight quanta
ARP_FRAME_MIN = 42  # Ethernet header and an IPv4-over-Ethernet ARP packet
RX_DROPS = (
    "malformed",    # too short for its EtherType, or an IPv4 header that fails ipv4_ok
    "not_for_us",   # unicast to another MAC
    "unsupported",  # an EtherType, MAC control opcode or ARP this switch does not answer
    "no_route",     # IPv4 to an address that is no host of the fabric
    "ttl",          # TTL ran out
    "mtu",          # too long for the egress link (IPv4 is never fragmented here)
)


class Port:
    """One switch port: sockets, link model (delay, loss) and counters."""

    def __init__(self, index: int, spec: PortConfig, seed: int) -> None:
        self.index = index
        self.ifname = spec.ifname
        self.mac = mac_bytes(spec.mac)
        self.peer_mac = mac_bytes(spec.peer_mac)
        self.rate_bps = spec.rate_bps
        self.max_frame = ETH_LEN + spec.mtu  # a longer frame cannot go out on this link
        self.link = Link(self.rate_bps, spec.delay_ns, spec.host_facing, spec.loss, spec.drop, seed * 1000 + index)
        self.sock = open_packet_socket(self.ifname, ETH_P_ALL, SEND_FRAMES * self.max_frame, RECV_BUFFER)
        self.pfc_sock = unbound_packet_socket()
        self.pfc_sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, leaf_class(PRIORITIES - 1))
        self.pfc_sock.bind((self.ifname, 0))
        self.fd = self.sock.fileno()
        self.writable_armed = False
        # Fidelity: a virtual wire at the port's rate, fed with each frame the kernel takes.  While the
        # port's queue held frames, the wire should never idle; if it did, the agent was late.
        self.wire = EgressWire()
        self.wire_end = 0  # when the frames handed to the kernel so far have left, at the port's rate
        self.wire_bytes = 0  # handed to the kernel by _drain (the wire's busy time at the port's rate)
        self.wire_frames_before = 0  # frames the port had sent when the monitor was last reset
        self.waiting = False  # the port's queue held frames the kernel had no room for
        self.frame_ns = (ETH_LEN + spec.mtu) * 8_000_000_000 // self.rate_bps
        self.lag = Durations()  # fidelity: kernel receive time stamp to the agent's read, first frame of a batch
        self.lag_due = 0  # the next wake-up at or after this time measures the processing lag
        self.rx_frames = [0] * PRIORITIES
        self.rx_bytes = [0] * PRIORITIES
        self.pfc_received = [0] * PRIORITIES
        self.kernel_drops = 0
        # Frames that arrived here and went nowhere, by cause: RX_DROPS.
        self.drops = dict.fromkeys(RX_DROPS, 0)
        self.tx_errors = 0  # frames the kernel refused to send (counted, dropped; a link down refuses all)
        self.link_errors = 0  # receive errors: the link went down
        self.control_frames = 0
        self.arp_replies = 0

    def read_kernel_drops(self) -> int:
        """Frames the kernel dropped because this socket's buffer was full."""
        self.kernel_drops += kernel_drops(self.sock)
        return self.kernel_drops


class SwitchAgent(AgentBase):
    """The forwarding loop of one switch."""

    def __init__(self, config: SwitchConfig, loop: Loop) -> None:
        super().__init__(config, loop)
        self.seed = config.seed
        self.ports = [Port(i, spec, self.seed) for i, spec in enumerate(config.ports)]
        self.unordered = keep_flows_in_order([port.ifname for port in self.ports], whole_link=config.ib is not None,
                                             rx_cpus=[port.rx_cpu for port in config.ports])
        self.by_fd = {p.fd: p for p in self.ports}
        self.routes_file = config.routes_file
        self._set_routes(config.routes)
        self.mmu = Mmu(config.mmu, [p.rate_bps for p in self.ports], seed=self.seed)
        self.delayed = [p for p in self.ports if p.link.delay_ns]
        self.paced = [p for p in self.ports if p.link.paced]
        self.next_sample = 0
        self.last_sample: dict[tuple[int, int], tuple[int, int, bool, bool]] = {}
        self.ib = IbPlane([(p.mac, p.peer_mac) for p in config.ports], config.ib,
                          [p.max_frame for p in self.ports], [p.rate_bps for p in self.ports]) \
            if config.ib is not None else None
        self.netns = config.netns
        self.kernel_counters: NamespaceDrops | None = None  # opened at the first stats request
        self.buffer_below_default = _buffer_below_default(config)
        self.occupancy = open(config.occupancy_file, "w", buffering=1 << 16)
        self.occupancy.write("time_ns,switch,port,priority,ingress_bytes,egress_bytes,egress_paused,xoff\n")
        for port in self.ports:
            self.watch(port.fd, select.EPOLLIN, self._on_port)

    # --- events ----------------------------------------------------------------------

    def _on_port(self, fd: int, mask: int, now: int) -> None:
        port = self.by_fd[fd]
        if mask & (select.EPOLLIN | select.EPOLLERR):  # an error: the link went down (recv reads and clears it)
            self._receive(port, now)
        if mask & select.EPOLLOUT:
            self._drain(port, now)

    def after_events(self, now: int) -> None:
        """Send the PFC frames the MMU decided on; set the next wake-up."""
        for port, quanta in self.mmu.take_pfc():
            try:
                self.ports[port].pfc_sock.send(encode_pfc(self.ports[port].mac, quanta))
            except OSError:  # the link is down: the frame is lost with it
                self.ports[port].tx_errors += 1
        if self.next_sample and now >= self.next_sample:
            self._sample(now)
        deadlines = [self.mmu.next_deadline()]
        if self.ib is not None:
            for port in self.ib.take_fc(now):  # sent on the data socket, behind the data they count
                self._drain(self.ports[port], now)
            deadlines.append(self.ib.next_deadline())
        backlog = self.mmu.backlog
        for port in self.delayed:
            link = port.link
            if link.arrivals or link.departures or backlog[port.index]:  # an idle link costs no call
                deadlines.append(link.next_deadline(bool(backlog[port.index])))
        pending = [d for d in deadlines if d is not None]
        deadline = min(pending) if pending else None
        # Occupancy is sampled on the wake-ups frames bring anyway; its own timer fires only when the switch
        # would sleep a whole period past a due sample (after the last change), and is no link timer.
        lazy_sample = self.next_sample + SAMPLE_NS if self.next_sample else None
        if lazy_sample is not None and (deadline is None or lazy_sample < deadline):
            deadline, self.timer_kind = lazy_sample, None
        else:
            self.timer_kind = "link"
        self.arm(deadline, now)

    def on_timer(self, now: int) -> None:
        for index in self.mmu.on_timer(now):
            self._drain(self.ports[index], now)
        for port in self.delayed:
            if port.link.arrivals:
                arrived = port.link.arrived
                while (item := arrived(now)) is not None:
                    self._process(port, item[1], item[0])
        for port in self.paced:
            self._drain(port, now)

    # --- ingress -----------------------------------------------------------------------

    def _receive(self, port: Port, now: int) -> None:
        recv = port.sock.recv
        link = port.link
        for count in range(BATCH):
            try:
                frame = recv(65536)
            except BlockingIOError:
                return
            except OSError:  # ENETDOWN: the link was taken down (fabric-emu link); nothing to read
                port.link_errors += 1
                return
            if not count and self.monitor and now >= port.lag_due:  # a batch's first frame waited longest
                port.lag_due = now + LAG_PERIOD_NS
                if stamp := last_receive_ns(port.sock):
                    port.lag.add(time.time_ns() - stamp)
            if link.delay_ns:
                link.arrive(now, frame)
            else:
                self._process(port, frame, now)

    def _process(self, port: Port, frame: bytes, now: int) -> None:
        """One frame from the wire: forward, react, answer, or drop it under a named counter."""
        drops = port.drops
        if len(frame) < ETH_LEN:
            drops["malformed"] += 1
            return
        if frame[0:6] != port.mac and not frame[0] & 1:
            drops["not_for_us"] += 1
            return
        ethertype = frame[12:14]
        if ethertype == ETH_IPV4:
            if not ipv4_ok(frame):
                drops["malformed"] += 1
                return
            prio = priority(frame)
            port.rx_frames[prio] += 1
            port.rx_bytes[prio] += len(frame)
            if port.link.host_facing and port.link.lost_from_host(prio):
                return
            choices = self.routes.get(frame[30:34])
            if choices is None:
                drops["no_route"] += 1
                return
            out = choices[0] if len(choices) == 1 else choices[ecmp_index(frame, self.seed, len(choices))]
            forwarded = routed(frame, out.mac, out.peer_mac)
            if forwarded is None:
                drops["ttl"] += 1
                return
            if len(forwarded) > out.max_frame:
                drops["mtu"] += 1
                return
            if self.mmu.enqueue(now, port.index, out.index, prio, forwarded):
                self._activity(now)
                if not out.writable_armed or out.link.paced:  # armed: the kernel queue is full, EPOLLOUT drains
                    self._drain(out, now)
        elif ethertype == ETH_MAC_CONTROL:
            if len(frame) < PFC_FRAME_MIN:
                drops["malformed"] += 1
                return
            quanta = decode_pfc(frame)
            if not quanta:  # another MAC control opcode (802.3x PAUSE), or PFC that enables no class
                drops["unsupported"] += 1
                return
            for prio in quanta:
                port.pfc_received[prio] += 1
            self._activity(now)
            if self.mmu.pfc_received(now, port.index, quanta):
                self._drain(port, now)
        elif ethertype == ETH_ARP:
            if len(frame) < ARP_FRAME_MIN:
                drops["malformed"] += 1
                return
            reply = arp_reply(frame, port.mac)
            if reply is None:  # a reply, or a request for an address outside the fabric
                drops["unsupported"] += 1
                return
            try:
                port.pfc_sock.send(reply)
            except OSError:
                port.tx_errors += 1
                return
            port.arp_replies += 1
        elif ethertype == ETH_IB and self.ib is not None:
            for out_index in self.ib.receive(now, port.index, frame):
                self._drain(self.ports[out_index], now)
        elif ethertype == ETH_CONTROL:
            port.control_frames += 1
        else:
            drops["unsupported"] += 1

    # --- egress ------------------------------------------------------------------------

    def _drain(self, port: Port, now: int) -> None:
        """Move frames from the MMU towards the wire as far as the wire allows."""
        mmu, index, link = self.mmu, port.index, port.link
        if link.paced:
            kernel_full = self.ib is not None and not self._drain_ib(port)[0]  # IB: no modelled delay
            self._drain_paced(port, now)
            backlog = bool(link.departures) or kernel_full
        else:
            send, sent = port.sock.send, 0
            if self.ib is not None:
                room, sent = self._drain_ib(port)
                kernel_full = not room
            else:
                kernel_full = False
            while not kernel_full:
                head = mmu.head(index)
                if head is None:
                    break
                prio, frame = head
                if link.lost_at_head(frame, prio):
                    mmu.pop(index, prio)
                    continue
                try:
                    send(frame)
                except BlockingIOError:
                    break
                except OSError:  # the kernel refused it for good (e.g. ENOBUFS): it is lost, the port goes on
                    port.tx_errors += 1
                mmu.pop(index, prio)
                sent += len(frame)
            if sent and self.monitor:  # inline (no call): it runs for about every frame
                # The kernel took ``sent`` bytes of frames at ``now``: the port's virtual wire carries
                # them back to back from when it is free.  ``now`` is one time for the whole
                # drain, so only the first can find the wire idle; had the port been waiting, that was a stall.
                # Busy time and frames are the counters' (``_wire``), so this is all a frame costs.
                wire_end = port.wire_end
                if now > wire_end:
                    if port.waiting:
                        port.wire.stalled(now - wire_end)
                    wire_end = now
                port.wire_end = wire_end + sent * 8_000_000_000 // port.rate_bps
                port.wire_bytes += sent
            # IB packets waiting for credit wake the port when credit comes, not on EPOLLOUT.
            backlog = mmu.head(index) is not None or kernel_full
            port.waiting = backlog
        if backlog != port.writable_armed:
            self.modify(port.fd, select.EPOLLIN | (select.EPOLLOUT if backlog else 0))
            port.writable_armed = backlog

    def _drain_ib(self, port: Port) -> tuple[bool, int]:
        """Send what the IB plane lets go: whether the kernel queue has room left, and the bytes sent."""
        ib, index, send = self.ib, port.index, port.sock.send
        sent = 0
        while (frame := ib.head(index)) is not None:
            try:
                send(frame)
            except BlockingIOError:
                return False, sent
            except OSError:  # refused for good (e.g. ENOBUFS)
                ib.refused(index)
            else:
                ib.sent(index)
                sent += len(frame)
        return True, sent


    def _drain_paced(self, port: Port, now: int) -> None:
        """Host-facing port with delay: the link model's virtual wire and delay line say what goes now."""
        link = port.link
        frame = link.transmit(now, self.mmu, port.index)
        while frame is not None:
            try:
                port.sock.send(frame)
            except BlockingIOError:
                break
            except OSError:
                port.tx_errors += 1
            frame = link.left(now)

    # --- telemetry ---------------------------------------------------------------------

    def _sample(self, now: int) -> None:
        """Write the (port, priority) occupancies that changed since the last sample.

        A sample is due SAMPLE_NS after the last while something changes,
        and is taken on the first wake-up after that (rows carry the time
        taken); sampling stops when a sample finds nothing new, and the
        next admitted frame or PFC frame restarts it (an idle switch must
        not wake 1000 times a second, a busy one needs no wake-ups of its own).
        """
        mmu, rows = self.mmu, []
        pauses, ingresses = mmu.pause, mmu.ingress  # the compiled MMU copies these at each read: once a sample
        for port in self.ports:
            i = port.index
            paused = pauses[i].until
            xoff = ingresses[i].xoff
            for p in range(PRIORITIES):
                value = (mmu.ingress_bytes(i, p), mmu.egress_bytes(i, p), paused[p] is not None, xoff[p])
                if self.last_sample.get((i, p), (0, 0, False, False)) != value:
                    self.last_sample[(i, p)] = value
                    rows.append(f"{now},{self.name},{port.ifname},{p},{value[0]},{value[1]},{int(value[2])},{int(value[3])}\n")
        self.occupancy.writelines(rows)
        self.next_sample = now + SAMPLE_NS if rows else 0

    def _activity(self, now: int) -> None:
        if not self.next_sample:
            self.next_sample = now + SAMPLE_NS

    def _set_routes(self, routes: dict[str, tuple[str, ...]]) -> None:
        by_name = {p.ifname: p for p in self.ports}
        self.routes = {socket.inet_aton(ip): [by_name[name] for name in names] for ip, names in routes.items()}

    def command(self, request: list[str]) -> dict[str, Any]:
        """``pfc IFNAME PRIORITY QUANTA``: send one PFC frame out of a port; ``routes``: take the routes file's
        table (a link went down or up), checked first: a bad file changes nothing; ``held-routes``: the table it
        forwards by (host address -> its ECMP ports), so that a check can compare it with the run's record."""
        if request == ["held-routes"]:
            return {"routes": {socket.inet_ntoa(ip): [port.ifname for port in ports] for ip, ports in self.routes.items()}}
        if request == ["routes"]:
            if self.routes_file is None:
                raise ValueError("this switch has no routes file")
            table = read(self.routes_file, RouteTable)
            check_routes(table.routes, {port.ifname for port in self.ports})
            self._set_routes(table.routes)
            return {"routes": len(self.routes)}
        if request[:1] != ["pfc"] or len(request) != 4:
            return super().command(request)
        port = next((p for p in self.ports if p.ifname == request[1]), None)
        if port is None:
            raise ValueError(f"no port {request[1]!r} on {self.name}")
        frame = encode_pfc(port.mac, {int(request[2]): int(request[3])})
        port.pfc_sock.send(frame)
        return {"sent": frame.hex()}

    def stats(self) -> dict[str, Any]:
        now = self.now()
        mmu = self.mmu
        # The compiled MMU builds these lists at each read (the counters are live views): once per request.
        counters, pauses, watchdog = mmu.counters, mmu.pause, mmu.watchdog
        ports: dict[str, Any] = {}
        totals = {"drops": 0, "pfc_sent": 0, "pfc_received": 0, "ecn_marked": 0, "rx_frames": 0, "tx_frames": 0,
                  "malformed": 0, "pfcwd_drops": 0, "pfcwd_storms": 0,
                  "pfcwd_restorations": watchdog.restorations if watchdog is not None else 0}
        for port in self.ports:
            i = port.index
            kernel_drops = port.read_kernel_drops()
            injected = port.link.injected_drops  # a copy
            priorities = []
            for p in range(PRIORITIES):
                c = counters[i][p]
                entry = {
                    "rx_frames": port.rx_frames[p], "rx_bytes": port.rx_bytes[p],
                    "tx_frames": c.tx_frames, "tx_bytes": c.tx_bytes,
                    "drops": {"threshold": c.drops_threshold, "headroom": c.drops_headroom,
                              "injected": injected[p], "pfcwd": c.pfcwd_drops},
                    "pfcwd_storms": c.pfcwd_storms,
                    "pfc_sent": {"xoff": c.pfc_xoff_sent, "xon": c.pfc_xon_sent},
                    "pfc_received": port.pfc_received[p],
                    "paused_ns": pauses[i].paused_time(p, now),
                    "ecn_marked": c.ecn_marked,
                    "ingress_bytes": mmu.ingress_bytes(i, p), "ingress_peak": c.ingress_peak,
                    "egress_bytes": mmu.egress_bytes(i, p), "egress_peak": c.egress_peak,
                }
                priorities.append(entry)
                totals["pfc_sent"] += c.pfc_xoff_sent + c.pfc_xon_sent
                totals["pfc_received"] += port.pfc_received[p]
                totals["ecn_marked"] += c.ecn_marked
                totals["rx_frames"] += port.rx_frames[p]
                totals["tx_frames"] += c.tx_frames
                totals["pfcwd_drops"] += c.pfcwd_drops
                totals["pfcwd_storms"] += c.pfcwd_storms
            # Frames lost at this port; not_for_us and unsupported are what a router ignores, not losses.
            dropped = (sum(sum(entry["drops"].values()) for entry in priorities) + kernel_drops + port.tx_errors
                       + sum(port.drops[k] for k in ("malformed", "no_route", "ttl", "mtu")))
            malformed = port.drops["malformed"]
            ports[port.ifname] = {
                "priorities": priorities,
                "rx_kernel_drops": kernel_drops,
                "rx_drops": dict(port.drops),
                "tx_errors": port.tx_errors,
                "link_errors": port.link_errors,
                "rx_control_frames": port.control_frames,
                "arp_replies": port.arp_replies,
                "wire": self._wire(port).summary(),
                "lag": port.lag.summary(),
            }
            if self.ib is not None:
                ib = ports[port.ifname]["ib"] = self.ib.stats(i)
                dropped += sum(ib["drops"].values()) + ib["tx_errors"]
                malformed += ib["drops"]["malformed"]
            ports[port.ifname]["dropped"] = dropped
            totals["drops"] += dropped
            totals["malformed"] += malformed
        if self.ib is not None:
            for cause in IB_DROPS:
                totals[f"ib_{cause}"] = self.ib.total(cause)
            totals["ib_credit_stalls"] = sum(entry["stalls"] for port in ports.values() for entry in port["ib"]["credits"])
            totals["tx_frames"] += sum(self.ib.forwarded)  # the IB plane's packets (the MMU carries none on ib)
        return {"switch": self.name, "scheduling": self.scheduling, "cpu": self.cpu, "ports": ports, "totals": totals,
                "lossless": sorted(mmu.config.lossless), "buffer_below_default": self.buffer_below_default,
                "kernel": self._kernel_drops(), "rps_failed": self.unordered, "fidelity": self._fidelity()}

    def _kernel_drops(self) -> dict[str, Any]:
        """What the switch's kernel dropped on its ports: their tc trees and veths (AF_PACKET's are the ports')."""
        try:
            if self.kernel_counters is None:
                self.kernel_counters = NamespaceDrops(self.netns, [port.ifname for port in self.ports])
            return self.kernel_counters.read()
        except OSError as err:  # the namespace went first (a teardown): say so, the verdict counts it unaccounted
            return {"error": f"{type(err).__name__}: {err}"}

    def _wire(self, port: Port) -> EgressWire:
        """The port's wire figures, its busy time and frames filled in from what it sent (the MMU's and IB's)."""
        port.wire.busy_ns = port.wire_bytes * 8_000_000_000 // port.rate_bps
        port.wire.frames = self._frames_sent(port) - port.wire_frames_before
        return port.wire

    def _frames_sent(self, port: Port) -> int:
        return sum(c.tx_frames for c in self.mmu.counters[port.index]) + \
            (self.ib.forwarded[port.index] if self.ib is not None else 0)

    def reset_fidelity(self) -> None:
        super().reset_fidelity()
        for port in self.ports:
            port.wire, port.lag, port.wire_bytes = EgressWire(), Durations(), 0
            port.wire_frames_before = self._frames_sent(port)

    def _fidelity(self) -> dict[str, Any]:
        """The monitor's figures of this switch and its verdict (the fastest port's frame time is the bar)."""
        wire, lag = EgressWire(), Durations()
        for port in self.ports:
            wire.merge(self._wire(port))
            lag.merge(port.lag)
        timers = self.timer_lateness["link"]  # every timer of a switch is a link's
        judged = verdict(wire, lag, timers, min(port.frame_ns for port in self.ports), monitored=self.monitor)
        return {"faithful": judged.faithful, "reasons": list(judged.reasons), "wire": wire.summary(),
                "lag": lag.summary(), "timers": timers.summary()}

    def close(self) -> None:
        self._sample(self.now())
        self.occupancy.close()
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
