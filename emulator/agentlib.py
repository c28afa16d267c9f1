"""What every agent process shares: start-up, the event loop, control, exit.

An agent is started as ``python -m <module> CONFIG READY_FD``.  It reads its
JSON config, enters its node's namespace, builds its sockets, writes
``ready`` to READY_FD, and runs one epoll loop with a timerfd until SIGTERM
or a ``stop`` request.  A control socket (a Unix socket in the run
directory, so reachable from any namespace) answers ``stats`` with the
agent's JSON counters; at exit the counters go to the config's
``stats_file``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any, Callable

from emulator.netns import enter_for_exec
from emulator.timerfd import TimerFd

Handler = Callable[[int, int, int], None]  # (fd, event mask, now_ns)
AGENT_RT_PRIORITY = 10
AGENT_NICE = -10


class AgentBase:
    """The loop and control socket; subclasses add sockets and counters."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.name = config["name"]
        self.epoll = select.epoll()
        self.handlers: dict[int, Handler] = {}
        self.timer = TimerFd()
        self.watch(self.timer.fd, select.EPOLLIN, self._on_timer)
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.control.bind(config["control"])
        self.control.listen(8)
        self.control.setblocking(False)
        self.watch(self.control.fileno(), select.EPOLLIN, self._on_control)
        self.running = True
        self.started = time.monotonic()
        self.scheduling = "normal"

    @staticmethod
    def now() -> int:
        return time.monotonic_ns()

    def watch(self, fd: int, mask: int, handler: Handler) -> None:
        self.epoll.register(fd, mask)
        self.handlers[fd] = handler

    def modify(self, fd: int, mask: int) -> None:
        self.epoll.modify(fd, mask)

    def unwatch(self, fd: int) -> None:
        self.epoll.unregister(fd)
        del self.handlers[fd]

    def run(self) -> None:
        self.after_events(self.now())
        handlers = self.handlers
        while self.running:
            try:
                events = self.epoll.poll(0.5)
            except InterruptedError:
                continue
            now = time.monotonic_ns()
            for fd, mask in events:
                handler = handlers.get(fd)
                if handler is not None:  # None: an earlier handler of this batch closed it
                    handler(fd, mask, now)
            self.after_events(now)

    def _on_timer(self, _fd: int, _mask: int, now: int) -> None:
        self.timer.consume()
        self.on_timer(now)

    def _on_control(self, _fd: int, _mask: int, _now: int) -> None:
        """Answer one request: ``stats`` (JSON counters) or ``stop``."""
        try:
            conn, _ = self.control.accept()
        except BlockingIOError:
            return
        with conn:
            conn.settimeout(0.2)
            try:
                request = conn.recv(256).decode().split()
                if request[:1] == ["stop"]:
                    self.running = False
                    reply: dict[str, Any] = {"stopping": True}
                elif request[:1] == ["stats"]:
                    reply = self.stats()
                else:
                    reply = self.command(request)
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except (OSError, ValueError, IndexError) as err:
                try:
                    conn.sendall(json.dumps({"error": str(err)}).encode() + b"\n")
                except OSError:
                    pass

    # --- for subclasses -----------------------------------------------------------------

    def after_events(self, now: int) -> None:
        """Called after each batch of events (re-arm the timer here)."""

    def on_timer(self, now: int) -> None:
        """The timerfd fired."""

    def command(self, request: list[str]) -> dict[str, Any]:
        raise ValueError(f"unknown request {' '.join(request)!r}")

    def stats(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Flush files before exit."""


def _run_before_applications() -> str:
    """Give the agent precedence over applications; returns the policy used.

    Agents are the fabric's hardware.  On a busy machine (here: two busy
    loops on two cores) agents at normal priority reacted to PFC so late
    that lossless incast overflowed its headroom; at SCHED_FIFO nothing was
    lost.  Agents block in epoll when idle, and the kernel's RT throttling
    keeps 5% of each core for others even if one is flooded.  Where RT is
    not allowed (a container without CAP_SYS_NICE) we fall back to nice -10.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(AGENT_RT_PRIORITY))
        return f"SCHED_FIFO {AGENT_RT_PRIORITY}"
    except OSError:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, AGENT_NICE)
            return f"nice {AGENT_NICE}"
        except OSError:
            return "normal"


def run_agent(agent_class: type[AgentBase]) -> None:
    """The ``__main__`` of an agent module."""
    config_path, ready_fd = sys.argv[1], int(sys.argv[2])
    with open(config_path) as f:
        config = json.load(f)
    enter_for_exec(config["netns"])  # the node's namespace, and a sysfs that shows its interfaces
    policy = _run_before_applications()
    agent = agent_class(config)
    agent.scheduling = policy

    def stop(_signum: int, _frame: object) -> None:
        agent.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    agent.run()
    agent.close()
    with open(config["stats_file"], "w") as f:
        json.dump(agent.stats(), f)
    sys.exit(0)
