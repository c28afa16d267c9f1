"""The pre-encoded RTM_NEWQDISC messages of the pause gates.

Each message is decoded twice: by pyroute2's own tcmsg decoder, and by a
small independent netlink parser in this file (pyroute2 does not know
TCA_TBF_BURST).  Constants come from the kernel's uapi headers
(linux/rtnetlink.h, linux/netlink.h, linux/pkt_sched.h), not from
emulator.kernel.tc.
"""

import socket
import struct

import pytest
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from emulator.kernel.tc import GATE_LIMIT, encode_tbf, gate_handle, leaf_class

RTM_NEWQDISC = 36
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
NLA_F_NESTED, NLA_TYPE_MASK = 0x8000, 0x3FFF
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_RTAB, TCA_TBF_PTAB, TCA_TBF_RATE64, TCA_TBF_BURST = 1, 2, 3, 4, 6
TC_LINKLAYER_ETHERNET = 1
NLMSG_HDRLEN, TCMSG_LEN = 16, 20


def parse_attrs(data: bytes) -> list[tuple[int, bytes]]:
    """Split a run of netlink attributes: u16 length, u16 type, payload, pad to 4."""
    attrs = []
    offset = 0
    while offset < len(data):
        assert len(data) - offset >= 4, "truncated attribute header"
        length, kind = struct.unpack_from("=HH", data, offset)
        assert length >= 4, f"bad attribute length {length}"
        assert offset + length <= len(data), "attribute runs past the end"
        attrs.append((kind, data[offset + 4:offset + length]))
        aligned = (length + 3) & ~3
        assert data[offset + length:offset + aligned] == b"\0" * (aligned - length), "padding must be zero"
        offset += aligned
    assert offset == len(data)
    return attrs


def decode(data: bytes) -> dict:
    """Our own decoding of an RTM_NEWQDISC message carrying a TBF."""
    length, kind, flags, seq, pid = struct.unpack_from("=IHHII", data, 0)
    family, ifindex, handle, parent, info = struct.unpack_from("=BxxxiIII", data, NLMSG_HDRLEN)
    attrs = parse_attrs(data[NLMSG_HDRLEN + TCMSG_LEN:])
    top = {k & NLA_TYPE_MASK: (k, v) for k, v in attrs}
    assert len(top) == len(attrs), "duplicate top-level attribute"
    options_type, options = top[TCA_OPTIONS]
    nested = parse_attrs(options)
    tbf = {k: v for k, v in nested}
    assert len(tbf) == len(nested), "duplicate TBF attribute"
    parms = tbf[TCA_TBF_PARMS]
    assert len(parms) == 36   # struct tc_tbf_qopt: 2 x tc_ratespec (12) + limit, buffer, mtu
    rate_spec = struct.unpack_from("=BBHhHI", parms, 0)
    peak_spec = struct.unpack_from("=BBHhHI", parms, 12)
    limit, buffer, mtu = struct.unpack_from("=III", parms, 24)
    return {
        "length": length, "type": kind, "flags": flags, "seq": seq, "pid": pid,
        "family": family, "ifindex": ifindex, "handle": handle, "parent": parent, "info": info,
        "top_types": [k & NLA_TYPE_MASK for k, _ in attrs], "kind": top[TCA_KIND][1],
        "options_nested": bool(options_type & NLA_F_NESTED),
        "tbf_types": [k for k, _ in nested],
        "rate_spec": rate_spec, "peak_spec": peak_spec, "limit": limit, "buffer": buffer, "mtu": mtu,
        "burst": struct.unpack("=I", tbf[TCA_TBF_BURST])[0] if TCA_TBF_BURST in tbf else None,
        "rate64": struct.unpack("=Q", tbf[TCA_TBF_RATE64])[0] if TCA_TBF_RATE64 in tbf else None,
    }


def test_handles_and_classes():
    assert [gate_handle(p) for p in range(8)] == [(0x20 + p) << 16 for p in range(8)]
    assert gate_handle(0) == 0x00200000 and gate_handle(7) == 0x00270000
    assert [leaf_class(p) for p in range(8)] == [0x10010 + p for p in range(8)]
    assert leaf_class(3) == 0x00010013   # tc's "1:13"


