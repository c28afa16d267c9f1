"""Memory regions in Python, for the unit tests that drive the compiled RC transport (``emulator._core.rc``)
through its bindings: the QP reaches memory through an object with ``local`` and ``remote``.

The emulator's RNIC keeps its regions in Rust (crates/fabric-core's ``agent::regions``); this is the table
the Python RNIC had, kept as the tests' memory: bytearrays, keys, domains, bounds and access checks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from emulator.agents.memory import ACCESS_ALL, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, MAX_MR_BYTES
from emulator._core.rc import AccessError


@dataclass
class Region:
    """One registered region: where it is, who owns it, what it allows."""

    key: int
    addr: int  # the application's virtual address of byte 0
    length: int
    access: int
    owner: int  # protection domain
    view: memoryview


class RegionTable:
    """Every region the RNIC knows, by key (lkey and rkey are the same number)."""

    def __init__(self, seed: int = 0) -> None:
        self.regions: dict[int, Region] = {}
        self._next_index = 1
        self._random = random.Random(seed)

    def register(self, owner: int, addr: int, length: int, access: int, buffer: bytearray) -> Region:
        """Wrap ``buffer`` as a region of ``owner``.

        The key is an index in the upper 24 bits and a random byte below, as
        mlx5 and rxe make them, so a stale key from a freed region misses.
        """
        if not 0 < length <= MAX_MR_BYTES:
            raise ValueError(f"memory region of {length} bytes: the RNIC takes 1 byte to {MAX_MR_BYTES >> 20} MiB")
        if access & ~ACCESS_ALL:
            raise ValueError(f"unknown access flags {access:#x}")
        view = memoryview(buffer)[:length]
        key = (self._next_index << 8) | self._random.randrange(256)
        self._next_index += 1
        region = Region(key, addr, length, access, owner, view)
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
