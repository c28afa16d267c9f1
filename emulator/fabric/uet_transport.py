"""The uet fabric's transport settings, from the plan: what every RNIC of it runs (both backends).

The network RTT is uet-htsim's: the round trip of the longest host-to-host path when empty, a full packet
out and an ACK back over every link of it (from the first host: the built-in topologies look the same from
every host), and here also the sender's own transmit queue: a packet counts in flight from when the RNIC
hands it to its NIC queue (the simulated host's four frames; the emulated host's kernel queue holds two to
twelve), so a window of the wire's RTT alone left the wire idle (a permutation at 20 Mbit/s took 1.65 times
its link time on the simulator).  NSCC takes it as its base RTT and scales its constants by it.  The least
retransmission timeout is four network RTTs; the PDC lengthens it to the round trips it measures (RFC 6298),
so a packet waiting in a deep queue is not taken for lost, while one lost with a link is resent soon (with
three full port queues on top, as uet-htsim's six queue drains, a link down mid-permutation cost 3.2 times
the permutation's time on the emulator at 20 Mbit/s; with four RTTs, 1.45).
"""

from __future__ import annotations

from emulator._core.uet import ACK_FRAME, REQUEST_HEADERS
from emulator.agents.config import UetTransport
from emulator.fabric.plan import FabricPlan
from emulator.model.nscc import NsccSettings

UET_EVS = 64  # entropy values per connection, as uet-htsim's default
UET_IP_HEADERS = REQUEST_HEADERS - 14  # a request's headers within the link MTU: IPv4, UDP, PDS and SES
SENDER_QUEUE_FRAMES = 4  # the sender's NIC queue, in full frames (sim::host::NIC_FRAMES)


def uet_transport(plan: FabricPlan, spray: str, mtu: int, rccc: bool = False,
                  nscc: NsccSettings | None = NsccSettings()) -> UetTransport:
    """Every RNIC's UET transport on ``plan`` with packets of ``mtu`` payload bytes, spraying by ``spray``, with
    receiver credits if ``rccc``, NSCC as ``nscc`` sets it (None: a fixed window)."""
    hosts = plan.hosts()
    hops = longest_path(plan, hosts[0].name) if hosts else 1
    rate = min((p.params.bw_bps for node in plan.nodes.values() for p in node.ports), default=1)
    delay = max((p.params.delay_ns for node in plan.nodes.values() for p in node.ports), default=0)
    frame_ns = (mtu + REQUEST_HEADERS) * 8 * 1_000_000_000 // rate
    ack_ns = ACK_FRAME * 8 * 1_000_000_000 // rate
    rtt = max(hops * (2 * delay + frame_ns + ack_ns) + SENDER_QUEUE_FRAMES * frame_ns, 1)
    return UetTransport(spray=spray, evs=UET_EVS, network_rtt_ns=rtt, timeout_ns=4 * rtt, rccc=rccc,
                        nscc=nscc is not None, target_delay_ns=nscc.target_delay_ns if nscc else None,
                        gamma=nscc.gamma if nscc else None)


def longest_path(plan: FabricPlan, start: str) -> int:
    """Links on the longest of the shortest paths from host ``start`` to another host (breadth first)."""
    neighbours: dict[str, list[str]] = {}
    for a, b in plan.links:
        neighbours.setdefault(a.node, []).append(b.node)
        neighbours.setdefault(b.node, []).append(a.node)
    depth = {start: 0}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for peer in neighbours.get(node, ()):
                if peer not in depth:
                    depth[peer] = depth[node] + 1
                    following.append(peer)
        frontier = following
    return max((d for name, d in depth.items() if plan.nodes[name].kind == "host"), default=1) or 1
