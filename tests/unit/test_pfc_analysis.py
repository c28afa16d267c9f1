"""PFC timing from captures (emulator.study.pfc_analysis) on a tiny synthetic pcap.

The pcap is written with scapy (its own PFC layer, not emulator.wire.pfc), with
nanosecond time stamps, and read back through tshark as the scripts do;
the events in it are placed so that every measurement has a known answer.
Without tshark the pcap tests are skipped; the parsing and event tests on
frames built in Python always run.
"""

from __future__ import annotations

import shutil
from decimal import Decimal

import pytest

from emulator.study import pfc_analysis as pa
from emulator.study.stats import percentile

RATE = 50_000_000
US = 1_000
BASE_S = 1_700_000_000  # capture epoch, seconds
SWITCH = "02:01:00:00:01:01"
HOST = "02:00:00:00:01:00"
PFC_DST = "01:80:c2:00:00:01"
DATA_LEN = 1490
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")


def _data(t_us: float, src: str = HOST, dst: str = SWITCH, tos: int = 0x68, udp: bool = True):
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether

    l4 = UDP(sport=49152, dport=5201) if udp else TCP(sport=49152, dport=5201)
    frame = Ether(src=src, dst=dst) / IP(src="10.0.0.1", dst="10.0.0.2", tos=tos) / l4
    frame = frame / (b"\0" * (DATA_LEN - len(frame)))
    return t_us, frame


def _pfc(t_us: float, quanta: int, priority: int = 3):
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl
    from scapy.layers.l2 import Ether

    fields = {f"c{priority}_enabled": 1, f"c{priority}_pause_time": quanta}
    frame = Ether(src=SWITCH, dst=PFC_DST) / MACControlClassBasedFlowControl(**fields)
    return t_us, frame


def _write(path, events) -> None:
    from scapy.utils import PcapWriter

    with PcapWriter(str(path), nano=True, linktype=1) as writer:
        for t_us, frame in sorted(events, key=lambda e: e[0]):
            ns = round(t_us * US)
            frame.time = Decimal(BASE_S) + Decimal(ns) / Decimal(10**9)
            writer.write(frame)


def _ns(t_us: float) -> int:
    return BASE_S * 10**9 + round(t_us * US)


# One link: the host sends priority-3 UDP to the switch port; the port pauses it.
LINK = [
    _data(0), _data(240), _data(480),
    _data(500, tos=0x00, udp=False),  # priority 0 TCP: not a data frame of priority 3
    _data(530, src=SWITCH, dst=HOST),  # sent by the switch, not received by it
    _pfc(550, 65535),  # XOFF: 70 us after the last received data frame (480)
    _data(720),  # leaked: 170 us after the pause arrived
    _pfc(1000, 65535),  # refresh: not an XOFF, does not end the pause
    _pfc(3000, 0),  # XON
    _data(3200), _data(3440),
    _pfc(3500, 65535),  # XOFF: 60 us after 3440; the host stops at once
    _data(6000),  # sent while paused: a broken gate
    _pfc(9000, 0),
    _data(9100),
]


def test_parse_tshark_fields_line():
    text = ("1700000000.000550000\t02:01:00:00:01:01\t01:80:c2:00:00:01\t0x8808\t60\t\t\t0x0101\t0x0008"
            "\t0\t0\t0\t65535\t0\t0\t0\t0\n"
            "1700000000.000720\t02:00:00:00:01:00\t02:01:00:00:01:01\t0x0800\t1490\t0x68\t17\t\t"
            "\t\t\t\t\t\t\t\t\n")
    pfc, data = pa.parse_tshark_fields(text)
    assert pfc.time_ns == _ns(550) and pfc.ethertype == 0x8808 and pfc.length == 60
    assert pfc.pfc == (None, None, None, 65535, None, None, None, None)
    assert pfc.quanta(3) == 65535 and pfc.quanta(0) is None and pfc.priority is None
    assert data.time_ns == _ns(720)  # microsecond stamps are padded, not misread
    assert data.priority == 3 and data.proto == 17 and data.pfc is None
    assert pa.is_data(data, 3, dst=SWITCH) and not pa.is_data(data, 3, src=SWITCH)


def _frames(events=LINK):
    """The same frames as the pcap would give, built without tshark."""
    frames = []
    for t_us, frame in events:
        raw = bytes(frame)
        ethertype = int.from_bytes(raw[12:14], "big")
        pfc = None
        tos = proto = None
        if ethertype == 0x8808:
            vector = int.from_bytes(raw[16:18], "big")
            times = [int.from_bytes(raw[18 + 2 * p:20 + 2 * p], "big") for p in range(8)]
            pfc = tuple(times[p] if vector >> p & 1 else None for p in range(8))
        else:
            tos, proto = raw[15], raw[23]
        frames.append(pa.Frame(_ns(t_us), frame.src, frame.dst, ethertype, len(raw), tos, proto, pfc))
    return sorted(frames, key=lambda f: f.time_ns)


