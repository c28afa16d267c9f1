"""Readers of published training-workload files: a step's collectives, in order, with the compute between them.

Three formats are read (issue 27; nccl-tests output is still to come): the two below, and MLCommons Chakra
execution traces (a directory of them, or a ``.et`` file: :mod:`emulator.workload.chakra`).

- **AICB CSV** (aliyun/aicb ``workload/physical/model_workload/``): an optional ``[rank0 ~ rankN]`` line, a
  header naming the columns, then one row per collective: ``comm_type`` (``CommType.all_reduce``, ...),
  ``comm_group`` (``CommGroup.tp_group``, ``dp_group``, ``pp_group``, ``ep_group``; ``None`` for the step
  markers), ``comm_group_size``, ``msg_size`` (bytes), ``stage``, and ``count`` (the row repeated).  Rows of
  ``CommType.epoch_end`` mark the step's ends; the rows before the first are the model's set-up, not the step,
  and the step is what lies between the first two markers (or after the first, if there is one only).  The
  rows carry no compute times.  A pipeline-parallel file has one such section per stage, each opened by its
  ``[ pp_stageN: [ranks] ]`` line and its own header.
- **SimAI / ASTRA-sim 1.0 text** (aliyun/aicb ``workload/simAI/model_workload/``): a header line (the
  parallelism policy, then ``model_parallel_NPU_group: N`` and other ``key: value`` pairs), the number of
  layers, then one line per layer: name, a reserved field, and for each of the forward pass, the input
  gradient and the weight gradient a compute time, a collective type (``ALLREDUCE``, ``ALLGATHER``,
  ``REDUCESCATTER``, ``ALLTOALL``, ``BROADCAST`` or ``NONE``) and its size in bytes, then the weight update's
  time.  Times are ASTRA-sim's cycles, taken as ns (its default 1 GHz).  As ASTRA-sim runs this policy, the
  forward and input-gradient collectives are the tensor-parallel group's and the weight-gradient ones the
  data-parallel group's.

Every file is hostile: a file too large, a line too long, a field missing or out of range, a count that would
make the step enormous, or a type this reader does not know is one line naming the file, the line and the field
(:class:`~emulator.errors.FabricError`), never a traceback.
"""

from __future__ import annotations

import csv
import io
import os
import re

from emulator.errors import FabricError, printable, shown
from emulator.safefiles import read_bounded
# The step's types and bounds are in .step, shared with the Chakra reader (which cannot import this module:
# read_workload imports it).
from emulator.workload.step import GROUPS, MAX_COMPUTE_NS, MAX_MESSAGE_BYTES, MAX_OPS, CommOp, Workload

MAX_FILE_BYTES = 16 << 20  # the published files are tens of KB
MAX_GROUP = 1 << 20


def read_workload(path: str) -> Workload:
    """The step in ``path``: a Chakra trace if it is a directory or ends in ``.et``, SimAI text if its second
    line is a layer count, else AICB CSV."""
    if path.endswith(".et") or os.path.isdir(path):
        from emulator.workload.chakra import read_chakra  # here: only a Chakra trace needs protobuf

        return read_chakra(path)
    text = _text(path)
    lines = text.splitlines()
    if len(lines) >= 2 and re.fullmatch(r"[0-9]+", lines[1].strip()):
        return parse_simai(text, path)
    return parse_aicb(text, path)


def _text(path: str) -> str:
    where = printable(path)
    try:
        f = open(path, "rb")
    except OSError as err:
        raise FabricError(f"{where}: {err.strerror}") from None
    data = read_bounded(f, MAX_FILE_BYTES, where, f"{where}: over {MAX_FILE_BYTES >> 20} MiB: not a workload file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FabricError(f"{where}: byte {err.start}: not UTF-8 text") from None


def _whole(text: str, where: str, field: str, low: int, high: int) -> int:
    """``text`` as a whole number from ``low`` to ``high``, else one line naming ``where`` and ``field``."""
    value = text.strip()
    if not re.fullmatch(r"-?[0-9]{1,19}", value):  # ASCII digits only: int() would take "²" or "١"
        raise FabricError(f"{where}: {field} {shown(value)} is not a whole number")
    number = int(value)
    if not low <= number <= high:
        raise FabricError(f"{where}: {field} {number} is out of range ({low} to {high})")
    return number


# --- AICB CSV ---------------------------------------------------------------------------------------------

_AICB_KINDS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
               "all_to_all": "all_to_all", "broadcast": "broadcast", "barrier": "barrier", "isend": "send",
               "irecv": "recv"}
