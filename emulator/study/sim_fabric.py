"""A fabric plan built in simulated time: the simulation backend's counterpart of the builder.

From the same :class:`~emulator.fabric.plan.FabricPlan` the emulator
builds namespaces and veths from, this makes a
:class:`~emulator.sim.switch.SimSwitch` per switch (its ports in the plan's
order, the plan's ECMP routes, the MMU settings the emulator's switches get
from :func:`~emulator.fabric.agent_config.switch_mmu`), a
:class:`~emulator.sim.host.SimHost` per host, and a pair of
:class:`~emulator.sim.link.Wire` per link at the link's rate and delay.
The collectives' ranks on top of it are the next step of the backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.fabric.agent_config import switch_mmu
from emulator.fabric.plan import FabricPlan
from emulator.sim.engine import Simulator
from emulator.sim.host import SimHost
from emulator.sim.link import PortQueue, Wire
from emulator.sim.switch import SimSwitch
from emulator.wire.mac import mac_bytes

HOST_MEMORY = 4 << 20  # bytes of each simulated host's memory until a collective lays out its own


@dataclass
class SimFabric:
    sim: Simulator
    switches: dict[str, SimSwitch]
    hosts: dict[str, SimHost]


def build_sim_fabric(plan: FabricPlan, fabric: str, switch: dict[str, str] | None = None,
                     memory_bytes: int = HOST_MEMORY) -> SimFabric:
    """The plan's nodes and links on a new :class:`Simulator` (Ethernet fabrics: lossless or lossy)."""
    if fabric not in ("lossless", "lossy"):
        raise ValueError(f"the simulation backend has no {fabric!r} fabric yet (lossless and lossy)")
    sim = Simulator()
    switches: dict[str, SimSwitch] = {}
    receive = {}  # (node, ifname) -> what a frame arriving there calls
    for node in plan.switches():
        index = {port.ifname: i for i, port in enumerate(node.ports)}
        routes = {bytes(int(part) for part in ip.split(".")): [index[name] for name in names]
                  for ip, names in plan.routes[node.name].items()}
        sw = SimSwitch(sim, [(mac_bytes(p.mac), mac_bytes(p.peer_mac), p.params.bw_bps) for p in node.ports], routes,
                       switch_mmu(node, fabric, switch or {}), seed=len(switches) + 1)
        switches[node.name] = sw
        for i, port in enumerate(node.ports):
            receive[(node.name, port.ifname)] = lambda frame, sw=sw, i=i: sw.receive(i, frame)
    hosts: dict[str, SimHost] = {}  # filled once the wires exist: a host's queue sends on its own wire
    wires: dict[tuple[str, str], Wire] = {}
    for a, b in plan.links:
        for src, dst in ((a, b), (b, a)):
            wires[(src.node, src.ifname)] = Wire(sim, src.params.bw_bps, src.params.delay_ns,
                                                 _deliver(receive, hosts, dst.node, dst.ifname))
    for node in plan.hosts():
        port = node.ports[0]
        hosts[node.name] = SimHost(sim, node.name, port.mac, port.peer_mac, node.ip or "",
                                   PortQueue(sim, wires[(node.name, port.ifname)]), memory_bytes)
    for name, sw in switches.items():
        for i, port in enumerate(plan.nodes[name].ports):
            sw.connect(i, wires[(name, port.ifname)])
    return SimFabric(sim, switches, hosts)


def _deliver(receive: dict, hosts: dict[str, SimHost], node: str, ifname: str):
    """What a frame arriving at (node, ifname) calls: its switch port, or its host (built after the wires)."""
    if (node, ifname) in receive:
        return receive[(node, ifname)]
    return lambda frame: hosts[node].receive(frame)
