"""The Chakra execution-trace reader (emulator.workload.chakra), on traces encoded here with its own message
classes: a step's collectives in dependency order with the device compute between them and whether the compute
after each waits for it; sends and receives; and hostile traces, each a single line naming the file, the record
and the field."""

from __future__ import annotations

import pytest

from emulator.errors import FabricError
from emulator.workload import chakra
from emulator.workload.chakra import (COLLECTIVES, COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE,
                                      AttributeProto, Node, read_chakra)
from emulator.workload.files import MAX_MESSAGE_BYTES, CommOp, read_workload

METADATA_NODE = 1
MIB = 1 << 20


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def framed(payload: bytes) -> bytes:
    return varint(len(payload)) + payload


METADATA = framed(b"\x0a\x051.0.1")  # GlobalMetadata { version: "1.0.1" }


def node(node_id: int, kind: int, name: str = "", deps: tuple[int, ...] = (), micros: int = 0,
         **attrs: object) -> bytes:
    """A Node's bytes; ``attrs`` by name, each ``(oneof field, value)`` or a value whose type picks the field."""
    message = Node(id=node_id, name=name or f"n{node_id}", type=kind, data_deps=deps, duration_micros=micros)
    for key, value in attrs.items():
        field, value = value if isinstance(value, tuple) else (
            {bool: "bool_val", str: "string_val"}.get(type(value), "int64_val"), value)
        message.attr.append(AttributeProto(name=key, **{field: value}))
    return message.SerializeToString()


def comp(node_id: int, micros: int, deps: tuple[int, ...] = (), cpu: bool = False) -> bytes:
    return node(node_id, COMP_NODE, deps=deps, micros=micros, **({"is_cpu_op": True} if cpu else {}))


def coll(node_id: int, kind: str, size: int, deps: tuple[int, ...] = (), pg: str = "") -> bytes:
    return node(node_id, COMM_COLL_NODE, f"{kind.lower()}_{node_id}", deps, micros=777,  # its measured time: unused
                comm_type=COLLECTIVES[kind], comm_size=size, **({"pg_name": pg} if pg else {}))


def trace(*nodes: bytes) -> bytes:
    return METADATA + b"".join(framed(n) for n in nodes)


def written(tmp_path, data: bytes, name: str = "t.0.et") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_a_forward_and_backward_step_keeps_its_order_compute_and_waits(tmp_path):
    data = trace(
        coll(8, "REDUCE_SCATTER", 4 * MIB, (6,), pg="0"),  # the stream's order is not the step's
        comp(1, 100),
        coll(2, "ALL_REDUCE", MIB, (1,), pg="tp_group"),
        comp(3, 200, (2,)),  # waits for the tensor-parallel all-reduce: blocking
        comp(30, 999, (3,), cpu=True),  # the host's: no time on the compute stream
        node(31, COMM_COLL_NODE, "c10d::allreduce_", (30,), micros=50, is_cpu_op=True),  # the host's launch
        comp(4, 300, (3, 31)),
        coll(5, "ALL_REDUCE", 2 * MIB, (4,), pg="DATA_PARALLEL_GROUP"),  # a weight gradient's
        comp(6, 400, (4,)),  # does not wait for node 5: not blocking
        comp(9, 50, (8, 5)),
    )
    workload = read_workload(written(tmp_path, data))
    assert workload.stages == ((
        CommOp("all_reduce", "tp", 0, MIB, "all_reduce_2 (pg tp_group)", 100_000),
        CommOp("all_reduce", "dp", 0, 2 * MIB, "all_reduce_5 (pg DATA_PARALLEL_GROUP)", 500_000, blocking=False),
        CommOp("reduce_scatter", "all", 0, 4 * MIB, "reduce_scatter_8 (pg 0)", 400_000),
    ),)
    assert workload.tail_compute_ns == 50_000 and workload.parallelism == {}
    assert workload.source == str(tmp_path / "t.0.et")


def test_a_collective_is_blocking_through_other_nodes_and_not_when_nothing_follows(tmp_path):
    data = trace(
        comp(1, 10),
        coll(2, "ALL_GATHER", 64, (1,), pg="mesh_ep"),
        coll(3, "BROADCAST", 32, (1,), pg="pp:1"),
        node(4, METADATA_NODE, deps=(2,)),
        comp(5, 20, (4,)),  # waits for node 2 through node 4, not for node 3
        node(6, COMM_COLL_NODE, deps=(5,), comm_type=COLLECTIVES["BARRIER"]),  # no size: 0; nothing after it
        coll(7, "REDUCE_SCATTER_BLOCK", 128, (5,), pg="tp and dp"),  # two groups named: the whole job
    )
    (ops,) = read_workload(written(tmp_path, data)).stages
    assert [(op.kind, op.group, op.size, op.compute_ns, op.blocking) for op in ops] == [
        ("all_gather", "ep", 64, 10_000, True), ("broadcast", "pp", 32, 0, False),
        ("barrier", "all", 0, 20_000, False), ("reduce_scatter", "all", 128, 0, False)]


