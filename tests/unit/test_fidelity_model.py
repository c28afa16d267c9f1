"""The fidelity monitor's bookkeeping (emulator._core.fidelity), driven with a fake clock; the agents' tests
here run the switch agent, which keeps its figures with it.
"""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from emulator._core.fidelity import Durations, EgressWire, Thresholds, verdict
from fake_agents import fake_wire

assert fake_wire  # a fixture, used by name below

FRAME_NS = 1514 * 8 * 1_000_000_000 // 20_000_000  # one MTU-sized frame at 20 Mbit/s: 605.6 us


def exact_quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@given(st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=300),
       st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_quantiles_are_at_most_a_quarter_high_and_never_low(values, q):
    durations = Durations()
    for value in values:
        durations.add(value)
    exact = exact_quantile(values, q)
    reported = durations.quantile(q)
    assert exact <= reported <= max(exact * 1.25, exact + 1)
    assert reported <= max(values) == durations.max_ns
    assert durations.count == len(values)


def test_no_samples_no_figures():
    durations = Durations()
    assert durations.quantile(0.99) is None
    assert durations.summary() == {"count": 0, "p50_ns": None, "p99_ns": None, "max_ns": None}


def test_merged_histograms_answer_as_one():
    rng = random.Random(1)
    values = [rng.randrange(0, 5_000_000) for _ in range(2000)]
    one, a, b = Durations(), Durations(), Durations()
    for i, value in enumerate(values):
        one.add(value)
        (a if i % 3 else b).add(value)
    a.merge(b)
    assert a.summary() == one.summary()


def test_a_wire_kept_busy_on_time_has_no_stall():
    wire = EgressWire()
    start = 1_000
    for _ in range(100):
        wire.departed(start, start, FRAME_NS)  # each frame starts the instant the previous one ends
        start += FRAME_NS
    assert wire.summary() == {"frames": 100, "busy_ns": 100 * FRAME_NS, "stall_ns": 0, "stall_share": 0.0,
                              "longest_stall_ns": 0}


def test_a_late_wake_up_is_a_stall_of_the_wire():
    """The agent's timer for the next departure fires late: the wire idles while the frame waits."""
    wire = EgressWire()
    clock = 0
    free_at = 0
    for late in [0] * 90 + [50_000] * 9 + [2_000_000]:  # 9 wake-ups 50 us late, one 2 ms late
        start = free_at + late  # when the agent got the CPU and started the waiting frame
        wire.departed(start, free_at, FRAME_NS)
        free_at = start + FRAME_NS
        clock = free_at
    figures = wire.summary()
    assert figures["stall_ns"] == 9 * 50_000 + 2_000_000
    assert figures["longest_stall_ns"] == 2_000_000
    assert math.isclose(figures["stall_share"], (9 * 50_000 + 2_000_000) / (100 * FRAME_NS))
    assert clock == 100 * FRAME_NS + figures["stall_ns"]


def test_a_frame_that_arrives_to_an_idle_wire_is_no_stall():
    wire = EgressWire()
    wire.departed(5_000_000, 5_000_000, FRAME_NS)  # free since 0, the frame came at 5 ms and left then
    assert wire.stall_ns == 0 and wire.busy_ns == FRAME_NS


def _figures(stall: int, lag: list[int], late: list[int]) -> tuple[EgressWire, Durations, Durations]:
    wire = EgressWire()
    for i in range(1000):
        wire.departed(i * FRAME_NS + (stall if i == 500 else 0), i * FRAME_NS, FRAME_NS)
    lags, timers = Durations(), Durations()
    for value in lag:
        lags.add(value)
    for value in late:
        timers.add(value)
    return wire, lags, timers


def test_an_agent_that_kept_up_is_faithful():
    result = verdict(*_figures(stall=20_000, lag=[30_000] * 1000, late=[40_000] * 1000), frame_ns=FRAME_NS)
    assert result.faithful and result.reasons == ()


def test_each_measure_alone_makes_a_run_unfaithful_and_says_why():
    stalled = verdict(*_figures(stall=FRAME_NS * 20, lag=[], late=[]), frame_ns=FRAME_NS)
    assert not stalled.faithful and len(stalled.reasons) == 1 and "stalled 2.0%" in stalled.reasons[0]
    lagging = verdict(*_figures(stall=0, lag=[10_000] * 980 + [FRAME_NS * 3] * 20, late=[]), frame_ns=FRAME_NS)
    assert not lagging.faithful and "processing lag p99" in lagging.reasons[0]
    late = verdict(*_figures(stall=0, lag=[], late=[2 * FRAME_NS] * 50), frame_ns=FRAME_NS)
    assert not late.faithful and "timers late" in late.reasons[0]


