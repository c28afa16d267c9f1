"""A training step placed on the hosts (workload_plan.py), run on the simulator, and read back (workload_step.py)."""

import os
import subprocess
import sys
import textwrap

import pytest

from emulator.collectives.sim_ranks import run_rust_workload
from emulator.collectives.workload_plan import (issue_times, parse_parallel, parse_placement, plan_from_json,
                                                plan_to_json, workload_plan)
from emulator.errors import FabricError
from emulator.fabric.plan import make_plan
from emulator.fabric.topospec import build_topo
from emulator.study.experiment import load_experiment
from emulator.study.sim_fabric import build_rust_fabric
from emulator.study.workload_step import step_figures
from emulator.workload.files import read_workload
from emulator.workload.step import CommOp, Workload

HERE = os.path.join(os.path.dirname(__file__), "workloads")
MIB = 1 << 20


def step_of(*ops: CommOp, tail: int = 0, parallelism: dict | None = None) -> Workload:
    return Workload("test", (tuple(ops),), tail, parallelism or {"tp": 2})


def every_send_pairs(plan) -> None:
    """Each WRITE arrives for a step of its receiver that expects it, as often as it is expected."""
    sent, expected = [], []
    for rank in plan.ranks:
        for k, step in enumerate(rank.steps):
            sent += [(s.dst, s.at_step, rank.rank) for s in step.sends]
            expected += [(rank.rank, k, src) for src in step.receives]
    assert sorted(sent) == sorted(expected)


def test_the_default_placement_puts_tensor_parallel_groups_on_consecutive_hosts():
    plan = workload_plan(step_of(CommOp("all_reduce", "tp", 2, MIB, "a"), CommOp("all_reduce", "dp", 0, MIB, "b")),
                         8, parse_parallel("dp=4"))
    assert plan.parallelism == {"tp": 2, "dp": 4, "pp": 1} and plan.world == 8
    tp_peers = {rank.rank: {s.dst for s in rank.steps[0].sends} for rank in plan.ranks}
    assert tp_peers[0] == {1} and tp_peers[6] == {7}
    dp_ring = {rank.rank: rank.steps[plan.ranks[0].ops[1].first].sends[0].dst for rank in plan.ranks}
    assert dp_ring[0] == 2 and dp_ring[6] == 0 and dp_ring[1] == 3  # every other host, across the leaves
    every_send_pairs(plan)
    swapped = workload_plan(step_of(CommOp("all_reduce", "tp", 2, MIB, "a")), 8, parse_parallel("dp=4"),
                            parse_placement("dp,tp,pp"))
    assert {s.dst for s in swapped.ranks[0].steps[0].sends} == {4}  # tp now strides over the dp ranks


def test_each_kind_makes_its_algorithm_and_the_sends_pair_up():
    kinds = [CommOp(kind, "dp", 4, 4096, kind) for kind in ("all_reduce", "all_gather", "reduce_scatter",
                                                             "all_to_all", "broadcast", "barrier")]
    plan = workload_plan(step_of(*kinds, parallelism={"tp": 1}), 4)
    steps = [span.steps for span in plan.ranks[1].ops]
    assert steps == [6, 3, 3, 1, 2, 3]  # 2(G-1), G-1, G-1, one, receive then pass on, G-1
    assert [span.steps for span in plan.ranks[0].ops][4] == 1 and [s.steps for s in plan.ranks[3].ops][4] == 1
    every_send_pairs(plan)
    assert all(step.reduce is None for rank in plan.ranks for step in rank.steps)  # bytes moved, not summed


def test_a_pipeline_batches_a_send_and_a_receive_to_the_same_stage_and_refuses_a_cycle():
    send, recv = CommOp("send", "pp", 1, MIB, "s", peer="next"), CommOp("recv", "pp", 1, MIB, "r", peer="next")
    back_send = CommOp("send", "pp", 1, MIB, "s", peer="prev")
    back_recv = CommOp("recv", "pp", 1, MIB, "r", peer="prev")
    batched = Workload("pp", ((recv, send), (back_send, back_recv)), 0, {"tp": 1, "pp": 2})
    plan = workload_plan(batched, 2)
    assert [len(r.steps) for r in plan.ranks] == [1, 1]  # each stage's pair went as one step
    every_send_pairs(plan)
    # the same with compute between the two: each stage waits for the other's send, which comes after its wait
    late = CommOp("send", "pp", 1, MIB, "s", compute_ns=5, peer="next")
    late_back = CommOp("send", "pp", 1, MIB, "s", compute_ns=5, peer="prev")
    with pytest.raises(FabricError, match=r"cycle: the step cannot finish: rank 0 waits in collective 0 for "
                                          r"rank\(s\) 1|the step cannot finish: rank 0 waits in collective 0"):
        workload_plan(Workload("pp", ((recv, late), (back_recv, late_back)), 0, {"tp": 1, "pp": 2}), 2)


