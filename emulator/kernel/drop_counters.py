"""Where the kernel of one namespace dropped frames: tc qdiscs, interfaces, IPv4, UDP sockets.

A frame of a lossless run can be lost outside the switch model: in a
host's pause gate (the gate's TBF, its queue, the HTB class above it; see
:mod:`emulator.kernel.tc`), in a veth (the peer's backlog full), or at a
receiving socket whose buffer was full.  The kernel counts each; this
module reads the counts of one namespace on demand, never per frame: a
netlink dump of the interfaces (IFLA_STATS64) and of the qdiscs
(TCA_STATS2), and the namespace's /proc/net/snmp (IPv4 and UDP errors).

tc attributes a drop to every qdisc on the frame's way up: a frame the
gate queue of priority p refuses is counted by that queue, by the gate
(TBF), by HTB class 1:1p and by the HTB root.  So a priority's tc drops
are the largest count along its chain of qdiscs below class 1:1p (not
their sum; the class adds nothing: every drop below it is its leaf
qdisc's), and the root's drops beyond those of the qdiscs right below its
classes are the ones no class took (a filter's verdict): they cannot be
given a priority.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any

from emulator.kernel.netns import entered
from emulator.kernel.tc import PRIORITIES, ROOT, open_route_socket

_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_RTM_GETLINK, _RTM_NEWLINK = 18, 16
_RTM_GETQDISC, _RTM_NEWQDISC = 38, 36
_IFLA_IFNAME, _IFLA_STATS64 = 3, 23
_TCA_STATS, _TCA_STATS2 = 3, 7
_TCA_STATS_QUEUE = 3
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
_LINK_WANTED = frozenset((_IFLA_IFNAME, _IFLA_STATS64))
_TC_WANTED = frozenset((_TCA_STATS, _TCA_STATS2))
_QUEUE_WANTED = frozenset((_TCA_STATS_QUEUE,))
_TC_H_ROOT = 0xFFFFFFFF
_STATS64_RX_DROPPED, _STATS64_TX_DROPPED = 6, 7  # u64 fields of struct rtnl_link_stats64
_UDP_FIELDS = {"InErrors": "in_errors", "RcvbufErrors": "rcvbuf_errors", "SndbufErrors": "sndbuf_errors",
               "InCsumErrors": "csum_errors", "MemErrors": "mem_errors"}
# IPv4's: a bad header (checksum included), an address not ours, no room, no route.
_IP_FIELDS = {"InHdrErrors": "in_hdr_errors", "InAddrErrors": "in_addr_errors", "InDiscards": "in_discards",
              "OutDiscards": "out_discards", "OutNoRoutes": "out_no_routes"}
_DUMP_REPLY_MAX = 1 << 16


def attributes(data: bytes, at: int = 0, wanted: frozenset[int] | None = None) -> dict[int, bytes]:
    """Netlink attributes from ``at`` to the end of ``data``, by type (the first of a type wins).

    With ``wanted``, only those, and the walk ends once all were found (an
    interface's message has some fifty attributes; a stats request reads
    two).  A truncated attribute ends the list: what the kernel sent is
    trusted only as far as its lengths hold.
    """
    found: dict[int, bytes] = {}
    end = len(data)
    while at + 4 <= end:
        length, kind = struct.unpack_from("HH", data, at)
        if length < 4 or at + length > end:
            break
        kind &= _NLA_TYPE_MASK
        if (wanted is None or kind in wanted) and kind not in found:
            found[kind] = data[at + 4:at + length]
            if wanted is not None and len(found) == len(wanted):
                break
        at += (length + 3) & ~3
    return found


def messages(reply: bytes) -> list[tuple[int, int, bytes]]:
    """The (type, sequence number, payload) netlink messages of one datagram; a truncated one ends it."""
    found = []
    at = 0
    while at + 16 <= len(reply):
        length, kind, _flags, seq = struct.unpack_from("IHHI", reply, at)
        if length < 16 or at + length > len(reply):
            break
        found.append((kind, seq, reply[at + 16:at + length]))
        at += (length + 3) & ~3
    return found


def link_drops(payload: bytes) -> tuple[str, int, dict[str, int]] | None:
    """An RTM_NEWLINK message's interface name, index and rx/tx drops (None without both attributes)."""
    if len(payload) < 16:
        return None
    ifindex = struct.unpack_from("i", payload, 4)[0]
    found = attributes(payload, 16, _LINK_WANTED)  # after struct ifinfomsg
    name, stats = found.get(_IFLA_IFNAME), found.get(_IFLA_STATS64)
    if name is None or stats is None or len(stats) < 8 * (_STATS64_TX_DROPPED + 1):
        return None
    rx, tx = struct.unpack_from("QQ", stats, 8 * _STATS64_RX_DROPPED)
    return name.split(b"\0", 1)[0].decode(errors="replace"), ifindex, {"rx_dropped": rx, "tx_dropped": tx}


