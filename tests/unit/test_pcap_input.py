"""``fabric-emu pcap DIR`` on captures someone else wrote: the strict reader, the reproducers of issue 10, fuzzing.

A capture that is empty, cut short, not a capture, or crafted gives one
line naming the file and the offset; no output is left behind (nor is an
earlier one touched), and a link is neither read nor written through.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from capture_files import (
    ENHANCED_PACKET, INTERFACE, NS, SIMPLE_PACKET, block, classic_pcap, interface, packet, pcapng, section,
    units_per_second,
)
from emulator.study import pcapfile
from emulator.errors import FabricError
from emulator.study import erf
from test_ib_wire import T0, capture_frames, ipv4_frame
from untrusted_dirs import assert_one_line_error, changed, run_cli, snapshot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAMES = capture_frames()
STAMPS = [T0 + i * 1_000_003 for i in range(len(FRAMES) + 1)]
CAPTURE = pcapng(list(zip(STAMPS, FRAMES[:3] + [ipv4_frame()] + FRAMES[3:])))  # 10 IB packets and an IPv4 one


def frames_of(data: bytes) -> list[tuple[int, int, int, bytes]]:
    return [tuple(frame) for frame in pcapfile.read_frames(io.BytesIO(data), "c.pcapng")]


def refused(data: bytes, *fragments: str) -> str:
    with pytest.raises(FabricError) as err:
        frames_of(data)
    text = str(err.value)
    assert "\n" not in text and text.startswith("c.pcapng"), text
    for fragment in fragments:
        assert fragment in text, text
    return text


# --- the reader --------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("tsresol", [9, 6, None, 0x80 | 30, 10])
def test_reads_frames_and_times_in_either_byte_order_and_resolution(order, tsresol):
    units = units_per_second(tsresol)
    stamps = [ns * units // NS * NS // units for ns in STAMPS]  # what the resolution keeps of each time
    data = pcapng(list(zip(STAMPS, FRAMES)), order=order, tsresol=tsresol)
    assert [(ns, linktype, frame) for _, ns, linktype, frame in frames_of(data)] == [
        (ns, 1, frame) for ns, frame in zip(stamps, FRAMES)]


def test_offsets_are_where_the_blocks_begin():
    offsets = [offset for offset, *_ in frames_of(CAPTURE)]
    assert offsets[0] == len(section() + interface())
    for offset in offsets:
        assert struct.unpack_from("<I", CAPTURE, offset)[0] == ENHANCED_PACKET


def test_sections_interfaces_and_skipped_blocks():
    """A second section (big-endian) forgets the first one's interfaces; simple packet blocks and unknown
    blocks are skipped; each packet takes its own interface's link type and resolution."""
    first = section() + interface(tsresol=9) + interface(linktype=147, tsresol=6) + packet(T0, FRAMES[0]) \
        + block(SIMPLE_PACKET, struct.pack("<I", len(FRAMES[1])) + FRAMES[1]) + block(0x0BAD, b"whatever") \
        + packet(T0 // 1000, FRAMES[2], interface_id=1)
    second = section(">") + interface(">", tsresol=None) + packet(T0 // 1000, FRAMES[3], ">")
    assert [(ns, linktype, frame) for _, ns, linktype, frame in frames_of(first + second)] == [
        (T0, 1, FRAMES[0]), (T0 // 1000 * 1000, 147, FRAMES[2]), (T0 // 1000 * 1000, 1, FRAMES[3])]
    refused(first + section() + packet(T0, FRAMES[0], interface_id=1), "offset", "packet of interface 1, but the "
            "section describes 0")


@pytest.mark.parametrize("order, nanoseconds", [("<", False), (">", False), ("<", True), (">", True)])
def test_reads_classic_pcap(order, nanoseconds):
    data = classic_pcap(list(zip(STAMPS, FRAMES)), order, nanoseconds)
    expected = [ns if nanoseconds else ns // 1000 * 1000 for ns in STAMPS]
    assert [(ns, linktype, frame) for _, ns, linktype, frame in frames_of(data)] == [
        (ns, 1, frame) for ns, frame in zip(expected, FRAMES)]


def test_agrees_with_scapy_on_a_capture_as_tcpdump_writes_it():
    from scapy.utils import RawPcapNgReader

    with tempfile.NamedTemporaryFile(suffix=".pcapng") as f:
        f.write(CAPTURE)
        f.flush()
        with RawPcapNgReader(f.name) as reader:
            theirs = [((meta.tshigh << 32 | meta.tslow) * NS // meta.tsresol, data) for data, meta in reader]
    assert [(ns, frame) for _, ns, _, frame in frames_of(CAPTURE)] == theirs


def test_reads_what_editcap_writes(tmp_path):
    """Captures are tcpdump's nanosecond pcaps converted by ``editcap -F pcapng`` (emulator/fabric/capture.py): section
    and interface options, perhaps statistics blocks, all as editcap writes them."""
    editcap = shutil.which("editcap") or shutil.which("editcap", path="/usr/bin")
    if editcap is None:
        pytest.skip("editcap is not installed (apt-get install tshark)")
    frames = list(zip(STAMPS, FRAMES[:3] + [ipv4_frame()] + FRAMES[3:]))
    (tmp_path / "c.pcap").write_bytes(classic_pcap(frames, nanoseconds=True))
    subprocess.run([editcap, "-F", "pcapng", str(tmp_path / "c.pcap"), str(tmp_path / "c.pcapng")], check=True,
                   capture_output=True)
    data = (tmp_path / "c.pcapng").read_bytes()
    assert data != pcapng(frames)  # editcap's own layout, not ours
    assert [(ns, linktype, frame) for _, ns, linktype, frame in frames_of(data)] == [
        (ns, 1, frame) for ns, frame in frames]


# --- the reproducers: one line naming the file and the offset ------------------------------------------


def test_empty_file():
    refused(b"", "c.pcapng: empty file, not a capture")


def test_wrong_magic():
    refused(b"GIF89a" + bytes(100), "c.pcapng: not a pcap or pcapng file (it begins with 47494638)")


@pytest.mark.parametrize("cut", [4, 8, 11, 27, 30, 40, len(section() + interface()) + 30, len(CAPTURE) - 1])
def test_truncated_file(cut):
    refused(CAPTURE[:cut], "offset", "cut short in")


def test_huge_block_length():
    start = len(section() + interface())
    data = bytearray(CAPTURE)
    struct.pack_into("<I", data, start + 4, 0xFFFFFFF0)
    refused(bytes(data), f"c.pcapng offset {start}: block of type 0x6 with a bad length 4294967280 "
                         "(a multiple of 4, 12 to 16777216)")


@pytest.mark.parametrize("length", [0, 8, 13, 24])
def test_bad_block_lengths(length):
    start = len(section())
    data = bytearray(CAPTURE)
    struct.pack_into("<I", data, start + 4, length)
    refused(bytes(data), f"offset {start}: ")


def test_garbage_block():
    start = len(section() + interface())
    refused(CAPTURE[:start] + bytes(range(7, 47)) + CAPTURE[start:], f"offset {start}: ")


def test_trailing_length_that_disagrees():
    data = bytearray(CAPTURE)
    end = len(section() + interface()) + len(packet(0, FRAMES[0]))
    struct.pack_into("<I", data, end - 4, 12)
    refused(bytes(data), "its trailing length 12 is not its length")


def test_bad_byte_order_magic():
    refused(CAPTURE[:8] + b"\x00\x00\x00\x00" + CAPTURE[12:], "offset 0: section header with a bad byte-order magic")


def test_wrong_version():
    data = bytearray(CAPTURE)
    struct.pack_into("<H", data, 12, 2)
    refused(bytes(data), "offset 0: section header of pcapng version 2, not 1")


def test_packet_before_any_interface():
    refused(section() + packet(0, FRAMES[0]), "offset 28: packet of interface 0, but the section describes 0")


def test_packet_longer_than_its_block():
    body = struct.pack("<IIIII", 0, 0, 0, 1000, 1000) + FRAMES[0][:40]
    refused(section() + interface() + block(ENHANCED_PACKET, body), "packet of 1000 bytes in a block with room for 40")


def test_option_past_the_block():
    body = struct.pack("<HHI", 1, 0, 65535) + struct.pack("<HH", 9, 200) + bytes(4)
    refused(section() + block(INTERFACE, body), "offset 28: interface description block: option 9 runs past")


def test_classic_pcap_problems():
    header = classic_pcap([])
    refused(header[:10], "offset 0: cut short in the file header")
    refused(header + struct.pack("<IIII", 1, 0, 100, 100) + bytes(10), "offset 24: cut short in a record of 100")
    refused(header + struct.pack("<IIII", 1, 0, 0xFFFFFFFF, 100), "offset 24: record of 4294967295 bytes")
    refused(header + struct.pack("<IIII", 1, 1_000_000, 0, 0), "offset 24: record whose sub-second part 1000000")


# --- the command: outputs all or none, never through a link -------------------------------------------


@pytest.fixture
def captures(tmp_path):
    d = tmp_path / "pcap"
    d.mkdir()
    (d / "h1-eth0.pcapng").write_bytes(CAPTURE)
    (tmp_path / "outside.txt").write_text("the user's own file")
    return str(tmp_path)


def test_converts_every_capture(captures):
    d = os.path.join(captures, "pcap")
    with open(os.path.join(d, "s1-eth1.pcapng"), "wb") as f:
        f.write(pcapng([(T0, FRAMES[0])]))
    assert erf.convert_directory(d) == [os.path.join(d, "h1-eth0.ib.pcap"), os.path.join(d, "s1-eth1.ib.pcap")]
    with open(os.path.join(d, "h1-eth0.ib.pcap"), "rb") as f:
        records = frames_of(f.read())
    assert [(ns, linktype) for _, ns, linktype, _ in records] == [(ns, erf.LINKTYPE_ERF) for ns in STAMPS
                                                                  if ns != STAMPS[3]]  # the IPv4 frame is not IB
    assert sorted(os.listdir(d)) == ["h1-eth0.ib.pcap", "h1-eth0.pcapng", "s1-eth1.ib.pcap", "s1-eth1.pcapng"]


@pytest.mark.parametrize("bad", [b"", CAPTURE[:-7], b"\x00" * 64])
def test_a_bad_capture_leaves_no_output_and_keeps_earlier_ones(captures, bad):
    d = os.path.join(captures, "pcap")
    with open(os.path.join(d, "h1-eth0.ib.pcap"), "wb") as f:
        f.write(b"an earlier conversion")
    with open(os.path.join(d, "s1-eth1.pcapng"), "wb") as f:  # converted after h1-eth0, which succeeds
        f.write(bad)
    before = snapshot(captures)
    code, out, err = run_cli("pcap", d)
    assert_one_line_error(code, err, f"{d}/s1-eth1.pcapng")
    assert out == "" and snapshot(captures) == before


def test_a_linked_capture_is_not_read(captures):
    d = os.path.join(captures, "pcap")
    with open(os.path.join(captures, "elsewhere.pcapng"), "wb") as f:
        f.write(CAPTURE)
    os.symlink(os.path.join(captures, "elsewhere.pcapng"), os.path.join(d, "x.pcapng"))
    before = snapshot(captures)
    code, _, err = run_cli("pcap", d)
    assert_one_line_error(code, err, f"{d}/x.pcapng is a symbolic link: not followed")
    assert snapshot(captures) == before


def test_a_linked_output_is_replaced_not_followed(captures):
    d = os.path.join(captures, "pcap")
    os.symlink(os.path.join(captures, "outside.txt"), os.path.join(d, "h1-eth0.ib.pcap"))
    code, out, err = run_cli("pcap", d)
    assert (code, err) == (0, "")
    with open(os.path.join(captures, "outside.txt")) as f:
        assert f.read() == "the user's own file"
    assert not os.path.islink(os.path.join(d, "h1-eth0.ib.pcap"))


def test_a_time_after_2106_is_refused(captures):
    d = os.path.join(captures, "pcap")
    late = (1 << 32) * NS
    with open(os.path.join(d, "h1-eth0.pcapng"), "wb") as f:
        f.write(pcapng([(T0, FRAMES[0]), (late, FRAMES[1])]))
    code, _, err = run_cli("pcap", d)
    offset = len(section() + interface() + packet(T0, FRAMES[0]))
    assert_one_line_error(code, err, f"h1-eth0.pcapng offset {offset}: time stamp {late} ns is after 2106")
    assert os.listdir(d) == ["h1-eth0.pcapng"]


def test_cli_prints_one_line_and_no_traceback(captures):
    d = os.path.join(captures, "pcap")
    with open(os.path.join(d, "h1-eth0.pcapng"), "wb") as f:
        f.write(b"")
    done = subprocess.run([sys.executable, "-m", "emulator", "pcap", d], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO}, timeout=60)
    assert_one_line_error(done.returncode, done.stderr, f"{d}/h1-eth0.pcapng: empty file, not a capture")
    assert done.stdout == "" and os.listdir(d) == ["h1-eth0.pcapng"]


def test_a_directory_without_captures_is_named_on_one_line(tmp_path):
    d = tmp_path / "caps\n\x1b[2Jx"  # a newline and a terminal escape in the name the user gave
    d.mkdir()
    code, out, err = run_cli("pcap", str(d))
    assert_one_line_error(code, err, f"no .pcapng captures in {tmp_path}/caps\\n\\x1b[2Jx")
    assert out == "" and os.listdir(d) == []


# --- fuzzing -----------------------------------------------------------------------------------------

BASES = [CAPTURE, pcapng(list(zip(STAMPS, FRAMES)), ">", 6), classic_pcap(list(zip(STAMPS, FRAMES))),
         section() + interface() + packet(T0, FRAMES[6]) + block(SIMPLE_PACKET, bytes(64))]
U32 = st.sampled_from([0, 1, 4, 12, 16, 28, 32, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFC, 1 << 24, (1 << 24) + 4])
EDIT = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 4000), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 4000), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(0, 4000), st.integers(1, 64)),
    st.tuples(st.just("cut"), st.integers(0, 4000), st.just(0)),
    st.tuples(st.just("u32"), st.integers(0, 1000), U32),  # a length, type or interface field, 4-aligned
)
CAPTURE_BYTES = st.one_of(
    st.binary(max_size=400),
    st.tuples(st.sampled_from([b"\x0a\x0d\x0d\x0a", b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"]), st.binary(max_size=200))
    .map(b"".join),
    st.tuples(st.sampled_from(BASES), st.lists(EDIT, min_size=1, max_size=4)).map(lambda edits: _edited(*edits)),
    st.lists(st.tuples(st.sampled_from([INTERFACE, ENHANCED_PACKET, SIMPLE_PACKET, 2, 5, 0x0BAD]),
                       st.binary(max_size=40)), max_size=5)
    .map(lambda blocks: section() + b"".join(block(kind, body) for kind, body in blocks)),
)


def _edited(base: bytes, edits: list[tuple[str, int, object]]) -> bytes:
    data = bytearray(base)
    for kind, position, value in edits:
        at = position % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] ^= value
        elif kind == "insert":
            data[at:at] = value
        elif kind == "delete":
            del data[at:at + value]
        elif kind == "cut":
            del data[at:]
        elif kind == "u32" and len(data) >= 4:
            struct.pack_into("<I", data, min(position * 4, len(data) - 4), value)
    return bytes(data)


@given(CAPTURE_BYTES)
def test_fuzz_capture_is_converted_or_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as root:
        d = os.path.join(root, "pcap")
        os.mkdir(d)
        with open(os.path.join(d, "c.pcapng"), "wb") as f:
            f.write(data)
        before = snapshot(root)
        try:
            written = erf.convert_directory(d)
        except FabricError as err:
            text = str(err)
            assert "\n" not in text and text.startswith(os.path.join(d, "c.pcapng")), text
            assert snapshot(root) == before
            event("refused in one line")
        else:
            assert written == [os.path.join(d, "c.ib.pcap")]
            assert changed(before, snapshot(root)) == {os.path.join("pcap", "c.ib.pcap")}
            ib = [frame for frame in frames_of(data) if frame[2] == 1 and erf.ib_record(frame[3]) is not None]
            with open(written[0], "rb") as f:
                records = frames_of(f.read())
            assert [(ns, linktype) for _, ns, linktype, _ in records] == [(ns, erf.LINKTYPE_ERF) for _, ns, _, _ in ib]
            event("converted")


IB_ETHERNET = bytes.fromhex("020100000101020000000100") + b"\x88\xb6"


FRAME = st.one_of(
    st.binary(max_size=120).map(IB_ETHERNET.__add__),  # IB's EtherType, anything after it
    st.binary(max_size=120),
    st.sampled_from(FRAMES),  # real IB data and link packets, whole, cut or with a byte changed
    st.tuples(st.sampled_from(FRAMES), st.integers(0, 1200)).map(lambda frame_cut: frame_cut[0][:frame_cut[1]]),
    st.tuples(st.sampled_from(FRAMES), st.integers(0, 1200), st.integers(1, 255)).map(lambda f: _flipped(*f)),
)


def _flipped(frame: bytes, position: int, mask: int) -> bytes:
    at = position % len(frame)
    return frame[:at] + bytes([frame[at] ^ mask]) + frame[at + 1:]


@given(st.lists(st.tuples(st.integers(0, (1 << 32) * NS - 1), FRAME), max_size=8))
def test_fuzz_valid_capture_of_hostile_frames_is_converted(frames):
    """A well-formed capture whose frames are anything: every IB packet converted with its time, the rest
    skipped."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "c.pcapng"), "wb") as f:
            f.write(pcapng(frames))
        (written,) = erf.convert_directory(d)
        with open(written, "rb") as f:
            records = frames_of(f.read())
    expected = [(ns, erf.erf_record(ns, *erf.ib_record(frame))) for ns, frame in frames
                if erf.ib_record(frame) is not None]
    assert [(ns, data) for _, ns, _, data in records] == expected
    event("with IB packets" if expected else "nothing to convert")
