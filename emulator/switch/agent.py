"""The switch agent: one process per switch namespace, forwarding real frames.

It wraps the sans-I/O pieces (forwarding decisions, egress queues) with
AF_PACKET sockets and an epoll loop.  Egress pacing is the kernel's: each
port's HTB shapes at the link rate, and the port's socket has a send buffer
of about two full frames, so the kernel queue holds one to three frames and
the backlog stays in the switch's own accounted queues.  When the kernel
queue drains, the socket turns writable and the loop sends the next frame
the queues choose.

Started as ``python -m emulator.switch.agent CONFIG READY_FD``; it writes
``ready`` to READY_FD once its sockets are bound.  It imports only the
standard library and small project modules: scapy and pyroute2 cost about a
second and 100 MB per process.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict
from typing import Any

from emulator.mac import mac_bytes
from emulator.netns import netns_path, setns
from emulator.switch.forwarding import ETH_ARP, ETH_CONTROL, ETH_IPV4, arp_reply, ecmp_index, priority, routed
from emulator.switch.queues import PRIORITIES, EgressQueues

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
SEND_BUFFER = 3000  # the kernel doubles it: room for two MTU-sized frames
RECV_BUFFER = 4 << 20
BATCH = 64


class Port:
    """One switch port: its socket and its counters of what arrived."""

    def __init__(self, ifname: str, mac: str, peer_mac: str) -> None:
        self.ifname = ifname
        self.mac = mac_bytes(mac)
        self.peer_mac = mac_bytes(peer_mac)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        self.sock.bind((ifname, ETH_P_ALL))
        self.sock.setblocking(False)
        self.fd = self.sock.fileno()
        self.writable_armed = False
        self.rx_frames = 0
        self.rx_bytes = 0
        self.kernel_drops = 0
        self.drops = {"no_route": 0, "ttl": 0, "not_for_us": 0, "unsupported": 0}
        self.control_frames = 0

    def read_kernel_drops(self) -> int:
        """Frames the kernel dropped because this socket's buffer was full."""
        _, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        self.kernel_drops += drops
        return self.kernel_drops


class SwitchAgent:
    """The forwarding loop of one switch."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.name = config["name"]
        self.seed = config["seed"]
        self.ports = [Port(p["ifname"], p["mac"], p["peer_mac"]) for p in config["ports"]]
        self.by_name = {p.ifname: p for p in self.ports}
        self.by_fd = {p.fd: p for p in self.ports}
        self.routes = {
            socket.inet_aton(ip): [self.by_name[name] for name in names] for ip, names in config["routes"].items()
        }
        self.queues = EgressQueues([p.ifname for p in self.ports], config["buffer_bytes"])
        self.epoll = select.epoll()
        for port in self.ports:
            self.epoll.register(port.fd, select.EPOLLIN)
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.control.bind(config["control"])
        self.control.listen(8)
        self.control.setblocking(False)
        self.epoll.register(self.control.fileno(), select.EPOLLIN)
        self.running = True
        self.started = time.monotonic()

    def run(self) -> None:
        control_fd = self.control.fileno()
        while self.running:
            try:
                events = self.epoll.poll(0.5)
            except InterruptedError:
                continue
            for fd, mask in events:
                if fd == control_fd:
                    self._serve_control()
                    continue
                port = self.by_fd[fd]
                if mask & select.EPOLLIN:
                    self._receive(port)
                if mask & select.EPOLLOUT:
                    self._drain(port)

    def _receive(self, port: Port) -> None:
        recv = port.sock.recv
        for _ in range(BATCH):
            try:
                frame = recv(65536)
            except BlockingIOError:
                return
            port.rx_frames += 1
            port.rx_bytes += len(frame)
            self._forward(port, frame)

    def _forward(self, port: Port, frame: bytes) -> None:
        ethertype = frame[12:14]
        if frame[0:6] != port.mac and not frame[0] & 1:
            port.drops["not_for_us"] += 1
            return
        if ethertype == ETH_IPV4:
            choices = self.routes.get(frame[30:34])
            if choices is None:
                port.drops["no_route"] += 1
                return
            out = choices[0] if len(choices) == 1 else choices[ecmp_index(frame, self.seed, len(choices))]
            forwarded = routed(frame, out.mac, out.peer_mac)
            if forwarded is None:
                port.drops["ttl"] += 1
                return
            self._send(out, priority(frame), forwarded)
        elif ethertype == ETH_ARP:
            reply = arp_reply(frame, port.mac)
            if reply is not None:
                self._send(port, 0, reply)
        elif ethertype == ETH_CONTROL:
            port.control_frames += 1
        else:
            port.drops["unsupported"] += 1

    def _send(self, out: Port, prio: int, frame: bytes) -> None:
        if self.queues.enqueue(out.ifname, prio, frame):
            self._drain(out)

    def _drain(self, port: Port) -> None:
        """Hand head frames to the kernel until its queue for the port is full."""
        queues, name, send = self.queues, port.ifname, port.sock.send
        while True:
            head = queues.head(name)
            if head is None:
                break
            try:
                send(head[1])
            except BlockingIOError:
                break
            queues.pop(name, head[0])
        backlog = queues.has_backlog(name)
        if backlog != port.writable_armed:
            self.epoll.modify(port.fd, select.EPOLLIN | (select.EPOLLOUT if backlog else 0))
            port.writable_armed = backlog

    def stats(self) -> dict[str, Any]:
        """Counters of every port and queue, JSON-ready."""
        ports = {}
        for port in self.ports:
            ports[port.ifname] = {
                "rx_frames": port.rx_frames,
                "rx_bytes": port.rx_bytes,
                "rx_kernel_drops": port.read_kernel_drops(),
                "rx_drops": dict(port.drops),
                "rx_control_frames": port.control_frames,
                "queues": [asdict(self.queues.counters(port.ifname, p)) for p in range(PRIORITIES)],
                "backlog_bytes": self.queues.backlog_bytes(port.ifname),
            }
        return {"switch": self.name, "pid": os.getpid(), "uptime_s": time.monotonic() - self.started, "ports": ports}

    def _serve_control(self) -> None:
        """Answer one request on the control socket: ``stats`` or ``stop``."""
        try:
            conn, _ = self.control.accept()
        except BlockingIOError:
            return
        with conn:
            conn.settimeout(0.2)
            try:
                request = conn.recv(64).strip()
                if request == b"stop":
                    self.running = False
                    conn.sendall(b'{"stopping": true}\n')
                else:
                    conn.sendall(json.dumps(self.stats()).encode() + b"\n")
            except OSError:
                pass


def main(argv: list[str]) -> int:
    config_path, ready_fd = argv[0], int(argv[1])
    with open(config_path) as f:
        config = json.load(f)
    fd = os.open(netns_path(config["netns"]), os.O_RDONLY)
    setns(fd)
    os.close(fd)
    agent = SwitchAgent(config)

    def stop(_signum: int, _frame: object) -> None:
        agent.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    agent.run()
    with open(config["stats_file"], "w") as f:
        json.dump(agent.stats(), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
