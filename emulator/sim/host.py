"""A host's RNIC in simulated time: the RC transport model on real RoCEv2 frames, a NIC queue that obeys PFC.

As the emulator's RNIC does (:mod:`emulator.agents.rnic`), it pulls packets
from its QPs one each in turn while its NIC queue has room
(``NIC_FRAMES``), frames them with :class:`~emulator.wire.roce.Framer`,
decodes what arrives (checking the ICRC) and hands it to the QP the BTH
names; PFC frames from the switch pause its queue
(:class:`~emulator.sim.link.PortQueue`).  Memory is one bytearray per host
(:class:`FlatMemory`), enough for the transport's checks and the data to
land.
"""

from __future__ import annotations

from emulator.model.rc import AccessError, Completion, RcConfig, RcQueuePair
from emulator.sim.engine import Simulator
from emulator.sim.link import PortQueue
from emulator.wire.pfc import ETH_MAC_CONTROL, decode_pfc
from emulator.wire.roce import Framer, decode

NIC_FRAMES = 4  # frames the NIC queue holds before the RNIC stops pulling (the agent's socket: about a dozen)
ROCE_PRIORITY = 3  # DSCP 26


class FlatMemory:
    """One region of ``size`` bytes at address 0, key 1, every access allowed (the model's Memory protocol)."""

    KEY = 1

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)

    def local(self, lkey: int, addr: int, length: int, write: bool) -> memoryview:
        return self._view(lkey, addr, length)

    def remote(self, rkey: int, addr: int, length: int, write: bool) -> memoryview:
        return self._view(rkey, addr, length)

    def _view(self, key: int, addr: int, length: int) -> memoryview:
        if key != self.KEY or addr < 0 or addr + length > len(self.data):
            raise AccessError(f"key {key}, [{addr}, {addr + length}) outside the region")
        return memoryview(self.data)[addr:addr + length]


class SimHost:
    """The RNIC of one host: its QPs (by number), the NIC queue it sends on, what it received."""

    def __init__(self, sim: Simulator, name: str, mac: str, gateway_mac: str, ip: str, queue: PortQueue,
                 memory_bytes: int) -> None:
        self.sim, self.name, self.mac, self.gateway_mac, self.ip = sim, name, mac, gateway_mac, ip
        self.queue = queue
        queue.departed = self._pull
        self.memory = FlatMemory(memory_bytes)
        self.qps: dict[int, tuple[RcQueuePair, Framer, str]] = {}  # qpn -> (model, framer, peer IP)
        self.completions: list[Completion] = []
        self.icrc_errors = self.unknown = self.pauses = 0
        self._timer = sim.timer(self._on_timer)

    def connect(self, qpn: int, peer: "SimHost", peer_qpn: int, config: RcConfig) -> RcQueuePair:
        """An RC QP to ``peer``'s ``peer_qpn`` (both ends start at PSN 0)."""
        qp = RcQueuePair(qpn, self.memory, config, 0)
        qp.connect(peer_qpn, 0)
        framer = Framer(self.mac, self.gateway_mac, self.ip, peer.ip, 49152 + (qpn & 0x3FFF))
        self.qps[qpn] = (qp, framer, peer.ip)
        return qp

    def kick(self) -> None:
        """Work was posted: send what may go."""
        self._pull()
        self._arm()

    def receive(self, frame: bytes) -> None:
        """A frame's last bit arrived from the switch (a Wire's ``deliver``)."""
        if frame[12:14] == ETH_MAC_CONTROL:
            quanta = decode_pfc(frame)
            if quanta:
                self.pauses += 1
                self.queue.on_pfc(quanta)
            return
        decoded = decode(frame)
        if decoded is None or not decoded.icrc_ok:
            self.icrc_errors += decoded is not None
            return
        entry = self.qps.get(decoded.packet.dest_qp)
        if entry is None or entry[2] != decoded.src_ip:
            self.unknown += 1
            return
        entry[0].receive(self.sim.now, decoded.packet)
        self._collect(entry[0])
        self._pull()
        self._arm()

    def _collect(self, qp: RcQueuePair) -> None:
        for completion in qp.poll_completions():
            completion.timestamp = self.sim.now
            self.completions.append(completion)

    def _pull(self) -> None:
        """Packets from the QPs, one each in turn, while the NIC queue has room."""
        entries = list(self.qps.values())
        while entries and self.queue.queued(ROCE_PRIORITY) < NIC_FRAMES:
            ready = []
            for qp, framer, _peer in entries:
                if self.queue.queued(ROCE_PRIORITY) >= NIC_FRAMES:
                    return
                packet = qp.next_packet(self.sim.now)
                if packet is not None:
                    self.queue.enqueue(framer.encode(packet), ROCE_PRIORITY)
                    ready.append((qp, framer, _peer))
            entries = ready

    def _arm(self) -> None:
        deadlines = [d for qp, _f, _p in self.qps.values() if (d := qp.next_deadline()) is not None]
        self._timer.set(min(deadlines) if deadlines else None)

    def _on_timer(self) -> None:
        for qp, _framer, _peer in self.qps.values():
            if (deadline := qp.next_deadline()) is not None and deadline <= self.sim.now:
                qp.on_timer(self.sim.now)
                self._collect(qp)
        self._pull()
        self._arm()
