"""The pre-encoded requests that build each veth end's HTB tree and DSCP filters.

Decoded with an independent parser (test_tc_encoding.parse_attrs); constants from the kernel's uapi
headers (linux/rtnetlink.h, linux/pkt_sched.h), not from emulator.kernel.tc.  The kernel's answer to
the same requests is checked in tests/integration/test_shaping.py.
"""

import socket
import struct

import pytest

from emulator.kernel.tc import link_tree
from test_tc_encoding import parse_attrs

RTM_NEWQDISC, RTM_NEWTCLASS, RTM_NEWTFILTER = 36, 40, 44
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
TCA_KIND, TCA_OPTIONS, NLA_TYPE_MASK = 1, 2, 0x3FFF
TCA_HTB_PARMS, TCA_HTB_INIT, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 2, 6, 7
TCA_U32_CLASSID, TCA_U32_SEL, TC_U32_TERMINAL = 1, 5, 1
TC_H_ROOT, ETH_P_IP = 0xFFFFFFFF, 0x0800


def split(request: bytes) -> tuple[tuple, tuple, dict[int, bytes], dict[int, bytes]]:
    header = struct.unpack_from("=IHHII", request)
    assert header[0] == len(request)
    tcmsg = struct.unpack_from("=BxxxiIII", request, 16)
    top = {k & NLA_TYPE_MASK: v for k, v in parse_attrs(request[36:])}
    return header, tcmsg, top, {k & NLA_TYPE_MASK: v for k, v in parse_attrs(top[TCA_OPTIONS])}


@pytest.mark.parametrize("host", [False, True])
def test_a_link_tree_is_a_root_nine_classes_and_the_dscp_filters(host):
    requests = link_tree(7, 20_000_000, 4200, host)
    assert len(requests) == 2 + 8 + 7 * (2 if host else 1)
    for request in requests:
        (_, _, flags, _, _), (family, ifindex, _, _, _), _, _ = split(request)
        assert flags == NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL  # creates, never replaces
        assert (family, ifindex) == (socket.AF_UNSPEC, 7)
    (_, kind, *_), (_, _, handle, parent, _), top, options = split(requests[0])
    assert (kind, handle, parent, top[TCA_KIND]) == (RTM_NEWQDISC, 0x10000, TC_H_ROOT, b"htb\0")
    version, rate2quantum, defcls, _, _ = struct.unpack("=IIIII", options[TCA_HTB_INIT])
    assert (version, rate2quantum, defcls) == (3, 10, 0x10)  # TC_HTB_PROTOVER; unclassified to 1:10


def htb_class(request: bytes) -> dict:
    (_, kind, *_), (_, _, handle, parent, _), top, options = split(request)
    assert kind == RTM_NEWTCLASS and top[TCA_KIND] == b"htb\0"
    parms = options[TCA_HTB_PARMS]
    rate = struct.unpack_from("=BBHhHI", parms, 0)
    ceil = struct.unpack_from("=BBHhHI", parms, 12)
    buffer, cbuffer, quantum, level, prio = struct.unpack_from("=IIIII", parms, 24)
    return {"handle": handle, "parent": parent, "linklayers": (rate[1], ceil[1]), "rate": rate[5], "ceil": ceil[5],
            "buffer": buffer, "cbuffer": cbuffer, "quantum": quantum,
            "rate64": struct.unpack("=Q", options[TCA_HTB_RATE64])[0] if TCA_HTB_RATE64 in options else None,
            "ceil64": struct.unpack("=Q", options[TCA_HTB_CEIL64])[0] if TCA_HTB_CEIL64 in options else None}


def test_classes_carry_the_rates_quantum_and_a_1600_byte_burst():
    """Rates in bytes/s at the Ethernet link layer (no rate tables); bursts in 64 ns psched ticks."""
    classes = [htb_class(r) for r in link_tree(7, 20_000_000, 4200, False)[1:10]]
    parent, leaves = classes[0], classes[1:]
    assert (parent["handle"], parent["parent"]) == (0x10001, 0x10000)
    assert parent["rate"] == parent["ceil"] == 2_500_000 and parent["quantum"] == 4214
    assert parent["buffer"] == 1600 * 10**9 // 2_500_000 // 64  # 640 us of the link
    assert [leaf["handle"] for leaf in leaves] == [0x10010 + p for p in range(8)]
    for leaf in leaves:
        assert leaf["parent"] == 0x10001 and leaf["linklayers"] == (1, 1)
        assert (leaf["rate"], leaf["ceil"], leaf["quantum"]) == (312_500, 2_500_000, 4214)
        assert (leaf["buffer"], leaf["cbuffer"]) == (80_000, 10_000)  # what pyroute2 gave these rates


