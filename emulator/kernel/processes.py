"""Processes a run started, named so that a reused PID is never signalled.

A PID alone does not name a process for long: once it exits, the kernel
hands the number to the next process.  ``fabric-emu down`` runs long after
``up`` recorded its agents' and captures' PIDs, so each is recorded with its
start time (clock ticks after boot, field 22 of /proc/PID/stat), which a
later process with the same PID cannot share.  A signal goes through a
pidfd opened *before* the start time is compared, so the process checked is
the process signalled.

Cleanup also finds processes by network namespace (every process whose
/proc/PID/ns/net is one of the run's), comparing device and inode, and only
namespaces that are real namespace files: never our own namespace or init's.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass

from emulator.kernel.netns import namespace_id

# Some inits reap orphans only about once a second (seen on this CI kind).
REAP_WAIT = 3.0


@dataclass(frozen=True)
class ProcessId:
    """A process, not just a PID: the PID and when that process started."""

    pid: int
    start: int  # clock ticks after boot, /proc/PID/stat field 22


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (state) on; the name may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot); None if there is none."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def identify(pid: int) -> ProcessId | None:
    """The process that has ``pid`` now; None if there is none."""
    start = start_time(pid)
    return None if start is None else ProcessId(pid, start)


def exists(proc: ProcessId) -> bool:
    """Whether ``proc`` is still in the process table (a zombie counts)."""
    return start_time(proc.pid) == proc.start


def is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is None or fields[0] == "Z"


def running(proc: ProcessId) -> bool:
    """Whether ``proc`` is still running: in the table and not a zombie."""
    return exists(proc) and not is_zombie(proc.pid)


def _parent(pid: int) -> int:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else 0


def _claim(proc: ProcessId) -> int | None:
    """A pidfd for ``proc``, or None if it is gone (its PID may be someone else's now)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # ESRCH: no such process
        return None
    if exists(proc):
        return fd
    os.close(fd)
    return None


def send_signal(proc: ProcessId, signum: int) -> bool:
    """Signal ``proc`` if it still exists; whether it was signalled."""
    fd = _claim(proc)
    if fd is None:
        return False
    try:
        signal.pidfd_send_signal(fd, signum)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def in_namespaces(namespaces: list[str]) -> list[ProcessId]:
    """Every process whose network namespace is one of the named ones.

    Device and inode are compared, so a name whose file is not a namespace
    (an unmounted leftover of a removal cut short) finds nothing; nor does
    our own namespace or init's: cleanup must never take the machine's own
    processes for a run's.
    """
    ours = os.stat("/proc/self/ns/net")
    spared = {(ours.st_dev, ours.st_ino)}
    with contextlib.suppress(OSError):
        init = os.stat("/proc/1/ns/net")
        spared.add((init.st_dev, init.st_ino))
    wanted = {ns for ns in map(namespace_id, namespaces) if ns is not None} - spared
    if not wanted:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in wanted and (proc := identify(int(entry))) is not None:
            found.append(proc)
    return found


def terminate(procs: list[ProcessId], grace: float = 2.0) -> list[int]:
    """SIGTERM, wait up to ``grace`` seconds, SIGKILL what is left; the PIDs signalled.

    Only processes that still exist are signalled.  Returns once each is
    gone from the process table (its parent or init reaped it), or after
    REAP_WAIT more seconds, so that the caller sees the table as it was
    before the run.  Our own children's zombies do not count: their Popen
    objects reap them.
    """
    claimed = {proc: fd for proc in procs if (fd := _claim(proc)) is not None}
    try:
        for fd in claimed.values():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGTERM)
        _wait_exited(list(claimed.values()), grace)
        for proc, fd in claimed.items():
            if running(proc):
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
        _wait_reaped(list(claimed), REAP_WAIT)
    finally:
        for fd in claimed.values():
            os.close(fd)
    return [proc.pid for proc in claimed]


def _wait_exited(pidfds: list[int], seconds: float) -> None:
    """Wait until every pidfd reports its process exited (readable), or ``seconds`` pass."""
    poller = select.poll()
    for fd in pidfds:
        poller.register(fd, select.POLLIN)
    pending = len(pidfds)
    deadline = time.monotonic() + seconds
    while pending and (left := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            pending -= 1


def _wait_reaped(procs: list[ProcessId], seconds: float) -> None:
    me = os.getpid()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(exists(p) and not (is_zombie(p.pid) and _parent(p.pid) == me) for p in procs):
            return
        time.sleep(0.02)
