"""The emulated RNIC: RC queue pairs on the wire, verbs for applications.

It lives in the host agent's event loop.  Applications in the host's
namespace talk to it over a Unix SEQPACKET socket (the *verbs socket*, one
JSON message per request, memory regions passed as memfd descriptors); see
:mod:`emulator.apps.verbs` for the client side.  Frames go out on a raw
AF_PACKET socket through the host's tc tree, so the kernel paces them at the
link rate and the PFC pause gates hold them back like any other traffic; the
socket's small send buffer is the RNIC's transmit queue.  What the frames are
(RoCEv2, or native IB sent only against the switch's credits) is the link's
business (:mod:`emulator.agents.rnic_links`).

Each application connection is a protection domain: its regions and QPs
live and die with it.  A QP's errors end up as completions, as in verbs;
bad requests (unknown QP, wrong state, bad sizes, anything
:mod:`emulator.agents.verbs_messages` refuses) get an error reply naming the
problem, and the RNIC goes on serving everyone else.  The socket is 0600
and only root or the agent's own user may connect (SO_PEERCRED).  Every
resource an application can make the RNIC hold is bounded: contexts,
QPs, CQs and regions per context, work requests per queue, replies an
application leaves unread (past that it is disconnected).  Frames from the
wire that are no packet the link speaks are dropped and counted
(``drops.malformed`` in the host's stats).
"""

from __future__ import annotations

import bisect
import errno
import json
import os
import random
import select
import socket
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from emulator.agents.base import bind_private, trusted_peer
from emulator.agents.config import HostConfig
from emulator.errors import shown
from emulator.agents.memory import MAX_MR_BYTES, RegionTable
from emulator.agents.verbs_messages import (
    MESSAGE_MAX, U32, U64, BadRequest, decode, integer, ipv4, optional_integer, rows,
)
from emulator._core.mac import ETH_LEN
from emulator._core.roce import CNP_DSCP
from emulator._core.transport import PSN_MASK, Opcode, Packet
from emulator.agents.rnic_links import make_link
from emulator.kernel.packet_socket import kernel_drops, open_packet_socket
from emulator._core.dcqcn import NotificationPoint, ReactionPoint
from emulator._core.fidelity import EgressWire
from emulator._core.rx_pipeline import RxPipeline
from emulator._core.rc import (
    Completion, RcConfig, RcQueuePair, RecvWR, SendWR, WcOpcode, WrOpcode, default_timeout_ns,
)
from emulator._core.rdma_params import PATHS_MTU, ROCE_OVERHEAD

# SO_SNDBUF in link-MTU frames.  The kernel doubles it and charges a frame its whole allocation (about
# twice a 4 KiB frame): about a dozen frames queued in tc, so the agent wakes for EPOLLOUT once a dozen.
SEND_FRAMES = 12
RECV_BUFFER = 4 << 20  # a NIC's receive ring: the agent may be scheduled out for a few ms
RECV_OPCODES = (WcOpcode.RECV, WcOpcode.RECV_RDMA_WITH_IMM)
MAX_CLIENTS = 256  # application connections (contexts) at once
MAX_PER_CLIENT = 1024  # QPs, CQs and memory regions of one context
MAX_QP_WR = 32768  # work requests a send or receive queue holds (mlx5 reports 32768 too)
MAX_OUTBOX = 65536  # replies and completion messages an application may leave unread
MAX_START_AHEAD_NS = 3600 * 10**9  # a timed post starts within an hour
# Rows of the DCQCN rate trace one RNIC keeps (about 0.7 MiB); later changes are only counted.  A hundred
# hosts' traces stay within what `report` reads of one CSV (results.MAX_CSV_ROWS).
MAX_RATE_ROWS = 10_000
RATE_HEADER = "time_ns,host,qpn,remote,rate_bps,target_bps,alpha,event\n"
SEND_WR_COLUMNS = (("wr_id", 0, U64), ("opcode", min(WrOpcode), max(WrOpcode)), ("addr", 0, U64),
                   ("length", 0, U32), ("lkey", 0, U32), ("remote_addr", 0, U64), ("rkey", 0, U32),
                   ("imm", 0, U32), ("signaled", 0, 1))
