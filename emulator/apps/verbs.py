"""A verbs-like API for applications on an emulated host (pyverbs naming).

    ctx = Context()                      # the RNIC of the host this process runs in
    pd = PD(ctx)
    mr = MR(pd, 1 << 20, ACCESS_ALL)     # mr.buf is the memory; mr.addr, mr.lkey, mr.rkey
    cq = CQ(ctx)
    qp = QP(pd, cq, cq)                  # qp.qp_num, qp.psn: send them to the peer out of band
    qp.connect(remote_qpn, remote_psn, remote_gid, mtu=1024)
    qp.post_send(SendWR(wr_id=1, opcode=WrOpcode.RDMA_WRITE, addr=mr.addr, length=4096,
                        lkey=mr.lkey, remote_addr=raddr, rkey=rkey))
    wc = cq.wait()                       # or cq.poll(): completions with a status, as in verbs

The device is the host agent's verbs socket; ``Context()`` finds it by
comparing this process's network namespace with the runs on the machine, so
it works under ``fabric-emu exec`` and ``ip netns exec`` alike.  Memory is a
memfd this process maps and passes to the RNIC, which maps the same pages:
remote WRITEs land in ``mr.buf`` while the application does nothing.
Errors of the transport come back as completions; a request the RNIC
refuses (bad key, unknown QP, path MTU too big for the link) raises
:class:`VerbsError` naming the problem.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import os
import select
import socket
import time
from collections import deque
from typing import Any, Iterable

from emulator.fabric import runstate
from emulator.errors import FabricError
from emulator.agents.memory import ACCESS_ALL, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE
from emulator.agents.verbs_messages import MESSAGE_MAX
from emulator._core.rc import Completion, RecvWR, SendWR, WcOpcode, WcStatus, WrOpcode

__all__ = ["ACCESS_ALL", "ACCESS_LOCAL_WRITE", "ACCESS_REMOTE_READ", "ACCESS_REMOTE_WRITE", "CQ", "Completion",
           "Context", "MR", "PD", "QP", "RecvWR", "SendWR", "VerbsError", "WcOpcode", "WcStatus", "WrOpcode",
           "find_device"]



class VerbsError(FabricError):
    """The RNIC refused a request, or there is no RNIC here."""


def find_device() -> tuple[str, str]:
    """(run, node) of the emulated host whose namespace this process is in."""
    mine = os.stat("/proc/self/ns/net")
    for state in runstate.runs():
        for name, info in state.nodes.items():
            if info.get("kind") != "host":
                continue
            try:
                theirs = os.stat(os.path.join("/run/netns", info["netns"]))
            except OSError:
                continue
            if (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino):
                return state.run, name
    raise VerbsError("no emulated RDMA device here: run this inside a host of a fabric "
                     "(fabric-emu exec h1 -- ...)")


class Context:
    """An open RNIC (``ibv_open_device``): one connection to the host agent."""

    def __init__(self, run: str | None = None, node: str | None = None) -> None:
        if node is None:
            run, node = find_device()
        elif run is None:
            run = _only_run()
        self.run, self.node = run, node
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.sock.connect(runstate.verbs_socket(run, node))
        except OSError as err:
            self.sock.close()
            raise VerbsError(f"cannot open the RDMA device of {node} in run {run}: {err.strerror}") from None
        self._pending: dict[int, deque[Completion]] = {}
        self.attr = self.request({"op": "query_device"})

    def request(self, message: dict[str, Any], fds: Iterable[int] = ()) -> dict[str, Any]:
        """Send one request, wait for its reply; completions arriving meanwhile are kept."""
        self._send(message, fds)
        while True:
            reply = self._receive(block=True)
            if reply is not None:
                if "error" in reply:
                    raise VerbsError(reply["error"])
                return reply

    def post(self, message: dict[str, Any]) -> None:
        """Send a request without waiting: the RNIC answers only if it fails, and that error is raised by the
        next call that reads from the device (as a real post is a doorbell, its errors come later)."""
        self._send({**message, "quiet": True}, ())

    def _send(self, message: dict[str, Any], fds: Iterable[int]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode()
        fds = list(fds)
        if fds:
            socket.send_fds(self.sock, [data], fds)
        else:
            self.sock.send(data)

    def _receive(self, block: bool) -> dict[str, Any] | None:
        """Read one message; file completions under their CQ, raise a quiet request's error, return anything
        else."""
        try:
            data = self.sock.recv(MESSAGE_MAX, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        if not data:
            raise VerbsError(f"the RDMA device of {self.node} went away (was the fabric torn down?)")
        message = json.loads(data)
        if message.get("quiet"):
            raise VerbsError(f"an earlier post failed: {message.get('error')}")
        if "wc" not in message:
            return message
        queue = self._pending.setdefault(message["cq"], deque())
        for wr_id, status, opcode, qp_num, byte_len, imm, stamp in message["wc"]:
            queue.append(Completion(wr_id, WcStatus(status), WcOpcode(opcode), qp_num, byte_len, imm, stamp))
        return None

    def _completions(self, cq: int, num: int, timeout: float | None) -> list[Completion]:
        queue = self._pending.setdefault(cq, deque())
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            while self._receive(block=False) is not None:
                raise VerbsError("unexpected reply from the RDMA device")
            if queue or timeout == 0:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            select.select([self.sock], [], [], remaining)
        return [queue.popleft() for _ in range(min(num, len(queue)))]

    def close(self) -> None:
        """Closing the device frees every QP and region it made, as process exit does."""
        self.sock.close()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _only_run() -> str:
    runs = runstate.runs()
    if len(runs) != 1:
        raise VerbsError("say which run: several fabrics are up" if runs else "no fabric is up")
    return runs[0].run


class PD:
    """A protection domain (the context's; regions and QPs share it)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx


class MR:
    """A registered memory region: ``buf`` is its memory, shared with the RNIC."""

    def __init__(self, pd: PD, length: int, access: int = ACCESS_ALL) -> None:
        if length <= 0:
            raise VerbsError(f"memory region of {length} bytes: it needs at least one")
        self.ctx = pd.ctx
        self.length = length
        fd = os.memfd_create("fabric-emu-mr", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, length)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)  # the RNIC maps it: it must never shrink
            self.buf = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))
            reply = self.ctx.request({"op": "reg_mr", "addr": self.addr, "length": length, "access": access}, [fd])
        except Exception:
            if hasattr(self, "buf"):
                self.buf.close()
            raise
        finally:
            os.close(fd)
        self.lkey, self.rkey = reply["lkey"], reply["rkey"]

    def close(self) -> None:
        self.ctx.request({"op": "dereg_mr", "key": self.lkey})


