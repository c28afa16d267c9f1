"""tshark, with the package's Lua dissector (emulator/study/dissectors/uet.lua), reads fabric-emu's UET frames.

The frames come from the compiled encoder (crates/fabric-core/src/wire/uet.rs through emulator._core.uet)
and go into a pcap written by the tests' own writer (capture_files); what tshark must show is taken from
the dicts handed to the encoder, not from its decoder, so the script and the Rust code check each other.
Where the wire carries a field differently from the packet that made it (the cumulative ACK PSN), the
expectation says how, as docs/uet-wire.md does.

tshark runs with HOME in tmp_path: a copy of the script in the user's plugin folder, or their preferences,
cannot stand in for the one under test.  Without tshark (or a tshark without Lua) the tests fail: CI
installs it (scripts/bootstrap.sh).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from importlib import resources
from pathlib import Path

import pytest
from capture_files import classic_pcap

from emulator._core import uet

LUA = Path(str(resources.files("emulator.study") / "dissectors" / "uet.lua"))
MACS = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
IPS = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
ETH_IP_UDP = 14 + 20 + 8
MALFORMED_GROUP = 0x07000000  # PI_MALFORMED, as tshark prints _ws.expert.group
GOOD = 1  # tshark's checksum status "Good"
UNDECODED_GROUP = 0x05000000  # PI_UNDECODED: a note that a header was left undecoded (or a Lua error)

BASE = {"kind": "request", "length": 12288, "message_id": 2, "remote_addr": 0x7F00_1000, "rkey": 9,
        "spdcid": 1, "dpdcid": 2}
SOM = BASE | {"psn": 5, "offset": 0, "imm": 0xCAFE, "ev": 3, "eom": False, "ack_request": True}
MIDDLE = BASE | {"psn": 6, "offset": 4096, "ev": 4, "eom": False}
SEND = BASE | {"psn": 7, "offset": 0, "ev": 5, "eom": True, "send": True, "message_id": 3, "length": 2000}
SACK = (1 << 1) | (1 << 3) | (1 << 63)  # PSNs cack_psn + 1, + 3 and + 63: the bitmap's both ends
ACK = {"kind": "ack", "psn": 12, "cack_psn": 9, "sack_base": 9, "sack_bitmap": SACK, "ecn_echo": True, "out_of_order": 3,
       "ev": 5, "spdcid": 2, "dpdcid": 1}
NACK = {"kind": "nack", "psn": 7, "nack_code": uet.NACK_TRIMMED, "cack_psn": 7, "ev": 6, "spdcid": 2, "dpdcid": 1}
ASKING = MIDDLE | {"credit_target": 0x12_3456}  # receiver credits: a RUD_CC request
CREDIT = {"kind": "credit", "credit": 0x8000_0001, "ev": 7, "spdcid": 2, "dpdcid": 1}

FIELDS = ["_ws.col.Info", "frame.len", "ip.checksum.status", "udp.checksum.status", "udp.srcport", "uet.ev",
          "uet.trimmed", "uet.pds.type", "uet.pds.next_hdr", "uet.pds.flags.ar", "uet.pds.flags.retx",
          "uet.pds.flags.m", "uet.pds.psn", "uet.pds.spdcid", "uet.pds.dpdcid", "uet.ses.opcode",
          "uet.ses.flags.som", "uet.ses.flags.eom", "uet.ses.flags.hd", "uet.ses.message_id",
          "uet.ses.buffer_offset", "uet.ses.memory_key", "uet.ses.header_data", "uet.ses.payload_length",
          "uet.ses.message_offset", "uet.ses.request_length", "uet.ack.ack_psn", "uet.ack.cack_psn",
          "uet.ack.sack_base", "uet.ack.sack_bitmap", "uet.ack.sack_psn", "uet.ack.ooo_count", "uet.nack.code",
          "uet.nack.psn", "uet.nack.payload", "uet.pds.credit_target", "uet.control.type", "uet.control.credit",
          "uet.malformed", "_ws.malformed", "_ws.expert.group", "_ws.lua.error"]
BOOLS = {"uet.trimmed", "uet.pds.flags.ar", "uet.pds.flags.retx", "uet.pds.flags.m", "uet.ses.flags.som",
         "uet.ses.flags.eom", "uet.ses.flags.hd"}
TEXT = {"_ws.col.Info", "uet.malformed", "_ws.malformed", "_ws.lua.error"}


@pytest.fixture
def tshark() -> str:
    path = shutil.which("tshark") or shutil.which("tshark", path="/usr/sbin:/usr/bin")
    if path is None:
        pytest.fail("tshark is not installed, and these tests need it: apt-get install tshark "
                    "(scripts/bootstrap.sh installs it)")
    version = subprocess.run([path, "-v"], capture_output=True, text=True, check=True).stdout
    if "with Lua" not in version:
        pytest.fail(f"{path} was built without Lua: it cannot load {LUA.name}")
    return path


def encode(fields: dict, payload: bytes = b"") -> bytes:
    return uet.encode(*MACS, *IPS, fields, payload)


def cut(frame: bytes, udp_payload: int) -> bytes:
    """``frame`` with its UDP payload cut to ``udp_payload`` bytes, the IP and UDP lengths and the IP checksum
    saying so: a whole datagram, only too short for its UET header (UDP checksum 0: none, as IPv4 allows)."""
    out = bytearray(frame[:ETH_IP_UDP + udp_payload])
    struct.pack_into("!H", out, 16, 20 + 8 + udp_payload)
    struct.pack_into("!HH", out, 24, 0, 0)
    struct.pack_into("!HH", out, 38, 8 + udp_payload, 0)
    words = sum(struct.unpack("!10H", out[14:34]))
    while words > 0xFFFF:
        words = (words & 0xFFFF) + (words >> 16)
    struct.pack_into("!H", out, 24, ~words & 0xFFFF)
    return bytes(out)


def run(tshark: str, tmp_path: Path, frames: list[bytes], *extra: str) -> list[dict]:
    """tshark's reading of ``frames`` with the script loaded: one dict per frame, parsed."""
    pcap = tmp_path / "uet.pcap"
    pcap.write_bytes(classic_pcap([(i * 1000, frame) for i, frame in enumerate(frames)]))
    return read(tshark, tmp_path, pcap, *extra)


