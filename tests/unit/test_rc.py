"""The RC transport model (emulator._core.rc, the compiled one): two queue pairs over a fake wire.

The model is sans-I/O, so the tests drive it the way the RNIC does, with a
simulated clock instead of sockets: :class:`Net` pulls packets from both QPs
as fast as an emulated link serializes them, delivers them after a one-way
latency (or drops, duplicates, delays or CE-marks them on request), and when
nothing is ready moves the clock to the next arrival or QP timer.  Memory is
the real :mod:`emulator.agents.memory` over bytearrays, so every data check is
byte for byte against what the application would see.

Whatever a test does, the harness checks each time a request goes out that
the requester has no more than ``max_inflight`` PSNs unacknowledged, as seen
on the wire, that ``on_timer`` moves a passed deadline, and that a run
settles (both QPs idle, no timers) within a step cap: hitting the cap means
the model hung or livelocked.
"""

from __future__ import annotations

import heapq
import inspect
import random
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import pytest

from emulator.agents.memory import ACCESS_ALL, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE
from region_table import RegionTable
from emulator._core.rc import Completion, RcConfig, RcQueuePair, RecvWR, SendWR, WcOpcode, WcStatus, WrOpcode
from emulator._core.transport import (
    HAS_IMM, NAK_PSN_SEQUENCE_ERROR, NAK_REMOTE_ACCESS_ERROR, Opcode, Packet, psn_add, psn_diff,
)

QPN_A, QPN_B = 0x11, 0x2A
OWNER_A, OWNER_B = 1, 2
BASE_A, BASE_B = 0x1000_0000, 0x7F00_0000  # distinct, so a mixed-up address faults
REGION = 1 << 20
PSN_A, PSN_B = 0x1000, 0x5000  # distinct initial PSNs catch a QP numbering with the wrong one
LATENCY_NS = 10_000
NS_PER_BYTE = 80  # 100 Mbit/s
HEADER_BYTES = 58  # Ethernet, IPv4, UDP, BTH, ICRC; close enough for pacing
MAX_STEPS = 200_000

REQUESTS = frozenset(op for op in Opcode if op <= Opcode.READ_REQUEST)
READ_RESPONSES = frozenset({Opcode.READ_RESPONSE_FIRST, Opcode.READ_RESPONSE_MIDDLE, Opcode.READ_RESPONSE_LAST,
                            Opcode.READ_RESPONSE_ONLY})
LAST_OF_MESSAGE = frozenset({Opcode.SEND_LAST, Opcode.SEND_LAST_IMM, Opcode.SEND_ONLY, Opcode.SEND_ONLY_IMM,
                             Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM,
                             Opcode.READ_REQUEST})
OK = WcStatus.SUCCESS


# --- the harness -------------------------------------------------------------------------------------------

T = TypeVar("T")


def replace(obj: T, **changes: Any) -> T:
    """A copy of a compiled value object (packet, work request, config) with ``changes`` applied.

    ``dataclasses.replace`` for the compiled classes, which are not dataclasses: their constructor's
    parameters are their fields, so the copy passes each one as it was, or changed (a name the constructor
    does not take raises TypeError there).
    """
    cls = type(obj)
    return cls(**({name: getattr(obj, name) for name in inspect.signature(cls).parameters} | changes))



@dataclass
class Host:
    """One protection domain's memory: a region table and one bytearray-backed region."""

    table: RegionTable
    owner: int
    base: int
    buf: bytearray
    key: int

    def addr(self, offset: int) -> int:
        return self.base + offset

    def at(self, offset: int, length: int) -> bytes:
        return bytes(self.buf[offset:offset + length])

    def extra_region(self, offset: int, length: int, access: int,
                     owner: int | None = None) -> tuple[int, int, bytearray]:
        """Register another region (address, key, buffer) in this host's table, maybe for another owner."""
        buf = bytearray(random.Random(offset).randbytes(length))
        addr = self.base + REGION + offset
        region = self.table.register(self.owner if owner is None else owner, addr, length, access, buffer=buf)
        return addr, region.key, buf


def make_host(seed: int, owner: int, base: int, access: int = ACCESS_ALL) -> Host:
    table = RegionTable(seed)
    buf = bytearray(random.Random(seed).randbytes(REGION))  # random, so untouched and copied bytes differ
    region = table.register(owner, base, REGION, access, buffer=buf)
    return Host(table, owner, base, buf, region.key)


@dataclass
class Side:
    """A QP on a host, and what the harness knows about it."""

    name: str
    qpn: int
    psn: int  # its initial PSN
    qp: RcQueuePair
    host: Host
    config: RcConfig
    completions: list[Completion] = field(default_factory=list)
    completion_times: list[int] = field(default_factory=list)
    tx_free: int = 0  # when its link can start the next packet
    idle: bool = False  # next_packet said None and nothing happened to it since
    # The window invariant, from the wire: PSNs from the oldest one not known to be acknowledged
    # (una) to one past the last PSN any request sent so far covers (a READ request covers one PSN
    # per response).  "Known" is read generously: any ACK, NAK or READ response that reached this
    # QP counts, so the window seen here is never larger than the one the QP itself keeps.
    una: int = 0
    sent_end: int = 0
    max_outstanding: int = 0

    @property
    def buf(self) -> bytearray:
        return self.host.buf

    @property
    def key(self) -> int:
        return self.host.key

    def addr(self, offset: int) -> int:
        return self.host.addr(offset)

    def at(self, offset: int, length: int) -> bytes:
        return self.host.at(offset, length)

    def results(self) -> list[tuple[int, WcStatus]]:
        return [(c.wr_id, c.status) for c in self.completions]

    @property
    def counters(self) -> dict[str, int]:
        return self.qp.counters


@dataclass
class Transmission:
    """One packet a QP handed to the wire, and what became of it."""

    time: int
    src: str
    packet: Packet
    dropped: bool
    arrival: int | None  # of the (first) copy delivered


Predicate = Callable[[str, Packet], bool]


