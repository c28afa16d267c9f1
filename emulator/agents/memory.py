"""Memory regions: shared memory an application registers with the RNIC.

An application creates a memfd, maps it, and hands the descriptor to its
host's RNIC (the host agent) over the verbs socket; the compiled RNIC
(crates/fabric-core's ``agent::regions``, mapped by crates/fabric-io) maps the same
pages.  A remote WRITE then lands in the application's memory with no work
by the application, as with a real RNIC's DMA.  No file exists on disk, so
nothing is left behind when either process dies.

Keys follow the verbs rules the transport checks: an lkey is valid only for
the protection domain (here: the application's connection) that registered
it, an rkey only for QPs of that same domain, within the region's bounds and
with the access the region was registered for.

The descriptor comes from an application and is checked before it is
mapped (:func:`check_memfd`): a memfd, sealed against shrinking, as long as
the region.  A file that shrank under the RNIC's mapping would kill the
host agent with SIGBUS at the next remote WRITE; the seal makes shrinking
impossible.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat

from emulator._core.dataplane import Nic
from emulator._core.rdma_params import MAX_MR_BYTES  # the RNIC's limit per region, also its maximum message

ACCESS_LOCAL_WRITE = 1  # libibverbs IBV_ACCESS_* values
ACCESS_REMOTE_WRITE = 2
ACCESS_REMOTE_READ = 4
ACCESS_ALL = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ


def check_memfd(fd: int, length: int) -> None:
    """Refuse (ValueError, one line) a descriptor the RNIC must not map as a region of ``length`` bytes.

    It must be a memfd (shared memory with no file behind it) of ordinary
    pages (a hugetlb memfd faults with SIGBUS when its pool runs dry),
    sealed with F_SEAL_SHRINK, and at least ``length`` bytes long.
    """
    try:
        info = os.fstat(fd)
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as err:
        raise ValueError(f"the region's descriptor cannot be inspected: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode) or not target.startswith("/memfd:"):
        raise ValueError("a memory region must be a memfd (os.memfd_create)")
    if info.st_blksize != mmap.PAGESIZE:
        raise ValueError("a memory region must be a memfd of ordinary pages, not hugetlb")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        seals = 0
    if not seals & fcntl.F_SEAL_SHRINK:
        raise ValueError("a memory region's memfd must be sealed against shrinking "
                         "(MFD_ALLOW_SEALING, then F_ADD_SEALS F_SEAL_SHRINK)")
    if info.st_size < length:
        raise ValueError(f"the region's memfd holds {info.st_size} bytes, not the {length} registered")


def register(nic: Nic, owner: int, addr: int, length: int, access: int, fd: int) -> int:
    """Register the memfd ``fd`` as a region of ``owner`` with the compiled RNIC ``nic``: its key.

    The descriptor is checked (:func:`check_memfd`) before the RNIC maps it;
    a length or flags the RNIC does not take are refused by it first, in
    one line, as is a descriptor it cannot map (ValueError).
    """
    if 0 < length <= MAX_MR_BYTES:  # else the RNIC says what it takes, before anything is looked at
        check_memfd(fd, length)
    return nic.register(owner, addr, length, access, fd)
