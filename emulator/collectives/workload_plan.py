"""A training step on the fabric's hosts: where its parallel groups go, and every rank's plan (pure).

A workload file (:mod:`emulator.workload.files`) gives a step's collectives in order, each in a parallel
group (tensor, data or pipeline parallel, ...), with the compute between them.  This module places the
groups on the hosts and turns the step into one :class:`~emulator.collectives.algorithms.RankPlan` per
rank, which both backends execute as they execute any collective, op by op (:class:`OpSpan`).

**Placement.**  The job's ranks are the hosts in the topology's order (h1, h2, ...), which on a leaf-spine
or fat tree fills one leaf before the next.  A rank's coordinates (its tensor-, data- and pipeline-parallel
indices) follow from its number in mixed radix, innermost first: the default order ``tp,dp,pp`` puts a
tensor-parallel group on consecutive hosts (inside a leaf, when the group fits in one) and spreads the
data- and pipeline-parallel groups across the leaves, as Megatron-LM orders its ranks.  Another order
(``placement = "dp,tp,pp"``) puts another group inside the leaves.  The group sizes are the file's, or the
user's (``parallel = "tp=2,dp=4"``: a file written for 1,024 GPUs runs on 8 hosts with a smaller
data-parallel group); the data-parallel size left unstated is the hosts left over.  A job larger than the
fabric is refused in one line; hosts beyond it stay idle.

**The collectives** (each in its group, the group's members in coordinate order):

- all_reduce: the ring all-reduce (reduce-scatter then all-gather, 2(G-1) steps);
- all_gather: the ring all-gather (G-1 steps); reduce_scatter: the all-reduce's first G-1 steps;
- all_to_all: one step, every member writing its share to every other;
- broadcast: a chain from the group's first member (G-1 hops, each forwarding the whole message);
- barrier: a ring all-gather of one byte per member;
- send and recv (pipeline parallelism): one WRITE to, or one arrival from, the next or previous stage's rank
  with the same other coordinates; the k-th send from a rank to a peer is the peer's k-th receive from it;
- ep (expert-parallel) groups are refused: their placement inside the data-parallel group is not built.

The plans only move bytes.  The ring's reductions are left out (a workload's step is timed, not checked:
the all-reduce collective checks its sums), and every step goes whole (one slice), so that an op's
boundaries are its steps'.

**Op by op.**  Each rank has one compute stream and one communication stream.  A collective is issued
after the compute before it (``compute_ns``, in the backend's time: the caller scales it), begins once
the rank's previous collective is done (one communication stream, in order), and is done at this rank when
its last arrival came and its last WRITE completed.  The compute after a blocking collective waits for it;
after a non-blocking one (a weight gradient's all-reduce) it goes on, and the rank's step ends when its
compute and every collective are done.  :func:`issue_times` gives what the executors follow;
:mod:`emulator.collectives.workload_summary` reads their timelines.

A plan whose ranks would wait on each other for ever (a receive whose send comes after something waiting
for it) is refused before anything runs (:func:`_check_progress`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from emulator.collectives.algorithms import ELEMENT, IMMEDIATE_SLICES, OpSpan, RankPlan, Send, Step, plan
from emulator.errors import FabricError, printable, shown
from emulator.workload.files import CommOp, Workload
from emulator.workload.step import PEERS

DIMENSIONS = ("tp", "dp", "pp")
DEFAULT_PLACEMENT = DIMENSIONS
MAX_STEP_NS = 1 << 62  # a rank's compute in one step, in the backend's ns: the simulator's clock is 64 bits
MAX_STEPS = IMMEDIATE_SLICES  # a rank's steps in one step of the job: the immediate numbers them in 16 bits


@dataclass(frozen=True)
class StepOp:
    """One collective of the job's step, as results name it."""

    kind: str
    group: str
    size: int  # bytes, as the file counts them (scaled)
    stage: int  # pipeline stage
    label: str  # where in the step the file puts it


@dataclass
class WorkloadPlan:
    """A step placed on ``world`` hosts: its collectives, every rank's plan (idle hosts beyond the job have
    none) and the compute after the last collective."""

    ops: list[StepOp]
    ranks: list[RankPlan]
    tail_ns: int
    parallelism: dict[str, int]
    placement: tuple[str, ...]
    world: int


