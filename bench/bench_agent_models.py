"""The agents' per-frame model calls, on the compiled models (emulator._core) the agents run.

Run from the repository root (no root needed)::

    .venv/bin/python bench/bench_agent_models.py [--frames N] [--rounds 3]

Only the models' work, without sockets or the event loop, per frame:

  * switch: what SwitchAgent._process and _drain call for one IPv4 frame of
    1500 bytes (IPv4 check, priority, loss draw, ECMP hash, routing, MMU
    admission, head, loss at the head, pop), on a lossless MMU;
  * RNIC: one 4 KiB RDMA WRITE packet between two compiled RNICs on wires in
    memory (``emulator._core.dataplane.UnwiredNic``, the agents' own RNIC
    without its socket): the requester's next packet and its RoCEv2 framing,
    the responder's decoding and its receive into its memfd region, and the
    ACKs back.  Driven from Python, one call per frame handed over: the
    figure includes a binding call and a bytes object per frame, which the
    loop's driver does not pay.  The regions' pages exist before (written
    once, as an application's buffers are); the RNIC's mappings still fault
    them in on first touch (minor faults), as the agent's do.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import socket
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import emulator._core.forwarding as forwarding  # noqa: E402
import emulator._core.rc as rc  # noqa: E402
from emulator._core.link import Link  # noqa: E402
from emulator._core.mmu import Mmu  # noqa: E402
from emulator import flags  # noqa: E402
from emulator._core.dataplane import UnwiredNic  # noqa: E402
from emulator.agents.config import HostConfig  # noqa: E402
from emulator.agents.memory import ACCESS_ALL, register  # noqa: E402
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


def _host(name: str, ip: str, mac: str, peer_mac: str) -> HostConfig:
    return HostConfig(name=name, netns="none", control="/nonexistent", stats_file="/nonexistent", seed=1,
                      ifname=f"{name}-eth0", rate_bps=10_000_000_000, mtu=4200, mac=mac, peer_mac=peer_mac, ip=ip,
                      verbs="/nonexistent", ib=None)


def _region(nic: UnwiredNic) -> tuple[int, int]:
    """A sealed memfd of REGION bytes registered with ``nic`` (domain 1): (descriptor, key)."""
    fd = os.memfd_create("bench-mr", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, REGION)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    key = register(nic, 1, 0, REGION, ACCESS_ALL, fd)
    os.pwrite(fd, bytes(REGION), 0)  # the pages exist, as an application's buffers do
    return fd, key


def rnic_ns() -> float:
    """Nanoseconds per 4 KiB WRITE packet from one compiled RNIC's QP into the other's region, ACKs back."""
    a = UnwiredNic(_host("h1", "10.0.0.1", "02:00:00:00:01:00", "02:00:00:00:02:00"))
    b = UnwiredNic(_host("h2", "10.0.0.2", "02:00:00:00:02:00", "02:00:00:00:01:00"))
    (fa, ka), (fb, kb) = _region(a), _region(b)
    config = rc.RcConfig(mtu=4096, max_msg=REGION, max_inflight=REGION // 4096)
    a.connect(0x11, 1, 0, config, 0x12, 0, "10.0.0.2", [])
    b.connect(0x12, 1, 0, config, 0x11, 0, "10.0.0.1", [])
    a.post_send(0x11, [(1, int(rc.WrOpcode.RDMA_WRITE), 0, REGION, ka, 0, kb, 0, True)])
    now, frames = 0, 0
    began = time.perf_counter_ns()
    while not (done := a.completions()):
        now += 1000
        a.after_events(now)
        for frame in a.take_sent():
            b.receive(now, frame)
            frames += 1
        b.after_events(now)
        for frame in b.take_sent():
            a.receive(now, frame)
    elapsed = time.perf_counter_ns() - began
    os.close(fa)
    os.close(fb)
    if done[0][2] != rc.WcStatus.SUCCESS or frames != REGION // 4096:
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
            ("RNIC", rnic_ns),
        ):
            runs.setdefault(name, []).append(measure())
    for name, values in runs.items():
        print(f"{name:20}: median {statistics.median(values) / 1000:6.2f} us per frame "
              f"({', '.join(f'{v / 1000:.2f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
