"""The switch's per-frame decisions, on real frames built with scapy.

Checksums are verified against a from-scratch RFC 1071 computation written
here and against scapy's own, never against the incremental update under
test.
"""

import random
import struct
from collections import Counter

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether

from emulator._core.forwarding import arp_reply, ecmp_index, priority, routed

HOST_MAC = "02:00:00:00:00:01"
PORT_MAC = bytes.fromhex("020100001103")
NEXT_MAC = bytes.fromhex("020100001201")


def mac_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def ones_complement_checksum(header: bytes) -> int:
    """RFC 1071, from scratch: the checksum field must be zero in ``header``."""
    assert len(header) % 2 == 0
    total = 0
    for i in range(0, len(header), 2):
        total += (header[i] << 8) | header[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def header_checksum(frame: bytes) -> int:
    """Recompute the IPv4 header checksum of an Ethernet frame from scratch."""
    ihl = (frame[14] & 0x0F) * 4
    header = bytearray(frame[14:14 + ihl])
    header[10:12] = b"\0\0"
    return ones_complement_checksum(bytes(header))


def scapy_checksum(frame: bytes) -> int:
    """What scapy computes for the same IPv4 header."""
    pkt = Ether(frame)
    del pkt[IP].chksum
    return Ether(bytes(pkt))[IP].chksum


def stored_checksum(frame: bytes) -> int:
    return int.from_bytes(frame[24:26], "big")


def udp_frame(src="10.0.0.1", dst="10.0.0.2", sport=1234, dport=4791, ttl=64, tos=0, ident=1, payload=b"x" * 20,
              options=None) -> bytes:
    ip = IP(src=src, dst=dst, ttl=ttl, tos=tos, id=ident)
    if options is not None:
        ip.options = options
    return bytes(Ether(src=HOST_MAC, dst="02:01:00:00:00:01") / ip / UDP(sport=sport, dport=dport) / payload)


def raw_frame(ttl: int, checksum_target: int, rng: random.Random) -> bytes:
    """An Ethernet/IPv4 frame whose header checksum is exactly ``checksum_target``.

    The identification field is solved for: in one's-complement arithmetic
    the header sum must be ~target, so id = ~target - (sum of the rest).
    """
    src, dst = rng.getrandbits(32).to_bytes(4, "big"), rng.getrandbits(32).to_bytes(4, "big")
    proto = rng.choice([1, 6, 17])
    tos = rng.getrandbits(8)
    payload = bytes(rng.getrandbits(8) for _ in range(rng.randint(8, 40)))
    total_len = 20 + len(payload)
    header = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, total_len, 0, 0x4000, ttl, proto, 0, src, dst))
    rest = ~ones_complement_checksum(bytes(header)) & 0xFFFF        # one's-complement sum without id
    want = ~checksum_target & 0xFFFF
    ident = want + (~rest & 0xFFFF)                                  # want - rest
    ident = (ident & 0xFFFF) + (ident >> 16)
    header[4:6] = ident.to_bytes(2, "big")
    header[10:12] = checksum_target.to_bytes(2, "big")
    frame = b"\xff" * 6 + mac_bytes(HOST_MAC) + b"\x08\x00" + bytes(header) + payload
    assert header_checksum(frame) == checksum_target, "test setup: could not hit the target checksum"
    return frame


def check_routed(frame: bytes) -> bytes:
    out = routed(frame, PORT_MAC, NEXT_MAC)
    assert out is not None
    assert len(out) == len(frame)
    assert out[0:6] == NEXT_MAC
    assert out[6:12] == PORT_MAC
    assert out[12:22] == frame[12:22]
    assert out[22] == frame[22] - 1
    assert out[23:24] == frame[23:24]
    assert out[26:] == frame[26:]
    assert stored_checksum(out) == header_checksum(out), (
        f"ttl {frame[22]} checksum {stored_checksum(frame):#06x} -> {stored_checksum(out):#06x}, "
        f"from scratch {header_checksum(out):#06x}")
    return out


# --- routed ----------------------------------------------------------------------------


