"""Running iperf3 between two nodes and reading its JSON report."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from emulator.errors import FabricError
from emulator.fabric import Node

SERVER_START_TIMEOUT = 5.0


@dataclass(frozen=True)
class IperfResult:
    """What the receiver got: goodput, and loss or retransmissions."""

    protocol: str
    offered_bps: int | None
    received_bps: float
    lost_packets: int | None
    retransmits: int | None


def iperf3(client: Node, server: Node, seconds: int, udp_bps: int | None = None,
           extra: tuple[str, ...] = ()) -> IperfResult:
    """One iperf3 test from ``client`` to ``server``: TCP, or UDP at ``udp_bps``."""
    srv = server.popen(["iperf3", "-s", "-1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cmd = ["iperf3", "-c", str(server.ip), "-t", str(seconds), "--json", *extra]
    if udp_bps is not None:
        cmd += ["-u", "-b", str(udp_bps)]
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    try:
        while True:
            done = client.run(cmd, timeout=seconds + 30)
            report = json.loads(done.stdout or "{}")
            error = report.get("error", "")
            if "refused" not in error or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if error or done.returncode:
            raise FabricError(f"iperf3 {client.name} -> {server.name} failed: {error or done.stderr.strip()}")
        server_report = json.loads(srv.communicate(timeout=10)[0])
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    end = server_report["end"]
    received = end["sum_received"]["bits_per_second"]
    if udp_bps is not None:
        return IperfResult("udp", udp_bps, received, end["sum"]["lost_packets"], None)
    return IperfResult("tcp", None, received, None, report["end"]["sum_sent"].get("retransmits"))
