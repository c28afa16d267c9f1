"""Switches and RNICs with a fake wire, for unit tests of their per-frame paths (no root).

The compiled switch runs on wires in memory (:class:`~emulator._core.dataplane.UnwiredSwitch`: frames handed
in, frames sent kept, a port told to refuse), and so does the compiled RNIC (``UnwiredNic``: frames handed in
with ``receive``, frames sent kept, the kernel queue's room set by the test).  A host agent's own raw
AF_PACKET sockets (PFC) are replaced by :class:`FakeWire` objects: a real eventfd stands in for the descriptor
(so epoll registration works), frames handed in are returned by ``recv``, and frames sent are recorded.  Everything else is the
agents' real code: the loop (its epoll and timerfd), the Unix control and verbs sockets (in a temporary
directory), the MMU, the IB plane, the RC transport.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import select
import socket
import time
import types
from collections import deque
from typing import Any

import pytest

from emulator.agents import base as agentlib
from emulator.agents import host as host_agent
from emulator.agents import rnic
from emulator._core.dataplane import Loop, UnwiredNic, UnwiredSwitch
from emulator.agents.memory import ACCESS_ALL
from emulator.agents.config import HostConfig, HostIbConfig, PortConfig, SwitchConfig, SwitchIbConfig
from emulator.kernel import packet_socket
from emulator.model.switch_params import derive_config

MAC_S1 = ["02:01:00:00:01:01", "02:01:00:00:01:02", "02:01:00:00:01:03"]
MAC_PEERS = ["02:00:00:00:01:00", "02:00:00:00:02:00", "02:01:00:00:02:01"]
HOST_MAC, GATEWAY_MAC = "02:00:00:00:01:00", "02:01:00:00:01:01"
HOST_IP = "10.0.0.1"
LIDS = {"10.0.0.1": 1, "10.0.0.2": 2, "10.0.0.3": 3}


class FakeWire:
    """A raw socket without a wire: ``inbox`` feeds recv, ``sent`` records send."""

    def __init__(self, *_args: Any) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.inbox: deque[bytes] = deque()
        self.sent: list[bytes] = []
        self.refuse: type[OSError] | None = None  # raise this from send, e.g. BlockingIOError
        self.stamp_ns = 0  # the "kernel's" receive time stamp of the last frame read: when it was read

    def fileno(self) -> int:
        return self._fd

    def setsockopt(self, *_args: Any) -> None:
        pass

    def getsockopt(self, _level: int, _option: int, size: int = 0) -> bytes | int:
        return bytes(size) if size else 0

    def bind(self, *_args: Any) -> None:
        pass

    def setblocking(self, _flag: bool) -> None:
        pass

    def send(self, frame: bytes) -> int:
        if self.refuse is not None:
            raise self.refuse()
        self.sent.append(bytes(frame))
        return len(frame)

    def recv(self, size: int) -> bytes:
        if not self.inbox:
            raise BlockingIOError
        self.stamp_ns = time.time_ns()
        return self.inbox.popleft()[:size]

    def recv_into(self, buffer: bytearray) -> int:
        frame = self.recv(len(buffer))
        buffer[:len(frame)] = frame
        return len(frame)

    def close(self) -> None:
        os.close(self._fd)


def _socket_module() -> types.SimpleNamespace:
    """The socket module, but ``socket()`` makes a FakeWire for anything that is not AF_UNIX."""
    module = types.SimpleNamespace(**{name: getattr(socket, name) for name in dir(socket) if not name.startswith("__")})
    module.socket = lambda family=socket.AF_INET, *args: (
        socket.socket(family, *args) if family == socket.AF_UNIX else FakeWire())
    return module


@pytest.fixture
def fake_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    """Patch the agents' modules so that their wire sockets are FakeWires and RPS is left alone."""
    patch_wire(monkeypatch)


def patch_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    """What :func:`fake_wire` does, for callers outside a test (bench/bench_monitor.py)."""
    fake = _socket_module()
    for module in (host_agent, packet_socket):
        monkeypatch.setattr(module, "socket", fake)
    monkeypatch.setattr(host_agent, "keep_flows_in_order", lambda *_args, **_kw: [])
    monkeypatch.setattr(host_agent.socket, "if_nametoindex", lambda _name: 2)


def switch_config(tmp: str, ib: bool = False, mtus: tuple[int, ...] = (1500, 1500, 1500)) -> SwitchConfig:
    """A switch s1 with ports to h1 and h2 and to another switch; routes to 10.0.0.1..3."""
    mmu = derive_config("ib" if ib else "lossless", 100_000_000, 0, max(mtus), ports=3)
    ports = tuple(PortConfig(ifname=f"s1-eth{i + 1}", mac=MAC_S1[i], peer_mac=MAC_PEERS[i], rate_bps=100_000_000,
                             mtu=mtus[i], delay_ns=0, host_facing=i < 2, loss=0.0, drop=()) for i in range(3))
    return SwitchConfig(
        name="s1", netns="none", control=os.path.join(tmp, "s1.sock"),
        stats_file=os.path.join(tmp, "s1.stats.json"), seed=1, mmu=mmu,
        occupancy_file=os.path.join(tmp, "s1.occupancy.csv"), ports=ports,
        routes={"10.0.0.1": ("s1-eth1",), "10.0.0.2": ("s1-eth2",), "10.0.0.3": ("s1-eth3",)},
        ib=SwitchIbConfig(lft={1: 0, 2: 1, 3: 2}, sl2vl=tuple(sl % 4 for sl in range(16)), vls=4,
                          vl_buffer=mmu.vl_buffer, peer_capacity=(mmu.vl_buffer,) * 3, fc_floor=mmu.fc_floor)
        if ib else None,
    )


