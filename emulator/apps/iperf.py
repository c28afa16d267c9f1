"""Running iperf3 flows between nodes and reading their JSON reports."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from emulator.errors import FabricError
from emulator.fabric.node import Node

SERVER_START_TIMEOUT = 5.0
BASE_PORT = 5201
# Fixed client ports: an ephemeral one can be a port some Wireshark dissector owns (54328 is
# Elasticsearch's), and a capture of the flow then reads as a broken protocol: 3,246 "malformed"
# frames in a CI run.  45201 and up belong to no dissector tshark 4.0 knows.
CLIENT_BASE_PORT = 45201
TOS_PRIORITY_3 = 0x68  # DSCP 26 (RoCE's), ECT off: priority 3, the lossless class


@dataclass(frozen=True)
class IperfResult:
    """What one flow's receiver got: goodput, and loss or retransmissions."""

    client: str
    server: str
    protocol: str
    offered_bps: int | None
    received_bps: float
    lost_packets: int | None
    retransmits: int | None
    sent_packets: int | None = None  # UDP: datagrams the client sent (its sum_sent)
    out_of_order: int | None = None  # UDP: datagrams the receiver got behind a later one


def _wait_listening(server: Node, port: int, deadline: float) -> None:
    """Until the iperf3 server listens (a probe connection would consume
    its one test, so ask the socket table instead)."""
    while not server.run(["ss", "-Hltn", f"sport = :{port}"]).stdout.strip():
        if time.monotonic() > deadline:
            raise FabricError(f"iperf3 server on {server.name} port {port} did not start")
        time.sleep(0.02)


def run_flows(flows: list[tuple[Node, Node]], seconds: int, udp_bps: int | None = None,
              tos: int = 0) -> list[IperfResult]:
    """Run iperf3 flows (client, server) at the same time; one result each.

    TCP unless ``udp_bps`` is given (then UDP offered at that rate).  ``tos``
    sets the IPv4 TOS byte, hence the priority (DSCP >> 3).
    """
    servers, clients = [], []
    try:
        for i, (_, server) in enumerate(flows):
            servers.append(server.popen(["iperf3", "-s", "-1", "-p", str(BASE_PORT + i), "--json"],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        for i, (_, server) in enumerate(flows):
            _wait_listening(server, BASE_PORT + i, deadline)
        for i, (client, server) in enumerate(flows):
            cmd = ["iperf3", "-c", str(server.ip), "-p", str(BASE_PORT + i), "--cport", str(CLIENT_BASE_PORT + i),
                   "-t", str(seconds), "--json", "-S", str(tos)]
            if udp_bps is not None:
                cmd += ["-u", "-b", str(udp_bps)]
            clients.append(client.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = []
        for (client, server), cproc, sproc in zip(flows, clients, servers):
            out, err = cproc.communicate(timeout=seconds + 30)
            report = json.loads(out or "{}")
            if report.get("error") or cproc.returncode:
                raise FabricError(f"iperf3 {client.name} -> {server.name} failed: {report.get('error') or err.strip()}")
            end = json.loads(sproc.communicate(timeout=10)[0])["end"]
            received = end["sum_received"]["bits_per_second"]
            if udp_bps is not None:
                results.append(IperfResult(client.name, server.name, "udp", udp_bps, received,
                                           end["sum"]["lost_packets"], None, report["end"]["sum_sent"]["packets"],
                                           sum(s["udp"].get("out_of_order", 0) for s in end["streams"])))
            else:
                results.append(IperfResult(client.name, server.name, "tcp", None, received, None,
                                           report["end"]["sum_sent"].get("retransmits")))
        return results
    finally:
        for proc in servers + clients:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def iperf3(client: Node, server: Node, seconds: int, udp_bps: int | None = None, tos: int = 0) -> IperfResult:
    """One iperf3 flow from ``client`` to ``server``."""
    return run_flows([(client, server)], seconds, udp_bps, tos)[0]
