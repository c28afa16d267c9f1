"""Scapy layers for the IB extension headers that ``scapy.contrib.roce`` lacks.

``scapy.contrib.roce`` has BTH (with the RoCEv2 ICRC), AETH (bound to the
ACK opcode only) and the CNP body, but no RETH, ImmDt or DETH.  This module
adds them and binds every extension header after BTH by opcode, the way
scapy binds layers, so that ``Ether(frame)`` of a captured RoCEv2 frame
dissects completely and ``Ether()/IP()/UDP()/BTH()/RETH()/...`` builds one
with scapy's own, independent ICRC.

For tests and capture analysis only: importing scapy takes about a second,
so it stays out of the per-frame path; the framing itself is compiled
(:mod:`emulator._core.roce`, whose opcode sets this module binds by).
"""

from __future__ import annotations

import scapy.contrib.roce as roce
from scapy.fields import BitField, IntField, XIntField, XLongField
from scapy.packet import Packet, bind_layers

from emulator._core.transport import HAS_AETH, HAS_IMM, HAS_RETH, Opcode

BTH = roce.BTH
AETH = roce.AETH

UD_SEND_ONLY = 0x64
UD_SEND_ONLY_IMM = 0x65


class RETH(Packet):
    """RDMA extended transport header: where a WRITE or READ goes in remote memory."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dmalen", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        # WRITE_ONLY_IMM carries RETH then ImmDt; the opcode is in the BTH below.
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode == Opcode.WRITE_ONLY_IMM:
            return ImmDt
        return super().guess_payload_class(payload)


class ImmDt(Packet):
    """Immediate data: 32 bits delivered with a SEND or WRITE completion."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class DETH(Packet):
    """Datagram extended transport header of UD: Q_Key and source QP."""

    name = "DETH"
    fields_desc = [XIntField("qkey", 0), BitField("reserved", 0, 8), BitField("srcqp", 0, 24)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode == UD_SEND_ONLY_IMM:
            return ImmDt
        return super().guess_payload_class(payload)


def _bind() -> None:
    """Which header follows BTH depends on the opcode alone, so bind by opcode."""
    for op in HAS_RETH:
        bind_layers(BTH, RETH, opcode=op)
    for op in HAS_IMM - HAS_RETH:  # after a RETH, ImmDt follows it (RETH.guess_payload_class)
        bind_layers(BTH, ImmDt, opcode=op)
    for op in HAS_AETH - {Opcode.ACK}:  # scapy.contrib.roce binds the ACK itself
        bind_layers(BTH, AETH, opcode=op)
    bind_layers(BTH, DETH, opcode=UD_SEND_ONLY)
    bind_layers(BTH, DETH, opcode=UD_SEND_ONLY_IMM)


_bind()
