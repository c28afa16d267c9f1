"""Port by proof: emulator/model/forwarding.py against emulator._core.forwarding on random and hostile frames
(deleted with the Python module).  The same answer, or both refuse (the functions after ipv4_ok index only
what it checked; on shorter frames both raise, the Python module by its own indexing)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import forwarding as core
from emulator.model import forwarding as py

MAC = st.binary(min_size=6, max_size=6)


@st.composite
def ipv4_frames(draw) -> bytes:
    """Ethernet/IPv4 frames with random fields, options, protocols (TCP and UDP among them) and padding."""
    ihl = draw(st.integers(5, 15))
    proto = draw(st.sampled_from([1, 6, 17, draw(st.integers(0, 255))]))
    payload = draw(st.binary(max_size=40))
    total = 4 * ihl + len(payload)
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, draw(st.integers(0, 255)), total, draw(st.integers(0, 0xFFFF)),
                         0, draw(st.integers(0, 255)), proto, draw(st.integers(0, 0xFFFF)),
                         draw(st.binary(min_size=4, max_size=4)), draw(st.binary(min_size=4, max_size=4)))
    options = draw(st.binary(min_size=4 * ihl - 20, max_size=4 * ihl - 20))
    return draw(MAC) + draw(MAC) + b"\x08\x00" + header + options + payload + draw(st.binary(max_size=8))


FRAMES = st.one_of(ipv4_frames(), st.binary(max_size=80),
                   ipv4_frames().flatmap(lambda f: st.integers(0, len(f)).map(lambda n: f[:n])))


def outcome(call, *args):
    """A call's value, or that it raised (the two may raise different exception types on garbage)."""
    try:
        return call(*args)
    except (IndexError, ValueError):
        return "refused"


@settings(max_examples=400, deadline=None)
@given(FRAMES, st.integers(-2**40, 2**40), st.integers(1, 9), MAC, MAC)
def test_same_decisions_on_any_frame(frame, seed, choices, src, dst):
    ok = py.ipv4_ok(frame)
    assert core.ipv4_ok(frame) == ok
    if ok:
        assert core.ecmp_index(frame, seed, choices) == py.ecmp_index(frame, seed, choices)
        assert core.routed(frame, src, dst) == py.routed(frame, src, dst)
        assert core.priority(frame) == py.priority(frame)
        assert core.is_ect(frame) == py.is_ect(frame)
        assert core.mark_ce(frame) == py.mark_ce(frame)
    elif len(frame) < 16:  # what Python refuses by its indexing, the compiled twin refuses too
        assert outcome(core.is_ect, frame) == outcome(py.is_ect, frame) == "refused"
        assert outcome(core.mark_ce, frame) == outcome(py.mark_ce, frame) == "refused"
    assert core.arp_reply(frame, src) == py.arp_reply(frame, src)


@st.composite
def arp_frames(draw) -> bytes:
    body = (b"\x00\x01\x08\x00\x06\x04" + draw(st.sampled_from([b"\x00\x01", b"\x00\x02"])) + draw(MAC)
            + draw(st.binary(min_size=4, max_size=4)) + bytes(6)
            + draw(st.sampled_from([b"\x0a", b"\x0b", b"\xc0"])) + draw(st.binary(min_size=3, max_size=3)))
    frame = b"\xff" * 6 + draw(MAC) + b"\x08\x06" + body + draw(st.binary(max_size=18))
    return frame[:draw(st.integers(38, len(frame)))]


@settings(max_examples=200, deadline=None)
@given(arp_frames(), MAC)
def test_same_arp_replies(frame, port_mac):
    assert core.arp_reply(frame, port_mac) == py.arp_reply(frame, port_mac)


def test_constants():
    for name in ("ETH_IPV4", "ETH_ARP", "ETH_CONTROL", "IPPROTO_TCP", "IPPROTO_UDP", "IPV4_MIN"):
        assert getattr(core, name) == getattr(py, name), name
