"""What the RNIC puts on its host's link: RoCEv2 frames, or native IB packets.

The transport (the compiled :mod:`emulator._core.rc`) and the verbs are the same on both
fabrics; only the framing, what the RNIC listens for and whether a frame
needs link credit differ.  ``--fabric ib`` gives every QP native IB framing
(LRH with LIDs from the subnet manager, VCRC) and gates sending on the
switch's advertised credits; the other fabrics give RoCEv2.
"""

from __future__ import annotations

import ctypes
import socket
import struct
from typing import Any

from emulator.agents.config import HostConfig, HostIbConfig
from emulator._core.ib_port import IbPort
from emulator._core.ib import ETHERTYPE_IB
from emulator._core.transport import Packet
from emulator._core.mac import ETH_LEN
from emulator._core.roce import DATA_DSCP, ROCE_PORT, Framer, decode

ETH_P_IP = 0x0800
SO_ATTACH_FILTER = 26
SOURCE_PORT_BASE = 49152  # RoCEv2 source ports carry the QP's ECMP entropy (and stay clear of well-known dissectors)
# Classic BPF: accept IPv4 (no options) / UDP / destination port 4791, drop the rest.
_ROCE_FILTER = [
    (0x28, 0, 0, 12), (0x15, 0, 7, ETH_P_IP),   # ldh [12]; jeq IPv4 else drop
    (0x30, 0, 0, 14), (0x15, 0, 5, 0x45),       # ldb [14]; jeq version 4, IHL 5 else drop
    (0x30, 0, 0, 23), (0x15, 0, 3, 17),         # ldb [23]; jeq UDP else drop
    (0x28, 0, 0, 36), (0x15, 0, 1, ROCE_PORT),  # ldh [36]; jeq 4791 else drop
    (0x06, 0, 0, 0xFFFF), (0x06, 0, 0, 0),      # accept; drop
]
_DROP_ALL = [(0x06, 0, 0, 0)]


def attach_filter(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    """SO_ATTACH_FILTER with a classic BPF program (the kernel copies it)."""
    code = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(code)
    fprog = struct.pack("HL", len(program), ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def source_port(qpn: int, remote_qpn: int) -> int:
    """The UDP source port of a QP: 49152 and up, a hash of both QPNs."""
    return SOURCE_PORT_BASE + (((qpn * 0x9E3779B1) ^ (remote_qpn * 0x85EBCA6B)) >> 7 & 0x3FFF)


class RoceLink:
    """RoCEv2: IPv4/UDP 4791 frames, no link credit."""

    ethertype = ETH_P_IP

    def __init__(self, config: HostConfig) -> None:
        self.mac, self.gateway_mac, self.ip = config.mac, config.peer_mac, config.ip
        self.sink: socket.socket | None = None
        self.malformed = 0  # frames that are no RoCEv2 packet we speak

    def prepare(self, sock: socket.socket) -> None:
        """Filter RoCE frames in the kernel; keep the host's UDP stack from answering them."""
        attach_filter(sock, _ROCE_FILTER)
        # The kernel would answer every RoCE frame with ICMP port unreachable; a
        # bound UDP socket that filters everything away keeps it quiet.
        self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        attach_filter(self.sink, _DROP_ALL)
        self.sink.bind(("0.0.0.0", ROCE_PORT))

    def framer(self, qpn: int, remote_qpn: int, remote_ip: str, mtu: int, dscp: int = DATA_DSCP) -> Framer:
        return Framer(self.mac, self.gateway_mac, self.ip, remote_ip, source_port(qpn, remote_qpn), dscp)

    def accept(self, now: int, frame: memoryview) -> tuple[Packet, str, bool] | None:
        """(packet, source address, checksum good), or None (counted) for a frame that is none."""
        decoded = decode(frame)
        if decoded is None:
            self.malformed += 1
            return None
        return decoded.packet, decoded.src_ip, decoded.icrc_ok

    def admit(self, frame: bytes) -> bool:
        return True

    def control_frames(self, now: int) -> list[bytes]:
        return []

    def next_deadline(self) -> int | None:
        return None

    def stats(self) -> dict[str, Any]:
        return {"malformed": self.malformed}

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()


class IbLink(IbPort):
    """Native IB on the host's socket: the model's port (LRH framing, credits both ways), nothing to filter."""

    ethertype = ETHERTYPE_IB

    def __init__(self, config: HostConfig, ib: HostIbConfig) -> None:
        super().__init__(config.mac, config.peer_mac, ib.lid, ib.lids, ib.sl, ib.sl2vl[ib.sl], ib.vls, ib.capacity,
                         ib.peer_capacity, config.rate_bps, ETH_LEN + config.mtu, ib.fc_floor)

    def prepare(self, sock: socket.socket) -> None:
        """Nothing to filter: the socket is bound to the IB EtherType."""

    def close(self) -> None:
        """Nothing beyond the RNIC's socket."""


def make_link(config: HostConfig) -> RoceLink | IbLink:
    return IbLink(config, config.ib) if config.ib is not None else RoceLink(config)
