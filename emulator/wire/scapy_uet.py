"""Scapy layers for fabric-emu's UET frames (docs/uet-wire.md), which scapy 2.8 has no layers for.

``UDP(dport=4793)`` is followed by the PDS header its type names: a RUD request (type 2) or a RUD_CC request
(type 13, with its credit target), each followed by the SES standard request header; an ACK_CC (type 8); a
NACK (type 10); a CONTROL packet (type 11, the control type in the next-header slot; fabric-emu sends the
credit type).  So ``Ether(frame)`` of a captured UET frame dissects whole, and ``Ether()/IP()/UDP(sport=49152
+ ev, dport=4793)/UetRudRequest()/UetSes()/payload`` builds one that the compiled decoder reads: the layouts
here are written from the tables, not from the Rust code, so each checks the other (tests/unit/test_scapy_uet.py).

For tests and capture analysis only, as :mod:`emulator.wire.scapy_layers` (importing scapy takes a second).
"""

from __future__ import annotations

from scapy.fields import (BitEnumField, BitField, ByteField, IntField, LongField, ShortField, SignedShortField,
                          ThreeBytesField, XByteField, XLongField, XShortField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from emulator._core.uet import UET_PORT

PDS_TYPES = {2: "RUD_REQ", 8: "ACK_CC", 10: "NACK", 11: "CONTROL", 13: "RUD_CC_REQ"}
SES_STANDARD = 3
CONTROL_TYPES = {7: "credit"}


class _Pds(Packet):
    """The PDS prologue's 16 bits: type, next header (a CONTROL packet's control type), flags."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        if getattr(self, "next_hdr", None) == SES_STANDARD and self.type in (2, 13):
            return UetSes
        return Packet.guess_payload_class(self, payload)


def _prologue(kind: int, next_hdr: int = 0) -> list:
    return [BitEnumField("type", kind, 5, PDS_TYPES), BitField("next_hdr", next_hdr, 4), BitField("flags", 0, 7)]


class UetRudRequest(_Pds):
    name = "UET PDS RUD request"
    fields_desc = _prologue(2, SES_STANDARD) + [
        SignedShortField("clear_psn_offset", 0), IntField("psn", 0), ShortField("spdcid", 0),
        ShortField("dpdcid", 0)]


class UetRudCcRequest(_Pds):
    name = "UET PDS RUD_CC request"
    fields_desc = _prologue(13, SES_STANDARD) + [
        SignedShortField("clear_psn_offset", 0), IntField("psn", 0), ShortField("spdcid", 0),
        ShortField("dpdcid", 0), ByteField("ccc_id", 0), ThreeBytesField("credit_target", 0)]


class UetSes(Packet):
    """The SES standard request header, 44 bytes.  Bytes 32..39: on the first packet of a message the header
    data (the immediate), on the others the payload length (14 bits) and the message offset."""

    name = "UET SES standard request"
    fields_desc = [
        BitField("version", 0, 2), BitField("opcode", 1, 6), XByteField("ses_flags", 0), ShortField("message_id", 0),
        ByteField("ri_generation", 0), ThreeBytesField("job_id", 0), XShortField("pid_on_fep", 0),
        XShortField("resource_index", 0), XLongField("buffer_offset", 0), IntField("initiator", 0),
        XLongField("memory_key", 0), LongField("header_data", 0), IntField("request_length", 0)]

    @property
    def payload_length(self) -> int:
        return (self.header_data >> 32) & 0x3FFF

    @property
    def message_offset(self) -> int:
        return self.header_data & 0xFFFF_FFFF


class UetAckCc(_Pds):
    name = "UET PDS ACK_CC"
    fields_desc = _prologue(8) + [
        SignedShortField("ack_psn_offset", 0), IntField("cack_psn", 0), ShortField("spdcid", 0),
        ShortField("dpdcid", 0), BitField("cc_type", 0, 4), BitField("cc_flags", 0, 4), ByteField("mpr", 0),
        SignedShortField("sack_psn_offset", 0), XLongField("sack_bitmap", 0), ShortField("service_time", 0),
        ByteField("rcv_cwnd_pend", 0), ThreeBytesField("rcvd_bytes", 0), ShortField("ooo_count", 0)]


class UetNack(_Pds):
    name = "UET PDS NACK"
    fields_desc = _prologue(10) + [
        XByteField("nack_code", 0), ByteField("vendor_code", 0), IntField("psn", 0), ShortField("spdcid", 0),
        ShortField("dpdcid", 0), IntField("nack_payload", 0)]


class UetControl(_Pds):
    name = "UET PDS CONTROL"
    fields_desc = [BitEnumField("type", 11, 5, PDS_TYPES), BitEnumField("ctl_type", 7, 4, CONTROL_TYPES),
                   BitField("flags", 0, 7), ShortField("probe_opaque", 0), IntField("psn", 0),
                   ShortField("spdcid", 0), ShortField("dpdcid", 0), IntField("control_payload", 0)]


class UetPds(Packet):
    """Dispatches on the PDS type in a UDP datagram to port 4793."""

    name = "UET PDS"
    _BY_TYPE: dict[int, type[Packet]] = {2: UetRudRequest, 13: UetRudCcRequest, 8: UetAckCc, 10: UetNack,
                                         11: UetControl}

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args, **kargs) -> type[Packet]:
        if _pkt and len(_pkt) >= 2:
            return cls._BY_TYPE.get(_pkt[0] >> 3, Packet)
        return cls


bind_layers(UDP, UetPds, dport=UET_PORT)
