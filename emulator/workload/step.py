"""A training step as the workload readers give it: per pipeline stage, its collectives in order, each with the
compute before it.  The readers of every format (:mod:`emulator.workload.files`, :mod:`emulator.workload.chakra`)
build these and share these bounds; the step's executor (:mod:`emulator.collectives.workload_plan`) runs them."""

from __future__ import annotations

from dataclasses import dataclass

MAX_OPS = 100_000  # collectives in one step, counts expanded
MAX_MESSAGE_BYTES = 1 << 40  # a collective of a TiB is past any step this emulator can run
MAX_COMPUTE_NS = 3_600 * 10**9  # an hour of compute between two collectives

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "send", "recv")
PEERS = ("next", "prev")  # a send's or receive's peer: the pipeline stage after or before
GROUPS = ("tp", "dp", "pp", "ep", "embedding", "all")  # "all": every rank of the job


@dataclass(frozen=True)
class CommOp:
    """One collective of a step: its kind (:data:`KINDS`), the parallel group it runs in (:data:`GROUPS`) and
    that group's size (0 where the file does not say: a SimAI file gives the tensor-parallel size only, the
    data-parallel group being the ranks left), its message size in bytes, where in the step it is, and the
    compute before it.  A send or receive (pipeline parallelism) names its peer stage (:data:`PEERS`).
    ``blocking``: the compute after it waits for it (a weight gradient's all-reduce does not: it overlaps the
    backward pass of the layers before, and the step waits for it at its end)."""

    kind: str
    group: str
    group_size: int
    size: int
    stage: str
    compute_ns: int = 0
    peer: str = ""
    blocking: bool = True


@dataclass(frozen=True)
class Workload:
    """A training step as a file describes it: per pipeline stage (one for a file without pipeline stages),
    its collectives in order; the compute after the last one, and the parallelism the file states (group ->
    size, where it says)."""

    source: str
    stages: tuple[tuple[CommOp, ...], ...]
    tail_compute_ns: int
    parallelism: dict[str, int]
