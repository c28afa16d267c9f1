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
from typing import Any, Mapping

from emulator.fabric.agent_config import host_ib, switch_ib, switch_mmu
from emulator.fabric.ib_subnet import assign
from emulator.fabric.plan import FabricPlan, NodePlan
from emulator.model.credits import CreditLink
from emulator.model.dcqcn import DcqcnParams, at_link
from emulator.model.ib_port import IbPort
from emulator.model.link import Link
from emulator.model.mmu import MmuConfig
from emulator.sim.engine import Simulator
from emulator.sim.host import SimHost
from emulator.sim.link import PortQueue, Wire
from emulator.sim.switch import SimSwitch
from emulator.wire.mac import ETH_LEN, mac_bytes
from emulator.wire.pfc import PRIORITIES

HOST_MEMORY = 4096  # bytes of each simulated host's memory until a collective lays out its own


@dataclass
class SimFabric:
    sim: Simulator
    switches: dict[str, SimSwitch]
    hosts: dict[str, SimHost]
    port_names: dict[str, list[str]]  # switch -> its ports' interface names, in port order


def build_sim_fabric(plan: FabricPlan, fabric: str, switch: dict[str, str] | None = None,
                     memory_bytes: int = HOST_MEMORY, cc: DcqcnParams | None = None,
                     dilation: float | None = None, seed: int = 1) -> SimFabric:
    """The plan's nodes and links on a new :class:`Simulator`: lossless, lossy or ib (the subnet manager's LIDs
    and forwarding tables, the emulator's credit sizes); with ``cc`` every RNIC runs DCQCN at its link's rate,
    scaled as the emulator scales it (:func:`~emulator.model.dcqcn.at_link`, ``dilation`` from ``model``).
    ``seed`` seeds every switch as the builder seeds its agent (ECMP's hash, ECN's draws, injected loss by frame
    number on each link); paths still differ where the QP numbers in the UDP source port do."""
    if fabric not in ("lossless", "lossy", "ib"):
        raise ValueError(f"no {fabric!r} fabric: lossless, lossy or ib")
    sim = Simulator()
    mmu = {node.name: switch_mmu(node, fabric, switch or {}) for node in plan.switches()}
    subnet = assign(plan) if fabric == "ib" else None
    switches: dict[str, SimSwitch] = {}
    receive = {}  # (node, ifname) -> what a frame arriving there calls
    seeds = {name: seed * 1000 + index for index, name in enumerate(plan.nodes, start=1)}  # as agent_configs
    for node in plan.switches():
        index = {port.ifname: i for i, port in enumerate(node.ports)}
        routes = {bytes(int(part) for part in ip.split(".")): [index[name] for name in names]
                  for ip, names in plan.routes[node.name].items()}
        node_seed = seeds[node.name]
        links = [Link(p.params.bw_bps, 0, plan.nodes[p.peer_node].kind == "host", p.params.loss, p.params.drop,
                      node_seed * 1000 + i) for i, p in enumerate(node.ports)]
        sw = SimSwitch(sim, [(mac_bytes(p.mac), mac_bytes(p.peer_mac), p.params.bw_bps) for p in node.ports], routes,
                       mmu[node.name], seed=node_seed, ib=switch_ib(plan, node, mmu, subnet),
                       max_frames=[ETH_LEN + p.params.mtu for p in node.ports], links=links)
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
        ib = host_ib(plan, node, mmu, subnet)
        hosts[node.name] = SimHost(
            sim, node.name, port.mac, port.peer_mac, node.ip or "", PortQueue(sim, wires[(node.name, port.ifname)]),
            memory_bytes, None if ib is None else IbPort(port.mac, port.peer_mac, ib.lid, ib.lids, ib.sl,
                                                         ib.sl2vl[ib.sl], ib.vls, ib.capacity, ib.peer_capacity,
                                                         port.params.bw_bps, ETH_LEN + port.params.mtu, ib.fc_floor),
            None if cc is None else at_link(cc, port.params.bw_bps, dilation)[0])
    for name, sw in switches.items():
        for i, port in enumerate(plan.nodes[name].ports):
            sw.connect(i, wires[(name, port.ifname)])
        sw.start()
    return SimFabric(sim, switches, hosts, {name: [p.ifname for p in plan.nodes[name].ports] for name in switches})


def _deliver(receive: dict, hosts: dict[str, SimHost], node: str, ifname: str):
    """What a frame arriving at (node, ifname) calls: its switch port, or its host (built after the wires)."""
    if (node, ifname) in receive:
        return receive[(node, ifname)]
    return lambda frame: hosts[node].receive(frame)


