"""The compiled engine (emulator._core.engine) against the Python one (emulator.sim.engine): the same random
schedules (events near and far, ties, cancels, timers moved both ways, runs with until and max_events, stops
and exceptions from callbacks, events in the past) must give the same calls at the same times, the same
counts, the same now and the same answers."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from hypothesis import given, settings, strategies as st

from emulator._core import engine as compiled_engine
from emulator.sim import engine as python_engine

TIMERS = 2


class Boom(Exception):
    """A callback's failure: it must leave the run the same way on both engines."""


def play(module: ModuleType, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Runs ``ops`` on a new simulator of ``module``; everything observable, in order."""
    sim = module.Simulator()
    trace: list[Any] = []
    handles: list[Any] = []

    def event(tag: int) -> None:
        trace.append(("ran", sim.now, tag))
        if tag % 3 == 0 and tag < 10_000:  # a follower, which schedules none
            handles.append(sim.after((tag % 7) * 10, event, tag + 10_000))
        if tag % 4 == 1:
            timers[(tag // 4) % TIMERS].set(sim.now + (tag % 11) * 25)
        if tag % 13 == 5:
            sim.stop()
        if tag % 17 == 3:
            raise Boom(tag)

    deadlines: list[int | None] = [None] * TIMERS
    timers = [sim.timer(lambda k=k: trace.append(("timer", sim.now, k))) for k in range(TIMERS)]
    for op in ops:
        kind = op[0]
        try:
            if kind == "at":
                handles.append(sim.at(sim.now + op[1], event, op[2]))
            elif kind == "after":
                handles.append(sim.after(op[1], event, op[2]))
            elif kind == "cancel" and handles:
                sim.cancel(handles[op[1] % len(handles)])
                trace.append(("pending", [sim.pending(handle) for handle in handles]))
            elif kind == "set":
                deadlines[op[1]] = None if op[2] is None else sim.now + op[2]
                timers[op[1]].set(deadlines[op[1]])
            elif kind == "again":  # the deadline unchanged (a timer re-armed by an ACK that moved nothing)
                timers[op[1]].set(deadlines[op[1]])
            elif kind == "run":
                until = None if op[1] is None else sim.now + op[1]
                trace.append(("run", sim.run(until=until, max_events=op[2])))
            elif kind == "next":
                trace.append(("next", sim.next_time()))
        except ValueError as error:
            trace.append(("ValueError", str(error)))
        except Boom as error:
            trace.append(("Boom", error.args))
        trace.append(("state", sim.now, sim.events))
    for _ in range(100):  # the rest, past stops and failures
        try:
            if not sim.run(max_events=10_000):
                break
        except Boom as error:
            trace.append(("Boom", error.args))
    trace.append(("end", sim.now, sim.events, sim.next_time()))
    return trace


delays = st.one_of(st.integers(0, 3), st.integers(0, 1_000), st.integers(0, 1 << 40))
# Few distinct times, so that events and timers often tie; now and then anything.
offsets = st.one_of(st.sampled_from([-1, 0, 5]), st.sampled_from([0, 5]), st.integers(-50, 5_000))
operations = st.one_of(
    st.tuples(st.just("at"), offsets, st.integers(0, 999)),
    st.tuples(st.just("set"), st.integers(0, TIMERS - 1), offsets),
    st.tuples(st.just("after"), delays, st.integers(0, 999)),
    st.tuples(st.just("again"), st.integers(0, TIMERS - 1)),
    st.tuples(st.just("cancel"), st.integers(0, 63)),
    st.tuples(st.just("set"), st.integers(0, TIMERS - 1), st.none() | offsets),
    st.tuples(st.just("run"), st.none() | st.integers(-5, 3_000), st.none() | st.integers(-1, 20)),
    st.tuples(st.just("next")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(operations, max_size=60))
def test_the_compiled_engine_runs_any_schedule_as_the_python_one(ops):
    assert play(compiled_engine, ops) == play(python_engine, ops)


def test_a_chain_of_same_time_events_and_a_far_timer_agree():
    """Many events at one time scheduled from callbacks (the front bucket grows while it drains), behind a
    timer seconds away that is pushed back and then brought forward."""
    ops = [("set", 0, 5 * 10**9), ("set", 0, 7 * 10**9), ("set", 1, 10)]
    ops += [("after", 0, tag) for tag in range(0, 300, 3)] + [("run", None, None), ("set", 0, 1), ("run", None, 5)]
    assert play(compiled_engine, ops) == play(python_engine, ops)