def test_self_check_of_the_reference_checksum():
    # the worked example of RFC 1071 section 3 is for 8 bytes; use a known header instead
    header = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert ones_complement_checksum(header) == 0xB861
    frame = udp_frame()
    assert header_checksum(frame) == stored_checksum(frame) == scapy_checksum(frame)


@pytest.mark.parametrize("ttl", [2, 3, 64, 128, 200, 255])
def test_routed_decrements_ttl_rewrites_macs_and_fixes_checksum(ttl):
    frame = udp_frame(ttl=ttl)
    out = check_routed(frame)
    assert out[22] == ttl - 1
    assert stored_checksum(out) == scapy_checksum(out)
    parsed = Ether(out)
    assert parsed.dst == "02:01:00:00:12:01" and parsed.src == "02:01:00:00:11:03"
    assert parsed[IP].ttl == ttl - 1
    assert parsed[UDP].dport == 4791


@pytest.mark.parametrize("ttl", [0, 1])
def test_routed_drops_expired_ttl(ttl):
    assert routed(udp_frame(ttl=ttl), PORT_MAC, NEXT_MAC) is None


@pytest.mark.parametrize("checksum", [0x0000, 0x0001, 0x00FF, 0x1234, 0x7FFF, 0xFE00, 0xFEFE, 0xFF00, 0xFF01,
                                      0xFFFE])
def test_routed_checksum_carry_cases(checksum):
    rng = random.Random(checksum)
    for ttl in (2, 17, 64, 255):
        check_routed(raw_frame(ttl, checksum, rng))


def test_routed_checksum_that_becomes_zero():
    """Input checksum 0xFEFF: the new header sum is one's-complement zero.

    A from-scratch computation (and the kernel's ip_decrease_ttl, which
    folds with ``check >= 0xFFFF``) gives 0x0000; a plain end-around-carry
    add gives 0xFFFF, which no sender ever computes (RFC 1624 section 3).
    """
    rng = random.Random(0xFEFF)
    for ttl in (2, 64, 255):
        frame = raw_frame(ttl, 0xFEFF, rng)
        out = routed(frame, PORT_MAC, NEXT_MAC)
        assert header_checksum(out) == 0x0000
        assert scapy_checksum(out) == 0x0000
        assert stored_checksum(out) == 0x0000


def test_routed_many_random_headers():
    rng = random.Random(20240611)
    for _ in range(300):
        frame = udp_frame(
            src=f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
            dst=f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
            sport=rng.randrange(1, 65536), dport=rng.randrange(1, 65536),
            ttl=rng.randrange(2, 256), tos=rng.randrange(256), ident=rng.randrange(65536),
            payload=bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64))),
        )
        if stored_checksum(frame) == 0xFEFF:
            continue   # the zero case has its own test
        out = check_routed(frame)
        assert stored_checksum(out) == scapy_checksum(out)


def test_routed_random_raw_headers_across_the_checksum_range():
    rng = random.Random(7)
    for _ in range(300):
        target = rng.randrange(0x10000)
        if target in (0xFFFF, 0xFEFF):
            continue   # 0xFFFF is not a from-scratch value; 0xFEFF has its own test
        check_routed(raw_frame(rng.randrange(2, 256), target, rng))


def test_routed_repeatedly_until_ttl_runs_out():
    frame = udp_frame(ttl=12, ident=0xBEEF)
    hops = 0
    while (nxt := routed(frame, PORT_MAC, NEXT_MAC)) is not None:
        assert stored_checksum(nxt) == header_checksum(nxt)
        frame = nxt
        hops += 1
    assert hops == 11
    assert frame[22] == 1


def test_routed_with_ip_options_keeps_the_checksum_right():
    frame = udp_frame(ttl=9, options=b"\x01\x01\x01\x00")   # IHL 6: NOPs and end of list
    assert frame[14] == 0x46
    out = check_routed(frame)
    assert stored_checksum(out) == scapy_checksum(out)


# --- ecmp_index --------------------------------------------------------------------------


def test_ecmp_index_is_deterministic_and_in_range():
    frame = udp_frame()
    for choices in range(1, 9):
        for seed in range(10):
            first = ecmp_index(frame, seed, choices)
            assert 0 <= first < choices
            assert ecmp_index(frame, seed, choices) == first
    assert all(ecmp_index(frame, seed, 1) == 0 for seed in range(20))