class CQ:
    """A completion queue."""

    def __init__(self, ctx: Context, cqe: int = 4096) -> None:
        self.ctx = ctx
        self.cqe = cqe
        self.handle = ctx.request({"op": "create_cq"})["cq"]

    def poll(self, num_entries: int = 1) -> list[Completion]:
        """Up to ``num_entries`` completions that are ready now (maybe none)."""
        return self.ctx._completions(self.handle, num_entries, 0)

    def wait(self, num_entries: int = 1, timeout: float | None = None) -> list[Completion]:
        """Block until at least one completion (or ``timeout`` seconds pass: then [])."""
        return self.ctx._completions(self.handle, num_entries, timeout)


class QP:
    """A reliable-connected queue pair."""

    def __init__(self, pd: PD, send_cq: CQ, recv_cq: CQ) -> None:
        self.ctx = pd.ctx
        reply = self.ctx.request({"op": "create_qp", "send_cq": send_cq.handle, "recv_cq": recv_cq.handle})
        self.qp_num: int = reply["qpn"]
        self.psn: int = reply["psn"]

    def connect(self, remote_qpn: int, remote_psn: int, remote_gid: str, mtu: int = 1024, **options: int) -> None:
        """INIT to RTR to RTS in one step.  ``options``: timeout_ns, retry_cnt, rnr_retry, max_inflight."""
        self.ctx.request({"op": "connect", "qpn": self.qp_num, "remote_qpn": remote_qpn, "remote_psn": remote_psn,
                          "remote_gid": remote_gid, "mtu": mtu, **options})

    def post_send(self, wrs: SendWR | list[SendWR], at: int | None = None, wait: bool = True) -> None:
        """Post work requests; with ``at`` (CLOCK_MONOTONIC ns) the RNIC starts them at that instant.

        ``wait=False`` does not wait for the RNIC's answer (:meth:`Context.post`): a refused post raises at
        the next call that reads from the device.

        ``at`` is the emulator's synchronized start: the RNIC's own timer
        releases the requests, so hosts start together whatever their
        applications' scheduling; ``query()["released_ns"]`` tells when.
        """
        items = [wrs] if isinstance(wrs, SendWR) else wrs
        request = {"op": "post_send", "qpn": self.qp_num, "wrs": [
            [w.wr_id, int(w.opcode), w.addr, w.length, w.lkey, w.remote_addr, w.rkey, w.imm, w.signaled]
            for w in items]}
        if at is not None:
            request["at"] = int(at)
        if wait:
            self.ctx.request(request)
        else:
            self.ctx.post(request)

    def post_recv(self, wrs: RecvWR | list[RecvWR], wait: bool = True) -> None:
        """Post receives; ``wait=False`` as for :meth:`post_send`."""
        items = [wrs] if isinstance(wrs, RecvWR) else wrs
        request = {"op": "post_recv", "qpn": self.qp_num, "wrs": [[w.wr_id, w.addr, w.length, w.lkey] for w in items]}
        if wait:
            self.ctx.request(request)
        else:
            self.ctx.post(request)

    def query(self) -> dict[str, Any]:
        """State (INIT, RTS, ERROR) and the transport's counters."""
        return self.ctx.request({"op": "query_qp", "qpn": self.qp_num})

    def close(self) -> None:
        self.ctx.request({"op": "destroy_qp", "qpn": self.qp_num})
