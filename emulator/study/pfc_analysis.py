"""PFC timing from packet captures: generation, reaction and pause hold.

The scripts ``scripts/pfc_timing.py`` and ``scripts/headroom_sweep.py``
measure the lossless machinery from the pcapng files of a run with
``capture=DIR`` (one file per link end, nanosecond time stamps).  This
module reads a capture with tshark into :class:`Frame` records and turns
them into events; everything but :func:`read_capture` is pure and works on
lists of frames, so the unit tests feed it synthetic pcaps or frames.

On a veth the two ends of a link see a frame at the same instant (the
sender's capture stamps it when it leaves the qdisc, the receiver's when it
arrives), so a capture on one end is a view of the wire.

Three measurements, all for one priority (3, the lossless one, unless told):

* **Generation** (:func:`generation_delays`), on a switch port's capture:
  for each XOFF the port sends (a PFC frame with a non-zero pause for the
  priority, at the start or after an XON: refreshes are not counted), the
  time from the last data frame the port received before it to the XOFF on
  the wire.  The frame that crossed the threshold is that last frame unless
  the switch took longer than a frame time to react.  A veth's capture
  stamps a frame when its first bit would leave; its last bit arrives its
  time on the wire later (at the link rate), and a switch can act on it only
  then, so that time is counted from (with the link's rate given).  A wire
  carries one frame at a time: a frame the sender's qdisc let go before the
  one ahead had left the wire (HTB lets a burst go at once) starts when it
  has, as the switch times it (``Link::arrive_whole``).
* **Reaction** (:func:`reactions`), on a host NIC's capture: for each XOFF
  that arrives, the data frames the host still sent before its traffic of
  that priority stops (a gap of more than ``gap_ns``), their bytes, and the
  time from the pause's arrival to the last of them.
* **Pause hold** (:func:`pause_holds`), on a host NIC's capture: for each
  pause that arrives and is not cut short by another PFC frame, the time
  from its arrival to the first data frame after the gap, against the
  quanta's length (quanta x 512 bit times at the link rate).

Times are integer nanoseconds; sizes are bytes as captured (no FCS).
"""

from __future__ import annotations

import bisect
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable, Sequence

from emulator.errors import FabricError
from emulator.study.stats import percentile
from emulator._core.pfc import OPCODE_PFC, PRIORITIES, pause_ns

FULL_FRAME = 1514  # an MTU-sized (1500) Ethernet frame without FCS
ETH_IPV4 = 0x0800
IPPROTO_UDP = 17

TSHARK_FIELDS = (
    "frame.time_epoch", "eth.src", "eth.dst", "eth.type", "frame.len", "ip.dsfield", "ip.proto",
    "macc.opcode", "macc.cbfc.enbv", *(f"macc.cbfc.pause_time.c{p}" for p in range(PRIORITIES)),
)


@dataclass(frozen=True)
class Frame:
    """The fields of one captured frame that the timing needs."""

    time_ns: int
    src: str
    dst: str
    ethertype: int
    length: int
    tos: int | None = None  # IPv4 TOS byte (DSCP and ECN)
    proto: int | None = None  # IPv4 protocol
    pfc: tuple[int | None, ...] | None = None  # PFC: quanta per priority, None where not enabled

    @property
    def priority(self) -> int | None:
        """The fabric's priority of an IPv4 frame: DSCP >> 3 (TOS >> 5)."""
        return None if self.tos is None else self.tos >> 5

    def quanta(self, priority: int) -> int | None:
        """This PFC frame's quanta for ``priority``, or None (not PFC or not enabled)."""
        return None if self.pfc is None else self.pfc[priority]


def frame_time_ns(rate_bps: int, size: int = FULL_FRAME) -> int:
    """How long a ``size``-byte frame takes on a link of ``rate_bps``."""
    return size * 8 * 1_000_000_000 // rate_bps


# --- reading captures ------------------------------------------------------------------------


def _epoch_ns(text: str) -> int:
    seconds, _, fraction = text.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


def _int(text: str, base: int = 10) -> int | None:
    return int(text, base) if text else None


def parse_tshark_fields(text: str) -> list[Frame]:
    """Frames from tshark's ``-T fields -E occurrence=f`` output of :data:`TSHARK_FIELDS`."""
    frames = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split("\t")
        cols += [""] * (len(TSHARK_FIELDS) - len(cols))
        when, src, dst, ethertype, length, tos, proto, opcode, vector = cols[:9]
        times = cols[9:9 + PRIORITIES]
        pfc = None
        if opcode and int(opcode, 16) == int.from_bytes(OPCODE_PFC, "big") and vector:
            enabled = int(vector, 16)
            pfc = tuple(int(times[p] or 0) if enabled >> p & 1 else None for p in range(PRIORITIES))
        frames.append(Frame(
            time_ns=_epoch_ns(when), src=src.lower(), dst=dst.lower(),
            ethertype=_int(ethertype, 16) or 0, length=int(length),
            tos=_int(tos, 16), proto=_int(proto), pfc=pfc,
        ))
    return frames


