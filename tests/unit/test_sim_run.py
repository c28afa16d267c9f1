"""`fabric-emu run` on the simulation backend: no root, the same results directory, report and all."""

from __future__ import annotations

import json
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
