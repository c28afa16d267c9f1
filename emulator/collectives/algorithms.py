"""Who sends what to whom, step by step, in each collective (pure plans).

A plan gives every rank its memory layout and a list of steps.  In a step
a rank posts its sends (RDMA WRITE with immediate: the data lands in the
peer's memory and the immediate tells the peer which step arrived), then
waits for the receives it expects; a ring step may then reduce what came in.
The rank process (:mod:`emulator.collectives.rank`) executes plans on the
verbs API; unit tests execute them on plain byte arrays to check that the
data ends where the collective says.

Collectives (N ranks, ``size`` bytes as nccl-tests counts them):

- ``incast``: ``senders`` ranks (1..S) each write ``size`` bytes into rank 0.
- ``victim``: the incast of ``senders`` ranks (1..S, default N-2) into rank
  0, and rank 1 also writes ``size`` bytes into the last rank, which is
  idle: the victim flow, which shares its sender's NIC and link with the
  incast but goes to a receiver nobody else loads (head-of-line blocking).
- ``shift``: every rank r writes ``size`` bytes to rank (r + 2) mod N, all
  at once (N >= 3).  On ``ring,N`` (one host per switch) every flow takes
  the two inter-switch links the same way round: the lossless paths form a
  cycle of buffer dependencies, and PFC can deadlock.
- ``permutation``: every rank r writes ``size`` bytes to rank
  (r + N/2) mod N, all at once (N/2 rounded down).  On a leaf-spine or
  fat tree every flow leaves its leaf (or pod): the whole bisection is
  loaded, and flows that ECMP hashes onto the same uplink share it while
  another idles (the collisions spraying avoids).
- ``multijob``: two jobs at once.  The even ranks run a ring all-reduce of
  ``size`` (the measured job: an iteration's CCT is its), the odd ranks an
  incast: ``senders`` of them (default all but the last, 0 for the
  all-reduce alone) each write ``size`` bytes into the last odd rank.
- ``alltoall``: every rank sends ``size / N`` bytes to every other rank.
- ``allgather``: ring, N-1 steps; rank r contributes chunk r of the
  ``size`` bytes (:func:`ring_chunks`).
- ``allreduce``: ring reduce-scatter (N-1 steps, float32 sums) then ring
  all-gather (N-1 steps): 2(N-1) dependent steps, on ``size`` bytes of
  float32s.

Uneven chunks.  A ring cuts its vector as NCCL does: its elements (float32s
for the all-reduce, bytes for the all-gather) as evenly as possible over the
N chunks, the first ``count % N`` one element longer, each chunk at its own
offset.  So every size runs, 8 bytes on 8 ranks too (nccl-tests sweeps
from 8 B): ranks whose chunk is empty still take their steps, with
zero-length WRITEs with immediate (one packet each, valid RoCE and IB).  An
all-reduce's size must be a whole number of float32s, as nccl-tests counts
it: 18 bytes is refused, not run as 16 (it used to be, and its bandwidth
was reported for 18).

Pipelining.  A ring's step moves a chunk its next step depends on.  Sent
whole, every step would wait for the whole chunk, and then for the ranks to
react (the completion's way to the rank, the reduce, the next post), with
the link idle meanwhile.  As NCCL's ring does, each step's chunk goes in
``slices`` pieces (up to PIPELINE, none smaller than MIN_SLICE): a WRITE
with immediate each, and slice j of step k is posted as soon as slice j of
step k-1 arrived and was reduced, while the rest of step k-1 is still on
the wire.  The plan's steps stay whole (what moves where); the slices are
how a rank executes them, the same on both backends (:func:`slice_span`).
The immediate's lower half numbers the slice, ``step * slices + j``.
Two slices hide a reaction of up to a slice's link time; more would hide
more, but every slice is a post and a completion through the verbs socket,
and on two cores that CPU is what the emulated ranks lack (measured in
docs/performance.md: one slice 1.14x the link time at 100 Mbit/s, two
1.02x, four 1.07 to 1.14x).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emulator.errors import FabricError

COLLECTIVES = ("incast", "alltoall", "allreduce", "allgather", "victim", "shift", "multijob", "permutation")
SHIFT = 2  # shift: rank r writes to rank r + SHIFT
SENDER_COLLECTIVES = ("incast", "victim", "multijob")  # the collectives that take ``senders``
ELEMENT = 4  # float32: all-reduce chunks are whole elements
PIPELINE = 2  # a ring step's chunk goes in at most this many slices (measured: docs/performance.md)
MIN_SLICE = 4096  # bytes: no slice below one default RDMA MTU (a smaller chunk goes whole)
IMMEDIATE_SLICES = 1 << 16  # the immediate's lower half numbers a rank's slices of an iteration


@dataclass(frozen=True)
class Send:
    """WRITE ``length`` bytes at ``offset`` of my data region into ``dst``'s ``region`` at ``dst_offset``."""

    dst: int
    offset: int
    length: int
    region: str  # "data" or "staging"
    dst_offset: int
    at_step: int | None = None  # the receiver's step it arrives for (a workload's plans); None: the sender's step


