"""One RoCE/IB transport packet as the RC model sees it, without the wire.

The transport model (:mod:`emulator.model.rc`) consumes and produces
:class:`Packet` objects; :mod:`emulator.wire.roce` turns them into RoCEv2
frames and back.  Keeping addressing (MACs, IPs, UDP ports) out of here lets
the same model later run over native IB headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Opcode(IntEnum):
    """BTH opcodes of the RC transport (IBTA 9.2.1) and the RoCE CNP."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_LAST_IMM = 0x03
    SEND_ONLY = 0x04
    SEND_ONLY_IMM = 0x05
    WRITE_FIRST = 0x06
    WRITE_MIDDLE = 0x07
    WRITE_LAST = 0x08
    WRITE_LAST_IMM = 0x09
    WRITE_ONLY = 0x0A
    WRITE_ONLY_IMM = 0x0B
    READ_REQUEST = 0x0C
    READ_RESPONSE_FIRST = 0x0D
    READ_RESPONSE_MIDDLE = 0x0E
    READ_RESPONSE_LAST = 0x0F
    READ_RESPONSE_ONLY = 0x10
    ACK = 0x11
    CNP = 0x81


HAS_RETH = frozenset({Opcode.WRITE_FIRST, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM, Opcode.READ_REQUEST})
HAS_IMM = frozenset({Opcode.SEND_LAST_IMM, Opcode.SEND_ONLY_IMM, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM})
HAS_AETH = frozenset({Opcode.ACK, Opcode.READ_RESPONSE_FIRST, Opcode.READ_RESPONSE_LAST,
                      Opcode.READ_RESPONSE_ONLY})
HAS_PAYLOAD = frozenset(set(Opcode) - {Opcode.READ_REQUEST, Opcode.ACK, Opcode.CNP})

PSN_MASK = 0xFFFFFF
DEFAULT_PKEY = 0xFFFF

# AETH syndromes (IBTA 9.7.5.1.5): bits 6:5 are the kind, the low five the value.
SYNDROME_ACK = 0x1F  # ACK, credit count "unlimited"
SYNDROME_RNR_NAK = 0x20  # | RNR timer code (5 bits)
NAK_PSN_SEQUENCE_ERROR = 0x60
NAK_INVALID_REQUEST = 0x61
NAK_REMOTE_ACCESS_ERROR = 0x62
NAK_REMOTE_OPERATIONAL_ERROR = 0x63


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` in the 24-bit PSN space."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` in the 24-bit PSN space (window of 2**23)."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d >= 1 << 23 else d


@dataclass(slots=True)
class Packet:
    """The transport headers (BTH and extensions) and payload of one packet.

    ``va``/``rkey``/``dma_len`` are the RETH (present when ``opcode`` is in
    :data:`HAS_RETH`), ``imm`` the ImmDt, ``syndrome``/``msn`` the AETH.
    ``payload`` excludes the pad bytes; the wire layer adds and strips them.
    ``ecn_ce`` is set by the decoder when the IP header arrived marked CE.
    """

    opcode: int
    dest_qp: int
    psn: int
    ack_req: bool = False
    solicited: bool = False
    pkey: int = DEFAULT_PKEY
    va: int = 0
    rkey: int = 0
    dma_len: int = 0
    imm: int = 0
    syndrome: int = 0
    msn: int = 0
    payload: bytes | bytearray | memoryview = b""
    ecn_ce: bool = False
