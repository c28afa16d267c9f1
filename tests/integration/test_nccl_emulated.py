"""``fabric-emu nccl`` on the emulator: a small all-reduce sweep on real namespaces, and Ctrl-C in the middle of one.

8 B to 64 KiB on star,4: the smallest sizes give ranks empty chunks (zero-length WRITEs with immediate through the
compiled RNIC and switch), and every size's all-reduce is checked by every rank.  The no_leftovers fixture
(conftest.py) checks that nothing is left behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from launcher_signals import read_until, stop_signals_at_default


def _nccl(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", "nccl", *args], capture_output=True, text=True,
                          **kwargs)


def test_an_emulated_sweep_prints_every_size_checked(tmp_path):
    done = _nccl("--topo", "star,4", "-b", "8", "-e", "64K", "-n", "3", "-w", "1", "--out", str(tmp_path / "results"),
                 "-J", str(tmp_path / "sweep.json"), timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line and not line.startswith("#")]
    assert [int(row[0]) for row in rows] == [8 << i for i in range(14)]
    assert all(row[8] == "0" and row[9] in ("yes", "NO") for row in rows)  # every rank's sum exact
    assert "backend emulator" in done.stdout and "# Out of bounds values : 0 OK" in done.stdout
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert [r["size"] for r in report["results"]] == [int(row[0]) for row in rows]
    assert all(r["in_place"]["nwrong"] == 0 and r["actual_iterations"] == 3 for r in report["results"])
    directory = report["config"]["results_directory"]
    results = json.load(open(f"{directory}/results.json"))
    assert results["complete"] is True and all(v["backend"] == "emulator" for v in results["variants"])


def test_ctrl_c_in_a_sweep_leaves_nothing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "emulator", "nccl", "--topo", "star,4", "-b", "8", "-e", "1M",
                             "-n", "500", "-w", "0", "--out", str(tmp_path / "results")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=stop_signals_at_default)
    read_until(proc, "nccl-size16 iteration 3/", "its second size")  # into the second size's fabric
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and out == ""
