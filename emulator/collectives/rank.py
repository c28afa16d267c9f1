"""One rank of a collective: a process inside a host, on the verbs API.

Started by the coordinator as ``python -m emulator.collectives.rank
SOCKET RUN NODE``; it talks to the coordinator in JSON lines over the Unix
socket (reachable from every namespace: it is a file in the run directory).

1. ``hello`` -> ``plan`` (its rank, the collective, the size, iterations).
2. It opens the host's RNIC, registers its regions, creates one RC QP per
   peer and sends their QPN/PSN, its GID and its regions' keys; the
   coordinator answers with every peer's, and it connects the QPs.
3. Per iteration: it posts the receives it will need and says ``ready``;
   the coordinator sends the common start instant T (CLOCK_MONOTONIC, shared
   by all namespaces); the rank posts its first sends *for T* (the RNIC
   holds them and releases them at T on its own timer, so the start does not
   depend on when this process is scheduled), runs its steps (pipelined in
   slices, see :mod:`emulator.collectives.algorithms`), and reports
   every arrival's time stamp (from the RNIC's completions), the release
   time of its first sends (the achieved start) and its QPs' counters.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

import numpy as np

from emulator.agents.verbs_messages import MAX_WRS
from emulator.collectives.algorithms import RankPlan, Step, plan, slice_span
from emulator.collectives.workload_plan import plan_from_json
from emulator.errors import FabricError
from emulator.apps.jsonlines import JsonLines
from emulator.apps.verbs import CQ, MR, PD, QP, Context, RecvWR, SendWR, VerbsError, WcOpcode, WcStatus, WrOpcode

STEP_TIMEOUT_S = 30.0
RANK_RT_PRIORITY = 5  # below the agents (10), above applications


class Rank:
    """The verbs objects of one rank and the execution of its plan."""

    def __init__(self, run: str, node: str, setup: dict[str, Any]) -> None:
        self.rank = setup["rank"]
        self.iterations = setup["iterations"]
        if "plan" in setup:  # a training step's part, placed by the coordinator
            self.plan: RankPlan = plan_from_json(self.rank, setup["plan"])
            self.tail_ns = int(setup["tail_ns"])
        else:
            self.plan = plan(setup["collective"], setup["ranks"], setup["size"], setup.get("senders"))[self.rank]
        self.ranks = setup["ranks"]
        self.mtu = setup["mtu"]
        self.ctx = Context(run, node)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx)
        self.data = MR(self.pd, max(self.plan.data_bytes, 1))
        self.staging = MR(self.pd, self.plan.staging_bytes) if self.plan.staging_bytes else None
        self.qps = {peer: QP(self.pd, self.cq, self.cq) for peer in sorted(self.plan.peers)}
        self.remote: dict[int, dict[str, Any]] = {}
        self.reduce = bool(self.plan.reduce_group)
        # Only the last WRITE to each peer in an iteration asks for a completion: on an RC QP it completes after
        # every WRITE before it, and the completions not asked for are messages neither side has to handle.
        # A training step's collectives each wait for their WRITEs: the last to each peer in each collective.
        slices = self.plan.slices
        self.last_write = {s.dst: k * slices + slices - 1 for k, step in enumerate(self.plan.steps) for s in step.sends}
        self.op_last_writes: set[tuple[int, int]] = set()  # (step, peer)
        for span in self.plan.ops:
            seen: set[int] = set()
            for k in reversed(range(span.first, span.first + span.steps)):
                for dst in {s.dst for s in self.plan.steps[k].sends} - seen:
                    self.op_last_writes.add((k, dst))
                    seen.add(dst)

    def local_info(self) -> dict[str, Any]:
        regions = {"data": [self.data.addr, self.data.rkey]}
        if self.staging is not None:
            regions["staging"] = [self.staging.addr, self.staging.rkey]
        return {"gid": self.ctx.attr["gid"], "regions": regions,
                "qps": {str(peer): [qp.qp_num, qp.psn] for peer, qp in self.qps.items()}}

    def connect(self, peers: dict[str, Any]) -> None:
        for peer, qp in self.qps.items():
            info = peers[str(peer)]
            qpn, psn = info["qps"][str(self.rank)]
            qp.connect(qpn, psn, info["gid"], mtu=self.mtu)
            self.remote[peer] = info["regions"]

    def fill(self, iteration: int) -> None:
        """This iteration's input: all-reduce sums (rank + 1) * (iteration + 1) everywhere."""
        if self.reduce:
            values = np.frombuffer(self.data.buf, dtype=np.float32)
            values[:] = self.plan.reduce_input(iteration)

    def verify(self, iteration: int) -> bool:
        if not self.reduce:
            return True
        values = np.frombuffer(self.data.buf, dtype=np.float32)
        return bool(np.all(values == self.plan.reduce_result(iteration)))

    def post_receives(self) -> None:
        for src, count in self.plan.receives_by_peer.items():
            for first in range(0, count, MAX_WRS):  # a long ring's slices take more than one request
                self.qps[src].post_recv([RecvWR(0, 0, 0, 0) for _ in range(min(MAX_WRS, count - first))], wait=False)

    def run_step(self, iteration: int, start_ns: int) -> dict[str, Any]:
        """A training step's iteration, one collective after the other
        (:mod:`~emulator.collectives.workload_plan`): each is issued after its compute and begins when the one
        before is done, its first WRITEs posted for that instant (the RNIC releases them then); it is done
        when its last arrival came and its last WRITEs completed.  Reports what :meth:`run_iteration` reports,
        and each collective's (begun, done) and the rank's end."""
        steps, tag = self.plan.steps, (iteration & 0xFFFF) << 16
        state = _Pump(self, tag)
        compute_free = previous_done = start_ns
        timeline = []
        for span in self.plan.ops:
            issue = compute_free + span.compute_ns
            at = max(issue, previous_done)
            done = at
            for k in range(span.first, span.first + span.steps):
                state.outstanding += self._post([(k, 0)], tag, at if k == span.first else None)
                while not all((src, k) in state.arrived for src in steps[k].receives):
                    state.wait(f"step {k}")
                done = max([done, *(state.arrived[(src, k)] for src in steps[k].receives)])
            while state.outstanding:
                state.wait("its last WRITEs")
            done = max([done, *state.completed])
            state.completed.clear()
            timeline.append([at, done])
            compute_free = max(done, issue) if span.blocking else issue
            previous_done = done
        end = max(compute_free + self.tail_ns, previous_done)
        return {**self._report(iteration, state.arrived, state.sends), "ops": timeline, "end_ns": end}

    def run_iteration(self, iteration: int, start_ns: int) -> dict[str, Any]:
        """Execute the plan once, pipelined (:mod:`~emulator.collectives.algorithms`); every arrival and send with
        its time stamp.

        Slice j of a step is posted once slice j of the step before arrived from every rank it expects and was
        reduced; the first step's slices all go at ``start_ns``.  A peer ahead may send a later slice before
        this rank waits for it, so arrivals are kept by (source, slice number) as they come.  Posts do not wait
        for the RNIC's answer, and only each peer's last WRITE completes (:attr:`last_write`), waited for at the
        end.
        """
        steps, slices = self.plan.steps, self.plan.slices
        arrived: dict[tuple[int, int], int] = {}  # (src, step * slices + j) -> time stamp
        sends: list[list[int]] = []  # [dst, slice number, completion time stamp] of each peer's last WRITE
        cursor = [0] * slices  # per slice j: the step whose sends are posted and whose arrivals it waits for
        tag = (iteration & 0xFFFF) << 16
        outstanding = self._post([(0, j) for j in range(slices)], tag, start_ns) if steps else 0
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while True:
            ready: list[tuple[int, int]] = []
            for j in range(slices):
                while cursor[j] < len(steps) and all((src, cursor[j] * slices + j) in arrived
                                                     for src in steps[cursor[j]].receives):
                    self._reduce(steps[cursor[j]], j)
                    cursor[j] += 1
                    if cursor[j] < len(steps):
                        ready.append((cursor[j], j))
            if ready:
                outstanding += self._post(sorted(ready), tag, None)  # in slice-number order, as a QP would send them
            if min(cursor) == len(steps) and outstanding == 0:
                break
            completions = self.cq.wait(64, timeout=1.0)
            if completions:
                deadline = time.monotonic() + STEP_TIMEOUT_S
            for wc in completions:
                if wc.status != WcStatus.SUCCESS:
                    raise VerbsError(f"rank {self.rank} {_at(cursor, steps)}: {wc.opcode.name} {wc.status.name}")
                if wc.opcode == WcOpcode.RECV_RDMA_WITH_IMM:
                    if wc.imm & 0xFFFF0000 != tag:
                        raise VerbsError(f"rank {self.rank} {_at(cursor, steps)}: immediate {wc.imm:#x} is not of "
                                         "this iteration")
                    arrived[(self._peer_of(wc.qp_num), wc.imm & 0xFFFF)] = wc.timestamp
                else:
                    outstanding -= 1
                    sends.append([self._peer_of(wc.qp_num), wc.wr_id, wc.timestamp])
            if time.monotonic() > deadline:
                raise VerbsError(f"rank {self.rank}: {_at(cursor, steps)} not done in {STEP_TIMEOUT_S:.0f} s")
        return self._report(iteration, arrived, sends)

    def _report(self, iteration: int, arrived: dict[tuple[int, int], int], sends: list[list[int]]) -> dict[str, Any]:
        """An iteration's report: every arrival and completion, the achieved start, the QPs' counters."""
        steps = self.plan.steps
        arrivals = [[src, number, stamp] for (src, number), stamp in arrived.items()]
        counters, released = {}, []
        first_senders = {s.dst for s in steps[0].sends} if steps else set()
        for peer, qp in self.qps.items():
            query = qp.query()
            counters[str(peer)] = [query["counters"].get("retransmitted_packets", 0), query["counters"].get("timeouts", 0)]
            if peer in first_senders and not self.plan.ops:  # a training step's later posts are timed too
                released.append(query["released_ns"])
        # The achieved start: when the RNIC released this rank's first sends (None: it sends nothing at T).
        return {"iteration": iteration, "released_ns": min(released) if released else None, "arrivals": arrivals,
                "sends": sends, "counters": counters, "verified": self.verify(iteration)}

    def _post(self, ready: list[tuple[int, int]], tag: int, at: int | None) -> int:
        """Posts the sends of every (step, slice) of ``ready``, in order, one request per QP; how many will
        complete."""
        slices = self.plan.slices
        by_dst: dict[int, list[SendWR]] = {}
        for k, j in ready:
            number = k * slices + j
            for s in self.plan.steps[k].sends:
                remote_addr, rkey = self.remote[s.dst][s.region]
                offset, length = slice_span(s.length, slices, j)
                arrives = number if s.at_step is None else s.at_step * slices + j  # the receiver's slice number
                signaled = (k, s.dst) in self.op_last_writes if self.plan.ops else number == self.last_write[s.dst]
                by_dst.setdefault(s.dst, []).append(SendWR(number, WrOpcode.RDMA_WRITE_WITH_IMM,
                                                           self.data.addr + s.offset + offset, length, self.data.lkey,
                                                           remote_addr + s.dst_offset + offset, rkey, tag | arrives,
                                                           signaled=signaled))
        for dst, wrs in by_dst.items():
            self.qps[dst].post_send(wrs, at=at, wait=False)
        return sum(w.signaled for wrs in by_dst.values() for w in wrs)

    def _reduce(self, step: Step, j: int) -> None:
        """Slice ``j`` of ``step``'s reduction, if it has one: data += staging."""
        if step.reduce is None or self.staging is None:
            return
        staged, offset, length = step.reduce
        at, count = slice_span(length, self.plan.slices, j)
        mine = np.frombuffer(self.data.buf, dtype=np.float32, count=count // 4, offset=offset + at)
        mine += np.frombuffer(self.staging.buf, dtype=np.float32, count=count // 4, offset=staged + at)

    def _peer_of(self, qp_num: int) -> int:
        for peer, qp in self.qps.items():
            if qp.qp_num == qp_num:
                return peer
        raise VerbsError(f"a completion for unknown QP {qp_num}")


class _Pump:
    """A training step's completions as they come: arrivals by (source, step), WRITEs outstanding and the time
    stamps of those completed since the last collective was done."""

    def __init__(self, rank: Rank, tag: int) -> None:
        self.rank, self.tag = rank, tag
        self.arrived: dict[tuple[int, int], int] = {}
        self.sends: list[list[int]] = []
        self.completed: list[int] = []
        self.outstanding = 0
        self.deadline = time.monotonic() + STEP_TIMEOUT_S

    def wait(self, what: str) -> None:
        """Takes the next completions, or fails the rank when none came for STEP_TIMEOUT_S."""
        rank = self.rank
        completions = rank.cq.wait(64, timeout=1.0)
        if completions:
            self.deadline = time.monotonic() + STEP_TIMEOUT_S
        for wc in completions:
            if wc.status != WcStatus.SUCCESS:
                raise VerbsError(f"rank {rank.rank} at {what}: {wc.opcode.name} {wc.status.name}")
            if wc.opcode == WcOpcode.RECV_RDMA_WITH_IMM:
                if wc.imm & 0xFFFF0000 != self.tag:
                    raise VerbsError(f"rank {rank.rank} at {what}: immediate {wc.imm:#x} is not of this iteration")
                self.arrived[(rank._peer_of(wc.qp_num), wc.imm & 0xFFFF)] = wc.timestamp
            else:
                self.outstanding -= 1
                self.sends.append([rank._peer_of(wc.qp_num), wc.wr_id, wc.timestamp])
                self.completed.append(wc.timestamp)
        if time.monotonic() > self.deadline:
            raise VerbsError(f"rank {rank.rank}: {what} not done in {STEP_TIMEOUT_S:.0f} s")


def _at(cursor: list[int], steps: list[Step]) -> str:
    """Where a rank is, for its error: the earliest step a slice waits at, or its last sends."""
    return f"step {min(cursor)}" if min(cursor) < len(steps) else "the last sends"


def _run_before_applications() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RANK_RT_PRIORITY))
    except OSError:
        pass  # the RNIC releases the first sends at T; the rank's own timing matters less


def main() -> None:
    path, run, node = sys.argv[1:4]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    coordinator = JsonLines(sock, "the coordinator")
    coordinator.send({"hello": node})
    setup = coordinator.receive("the plan")
    try:
        rank = Rank(run, node, setup)
        coordinator.send(rank.local_info())
        rank.connect(coordinator.receive("the peers")["peers"])
        _run_before_applications()
        for iteration in range(rank.iterations):
            rank.fill(iteration)
            rank.post_receives()
            coordinator.send({"ready": iteration})
            start = coordinator.receive("the start")
            run = rank.run_step if rank.plan.ops else rank.run_iteration
            coordinator.send(run(iteration, start["start_ns"]))
        coordinator.send({"done": True})
        # Stay until every rank is done: a rank with nothing to do (a neighbour job's idle host) that left
        # at once would have its RNIC tear down its QPs while the others' last iteration runs.
        coordinator.receive("the end")
    except (FabricError, OSError, ValueError) as err:
        coordinator.send({"error": str(err)})
        sys.exit(1)


if __name__ == "__main__":
    main()
