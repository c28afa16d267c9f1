"""The subnet manager of the emulated InfiniBand fabric, without side effects.

A real IB fabric does nothing until a subnet manager (OpenSM) has swept it:
it hands every endport a LID, fills every switch's linear forwarding table
(LFT: destination LID -> egress port) and programs the SL-to-VL maps.  This
module does the same from a :class:`~emulator.fabric.plan.FabricPlan`, so the
switches and hosts of an ``--fabric ib`` run can be configured before any
packet moves, and so unit tests can check the routes without root.

What it copies from OpenSM, so that dumps and behaviour look familiar:

- LIDs are sequential, one per host port (hosts have one NIC) and one per
  switch (its management port 0): hosts first in natural name order
  (``h1`` -> 1), then the switches.
- Routing is OpenSM's default ``minhop`` engine: a switch sends each
  destination out of a port on a shortest path (hop count over the plan's
  links); among tied ports it takes the one that carries the fewest host
  LIDs so far (lowest port number on a tie), destinations taken in LID
  order.  Routes to switch LIDs are not counted, as OpenSM does by default
  (``port_profile_switch_nodes`` off), since they carry only management
  traffic.
- ``ibroute``-style dumps of each LFT (infiniband-diags).
- With ``adaptive``, as OpenSM's AR routing engines and NVIDIA's switches
  do: every switch also gets, per host LID it does not reach directly, an
  adaptive routing group, the ports on its shortest paths to that host.
  The LFT's port stays the group's default; the switch picks per packet
  the group's port with the shortest queue (``model::ib_plane``).

Everything here is deterministic: the same plan always gives the same
subnet, byte for byte in the dump.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mininet.util import natural

from emulator.errors import FabricError
from emulator.fabric.plan import FabricPlan, NodePlan, PortPlan, hop_distances
from emulator._core.ib import MANAGEMENT_VL, MAX_UNICAST_LID, SLS

GUID_BASE = 0x0002C90300000000  # a Mellanox-style OUI prefix; the low bits are the node's index
ROUTINGS = ("static", "adaptive")  # the LFTs alone, or with adaptive routing groups
DATA_VL_COUNTS = (1, 2, 4, 8, 15)  # what a port's VLCap can advertise: VL0, VL0-1, VL0-3, VL0-7, VL0-14


@dataclass(frozen=True)
class Subnet:
    """What the subnet manager programmed into the fabric.

    ``lfts`` holds, per switch, DLID -> egress port number (the plan's
    ``PortPlan.number``; 0 is the switch itself).  ``sl2vl`` maps each of the 16
    SLs onto the data VLs ``0..vls-1``; VL15 is reserved for subnet
    management packets and never carries data.
    """

    lids: dict[str, int]
    lfts: dict[str, dict[int, int]]
    sl2vl: dict[int, int]
    vls: int
    guids: dict[str, int]
    ar: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)  # switch -> DLID -> AR port numbers


def assign(plan: FabricPlan, vls: int = 4, adaptive: bool = False,
           without: frozenset[frozenset[str]] = frozenset()) -> Subnet:
    """Sweep ``plan`` as OpenSM would: LIDs, GUIDs, min-hop LFTs, SL2VL, and with ``adaptive`` the AR groups;
    the switch-to-switch links in ``without`` (pairs of switch names) are down and carry no route."""
    if vls not in DATA_VL_COUNTS:
        raise FabricError(f"bad VL count {vls}: an IB port has {', '.join(map(str, DATA_VL_COUNTS))} data VLs")
    order = _lid_order(plan)
    if len(order) > MAX_UNICAST_LID:
        raise FabricError(f"fabric has {len(order)} endports; InfiniBand has only {MAX_UNICAST_LID} unicast LIDs")
    lids = {name: lid for lid, name in enumerate(order, start=1)}
    links = {s.name: _switch_links(plan, s, without) for s in plan.switches()}
    distances = {target: hop_distances(links, target) for target in links}
    routes = {s: _min_hop_lft(plan, s, order, links[s], distances) for s in order if s in links}
    return Subnet(
        lids=lids,
        lfts={s: lft for s, (lft, _) in routes.items()},
        sl2vl={sl: sl % vls for sl in range(SLS)},
        vls=vls,
        guids={name: GUID_BASE | lid for name, lid in lids.items()},
        ar={s: groups for s, (_, groups) in routes.items()} if adaptive else {},
    )


def lid_of(subnet: Subnet, node: str) -> int:
    """The LID of a host's port or of a switch's management port."""
    try:
        return subnet.lids[node]
    except KeyError:
        raise FabricError(f"no node {node!r} in the subnet") from None


def node_of(subnet: Subnet, lid: int) -> str:
    """The node that owns ``lid``."""
    for name, own in subnet.lids.items():
        if own == lid:
            return name
    raise FabricError(f"LID {lid:#06x} is not assigned")


def _lid_order(plan: FabricPlan) -> list[str]:
    """Nodes in LID order: hosts, then switches, each in natural name order."""
    hosts = sorted((n.name for n in plan.hosts()), key=natural)
    switches = sorted((n.name for n in plan.switches()), key=natural)
    return hosts + switches


def _switch_links(plan: FabricPlan, switch: NodePlan, without: frozenset[frozenset[str]]) -> list[PortPlan]:
    """The ports of ``switch`` cabled to other switches, but for the links ``without``: the only transit paths."""
    return [p for p in switch.ports if plan.nodes[p.peer_node].kind == "switch"
            and frozenset((switch.name, p.peer_node)) not in without]


def _next_hops(switch: str, ports: list[PortPlan], dist: dict[str, int]) -> list[int]:
    """Port numbers of ``switch`` whose neighbour is one hop closer (``dist``)."""
    if switch not in dist:
        return []
    return [p.number for p in ports if dist.get(p.peer_node) == dist[switch] - 1]


def _min_hop_lft(plan: FabricPlan, switch: str, order: list[str], ports: list[PortPlan],
                 distances: dict[str, dict[str, int]]) -> tuple[dict[int, int], dict[int, tuple[int, ...]]]:
    """One switch's LFT: every LID to a least-loaded port on a shortest path; and per host LID with more
    than one shortest path, those paths' ports (its adaptive routing group).

    Hosts behind the same edge switch share that switch's set of equal-cost
    ports, but each takes whichever of them carries the fewest host routes
    so far, so consecutive hosts spread over the uplinks.
    """
    toward = {target: _next_hops(switch, ports, dist) for target, dist in distances.items()}
    host_ports = {p.peer_node: p.number for p in plan.nodes[switch].ports}
    load: dict[int, int] = {}
    lft: dict[int, int] = {}
    groups: dict[int, tuple[int, ...]] = {}
    for lid, dest in enumerate(order, start=1):
        node = plan.nodes[dest]
        if dest == switch:
            lft[lid] = 0
            continue
        if node.kind == "host" and dest in host_ports:
            candidates = [host_ports[dest]]
        else:
            candidates = toward[node.ports[0].peer_node if node.kind == "host" else dest]
        if not candidates:
            raise FabricError(f"topology is not connected: switch {switch} has no path to {dest}")
        port = min(candidates, key=lambda number: (load.get(number, 0), number))
        lft[lid] = port
        if node.kind == "host":
            load[port] = load.get(port, 0) + 1
            if len(candidates) > 1:
                groups[lid] = tuple(candidates)
    return lft, groups


def ibroute(subnet: Subnet, plan: FabricPlan, switch: str) -> str:
    """One switch's LFT in the format of infiniband-diags' ``ibroute <lid>``."""
    if switch not in subnet.lfts:
        raise FabricError(f"{switch!r} is not a switch of the subnet")
    lft = subnet.lfts[switch]
    names = {lid: name for name, lid in subnet.lids.items()}
    lines = [
        f"Unicast lids [{min(lft):#x}-{max(lft):#x}] of switch Lid {subnet.lids[switch]}"
        f" guid {subnet.guids[switch]:#018x} ({switch}):",
        "  Lid  Out   Destination",
        "       Port     Info ",
    ]
    lines += [f"{dlid:#06x} {lft[dlid]:03d} : ({_describe(subnet, plan, names[dlid])})" for dlid in sorted(lft)]
    lines.append(f"{len(lft)} valid lids dumped ")
    groups = subnet.ar.get(switch, {})
    if groups:
        lines.append("Adaptive routing groups (the LFT's port is the default):")
        lines += [f"{dlid:#06x} : {' '.join(f'{port:03d}' for port in groups[dlid])}" for dlid in sorted(groups)]
    return "\n".join(lines) + "\n"


def _describe(subnet: Subnet, plan: FabricPlan, name: str) -> str:
    """ibroute's destination info: node type, port GUID and description."""
    kind = "Channel Adapter" if plan.nodes[name].kind == "host" else "Switch"
    return f"{kind} portguid {subnet.guids[name]:#018x}: '{name}'"


