"""The agents' per-frame model calls, on the compiled models (emulator._core) the agents run.

Run from the repository root (no root needed)::

    .venv/bin/python bench/bench_agent_models.py [--frames N] [--rounds 3]

Only the models' work, without sockets or the event loop, per frame:

  * switch: what SwitchAgent._process and _drain call for one IPv4 frame of
    1500 bytes (IPv4 check, priority, loss draw, ECMP hash, routing, MMU
    admission, head, loss at the head, pop), on a lossless MMU;
  * RNIC: one 4 KiB RDMA WRITE packet: the requester's next packet, RoCEv2
    framing, decoding, the responder's receive into its region, and the
    ACKs back.  The frame is decoded from a memoryview of a reused receive
    buffer, as Rnic._receive does, and from a bytes copy: the compiled
    decoder copies a memoryview's bytes once, so the two say whether the
    reused receive buffer still pays.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import emulator._core.forwarding as forwarding  # noqa: E402
import emulator._core.rc as rc  # noqa: E402
import emulator._core.roce as roce  # noqa: E402
from emulator._core.link import Link  # noqa: E402
from emulator._core.mmu import Mmu  # noqa: E402
from emulator import flags  # noqa: E402
from emulator.agents.memory import ACCESS_ALL, RegionTable  # noqa: E402
from emulator.model.switch_params import derive_config  # noqa: E402

RATE = 10**10
MAC_A, MAC_B = b"\x02\x00\x00\x00\x01\x01", b"\x02\x00\x00\x00\x01\x02"
REGION = 1 << 24  # the WRITE's length and each side's region: 4096 packets of 4 KiB


def _udp_frame(size: int = 1500) -> bytes:
    """An IPv4/UDP frame of ``size`` bytes in priority 3, ECT(0) (so the lossless and ECN paths run)."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0x6A, size - 14, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2"))
    udp = struct.pack("!HHHH", 49152, 4791, size - 34, 0)
    return MAC_B + MAC_A + b"\x08\x00" + ip + udp + bytes(size - 42)


def switch_ns(frames: int) -> float:
    """Nanoseconds of model calls per frame forwarded from port 0 to port 1."""
    frame = _udp_frame()
    mmu = Mmu(derive_config("lossless", RATE, 0, 1500, 2, {}), [RATE, RATE], seed=1)
    link = Link(RATE, 0, True, 0.0, [], 1)
    began = time.perf_counter_ns()
    for now in range(frames):
        if not forwarding.ipv4_ok(frame):
            raise AssertionError("the bench's frame is malformed")
        prio = forwarding.priority(frame)
        link.lost_from_host(prio)
        forwarding.ecmp_index(frame, 1, 2)
        mmu.enqueue(now, 0, 1, prio, forwarding.routed(frame, MAC_A, MAC_B))
        prio, head = mmu.head(1)
        link.lost_at_head(head, prio)
        mmu.pop(1, prio)
    return (time.perf_counter_ns() - began) / frames


def rnic_ns(as_bytes: bool = False) -> float:
    """Nanoseconds of model calls per 4 KiB WRITE packet, from the requester's QP into the responder's region."""
    table = RegionTable(1)
    a = table.register(1, 0, REGION, ACCESS_ALL, buffer=bytearray(REGION))
    b = table.register(2, 0, REGION, ACCESS_ALL, buffer=bytearray(REGION))
    config = rc.RcConfig(mtu=4096, max_msg=REGION)
    sender = rc.RcQueuePair(0x11, table.domain(1), config, 0)
    receiver = rc.RcQueuePair(0x12, table.domain(2), config, 0)
    sender.connect(0x12, 0)
    receiver.connect(0x11, 0)
    out = roce.Framer("02:00:00:00:01:01", "02:00:00:00:01:02", "10.0.0.1", "10.0.0.2", 49152, 26)
    back = roce.Framer("02:00:00:00:01:02", "02:00:00:00:01:01", "10.0.0.2", "10.0.0.1", 49153, 26)
    rx = bytearray(4096 + 128)
    view = memoryview(rx)
    sender.post_send(rc.SendWR(1, rc.WrOpcode.RDMA_WRITE, 0, REGION, a.key, 0, b.key))
    frames, began = 0, time.perf_counter_ns()
    while (packet := sender.next_packet(frames)) is not None:
        frame = out.encode(packet)
        rx[:len(frame)] = frame  # the receive buffer Rnic._receive reuses
        received = bytes(view[:len(frame)]) if as_bytes else view[:len(frame)]
        receiver.receive(frames, roce.decode(received).packet)
        while (ack := receiver.next_packet(frames)) is not None:
            sender.receive(frames, roce.decode(back.encode(ack)).packet)
        frames += 1
    elapsed = time.perf_counter_ns() - began
    if bytes(b.view[:64]) != bytes(a.view[:64]) or frames != REGION // 4096:
        raise AssertionError("the WRITE did not arrive whole")
    return elapsed / frames


def main() -> int:
    parser = flags.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=flags.whole("--frames", (1000, 10_000_000)), default=100_000,
                        help="frames of the switch's measurement (1000 to 10,000,000, default 100,000)")
    parser.add_argument("--rounds", type=flags.whole("--rounds", (1, 100)), default=3,
                        help="rounds, each measuring every line once (default 3)")
    args = parser.parse_checked()
    runs: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, measure in (
            ("switch", lambda: switch_ns(args.frames)),
            ("RNIC", lambda: rnic_ns()),
            ("RNIC, frame as bytes", lambda: rnic_ns(as_bytes=True)),
        ):
            runs.setdefault(name, []).append(measure())
    for name, values in runs.items():
        print(f"{name:20}: median {statistics.median(values) / 1000:6.2f} us per frame "
              f"({', '.join(f'{v / 1000:.2f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
