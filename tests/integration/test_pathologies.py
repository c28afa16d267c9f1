"""PFC's pathologies as experiments, shortened: a victim flow behind an incast, and a pause storm that the
PFC watchdog contains (experiment-file faults, the multijob and victim collectives on real fabrics)."""

from __future__ import annotations

import json

from experiment_run import run_experiment
from faithful import judge_only_if_faithful

VICTIM = """
name = "v"
description = "victim flow, PFC against DCQCN"
topo = "star,5"
link = { bw = "20mbit" }
switch = { buffer = "1MiB", headroom = "72KiB" }
collective = "victim"
size = "256KiB"
iterations = 2
warmup = 1

[[variants]]
name = "pfc"
fabric = "lossless"

[[variants]]
name = "dcqcn"
fabric = "lossless"
cc = "dcqcn"
"""

STORM = """
name = "s"
description = "pause storm, with and without the watchdog"
topo = "leafspine,2,1,hosts=4"
link = { bw = "20mbit" }
switch = { buffer = "1MiB", headroom = "72KiB" }
collective = "multijob"
size = "512KiB"
iterations = 1
warmup = 1
faults = [{ at = "50ms", host = "h8", fault = "stall", for = "600ms" }]

[[variants]]
name = "storm"
fabric = "lossless"

[[variants]]
name = "pfcwd"
fabric = "lossless"
switch = { pfcwd = "150ms:300ms:drop" }
"""


def _run(tmp_path, name: str, text: str) -> dict:
    return run_experiment(tmp_path, name, text)[1]


def test_a_victim_flow_behind_an_incast(tmp_path):
    variants = _run(tmp_path, "v", VICTIM)
    pfc, dcqcn = variants["pfc"], variants["dcqcn"]
    for v in (pfc, dcqcn):
        assert v["verified"] and v["drops"] == 0
        assert (v["victim"]["src"], v["victim"]["dst"]) == ("h2", "h5")  # star,5: h1 receives, h2..h4 send
    assert pfc["pfc_sent"] > 0
    judge_only_if_faithful(pfc["fidelity"], "the victim's goodput with PFC")
    judge_only_if_faithful(dcqcn["fidelity"], "the victim's goodput with DCQCN")
    # PFC pauses h2's NIC for the incast and its flow to the idle h5 with it; DCQCN slows only the QP to h1.
    assert pfc["victim"]["link_share"] < 0.5 < dcqcn["victim"]["link_share"], (pfc["victim"], dcqcn["victim"])


def test_a_pause_storm_spreads_unless_the_watchdog_contains_it(tmp_path):
    variants = _run(tmp_path, "s", STORM)
    storm, pfcwd = variants["storm"], variants["pfcwd"]
    for v in (storm, pfcwd):
        assert v["faults"] == 1 and v["verified"]
    # Without the watchdog: nothing dropped, the pauses reached the other leaf's hosts (h2, h4 on s1).
    assert storm["drops"] == 0 and storm["pfcwd"]["pfcwd_storms"] == 0 and storm["pfcwd"]["stormed_ports"] == []
    assert storm["paused_ms_by_host"]["h2"] > 0 and storm["paused_ms_by_host"]["h4"] > 0
    # With it: storms only at the stalled host's port (s2's port to h8); what it dropped were frames to h8.
    assert pfcwd["pfcwd"]["stormed_ports"] == ["s2:s2-eth4"], pfcwd["pfcwd"]
    assert pfcwd["pfcwd"]["pfcwd_drops"] > 0 and pfcwd["drops"] == pfcwd["pfcwd"]["pfcwd_drops"]
    judge_only_if_faithful(storm["fidelity"], "the all-reduce's CCT in the storm")
    judge_only_if_faithful(pfcwd["fidelity"], "the all-reduce's CCT with the watchdog")
    assert pfcwd["cct_us"]["mean"] < storm["cct_us"]["mean"]


SLOW = """
name = "r"
description = "slow receiver"
topo = "star,4"
link = { bw = "20mbit" }
collective = "incast"
size = "256KiB"
iterations = 2
warmup = 1
faults = [{ at = "0s", host = "h1", fault = "slow", fraction = 0.25 }]

[[variants]]
name = "calm"
fabric = "lossless"
faults = []

[[variants]]
name = "slow"
fabric = "lossless"
"""


def test_a_slow_receiver_pauses_its_switch_port_and_loses_nothing(tmp_path):
    directory, variants, _ = run_experiment(tmp_path, "r", SLOW)
    calm, slow = variants["calm"], variants["slow"]
    assert slow["faults"] == 2 and slow["verified"] and calm["verified"]
    assert slow["drops"] == calm["drops"] == 0
    stats = json.load(open(directory / "telemetry" / "slow" / "stats.json"))
    h1 = stats["hosts"]["h1"]
    assert h1["fault"]["pfc_sent"] > 0 and h1["rnic"]["rx_buffer_drops"] == 0  # it paused s1 and lost nothing
    assert sum(port["priorities"][3]["pfc_received"] for port in stats["switches"]["s1"]["ports"].values()) > 0
    judge_only_if_faithful(calm["fidelity"], "the calm incast's CCT")
    judge_only_if_faithful(slow["fidelity"], "the slow receiver's incast CCT")
    # A quarter of the link rate: about four times the calm incast, and no faster.
    assert 3.5 < slow["cct_us"]["p50"] / calm["cct_us"]["p50"] < 5.5, (slow["cct_us"], calm["cct_us"])


FLAP = """
name = "f"
description = "a spine link down for 150 ms in each iteration"
topo = "leafspine,2,2,hosts=2"
link = { bw = "20mbit" }
collective = "allreduce"
size = "512KiB"
iterations = 2
warmup = 1
faults = [{ at = "50ms", link = "s1-s3", fault = "down", for = "150ms" }]

[[variants]]
name = "flap"
fabric = "lossless"
"""


def test_a_link_that_goes_down_and_up_in_every_iteration(tmp_path):
    directory, variants, stderr = run_experiment(tmp_path, "f", FLAP)
    flap = variants["flap"]
    assert flap["faults"] == 2 and flap["verified"] and flap["iterations"] == 2
    assert stderr.count("link s1-s3 down: routes of 4 switches recomputed") == 2
    assert stderr.count("link s1-s3 up: routes of 4 switches recomputed") == 2
    # What was on the cable when it went is lost, even on the lossless fabric; the transport resends it.
    stats = json.load(open(directory / "telemetry" / "flap" / "stats.json"))
    link_errors = sum(port["link_errors"] + port["tx_errors"] for switch in ("s1", "s3")
                      for port in stats["switches"][switch]["ports"].values())
    assert link_errors > 0 or flap["retransmissions"] == 0
