"""The IB subnet manager: LIDs, min-hop forwarding tables, SL2VL, dumps.

Routes are checked by walking the forwarding tables hop by hop through the
plan's cabling and comparing with a breadth-first search over the whole
plan graph written here, not with the module's own distances.
"""

from collections import Counter

import pytest

from emulator.errors import FabricError
from emulator.fabric.ib_subnet import (Subnet, assign, dump, ibroute, lid_of,
                                node_of)
from emulator.fabric.plan import FabricPlan, NodePlan, make_plan
from test_plan import distances_to  # the independent BFS oracle of the routing tests
from topologies import (DumbbellTopo, FatTreeTopo, LeafSpineTopo, RingTopo,
                        StarTopo)

TOPOS = {
    "star,4": lambda: StarTopo(4),
    "star,12": lambda: StarTopo(12),
    "dumbbell,2": lambda: DumbbellTopo(2),
    "leafspine": LeafSpineTopo,
    "leafspine,2,2,hosts=4": lambda: LeafSpineTopo(2, 2, hosts=4),
    "fattree,4": lambda: FatTreeTopo(4),
    "ring,4": lambda: RingTopo(4),
}


def plan_of(spec: str) -> FabricPlan:
    return make_plan(TOPOS[spec](), "t", {})


def number(name: str) -> int:
    return int(name[1:])


def walk(plan: FabricPlan, subnet: Subnet, start: str, dlid: int) -> list[str]:
    """The switches a packet for ``dlid`` visits from ``start``, then where it ends."""
    path, here = [start], start
    while plan.nodes[here].kind == "switch":
        out = subnet.lfts[here][dlid]
        if out == 0:
            return path
        (port,) = [p for p in plan.nodes[here].ports if p.number == out]
        here = port.peer_node
        assert here not in path, f"loop towards LID {dlid}: {path + [here]}"
        path.append(here)
    return path


def uplink_load(plan: FabricPlan, subnet: Subnet, switch: str, uplinks: set[int]) -> Counter:
    """How many host LIDs ``switch`` routes through each of ``uplinks``."""
    hosts = [subnet.lids[h.name] for h in plan.hosts()]
    load = Counter({port: 0 for port in uplinks})
    load.update(subnet.lfts[switch][lid] for lid in hosts if subnet.lfts[switch][lid] in uplinks)
    return load


@pytest.mark.parametrize("spec", sorted(TOPOS))
def test_lids_hosts_first_in_natural_order_then_switches(spec):
    plan = plan_of(spec)
    subnet = assign(plan)
    hosts = sorted((h.name for h in plan.hosts()), key=number)
    switches = sorted((s.name for s in plan.switches()), key=number)
    assert [subnet.lids[h] for h in hosts] == list(range(1, len(hosts) + 1))
    assert [subnet.lids[s] for s in switches] == list(range(len(hosts) + 1, len(hosts) + len(switches) + 1))
    assert len(set(subnet.lids.values())) == len(plan.nodes)
    assert len(set(subnet.guids.values())) == len(plan.nodes)


@pytest.mark.parametrize("spec", sorted(TOPOS))
def test_every_switch_routes_every_lid(spec):
    plan = plan_of(spec)
    subnet = assign(plan)
    assert set(subnet.lfts) == {s.name for s in plan.switches()}
    for switch, lft in subnet.lfts.items():
        assert set(lft) == set(subnet.lids.values())
        assert lft[subnet.lids[switch]] == 0
        numbers = {p.number for p in plan.nodes[switch].ports}
        assert all(port in numbers for lid, port in lft.items() if lid != subnet.lids[switch])


@pytest.mark.parametrize("spec", sorted(TOPOS))
def test_routes_follow_shortest_paths_without_loops(spec):
    plan = plan_of(spec)
    subnet = assign(plan)
    for dest, dlid in subnet.lids.items():
        dist = distances_to(plan, dest)
        for switch in subnet.lfts:
            path = walk(plan, subnet, switch, dlid)
            assert path[-1] == dest
            assert len(path) - 1 == dist[switch]


@pytest.mark.parametrize("spec", ["leafspine", "leafspine,2,2,hosts=4"])
def test_leaf_spreads_remote_hosts_over_both_spines(spec):
    plan = plan_of(spec)
    subnet = assign(plan)
    spines = {s.name for s in plan.switches() if not any(plan.nodes[p.peer_node].kind == "host" for p in s.ports)}
    for leaf in (s for s in plan.switches() if s.name not in spines):
        uplinks = {p.number for p in leaf.ports if p.peer_node in spines}
        load = uplink_load(plan, subnet, leaf.name, uplinks)
        assert len(uplinks) == 2 and all(load.values())
        assert max(load.values()) - min(load.values()) <= 1


def test_fattree_uplinks_are_balanced():
    topo = FatTreeTopo(4)
    plan = make_plan(topo, "t", {})
    subnet = assign(plan)
    checked = 0
    for switch in plan.switches():
        if topo.nodeInfo(switch.name)["role"] == "core":
            continue
        uplinks = {p.number for p in switch.ports if p.number > 2}  # ports k/2+1..k face upwards
        load = uplink_load(plan, subnet, switch.name, uplinks)
        assert min(load.values()) > 0
        assert max(load.values()) - min(load.values()) <= 1
        checked += 1
    assert checked == 16


def test_ties_go_to_the_port_with_fewest_host_routes():
    plan = make_plan(RingTopo(4, hosts=2), "t", {})
    subnet = assign(plan)
    # s1: port 3 faces s2, port 4 faces s4.  h3, h4 (on s2) take port 3, so
    # h5, h6 (on s3, two hops either way) both take the idle port 4; h7, h8
    # (on s4) have no choice.
    ports = [subnet.lfts["s1"][subnet.lids[f"h{i}"]] for i in range(3, 9)]
    assert ports == [3, 3, 4, 4, 4, 4]