class Net:
    """Two QPs, a link each way with serialization and latency, and a clock.

    ``drop``, ``duplicate`` and ``mark_ce`` are predicates on (direction, packet),
    direction ``"A>B"`` or ``"B>A"``; ``delay`` returns extra nanoseconds for a
    packet (random values reorder).  Each QP's link sends one packet at a time,
    so a requester is paced the way the RNIC's kernel queue paces it.
    """

    def __init__(self, a: Side, b: Side, *, latency_ns: int = LATENCY_NS, ns_per_byte: int = NS_PER_BYTE,
                 drop: Predicate | None = None, duplicate: Predicate | None = None, mark_ce: Predicate | None = None,
                 delay: Callable[[str, Packet], int] | None = None, poll: bool = True,
                 max_steps: int = MAX_STEPS) -> None:
        self.a, self.b = a, b
        self.latency_ns, self.ns_per_byte = latency_ns, ns_per_byte
        self.drop, self.duplicate, self.mark_ce, self.delay = drop, duplicate, mark_ce, delay
        self.poll, self.max_steps = poll, max_steps
        self.now = 0
        self.steps = 0
        self.log: list[Transmission] = []
        self.deliveries: list[tuple[int, str, Packet]] = []  # (time, receiving side, packet)
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        for side in self.sides:
            side.una = side.sent_end = side.psn

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.a, self.b

    def peer(self, side: Side) -> Side:
        return self.b if side is self.a else self.a

    def at(self, time: int, action: Callable[[], None]) -> None:
        """Run ``action`` (say, post a receive) at simulated ``time``."""
        self._schedule(time, action)

    def _schedule(self, time: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (time, self._seq, action))
        self._seq += 1

    def run(self) -> None:
        """Until both QPs are idle with no timers and nothing is in flight."""
        for side in self.sides:
            side.idle = False  # the test may have posted work since the last run
        while True:
            self.steps += 1
            assert self.steps <= self.max_steps, f"not settled after {self.max_steps} steps (t={self.now} ns): a hang?"
            while self._events and self._events[0][0] <= self.now:
                _, _, action = heapq.heappop(self._events)
                action()
                for side in self.sides:
                    side.idle = False
            for side in self.sides:
                deadline = side.qp.next_deadline()
                if deadline is not None and deadline <= self.now:
                    side.qp.on_timer(self.now)
                    side.idle = False
                    after = side.qp.next_deadline()
                    assert after is None or after > self.now, (
                        f"{side.name}: on_timer({self.now}) left next_deadline() at {after}")
            for side in self.sides:
                if not side.idle and side.tx_free <= self.now:
                    self._transmit(side)
            if self.poll:
                for side in self.sides:
                    for completion in side.qp.poll_completions():
                        side.completions.append(completion)
                        side.completion_times.append(self.now)
            upcoming = [self._events[0][0]] if self._events else []
            upcoming += [side.tx_free for side in self.sides if not side.idle]
            upcoming += [d for side in self.sides if (d := side.qp.next_deadline()) is not None]
            if not upcoming:
                return
            self.now = max(self.now, min(upcoming))

    def _transmit(self, side: Side) -> None:
        packet = side.qp.next_packet(self.now)
        if packet is None:
            side.idle = True
            return
        dst = self.peer(side)
        assert packet.dest_qp == dst.qpn, f"{side.name} sent to QP {packet.dest_qp:#x}"
        packet = replace(packet, payload=bytes(packet.payload))  # the wire copies; the QP may reuse its buffers
        direction = f"{side.name}>{dst.name}"
        self._count_request(side, packet)
        side.tx_free = self.now + (HEADER_BYTES + len(packet.payload)) * self.ns_per_byte
        if self.mark_ce is not None and self.mark_ce(direction, packet):
            packet.ecn_ce = True
        dropped = self.drop is not None and self.drop(direction, packet)
        arrival = None
        if not dropped:
            arrival = side.tx_free + self.latency_ns + (self.delay(direction, packet) if self.delay else 0)
            self._schedule(arrival, lambda p=replace(packet): self._deliver(dst, p))
            if self.duplicate is not None and self.duplicate(direction, packet):
                self._schedule(arrival + 1, lambda p=replace(packet): self._deliver(dst, p))
        self.log.append(Transmission(self.now, side.name, packet, dropped, arrival))

    def _deliver(self, side: Side, packet: Packet) -> None:
        self.deliveries.append((self.now, side.name, packet))
        self._count_response(side, packet)
        side.qp.receive(self.now, packet)

    def _count_request(self, side: Side, packet: Packet) -> None:
        if packet.opcode not in REQUESTS:
            return
        end = psn_add(packet.psn, psn_span(packet, side.config.mtu))
        if psn_diff(end, side.sent_end) > 0:
            side.sent_end = end
        outstanding = max(0, psn_diff(side.sent_end, side.una))
        side.max_outstanding = max(side.max_outstanding, outstanding)
        assert outstanding <= side.config.max_inflight, (
            f"{side.name} has PSNs [{side.una:#x}, {side.sent_end:#x}) unacknowledged, {outstanding} > "
            f"max_inflight {side.config.max_inflight} (t={self.now} ns)")

    def _count_response(self, side: Side, packet: Packet) -> None:
        """Move ``side``'s acknowledged point as far as this response could possibly move it."""
        if packet.opcode == Opcode.ACK:
            # An ACK acknowledges its PSN; any NAK (sequence, RNR, access) everything before it.
            una = psn_add(packet.psn, 1) if packet.syndrome & 0x60 == 0 else packet.psn
        elif packet.opcode in READ_RESPONSES:
            una = psn_add(packet.psn, 1)
        else:
            return
        if psn_diff(una, side.una) > 0:
            side.una = una

    # --- what happened on the wire ---

    def sent(self, src: str, opcodes: frozenset[int] | set[int] | None = None) -> list[Packet]:
        """Every packet ``src`` transmitted (dropped ones included), in order."""
        return [t.packet for t in self.log if t.src == src and (opcodes is None or t.packet.opcode in opcodes)]

    def transmissions(self, src: str) -> list[Transmission]:
        return [t for t in self.log if t.src == src]

    def resent(self, src: str) -> list[Packet]:
        """Request packets ``src`` sent for PSNs it had sent before (a READ covers all its response PSNs)."""
        mtu = (self.a if src == "A" else self.b).config.mtu
        covered: set[int] = set()
        again = []
        for packet in self.sent(src, REQUESTS):
            if packet.psn in covered:
                again.append(packet)
            covered.update(psn_add(packet.psn, i) for i in range(psn_span(packet, mtu)))
        return again

    def first_resend(self, src: str) -> Transmission:
        """The first transmission by ``src`` of a request PSN it had sent before."""
        seen: set[int] = set()
        for t in self.transmissions(src):
            if t.packet.opcode in REQUESTS:
                if t.packet.psn in seen:
                    return t
                seen.add(t.packet.psn)
        raise AssertionError(f"{src} never sent anything twice")

    def naks(self, src: str, syndrome: int | None = None) -> list[Packet]:
        return [p for p in self.sent(src, {Opcode.ACK}) if p.syndrome & 0x60 and
                (syndrome is None or p.syndrome == syndrome)]

    def dropped(self) -> int:
        return sum(t.dropped for t in self.log)


def psn_span(packet: Packet, mtu: int) -> int:
    """PSNs a request packet uses: one, or for a READ request one per response packet."""
    if packet.opcode == Opcode.READ_REQUEST:
        return max(1, -(-packet.dma_len // mtu))
    return 1


def make_side(name: str, qpn: int, host: Host, config: RcConfig, psn: int) -> Side:
    return Side(name, qpn, psn, RcQueuePair(qpn, host.table.domain(host.owner), config, psn), host, config)


def pair(config: RcConfig | None = None, config_b: RcConfig | None = None, psn_a: int = PSN_A, psn_b: int = PSN_B,
         hosts: tuple[Host, Host] | None = None, qpns: tuple[int, int] = (QPN_A, QPN_B), **net_options) -> Net:
    """Connected QPs A (QPN_A) and B (QPN_B) on hosts with their own region tables."""
    config = config or RcConfig()
    host_a, host_b = hosts or (make_host(1, OWNER_A, BASE_A), make_host(2, OWNER_B, BASE_B))
    a = make_side("A", qpns[0], host_a, config, psn_a)
    b = make_side("B", qpns[1], host_b, config_b or config, psn_b)
    a.qp.connect(qpns[1], psn_b)
    b.qp.connect(qpns[0], psn_a)
    assert a.qp.state == b.qp.state == "RTS"
    return Net(a, b, **net_options)


def write_wr(wr_id: int, src: Side, dst: Side, src_off: int, dst_off: int, length: int, imm: int | None = None,
             **fields) -> SendWR:
    opcode = WrOpcode.RDMA_WRITE if imm is None else WrOpcode.RDMA_WRITE_WITH_IMM
    wr = SendWR(wr_id, opcode, src.addr(src_off), length, src.key, dst.addr(dst_off), dst.key, imm or 0)
    return replace(wr, **fields)  # e.g. signaled=False, or a spoilt key


def read_wr(wr_id: int, requester: Side, responder: Side, dst_off: int, src_off: int, length: int) -> SendWR:
    return SendWR(wr_id, WrOpcode.RDMA_READ, requester.addr(dst_off), length, requester.key,
                  responder.addr(src_off), responder.key)


def send_wr(wr_id: int, src: Side, src_off: int, length: int, imm: int | None = None) -> SendWR:
    opcode = WrOpcode.SEND if imm is None else WrOpcode.SEND_WITH_IMM
    return SendWR(wr_id, opcode, src.addr(src_off), length, src.key, imm=imm or 0)


def recv_wr(wr_id: int, side: Side, offset: int, length: int) -> RecvWR:
    return RecvWR(wr_id, side.addr(offset), length, side.key)


def once(predicate: Predicate) -> Predicate:
    """``predicate`` for its first match only (a packet lost once, its retransmission goes through)."""
    fired = []

    def check(direction: str, packet: Packet) -> bool:
        if not fired and predicate(direction, packet):
            fired.append(packet)
            return True
        return False
    return check


def each_once(*predicates: Predicate) -> Predicate:
    checks = [once(p) for p in predicates]
    return lambda direction, packet: any(check(direction, packet) for check in checks)


def request_psn(psn: int) -> Predicate:
    return lambda d, p: d == "A>B" and p.opcode in REQUESTS and p.psn == psn


def rnr_wait_bounds(config: RcConfig) -> tuple[int, int]:
    """How long a requester may wait after an RNR NAK: not at once, not much beyond the timer."""
    return config.rnr_timer_ns // 2, 2 * config.rnr_timer_ns + 1_000_000


# --- data movement -----------------------------------------------------------------------------------------


def test_write_spanning_several_mtus_lands_byte_exact():
    """A 5.1-MTU WRITE: FIRST/MIDDLE/LAST packets, RETH on the first only, the bytes and nothing else change."""
    net = pair()
    a, b = net.a, net.b
    length = 5 * 1024 + 100
    before = bytes(b.buf)
    a.qp.post_send(write_wr(1, a, b, 0x100, 0x2000, length))
    net.run()

    assert b.at(0x2000, length) == a.at(0x100, length)
    assert b.buf[:0x2000] == before[:0x2000] and b.buf[0x2000 + length:] == before[0x2000 + length:]
    assert [(c.wr_id, c.status, c.opcode, c.qp_num) for c in a.completions] == [(1, OK, WcOpcode.RDMA_WRITE, QPN_A)]
    assert b.completions == []  # a WRITE without immediate consumes no receive

    requests = net.sent("A", REQUESTS)
    assert [p.opcode for p in requests] == [Opcode.WRITE_FIRST] + [Opcode.WRITE_MIDDLE] * 4 + [Opcode.WRITE_LAST]
    assert [p.psn for p in requests] == [PSN_A + i for i in range(6)]
    assert [len(p.payload) for p in requests] == [1024] * 5 + [100]
    assert (requests[0].va, requests[0].rkey, requests[0].dma_len) == (b.addr(0x2000), b.key, length)
    assert all((p.va, p.rkey, p.dma_len) == (0, 0, 0) for p in requests[1:])
    assert requests[-1].ack_req
    assert a.qp.state == b.qp.state == "RTS"


def test_clean_run_has_no_recovery_activity():
    """Without loss nothing is retransmitted, NAKed, timed out or duplicated; every delivery is counted."""
    net = pair()
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 20_000))
    a.qp.post_send(read_wr(2, a, b, 0x8000, 0x8000, 7_000))
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    for side in (a, b):
        assert side.counters["packets_received"] == sum(1 for _, dst, _ in net.deliveries if dst == side.name)
        for key in ("retransmitted_packets", "timeouts", "naks_sent", "naks_received", "seq_naks_sent",
                    "rnr_naks_sent", "rnr_naks_received", "duplicate_packets", "ecn_ce_received"):
            assert side.counters[key] == 0, (side.name, key)
    assert a.counters["acks_received"] == b.counters["acks_sent"] == len(net.sent("B", {Opcode.ACK})) > 0


