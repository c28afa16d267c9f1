"""A data-plane process: the agents of many nodes in one loop.

Started as ``python -m emulator.agents.worker READY_FD CPU KIND:CONFIG...``
(KIND ``switch`` or ``host``; CPU the one it runs on, or ``any``).  It reads
every config first (a bad one ends it with one line naming the file), pins
itself to CPU (see :mod:`emulator.kernel.rps` for why), builds each node's agent inside that
node's namespace (its sockets stay there; a sysfs of the node is mounted
for the time it takes, for RPS), returns to its own namespace, writes
``ready`` to READY_FD and serves all of them in one
compiled :class:`~emulator._core.dataplane.Loop` (the GIL released) until SIGTERM or every agent's
``stop``.  Each agent writes its final counters when it stops.

Why many nodes to a process: with one process per node, 17 processes shared the
two cores of a star,8 all-reduce, and every agent paid the interpreter's memory
and start-up again; a socket opened inside a namespace keeps that namespace, so
one process serves the sockets of many nodes.  The builder
starts one worker per core (:mod:`emulator.fabric.placement`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import sys

from emulator.agents.base import AgentBase
from emulator.agents.config import AgentConfig, ConfigError, HostConfig, SwitchConfig, read
from emulator.agents.host import HostAgent
from emulator._core.dataplane import Loop
from emulator.agents.switch import SwitchAgent
from emulator.kernel.netns import node_view, private_mounts

AGENTS: dict[str, tuple[type[AgentBase], type[AgentConfig]]] = {
    "switch": (SwitchAgent, SwitchConfig),
    "host": (HostAgent, HostConfig),
}
AGENT_RT_PRIORITY = 10
AGENT_NICE = -10
CLOSING_THREADS = 64


def run_before_applications() -> str:
    """Give the agents precedence over applications; returns the policy used.

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


def read_configs(specs: list[str]) -> list[tuple[str, AgentConfig]]:
    """``KIND:PATH`` arguments to (kind, checked config); one line naming the argument or file otherwise."""
    configs = []
    for spec in specs:
        kind, _, path = spec.partition(":")
        if kind not in AGENTS or not path:
            sys.exit(f"bad agent argument {spec!r}: expected switch:CONFIG or host:CONFIG")
        try:
            configs.append((kind, read(path, AGENTS[kind][1])))
        except ConfigError as err:
            sys.exit(f"bad agent config {path}: {err}")
    return configs


def pin(cpu: str) -> int | None:
    """Run only on ``cpu`` (a number, or ``any``); the CPU pinned to, or None.

    A CPU this process may not use (a cpuset) costs speed, not order: each
    interface still receives on one CPU.  So it is a notice in the log.
    """
    if cpu == "any":
        return None
    try:
        os.sched_setaffinity(0, {int(cpu)})
    except OSError as err:
        print(f"notice: cannot run on CPU {cpu} ({err.strerror}); running unpinned", file=sys.stderr)
        return None
    return int(cpu)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or not argv[0].isdigit() or not (argv[1].isdigit() or argv[1] == "any"):
        sys.exit("usage: python -m emulator.agents.worker READY_FD CPU|any KIND:CONFIG...")
    ready_fd, configs = int(argv[0]), read_configs(argv[2:])
    loop = Loop()
    # The loop runs with the GIL released, where no Python signal handler can run: CPython's own handler writes
    # the signal's number to the wake-up descriptor, which ends the loop (every agent writes its counters).
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    loop.stop_on(wake_read)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: None)
    private = private_mounts()  # if refused, no node's sysfs: RPS reports the interfaces it could not set
    policy = run_before_applications()
    cpu = pin(argv[1])
    for kind, config in configs:
        with node_view(config.netns, sysfs=private):
            agent = AGENTS[kind][0](config, loop)
        agent.scheduling, agent.cpu = policy, cpu
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    loop.run()
    loop.close()
    sys.stdout.flush()
    sys.stderr.flush()
    close_in_parallel([int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2])
    os._exit(0)  # every descriptor is closed; nothing is left for finalizers (the agents wrote their files)


def close_in_parallel(fds: list[int]) -> None:
    """Close ``fds`` from many threads at once.

    Closing an AF_PACKET socket waits for an RCU grace period (about 1.5 ms
    here), and a process that exits closes its descriptors one after the
    other: fattree,16's two processes (over 10,000 AF_PACKET sockets, two
    per switch port) had not exited 3 s after SIGTERM and were killed.
    Closes waiting at the same time share a grace period.
    """
    def close(fd: int) -> None:
        with contextlib.suppress(OSError):  # e.g. the directory listing's own descriptor, already closed
            os.close(fd)

    with concurrent.futures.ThreadPoolExecutor(CLOSING_THREADS) as pool:
        list(pool.map(close, fds))


if __name__ == "__main__":
    main(sys.argv[1:])