def test_a_job_larger_than_the_fabric_or_an_expert_group_is_one_line():
    aicb = read_workload(os.path.join(HERE, "small_aicb.csv"))  # tp 2, dp 4
    with pytest.raises(FabricError, match=r"tp 2 x dp 4 x pp 1\) make 8 ranks, the fabric has 4 hosts; set "
                                          r"parallel \(e.g. \"dp=2\"\)"):
        workload_plan(aicb, 4)
    assert workload_plan(aicb, 4, parse_parallel("dp=2")).world == 4
    expert = step_of(CommOp("all_to_all", "ep", 2, MIB, "moe"), parallelism={"tp": 1, "ep": 2})
    with pytest.raises(FabricError, match="expert-parallel"):
        workload_plan(expert, 4)
    for bad in ("tp=0", "tp=2,tp=2", "xp=2", "tp=9999999999"):
        with pytest.raises(FabricError, match="parallel"):
            parse_parallel(bad)
    with pytest.raises(FabricError, match="placement 'tp,tp,pp'"):
        parse_placement("tp,tp,pp")


def test_issue_times_follow_the_compute_and_the_stream():
    from emulator.collectives.algorithms import OpSpan
    spans = (OpSpan(0, 0, 1, 100, True), OpSpan(1, 1, 1, 50, False), OpSpan(2, 2, 1, 10, True))
    # op 0 issued at 100, done 300; op 1 issued at 350, begins 350, done 900 (not blocking: compute goes on);
    # op 2 issued at 360 but begins when op 1 is done, at 900
    assert issue_times(spans, 0, [300, 900, 1000]) == [(100, 100), (350, 350), (360, 900)]


def test_the_coordinators_message_round_trips_and_a_bad_one_is_a_value_error():
    plan = workload_plan(step_of(CommOp("all_reduce", "tp", 2, 4096, "a", compute_ns=7)), 2)
    assert plan_from_json(0, plan_to_json(plan.ranks[0])) == plan.ranks[0]
    with pytest.raises(ValueError, match="plan is not one"):
        plan_from_json(0, {"data": 1, "staging": 0, "steps": [[[["x"]], []]], "ops": []})


def simulate(workload: Workload, hosts: int, parallel: str = "", iterations: int = 2):
    plan = workload_plan(workload, hosts, parse_parallel(parallel) if parallel else None)
    fabric_plan = make_plan(build_topo(f"star,{hosts}"), "sim", {"bw": "10gbit", "delay": "1us", "mtu": "4200"})
    names = [node.name for node in fabric_plan.hosts()]
    run = run_rust_workload(build_rust_fabric(fabric_plan, "lossless", {}), names, plan, iterations, 1, 4096)
    return plan, run


def test_a_simulated_step_waits_for_blocking_collectives_and_overlaps_the_others():
    blocking = step_of(CommOp("all_reduce", "dp", 0, 4 * MIB, "grad", compute_ns=1_000_000),
                       tail=2_000_000, parallelism={"tp": 1})
    overlapped = step_of(CommOp("all_reduce", "dp", 0, 4 * MIB, "grad", compute_ns=1_000_000, blocking=False),
                         tail=2_000_000, parallelism={"tp": 1})
    plan, run = simulate(blocking, 4)
    figures = step_figures(plan, run)
    comm = figures["comm_us"]
    assert comm > 1000  # 6 steps of 1 MiB at 10 Gbit/s: about 5 ms
    assert figures["step_us"] == pytest.approx(1000 + comm + 2000, abs=1)
    assert figures["exposed_us"] == pytest.approx(comm, abs=1) and figures["held_by"]["kind"] == "all_reduce"
    plan, run = simulate(overlapped, 4)
    overlap = step_figures(plan, run)
    # the tail's 2 ms of compute run beside the all-reduce: only what is left of it after them is exposed
    assert overlap["step_us"] == pytest.approx(1000 + comm, rel=0.01)
    assert overlap["exposed_us"] == pytest.approx(comm - 2000, rel=0.02)
    assert overlap["by_type"]["all_reduce dp"]["comm_us"] == pytest.approx(comm, rel=0.01)
    assert [it.cct_us for it in run.iterations] == [pytest.approx(overlap["step_us"], rel=0.01)] * 2