def dump(subnet: Subnet, plan: FabricPlan) -> str:
    """The whole subnet: each switch's ``ibroute`` (and AR groups) in LID order, the LIDs, SL2VL."""
    switches = sorted(subnet.lfts, key=subnet.lids.__getitem__)
    parts = [ibroute(subnet, plan, s) for s in switches]
    parts += [_lid_table(subnet, plan), _sl2vl_table(subnet)]
    return "\n".join(parts)


def _lid_table(subnet: Subnet, plan: FabricPlan) -> str:
    """Every LID with its node's type (CA or SW), GUID and name."""
    lines = ["LIDs:", "  Lid  Type GUID               Node"]
    for name, lid in sorted(subnet.lids.items(), key=lambda item: item[1]):
        kind = "CA" if plan.nodes[name].kind == "host" else "SW"
        lines.append(f"{lid:#06x} {kind}   {subnet.guids[name]:#018x} {name}")
    return "\n".join(lines) + "\n"


def _sl2vl_table(subnet: Subnet) -> str:
    """The SL-to-VL map, laid out like ``smpquery sl2vl``, same on every port."""
    sls = sorted(subnet.sl2vl)
    return (
        f"SL2VL table (data VLs 0-{subnet.vls - 1}; VL{MANAGEMENT_VL} carries only subnet management):\n"
        + "SL: |" + "".join(f"{sl:2d}|" for sl in sls) + "\n"
        + "VL: |" + "".join(f"{subnet.sl2vl[sl]:2d}|" for sl in sls) + "\n"
    )