def tc_drops(payload: bytes) -> tuple[int, int, int, int] | None:
    """An RTM_NEWQDISC message: (ifindex, handle, parent, drops), None if it has no stats."""
    if len(payload) < 20:
        return None
    _family, ifindex, handle, parent, _info = struct.unpack_from("BxxxiIII", payload)
    found = attributes(payload, 20, _TC_WANTED)
    queue = attributes(found.get(_TCA_STATS2, b""), 0, _QUEUE_WANTED).get(_TCA_STATS_QUEUE)
    if queue is not None and len(queue) >= 12:  # struct gnet_stats_queue: qlen, backlog, drops, ...
        return ifindex, handle, parent, struct.unpack_from("I", queue, 8)[0]
    legacy = found.get(_TCA_STATS)
    if legacy is not None and len(legacy) >= 16:  # struct tc_stats: bytes (u64), packets, drops, ...
        return ifindex, handle, parent, struct.unpack_from("I", legacy, 12)[0]
    return None


def _priority_of_class(classid: int) -> int | None:
    """The priority of an HTB leaf class 1:10 .. 1:17, else None."""
    if classid >> 16 == ROOT >> 16 and 0x10 <= classid & 0xFFFF < 0x10 + PRIORITIES:
        return (classid & 0xFFFF) - 0x10
    return None


def tree_drops(qdiscs: list[tuple[int, int, int]]) -> dict[str, Any]:
    """One interface's tc drops: per priority the largest count along its chain, and what no class took.

    ``qdiscs`` are (handle, parent, drops).  A qdisc belongs to a
    priority when its parent is that priority's HTB class or a qdisc of
    that priority (the gate below the class, the gate's queue below the
    gate).
    """
    by_priority = [0] * PRIORITIES
    owner: dict[int, int] = {}  # qdisc handle -> priority
    pending = list(qdiscs)
    while pending:  # parents before children, whatever order the dump gave
        left = []
        for handle, parent, drops in pending:
            p = _priority_of_class(parent)
            if p is None:
                p = owner.get(parent & 0xFFFF0000)
            if p is None:
                left.append((handle, parent, drops))
                continue
            owner[handle] = p
            by_priority[p] = max(by_priority[p], drops)
        if len(left) == len(pending):
            break
        pending = left
    root = sum(drops for _handle, parent, drops in qdiscs if parent == _TC_H_ROOT)
    # HTB counts a leaf qdisc's drop at the root too: the root's surplus took no class.
    class_sum = sum(drops for _handle, parent, drops in qdiscs if _priority_of_class(parent) is not None)
    unowned = [drops for handle, parent, drops in pending if parent != _TC_H_ROOT and handle not in owner]
    return {"by_priority": by_priority, "unattributed": max(0, root - class_sum) + sum(unowned)}