@dataclass(frozen=True)
class OpSpan:
    """One collective of a training step as a rank runs it (:mod:`emulator.collectives.workload_plan`): the
    step's collective ``op``, the rank's steps ``first`` to ``first + steps``, the compute before it is issued
    and whether the compute after it waits for it."""

    op: int
    first: int
    steps: int
    compute_ns: int
    blocking: bool


@dataclass(frozen=True)
class Step:
    sends: tuple[Send, ...]
    receives: tuple[int, ...]  # ranks a WRITE with immediate is expected from
    reduce: tuple[int, int, int] | None = None  # (staging offset, data offset, length): data += staging


@dataclass
class RankPlan:
    rank: int
    data_bytes: int
    staging_bytes: int
    steps: list[Step] = field(default_factory=list)
    measured: bool = True  # its arrivals make the iteration's CCT (multijob: the all-reduce's ranks only)
    reduce_group: tuple[int, ...] = ()  # the ranks whose inputs it sums (all-reduce), none if it reduces nothing
    slices: int = 1  # each send goes in this many WRITEs with immediate (:func:`slice_span`)
    ops: tuple[OpSpan, ...] = ()  # a training step's collectives, each begun after its compute (one slice)

    @property
    def peers(self) -> set[int]:
        return {s.dst for step in self.steps for s in step.sends} | {r for step in self.steps for r in step.receives}

    @property
    def receive_count(self) -> int:
        """WRITEs with immediate it expects in an iteration (a slice each)."""
        return sum(len(step.receives) for step in self.steps) * self.slices

    @property
    def receives_by_peer(self) -> dict[int, int]:
        """How many WRITEs with immediate each peer sends this rank in an iteration: the receives to post."""
        counts: dict[int, int] = {}
        for step in self.steps:
            for src in step.receives:
                counts[src] = counts.get(src, 0) + self.slices
        return counts

    def reduce_input(self, iteration: int) -> float:
        """Every float32 of this rank's data region before an all-reduce iteration: (rank + 1) x (iteration + 1)."""
        return float((self.rank + 1) * (iteration + 1))

    def reduce_result(self, iteration: int) -> float:
        """Every float32 of the data region after the iteration: the inputs of its reduction group summed."""
        return float((iteration + 1) * sum(rank + 1 for rank in self.reduce_group))


