"""Memory regions: the key, domain, bound and access checks the RNIC relies on."""

from __future__ import annotations

import fcntl
import os
import tempfile

import pytest

from emulator.agents.memory import (
    ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, MAX_MR_BYTES, RegionTable,
)
from emulator._core.rc import AccessError


def test_keys_are_distinct_and_resolve_to_the_region_bytes():
    table = RegionTable(seed=7)
    a = table.register(1, 0x1000, 64, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, buffer=bytearray(64))
    b = table.register(1, 0x9000, 64, ACCESS_LOCAL_WRITE, buffer=bytearray(64))
    assert a.key != b.key
    view = table.domain(1).remote(a.key, 0x1010, 16, write=True)
    view[:] = b"x" * 16
    assert bytes(a.view[16:32]) == b"x" * 16


@pytest.mark.parametrize("addr,length", [(0x0fff, 1), (0x1000 + 60, 5), (0x1000, 65), (0x2000, 1)])
def test_out_of_bounds_is_an_access_error(addr, length):
    table = RegionTable()
    region = table.register(1, 0x1000, 64, ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ, buffer=bytearray(64))
    with pytest.raises(AccessError, match="outside the region"):
        table.domain(1).remote(region.key, addr, length, write=True)


def test_another_protection_domain_cannot_use_the_key():
    table = RegionTable()
    region = table.register(1, 0x1000, 64, ACCESS_REMOTE_WRITE, buffer=bytearray(64))
    with pytest.raises(AccessError, match="not registered in this protection domain"):
        table.domain(2).remote(region.key, 0x1000, 8, write=True)


def test_access_flags_are_enforced():
    table = RegionTable()
    region = table.register(1, 0x1000, 64, ACCESS_REMOTE_READ, buffer=bytearray(64))
    memory = table.domain(1)
    assert len(memory.remote(region.key, 0x1000, 8, write=False)) == 8
    with pytest.raises(AccessError, match="does not allow"):
        memory.remote(region.key, 0x1000, 8, write=True)
    with pytest.raises(AccessError, match="does not allow"):
        memory.local(region.key, 0x1000, 8, write=True)  # no local write either


def test_deregistered_and_released_keys_miss():
    table = RegionTable()
    a = table.register(1, 0x1000, 64, ACCESS_REMOTE_WRITE, buffer=bytearray(64))
    b = table.register(2, 0x1000, 64, ACCESS_REMOTE_WRITE, buffer=bytearray(64))
    table.deregister(a.key, 1)
    with pytest.raises(AccessError):
        table.domain(1).remote(a.key, 0x1000, 8, write=True)
    with pytest.raises(ValueError, match="no memory region"):
        table.deregister(b.key, 1)  # not the owner's
    table.release_owner(2)
    assert table.regions == {}


def test_size_limits_and_flags():
    table = RegionTable()
    with pytest.raises(ValueError, match="1 byte to 1024 MiB"):
        table.register(1, 0, 0, ACCESS_LOCAL_WRITE, buffer=bytearray(1))
    with pytest.raises(ValueError, match="1 byte to 1024 MiB"):
        table.register(1, 0, MAX_MR_BYTES + 1, ACCESS_LOCAL_WRITE, buffer=bytearray(1))
    with pytest.raises(ValueError, match="unknown access flags"):
        table.register(1, 0, 8, 0x100, buffer=bytearray(8))


def test_a_memfd_region_shares_pages_with_its_owner():
    """What the RNIC does with an application's memfd: both mappings see the same bytes."""
    import mmap

    fd = sealed_memfd(4096)
    try:
        app = mmap.mmap(fd, 4096)
        table = RegionTable()
        region = table.register(1, 0x7000, 4096, ACCESS_REMOTE_WRITE, fd=fd)
        table.domain(1).remote(region.key, 0x7000 + 100, 4, write=True)[:] = b"rdma"
        assert app[100:104] == b"rdma"
        table.release_owner(1)
        app.close()
    finally:
        os.close(fd)


def sealed_memfd(length: int, seals: int = fcntl.F_SEAL_SHRINK) -> int:
    """A memfd as the verbs client makes one: sized, then sealed."""
    fd = os.memfd_create("test-mr", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, length)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def test_a_sealed_region_cannot_shrink_under_the_rnic():
    """What kept a shrunk memfd from killing the agent with SIGBUS at the next WRITE."""
    fd = sealed_memfd(8192)
    try:
        table = RegionTable()
        region = table.register(1, 0, 8192, ACCESS_REMOTE_WRITE, fd=fd)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        table.domain(1).remote(region.key, 8000, 192, write=True)[:] = bytes(192)  # the last page is still there
        table.release_owner(1)
    finally:
        os.close(fd)


@pytest.mark.parametrize("make, message", [
    (lambda: sealed_memfd(4096, seals=0), "sealed against shrinking"),
    (lambda: sealed_memfd(1024), "holds 1024 bytes, not the 4096 registered"),
    (lambda: os.open(os.devnull, os.O_RDWR), "must be a memfd"),
    (lambda: os.pipe()[0], "must be a memfd"),
    (lambda: os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR), "must be a memfd"),  # an unnamed file
])
def test_descriptors_that_are_no_sealed_memfd_are_refused(make, message):
    fd = make()
    try:
        table = RegionTable()
        with pytest.raises(ValueError, match=message):
            table.register(1, 0, 4096, ACCESS_REMOTE_WRITE, fd=fd)
        assert table.regions == {}
    finally:
        os.close(fd)


def test_a_read_only_descriptor_of_a_sealed_memfd_is_refused_in_one_line():
    fd = sealed_memfd(4096)
    read_only = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="cannot map the region's memfd"):
            RegionTable().register(1, 0, 4096, ACCESS_REMOTE_WRITE, fd=read_only)
    finally:
        os.close(read_only)
        os.close(fd)
