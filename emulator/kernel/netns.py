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
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_SLAVE = 1 << 19
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8
_EINVAL = 22

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def netns_path(name: str) -> str:
    """Where ``ip netns`` (and we) bind-mount the namespace called ``name``."""
    return os.path.join(NETNS_DIR, name)


def _mount(source: str, target: str, flags: int, fstype: str = "none") -> int:
    return _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, None)


def _share_netns_dir() -> None:
    """Make /run/netns a shared mount point, as ``ip netns add`` does.

    Namespace mounts made below it then propagate to other mount
    namespaces, so ``ip netns`` sees our namespaces from anywhere.
    """
    os.makedirs(NETNS_DIR, exist_ok=True)
    if _mount("", NETNS_DIR, _MS_SHARED | _MS_REC) == 0:
        return
    if ctypes.get_errno() != _EINVAL:  # EINVAL: not a mount point yet
        _check(-1, "mount --make-shared /run/netns")
    _check(_mount(NETNS_DIR, NETNS_DIR, _MS_BIND | _MS_REC), "mount --bind /run/netns")
    _check(_mount("", NETNS_DIR, _MS_SHARED | _MS_REC), "mount --make-shared /run/netns")


def create_namespace(name: str) -> None:
    """Create a named network namespace, as ``ip netns add NAME`` does.

    The calling thread unshares a new namespace, bind-mounts it at
    /run/netns/NAME and returns to its own: no helper process, so creation
    never waits on a child (pyroute2's helper timed out while the kernel
    was still destroying a large fabric's namespaces).
    """
    _share_netns_dir()
    path = netns_path(name)
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444))
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _check(_libc.unshare(CLONE_NEWNET), "unshare")
        try:
            _check(_mount("/proc/thread-self/ns/net", path, _MS_BIND), f"bind-mount namespace {name}")
        finally:
            setns(home)
    except BaseException:  # also Ctrl-C, which may land after the mount: unmount too
        remove_namespace(name)
        raise
    finally:
        os.close(home)


def remove_namespace(name: str) -> None:
    """Unmount and delete /run/netns/NAME, as ``ip netns delete NAME`` does.

    A symbolic link there is removed, never followed to unmount its target.
    """
    path = netns_path(name)
    _libc.umount2(path.encode(), _MNT_DETACH | _UMOUNT_NOFOLLOW)
    os.unlink(path)


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
    if not private_mounts():
        return
    _libc.umount2(b"/sys", _MNT_DETACH)
    _mount(name, "/sys", 0, "sysfs")


def private_mounts() -> bool:
    """Give the calling process mounts of its own (changes stay here); False if the kernel refused."""
    return _libc.unshare(CLONE_NEWNS) == 0 and _mount("", "/", _MS_REC | _MS_SLAVE) == 0


@contextlib.contextmanager
def node_view(name: str, sysfs: bool) -> Iterator[bool]:
    """Run the body inside namespace ``name``, with its own sysfs on /sys if ``sysfs`` (yields whether it is there).

    For a process that serves many nodes, with mounts of its own
    (:func:`private_mounts`; pass ``sysfs`` False without them, or the
    machine's /sys would be covered): a sysfs shows the network namespace
    it was mounted from, so one mounted on top of /sys while inside the
    node's namespace, and taken off again after, lets the body read and
    write /sys/class/net of that node.
    """
    with entered(name):
        mounted = sysfs and _mount(name, "/sys", 0, "sysfs") == 0
        try:
            yield mounted
        finally:
            if mounted:
                _libc.umount2(b"/sys", _MNT_DETACH)


def namespace_id(name: str) -> tuple[int, int] | None:
    """The (device, inode) of a named namespace's file, or None if there is none.

    Processes whose /proc/PID/ns/net has the same pair live in that
    namespace; that is how cleanup finds every process a run left behind.
    The device tells a mounted namespace (nsfs) from a plain file left by a
    removal cut short, whose inode number could equal some namespace's.
    """
    try:
        st = os.lstat(netns_path(name))  # a symbolic link is not a namespace of ours
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def existing_namespaces() -> set[str]:
    """Names of all namespaces mounted under /run/netns."""
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()