def totals(fabric: SimFabric) -> dict[str, int]:
    """The fabric-wide counters the runner keeps (as :func:`emulator.fabric.stats.with_totals` sums the agents')."""
    counters = [c for sw in fabric.switches.values() for port in sw.mmu.counters for c in port]
    now = fabric.sim.now
    return {
        "drops": sum(c.drops_threshold + c.drops_headroom + c.pfcwd_drops for c in counters)
        + sum(sum(sw.dropped.values()) for sw in fabric.switches.values())
        + sum(sum(link.injected_drops) for sw in fabric.switches.values() for link in sw.links or ()),
        "pfc_sent": sum(c.pfc_xoff_sent + c.pfc_xon_sent for c in counters),
        "ecn_marked": sum(c.ecn_marked for c in counters),
        "tx_frames": sum(c.tx_frames for c in counters)
        + sum(sum(sw.ib.forwarded) for sw in fabric.switches.values() if sw.ib is not None),
        "host_paused_ns": sum(host.queue.pause.paused_time(p, now) for host in fabric.hosts.values()
                              for p in range(PRIORITIES)),
        # IB: times a VL had a packet and no credit for it, at switches and RNICs
        "ib_credit_stalls": sum(link.counters[vl]["stalls"] for link in _credit_links(fabric) for vl in link.counters),
        "cnps_received": sum(host.counters["cnps_received"] for host in fabric.hosts.values()),
        "paced_waits": sum(host.counters["paced_waits"] for host in fabric.hosts.values()),
        "host_pfc_sent": sum(host.storm_pfc_sent for host in fabric.hosts.values()),  # the stall fault's pauses
    }


def _credit_links(fabric: SimFabric) -> list[CreditLink]:
    links = [link for sw in fabric.switches.values() if sw.ib is not None for link in sw.ib.links]
    return links + [host.ib.credits for host in fabric.hosts.values() if host.ib is not None]


def pfcwd(fabric: SimFabric) -> dict[str, Any]:
    """The PFC watchdogs' figures as the runner reports them: storms, restorations, drops, the ports stormed."""
    counters = [c for sw in fabric.switches.values() for port in sw.mmu.counters for c in port]
    return {"pfcwd_storms": sum(c.pfcwd_storms for c in counters),
            "pfcwd_restorations": sum(sw.mmu.watchdog.restorations for sw in fabric.switches.values()
                                      if sw.mmu.watchdog is not None),
            "pfcwd_drops": sum(c.pfcwd_drops for c in counters),
            "stormed_ports": sorted(f"{name}:{fabric.port_names[name][i]}" for name, sw in fabric.switches.items()
                                    for i, port in enumerate(sw.mmu.counters) if any(c.pfcwd_storms for c in port))}


def build_rust_fabric(plan: FabricPlan, fabric: str, switch: dict[str, str] | None = None,
                      cc: DcqcnParams | None = None, dilation: float | None = None, seed: int = 1) -> Any:
    """The plan's nodes and links as the compiled simulation backend (``emulator._core.sim.SimFabric``): the same
    switches, routes, MMU settings (the PFC watchdog included), seeds, injected loss per switch port, hosts, DCQCN
    at each host's link rate and wires :func:`build_sim_fabric` makes, every frame in Rust; on ``ib`` also the
    same subnet (LIDs, forwarding tables, SL to VL, credit sizes)."""
    from emulator._core.sim import SimFabric as RustSimFabric

    if fabric not in ("lossless", "lossy", "ib"):
        raise ValueError(f"no {fabric!r} fabric: lossless, lossy or ib")
    switches = plan.switches()
    hosts = plan.hosts()
    index = {node.name: i for i, node in enumerate(switches)} | {node.name: i for i, node in enumerate(hosts)}
    seeds = {name: seed * 1000 + i for i, name in enumerate(plan.nodes, start=1)}  # as agent_configs
    wires: list[tuple[int, int, str, int, int]] = []
    wire_of: dict[tuple[str, str], int] = {}
    for a, b in plan.links:
        for src, dst in ((a, b), (b, a)):
            kind = plan.nodes[dst.node].kind
            port = next(i for i, p in enumerate(plan.nodes[dst.node].ports) if p.ifname == dst.ifname) \
                if kind != "host" else 0
            wire_of[(src.node, src.ifname)] = len(wires)
            wires.append((src.params.bw_bps, src.params.delay_ns, "host" if kind == "host" else "switch",
                          index[dst.node], port))
    mmu_configs = {node.name: switch_mmu(node, fabric, switch or {}) for node in switches}
    switch_specs = []
    watchdogs = []
    addresses: dict[str, bytes] = {}  # each host's IP, parsed once for the whole fabric
    losses = []  # per switch, per port: (host-facing, loss, drop, seed) as build_sim_fabric gives each port's Link
    for node in switches:
        config = mmu_configs[node.name]
        watchdogs.append(config.pfcwd)
        losses.append([(plan.nodes[p.peer_node].kind == "host", p.params.loss, list(p.params.drop),
                        seeds[node.name] * 1000 + i) for i, p in enumerate(node.ports)])
        routes = _rust_routes(node, plan.routes[node.name], addresses)
        mmu = ((config.buffer, config.reserve, config.headroom, config.alpha, config.threshold, config.xon_delta),
               (sorted(config.lossless), config.quanta, sorted(config.strict), list(config.weights),
                config.mtu_frame),
               (config.ecn, config.kmin, config.kmax, config.pmax, config.vl_buffer, config.fc_floor))
        switch_specs.append(([(mac_bytes(p.mac), mac_bytes(p.peer_mac), p.params.bw_bps, wire_of[(node.name, p.ifname)])
                              for p in node.ports], routes, mmu, seeds[node.name]))
    host_specs = [(mac_bytes(node.ports[0].mac), mac_bytes(node.ports[0].peer_mac),
                   bytes(int(part) for part in (node.ip or "0.0.0.0").split(".")), node.ports[0].params.bw_bps,
                   wire_of[(node.name, node.ports[0].ifname)]) for node in hosts]
    ccs = [None if cc is None else at_link(cc, node.ports[0].params.bw_bps, dilation)[0] for node in hosts]
    return RustSimFabric(wires, switch_specs, host_specs, _rust_ib_spec(plan, mmu_configs) if fabric == "ib" else None,
                         losses=losses, pfcwd=watchdogs, cc=ccs)


