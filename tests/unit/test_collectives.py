"""Collective plans executed on plain memory, and the metrics of one iteration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emulator.collectives.algorithms import (ELEMENT, MIN_SLICE, PIPELINE, bus_factor, chunk_bytes, plan,
                                            ring_chunks, ring_slices, slice_span, victim_flow)
from emulator.collectives.coordinator import MAX_START_MARGIN_NS, START_MARGIN_NS, next_margin, summarize
from emulator.errors import FabricError
from emulator.study.stats import percentile


def inputs(plans: list) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every rank's data and staging before an iteration: rank r's float32 value r + 1, or bytes r + 1."""
    data = [np.zeros(p.data_bytes, dtype=np.uint8) for p in plans]
    staging = [np.zeros(p.staging_bytes, dtype=np.uint8) for p in plans]
    for r, p in enumerate(plans):
        if p.reduce_group:
            data[r].view(np.float32)[:] = r + 1
        else:
            data[r][:] = r + 1
    return data, staging


def execute(collective: str, ranks: int, size: int, senders: int | None = None):
    """Run the plans step by step on numpy buffers: every rank's data and staging at the end.

    Ranks run in lock step (step k of every rank, then k+1): the ring's dependencies hold because a
    step's sends happen before anyone reduces what they received in it.
    """
    plans = plan(collective, ranks, size, senders)
    data, staging = inputs(plans)
    steps = max(len(p.steps) for p in plans)
    for k in range(steps):
        outgoing = []
        for r, p in enumerate(plans):
            if k < len(p.steps):
                for s in p.steps[k].sends:
                    outgoing.append((s, data[r][s.offset:s.offset + s.length].copy()))
        for s, payload in outgoing:
            target = staging[s.dst] if s.region == "staging" else data[s.dst]
            target[s.dst_offset:s.dst_offset + s.length] = payload
        for r, p in enumerate(plans):
            if k < len(p.steps) and p.steps[k].reduce is not None:
                staged, offset, length = p.steps[k].reduce
                mine = data[r][offset:offset + length].view(np.float32)
                mine += staging[r][staged:staged + length].view(np.float32)
    return plans, data


def execute_pipelined(collective: str, ranks: int, size: int, seed: int):
    """Run the plans as the rank processes do, slice by slice: slice j of step k is sent once slice j of step
    k-1 arrived from everyone it expects and was reduced; the slices in flight land in a random order (as
    ranks on different hosts run).  Every rank's data at the end."""
    rng = np.random.default_rng(seed)
    plans = plan(collective, ranks, size)
    data, staging = inputs(plans)
    arrived: set[tuple[int, int, int]] = set()  # (dst, src, slice number)
    cursor = [[0] * p.slices for p in plans]
    flight: list[tuple] = []

    def send(r: int, k: int, j: int) -> None:
        p = plans[r]
        for s in p.steps[k].sends:
            at, length = slice_span(s.length, p.slices, j)
            payload = data[r][s.offset + at:s.offset + at + length].copy()  # read when posted
            flight.append((s, at, payload, r, k * p.slices + j))

    for r, p in enumerate(plans):
        for j in range(p.slices):
            if p.steps:
                send(r, 0, j)
    while True:
        for r, p in enumerate(plans):
            for j in range(p.slices):
                while cursor[r][j] < len(p.steps) and all(
                        (r, src, cursor[r][j] * p.slices + j) in arrived for src in p.steps[cursor[r][j]].receives):
                    step = p.steps[cursor[r][j]]
                    if step.reduce is not None:
                        staged, offset, length = step.reduce
                        at, count = slice_span(length, p.slices, j)
                        data[r][offset + at:offset + at + count].view(np.float32)[:] += \
                            staging[r][staged + at:staged + at + count].view(np.float32)
                    cursor[r][j] += 1
                    if cursor[r][j] < len(p.steps):
                        send(r, cursor[r][j], j)
        if not flight:
            break
        s, at, payload, src, number = flight.pop(int(rng.integers(len(flight))))
        target = staging[s.dst] if s.region == "staging" else data[s.dst]
        target[s.dst_offset + at:s.dst_offset + at + len(payload)] = payload
        arrived.add((s.dst, src, number))
    assert all(min(c) == len(p.steps) for c, p in zip(cursor, plans) if p.steps)
    return plans, data


@pytest.mark.parametrize("ranks,size", [(2, 2 * 4 * MIN_SLICE), (3, 3 * 4 * MIN_SLICE + 12), (8, 1 << 20),
                                        (5, 5 * (2 * MIN_SLICE + 8))])