def test_counters_agree_with_the_wire_and_between_the_ends():
    """With a loss (so a NAK too): packets_sent is every packet put on the wire, and what one end
    counts as ACKs/NAKs sent the other counts as received."""
    net = pair(drop=once(request_psn(PSN_A + 3)))
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 20_000))
    a.qp.post_send(read_wr(2, a, b, 0x8000, 0x8000, 7_000))
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    acks = net.sent("B", {Opcode.ACK})
    assert b.counters["naks_sent"] == len(net.naks("B")) == 1
    assert b.counters["acks_sent"] == len(acks) - 1
    assert a.counters["naks_received"] == b.counters["naks_sent"]
    assert a.counters["acks_received"] == b.counters["acks_sent"]
    for side in (a, b):
        assert side.counters["packets_sent"] == len(net.sent(side.name)), side.name
        assert side.counters["packets_received"] == sum(1 for _, dst, _ in net.deliveries if dst == side.name)


@pytest.mark.parametrize("length", [3000, 200], ids=["multi-packet", "only"])
def test_write_with_imm_completes_a_receive_with_the_immediate(length):
    """WRITE_WITH_IMM consumes one receive: RECV_RDMA_WITH_IMM, imm and the write's length; its buffer untouched."""
    net = pair()
    a, b = net.a, net.b
    recv_buffer = b.at(0x9000, 64)
    b.qp.post_recv(recv_wr(50, b, 0x9000, 64))
    a.qp.post_send(write_wr(1, a, b, 0x40, 0x1000, length, imm=0xCAFEF00D))
    net.run()

    assert b.at(0x1000, length) == a.at(0x40, length)
    assert b.at(0x9000, 64) == recv_buffer
    assert b.completions == [Completion(50, OK, WcOpcode.RECV_RDMA_WITH_IMM, QPN_B, byte_len=length, imm=0xCAFEF00D)]
    assert [(c.wr_id, c.status, c.opcode) for c in a.completions] == [(1, OK, WcOpcode.RDMA_WRITE)]
    last = net.sent("A", REQUESTS)[-1]
    assert last.opcode == (Opcode.WRITE_LAST_IMM if length > 1024 else Opcode.WRITE_ONLY_IMM)
    assert last.imm == 0xCAFEF00D
    assert all(p.opcode not in HAS_IMM for p in net.sent("A", REQUESTS)[:-1])


@pytest.mark.parametrize("imm", [None, 0x12345678], ids=["send", "send-with-imm"])
def test_sends_fill_receives_in_posting_order(imm):
    """Each SEND takes the oldest receive; byte_len is the message, imm only for SEND_WITH_IMM."""
    net = pair()
    a, b = net.a, net.b
    lengths = [3000, 1024, 1]  # FIRST/MIDDLE/LAST, exactly one MTU, one byte
    spare, unused = b.at(0x30000, 8192), b.at(0x40000, 8192)
    for i in range(len(lengths) + 1):  # one receive more than needed: it must stay unused
        b.qp.post_recv(recv_wr(100 + i, b, 0x10000 * (i + 1), 8192))
    for i, length in enumerate(lengths):
        a.qp.post_send(send_wr(i + 1, a, 0x1000 * i, length, imm=imm))
    net.run()

    for i, length in enumerate(lengths):
        offset = 0x10000 * (i + 1)
        assert b.at(offset, length) == a.at(0x1000 * i, length)
    assert b.at(0x30000 + 1, 8191) == spare[1:]  # the third receive got one byte, no more
    assert b.at(0x40000, 8192) == unused
    assert b.completions == [Completion(100 + i, OK, WcOpcode.RECV, QPN_B, byte_len=length, imm=imm)
                             for i, length in enumerate(lengths)]
    assert [(c.wr_id, c.status, c.opcode) for c in a.completions] == [(i + 1, OK, WcOpcode.SEND) for i in range(3)]
    opcodes = [p.opcode for p in net.sent("A", REQUESTS)]
    if imm is None:
        assert opcodes == [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_ONLY, Opcode.SEND_ONLY]
    else:
        assert opcodes == [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST_IMM, Opcode.SEND_ONLY_IMM,
                           Opcode.SEND_ONLY_IMM]


def test_read_spanning_several_mtus():
    """One READ_REQUEST, responses FIRST/MIDDLE/LAST at its PSNs; it uses ceil(len/mtu) PSNs."""
    net = pair()
    a, b = net.a, net.b
    length = 4 * 1024 + 17
    source = b.at(0x100, length)
    b_before = bytes(b.buf)
    a.qp.post_send(read_wr(1, a, b, 0x3000, 0x100, length))
    a.qp.post_send(write_wr(2, a, b, 0, 0x20000, 10))
    net.run()

    assert a.at(0x3000, length) == source
    assert b.buf[:0x20000] == b_before[:0x20000]  # the READ changed nothing at the responder
    assert [(c.wr_id, c.status, c.opcode) for c in a.completions] == [(1, OK, WcOpcode.RDMA_READ),
                                                                       (2, OK, WcOpcode.RDMA_WRITE)]
    read_request, write = net.sent("A", REQUESTS)
    assert read_request.opcode == Opcode.READ_REQUEST
    assert (read_request.psn, read_request.va, read_request.rkey, read_request.dma_len) == (
        PSN_A, b.addr(0x100), b.key, length)
    responses = net.sent("B", READ_RESPONSES)
    assert [p.opcode for p in responses] == [Opcode.READ_RESPONSE_FIRST] + [Opcode.READ_RESPONSE_MIDDLE] * 3 + [
        Opcode.READ_RESPONSE_LAST]
    assert [p.psn for p in responses] == [PSN_A + i for i in range(5)]
    assert [len(p.payload) for p in responses] == [1024] * 4 + [17]
    assert write.psn == PSN_A + 5


@pytest.mark.parametrize("op", ["write", "write_imm", "send", "read"])
def test_zero_length_operations(op):
    """Zero bytes still make a message: one packet (one PSN; a READ gets one empty RESPONSE_ONLY)."""
    net = pair()
    a, b = net.a, net.b
    before_a, before_b = bytes(a.buf), bytes(b.buf)
    if op == "write":
        a.qp.post_send(write_wr(1, a, b, 0, 0, 0))
    elif op == "write_imm":
        b.qp.post_recv(recv_wr(9, b, 0, 64))
        a.qp.post_send(write_wr(1, a, b, 0, 0, 0, imm=77))
    elif op == "send":
        b.qp.post_recv(recv_wr(9, b, 0, 64))
        a.qp.post_send(send_wr(1, a, 0, 0))
    else:
        a.qp.post_send(read_wr(1, a, b, 0, 0, 0))
    a.qp.post_send(write_wr(2, a, b, 0x100, 0x100, 100))  # the PSN after it must line up
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    assert a.buf == before_a
    assert b.at(0x100, 100) == a.at(0x100, 100) and b.buf[:0x100] == before_b[:0x100]
    first, second = net.sent("A", REQUESTS)
    assert (first.psn, second.psn) == (PSN_A, PSN_A + 1)
    assert len(first.payload) == 0
    if op == "write":
        assert first.opcode == Opcode.WRITE_ONLY and first.dma_len == 0
    elif op == "write_imm":
        assert first.opcode == Opcode.WRITE_ONLY_IMM and first.dma_len == 0
        assert b.completions == [Completion(9, OK, WcOpcode.RECV_RDMA_WITH_IMM, QPN_B, byte_len=0, imm=77)]
    elif op == "send":
        assert first.opcode == Opcode.SEND_ONLY
        assert b.completions == [Completion(9, OK, WcOpcode.RECV, QPN_B, byte_len=0)]
    else:
        assert first.opcode == Opcode.READ_REQUEST and first.dma_len == 0
        responses = net.sent("B", READ_RESPONSES)
        assert [(p.opcode, p.psn, len(p.payload)) for p in responses] == [(Opcode.READ_RESPONSE_ONLY, PSN_A, 0)]