def test_rates_above_32_bits_go_in_rate64():
    parent = htb_class(link_tree(7, 100_000_000_000, 9000, False)[1])
    assert (parent["rate"], parent["rate64"], parent["ceil64"]) == (0xFFFFFFFF, 12_500_000_000, 12_500_000_000)
    assert parent["buffer"] == 2  # 128 ns of a 100 Gbit/s link (pyroute2 rounded to whole us: 0)


def test_filters_steer_dscp_classes_and_gate_frames():
    """IPv4 word 0 holds the TOS byte: DSCP >> 3 is its top three bits, mask 0x00e00000 at offset 0."""
    requests = link_tree(7, 20_000_000, 4200, True)[10:]
    seen = []
    for request in requests:
        (_, kind, *_), (_, _, handle, parent, info), top, options = split(request)
        assert (kind, handle, parent, top[TCA_KIND]) == (RTM_NEWTFILTER, 0, 0x10000, b"u32\0")
        prio, protocol = info >> 16, socket.ntohs(info & 0xFFFF)
        flags, _, nkeys = struct.unpack_from("=BBB", options[TCA_U32_SEL])
        mask, value = struct.unpack_from("!II", options[TCA_U32_SEL], 16)
        off, offmask = struct.unpack_from("=ii", options[TCA_U32_SEL], 24)
        assert (flags, nkeys, off, offmask, len(options[TCA_U32_SEL])) == (TC_U32_TERMINAL, 1, 0, 0, 32)
        seen.append((prio, protocol, value, mask, struct.unpack("=I", options[TCA_U32_CLASSID])[0]))
    for p in range(1, 8):
        assert (10, ETH_P_IP, p << 21, 0x00E00000, 0x10010 + p) in seen
        assert (5, 0x88B5, p << 24, 0xFF000000, 0x10010 + p) in seen  # gate frame: first byte = priority
    assert len(seen) == 14


class FakeRouteSocket:
    """A netlink socket that ACKs each message of a datagram (echoing it, as the kernel does) and refuses,
    as ENOBUFS, a datagram whose ACKs would not fit a receive buffer of ``capacity`` bytes."""

    def __init__(self, capacity: int, fail_seq: int | None = None) -> None:
        self.capacity, self.fail_seq = capacity, fail_seq
        self.datagrams: list[int] = []  # messages per datagram sent
        self.replies: list[bytes] = []

    def send(self, data: bytes) -> int:
        acks, at = [], 0
        while at < len(data):
            length, _kind, _flags, seq = struct.unpack_from("=IHHI", data, at)
            error = -22 if seq == self.fail_seq else 0
            body = struct.pack("=i", error) + data[at:at + length]
            acks.append(struct.pack("=IHHII", 16 + len(body), 2, 0, seq, 0) + body)
            at += length
        self.datagrams.append(len(acks))
        if sum(map(len, acks)) > self.capacity:
            raise OSError(105, "No buffer space available")
        self.replies.append(b"".join(acks))
        return len(data)

    def recv(self, _size: int) -> bytes:
        return self.replies.pop(0)


def test_a_sixteen_port_switch_is_set_up_in_batches_whose_acks_fit():
    """fattree,16's switches have 16 ports: 272 requests; in one datagram their ACKs overran the socket."""
    from emulator.kernel.tc import BATCH_REQUESTS, netlink_batch

    requests = [r for index in range(2, 18) for r in link_tree(index, 20_000_000, 4200, host=False)]
    assert len(requests) == 16 * 17
    sock = FakeRouteSocket(capacity=BATCH_REQUESTS * max(map(len, requests)) * 2)
    netlink_batch(sock, requests)
    assert max(sock.datagrams) <= BATCH_REQUESTS and sum(sock.datagrams) == len(requests)
    with pytest.raises(OSError, match="tc request 200 of 272 failed"):
        netlink_batch(FakeRouteSocket(capacity=1 << 30, fail_seq=200), requests)
