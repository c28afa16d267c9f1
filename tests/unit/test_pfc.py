"""802.1Qbb PFC frames and the receiver's pause state.

The frame layout is checked field by field against the 802.1Qbb layout in
../shared/reference.md and against scapy's MAC-control dissector; pause
times against the reference's worked figures (a quantum is 512 bit times).
"""

import random
import struct

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.l2 import Ether

from emulator._core.pause import PauseState
from emulator._core.pfc import decode_pfc, encode_pfc, pause_ns

SRC = bytes.fromhex("020100000a07")
SRC_TEXT = "02:01:00:00:0a:07"


# --- encode_pfc: byte layout -------------------------------------------------------


def test_encode_layout_field_by_field():
    frame = encode_pfc(SRC, {0: 1, 3: 0xFFFF, 7: 0x1234})
    assert len(frame) == 60
    assert frame[0:6] == bytes([0x01, 0x80, 0xC2, 0x00, 0x00, 0x01])
    assert frame[6:12] == SRC
    assert frame[12:14] == bytes([0x88, 0x08])
    assert frame[14:16] == bytes([0x01, 0x01])
    # class-enable vector: 16 bits, upper byte zero, bit n = priority n
    assert frame[16] == 0
    assert frame[17] == 0b1000_1001
    # eight quanta, big-endian, priority 0 first
    quanta = [int.from_bytes(frame[18 + 2 * i:20 + 2 * i], "big") for i in range(8)]
    assert quanta == [1, 0, 0, 0xFFFF, 0, 0, 0, 0x1234]
    assert frame[18:20] == b"\x00\x01"          # big-endian, not little
    assert frame[24:26] == b"\xff\xff"
    assert frame[32:34] == b"\x12\x34"
    # zero padding up to the 60-byte minimum (no FCS)
    assert frame[34:] == bytes(26)


def test_encode_empty_and_all_priorities():
    empty = encode_pfc(SRC, {})
    assert len(empty) == 60 and empty[16:18] == b"\x00\x00" and empty[18:] == bytes(42)
    full = encode_pfc(SRC, {p: 100 + p for p in range(8)})
    assert full[16:18] == b"\x00\xff"
    assert struct.unpack("!8H", full[18:34]) == tuple(100 + p for p in range(8))


def test_encode_xon_enables_the_class_with_zero_quanta():
    frame = encode_pfc(SRC, {3: 0})
    assert frame[16:18] == b"\x00\x08"
    assert frame[18:34] == bytes(16)


@pytest.mark.parametrize("quanta", [{8: 1}, {-1: 1}, {0: 65536}, {2: -1}])
def test_encode_rejects_bad_entries(quanta):
    with pytest.raises(ValueError):
        encode_pfc(SRC, quanta)


def test_encode_accepts_the_limits():
    frame = encode_pfc(SRC, {7: 65535, 0: 0})
    assert decode_pfc(frame) == {7: 65535, 0: 0}


# --- decode_pfc ----------------------------------------------------------------------


def test_decode_of_encode_roundtrips_random_dicts():
    rng = random.Random(802)
    for _ in range(500):
        prios = rng.sample(range(8), rng.randint(0, 8))
        quanta = {p: rng.choice([0, 1, 0xFFFF, rng.randint(0, 0xFFFF)]) for p in prios}
        assert decode_pfc(encode_pfc(SRC, quanta)) == quanta


def test_decode_hand_built_frame():
    frame = (bytes.fromhex("0180c2000001") + SRC + b"\x88\x08\x01\x01" + b"\x00\x24"
             + struct.pack("!8H", 0, 0, 7, 0, 0, 9, 0, 0)).ljust(60, b"\0")
    assert decode_pfc(frame) == {2: 7, 5: 9}


def test_decode_ignores_quanta_of_disabled_classes():
    frame = bytearray(encode_pfc(SRC, {1: 5}))
    frame[18:20] = b"\x12\x34"  # priority 0 has a time but is not enabled
    assert decode_pfc(bytes(frame)) == {1: 5}


