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
from collections.abc import ItemsView, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mininet.topo import Topo

from emulator import bounds
from emulator.errors import FabricError, shown
from emulator._core.mac import mac_text
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


# The emulated IB switches forward through their IB plane, which the link loss model does not see: a loss on an
# emulated ib fabric would silently be none, so it is refused.  The simulated ones lose frames on the hosts'
# links only (the IB plane checks no VCRC between switches): refused on a topology with links between switches.
IB_LOSS = "the emulated ib fabric loses no frame to injected loss yet (its switches' IB plane bypasses the loss model)"
IB_LOSS_SIM = ("the simulated ib fabric loses frames on the hosts' links only, not between switches: injected loss "
               "on the ib fabric needs a topology of one switch")

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
    routes: dict[str, Mapping[str, list[str]]]  # switch -> host IP -> egress ifnames (SwitchRoutes)

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


def veth_mac(plan: "FabricPlan", port: PortPlan) -> str:
    """The address the kernel gives ``port``'s veth: its fabric MAC, except on a switch (02:02:...).

    A switch's frames are its agent's: with the fabric MAC on its veths, the switch namespace's kernel took
    every frame for itself too (IPv4 input, a route lookup, an ICMP error), at its agent's CPU.  Under
    another address the kernel sees them as another host's and drops them first thing; the agent's raw
    sockets hear every frame whatever its address, and every frame on the wire carries the fabric MAC.
    """
    if plan.nodes[port.node].kind != "switch":
        return port.mac
    raw = bytearray(bytes.fromhex(port.mac.replace(":", "")))
    raw[1] = 0x02
    return mac_text(bytes(raw))


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
    parsed: dict[str, LinkParams] = {}  # a link's own options (as text) -> its parameters: most links have none
    for _, _, info in topo.links(sort=True, withInfo=True):
        n1, n2 = info["node1"], info["node2"]
        own = repr(sorted((key, value) for key, value in info.items() if key in DEFAULT_LINK))
        params = parsed.get(own)
        if params is None:
            params = parsed[own] = link_params(info, defaults)
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


def uplinks(plan: FabricPlan) -> list[tuple[int, NodePlan, int, PortPlan]]:
    """Every uplink: a port of a switch with hosts that leads to another switch (a leaf's or edge switch's way
    up), as (switch index in ``plan.switches()``, the switch, port index, the port)."""
    out = []
    for s, node in enumerate(plan.switches()):
        if any(plan.nodes[p.peer_node].kind == "host" for p in node.ports):
            out += [(s, node, k, port) for k, port in enumerate(node.ports) if plan.nodes[port.peer_node].kind != "host"]
    return out


def switch_graph(plan: FabricPlan) -> SwitchGraph:
    links = {s.name: [(p.ifname, p.peer_node) for p in s.ports if plan.nodes[p.peer_node].kind == "switch"]
             for s in plan.switches()}
    hosts = [(h.name, h.ip or "", h.ports[0].peer_node, h.ports[0].peer_ifname) for h in plan.hosts()]
    return SwitchGraph(links, hosts)


def compute_routes(plan: FabricPlan) -> dict[str, SwitchRoutes]:
    return routes_over(switch_graph(plan))


class SwitchRoutes(Mapping[str, list[str]]):
    """One switch's routes, host IP -> its ECMP egress ifnames, kept per edge switch: every host of an edge
    switch is reached over the same ports (from anywhere but that edge), so a switch stores one port list per
    edge switch and the fabric one host -> edge map, not one list per host.  A fattree,24 has 720 switches and
    3,456 hosts: 207,360 port lists instead of 2.5 million routes (480 MB and 7.4 s to make them).

    It reads as the dict it stands for (``table[ip]``, ``items()``, ``==`` with a dict), in the same order:
    hosts grouped by edge switch, edges in the order of their first host.  The lists are shared between the
    hosts of an edge and must not be changed."""

    __slots__ = ("_edge_of", "_via", "_local")

    def __init__(self, edge_of: dict[str, str], via: dict[str, list[str]], local: dict[str, list[str]]) -> None:
        self._edge_of = edge_of  # host IP -> its edge switch (one map for the whole fabric)
        self._via = via  # edge switch -> this switch's ports towards it
        self._local = local  # host IP -> this switch's port to it, for the hosts cabled to this switch

    def __getitem__(self, ip: str) -> list[str]:
        local = self._local.get(ip)
        return local if local is not None else self._via[self._edge_of[ip]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._edge_of)

    def __len__(self) -> int:
        return len(self._edge_of)

    def __repr__(self) -> str:
        return f"SwitchRoutes({dict(self)!r})"

    def items(self) -> ItemsView[str, list[str]]:
        """As a dict's, walked without a lookup through ``__getitem__`` per host: the builders walk every
        switch's table (2.5 million routes at fattree,24)."""
        return _RouteItems(self)


class _RouteItems(ItemsView[str, list[str]]):
    """A switch's routes as (IP, ports) pairs, read straight from its maps."""

    _mapping: SwitchRoutes

    def __iter__(self) -> Iterator[tuple[str, list[str]]]:
        table = self._mapping
        local, via = table._local, table._via  # pylint: disable=protected-access
        for ip, edge in table._edge_of.items():  # pylint: disable=protected-access
            yield ip, local.get(ip) or via[edge]


