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
Gate changes and the tree itself are pre-encoded netlink messages on a raw
socket (the tree sent in one datagram per node): pyroute2's tc call costs
about 1 ms, most of it rate tables the kernel does not need at the Ethernet
link layer.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from typing import NamedTuple

from emulator._core.mac import mac_bytes
from emulator.kernel.netns import entered
from emulator.kernel.packet_socket import unbound_packet_socket

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
BATCH_REQUESTS = 64  # tc requests per netlink datagram: their ACKs fit the socket's receive buffer
_RTM_NEWQDISC, _RTM_NEWTCLASS, _RTM_NEWTFILTER = 36, 40, 44
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4
_NLM_F_EXCL, _NLM_F_CREATE = 0x200, 0x400
_NLMSG_ERROR = 2
_TCA_KIND, _TCA_OPTIONS = 1, 2
_TCA_TBF_PARMS, _TCA_TBF_RATE64, _TCA_TBF_BURST = 1, 4, 6
_LINKLAYER_ETHERNET = 1
_TCA_HTB_PARMS, _TCA_HTB_INIT, _TCA_HTB_RATE64, _TCA_HTB_CEIL64 = 1, 2, 6, 7
_TCA_U32_CLASSID, _TCA_U32_SEL = 1, 5
_TC_U32_TERMINAL = 1


def leaf_class(priority: int) -> int:
    """The HTB class id of ``priority``: 1:10 .. 1:17."""
    return ROOT | (0x10 + priority)


def gate_handle(priority: int) -> int:
    """The handle of the pause gate (TBF) of ``priority``: 20: .. 27:."""
    return (0x20 + priority) << 16


def _nla(kind: int, payload: bytes) -> bytes:
    header = struct.pack("HH", 4 + len(payload), kind)
    return header + payload + b"\0" * (-len(payload) % 4)


def _tc_message(kind: int, ifindex: int, handle: int, parent: int, info: int, body: bytes,
                create: bool = True) -> bytes:
    """A complete RTM_NEW{QDISC,TCLASS,TFILTER} request with ACK: creates (never replaces), or changes."""
    payload = struct.pack("BxxxiIII", socket.AF_UNSPEC, ifindex, handle, parent, info) + body
    flags = _NLM_F_REQUEST | _NLM_F_ACK | (_NLM_F_CREATE | _NLM_F_EXCL if create else 0)
    return struct.pack("IHHII", 16 + len(payload), kind, flags, 0, 0) + payload


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
    return _tc_message(_RTM_NEWQDISC, ifindex, gate_handle(priority), leaf_class(priority), 0,
                       _nla(_TCA_KIND, b"tbf\0") + _nla(_TCA_OPTIONS | 0x8000, options), create)


def encode_gate_queue(ifindex: int, priority: int) -> bytes:
    """``tc qdisc add ... parent (20+p):1 handle (30+p): pfifo_fast`` (with ACK)."""
    return _tc_message(_RTM_NEWQDISC, ifindex, (0x30 + priority) << 16, gate_handle(priority) | 1, 0,
                       _nla(_TCA_KIND, b"pfifo_fast\0"))


