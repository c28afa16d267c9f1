"""Link shaping and host pause gates in tc, through netlink.

Every veth end gets the same tree, so the kernel, not Python, decides when a
frame leaves::

    htb 1: (default 1:10)
      class 1:1   rate = ceil = link rate
        class 1:10+p  (p = 0..7)  rate = link/8, ceil = link rate
          [hosts only] tbf (20+p):  the pause gate of priority p
                         pfifo_fast (30+p):  its queue, gate frames first

Priority p is the IPv4 DSCP class selector, DSCP >> 3 (the top three bits
of the TOS byte): RoCE's DSCP 26 is priority 3, CNP's DSCP 48 priority 6.
u32 filters match those bits; anything else (ARP, DSCP 0) goes to 1:10.

A pause gate is a TBF.  Closing it changes the TBF to 1 byte/s; queued
frames stay queued and a sender's socket blocks once its buffer is full,
so nothing is dropped.  A change refills the TBF's bucket (one MTU-sized
frame's worth), so closing also sends one MTU-sized *gate frame* into that
priority: a u32 filter on its EtherType and first byte puts it in the
priority's class, and its skb priority (TC_PRIO_CONTROL) puts it in band 0
of the gate's pfifo_fast, ahead of any queued data, so it spends the
bucket and no data frame leaves after the gate closed.  (Only a frame that
HTB had already taken from the gate while the close was on its way still
goes, like a NIC finishing the frame it is sending.)  Opening restores the
rate and then sends one small *kick* frame,
because the kernel does not reschedule a qdisc on change (without the kick
resumption stalled 0.2 to 0.9 s in our measurement).  Both are frames of
the IEEE local experimental EtherType 0x88B5 that switches count and drop.
Gate changes are pre-encoded netlink messages on a raw socket: pyroute2's
tc call costs about 1 ms.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

from emulator.wire.mac import mac_bytes
from emulator.kernel.netns import entered

PRIORITIES = 8
ROOT = 0x10000
PARENT_CLASS = 0x10001
ETH_P_IP = 0x0800
# Gate and kick frames: IEEE local experimental EtherType; switches drop them.
CONTROL_ETHERTYPE = 0x88B5
GATE_LIMIT = 8 << 20  # bytes a closed gate holds; above any socket's send buffer
CLOSED_RATE = 1  # bytes/s
# An open gate must never be the bottleneck: with a one-frame burst a TBF at
# exactly the link rate loses throughput to timer jitter; HTB shapes instead.
OPEN_RATE_FACTOR = 10

TC_PRIO_CONTROL = 7
_RTM_NEWQDISC = 36
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4
_NLM_F_EXCL, _NLM_F_CREATE = 0x200, 0x400
_NLMSG_ERROR = 2
_TCA_KIND, _TCA_OPTIONS = 1, 2
_TCA_TBF_PARMS, _TCA_TBF_RATE64, _TCA_TBF_BURST = 1, 4, 6
_LINKLAYER_ETHERNET = 1


def leaf_class(priority: int) -> int:
    """The HTB class id of ``priority``: 1:10 .. 1:17."""
    return ROOT | (0x10 + priority)


def gate_handle(priority: int) -> int:
    """The handle of the pause gate (TBF) of ``priority``: 20: .. 27:."""
    return (0x20 + priority) << 16


def _nla(kind: int, payload: bytes) -> bytes:
    header = struct.pack("HH", 4 + len(payload), kind)
    return header + payload + b"\0" * (-len(payload) % 4)


def encode_tbf(ifindex: int, priority: int, rate_bytes: int, burst: int, create: bool = False) -> bytes:
    """A complete RTM_NEWQDISC message that sets a gate's TBF (with ACK).

    ``create`` makes it ``tc qdisc add``; otherwise it is ``tc qdisc change``.
    The kernel derives the bucket from TCA_TBF_BURST, so no rate table and no
    tick arithmetic are needed, even at 1 byte/s.
    """
    ratespec = struct.pack("BBHhHI", 0, _LINKLAYER_ETHERNET, 0, 0, 0, min(rate_bytes, 0xFFFFFFFF))
    peakspec = struct.pack("BBHhHI", 0, 0, 0, 0, 0, 0)
    parms = ratespec + peakspec + struct.pack("III", GATE_LIMIT, 0, 0)
    options = _nla(_TCA_TBF_PARMS, parms) + _nla(_TCA_TBF_BURST, struct.pack("I", burst))
    if rate_bytes > 0xFFFFFFFF:
        options += _nla(_TCA_TBF_RATE64, struct.pack("Q", rate_bytes))
    body = struct.pack("BxxxiIII", socket.AF_UNSPEC, ifindex, gate_handle(priority), leaf_class(priority), 0)
    body += _nla(_TCA_KIND, b"tbf\0") + _nla(_TCA_OPTIONS | 0x8000, options)
    flags = _NLM_F_REQUEST | _NLM_F_ACK | (_NLM_F_CREATE | _NLM_F_EXCL if create else 0)
    return struct.pack("IHHII", 16 + len(body), _RTM_NEWQDISC, flags, 0, 0) + body


def encode_gate_queue(ifindex: int, priority: int) -> bytes:
    """``tc qdisc add ... parent (20+p):1 handle (30+p): pfifo_fast`` (with ACK)."""
    body = struct.pack("BxxxiIII", socket.AF_UNSPEC, ifindex, (0x30 + priority) << 16, gate_handle(priority) | 1, 0)
    body += _nla(_TCA_KIND, b"pfifo_fast\0")
    flags = _NLM_F_REQUEST | _NLM_F_ACK | _NLM_F_CREATE | _NLM_F_EXCL
    return struct.pack("IHHII", 16 + len(body), _RTM_NEWQDISC, flags, 0, 0) + body


def _netlink_call(sock: socket.socket, message: bytes) -> None:
    """Send one request and raise OSError if the kernel's ACK says it failed."""
    sock.send(message)
    reply = sock.recv(65536)
    _, kind = struct.unpack_from("IH", reply)
    if kind == _NLMSG_ERROR:
        error = struct.unpack_from("i", reply, 16)[0]
        if error:
            raise OSError(-error, f"tc change failed: {error}")


