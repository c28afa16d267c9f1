"""A CLOCK_MONOTONIC timerfd for epoll loops (Python 3.11 has no os.timerfd).

Poll and epoll timeouts are whole milliseconds and wake about 1 ms late
here; an absolute-time timerfd registered in the loop woke 27 us late at
the median.  Pause quanta, XOFF refreshes and link delays need the latter.
"""

from __future__ import annotations

import ctypes
import os

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1

_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerFd:
    """One-shot timer at an absolute ``time.monotonic_ns()`` deadline."""

    def __init__(self) -> None:
        fd = _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.fd = fd
        self.deadline: int | None = None

    def set(self, deadline_ns: int | None) -> None:
        """Arm for ``deadline_ns`` (absolute), or disarm with None."""
        if deadline_ns == self.deadline:
            return
        self.deadline = deadline_ns
        spec = _Itimerspec()
        if deadline_ns is not None:
            deadline_ns = max(deadline_ns, 1)  # 0 would disarm
            spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if _libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def consume(self) -> None:
        """Acknowledge an expiry (read the counter) and forget the deadline."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self.deadline = None

    def close(self) -> None:
        os.close(self.fd)