@pytest.mark.parametrize("mtu", [256, 512, 1024, 2048, 4096])
def test_every_path_mtu_segments_at_the_mtu(mtu):
    """WRITE of 3.5 MTU and READ of 2.5 MTU: full packets of exactly mtu bytes, then the remainder."""
    net = pair(RcConfig(mtu=mtu))
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, mtu * 7 // 2))
    a.qp.post_send(read_wr(2, a, b, 0x40000, 0x40000, mtu * 5 // 2))
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    assert b.at(0, mtu * 7 // 2) == a.at(0, mtu * 7 // 2)
    assert a.at(0x40000, mtu * 5 // 2) == b.at(0x40000, mtu * 5 // 2)
    writes = [p for p in net.sent("A", REQUESTS) if p.opcode != Opcode.READ_REQUEST]
    assert [len(p.payload) for p in writes] == [mtu, mtu, mtu, mtu // 2]
    assert [len(p.payload) for p in net.sent("B", READ_RESPONSES)] == [mtu, mtu, mtu // 2]


@pytest.mark.parametrize("mtu", [0, 128, 1000, 1500, 8192])
def test_invalid_mtu_is_refused(mtu):
    """Only the IB path MTUs 256..4096 exist."""
    host = make_host(1, OWNER_A, BASE_A)
    with pytest.raises(ValueError):
        RcQueuePair(QPN_A, host.table.domain(OWNER_A), RcConfig(mtu=mtu))


@pytest.mark.parametrize("lose", [False, True], ids=["clean", "lose-psn-0"])
@pytest.mark.parametrize("op", ["write", "read"])
def test_psn_wraparound(op, lose):
    """PSNs 0xFFFFFD.. wrap to 0 inside one message; with a loss at PSN 0 go-back-N crosses the wrap."""
    start = 0xFFFFFD
    drop = None
    if lose:
        lost_opcodes = REQUESTS if op == "write" else READ_RESPONSES
        drop = once(lambda d, p: p.opcode in lost_opcodes and p.psn == 0)
    net = pair(psn_a=start, drop=drop)
    a, b = net.a, net.b
    length = 6 * 1024
    if op == "write":
        a.qp.post_send(write_wr(1, a, b, 0, 0, length))
    else:
        a.qp.post_send(read_wr(1, a, b, 0, 0, length))
    a.qp.post_send(write_wr(2, a, b, 0x10000, 0x10000, 1000))
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    assert a.at(0, length) == b.at(0, length)
    assert b.at(0x10000, 1000) == a.at(0x10000, 1000)
    wrapped = [0xFFFFFD, 0xFFFFFE, 0xFFFFFF, 0, 1, 2]
    if op == "write":
        assert [p.psn for p in net.sent("A", REQUESTS)][:6] == wrapped
    else:
        assert [p.psn for p in net.sent("B", READ_RESPONSES)][:6] == wrapped
    assert {p.psn for p in net.sent("A", REQUESTS) if p.opcode == Opcode.WRITE_ONLY} == {3}
    assert net.dropped() == int(lose)


# --- acknowledgements -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ack_every", [1, 4, 16])
def test_ack_coalescing(ack_every):
    """AckReq on every ack_every-th packet and each message's last; ACKs about packets/ack_every + messages."""
    net = pair(RcConfig(ack_every=ack_every))
    a, b = net.a, net.b
    messages, per_message = 3, 40
    for i in range(messages):
        a.qp.post_send(write_wr(i + 1, a, b, i * 0x10000, i * 0x10000, per_message * 1024))
    net.run()

    assert a.results() == [(i + 1, OK) for i in range(messages)]
    requests = net.sent("A", REQUESTS)
    packets = len(requests)
    assert packets == messages * per_message
    assert all(p.ack_req for p in requests if p.opcode in LAST_OF_MESSAGE)
    run = 0
    for p in requests:
        run = 0 if p.ack_req else run + 1
        assert run < ack_every, "a stretch of ack_every packets without AckReq"
    assert sum(p.ack_req for p in requests) <= packets // ack_every + messages
    acks = b.counters["acks_sent"]
    assert acks == len(net.sent("B", {Opcode.ACK})) == a.counters["acks_received"]
    assert 1 <= acks <= packets // ack_every + messages


def test_lost_acks_are_covered_by_a_later_cumulative_ack():
    """The first of two ACKs is lost: the second acknowledges both messages; no timeout, no resend."""
    net = pair(drop=once(lambda d, p: d == "B>A" and p.opcode == Opcode.ACK))
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 500))
    a.qp.post_send(write_wr(2, a, b, 0x1000, 0x1000, 500))
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    assert a.completion_times[0] == a.completion_times[1]  # both on the arrival of the one ACK
    assert b.at(0, 500) == a.at(0, 500) and b.at(0x1000, 500) == a.at(0x1000, 500)
    assert a.counters["timeouts"] == 0 and net.resent("A") == []
    assert net.dropped() == 1


def test_lost_final_ack_is_recovered_by_timeout_and_re_ack():
    """Every ACK of the last message is lost once: RTO, the responder sees a duplicate and ACKs again."""
    last_psn = PSN_A + 2
    net = pair(drop=once(lambda d, p: d == "B>A" and p.opcode == Opcode.ACK and p.psn == last_psn))
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 3000))
    net.run()

    assert a.results() == [(1, OK)]
    assert b.at(0, 3000) == a.at(0, 3000)
    assert a.counters["timeouts"] == 1
    assert b.counters["duplicate_packets"] >= 1
    acks = [p for p in net.sent("B", {Opcode.ACK}) if p.psn == last_psn]
    assert len(acks) >= 2  # the lost one and the re-ACK
    assert a.counters["retransmitted_packets"] == len(net.resent("A")) >= 1


# --- loss and go-back-N -----------------------------------------------------------------------------------


@pytest.mark.parametrize("lost", [(5,), (5, 30)], ids=["one-loss", "two-losses"])
def test_lost_data_packet_one_sequence_nak_per_gap_and_go_back_n(lost):
    """A gap is NAKed once (later out-of-order packets dropped silently); the requester resends from the gap.

    A long latency keeps several packets in flight behind the lost one, so the
    responder really sees a run of out-of-order packets after its NAK.  The
    second loss (PSN 30) is of a packet first sent after the first go-back, so
    the responder's NAK-once state must have been reset for it to be NAKed.
    """
    net = pair(drop=each_once(*(request_psn(PSN_A + i) for i in lost)), latency_ns=300_000)
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 40 * 1024))
    net.run()

    assert a.results() == [(1, OK)]
    assert b.at(0, 40 * 1024) == a.at(0, 40 * 1024)
    assert net.dropped() == len(lost)
    assert [(p.syndrome, p.psn) for p in net.naks("B")] == [(NAK_PSN_SEQUENCE_ERROR, PSN_A + i) for i in lost]
    assert b.counters["seq_naks_sent"] == b.counters["naks_sent"] == len(lost)
    assert a.counters["naks_received"] == len(lost)
    lost_psn = PSN_A + lost[0]
    to_b = [(t, p) for t, dst, p in net.deliveries if dst == "B" and p.opcode in REQUESTS]
    recovered_at = min(t for t, p in to_b if p.psn == lost_psn)
    assert sum(1 for t, p in to_b if t < recovered_at and psn_diff(p.psn, lost_psn) > 0) >= 3
    resent = net.resent("A")
    assert resent[0].psn == lost_psn  # go-back-N starts at the NAK's PSN
    assert a.counters["retransmitted_packets"] == len(resent)
    assert a.counters["timeouts"] == 0
    assert b.counters["duplicate_packets"] == 0  # nothing it had accepted came again


def test_lost_last_packet_is_recovered_by_the_retransmission_timeout():
    """Nothing follows the lost last packet, so no NAK: the RTO fires once, timeout_ns after the last progress."""
    config = RcConfig(timeout_ns=2_000_000)
    net = pair(config, drop=once(request_psn(PSN_A + 19)))
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 20 * 1024))
    net.run()

    assert a.results() == [(1, OK)]
    assert b.at(0, 20 * 1024) == a.at(0, 20 * 1024)
    assert a.counters["timeouts"] == 1
    assert b.counters["naks_sent"] == 0
    assert a.counters["retransmitted_packets"] == len(net.resent("A")) >= 1
    first_resend = net.first_resend("A")
    last_progress = max(time for time, dst, _ in net.deliveries if dst == "A" and time < first_resend.time)
    last_send = max(t.time for t in net.transmissions("A") if t.time < first_resend.time)
    assert first_resend.time - last_progress >= config.timeout_ns
    assert first_resend.time <= max(last_progress, last_send) + config.timeout_ns


