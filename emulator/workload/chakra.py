"""Reader of MLCommons Chakra execution traces (ET): one rank's step, its collectives in order with the compute
between them.

**The file.**  A Chakra trace (mlcommons/chakra, schema ``schema/protobuf/et_def.proto``) is one file per rank,
``<name>.<rank>.et``: a stream of protobuf messages, each after its length as a varint, a ``GlobalMetadata``
first (parsed only to check that it is protobuf), then the ``Node`` s.  The message classes are built here at
run time from the schema's field numbers (:data:`Node`, :data:`AttributeProto`), declaring only the fields this
reader uses; the others are skipped as unknown fields.  So neither protoc nor generated code is needed, and a
newer schema that adds fields still reads.  The framing is ours and bounded: a file of at most 64 MiB, every
length checked against what is left of it, at most :data:`MAX_NODES` nodes, :data:`MAX_DEPENDENCIES` dependencies
and :data:`~emulator.workload.step.MAX_OPS` communication nodes.  Given a directory, the lowest-numbered rank's
file is read, and the workload's ``source`` says so.

**Nodes** (their ``type``, the schema's NodeType):

- ``COMP_NODE``: compute on the device, ``duration_micros`` long.  A node whose ``is_cpu_op`` attribute is true
  is the host's (PyTorch's CPU operators, which launch the kernels and run beside them): it takes part in the
  dependencies but adds no time to the compute stream, which is the device's.
- ``COMM_COLL_NODE``: a collective: ``comm_type`` (the CollectiveCommType: ALL_REDUCE, ALL_GATHER,
  REDUCE_SCATTER or REDUCE_SCATTER_BLOCK, ALL_TO_ALL, BROADCAST, BARRIER; REDUCE, GATHER and SCATTER are
  refused), ``comm_size`` in bytes (0 for a barrier that gives none), ``pg_name`` its process group.  A host's
  node (``is_cpu_op``: PyTorch's ``c10d::allreduce_``, which launches the NCCL kernel that is the collective)
  takes part in the dependencies only: it is not the collective (ASTRA-sim runs it as the host's compute).
- ``COMM_SEND_NODE`` / ``COMM_RECV_NODE``: a send or a receive, ``comm_size`` bytes.  Its peer is ``comm_dst``
  (a send's) or ``comm_src`` (a receive's), where the trace gives it: a rank above this file's is the next
  pipeline stage, one below the previous, as this emulator places the stages (the pipeline coordinate
  outermost, Megatron-LM's order).  A peer given where the file's name tells no rank, or equal to it, is refused.
  A ring's wrap-around is not seen (rank 0 receiving from the last rank reads as the next stage): the peers this
  emulator runs are pipeline stages, and one file does not tell how many ranks the job has.
- every other type (metadata, memory, storage, ...): dependencies only.

The group (:data:`~emulator.workload.step.GROUPS`) is the one the process group's name says, by a word in it
(``tp`` or ``tensor``, ``dp`` or ``data``, ``pp`` or ``pipeline``, ``ep`` or ``expert``, ``embedding``: Megatron's
``TENSOR_MODEL_PARALLEL_GROUP`` is tp), else ``all``, the whole job (PyTorch names its groups ``0``, ``1``, ...).
The group's size is not in a node: 0.  The op's ``stage`` is the node's name, and its process group's.

**From the DAG to two streams.**  A node's ``data_deps`` are the nodes it waits for; they form a DAG, ordered
here by Kahn's algorithm, ties broken by the lowest node id (so the order is the same on every run).  Its
``ctrl_deps`` are not read: the schema keeps there the host trace's caller (the operator that called this one),
which the converter has already turned into ``data_deps``; the Chakra feeder that ASTRA-sim uses follows
``data_deps`` alone, and the published traces have ``ctrl_deps`` that name removed nodes or the node itself.  The
step this emulator runs has one compute stream and one communication stream per rank, so the order is walked
once: device compute adds to the ``compute_ns`` of the next collective (``duration_micros`` x 1000 ns); a
collective is blocking if the next device compute node in the order depends on it (directly or through other
nodes), else not (the step waits for it at its end, as for a collective with no compute after it); the compute
after the last collective is the workload's ``tail_compute_ns``.

**What is kept, and what is lost.**  Kept: the collectives, sends and receives in dependency order, their
kinds, sizes and process groups, the device compute between them and whether the compute after each waits for
it.  Lost: parallelism inside a stream (two kernels the DAG lets overlap run one after the other; collectives
too, in order), the host's time (a step the CPU bounds is shorter here), a wait for a collective by compute
after the first compute node that follows it (that node alone decides whether the collective blocks), the
measured durations of the communication nodes (the fabric decides those), memory and storage nodes' times, and
the other ranks' files (the reader takes one rank: every rank of a data- or tensor-parallel job runs the same
step).

A hostile file gives one line naming the file, the record (its ordinal in the stream, the GlobalMetadata being
record 1, and the node's id) and the field (:class:`~emulator.errors.FabricError`), never a traceback.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from emulator.errors import FabricError, printable, shown
from emulator.safefiles import list_inside, open_inside, read_bounded
from emulator.workload.step import GROUPS, MAX_COMPUTE_NS, MAX_MESSAGE_BYTES, MAX_OPS, CommOp, Workload

MAX_TRACE_BYTES = 64 << 20  # the published traces are a few MB
MAX_NODES = 1_000_000
MAX_DEPENDENCIES = 4 * MAX_NODES  # data_deps in the file (the published ones have about 1.5 a node)
_INT32_MAX = (1 << 31) - 1  # the feeder reads ranks and enums as int32
_LENGTH_BYTES = 10  # a varint of 64 bits
_RANK = re.compile(r"\.([0-9]{1,9})\.et\Z")  # a trace's file name: <name>.<rank>.et

# The schema's NodeType and CollectiveCommType, by number (the numbers are what the file holds).
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
COLLECTIVES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
               "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9}
_COLLECTIVE_NAMES = {number: name for name, number in COLLECTIVES.items()}
_KINDS = {0: "all_reduce", 2: "all_gather", 5: "broadcast", 6: "all_to_all", 7: "reduce_scatter",
          8: "reduce_scatter", 9: "barrier"}
_GROUP_WORDS = {"tp": "tp", "tensor": "tp", "dp": "dp", "data": "dp", "pp": "pp", "pipeline": "pp", "ep": "ep",
                "expert": "ep", "embedding": "embedding"}
_INTEGERS = ("int64_val", "uint64_val", "int32_val", "uint32_val")  # as the converters write integers
_ATTRS = ("comm_type", "comm_size", "comm_src", "comm_dst", "pg_name", "is_cpu_op")  # the attributes read

_F = descriptor_pb2.FieldDescriptorProto


def _message_classes() -> tuple[type[Message], type[Message], type[Message]]:
    """AttributeProto, Node and GlobalMetadata of ``et_def.proto``: the fields this reader uses, by the schema's
    numbers, in a pool of their own (a process that also loads Chakra's generated module keeps its own)."""
    schema = descriptor_pb2.FileDescriptorProto(name="fabric_emu_chakra_et.proto", package="ChakraProtoMsg",
                                                syntax="proto3")
    attr = schema.message_type.add(name="AttributeProto")
    attr.field.add(name="name", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    attr.oneof_decl.add(name="value")
    for name, number, kind in (("int32_val", 7, _F.TYPE_INT32), ("int64_val", 9, _F.TYPE_INT64),
                               ("uint32_val", 11, _F.TYPE_UINT32), ("uint64_val", 13, _F.TYPE_UINT64),
                               ("bool_val", 27, _F.TYPE_BOOL), ("string_val", 29, _F.TYPE_STRING)):
        attr.field.add(name=name, number=number, type=kind, label=_F.LABEL_OPTIONAL, oneof_index=0)
    node = schema.message_type.add(name="Node")
    node.field.add(name="id", number=1, type=_F.TYPE_UINT64, label=_F.LABEL_OPTIONAL)
    node.field.add(name="name", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    node.field.add(name="type", number=3, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL)  # NodeType, by number
    node.field.add(name="data_deps", number=5, type=_F.TYPE_UINT64, label=_F.LABEL_REPEATED)
    node.field.add(name="duration_micros", number=7, type=_F.TYPE_UINT64, label=_F.LABEL_OPTIONAL)
    node.field.add(name="attr", number=10, type=_F.TYPE_MESSAGE, type_name=".ChakraProtoMsg.AttributeProto",
                   label=_F.LABEL_REPEATED)
    schema.message_type.add(name="GlobalMetadata")  # no field read: its bytes need only be protobuf
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
                 for name in ("AttributeProto", "Node", "GlobalMetadata"))  # type: ignore[return-value]


AttributeProto, Node, GlobalMetadata = _message_classes()


@dataclass(frozen=True)
class _Record:
    """A node as the walk needs it: where it is in the file, what it waits for, and what it is."""

    ordinal: int
    node_id: int
    deps: tuple[int, ...]
    compute_ns: int | None  # device compute; None: not device compute
    op: CommOp | None  # a collective, send or receive


def read_chakra(path: str) -> Workload:
    """The step of one rank's Chakra trace: the file ``path``, or in the directory ``path`` the file of the
    lowest-numbered rank (``<name>.<rank>.et``)."""
    if not os.path.isdir(path):
        where = printable(path)
        try:
            f = open(path, "rb")
        except OSError as err:
            raise FabricError(f"{where}: {err.strerror}") from None
        return parse_chakra(read_bounded(f, MAX_TRACE_BYTES, where, _too_large(where)), path, _rank(path))
    ranks = sorted((int(match[1]), name) for name in list_inside(path) if (match := _RANK.search(name)))
    if not ranks:
        raise FabricError(f"{printable(path)}: no <name>.<rank>.et file: not a directory of Chakra traces")
    if len(ranks) > 1 and ranks[1][0] == ranks[0][0]:
        raise FabricError(f"{printable(path)}: two traces of rank {ranks[0][0]}: {shown(ranks[0][1])} and "
                          f"{shown(ranks[1][1])}")
    rank, name = ranks[0]
    file = os.path.join(path, name)
    f = open_inside(path, name)
    if f is None:
        raise FabricError(f"{printable(file)}: removed while it was read")
    workload = parse_chakra(read_bounded(f, MAX_TRACE_BYTES, printable(file), _too_large(printable(file))), file,
                            rank)
    return replace(workload, source=f"{file} (rank {rank}: the lowest-numbered of {len(ranks)} trace(s) in {path})")


def _rank(path: str) -> int | None:
    """The rank a trace's file name gives (``<name>.<rank>.et``), if it does."""
    match = _RANK.search(os.path.basename(path))
    return int(match[1]) if match else None


def _too_large(where: str) -> str:
    """The line for a file over the size this reader takes."""
    return f"{where}: over {MAX_TRACE_BYTES >> 20} MiB: not a Chakra trace this reader takes"


def parse_chakra(data: bytes, source: str, rank: int | None) -> Workload:
    """The step in the bytes of one rank's trace (see the module's doc); ``source`` names the file in messages,
    ``rank`` is the file's rank where its name gives it (None: a send's or receive's peer cannot be placed)."""
    name = printable(source)
    frames = _frames(data, name)
    first = next(frames, None)
    if first is None:
        raise FabricError(f"{name}: empty: a Chakra trace begins with its GlobalMetadata")
    _parse(GlobalMetadata, first[1], f"{name}: record 1", "GlobalMetadata")
    records: dict[int, _Record] = {}
    communication = dependencies = 0
    for ordinal, payload in frames:
        record = _record(payload, ordinal, name, rank)
        where = f"{name}: record {ordinal} (node {record.node_id})"
        if record.node_id in records:
            raise FabricError(f"{where}: id: record {records[record.node_id].ordinal} has that id too")
        communication += record.op is not None
        if communication > MAX_OPS:
            raise FabricError(f"{where}: over {MAX_OPS} communication nodes")
        dependencies += len(record.deps)
        if dependencies > MAX_DEPENDENCIES:
            raise FabricError(f"{where}: data_deps: over {MAX_DEPENDENCIES} dependencies in the file")
        records[record.node_id] = record
    ops, tail = _streams(_order(records, name), records, name)
    if not ops:
        raise FabricError(f"{name}: no collective in the step")
    return Workload(source, (tuple(ops),), tail, {})


def _frames(data: bytes, name: str) -> Iterator[tuple[int, bytes]]:
    """The stream's messages: (ordinal from 1, bytes), each length checked against what is left."""
    at = ordinal = 0
    while at < len(data):
        ordinal += 1
        where = f"{name}: record {ordinal} at byte {at}"
        if ordinal > MAX_NODES + 1:
            raise FabricError(f"{where}: over {MAX_NODES} nodes")
        length, start = _length(data, at, where)
        if length > len(data) - start:
            raise FabricError(f"{where}: length {length} runs past the end of the file ({len(data) - start} "
                              f"bytes left)")
        yield ordinal, data[start:start + length]
        at = start + length


def _length(data: bytes, at: int, where: str) -> tuple[int, int]:
    """The varint at ``data[at:]`` (a message's length) and the offset after it."""
    value = 0
    for end in range(at, min(at + _LENGTH_BYTES, len(data))):
        value |= (data[end] & 0x7F) << (7 * (end - at))
        if data[end] < 0x80:
            return value, end + 1
    if len(data) - at < _LENGTH_BYTES:
        raise FabricError(f"{where}: the file ends inside the length prefix")
    raise FabricError(f"{where}: a length prefix over {_LENGTH_BYTES} bytes: not a Chakra trace")


def _parse(kind: type[Message], payload: bytes, where: str, what: str) -> Message:
    """``payload`` as a ``kind`` message; bytes that are not protobuf (of that message) are one line."""
    message = kind()
    try:
        message.ParseFromString(payload)
    except DecodeError:
        raise FabricError(f"{where}: not a {what}: its bytes are not protobuf of that message") from None
    return message


def _record(payload: bytes, ordinal: int, name: str, rank: int | None) -> _Record:
    """One node of the stream, its collective (if any) built and checked."""
    node = _parse(Node, payload, f"{name}: record {ordinal}", "Chakra Node")
    where = f"{name}: record {ordinal} (node {node.id})"
    attrs = _attributes(node, where)
    host = _flag(attrs, "is_cpu_op", where)
    if len(node.data_deps) > MAX_NODES:
        raise FabricError(f"{where}: data_deps: {len(node.data_deps)} of them, the file may hold {MAX_NODES} nodes")
    duration = node.duration_micros
    if duration > MAX_COMPUTE_NS // 1000:
        raise FabricError(f"{where}: duration_micros {duration} is out of range (0 to {MAX_COMPUTE_NS // 1000})")
    op = None
    if not host and node.type in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
        op = _operation(node, attrs, where, rank)
    compute = duration * 1000 if node.type == COMP_NODE and not host else None
    return _Record(ordinal, node.id, tuple(dict.fromkeys(node.data_deps)), compute, op)


def _attributes(node: Message, where: str) -> dict[str, Message]:
    """The attributes this reader uses, by name; one given twice is refused."""
    found: dict[str, Message] = {}
    for attr in node.attr:
        if attr.name in _ATTRS:
            if attr.name in found:
                raise FabricError(f"{where}: attr {attr.name}: given twice")
            found[attr.name] = attr
    return found


def _operation(node: Message, attrs: dict[str, Message], where: str, rank: int | None) -> CommOp:
    """The collective, send or receive a communication node is."""
    pg = _text(attrs, "pg_name", where)
    stage = f"{node.name[:100]} (pg {pg[:50]})" if pg else node.name[:100]
    group = _group(pg)
    if node.type == COMM_COLL_NODE:
        kind = _collective(attrs, where)
        size = _integer(attrs, "comm_size", where, MAX_MESSAGE_BYTES)
        if size is None and kind != "barrier":
            raise FabricError(f"{where}: attr comm_size: missing")
        return CommOp(kind, group, 0, size or 0, printable(stage))
    kind = "send" if node.type == COMM_SEND_NODE else "recv"
    size = _integer(attrs, "comm_size", where, MAX_MESSAGE_BYTES)
    if size is None:
        raise FabricError(f"{where}: attr comm_size: missing")
    return CommOp(kind, group, 0, size, printable(stage), peer=_peer(kind, attrs, where, rank))


def _collective(attrs: dict[str, Message], where: str) -> str:
    """The kind of collective a node's ``comm_type`` is (:data:`~emulator.workload.step.KINDS`)."""
    code = _integer(attrs, "comm_type", where, _INT32_MAX)
    if code is None:
        raise FabricError(f"{where}: attr comm_type: missing")
    if code not in _KINDS:
        raise FabricError(f"{where}: attr comm_type {code} ({_COLLECTIVE_NAMES.get(code, 'not in the schema')}) is "
                          f"not one of {', '.join(_COLLECTIVE_NAMES[code] for code in _KINDS)}")
    return _KINDS[code]


def _peer(kind: str, attrs: dict[str, Message], where: str, rank: int | None) -> str:
    """A send's or receive's peer stage (see the module's doc); "" where the trace does not give it."""
    key = "comm_dst" if kind == "send" else "comm_src"
    peer = _integer(attrs, key, where, _INT32_MAX)
    if peer is None:
        return ""
    if rank is None:
        raise FabricError(f"{where}: attr {key} {peer}: the file's name gives no rank (<name>.<rank>.et) to "
                          f"tell the next stage from the previous")
    if peer == rank:
        raise FabricError(f"{where}: attr {key} {peer} is this file's own rank")
    return "next" if peer > rank else "prev"


def _group(pg: str) -> str:
    """The parallel group a process group's name says by one of its words, else the whole job."""
    said = {_GROUP_WORDS[word] for word in re.findall(r"[a-z0-9]+", pg.lower()) if word in _GROUP_WORDS}
    return said.pop() if len(said) == 1 else GROUPS[-1]


def _integer(attrs: dict[str, Message], key: str, where: str, high: int) -> int | None:
    """The whole number ``attrs[key]`` holds, from 0 to ``high``; None if there is no such attribute."""
    attr = attrs.get(key)
    if attr is None:
        return None
    which = attr.WhichOneof("value")
    if which not in _INTEGERS:
        raise FabricError(f"{where}: attr {key}: not an integer ({', '.join(_INTEGERS)})")
    value = getattr(attr, which)
    if not 0 <= value <= high:
        raise FabricError(f"{where}: attr {key} {value} is out of range (0 to {high})")
    return value


def _text(attrs: dict[str, Message], key: str, where: str) -> str:
    """The string ``attrs[key]`` holds; "" if there is no such attribute."""
    attr = attrs.get(key)
    if attr is None:
        return ""
    if attr.WhichOneof("value") != "string_val":
        raise FabricError(f"{where}: attr {key}: not a string_val")
    return attr.string_val


def _flag(attrs: dict[str, Message], key: str, where: str) -> bool:
    """The boolean ``attrs[key]`` holds; false if there is no such attribute (as the Chakra feeder reads it)."""
    attr = attrs.get(key)
    if attr is None:
        return False
    if attr.WhichOneof("value") != "bool_val":
        raise FabricError(f"{where}: attr {key}: not a bool_val")
    return attr.bool_val


def _order(records: dict[int, _Record], name: str) -> list[_Record]:
    """The nodes in dependency order (Kahn's algorithm, the lowest id first among those ready)."""
    children: dict[int, list[int]] = {node_id: [] for node_id in records}
    waiting: dict[int, int] = {}  # how many of its dependencies each node still waits for
    for record in records.values():
        for dep in record.deps:
            if dep not in records:
                raise FabricError(f"{name}: record {record.ordinal} (node {record.node_id}): data_deps: node {dep} "
                                  f"is not in the file")
            children[dep].append(record.node_id)
        waiting[record.node_id] = len(record.deps)
    ready = [node_id for node_id, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node_id = heapq.heappop(ready)
        order.append(records[node_id])
        for child in children[node_id]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    if len(order) < len(records):
        raise _cycle(records, {node_id for node_id, count in waiting.items() if count}, name)
    return order


def _cycle(records: dict[int, _Record], left: set[int], name: str) -> FabricError:
    """One line naming a cycle among the nodes Kahn's algorithm could not order: each of them waits for another
    of them, so walking back from one comes round to a node already met."""
    path = [min(left)]
    met = {path[0]: 0}
    while True:
        dep = next(dep for dep in records[path[-1]].deps if dep in left)
        if dep in met:
            cycle = path[met[dep]:]
            break
        met[dep] = len(path)
        path.append(dep)
    first = records[cycle[0]]
    ring = " -> ".join(map(str, [*cycle, cycle[0]] if len(cycle) <= 8 else [*cycle[:8], "..."]))
    return FabricError(f"{name}: record {first.ordinal} (node {first.node_id}): data_deps: a cycle of "
                       f"{len(cycle)} node(s), each waiting for the next: {ring}")


def _streams(order: list[_Record], records: dict[int, _Record], name: str) -> tuple[list[CommOp], int]:
    """The ordered nodes as one compute and one communication stream (see the module's doc): the ops with the
    compute before each and whether the compute after waits for it, and the compute after the last."""
    position = {record.node_id: index for index, record in enumerate(order)}
    ops: list[CommOp] = []
    undecided: list[tuple[int, int]] = []  # (index in ops, node id): no device compute after them yet
    pending = 0  # device compute since the last op
    for record in order:
        if record.op is not None:
            ops.append(replace(record.op, compute_ns=pending))
            undecided.append((len(ops) - 1, record.node_id))
            pending = 0
        elif record.compute_ns is not None:
            if undecided:
                waits = _waits_for(record.node_id, records, position, position[undecided[0][1]])
                for index, node_id in undecided:
                    ops[index] = replace(ops[index], blocking=node_id in waits)
                undecided.clear()
            pending += record.compute_ns
            if pending > MAX_COMPUTE_NS:
                raise FabricError(f"{name}: record {record.ordinal} (node {record.node_id}): duration_micros: over "
                                  f"{MAX_COMPUTE_NS // 10**9} s of compute between two collectives")
    for index, _ in undecided:
        ops[index] = replace(ops[index], blocking=False)
    return ops, pending


def _waits_for(node_id: int, records: dict[int, _Record], position: dict[int, int], since: int) -> set[int]:
    """The nodes ``node_id`` depends on, directly or through others, among those at or after position ``since``
    of the order (a node before it cannot lie on a path from a collective there)."""
    found: set[int] = set()
    todo = [node_id]
    while todo:
        for dep in records[todo.pop()].deps:
            if dep not in found and position[dep] >= since:
                found.add(dep)
                todo.append(dep)
    return found
