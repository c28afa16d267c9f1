"""What the RNIC puts on its host's link: RoCEv2 frames, or native IB packets.

The transport (:mod:`emulator.model.rc`) and the verbs are the same on both
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
from emulator.model.credits import FABRIC_REFRESH_NS, CreditLink, CreditViolation, blocks, fabric_min_interval_ns
from emulator.model.rdma_params import IB_OVERHEAD
from emulator.wire.ib import ETHERTYPE_IB, LRH_AT, SLP, decode_data, decode_fc, encode_data, encode_fc, packet_size
from emulator.wire.transport import Packet
from emulator.wire.mac import ETH_LEN
from emulator.wire.roce import DATA_DSCP, ROCE_PORT, Framer, decode

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


class _IbFramer:
    """Native IB framing of one QP: LIDs and SL fixed at connect."""

    def __init__(self, link: "IbLink", dlid: int) -> None:
        self.link, self.dlid = link, dlid

    def encode(self, packet: Packet) -> bytes:
        link = self.link
        return encode_data(link.mac, link.gateway_mac, self.dlid, link.lid, link.sl, link.vl, packet)


class IbLink:
    """Native IB: LRH-addressed packets, sent only against the switch's credits."""

    ethertype = ETHERTYPE_IB

    def __init__(self, config: HostConfig, ib: HostIbConfig) -> None:
        self.mac, self.gateway_mac = config.mac, config.peer_mac
        self.lid = ib.lid
        self.lids = ib.lids  # GID (the host's IPv4 address) -> LID
        self.ips = {lid: ip for ip, lid in self.lids.items()}
        self.sl = ib.sl
        self.vl = ib.sl2vl[self.sl]
        self.credits = CreditLink(ib.vls, blocks(ib.capacity), blocks(ib.peer_capacity),
                                  refresh_ns=FABRIC_REFRESH_NS,
                                  min_interval_ns=fabric_min_interval_ns(config.rate_bps, ETH_LEN + config.mtu))
        self.waiting = False  # a frame waits for credit
        self.malformed = 0  # frames that are no IB packet we speak, or on a VL this link lacks
        self.credit_violations = 0  # data packets beyond the credit we granted

    def prepare(self, sock: socket.socket) -> None:
        """Nothing to filter: the socket is bound to the IB EtherType."""

    def framer(self, qpn: int, remote_qpn: int, remote_ip: str, mtu: int) -> _IbFramer:
        if remote_ip not in self.lids:
            raise ValueError(f"no IB port has GID {remote_ip}")
        if not self.credits.sendable(self.vl, mtu + IB_OVERHEAD):
            raise ValueError(f"path MTU {mtu} does not fit the switch's VL buffer: a packet of {mtu + IB_OVERHEAD} "
                             "bytes could never get credit; choose a smaller MTU or a larger --switch vl_buffer")
        return _IbFramer(self, self.lids[remote_ip])

    def accept(self, now: int, frame: memoryview) -> tuple[Packet, str, bool] | None:
        """(packet, source GID, CRCs good) of a data packet; None for a link packet (consumed) or garbage (counted)."""
        if len(frame) > LRH_AT and frame[LRH_AT - 1] == SLP:
            fc = decode_fc(frame)
            if fc is None or not fc.lpcrc_ok or fc.packet.vl >= self.credits.vls:
                self.malformed += 1
            else:
                self.credits.on_fc(now, fc.packet)
            return None
        decoded = decode_data(frame)  # None for anything but a local-routed SDP packet that its frame holds
        if decoded is None or decoded.vl >= self.credits.vls:
            self.malformed += 1
            return None
        size = packet_size(frame)
        try:
            self.credits.received(decoded.vl, size)
        except CreditViolation:  # the switch ignored our credit
            self.credit_violations += 1
            return None
        self.credits.freed(decoded.vl, size)  # the RNIC takes every packet at once
        source = self.ips.get(decoded.slid, "")
        return decoded.packet, source, decoded.icrc_ok and decoded.vcrc_ok

    def admit(self, frame: bytes) -> bool:
        """Whether the switch has credit for this packet; counts it as sent if so."""
        vl, size = frame[LRH_AT] >> 4, packet_size(frame)
        if not self.credits.can_send(vl, size):
            self.waiting = True
            return False
        self.credits.sent(vl, size)
        self.waiting = False
        return True

    def control_frames(self, now: int) -> list[bytes]:
        return [encode_fc(self.mac, self.gateway_mac, fc) for fc in self.credits.fc_due(now)]

    def next_deadline(self) -> int | None:
        return self.credits.next_deadline()

    def stats(self) -> dict[str, Any]:
        return {"lid": self.lid, "malformed": self.malformed, "credit_violations": self.credit_violations,
                "credits": [self.credits.counters[vl] for vl in sorted(self.credits.counters)]}

    def close(self) -> None:
        """Nothing beyond the RNIC's socket."""


def make_link(config: HostConfig) -> RoceLink | IbLink:
    return IbLink(config, config.ib) if config.ib is not None else RoceLink(config)