def ring_slices(chunk: int, steps: int) -> int:
    """How many slices a ring of ``steps`` steps of ``chunk`` bytes sends each chunk in."""
    return max(1, min(PIPELINE, chunk // MIN_SLICE, IMMEDIATE_SLICES // max(steps, 1)))


def slice_span(length: int, slices: int, j: int) -> tuple[int, int]:
    """Slice ``j`` of a ``length``-byte send (or reduce) cut in ``slices``: (offset in it, length).

    Whole float32s (a multiple of ELEMENT) but the last; sender and receiver cut the same length alike.
    """
    piece = -(-length // slices)
    piece += -piece % ELEMENT
    offset = min(j * piece, length)
    return offset, min(piece, length - offset)


def chunk_bytes(collective: str, size: int, ranks: int) -> int:
    """Bytes each step moves per rank: a ring's largest chunk (:func:`ring_chunks`), an all-to-all's per peer.

    One line for a size the collective cannot cut: none at all, an all-reduce's that is not whole float32s, an
    all-to-all's below a byte per peer.
    """
    if collective in ("incast", "victim", "shift", "permutation"):
        return size
    if collective == "multijob":  # the all-reduce of the even ranks
        collective, ranks = "allreduce", len(range(0, ranks, 2))
    if collective == "alltoall":
        if size < ranks:
            raise FabricError(f"alltoall of {size} bytes over {ranks} ranks leaves no data per rank; "
                              f"use a size of at least {ranks} bytes")
        return size // ranks
    element = ELEMENT if collective == "allreduce" else 1
    if size < 1:
        raise FabricError(f"{collective} of {size} bytes moves nothing; use a size of at least {element} "
                          f"{'byte' if element == 1 else 'bytes'}")
    if size % element:
        raise FabricError(f"{collective} of {size} bytes is not a whole number of float32s (as nccl-tests counts "
                          f"them); use a multiple of {element} bytes")
    return ring_chunks(size, ranks, element)[0][1]


def ring_chunks(size: int, ranks: int, element: int) -> list[tuple[int, int]]:
    """A ring's ``size`` bytes cut in ``ranks`` chunks as NCCL cuts them: (offset, length) of each chunk.

    The ``size / element`` elements as evenly as possible, the first ``count % ranks`` chunks one element longer;
    chunk i at its own offset.  Chunks are empty when there are fewer elements than ranks.
    """
    base, extra = divmod(size // element, ranks)
    return [((i * base + min(i, extra)) * element, (base + (i < extra)) * element) for i in range(ranks)]


def plan(collective: str, ranks: int, size: int, senders: int | None = None) -> list[RankPlan]:
    """The plan of every rank."""
    if collective not in COLLECTIVES:
        raise FabricError(f"unknown collective {collective!r}; choose {', '.join(COLLECTIVES)}")
    if ranks < 2:
        raise FabricError(f"{collective} needs at least 2 hosts, the topology has {ranks}")
    chunk = chunk_bytes(collective, size, ranks)
    if collective == "incast":
        return _incast(ranks, chunk, ranks - 1 if senders is None else senders)
    if collective == "victim":
        return _victim(ranks, chunk, ranks - 2 if senders is None else senders)
    if collective == "alltoall":
        return _alltoall(ranks, chunk)
    if collective == "shift":
        if ranks <= SHIFT:
            raise FabricError(f"shift needs at least {SHIFT + 1} hosts (each writes to the one {SHIFT} further on), "
                              f"the topology has {ranks}")
        return _shift(ranks, chunk, SHIFT)
    if collective == "permutation":
        return _shift(ranks, chunk, ranks // 2)
    if collective == "multijob":
        return _multijob(ranks, size, senders)
    return _ring(ranks, size, reduce=collective == "allreduce")


def _incast(ranks: int, size: int, senders: int) -> list[RankPlan]:
    if not 1 <= senders <= ranks - 1:
        raise FabricError(f"incast with {senders} senders: choose 1 to {ranks - 1} on {ranks} hosts")
    plans = [RankPlan(0, senders * size, 0, [Step((), tuple(range(1, senders + 1)))])]
    for r in range(1, ranks):
        steps = [Step((Send(0, 0, size, "data", (r - 1) * size),), ())] if r <= senders else []
        plans.append(RankPlan(r, size, 0, steps))
    return plans


def _victim(ranks: int, size: int, senders: int) -> list[RankPlan]:
    if ranks < 3 or not 1 <= senders <= ranks - 2:
        raise FabricError(f"victim with {senders} senders: choose 1 to {ranks - 2} on {ranks} hosts "
                          "(at least 3: a receiver, a sender and the victim flow's idle receiver)")
    plans = _incast(ranks, size, senders)
    victim = ranks - 1
    plans[1].steps = [Step(plans[1].steps[0].sends + (Send(victim, 0, size, "data", 0),), ())]
    plans[victim] = RankPlan(victim, size, 0, [Step((), (1,))])
    return plans


def _shift(ranks: int, size: int, offset: int) -> list[RankPlan]:
    """Every rank writes ``size`` bytes to the rank ``offset`` further on."""
    return [RankPlan(r, size, 0, [Step((Send((r + offset) % ranks, 0, size, "data", 0),), ((r - offset) % ranks,))])
            for r in range(ranks)]


def _multijob(ranks: int, size: int, senders: int | None) -> list[RankPlan]:
    job, neighbours = list(range(0, ranks, 2)), list(range(1, ranks, 2))
    if len(job) < 2 or len(neighbours) < 1:
        raise FabricError(f"multijob needs at least 3 hosts (an all-reduce of two and an incast receiver), "
                          f"the topology has {ranks}")
    senders = len(neighbours) - 1 if senders is None else senders
    if not 0 <= senders <= len(neighbours) - 1:
        raise FabricError(f"multijob with {senders} incast senders: choose 0 to {len(neighbours) - 1} on {ranks} hosts")
    plans: list[RankPlan] = []
    for index, rank_plan in enumerate(_ring(len(job), size, reduce=True)):  # ring positions to even ranks
        steps = [Step(tuple(Send(job[s.dst], s.offset, s.length, s.region, s.dst_offset) for s in step.sends),
                      tuple(job[r] for r in step.receives), step.reduce) for step in rank_plan.steps]
        plans.append(RankPlan(job[index], rank_plan.data_bytes, rank_plan.staging_bytes, steps,
                              reduce_group=tuple(job), slices=rank_plan.slices))
    receiver, sending = neighbours[-1], neighbours[:senders]
    for rank in neighbours:
        if rank == receiver:
            steps = [Step((), tuple(sending))] if sending else []
            plans.append(RankPlan(rank, max(senders, 1) * size, 0, steps, measured=False))
        else:
            at = sending.index(rank) if rank in sending else None
            steps = [Step((Send(receiver, 0, size, "data", at * size),), ())] if at is not None else []
            plans.append(RankPlan(rank, size, 0, steps, measured=False))
    return sorted(plans, key=lambda p: p.rank)


def victim_flow(ranks: int) -> tuple[int, int]:
    """The victim collective's victim flow: (source rank, destination rank)."""
    return 1, ranks - 1


def _alltoall(ranks: int, chunk: int) -> list[RankPlan]:
    # data region: [send chunks for ranks 0..N-1][receive chunks from ranks 0..N-1]
    plans = []
    for r in range(ranks):
        others = [j for j in range(ranks) if j != r]
        sends = tuple(Send(j, j * chunk, chunk, "data", (ranks + r) * chunk) for j in others)
        plans.append(RankPlan(r, 2 * ranks * chunk, 0, [Step(sends, tuple(others))]))
    return plans


def _ring(ranks: int, size: int, reduce: bool) -> list[RankPlan]:
    """A ring over ``size`` bytes in uneven chunks (:func:`ring_chunks`); a reduce-scatter first when ``reduce``.

    Step k of the reduce-scatter is staged at k x the largest chunk (staging slots all alike, so an offset is a
    product); a rank's slices are cut from its largest chunk, the same on every rank.
    """
    chunks = ring_chunks(size, ranks, ELEMENT if reduce else 1)
    largest = chunks[0][1]
    step_count = (2 if reduce else 1) * (ranks - 1)
    plans = []
    for r in range(ranks):
        nxt, prev = (r + 1) % ranks, (r - 1) % ranks
        steps = []
        if reduce:  # reduce-scatter: send my partial sum of chunk (r-k), add what prev sent of chunk (r-1-k)
            for k in range(ranks - 1):
                offset, length = chunks[(r - k) % ranks]
                send = Send(nxt, offset, length, "staging", k * largest)
                offset, length = chunks[(r - 1 - k) % ranks]
                steps.append(Step((send,), (prev,), (k * largest, offset, length)))
        # all-gather: pass on the chunk that is complete here, (r+1-k) after a reduce-scatter, else (r-k)
        first = r + 1 if reduce else r
        for k in range(ranks - 1):
            offset, length = chunks[(first - k) % ranks]
            steps.append(Step((Send(nxt, offset, length, "data", offset),), (prev,)))
        plans.append(RankPlan(r, size, (ranks - 1) * largest if reduce else 0, steps,
                              reduce_group=tuple(range(ranks)) if reduce else (),
                              slices=ring_slices(largest, step_count)))
    return plans


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw: what each link carries relative to the algorithm's bandwidth."""
    if collective == "allreduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("allgather", "alltoall"):
        return (ranks - 1) / ranks
    return 1.0