def test_timer_restarts_on_progress():
    """A transfer far longer than timeout_ns, with ACKs flowing, never times out."""
    config = RcConfig(timeout_ns=2_000_000)
    net = pair(config)
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 300 * 1024))  # ~27 ms at 100 Mbit/s
    net.run()

    assert net.now > 10 * config.timeout_ns
    assert a.results() == [(1, OK)]
    assert a.counters["timeouts"] == 0 and net.resent("A") == []


def test_retry_count_resets_on_progress():
    """retry_cnt=2 and three separate timeouts, each followed by progress: no RETRY_EXC_ERR."""
    config = RcConfig(timeout_ns=1_000_000, retry_cnt=2)
    net = pair(config, drop=each_once(*(request_psn(PSN_A + i) for i in range(3))))
    a, b = net.a, net.b
    for i in range(3):  # one at a time, so each loss is a tail loss only the timer can recover
        a.qp.post_send(write_wr(i + 1, a, b, i * 0x1000, i * 0x1000, 100))
        net.run()
    assert a.results() == [(1, OK), (2, OK), (3, OK)]
    assert a.counters["timeouts"] == 3
    assert a.qp.state == "RTS"


@pytest.mark.parametrize("lost_index", [0, 3, 7])
def test_lost_read_response_is_requested_again_from_the_missing_psn(lost_index):
    """A READ's lost response is re-requested from its PSN (the responder re-executes); data exact."""
    mtu, length = 1024, 8 * 1024 - 100
    net = pair(drop=once(lambda d, p: p.opcode in READ_RESPONSES and p.psn == PSN_A + lost_index))
    a, b = net.a, net.b
    a.qp.post_send(read_wr(1, a, b, 0x1000, 0x2000, length))
    a.qp.post_send(write_wr(2, a, b, 0x40000, 0x40000, 2000))
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    assert a.at(0x1000, length) == b.at(0x2000, length)
    assert b.at(0x40000, 2000) == a.at(0x40000, 2000)
    reads = net.sent("A", {Opcode.READ_REQUEST})
    assert len(reads) >= 2
    again = reads[1]
    skipped = lost_index * mtu
    assert (again.psn, again.va, again.rkey, again.dma_len) == (
        PSN_A + lost_index, b.addr(0x2000) + skipped, b.key, length - skipped)
    assert b.counters["duplicate_packets"] >= 1  # a READ for PSNs it had answered


RANDOM_RUNS = [
    # seed, loss rate, reordering, config
    (1, 0.01, False, RcConfig()),
    (2, 0.01, False, RcConfig()),
    (3, 0.01, False, RcConfig(mtu=256, max_inflight=8, max_rd_atomic=2)),
    (4, 0.01, True, RcConfig()),
    (5, 0.01, True, RcConfig(mtu=4096, ack_every=4)),
    (6, 0.05, False, RcConfig(timeout_ns=1_000_000)),
    (7, 0.05, True, RcConfig(timeout_ns=1_000_000, mtu=512, max_inflight=16)),
]


@pytest.mark.parametrize("seed,loss_rate,reorder,config", RANDOM_RUNS,
                         ids=[f"seed{r[0]}-loss{r[1]}{'-reorder' if r[2] else ''}" for r in RANDOM_RUNS])
def test_random_loss_over_mixed_work_requests(seed, loss_rate, reorder, config):
    """Random loss each way (and some reordering) over 40 mixed WRs, a tenth of them zero-length:
    every byte right, all SUCCESS, completions in posting order."""
    rng = random.Random(seed)
    loss = random.Random(seed + 1000)
    jitter = random.Random(seed + 2000)
    net = pair(config, drop=lambda d, p: loss.random() < loss_rate,
               delay=(lambda d, p: jitter.randrange(300_000)) if reorder else None)
    a, b = net.a, net.b
    expect_a, expect_b = bytearray(a.buf), bytearray(b.buf)
    expected_recvs, kinds = [], []
    slot = 0x6000
    for i in range(40):
        kind = rng.choice(["write", "write_imm", "read", "send", "send_imm"])
        length = 0 if rng.random() < 0.1 else rng.randrange(1, slot)
        offset = i * slot
        imm = rng.getrandbits(32) if kind.endswith("imm") else None
        if kind.startswith("write"):
            a.qp.post_send(write_wr(i, a, b, offset, offset, length, imm=imm))
            expect_b[offset:offset + length] = a.buf[offset:offset + length]
        elif kind == "read":
            a.qp.post_send(read_wr(i, a, b, offset, offset, length))
            expect_a[offset:offset + length] = b.buf[offset:offset + length]
        else:
            a.qp.post_send(send_wr(i, a, offset, length, imm=imm))
            expect_b[offset:offset + length] = a.buf[offset:offset + length]
        if kind not in ("write", "read"):
            b.qp.post_recv(recv_wr(1000 + i, b, offset, slot))
            opcode = WcOpcode.RECV_RDMA_WITH_IMM if kind == "write_imm" else WcOpcode.RECV
            expected_recvs.append(Completion(1000 + i, OK, opcode, QPN_B, byte_len=length, imm=imm))
        kinds.append(kind)
    net.run()

    assert net.dropped() > 0
    opcodes = {"write": WcOpcode.RDMA_WRITE, "write_imm": WcOpcode.RDMA_WRITE, "read": WcOpcode.RDMA_READ,
               "send": WcOpcode.SEND, "send_imm": WcOpcode.SEND}
    assert [(c.wr_id, c.status, c.opcode) for c in a.completions] == [
        (i, OK, opcodes[kind]) for i, kind in enumerate(kinds)]
    assert b.completions == expected_recvs
    assert a.buf == expect_a
    assert b.buf == expect_b
    assert a.qp.state == b.qp.state == "RTS"
    assert a.counters["retransmitted_packets"] == len(net.resent("A"))


def test_read_larger_than_the_window():
    """A READ of 100 MTUs with max_inflight=16 (and a lost response in it) still completes, and so does
    the WRITE queued behind it."""
    config = RcConfig(max_inflight=16)
    net = pair(config, drop=once(lambda d, p: p.opcode in READ_RESPONSES and p.psn == PSN_A + 50))
    a, b = net.a, net.b
    a.qp.post_send(read_wr(1, a, b, 0, 0x10000, 100 * 1024))
    a.qp.post_send(write_wr(2, a, b, 0x80000, 0x80000, 5000))
    net.run()

    assert a.results() == [(1, OK), (2, OK)]
    assert a.at(0, 100 * 1024) == b.at(0x10000, 100 * 1024)
    assert b.at(0x80000, 5000) == a.at(0x80000, 5000)


def test_read_re_request_over_a_lost_request():
    """A READ larger than the window goes out as several requests.  A response of the first is lost, so
    the requester asks again from the missing PSN, and that re-request reaches over a later request
    that was lost itself.  The responder must not answer PSNs it never accepted as new: the two ends
    would then disagree on the next PSN for good (the NAK looks stale to the requester, and what the
    requester resends looks out of order to the responder) and the READ dies of RETRY_EXC_ERR."""
    config = RcConfig(max_inflight=8)
    net = pair(config, drop=each_once(
        lambda d, p: p.opcode in READ_RESPONSES and p.psn == PSN_A + 5,
        lambda d, p: p.opcode == Opcode.READ_REQUEST and p.psn == PSN_A + 12))
    a, b = net.a, net.b
    a.qp.post_send(read_wr(1, a, b, 0, 0x10000, 16 * 1024))
    net.run()

    assert net.dropped() == 2, "the scenario needs both losses (adjust the PSNs if READ chunking changed)"
    assert a.results() == [(1, OK)]
    assert a.at(0, 16 * 1024) == b.at(0x10000, 16 * 1024)