def _check_link(frames) -> None:
    xoffs = pa.xoff_frames(frames, 3)
    assert [f.time_ns for f in xoffs] == [_ns(550), _ns(3500)]  # the refresh at 1000 is not one

    gens = pa.generation_delays(frames, 3)
    assert [g.delay_ns for g in gens] == [70 * US, 60 * US]
    # From each frame's last bit: its length's time at the link rate after its stamp.
    rate = DATA_LEN * 8_000_000_000 // (20 * US)  # a data frame takes 20 us on the wire
    assert [g.delay_ns for g in pa.generation_delays(frames, 3, rate)] == [50 * US, 40 * US]

    # A burst: the veth handed 480's frame over 5 us after 475's, but a wire delivers it whole one frame time
    # after that one: the XOFF at 550 is 35 us after its last bit (515), not 50.
    burst = _frames([_data(0), _data(475), _data(480), _pfc(550, 65535)])
    assert [g.delay_ns for g in pa.generation_delays(burst, 3, rate)] == [35 * US]
    first, second = pa.reactions(frames, 3, gap_ns=750 * US)
    assert first.stopped and first.end_ns == _ns(3000)
    assert (first.leaked_frames, first.leaked_bytes, first.reaction_ns) == (1, DATA_LEN, 170 * US)
    assert first.sent_while_paused == 0
    assert second.stopped and second.leaked_frames == 0 and second.reaction_ns == 0
    assert second.sent_while_paused == 1 and second.end_ns == _ns(9000)


def test_events_from_frames():
    _check_link(_frames())


@needs_tshark
def test_events_from_a_pcap(tmp_path):
    path = tmp_path / "link.pcap"
    _write(path, LINK)
    frames = pa.read_capture(str(path))
    assert len(frames) == len(LINK)
    assert frames[0].time_ns == _ns(0) and frames[-1].time_ns == _ns(9100)  # nanoseconds survive
    _check_link(frames)


def test_reaction_without_a_visible_stop():
    # The XON arrives 300 us after the XOFF while the host is still sending.
    frames = _frames([_data(0), _data(240), _pfc(250, 65535), _data(480), _pfc(550, 0), _data(720)])
    (reaction,) = pa.reactions(frames, 3, gap_ns=750 * US)
    assert not reaction.stopped and reaction.leaked_frames == 1


# The hold: h1 sends every 240 us; a pause of 195 quanta (1996.8 us at 50 Mbit/s) arrives at 2050 us.
PAUSE_AT, QUANTA = 2050, 195
EXPECTED_NS = 195 * 512 * 10**9 // RATE
RESUME_AT = PAUSE_AT + EXPECTED_NS / US + 180
HOLD = ([_data(t, dst=SWITCH) for t in range(0, 2050, 240)]
        + [_pfc(PAUSE_AT, QUANTA), _data(2100), _data(2340)]  # two frames leak before the gate holds
        + [_data(RESUME_AT + 240 * i) for i in range(5)]
        + [_pfc(10_000, 488), _pfc(10_500, 0)]  # cut short by an XON: not a clean hold
        + [_data(10_600 + 240 * i) for i in range(5)])


@needs_tshark
def test_pause_hold_from_a_pcap(tmp_path):
    path = tmp_path / "hold.pcap"
    _write(path, HOLD)
    (hold,) = pa.pause_holds(pa.read_capture(str(path)), RATE, 3)
    assert hold.quanta == QUANTA and hold.expected_ns == EXPECTED_NS == 1_996_800
    assert hold.pause_ns == _ns(PAUSE_AT)
    assert hold.measured_ns == round((RESUME_AT - PAUSE_AT) * US)
    assert hold.error_ns == 180 * US
    assert (hold.leaked_frames, hold.leaked_bytes) == (2, 2 * DATA_LEN)


def test_pause_hold_from_frames():
    (hold,) = pa.pause_holds(_frames(HOLD), RATE, 3, host_mac=HOST)
    assert hold.error_ns == 180 * US and hold.leaked_frames == 2


def test_frame_time_and_statistics():
    assert pa.frame_time_ns(RATE) == 242_240
    assert percentile([5, 1, 3, 2, 4], 50, nearest_rank=True) == 3
    assert percentile(list(range(1, 201)), 99, nearest_rank=True) == 198
    s = pa.summarize([10, 30, 20])
    assert (s.count, s.median, s.p99, s.max) == (3, 20, 30, 30)
    assert pa.summarize([]) is None


def test_match_pairs_nearest_within_tolerance():
    assert pa.match([100, 1000, 5000], [102, 990, 9000], tolerance_ns=20) == [(0, 0), (1, 1)]
    assert pa.match([100], [], tolerance_ns=20) == []