def test_assign_is_deterministic():
    first, second = assign(plan_of("fattree,4")), assign(plan_of("fattree,4"))
    assert first == second
    assert dump(first, plan_of("fattree,4")) == dump(second, plan_of("fattree,4"))


@pytest.mark.parametrize("vls", [1, 2, 4, 8, 15])
def test_sl2vl_spreads_sls_over_data_vls(vls):
    subnet = assign(plan_of("star,4"), vls)
    assert subnet.vls == vls
    assert subnet.sl2vl == {sl: sl % vls for sl in range(16)}
    assert 15 not in subnet.sl2vl.values()


@pytest.mark.parametrize("vls", [0, 3, 16])
def test_bad_vl_count_is_rejected(vls):
    with pytest.raises(FabricError, match="VL count"):
        assign(plan_of("star,4"), vls)


def test_too_many_lids_is_rejected():
    nodes = {f"h{i}": NodePlan(f"h{i}", "host", f"t-h{i}") for i in range(1, 0xC001)}
    with pytest.raises(FabricError, match="unicast LIDs"):
        assign(FabricPlan("t", nodes, [], {}))


def test_disconnected_switches_are_rejected():
    plan = plan_of("dumbbell,2")
    for switch in plan.switches():
        switch.ports = [p for p in switch.ports if plan.nodes[p.peer_node].kind == "host"]
    with pytest.raises(FabricError, match="no path"):
        assign(plan)


def test_lid_and_node_lookups():
    subnet = assign(plan_of("leafspine"))
    assert [lid_of(subnet, n) for n in ("h1", "h4", "s1", "s4")] == [1, 4, 5, 8]
    assert all(node_of(subnet, lid) == name for name, lid in subnet.lids.items())
    with pytest.raises(FabricError):
        lid_of(subnet, "h9")
    with pytest.raises(FabricError):
        node_of(subnet, 9)


STAR4_S1 = """\
Unicast lids [0x1-0x5] of switch Lid 5 guid 0x0002c90300000005 (s1):
  Lid  Out   Destination
       Port     Info 
0x0001 001 : (Channel Adapter portguid 0x0002c90300000001: 'h1')
0x0002 002 : (Channel Adapter portguid 0x0002c90300000002: 'h2')
0x0003 003 : (Channel Adapter portguid 0x0002c90300000003: 'h3')
0x0004 004 : (Channel Adapter portguid 0x0002c90300000004: 'h4')
0x0005 000 : (Switch portguid 0x0002c90300000005: 's1')
5 valid lids dumped 
"""


def test_ibroute_of_star():
    plan = plan_of("star,4")
    assert ibroute(assign(plan), plan, "s1") == STAR4_S1


def test_ibroute_rejects_a_host():
    plan = plan_of("star,4")
    with pytest.raises(FabricError, match="not a switch"):
        ibroute(assign(plan), plan, "h1")


@pytest.mark.parametrize("spec", ["dumbbell,2", "fattree,4"])
def test_dump_lists_every_switch_then_lids_and_sl2vl(spec):
    plan = plan_of(spec)
    subnet = assign(plan)
    text = dump(subnet, plan)
    for switch in plan.switches():
        header = f"of switch Lid {subnet.lids[switch.name]} guid {subnet.guids[switch.name]:#018x} ({switch.name}):"
        assert text.count(header) == 1
        assert ibroute(subnet, plan, switch.name) in text
    assert text.count("valid lids dumped") == len(plan.switches())
    for name, lid in subnet.lids.items():
        assert f"{lid:#06x} {'CA' if name[0] == 'h' else 'SW'}   {subnet.guids[name]:#018x} {name}\n" in text
    assert text.endswith("VL: |" + "".join(f"{sl % 4:2d}|" for sl in range(16)) + "\n")


@pytest.mark.parametrize("spec", ["leafspine,2,2,hosts=4", "fattree,4", "ring,4"])
def test_adaptive_groups_are_every_shortest_path_port_with_the_lft_port_among_them(spec):
    plan = plan_of(spec)
    static, adaptive = assign(plan), assign(plan, adaptive=True)
    assert static.ar == {} and adaptive.lfts == static.lfts  # AR adds groups; the LFTs stay the default
    hosts = {h.name: static.lids[h.name] for h in plan.hosts()}
    grouped = 0
    for switch in plan.switches():
        links = {p.number: p.peer_node for p in switch.ports}
        for host, lid in hosts.items():
            target = plan.nodes[host].ports[0].peer_node  # the host's edge switch
            dist = distances_to(plan, target)
            shortest = sorted(n for n, peer in links.items()
                              if plan.nodes[peer].kind == "switch" and dist[peer] == dist[switch.name] - 1)
            group = adaptive.ar[switch.name].get(lid)
            if len(shortest) > 1:
                assert sorted(group) == shortest and adaptive.lfts[switch.name][lid] in group
                grouped += 1
            else:
                assert group is None  # one path: nothing to choose
    assert grouped > 0


def test_ibroute_lists_the_adaptive_groups():
    plan = plan_of("leafspine,2,2,hosts=4")
    text = ibroute(assign(plan, adaptive=True), plan, "s1")  # a leaf: ports 5 and 6 face the spines
    assert "Adaptive routing groups" in text
    assert "0x0005 : 005 006" in text  # h5 is behind the other leaf: either spine
    assert "0x0001" not in text.split("Adaptive")[1]  # h1 is its own: one port
    assert "Adaptive" not in ibroute(assign(plan), plan, "s1")
