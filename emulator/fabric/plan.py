"""From a Mininet ``Topo`` to a concrete fabric plan, without side effects.

The plan fixes every name and number the builder will create: namespace and
interface names, MAC and IPv4 addresses, link parameters and each switch's
L3 routes.  Keeping it pure lets unit tests check addressing and routing
without root, and lets cleanup know every name before anything exists.

Addressing (Mininet's): hosts in natural name order get 10.0.0.1, 10.0.0.2,
... from 10.0.0.0/8.  Every host routes 10.0.0.0/8 via a virtual gateway
address whose static neighbour entry is the MAC of the switch port it is
cabled to; switches forward by destination host address.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from mininet.topo import Topo

from emulator import bounds
from emulator.errors import FabricError, shown
from emulator.wire.mac import mac_text
from emulator.fabric.names import IFNAMSIZ, check_node_name
from emulator.model.dilation import dilation, emulated_ns
from emulator.units import format_rate, format_time, parse_rate, parse_size, parse_time

GATEWAY_IP = "10.255.255.254"
HOST_NET = ipaddress.IPv4Network("10.0.0.0/8")
DEFAULT_LINK = {"bw": "100mbit", "delay": "0us", "mtu": 1500, "loss": 0, "drop": ""}
MIN_MTU, MAX_MTU = 576, 9000
MIN_RATE, MAX_RATE = 1_000, 800_000_000_000  # bit/s: 1 kbit/s to 800 Gbit/s (the simulation backend's 400G fabrics)
MAX_DELAY = 1_000_000_000  # ns: one second each way
MAX_DROP_FRAME, MAX_DROPS = 10**12, 1000  # drop=N:M: frame numbers, and how many


@dataclass(frozen=True)
class LinkParams:
    """What one link (both directions) is set to."""

    bw_bps: int
    delay_ns: int
    mtu: int
    loss: float = 0.0  # probability a frame is lost, each direction
    drop: tuple[int, ...] = ()  # frames (1-based, each direction) always lost


@dataclass
class PortPlan:
    """One veth end: its node, name, MAC, and what is cabled to it."""

    node: str
    ifname: str
    number: int
    mac: str
    peer_node: str
    peer_ifname: str
    peer_mac: str
    params: LinkParams


@dataclass
class NodePlan:
    """A host or switch and its namespace."""

    name: str
    kind: str  # "host" or "switch"
    netns: str
    ports: list[PortPlan] = field(default_factory=list)
    ip: str | None = None  # hosts only


@dataclass
class FabricPlan:
    """Everything the builder creates for one run."""

    run: str
    nodes: dict[str, NodePlan]
    links: list[tuple[PortPlan, PortPlan]]
    routes: dict[str, dict[str, list[str]]]  # switch -> host IP -> egress ifnames

    def hosts(self) -> list[NodePlan]:
        return [n for n in self.nodes.values() if n.kind == "host"]

    def switches(self) -> list[NodePlan]:
        return [n for n in self.nodes.values() if n.kind == "switch"]


def link_params(opts: dict[str, Any], defaults: dict[str, Any]) -> LinkParams:
    """Merge a link's own options over the run's defaults and parse them.

    ``bw`` follows Mininet's TCLink: a bare number is Mbit/s; strings carry
    units (``50mbit``).  ``delay`` is a time string (``5us``), ``mtu`` bytes.
    ``loss`` is a probability (``1e-3``; unlike Mininet's percent, 1 means
    every frame); ``drop`` lists frame numbers joined by ``:`` (``100:250``)
    that are lost deterministically in each direction.
    """
    merged = {**DEFAULT_LINK, **defaults, **{k: v for k, v in opts.items() if k in DEFAULT_LINK}}
    mtu = parse_size(merged["mtu"])
    if not MIN_MTU <= mtu <= MAX_MTU:
        raise FabricError(f"bad mtu {mtu}: expected {MIN_MTU} to {MAX_MTU} bytes")
    bw = parse_rate(merged["bw"])
    if not MIN_RATE <= bw <= MAX_RATE:
        raise FabricError(f"bad bw {shown(merged['bw'])}: a link runs at {format_rate(MIN_RATE)} to "
                          f"{format_rate(MAX_RATE)}")
    delay = parse_time(merged["delay"])
    if delay > MAX_DELAY:
        raise FabricError(f"bad delay {shown(merged['delay'])}: at most {format_time(MAX_DELAY)}")
    return LinkParams(bw, delay, mtu, _probability(merged["loss"]), _frame_numbers(merged["drop"]))



def dilated(link: dict[str, str], model: Any) -> tuple[dict[str, str], float]:
    """The link options of a fabric modelled at ``model`` (time dilation, :mod:`emulator.model.dilation`):
    its delay, written in modelled time, as the emulator waits it; and D."""
    factor = dilation(parse_rate(model), link_params({}, link).bw_bps)
    delay = emulated_ns(parse_time(link.get("delay", DEFAULT_LINK["delay"])), factor)
    if delay > MAX_DELAY:
        raise FabricError(f"the link delay {shown(link['delay'])} of the modelled fabric is {format_time(delay)} "
                          f"at D = {factor:g}: at most {format_time(MAX_DELAY)}")
    return {**link, "delay": f"{delay}ns"}, factor

def _probability(value: Any) -> float:
    try:
        loss = float(value)
    except (TypeError, ValueError, OverflowError):
        raise FabricError(f"bad loss {shown(value)}: expected a probability such as 1e-3") from None
    if not 0 <= loss <= 1:
        raise FabricError(f"bad loss {shown(value)}: a probability is 0 to 1")
    return loss


def _frame_numbers(value: Any) -> tuple[int, ...]:
    if value in ("", None):
        return ()
    if isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value] if isinstance(value, int) else str(value).split(":")
    if len(items) > MAX_DROPS:
        raise FabricError(f"bad drop {shown(value)}: at most {MAX_DROPS} frame numbers")
    try:
        numbers = tuple(sorted({bounds.whole("drop frame", n, (1, MAX_DROP_FRAME)) for n in items}))
    except FabricError as err:
        raise FabricError(f"bad drop {shown(value)}: {err}; frame numbers are joined by ':', e.g. 100:250") from None
    return numbers


def _mac(kind: str, index: int, port: int) -> str:
    """Locally administered MAC: 02:<kind>:<node index, 3 bytes>:<port>."""
    return mac_text(bytes([0x02, 0x00 if kind == "host" else 0x01]) + index.to_bytes(3, "big") + bytes([port]))


def make_plan(topo: Topo, run: str, link_defaults: dict[str, Any] | None = None, routes: bool = True) -> FabricPlan:
    """Assign names, addresses and routes to every node of ``topo``.

    ``routes=False`` leaves the routes out (empty): they depend on the topology alone and are most of the
    work on a large one, so an experiment's checks compute them once per topology, not once per variant.
    """
    defaults = link_defaults or {}
    hosts, switches = topo.hosts(sort=True), topo.switches(sort=True)
    if not hosts:
        raise FabricError("topology has no hosts")
    nodes: dict[str, NodePlan] = {}
    for index, name in enumerate(hosts, start=1):
        nodes[name] = NodePlan(name, "host", f"{run}-{name}", ip=str(HOST_NET.network_address + index))
    for name in switches:
        nodes[name] = NodePlan(name, "switch", f"{run}-{name}")
    order = {name: i for i, name in enumerate(hosts + switches, start=1)}

    links: list[tuple[PortPlan, PortPlan]] = []
    for _, _, info in topo.links(sort=True, withInfo=True):
        n1, n2 = info["node1"], info["node2"]
        params = link_params(info, defaults)
        ends = []
        for node, peer, number in ((n1, n2, info["port1"]), (n2, n1, info["port2"])):
            if number > 255:
                raise FabricError(f"node {node} has more than 255 ports")
            ifname = f"{node}-eth{number}"
            if len(ifname) > IFNAMSIZ:
                raise FabricError(f"interface name {ifname!r} is longer than {IFNAMSIZ} characters; use shorter node names")
            ends.append((node, peer, ifname, number, _mac(nodes[node].kind, order[node], number)))
        (a, b) = ends
        pa = PortPlan(a[0], a[2], a[3], a[4], b[0], b[2], b[4], params)
        pb = PortPlan(b[0], b[2], b[3], b[4], a[0], a[2], a[4], params)
        nodes[n1].ports.append(pa)
        nodes[n2].ports.append(pb)
        links.append((pa, pb))

    for name in nodes:
        check_node_name(name)  # they name namespaces, interfaces and the run's files
    for node in nodes.values():
        if node.kind != "host":
            continue
        if len(node.ports) != 1:
            raise FabricError(f"host {node.name} has {len(node.ports)} links; fabric-emu hosts have exactly one NIC")
        if nodes[node.ports[0].peer_node].kind != "switch":
            raise FabricError(f"host {node.name} is cabled to host {node.ports[0].peer_node}; put a switch between hosts")
    plan = FabricPlan(run, nodes, links, {})
    if routes:
        plan.routes = compute_routes(plan)
    return plan


@dataclass(frozen=True)
class SwitchGraph:
    """What routing needs of a fabric: each switch's ports towards other switches (in port order), and where
    each host is cabled.  Kept with a run (``graph.json``) so routes can be recomputed when a link goes down."""

    links: dict[str, list[tuple[str, str]]]  # switch -> [(its ifname, the peer switch)]
    hosts: list[tuple[str, str, str, str]]  # (host, its IP, its edge switch, the edge's ifname towards it)

    def without(self, down: set[frozenset[str]]) -> "SwitchGraph":
        """The graph with the switch-to-switch links in ``down`` (pairs of switch names) taken out."""
        return SwitchGraph({s: [(i, peer) for i, peer in ports if frozenset((s, peer)) not in down]
                            for s, ports in self.links.items()}, self.hosts)

    def link(self, a: str, b: str) -> tuple[str, str] | None:
        """The ifnames of the link between switches ``a`` and ``b`` (a's, b's), or None if they are not linked."""
        ends_a = [i for i, peer in self.links.get(a, []) if peer == b]
        ends_b = [i for i, peer in self.links.get(b, []) if peer == a]
        return (ends_a[0], ends_b[0]) if ends_a and ends_b else None


def switch_graph(plan: FabricPlan) -> SwitchGraph:
    links = {s.name: [(p.ifname, p.peer_node) for p in s.ports if plan.nodes[p.peer_node].kind == "switch"]
             for s in plan.switches()}
    hosts = [(h.name, h.ip or "", h.ports[0].peer_node, h.ports[0].peer_ifname) for h in plan.hosts()]
    return SwitchGraph(links, hosts)


def compute_routes(plan: FabricPlan) -> dict[str, dict[str, list[str]]]:
    return routes_over(switch_graph(plan))


def routes_over(graph: SwitchGraph) -> dict[str, dict[str, list[str]]]:
    """Shortest-path next hops from every switch to every host, all of them.

    One breadth-first search per switch that has hosts (over switch-to-switch
    links) gives each switch's distance to that edge switch; the ports whose
    neighbour is one hop closer form the ECMP group.  The port lists keep
    the plan's port order, so the result is deterministic.
    """
    routes: dict[str, dict[str, list[str]]] = {s: {} for s in graph.links}
    edges: dict[str, list[tuple[str, str, str, str]]] = {}
    for host in graph.hosts:
        edges.setdefault(host[2], []).append(host)
    for edge, edge_hosts in edges.items():
        dist = {edge: 0}
        todo = deque([edge])
        while todo:
            here = todo.popleft()
            for _ifname, peer in graph.links[here]:
                if peer not in dist:
                    dist[peer] = dist[here] + 1
                    todo.append(peer)
        for _name, ip, _edge, edge_ifname in edge_hosts:
            routes[edge][ip] = [edge_ifname]
            for switch, d in dist.items():
                if switch != edge:
                    routes[switch][ip] = [i for i, peer in graph.links[switch] if dist.get(peer) == d - 1]
    unreachable = [(s, h[0]) for s in graph.links for h in graph.hosts if h[1] not in routes[s]]
    if unreachable:
        s, h = unreachable[0]
        raise FabricError(f"topology is not connected: switch {s} has no path to host {h}")
    return routes


def hop_distances(links: dict[str, list[PortPlan]], start: str) -> dict[str, int]:
    """Hop count between ``start`` and every switch ``links`` connects it to.

    ``links`` holds each switch's ports towards other switches.  Links are
    symmetric, so a breadth-first search outwards from ``start`` gives each
    switch's distance to it as well as from it.
    """
    dist = {start: 0}
    todo = deque([start])
    while todo:
        here = todo.popleft()
        for port in links[here]:
            if port.peer_node not in dist:
                dist[port.peer_node] = dist[here] + 1
                todo.append(port.peer_node)
    return dist
