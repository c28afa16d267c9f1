"""PFC deadlock on a ring of switches, and the PFC watchdog breaking it (the deadlock experiment, shortened)."""

from __future__ import annotations

from emulator._core.rc import default_timeout_ns
from experiment_run import run_experiment
from faithful import judge_only_if_faithful

RING = """
name = "ring"
description = "the deadlock experiment, one iteration of 2 MiB"
topo = "ring,5"
link = { bw = "20mbit" }
switch = { buffer = "320KiB" }
collective = "shift"
size = "2MiB"
iterations = 1
warmup = 0
deadlock = "5s"

[[variants]]
name = "pfc"
fabric = "lossless"

[[variants]]
name = "pfcwd"
fabric = "lossless"
switch = { pfcwd = "500ms:1s:drop" }
"""
SAMPLE_MS = 100


def test_pfc_deadlocks_and_the_watchdog_recovers(tmp_path):
    _, variants, stderr = run_experiment(tmp_path, "ring", RING)
    assert "pfc: no frame reached any host for 10 s: deadlocked" in stderr
    pfc, pfcwd = variants["pfc"], variants["pfcwd"]
    assert pfc["deadlocked"] is True and pfc["recovered_after_ms"] is None and pfc["longest_stall_ms"] >= 5000
    assert pfc["iterations"] == 0 and pfc["cct_us"] is None and pfc["drops"] == 0 and pfc["pfc_sent"] > 0
    assert pfc["pfcwd"]["pfcwd_storms"] == 0
    # The watchdog: detection 500 ms, then the dropped frames are resent (NAK, or at worst one retransmission
    # timeout); restoration 1 s; a goodput sample's period on top.
    bound_ms = 500 + 1000 + default_timeout_ns(20_000_000, 4096) / 1e6 + 2 * SAMPLE_MS
    assert pfcwd["deadlocked"] is False and pfcwd["iterations"] == 1 and pfcwd["verified"]
    assert pfcwd["pfcwd"]["pfcwd_storms"] > 0 and pfcwd["pfcwd"]["pfcwd_drops"] == pfcwd["drops"] > 0
    assert pfcwd["recovered_after_ms"] is not None
    judge_only_if_faithful(pfcwd["fidelity"], "the watchdog's recovery time")
    assert pfcwd["recovered_after_ms"] <= bound_ms, pfcwd