def parse_parallel(text: str) -> dict[str, int]:
    """``tp=2,dp=4``: group sizes the user sets, over the file's."""
    sizes: dict[str, int] = {}
    for item in text.split(","):
        match = re.fullmatch(r"\s*(tp|dp|pp)\s*=\s*([0-9]{1,7})\s*", item)
        if match is None or int(match[2]) < 1:
            raise FabricError(f"parallel {shown(text)}: write tp=N,dp=N,pp=N (each at least 1)")
        if match[1] in sizes:
            raise FabricError(f"parallel {shown(text)}: {match[1]} given twice")
        sizes[match[1]] = int(match[2])
    return sizes


def parse_placement(text: str) -> tuple[str, ...]:
    """``tp,dp,pp``: the dimensions innermost first (the first on consecutive hosts)."""
    order = tuple(part.strip() for part in text.split(","))
    if sorted(order) != sorted(DIMENSIONS):
        raise FabricError(f"placement {shown(text)}: name each of tp, dp and pp once, innermost first "
                          "(tp,dp,pp puts tensor-parallel groups on consecutive hosts)")
    return order


def workload_plan(workload: Workload, hosts: int, parallel: dict[str, int] | None = None,
                  placement: tuple[str, ...] = DEFAULT_PLACEMENT, scale: float = 1.0,
                  compute_scale: float = 1.0) -> WorkloadPlan:
    """``workload`` placed on ``hosts`` hosts: every message's size times ``scale`` and every compute time
    times ``scale`` x ``compute_scale`` (the time dilation of an emulated fabric), rounded."""
    workload = dataclasses.replace(workload, source=printable(workload.source))  # as messages show it
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(compute_scale) and compute_scale > 0):
        raise FabricError(f"{workload.source}: scale {scale!r} and dilation {compute_scale!r} must be positive")
    sizes = _sizes(workload, hosts, parallel or {})
    world = math.prod(sizes.values())
    stages = workload.stages
    if len(stages) not in (1, sizes["pp"]):
        raise FabricError(f"{workload.source}: {len(stages)} pipeline stages in the file, pp is {sizes['pp']}")
    strides, stride = {}, 1
    for dim in placement:
        strides[dim] = stride
        stride *= sizes[dim]
    place = _Placement(sizes, strides, world)
    ops: list[StepOp] = []
    stage_ops: list[list[int]] = []
    for number, stage in enumerate(stages):
        indices = []
        for op in stage:
            indices.append(len(ops))
            ops.append(StepOp(op.kind, op.group, _scaled_size(op, scale), number, op.stage))
        stage_ops.append(indices)
    computes = [[_scaled_ns(op.compute_ns, scale * compute_scale, workload.source) for op in stage]
                 for stage in stages]
    group_plans: dict[tuple[str, int, int], list[RankPlan]] = {}  # every member of a group reads the same plan
    builders = []
    # Each rank's collectives in its stage's order; _pair then numbers every WRITE by the receiver's step.
    for rank in range(world):
        stage = place.coord(rank, "pp") if len(stages) > 1 else 0
        stage_list = stages[stage]
        builder = _RankBuilder(rank, [(index, compute, op.blocking) for index, compute, op
                                      in zip(stage_ops[stage], computes[stage], stage_list)])
        builders.append(builder)
        position = 0
        while position < len(stage_list):
            op = stage_list[position]
            after = stage_list[position + 1] if position + 1 < len(stage_list) else None
            if _batched(op, after):  # one step: the send and the receive posted together
                _add_p2p(builder, place, rank, position, [op, after], scale, workload.source)
                builder.add(position + 1, [], 0, 0)
                position += 2
                continue
            _add_op(builder, place, rank, position, ops[stage_ops[stage][position]], op, scale, group_plans,
                    workload.source)
            position += 1
    ranks = [builder.finish(workload.source) for builder in builders]
    _pair(ranks, workload.source)
    _check_progress(ranks, workload.source)
    tail = _scaled_ns(workload.tail_compute_ns, scale * compute_scale, workload.source)
    if any(sum(c) + tail > MAX_STEP_NS for c in computes):
        raise FabricError(f"{workload.source}: the step's compute times x scale x dilation come to over "
                          f"{MAX_STEP_NS} ns (146 years): lower scale")
    return WorkloadPlan(ops, ranks, tail, sizes, placement, world)


