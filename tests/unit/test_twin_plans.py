"""Differential test: the collectives' plans of emulator.collectives.algorithms against their Rust port
(fabric_core::sim::plans, through emulator._core.sim.plan), which the compiled simulation backend executes.

The same (collective, ranks, size, senders) must give every rank the same regions, steps (sends, receives,
reductions), measured flag, reduction group and slices; and where Python's plan raises, the port raises with the same
message.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.collectives.algorithms import COLLECTIVES, plan, slice_span
from emulator.errors import FabricError

sim = pytest.importorskip("emulator._core.sim")

# Latin-1 names: the port writes Python's repr of an unknown name for those (beyond, an unprintable character
# would be escaped by Python only; names come from experiment files, which check them first).
names = st.sampled_from(COLLECTIVES) | st.text(st.characters(max_codepoint=0xFF), max_size=12)
sizes = st.sampled_from([0, 1, 3, 4, 7, 8, 1024, 4096, 1 << 20]) | st.integers(0, 1 << 22)
senders = st.none() | st.integers(-2, 40)


def python_plan(collective: str, ranks: int, size: int, senders: int | None) -> Any:
    """Python's plans as the port gives them (tuples of each RankPlan's fields), or its error's message."""
    try:
        plans = plan(collective, ranks, size, senders)
    except FabricError as error:
        return "error", str(error)
    return [(p.rank, p.data_bytes, p.staging_bytes,
             [([(s.dst, s.offset, s.length, s.region, s.dst_offset) for s in step.sends], list(step.receives),
               step.reduce) for step in p.steps],
             p.measured, list(p.reduce_group), p.slices) for p in plans]


def rust_plan(collective: str, ranks: int, size: int, senders: int | None) -> Any:
    try:
        return sim.plan(collective, ranks, size, senders)
    except ValueError as error:
        return "error", str(error)


@given(names, st.integers(0, 40), sizes, senders)
def test_same_plans_and_errors(collective: str, ranks: int, size: int, senders: int | None) -> None:
    assert rust_plan(collective, ranks, size, senders) == python_plan(collective, ranks, size, senders)


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 16, 17])
def test_every_collective_on_small_rings(collective: str, ranks: int) -> None:
    """The plans hypothesis may not reach often: each collective at the sizes and senders the experiments use."""
    for size, count in [(1 << 20, None), (4 * ranks, None), (4096, 1), (4096, 0)]:
        expected = python_plan(collective, ranks, size, count)
        assert rust_plan(collective, ranks, size, count) == expected


@pytest.mark.parametrize("collective", ["allreduce", "alltoall", "multijob"])
def test_hundreds_of_ranks_agree(collective: str) -> None:
    """The scale experiment's plans at a quarter of its ranks (256; the 1,024-rank Python plan takes 8 s)."""
    assert rust_plan(collective, 256, 1 << 20, None) == python_plan(collective, 256, 1 << 20, None)


def python_message_counts(collective: str, ranks: int, size: int, senders: int | None) -> Any:
    """What the runner's link-time bound counted from Python's plans: per rank, (length, count) of the measured
    ranks' messages (a WRITE per slice) it sends and receives, lengths ascending; or the error's message."""
    try:
        plans = plan(collective, ranks, size, senders)
    except FabricError as error:
        return "error", str(error)
    sent: list[dict[int, int]] = [{} for _ in range(ranks)]
    received: list[dict[int, int]] = [{} for _ in range(ranks)]
    for p in plans:
        if p.measured:
            for step in p.steps:
                for send in step.sends:
                    for j in range(p.slices):
                        _, length = slice_span(send.length, p.slices, j)
                        sent[p.rank][length] = sent[p.rank].get(length, 0) + 1
                        received[send.dst][length] = received[send.dst].get(length, 0) + 1
    return [sorted(c.items()) for c in sent], [sorted(c.items()) for c in received]


@given(st.sampled_from(COLLECTIVES), st.integers(0, 24), sizes, senders)
def test_the_link_time_bound_counts_the_same_messages(collective: str, ranks: int, size: int,
                                                      senders: int | None) -> None:
    """``runner.link_time_us`` counts each link's messages with the compiled plans: the same as Python's."""
    expected = python_message_counts(collective, ranks, size, senders)
    try:
        sent, received = sim.message_counts(collective, ranks, size, senders)
    except ValueError as error:
        assert expected == ("error", str(error))
        return
    assert ([list(map(tuple, link)) for link in sent], [list(map(tuple, link)) for link in received]) == expected
