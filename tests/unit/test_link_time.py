"""The link-time bound of a collective, and the check that no variant is called faithful far off it."""

from __future__ import annotations

import math

from emulator.collectives.coordinator import CollectiveRun, Flow, IterationResult
from emulator._core.rdma_params import message_wire_bytes
from emulator.study.experiment import load_experiment
from emulator.study.runner import BOUND_SLACK, link_time_us, summarize_variant, with_bound_check

FAITHFUL = {"faithful": True, "unfaithful": {}}
QUIET = {"drops": 0, "pfc_sent": 0, "ecn_marked": 0, "host_paused_ns": 0, "cnps_received": 0, "paced_waits": 0,
         "ib_credit_stalls": 0, "host_pfc_sent": 0, "tx_frames": 10_000, "trimmed": 0}


def variants() -> dict:
    return {v.name: v for v in load_experiment("headline").variants}


def test_wire_bytes_count_every_packet_header_and_one_reth():
    # 1 MiB at path MTU 1024: 1024 packets of Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4, one RETH (16)
    assert message_wire_bytes(1 << 20, 1024, native_ib=False) == (1 << 20) + 1024 * 58 + 16
    # IB: Ethernet 14 + LRH 8 + BTH 12 + ICRC 4 + VCRC 2
    assert message_wire_bytes(1 << 20, 1024, native_ib=True) == (1 << 20) + 1024 * 40 + 16
    assert message_wire_bytes(0, 1024, native_ib=False) == 58 + 16  # a zero-length WRITE is still a packet


def test_the_headline_moves_the_same_bytes_through_each_bottleneck_port():
    """7 x 256 KiB into one port; the ring all-reduce of 1 MiB sends and receives 2 x 7/8 MiB per host, in 14
    steps of 2 slices (a WRITE each)."""
    by_name = variants()
    incast = link_time_us(by_name["incast-lossless"])
    assert by_name["incast-lossless"].mtu == 4096
    assert math.isclose(incast, 7 * message_wire_bytes(256 << 10, 4096, False) * 8 / 50e6 * 1e6)
    assert math.isclose(incast, 297_777, rel_tol=1e-3)  # 744 ms at 20 Mbit/s; 776 ms there at the 1024-byte MTU
    allreduce = link_time_us(by_name["allreduce-lossless"])
    assert math.isclose(allreduce, 14 * 2 * message_wire_bytes((1 << 20) // 16, 4096, False) * 8 / 50e6 * 1e6)
    assert link_time_us(by_name["allreduce-ib"]) < allreduce  # IB headers are smaller


def run_of(ccts: list[float], retransmissions: int = 0) -> CollectiveRun:
    return CollectiveRun(hosts=[f"h{i}" for i in range(1, 9)], warmup=[], iterations=[
        IterationResult(iteration=i, start_ns=0, cct_us=cct, start_skew_us=10.0, start_late_us=5.0, last_src="h2",
                        last_dst="h1", cause="queueing", retransmissions=retransmissions, paused_us=0.0,
                        verified=True) for i, cct in enumerate(ccts)])


def test_a_collective_far_off_its_bound_with_nothing_to_explain_it_is_not_faithful():
    variant = variants()["allreduce-ib"]
    bound = link_time_us(variant)
    entry = summarize_variant(variant, run_of([2.34 * bound] * 3), QUIET, FAITHFUL)
    assert entry["link_time_us"] == round(bound, 1) and entry["cct_over_link_time"] == 2.34
    assert not entry["fidelity"]["faithful"]
    [reason] = entry["fidelity"]["unfaithful"]["collective"]
    assert reason.startswith("mean CCT 2.34x the link-time bound")
    assert FAITHFUL == {"faithful": True, "unfaithful": {}}  # the agents' object is not changed in place


def test_near_the_bound_or_with_a_cause_in_the_fabric_the_agents_verdict_stands():
    run = run_of([BOUND_SLACK * 1000.0] * 2)
    assert with_bound_check(FAITHFUL, BOUND_SLACK * 1000.0, 1000.0, QUIET, run) is FAITHFUL
    for counters, retransmissions in (({**QUIET, "drops": 3}, 0), ({**QUIET, "pfc_sent": 1}, 0), (QUIET, 2),
                                      ({**QUIET, "cnps_received": 4}, 0), ({**QUIET, "paced_waits": 9}, 0),
                                      ({**QUIET, "ib_credit_stalls": 101}, 0), ({**QUIET, "host_pfc_sent": 3}, 0),
                                      ({**QUIET, "trimmed": 2}, 0), ({**QUIET, "ecn_marked": 5}, 0)):
        run = run_of([3000.0], retransmissions)
        assert with_bound_check(FAITHFUL, 3000.0, 1000.0, counters, run)["faithful"]


def test_a_few_credit_stalls_do_not_explain_a_slow_ib_collective():
    """Late credit updates stall a VL now and then; congestion stalls it on a good share of the frames."""
    run = run_of([3000.0])
    assert not with_bound_check(FAITHFUL, 3000.0, 1000.0, {**QUIET, "ib_credit_stalls": 100}, run)["faithful"]
    assert with_bound_check(FAITHFUL, 3000.0, 1000.0, {**QUIET, "ib_credit_stalls": 101}, run)["faithful"]


def test_a_victim_variant_reports_its_victim_flows_goodput():
    variant = next(v for v in load_experiment("victim").variants if v.name == "victim-pfc")
    run = run_of([800_000.0, 900_000.0])
    for it, fct in zip(run.iterations, (419_430.4, 838_860.8)):  # 256 KiB in 0.42 s: 5 Mbit/s; in 0.84 s: 2.5
        it.flows = [Flow("h2", "h1", 256 << 10, 800_000.0, 0, 0), Flow("h2", "h8", 256 << 10, fct, 0, 0)]
    entry = summarize_variant(variant, run, QUIET, FAITHFUL)
    assert entry["victim"] == {"src": "h2", "dst": "h8", "goodput_mbps": {"mean": 3.75, "p50": 3.75, "min": 2.5},
                               "link_share": 0.1875}
    assert summarize_variant(variants()["incast-lossless"], run, QUIET, FAITHFUL)["victim"] is None
