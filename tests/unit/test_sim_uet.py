"""The built-in `uet` experiment on the simulation backend: what issue 26 asks UET to show, measured.

Each test runs the experiment's own variants (a few iterations of simulated 100 Gbit/s: well under a second each)
and checks the claim against RoCE's or its own no-failure figure, so a change that loses the spraying, the trimming
or the recovery fails here.
"""

from __future__ import annotations

import dataclasses

from emulator.study.experiment import load_experiment
from emulator.study.runner import _run_sim_variant


def _run(name: str, **changes):
    """Variant ``name`` of the built-in ``uet``, run: its results.json entry."""
    variant = next(v for v in load_experiment("uet").variants if v.name == name)
    summary, _ = _run_sim_variant(dataclasses.replace(variant, **changes), lambda line: None)
    assert summary["verified"] is True, name
    return summary


def _mean_ms(summary) -> float:
    return summary["cct_us"]["mean"] / 1e3


def test_a_sprayed_permutation_beats_per_flow_ecmp_and_loads_the_uplinks_evenly():
    roce, uet, oblivious = (_run(name, iterations=2) for name in ("perm-lossless", "perm-uet", "perm-uet-oblivious"))
    for sprayed in (uet, oblivious):
        assert _mean_ms(sprayed) < 0.8 * _mean_ms(roce)
        assert sprayed["uplink_balance"] < 1.1 < roce["uplink_balance"]
        assert sprayed["pfc_sent"] == 0
    assert set(uet["uplinks"]) == {"s1-eth5", "s1-eth6", "s2-eth5", "s2-eth6"}


def test_a_uet_incast_on_a_shallow_lossy_switch_trims_loses_nothing_and_keeps_near_lossless_time():
    lossless, uet = _run("incast-lossless", iterations=2), _run("incast-uet", iterations=2)
    assert uet["trimmed"] > 0 and uet["drops"] == 0 and uet["pfc_sent"] == 0
    assert uet["retransmissions"] >= uet["trimmed"]  # every trimmed packet was sent again
    assert uet["cct_us"]["p99"] <= 1.2 * lossless["cct_us"]["p99"]


def test_receiver_credits_hold_an_incast_to_fewer_trims_at_the_same_time():
    lossless, uet, rccc = (_run(name, iterations=2) for name in ("incast-lossless", "incast-uet", "incast-uet-rccc"))
    assert rccc["drops"] == 0 and rccc["pfc_sent"] == 0
    assert rccc["trimmed"] < uet["trimmed"]  # only the speculated first window of each sender overflows
    assert rccc["cct_us"]["p99"] <= 1.2 * lossless["cct_us"]["p99"]


def test_nscc_as_cc_sets_it_reaches_the_rnics():
    nscc, fixed = _run("incast-uet", iterations=1), _run("incast-uet", iterations=1, cc="none")
    assert nscc["cc"] == "nscc"  # the uet fabric's default
    assert fixed["trimmed"] > 10 * nscc["trimmed"]  # a fixed window of 1,024 packets overruns the switch
    gentle = _run("incast-uet", iterations=1, cc="nscc,target_delay=1us,gamma=0.5")
    assert gentle["ecn_marked"] < nscc["ecn_marked"]  # a lower target cuts earlier: fewer marks


def test_a_link_down_mid_iteration_costs_sprayed_uet_under_half_its_time_again():
    none, down = _run("down-uet-none"), _run("down-uet")
    assert down["faults"] == 1 and down["drops"] > 0  # what was on the link when it went down was lost
    assert _mean_ms(down) <= 1.5 * _mean_ms(none)
    assert _mean_ms(down) > _mean_ms(none)  # and the failure did cost something
