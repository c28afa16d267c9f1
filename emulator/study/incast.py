"""Incast on a star: N hosts send to one at full rate, lossless or lossy.

The scenario that shows what PFC is for: the receiver's port is the
bottleneck, the switch's buffer fills, and either PFC holds the senders
back (lossless: no loss, the receiver's link stays busy) or the switch
drops (lossy: UDP loses datagrams, TCP retransmits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from emulator.fabric.builder import Fabric
from emulator.apps.iperf import TOS_PRIORITY_3, IperfResult, run_flows
from emulator.units import parse_rate
from topologies import StarTopo


@dataclass
class IncastResult:
    fabric: str
    protocol: str
    rate_bps: int
    flows: list[IperfResult]
    totals: dict[str, Any]
    stats: dict[str, Any]
    switch_ports: dict[str, str]  # s1's port -> the host on it, to pair the captures of a link's two ends

    @property
    def aggregate_bps(self) -> float:
        return sum(f.received_bps for f in self.flows)


def run_incast(fabric: str, protocol: str, senders: int = 3, bw: str = "50mbit", seconds: int = 5,
               switch: dict[str, str] | None = None, capture: str | None = None,
               telemetry: str | None = None, log: Callable[[str], None] | None = None,
               delay: str | None = None, mtu: int | None = None, name: str | None = None) -> IncastResult:
    """``senders`` hosts of ``star,senders+1`` send to the last host, in priority 3.

    UDP flows offer the full link rate each; TCP flows are greedy.  Links
    have the fabric's default delay and MTU unless ``delay`` or ``mtu`` say;
    ``name`` names the run (default: a random name).
    """
    rate = parse_rate(bw)
    link: dict[str, Any] = {"bw": bw}
    if delay is not None:
        link["delay"] = delay
    if mtu is not None:
        link["mtu"] = mtu
    with Fabric(StarTopo(n=senders + 1), link=link, fabric=fabric, switch=switch, capture=capture,
                telemetry=telemetry, spec=f"star,{senders + 1}", log=log, name=name) as net:
        switch_ports = {p.ifname: p.peer_node for p in net.plan.nodes["s1"].ports}
        receiver = net.hosts[-1]
        flows = run_flows([(h, receiver) for h in net.hosts[:-1]], seconds,
                          udp_bps=rate if protocol == "udp" else None, tos=TOS_PRIORITY_3)
        stats = net.stats()
        net.check_agents()
    return IncastResult(fabric, protocol, rate, flows, stats["totals"], stats, switch_ports)
