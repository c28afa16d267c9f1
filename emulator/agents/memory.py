"""Memory regions: shared memory an application registers with the RNIC.

An application creates a memfd, maps it, and hands the descriptor to its
host's RNIC (the host agent) over the verbs socket; the RNIC maps the same
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
import random
import stat
from dataclasses import dataclass

from emulator._core.rc import AccessError
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


@dataclass
class Region:
    """One registered region: where it is, who owns it, what it allows."""

    key: int
    addr: int  # the application's virtual address of byte 0
    length: int
    access: int
    owner: int  # protection domain
    view: memoryview
    mapping: mmap.mmap | None = None


class RegionTable:
    """Every region the RNIC knows, by key (lkey and rkey are the same number)."""

    def __init__(self, seed: int = 0) -> None:
        self.regions: dict[int, Region] = {}
        self._next_index = 1
        self._random = random.Random(seed)

    def register(self, owner: int, addr: int, length: int, access: int, fd: int | None = None,
                 buffer: bytearray | None = None) -> Region:
        """Map ``fd`` (or wrap ``buffer``, for tests) as a region of ``owner``.

        The key is an index in the upper 24 bits and a random byte below, as
        mlx5 and rxe make them, so a stale key from a freed region misses.
        """
        if not 0 < length <= MAX_MR_BYTES:
            raise ValueError(f"memory region of {length} bytes: the RNIC takes 1 byte to {MAX_MR_BYTES >> 20} MiB")
        if access & ~ACCESS_ALL:
            raise ValueError(f"unknown access flags {access:#x}")
        mapping = None
        if fd is not None:
            check_memfd(fd, length)
            try:
                mapping = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as err:  # e.g. a descriptor opened read-only, or sealed against writing
                raise ValueError(f"cannot map the region's memfd: {err.strerror}") from None
            view = memoryview(mapping)
        elif buffer is not None:
            view = memoryview(buffer)[:length]
        else:
            raise ValueError("a region needs a file descriptor or a buffer")
        key = (self._next_index << 8) | self._random.randrange(256)
        self._next_index += 1
        region = Region(key, addr, length, access, owner, view, mapping)
        self.regions[key] = region
        return region

    def deregister(self, key: int, owner: int) -> None:
        region = self.regions.get(key)
        if region is None or region.owner != owner:
            raise ValueError(f"no memory region with key {key:#x}")
        del self.regions[key]
        _release(region)

    def release_owner(self, owner: int) -> None:
        """Drop every region of a protection domain (its application left)."""
        for key in [k for k, r in self.regions.items() if r.owner == owner]:
            _release(self.regions.pop(key))

    def domain(self, owner: int) -> "DomainMemory":
        return DomainMemory(self, owner)


def _release(region: Region) -> None:
    region.view.release()
    if region.mapping is not None:
        region.mapping.close()


class DomainMemory:
    """The memory one protection domain's compiled QPs (:mod:`emulator._core.rc`) see."""

    def __init__(self, table: RegionTable, owner: int) -> None:
        self.table = table
        self.owner = owner

    def _find(self, key: int, addr: int, length: int, need: int, what: str) -> memoryview:
        region = self.table.regions.get(key)
        if region is None or region.owner != self.owner:
            raise AccessError(f"{what} key {key:#x} is not registered in this protection domain")
        if region.access & need != need:
            raise AccessError(f"{what} key {key:#x} does not allow this access")
        offset = addr - region.addr
        if length < 0 or offset < 0 or offset + length > region.length:
            raise AccessError(f"{what} access [{addr:#x}, +{length}) is outside the region "
                              f"[{region.addr:#x}, +{region.length})")
        return region.view[offset:offset + length]

    def local(self, lkey: int, addr: int, length: int, write: bool) -> memoryview:
        return self._find(lkey, addr, length, ACCESS_LOCAL_WRITE if write else 0, "local")

    def remote(self, rkey: int, addr: int, length: int, write: bool) -> memoryview:
        return self._find(rkey, addr, length, ACCESS_REMOTE_WRITE if write else ACCESS_REMOTE_READ, "remote")