def open_route_socket(netns: str) -> socket.socket:
    """A raw NETLINK_ROUTE socket that lives in namespace ``netns``."""
    with entered(netns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    sock.bind((0, 0))
    return sock


_HTB_VERSION = 3  # TC_HTB_PROTOVER: htb_init refuses any other
_HTB_BURST = 1600  # bytes of burst per class, as pyroute2 and tc default it
_PSCHED_TICK_NS = 64  # the kernel's psched tick (PSCHED_SHIFT 6)


def _ratespec(rate_bytes: int) -> bytes:
    """A tc_ratespec at the Ethernet link layer (so the kernel needs no rate table)."""
    return struct.pack("BBHhHI", 0, _LINKLAYER_ETHERNET, 0, 0, 0, min(rate_bytes, 0xFFFFFFFF))


def encode_htb_root(ifindex: int) -> bytes:
    """``tc qdisc add dev IF root handle 1: htb default 10``."""
    glob = struct.pack("IIIII", _HTB_VERSION, 10, 0x10, 0, 0)
    return _tc_message(_RTM_NEWQDISC, ifindex, ROOT, 0xFFFFFFFF, 0,
                       _nla(_TCA_KIND, b"htb\0") + _nla(_TCA_OPTIONS | 0x8000, _nla(_TCA_HTB_INIT, glob)))


def encode_htb_class(ifindex: int, handle: int, parent: int, rate_bps: int, ceil_bps: int, quantum: int) -> bytes:
    """``tc class add ... htb rate R ceil C quantum Q`` with a burst of _HTB_BURST bytes at each rate."""
    def ticks(bps: int) -> int:
        return _HTB_BURST * 8_000_000_000 // bps // _PSCHED_TICK_NS
    rate, ceil = rate_bps // 8, ceil_bps // 8
    parms = _ratespec(rate) + _ratespec(ceil) + struct.pack("IIIII", ticks(rate_bps), ticks(ceil_bps), quantum, 0, 0)
    options = _nla(_TCA_HTB_PARMS, parms)
    if rate > 0xFFFFFFFF:
        options += _nla(_TCA_HTB_RATE64, struct.pack("Q", rate))
    if ceil > 0xFFFFFFFF:
        options += _nla(_TCA_HTB_CEIL64, struct.pack("Q", ceil))
    return _tc_message(_RTM_NEWTCLASS, ifindex, handle, parent, 0,
                       _nla(_TCA_KIND, b"htb\0") + _nla(_TCA_OPTIONS | 0x8000, options))


def encode_u32_filter(ifindex: int, prio: int, protocol: int, value: int, mask: int, classid: int) -> bytes:
    """``tc filter add ... parent 1: prio P protocol PROTO u32 match u32 VALUE MASK at 0 flowid CLASSID``."""
    selector = struct.pack("BBBxHHhhI", _TC_U32_TERMINAL, 0, 1, 0, 0, 0, 0, 0)
    selector += struct.pack("!II", mask, value) + struct.pack("ii", 0, 0)
    options = _nla(_TCA_U32_CLASSID, struct.pack("I", classid)) + _nla(_TCA_U32_SEL, selector)
    info = prio << 16 | socket.htons(protocol)
    return _tc_message(_RTM_NEWTFILTER, ifindex, 0, ROOT, info,
                       _nla(_TCA_KIND, b"u32\0") + _nla(_TCA_OPTIONS | 0x8000, options))


def link_tree(ifindex: int, rate_bps: int, mtu: int, host: bool) -> list[bytes]:
    """The requests that install the HTB tree and DSCP filters on one veth end, in order.

    On a host NIC also the filters that steer each gate frame (EtherType
    0x88B5, first byte = its priority) into its priority's class.
    """
    quantum = mtu + 14
    requests = [encode_htb_root(ifindex), encode_htb_class(ifindex, PARENT_CLASS, ROOT, rate_bps, rate_bps, quantum)]
    requests += [encode_htb_class(ifindex, leaf_class(p), PARENT_CLASS, max(rate_bps // PRIORITIES, 8), rate_bps,
                                  quantum) for p in range(PRIORITIES)]
    for p in range(1, PRIORITIES):
        # IPv4 word 0 is version/IHL, TOS, total length; DSCP >> 3 is TOS >> 5.
        requests.append(encode_u32_filter(ifindex, 10, ETH_P_IP, p << 21, 0x00E00000, leaf_class(p)))
        if host:
            requests.append(encode_u32_filter(ifindex, 5, CONTROL_ETHERTYPE, p << 24, 0xFF000000, leaf_class(p)))
    return requests


def netlink_batch(sock: socket.socket, requests: list[bytes]) -> None:
    """Send the requests BATCH_REQUESTS at a time and read their ACKs; OSError naming the first that failed.

    pyroute2 took about 1 ms a tc request (most of it encoding rate tables
    in Python); these requests are pre-encoded and their round trips overlap.
    A batch is bounded because each ACK echoes its request: the 272 of a
    16-port switch in one datagram overran the socket's receive buffer
    (ENOBUFS).  A gate change is a batch of one.
    """
    numbered = [request[:8] + struct.pack("I", seq) + request[12:] for seq, request in enumerate(requests, 1)]
    for first in range(0, len(numbered), BATCH_REQUESTS):
        batch = numbered[first:first + BATCH_REQUESTS]
        sock.send(b"".join(batch))  # the kernel runs every message of one datagram, and ACKs each
        pending = set(range(first + 1, first + len(batch) + 1))
        while pending:
            reply = sock.recv(1 << 16)
            at = 0
            while at + 16 <= len(reply):
                length, kind, _flags, seq = struct.unpack_from("IHHI", reply, at)
                if kind == _NLMSG_ERROR:
                    error = struct.unpack_from("i", reply, at + 16)[0]
                    if error:
                        raise OSError(-error, f"tc request {seq} of {len(numbered)} failed: {os.strerror(-error)}")
                    pending.discard(seq)
                at += (length + 3) & ~3 if length else len(reply)


class GateRequests(NamedTuple):
    """What changes one host NIC's pause gates, pre-encoded: per priority the netlink request that closes its
    TBF, the one that opens it, and the gate frame that spends its bucket; and the kick frame."""

    close: list[bytes]
    open: list[bytes]
    gate_frames: list[bytes]
    kick: bytes


def _open_rate(rate_bps: int) -> int:
    """An open gate's TBF rate, in bytes/s: never the bottleneck (HTB shapes)."""
    return max(rate_bps // 8, 1) * OPEN_RATE_FACTOR


def gate_requests(ifindex: int, rate_bps: int, mtu: int, src_mac: str, dst_mac: str) -> GateRequests:
    """The gate changes of the NIC ``ifindex`` (from ``src_mac``, its switch port ``dst_mac``) at ``rate_bps``."""
    burst = mtu + 14
    rate = _open_rate(rate_bps)
    header = mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", CONTROL_ETHERTYPE)
    return GateRequests(
        close=[encode_tbf(ifindex, p, CLOSED_RATE, burst) for p in range(PRIORITIES)],
        open=[encode_tbf(ifindex, p, rate, burst) for p in range(PRIORITIES)],
        gate_frames=[header + bytes((p,)) + b"fabric-emu pause gate".ljust(burst - len(header) - 1, b"\0")
                     for p in range(PRIORITIES)],
        kick=header + b"fabric-emu kick".ljust(46, b"\0"),
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
        self._create = [encode_tbf(ifindex, p, _open_rate(rate_bps), mtu + 14, create=True) for p in range(PRIORITIES)]
        self._close, self._open, self._gate_frames, self._kick = gate_requests(ifindex, rate_bps, mtu, src_mac, dst_mac)
        self._queues = [encode_gate_queue(ifindex, p) for p in range(PRIORITIES)]
        self._nl = open_route_socket(netns)
        self._netns = netns
        self._tx: socket.socket | None = None  # opened at the first pause (see sender)
        self._lock = threading.Lock()
        self._timers: dict[int, threading.Timer] = {}
        self.paused = [False] * PRIORITIES

    def install(self) -> None:
        """Add the open gates below the HTB leaves (once, at build time)."""
        netlink_batch(self._nl, [request for pair in zip(self._create, self._queues) for request in pair])

    def _cancel_timer(self, priority: int) -> None:
        timer = self._timers.pop(priority, None)
        if timer is not None:
            timer.cancel()

    def pause(self, priority: int) -> None:
        """Close the gate of ``priority`` until :meth:`resume`."""
        with self._lock:
            self._cancel_timer(priority)
            netlink_batch(self._nl, [self._close[priority]])
            self.paused[priority] = True
            self.sender().send(self._gate_frames[priority])

    def resume(self, priority: int) -> None:
        """Open the gate of ``priority`` and kick the device's qdisc."""
        with self._lock:
            self._cancel_timer(priority)
            netlink_batch(self._nl, [self._open[priority]])
            self.paused[priority] = False
            self.sender().send(self._kick)

    def sender(self) -> socket.socket:
        """The socket that sends gate frames and kicks, opened the first time one is sent.

        Closing an AF_PACKET socket waits for an RCU grace period (1.2 ms
        each here): the builder's gates of fattree,16's 1024 hosts, each with
        its own socket, took 12 s to close although most never pause.
        """
        if self._tx is None:
            with entered(self._netns):
                sock = unbound_packet_socket()
            sock.bind((self.ifname, 0))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, TC_PRIO_CONTROL)  # band 0 of a gate queue
            self._tx = sock
        return self._tx

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
        if self._tx is not None:
            self._tx.close()