_AICB_COLUMNS = ("comm_type", "comm_group", "comm_group_size", "msg_size", "stage", "count")
_AICB_PEERS = {"send_next": "next", "send_prev": "prev", "recv_next": "next", "recv_prev": "prev"}


def parse_aicb(text: str, source: str) -> Workload:
    """An AICB CSV workload's step (see the module's doc).  A pipeline-parallel file holds one section per
    stage, each opened by its ``[ pp_stageN: [rank...] ]`` line and its own header: one step each."""
    name = printable(source)
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("[")] or [-1]
    if starts[0] > 0:
        raise FabricError(f"{name}: line 1: rows before the first [ranks] line")
    stages = []
    parallelism: dict[str, int] = {}
    for begin, end in zip(starts, [*starts[1:], len(lines)]):
        stages.append(_aicb_section(lines[begin + 1:end], begin + 2, name, parallelism))
    return Workload(source, tuple(stages), 0, parallelism)


def _aicb_section(lines: list[str], first: int, name: str, parallelism: dict[str, int]) -> tuple[CommOp, ...]:
    """One section's step: its header at line ``first``, then its rows (see the module's doc)."""
    rows = csv.reader(io.StringIO("\n".join(lines)))
    try:
        header = next(rows)
    except StopIteration:
        raise FabricError(f"{name}: line {first}: no header line: not an AICB workload") from None
    missing = [column for column in _AICB_COLUMNS if column not in header]
    if missing:
        raise FabricError(f"{name}: line {first}: no column {shown(missing[0])}: not an AICB workload")
    at = {column: header.index(column) for column in (*_AICB_COLUMNS, "additional") if column in header}
    ops: list[CommOp] = []
    markers = 0
    try:
        for number, row in enumerate(rows, start=first + 1):
            where = f"{name}: line {number}"
            if not row:
                continue
            if len(row) != len(header):
                raise FabricError(f"{where}: {len(row)} fields, the header names {len(header)}")
            kind = row[at["comm_type"]].removeprefix("CommType.")
            if kind == "epoch_end":
                markers += 1
                if markers == 2:
                    break  # the step ends here
                ops.clear()  # what came before the first marker is the model's set-up
                continue
            if kind not in _AICB_KINDS:
                raise FabricError(f"{where}: comm_type {shown(row[at['comm_type']])} is not one of "
                                  f"{', '.join('CommType.' + k for k in (*_AICB_KINDS, 'epoch_end'))}")
            group = row[at["comm_group"]].removeprefix("CommGroup.").removesuffix("_group")
            if group not in GROUPS:
                raise FabricError(f"{where}: comm_group {shown(row[at['comm_group']])} is not one of "
                                  f"{', '.join(f'CommGroup.{g}_group' for g in GROUPS[:-1])}, CommGroup.all")
            size = _whole(row[at["comm_group_size"]], where, "comm_group_size", 1, MAX_GROUP)
            peer = ""
            if _AICB_KINDS[kind] in ("send", "recv"):  # a send or receive names its peer's group, of 1
                direction = row[at["additional"]] if "additional" in at else ""
                if not direction.startswith(kind[1:] + "_") or direction not in _AICB_PEERS:
                    raise FabricError(f"{where}: additional {shown(direction)} is not "
                                      f"{kind[1:]}_next or {kind[1:]}_prev")
                peer = _AICB_PEERS[direction]
            elif parallelism.setdefault(group, size) != size:
                raise FabricError(f"{where}: comm_group_size {size}: the {group} group had "
                                  f"{parallelism[group]} ranks before")
            op = CommOp(_AICB_KINDS[kind], group, size, _whole(row[at["msg_size"]], where, "msg_size", 0,
                                                                  MAX_MESSAGE_BYTES), row[at["stage"]][:200], peer=peer)
            count = _whole(row[at["count"]], where, "count", 1, MAX_OPS)
            if len(ops) + count > MAX_OPS:
                raise FabricError(f"{where}: count {count}: the step would hold over {MAX_OPS} collectives")
            ops.extend([op] * count)
    except csv.Error as err:
        raise FabricError(f"{name}: line {rows.line_num + first - 1}: {err}") from None
    if not ops:
        raise FabricError(f"{name}: line {first}: no collective in the step")
    return tuple(ops)