def _scaled_ns(ns: int, factor: float, source: str) -> int:
    scaled = ns * factor
    if scaled > MAX_STEP_NS:
        raise FabricError(f"{source}: a compute time of {ns} ns x scale x dilation comes to over {MAX_STEP_NS} ns "
                          "(146 years): lower scale")
    return round(scaled)


def issue_times(spans: tuple[OpSpan, ...], start_ns: int, done_ns: list[int]) -> list[tuple[int, int]]:
    """When each collective of a rank is issued (its compute before it done) and begins (issued, and the
    collective before it done), given when each was done: what both executors follow, one op at a time
    (an op's times depend on the ops before it only)."""
    compute_free, previous_done, times = start_ns, start_ns, []
    for span, done in zip(spans, done_ns):
        issue = compute_free + span.compute_ns
        times.append((issue, max(issue, previous_done)))
        compute_free = max(done, issue) if span.blocking else issue
        previous_done = done
    return times


class _Placement:
    """Ranks and their coordinates (mixed radix, the placement's order innermost first)."""

    def __init__(self, sizes: dict[str, int], strides: dict[str, int], world: int) -> None:
        self.sizes, self.strides, self.world = sizes, strides, world

    def coord(self, rank: int, dim: str) -> int:
        return rank // self.strides[dim] % self.sizes[dim]

    def moved(self, rank: int, dim: str, to: int) -> int:
        return rank + (to - self.coord(rank, dim)) * self.strides[dim]

    def group(self, rank: int, group: str) -> list[int]:
        """The members of ``rank``'s group, in coordinate order."""
        if group in DIMENSIONS:
            return [self.moved(rank, group, i) for i in range(self.sizes[group])]
        if group == "embedding":  # the first and the last pipeline stage's ranks with the same other coordinates
            ends = sorted({0, self.sizes["pp"] - 1})
            return [self.moved(rank, "pp", i) for i in ends]
        return list(range(self.world))  # "all"


class _RankBuilder:
    """One rank's steps and op spans as the ops are added: ``heads`` gives each op's (index, compute before it,
    blocking), in order."""

    def __init__(self, rank: int, heads: list[tuple[int, int, bool]]) -> None:
        self.rank = rank
        self.steps: list[Step] = []
        self.spans: list[OpSpan] = []
        self.heads = heads
        self.data = self.staging = 0

    def add(self, position: int, steps: list[Step], data: int, staging: int) -> None:
        if position != len(self.spans):
            raise AssertionError("ops are added in order")
        op, compute, blocking = self.heads[position]
        self.spans.append(OpSpan(op, len(self.steps), len(steps), compute, blocking))
        self.steps.extend(steps)
        self.data, self.staging = max(self.data, data), max(self.staging, staging)

    def finish(self, source: str) -> RankPlan:
        if len(self.steps) > MAX_STEPS:
            raise FabricError(f"{source}: rank {self.rank} would run {len(self.steps)} steps in one step of the "
                              f"job, at most {MAX_STEPS}")
        return RankPlan(self.rank, max(self.data, 1), self.staging, self.steps, ops=tuple(self.spans))


