"""The RC (reliable connected) transport of one queue pair, without I/O.

A pure state machine in the manner of h11: the caller hands it inbound
packets (:meth:`RcQueuePair.receive`), pulls outbound ones while its socket
can take them (:meth:`RcQueuePair.next_packet`), and calls
:meth:`RcQueuePair.on_timer` when :meth:`RcQueuePair.next_deadline` has
passed.  Times are integers in nanoseconds supplied by the caller; nothing
here reads a clock, opens a socket or sleeps, so unit tests drive it with a
fake clock and a fake wire.

Both halves of a QP live here.  The *requester* segments work requests at
the path MTU, numbers packets with 24-bit PSNs, keeps at most
``max_inflight`` unacknowledged, asks for an ACK every ``ack_every``
packets and at the end of every message, and recovers with go-back-N: on a
PSN-sequence-error NAK, on an ACK that skips READ responses (implied NAK)
and on the retransmission timeout, it sends again from the first packet the
responder lacks.  The *responder* executes in-order packets against memory,
NAKs the first gap once and then drops until the expected PSN comes back,
answers RNR when a SEND finds no receive posted, re-ACKs duplicates and
re-executes duplicate READs.  Errors end as completions with a status, and
the QP then flushes everything else, as in verbs.  (Learned from the IBTA
rules as Linux rxe implements them; no code from it.)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

# One exception class for both twins: a memory (agents/memory.py, the simulator's FlatMemory) raises it at
# either model.  A key, bound or permission check of :class:`Memory` failed.
from emulator._core.rc import AccessError
from emulator.model.rdma_params import MAX_MR_BYTES, PATHS_MTU, ROCE_OVERHEAD
from emulator.wire.transport import (
    HAS_IMM, NAK_INVALID_REQUEST, NAK_PSN_SEQUENCE_ERROR, NAK_REMOTE_ACCESS_ERROR, NAK_REMOTE_OPERATIONAL_ERROR,
    PSN_MASK, SYNDROME_ACK, SYNDROME_RNR_NAK, Opcode, Packet, psn_add, psn_diff,
)

INFINITE_RNR_RETRY = 7
# The 5-bit RNR NAK timer of IBTA table 45, in nanoseconds (code 0 is the longest).
RNR_TIMER_NS = [655_360_000] + [int(ms * 1_000_000) for ms in (
    0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92, 2.56, 3.84,
    5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52)]


class Memory(Protocol):
    """The registered memory a QP may touch (its protection domain)."""

    def local(self, lkey: int, addr: int, length: int, write: bool) -> memoryview: ...

    def remote(self, rkey: int, addr: int, length: int, write: bool) -> memoryview: ...


class WrOpcode(IntEnum):
    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1
    SEND = 2
    SEND_WITH_IMM = 3
    RDMA_READ = 4


class WcStatus(IntEnum):
    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13


class WcOpcode(IntEnum):
    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


@dataclass(slots=True)
class SendWR:
    wr_id: int
    opcode: WrOpcode
    addr: int
    length: int
    lkey: int
    remote_addr: int = 0
    rkey: int = 0
    imm: int = 0
    signaled: bool = True


@dataclass(slots=True)
class RecvWR:
    wr_id: int
    addr: int
    length: int
    lkey: int


@dataclass(slots=True)
class Completion:
    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qp_num: int
    byte_len: int = 0
    imm: int | None = None
    timestamp: int = 0  # CLOCK_MONOTONIC ns when the RNIC reported it (the model leaves 0)


@dataclass(frozen=True)
class RcConfig:
    """The QP attributes of ``ibv_modify_qp`` that the transport uses."""

    mtu: int = 1024
    timeout_ns: int = 4096 * 2**14  # IB "timeout 14", perftest's default: 67.1 ms
    retry_cnt: int = 7
    rnr_retry: int = 7
    rnr_timer_ns: int = 1_000_000
    ack_every: int = 16
    max_inflight: int = 128
    max_rd_atomic: int = 16
    max_msg: int = MAX_MR_BYTES

    def __post_init__(self) -> None:
        if self.mtu not in PATHS_MTU:
            raise ValueError(f"path MTU {self.mtu}: choose one of {', '.join(map(str, PATHS_MTU))}")
        if self.max_inflight < 1 or self.ack_every < 1 or self.max_rd_atomic < 1:
            raise ValueError("max_inflight, ack_every and max_rd_atomic must be at least 1")
        if not 0 <= self.retry_cnt <= 7 or not 0 <= self.rnr_retry <= 7:
            raise ValueError("retry_cnt and rnr_retry are 0 to 7")


def default_timeout_ns(rate_bps: int, mtu: int, max_inflight: int = RcConfig.max_inflight) -> int:
    """The local ACK timeout a QP gets unless the application sets one.

    IB's timeout 14 (67 ms, perftest's default) is thousands of windows at
    100 Gbit/s.  On an emulated link of tens of Mbit/s one window of 128
    frames takes tens of milliseconds, and a sender that PFC holds back in an
    8-to-1 incast waits longer than 67 ms between ACKs without losing
    anything: timeouts would fire on paused packets, not lost ones.  So the
    timeout scales with the link: the smallest IB value (4.096 us x 2^t,
    t >= 14) that covers 8 windows of path-MTU frames at the link rate
    (20 Mbit/s: 537 ms; 100 Mbit/s: 134 ms; 1 Gbit/s and up: 67 ms).
    """
    needed = 8 * max_inflight * (mtu + ROCE_OVERHEAD + 14) * 8 * 1_000_000_000 // max(rate_bps, 1)
    exponent = 14
    while 4096 * 2**exponent < needed and exponent < 31:
        exponent += 1
    return 4096 * 2**exponent


def rnr_timer_code(ns: int) -> int:
    """The RNR timer code of the shortest wait at or above ``ns``."""
    fitting = [code for code in range(1, 32) if RNR_TIMER_NS[code] >= ns]
    return min(fitting, key=lambda code: RNR_TIMER_NS[code]) if fitting else 0


_WC_OF = {WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
          WrOpcode.SEND: WcOpcode.SEND, WrOpcode.SEND_WITH_IMM: WcOpcode.SEND,
          WrOpcode.RDMA_READ: WcOpcode.RDMA_READ}
# (first, middle, last, only) opcodes of each multi-packet request.
_SEQUENCES = {
    WrOpcode.RDMA_WRITE: (Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE, Opcode.WRITE_LAST, Opcode.WRITE_ONLY),
    WrOpcode.RDMA_WRITE_WITH_IMM: (Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE, Opcode.WRITE_LAST_IMM,
                                   Opcode.WRITE_ONLY_IMM),
    WrOpcode.SEND: (Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_ONLY),
    WrOpcode.SEND_WITH_IMM: (Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST_IMM, Opcode.SEND_ONLY_IMM),
}
_WRITE_STARTS = (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)
_WRITE_CONTINUES = (Opcode.WRITE_MIDDLE, Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM)
_SEND_STARTS = (Opcode.SEND_FIRST, Opcode.SEND_ONLY, Opcode.SEND_ONLY_IMM)
_SEND_CONTINUES = (Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_LAST_IMM)
_MESSAGE_ENDS = frozenset({Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM,
                           Opcode.SEND_LAST, Opcode.SEND_LAST_IMM, Opcode.SEND_ONLY, Opcode.SEND_ONLY_IMM})
_READ_RESPONSES = (Opcode.READ_RESPONSE_FIRST, Opcode.READ_RESPONSE_MIDDLE, Opcode.READ_RESPONSE_LAST,
                   Opcode.READ_RESPONSE_ONLY)
_NAK_STATUS = {NAK_INVALID_REQUEST: WcStatus.REM_INV_REQ_ERR, NAK_REMOTE_ACCESS_ERROR: WcStatus.REM_ACCESS_ERR,
               NAK_REMOTE_OPERATIONAL_ERROR: WcStatus.REM_OP_ERR}
COUNTERS = ("packets_sent", "packets_received", "bytes_sent", "retransmitted_packets", "timeouts", "naks_sent",
            "naks_received", "seq_naks_sent", "rnr_naks_sent", "rnr_naks_received", "duplicate_packets",
            "acks_sent", "acks_received", "ecn_ce_received", "malformed_packets")


def _packets(length: int, mtu: int) -> int:
    return max(1, -(-length // mtu))


@dataclass(slots=True, eq=False)
class _SendOp:
    """A posted work request the requester has not completed yet."""

    wr: SendWR
    first_psn: int
    npkts: int
    local: memoryview
    error: WcStatus | None = None  # a local error found at post time, reported in turn
    read_received: int = 0  # READ: responses that arrived in order
    rerequested_at: int = -1  # READ: the PSN of the last re-request after a gap


@dataclass(slots=True)
class _ReadJob:
    """READ responses the responder still owes, generated lazily."""

    first_psn: int
    next_index: int
    npkts: int
    view: memoryview


@dataclass(slots=True)
class _Reply:
    """An ACK or NAK waiting in the responder's output."""

    psn: int
    syndrome: int
    msn: int


