"""Readers of training-workload files (emulator.workload.files), on small files of our own in the published
formats (tests/unit/workloads/), and on hostile ones: each a single line naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.errors import FabricError
from emulator.workload.files import MAX_FILE_BYTES, MAX_OPS, CommOp, read_workload

HERE = Path(__file__).parent / "workloads"


def test_an_aicb_csv_step_is_the_rows_between_its_first_two_markers():
    workload = read_workload(str(HERE / "small_aicb.csv"))
    assert workload.parallelism == {"dp": 4, "tp": 2}
    (ops,) = workload.stages
    assert [(op.kind, op.group, op.size) for op in ops] == (
        [("broadcast", "tp", 40)] + [("all_reduce", "tp", 1 << 20)] * 6
        + [("reduce_scatter", "dp", 4 << 20), ("all_gather", "dp", 2 << 20)])
    assert ops[1].stage == "forward.RowLinear" and all(op.compute_ns == 0 for op in ops)


def test_a_simai_step_runs_forward_then_backward_in_reverse_with_its_compute():
    workload = read_workload(str(HERE / "small_simai.txt"))
    assert workload.parallelism == {"tp": 2}
    mib = 1 << 20
    assert workload.stages == ((
        CommOp("all_reduce", "tp", 2, 65536, "forward.embedding_layer", 1),
        CommOp("all_reduce", "tp", 2, mib, "forward.attention_layer", 5000),
        CommOp("all_reduce", "tp", 2, mib, "forward.mlp_layer", 4000),
        CommOp("all_reduce", "tp", 2, mib, "input_gradient.mlp_layer", 5000),
        # mlp's weight gradient has no collective: its compute and update come before attention's input gradient
        CommOp("all_reduce", "tp", 2, mib, "input_gradient.attention_layer", 6000 + 100 + 6000),
        CommOp("all_reduce", "dp", 0, 2 * mib, "weight_gradient.attention_layer", 7000, blocking=False),
        CommOp("all_reduce", "tp", 2, 65536, "input_gradient.embedding_layer", 100 + 1),
    ),)
    assert workload.tail_compute_ns == 1 + 100


SIMAI_HEAD = "HYBRID_TRANSFORMER_FWD_IN_BCKWD\tmodel_parallel_NPU_group: 2\n"
LAYER = "attention\t-1\t5\tALLREDUCE\t64\t5\tALLREDUCE\t64\t5\tNONE\t0\t1\n"
AICB_HEAD = "comm_type,comm_group,comm_group_size,msg_size,stage,count\n"


@pytest.mark.parametrize("name, content, message", [
    ("t.txt", SIMAI_HEAD + "3\n" + LAYER, "t.txt: line 4: the file ends after 1 of its 3 layers"),
    ("t.txt", SIMAI_HEAD + "1\n" + LAYER.replace("\t-1", ""), "t.txt: line 3: 11 fields, a layer has 12"),
    ("t.txt", SIMAI_HEAD + "1\n" + LAYER.replace("ALLREDUCE", "SCATTER", 1),
     "t.txt: line 3: forward type 'SCATTER' is not one of ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, "
     "BROADCAST, NONE"),
    ("t.txt", SIMAI_HEAD + "1\n" + LAYER.replace("\t64\t", "\t99999999999999999\t", 1),
     "t.txt: line 3: forward size 99999999999999999 is out of range (0 to 1099511627776)"),
    ("t.txt", SIMAI_HEAD + "1\n" + LAYER.replace("\t5\t", "\t5ms\t", 1),
     "t.txt: line 3: forward compute time '5ms' is not a whole number"),
    ("t.txt", SIMAI_HEAD + "1\n" + LAYER.replace("\t5\t", "\t\u00b2\t", 1),
     "t.txt: line 3: forward compute time '\u00b2' is not a whole number"),
    ("t.csv", AICB_HEAD + "CommType.all_reduce,CommGroup.tp_group,\u0661,64,x,1\n",
     "t.csv: line 2: comm_group_size '\u0661' is not a whole number"),
    ("t.txt", SIMAI_HEAD + f"{10**9}\n" + LAYER, "t.txt: line 2: layer count 1000000000 is out of range (1 to 33333)"),
    ("t.txt", "HYBRID\tcheckpoints: 0\n1\n" + LAYER, "t.txt: line 1: no model_parallel_NPU_group"),
    ("t.txt", SIMAI_HEAD + "1\n" + LAYER.replace("ALLREDUCE", "NONE"), "t.txt: no collective in the step"),
    ("t.csv", AICB_HEAD + "CommType.all_reduce,CommGroup.tp_group,2,64,x,100001\n",
     "t.csv: line 2: count 100001 is out of range (1 to 100000)"),
    ("t.csv", AICB_HEAD + "CommType.all_reduce,CommGroup.tp_group,2,64,x,60000\n"
                          "CommType.all_reduce,CommGroup.tp_group,2,64,x,60000\n",
     f"t.csv: line 3: count 60000: the step would hold over {MAX_OPS} collectives"),
    ("t.csv", AICB_HEAD + "CommType.gather,CommGroup.tp_group,2,64,x,1\n",
     "t.csv: line 2: comm_type 'CommType.gather' is not one of CommType.all_reduce"),
    ("t.csv", "comm_type\n[rank0 ~ rank1]\n" + AICB_HEAD, "t.csv: line 1: rows before the first [ranks] line"),
    ("t.csv", AICB_HEAD + "CommType.all_reduce,CommGroup.world,2,64,x,1\n",
     "t.csv: line 2: comm_group 'CommGroup.world' is not one of CommGroup.tp_group"),
    ("t.csv", AICB_HEAD + "CommType.all_reduce,CommGroup.tp_group,2,64,x,1\n"
                          "CommType.all_reduce,CommGroup.tp_group,4,64,x,1\n",
     "t.csv: line 3: comm_group_size 4: the tp group had 2 ranks before"),
    ("t.csv", AICB_HEAD + "CommType.all_reduce,CommGroup.tp_group,2,-64,x,1\n",
     "t.csv: line 2: msg_size -64 is out of range (0 to 1099511627776)"),
    ("t.csv", AICB_HEAD + "CommType.all_reduce,CommGroup.tp_group,2,64,x\n", "t.csv: line 2: 5 fields, the header names 6"),
    ("t.csv", "comm_type,comm_group,msg_size\n", "t.csv: line 1: no column 'comm_group_size': not an AICB workload"),
    ("t.csv", AICB_HEAD + "CommType.epoch_end,None,None,0,,1\n", "t.csv: line 1: no collective in the step"),
    ("t.csv", "", "t.csv: line 1: no header line: not an AICB workload"),
])
def test_a_hostile_workload_file_is_one_line_naming_the_file_line_and_field(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(FabricError) as caught:
        read_workload(str(path))
    text = str(caught.value)
    assert text.startswith(str(tmp_path / message.split(":")[0]) + ":" + message.split(":", 1)[1]), text
    assert "\n" not in text


def test_a_file_too_large_or_not_text_or_missing_is_one_line(tmp_path):
    big = tmp_path / "big.csv"
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(FabricError, match=r"big.csv: over 16 MiB: not a workload file"):
        read_workload(str(big))
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"comm_type\xff\n")
    with pytest.raises(FabricError, match=r"bin.csv: byte 9: not UTF-8 text"):
        read_workload(str(binary))
    with pytest.raises(FabricError, match=r"nothing.csv: No such file or directory"):
        read_workload(str(tmp_path / "nothing.csv"))


def test_a_pipeline_parallel_aicb_file_gives_a_step_per_stage(tmp_path):
    stage = ("comm_type,comm_group,comm_group_size,msg_size,stage,additional,count\n"
             "CommType.epoch_end,None,None,0,,,1\n"
             "CommType.all_reduce,CommGroup.tp_group,2,1024,forward,,2\n"
             "CommType.{p2p},CommGroup.pp_group,1,4096,forward_step,{direction},1\n"
             "CommType.barrier,CommGroup.dp_group,2,0,step,,1\n")
    path = tmp_path / "pp.csv"
    path.write_text("[ pp_stage0: [rank0, rank1] ]\n" + stage.format(p2p="isend", direction="send_next")
                    + "[ pp_stage1: [rank2, rank3] ]\n" + stage.format(p2p="irecv", direction="recv_prev"))
    workload = read_workload(str(path))
    assert [[(op.kind, op.group, op.group_size, op.peer) for op in ops] for ops in workload.stages] == [
        [("all_reduce", "tp", 2, ""), ("all_reduce", "tp", 2, ""), (p2p, "pp", 1, peer), ("barrier", "dp", 2, "")]
        for p2p, peer in (("send", "next"), ("recv", "prev"))]
    assert workload.parallelism == {"tp": 2, "dp": 2}
    path.write_text("[ pp_stage0: [rank0, rank1] ]\n" + stage.format(p2p="isend", direction="recv_next"))
    with pytest.raises(FabricError, match=r"pp.csv: line 5: additional 'recv_next' is not send_next or send_prev"):
        read_workload(str(path))


def test_the_workload_command_sums_a_file_up_and_refuses_a_bad_one_in_one_line(capsys, tmp_path):
    from emulator import cli

    assert cli.main(["workload", str(HERE / "small_simai.txt")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["stage 0: 7 collectives, 6.12 MiB, compute 33.30 us",
                       "  all_reduce      dp              1  2 MiB",
                       "  all_reduce      tp              6  4.12 MiB"]
    bad = tmp_path / "bad.txt"
    bad.write_text("HYBRID\tmodel_parallel_NPU_group: 2\n2\n")
    assert cli.main(["workload", str(bad)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.txt: line 3: the file ends after 0 of its 2 layers" in err