def test_decode_rejects_other_ethertype():
    frame = bytearray(encode_pfc(SRC, {3: 10}))
    frame[12:14] = b"\x08\x00"
    assert decode_pfc(bytes(frame)) is None
    frame[12:14] = b"\x88\x09"
    assert decode_pfc(bytes(frame)) is None


def test_decode_rejects_8023x_pause():
    pause = (bytes.fromhex("0180c2000001") + SRC + b"\x88\x08\x00\x01" + b"\xff\xff").ljust(60, b"\0")
    assert decode_pfc(pause) is None
    scapy_pause = bytes(Ether(dst="01:80:c2:00:00:01", src=SRC_TEXT) / MACControlPause(pause_time=100))
    assert scapy_pause[14:16] == b"\x00\x01"  # the test's premise
    assert decode_pfc(scapy_pause) is None


@pytest.mark.parametrize("length", [0, 14, 16, 20, 33])
def test_decode_rejects_short_frames(length):
    assert decode_pfc(encode_pfc(SRC, {3: 10})[:length]) is None


def test_decode_accepts_unpadded_minimum():
    assert decode_pfc(encode_pfc(SRC, {3: 10})[:34]) == {3: 10}


# --- scapy cross-checks --------------------------------------------------------------


def test_scapy_parses_our_frame():
    quanta = {0: 3, 3: 0xFFFF, 6: 0, 7: 0x0102}
    pkt = Ether(encode_pfc(SRC, quanta))
    assert pkt.dst == "01:80:c2:00:00:01"
    assert pkt.src == SRC_TEXT
    assert pkt.type == 0x8808
    assert pkt.haslayer(MACControlClassBasedFlowControl)
    pfc = pkt[MACControlClassBasedFlowControl]
    assert pfc._op_code == 0x0101
    assert pfc._reserved == 0
    for p in range(8):
        assert getattr(pfc, f"c{p}_enabled") == (p in quanta), p
        assert getattr(pfc, f"c{p}_pause_time") == quanta.get(p, 0), p


def test_scapy_built_frame_equals_ours():
    rng = random.Random(7)
    for _ in range(50):
        prios = rng.sample(range(8), rng.randint(0, 8))
        quanta = {p: rng.randint(0, 0xFFFF) for p in prios}
        fields = {}
        for p in prios:
            fields[f"c{p}_enabled"] = 1
            fields[f"c{p}_pause_time"] = quanta[p]
        built = bytes(Ether(dst="01:80:c2:00:00:01", src=SRC_TEXT) / MACControlClassBasedFlowControl(**fields))
        built = built.ljust(60, b"\0")  # in case this scapy does not pad
        assert built == encode_pfc(SRC, quanta)
        assert decode_pfc(built) == quanta


# --- pause_ns --------------------------------------------------------------------------


def test_pause_ns_reference_figures():
    assert abs(pause_ns(65535, 100_000_000_000) - 335_500) <= 100         # 335.5 us
    assert abs(pause_ns(65535, 10_000_000_000) - 3_360_000) <= 5_000       # 3.36 ms
    assert abs(pause_ns(65535, 100_000_000) - 335_500_000) <= 100_000      # 335.5 ms


def test_pause_ns_exact_values():
    # 512 bit times: 1 quantum at 1 Gbit/s is 512 ns, at 50 Mbit/s 10.24 us
    assert pause_ns(1, 1_000_000_000) == 512
    assert pause_ns(1, 50_000_000) == 10_240
    assert pause_ns(65535, 1_000_000_000) == 65535 * 512
    assert pause_ns(0, 10_000_000_000) == 0


def test_pause_ns_rounds_up():
    # 512 bits at 3 Gbit/s = 170.666... ns
    assert pause_ns(1, 3_000_000_000) == 171
    # 65535 * 512 bits at 100 Gbit/s = 335_539.2 ns
    assert pause_ns(65535, 100_000_000_000) == 335_540
    # 7 * 512 bits at 7 Gbit/s = 512 ns exactly: no spurious rounding
    assert pause_ns(7, 7_000_000_000) == 512