def test_one_packet_read_answered_while_an_earlier_read_misses_a_response():
    """READ (2 packets), READ (1 packet), WRITE.  The first READ's last response is lost, so the second
    READ's only response arrives while the first still misses one.  Once both READs are done the
    requester's acknowledged PSN must be past both: the WRITE behind them, lost twice, is then
    recovered by the retransmission timer like any other packet."""
    first_read_tail = once(lambda d, p: p.opcode in READ_RESPONSES and p.psn == PSN_A + 1)
    write_losses = []

    def drop(direction: str, packet: Packet) -> bool:
        if first_read_tail(direction, packet):
            return True
        if packet.opcode == Opcode.WRITE_ONLY and len(write_losses) < 2:
            write_losses.append(packet)
            return True
        return False

    net = pair(RcConfig(timeout_ns=1_000_000), drop=drop)
    a, b = net.a, net.b
    a.qp.post_send(read_wr(1, a, b, 0, 0, 2 * 1024))
    a.qp.post_send(read_wr(2, a, b, 0x1000, 0x1000, 100))
    a.qp.post_send(write_wr(3, a, b, 0x2000, 0x2000, 100))
    net.run()

    assert net.dropped() == 3
    assert a.results() == [(1, OK), (2, OK), (3, OK)]
    assert a.at(0, 2 * 1024) == b.at(0, 2 * 1024) and a.at(0x1000, 100) == b.at(0x1000, 100)
    assert b.at(0x2000, 100) == a.at(0x2000, 100)


def test_both_directions_at_once_under_loss():
    """Each QP is requester and responder at the same time; 1% loss; both sides' work completes exactly."""
    loss = random.Random(7)
    net = pair(drop=lambda d, p: loss.random() < 0.01)
    a, b = net.a, net.b
    expect = {"A": bytearray(a.buf), "B": bytearray(b.buf)}

    def copy(dst: Side, dst_off: int, src: Side, src_off: int, length: int) -> None:
        expect[dst.name][dst_off:dst_off + length] = src.buf[src_off:src_off + length]

    for i in range(8):
        recv_at = 0x80000 + i * 0x2000
        a.qp.post_recv(recv_wr(200 + i, a, recv_at, 0x2000))
        b.qp.post_recv(recv_wr(300 + i, b, recv_at, 0x2000))
        off = i * 0x8000
        a.qp.post_send(write_wr(i, a, b, off, off, 5000))
        copy(b, off, a, off, 5000)
        b.qp.post_send(read_wr(i, b, a, off + 0x4000, off + 0x4000, 3000))
        copy(b, off + 0x4000, a, off + 0x4000, 3000)
        a.qp.post_send(send_wr(100 + i, a, off + 0x1000, 2000))
        copy(b, recv_at, a, off + 0x1000, 2000)
        b.qp.post_send(send_wr(100 + i, b, 0x60000 + i * 0x1000, 1500))
        copy(a, recv_at, b, 0x60000 + i * 0x1000, 1500)
    net.run()

    assert net.dropped() > 0
    assert a.buf == expect["A"] and b.buf == expect["B"]
    for side, recv_base, receive_len in ((a, 200, 1500), (b, 300, 2000)):
        sends = [(c.wr_id, c.status) for c in side.completions if c.opcode != WcOpcode.RECV]
        recvs = [(c.wr_id, c.status, c.byte_len) for c in side.completions if c.opcode == WcOpcode.RECV]
        assert sends == [x for i in range(8) for x in ((i, OK), (100 + i, OK))]
        assert recvs == [(recv_base + i, OK, receive_len) for i in range(8)]


@pytest.mark.parametrize("direction", ["A>B", "B>A"], ids=["requests-lost", "responses-lost"])
def test_dead_link_ends_in_retry_exceeded_then_flush(direction):
    """Nothing gets through: after retry_cnt retries the first WR fails RETRY_EXC_ERR, the rest flush, QP in ERROR."""
    config = RcConfig(timeout_ns=1_000_000, retry_cnt=3)
    net = pair(config, drop=lambda d, p: d == direction)
    a, b = net.a, net.b
    before = bytes(a.buf)
    a.qp.post_send(write_wr(1, a, b, 0, 0, 3000))
    a.qp.post_send(read_wr(2, a, b, 0x1000, 0x1000, 100))
    a.qp.post_send(send_wr(3, a, 0x2000, 100))
    net.run()

    assert a.results() == [(1, WcStatus.RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR), (3, WcStatus.WR_FLUSH_ERR)]
    assert a.qp.state == "ERROR"
    assert b.qp.state == "RTS"
    assert a.buf == before
    first_psn_sends = [p for p in net.sent("A", REQUESTS) if p.psn == PSN_A]
    assert len(first_psn_sends) == 1 + config.retry_cnt  # the first transmission and retry_cnt retries
    assert a.counters["timeouts"] == config.retry_cnt + 1  # every expiry, the fatal one too
    total = (config.retry_cnt + 1) * config.timeout_ns
    assert total <= a.completion_times[0] <= total * 1.5
    assert a.qp.next_deadline() is None and a.qp.next_packet(net.now) is None


# --- receiver not ready ------------------------------------------------------------------------------------


@pytest.mark.parametrize("followed_by_write", [False, True], ids=["alone", "write-behind"])
@pytest.mark.parametrize("op", ["send", "write_imm"])
def test_rnr_waits_until_a_receive_is_posted(op, followed_by_write):
    """A SEND (or WRITE_WITH_IMM) with no receive posted is RNR-NAKed and retried each RNR time;
    rnr_retry=7 retries forever.

    The receive is posted after more than seven RNR NAKs.  With a WRITE queued
    behind, the WRITE must not overtake it and must not make the requester
    retry before the RNR wait is over.  A multi-packet WRITE_WITH_IMM is NAKed
    at its last packet (the first ones carry no immediate), so the retries
    start there.
    """
    config = RcConfig()
    assert config.rnr_retry == 7
    net = pair(config)
    a, b = net.a, net.b
    post_at = 15_500_000  # the RNR NAK asks for 1.28 ms (IBTA code 14, the first at least 1 ms): 12 NAKs
    net.at(post_at, lambda: b.qp.post_recv(recv_wr(7, b, 0x5000, 4096)))
    if op == "send":
        a.qp.post_send(send_wr(1, a, 0, 3000))
        nak_psn = PSN_A
        received = Completion(7, OK, WcOpcode.RECV, QPN_B, byte_len=3000)
    else:
        a.qp.post_send(write_wr(1, a, b, 0, 0x5000, 3000, imm=0xABC))
        nak_psn = PSN_A + 2
        received = Completion(7, OK, WcOpcode.RECV_RDMA_WITH_IMM, QPN_B, byte_len=3000, imm=0xABC)
    if followed_by_write:
        a.qp.post_send(write_wr(2, a, b, 0x8000, 0x8000, 2000))
    net.run()

    expected = [(1, OK), (2, OK)] if followed_by_write else [(1, OK)]
    assert a.results() == expected
    assert b.completions == [received]
    assert b.at(0x5000, 3000) == a.at(0, 3000)
    if followed_by_write:
        assert b.at(0x8000, 2000) == a.at(0x8000, 2000)
    assert a.completion_times[0] > post_at
    assert a.counters["rnr_naks_received"] == b.counters["rnr_naks_sent"] > 7
    assert a.counters["timeouts"] == 0
    assert a.qp.state == "RTS"
    rnr_naks = [(t.arrival, t.packet) for t in net.transmissions("B")
                if t.packet.opcode == Opcode.ACK and t.packet.syndrome & 0x60 == 0x20]
    assert rnr_naks and all(p.psn == nak_psn for _, p in rnr_naks)
    # The requester sends the NAKed packet again no sooner than the RNR time after each RNR NAK.
    low, high = rnr_wait_bounds(config)
    first_sends = [t.time for t in net.transmissions("A") if t.packet.psn == nak_psn]
    for arrival, _ in rnr_naks:
        resend = min(t for t in first_sends if t > arrival)
        assert low <= resend - arrival <= high, (arrival, resend)


