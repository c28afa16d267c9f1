"""The uet fabric on the emulator: real UET frames through the namespaces, sprayed, trimmed, decoded by tshark.

Runs the built-in `uet` experiment's emulated variants (20 Mbit/s, a few iterations each).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
from importlib import resources

from emulator.study.experiment import Experiment, load_experiment
from emulator.study.runner import run_experiment
from faithful import judge_only_if_faithful

DISSECTOR = str(resources.files("emulator.study") / "dissectors" / "uet.lua")


def _run(tmp_path, *names: str, **changes):
    """The named variants of the built-in `uet`, run on the emulator: their results.json entries, and the
    results directory."""
    import json

    builtin = load_experiment("uet")
    variants = [dataclasses.replace(v, **changes) for v in builtin.variants if v.name in names]
    experiment = Experiment(builtin.name, builtin.description, builtin.source, variants)
    directory = run_experiment(experiment, str(tmp_path), lambda line: None)
    results = json.loads(open(os.path.join(directory, "results.json")).read())
    return {v["name"]: v for v in results["variants"]}, directory


def _tshark(path: str, display_filter: str) -> int:
    """Frames of ``path`` that match ``display_filter``, read with the project's UET dissector."""
    out = subprocess.run(["tshark", "-X", f"lua_script:{DISSECTOR}", "-r", path, "-Y", display_filter],
                         capture_output=True, text=True, check=True, env={**os.environ, "HOME": "/nonexistent"})
    return len(out.stdout.splitlines())


def test_a_sprayed_permutation_beats_per_flow_ecmp_on_real_frames(tmp_path):
    variants, _ = _run(tmp_path, "emu-perm-lossless", "emu-perm-uet", iterations=2)
    roce, uet = variants["emu-perm-lossless"], variants["emu-perm-uet"]
    assert roce["verified"] is True and uet["verified"] is True
    assert roce["uplink_balance"] > 1.2  # with seed 1 two of a leaf's flows hash onto one uplink
    assert uet["uplink_balance"] < 1.1 and uet["pfc_sent"] == 0
    for v in (roce, uet):
        judge_only_if_faithful(v["fidelity"], f"{v['name']}'s CCT")
    assert uet["cct_us"]["mean"] < 0.85 * roce["cct_us"]["mean"]


def test_a_uet_incast_trims_and_every_capture_decodes(tmp_path):
    variants, directory = _run(tmp_path, "emu-incast-uet", iterations=2)
    uet = variants["emu-incast-uet"]
    assert uet["verified"] is True and uet["trimmed"] > 0 and uet["pfc_sent"] == 0
    captures = sorted(glob.glob(os.path.join(directory, "pcap", "emu-incast-uet", "*.pcapng")))
    assert captures
    for path in captures:
        assert _tshark(path, "_ws.malformed || _ws.expert.severity >= 6291456") == 0, path
    receiver = next(p for p in captures if os.path.basename(p) == "h1-eth0.pcapng")
    assert _tshark(receiver, "uet.trimmed == 1") > 0  # the trimmed headers, as the receiver got them
    assert _tshark(receiver, "uet.pds.type == 10") > 0  # and its NACKs
    assert _tshark(receiver, "uet.pds.type == 2 && uet.trimmed == 0") > 0


def test_receiver_credits_go_on_the_wire_and_decode(tmp_path):
    variants, directory = _run(tmp_path, "emu-incast-uet-rccc", iterations=2)
    rccc = variants["emu-incast-uet-rccc"]
    assert rccc["verified"] is True and rccc["pfc_sent"] == 0 and rccc["rccc"] is True
    captures = sorted(glob.glob(os.path.join(directory, "pcap", "emu-incast-uet-rccc", "*.pcapng")))
    assert captures
    for path in captures:
        assert _tshark(path, "_ws.malformed || _ws.expert.severity >= 6291456") == 0, path
    receiver = next(p for p in captures if os.path.basename(p) == "h1-eth0.pcapng")
    assert _tshark(receiver, "uet.pds.type == 13 && uet.pds.credit_target > 0") > 0  # the senders ask
    assert _tshark(receiver, "uet.control.type == 7 && uet.control.credit > 0") > 0  # and h1 grants
