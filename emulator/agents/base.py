"""What every agent shares: its control socket, its deadline, its final counters.

Agents run in data-plane processes (:mod:`emulator.agents.worker`), many
to a process, in one compiled :class:`~emulator._core.dataplane.Loop`.  A control socket
(a Unix socket in the run directory, so reachable from any namespace)
answers ``stats`` with the agent's JSON counters; when the agent stops (a
``stop`` request, or its process's SIGTERM) the counters go to the
config's ``stats_file``.

The control socket never blocks the loop: a request is read as it
arrives, a reply written as the client takes it, and a client that has not
finished within CONTROL_TIMEOUT_NS is dropped.  At most CONTROL_CLIENTS_MAX
are served at once; a new client takes the place of the oldest, so clients
that connect and say nothing cannot lock the others out (16 of them once
made ``stats`` call a healthy switch dead).  Only root or the agent's own
user may connect (mode 0600 and SO_PEERCRED).
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from typing import Any, Callable

from emulator.agents.config import AgentConfig
from emulator._core.dataplane import Loop
from emulator.errors import FabricError
from emulator._core.fidelity import Durations

Handler = Callable[[int, int, int], None]  # (fd, event mask, now_ns)
SO_PEERCRED = 17
CONTROL_REQUEST_MAX = 256  # bytes of one control request
CONTROL_TIMEOUT_NS = 2_000_000_000  # a control client has this long to send its request and take the reply
CONTROL_CLIENTS_MAX = 16
# Kinds of a Python agent's timers, judged apart by the fidelity monitor (emulator._core.fidelity.Thresholds):
# "link" (PFC hold expiry, the pause storm's refresh).  Timed starts and retransmission and RNR timers are the
# compiled RNIC's (crates/fabric-core/src/agent/nic.rs, TimerKind), which measures their lateness itself.
TIMER_KINDS = ("link",)


def bind_private(sock: socket.socket, path: str) -> None:
    """Bind a Unix socket at ``path`` with mode 0600 (the umask decides nothing)."""
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)


def trusted_peer(conn: socket.socket) -> bool:
    """Whether the process at the other end of a Unix socket is root or runs as this agent's user."""
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, SO_PEERCRED, struct.calcsize("3i")))
    return uid in (0, os.geteuid())


class _ControlClient:
    """One connection to the control socket: its request so far, its reply still to send, its deadline."""

    def __init__(self, conn: socket.socket, deadline: int) -> None:
        self.conn = conn
        self.deadline = deadline
        self.request = b""
        self.reply: memoryview | None = None

    def silent(self) -> bool:
        """Whether dropping the client loses no request: none read and no byte waiting (or the client has gone)."""
        if self.request or self.reply is not None:
            return False
        try:
            return self.conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""  # b"": it has gone
        except OSError:  # BlockingIOError: nothing waiting; any other: the connection is broken
            return True


