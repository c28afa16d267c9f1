"""The numeric flags of scripts/*.py and bench/*.py: each has a range, and a value outside it is one line.

They had none (`type=int`, `type=float`): a `--seconds 0` incast or a `--senders -1` star went on to build, and
failed half-way with a traceback, or ran a measurement of nothing.  The parse fails first, so nothing here
builds a fabric.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*REPO.glob("scripts/*.py"), *REPO.glob("bench/*.py")])


def _unranged_flags(path: Path) -> list[str]:
    """The flags of ``path`` whose type is a bare int or float."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for keyword in node.keywords:
                if keyword.arg == "type" and isinstance(keyword.value, ast.Name) and keyword.value.id in ("int",
                                                                                                         "float"):
                    found.append(ast.literal_eval(node.args[0]))
    return found


@pytest.mark.parametrize("path", SCRIPTS, ids=[f"{p.parent.name}/{p.name}" for p in SCRIPTS])
def test_every_numeric_flag_has_a_range(path):
    assert _unranged_flags(path) == []


@pytest.mark.parametrize("script, args, line", [
    ("scripts/incast.py", ["--seconds", "0"], "incast.py: --seconds '0': must be 1 to 3600"),
    ("scripts/pfc_timing.py", ["--senders", "5000"], "pfc_timing.py: --senders '5000': must be 1 to 2046"),
    ("scripts/lossless_soak.py", ["--runs", "0"], "lossless_soak.py: --runs '0': must be 1 to 10000"),
    ("scripts/rdma_perf.py", ["--loss", "2"], "rdma_perf.py: --loss '2': must be 0 to 1"),
    ("scripts/headroom_sweep.py", ["--mtu", "9" * 5000], "headroom_sweep.py: --mtu '99999"),
    ("bench/bench_python_floor.py", ["--seconds", "nan"], "bench_python_floor.py: --seconds 'nan': must be 0.5 to 60"),
    ("bench/bench_rnic.py", ["--mtu", "100"], "bench_rnic.py: --mtu '100': must be 256 to 4096"),
    ("bench/bench_sim_engine.py", ["--events", "10", "--pending", "11"],
     "bench_sim_engine.py: --pending 11: must be at most --events (10)"),
])
def test_a_number_out_of_its_range_is_one_line(script, args, line):
    done = subprocess.run([sys.executable, str(REPO / script), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(line), done.stderr