RECV_WR_COLUMNS = (("wr_id", 0, U64), ("addr", 0, U64), ("length", 0, U32), ("lkey", 0, U32))
# connect's optional QP attributes and their ranges: IB's local ACK timeout spans 4.096 us x 2^(1..31).
QP_OPTIONS = {"timeout_ns": (8192, 4096 << 31), "retry_cnt": (0, 7), "rnr_retry": (0, 7), "max_inflight": (1, 4096)}


@dataclass
class QpEntry:
    """A QP of an application: the model once connected, where its completions go."""

    qpn: int
    owner: int
    send_cq: int
    recv_cq: int
    initial_psn: int
    qp: RcQueuePair | None = None
    framer: Any = None  # encodes this QP's packets for the link (RoCEv2 or native IB)
    rp: ReactionPoint | None = None  # DCQCN's rate limiter of this QP, when the fabric runs it
    cnp_framer: Any = None  # encodes the CNPs this QP's peer is sent (DCQCN's notification point)
    remote_ip: str = ""
    early_recvs: list[RecvWR] = field(default_factory=list)
    deferred: int = 0  # WRs posted with a start time and not yet handed to the transport
    released_ns: int = 0  # when the last post with a start time was handed to the transport


class Client:
    """One application connection: a protection domain and its CQs."""

    def __init__(self, conn: socket.socket, pd: int) -> None:
        self.conn = conn
        self.pd = pd
        self.cqs: set[int] = set()
        self.outbox: deque[bytes] = deque()