@pytest.mark.parametrize("seed", [1, 2])
def test_pipelined_ring_allreduce_and_allgather_end_as_the_lock_step_ones(ranks, size, seed):
    for collective in ("allreduce", "allgather"):
        plans, data = execute_pipelined(collective, ranks, size, seed)
        assert all(p.slices > 1 for p in plans)
        _, expected = execute(collective, ranks, size)
        assert all(np.array_equal(d, e) for d, e in zip(data, expected))
        if collective == "allreduce":
            assert all(np.all(d.view(np.float32) == ranks * (ranks + 1) / 2) for d in data)


@pytest.mark.parametrize("ranks,size", [(8, 8), (8, 12), (8, 4), (3, 4 * 7), (5, 4 * 13), (4, 4 * 1001),
                                        (7, 4 * (7 * 2 * MIN_SLICE + 3))])
@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_uneven_chunks_still_add_up(collective, ranks, size):
    """Sizes that are no multiple of the ranks (8 B and 12 B on 8 ranks: ranks with empty chunks): the ring cuts
    them as NCCL does and the data still ends where the collective says, lock step and pipelined."""
    plans, data = execute(collective, ranks, size)
    assert all(p.data_bytes == size for p in plans)
    elements = size // (ELEMENT if collective == "allreduce" else 1)
    assert any(s.length == 0 for p in plans for st in p.steps for s in st.sends) == (elements < ranks)
    if collective == "allreduce":
        assert all(np.all(d.view(np.float32) == ranks * (ranks + 1) / 2) for d in data)
    else:
        chunks = ring_chunks(size, ranks, 1)
        for d in data:  # chunk i holds rank i's bytes (i + 1)
            assert all(np.all(d[offset:offset + length] == i + 1) for i, (offset, length) in enumerate(chunks))
    _, pipelined = execute_pipelined(collective, ranks, size, seed=3)
    assert all(np.array_equal(d, e) for d, e in zip(pipelined, data))


def test_ring_chunks_are_nccls():
    assert ring_chunks(12, 8, ELEMENT) == [(0, 4), (4, 4), (8, 4)] + [(12, 0)] * 5
    assert ring_chunks(10, 4, 1) == [(0, 3), (3, 3), (6, 2), (8, 2)]
    assert ring_chunks(1 << 20, 8, ELEMENT) == [(i << 17, 1 << 17) for i in range(8)]  # even: as before
    assert chunk_bytes("allreduce", 8, 8) == 4 and chunk_bytes("allgather", 1, 8) == 1
    assert chunk_bytes("allreduce", 4 * 17, 8) == 12  # the largest chunk


def test_slices_cover_a_send_in_whole_floats_and_only_rings_are_sliced():
    for length in (MIN_SLICE, 2 * MIN_SLICE, 131072, 131076, 4 * MIN_SLICE + 4, 10 * MIN_SLICE + 12):
        slices = ring_slices(length, 14)
        spans = [slice_span(length, slices, j) for j in range(slices)]
        assert spans[0][0] == 0 and sum(n for _, n in spans) == length and all(n > 0 for _, n in spans)
        assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:]))
        assert all(n % 4 == 0 for _, n in spans[:-1]) and all(n >= MIN_SLICE for _, n in spans[:-1])
    assert ring_slices(131072, 14) == PIPELINE and ring_slices(MIN_SLICE - 4, 14) == 1
    assert ring_slices(1 << 20, 65534) == 1  # the immediate numbers at most 65,536 slices
    assert plan("allreduce", 8, 1 << 20)[3].slices == PIPELINE
    assert plan("allreduce", 8, 1 << 20)[3].receive_count == 14 * PIPELINE
    assert all(p.slices == 1 for c in ("incast", "alltoall", "shift", "victim") for p in plan(c, 8, 1 << 20))
    job = plan("multijob", 8, 1 << 20)
    assert [p.slices for p in job] == [PIPELINE, 1] * 4


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_ring_allreduce_sums_everywhere_in_2n_minus_2_steps(ranks):
    plans, data = execute("allreduce", ranks, 64 * ranks * 4)
    assert all(len(p.steps) == 2 * (ranks - 1) for p in plans)
    for d in data:
        assert np.all(d.view(np.float32) == ranks * (ranks + 1) / 2)


