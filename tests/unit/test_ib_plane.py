"""A switch's IB plane (emulator._core.ib_plane) without a socket: what it gives a port to send, and what
becomes of a frame the kernel takes, refuses, or has no room for yet.
"""

from __future__ import annotations

from emulator._core.ib import LRH_AT, data_end, decode_fc, encode_data
from emulator._core.ib_plane import IbPlane
from emulator._core.transport import Opcode, Packet
from fake_agents import MAC_PEERS, MAC_S1, switch_config


def plane() -> IbPlane:
    """Switch s1's plane: ports to h1 (LID 1), h2 (LID 2) and another switch (LID 3)."""
    return IbPlane(list(zip(MAC_S1, MAC_PEERS)), switch_config("/unused", ib=True).ib, [1514] * 3,
                   [10**9] * 3)


def from_h1(sl: int = 0, psn: int = 1) -> bytes:
    """A data packet from h1 to h2 on SL ``sl`` (and VL ``sl``)."""
    return encode_data(MAC_PEERS[0], MAC_S1[0], 2, 1, sl, sl, Packet(Opcode.SEND_ONLY, 0x11, psn, payload=bytes(200)))


def test_a_forwarded_packet_stays_the_head_until_the_kernel_takes_it():
    ib = plane()
    assert ib.receive(0, 0, from_h1()) == [1]
    head = ib.head(1)
    assert head is not None and data_end(head) is not None and head[:6] == bytes.fromhex(MAC_PEERS[1].replace(":", ""))
    assert ib.head(1) is head  # the kernel had no room: the same frame waits
    assert ib.links[0].occupancy(0) > 0 and ib.forwarded[1] == 0
    ib.sent(1)
    assert ib.forwarded[1] == 1 and ib.head(1) is None
    assert ib.links[0].occupancy(0) == 0  # its ingress buffer is free, to be credited back to h1


def test_a_packet_the_kernel_refuses_is_counted_lost_and_uses_no_credit():
    ib = plane()
    ib.receive(0, 0, from_h1())
    credits = ib.links[1].credits(0)
    ib.head(1)
    ib.refused(1)
    assert ib.tx_errors[1] == 1 and ib.forwarded[1] == 0
    assert ib.links[1].credits(0) == credits and ib.links[0].occupancy(0) == 0
    assert ib.head(1) is None


def test_flow_control_packets_go_before_data():
    ib = plane()
    ib.receive(0, 0, from_h1())
    assert 1 in ib.take_fc(0)  # the first credit updates of every link are due at once
    sent = []
    while (frame := ib.head(1)) is not None:
        sent.append(frame)
        ib.sent(1)
    kinds = ["fc" if decode_fc(frame) is not None else "data" for frame in sent]
    assert kinds[-1] == "data" and set(kinds[:-1]) == {"fc"}


def test_the_vls_take_turns():
    ib = plane()
    for psn, sl in enumerate((0, 0, 0, 1, 1, 1)):
        ib.receive(0, 0, from_h1(sl, psn))
    order = []
    while (frame := ib.head(1)) is not None:
        order.append(frame[LRH_AT] >> 4)
        ib.sent(1)
    assert order == [0, 1, 0, 1, 0, 1]