class Rnic:
    """The RNIC of one host: the verbs server, the RoCE socket and the QPs.

    ``watch(fd, mask, handler)``, ``modify(fd, mask)`` and ``unwatch(fd)``
    are the host agent's epoll registration; the agent calls :meth:`pump`
    and :meth:`deliver` after every batch of events and :meth:`on_timer`
    when :meth:`next_deadline` passes.  The RNIC reads no clock: every
    time it uses is the ``now`` its caller passes.
    """

    def __init__(self, config: HostConfig, watch: Callable, modify: Callable, unwatch: Callable) -> None:
        self.ifname = config.ifname
        self.mac, self.gateway_mac, self.ip = config.mac, config.peer_mac, config.ip
        self.link_mtu = config.mtu
        self.rate_bps = config.rate_bps
        self._watch, self._modify, self._unwatch = watch, modify, unwatch
        self.random = random.Random(config.seed)
        self.regions = RegionTable(self.random.randrange(1 << 30))
        self.qps: dict[int, QpEntry] = {}
        self.clients: dict[int, Client] = {}
        self._next_qpn = 0x11
        self._next_pd = 1
        self._next_cq = 1
        self._blocked: bytes | None = None
        self._served: int | None = None  # the QP whose packet went last: the turn goes on after it
        self._deferred: list[tuple[int, int, list[SendWR]]] = []  # (start ns, qpn, WRs), by start
        self.counters = {"frames_sent": 0, "frames_received": 0, "bytes_sent": 0, "icrc_errors": 0,
                         "unknown_qp": 0, "send_blocked": 0, "credit_waits": 0, "rx_kernel_drops": 0,
                         "bad_requests": 0, "clients_refused": 0, "clients_dropped": 0,
                         "cnps_sent": 0, "cnps_received": 0, "paced_waits": 0, "rx_buffer_drops": 0}
        # DCQCN (RoCE only: the IB fabric's flow control is its credits): the notification point for the
        # QPs' CE-marked arrivals, a reaction point per QP, the rate trace.
        self.cc = config.cc if config.ib is None else None
        self.np = NotificationPoint(self.cc.cnp_interval_ns) if self.cc is not None else None
        self.name = config.name
        self.rates_file = config.rates_file
        self.rate_rows: list[str] = []
        self.rate_rows_dropped = 0
        self._paced: set[int] = set()  # QPs with data held back by their rate limiter
        self.receiving = True  # False: the receive pipeline is stalled (a fault), frames stay in the kernel
        self._writable_wanted = False
        self.slow: RxPipeline | None = None  # the slow-receiver fault: frames wait in a NIC buffer drained slowly
        self.pause_request: Callable[[bool], None] | None = None  # the host's PFC: assert (True) or release
        self.link_waiting = False
        self._control: deque[bytes] = deque()
        self.closed_qp_counters: dict[str, int] = {}
        # Fidelity: a virtual wire at the link's rate, fed with each frame the kernel takes.  While the
        # RNIC had a frame ready and the kernel's queue was full (``backlogged``), the wire should never
        # idle; if it did, the agent came back to it late.  A PFC hold idles the wire by right (wire_hold).
        self.monitor = config.monitor
        self.wire = EgressWire()
        self.wire_end = 0
        self.backlogged = False
        self._held_since: int | None = None
        self.shortest_timeout_ns = 0  # of the QPs connected so far: their timers' lateness is judged against it

        self.link = make_link(config)
        self.sock = open_packet_socket(self.ifname, self.link.ethertype, SEND_FRAMES * (ETH_LEN + self.link_mtu),
                                       RECV_BUFFER, self.link.prepare)
        self._rx = bytearray(self.link_mtu + 64)
        watch(self.sock.fileno(), select.EPOLLIN, self._on_socket)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        bind_private(self.server, config.verbs)
        self.server.listen(16)
        self.server.setblocking(False)
        watch(self.server.fileno(), select.EPOLLIN, self._on_accept)

    # --- the wire ------------------------------------------------------------------

    def _arm(self, writable: bool) -> None:
        """Watch the data socket for frames (unless stalled) and, when ``writable``, for room to send."""
        self._writable_wanted = writable
        self._modify(self.sock.fileno(), (select.EPOLLIN if self.receiving else 0) | (select.EPOLLOUT if writable else 0))

    def stall(self, stalled: bool) -> None:
        """Stop (or restart) taking frames from the wire: a NIC whose receive pipeline hangs."""
        self.receiving = not stalled
        self._arm(self._writable_wanted)

    def _on_socket(self, _fd: int, mask: int, now: int) -> None:
        if mask & select.EPOLLIN:
            self._receive(now)
        if mask & select.EPOLLOUT:
            self._on_writable(now)

    def _receive(self, now: int) -> None:
        rx = self._rx
        view = memoryview(rx)
        for _ in range(256):  # then let other sockets and timers have a turn
            try:
                size = self.sock.recv_into(rx)
            except BlockingIOError:
                return
            if self.slow is None:
                self._process(now, view[:size])
            else:  # the slow receiver: the frame waits its turn in the NIC's buffer (a copy: rx is reused)
                self._request_pause(self.slow.arrive(now, bytes(view[:size]), size))

    def set_slow(self, now: int, pipeline: RxPipeline | None) -> None:
        """Start (or end, with None) the slow-receiver fault; ending it takes every held frame at once.  A NIC
        already slow stays as it is (the frames it holds keep their turn)."""
        if pipeline is None and self.slow is not None:
            self.counters["rx_buffer_drops"] += self.slow.dropped
            held, paused, self.slow = self.slow.drain(), self.slow.paused, None
            for frame in held:
                self._process(now, memoryview(frame))
            if paused:
                self._request_pause(False)
        elif pipeline is not None and self.slow is None:
            self.slow = pipeline

    def _take_slow(self, now: int) -> None:
        if self.slow is not None:
            frames, change = self.slow.take(now)
            for frame in frames:
                self._process(now, memoryview(frame))
            self._request_pause(change)

    def _request_pause(self, change: bool | None) -> None:
        if change is not None and self.pause_request is not None:
            self.pause_request(change)

    def _process(self, now: int, frame: memoryview) -> None:
        """One frame from the wire: to its QP, or dropped and counted."""
        accepted = self.link.accept(now, frame)
        if accepted is None:
            return
        packet, source, intact = accepted
        self.counters["frames_received"] += 1
        if not intact:
            self.counters["icrc_errors"] += 1
            return
        entry = self.qps.get(packet.dest_qp)
        if entry is None or entry.qp is None or source != entry.remote_ip:
            self.counters["unknown_qp"] += 1
            return
        if packet.opcode == Opcode.CNP:
            self.counters["cnps_received"] += 1
            if entry.rp is not None:
                entry.rp.on_cnp(now)
                self._trace(now, entry, "cnp")
            return
        if packet.ecn_ce and self.np is not None and self.np.on_ce(now, entry.qpn):
            self._control.append(entry.cnp_framer.encode(Packet(Opcode.CNP, entry.qp.remote_qpn, 0)))
            self.counters["cnps_sent"] += 1
        entry.qp.receive(now, packet)

    def _on_writable(self, now: int) -> None:
        self._arm(writable=False)
        if self._blocked is not None and not self.link_waiting:  # admitted already: it goes first
            frame, self._blocked = self._blocked, None
            if not self._send(frame, now, admitted=True):
                return
        if self._flush_control(now):
            self._retry(now)

    def _flush_control(self, now: int) -> bool:
        """Send queued link control packets; False (and wait for EPOLLOUT) if the queue is full."""
        while self._control:
            try:
                self.sock.send(self._control[0])
            except BlockingIOError:
                self.backlogged = True
                self._arm(writable=True)
                return False
            self._departed(now, len(self._control.popleft()))
        return True

    def _departed(self, now: int, size: int) -> None:
        """The kernel took a frame of ``size`` bytes at ``now``: the virtual wire carries it when it is free."""
        if not self.monitor:
            return
        wire_end, frame_ns = self.wire_end, size * 8_000_000_000 // self.rate_bps
        start = now if now > wire_end else wire_end
        self.wire.departed(start, wire_end if self.backlogged else start, frame_ns)
        self.wire_end = start + frame_ns

    def wire_hold(self, now: int, held: bool) -> None:
        """PFC holds the host's queues from ``now`` (``held``) or lets them go: the frames queued then leave after."""
        if held and self._held_since is None:
            self._held_since = now
        elif not held and self._held_since is not None:
            self.wire_end = now + max(0, self.wire_end - self._held_since)
            self._held_since = None

    def _retry(self, now: int) -> None:
        """Send the frame that waited (for the kernel queue or for credit), then the rest."""
        frame, self._blocked = self._blocked, None
        if frame is not None and not self._send(frame, now, admitted=not self.link_waiting):
            return
        self.transmit(now)

    def _send(self, frame: bytes, now: int, admitted: bool = False) -> bool:
        """Hand one frame to the kernel; False (and keep it) when the queue or the credit is exhausted."""
        self.link_waiting = False
        if not admitted and not self.link.admit(frame):
            self._blocked = frame
            self.link_waiting = True  # the next credit update retries it
            self.backlogged = False  # flow control idles the wire by right
            self.counters["credit_waits"] += 1
            return False
        try:
            self.sock.send(frame)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.ENOBUFS):
                raise
            self._blocked = frame
            self.backlogged = True
            self.counters["send_blocked"] += 1
            self._arm(writable=True)
            return False
        self.counters["frames_sent"] += 1
        self.counters["bytes_sent"] += len(frame)
        self._departed(now, len(frame))
        return True

    def transmit(self, now: int) -> None:
        """Pull packets from the QPs, one each in turn, until the kernel queue is full.

        The turn goes on from the QP served last, across calls: each call
        starts when the kernel's queue has room again, often for one frame,
        and a turn begun afresh each time gave every such slot to the QP
        made first (the simulated RNIC keeps its ready QPs in turn order too).
        """
        if self._blocked is not None:
            return
        entries = [e for e in self.qps.values() if e.qp is not None]
        for i, entry in enumerate(entries):
            if entry.qpn == self._served:
                entries = entries[i + 1:] + entries[:i + 1]
                break
        while entries:
            ready = []
            for entry in entries:
                rp = entry.rp
                if rp is None or rp.may_send(now):
                    packet = entry.qp.next_packet(now)
                else:  # held to its rate: its ACKs may go, and it is woken when its next frame may
                    packet = entry.qp.next_packet(now, data=False)
                    if packet is None and entry.qpn not in self._paced and entry.qp.has_data():
                        self._paced.add(entry.qpn)
                        self.counters["paced_waits"] += 1
                if packet is None:
                    continue
                self._served = entry.qpn
                frame = entry.framer.encode(packet)
                if rp is not None and packet.opcode != Opcode.ACK:
                    before = rp.rate_bps
                    rp.on_sent(now, len(frame))
                    if rp.rate_bps != before:
                        self._trace(now, entry, "bytes")
                if not self._send(frame, now):
                    return
                ready.append(entry)
            entries = ready
        self.backlogged = False  # every QP is out of packets to send: the wire may idle

    def next_deadline(self) -> tuple[int, str] | None:
        """The earliest deadline and its kind of timer (agents.base.TIMER_KINDS), or None."""
        deadlines = [(d, "timeout") for e in self.qps.values()
                     if e.qp is not None and (d := e.qp.next_deadline()) is not None]
        if self._deferred:
            deadlines.append((self._deferred[0][0], "start"))
        if (link := self.link.next_deadline()) is not None:
            deadlines.append((link, "link"))
        for qpn in self._paced:
            deadlines.append((self.qps[qpn].rp.ready_at, "link"))
        if self.slow is not None and (taken := self.slow.next_deadline()) is not None:
            deadlines.append((taken, "link"))
        if self.cc is not None:
            deadlines += [(d, "link") for e in self.qps.values()
                          if e.rp is not None and (d := e.rp.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def next_start(self) -> int | None:
        """The start time of the earliest timed post not yet released, or None."""
        return self._deferred[0][0] if self._deferred else None

    def release(self, now: int) -> bool:
        """Hand the timed posts whose start time has come by ``now`` to their QPs; whether there were any.

        ``now`` is the released time the QPs report (``released_ns``).
        """
        released = False
        while self._deferred and self._deferred[0][0] <= now:
            _start, qpn, wrs = self._deferred.pop(0)
            entry = self.qps[qpn]  # a destroyed QP's posts left with it
            entry.deferred -= len(wrs)
            entry.released_ns = now
            for wr in wrs:
                entry.qp.post_send(wr)
            released = True
        return released

    def on_timer(self, now: int) -> None:
        self.release(now)
        self._take_slow(now)
        self._paced = {qpn for qpn in self._paced if self.qps[qpn].rp.ready_at > now}  # the rest go in transmit
        for entry in list(self.qps.values()):
            if entry.qp is not None and (deadline := entry.qp.next_deadline()) is not None and deadline <= now:
                entry.qp.on_timer(now)
            rp = entry.rp
            if rp is not None and (deadline := rp.next_deadline()) is not None and deadline <= now:
                before = rp.rate_bps
                rp.on_timer(now)
                if rp.rate_bps != before:
                    self._trace(now, entry, "timer")

    def _trace(self, now: int, entry: QpEntry, event: str) -> None:
        """A row of the rate trace: QP ``entry``'s DCQCN state after ``event`` at ``now``."""
        if len(self.rate_rows) >= MAX_RATE_ROWS:
            self.rate_rows_dropped += 1
            return
        rp = entry.rp
        self.rate_rows.append(f"{now},{self.name},{entry.qpn},{entry.remote_ip},{rp.rate_bps},{rp.target_bps},"
                              f"{rp.alpha:.6f},{event}\n")

    def pump(self, now: int) -> None:
        """After every batch of events: send what can go."""
        self._control.extend(self.link.control_frames(now))  # IB credit updates, ahead of new data
        if self._blocked is not None and not self.link_waiting:
            pass  # a frame already counted as sent waits for the kernel queue: no credit update may overtake it
        elif self._flush_control(now):
            if self.link_waiting:
                self._retry(now)
            else:
                self.transmit(now)

    def deliver(self, now: int) -> None:
        """Send the QPs' new completions to their applications, time-stamped ``now``.

        ``now`` is the completion's time stamp, as a NIC's CQE carries the
        time it was written: the caller passes the time of delivery.
        """
        for entry in self.qps.values():
            if entry.qp is None:
                continue
            completions = entry.qp.poll_completions()
            if completions:
                self._deliver(entry, completions, now)

    def _deliver(self, entry: QpEntry, completions: list[Completion], stamp: int) -> None:
        client = self.clients.get(entry.owner)
        if client is None:
            return
        by_cq: dict[int, list[list[Any]]] = {}
        for c in completions:
            cq = entry.recv_cq if c.opcode in RECV_OPCODES else entry.send_cq
            by_cq.setdefault(cq, []).append([c.wr_id, int(c.status), int(c.opcode), c.qp_num, c.byte_len, c.imm,
                                             stamp])
        for cq, wcs in by_cq.items():
            self._post_message(client, {"cq": cq, "wc": wcs})

    # --- the verbs socket ------------------------------------------------------------

    def _on_accept(self, _fd: int, _mask: int, _now: int) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except BlockingIOError:
                return
            if not trusted_peer(conn) or len(self.clients) >= MAX_CLIENTS:
                self.counters["clients_refused"] += 1
                conn.close()
                continue
            conn.setblocking(False)
            client = Client(conn, self._next_pd)
            self._next_pd += 1
            self.clients[client.pd] = client
            self._watch(conn.fileno(), select.EPOLLIN, lambda fd, mask, now, c=client: self._on_client(c, mask, now))

    def _on_client(self, client: Client, mask: int, now: int) -> None:
        if mask & select.EPOLLOUT:
            self._flush(client)
        if not mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            return
        for _ in range(64):  # then let the wire have a turn
            if client.pd not in self.clients:
                return
            try:
                data, fds, flags, _addr = socket.recv_fds(client.conn, MESSAGE_MAX + 1, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds, flags = b"", [], 0
            try:
                if not data:
                    self._drop_client(client)
                    return
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise BadRequest(f"request over {MESSAGE_MAX} bytes or with more than one descriptor")
                reply = self._handle(client, decode(data), fds, now)
            except ValueError as err:  # BadRequest, and the models' own refusals (VerbsError on the client)
                reply = {"error": str(err)}
                self.counters["bad_requests"] += 1
            finally:
                for fd in fds:
                    os.close(fd)
            self._post_message(client, reply)

    def _post_message(self, client: Client, message: dict[str, Any]) -> None:
        if len(client.outbox) >= MAX_OUTBOX:  # an application that reads none of its completions: let it go
            self.counters["clients_dropped"] += 1
            self._drop_client(client)
            return
        client.outbox.append(json.dumps(message, separators=(",", ":")).encode())
        self._flush(client)

    def _flush(self, client: Client) -> None:
        while client.outbox:
            try:
                client.conn.send(client.outbox[0])
            except BlockingIOError:
                self._modify(client.conn.fileno(), select.EPOLLIN | select.EPOLLOUT)
                return
            except OSError:
                self._drop_client(client)
                return
            client.outbox.popleft()
        if client.pd in self.clients:
            self._modify(client.conn.fileno(), select.EPOLLIN)

    def _drop_client(self, client: Client) -> None:
        """The application closed or died: its QPs and regions go with it."""
        if self.clients.pop(client.pd, None) is None:
            return
        for qpn in [q for q, e in self.qps.items() if e.owner == client.pd]:
            self._destroy_qp(qpn)
        self.regions.release_owner(client.pd)
        self._unwatch(client.conn.fileno())
        client.conn.close()

    def _destroy_qp(self, qpn: int) -> None:
        entry = self.qps.pop(qpn)
        self._paced.discard(qpn)
        if self.np is not None:
            self.np.forget(qpn)
        self._deferred = [item for item in self._deferred if item[1] != qpn]
        if entry.qp is not None:
            for key, value in entry.qp.counters.items():
                self.closed_qp_counters[key] = self.closed_qp_counters.get(key, 0) + value

    def _entry(self, client: Client, request: dict[str, Any]) -> QpEntry:
        qpn = integer(request, "qpn", 0, PSN_MASK)
        entry = self.qps.get(qpn)
        if entry is None or entry.owner != client.pd:
            raise BadRequest(f"no QP {qpn} in this protection domain")
        return entry

    def _handle(self, client: Client, request: dict[str, Any], fds: list[int], now: int) -> dict[str, Any]:
        op = request["op"]
        if op == "query_device":
            return {"gid": self.ip, "mac": self.mac, "link_mtu": self.link_mtu, "max_mr_size": MAX_MR_BYTES,
                    "max_qp_wr": MAX_QP_WR, "max_mtu": max(m for m in PATHS_MTU if m + ROCE_OVERHEAD <= self.link_mtu)}
        if op == "reg_mr":
            if len(fds) != 1:
                raise BadRequest("reg_mr needs the region's memfd")
            if sum(1 for r in self.regions.regions.values() if r.owner == client.pd) >= MAX_PER_CLIENT:
                raise BadRequest(f"at most {MAX_PER_CLIENT} memory regions per context")
            region = self.regions.register(client.pd, integer(request, "addr", 0, U64),
                                           integer(request, "length", 0, U64),  # the table says what it takes
                                           integer(request, "access", 0, U32), fd=fds[0])
            return {"lkey": region.key, "rkey": region.key}
        if op == "dereg_mr":
            self.regions.deregister(integer(request, "key", 0, U32), client.pd)
            return {}
        if op == "create_cq":
            if len(client.cqs) >= MAX_PER_CLIENT:
                raise BadRequest(f"at most {MAX_PER_CLIENT} CQs per context")
            cq = self._next_cq
            self._next_cq += 1
            client.cqs.add(cq)
            return {"cq": cq}
        if op == "create_qp":
            cqs = [integer(request, key, 0, U32) for key in ("send_cq", "recv_cq")]
            for key, cq in zip(("send_cq", "recv_cq"), cqs):
                if cq not in client.cqs:
                    raise BadRequest(f"{key} {cq} is not a CQ of this context")
            if sum(1 for e in self.qps.values() if e.owner == client.pd) >= MAX_PER_CLIENT:
                raise BadRequest(f"at most {MAX_PER_CLIENT} QPs per context")
            if self._next_qpn > PSN_MASK:
                raise BadRequest("this RNIC has handed out every QP number")
            qpn = self._next_qpn
            self._next_qpn += 1
            entry = QpEntry(qpn, client.pd, cqs[0], cqs[1], self.random.randrange(PSN_MASK + 1))
            self.qps[qpn] = entry
            return {"qpn": qpn, "psn": entry.initial_psn}
        if op == "connect":
            return self._connect(self._entry(client, request), request)
        if op == "post_send":
            return self._post_send(self._entry(client, request), request, now)
        if op == "post_recv":
            entry = self._entry(client, request)
            wrs = [RecvWR(*row) for row in rows(request, "wrs", RECV_WR_COLUMNS)]
            queued = len(entry.early_recvs) + (len(entry.qp.rq) if entry.qp is not None else 0)
            if queued + len(wrs) > MAX_QP_WR:
                raise BadRequest(f"receive queue of QP {entry.qpn} full ({MAX_QP_WR} work requests)")
            if entry.qp is None:
                entry.early_recvs.extend(wrs)
            else:
                for wr in wrs:
                    entry.qp.post_recv(wr)
            return {}
        if op == "query_qp":
            entry = self._entry(client, request)
            if entry.qp is None:
                return {"state": "INIT", "counters": {}}
            return {"state": entry.qp.state, "counters": dict(entry.qp.counters), "released_ns": entry.released_ns}
        if op == "destroy_qp":
            self._destroy_qp(self._entry(client, request).qpn)
            return {}
        raise BadRequest(f"unknown verbs request {shown(op)}")

    def _post_send(self, entry: QpEntry, request: dict[str, Any], now: int) -> dict[str, Any]:
        if entry.qp is None:
            raise BadRequest(f"QP {entry.qpn} is not connected (post_send needs RTS)")
        wrs = [SendWR(wr_id, WrOpcode(opcode), *rest[:6], bool(rest[6]))
               for wr_id, opcode, *rest in rows(request, "wrs", SEND_WR_COLUMNS)]
        at = optional_integer(request, "at", 0, now + MAX_START_AHEAD_NS)
        if len(entry.qp.sq) + entry.deferred + len(wrs) > MAX_QP_WR:
            raise BadRequest(f"send queue of QP {entry.qpn} full ({MAX_QP_WR} work requests)")
        if at is not None:  # a synchronized start: released by our timer (at once if already past)
            entry.deferred += len(wrs)
            bisect.insort(self._deferred, (at, entry.qpn, wrs), key=lambda item: item[0])
        else:
            for wr in wrs:
                entry.qp.post_send(wr)
        return {}

    def _connect(self, entry: QpEntry, request: dict[str, Any]) -> dict[str, Any]:
        if entry.qp is not None:
            raise BadRequest(f"QP {entry.qpn} is already connected")
        mtu = integer(request, "mtu", 0, U32) if "mtu" in request else 1024
        if mtu not in PATHS_MTU:
            raise BadRequest(f"path MTU {mtu}: choose one of {', '.join(map(str, PATHS_MTU))}")
        if mtu + ROCE_OVERHEAD > self.link_mtu:
            raise BadRequest(f"path MTU {mtu} does not fit the link MTU {self.link_mtu} (needs {mtu + ROCE_OVERHEAD}); "
                             f"build the fabric with --link mtu={mtu + ROCE_OVERHEAD} or more")
        remote_qpn = integer(request, "remote_qpn", 1, PSN_MASK)
        remote_psn = integer(request, "remote_psn", 0, PSN_MASK)
        remote_ip = ipv4(request, "remote_gid")
        options = {key: value for key, (low, high) in QP_OPTIONS.items()
                   if (value := optional_integer(request, key, low, high)) is not None}
        options.setdefault("timeout_ns", default_timeout_ns(self.rate_bps, mtu, options.get("max_inflight",
                                                                                          RcConfig.max_inflight)))
        framer = self.link.framer(entry.qpn, remote_qpn, remote_ip, mtu)
        timeout = options["timeout_ns"]
        self.shortest_timeout_ns = min(self.shortest_timeout_ns or timeout, timeout)
        qp = RcQueuePair(entry.qpn, self.regions.domain(entry.owner), RcConfig(mtu=mtu, max_msg=MAX_MR_BYTES, **options),
                         entry.initial_psn)
        qp.connect(remote_qpn, remote_psn)
        entry.qp, entry.remote_ip, entry.framer = qp, remote_ip, framer
        if self.cc is not None:
            entry.rp = ReactionPoint(self.cc, self.rate_bps)
            entry.cnp_framer = self.link.framer(entry.qpn, remote_qpn, remote_ip, mtu, dscp=CNP_DSCP)
        for wr in entry.early_recvs:
            qp.post_recv(wr)
        entry.early_recvs.clear()
        return {}

    # --- counters and exit -------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        self.counters["rx_kernel_drops"] += kernel_drops(self.sock)
        totals = dict(self.closed_qp_counters)
        for entry in self.qps.values():
            if entry.qp is not None:
                for key, value in entry.qp.counters.items():
                    totals[key] = totals.get(key, 0) + value
        cc: dict[str, Any] = {"name": "dcqcn" if self.cc is not None else "none"}
        if self.cc is not None:
            cc["ce_received"] = self.np.ce_received
            cc["rate_trace_rows"] = len(self.rate_rows)
            cc["rate_trace_dropped"] = self.rate_rows_dropped
            cc["limited_qps"] = sum(1 for e in self.qps.values() if e.rp is not None and e.rp.limited)
        return {**self.counters, "qps": len(self.qps), "regions": len(self.regions.regions),
                "applications": len(self.clients), "transport": totals, "link": self.link.stats(), "cc": cc}

    def malformed(self) -> int:
        """Frames from the wire that were no packet this RNIC's link speaks (dropped)."""
        return self.link.malformed

    def close(self) -> None:
        if self.rates_file is not None and self.cc is not None:
            with open(self.rates_file, "w") as f:
                f.write(RATE_HEADER)
                f.writelines(self.rate_rows)
        for client in list(self.clients.values()):
            self._drop_client(client)
        self.server.close()
        self.link.close()
        self.sock.close()