# --- SimAI / ASTRA-sim text -------------------------------------------------------------------------------

_SIMAI_KINDS = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "REDUCESCATTER": "reduce_scatter",
                "ALLTOALL": "all_to_all", "BROADCAST": "broadcast"}
_PASSES = (("forward", "tp"), ("input_gradient", "tp"), ("weight_gradient", "dp"))
_SIMAI_FIELDS = 12  # name, reserved, then (time, type, size) for 3 passes, then the update time


def parse_simai(text: str, source: str) -> Workload:
    """A SimAI / ASTRA-sim 1.0 workload's step (see the module's doc): every layer's forward collective in
    layer order, then the backward passes in reverse layer order, each after its compute."""
    name = printable(source)
    lines = text.splitlines()
    if len(lines) < 2:
        raise FabricError(f"{name}: line {len(lines) + 1}: missing (a header and a layer count come first)")
    parallelism = _simai_header(lines[0], f"{name}: line 1")
    layers = _whole(lines[1], f"{name}: line 2", "layer count", 1, MAX_OPS // 3)
    body = lines[2:]
    if len(body) < layers:
        raise FabricError(f"{name}: line {len(lines) + 1}: the file ends after {len(body)} of its {layers} layers")
    tp = parallelism.get("tp", 1)
    rows = []
    for index in range(layers):
        where = f"{name}: line {index + 3}"
        fields = body[index].split()
        if len(fields) != _SIMAI_FIELDS:
            raise FabricError(f"{where}: {len(fields)} fields, a layer has {_SIMAI_FIELDS}")
        passes = []
        for number, (stage, group) in enumerate(_PASSES):
            time, kind, size = fields[2 + 3 * number: 5 + 3 * number]
            compute = _whole(time, where, f"{stage} compute time", 0, MAX_COMPUTE_NS)
            if kind != "NONE" and kind not in _SIMAI_KINDS:
                raise FabricError(f"{where}: {stage} type {shown(kind)} is not one of "
                                  f"{', '.join((*_SIMAI_KINDS, 'NONE'))}")
            size = _whole(size, where, f"{stage} size", 0, MAX_MESSAGE_BYTES)
            passes.append((compute, None if kind == "NONE" or size == 0 else
                           CommOp(_SIMAI_KINDS[kind], group, tp if group == "tp" else parallelism.get("dp", 0),
                                  size, f"{stage}.{fields[0][:100]}")))
        update = _whole(fields[11], where, "weight update time", 0, MAX_COMPUTE_NS)
        rows.append((passes, update))
    ops: list[CommOp] = []
    pending = 0  # compute since the last collective

    def step(compute: int, op: CommOp | None) -> None:
        nonlocal pending
        pending += compute
        if op is not None:
            ops.append(CommOp(op.kind, op.group, op.group_size, op.size, op.stage, pending,
                              blocking=op.group != "dp"))
            pending = 0

    for passes, _ in rows:
        step(*passes[0])
    for passes, update in reversed(rows):
        step(*passes[1])
        step(*passes[2])
        pending += update
    if not ops:
        raise FabricError(f"{name}: no collective in the step")
    return Workload(source, (tuple(ops),), pending, parallelism)


def _simai_header(line: str, where: str) -> dict[str, int]:
    """The parallelism of a SimAI header line: ``model_parallel_NPU_group`` (tp), and ``ep``, ``pp``, ``dp``
    where the line gives them (``key: value`` pairs after the policy's name)."""
    words = line.split()
    if not words:
        raise FabricError(f"{where}: empty: a SimAI workload begins with its parallelism policy")
    keys = {"model_parallel_NPU_group:": "tp", "ep:": "ep", "pp:": "pp", "dp:": "dp",
            "expert_parallel_npus_group:": "ep", "pipeline_model_parallelism:": "pp"}
    parallelism = {}
    for key, value in zip(words[1::2], words[2::2]):
        if key in keys:
            parallelism[keys[key]] = _whole(value, where, key.rstrip(":"), 1, MAX_GROUP)
    if "tp" not in parallelism:
        raise FabricError(f"{where}: no model_parallel_NPU_group: the tensor-parallel group's size is missing")
    return parallelism
