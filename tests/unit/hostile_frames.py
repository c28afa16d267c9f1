"""Hypothesis strategies for frames a hostile or broken neighbour may put on a link.

Three kinds, so that the fuzzers reach deep into the per-frame paths and not
only their first length check: any bytes at all; a frame addressed to us
with one of the EtherTypes we speak and any body; and a valid frame of each
kind we speak (IPv4/UDP, RoCEv2, native IB data, IB flow control, PFC,
ARP) with some bytes overwritten, some cut off or some appended.
"""

from __future__ import annotations

from hypothesis import strategies as st

from emulator._core.ib import FcPacket, encode_data, encode_fc
from emulator._core.mac import mac_bytes
from emulator._core.pfc import encode_pfc
from emulator._core.transport import Opcode, Packet
from emulator._core.roce import Framer

ETHERTYPES = (b"\x08\x00", b"\x88\x08", b"\x08\x06", b"\x88\xb6", b"\x88\xb5", b"\x86\xdd", b"\x81\x00")


def _valid_frames(dst_mac: str, src_mac: str, dst_ip: str, src_ip: str) -> list[bytes]:
    write = Packet(Opcode.WRITE_ONLY, 0x11, 5, ack_req=True, va=0x1000, rkey=0x100, dma_len=64, payload=bytes(64))
    read = Packet(Opcode.READ_REQUEST, 0x11, 6, va=0x1000, rkey=0x100, dma_len=0)
    response = Packet(Opcode.READ_RESPONSE_ONLY, 0x11, 6, syndrome=0x1F, payload=b"stray data")
    ack = Packet(Opcode.ACK, 0x11, 7, syndrome=0x60)
    roce = Framer(src_mac, dst_mac, src_ip, dst_ip, 49152)
    arp = (mac_bytes("ff:ff:ff:ff:ff:ff") + mac_bytes(src_mac) + b"\x08\x06\x00\x01\x08\x00\x06\x04\x00\x01"
           + mac_bytes(src_mac) + bytes([10, 0, 0, 1]) + bytes(6) + bytes([10, 0, 0, 2])).ljust(60, b"\0")
    return [
        roce.encode(write), roce.encode(read), roce.encode(response), roce.encode(ack),
        encode_data(src_mac, dst_mac, 2, 1, 3, 3, write), encode_data(src_mac, dst_mac, 1, 2, 1, 0, response),
        encode_data(src_mac, dst_mac, 1, 2, 0, 5, ack), encode_fc(src_mac, dst_mac, FcPacket(1, 0, 0, 100)),
        encode_pfc(mac_bytes(src_mac), {3: 0xFFFF}), arp,
    ]


def _mutated(frame: bytes, edits: list[tuple[int, int]], cut: int | None, tail: bytes) -> bytes:
    data = bytearray(frame)
    for position, value in edits:
        data[position % len(data)] = value
    if cut is not None:
        del data[cut % (len(data) + 1):]
    return bytes(data) + tail


def frames(dst_mac: str, src_mac: str, dst_ip: str = "10.0.0.2", src_ip: str = "10.0.0.1") -> st.SearchStrategy[bytes]:
    """Frames towards ``dst_mac``: random, of our EtherTypes, or valid ones damaged."""
    valid = _valid_frames(dst_mac, src_mac, dst_ip, src_ip)
    header = mac_bytes(dst_mac) + mac_bytes(src_mac)
    return st.one_of(
        st.binary(max_size=1600),
        st.builds(lambda ethertype, body: header + ethertype + body, st.sampled_from(ETHERTYPES),
                  st.binary(max_size=120)),
        st.builds(_mutated, st.sampled_from(valid),
                  st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4),
                  st.none() | st.integers(0, 1600), st.binary(max_size=8)),
    )