@pytest.mark.parametrize("ranks", [2, 5, 8])
def test_ring_allgather_gives_everyone_every_chunk(ranks):
    chunk = 16
    plans, data = execute("allgather", ranks, chunk * ranks)
    for d in data:
        assert [int(d[j * chunk]) for j in range(ranks)] == list(range(1, ranks + 1))
        assert all(np.all(d[j * chunk:(j + 1) * chunk] == j + 1) for j in range(ranks))


def test_alltoall_delivers_each_pair_its_chunk():
    ranks, chunk = 4, 8
    plans, data = execute("alltoall", ranks, chunk * ranks)
    for r, d in enumerate(data):
        for src in range(ranks):
            if src != r:
                assert np.all(d[(ranks + src) * chunk:(ranks + src + 1) * chunk] == src + 1)


def test_incast_lands_each_sender_in_its_slot():
    plans, data = execute("incast", 8, 1000, senders=3)
    receiver = data[0]
    assert len(receiver) == 3000
    assert [int(receiver[i * 1000]) for i in range(3)] == [2, 3, 4]
    assert plans[0].receive_count == 3 and not plans[5].steps


def test_victim_is_an_incast_and_one_more_flow_to_an_idle_host():
    plans, data = execute("victim", 8, 1000)  # senders default to ranks 1..6; rank 7 receives only the victim flow
    assert [int(data[0][i * 1000]) for i in range(6)] == [2, 3, 4, 5, 6, 7]
    assert len(data[7]) == 1000 and np.all(data[7] == 2)  # rank 1's bytes
    assert [s.dst for s in plans[1].steps[0].sends] == [0, 7]
    assert plans[7].receive_count == 1 and plans[0].receive_count == 6
    assert victim_flow(8) == (1, 7)
    with pytest.raises(FabricError, match="choose 1 to 6 on 8 hosts"):
        plan("victim", 8, 1000, senders=7)
    with pytest.raises(FabricError, match="choose 1 to 0 on 2 hosts"):
        plan("victim", 2, 1000)


def test_shift_writes_to_the_rank_two_further_on():
    plans, data = execute("shift", 5, 100)
    assert [int(d[0]) for d in data] == [4, 5, 1, 2, 3]  # rank r holds rank r - 2's bytes (value r - 2 + 1)
    assert all(len(p.steps) == 1 and p.receive_count == 1 for p in plans)
    with pytest.raises(FabricError, match="shift needs at least 3 hosts"):
        plan("shift", 2, 100)


def test_multijob_is_an_allreduce_of_the_even_ranks_beside_an_incast_of_the_odd_ones():
    plans, data = execute("multijob", 8, 4 * 4096)
    for r in (0, 2, 4, 6):  # the all-reduce: every element sums the job's inputs 1 + 3 + 5 + 7
        assert plans[r].measured and plans[r].reduce_group == (0, 2, 4, 6)
        assert np.all(data[r].view(np.float32) == 16)
    assert [p.rank for p in plans] == list(range(8))
    assert not any(plans[r].measured for r in (1, 3, 5, 7))
    assert [int(data[7][i * 16384]) for i in range(3)] == [2, 4, 6]  # ranks 1, 3, 5 wrote 16 KiB each into 7
    alone, _ = execute("multijob", 8, 4 * 4096, senders=0)
    assert not any(alone[r].steps for r in (1, 3, 5, 7))
    with pytest.raises(FabricError, match="choose 0 to 3 on 8 hosts"):
        plan("multijob", 8, 4096, senders=4)
    with pytest.raises(FabricError, match="multijob needs at least 3 hosts"):
        plan("multijob", 2, 4096)


def test_a_rank_knows_its_receives_per_peer_and_what_its_allreduce_should_sum_to():
    ring = plan("allreduce", 4, 1 << 12)
    assert ring[2].receives_by_peer == {1: 6}  # 2(N-1) steps, each from the previous rank
    assert plan("alltoall", 4, 1 << 12)[0].receives_by_peer == {1: 1, 2: 1, 3: 1}
    assert plan("incast", 4, 64)[0].receives_by_peer == {1: 1, 2: 1, 3: 1} and plan("incast", 4, 64)[1].receives_by_peer == {}
    assert ring[2].reduce_input(iteration=1) == 6.0  # (rank + 1) x (iteration + 1)
    assert ring[0].reduce_result(iteration=1) == 2 * (1 + 2 + 3 + 4)
    job = plan("multijob", 5, 1 << 12)  # the even ranks reduce among themselves only
    assert job[0].reduce_result(0) == 1 + 3 + 5 and job[1].reduce_group == ()