def _rust_routes(node: NodePlan, table: Mapping[str, list[str]], addresses: dict[str, bytes]
                 ) -> list[tuple[bytes, list[int]]]:
    """A switch's routes as the compiled backend takes them, (4-byte IP, egress port numbers): each IP parsed once
    per fabric (``addresses``), each port list the plan shares between the hosts of an edge switch
    (:class:`~emulator.fabric.plan.SwitchRoutes`) numbered once per switch, so a fattree,24's 2.5 million routes
    cost a few seconds, not a quarter of a minute."""
    ports = {port.ifname: i for i, port in enumerate(node.ports)}
    numbered: dict[int, list[int]] = {}  # id() of a port list of the plan (alive while this runs) -> its numbers
    routes = []
    for ip, names in table.items():
        numbers = numbered.get(id(names))
        if numbers is None:
            numbers = numbered[id(names)] = [ports[name] for name in names]
        address = addresses.get(ip)
        if address is None:
            address = addresses[ip] = bytes(int(part) for part in ip.split("."))
        routes.append((address, numbers))
    return routes


def _rust_ib_spec(plan: FabricPlan, mmu_configs: dict[str, MmuConfig]) -> tuple[list, list]:
    """The subnet manager's part of an ``ib`` fabric as :func:`build_rust_fabric` hands it over: per switch its
    :func:`switch_ib` settings and each port's longest frame, per host its :func:`host_ib` settings, its link's
    longest frame and its VL, in the plan's switch and host order."""
    subnet = assign(plan)
    switch_specs = []
    for node in plan.switches():
        ib = switch_ib(plan, node, mmu_configs, subnet)
        assert ib is not None  # a subnet was given
        switch_specs.append((sorted(ib.lft.items()), list(ib.sl2vl), ib.vls, ib.vl_buffer, ib.fc_floor,
                             [(ETH_LEN + port.params.mtu, peer) for port, peer in zip(node.ports, ib.peer_capacity)]))
    host_specs = []
    for node in plan.hosts():
        ib = host_ib(plan, node, mmu_configs, subnet)
        assert ib is not None
        host_specs.append((ib.lid, list(ib.lids.items()), ib.sl, ib.sl2vl[ib.sl], ib.vls, ib.capacity,
                           ib.peer_capacity, ETH_LEN + node.ports[0].params.mtu, ib.fc_floor))
    return switch_specs, host_specs


def rust_pfcwd(plan: FabricPlan, fabric: Any) -> dict[str, Any]:
    """:func:`pfcwd`'s figures from a fabric :func:`build_rust_fabric` made, its stormed ports named as
    :func:`pfcwd` names them (switch:interface, sorted)."""
    figures = fabric.pfcwd()
    switches = plan.switches()
    figures["stormed_ports"] = sorted(f"{switches[s].name}:{switches[s].ports[p].ifname}"
                                      for s, p in figures["stormed_ports"])
    return figures