# --- PauseState --------------------------------------------------------------------------

RATE = 1_000_000_000  # 1 quantum = 512 ns


def test_on_pfc_pauses_listed_priorities_only():
    state = PauseState(RATE)
    paused, resumed = state.on_pfc(1000, {3: 10, 5: 1})
    assert sorted(paused) == [3, 5] and resumed == []
    assert state.is_paused(3) and state.is_paused(5)
    assert not any(state.is_paused(p) for p in (0, 1, 2, 4, 6, 7))
    assert state.until[3] == 1000 + 10 * 512
    assert state.until[5] == 1000 + 512
    assert state.frames == 1


def test_refresh_extends_and_is_not_newly_paused():
    state = PauseState(RATE)
    state.on_pfc(0, {3: 10})
    paused, resumed = state.on_pfc(4000, {3: 10})
    assert paused == [] and resumed == []
    assert state.until[3] == 4000 + 5120
    # the refresh does not restart the paused-time clock
    assert state.paused_time(3, 9000) == 9000


def test_shorter_refresh_replaces_the_timer():
    state = PauseState(RATE)
    state.on_pfc(0, {2: 100})
    state.on_pfc(100, {2: 1})
    assert state.until[2] == 100 + 512


def test_xon_resumes_at_once():
    state = PauseState(RATE)
    state.on_pfc(0, {3: 0xFFFF, 4: 0xFFFF})
    paused, resumed = state.on_pfc(2000, {3: 0})
    assert paused == [] and resumed == [3]
    assert not state.is_paused(3) and state.is_paused(4)
    assert state.paused_time(3, 10_000) == 2000


def test_xon_for_unpaused_priority_is_a_no_op():
    state = PauseState(RATE)
    assert state.on_pfc(0, {1: 0}) == ([], [])
    assert not state.is_paused(1)
    assert state.paused_time(1, 1000) == 0


def test_mixed_frame_pauses_and_resumes():
    state = PauseState(RATE)
    state.on_pfc(0, {1: 100})
    paused, resumed = state.on_pfc(10, {1: 0, 2: 100})
    assert paused == [2] and resumed == [1]


def test_priority_not_in_frame_untouched():
    state = PauseState(RATE)
    state.on_pfc(0, {6: 100})
    before = state.until[6]
    state.on_pfc(500, {0: 5})
    assert state.until[6] == before
    state.on_pfc(600, {0: 0})
    assert state.is_paused(6) and state.until[6] == before


def test_expire_resumes_exactly_those_due():
    state = PauseState(RATE)
    state.on_pfc(0, {1: 1, 2: 2, 3: 3})  # until 512, 1024, 1536
    assert state.next_expiry() == 512
    assert state.expire(511) == []
    assert state.expire(1024) == [1, 2]
    assert state.is_paused(3) and not state.is_paused(1) and not state.is_paused(2)
    assert state.next_expiry() == 1536
    assert state.expire(1536) == [3]
    assert state.next_expiry() is None
    assert state.expire(10**9) == []


def test_paused_time_closed_and_running_intervals():
    state = PauseState(RATE)
    assert state.paused_time(3, 0) == 0
    state.on_pfc(1000, {3: 10})          # until 6120
    assert state.paused_time(3, 3000) == 2000   # running, counted up to now
    state.expire(7000)                    # closes at its expiry, 6120
    assert state.paused_time(3, 7000) == 5120
    assert state.paused_time(3, 99_000) == 5120  # closed: does not grow
    state.on_pfc(10_000, {3: 0xFFFF})
    state.on_pfc(12_500, {3: 0})         # XON closes at 12500
    assert state.paused_time(3, 20_000) == 5120 + 2500
    state.on_pfc(30_000, {3: 1})
    assert state.paused_time(3, 30_100) == 5120 + 2500 + 100
    assert state.paused_time(4, 30_100) == 0
