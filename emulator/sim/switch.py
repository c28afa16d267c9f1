"""A switch in simulated time: the emulator's models on real frame bytes, cables instead of sockets.

The same pieces the switch agent wraps with AF_PACKET sockets: the
forwarding decisions (:mod:`emulator.model.forwarding`: IPv4 checks, ECMP,
TTL and MAC rewrite, DSCP priority) and the MMU (:mod:`emulator.model.mmu`:
admission, headroom, PFC generation and reaction, scheduling, ECN).  A
port sends on its :class:`~emulator.sim.link.Wire` whenever the wire is
free: PFC frames first (the agent sends them on a socket in the highest tc
class), then what the MMU chooses.  Frames that are no IPv4 or PFC frame are
dropped and counted, as the agent does.  On an IB fabric the switch's IB
plane (:mod:`emulator.model.ib_plane`: DLID forwarding, VL queues, credits
both ways) takes the native IB frames and goes before the MMU, its
flow-control packets in line with the data they count.
"""

from __future__ import annotations

from emulator.model.forwarding import ETH_IPV4, ecmp_index, ipv4_ok, priority, routed
from emulator.model.ib_plane import IbPlane, IbPlaneSettings
from emulator.model.link import Link
from emulator.model.mmu import Mmu, MmuConfig
from emulator.sim.engine import Handle, Simulator
from emulator.sim.link import Wire
from emulator.wire.ib import ETH_IB
from emulator.wire.mac import ETH_LEN, mac_text
from emulator.wire.pfc import ETH_MAC_CONTROL, decode_pfc, encode_pfc


class SimSwitch:
    """``ports``: (MAC, the peer's MAC, rate) per port; ``routes``: IPv4 address (4 bytes) -> egress ports;
    ``ib``: the switch's part of the IB subnet on an IB fabric, with ``max_frames`` (each port's longest frame)."""

    def __init__(self, sim: Simulator, ports: list[tuple[bytes, bytes, int]], routes: dict[bytes, list[int]],
                 config: MmuConfig, seed: int = 0, ib: IbPlaneSettings | None = None,
                 max_frames: list[int] | None = None, links: list[Link] | None = None) -> None:
        self.sim, self.ports, self.routes, self.seed = sim, ports, routes, seed
        self.mmu = Mmu(config, [rate for _, _, rate in ports], seed=seed)
        self.ib = None if ib is None else IbPlane([(mac_text(a), mac_text(b)) for a, b, _ in ports], ib,
                                                  max_frames or [], [rate for _, _, rate in ports])
        self.wires: list[Wire | None] = [None] * len(ports)
        self._pfc_out: list[list[bytes]] = [[] for _ in ports]
        self._drain_at: list[Handle | None] = [None] * len(ports)
        self._timer = sim.timer(self._on_timer)
        self.dropped = {"malformed": 0, "no_route": 0, "ttl": 0, "unsupported": 0}
        # Injected loss per port, the agent's model (its delay is the wire's business here): None without loss.
        self.links = links if links is not None and any(link.lossy for link in links) else None

    def connect(self, port: int, wire: Wire) -> None:
        """The wire that carries what ``port`` sends."""
        self.wires[port] = wire

    def start(self) -> None:
        """Once every port's wire is connected: what is due at once (IB's first flow-control packets)."""
        self._after()

    def receive(self, port: int, frame: bytes) -> None:
        """A frame's last bit arrived on ``port`` (a Wire's ``deliver``)."""
        now = self.sim.now
        ethertype = frame[12:14]
        if ethertype == ETH_IPV4 and len(frame) >= ETH_LEN and ipv4_ok(frame):
            choices = self.routes.get(frame[30:34])
            if self.links is not None and self.links[port].host_facing and self.links[port].lost_from_host(
                    priority(frame)):
                pass  # injected loss on the host's link, counted by the model
            elif choices is None:
                self.dropped["no_route"] += 1
            else:
                out = choices[0] if len(choices) == 1 else choices[ecmp_index(frame, self.seed, len(choices))]
                mac, peer_mac, _rate = self.ports[out]
                forwarded = routed(frame, mac, peer_mac)
                if forwarded is None:
                    self.dropped["ttl"] += 1
                elif self.mmu.enqueue(now, port, out, priority(frame), forwarded):
                    self._drain(out)
        elif ethertype == ETH_IB and self.ib is not None:
            for out in self.ib.receive(now, port, frame):
                self._drain(out)
        elif ethertype == ETH_MAC_CONTROL and (quanta := decode_pfc(frame)):
            if self.mmu.pfc_received(now, port, quanta):
                self._drain(port)
        else:
            self.dropped["malformed" if ethertype == ETH_IPV4 else "unsupported"] += 1
        self._after()

    def _after(self) -> None:
        """Send the PFC frames the MMU decided on (sending may decide more: an XON), and keep its timer armed."""
        while decided := self.mmu.take_pfc():
            for port, quanta in decided:
                self._pfc_out[port].append(encode_pfc(self.ports[port][0], quanta))
                self._drain(port)
        deadline = self.mmu.next_deadline()
        if self.ib is not None:
            ib_deadline = self.ib.next_deadline()
            if ib_deadline is not None and ib_deadline <= self.sim.now:  # some link has a flow-control packet due
                for port in self.ib.take_fc(self.sim.now):
                    self._drain(port)
                ib_deadline = self.ib.next_deadline()
            if ib_deadline is not None and (deadline is None or ib_deadline < deadline):
                deadline = ib_deadline
        self._timer.set(deadline)

    def _on_timer(self) -> None:
        for port in self.mmu.on_timer(self.sim.now):
            self._drain(port)
        self._after()

    def _drain(self, port: int) -> None:
        """Put the next frame on the port's wire if it is free, else look again when it is.

        A look is scheduled only while something waits (a frame, or a
        PFC frame): a port that sent its last frame costs no further event.
        """
        wire = self.wires[port]
        if wire is None:
            return
        if wire.busy():
            handle = self._drain_at[port]
            if handle is None or not self.sim.pending(handle):
                self._drain_at[port] = self.sim.at(wire.free_at, self._wire_free, port)
            return
        if self._pfc_out[port]:
            wire.send(self._pfc_out[port].pop(0))
        elif self.ib is not None and (frame := self.ib.head(port)) is not None:
            wire.send(frame)
            self.ib.sent(port)
        else:
            while True:
                head = self.mmu.head(port)
                if head is None:
                    return
                priority_, frame = head
                if self.links is None or not self.links[port].lost_at_head(frame, priority_):
                    break
                self.mmu.pop(port, priority_)  # injected loss on this link: the frame never reaches the wire
            wire.send(frame)
            self.mmu.pop(port, priority_)
        ib = self.ib
        if self._pfc_out[port] or self.mmu.backlog[port] or (ib is not None and (ib.control[port]
                                                                                or any(ib.queues[port]))):
            self._drain_at[port] = self.sim.at(wire.free_at, self._wire_free, port)

    def _wire_free(self, port: int) -> None:
        self._drain(port)
        self._after()  # what left may have brought an ingress below XON