def test_ecmp_same_flow_same_index_whatever_else_changes():
    base = udp_frame(sport=5555, dport=4791, ttl=64, tos=0, ident=1, payload=b"a" * 10)
    others = [
        udp_frame(sport=5555, dport=4791, ttl=3, tos=104, ident=999, payload=b"b" * 200),
        routed(base, PORT_MAC, NEXT_MAC),
        udp_frame(sport=5555, dport=4791, options=b"\x01\x01\x01\x00"),   # IHL 6 moves the ports
    ]
    for seed in range(1, 30):
        for choices in (2, 3, 4, 8):
            want = ecmp_index(base, seed, choices)
            assert [ecmp_index(f, seed, choices) for f in others] == [want] * len(others)


def test_ecmp_index_depends_on_ports_and_addresses():
    indexes = {ecmp_index(udp_frame(sport=s), 1, 4) for s in range(1000, 1064)}
    assert len(indexes) == 4
    indexes = {ecmp_index(udp_frame(dport=d), 1, 4) for d in range(2000, 2064)}
    assert len(indexes) == 4
    indexes = {ecmp_index(udp_frame(src=f"10.0.0.{i}"), 1, 4) for i in range(1, 65)}
    assert len(indexes) == 4


def test_ecmp_different_seeds_can_differ():
    frame = udp_frame(sport=40000)
    assert len({ecmp_index(frame, seed, 4) for seed in range(1, 33)}) > 1
    # and not merely by a constant: two flows' relative placement changes with the seed
    a, b = udp_frame(sport=1), udp_frame(sport=2)
    pairs = {(ecmp_index(a, s, 4), ecmp_index(b, s, 4)) for s in range(1, 65)}
    assert len({(x - y) % 4 for x, y in pairs}) > 1


