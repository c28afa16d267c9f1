"""Whether an agent kept up with the time it models: the fidelity monitor's bookkeeping (sans-I/O).

An emulator's figures hold only while its agents keep up.  Mininet-HiFi
(Handigol et al., CoNEXT 2012) checks invariants during the run: on a busy
link, consecutive departures are one transmission time apart; where they
are not, the emulation stopped telling the truth.  Three measures here,
each fed by an agent with times it already has, a few operations per
sample and fixed memory:

- the link invariant, per egress: a frame that could have started on the
  wire at ``ideal`` (the wire was free and the frame was waiting) but
  started at ``start`` stalled the wire for ``start - ideal``; the stall
  time as a share of the busy time, and the longest stall;
- processing lag: from the kernel's receive time stamp to processing;
- timer lateness: from a deadline (PFC hold expiry, RTO, a timed release,
  the virtual wire's next departure) to the moment the agent acted on it.

:func:`verdict` judges the figures against thresholds stated in
docs/architecture.md ("Fidelity").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Quarter-octave buckets: a quantile is reported as its bucket's upper bound, at most 25% high.
_FRACTION_BITS = 2
_BUCKETS = 1 + 64 * (1 << _FRACTION_BITS)


def _bucket(value_ns: int) -> int:
    """The bucket of a duration: 0 for 0 ns, then four per octave."""
    if value_ns <= 0:
        return 0
    octave = value_ns.bit_length() - 1
    fraction = ((value_ns << _FRACTION_BITS) >> octave) & ((1 << _FRACTION_BITS) - 1)
    return min(1 + (octave << _FRACTION_BITS) + fraction, _BUCKETS - 1)


def _upper(bucket: int) -> int:
    """The largest duration that falls in ``bucket``."""
    if bucket == 0:
        return 0
    octave, fraction = divmod(bucket - 1, 1 << _FRACTION_BITS)
    top = ((1 << _FRACTION_BITS) + fraction + 1) << octave >> _FRACTION_BITS
    return top - 1 if octave >= _FRACTION_BITS else top


class Durations:
    """A histogram of durations in ns: count, exact maximum, quantiles within a quarter octave."""

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.count = 0
        self.max_ns = 0

    def add(self, value_ns: int) -> None:
        value_ns = max(value_ns, 0)
        self.counts[_bucket(value_ns)] += 1
        self.count += 1
        if value_ns > self.max_ns:
            self.max_ns = value_ns

    def quantile(self, q: float) -> int | None:
        """The ``q`` quantile (0 < q <= 1), rounded up to its bucket's bound (never above the maximum)."""
        if not self.count:
            return None
        rank = max(1, -(-int(q * self.count * 1_000_000) // 1_000_000))
        seen = 0
        for bucket, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(_upper(bucket), self.max_ns)
        return self.max_ns

    def merge(self, other: "Durations") -> None:
        for bucket, count in enumerate(other.counts):
            self.counts[bucket] += count
        self.count += other.count
        self.max_ns = max(self.max_ns, other.max_ns)

    def summary(self) -> dict[str, Any]:
        return {"count": self.count, "p50_ns": self.quantile(0.5), "p99_ns": self.quantile(0.99),
                "max_ns": self.max_ns if self.count else None}


class EgressWire:
    """The link invariant of one egress: busy time, and the time the wire idled while a frame waited."""

    def __init__(self) -> None:
        self.busy_ns = 0
        self.stall_ns = 0
        self.longest_stall_ns = 0
        self.frames = 0

    def departed(self, start_ns: int, ideal_ns: int, frame_ns: int, frames: int = 1) -> None:
        """A frame took the wire at ``start_ns`` for ``frame_ns``; it could have started at ``ideal_ns``.

        ``ideal_ns`` is the later of when the wire became free and when the
        frame was ready to go; a start after it is a stall the modelled link
        would not have had.  ``frames`` back-to-back frames may depart in one
        call, ``frame_ns`` then their time together.
        """
        self.frames += frames
        self.busy_ns += frame_ns
        if start_ns > ideal_ns:
            self.stalled(start_ns - ideal_ns)

    def stalled(self, stall_ns: int) -> None:
        """The wire idled ``stall_ns`` while a frame waited (for callers that keep busy time themselves)."""
        self.stall_ns += stall_ns
        if stall_ns > self.longest_stall_ns:
            self.longest_stall_ns = stall_ns

    def merge(self, other: "EgressWire") -> None:
        self.busy_ns += other.busy_ns
        self.stall_ns += other.stall_ns
        self.longest_stall_ns = max(self.longest_stall_ns, other.longest_stall_ns)
        self.frames += other.frames

    def summary(self) -> dict[str, Any]:
        return {"frames": self.frames, "busy_ns": self.busy_ns, "stall_ns": self.stall_ns,
                "stall_share": self.stall_ns / self.busy_ns if self.busy_ns else 0.0,
                "longest_stall_ns": self.longest_stall_ns}


@dataclass(frozen=True)
class Thresholds:
    """What the monitor accepts: link figures in frame times of the link (one MTU-sized frame at its rate).

    Timers are judged by what they govern: a late PFC hold expiry, paced
    departure, delay line or credit update idles a link, so it must be on
    time within a frame; a timed start late by a frame delays a collective by
    a frame; a retransmission or RNR timer already waits thousands of frames,
    so it is judged against its own timeout.
    """

    stall_share: float = 0.01  # wire stalls below 1% of busy time
    lag_p99_frames: float = 1.0  # processing lag p99 below one frame time
    timer_p99_frames: float = 1.0  # link timers: lateness p99 below one frame time
    start_p99_frames: float = 1.0  # timed starts: lateness p99 below one frame time
    timeout_p99_share: float = 0.01  # retransmission and RNR timers: lateness p99 below 1% of the timeout


@dataclass(frozen=True)
class Verdict:
    faithful: bool
    reasons: tuple[str, ...]  # why not, one line each; empty when faithful


def verdict(wire: EgressWire, lag: Durations, timers: Durations, frame_ns: int,
            thresholds: Thresholds = Thresholds(), starts: Durations | None = None,
            timeouts: Durations | None = None, timeout_ns: int = 0, monitored: bool = True) -> Verdict:
    """Judge one agent's (or a merged run's) figures; ``frame_ns`` is one MTU-sized frame at the link rate.

    ``timers`` are the link timers, ``starts`` the timed starts' lateness,
    ``timeouts`` the retransmission and RNR timers', judged against
    ``timeout_ns``.  An agent whose monitor was off (``monitored`` False,
    as only the monitor's cost benchmark runs it) is never called faithful.
    """
    reasons = [] if monitored else ["the fidelity monitor was off: nothing says whether the agent kept up"]
    if wire.busy_ns and wire.stall_ns / wire.busy_ns >= thresholds.stall_share:
        reasons.append(f"the wire stalled {wire.stall_ns / wire.busy_ns:.1%} of its busy time "
                       f"(longest {wire.longest_stall_ns / 1000:.0f} us) while frames waited for a CPU")
    frame = f"frame time ({frame_ns / 1000:.0f} us)"
    lag_p99 = lag.quantile(0.99)
    if lag_p99 is not None and lag_p99 >= thresholds.lag_p99_frames * frame_ns:
        reasons.append(f"processing lag p99 {lag_p99 / 1000:.0f} us, over {thresholds.lag_p99_frames:g} {frame}")
    timer_p99 = timers.quantile(0.99)
    if timer_p99 is not None and timer_p99 >= thresholds.timer_p99_frames * frame_ns:
        reasons.append(f"link timers late by {timer_p99 / 1000:.0f} us at p99, over "
                       f"{thresholds.timer_p99_frames:g} {frame}")
    start_p99 = starts.quantile(0.99) if starts is not None else None
    if start_p99 is not None and start_p99 >= thresholds.start_p99_frames * frame_ns:
        reasons.append(f"timed starts late by {start_p99 / 1000:.0f} us at p99, over "
                       f"{thresholds.start_p99_frames:g} {frame}")
    timeout_p99 = timeouts.quantile(0.99) if timeouts is not None else None
    if timeout_p99 is not None and timeout_p99 >= thresholds.timeout_p99_share * timeout_ns:
        reasons.append(f"retransmission timers late by {timeout_p99 / 1000:.0f} us at p99, over "
                       f"{thresholds.timeout_p99_share:.0%} of the timeout ({timeout_ns / 1000:.0f} us)")
    return Verdict(not reasons, tuple(reasons))
