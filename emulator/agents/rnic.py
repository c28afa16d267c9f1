"""The verbs server of a host's RNIC: applications' verbs over the compiled RNIC.

It lives in the host agent's event loop.  Applications in the host's
namespace talk to it over a Unix SEQPACKET socket (the *verbs socket*, one
JSON message per request, memory regions passed as memfd descriptors); see
:mod:`emulator.apps.verbs` for the client side.  The RNIC itself, every
frame it sends and receives, its QPs and the memory they reach, is compiled
(``emulator._core.dataplane.Nic``, crates/fabric-core's ``agent::nic``): it
sends RoCEv2 (or native IB, against the switch's credits) through the
host's tc tree, so the kernel paces its frames at the link rate and the PFC
pause gates hold them back like any other traffic, and the loop serves its
socket without Python.  This module keeps what applications see: contexts,
protection domains, CQ numbers, QP numbers before they connect, timed posts,
and the completions the RNIC hands back, sent to their CQs.

Each application connection is a protection domain: its regions and QPs
live and die with it.  A QP's errors end up as completions, as in verbs;
bad requests (unknown QP, wrong state, bad sizes, anything
:mod:`emulator.agents.verbs_messages` refuses) get an error reply naming the
problem, and the RNIC goes on serving everyone else.  The socket is 0600
and only root or the agent's own user may connect (SO_PEERCRED).  Every
resource an application can make the RNIC hold is bounded: contexts,
QPs, CQs and regions per context, work requests per queue, replies an
application leaves unread (past that it is disconnected).  Frames from the
wire that are no packet the link speaks are dropped and counted by the
compiled RNIC (``drops.malformed`` in the host's stats).
"""

from __future__ import annotations

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
from emulator.agents.memory import MAX_MR_BYTES, register
from emulator.agents.verbs_messages import (
    MESSAGE_MAX, U32, U64, BadRequest, decode, integer, ipv4, optional_integer, quiet, rows,
)
from emulator._core.dataplane import Nic
from emulator._core.transport import PSN_MASK
from emulator._core.rc import RcConfig, WcOpcode, WrOpcode, default_timeout_ns
from emulator._core.rdma_params import PATHS_MTU, ROCE_OVERHEAD

RECV_OPCODES = (WcOpcode.RECV, WcOpcode.RECV_RDMA_WITH_IMM)
MAX_CLIENTS = 256  # application connections (contexts) at once
MAX_PER_CLIENT = 1024  # QPs, CQs and memory regions of one context
MAX_QP_WR = 32768  # work requests a send or receive queue holds (mlx5 reports 32768 too)
MAX_OUTBOX = 65536  # replies and completion messages an application may leave unread
MAX_START_AHEAD_NS = 3600 * 10**9  # a timed post starts within an hour
RATE_HEADER = "time_ns,host,qpn,remote,rate_bps,target_bps,alpha,event\n"
SEND_WR_COLUMNS = (("wr_id", 0, U64), ("opcode", min(WrOpcode), max(WrOpcode)), ("addr", 0, U64),
                   ("length", 0, U32), ("lkey", 0, U32), ("remote_addr", 0, U64), ("rkey", 0, U32),
                   ("imm", 0, U32), ("signaled", 0, 1))
RECV_WR_COLUMNS = (("wr_id", 0, U64), ("addr", 0, U64), ("length", 0, U32), ("lkey", 0, U32))
# connect's optional QP attributes and their ranges: IB's local ACK timeout spans 4.096 us x 2^(1..31).
QP_OPTIONS = {"timeout_ns": (8192, 4096 << 31), "retry_cnt": (0, 7), "rnr_retry": (0, 7), "max_inflight": (1, 4096)}


@dataclass
class QpEntry:
    """A QP of an application: where its completions go; the compiled RNIC has it once connected."""

    qpn: int
    owner: int
    send_cq: int
    recv_cq: int
    initial_psn: int
    connected: bool = False
    early_recvs: list[tuple[int, ...]] = field(default_factory=list)


class Client:
    """One application connection: a protection domain and its CQs."""

    def __init__(self, conn: socket.socket, pd: int) -> None:
        self.conn = conn
        self.pd = pd
        self.cqs: set[int] = set()
        self.outbox: deque[bytes] = deque()