def test_the_published_formats_small_files_run_on_the_simulator():
    for name, parallel in (("small_aicb.csv", "dp=4"), ("small_simai.txt", "dp=4")):
        plan, run = simulate(read_workload(os.path.join(HERE, name)), 8, parallel, iterations=1)
        figures = step_figures(plan, run)
        assert figures["ops"] == len(plan.ops) and figures["step_us"] > 0
        assert figures["exposed_us"] <= figures["comm_us"] + 1e-3


HOSTILE = {
    "truncated.txt": "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2\n3\n"
                     "l0 -1 10 ALLREDUCE 1024 10 NONE 0 10 NONE 0 10\n",
    "huge.csv": "comm_type,comm_group,comm_group_size,msg_size,stage,count\n"
                "CommType.epoch_end,None,None,0,,1\nCommType.all_reduce,CommGroup.tp_group,2,1024,f,99999999999\n",
    "wide.csv": "comm_type,comm_group,comm_group_size,msg_size,stage,count\n"
                "CommType.all_reduce,CommGroup.dp_group,512,1024,f,1\n",
}


@pytest.mark.parametrize("name,message", [
    ("truncated.txt", r"truncated.txt: line 4: the file ends after 1 of its 3 layers"),
    ("huge.csv", r"huge.csv: line 3: count 99999999999 is out of range"),
    ("wide.csv", r"make 512 ranks, the fabric has 4 hosts"),
])
def test_a_hostile_workload_is_one_line_before_anything_runs(tmp_path, name, message):
    (tmp_path / name).write_text(HOSTILE[name])
    (tmp_path / "x.toml").write_text(textwrap.dedent(f"""\
        name = "x"
        topo = "star,4"
        workload = "{name}"
        [[variants]]
        name = "step"
        """))
    with pytest.raises(FabricError, match=message):
        load_experiment(str(tmp_path / "x.toml"))
    # and through the command: one line, exit 1, no results directory
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "emulator", "run", str(tmp_path / "x.toml"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_workload_keys_are_checked():
    for table, message in (('collective = "allreduce"\nworkload = "w.csv"\n', r'key "collective": a workload'),
                           ('collective = "allreduce"\nsize = "1MiB"\nscale = 0.5\n', r'key "scale" places'),
                           ('workload = "w.csv"\nscale = 2\n', r'key "scale": expected a number')):
        with pytest.raises(FabricError, match=message):
            from emulator.study.experiment import build_experiment
            import tomllib
            build_experiment(tomllib.loads(f'name = "x"\ntopo = "star,4"\n{table}[[variants]]\nname = "v"\n'),
                             "x.toml", "/nonexistent/x.toml")


def test_a_collectives_bound_adds_its_steps_and_each_steps_last_frame():
    from emulator.study.workload_step import ideal_step_us, op_link_us
    plan = workload_plan(step_of(CommOp("all_reduce", "tp", 2, 2048, "small", compute_ns=3000), tail=1000), 2)
    wire = lambda length: length + 100  # noqa: E731 (a frame's headers, say)
    # two steps of 1 KiB each way: each the message on the sender's link, then its last frame on the receiver's
    (bound,) = op_link_us(plan, wire, 8_000_000_000, 4096)
    assert bound == pytest.approx(2 * (1124 + 1124) * 8 / 8e9 * 1e6)
    big = workload_plan(step_of(CommOp("all_reduce", "tp", 2, 1 << 20, "big")), 2)
    (large,) = op_link_us(big, wire, 8_000_000_000, 4096)  # frames of 4 KiB: the message, then one frame
    assert large == pytest.approx(2 * ((524288 + 100) + (4096 + 100)) * 8 / 8e9 * 1e6)
    assert ideal_step_us(plan, [bound]) == pytest.approx(3 + bound + 1)
