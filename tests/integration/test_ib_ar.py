"""InfiniBand's adaptive routing on the emulator: real IB frames through the namespaces' switches.

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


def test_adaptive_routing_evens_the_uplinks_and_resends_nothing_on_real_frames(tmp_path):
    builtin = load_experiment("uet")
    names = ("emu-perm3-ib", "emu-perm3-ib-ar")
    variants = [dataclasses.replace(v, iterations=2) for v in builtin.variants if v.name in names]
    experiment = Experiment(builtin.name, builtin.description, builtin.source, variants)
    directory = run_experiment(experiment, str(tmp_path), lambda line: None)
    results = {v["name"]: v for v in json.loads(open(os.path.join(directory, "results.json")).read())["variants"]}
    static, adaptive = results["emu-perm3-ib"], results["emu-perm3-ib-ar"]
    assert static["verified"] is True and adaptive["verified"] is True
    assert adaptive["uplink_balance"] < 1.1 < static["uplink_balance"]
    assert adaptive["retransmissions"] == 0 and adaptive["drops"] == 0
    for v in (static, adaptive):
        judge_only_if_faithful(v["fidelity"], f"{v['name']}'s CCT")
    assert adaptive["cct_us"]["mean"] < 0.85 * static["cct_us"]["mean"]
