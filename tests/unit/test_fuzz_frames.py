"""Every per-frame path survives any byte string: dropped and counted, never an exception.

The compiled switch's Ethernet and IB planes (on wires in memory), the host
agent's PFC path and the RNIC's RoCEv2 and IB receive paths, run as the
agents run them (their real code, a fake wire: see fake_agents.py).  First the reproducers of issue 10
(frames that killed an agent), then hypothesis' frames: random, of our
EtherTypes, and valid frames damaged (hostile_frames.py).  The fuzz tests
assert that each frame left a trace in a counter, so "nothing raised" is
not enough to pass.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given

from emulator._core.ib import FcPacket, encode_data, encode_fc
from emulator._core.mac import mac_bytes
from emulator._core.transport import Opcode, Packet
from emulator._core.roce import Framer
from fake_agents import (
    GATEWAY_MAC, HOST_IP, HOST_MAC, MAC_PEERS, MAC_S1, close_agent, fake_wire, make_host, make_rnic, make_switch,
    port_stats,
)
from hostile_frames import frames

assert fake_wire  # a fixture, used by name below

ETH_IPV4 = b"\x08\x00"


def udp_frame(payload: bytes = b"x" * 18, dst_ip: str = "10.0.0.2") -> bytes:
    """A valid IPv4/UDP frame from h1 to ``dst_ip`` (the RNIC's framer makes a well-formed one)."""
    framer = Framer(MAC_PEERS[0], MAC_S1[0], "10.0.0.1", dst_ip, 50000)
    return framer.encode(Packet(Opcode.SEND_ONLY, 0x11, 1, payload=payload))


# --- the switch ---------------------------------------------------------------------------------------------


def switch_trace(switch) -> tuple:
    """Every counter a frame arriving at a switch can move."""
    ports = switch.stats(time.monotonic_ns())["ports"].values()
    trace = [sum(sum(p["rx_drops"].values()) + sum(q["rx_frames"] + q["pfc_received"] for q in p["priorities"])
                 + p["rx_control_frames"] + p["arp_replies"] for p in ports)]
    if all("ib" in p for p in ports):
        trace += [sum(sum(p["ib"]["drops"].values()) for p in ports), sum(p["ib"]["forwarded"] for p in ports),
                  sum(sum(p["ib"]["queued"]) for p in ports),
                  sum(c["fc_received"] for p in ports for c in p["ib"]["credits"])]
    return tuple(trace)


def deliver(switch, index: int, frame: bytes) -> None:
    """A frame arrives on port ``index``, the switch handles it at its last bit's time, then sends what it
    decided."""
    now = time.monotonic_ns()
    switch.receive(now, index, frame)
    switch.settle()
    switch.after_events(now)


@pytest.fixture
def switch(tmp_path):
    return make_switch(str(tmp_path))


@pytest.fixture
def ib_switch(tmp_path):
    return make_switch(str(tmp_path), ib=True)


def test_a_14_byte_ipv4_frame_is_counted_malformed_and_the_switch_forwards_on(switch):
    """Issue 10: our MAC, EtherType 0x0800, no payload killed the agent with an IndexError."""
    deliver(switch, 0, mac_bytes(MAC_S1[0]) + mac_bytes(MAC_PEERS[0]) + ETH_IPV4)
    assert port_stats(switch, 0)["rx_drops"]["malformed"] == 1
    deliver(switch, 0, udp_frame())
    assert len(switch.sent(1)) == 1  # to h2, TTL decremented
    assert switch.sent(1)[0][22] == 63
    assert switch.stats(time.monotonic_ns())["totals"]["malformed"] == 1


@pytest.mark.parametrize("damage, counter", [
    (lambda f: f[:20], "malformed"),                                  # cut inside the IP header
    (lambda f: f[:14] + b"\x65" + f[15:], "malformed"),               # version 6 in an IPv4 frame
    (lambda f: f[:14] + b"\x44" + f[15:], "malformed"),               # IHL 4
    (lambda f: f[:16] + b"\x05\xdc" + f[18:], "malformed"),           # total length beyond the frame
    (lambda f: f[:24] + bytes([f[24] ^ 1]) + f[25:], None),           # header checksum wrong: not checked
    (lambda f: f[:22] + b"\x01" + f[23:24] + (int.from_bytes(f[24:26], "big") + 0x3F00).to_bytes(2, "big")
     + f[26:], "ttl"),                                                # TTL 1 (checksum kept valid)
    (lambda f: f[:6] + b"\x02\x99\x99\x99\x99\x99" + f[12:], None),   # nor a source MAC
    (lambda f: b"\x02\x01\x00\x00\x09\x09" + f[6:], "not_for_us"),
    (lambda f: f[:12] + b"\x86\xdd" + f[14:], "unsupported"),         # IPv6
])
def test_ipv4_damage_is_dropped_under_its_counter(switch, damage, counter):
    deliver(switch, 0, damage(udp_frame()))
    drops = port_stats(switch, 0)["rx_drops"]
    if counter is None:
        assert sum(drops.values()) == 0 and len(switch.sent(1)) == 1
    else:
        assert drops[counter] == 1 and sum(drops.values()) == 1
        assert switch.sent(1) == []


def test_a_frame_longer_than_the_egress_mtu_is_dropped_not_sent(tmp_path):
    agent = make_switch(str(tmp_path), mtus=(1500, 576, 1500))
    deliver(agent, 0, udp_frame(b"x" * 600))  # fits the 1500-byte ingress link, not h2's 576
    assert port_stats(agent, 0)["rx_drops"]["mtu"] == 1 and agent.sent(1) == []
    deliver(agent, 0, udp_frame(b"x" * 500))
    assert len(agent.sent(1)) == 1


def test_a_send_the_kernel_refuses_is_counted_and_the_port_goes_on(switch):
    switch.refuse(1, "refused")  # e.g. ENOBUFS
    deliver(switch, 0, udp_frame())
    assert port_stats(switch, 1)["tx_errors"] == 1
    switch.refuse(1, None)
    deliver(switch, 0, udp_frame())
    assert len(switch.sent(1)) == 1
    assert switch.stats(time.monotonic_ns())["totals"]["drops"] == 1


def test_short_mac_control_and_arp_frames_are_malformed(switch):
    header = mac_bytes("01:80:c2:00:00:01") + mac_bytes(MAC_PEERS[0])
    deliver(switch, 0, header + b"\x88\x08\x01\x01")
    deliver(switch, 0, mac_bytes("ff:ff:ff:ff:ff:ff") + mac_bytes(MAC_PEERS[0]) + b"\x08\x06\x00\x01")
    deliver(switch, 0, header + b"\x88\x08\x00\x01" + bytes(44))  # 802.3x PAUSE: not ours to answer
    assert port_stats(switch, 0)["rx_drops"]["malformed"] == 2
    assert port_stats(switch, 0)["rx_drops"]["unsupported"] == 1


def ib_frame(sl: int = 3, vl: int = 3, dlid: int = 2, payload: bytes = bytes(64)) -> bytes:
    packet = Packet(Opcode.WRITE_ONLY, 0x11, 5, va=0x1000, rkey=0x100, dma_len=len(payload), payload=payload)
    return encode_data(MAC_PEERS[0], MAC_S1[0], dlid, 1, sl, vl, packet)


def test_short_ib_frames_and_lnh_0_are_counted_malformed_and_the_ib_plane_forwards_on(ib_switch):
    """Issue 10: a short 0x88B6 frame, or SL 1 on VL 0 with LNH 0, killed the switch."""
    header = mac_bytes(MAC_S1[0]) + mac_bytes(MAC_PEERS[0]) + b"\x88\xb6"
    deliver(ib_switch, 0, header)
    deliver(ib_switch, 0, header + b"\xfb")
    deliver(ib_switch, 0, header + b"\xfb" + bytes(5))
    lnh0 = bytearray(ib_frame(sl=1, vl=0))
    lnh0[16] = 1 << 4  # SL 1, LNH 0 (raw): no BTH follows
    deliver(ib_switch, 0, bytes(lnh0))
    assert port_stats(ib_switch, 0)["ib"]["drops"]["malformed"] == 4
    deliver(ib_switch, 0, ib_frame())
    assert port_stats(ib_switch, 1)["ib"]["forwarded"] == 1 or port_stats(ib_switch, 1)["ib"]["queued"][3] == 1
    assert ib_switch.stats(time.monotonic_ns())["totals"]["ib_malformed"] == 4


def test_ib_packets_with_a_vl_we_lack_or_no_route_or_too_long_are_counted(tmp_path):
    agent = make_switch(str(tmp_path), ib=True, mtus=(4096, 1500, 1500))
    deliver(agent, 0, ib_frame(vl=9))
    deliver(agent, 0, ib_frame(dlid=77))
    deliver(agent, 0, ib_frame(payload=bytes(2048)))  # fits the 4096-byte ingress link, not h2's
    assert port_stats(agent, 0)["ib"]["drops"] == {"malformed": 1, "credit_violation": 0, "no_route": 1, "too_long": 1}
    assert agent.ib_occupancy(0, 3) == 0  # what was dropped after admission gave its buffer back


def test_a_flow_control_packet_for_a_vl_we_lack_is_malformed(ib_switch):
    deliver(ib_switch, 0, encode_fc(MAC_PEERS[0], MAC_S1[0], FcPacket(0, 0, 9, 100)))
    assert port_stats(ib_switch, 0)["ib"]["drops"]["malformed"] == 1


@given(frame=frames(MAC_S1[0], MAC_PEERS[0]))
def test_fuzz_switch_ethernet_plane(switch, frame):
    before = switch_trace(switch)
    deliver(switch, 0, frame)
    assert switch_trace(switch) != before, f"frame {frame.hex()} left no trace in any counter"


@given(frame=frames(MAC_S1[0], MAC_PEERS[0]))
def test_fuzz_switch_ib_plane(ib_switch, frame):
    before = switch_trace(ib_switch)
    deliver(ib_switch, 0, frame)
    assert switch_trace(ib_switch) != before, f"frame {frame.hex()} left no trace in any counter"


# --- the host: PFC reaction and the RNIC --------------------------------------------------------------------


def host_trace(agent) -> tuple:
    stats = agent.nic.stats()
    link = stats["link"]
    pfc = agent.nic.pfc_figures(0)
    return (pfc["malformed"], sum(pfc["pfc_received"]), agent.nic.malformed(), stats["frames_received"],
            link.get("credit_violations", 0), sum(c["fc_received"] for c in link.get("credits", [])))


def deliver_to_host(agent, frame: bytes) -> bool:
    """A frame reaches the host agent's sockets that the kernel would give it; False if none would."""
    now = time.monotonic_ns()
    delivered = False
    if len(frame) >= 14 and frame[12:14] == b"\x88\x08":  # the PFC socket is bound to MAC control
        agent.nic.receive_pfc(now, frame)
        delivered = True
    if kernel_passes_to_rnic(agent.config.ib is not None, frame):
        agent.nic.receive(now, frame)
        agent.nic.after_events(now)
        delivered = True
    agent.after_events(now)
    return delivered


def kernel_passes_to_rnic(ib: bool, frame: bytes) -> bool:
    """What the RNIC's socket receives: the IB EtherType, or what its classic BPF filter accepts."""
    if ib:
        return len(frame) >= 14 and frame[12:14] == b"\x88\xb6"
    return (len(frame) >= 38 and frame[12:14] == ETH_IPV4 and frame[14] == 0x45 and frame[23] == 17
            and frame[36:38] == (4791).to_bytes(2, "big"))


@pytest.fixture(params=[False, True], ids=["roce", "ib"])
def host(fake_wire, tmp_path, request):
    agent = make_host(str(tmp_path), ib=request.param)
    yield agent
    agent.rnic.close()
    close_agent(agent)


def test_an_ib_data_packet_on_vl_4_is_counted_malformed(fake_wire, tmp_path):
    """Issue 10: a data frame on VL >= 4 killed the RNIC with a ValueError from the credit model."""
    agent, _ = make_rnic(str(tmp_path), ib=True)
    try:
        packet = Packet(Opcode.ACK, 0x11, 1, syndrome=0x1F)
        now = time.monotonic_ns()
        for vl in (4, 9, 15, 0):
            agent.nic.receive(now, encode_data(GATEWAY_MAC, HOST_MAC, 1, 2, 0, vl, packet))
        assert agent.nic.malformed() == 3
        assert agent.nic.stats()["unknown_qp"] == 1  # the good one got through to the QP lookup
    finally:
        agent.close()


def test_a_pfc_frame_still_pauses_after_garbage(host):
    header = mac_bytes("01:80:c2:00:00:01") + mac_bytes(GATEWAY_MAC) + b"\x88\x08"
    deliver_to_host(host, header + b"\x01")
    deliver_to_host(host, header + b"\x01\x01" + bytes(18))  # PFC enabling no class (found by the deep fuzz run)
    deliver_to_host(host, header + b"\x01\x01\x00\x08" + bytes(3 * 2) + b"\xff\xff" + bytes(8 * 2))
    assert host.nic.pfc_figures(0)["malformed"] == 2
    assert host.nic.gate_changes() == [(3, True)]
    assert host.stats()["drops"]["malformed"] >= 1


@given(frame=frames(HOST_MAC, GATEWAY_MAC, dst_ip=HOST_IP, src_ip="10.0.0.2"))
def test_fuzz_host_agent_and_rnic_receive(host, frame):
    before = host_trace(host)
    if deliver_to_host(host, frame):
        assert host_trace(host) != before, f"frame {frame.hex()} left no trace in any counter"


def test_an_ib_packet_the_kernel_refuses_is_counted_and_its_buffer_freed(ib_switch):
    ib_switch.refuse(1, "refused")
    deliver(ib_switch, 0, ib_frame())
    egress = port_stats(ib_switch, 1)["ib"]
    assert egress["tx_errors"] >= 1 and egress["forwarded"] == 0 and not egress["queued"][3]
    assert ib_switch.ib_occupancy(0, 3) == 0
    ib_switch.refuse(1, None)
    deliver(ib_switch, 0, ib_frame())
    assert port_stats(ib_switch, 1)["ib"]["forwarded"] == 1