def test_sends_and_receives_take_their_peer_stage_from_the_ranks(tmp_path):
    data = trace(
        comp(1, 5),
        node(2, COMM_SEND_NODE, "send", (1,), comm_size=4096, comm_dst=("int32_val", 3)),
        node(3, COMM_RECV_NODE, "recv", (2,), comm_size=4096, comm_src=("int32_val", 1), pg_name="pp"),
        node(4, COMM_SEND_NODE, "send", (3,), comm_size=8),  # no peer given
    )
    (ops,) = read_chakra(written(tmp_path, data, "pp.2.et")).stages
    assert [(op.kind, op.group, op.size, op.peer) for op in ops] == [
        ("send", "all", 4096, "next"), ("recv", "pp", 4096, "prev"), ("send", "all", 8, "")]
    with pytest.raises(FabricError, match=r"pp.et: record 3 \(node 2\): attr comm_dst 3: the file's name gives no "
                                          r"rank"):
        read_chakra(written(tmp_path, data, "pp.et"))
    with pytest.raises(FabricError, match=r"pp.3.et: record 3 \(node 2\): attr comm_dst 3 is this file's own rank"):
        read_chakra(written(tmp_path, data, "pp.3.et"))


def test_a_directory_gives_its_lowest_ranks_trace_and_says_so(tmp_path):
    for rank, size in ((10, 1), (3, 2), (1, 3)):
        written(tmp_path, trace(coll(1, "ALL_REDUCE", size)), f"job.{rank}.et")
    (tmp_path / "notes.txt").write_text("not a trace")
    workload = read_workload(str(tmp_path))
    assert workload.stages[0][0].size == 3
    assert workload.source == f"{tmp_path}/job.1.et (rank 1: the lowest-numbered of 3 trace(s) in {tmp_path})"
    written(tmp_path, trace(coll(1, "ALL_REDUCE", 4)), "other.1.et")
    with pytest.raises(FabricError, match=r"two traces of rank 1: 'job.1.et' and 'other.1.et'"):
        read_workload(str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FabricError, match=r"empty: no <name>.<rank>.et file: not a directory of Chakra traces"):
        read_workload(str(empty))


def _prefix_cut() -> tuple[bytes, str]:
    return METADATA + b"\x80", f"record 2 at byte {len(METADATA)}: the file ends inside the length prefix"


def _past_end() -> tuple[bytes, str]:
    return (METADATA + b"\x05ab",
            f"record 2 at byte {len(METADATA)}: length 5 runs past the end of the file (2 bytes left)")


HOSTILE = [
    (b"", "empty: a Chakra trace begins with its GlobalMetadata"),
    _prefix_cut(),
    _past_end(),
    (b"\xff" * 11, "record 1 at byte 0: a length prefix over 10 bytes: not a Chakra trace"),
    (framed(b"\x07\x00"), "record 1: not a GlobalMetadata: its bytes are not protobuf of that message"),
    (METADATA + framed(b"\xff\xff\xff"), "record 2: not a Chakra Node: its bytes are not protobuf of that message"),
    (trace(comp(1, 5, (2,)), comp(2, 5, (1,)), coll(3, "ALL_REDUCE", 8)),
     "record 2 (node 1): data_deps: a cycle of 2 node(s), each waiting for the next: 1 -> 2 -> 1"),
    (trace(coll(3, "ALL_REDUCE", 8), comp(4, 5, (4,))),
     "record 3 (node 4): data_deps: a cycle of 1 node(s), each waiting for the next: 4 -> 4"),
    (trace(coll(1, "ALL_REDUCE", 8, (9,))), "record 2 (node 1): data_deps: node 9 is not in the file"),
    (trace(coll(1, "ALL_REDUCE", MAX_MESSAGE_BYTES + 1)),
     f"record 2 (node 1): attr comm_size {MAX_MESSAGE_BYTES + 1} is out of range (0 to {MAX_MESSAGE_BYTES})"),
    (trace(coll(1, "ALL_REDUCE", -8)), "record 2 (node 1): attr comm_size -8 is out of range"),
    (trace(coll(1, "REDUCE", 8)), "record 2 (node 1): attr comm_type 1 (REDUCE) is not one of ALL_REDUCE, "
                                  "ALL_GATHER, BROADCAST, ALL_TO_ALL, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, BARRIER"),
    (trace(node(1, COMM_COLL_NODE, comm_type=42, comm_size=8)),
     "record 2 (node 1): attr comm_type 42 (not in the schema) is not one of ALL_REDUCE"),
    (trace(node(1, COMM_COLL_NODE, comm_type="ALL_REDUCE", comm_size=8)),
     "record 2 (node 1): attr comm_type: not an integer (int64_val, uint64_val, int32_val, uint32_val)"),
    (trace(node(1, COMM_COLL_NODE, comm_size=8)), "record 2 (node 1): attr comm_type: missing"),
    (trace(node(1, COMM_COLL_NODE, comm_type=0)), "record 2 (node 1): attr comm_size: missing"),
    (trace(node(1, COMM_RECV_NODE, comm_size=8, comm_src=("int32_val", -1))),
     "record 2 (node 1): attr comm_src -1 is out of range"),
    (trace(node(1, COMP_NODE, is_cpu_op=1)), "record 2 (node 1): attr is_cpu_op: not a bool_val"),
    (trace(node(1, COMM_COLL_NODE, comm_type=0, comm_size=8, pg_name=7)),
     "record 2 (node 1): attr pg_name: not a string_val"),
    (trace(Node(id=1, type=COMM_COLL_NODE, attr=[AttributeProto(name="comm_type", int64_val=0)] + [
        AttributeProto(name="comm_size", int64_val=size) for size in (8, 9)]).SerializeToString()),
     "record 2 (node 1): attr comm_size: given twice"),
    (trace(comp(1, 5), coll(1, "ALL_REDUCE", 8)), "record 3 (node 1): id: record 2 has that id too"),
    (trace(comp(1, 3_600_000_001)), "record 2 (node 1): duration_micros 3600000001 is out of range"),
    (trace(comp(1, 3_000_000_000), comp(2, 3_000_000_000, (1,)), coll(3, "ALL_REDUCE", 8, (2,))),
     "record 3 (node 2): duration_micros: over 3600 s of compute between two collectives"),
    (trace(comp(1, 5)), "no collective in the step"),
]