def routes_over(graph: SwitchGraph) -> dict[str, SwitchRoutes]:
    """Shortest-path next hops from every switch to every host, all of them.

    One breadth-first search per switch that has hosts (over switch-to-switch links) gives each switch's
    distance to that edge switch; the ports whose neighbour is one hop closer form the ECMP group, one per
    switch and edge switch (:class:`SwitchRoutes`).  The port lists keep the plan's port order, so the result
    is deterministic.

    Edge switches with the same neighbours (a pod's edges, every leaf of a leaf-spine) share the search:
    see :func:`_via_twin`.  A fattree,24 searches 24 times, not 288, and no longer visits every
    (switch, host) pair, as going host by host did (7.4 s and 480 MB there).
    """
    names, number, peers = _numbered(graph)
    _check_connected(graph, names, number, peers)
    local: dict[str, dict[str, list[str]]] = {name: {} for name in names}
    edge_of: dict[str, str] = {}
    by_edge = _hosts_by_edge(graph)
    for edge, hosts in by_edge.items():
        for ip, ifname in hosts:
            edge_of[ip] = edge
            local[edge][ip] = [ifname]
    via: dict[str, dict[str, list[str]]] = {name: {} for name in names}
    searched: dict[frozenset[str], str] = {}  # an edge switch's neighbours -> the edge searched from with them
    for edge in by_edge:
        around = frozenset(peer for _ifname, peer in graph.links[edge])
        twin = searched.get(around)
        if twin is not None:
            _via_twin(graph, edge, twin, around, via)
        else:
            _via_search(graph, names, peers, number[edge], via)
            searched[around] = edge
    return {name: SwitchRoutes(edge_of, via[name], local[name]) for name in names}


def _via_search(graph: SwitchGraph, names: list[str], peers: list[list[int]], edge: int,
                via: dict[str, dict[str, list[str]]]) -> None:
    """Every switch's ports towards switch number ``edge``, from a search outwards from it."""
    dist = _hops_to(peers, edge)
    for i, name in enumerate(names):
        closer = dist[i] - 1
        if closer >= 0:
            via[name][names[edge]] = [ifname for (ifname, _peer), p in zip(graph.links[name], peers[i])
                                      if dist[p] == closer]


def _via_twin(graph: SwitchGraph, edge: str, twin: str, around: frozenset[str],
              via: dict[str, dict[str, list[str]]]) -> None:
    """Every switch's ports towards ``edge``, from those towards ``twin``, an edge switch with the same
    neighbours ``around`` (some: the graph is connected).  Every path to either ends in a step from ``around``, so a switch other
    than the two is as far from both, and its ports towards them differ only where a port leads to one of the
    two: on the neighbours themselves, one hop away, whose ports towards ``edge`` are those to it.  ``twin``, if
    not a neighbour, is two hops away, and every port of it leads to a neighbour of ``edge``, one hop closer."""
    for name, ports in graph.links.items():
        if name == edge:
            continue
        if name in around:
            via[name][edge] = [ifname for ifname, peer in ports if peer == edge]
        elif name == twin:
            via[name][edge] = [ifname for ifname, _peer in ports]
        else:
            via[name][edge] = via[name][twin]


def check_connected(graph: SwitchGraph) -> None:
    """Refuse a fabric where some switch has no path to some host (what :func:`routes_over` refuses), without
    computing the routes: one search over the switches, since on a connected switch graph every switch reaches
    every edge switch."""
    _check_connected(graph, *_numbered(graph))


def _check_connected(graph: SwitchGraph, names: list[str], number: dict[str, int], peers: list[list[int]]) -> None:
    """:func:`check_connected`, naming the first (switch, host) pair in the graph's order that has no path."""
    component = [-1] * len(names)
    for start in range(len(names)):
        if component[start] < 0:
            for i, d in enumerate(_hops_to(peers, start)):
                if d >= 0:
                    component[i] = start
    if all(c == 0 for c in component):
        return
    for name in names:
        for host, _ip, edge, _ifname in graph.hosts:
            if component[number[name]] != component[number[edge]]:
                raise FabricError(f"topology is not connected: switch {name} has no path to host {host}")


def _numbered(graph: SwitchGraph) -> tuple[list[str], dict[str, int], list[list[int]]]:
    """The switches in the graph's order, their numbers, and each one's neighbours by number, port by port."""
    names = list(graph.links)
    number = {name: i for i, name in enumerate(names)}
    return names, number, [[number[peer] for _ifname, peer in graph.links[name]] for name in names]


def _hosts_by_edge(graph: SwitchGraph) -> dict[str, list[tuple[str, str]]]:
    """Each edge switch's hosts (IP, the edge's ifname towards it), edges in the order of their first host."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for _name, ip, edge, ifname in graph.hosts:
        edges.setdefault(edge, []).append((ip, ifname))
    return edges


def _hops_to(peers: list[list[int]], start: int) -> list[int]:
    """Hop count from ``start`` to every switch (numbered, ``peers`` their neighbours), -1 where none."""
    dist = [-1] * len(peers)
    dist[start] = 0
    todo = deque([start])
    while todo:
        here = todo.popleft()
        step = dist[here] + 1
        for peer in peers[here]:
            if dist[peer] < 0:
                dist[peer] = step
                todo.append(peer)
    return dist


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
