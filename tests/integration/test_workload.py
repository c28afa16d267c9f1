"""A training step (the workload collective) on real namespaces: the rank processes run it op by op, and the
simulator runs the same plans beside it.

The step is our own small SimAI file (tests/unit/workloads/small_simai.txt: tensor-parallel all-reduces with
compute between them, a data-parallel weight gradient that overlaps the backward pass), tp 2 x dp 2 on star,4.
The no_leftovers fixture (conftest.py) checks that nothing is left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from faithful import judge_only_if_faithful

HERE = os.path.dirname(os.path.abspath(__file__))
SIMAI = os.path.join(HERE, "..", "unit", "workloads", "small_simai.txt")


def test_an_emulated_step_runs_op_by_op_as_the_simulated_one(tmp_path):
    (tmp_path / "step.toml").write_text(f'''
name = "step"
topo = "star,4"
workload = "{SIMAI}"
parallel = "dp=2"
link = {{ bw = "20mbit", delay = "1ns" }}
model = "400gbit"
scale = 0.25
iterations = 2
warmup = 1

[[variants]]
name = "emu"

[[variants]]
name = "sim"
backend = "sim"
''')
    done = subprocess.run([sys.executable, "-m", "emulator", "run", str(tmp_path / "step.toml"), "--out",
                           str(tmp_path / "results")], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    (directory,) = [os.path.join(root, d) for root, dirs, _ in os.walk(tmp_path / "results" / "step") for d in dirs
                    if d.endswith("Z")]
    results = json.load(open(os.path.join(directory, "results.json")))
    emu, sim = results["variants"]
    for variant in (emu, sim):
        step = variant["workload"]
        assert step["ranks"] == 4 and step["parallelism"] == {"tp": 2, "dp": 2, "pp": 1}
        assert step["ops"] == 7 and len(step["timeline"]["ranks"]) == 4
        # the step is its compute and its exposed communication, on the rank that ended last
        assert abs(step["compute_us"] + step["exposed_us"] - step["step_us"]) <= 0.01 * step["step_us"]
        assert step["exposed_us"] <= step["comm_us"] + 1
        for rank in step["timeline"]["ranks"]:  # one collective after the other, each after its compute
            assert all(issue <= begun <= done for issue, begun, done, _ in rank)
            assert all(a[2] <= b[1] + 1e-3 for a, b in zip(rank, rank[1:]))
    assert "the step" in done.stdout or "training steps" in done.stdout
    judge_only_if_faithful(emu["fidelity"], "the backends' agreement on the step")
    assert abs(sim["cct_us"]["mean"] / emu["cct_us"]["mean"] - 1) < 0.10, (emu["cct_us"], sim["cct_us"])
