"""`fabric-emu run` on the simulation backend: no root, the same results directory, report and all."""

from __future__ import annotations

import json
import os
import tempfile
import textwrap

from emulator.study.experiment import load_experiment
from emulator.study.report import main_report
from emulator.study.runner import run_experiment

TEXT = """
name = "simmini"
topo = "star,4"
collective = "incast"
size = "256KiB"
link = { bw = "100mbit" }
switch = { buffer = "512KiB", headroom = "72KiB" }
iterations = 3
warmup = 1
backend = "sim"

[[variants]]
name = "lossless"
fabric = "lossless"

[[variants]]
name = "lossy"
fabric = "lossy"

[[variants]]
name = "ib"
fabric = "ib"
"""


def load_experiment_text(text: str):
    """An experiment from its text (a file in a directory that is gone once it is read)."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "simmini.toml")
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return load_experiment(path)


def test_a_simulated_experiment_writes_the_emulators_results_and_its_engine_figures(tmp_path, capsys):
    path = tmp_path / "simmini.toml"
    path.write_text(textwrap.dedent(TEXT))
    lines: list[str] = []
    directory = run_experiment(load_experiment(str(path)), str(tmp_path / "out"), lines.append)
    results = json.loads((tmp_path / "out" / "simmini").joinpath(directory.rsplit("/", 1)[1], "results.json").read_text())
    assert results["complete"] is True
    variants = {v["name"]: v for v in results["variants"]}
    assert [v["name"] for v in results["variants"]] == ["lossless", "lossy", "ib"]  # the file's order, however they finished
    for v in variants.values():
        assert v["backend"] == "sim" and v["iterations"] == 3 and v["verified"] is True
        assert v["fidelity"]["faithful"] is True and v["engine"]["events"] > 0 and v["engine"]["simulated_ms"] > 0
    assert variants["lossless"]["drops"] == 0 and variants["lossless"]["pfc_sent"] > 0
    assert variants["lossy"]["drops"] > 0 and variants["lossy"]["retransmissions"] > 0
    assert variants["ib"]["drops"] == 0 and variants["ib"]["pfc_sent"] == 0 and variants["ib"]["ib_credit_stalls"] > 0
    assert variants["lossy"]["cct_us"]["mean"] > variants["lossless"]["cct_us"]["mean"]
    assert 1.0 < variants["lossless"]["cct_over_link_time"] < 1.02
    iterations = (tmp_path / "out" / "simmini" / directory.rsplit("/", 1)[1] / "iterations.csv").read_text().splitlines()
    assert len(iterations) == 1 + 3 * 3
    assert any("simulated" in line for line in lines)
    assert main_report(directory) == 0
    table = capsys.readouterr().out
    assert "lossy mean / lossless mean" in table


def test_a_simulation_too_large_for_the_memory_is_refused_before_it_runs(tmp_path, monkeypatch):
    from emulator.errors import FabricError
    from emulator.study import runner
    import pytest

    path = tmp_path / "simmini.toml"
    path.write_text(textwrap.dedent(TEXT))
    monkeypatch.setattr(runner, "meminfo_bytes", lambda field: 200 << 20)
    with pytest.raises(FabricError, match=r"^variant lossless \(incast on star,4, simulated\) needs about .* of memory; "
                                          r"this machine has 200 MiB available and keeps 256 MiB free: use a smaller topology$"):
        run_experiment(load_experiment(str(path)), str(tmp_path / "out"), lambda line: None)
    assert not (tmp_path / "out").exists()  # nothing written


def test_every_variant_is_checked_before_the_first_one_runs(tmp_path, monkeypatch):
    """An emulated variant beside a simulation too large for the memory: the emulated one ran first, and the
    refusal after it left a results directory with complete: false."""
    from emulator.errors import FabricError
    from emulator.study import runner
    import pytest

    path = tmp_path / "mixed.toml"
    path.write_text(textwrap.dedent(TEXT).replace('backend = "sim"\n', "") + '\n[[variants]]\nname = "simulated"\n'
                                                                             'fabric = "lossless"\nbackend = "sim"\n')
    experiment = load_experiment(str(path))
    assert [v.backend for v in experiment.variants] == ["emulator", "emulator", "emulator", "sim"]

    def ran(*args):
        raise AssertionError("a variant ran before every variant was checked")

    monkeypatch.setattr(runner, "_run_variant", ran)
    monkeypatch.setattr(runner, "meminfo_bytes", lambda field: 200 << 20)
    with pytest.raises(FabricError, match=r"^variant simulated \(incast on star,4, simulated\) needs about"):
        run_experiment(experiment, str(tmp_path / "out"), lambda line: None)
    assert not (tmp_path / "out").exists()


def test_simulations_run_as_many_at_once_as_the_memory_holds(tmp_path, monkeypatch):
    from emulator.study import runner
    from emulator.study.sim_variant import sim_variant_bytes

    path = tmp_path / "simmini.toml"
    path.write_text(textwrap.dedent(TEXT))
    experiment = load_experiment(str(path))
    one = max(sim_variant_bytes(v) for v in experiment.variants)
    monkeypatch.setattr(runner, "meminfo_bytes", lambda field: runner.KEEP_FREE_BYTES + one + one // 2)
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 4)
    lines: list[str] = []
    run_experiment(experiment, str(tmp_path / "out"), lines.append)
    assert any(line.startswith("simulated variants: 1 at a time") for line in lines)


def test_a_failing_simulation_stops_the_others_at_once(tmp_path, monkeypatch):
    """A variant that fails (or Ctrl-C in the runner) ends the run now, not when the slowest variant would end."""
    import time
    import pytest
    from emulator.errors import FabricError
    from emulator.study import runner

    path = tmp_path / "simmini.toml"
    path.write_text(textwrap.dedent(TEXT))
    experiment = load_experiment(str(path))

    def fake(variant, log):
        if variant.name == "lossy":
            raise FabricError("simulation: rank 1: RDMA_WRITE RETRY_EXC_ERR")
        time.sleep(60)

    monkeypatch.setattr(runner, "_run_sim_variant", fake)
    began = time.monotonic()
    with pytest.raises(FabricError, match="RETRY_EXC_ERR"):
        list(runner._run_simulated(experiment.variants, 3, lambda line: None))
    assert time.monotonic() - began < 10


def test_a_long_simulation_says_how_far_it_got_and_how_long_is_left():
    from emulator.study.sim_variant import TICK_S, run_sim_variant

    variant = load_experiment_text(TEXT).variants[0]
    ticks = iter(range(0, 10**6, int(TICK_S)))
    lines: list[str] = []
    outcome = run_sim_variant(variant, lines.append, clock=lambda: float(next(ticks)))
    progress = [line for line in lines if "arrivals in this one" in line]
    assert progress and all(("s left" in line or "no arrival yet" in line) and "M events" in line for line in progress)
    assert outcome.engine["events"] > 0 and outcome.run.iterations


def test_the_deadlock_experiment_deadlocks_in_simulated_time_and_the_watchdog_breaks_it():
    """The built-in `deadlock` on the simulation backend: PFC alone stalls for good (the goodput watch, in
    simulated time, gives up after deadlock + 5 s), the PFC watchdog's drops let the transport finish."""
    import dataclasses

    from emulator.study.runner import _run_sim_variant

    pfc, watchdog = (dataclasses.replace(v, size=1 << 20, iterations=1)
                     for v in load_experiment("deadlock", backend="sim").variants)
    lines: list[str] = []
    stuck, _ = _run_sim_variant(pfc, lines.append)
    assert stuck["deadlocked"] is True and stuck["recovered_after_ms"] is None and stuck["iterations"] == 0
    assert stuck["longest_stall_ms"] >= 10_000 and any("deadlocked; stopped" in line for line in lines)
    broken, run = _run_sim_variant(watchdog, lines.append)
    assert broken["deadlocked"] is False and broken["iterations"] == 1 and broken["verified"]
    assert broken["pfcwd"]["pfcwd_storms"] > 0 and broken["pfcwd"]["pfcwd_drops"] > 0 and broken["retransmissions"] > 0
    assert broken["pfcwd"]["stormed_ports"] and all(p.startswith("s") for p in broken["pfcwd"]["stormed_ports"])