@pytest.mark.parametrize("rnr_retry", [0, 1, 3])
def test_rnr_retry_exhausted(rnr_retry):
    """No receive ever: after rnr_retry retries the SEND fails RNR_RETRY_EXC_ERR, the WRITE behind it flushes."""
    config = RcConfig(rnr_retry=rnr_retry)
    net = pair(config)
    a, b = net.a, net.b
    before = bytes(b.buf)
    a.qp.post_send(send_wr(1, a, 0, 100))
    a.qp.post_send(write_wr(2, a, b, 0, 0, 100))
    net.run()

    assert a.results() == [(1, WcStatus.RNR_RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert a.qp.state == "ERROR"
    assert a.counters["rnr_naks_received"] == rnr_retry + 1
    assert len([p for p in net.sent("A", REQUESTS) if p.psn == PSN_A]) == rnr_retry + 1
    assert b.completions == []
    assert b.buf == before  # the WRITE behind the SEND never executed


# --- access errors -----------------------------------------------------------------------------------------


REMOTE_ERRORS = {
    # name: (operation, how the WR goes wrong)
    "write-bad-rkey": ("write", lambda b, extra: dict(rkey=b.key ^ 1)),
    "write-other-pd-rkey": ("write", lambda b, extra: dict(rkey=extra["other_pd"])),
    "write-past-end": ("write", lambda b, extra: dict(remote_addr=b.addr(REGION - 1000))),
    "write-before-start": ("write", lambda b, extra: dict(remote_addr=b.addr(0) - 8)),
    "write-no-remote-write": ("write", lambda b, extra: dict(rkey=extra["read_only"], remote_addr=extra["ro_addr"])),
    "read-bad-rkey": ("read", lambda b, extra: dict(rkey=b.key ^ 1)),
    "read-past-end": ("read", lambda b, extra: dict(remote_addr=b.addr(REGION - 1000))),
    "read-no-remote-read": ("read", lambda b, extra: dict(rkey=extra["write_only"], remote_addr=extra["wo_addr"])),
}


@pytest.mark.parametrize("case", list(REMOTE_ERRORS))
def test_remote_access_error_naks_and_fails_the_requester(case):
    """Bad rkey, another PD's rkey, out of bounds, missing permission: NAK 0x62, REM_ACCESS_ERR, nothing touched."""
    op, spoil = REMOTE_ERRORS[case]
    net = pair()
    a, b = net.a, net.b
    ro_addr, read_only, _ = b.host.extra_region(0, 0x4000, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ)
    wo_addr, write_only, _ = b.host.extra_region(0x10000, 0x4000, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
    _, other_pd, _ = b.host.extra_region(0x20000, 0x4000, ACCESS_ALL, owner=99)
    extra = dict(read_only=read_only, ro_addr=ro_addr, write_only=write_only, wo_addr=wo_addr, other_pd=other_pd)
    regions_before = {key: bytes(r.view) for key, r in b.host.table.regions.items()}
    a_before = bytes(a.buf)
    good = write_wr(1, a, b, 0, 0, 3000) if op == "write" else read_wr(1, a, b, 0, 0, 3000)
    a.qp.post_send(replace(good, **spoil(b, extra)))
    a.qp.post_send(write_wr(2, a, b, 0x8000, 0x8000, 100))
    net.run()

    assert a.results() == [(1, WcStatus.REM_ACCESS_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert a.qp.state == "ERROR"
    assert {key: bytes(r.view) for key, r in b.host.table.regions.items()} == regions_before
    assert a.buf == a_before
    assert [(p.syndrome, p.psn) for p in net.naks("B")][:1] == [(NAK_REMOTE_ACCESS_ERROR, PSN_A)]
    assert b.counters["naks_sent"] >= 1 and a.counters["naks_received"] >= 1
    assert b.completions == []


def test_a_new_qp_pair_on_the_same_regions_works_after_a_pair_failed():
    """A remote access error kills that QP pair only; new QPs in the same protection domains carry on."""
    first = pair()
    a, b = first.a, first.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 100, rkey=b.key ^ 1))
    first.run()
    assert a.results() == [(1, WcStatus.REM_ACCESS_ERR)]

    second = pair(hosts=(a.host, b.host), qpns=(0x12, 0x2B), psn_a=0x777, psn_b=0x888)
    a2, b2 = second.a, second.b
    b2.qp.post_recv(recv_wr(5, b2, 0x9000, 1000))
    a2.qp.post_send(write_wr(1, a2, b2, 0x100, 0x200, 5000))
    a2.qp.post_send(read_wr(2, a2, b2, 0x4000, 0x6000, 3000))
    a2.qp.post_send(send_wr(3, a2, 0x300, 700))
    second.run()

    assert a2.results() == [(1, OK), (2, OK), (3, OK)]
    assert b.at(0x200, 5000) == a.at(0x100, 5000)
    assert a.at(0x4000, 3000) == b.at(0x6000, 3000)
    assert b2.completions == [Completion(5, OK, WcOpcode.RECV, 0x2B, byte_len=700)]
    assert a.qp.state == "ERROR"


LOCAL_ERRORS = {
    "write-bad-lkey": lambda a, extra: replace(write_wr(1, a, extra["b"], 0, 0, 3000), lkey=a.key ^ 1),
    "write-other-pd-lkey": lambda a, extra: replace(write_wr(1, a, extra["b"], 0, 0, 3000), lkey=extra["other_pd"]),
    "write-past-end": lambda a, extra: write_wr(1, a, extra["b"], REGION - 1000, 0, 3000),
    "send-bad-lkey": lambda a, extra: replace(send_wr(1, a, 0, 3000), lkey=a.key ^ 1),
    "read-into-no-local-write": lambda a, extra: replace(read_wr(1, a, extra["b"], 0, 0, 3000),
                                                         addr=extra["ro_addr"], lkey=extra["read_only"]),
}


@pytest.mark.parametrize("case", list(LOCAL_ERRORS))
def test_local_protection_error(case):
    """A WR whose local buffer fails the lkey check completes LOC_PROT_ERR; the QP errors and flushes the rest."""
    net = pair()
    a, b = net.a, net.b
    ro_addr, read_only, ro_buf = a.host.extra_region(0, 0x4000, ACCESS_REMOTE_READ)
    _, other_pd, _ = a.host.extra_region(0x10000, 0x4000, ACCESS_ALL, owner=98)
    extra = dict(b=b, ro_addr=ro_addr, read_only=read_only, other_pd=other_pd)
    ro_before, b_before = bytes(ro_buf), bytes(b.buf)
    b.qp.post_recv(recv_wr(3, b, 0x10000, 8192))
    a.qp.post_send(LOCAL_ERRORS[case](a, extra))
    a.qp.post_send(write_wr(2, a, b, 0x8000, 0x8000, 100))
    net.run()

    assert a.results() == [(1, WcStatus.LOC_PROT_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert a.qp.state == "ERROR"
    assert bytes(ro_buf) == ro_before
    assert b.buf == b_before
    assert b.completions == []


@pytest.mark.parametrize("spoil", ["lkey", "length"])
def test_local_error_behind_earlier_work_keeps_posting_order(spoil):
    """A bad lkey (or a length over max_msg) on the second WR fails that WR only once the first has finished:
    completions stay in posting order and the good WR before it is not flushed."""
    net = pair(RcConfig(max_msg=1 << 16))
    a, b = net.a, net.b
    bad = write_wr(2, a, b, 0x1000, 0x1000, 100)
    if spoil == "lkey":
        bad, status = replace(bad, lkey=a.key ^ 1), WcStatus.LOC_PROT_ERR
    else:
        bad, status = replace(bad, length=(1 << 16) + 1), WcStatus.LOC_LEN_ERR
    a.qp.post_send(write_wr(1, a, b, 0, 0, 3000))
    a.qp.post_send(bad)
    a.qp.post_send(write_wr(3, a, b, 0x2000, 0x2000, 100))
    net.run()

    assert [c.wr_id for c in a.completions] == [1, 2, 3]
    assert a.results() == [(1, OK), (2, status), (3, WcStatus.WR_FLUSH_ERR)]
    assert b.at(0, 3000) == a.at(0, 3000)


@pytest.mark.parametrize("first", ["write", "read"])
def test_remote_error_behind_earlier_work_keeps_posting_order(first):
    """A bad rkey on the second WR: the first WR (a WRITE, or a READ the responder executed, and owes the
    responses of, before it even saw the bad request) completes first, successfully; then REM_ACCESS_ERR."""
    net = pair()
    a, b = net.a, net.b
    length = 3000 if first == "write" else 8 * 1024
    if first == "write":
        a.qp.post_send(write_wr(1, a, b, 0, 0, length))
    else:
        a.qp.post_send(read_wr(1, a, b, 0, 0, length))
    a.qp.post_send(write_wr(2, a, b, 0x10000, 0x10000, 100, rkey=b.key ^ 1))
    a.qp.post_send(write_wr(3, a, b, 0x20000, 0x20000, 100))
    net.run()

    assert [c.wr_id for c in a.completions] == [1, 2, 3]
    assert a.results() == [(1, OK), (2, WcStatus.REM_ACCESS_ERR), (3, WcStatus.WR_FLUSH_ERR)]
    assert a.at(0, length) == b.at(0, length)


def test_send_longer_than_the_receive():
    """The responder completes the receive LOC_LEN_ERR and NAKs invalid request: REM_INV_REQ_ERR at the requester."""
    net = pair()
    a, b = net.a, net.b
    b.qp.post_recv(recv_wr(7, b, 0x1000, 2000))
    b.qp.post_recv(recv_wr(8, b, 0x3000, 8192))
    a.qp.post_send(send_wr(1, a, 0, 3000))
    net.run()

    assert a.results() == [(1, WcStatus.REM_INV_REQ_ERR)]
    assert [(c.wr_id, c.status, c.opcode) for c in b.completions] == [
        (7, WcStatus.LOC_LEN_ERR, WcOpcode.RECV), (8, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV)]
    assert a.qp.state == b.qp.state == "ERROR"


def test_receive_with_a_bad_lkey():
    """The responder completes the receive LOC_PROT_ERR and NAKs remote operational error: REM_OP_ERR."""
    net = pair()
    a, b = net.a, net.b
    b.qp.post_recv(RecvWR(7, b.addr(0x1000), 4096, b.key ^ 1))
    a.qp.post_send(send_wr(1, a, 0, 3000))
    net.run()

    assert a.results() == [(1, WcStatus.REM_OP_ERR)]
    assert [(c.wr_id, c.status) for c in b.completions] == [(7, WcStatus.LOC_PROT_ERR)]
    assert a.qp.state == "ERROR"


def test_posting_to_a_qp_in_error_flushes_at_once():
    """After an error, new send and receive WRs complete WR_FLUSH_ERR without touching the wire."""
    net = pair(RcConfig(rnr_retry=0))
    a, b = net.a, net.b
    a.qp.post_send(send_wr(1, a, 0, 100))  # no receive: RNR_RETRY_EXC_ERR
    net.run()
    assert a.qp.state == "ERROR"
    on_wire = len(net.log)
    a.qp.post_send(write_wr(2, a, b, 0, 0, 100))
    a.qp.post_recv(recv_wr(3, a, 0, 100))
    net.run()

    assert [(c.wr_id, c.status) for c in a.completions] == [
        (1, WcStatus.RNR_RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR), (3, WcStatus.WR_FLUSH_ERR)]
    assert len(net.log) == on_wire


def test_posting_before_connect_is_refused():
    """A QP in INIT has no peer to send to."""
    host = make_host(1, OWNER_A, BASE_A)
    qp = RcQueuePair(QPN_A, host.table.domain(OWNER_A))
    assert qp.state == "INIT"
    with pytest.raises(ValueError):
        qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE, BASE_A, 10, host.key, 0, 0))
    assert qp.poll_completions() == []
    assert qp.next_packet(0) is None


# --- limits ------------------------------------------------------------------------------------------------


def test_window_fills_to_max_inflight_and_no_further():
    """With a long pipe the requester keeps exactly max_inflight PSNs unacknowledged (the harness checks <=)."""
    config = RcConfig(max_inflight=32)
    net = pair(config, latency_ns=1_000_000, ns_per_byte=8)
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 200 * 1024))
    net.run()

    assert a.results() == [(1, OK)]
    assert b.at(0, 200 * 1024) == a.at(0, 200 * 1024)
    assert a.max_outstanding == config.max_inflight
    assert a.counters["timeouts"] == 0


def test_window_smaller_than_ack_every_does_not_stall():
    """max_inflight below ack_every: the requester must ask for an ACK when its window fills, not wait for the RTO."""
    config = RcConfig(max_inflight=4, ack_every=16)
    net = pair(config)
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 40 * 1024))
    net.run()

    assert a.results() == [(1, OK)]
    assert b.at(0, 40 * 1024) == a.at(0, 40 * 1024)
    assert a.counters["timeouts"] == 0
    assert a.completion_times[0] < config.timeout_ns


