"""Memory regions: the memfd checks before the RNIC maps a region, and the mapping shared with the application.

The key, domain, bound and access checks themselves are the compiled RNIC's (crates/fabric-core's
``agent::regions``, with its cargo tests); here the regions are registered with a compiled RNIC on a wire in
memory, as the verbs server registers them.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import tempfile

import pytest

from emulator.agents.memory import ACCESS_ALL, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE, MAX_MR_BYTES, register
from emulator._core.dataplane import UnwiredNic
from emulator._core.rc import RcConfig, WcStatus, WrOpcode
from fake_agents import HOST_IP, host_config


@pytest.fixture
def nic(tmp_path):
    return UnwiredNic(host_config(str(tmp_path)))


def sealed_memfd(length: int, seals: int = fcntl.F_SEAL_SHRINK) -> int:
    """A memfd as the verbs client makes one: sized, then sealed."""
    fd = os.memfd_create("test-mr", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, length)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def loop_write(nic: UnwiredNic, source: int, target: int, addr: int, length: int, remote_addr: int) -> None:
    """An RDMA WRITE from region ``source`` to region ``target`` of domain 1 through a QP connected to itself."""
    nic.connect(0x11, 1, 100, RcConfig(mtu=1024), 0x11, 100, HOST_IP, [])
    nic.post_send(0x11, [(1, int(WrOpcode.RDMA_WRITE), addr, length, source, remote_addr, target, 0, True)])
    for step in range(10):
        nic.after_events(step * 1000)
        for frame in nic.take_sent():  # the wire loops back
            nic.receive(step * 1000, frame)
    [(_qp, _wr, status, *_rest)] = nic.completions()
    assert status == WcStatus.SUCCESS


def test_a_memfd_region_shares_pages_with_its_owner(nic):
    """What the RNIC does with an application's memfd: both mappings see the same bytes."""
    source_fd, target_fd = sealed_memfd(4096), sealed_memfd(4096)
    try:
        source, target = mmap.mmap(source_fd, 4096), mmap.mmap(target_fd, 4096)
        source[:4] = b"rdma"
        a = register(nic, 1, 0x1000, 4096, ACCESS_ALL, source_fd)
        b = register(nic, 1, 0x7000, 4096, ACCESS_ALL, target_fd)
        assert a != b
        loop_write(nic, a, b, 0x1000, 4, 0x7000 + 100)
        assert target[100:104] == b"rdma"
        nic.release_owner(1)
        assert nic.regions() == 0
        source.close()
        target.close()
    finally:
        os.close(source_fd)
        os.close(target_fd)


def test_a_sealed_region_cannot_shrink_under_the_rnic(nic):
    """What kept a shrunk memfd from killing the agent with SIGBUS at the next WRITE."""
    fd = sealed_memfd(8192)
    try:
        key = register(nic, 1, 0, 8192, ACCESS_ALL, fd)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        loop_write(nic, key, key, 0, 192, 8000)  # the last page is still there
        nic.release_owner(1)
    finally:
        os.close(fd)


def test_size_limits_and_flags(nic):
    fd = sealed_memfd(8)
    try:
        with pytest.raises(ValueError, match="1 byte to 1024 MiB"):
            register(nic, 1, 0, 0, ACCESS_LOCAL_WRITE, fd)
        with pytest.raises(ValueError, match="1 byte to 1024 MiB"):
            register(nic, 1, 0, MAX_MR_BYTES + 1, ACCESS_LOCAL_WRITE, fd)
        with pytest.raises(ValueError, match="unknown access flags"):
            register(nic, 1, 0, 8, 0x100, fd)
        assert nic.regions() == 0
    finally:
        os.close(fd)


@pytest.mark.parametrize("make, message", [
    (lambda: sealed_memfd(4096, seals=0), "sealed against shrinking"),
    (lambda: sealed_memfd(1024), "holds 1024 bytes, not the 4096 registered"),
    (lambda: os.open(os.devnull, os.O_RDWR), "must be a memfd"),
    (lambda: os.pipe()[0], "must be a memfd"),
    (lambda: os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR), "must be a memfd"),  # an unnamed file
])
def test_descriptors_that_are_no_sealed_memfd_are_refused(nic, make, message):
    fd = make()
    try:
        with pytest.raises(ValueError, match=message):
            register(nic, 1, 0, 4096, ACCESS_REMOTE_WRITE, fd)
        assert nic.regions() == 0
    finally:
        os.close(fd)


def test_a_read_only_descriptor_of_a_sealed_memfd_is_refused_in_one_line(nic):
    fd = sealed_memfd(4096)
    read_only = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="cannot map the region's memfd"):
            register(nic, 1, 0, 4096, ACCESS_REMOTE_WRITE, read_only)
        assert nic.regions() == 0
    finally:
        os.close(read_only)
        os.close(fd)
