"""A host's port on an InfiniBand subnet, sans-I/O: native IB framing and link credits both ways.

With ``--fabric ib`` every QP's packets are native IB (LRH with the LIDs the
subnet manager gave, VCRC; :mod:`emulator.wire.ib`), and a packet leaves the
host only when the switch port has advertised credit for it
(:class:`~emulator.model.credits.CreditLink`).  The RNIC agent
(:mod:`emulator.agents.rnic_links`) wraps this with its socket; the
simulation backend's host (:mod:`emulator.sim.host`) drives it in
simulated time.  Nothing here reads a clock or touches a socket.
"""

from __future__ import annotations

from typing import Any

from emulator.model.credits import FABRIC_REFRESH_NS, CreditLink, CreditViolation, blocks, fabric_min_interval_ns
from emulator.model.rdma_params import IB_OVERHEAD
from emulator.wire.ib import LRH_AT, SLP, decode_data, decode_fc, encode_data, encode_fc, packet_size
from emulator.wire.transport import Packet


class IbFramer:
    """Native IB framing of one QP: LIDs and SL fixed at connect."""

    def __init__(self, port: "IbPort", dlid: int) -> None:
        self.port, self.dlid = port, dlid

    def encode(self, packet: Packet) -> bytes:
        port = self.port
        return encode_data(port.mac, port.gateway_mac, self.dlid, port.lid, port.sl, port.vl, packet)


class IbPort:
    """LRH-addressed packets, sent only against the switch's credits.

    ``lids`` maps every GID (a host's IPv4 address) to its LID; ``capacity``
    and ``peer_capacity`` are the bytes each VL of this port and of the
    switch port receive into; ``frame_bytes`` is the link's longest frame and
    ``fc_floor_ns`` the switch's ``fc_floor`` (they pace the grants,
    :func:`~emulator.model.credits.fabric_min_interval_ns`).
    """

    def __init__(self, mac: str, gateway_mac: str, lid: int, lids: dict[str, int], sl: int, vl: int, vls: int,
                 capacity: int, peer_capacity: int, rate_bps: int, frame_bytes: int,
                 fc_floor_ns: int) -> None:
        self.mac, self.gateway_mac = mac, gateway_mac
        self.lid = lid
        self.lids = lids
        self.ips = {lid_: ip for ip, lid_ in lids.items()}
        self.sl, self.vl = sl, vl
        self.credits = CreditLink(vls, blocks(capacity), blocks(peer_capacity), refresh_ns=FABRIC_REFRESH_NS,
                                  min_interval_ns=fabric_min_interval_ns(rate_bps, frame_bytes, fc_floor_ns))
        self.waiting = False  # a frame waits for credit
        self.malformed = 0  # frames that are no IB packet we speak, or on a VL this link lacks
        self.credit_violations = 0  # data packets beyond the credit we granted

    def framer(self, qpn: int, remote_qpn: int, remote_ip: str, mtu: int) -> IbFramer:
        if remote_ip not in self.lids:
            raise ValueError(f"no IB port has GID {remote_ip}")
        if not self.credits.sendable(self.vl, mtu + IB_OVERHEAD):
            raise ValueError(f"path MTU {mtu} does not fit the switch's VL buffer: a packet of {mtu + IB_OVERHEAD} "
                             "bytes could never get credit; choose a smaller MTU or a larger --switch vl_buffer")
        return IbFramer(self, self.lids[remote_ip])

    def accept(self, now: int, frame: bytes | memoryview) -> tuple[Packet, str, bool] | None:
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