@pytest.mark.parametrize("data, message", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_trace_is_one_line_naming_the_file_record_and_field(tmp_path, data, message):
    path = written(tmp_path, data)
    with pytest.raises(FabricError) as caught:
        read_workload(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: {message}"), text
    assert "\n" not in text


def test_too_many_nodes_or_communication_nodes_or_bytes_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(chakra, "MAX_NODES", 3)
    data = trace(comp(1, 5), comp(2, 5), coll(3, "ALL_REDUCE", 8), comp(4, 5))
    offset = len(trace(comp(1, 5), comp(2, 5), coll(3, "ALL_REDUCE", 8)))
    with pytest.raises(FabricError, match=rf"t.0.et: record 5 at byte {offset}: over 3 nodes$"):
        read_workload(written(tmp_path, data))
    with pytest.raises(FabricError, match=r"t.0.et: record 2 \(node 1\): data_deps: 4 of them, the file may hold 3 "
                                          r"nodes$"):
        read_workload(written(tmp_path, trace(comp(1, 5, (2, 3, 4, 5)))))
    monkeypatch.setattr(chakra, "MAX_DEPENDENCIES", 2)
    with pytest.raises(FabricError, match=r"t.0.et: record 4 \(node 3\): data_deps: over 2 dependencies in the "
                                          r"file$"):
        read_workload(written(tmp_path, trace(comp(1, 5), comp(2, 5, (1,)), comp(3, 5, (1, 2)))))
    monkeypatch.setattr(chakra, "MAX_OPS", 2)
    data = trace(*(coll(i, "ALL_REDUCE", 8) for i in range(3)))
    with pytest.raises(FabricError, match=r"t.0.et: record 4 \(node 2\): over 2 communication nodes$"):
        read_workload(written(tmp_path, data))
    big = tmp_path / "big.0.et"
    with open(big, "wb") as f:
        f.truncate(chakra.MAX_TRACE_BYTES + 1)
    with pytest.raises(FabricError, match=r"big.0.et: over 64 MiB: not a Chakra trace this reader takes$"):
        read_workload(str(big))
    with pytest.raises(FabricError, match=r"nothing.0.et: No such file or directory$"):
        read_workload(str(tmp_path / "nothing.0.et"))


def test_the_workload_command_sums_up_a_chakra_trace(capsys, tmp_path):
    from emulator import cli

    data = trace(comp(1, 1000), coll(2, "ALL_REDUCE", MIB, (1,), pg="dp"), comp(3, 500, (1,)),
                 coll(4, "ALL_TO_ALL", 1024, (3,), pg="ep"))
    path = written(tmp_path, data)
    assert cli.main(["workload", path]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: 1 pipeline stage(s); groups none given",
        "stage 0: 2 collectives, 1.00 MiB, compute 1.50 ms",
        "  all_reduce      dp              1  1 MiB",
        "  all_to_all      ep              1  1024 B"]
    assert cli.main(["workload", written(tmp_path, trace(comp(1, 5)), "bad.0.et")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.0.et: no collective in the step" in err