class AgentBase:
    """One node's agent: its control socket, its deadline, its counters; subclasses add sockets.

    Agents run in a :class:`~emulator._core.dataplane.Loop` they share with the other agents of their
    process: their descriptors and deadline are the loop's, and after a batch in which one of its
    descriptors had an event (or its deadline came) the agent's :meth:`after_events` runs.
    """

    def __init__(self, config: AgentConfig, loop: Loop) -> None:
        self.config = config
        self.name = config.name
        self.monitor = config.monitor
        self.loop = loop
        self.timer = loop.timer(self)
        # Fidelity: how late each wake-up came after its deadline, by the kind of timer the deadline was
        # (TIMER_KINDS; None: a wake-up whose lateness is measured where it matters, or not at all).
        self.timer_lateness = {kind: Durations() for kind in TIMER_KINDS}
        self.timer_kind: str | None = "link"
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bind_private(self.control, config.control)
        self.control.listen(CONTROL_CLIENTS_MAX)
        self.control.setblocking(False)
        self.watch(self.control.fileno(), select.EPOLLIN, self._on_control)
        self.control_clients: dict[int, _ControlClient] = {}
        self.running = True
        self.started = time.monotonic()
        self.scheduling = "normal"
        self.cpu: int | None = None  # the CPU its process is pinned to
        self.join(loop)

    def join(self, loop: Loop) -> None:
        """Be served by ``loop`` (an agent with a compiled part is served with it)."""
        loop.add(self)

    @staticmethod
    def now() -> int:
        return time.monotonic_ns()

    def watch(self, fd: int, mask: int, handler: Handler) -> None:
        self.loop.watch(fd, mask, handler, self)

    def modify(self, fd: int, mask: int) -> None:
        self.loop.modify(fd, mask)

    def unwatch(self, fd: int) -> None:
        self.loop.unwatch(fd)

    def arm(self, deadline: int | None, now: int) -> None:
        """Set the timer for ``deadline``, at the end of the wake-up that began at ``now``.

        A deadline already past (a model's "due now": an IB grant that grew to urgent while this wake-up
        forwarded frames is due at its last flow-control packet) is armed for ``now``: the timer then fires
        at once, and its lateness counts from when the work became known, not from a time long gone.  A
        deadline armed earlier and missed is still judged from itself: its expiry is in this wake-up's events.
        """
        self.timer.set(deadline if deadline is None or deadline > now else now)

    def on_deadline(self, deadline: int, now: int) -> None:
        """The loop found this agent's ``deadline`` come at ``now``: count the lateness, run :meth:`on_timer`."""
        if self.timer_kind is not None:
            self.timer_lateness[self.timer_kind].add(now - deadline)
        self.on_timer(now)

    def _on_control(self, _fd: int, _mask: int, now: int) -> None:
        """Accept control clients; their requests are read as they arrive (:meth:`_on_control_client`)."""
        while True:
            try:
                conn, _ = self.control.accept()
            except BlockingIOError:
                return
            if not trusted_peer(conn):
                conn.close()
                continue
            if len(self.control_clients) >= CONTROL_CLIENTS_MAX:
                self._close_control(self._control_to_drop())
            conn.setblocking(False)
            client = _ControlClient(conn, now + CONTROL_TIMEOUT_NS)
            self.control_clients[conn.fileno()] = client
            self.watch(conn.fileno(), select.EPOLLIN, self._on_control_client)

    def _control_to_drop(self) -> int:
        """The client that makes room for a new one: the oldest of those that have said nothing and have nothing
        waiting to be read, else the oldest.

        Silent clients that reconnect as soon as they are dropped (a hung or hostile script) would otherwise
        take turns dropping the oldest, and under load a request accepted with them (its bytes still unread)
        became the oldest before its turn came: `stats` saw a broken pipe from a healthy switch.
        """
        by_age = sorted(self.control_clients, key=lambda fd: self.control_clients[fd].deadline)
        for fd in by_age:
            if self.control_clients[fd].silent():
                return fd
        return by_age[0]

    def _on_control_client(self, fd: int, mask: int, _now: int) -> None:
        """Read a request up to its newline (or the client's end of sending), then answer it."""
        client = self.control_clients[fd]
        if client.reply is None:
            try:
                chunk = client.conn.recv(CONTROL_REQUEST_MAX + 1 - len(client.request))
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            client.request += chunk
            complete = not chunk or b"\n" in client.request or len(client.request) > CONTROL_REQUEST_MAX
            if not complete:
                return
            client.reply = memoryview(json.dumps(self._answer(client.request)).encode() + b"\n")
            self.modify(fd, select.EPOLLOUT)
        try:
            sent = client.conn.send(client.reply)
        except BlockingIOError:
            return
        except OSError:
            sent = len(client.reply)
        client.reply = client.reply[sent:]
        if not client.reply:
            self._close_control(fd)

    def _answer(self, raw: bytes) -> dict[str, Any]:
        """The reply to one request: ``stats`` (JSON counters), ``stop``, ``fidelity-reset``, or a subclass's command."""
        if len(raw) > CONTROL_REQUEST_MAX:
            return {"error": f"request over {CONTROL_REQUEST_MAX} bytes"}
        try:
            request = raw.decode().split()
            if request[:1] == ["stop"]:
                self.running = False
                return {"stopping": True}
            if request[:1] == ["stats"]:
                return self.stats()
            if request == ["fidelity-reset"]:
                self.reset_fidelity()
                return {"reset": True}
            return self.command(request)
        except (OSError, ValueError, FabricError) as err:  # also UnicodeDecodeError; bad input: ValueError, or
            return {"error": str(err)}  # FabricError from a range of emulator.bounds

    def expire_control(self, now: int) -> None:
        """Drop control clients that have not finished within CONTROL_TIMEOUT_NS."""
        for fd in [fd for fd, client in self.control_clients.items() if client.deadline <= now]:
            self._close_control(fd)

    def _close_control(self, fd: int) -> None:
        client = self.control_clients.pop(fd)
        self.unwatch(fd)
        client.conn.close()

    # --- for subclasses -----------------------------------------------------------------

    def after_events(self, now: int) -> None:
        """Called after each batch of events (re-arm the timer here)."""

    def on_timer(self, now: int) -> None:
        """The timerfd fired."""

    def reset_fidelity(self) -> None:
        """Start the fidelity monitor's figures afresh (a study's measured iterations begin); subclasses add theirs."""
        self.timer_lateness = {kind: Durations() for kind in TIMER_KINDS}

    def command(self, request: list[str]) -> dict[str, Any]:
        raise ValueError(f"unknown request {' '.join(request)!r}")

    def stats(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Flush files before exit."""

    def finish(self) -> None:
        """The loop no longer serves this agent: close its control socket and files, write its final counters."""
        for fd in list(self.control_clients):
            self.control_clients.pop(fd).conn.close()
        self.control.close()
        final = self.stats()  # before close(): the counters read the sockets (a host's RNIC closes its own)
        self.close()
        with open(self.config.stats_file, "w") as f:
            json.dump(final, f)
