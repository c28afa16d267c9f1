"""The discrete-event engine (emulator._core.engine, the compiled core's), and a model driven in simulated time."""

from __future__ import annotations

import pytest

from emulator._core.engine import Simulator
from emulator._core.pause import PauseState
from emulator._core.pfc import MAX_QUANTA

# A span of simulated time that keeps events apart: 10 ms, a retransmission timer's order (67 ms and up) apart
# from a frame's and a pause's (ns to us); the engine's radix levels of 256 ns each split it many times over.
SPAN_NS = 10_000_000


def test_events_run_in_time_order_and_ties_in_scheduling_order():
    sim, seen = Simulator(), []
    sim.at(30, seen.append, "c")
    sim.at(10, seen.append, "a1")
    sim.after(10, seen.append, "a2")
    sim.at(20, lambda: (seen.append("b"), sim.after(0, seen.append, "b-then")))
    assert sim.run() == 5 and seen == ["a1", "a2", "b", "b-then", "c"]
    assert sim.now == 30 and sim.events == 5 and sim.next_time() is None


def test_cancel_until_and_max_events():
    sim, seen = Simulator(), []
    gone = sim.at(5, seen.append, "gone")
    sim.at(7, seen.append, "kept")
    sim.at(50, seen.append, "late")
    sim.cancel(gone)
    assert not sim.pending(gone) and sim.next_time() == 7
    assert sim.run(until=40) == 1 and seen == ["kept"] and sim.now == 40
    sim.at(41, seen.append, "x")
    assert sim.run(max_events=1) == 1 and seen == ["kept", "x"] and sim.now == 41
    with pytest.raises(ValueError, match="before now"):
        sim.at(3, seen.append, "past")
    assert sim.run() == 1 and seen[-1] == "late"


def test_cancelling_an_event_that_ran_does_nothing():
    sim, seen = Simulator(), []
    ran = sim.after(0, seen.append, "ran")
    sim.run()
    sim.cancel(ran)
    sim.after(1, seen.append, "next")
    assert sim.run() == 1 and seen == ["ran", "next"]


def test_a_run_is_deterministic():
    def trace() -> list[tuple[int, int]]:
        sim, out = Simulator(), []

        def tick(n: int) -> None:
            out.append((sim.now, n))
            if n < 200:
                sim.after((n * 7919) % 13, tick, n + 1)
                sim.after((n * 104729) % 5, out.append, (sim.now, -n))
        sim.at(0, tick, 0)
        sim.run()
        return out
    assert trace() == trace()


@pytest.mark.parametrize("quanta, rate_bps", [(1, 10**9), (1000, 10**8), (MAX_QUANTA, 400 * 10**9)])
def test_a_pause_of_q_quanta_holds_q_times_512_bit_times(quanta, rate_bps):
    """PFC's receiver model under the engine: paused at the frame, resumed Q x 512 bit times later."""
    sim, state, resumed = Simulator(), PauseState(rate_bps), []

    def pfc_arrives() -> None:
        state.on_pfc(sim.now, {3: quanta})
        sim.at(state.next_expiry(), expire)

    def expire() -> None:
        resumed.extend((sim.now, priority) for priority in state.expire(sim.now))

    sim.at(12_345, pfc_arrives)
    sim.run()
    assert resumed == [(12_345 - (-quanta * 512 * 10**9 // rate_bps), 3)]  # in whole ns, rounded up


def test_a_timer_moves_with_its_deadline_and_fires_once():
    sim, fired = Simulator(), []
    timer = sim.timer(lambda: fired.append(sim.now))
    timer.set(100)
    timer.set(100)  # unchanged: one event, not two
    timer.set(50)
    sim.run(until=60)
    timer.set(None)
    sim.run()
    assert fired == [50]
    timer.set(20)  # already past: now
    sim.run()
    assert fired == [50, 60]


def test_a_timer_pushed_back_again_and_again_keeps_one_heap_entry_and_fires_at_its_last_deadline():
    sim, fired = Simulator(), []
    timer = sim.timer(lambda: fired.append(sim.now))
    for step in range(1000):  # a retransmission timer re-armed by every ACK, and cleared between messages
        timer.set(1_000 + step)
        timer.set(None)
        timer.set(1_000 + step)
    assert sim.entries() == 1  # the one entry in the engine's queue
    sim.run()
    assert fired == [1_999]  # once, at the last deadline (the early entry re-armed itself on the way)
    timer.set(3_000)
    timer.set(2_500)  # earlier: a new entry, the old one cancelled
    sim.run()
    assert fired == [1_999, 2_500]


def test_events_near_and_far_run_in_time_and_scheduling_order():
    """Events spread over many spans, some scheduled from callbacks, some cancelled: they run exactly in (time,
    scheduling) order, as from one heap."""
    import random

    rng = random.Random(7)
    sim, ran, expected = Simulator(), [], []

    def event(tag):
        ran.append((sim.now, tag))
        if tag % 3 == 0:  # a callback schedules more, near and far
            for extra in range(2):
                at = sim.now + rng.choice([0, 5, SPAN_NS // 2, 3 * SPAN_NS + 1])
                new = 10_000 + tag * 2 + extra
                sim.at(at, event, new)
                expected.append((at, new))

    handles = []
    for tag in range(300):
        at = rng.randrange(0, 20 * SPAN_NS)
        handles.append((sim.at(at, event, tag), at, tag))
    for handle, at, tag in handles:
        if tag % 7 == 0:
            sim.cancel(handle)
        else:
            expected.append((at, tag))
    sim.run()
    assert sorted(ran) == sorted(expected)
    assert [t for t, _ in ran] == sorted(t for t, _ in ran)
    assert sim.next_time() is None


def test_stop_ends_the_run_after_the_event_that_called_it():
    sim = Simulator()
    seen = []
    sim.at(10, lambda: (seen.append(10), sim.stop()))
    sim.at(20, seen.append, 20)
    assert sim.run() == 1 and seen == [10] and sim.now == 10 and sim.next_time() == 20
    assert sim.run() == 1 and seen == [10, 20]


def test_a_simulator_in_a_cycle_with_its_models_is_collected():
    """A model holds the simulator, which holds the model's callbacks (its timer, its events): when the run is
    dropped, the garbage collector frees the lot (a study builds a fabric per variant)."""
    import gc
    import weakref

    class Model:
        def __init__(self, sim) -> None:
            self.sim, self.timer = sim, sim.timer(self.fire)
            sim.after(5, self.fire, self)

        def fire(self, *_args) -> None:
            pass

    model = Model(Simulator())
    model.timer.set(10)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def test_a_callback_that_raises_ends_the_run_with_its_exception_and_the_rest_runs_next_time():
    """As the Python engine did (test_twin_engine.py compared them on random schedules with failing callbacks):
    the exception leaves ``run`` as itself, now is its event's time, ``events`` counts none of that run's (a run
    adds its count as it returns), and the events after it, at the same instant and later, run on the next one."""
    sim, seen = Simulator(), []

    def boom() -> None:
        raise KeyError("boom")

    sim.at(1, seen.append, "before")
    sim.at(5, boom)
    sim.at(5, seen.append, "same instant")
    sim.at(9, seen.append, "later")
    with pytest.raises(KeyError, match="boom"):
        sim.run()
    assert (sim.now, sim.events, seen, sim.next_time()) == (5, 0, ["before"], 5)
    assert sim.run() == 2 and seen == ["before", "same instant", "later"] and (sim.now, sim.events) == (9, 2)