def _sizes(workload: Workload, hosts: int, parallel: dict[str, int]) -> dict[str, int]:
    stated = {dim: size for dim, size in workload.parallelism.items() if dim in DIMENSIONS and size > 0}
    if len(workload.stages) > 1:
        stated.setdefault("pp", len(workload.stages))
    sizes = {**stated, **parallel}
    sizes.setdefault("tp", 1)
    sizes.setdefault("pp", 1)
    if "dp" not in sizes:
        sizes["dp"] = max(1, hosts // (sizes["tp"] * sizes["pp"]))
    world = math.prod(sizes[dim] for dim in DIMENSIONS)
    if world > hosts:
        shape = " x ".join(f"{dim} {sizes[dim]}" for dim in DIMENSIONS)
        raise FabricError(f"{workload.source}: the job's groups ({shape}) make {world} ranks, the fabric has "
                          f"{hosts} hosts; set parallel (e.g. \"dp={max(1, hosts // (sizes['tp'] * sizes['pp']))}\") "
                          "to run smaller groups")
    return {dim: sizes[dim] for dim in DIMENSIONS}


def _scaled_size(op: CommOp, scale: float) -> int:
    if op.kind == "barrier":
        return 0
    size = round(op.size * scale)
    if op.kind in ("all_reduce", "reduce_scatter"):  # whole float32s, as nccl-tests counts them
        return max(size - size % ELEMENT, ELEMENT if op.size else 0)
    return max(size, 1 if op.size else 0)


def _add_op(builder: _RankBuilder, place: _Placement, rank: int, position: int, step_op: StepOp, op: CommOp,
            scale: float, group_plans: dict[tuple[str, int, int], list[RankPlan]], source: str) -> None:
    """Rank ``rank``'s part of its collective number ``position``; ``group_plans`` keeps each group plan made,
    for its other members."""
    if op.group == "ep":
        raise FabricError(f"{source}: expert-parallel (ep) groups are not placed on the fabric yet")
    if op.kind in ("send", "recv"):
        _add_p2p(builder, place, rank, position, [op], scale, source)
        return
    members = place.group(rank, op.group)
    if len(members) < 2 or (step_op.size == 0 and op.kind != "barrier"):
        builder.add(position, [], 0, 0)
        return
    key = (op.kind, len(members), step_op.size)
    if key not in group_plans:
        group_plans[key] = _group_plan(*key)
    sub = group_plans[key][members.index(rank)]
    steps = [Step(tuple(Send(members[s.dst], s.offset, s.length, s.region, s.dst_offset) for s in step.sends),
                  tuple(members[src] for src in step.receives)) for step in sub.steps]
    builder.add(position, steps, sub.data_bytes, sub.staging_bytes)


def _batched(op: CommOp, after: CommOp | None) -> bool:
    """Whether ``op`` and the one after it are a send and a receive to the same neighbour stage with no compute
    between: Megatron's send_forward_recv_backward and send_backward_recv_forward, posted as one batch (run
    one after the other, each stage's receive would wait for a send its neighbour posts after its own
    receive, and the pipeline would wait for ever)."""
    return (after is not None and {op.kind, after.kind} == {"send", "recv"} and op.peer == after.peer
            and after.compute_ns == 0)


def _add_p2p(builder: _RankBuilder, place: _Placement, rank: int, position: int, p2p: list[CommOp],
             scale: float, source: str) -> None:
    """One step of the sends and receives ``p2p`` to and from the neighbour stages."""
    sends, receives, size = [], [], 0
    for op in p2p:
        if op.peer not in PEERS:
            raise FabricError(f"{source}: {printable(op.stage)}: a {op.kind} that names no neighbour stage "
                              f"(next or prev)")
        peer = _pipeline_peer(place, rank, op.peer)
        if peer is None:
            raise FabricError(f"{source}: {printable(op.stage)}: a {op.kind} with the {op.peer} stage from "
                              f"stage {place.coord(rank, 'pp')} of {place.sizes['pp']}")
        length = _scaled_size(op, scale)
        size = max(size, length)
        if op.kind == "send":
            sends.append(Send(peer, 0, length, "data", 0))
        else:
            receives.append(peer)
    builder.add(position, [Step(tuple(sends), tuple(receives))], size, 0)


def _pipeline_peer(place: _Placement, rank: int, direction: str) -> int | None:
    stage = place.coord(rank, "pp") + (1 if direction == "next" else -1)
    return place.moved(rank, "pp", stage) if 0 <= stage < place.sizes["pp"] else None


def _group_plan(kind: str, members: int, size: int) -> list[RankPlan]:
    """The plan of one group's collective, its members numbered 0 to ``members`` - 1."""
    if kind == "all_reduce":
        return plan("allreduce", members, size)
    if kind == "reduce_scatter":
        return [RankPlan(p.rank, p.data_bytes, p.staging_bytes, p.steps[:members - 1])
                for p in plan("allreduce", members, size)]
    if kind == "all_gather":
        return plan("allgather", members, size)
    if kind == "barrier":
        return plan("allgather", members, members)
    if kind == "all_to_all":
        return plan("alltoall", members, max(size, members))  # at least a byte to each member
    if kind == "broadcast":  # a chain from member 0: each receives the whole message, then passes it on
        chain = []
        for r in range(members):
            steps = [Step((), (r - 1,))] if r else []
            if r + 1 < members:
                steps.append(Step((Send(r + 1, 0, size, "data", 0),), ()))
            chain.append(RankPlan(r, size, 0, steps))
        return chain
    raise FabricError(f"collective {shown(kind)} is not run by workloads")


def _pair(ranks: list[RankPlan], source: str) -> None:
    """Numbers each WRITE by the receiver's step it arrives for: the k-th WRITE from a rank to a peer is the
    peer's k-th expected arrival from it (an RC QP delivers in order)."""
    expected: dict[tuple[int, int], list[int]] = {}  # (src, dst) -> dst's steps expecting src, in order
    for rank_plan in ranks:
        for k, step in enumerate(rank_plan.steps):
            for src in step.receives:
                expected.setdefault((src, rank_plan.rank), []).append(k)
    used: dict[tuple[int, int], int] = {}
    for rank_plan in ranks:
        for k, step in enumerate(rank_plan.steps):
            sends = []
            for send in step.sends:
                key = (rank_plan.rank, send.dst)
                at = used.get(key, 0)
                steps = expected.get(key, [])
                if at >= len(steps):
                    raise FabricError(f"{source}: rank {rank_plan.rank} sends rank {send.dst} more messages than "
                                      f"it receives from it ({len(steps)}): the sends and receives do not pair up")
                used[key] = at + 1
                sends.append(Send(send.dst, send.offset, send.length, send.region, send.dst_offset, steps[at]))
            rank_plan.steps[k] = Step(tuple(sends), step.receives)
    for key, steps in expected.items():
        if used.get(key, 0) != len(steps):
            raise FabricError(f"{source}: rank {key[1]} expects {len(steps)} messages from rank {key[0]}, which "
                              f"sends it {used.get(key, 0)}: the sends and receives do not pair up")


def _check_progress(ranks: list[RankPlan], source: str) -> None:
    """Refuses a plan that would wait for ever: each rank is moved past every step whose arrivals' WRITEs have
    been posted (a rank posts a step's WRITEs when it reaches the step), until nothing moves."""
    posting_step: dict[tuple[int, int, int], int] = {}  # (dst, dst step, src) -> the sender's step
    for rank_plan in ranks:
        for k, step in enumerate(rank_plan.steps):
            for send in step.sends:
                posting_step[(send.dst, send.at_step, rank_plan.rank)] = k
    at = [0] * len(ranks)
    moved = True
    while moved:
        moved = False
        for rank_plan in ranks:
            r = rank_plan.rank
            while at[r] < len(rank_plan.steps) and all(
                    at[src] >= posting_step[(r, at[r], src)] for src in rank_plan.steps[at[r]].receives):
                at[r] += 1
                moved = True
    stuck = [r for r, rank_plan in enumerate(ranks) if at[r] < len(rank_plan.steps)]
    if stuck:
        r = stuck[0]
        span = next(s for s in ranks[r].ops if s.first <= at[r] < s.first + s.steps)
        waits = ", ".join(str(src) for src in ranks[r].steps[at[r]].receives)
        raise FabricError(f"{source}: the step cannot finish: rank {r} waits in collective {span.op} for rank(s) "
                          f"{waits}, which wait in turn ({len(stuck)} ranks stuck): the file's order makes a cycle")


def plan_to_json(rank_plan: RankPlan) -> dict[str, Any]:
    """A training step's rank plan as the coordinator sends it (:func:`plan_from_json` reads it)."""
    return {"data": rank_plan.data_bytes, "staging": rank_plan.staging_bytes,
            "steps": [[[[s.dst, s.offset, s.length, s.region, s.dst_offset, s.at_step] for s in step.sends],
                       list(step.receives)] for step in rank_plan.steps],
            "ops": [[o.op, o.first, o.steps, o.compute_ns, o.blocking] for o in rank_plan.ops]}


def plan_from_json(rank: int, message: dict[str, Any]) -> RankPlan:
    """The rank plan the coordinator sent; ValueError if it is not one."""
    try:
        steps = [Step(tuple(Send(int(d), int(o), int(n), str(r), int(do), int(a)) for d, o, n, r, do, a in sends),
                      tuple(int(src) for src in receives)) for sends, receives in message["steps"]]
        ops = tuple(OpSpan(int(op), int(first), int(count), int(compute), bool(blocking))
                    for op, first, count, compute, blocking in message["ops"])
        return RankPlan(rank, int(message["data"]), int(message["staging"]), steps, ops=ops)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"the coordinator's plan is not one: {err}") from None
