"""InfiniBand's adaptive routing and a link failure on the emulator: real IB frames through the namespaces'
switches.

Runs the built-in `uet` experiment's emulated perm3 variants (leafspine,2,2,3 at 20 Mbit/s): three flows a leaf
over two spines, which the subnet manager's static tables cannot split evenly and adaptive routing splits per
packet, the RNICs holding the packets that pass each other.
"""

from __future__ import annotations

import dataclasses
import json
import os

from emulator.study.experiment import Experiment, load_experiment
from emulator.study.runner import run_experiment
from faithful import judge_only_if_faithful


def _run(tmp_path, *names: str, **changes) -> dict:
    """The named variants of the built-in `uet`, run on the emulator: their results.json entries by name."""
    builtin = load_experiment("uet")
    variants = [dataclasses.replace(v, **changes) for v in builtin.variants if v.name in names]
    experiment = Experiment(builtin.name, builtin.description, builtin.source, variants)
    directory = run_experiment(experiment, str(tmp_path), lambda line: None)
    return {v["name"]: v for v in json.loads(open(os.path.join(directory, "results.json")).read())["variants"]}


def test_adaptive_routing_evens_the_uplinks_and_resends_nothing_on_real_frames(tmp_path):
    results = _run(tmp_path, "emu-perm3-ib", "emu-perm3-ib-ar", iterations=2)
    static, adaptive = results["emu-perm3-ib"], results["emu-perm3-ib-ar"]
    assert static["verified"] is True and adaptive["verified"] is True
    assert adaptive["uplink_balance"] < 1.1 < static["uplink_balance"]
    assert adaptive["retransmissions"] == 0 and adaptive["drops"] == 0
    for v in (static, adaptive):
        judge_only_if_faithful(v["fidelity"], f"{v['name']}'s CCT")
    assert adaptive["cct_us"]["mean"] < 0.85 * static["cct_us"]["mean"]


def test_a_link_down_on_the_ib_fabric_is_swept_around_and_the_collective_completes(tmp_path):
    """The subnet manager's sweep without the link taken by every switch agent mid-iteration: what was on the
    link and queued for it is lost, RC resends it over the links left, every byte lands."""
    results = _run(tmp_path, "emu-down-ib", "emu-down-ib-ar")
    for name in ("emu-down-ib", "emu-down-ib-ar"):
        v = results[name]
        assert v["verified"] is True and v["faults"] == 1, name
        assert v["retransmissions"] > 0, name  # the frames lost with the link were sent again
        assert v["uplinks"]["s1-eth3"] < v["uplinks"]["s1-eth4"], name  # s1's uplink to s3 went down mid-way