def test_ecmp_choices_of_two_switches_are_independent():
    """Two switches (two seeds) choose for the same flows independently: with a hash affine in its key and seed
    (a bare CRC-32), the second's choice among two was the first's flipped by a constant, so in a fat tree an
    aggregation switch sent everything from one edge switch to one core and left half its uplinks idle."""
    rng = random.Random(7)
    template = udp_frame()
    flows = [with_flow(template, f"10.0.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                       f"10.0.{rng.randrange(256)}.{rng.randrange(1, 255)}", rng.randrange(49152, 65536), 4791)
             for _ in range(400)]
    for a, b in ((1001, 1002), (1001, 1017), (5, 6)):
        same = sum(ecmp_index(f, a, 2) == ecmp_index(f, b, 2) for f in flows)
        assert 120 < same < 280, (a, b, same)


def with_flow(template: bytes, src: str, dst: str, sport: int, dport: int) -> bytes:
    """``template`` (Ether/IPv4 without options/UDP) with a new 5-tuple, by byte surgery
    (building 1000 frames with scapy would dominate the unit test run time)."""
    frame = bytearray(template)
    frame[26:30] = bytes(int(x) for x in src.split("."))
    frame[30:34] = bytes(int(x) for x in dst.split("."))
    frame[34:38] = struct.pack("!HH", sport, dport)
    return bytes(frame)


def test_flow_surgery_matches_scapy():
    got = Ether(with_flow(udp_frame(), "10.1.2.3", "10.4.5.6", 777, 888))
    assert (got[IP].src, got[IP].dst, got[UDP].sport, got[UDP].dport) == ("10.1.2.3", "10.4.5.6", 777, 888)


def test_ecmp_spreads_random_udp_flows():
    rng = random.Random(12345)
    template = udp_frame()
    counts = Counter()
    for _ in range(1000):
        frame = with_flow(
            template,
            src=f"10.0.{rng.randrange(256)}.{rng.randrange(1, 255)}",
            dst=f"10.0.{rng.randrange(256)}.{rng.randrange(1, 255)}",
            sport=rng.randrange(1024, 65536), dport=rng.randrange(1024, 65536),
        )
        counts[ecmp_index(frame, 7, 4)] += 1
    assert set(counts) == {0, 1, 2, 3}
    for index, n in counts.items():
        assert 150 <= n <= 350, counts


def test_ecmp_tcp_flows_are_hashed_on_ports():
    def tcp(sport):
        return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.9") / TCP(sport=sport, dport=80))
    assert len({ecmp_index(tcp(s), 3, 4) for s in range(100, 164)}) == 4
    assert ecmp_index(tcp(100), 3, 4) == ecmp_index(tcp(100), 3, 4)


def test_ecmp_icmp_has_no_ports():
    def icmp(ident, seq, src="10.0.0.1", dst="10.0.0.2"):
        return bytes(Ether() / IP(src=src, dst=dst) / ICMP(id=ident, seq=seq) / b"ping")
    rng = random.Random(99)
    others = [icmp(rng.randrange(65536), rng.randrange(65536)) for _ in range(32)]
    for seed in range(1, 20):
        for choices in (4, 7):
            first = ecmp_index(icmp(1, 1), seed, choices)
            assert 0 <= first < choices
            # the ICMP header (type, code, checksum, id, seq) must not move an ICMP flow
            assert all(ecmp_index(other, seed, choices) == first for other in others)
    assert len({ecmp_index(icmp(1, 1, src=f"10.0.1.{i}"), 1, 4) for i in range(1, 65)}) == 4


# --- priority ------------------------------------------------------------------------------


@pytest.mark.parametrize("dscp, expected", [(26, 3), (48, 6), (0, 0), (46, 5), (63, 7), (8, 1), (7, 0)])
def test_priority_is_dscp_class_selector(dscp, expected):
    for ecn in range(4):
        assert priority(udp_frame(tos=dscp << 2 | ecn)) == expected


def test_priority_all_dscp_values():
    for dscp in range(64):
        assert priority(udp_frame(tos=dscp << 2)) == dscp // 8


# --- arp_reply -------------------------------------------------------------------------------


def arp_request(target: str, sender_ip="10.0.0.1", sender_mac=HOST_MAC, op=1, pad=False) -> bytes:
    pkt = Ether(src=sender_mac, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=op, hwsrc=sender_mac, psrc=sender_ip, hwdst="00:00:00:00:00:00", pdst=target)
    data = bytes(pkt)
    return data.ljust(60, b"\0") if pad else data


@pytest.mark.parametrize("pad", [False, True])
def test_arp_reply_for_a_fabric_address(pad):
    request = arp_request("10.0.0.5", sender_ip="10.0.0.1", pad=pad)
    assert len(request) == (60 if pad else 42)
    reply = arp_reply(request, PORT_MAC)
    assert reply is not None
    assert len(reply) == 60
    pkt = Ether(reply)
    assert pkt.dst == HOST_MAC
    assert pkt.src == "02:01:00:00:11:03"
    assert pkt.type == 0x0806
    arp = pkt[ARP]
    assert (arp.hwtype, arp.ptype, arp.hwlen, arp.plen) == (1, 0x0800, 6, 4)
    assert arp.op == 2    # is-at
    assert arp.hwsrc == "02:01:00:00:11:03"
    assert arp.psrc == "10.0.0.5"
    assert arp.hwdst == HOST_MAC
    assert arp.pdst == "10.0.0.1"
    assert reply[42:] == b"\0" * 18


def test_arp_reply_for_the_gateway_and_other_fabric_addresses():
    for target in ("10.255.255.254", "10.0.1.0", "10.200.3.4"):
        reply = arp_reply(arp_request(target, sender_ip="10.0.0.7", sender_mac="02:00:00:00:07:00"), PORT_MAC)
        arp = Ether(reply)[ARP]
        assert (arp.op, arp.psrc, arp.pdst, arp.hwdst) == (2, target, "10.0.0.7", "02:00:00:00:07:00")


@pytest.mark.parametrize("target", ["192.168.1.1", "11.0.0.1", "9.255.255.255", "172.16.0.1"])
def test_no_arp_reply_outside_the_fabric(target):
    assert arp_reply(arp_request(target), PORT_MAC) is None


def test_no_arp_reply_to_a_reply():
    assert arp_reply(arp_request("10.0.0.5", op=2), PORT_MAC) is None


def test_no_arp_reply_to_a_truncated_frame():
    assert arp_reply(arp_request("10.0.0.5")[:41], PORT_MAC) is None