def test_each_kind_of_timer_is_judged_by_what_it_governs():
    """A retransmission timer 2 ms late is nothing against a 537 ms timeout; a start 2 ms late is three frames."""
    wire, lag, link = _figures(stall=0, lag=[], late=[])
    late = Durations()
    for _ in range(100):
        late.add(2_000_000)
    on_time = Durations()
    on_time.add(FRAME_NS // 4)
    timeout = 537_000_000
    assert verdict(wire, lag, link, FRAME_NS, timeouts=late, timeout_ns=timeout, starts=on_time).faithful
    slow_start = verdict(wire, lag, link, FRAME_NS, starts=late)
    assert not slow_start.faithful and slow_start.reasons[0].startswith("timed starts late by")
    short = verdict(wire, lag, link, FRAME_NS, timeouts=late, timeout_ns=100_000_000)
    assert not short.faithful and "1% of the timeout (100000 us)" in short.reasons[0]


def test_thresholds_are_the_callers():
    figures = _figures(stall=FRAME_NS * 20, lag=[], late=[])
    assert verdict(*figures, frame_ns=FRAME_NS, thresholds=Thresholds(stall_share=0.05)).faithful


def test_a_run_is_faithful_only_while_every_agent_is():
    from emulator.fabric.stats import fidelity

    def agent(faithful: bool, stall: float, timers_p99: int | None) -> dict:
        return {"fidelity": {"faithful": faithful, "reasons": [] if faithful else ["timers late"],
                             "wire": {"stall_share": stall, "longest_stall_ns": int(stall * 1e9)},
                             "timers": {"p99_ns": timers_p99}}}

    stats = {"s1": agent(True, 0.001, 50_000), "h1": {"fidelity": {"faithful": True, "reasons": [],
                                                                    "timers": {"p99_ns": None}}}}
    run = fidelity(stats)
    assert run["faithful"] and run["unfaithful"] == {} and run["stall_share"] == 0.001
    assert run["timers_p99_ns"] == 50_000 and run["lag_p99_ns"] is None
    stats["s2"] = agent(False, 0.03, 9_000_000)
    run = fidelity(stats)
    assert not run["faithful"] and run["unfaithful"] == {"s2": ["timers late"]}
    assert run["stall_share"] == 0.03 and run["timers_p99_ns"] == 9_000_000


def test_a_switch_reset_judges_only_what_follows(tmp_path):
    """The study resets every agent's monitor when the warm-up ends: a stall before it is forgotten."""
    import time

    from emulator._core.roce import Framer
    from emulator._core.transport import Opcode, Packet
    from fake_agents import MAC_PEERS, MAC_S1, make_switch

    switch = make_switch(str(tmp_path))
    frame = Framer(MAC_PEERS[0], MAC_S1[0], "10.0.0.1", "10.0.0.2", 50000, dscp=26).encode(
        Packet(Opcode.WRITE_MIDDLE, 0x11, 1, payload=bytes(1024)))
    now = time.monotonic_ns()

    def wake_up(at: int, frames: int) -> None:
        for _ in range(frames):
            switch.receive(at, 0, frame)
        switch.settle()  # processed when whole: one frame time after ``at``
        switch.after_events(at)

    def faithful() -> bool:
        wire, lag, timers, frame_ns = switch.fidelity_figures()
        return verdict(wire, lag, timers, frame_ns, monitored=True).faithful

    wake_up(now, 4)  # four frames leave at once
    switch.refuse(1, "full")
    wake_up(now + 1_000, 1)  # the fifth waits for room in the kernel's queue
    switch.refuse(1, None)
    frame_ns = len(frame) * 8_000_000_000 // 100_000_000  # one frame at 100 Mbit/s
    wire_end = now + frame_ns + 4 * frame_ns  # whole one frame time after ``now``, then the four back to back
    late = wire_end + 5_000_000
    switch.writable(late, 1)  # the switch came back 5 ms after the wire went idle with a frame waiting
    before = switch.stats(late)["ports"]["s1-eth2"]["wire"]
    assert before["longest_stall_ns"] == 5_000_000 and before["frames"] == 5
    assert not faithful()
    switch.reset_fidelity()
    wake_up(late + 10_000_000, 2)
    after = switch.stats(late + 10_000_000)["ports"]["s1-eth2"]["wire"]
    assert after["stall_ns"] == 0 and after["frames"] == 2
    assert faithful()


def test_a_deadline_already_past_when_armed_is_late_only_from_then(fake_wire, tmp_path):
    """An IB grant that grows urgent while a wake-up forwards frames is due at its last flow-control packet,
    long past: armed for the wake-up's start, its lateness is the wake-up's, not the time since that packet."""
    from fake_agents import close_agent, make_host

    agent = make_host(str(tmp_path), ib=True)
    try:
        now = 50_000_000_000
        agent.arm(now - 8_000_000, now)
        assert agent.timer.deadline == now
        agent.on_deadline(agent.timer.deadline, now + 200_000)
        late = agent.timer_lateness["link"]
        assert late.count == 1 and 200_000 <= late.quantile(0.99) <= 250_000
        agent.arm(now + 1_000_000, now)  # a deadline ahead is armed as it is, and judged from itself
        assert agent.timer.deadline == now + 1_000_000
        agent.on_deadline(agent.timer.deadline, now + 4_000_000)
        assert agent.timer_lateness["link"].quantile(0.99) >= 3_000_000
        agent.arm(None, now)
        assert agent.timer.deadline is None
    finally:
        close_agent(agent)
