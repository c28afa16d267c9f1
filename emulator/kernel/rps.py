"""Keep each flow's frames in order across a veth (Receive Packet Steering).

A veth hands every frame to the receive backlog of the CPU that transmitted
it.  The CPU that transmits changes from frame to frame (whichever runs the
sender's qdisc: the sending process, or the HTB timer's softirq), and two
backlogs drain independently, so frames of one flow were overtaken: an RC
responder saw out-of-order PSNs (8 in a 64 MiB WRITE) with no frame lost.
Real links never reorder.  RPS with every CPU in the mask sends all frames
of one flow (by the flow hash of the 5-tuple) through one CPU's backlog, so
a flow stays in order and different flows still spread over the CPUs.
Frames without a flow hash (native IB) need the whole link on one CPU.

When the agents' processes are pinned to CPUs (:mod:`emulator.agents.worker`),
an interface's frames go through the backlog of the CPU its peer's process
runs on, the CPU that sends nearly all of them: every frame stays in order
and is received where it was sent, with no inter-processor interrupt
(bench_collective_cpu at 100 Mbit/s: about 10% less CPU per frame than
flows spread over both CPUs; docs/performance.md).
"""

from __future__ import annotations

import glob
import os
import zlib


def rps_mask(ifname: str, number: int, whole_link: bool, rx_cpu: int | None, cpus: int) -> str:
    """The rps_cpus value for the ``number``-th interface of an agent.

    ``rx_cpu``, when known, is the one CPU for all of its frames.  Else
    ``whole_link`` puts every frame of an interface on one CPU (the
    interfaces spread over the CPUs): native IB frames are not IP, the
    kernel computes no flow hash for them, and RPS without a hash steers
    nothing, so IB packets were reordered (go-back-N resent them).  Else
    flows spread over every CPU.
    """
    if rx_cpu is not None:
        return _bitmap(1 << rx_cpu)
    if whole_link:
        return _bitmap(1 << (zlib.crc32(ifname.encode()) + number) % cpus)
    return _bitmap((1 << cpus) - 1)


def _bitmap(bits: int) -> str:
    """A CPU mask as sysfs reads it: hex in 32-bit groups separated by commas, e.g. ``1,00000000`` for CPU 32."""
    text = format(bits, "x")
    groups = [text[max(0, end - 8):end] for end in range(len(text), 0, -8)]
    return ",".join(reversed(groups))


def keep_flows_in_order(ifnames: list[str], whole_link: bool = False,
                        rx_cpus: list[int | None] | None = None) -> list[str]:
    """Enable RPS on the receive queues of ``ifnames`` (see :func:`rps_mask`); returns what could not be set.

    Needs a sysfs of the caller's network namespace on /sys (agents get one
    from :func:`emulator.kernel.netns.node_view`).
    """
    cpus = os.cpu_count() or 1
    failed = []
    for number, ifname in enumerate(ifnames):
        mask = rps_mask(ifname, number, whole_link, rx_cpus[number] if rx_cpus else None, cpus)
        queues = glob.glob(f"/sys/class/net/{ifname}/queues/rx-*/rps_cpus")
        if not queues:
            failed.append(ifname)
        for path in queues:
            try:
                with open(path, "w") as f:
                    f.write(mask)
            except OSError:
                failed.append(ifname)
    return failed