@pytest.mark.parametrize("create", [False, True])
@pytest.mark.parametrize("priority", range(8))
def test_encode_tbf_with_own_parser(priority, create):
    data = encode_tbf(ifindex=17, priority=priority, rate_bytes=125_000_000, burst=1514, create=create)
    m = decode(data)
    assert m["length"] == len(data)
    assert len(data) % 4 == 0
    assert m["type"] == RTM_NEWQDISC
    want_flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_CREATE | NLM_F_EXCL if create else 0)
    assert m["flags"] == want_flags
    assert (m["seq"], m["pid"]) == (0, 0)
    assert m["family"] == socket.AF_UNSPEC
    assert m["ifindex"] == 17
    assert m["handle"] == (0x20 + priority) << 16
    assert m["parent"] == 0x10010 + priority
    assert m["info"] == 0
    assert m["top_types"] == [TCA_KIND, TCA_OPTIONS]
    assert m["kind"] == b"tbf\0"
    assert m["options_nested"]
    assert sorted(m["tbf_types"]) == [TCA_TBF_PARMS, TCA_TBF_BURST]
    cell_log, linklayer, overhead, cell_align, mpu, rate = m["rate_spec"]
    assert rate == 125_000_000
    assert linklayer == TC_LINKLAYER_ETHERNET
    assert (cell_log, overhead, cell_align, mpu) == (0, 0, 0, 0)
    assert m["peak_spec"] == (0, 0, 0, 0, 0, 0)
    assert m["limit"] == GATE_LIMIT == 8 * 1024 * 1024
    assert (m["buffer"], m["mtu"]) == (0, 0)   # the bucket comes from TCA_TBF_BURST; no peak rate
    assert m["burst"] == 1514
    assert m["rate64"] is None


@pytest.mark.parametrize("create", [False, True])
def test_encode_tbf_with_pyroute2_decoder(create):
    data = encode_tbf(ifindex=5, priority=3, rate_bytes=6_250_000, burst=9014, create=create)
    m = tcmsg(data)
    m.decode()
    header = m["header"]
    assert header["type"] == RTM_NEWQDISC
    assert header["length"] == len(data)
    assert header["flags"] & (NLM_F_REQUEST | NLM_F_ACK) == NLM_F_REQUEST | NLM_F_ACK
    assert bool(header["flags"] & NLM_F_CREATE) is create
    assert bool(header["flags"] & NLM_F_EXCL) is create
    assert m["family"] == 0
    assert m["index"] == 5
    assert m["handle"] == 0x230000
    assert m["parent"] == 0x10013
    assert m.get_attr("TCA_KIND") == "tbf"
    parms = m.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")
    assert parms["rate"] == 6_250_000
    assert parms["limit"] == 8 << 20
    assert parms["peak"] == 0
    # pyroute2 has no name for TCA_TBF_BURST (6); it must still be there, 8 bytes long
    unknown = [a for a in m.get_attr("TCA_OPTIONS")["attrs"] if a[0] == "UNKNOWN"]
    assert [a[1]["header"] for a in unknown] == [{"length": 8, "type": TCA_TBF_BURST}]


@pytest.mark.parametrize("rate", [1, 1000, 2**32 - 1])
def test_rates_that_fit_32_bits_have_no_rate64(rate):
    m = decode(encode_tbf(1, 0, rate, 1514))
    assert m["rate_spec"][5] == rate
    assert m["rate64"] is None
    assert TCA_TBF_RATE64 not in m["tbf_types"]


@pytest.mark.parametrize("rate", [2**32, 50_000_000_000, 2**40 + 12345])
def test_rates_above_32_bits_carry_rate64(rate):
    data = encode_tbf(1, 6, rate, 1514)
    m = decode(data)
    assert m["length"] == len(data)
    assert m["rate_spec"][5] == 2**32 - 1       # saturated, as tc does
    assert m["rate64"] == rate
    assert sorted(m["tbf_types"]) == [TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_BURST]
    assert m["burst"] == 1514
    # pyroute2 sees the same message structure
    parsed = tcmsg(data)
    parsed.decode()
    assert parsed.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")["rate"] == 2**32 - 1


def test_closed_gate_is_one_byte_per_second():
    m = decode(encode_tbf(9, 2, 1, 1514))
    assert m["rate_spec"][5] == 1
    assert m["burst"] == 1514


def test_messages_differ_only_where_they_should():
    a = encode_tbf(3, 0, 1000, 1514)
    b = encode_tbf(4, 0, 1000, 1514)
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    # 3 and 4 differ in one bit of ifindex's low byte, wherever host byte order puts it
    assert len(diff) == 1 and NLMSG_HDRLEN + 4 <= diff[0] < NLMSG_HDRLEN + 8
    c = encode_tbf(3, 0, 1000, 1514, create=True)
    assert len(c) == len(a)
    assert c[:6] == a[:6] and c[8:] == a[8:]   # only the flags field