def test_max_rd_atomic_bounds_outstanding_reads():
    """max_rd_atomic=2: never more than two READs between request and last response, and two do overlap."""
    config = RcConfig(max_rd_atomic=2)
    net = pair(config, latency_ns=200_000)
    a, b = net.a, net.b
    for i in range(6):
        a.qp.post_send(read_wr(i, a, b, i * 0x1000, 0x40000 + i * 0x1000, 3 * 1024))
    net.run()

    assert a.results() == [(i, OK) for i in range(6)]
    for i in range(6):
        assert a.at(i * 0x1000, 3 * 1024) == b.at(0x40000 + i * 0x1000, 3 * 1024)
    # A READ request is outstanding from its transmission until the response for its last PSN arrives.
    requests = [(t.time, t.packet) for t in net.transmissions("A") if t.packet.opcode == Opcode.READ_REQUEST]
    assert len(requests) == 6
    arrived = {}
    for time, dst, p in net.deliveries:
        if dst == "A" and p.opcode in READ_RESPONSES:
            arrived.setdefault(p.psn, time)
    done = [arrived[psn_add(r.psn, psn_span(r, config.mtu) - 1)] for _, r in requests]
    peak = 0
    for sent_at, _ in requests:
        outstanding = sum(1 for (t, _), end in zip(requests, done) if t <= sent_at < end)
        peak = max(peak, outstanding)
        assert outstanding <= config.max_rd_atomic
    assert peak == config.max_rd_atomic


def test_unsignaled_successes_leave_no_completion():
    """signaled=False: no completion on success (later signaled WRs still complete, in order)."""
    net = pair()
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 100))
    a.qp.post_send(write_wr(2, a, b, 0x100, 0x100, 100, signaled=False))
    a.qp.post_send(read_wr(3, a, b, 0x200, 0x300, 100))
    net.run()

    assert a.results() == [(1, OK), (3, OK)]
    assert b.at(0x100, 100) == a.at(0x100, 100)


def test_poll_completions_honours_max_entries():
    """poll_completions(n) hands out at most n, oldest first, the rest on the next call."""
    net = pair(poll=False)
    a, b = net.a, net.b
    for i in range(3):
        a.qp.post_send(write_wr(i, a, b, i * 0x100, i * 0x100, 50))
    net.run()

    assert [c.wr_id for c in a.qp.poll_completions(2)] == [0, 1]
    assert [c.wr_id for c in a.qp.poll_completions(2)] == [2]
    assert a.qp.poll_completions() == []


# --- duplicates and ECN ------------------------------------------------------------------------------------


def test_duplicated_packets_execute_once():
    """Every request delivered twice: each SEND and WRITE_WITH_IMM consumes one receive, data exact."""
    net = pair(duplicate=lambda d, p: d == "A>B")
    a, b = net.a, net.b
    for i in range(4):
        b.qp.post_recv(recv_wr(100 + i, b, 0x10000 + i * 0x2000, 0x2000))
    a.qp.post_send(send_wr(1, a, 0, 3000))
    a.qp.post_send(write_wr(2, a, b, 0x1000, 0x1000, 2500, imm=42))
    a.qp.post_send(read_wr(3, a, b, 0x4000, 0x4000, 2500))
    a.qp.post_send(send_wr(4, a, 0x8000, 10, imm=43))
    net.run()

    assert a.results() == [(i, OK) for i in range(1, 5)]
    assert b.completions == [Completion(100, OK, WcOpcode.RECV, QPN_B, byte_len=3000),
                             Completion(101, OK, WcOpcode.RECV_RDMA_WITH_IMM, QPN_B, byte_len=2500, imm=42),
                             Completion(102, OK, WcOpcode.RECV, QPN_B, byte_len=10, imm=43)]
    assert b.at(0x10000, 3000) == a.at(0, 3000)
    assert b.at(0x1000, 2500) == a.at(0x1000, 2500)
    assert a.at(0x4000, 2500) == b.at(0x4000, 2500)
    assert b.at(0x14000, 10) == a.at(0x8000, 10)
    copies = len(net.sent("A", REQUESTS))
    assert b.counters["duplicate_packets"] == copies
    assert b.counters["packets_received"] == 2 * copies


def test_ecn_ce_marks_are_counted():
    """Every packet arriving CE-marked is counted by the QP it reaches."""
    net = pair(mark_ce=lambda d, p: d == "A>B")
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 10 * 1024))
    net.run()

    assert a.results() == [(1, OK)]
    marked = [p for _, dst, p in net.deliveries if dst == "B" and p.ecn_ce]
    assert len(marked) == 10
    assert b.counters["ecn_ce_received"] == len(marked)
    assert a.counters["ecn_ce_received"] == 0


def test_a_rate_limited_qp_sends_acks_but_no_data():
    """next_packet(data=False), as the RNIC asks while DCQCN holds a QP: an ACK or NAK goes, a request or READ
    response waits; has_data says whether one is waiting."""
    net = pair()
    a, b = net.a, net.b
    assert not a.qp.has_data()
    a.qp.post_send(write_wr(1, a, b, 0, 0, 10))
    a.qp.post_send(read_wr(2, a, b, 0x3000, 0x100, 100))
    assert a.qp.has_data() and a.qp.next_packet(0, data=False) is None
    write, read = a.qp.next_packet(0), a.qp.next_packet(0)
    assert (write.opcode, read.opcode) == (Opcode.WRITE_ONLY, Opcode.READ_REQUEST) and not a.qp.has_data()
    b.qp.receive(1, write)
    b.qp.receive(2, read)
    assert b.qp.has_data()  # the READ response
    ack = b.qp.next_packet(3, data=False)
    assert ack.opcode == Opcode.ACK and ack.psn == write.psn
    assert b.qp.next_packet(3, data=False) is None and b.qp.has_data()
    assert b.qp.next_packet(4).opcode == Opcode.READ_RESPONSE_ONLY and not b.qp.has_data()
