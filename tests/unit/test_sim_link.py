"""Cables and transmit queues in simulated time (emulator.sim.link), against closed forms."""

from __future__ import annotations

import pytest

from emulator.sim.engine import Simulator
from emulator.sim.link import PortQueue, Wire, serialization_ns
from emulator.wire.pfc import pause_ns

GBIT = 10**9


def wire_and_queue(rate_bps: int = GBIT, delay_ns: int = 0):
    sim, arrivals = Simulator(), []
    wire = Wire(sim, rate_bps, delay_ns, lambda frame: arrivals.append((sim.now, frame)))
    return sim, wire, PortQueue(sim, wire), arrivals


@pytest.mark.parametrize("frames, size, rate_bps, delay_ns", [(1, 1000, GBIT, 0), (100, 4158, 20_000_000, 5000),
                                                               (7, 61, 400 * GBIT, 1)])
def test_one_flow_takes_its_link_time_plus_the_cable(frames, size, rate_bps, delay_ns):
    sim, wire, queue, arrivals = wire_and_queue(rate_bps, delay_ns)
    for i in range(frames):
        queue.enqueue(bytes([i % 256]) * size, 3)
    sim.run()
    each = -(-size * 8 * 10**9 // rate_bps)  # bytes x 8 / rate, rounded up per frame
    assert [t for t, _ in arrivals] == [k * each + delay_ns for k in range(1, frames + 1)]
    assert [f[0] for _, f in arrivals] == [i % 256 for i in range(frames)]  # in order
    assert (wire.frames, wire.bytes) == (frames, frames * size)


def test_strict_priority_from_seven_down():
    sim, _wire, queue, arrivals = wire_and_queue()
    sim.at(0, lambda: [queue.enqueue(bytes([p]) * 100, p) for p in (0, 3, 7, 3)])
    sim.run()
    assert [f[0] for _, f in arrivals] == [7, 3, 3, 0]  # the queue looks once this instant's events are in
    sim.at(sim.now, lambda: queue.enqueue(b"\x00" * 100, 0))
    sim.at(sim.now + 1, lambda: queue.enqueue(b"\x07" * 100, 7))
    sim.run()
    assert [f[0] for _, f in arrivals[4:]] == [0, 7]  # 0 was on the wire when 7 came: it finishes first


def test_a_pause_holds_its_priority_q_quanta_and_lets_the_others_go():
    sim, _wire, queue, arrivals = wire_and_queue(rate_bps=10 * GBIT)
    queue.on_pfc({3: 1000})  # at t = 0
    sim.at(0, lambda: (queue.enqueue(b"\x03" * 1000, 3), queue.enqueue(b"\x05" * 1000, 5)))
    sim.run()
    held = pause_ns(1000, 10 * GBIT)  # 1000 x 512 bit times at 10 Gbit/s: 51.2 us
    assert held == 51_200
    assert arrivals == [(serialization_ns(1000, 10 * GBIT), b"\x05" * 1000),
                        (held + serialization_ns(1000, 10 * GBIT), b"\x03" * 1000)]


def test_xon_resumes_at_once_and_a_frame_on_the_wire_finishes():
    sim, _wire, queue, arrivals = wire_and_queue()
    queue.enqueue(b"a" * 1250, 3)  # 10 us on the wire from t = 0
    sim.at(5_000, queue.on_pfc, {3: 65535})  # mid-frame: that frame still finishes
    sim.at(5_000, queue.enqueue, b"b" * 1250, 3)
    sim.at(30_000, queue.on_pfc, {3: 0})  # XON
    sim.run()
    assert arrivals == [(10_000, b"a" * 1250), (40_000, b"b" * 1250)]


def test_a_wire_needs_a_rate():
    with pytest.raises(ValueError, match="bad wire"):
        Wire(Simulator(), 0, 0, print)