def test_bad_parameters_are_one_line():
    with pytest.raises(FabricError, match="choose 1 to 7"):
        plan("incast", 8, 1024, senders=8)
    with pytest.raises(FabricError, match="not a whole number of float32s .*; use a multiple of 4 bytes"):
        chunk_bytes("allreduce", 18, 8)
    with pytest.raises(FabricError, match="allreduce of 0 bytes moves nothing; use a size of at least 4 bytes"):
        plan("allreduce", 8, 0)
    with pytest.raises(FabricError, match="allgather of 0 bytes moves nothing"):
        plan("allgather", 8, 0)
    with pytest.raises(FabricError, match="alltoall of 7 bytes over 8 ranks leaves no data per rank"):
        plan("alltoall", 8, 7)
    with pytest.raises(FabricError, match="unknown collective"):
        plan("broadcast", 4, 1024)
    with pytest.raises(FabricError, match="at least 2 hosts"):
        plan("allreduce", 1, 1024)


def test_bus_factors_are_nccl_tests():
    assert bus_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("allgather", 8) == pytest.approx(7 / 8)
    assert bus_factor("alltoall", 4) == pytest.approx(3 / 4)
    assert bus_factor("incast", 8) == 1.0


def _report(arrivals, counters, released=None):
    return {"arrivals": arrivals, "counters": counters, "released_ns": released, "verified": True}


def test_summarize_finds_the_last_flow_and_why():
    hosts = ["h1", "h2", "h3"]
    plans = plan("incast", 3, 4096)
    start = 1_000_000_000
    previous = {h: {} for h in hosts}
    reports = {
        "h1": _report([[1, 0, start + 5_000_000], [2, 0, start + 9_000_000]], {"1": [0, 0], "2": [0, 0]}),
        "h2": _report([], {"0": [0, 0]}, start + 100_000),
        "h3": _report([], {"0": [4, 1]}, start + 250_000),
    }
    it = summarize(0, start, hosts, plans, reports, previous, {"h1": 0, "h2": 0, "h3": 0})
    assert it.cct_us == 9000.0
    assert (it.last_src, it.last_dst, it.cause) == ("h3", "h1", "retransmission")
    assert it.start_skew_us == 150.0 and it.start_late_us == 250.0
    assert [(f.src, f.bytes, f.fct_us, f.retransmissions) for f in it.flows] == [
        ("h2", 4096, 5000.0, 0), ("h3", 4096, 9000.0, 4)]
    # Next iteration: counters are cumulative, so no new retransmission; h3 was paused.
    reports["h3"]["counters"] = {"0": [4, 1]}
    it = summarize(1, start, hosts, plans, reports, previous, {"h1": 0, "h2": 0, "h3": 30_000})
    assert it.cause == "pause" and it.retransmissions == 0
    it = summarize(2, start, hosts, plans, reports, previous, {"h1": 0, "h2": 0, "h3": 0})
    assert it.cause == "queueing"


def test_percentile_matches_numpy():
    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert math.isnan(percentile([], 50))


def test_straggler_prediction_counts_packets_per_link_crossed():
    """star,8 all-reduce of 256 KiB at the 4096-byte path MTU: 8 ranks x 14 steps x 8 packets x 2 links
    (host, switch, host)."""
    from emulator.study.experiment import load_experiment
    from emulator.study.runner import prediction

    variant = next(v for v in load_experiment("straggler").variants if v.params == {"loss": 1e-4})
    result = prediction(variant, baseline_mean_us=1000.0)
    assert variant.mtu == 4096 and result["packets"] == 8 * 14 * 8 * 2
    assert result["hit_probability"] == pytest.approx(1 - (1 - 1e-4) ** result["packets"], abs=1e-6)
    assert result["predicted_gbn_us"] == pytest.approx(1000.0 + result["hit_probability"] * result["recovery_gbn_us"],
                                                       abs=0.1)


def test_the_start_margin_grows_by_twice_a_late_start_and_never_past_its_cap():
    """fattree,4's all-to-all: 16 ranks posting 15 timed sends each took longer than the 10 ms margin, and every
    start was late by what the posting took (80 to 154 ms at p99)."""
    assert next_margin(START_MARGIN_NS, 50_000) == START_MARGIN_NS  # a wake-up's lateness: no change
    assert next_margin(START_MARGIN_NS, START_MARGIN_NS // 10) == START_MARGIN_NS
    grown = next_margin(START_MARGIN_NS, 80_000_000)
    assert grown == START_MARGIN_NS + 160_000_000
    assert next_margin(grown, 0) == grown  # never shrinks
    assert next_margin(grown, 10**10) == MAX_START_MARGIN_NS
