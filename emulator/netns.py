"""Entering network namespaces from Python.

Python 3.11 has no ``os.setns``; we call libc through ctypes.  ``setns``
switches only the calling thread, so the builder enters a namespace, creates
the sockets it needs there (a socket stays in the namespace it was created
in) and returns.  Child processes enter a node's namespace between fork and
exec, as ``ip netns exec`` does, including a private mount namespace with
the node's own /sys so that tools reading /sys/class/net see the node's
interfaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Iterator

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_SLAVE = 1 << 19
_MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def netns_path(name: str) -> str:
    """Where ``ip netns`` (and we) bind-mount the namespace called ``name``."""
    return os.path.join(NETNS_DIR, name)


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace open at ``fd``."""
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the body with the calling thread inside namespace ``name``."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns_path(name), os.O_RDONLY)
    try:
        setns(target)
        try:
            yield
        finally:
            setns(home)
    finally:
        os.close(target)
        os.close(home)


def enter_for_exec(name: str) -> None:
    """Enter namespace ``name`` for good; used in a child before exec.

    Besides the network namespace, the child gets a private mount namespace
    with a fresh sysfs, so /sys/class/net lists the node's interfaces, as
    under ``ip netns exec``.  If remounting /sys fails the child keeps the
    host's /sys; networking itself is unaffected.
    """
    fd = os.open(netns_path(name), os.O_RDONLY)
    try:
        setns(fd)
    finally:
        os.close(fd)
    if _libc.unshare(CLONE_NEWNS) != 0:
        return
    if _libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None) != 0:
        return
    _libc.umount2(b"/sys", _MNT_DETACH)
    _libc.mount(name.encode(), b"/sys", b"sysfs", 0, None)


def namespace_inode(name: str) -> int | None:
    """The nsfs inode of a named namespace, or None if it does not exist.

    Processes whose /proc/PID/ns/net has this inode live in that namespace;
    that is how cleanup finds every process a run left behind.
    """
    try:
        return os.stat(netns_path(name)).st_ino
    except FileNotFoundError:
        return None


def existing_namespaces() -> set[str]:
    """Names of all namespaces mounted under /run/netns."""
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()