def read_capture(path: str) -> list[Frame]:
    """Every frame of a pcap or pcapng file, in time order, through tshark."""
    if shutil.which("tshark") is None:
        raise FabricError("tshark is not installed (apt-get install tshark)")
    cmd = ["tshark", "-r", path, "-n", "-T", "fields", "-E", "occurrence=f", "-E", "separator=/t"]
    for field in TSHARK_FIELDS:
        cmd += ["-e", field]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise FabricError(f"tshark could not read {path}: {done.stderr.strip()}")
    return sorted(parse_tshark_fields(done.stdout), key=lambda f: f.time_ns)


# --- events --------------------------------------------------------------------------------------


def is_data(frame: Frame, priority: int, src: str | None = None, dst: str | None = None) -> bool:
    """A UDP/IPv4 frame of ``priority`` (optionally from ``src`` / to ``dst``)."""
    return (frame.ethertype == ETH_IPV4 and frame.priority == priority and frame.proto == IPPROTO_UDP
            and (src is None or frame.src == src) and (dst is None or frame.dst == dst))


def pfc_frames(frames: Iterable[Frame], priority: int) -> list[Frame]:
    """The PFC frames that carry a pause time for ``priority``."""
    return [f for f in frames if f.quanta(priority) is not None]


def xoff_frames(frames: Iterable[Frame], priority: int) -> list[Frame]:
    """PFC frames that start a pause of ``priority``: non-zero quanta at the
    start or after an XON (zero quanta) from the same sender; refreshes of a
    running pause are left out."""
    paused: dict[str, bool] = {}
    xoffs = []
    for frame in pfc_frames(frames, priority):
        quanta = frame.quanta(priority)
        if quanta and not paused.get(frame.src, False):
            xoffs.append(frame)
        paused[frame.src] = bool(quanta)
    return xoffs


@dataclass(frozen=True)
class Generation:
    """One XOFF a switch port sent, and the last data frame it received before."""

    xoff_ns: int
    last_data_ns: int

    @property
    def delay_ns(self) -> int:
        return self.xoff_ns - self.last_data_ns