def read(tshark: str, tmp_path: Path, pcap: Path, *extra: str) -> list[dict]:
    env = os.environ | {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    args = [tshark, "-X", f"lua_script:{LUA}", *extra, "-r", str(pcap), "-T", "fields",
            "-E", "occurrence=a", "-E", "aggregator=,"] + [a for f in FIELDS for a in ("-e", f)]
    done = subprocess.run(args, capture_output=True, text=True, check=True, env=env)
    assert "Lua: Error" not in done.stderr, done.stderr
    return [parse(line) for line in done.stdout.splitlines()]


def parse(line: str) -> dict:
    row = {}
    for name, value in zip(FIELDS, line.split("\t"), strict=True):
        if not value:
            continue
        if name in TEXT:
            row[name] = value
        elif name in BOOLS:
            row[name] = {"1": True, "0": False, "True": True, "False": False}[value]
        elif name in {"uet.ack.sack_psn", "_ws.expert.group"}:
            row[name] = [int(v, 0) for v in value.split(",")]
        else:
            row[name] = int(value, 0)
    return row


def request_fields(fields: dict, payload: int) -> dict:
    """What tshark must show of a request encoded from ``fields``, with ``payload`` bytes of data."""
    som = fields["offset"] == 0
    row = {"udp.srcport": uet.EV_PORT_BASE + fields["ev"], "uet.ev": fields["ev"], "uet.pds.type": 2,
           "uet.pds.next_hdr": 3, "uet.pds.flags.ar": fields.get("ack_request", False),
           "uet.pds.flags.retx": False, "uet.pds.psn": fields["psn"], "uet.pds.spdcid": fields["spdcid"],
           "uet.pds.dpdcid": fields["dpdcid"], "uet.ses.opcode": 5 if fields.get("send") else 1,
           "uet.ses.flags.som": som, "uet.ses.flags.eom": fields["eom"],
           "uet.ses.flags.hd": som and "imm" in fields, "uet.ses.message_id": fields["message_id"],
           "uet.ses.buffer_offset": fields["remote_addr"], "uet.ses.memory_key": fields["rkey"],
           "uet.ses.request_length": fields["length"]}
    if som:
        row["uet.ses.header_data"] = fields.get("imm", 0)
    else:
        row |= {"uet.ses.payload_length": payload, "uet.ses.message_offset": fields["offset"]}
    return row


def test_tshark_shows_what_was_encoded(tshark, tmp_path):
    som = encode(SOM, bytes(4096))
    middle = encode(MIDDLE, bytes(4096))
    trimmed = uet.trim(encode(SEND, bytes(2000)))
    assert trimmed is not None and len(trimmed) == uet.REQUEST_HEADERS
    truncated = cut(som, 12 + 20)  # the PDS header whole, the SES header 20 bytes of 44
    assert uet.decode(truncated) is None, "the compiled decoder refuses it too"
    rows = run(tshark, tmp_path, [som, middle, trimmed, encode(ACK), encode(NACK), truncated],
               "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE")
    assert len(rows) == 6
    # wire/uet.rs sends real IP and UDP checksums (UET has no ICRC), and a trim recomputes them.
    assert [(row["ip.checksum.status"], row["udp.checksum.status"]) for row in rows[:5]] == [(GOOD, GOOD)] * 5

    expected = [request_fields(SOM, 4096) | {"uet.trimmed": False},
                request_fields(MIDDLE, 4096) | {"uet.trimmed": False},
                request_fields(SEND, 0) | {"uet.trimmed": True, "frame.len": uet.REQUEST_HEADERS}]
    for row, want in zip(rows, expected):
        assert {k: row.get(k) for k in want} == want
        assert not {k for k in row if k.startswith(("uet.ack.", "uet.nack."))}
    assert "uet.ses.message_offset" not in rows[0] and "uet.ses.header_data" not in rows[1]

    ack = rows[3]
    assert {k: ack.get(k) for k in ("uet.ev", "uet.pds.type", "uet.pds.flags.m", "uet.pds.spdcid",
                                    "uet.pds.dpdcid", "uet.ack.ack_psn", "uet.ack.sack_bitmap",
                                    "uet.ack.ooo_count", "uet.trimmed")} == {
        "uet.ev": ACK["ev"], "uet.pds.type": 8, "uet.pds.flags.m": ACK["ecn_echo"], "uet.pds.spdcid": 2,
        "uet.pds.dpdcid": 1, "uet.ack.ack_psn": ACK["psn"], "uet.ack.sack_bitmap": SACK,
        "uet.ack.ooo_count": ACK["out_of_order"], "uet.trimmed": False}
    # The packet's cack_psn is the first PSN not yet received; the wire's is the last of the unbroken run,
    # and the SACK bitmap starts right after it: bit i is PSN (packet's cack_psn) + i.
    assert ack["uet.ack.cack_psn"] == ACK["cack_psn"] - 1
    assert ack["uet.ack.sack_base"] == ACK["cack_psn"]
    assert ack["uet.ack.sack_psn"] == [ACK["cack_psn"] + i for i in range(64) if SACK >> i & 1]

    nack = rows[4]
    assert {k: nack.get(k) for k in ("uet.ev", "uet.pds.type", "uet.pds.flags.m", "uet.nack.code",
                                     "uet.nack.psn", "uet.nack.payload")} == {
        "uet.ev": NACK["ev"], "uet.pds.type": 10, "uet.pds.flags.m": False, "uet.nack.code": 0x01,
        "uet.nack.psn": NACK["psn"], "uet.nack.payload": NACK["cack_psn"]}

    assert [row["_ws.col.Info"] for row in rows] == [
        "RUD req PSN 5 WRITE msg 2 SOM", "RUD req PSN 6 WRITE msg 2 off 4096",
        "RUD req PSN 7 SEND msg 3 SOM EOM [trimmed]", "ACK cack 8 ack 12 sack 0x800000000000000a ECN",
        "NACK TRIMMED psn 7", "RUD req PSN 5 [malformed]"]
    # Only the truncated frame has an expert item at all, and it is the one malformed mark.
    assert [row.get("_ws.expert.group") for row in rows] == [None] * 5 + [[MALFORMED_GROUP]]
    assert [row.get("_ws.malformed") for row in rows] == [None] * 5 + ["_ws.malformed"]
    assert "uet.malformed" in rows[5] and rows[5]["uet.pds.psn"] == SOM["psn"]


def test_tshark_shows_receiver_credits_asked_and_granted(tshark, tmp_path):
    asking = encode(ASKING, bytes(4096))
    trimmed = uet.trim(asking)
    assert trimmed is not None and len(trimmed) == uet.CC_REQUEST_HEADERS
    rows = run(tshark, tmp_path, [asking, trimmed, encode(CREDIT)],
               "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE")
    assert [(row["ip.checksum.status"], row["udp.checksum.status"]) for row in rows] == [(GOOD, GOOD)] * 3
    for row, trimmed_ in zip(rows[:2], (False, True)):
        want = request_fields(ASKING, 4096) | {  # the header keeps its payload length when trimmed
            "uet.pds.type": 13, "uet.pds.credit_target": ASKING["credit_target"], "uet.trimmed": trimmed_}
        assert {k: row.get(k) for k in want} == want
    credit = rows[2]
    assert {k: credit.get(k) for k in ("uet.ev", "uet.pds.type", "uet.control.type", "uet.control.credit",
                                       "uet.pds.spdcid", "uet.pds.dpdcid")} == {
        "uet.ev": 7, "uet.pds.type": 11, "uet.control.type": 7, "uet.control.credit": CREDIT["credit"],
        "uet.pds.spdcid": 2, "uet.pds.dpdcid": 1}
    assert "uet.pds.next_hdr" not in credit  # a CONTROL packet's slot holds its control type
    assert [row["_ws.col.Info"] for row in rows] == [
        f"RUD req PSN 6 target {ASKING['credit_target']} WRITE msg 2 off 4096",
        f"RUD req PSN 6 target {ASKING['credit_target']} WRITE msg 2 off 4096 [trimmed]",
        f"Credit {CREDIT['credit']}"]
    assert all("_ws.expert.group" not in row and "_ws.malformed" not in row for row in rows)


@pytest.mark.parametrize("fields,header", [(SOM, 12 + 44), (ACK, 32), (NACK, 16), (ASKING, 16 + 44), (CREDIT, 16)],
                         ids=["request", "ack", "nack", "credit-request", "credit"])
def test_a_frame_is_malformed_exactly_when_shorter_than_its_header(tshark, tmp_path, fields, header):
    """Every cut of the UDP payload from 1 byte (an empty one goes to no dissector) to the whole header:
    malformed below the header's length, clean at it, and never a Lua error."""
    whole = encode(fields, bytes(100))
    rows = run(tshark, tmp_path, [cut(whole, n) for n in range(1, header + 1)])
    assert len(rows) == header
    for n, row in enumerate(rows, start=1):
        assert "_ws.lua.error" not in row, (n, row)
        if n < header:
            assert row.get("_ws.expert.group") == [MALFORMED_GROUP] and "uet.malformed" in row, (n, row)
        else:
            assert "_ws.expert.group" not in row, (n, row)


def test_a_short_capture_or_a_foreign_header_is_not_malformed(tshark, tmp_path):
    """A frame cut by the capture's snap length is whole on the wire: a note, not malformed.  A PDS type or
    SES header this fabric does not send (an ACK_CCX, a SES small header) is left undecoded."""
    som = encode(SOM, bytes(100))
    pcap = bytearray(classic_pcap([(0, som[:ETH_IP_UDP + 20])]))
    struct.pack_into("<I", pcap, 24 + 12, len(som))  # the record's original length: the frame on the wire
    path = tmp_path / "snapped.pcap"
    path.write_bytes(bytes(pcap))
    (snapped,) = read(tshark, tmp_path, path)
    assert snapped["_ws.expert.group"] == [UNDECODED_GROUP] and "_ws.lua.error" not in snapped, snapped
    assert snapped["_ws.col.Info"] == "RUD req PSN 5 [cut by the snap length]"

    control = bytearray(encode(NACK))
    control[ETH_IP_UDP] = 9 << 3  # PDS type 9, ACK_CCX
    small = bytearray(som)
    struct.pack_into("!H", small, ETH_IP_UDP, 2 << 11 | 1 << 7)  # RUD request, next header 1 (SES small)
    rows = run(tshark, tmp_path, [bytes(control), bytes(small)])
    assert [row["uet.pds.type"] for row in rows] == [9, 2]
    assert [row["_ws.col.Info"] for row in rows] == ["PDS ACK_CCX", "RUD req PSN 5"]
    for row in rows:
        assert row["_ws.expert.group"] == [UNDECODED_GROUP] and "uet.ses.opcode" not in row, row
        assert "_ws.lua.error" not in row, row


def test_the_sack_base_is_read_from_the_wire(tshark, tmp_path):
    """The bitmap may start elsewhere than right after the cumulative PSN (this fabric's starts 63 PSNs before
    the one acknowledged, or at the cumulative point if that is later): the script takes the SACK PSN offset
    from the frame, and names the same PSNs as the compiled decoder does."""
    bitmap = 0b1011_0110
    frame = bytearray(encode(ACK | {"sack_bitmap": bitmap}))
    struct.pack_into("!h", frame, ETH_IP_UDP + 14, 5)  # the SACK PSN offset: 5, not the 1 encoded
    frame = cut(bytes(frame), 32)  # the same length; the UDP checksum dropped, as the bytes changed
    (row,) = run(tshark, tmp_path, [frame])
    wire_cack = ACK["cack_psn"] - 1
    assert row["uet.ack.sack_base"] == wire_cack + 5
    assert row["uet.ack.sack_psn"] == [wire_cack + 5 + i for i in range(64) if bitmap >> i & 1]
    decoded = uet.decode(frame)
    assert row["uet.ack.sack_psn"] == [decoded["sack_base"] + i for i in range(64) if decoded["sack_bitmap"] >> i & 1]


def test_a_second_copy_of_the_script_steps_aside(tshark, tmp_path):
    """Loaded twice (or into a Wireshark with its own UET dissector) it does not fail to load."""
    copy = tmp_path / "copy.lua"
    copy.write_bytes(LUA.read_bytes())
    (row,) = run(tshark, tmp_path, [encode(NACK)], "-X", f"lua_script:{copy}")
    assert row["uet.nack.psn"] == NACK["psn"] and row["_ws.col.Info"] == "NACK TRIMMED psn 7"
