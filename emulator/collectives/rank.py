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
   depend on when this process is scheduled), runs its steps, and reports
   every arrival's time stamp (from the RNIC's completions), the release
   time of its first sends (the achieved start) and its QPs' counters.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Callable

import numpy as np

from emulator.collectives.algorithms import RankPlan, plan
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
        plans = plan(setup["collective"], setup["ranks"], setup["size"], setup.get("senders"))
        self.plan: RankPlan = plans[self.rank]
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
            self.qps[src].post_recv([RecvWR(0, 0, 0, 0) for _ in range(count)])

    def run_iteration(self, iteration: int, start_ns: int) -> dict[str, Any]:
        """Execute the plan once; every arrival and send with its time stamp.

        A step needs its own arrivals before the next may start (a ring's
        dependency); a peer one step ahead may already have sent the next
        step's data, so arrivals are kept by (source, step) as they come.
        Send completions are only waited for at the end.
        """
        arrived: dict[tuple[int, int], int] = {}  # (src, step) -> time stamp
        sends: list[list[int]] = []  # [dst, step, completion time stamp]
        outstanding = 0
        tag = (iteration & 0xFFFF) << 16
        for index, step in enumerate(self.plan.steps):
            by_dst: dict[int, list[SendWR]] = {}
            for s in step.sends:
                remote_addr, rkey = self.remote[s.dst][s.region]
                by_dst.setdefault(s.dst, []).append(SendWR(index, WrOpcode.RDMA_WRITE_WITH_IMM, self.data.addr + s.offset,
                                                           s.length, self.data.lkey, remote_addr + s.dst_offset,
                                                           rkey, tag | index))
            for dst, wrs in by_dst.items():
                self.qps[dst].post_send(wrs, at=start_ns if index == 0 else None)
                outstanding += len(wrs)
            needed = [(src, index) for src in step.receives]
            outstanding = self._collect(arrived, sends, outstanding, lambda _: all(k in arrived for k in needed),
                                        tag, f"step {index}")
            if step.reduce is not None and self.staging is not None:
                staged, offset, length = step.reduce
                mine = np.frombuffer(self.data.buf, dtype=np.float32, count=length // 4, offset=offset)
                mine += np.frombuffer(self.staging.buf, dtype=np.float32, count=length // 4, offset=staged)
        self._collect(arrived, sends, outstanding, lambda left: left == 0, tag, "the last sends")
        arrivals = [[src, step, stamp] for (src, step), stamp in arrived.items()]
        counters, released = {}, []
        first_senders = {s.dst for s in self.plan.steps[0].sends} if self.plan.steps else set()
        for peer, qp in self.qps.items():
            query = qp.query()
            counters[str(peer)] = [query["counters"].get("retransmitted_packets", 0), query["counters"].get("timeouts", 0)]
            if peer in first_senders:
                released.append(query["released_ns"])
        # The achieved start: when the RNIC released this rank's first sends (None: it sends nothing at T).
        return {"iteration": iteration, "released_ns": min(released) if released else None, "arrivals": arrivals,
                "sends": sends, "counters": counters, "verified": self.verify(iteration)}

    def _collect(self, arrived: dict[tuple[int, int], int], sends: list[list[int]], outstanding: int,
                 done: Callable[[int], bool], tag: int, what: str) -> int:
        """Take completions until ``done(sends outstanding)``; returns the sends still outstanding."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not done(outstanding):
            for wc in self.cq.wait(64, timeout=1.0):
                if wc.status != WcStatus.SUCCESS:
                    raise VerbsError(f"rank {self.rank} {what}: {wc.opcode.name} {wc.status.name}")
                if wc.opcode == WcOpcode.RECV_RDMA_WITH_IMM:
                    if wc.imm & 0xFFFF0000 != tag:
                        raise VerbsError(f"rank {self.rank} {what}: immediate {wc.imm:#x} is not of this iteration")
                    arrived[(self._peer_of(wc.qp_num), wc.imm & 0xFFFF)] = wc.timestamp
                else:
                    outstanding -= 1
                    sends.append([self._peer_of(wc.qp_num), wc.wr_id, wc.timestamp])
            if time.monotonic() > deadline:
                raise VerbsError(f"rank {self.rank}: {what} not done in {STEP_TIMEOUT_S:.0f} s")
        return outstanding

    def _peer_of(self, qp_num: int) -> int:
        for peer, qp in self.qps.items():
            if qp.qp_num == qp_num:
                return peer
        raise VerbsError(f"a completion for unknown QP {qp_num}")


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
            coordinator.send(rank.run_iteration(iteration, start["start_ns"]))
        coordinator.send({"done": True})
        # Stay until every rank is done: a rank with nothing to do (a neighbour job's idle host) that left
        # at once would have its RNIC tear down its QPs while the others' last iteration runs.
        coordinator.receive("the end")
    except (FabricError, OSError, ValueError) as err:
        coordinator.send({"error": str(err)})
        sys.exit(1)


if __name__ == "__main__":
    main()