def make_switch(tmp: str, monitor: bool = True, **options: Any) -> UnwiredSwitch:
    """Switch s1, compiled, on wires in memory."""
    return UnwiredSwitch(dataclasses.replace(switch_config(tmp, **options), monitor=monitor))


def port_stats(switch: UnwiredSwitch, index: int) -> dict[str, Any]:
    """Port ``index``'s counters, as the switch's stats give them."""
    return switch.stats(time.monotonic_ns())["ports"][f"s1-eth{index + 1}"]


def host_config(tmp: str, ib: bool = False, mtu: int = 1500) -> HostConfig:
    """Host h1 (10.0.0.1) behind s1, its RNIC on RoCEv2 or native IB."""
    return HostConfig(
        name="h1", netns="none", control=os.path.join(tmp, "h1.sock"), stats_file=os.path.join(tmp, "h1.stats.json"),
        seed=7, ifname="h1-eth0", rate_bps=100_000_000, mtu=mtu, mac=HOST_MAC, peer_mac=GATEWAY_MAC,
        ip=HOST_IP, verbs=os.path.join(tmp, "h1.verbs"),
        ib=HostIbConfig(lid=1, sl=0, sl2vl=tuple(sl % 4 for sl in range(16)), vls=4, lids=LIDS,
                        capacity=64 << 10, peer_capacity=16 * 1514, fc_floor=500_000) if ib else None,
    )


class Registry:
    """Stands in for the host agent's epoll registration."""

    def __init__(self) -> None:
        self.handlers: dict[int, Any] = {}

    def watch(self, fd: int, _mask: int, handler: Any) -> None:
        self.handlers[fd] = handler

    def modify(self, _fd: int, _mask: int) -> None:
        pass

    def unwatch(self, fd: int) -> None:
        del self.handlers[fd]


def make_rnic(tmp: str, **options: Any) -> tuple[rnic.Rnic, Registry]:
    """Host h1's verbs server over its compiled RNIC on a wire in memory (``rnic.nic``)."""
    loop = Registry()
    config = host_config(tmp, **options)
    return rnic.Rnic(config, UnwiredNic(config), loop.watch, loop.modify, loop.unwatch), loop


def make_host(tmp: str, **options: Any) -> host_agent.HostAgent:
    """Host h1's agent: its RNIC on a wire in memory (its pause gates' changes kept: ``nic.gate_changes()``)."""
    config = host_config(tmp, **options)
    return host_agent.HostAgent(config, Loop(), nic=UnwiredNic(config))


class App:
    """An application connected to the RNIC; each request is handled by the RNIC's loop at once."""

    def __init__(self, rnic: rnic.Rnic, path: str) -> None:
        self.rnic = rnic
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        rnic._on_accept(0, select.EPOLLIN, 0)
        self.client = max(rnic.clients.values(), key=lambda c: c.pd)

    def raw(self, data: bytes, fds: list[int] = ()) -> dict | None:
        """The RNIC's reply, or None if it hung up on us (an empty message reads as the end of the connection)."""
        if fds:
            socket.send_fds(self.sock, [data], list(fds))
        else:
            self.sock.send(data)
        self.rnic._on_client(self.client, select.EPOLLIN, time.monotonic_ns())
        reply = self.sock.recv(1 << 21, socket.MSG_DONTWAIT)
        if not reply:
            assert self.client.pd not in self.rnic.clients
            return None
        return json.loads(reply)

    def __call__(self, request: dict, fds: list[int] = ()) -> dict:
        return self.raw(json.dumps(request).encode(), fds)

    def close(self) -> None:
        """The application exits; the RNIC sees its end and frees its context."""
        self.sock.close()
        self.rnic._on_client(self.client, select.EPOLLIN, 0)
        assert self.client.pd not in self.rnic.clients


def sealed_memfd(length: int) -> int:
    fd = os.memfd_create("app-mr", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, length)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def registered_region(app: App, addr: int = 0x10000, length: int = 4096) -> int:
    """A region of ``length`` bytes at ``addr`` registered through the verbs socket with every access: its lkey
    (the memfd is the RNIC's once sent, closed here)."""
    fd = sealed_memfd(length)
    try:
        return app({"op": "reg_mr", "addr": addr, "length": length, "access": ACCESS_ALL}, [fd])["lkey"]
    finally:
        os.close(fd)


def close_agent(agent: agentlib.AgentBase) -> None:
    agent.control.close()
    agent.loop.close()