def generation_delays(frames: Sequence[Frame], priority: int = 3, rate_bps: int | None = None) -> list[Generation]:
    """Per XOFF sent by the captured switch port, the time from the last data
    frame the port received (addressed to the XOFF's sender) before it: from
    its last bit, its length's time at ``rate_bps`` after its capture stamp or
    after the last bit of the frame ahead of it, whichever is later (None:
    from the stamp).

    The port is recognised as the sender of the PFC frames; an XOFF with no
    earlier data frame is skipped.
    """
    data: dict[str, list[int]] = {}
    for frame in frames:
        if is_data(frame, priority):
            wholes = data.setdefault(frame.dst, [])
            if rate_bps:
                start = max(frame.time_ns, wholes[-1]) if wholes else frame.time_ns
                wholes.append(start + frame.length * 8_000_000_000 // rate_bps)
            else:
                wholes.append(frame.time_ns)
    generations = []
    for xoff in xoff_frames(frames, priority):
        received = data.get(xoff.src, [])
        i = bisect.bisect_right(received, xoff.time_ns)
        if i:
            generations.append(Generation(xoff.time_ns, received[i - 1]))
    return generations


def _host_mac(frames: Sequence[Frame], priority: int) -> str | None:
    senders = {f.src for f in pfc_frames(frames, priority)}
    counts: dict[str, int] = {}
    for frame in frames:
        if is_data(frame, priority) and frame.src not in senders:
            counts[frame.src] = counts.get(frame.src, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


@dataclass(frozen=True)
class Reaction:
    """What a host sent after a pause arrived, until its traffic stopped.

    ``end_ns`` is the arrival of the XON that ends the pause (refreshes
    keep it going), or None if none came before the end of the capture;
    a pause left to expire is not cut short (the switch refreshes its XOFFs
    until it sends XON).  ``stopped`` says
    whether a gap of more than the threshold came before it; if not, the
    host did not visibly stop while paused and ``leaked`` is every frame of
    the window (a lower bound).  ``sent_while_paused`` counts data frames
    after the gap but before ``end_ns``: a closed gate must let none out.
    """

    pause_ns: int
    end_ns: int | None
    leaked_frames: int
    leaked_bytes: int
    last_leak_ns: int | None
    stopped: bool
    sent_while_paused: int

    @property
    def reaction_ns(self) -> int:
        """From the pause's arrival to the host's last data frame before the gap (0 if none)."""
        return 0 if self.last_leak_ns is None else self.last_leak_ns - self.pause_ns


class _Sent:
    """A host's data frames of one priority, searchable by time."""

    def __init__(self, frames: Sequence[Frame], priority: int, host: str) -> None:
        self.frames = [f for f in frames if is_data(f, priority, src=host)]
        self.times = [f.time_ns for f in self.frames]

    def window(self, start: int, end: int | None) -> list[Frame]:
        """Frames sent at ``start`` or later and before ``end``."""
        lo = bisect.bisect_left(self.times, start)
        hi = len(self.times) if end is None else bisect.bisect_left(self.times, end)
        return self.frames[lo:hi]


def _split_at_gap(sent: list[Frame], start: int, gap_ns: int) -> tuple[list[Frame], list[Frame], bool]:
    """(frames before the first gap > ``gap_ns``, frames after it, found a gap)."""
    previous = start
    for i, frame in enumerate(sent):
        if frame.time_ns - previous > gap_ns:
            return sent[:i], sent[i:], True
        previous = frame.time_ns
    return sent, [], False


def reactions(frames: Sequence[Frame], priority: int = 3, gap_ns: int = 750_000,
              host_mac: str | None = None) -> list[Reaction]:
    """Per XOFF arriving at the captured host NIC, what the host still sent.

    ``gap_ns`` is the silence that counts as stopped (a few frame times:
    at the link rate a busy sender leaves a frame every frame time).
    ``host_mac`` defaults to the busiest sender of data frames that is not
    the PFC sender.
    """
    host = host_mac or _host_mac(frames, priority)
    if host is None:
        return []
    xon_times = [f.time_ns for f in pfc_frames(frames, priority) if f.quanta(priority) == 0]
    data = _Sent(frames, priority, host)
    result = []
    for xoff in xoff_frames(frames, priority):
        k = bisect.bisect_right(xon_times, xoff.time_ns)
        end = xon_times[k] if k < len(xon_times) else None
        sent = data.window(xoff.time_ns, end)
        leaked, after, gap = _split_at_gap(sent, xoff.time_ns, gap_ns)
        if not gap and end is not None:
            last = leaked[-1].time_ns if leaked else xoff.time_ns
            gap = end - last > gap_ns
        result.append(Reaction(
            pause_ns=xoff.time_ns, end_ns=end, leaked_frames=len(leaked),
            leaked_bytes=sum(f.length for f in leaked), last_leak_ns=leaked[-1].time_ns if leaked else None,
            stopped=gap, sent_while_paused=len(after),
        ))
    return result


@dataclass(frozen=True)
class Hold:
    """One pause of ``quanta`` that arrived at a host, and how long it held."""

    pause_ns: int
    quanta: int
    expected_ns: int
    resumed_ns: int | None  # first data frame after the gap
    leaked_frames: int
    leaked_bytes: int

    @property
    def measured_ns(self) -> int | None:
        return None if self.resumed_ns is None else self.resumed_ns - self.pause_ns

    @property
    def error_ns(self) -> int | None:
        measured = self.measured_ns
        return None if measured is None else measured - self.expected_ns


def pause_holds(frames: Sequence[Frame], rate_bps: int, priority: int = 3, gap_ns: int | None = None,
                host_mac: str | None = None) -> list[Hold]:
    """Per pause (non-zero quanta) arriving at the captured host NIC with no
    other PFC frame for the priority before the host resumes: the time from
    its arrival to the first data frame the host sent after the gap.

    Frames the host sent right after the arrival, before the gap, are the
    leak and do not end the hold.  ``gap_ns`` defaults to a quarter of the
    expected pause, at most three frame times.
    """
    host = host_mac or _host_mac(frames, priority)
    if host is None:
        return []
    pfc = pfc_frames(frames, priority)
    data = _Sent(frames, priority, host)
    holds = []
    for i, pause in enumerate(pfc):
        quanta = pause.quanta(priority)
        if not quanta:
            continue
        expected = pause_ns(quanta, rate_bps)
        threshold = gap_ns if gap_ns is not None else min(expected // 4, 3 * frame_time_ns(rate_bps))
        following = pfc[i + 1].time_ns if i + 1 < len(pfc) else None
        sent = data.window(pause.time_ns, None)
        leaked, after, gap = _split_at_gap(sent, pause.time_ns, threshold)
        resumed = after[0].time_ns if gap and after else None
        if following is not None and (resumed is None or following <= resumed):
            continue  # cut short by another PFC frame: not a clean hold
        holds.append(Hold(pause.time_ns, quanta, expected, resumed, len(leaked), sum(f.length for f in leaked)))
    return holds


def match(times_a: Sequence[int], times_b: Sequence[int], tolerance_ns: int) -> list[tuple[int, int]]:
    """Pairs (i, j) of events of two captures of the same frames: each
    ``times_a[i]`` with the nearest ``times_b[j]`` within ``tolerance_ns``."""
    pairs = []
    j = 0
    for i, t in enumerate(times_a):
        while j + 1 < len(times_b) and abs(times_b[j + 1] - t) <= abs(times_b[j] - t):
            j += 1
        if times_b and abs(times_b[j] - t) <= tolerance_ns:
            pairs.append((i, j))
    return pairs


# --- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    count: int
    median: float
    p99: float
    max: float


def summarize(values: Sequence[float]) -> Summary | None:
    """Count, median (nearest rank, lower), p99 and max; None if empty."""
    if not values:
        return None
    return Summary(len(values), percentile(values, 50, nearest_rank=True), percentile(values, 99, nearest_rank=True),
                   max(values))
