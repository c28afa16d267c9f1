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
"""

from __future__ import annotations

import glob
import os
import zlib


def all_cpus_mask() -> str:
    """The rps_cpus value that names every CPU, e.g. ``3`` on two."""
    return format((1 << (os.cpu_count() or 1)) - 1, "x")


def keep_flows_in_order(ifnames: list[str], whole_link: bool = False) -> list[str]:
    """Enable RPS on the receive queues of ``ifnames``; returns what could not be set.

    ``whole_link`` steers every frame of an interface through one CPU (the
    interfaces spread over the CPUs): native IB frames are not IP, the
    kernel computes no flow hash for them, and RPS without a hash steers
    nothing, so IB packets were reordered (go-back-N resent them).  Needs a
    sysfs of the caller's network namespace on /sys (agents get one from
    :func:`emulator.kernel.netns.enter_for_exec`).
    """
    cpus = os.cpu_count() or 1
    failed = []
    for number, ifname in enumerate(ifnames):
        mask = format(1 << (zlib.crc32(ifname.encode()) + number) % cpus, "x") if whole_link else all_cpus_mask()
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
