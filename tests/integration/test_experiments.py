"""fabric-emu run and report for real: a small experiment, its files, Ctrl-C, report without root."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from launcher_signals import read_until, stop_signals_at_default

TINY = """
name = "tiny"
description = "two variants on star,3"
topo = "star,3"
link = { bw = "20mbit" }
size = "64KiB"
iterations = 3
warmup = 1

[[variants]]
name = "incast-lossless"
fabric = "lossless"
collective = "incast"

[[variants]]
name = "allreduce-lossy"
fabric = "lossy"
collective = "allreduce"
"""


def _fabric_emu(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], capture_output=True, text=True, **kwargs)


def _results_dir(root) -> str:
    [stamp] = os.listdir(root / "tiny")
    return str(root / "tiny" / stamp)


def test_run_writes_results_and_report_reads_a_copy_without_root(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY)
    done = _fabric_emu("run", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "results"), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "incast-lossless" in done.stdout and "allreduce-lossy" in done.stdout
    directory = _results_dir(tmp_path / "results")
    results = json.load(open(os.path.join(directory, "results.json")))
    config = json.load(open(os.path.join(directory, "config.json")))
    assert results["complete"] is True
    assert config["git_commit"] and config["kernel"] and config["features"]["htb"] is True
    assert [v["name"] for v in config["variants"]] == ["incast-lossless", "allreduce-lossy"]
    for variant in results["variants"]:
        assert variant["iterations"] == 3 and variant["verified"] is True
        assert set(variant["cct_us"]) >= {"p50", "p99", "max", "mean"}
        assert variant["cct_us"]["p50"] > 0
        for key in ("drops", "retransmissions", "pfc_sent", "ecn_marked", "start_skew_us"):
            assert key in variant
    lossless = results["variants"][0]
    assert lossless["drops"] == 0 and lossless["retransmissions"] == 0
    with open(os.path.join(directory, "iterations.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [(r["variant"], r["iteration"]) for r in rows] == [
        ("incast-lossless", "1"), ("incast-lossless", "2"), ("incast-lossless", "3"),
        ("allreduce-lossy", "1"), ("allreduce-lossy", "2"), ("allreduce-lossy", "3")]
    with open(os.path.join(directory, "flows.csv")) as f:
        flows = list(csv.DictReader(f))
    assert {(r["src"], r["dst"]) for r in flows if r["variant"] == "incast-lossless"} == {("h2", "h1"), ("h3", "h1")}
    for name in ("cct_cdf.png", "cct_per_iteration.png", "queue_incast-lossless.png"):
        assert os.path.getsize(os.path.join(directory, "plots", name)) > 1000
    # A copy, read by an unprivileged user: the same table, fresh plots.  (pytest's tmp_path sits
    # under a root-only directory, so the copy goes to a directory of its own.)
    parent = tempfile.mkdtemp(prefix="fabric-emu-test-report-")
    try:
        os.chmod(parent, 0o755)
        copy = os.path.join(parent, "copy")
        shutil.copytree(directory, copy)
        shutil.rmtree(os.path.join(copy, "plots"))
        subprocess.run(["chown", "-R", "65534:65534", copy], check=True)
        report = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 sys.executable, "-m", "emulator", "report", copy],
                                capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": parent})
        assert report.returncode == 0, report.stderr
        table = [line for line in done.stdout.splitlines() if line.startswith(("incast-", "allreduce-"))]
        assert table and all(line in report.stdout for line in table)
        assert os.path.getsize(os.path.join(copy, "plots", "cct_cdf.png")) > 1000
    finally:
        shutil.rmtree(parent)


def test_ctrl_c_keeps_finished_variants_and_leaves_nothing(tmp_path):
    (tmp_path / "tiny.toml").write_text(TINY.replace('collective = "allreduce"', 'collective = "allreduce"\niterations = 500'))
    proc = subprocess.Popen([sys.executable, "-m", "emulator", "run", str(tmp_path / "tiny.toml"),
                             "--out", str(tmp_path / "results")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=stop_signals_at_default)
    read_until(proc, "allreduce-lossy iteration 3/", "the second variant")  # well into the second variant
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    data = json.load(open(os.path.join(_results_dir(tmp_path / "results"), "results.json")))
    assert data["complete"] is False
    assert [v["name"] for v in data["variants"]] == ["incast-lossless"]
    # The no_leftovers fixture checks that no run and no namespace is left.


def test_unknown_experiment_is_one_line():
    done = _fabric_emu("run", "no-such-experiment", timeout=30)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "no-such-experiment" in done.stderr