def snmp_errors(snmp: str, protocol: str, fields: dict[str, str]) -> dict[str, int]:
    """Counters ``fields`` (theirs -> ours) of a /proc/net/snmp text's ``protocol:`` header and value lines."""
    lines = [line.split() for line in snmp.splitlines() if line.startswith(f"{protocol}:")]
    if len(lines) < 2:
        return dict.fromkeys(fields.values(), 0)
    values = dict(zip(lines[0][1:], lines[1][1:]))
    return {ours: int(values[theirs]) if values.get(theirs, "").isdigit() else 0 for theirs, ours in fields.items()}


def udp_errors(snmp: str) -> dict[str, int]:
    """The UDP error counters of a /proc/net/snmp text."""
    return snmp_errors(snmp, "Udp", _UDP_FIELDS)


def ip_errors(snmp: str) -> dict[str, int]:
    """The IPv4 error counters of a /proc/net/snmp text."""
    return snmp_errors(snmp, "Ip", _IP_FIELDS)


DUMP_TIMEOUT_S = 0.5


class NamespaceDrops:
    """The drop counters of one namespace's interfaces ``ifnames``, read on demand.

    Opened once, in the namespace (the route socket and the snmp file stay
    bound to it, whichever thread reads them later).
    """

    def __init__(self, netns: str, ifnames: list[str]) -> None:
        self.ifnames = list(ifnames)
        self._nl = open_route_socket(netns)
        # An agent reads this inside its loop: a dump the kernel never finished must not stop it (and the
        # agents beside it in its process); past this, socket.timeout, an OSError: the counters unread.
        self._nl.settimeout(DUMP_TIMEOUT_S)
        with entered(netns):
            self._snmp = os.open("/proc/thread-self/net/snmp", os.O_RDONLY | os.O_CLOEXEC)
        self._seq = 0

    def _dump(self, kind: int, header: bytes) -> list[tuple[int, bytes]]:
        self._seq += 1
        self._nl.send(struct.pack("IHHII", 16 + len(header), kind, _NLM_F_REQUEST | _NLM_F_DUMP, self._seq, 0)
                      + header)
        found = []
        while True:
            for reply_kind, seq, payload in messages(self._nl.recv(_DUMP_REPLY_MAX)):
                if seq != self._seq:  # the rest of an earlier dump cut short by an error
                    continue
                if reply_kind == _NLMSG_DONE:
                    return found
                if reply_kind == _NLMSG_ERROR:
                    error = -struct.unpack_from("i", payload)[0] if len(payload) >= 4 else 0
                    raise OSError(error, f"netlink dump {kind}: {os.strerror(error)}")
                found.append((reply_kind, payload))

    def read(self) -> dict[str, Any]:
        """``interfaces``: per interface its rx/tx drops and tc drops; ``ip``, ``udp``: the namespace's errors."""
        interfaces: dict[str, dict[str, Any]] = {}
        indexes: dict[str, int] = {}
        for kind, payload in self._dump(_RTM_GETLINK, struct.pack("BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)):
            if kind == _RTM_NEWLINK and (found := link_drops(payload)) and found[0] in self.ifnames:
                interfaces[found[0]], indexes[found[0]] = found[2], found[1]
        qdiscs: dict[int, list[tuple[int, int, int]]] = {}
        for kind, payload in self._dump(_RTM_GETQDISC, struct.pack("BxxxiIII", socket.AF_UNSPEC, 0, 0, 0, 0)):
            if kind == _RTM_NEWQDISC and (found := tc_drops(payload)):
                qdiscs.setdefault(found[0], []).append(found[1:])
        for name, ifindex in indexes.items():
            interfaces[name]["tc"] = tree_drops(qdiscs.get(ifindex, []))
        snmp = os.pread(self._snmp, 1 << 16, 0).decode(errors="replace")
        return {"interfaces": interfaces, "ip": ip_errors(snmp), "udp": udp_errors(snmp)}

    def close(self) -> None:
        self._nl.close()
        os.close(self._snmp)