class Rnic:
    """The verbs server of one host's RNIC ``nic``.

    ``watch(fd, mask, handler)``, ``modify(fd, mask)`` and ``unwatch(fd)``
    are the host agent's epoll registration; the agent calls :meth:`deliver`
    after every batch of events.  A post with a start time is the compiled
    RNIC's to release, on its own deadline (``Nic.post_send_at``).  It reads
    no clock: every time it uses is the ``now`` its caller passes.
    """

    def __init__(self, config: HostConfig, nic: Nic, watch: Callable, modify: Callable, unwatch: Callable) -> None:
        self.nic = nic
        self.link_mtu = config.mtu
        self.rate_bps = config.rate_bps
        self.mac, self.ip = config.mac, config.ip
        self._watch, self._modify, self._unwatch = watch, modify, unwatch
        self.random = random.Random(config.seed)
        self.qps: dict[int, QpEntry] = {}
        self.clients: dict[int, Client] = {}
        self._next_qpn = 0x11
        self._next_pd = 1
        self._next_cq = 1
        self.counters = {"bad_requests": 0, "clients_refused": 0, "clients_dropped": 0}
        self.rates_file = config.rates_file if config.cc is not None and config.ib is None else None
        # adaptive routing reorders: requests held past a gap, and how long (RcConfig)
        self.reorder = {"reorder": config.ib.reorder, "reorder_wait_ns": config.ib.reorder_wait_ns} \
            if config.ib is not None else {}
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        bind_private(self.server, config.verbs)
        self.server.listen(16)
        self.server.setblocking(False)
        watch(self.server.fileno(), select.EPOLLIN, self._on_accept)

    # --- timed posts and completions ------------------------------------------------------

    def deliver(self, now: int) -> None:
        """Send the QPs' new completions to their applications, time-stamped ``now``.

        ``now`` is the completion's time stamp, as a NIC's CQE carries the
        time it was written: the caller passes the time of delivery.
        """
        by_cq: dict[tuple[int, int], list[list[Any]]] = {}
        for qp_num, wr_id, status, opcode, byte_len, imm in self.nic.completions():
            entry = self.qps.get(qp_num)
            if entry is None:
                continue
            cq = entry.recv_cq if opcode in RECV_OPCODES else entry.send_cq
            by_cq.setdefault((entry.owner, cq), []).append([wr_id, status, opcode, qp_num, byte_len, imm, now])
        for (owner, cq), wcs in by_cq.items():
            client = self.clients.get(owner)
            if client is not None:
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
            silent = False  # a quiet request is answered only if it fails, with its error marked quiet
            try:
                if not data:
                    self._drop_client(client)
                    return
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise BadRequest(f"request over {MESSAGE_MAX} bytes or with more than one descriptor")
                request = decode(data)
                silent = quiet(request)
                reply = self._handle(client, request, fds, now)
            except ValueError as err:  # BadRequest, and the models' own refusals (VerbsError on the client)
                reply = {"error": str(err), "quiet": True} if silent else {"error": str(err)}
                self.counters["bad_requests"] += 1
            finally:
                for fd in fds:
                    os.close(fd)
            if not silent or "error" in reply:
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
        self.nic.release_owner(client.pd)
        self._unwatch(client.conn.fileno())
        client.conn.close()

    def _destroy_qp(self, qpn: int) -> None:
        del self.qps[qpn]
        self.nic.destroy_qp(qpn)  # its counters stay in the RNIC's totals

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
            if self.nic.regions(client.pd) >= MAX_PER_CLIENT:
                raise BadRequest(f"at most {MAX_PER_CLIENT} memory regions per context")
            key = register(self.nic, client.pd, integer(request, "addr", 0, U64), integer(request, "length", 0, U64),
                           integer(request, "access", 0, U32), fds[0])
            return {"lkey": key, "rkey": key}
        if op == "dereg_mr":
            self.nic.deregister(integer(request, "key", 0, U32), client.pd)
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
            wrs = [tuple(row) for row in rows(request, "wrs", RECV_WR_COLUMNS)]
            lengths = self.nic.queue_lengths(entry.qpn)
            queued = len(entry.early_recvs) + (lengths[1] if lengths is not None else 0)
            if queued + len(wrs) > MAX_QP_WR:
                raise BadRequest(f"receive queue of QP {entry.qpn} full ({MAX_QP_WR} work requests)")
            if entry.connected:
                self.nic.post_recv(entry.qpn, wrs)
            else:
                entry.early_recvs.extend(wrs)
            return {}
        if op == "query_qp":
            entry = self._entry(client, request)
            status = self.nic.qp_status(entry.qpn)
            if status is None:
                return {"state": "INIT", "counters": {}}
            state, counters = status
            return {"state": state, "counters": counters, "released_ns": self.nic.released_ns(entry.qpn) or 0}
        if op == "destroy_qp":
            self._destroy_qp(self._entry(client, request).qpn)
            return {}
        raise BadRequest(f"unknown verbs request {shown(op)}")

    def _post_send(self, entry: QpEntry, request: dict[str, Any], now: int) -> dict[str, Any]:
        lengths = self.nic.queue_lengths(entry.qpn)
        if lengths is None:
            raise BadRequest(f"QP {entry.qpn} is not connected (post_send needs RTS)")
        wrs = [(*row[:8], bool(row[8])) for row in rows(request, "wrs", SEND_WR_COLUMNS)]
        at = optional_integer(request, "at", 0, now + MAX_START_AHEAD_NS)
        if lengths[0] + len(wrs) > MAX_QP_WR:  # the timed posts count (queue_lengths)
            raise BadRequest(f"send queue of QP {entry.qpn} full ({MAX_QP_WR} work requests)")
        if at is not None:  # a synchronized start: released by the RNIC's timer (at once if already past)
            self.nic.post_send_at(entry.qpn, wrs, at)
        else:
            self.nic.post_send(entry.qpn, wrs)
        return {}

    def _connect(self, entry: QpEntry, request: dict[str, Any]) -> dict[str, Any]:
        if entry.connected:
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
        config = RcConfig(mtu=mtu, max_msg=MAX_MR_BYTES, **self.reorder, **options)
        self.nic.connect(entry.qpn, entry.owner, entry.initial_psn, config, remote_qpn, remote_psn, remote_ip,
                         entry.early_recvs)
        entry.connected = True
        entry.early_recvs.clear()
        return {}

    # --- counters and exit -------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {**self.nic.stats(), **self.counters, "applications": len(self.clients)}

    def close(self) -> None:
        if self.rates_file is not None:
            with open(self.rates_file, "w") as f:
                f.write(RATE_HEADER)
                f.write(self.nic.rate_rows())
        for client in list(self.clients.values()):
            self._drop_client(client)
        self.server.close()
        self.nic.stop()