def open_route_socket(netns: str) -> socket.socket:
    """A raw NETLINK_ROUTE socket that lives in namespace ``netns``."""
    with entered(netns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    sock.bind((0, 0))
    return sock


def shape_link(ipr: Any, ifindex: int, rate_bps: int, mtu: int, host: bool) -> None:
    """Install the HTB tree and DSCP filters on one veth end (setup path).

    On a host NIC also the filters that steer each gate frame (EtherType
    0x88B5, first byte = its priority) into its priority's class.
    """
    quantum = mtu + 14
    ipr.tc("add", "htb", ifindex, handle=ROOT, default=0x10)
    ipr.tc("add-class", "htb", ifindex, handle=PARENT_CLASS, parent=ROOT, rate=f"{rate_bps}bit", ceil=f"{rate_bps}bit", quantum=quantum)
    for p in range(PRIORITIES):
        ipr.tc(
            "add-class", "htb", ifindex, handle=leaf_class(p), parent=PARENT_CLASS,
            rate=f"{max(rate_bps // PRIORITIES, 8)}bit", ceil=f"{rate_bps}bit", quantum=quantum,
        )
    for p in range(1, PRIORITIES):
        # IPv4 word 0 is version/IHL, TOS, total length; DSCP >> 3 is TOS >> 5.
        ipr.tc(
            "add-filter", "u32", ifindex, parent=ROOT, prio=10, protocol=ETH_P_IP,
            target=leaf_class(p), keys=[f"0x{p << 21:08x}/0x00e00000+0"],
        )
        if host:
            ipr.tc(
                "add-filter", "u32", ifindex, parent=ROOT, prio=5, protocol=CONTROL_ETHERTYPE,
                target=leaf_class(p), keys=[f"0x{p << 24:08x}/0xff000000+0"],
            )


class PauseGates:
    """The eight pause gates of one host NIC, and the API to close/open them.

    ``pause(p)`` and ``resume(p)`` cost one netlink round trip and one frame
    each (about 0.1 ms; docs/performance.md).  ``pause_for(p, ns)`` resumes by itself after ``ns``, the
    way a PFC pause of N quanta expires; a later pause or resume supersedes
    a pending expiry.
    """

    def __init__(self, netns: str, ifname: str, ifindex: int, rate_bps: int, mtu: int,
                 src_mac: str, dst_mac: str) -> None:
        self.ifname = ifname
        self.burst = mtu + 14
        rate = max(rate_bps // 8, 1) * OPEN_RATE_FACTOR
        self._close = [encode_tbf(ifindex, p, CLOSED_RATE, self.burst) for p in range(PRIORITIES)]
        self._open = [encode_tbf(ifindex, p, rate, self.burst) for p in range(PRIORITIES)]
        self._create = [encode_tbf(ifindex, p, rate, self.burst, create=True) for p in range(PRIORITIES)]
        header = mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", CONTROL_ETHERTYPE)
        self._kick = header + b"fabric-emu kick".ljust(46, b"\0")
        self._gate_frames = [header + bytes((p,)) + b"fabric-emu pause gate".ljust(self.burst - len(header) - 1, b"\0")
                             for p in range(PRIORITIES)]
        self._queues = [encode_gate_queue(ifindex, p) for p in range(PRIORITIES)]
        self._nl = open_route_socket(netns)
        with entered(netns):
            self._tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self._tx.bind((ifname, 0))
        self._tx.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, TC_PRIO_CONTROL)  # band 0 of a gate queue
        self._lock = threading.Lock()
        self._timers: dict[int, threading.Timer] = {}
        self.paused = [False] * PRIORITIES

    def install(self) -> None:
        """Add the open gates below the HTB leaves (once, at build time)."""
        for gate, queue in zip(self._create, self._queues):
            _netlink_call(self._nl, gate)
            _netlink_call(self._nl, queue)

    def _cancel_timer(self, priority: int) -> None:
        timer = self._timers.pop(priority, None)
        if timer is not None:
            timer.cancel()

    def pause(self, priority: int) -> None:
        """Close the gate of ``priority`` until :meth:`resume`."""
        with self._lock:
            self._cancel_timer(priority)
            _netlink_call(self._nl, self._close[priority])
            self.paused[priority] = True
            self._tx.send(self._gate_frames[priority])

    def resume(self, priority: int) -> None:
        """Open the gate of ``priority`` and kick the device's qdisc."""
        with self._lock:
            self._cancel_timer(priority)
            _netlink_call(self._nl, self._open[priority])
            self.paused[priority] = False
            self._tx.send(self._kick)

    def pause_for(self, priority: int, duration_ns: int) -> None:
        """Close the gate of ``priority`` and open it after ``duration_ns``."""
        self.pause(priority)
        timer = threading.Timer(duration_ns / 1e9, self._expire, args=(priority,))
        timer.daemon = True
        with self._lock:
            self._timers[priority] = timer
        timer.start()

    def _expire(self, priority: int) -> None:
        with self._lock:
            if self._timers.get(priority) is not threading.current_thread():
                return
        self.resume(priority)

    def close(self) -> None:
        with self._lock:
            for priority in list(self._timers):
                self._cancel_timer(priority)
        self._nl.close()
        self._tx.close()
