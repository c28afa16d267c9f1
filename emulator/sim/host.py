"""A host's RNIC in simulated time: the RC transport model on real frames, a NIC queue that obeys the link.

As the emulator's RNIC does (:mod:`emulator.agents.rnic`), it pulls packets
from its QPs one each in turn while its NIC queue has room
(``NIC_FRAMES``), frames them, decodes what arrives (checking the CRCs) and
hands it to the QP the BTH names.  On Ethernet the frames are RoCEv2
(:class:`~emulator.wire.roce.Framer`) and PFC frames from the switch pause
its queue (:class:`~emulator.sim.link.PortQueue`); on IB they are native IB
packets sent against the switch's credits, with flow-control packets back
(:class:`~emulator.model.ib_port.IbPort`, the model the RNIC agent drives).
With DCQCN (``cc``) it is the RNIC agent's notification point (a CNP per QP
per interval for CE-marked packets) and a reaction point per QP (its rate
cut by CNPs, raised by its timers; requests and READ responses paced at
the rate, ACKs never), from :mod:`emulator.model.dcqcn`.
Memory is one bytearray per host (:class:`FlatMemory`), enough for the
transport's checks and the data to land.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Callable

from emulator.model.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint
from emulator.model.ib_port import IbFramer, IbPort
from emulator.model.rc import AccessError, Completion, RcConfig, RcQueuePair, default_timeout_ns
from emulator.model.switch_params import DEFAULT_LOSSLESS
from emulator.sim.engine import Handle, Simulator, Timer
from emulator.sim.link import PortQueue
from emulator.wire.mac import mac_bytes
from emulator.wire.pfc import ETH_MAC_CONTROL, MAX_QUANTA, PRIORITIES, decode_pfc, encode_pfc, pause_ns
from emulator.wire.roce import CNP_DSCP, Framer, decode
from emulator.wire.transport import Opcode, Packet

NIC_FRAMES = 4  # frames the NIC queue holds before the RNIC stops pulling (the agent's socket: about a dozen)
ROCE_PRIORITY = 3  # DSCP 26
CNP_PRIORITY = CNP_DSCP >> 3  # 6: strict, ahead of data, as the RNIC agent sends its control frames first
# What a stalled NIC holds unread: the RNIC agent's socket receive buffer (4 MiB, which the kernel doubles);
# frames beyond it are lost (``stall_drops``), as the kernel drops them when the socket is full.
STALL_BUFFER = 8 << 20


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
    """The RNIC of one host: its QPs (by number), the NIC queue it sends on, what it received.

    Only QPs that may have something to send are visited (``_ready``, in
    round-robin order): a QP joins when work is posted to it, a packet
    arrives for it or its timer fires, and leaves when it has nothing to
    give.  A host of an all-to-all on a thousand ranks holds a thousand
    QPs, and one frame must not cost a look at each.
    """

    def __init__(self, sim: Simulator, name: str, mac: str, gateway_mac: str, ip: str, queue: PortQueue,
                 memory_bytes: int, ib: IbPort | None = None, cc: DcqcnParams | None = None) -> None:
        self.sim, self.name, self.mac, self.gateway_mac, self.ip = sim, name, mac, gateway_mac, ip
        self.queue = queue
        self.ib = ib  # an IB fabric: native IB framing, sent against the switch's credits
        self._held: bytes | None = None  # IB: the framed packet that waits for credit
        self._ib_timer = sim.timer(self._on_ib_timer)
        self._arm_ib()  # the first flow-control packets (init) go at once
        self.cc = cc  # DCQCN's constants at this link's rate, or None
        self.np = NotificationPoint(cc.cnp_interval_ns) if cc is not None else None
        self._rp: dict[int, tuple[ReactionPoint, Framer]] = {}  # qpn -> its rate limiter, its CNPs' framer
        self._paced: set[int] = set()  # QPs with data that their rate holds back until its ready_at
        self.counters = {"cnps_sent": 0, "cnps_received": 0, "paced_waits": 0}
        queue.departed = self._pull
        self.memory = FlatMemory(memory_bytes)
        self.qps: dict[int, tuple[RcQueuePair, Framer | IbFramer, str]] = {}  # qpn -> (model, framer, peer IP)
        self.completions: list[Completion] = []
        # Where completions go (a simulated rank's handler); None keeps them in ``completions``.
        self.on_completion: Callable[[Completion], None] | None = None
        self.icrc_errors = self.unknown = self.pauses = self.malformed = 0
        self.frames_received = 0  # RDMA frames that arrived (the goodput watch's progress)
        self._ready: OrderedDict[int, None] = OrderedDict()  # QPNs that may have a packet to send, in turn order
        self._timers: dict[int, Timer] = {}
        # The stall fault: the frames its hung receive pipeline holds (None: not stalled), their bytes, the
        # refresh of its endless pause, the pause frames it sent and the frames it lost.
        self._stalled: deque[bytes] | None = None
        self._stalled_bytes = 0
        self._storm_refresh: Handle | None = None
        self.storm_pfc_sent = self.stall_drops = 0

    def provide_memory(self, size: int) -> None:
        """The host's memory: ``size`` bytes (before any QP exists: the QPs keep the region they were made with)."""
        if self.qps:
            raise ValueError(f"{self.name}: memory is set before the QPs are made")
        self.memory = FlatMemory(max(size, 1))

    def connect(self, qpn: int, peer: "SimHost", peer_qpn: int, mtu: int) -> RcQueuePair:
        """An RC QP to ``peer``'s ``peer_qpn`` (both ends start at PSN 0), with the attributes the RNIC agent gives a
        QP by default: the path MTU, and the ACK timeout for this host's link rate."""
        rate = self.queue.wire.rate_bps
        qp = RcQueuePair(qpn, self.memory, RcConfig(mtu=mtu, timeout_ns=default_timeout_ns(rate, mtu)), 0)
        qp.connect(peer_qpn, 0)
        port = 49152 + (qpn & 0x3FFF)  # the UDP source port: ECMP's entropy per QP
        framer: Framer | IbFramer = Framer(self.mac, self.gateway_mac, self.ip, peer.ip, port) \
            if self.ib is None else self.ib.framer(qpn, peer_qpn, peer.ip, mtu)
        self.qps[qpn] = (qp, framer, peer.ip)
        self._timers[qpn] = self.sim.timer(lambda: self._on_timer(qpn))
        if self.cc is not None:
            self._rp[qpn] = (ReactionPoint(self.cc, rate),
                             Framer(self.mac, self.gateway_mac, self.ip, peer.ip, port, CNP_DSCP))
        return qp

    def kick(self, qpn: int) -> None:
        """Work was posted to ``qpn``: send what may go."""
        self._ready[qpn] = None
        self._pull()
        self._arm(qpn)

    def stall(self) -> None:
        """Fault ``stall``: the NIC's receive pipeline hangs (its RDMA frames wait unread) and the NIC pauses its
        switch port on the lossless priorities without end, XOFF refreshed at half its pause time, as the host
        agent does (SIGCOMM 2016's NIC pause storm).  PFC frames from the switch are still obeyed."""
        if self._stalled is not None:
            return
        self._stalled = deque()
        self._storm(MAX_QUANTA)

    def resume(self) -> None:
        """The stall ends: XON, and every held frame is taken at once."""
        if self._stalled is None:
            return
        held, self._stalled, self._stalled_bytes = self._stalled, None, 0
        self.sim.cancel(self._storm_refresh)
        self._storm_refresh = None
        self._storm(0)
        for frame in held:
            self.receive(frame)

    def _storm(self, quanta: int) -> None:
        frame = encode_pfc(mac_bytes(self.mac), dict.fromkeys(DEFAULT_LOSSLESS, quanta))
        self.queue.enqueue(frame, PRIORITIES - 1)  # the agent sends it in priority 7's class
        self.storm_pfc_sent += 1
        if quanta:
            self._storm_refresh = self.sim.after(pause_ns(MAX_QUANTA, self.queue.wire.rate_bps) // 2,
                                                 self._storm, MAX_QUANTA)

    def receive(self, frame: bytes) -> None:
        """A frame's last bit arrived from the switch (a Wire's ``deliver``)."""
        if self._stalled is not None and frame[12:14] != ETH_MAC_CONTROL:
            if self._stalled_bytes + len(frame) > STALL_BUFFER:
                self.stall_drops += 1
            else:
                self._stalled.append(frame)
                self._stalled_bytes += len(frame)
            return
        if self.ib is not None:
            accepted = self.ib.accept(self.sim.now, frame)
            if accepted is None:  # a flow-control packet (credit: send what waited) or garbage (counted)
                self._pull()
                self._arm_ib()
                return
            packet, source, good = accepted
            self._arm_ib()  # what arrived is credit to grant back
        else:
            if frame[12:14] == ETH_MAC_CONTROL:
                quanta = decode_pfc(frame)
                if quanta:
                    self.pauses += 1
                    self.queue.on_pfc(quanta)
                return
            decoded = decode(frame)
            if decoded is None:  # no RoCEv2 packet we speak: dropped and counted, as the RNIC agent does
                self.malformed += 1
                return
            packet, source, good = decoded.packet, decoded.src_ip, decoded.icrc_ok
        self.frames_received += 1
        if not good:
            self.icrc_errors += 1
            return
        qpn = packet.dest_qp
        entry = self.qps.get(qpn)
        if entry is None or entry[2] != source:
            self.unknown += 1
            return
        if self.cc is not None and self._congestion(qpn, entry[0], packet):
            return
        entry[0].receive(self.sim.now, packet)
        self._collect(entry[0])
        self._ready[qpn] = None
        self._pull()
        self._arm(qpn)

    def _congestion(self, qpn: int, qp: RcQueuePair, packet: Packet) -> bool:
        """DCQCN's part of a packet's arrival: a CNP for this QP's limiter (consumed: True), or a CE mark that
        earns the peer a CNP."""
        now = self.sim.now
        if packet.opcode == Opcode.CNP:
            self.counters["cnps_received"] += 1
            self._rp[qpn][0].on_cnp(now)
            self._arm(qpn)
            return True
        if packet.ecn_ce and self.np is not None and self.np.on_ce(now, qpn):
            self.queue.enqueue(self._rp[qpn][1].encode(Packet(Opcode.CNP, qp.remote_qpn, 0)), CNP_PRIORITY)
            self.counters["cnps_sent"] += 1
        return False

    def _collect(self, qp: RcQueuePair) -> None:
        for completion in qp.poll_completions():
            completion.timestamp = self.sim.now
            if self.on_completion is None:
                self.completions.append(completion)
            else:
                self.on_completion(completion)

    def _pull(self) -> None:
        """Packets from the ready QPs, one each in turn, while the NIC queue has room (and, on IB, credit)."""
        ready, queue, now, ib = self._ready, self.queue, self.sim.now, self.ib
        while queue.queued(ROCE_PRIORITY) < NIC_FRAMES:
            if self._held is not None:
                assert ib is not None
                if not ib.admit(self._held):
                    return
                queue.enqueue(self._held, ROCE_PRIORITY)
                self._held = None
                continue
            if not ready:
                return
            qpn, _ = ready.popitem(last=False)
            qp, framer, _peer = self.qps[qpn]
            rp = self._rp[qpn][0] if self._rp else None
            if rp is None or rp.may_send(now):
                packet = qp.next_packet(now)
            else:  # held to its rate: its ACKs may go, and its timer wakes it when its next frame may
                packet = qp.next_packet(now, data=False)
                if packet is None and qpn not in self._paced and qp.has_data():
                    self._paced.add(qpn)
                    self.counters["paced_waits"] += 1
                    self._arm(qpn)
            if packet is None:
                continue
            ready[qpn] = None  # to the back of the turn
            self._arm(qpn)  # its first packet in flight starts the retransmission timer
            frame = framer.encode(packet)
            if rp is not None and packet.opcode != Opcode.ACK:
                rp.on_sent(now, len(frame))
            if ib is not None and not ib.admit(frame):
                self._held = frame
                return
            queue.enqueue(frame, ROCE_PRIORITY)

    def _arm_ib(self) -> None:
        if self.ib is not None:
            self._ib_timer.set(self.ib.next_deadline())

    def _on_ib_timer(self) -> None:
        """Flow-control packets due (grants, refreshes), behind the data already queued, as the agent sends them."""
        assert self.ib is not None
        for frame in self.ib.control_frames(self.sim.now):
            self.queue.enqueue(frame, ROCE_PRIORITY)
        self._arm_ib()

    def _arm(self, qpn: int) -> None:
        """The QP's one timer at its earliest deadline: the transport's, and with DCQCN its limiter's."""
        deadline = self.qps[qpn][0].next_deadline()
        if self._rp:
            rp = self._rp[qpn][0]
            for other in (rp.next_deadline(), rp.ready_at if qpn in self._paced else None):
                if other is not None and (deadline is None or other < deadline):
                    deadline = other
        self._timers[qpn].set(deadline)

    def _on_timer(self, qpn: int) -> None:
        now = self.sim.now
        qp = self.qps[qpn][0]
        qp.on_timer(now)
        if self._rp:
            rp = self._rp[qpn][0]
            if (deadline := rp.next_deadline()) is not None and deadline <= now:
                rp.on_timer(now)
            if qpn in self._paced and rp.ready_at <= now:
                self._paced.discard(qpn)
        self._collect(qp)
        self._ready[qpn] = None
        self._pull()
        self._arm(qpn)
