"""A fabric plan built in simulated time: the simulation backend's counterpart of the builder.

From the same :class:`~emulator.fabric.plan.FabricPlan` the emulator
builds namespaces and veths from, this hands the compiled backend
(``emulator._core.sim.SimFabric``, crates/fabric-core/src/sim/) a switch
per plan switch (its ports in the plan's order, the plan's ECMP routes,
the MMU settings the emulator's switches get from
:func:`~emulator.fabric.agent_config.switch_mmu`), a host per plan host,
and a wire each way per link at the link's rate and delay.  The
collectives' ranks on top of it are :mod:`emulator.collectives.sim_ranks`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from emulator._core.mac import ETH_LEN, mac_bytes
from emulator.agents.config import IbTables, SwitchIbConfig, UetTransport
from emulator.fabric.agent_config import host_ib, switch_ib, switch_mmu
from emulator.fabric.ib_subnet import ROUTINGS, Subnet, assign
from emulator.fabric.ib_sweeps import switch_tables
from emulator.fabric.plan import FabricPlan, NodePlan, routes_over, switch_graph, uplinks
from emulator.fabric.uet_transport import uet_transport
from emulator.model.dcqcn import DcqcnParams, at_link
from emulator.model.mmu import MmuConfig
from emulator.model.nscc import NsccSettings
from emulator.study.experiment import Fault


def build_rust_fabric(plan: FabricPlan, fabric: str, switch: dict[str, str] | None = None,
                      cc: DcqcnParams | None = None, dilation: float | None = None, seed: int = 1,
                      spray: str = "reps", mtu: int = 4096, routing: str = "static", rccc: bool = False,
                      nscc: NsccSettings | None = NsccSettings()) -> Any:
    """The plan's nodes and links as the compiled simulation backend (``emulator._core.sim.SimFabric``): lossless,
    lossy or ib; the plan's switches, routes, MMU settings (the PFC watchdog included), injected loss per switch
    port (each port's loss model as the switch agent's), hosts and wires, every frame in Rust; on ``ib`` also the
    subnet manager's LIDs, forwarding tables, SL to VL and credit sizes, and with ``routing`` "adaptive" its
    adaptive routing groups (the RNICs then hold requests that arrive past a gap).  With ``cc`` every RNIC runs DCQCN at its
    link's rate, scaled as the emulator scales it (:func:`~emulator.model.dcqcn.at_link`, ``dilation`` from
    ``model``).  ``seed`` seeds every switch as the builder seeds its agent (ECMP's hash, ECN's draws, injected
    loss by frame number on each link); paths still differ where the QP numbers in the UDP source port do.  On
    ``uet`` the switches trim and every RNIC runs UET's transport
    (:func:`~emulator.fabric.uet_transport.uet_transport`: ``spray``, packets of ``mtu`` bytes, receiver credits
    if ``rccc``, NSCC as ``nscc`` sets it)."""
    from emulator._core.sim import SimFabric as RustSimFabric

    if fabric not in ("lossless", "lossy", "ib", "uet"):
        raise ValueError(f"no {fabric!r} fabric: lossless, lossy, ib or uet")
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
    losses = []  # per switch, per port: (host-facing, loss, drop, seed) as the builder gives each switch port's link model
    for node in switches:
        config = mmu_configs[node.name]
        watchdogs.append(config.pfcwd)
        losses.append([(plan.nodes[p.peer_node].kind == "host", p.params.loss, list(p.params.drop),
                        seeds[node.name] * 1000 + i) for i, p in enumerate(node.ports)])
        routes = _rust_routes(node, plan.routes[node.name], addresses)
        mmu = ((config.buffer, config.reserve, config.headroom, config.alpha, config.threshold, config.xon_delta),
               (sorted(config.lossless), config.quanta, sorted(config.strict), list(config.weights),
                config.mtu_frame),
               (config.ecn, config.kmin, config.kmax, config.pmax, config.vl_buffer, config.fc_floor, config.trim))
        switch_specs.append(([(mac_bytes(p.mac), mac_bytes(p.peer_mac), p.params.bw_bps, wire_of[(node.name, p.ifname)])
                              for p in node.ports], routes, mmu, seeds[node.name]))
    host_specs = [(mac_bytes(node.ports[0].mac), mac_bytes(node.ports[0].peer_mac),
                   bytes(int(part) for part in (node.ip or "0.0.0.0").split(".")), node.ports[0].params.bw_bps,
                   wire_of[(node.name, node.ports[0].ifname)]) for node in hosts]
    ccs = [None if cc is None else at_link(cc, node.ports[0].params.bw_bps, dilation)[0] for node in hosts]
    return RustSimFabric(wires, switch_specs, host_specs, _rust_ib_spec(plan, mmu_configs, routing) if fabric == "ib" else None,
                         losses=losses, pfcwd=watchdogs, cc=ccs,
                         uet=_rust_uet(uet_transport(plan, spray, mtu, rccc, nscc)) if fabric == "uet" else None)


def _rust_uet(uet: UetTransport) -> tuple[str, int, bool, int, int, bool, int | None, float | None]:
    """The UET transport as the compiled fabric takes it: (spray, entropy values, NSCC on, RTT ns, timeout ns,
    receiver credits on, NSCC's target delay ns and decrease factor, None for the defaults)."""
    return (uet.spray, uet.evs, uet.nscc, uet.network_rtt_ns, uet.timeout_ns, uet.rccc, uet.target_delay_ns,
            uet.gamma)


def link_faults(plan: FabricPlan, faults: Iterable[Fault], ib_routing: str | None = None) -> list[tuple[Any, ...]]:
    """The ``down`` faults as the compiled fabric's ``set_link_faults`` takes them: each link's two wires (link i
    of the plan is wires 2i and 2i+1, as :func:`build_rust_fabric` lays them), its times, every switch's
    routes without the link and with it (the emulator's ``fabric-emu link`` recomputes them so), and on an ``ib``
    fabric (``ib_routing`` its routing) every switch's LFT and AR groups without it and with it."""
    switches = plan.switches()
    number = {node.name: i for i, node in enumerate(switches)}
    addresses: dict[str, bytes] = {}
    up = [(number[node.name], _rust_routes(node, plan.routes[node.name], addresses)) for node in switches]
    adaptive = ib_routing == "adaptive"
    ib_up = ib_tables(plan, assign(plan, adaptive=adaptive)) if ib_routing is not None else []
    out = []
    for fault in faults:
        if fault.kind != "down" or fault.link is None:
            continue
        pair = frozenset(fault.link)
        link = next(i for i, (a, b) in enumerate(plan.links) if frozenset((a.node, b.node)) == pair)
        routes = routes_over(switch_graph(plan).without({pair}))
        down = [(number[node.name], _rust_routes(node, routes[node.name], addresses)) for node in switches]
        ib_down = ib_tables(plan, assign(plan, adaptive=adaptive, without=frozenset({pair}))) \
            if ib_routing is not None else []
        out.append(((2 * link, 2 * link + 1), fault.at_ns, fault.duration_ns, down, up, ib_down, ib_up))
    return out


def ib_tables(plan: FabricPlan, subnet: Subnet) -> list[tuple[int, tuple[list, list]]]:
    """Every switch's LFT and AR groups in ``subnet``, by switch index and port index, as the compiled fabric
    takes them."""
    return [(i, _rust_tables(switch_tables(subnet, node))) for i, node in enumerate(plan.switches())]


def _rust_tables(tables: IbTables | SwitchIbConfig) -> tuple[list, list]:
    """A switch's LFT and AR groups as the compiled fabric takes them: (DLID, port) and (DLID, ports), sorted."""
    return sorted(tables.lft.items()), [(dlid, list(group)) for dlid, group in sorted(tables.ar.items())]


def uplink_bytes(plan: FabricPlan, fabric: Any) -> dict[str, int]:
    """Bytes each uplink sent over the whole run (warm-up included), by interface: every port of a switch with
    hosts that leads to another switch (a leaf's or edge switch's way up).  Empty on a one-switch fabric."""
    return {port.ifname: fabric.port_figures(s, k)["tx_bytes"] for s, _, k, port in uplinks(plan)}


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


def _rust_ib_spec(plan: FabricPlan, mmu_configs: dict[str, MmuConfig], routing: str) -> tuple[list, list]:
    """The subnet manager's part of an ``ib`` fabric as :func:`build_rust_fabric` hands it over: per switch its
    :func:`switch_ib` settings and each port's longest frame, per host its :func:`host_ib` settings, its link's
    longest frame and its VL, in the plan's switch and host order."""
    if routing not in ROUTINGS:
        raise ValueError(f"no {routing!r} routing: {' or '.join(ROUTINGS)}")
    subnet = assign(plan, adaptive=routing == "adaptive")
    switch_specs = []
    for node in plan.switches():
        ib = switch_ib(plan, node, mmu_configs, subnet)
        assert ib is not None  # a subnet was given
        lft, ar = _rust_tables(ib)
        switch_specs.append((lft, list(ib.sl2vl), ib.vls, ib.vl_buffer, ib.fc_floor,
                             [(ETH_LEN + port.params.mtu, peer) for port, peer in zip(node.ports, ib.peer_capacity)],
                             ar))
    host_specs = []
    for node in plan.hosts():
        ib = host_ib(plan, node, mmu_configs, subnet)
        assert ib is not None
        host_specs.append((ib.lid, list(ib.lids.items()), ib.sl, ib.sl2vl[ib.sl], ib.vls, ib.capacity,
                           ib.peer_capacity, ETH_LEN + node.ports[0].params.mtu, ib.fc_floor, ib.reorder,
                           ib.reorder_wait_ns))
    return switch_specs, host_specs


def rust_pfcwd(plan: FabricPlan, fabric: Any) -> dict[str, Any]:
    """The PFC watchdogs' figures as the runner reports them (storms, restorations, drops, the ports stormed)
    from a fabric :func:`build_rust_fabric` made, its stormed ports named switch:interface, sorted."""
    figures = fabric.pfcwd()
    switches = plan.switches()
    figures["stormed_ports"] = sorted(f"{switches[s].name}:{switches[s].ports[p].ifname}"
                                      for s, p in figures["stormed_ports"])
    return figures
