"""The scapy layers of UET (emulator.wire.scapy_uet) against the compiled codec (emulator._core.uet).

Each side was written from docs/uet-wire.md's tables, apart: frames the compiled encoder makes dissect in
scapy with the fields given to the encoder, and frames scapy builds (its own UDP checksum) decode in the
compiled decoder.
"""

from __future__ import annotations

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator._core import uet
from emulator.wire.scapy_uet import UetAckCc, UetControl, UetNack, UetRudCcRequest, UetRudRequest, UetSes

MACS = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
IPS = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
BASE = {"kind": "request", "length": 12288, "message_id": 2, "remote_addr": 0x7F00_1000, "rkey": 9,
        "spdcid": 1, "dpdcid": 2}


def encode(fields: dict, payload: bytes = b"") -> bytes:
    return uet.encode(*MACS, *IPS, fields, payload)


def test_the_compiled_encoders_frames_dissect_in_scapy():
    som = Ether(encode(BASE | {"psn": 5, "offset": 0, "imm": 0xCAFE, "ev": 3, "ack_request": True}, bytes(64)))
    assert som[UDP].sport == uet.EV_PORT_BASE + 3 and som[UDP].dport == uet.UET_PORT
    pds, ses = som[UetRudRequest], som[UetSes]
    assert (pds.type, pds.next_hdr, pds.flags & 0x08, pds.psn, pds.spdcid, pds.dpdcid) == (2, 3, 0x08, 5, 1, 2)
    assert (ses.opcode, ses.ses_flags & 0x05, ses.message_id, ses.buffer_offset, ses.memory_key,
            ses.header_data, ses.request_length) == (1, 0x05, 2, 0x7F00_1000, 9, 0xCAFE, 12288)  # SOM and HD
    assert len(bytes(ses.payload)) == 64

    middle = Ether(encode(BASE | {"psn": 6, "offset": 4096, "ev": 4, "credit_target": 0x12_3456}, bytes(4096)))
    pds, ses = middle[UetRudCcRequest], middle[UetSes]
    assert (pds.type, pds.psn, pds.credit_target) == (13, 6, 0x12_3456)
    assert (ses.payload_length, ses.message_offset, ses.ses_flags & 0x01) == (4096, 4096, 0)

    ack = Ether(encode({"kind": "ack", "psn": 12, "cack_psn": 9, "sack_base": 9, "sack_bitmap": 0b1010,
                        "ecn_echo": True, "out_of_order": 3, "ev": 5, "spdcid": 2, "dpdcid": 1}))[UetAckCc]
    # the wire's cumulative PSN is the last of the unbroken run; the ACK PSN and the SACK base are offsets from it
    assert (ack.type, ack.flags & 0x20, ack.cack_psn, ack.ack_psn_offset, ack.sack_psn_offset,
            ack.sack_bitmap, ack.ooo_count) == (8, 0x20, 8, 4, 1, 0b1010, 3)

    nack = Ether(encode({"kind": "nack", "psn": 7, "nack_code": uet.NACK_TRIMMED, "cack_psn": 7}))[UetNack]
    assert (nack.type, nack.nack_code, nack.psn, nack.nack_payload) == (10, uet.NACK_TRIMMED, 7, 7)

    credit = Ether(encode({"kind": "credit", "credit": 0x8000_0001, "spdcid": 2, "dpdcid": 1}))[UetControl]
    assert (credit.type, credit.ctl_type, credit.spdcid, credit.dpdcid, credit.control_payload) == (
        11, 7, 2, 1, 0x8000_0001)

    trimmed = Ether(uet.trim(encode(BASE | {"psn": 8, "offset": 8192, "eom": True, "ev": 1}, bytes(4096))))
    assert trimmed[IP].tos >> 2 == uet.TRIMMED_DSCP and trimmed[UetRudRequest].psn == 8
    assert trimmed[UetSes].payload_length == 4096 and not bytes(trimmed[UetSes].payload)  # the header kept, the data cut


def test_frames_scapy_builds_decode_in_the_compiled_decoder():
    head = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2", tos=26 << 2)
    request = head / UDP(sport=uet.EV_PORT_BASE + 9, dport=uet.UET_PORT) / UetRudCcRequest(
        psn=77, spdcid=4, dpdcid=5, credit_target=1000, flags=0x10) / UetSes(
        opcode=5, ses_flags=0x02, message_id=3, buffer_offset=0x5000, memory_key=12,
        header_data=(100 << 32) | 8192, request_length=8292) / bytes(100)
    decoded = uet.decode(bytes(request))
    assert decoded is not None and decoded["checksum_ok"]
    assert {k: decoded[k] for k in ("kind", "psn", "spdcid", "dpdcid", "credit_target", "retransmit", "send",
                                    "eom", "som", "message_id", "remote_addr", "rkey", "offset", "length", "ev")} == {
        "kind": "request", "psn": 77, "spdcid": 4, "dpdcid": 5, "credit_target": 1000, "retransmit": True,
        "send": True, "eom": True, "som": False, "message_id": 3, "remote_addr": 0x5000, "rkey": 12,
        "offset": 8192, "length": 8292, "ev": 9}
    assert decoded["payload"] == bytes(100)

    credit = head / UDP(sport=uet.EV_PORT_BASE, dport=uet.UET_PORT) / UetControl(spdcid=1, dpdcid=2, control_payload=99)
    decoded = uet.decode(bytes(credit))
    assert decoded is not None and decoded["checksum_ok"]
    assert (decoded["kind"], decoded["credit"], decoded["dpdcid"]) == ("credit", 99, 2)
