"""InfiniBand's adaptive routing in the built-in `uet` experiment, on the simulation backend.

On leafspine,2,2,3 each leaf sends three flows over two spines: the subnet manager's static tables put two of
them on one uplink, adaptive routing splits them per packet.  The RNICs hold the packets that pass each other
(`RcConfig.reorder`), so the reordering costs no retransmission; without the hold, go-back-N resends what the
switches only delayed.
"""

from __future__ import annotations

import dataclasses

import emulator.fabric.agent_config as agent_config
from emulator.study.experiment import load_experiment
from emulator.study.runner import _run_sim_variant


def _run(name: str, **changes):
    """Variant ``name`` of the built-in ``uet``, run on the simulator: its results.json entry."""
    variant = next(v for v in load_experiment("uet").variants if v.name == name)
    summary, _ = _run_sim_variant(dataclasses.replace(variant, **changes), lambda line: None)
    assert summary["verified"] is True, name
    return summary


def test_adaptive_routing_splits_what_static_routes_cannot_and_resends_nothing():
    static, adaptive = _run("perm3-ib", iterations=2), _run("perm3-ib-ar", iterations=2)
    assert adaptive["cct_us"]["mean"] < 0.85 * static["cct_us"]["mean"]
    assert adaptive["uplink_balance"] < 1.1 < static["uplink_balance"]
    assert adaptive["retransmissions"] == 0 and adaptive["drops"] == 0


def test_without_the_hold_the_reordering_costs_go_back_n(monkeypatch):
    monkeypatch.setattr(agent_config, "AR_REORDER", 0)
    assert _run("perm3-ib-ar", iterations=2)["retransmissions"] > 0


def test_where_static_routes_are_already_even_adaptive_routing_changes_nothing():
    static, adaptive = _run("perm-ib", iterations=2), _run("perm-ib-ar", iterations=2)
    assert static["uplink_balance"] < 1.1  # the subnet manager spread the 4 destinations of each leaf
    assert abs(adaptive["cct_us"]["mean"] - static["cct_us"]["mean"]) < 0.05 * static["cct_us"]["mean"]