# What the variant runs compared with the Python backend's (test_twin_sim_cc.py, gone with it) also showed on the
# compiled one: DCQCN's pacing, the stall fault's storm and its spread, a stall for good.
def _variant(experiment: str, name: str, **changes):
    """Variant ``name`` of the built-in ``experiment`` on the simulation backend, with ``changes``."""
    import dataclasses

    variant = next(v for v in load_experiment(experiment).variants if v.name == name)
    return dataclasses.replace(variant, backend="sim", **changes)


def test_the_dcqcn_experiment_paces_the_senders_where_it_runs_dcqcn():
    """The built-in `dcqcn` (D = 2000 from the constants' reference rate, or a modelled rate's ``dilation``)."""
    from emulator.study.sim_variant import run_sim_variant

    for name, dilation in [("pfc", None), ("dcqcn", None), ("dcqcn-nvidia", None), ("dcqcn", 500.0)]:
        changes = {"iterations": 1, "warmup": 1, "capture": False}
        if dilation is not None:
            changes |= {"model": "10gbit", "dilation": dilation}
        outcome = run_sim_variant(_variant("dcqcn", name, **changes), lambda line: None)
        assert outcome.run.iterations and all(it.verified for it in outcome.run.iterations), name
        assert (outcome.counters["paced_waits"] > 0) == (name != "pfc"), (name, dilation)


def test_a_stalled_nic_storms_its_port_and_the_pause_spreads_unless_the_watchdog_drops():
    """The built-in `pause-storm`: h8's NIC stalls 100 ms into each measured iteration for 1 s."""
    from emulator.study.sim_variant import run_sim_variant

    for name in ("storm", "storm-pfcwd"):
        outcome = run_sim_variant(_variant("pause-storm", name, iterations=2, warmup=1), lambda line: None)
        assert outcome.faults == 2 and outcome.counters["host_pfc_sent"] > 2  # XOFFs, refreshes and XONs
        assert outcome.paused_ms_by_host is not None and outcome.paused_ms_by_host["h8"] == 0  # it pauses, unpaused
        assert outcome.pfcwd is not None
        if name == "storm":
            assert outcome.paused_ms_by_host["h6"] > 0 and outcome.pfcwd["pfcwd_storms"] == 0  # spread to h8's peers
        else:
            assert outcome.pfcwd["stormed_ports"] and outcome.pfcwd["pfcwd_drops"] > 0


def test_a_stall_for_good_ends_the_run_when_the_peers_retries_run_out():
    """A fault with no end holds h1's frames for good: its peers' retries run out, a FabricError."""
    import dataclasses

    import pytest

    from emulator.errors import FabricError
    from emulator.study.sim_variant import run_sim_variant

    storm = _variant("pause-storm", "storm")
    variant = dataclasses.replace(storm, topo="star,3", collective="alltoall", size=1 << 16, iterations=1, warmup=0,
                                  deadlock_ns=10**9,
                                  faults=(dataclasses.replace(storm.faults[0], host="h1", at_ns=1000, duration_ns=None),))
    with pytest.raises(FabricError, match="RETRY_EXC_ERR"):
        run_sim_variant(variant, lambda line: None)