@dataclass(slots=True)
class _Inbound:
    """The message the responder is in the middle of."""

    kind: str  # "write" or "send"
    view: memoryview
    offset: int = 0
    recv: RecvWR | None = None


@dataclass
class RcQueuePair:
    """Requester and responder of one RC queue pair."""

    qpn: int
    memory: Memory
    config: RcConfig = field(default_factory=RcConfig)
    initial_psn: int = 0

    def __post_init__(self) -> None:
        self.state = "INIT"
        self.remote_qpn = 0
        self.counters = dict.fromkeys(COUNTERS, 0)
        # Lists, not deques, for the two short queues: an empty deque holds a 64-slot block (760 B), and a
        # simulated all-to-all on fattree,16 makes a million QPs.  Both stay a few entries long.
        self._completions: list[Completion] = []
        # requester
        self.sq: deque[_SendOp] = deque()
        self.una = self.tx_psn = self.end_psn = self.high_psn = self.initial_psn & PSN_MASK
        self.rto_deadline: int | None = None
        self.rnr_until: int | None = None
        self.retries_left = self.config.retry_cnt
        self.rnr_left = self.config.rnr_retry
        self._tx_op: _SendOp | None = None
        # responder
        self.epsn = 0
        self.msn = 0
        self.nak_sent = False
        self.rq: deque[RecvWR] = deque()
        self.inbound: _Inbound | None = None
        self.out: list[_Reply | _ReadJob] = []  # ACKs and NAKs (one pending ACK at most) and READ jobs (max_rd_atomic)

    # --- verbs ----------------------------------------------------------------------------

    def connect(self, remote_qpn: int, remote_psn: int) -> None:
        """INIT -> RTR -> RTS: ``remote_psn`` is the peer's first send PSN."""
        if self.state != "INIT":
            raise ValueError(f"QP {self.qpn} is {self.state}, not INIT")
        self.remote_qpn = remote_qpn
        self.epsn = remote_psn & PSN_MASK
        self.state = "RTS"

    def post_send(self, wr: SendWR) -> None:
        if self.state == "INIT":
            raise ValueError(f"QP {self.qpn} is not connected")
        if self.state == "ERROR":
            self._complete(wr.wr_id, WcStatus.WR_FLUSH_ERR, _WC_OF[wr.opcode], 0)
            return
        op = _SendOp(wr, self.end_psn, 1, memoryview(bytearray()))
        if not 0 <= wr.length <= self.config.max_msg:
            op.error = WcStatus.LOC_LEN_ERR
        elif wr.length:
            try:
                op.local = self.memory.local(wr.lkey, wr.addr, wr.length, write=wr.opcode == WrOpcode.RDMA_READ)
            except AccessError:
                op.error = WcStatus.LOC_PROT_ERR
        if op.error is not None and not self.sq:
            self._fail(op, op.error)
            return
        # A bad WR behind others takes one PSN that is never sent: transmission
        # stops there, and it fails once everything before it completed.
        op.npkts = 1 if op.error is not None else _packets(wr.length, self.config.mtu)
        self.sq.append(op)
        self.end_psn = psn_add(self.end_psn, op.npkts)

    def post_recv(self, wr: RecvWR) -> None:
        if self.state == "ERROR":
            self._complete(wr.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0)
            return
        self.rq.append(wr)

    def poll_completions(self, max_entries: int | None = None) -> list[Completion]:
        n = len(self._completions) if max_entries is None else min(max_entries, len(self._completions))
        taken, self._completions = self._completions[:n], self._completions[n:]
        return taken

    # --- the I/O layer's side ---------------------------------------------------------------

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.rto_deadline, self.rnr_until) if d is not None]
        return min(deadlines) if deadlines else None

    def on_timer(self, now: int) -> None:
        if self.rnr_until is not None and now >= self.rnr_until:
            self.rnr_until = None
        if self.rto_deadline is not None and now >= self.rto_deadline:
            self.rto_deadline = None
            if self.state != "RTS" or not self.sq:
                return
            self.counters["timeouts"] += 1
            if self.retries_left == 0:
                self._fail(self._op_at(self.una) or self.sq[0], WcStatus.RETRY_EXC_ERR)
                return
            self.retries_left -= 1
            self.tx_psn = self.una

    def next_packet(self, now: int, data: bool = True) -> Packet | None:
        """Responses and ACKs first (they unblock the peer), then requests.

        ``data`` False (a congestion control's rate limiter holds the QP back):
        only an ACK or NAK may go, no request and no READ response.
        """
        if self.out:
            if data or isinstance(self.out[0], _Reply):
                return self._next_response()
            return None
        if not data or self.state != "RTS" or self.rnr_until is not None or self.tx_psn == self.end_psn:
            return None
        if psn_diff(self.tx_psn, self.una) >= self.config.max_inflight:
            return None
        op = self._op_at(self.tx_psn)
        assert op is not None, "tx_psn must lie in a posted request"
        if op.error is not None:
            return None
        if op.wr.opcode == WrOpcode.RDMA_READ and self._reads_outstanding(op) >= self.config.max_rd_atomic:
            return None
        packet = self._request_packet(op, psn_diff(self.tx_psn, op.first_psn))
        if self.tx_psn == self.una and self.rto_deadline is None:
            self.rto_deadline = now + self.config.timeout_ns
        index = psn_diff(self.tx_psn, op.first_psn)
        advance = self._read_chunk(op, index) if op.wr.opcode == WrOpcode.RDMA_READ else 1
        if psn_diff(self.tx_psn, self.high_psn) < 0:
            self.counters["retransmitted_packets"] += 1
        self.tx_psn = psn_add(self.tx_psn, advance)
        if psn_diff(self.tx_psn, self.high_psn) > 0:
            self.high_psn = self.tx_psn
        self.counters["packets_sent"] += 1
        self.counters["bytes_sent"] += len(packet.payload)
        return packet

    def has_data(self) -> bool:
        """Whether a READ response or a request is waiting to go (window and RNR permitting)."""
        return any(not isinstance(item, _Reply) for item in self.out) or (
            self.state == "RTS" and self.tx_psn != self.end_psn)

    def receive(self, now: int, packet: Packet) -> None:
        """One inbound packet for this QP: a request, a response or an ACK/NAK."""
        if self.state != "RTS":
            return
        self.counters["packets_received"] += 1
        if packet.ecn_ce:
            self.counters["ecn_ce_received"] += 1
        opcode = packet.opcode
        if opcode == Opcode.ACK:
            self._on_ack(now, packet)
        elif opcode in _READ_RESPONSES:
            self._on_read_response(now, packet)
        elif opcode <= Opcode.READ_REQUEST:
            self._on_request(packet)

    # --- requester ------------------------------------------------------------------------

    def _op_at(self, psn: int) -> _SendOp | None:
        op = self._tx_op
        if op is not None and 0 <= psn_diff(psn, op.first_psn) < op.npkts:
            return op
        for op in self.sq:
            if 0 <= psn_diff(psn, op.first_psn) < op.npkts:
                self._tx_op = op
                return op
        return None

    def _read_chunk(self, op: _SendOp, index: int) -> int:
        """Responses one READ request asks for: the rest of the WR, at most a window.

        A large READ goes out as several requests, each for at most
        ``max_inflight`` responses, so that responses are clocked by the
        requester's progress as WRITE data is by ACKs: an emulated RNIC
        that receives slower than its peer sends would otherwise lose most
        of a 64 MiB READ in its socket buffer.
        """
        return min(op.npkts - index, self.config.max_inflight - psn_diff(self.tx_psn, self.una))

    def _reads_outstanding(self, besides: _SendOp) -> int:
        return sum(1 for op in self.sq if op is not besides and op.wr.opcode == WrOpcode.RDMA_READ
                   and psn_diff(self.tx_psn, op.first_psn) > 0 and op.read_received < op.npkts)

    def _request_packet(self, op: _SendOp, index: int) -> Packet:
        wr, mtu, psn = op.wr, self.config.mtu, self.tx_psn
        if wr.opcode == WrOpcode.RDMA_READ:
            offset = index * mtu
            return Packet(Opcode.READ_REQUEST, self.remote_qpn, psn, va=wr.remote_addr + offset, rkey=wr.rkey,
                          dma_len=min(max(0, wr.length - offset), self._read_chunk(op, index) * mtu))
        first, middle, last, only = _SEQUENCES[wr.opcode]
        if op.npkts == 1:
            opcode = only
        else:
            opcode = first if index == 0 else last if index == op.npkts - 1 else middle
        ends = index == op.npkts - 1
        fills_window = psn_diff(psn_add(psn, 1), self.una) >= self.config.max_inflight
        every = psn_diff(psn, self.initial_psn) % self.config.ack_every == self.config.ack_every - 1
        packet = Packet(opcode, self.remote_qpn, psn, ack_req=ends or fills_window or every,
                        solicited=ends and wr.opcode == WrOpcode.SEND_WITH_IMM,
                        payload=op.local[index * mtu:(index + 1) * mtu])
        if index == 0 and wr.opcode in (WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM):
            packet.va, packet.rkey, packet.dma_len = wr.remote_addr, wr.rkey, wr.length
        if ends and opcode in HAS_IMM:
            packet.imm = wr.imm
        return packet

    def _on_ack(self, now: int, packet: Packet) -> None:
        kind, psn = packet.syndrome >> 5, packet.psn
        if kind == 0:
            self.counters["acks_received"] += 1
            if -1 <= psn_diff(psn, self.una) and psn_diff(psn, self.high_psn) < 0:
                self._acknowledge(now, psn_add(psn, 1))
            return
        self.counters["naks_received"] += 1
        if not 0 <= psn_diff(psn, self.una) or psn_diff(psn, self.high_psn) >= 0:
            return  # a NAK for something already settled, or never sent
        self._acknowledge(now, psn)
        if self.state != "RTS":
            return
        # An RNR or sequence NAK resends from the first PSN the responder lacks: una now, which is psn unless
        # this NAK skipped READ responses (implied NAK: _acknowledge stopped una at the first missing one).
        # Resuming at psn there would never ask for that response again and would send past una with no
        # retransmission timer running: a hang.
        if kind == 1:
            self.counters["rnr_naks_received"] += 1
            if self.config.rnr_retry != INFINITE_RNR_RETRY:
                if self.rnr_left == 0:
                    self._fail(self._op_at(psn) or self.sq[0], WcStatus.RNR_RETRY_EXC_ERR)
                    return
                self.rnr_left -= 1
            self.rnr_until = now + RNR_TIMER_NS[packet.syndrome & 0x1F]
            self.tx_psn = self.una
            self.rto_deadline = None
        elif packet.syndrome == NAK_PSN_SEQUENCE_ERROR:
            self.tx_psn = self.una  # go back N
        else:
            status = _NAK_STATUS.get(packet.syndrome, WcStatus.REM_OP_ERR)
            self._fail(self._op_at(psn) or self.sq[0], status)

    def _acknowledge(self, now: int, new_una: int) -> None:
        """Everything before ``new_una`` arrived (unless READ responses are missing: implied NAK)."""
        for op in self.sq:
            if psn_diff(new_una, op.first_psn) <= 0:
                break
            missing = psn_add(op.first_psn, op.read_received)
            if op.wr.opcode == WrOpcode.RDMA_READ and psn_diff(new_una, missing) > 0:
                new_una = self.tx_psn = missing  # the responses this ACK skipped are lost: ask again
                break
        if psn_diff(new_una, self.una) <= 0:
            return
        self.una = new_una
        if psn_diff(self.tx_psn, self.una) < 0:
            self.tx_psn = self.una
        self.retries_left = self.config.retry_cnt
        self.rnr_left = self.config.rnr_retry
        while self.sq and self._done(self.sq[0]):
            if self.sq[0].error is not None:
                self._fail(self.sq[0], self.sq[0].error)
                return
            op = self._pop(self.sq[0])
            end = psn_add(op.first_psn, op.npkts)
            if psn_diff(end, self.una) > 0:
                self.una = end
            if op.wr.signaled:
                self._complete(op.wr.wr_id, WcStatus.SUCCESS, _WC_OF[op.wr.opcode], op.wr.length)
        if psn_diff(self.tx_psn, self.una) < 0:
            self.tx_psn = self.una
        self.rto_deadline = now + self.config.timeout_ns if self.una != self.tx_psn else None

    def _rerequest(self, op: _SendOp) -> None:
        """Ask again for a READ's responses from the first missing one (once per gap)."""
        missing = psn_add(op.first_psn, op.read_received)
        if op.rerequested_at != missing and psn_diff(self.tx_psn, missing) > 0:
            op.rerequested_at = missing  # later strays of the old stream are ignored
            self.tx_psn = missing

    def _done(self, op: _SendOp) -> bool:
        if op.error is not None:
            return True  # its turn has come: it fails
        if op.wr.opcode == WrOpcode.RDMA_READ:
            return op.read_received == op.npkts
        return psn_diff(self.una, op.first_psn) >= op.npkts

    def _on_read_response(self, now: int, packet: Packet) -> None:
        op = self._op_at(packet.psn)
        # A WR that failed its local check was never sent (and has no buffer): a response for it answers nothing.
        if op is None or op.wr.opcode != WrOpcode.RDMA_READ or op.error is not None:
            self.counters["duplicate_packets"] += 1
            return
        index = psn_diff(packet.psn, op.first_psn)
        if index < op.read_received:
            self.counters["duplicate_packets"] += 1
            return
        # Responses come in PSN order: one that skips an earlier READ's response is a gap there.
        for earlier in self.sq:
            if earlier is op:
                break
            if earlier.wr.opcode == WrOpcode.RDMA_READ and earlier.read_received < earlier.npkts:
                self._rerequest(earlier)
                return
        if index > op.read_received:
            self._rerequest(op)
            return
        mtu = self.config.mtu
        payload = packet.payload
        if len(payload) != max(0, min(mtu, op.wr.length - index * mtu)):
            self.counters["malformed_packets"] += 1  # not the length this response must have: wait for a good one
            return
        op.local[index * mtu:index * mtu + len(payload)] = payload
        op.read_received += 1
        self._acknowledge(now, psn_add(packet.psn, 1))

    # --- responder ------------------------------------------------------------------------

    def _reply(self, syndrome: int, psn: int) -> None:
        """Queue an ACK or NAK; a newer one replaces an ACK still waiting at the tail."""
        if self.out and isinstance(self.out[-1], _Reply) and self.out[-1].syndrome == SYNDROME_ACK:
            self.out.pop()
        self.out.append(_Reply(psn, syndrome, self.msn))
        if syndrome != SYNDROME_ACK:
            self.counters["naks_sent"] += 1

    def _next_response(self) -> Packet:
        head = self.out[0]
        if isinstance(head, _Reply):
            self.out.pop(0)
            self.counters["packets_sent"] += 1
            if head.syndrome == SYNDROME_ACK:
                self.counters["acks_sent"] += 1
            return Packet(Opcode.ACK, self.remote_qpn, head.psn, syndrome=head.syndrome, msn=head.msn)
        index, mtu = head.next_index, self.config.mtu
        head.next_index += 1
        if head.next_index == head.npkts:
            self.out.pop(0)
        if head.npkts == 1:
            opcode = Opcode.READ_RESPONSE_ONLY
        elif index == 0:
            opcode = Opcode.READ_RESPONSE_FIRST
        else:
            opcode = Opcode.READ_RESPONSE_LAST if index == head.npkts - 1 else Opcode.READ_RESPONSE_MIDDLE
        payload = head.view[index * mtu:(index + 1) * mtu]
        self.counters["packets_sent"] += 1
        self.counters["bytes_sent"] += len(payload)
        return Packet(opcode, self.remote_qpn, psn_add(head.first_psn, index), syndrome=SYNDROME_ACK,
                      msn=self.msn, payload=payload)

    def _on_request(self, packet: Packet) -> None:
        distance = psn_diff(packet.psn, self.epsn)
        if distance > 0:
            if not self.nak_sent:
                self.nak_sent = True
                self.counters["seq_naks_sent"] += 1
                self._reply(NAK_PSN_SEQUENCE_ERROR, self.epsn)
            return
        if distance < 0:
            self.counters["duplicate_packets"] += 1
            if packet.opcode == Opcode.READ_REQUEST:
                self._repeat_read(packet)
            else:
                self._reply(SYNDROME_ACK, psn_add(self.epsn, -1))
            return
        self.nak_sent = False
        if packet.opcode == Opcode.READ_REQUEST:
            self._execute_read(packet)
        elif packet.opcode in _WRITE_STARTS or packet.opcode in _WRITE_CONTINUES:
            self._execute_write(packet)
        else:
            self._execute_send(packet)

    def _accept(self, packet: Packet, message_done: bool) -> None:
        """An in-order request packet was executed: advance, and ACK if asked."""
        self.epsn = psn_add(self.epsn, 1)
        if message_done:
            self.msn = (self.msn + 1) & PSN_MASK
            self.inbound = None
        if packet.ack_req:
            self._reply(SYNDROME_ACK, packet.psn)

    def _responder_error(self, syndrome: int, psn: int) -> None:
        """NAK the request, then the QP is in error (as IB's responder goes).

        What it owed for earlier requests (READ responses, ACKs) still goes
        out first: the requester completes those before it sees the NAK.
        """
        self._reply(syndrome, psn)
        self._enter_error(keep_output=True)

    def _rnr(self, psn: int) -> None:
        self.counters["rnr_naks_sent"] += 1
        self.nak_sent = True  # later packets of the burst are dropped until this PSN comes again
        self._reply(SYNDROME_RNR_NAK | rnr_timer_code(self.config.rnr_timer_ns), psn)

    def _execute_write(self, packet: Packet) -> None:
        opcode, payload = packet.opcode, packet.payload
        needs_recv = opcode in (Opcode.WRITE_ONLY_IMM, Opcode.WRITE_LAST_IMM)
        if opcode in _WRITE_STARTS:
            if self.inbound is not None:
                self._responder_error(NAK_INVALID_REQUEST, packet.psn)
                return
            if needs_recv and not self.rq:
                self._rnr(packet.psn)
                return
            try:
                view = self.memory.remote(packet.rkey, packet.va, packet.dma_len, write=True) if packet.dma_len \
                    else memoryview(bytearray())
            except AccessError:
                self._responder_error(NAK_REMOTE_ACCESS_ERROR, packet.psn)
                return
            inbound = _Inbound("write", view)
        else:
            current = self.inbound
            if current is None or current.kind != "write":
                self._responder_error(NAK_INVALID_REQUEST, packet.psn)
                return
            inbound = current
            if needs_recv and not self.rq:
                self._rnr(packet.psn)
                return
        end = inbound.offset + len(payload)
        last = opcode not in (Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE)
        if end > len(inbound.view) or (last and end != len(inbound.view)):
            self._responder_error(NAK_INVALID_REQUEST, packet.psn)
            return
        inbound.view[inbound.offset:end] = payload
        inbound.offset = end
        self.inbound = inbound
        if needs_recv:
            recv = self.rq.popleft()
            self._complete(recv.wr_id, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, end, packet.imm)
        self._accept(packet, last)

    def _execute_send(self, packet: Packet) -> None:
        opcode, payload = packet.opcode, packet.payload
        if opcode in _SEND_STARTS:
            if self.inbound is not None:
                self._responder_error(NAK_INVALID_REQUEST, packet.psn)
                return
            if not self.rq:
                self._rnr(packet.psn)
                return
            recv = self.rq.popleft()
            try:
                view = self.memory.local(recv.lkey, recv.addr, recv.length, write=True) if recv.length \
                    else memoryview(bytearray())
            except AccessError:
                self._complete(recv.wr_id, WcStatus.LOC_PROT_ERR, WcOpcode.RECV, 0)
                self._responder_error(NAK_REMOTE_OPERATIONAL_ERROR, packet.psn)
                return
            inbound = _Inbound("send", view, recv=recv)
        else:
            current = self.inbound
            if current is None or current.kind != "send" or opcode not in _SEND_CONTINUES:
                self._responder_error(NAK_INVALID_REQUEST, packet.psn)
                return
            inbound = current
        posted = inbound.recv
        assert posted is not None  # a send's inbound is made with its receive
        end = inbound.offset + len(payload)
        if end > len(inbound.view):
            self._complete(posted.wr_id, WcStatus.LOC_LEN_ERR, WcOpcode.RECV, 0)
            self.inbound = None
            self._responder_error(NAK_INVALID_REQUEST, packet.psn)
            return
        inbound.view[inbound.offset:end] = payload
        inbound.offset = end
        self.inbound = inbound
        last = opcode in _MESSAGE_ENDS
        if last:
            self._complete(posted.wr_id, WcStatus.SUCCESS, WcOpcode.RECV, end,
                           packet.imm if opcode in HAS_IMM else None)
        self._accept(packet, last)

    def _execute_read(self, packet: Packet) -> None:
        # More READ requests owed at once than a requester with our settings can have outstanding
        # (max_rd_atomic WRs, a large one asked for in up to a window of chunks): the responder's
        # resources are exhausted (IBTA: invalid request), so a peer cannot make it queue without bound.
        reads = sum(1 for entry in self.out if isinstance(entry, _ReadJob))
        if self.inbound is not None or reads >= self.config.max_rd_atomic + self.config.max_inflight:
            self._responder_error(NAK_INVALID_REQUEST, packet.psn)
            return
        try:
            view = self.memory.remote(packet.rkey, packet.va, packet.dma_len, write=False) if packet.dma_len \
                else memoryview(b"")
        except AccessError:
            self._responder_error(NAK_REMOTE_ACCESS_ERROR, packet.psn)
            return
        npkts = _packets(packet.dma_len, self.config.mtu)
        self.msn = (self.msn + 1) & PSN_MASK
        self.out.append(_ReadJob(packet.psn, 0, npkts, view))
        self.epsn = psn_add(self.epsn, npkts)

    def _repeat_read(self, packet: Packet) -> None:
        """A READ asked again (its responses were lost): answer again from that PSN."""
        kept: list[_Reply | _ReadJob] = []
        for entry in self.out:
            if isinstance(entry, _ReadJob):
                remaining = psn_diff(packet.psn, entry.first_psn)
                if remaining <= entry.next_index:
                    continue  # the re-request supersedes what this job had left
                entry.npkts = min(entry.npkts, remaining)
            elif psn_diff(entry.psn, packet.psn) >= 0:
                continue
            kept.append(entry)
        self.out = kept
        # Never answer PSNs this responder has not accepted as new: a re-request
        # may reach over a later request that was lost.
        npkts = min(_packets(packet.dma_len, self.config.mtu), psn_diff(self.epsn, packet.psn))
        length = min(packet.dma_len, npkts * self.config.mtu)
        try:
            view = self.memory.remote(packet.rkey, packet.va, length, write=False) if length \
                else memoryview(b"")
        except AccessError:
            self._responder_error(NAK_REMOTE_ACCESS_ERROR, packet.psn)
            return
        self.out.append(_ReadJob(packet.psn, 0, npkts, view))

    # --- completions and errors -------------------------------------------------------------

    def _complete(self, wr_id: int, status: WcStatus, opcode: WcOpcode, byte_len: int,
                  imm: int | None = None) -> None:
        self._completions.append(Completion(wr_id, status, opcode, self.qpn, byte_len, imm))

    def _pop(self, op: _SendOp) -> _SendOp:
        self.sq.remove(op)
        if op is self._tx_op:
            self._tx_op = None
        return op

    def _fail(self, op: _SendOp, status: WcStatus) -> None:
        """``op`` failed with ``status``: flush what is before it, complete it, flush the rest.

        Completions stay in posting order, as verbs promises.
        """
        while self.sq and self.sq[0] is not op:
            earlier = self._pop(self.sq[0])
            self._complete(earlier.wr.wr_id, WcStatus.WR_FLUSH_ERR, _WC_OF[earlier.wr.opcode], 0)
        if self.sq:
            self._pop(op)
        self._complete(op.wr.wr_id, status, _WC_OF[op.wr.opcode], 0)
        self._enter_error()

    def _enter_error(self, keep_output: bool = False) -> None:
        self.state = "ERROR"
        self.rto_deadline = self.rnr_until = None
        while self.sq:
            op = self._pop(self.sq[0])
            self._complete(op.wr.wr_id, WcStatus.WR_FLUSH_ERR, _WC_OF[op.wr.opcode], 0)
        if self.inbound is not None and self.inbound.recv is not None:
            self._complete(self.inbound.recv.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0)
        self.inbound = None
        while self.rq:
            self._complete(self.rq.popleft().wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0)
        if not keep_output:  # replies already queued (the NAK that explains the error) still go out
            self.out = [entry for entry in self.out if isinstance(entry, _Reply)]
