"""The fabric plan: names, addresses, link parameters and ECMP routes.

Every expectation here is derived independently of emulator.fabric.plan: host
numbers from the host names, ports from Mininet's own port map, and routes
from a breadth-first search over the whole plan graph (hosts included)
written in this file.
"""

from collections import deque
from ipaddress import IPv4Address

import pytest
from mininet.topo import Topo

from emulator.errors import FabricError
from emulator.fabric.plan import link_params, make_plan, routes_over, switch_graph
from topologies import (DumbbellTopo, FatTreeTopo, LeafSpineTopo, RingTopo,
                        StarTopo)

RUN = "t1"


def plan_of(topo, **defaults):
    return make_plan(topo, RUN, defaults or None)


def host_number(name: str) -> int:
    assert name[0] == "h"
    return int(name[1:])


def port_by_ifname(plan, node: str, ifname: str):
    (port,) = [p for p in plan.nodes[node].ports if p.ifname == ifname]
    return port


def edge_switch(plan, host: str) -> str:
    (port,) = plan.nodes[host].ports
    return port.peer_node


def distances_to(plan, target: str) -> dict[str, int]:
    """Hop count from every node of the plan to ``target`` (BFS over all ports)."""
    dist = {target: 0}
    todo = deque([target])
    while todo:
        here = todo.popleft()
        for port in plan.nodes[here].ports:
            if port.peer_node not in dist:
                dist[port.peer_node] = dist[here] + 1
                todo.append(port.peer_node)
    return dist


def peer_of(plan, switch: str, ifname: str) -> str:
    return port_by_ifname(plan, switch, ifname).peer_node


def role(topo, switch: str) -> str:
    return topo.nodeInfo(switch)["role"]


# --- nodes, names and addresses ------------------------------------------------------


@pytest.mark.parametrize("topo, hosts, switches, links", [
    (StarTopo(n=3), 3, 1, 3),
    (DumbbellTopo(n=2), 4, 2, 5),
    (LeafSpineTopo(), 4, 4, 8),
    (FatTreeTopo(k=4), 16, 20, 48),
    (RingTopo(n=4), 4, 4, 8),
], ids=["star3", "dumbbell2", "leafspine", "fattree4", "ring4"])
def test_node_and_link_counts(topo, hosts, switches, links):
    plan = plan_of(topo)
    assert len(plan.hosts()) == hosts
    assert len(plan.switches()) == switches
    assert len(plan.nodes) == hosts + switches
    assert len(plan.links) == links
    assert all(n.kind == "host" for n in plan.hosts())
    assert all(n.kind == "switch" for n in plan.switches())
    # every port belongs to exactly one link end
    assert sum(len(n.ports) for n in plan.nodes.values()) == 2 * links


def test_fattree_host_ips_follow_natural_name_order():
    plan = plan_of(FatTreeTopo(k=4))
    ips = {n.name: n.ip for n in plan.hosts()}
    assert set(ips) == {f"h{i}" for i in range(1, 17)}
    for name, ip in ips.items():
        assert ip == f"10.0.0.{host_number(name)}"
    # lexical order would have given h10 the second address
    assert ips["h10"] == "10.0.0.10"
    assert ips["h2"] == "10.0.0.2"
    assert [n.name for n in plan.hosts()] == [f"h{i}" for i in range(1, 17)]
    assert all(n.ip is None for n in plan.switches())


def test_host_ips_past_255_carry_into_the_next_octet():
    # 2 leaves x 150 hosts: h256 is the 256th address of 10.0.0.0/8
    plan = plan_of(LeafSpineTopo(leaves=2, spines=1, hosts=150))
    ips = {n.name: n.ip for n in plan.hosts()}
    assert len(ips) == 300
    assert ips["h255"] == "10.0.0.255"
    assert ips["h256"] == "10.0.1.0"
    assert ips["h300"] == "10.0.1.44"
    for name, ip in ips.items():
        assert int(IPv4Address(ip)) == int(IPv4Address("10.0.0.0")) + host_number(name)


def test_namespaces_are_run_dash_node():
    plan = make_plan(StarTopo(n=2), "abc")
    assert plan.run == "abc"
    assert {n.name: n.netns for n in plan.nodes.values()} == {
        "h1": "abc-h1", "h2": "abc-h2", "s1": "abc-s1"}


@pytest.mark.parametrize("topo", [FatTreeTopo(k=4), LeafSpineTopo(leaves=3, spines=2, hosts=3), RingTopo(n=5, hosts=2)],
                         ids=["fattree4", "leafspine332", "ring5x2"])
def test_macs_unique_and_locally_administered_unicast(topo):
    plan = plan_of(topo)
    macs = [p.mac for n in plan.nodes.values() for p in n.ports]
    assert len(macs) == len(set(macs))
    for mac in macs:
        octets = [int(x, 16) for x in mac.split(":")]
        assert len(octets) == 6 and all(0 <= o <= 255 for o in octets)
        assert octets[0] & 0x02, f"{mac} is not locally administered"
        assert not octets[0] & 0x01, f"{mac} is multicast"
        assert mac == mac.lower()


@pytest.mark.parametrize("topo", [FatTreeTopo(k=4), LeafSpineTopo(), RingTopo(n=4), DumbbellTopo(n=3)],
                         ids=["fattree4", "leafspine", "ring4", "dumbbell3"])
def test_interface_names_and_numbers_match_mininet_ports(topo):
    plan = plan_of(topo)
    for node in plan.nodes.values():
        numbers = sorted(p.number for p in node.ports)
        if node.kind == "host":
            assert numbers == [0]
        else:
            assert numbers == list(range(1, len(node.ports) + 1))
        for port in node.ports:
            assert port.node == node.name
            assert port.ifname == f"{node.name}-eth{port.number}"
            # Mininet's own port map says which node is behind this port number
            assert topo.ports[node.name][port.number][0] == port.peer_node


@pytest.mark.parametrize("topo", [FatTreeTopo(k=4), LeafSpineTopo(), RingTopo(n=3), StarTopo(n=5)],
                         ids=["fattree4", "leafspine", "ring3", "star5"])
def test_peer_fields_agree_with_the_other_end(topo):
    plan = plan_of(topo)
    for node in plan.nodes.values():
        for port in node.ports:
            other = port_by_ifname(plan, port.peer_node, port.peer_ifname)
            assert other.peer_node == node.name
            assert other.peer_ifname == port.ifname
            assert other.peer_mac == port.mac
            assert port.peer_mac == other.mac
            assert other.params == port.params
    for a, b in plan.links:
        assert (a.peer_node, a.peer_ifname, a.peer_mac) == (b.node, b.ifname, b.mac)
        assert (b.peer_node, b.peer_ifname, b.peer_mac) == (a.node, a.ifname, a.mac)
        assert a in plan.nodes[a.node].ports and b in plan.nodes[b.node].ports
    # the plan's links are exactly Mininet's links
    assert {frozenset((a.node, b.node)) for a, b in plan.links} == {frozenset(link) for link in topo.links()}


def test_star_exact_ports():
    plan = plan_of(StarTopo(n=2))
    (h1,) = plan.nodes["h1"].ports
    assert (h1.ifname, h1.number, h1.peer_node, h1.peer_ifname) == ("h1-eth0", 0, "s1", "s1-eth1")
    s1 = {p.ifname: p.peer_ifname for p in plan.nodes["s1"].ports}
    assert s1 == {"s1-eth1": "h1-eth0", "s1-eth2": "h2-eth0"}


# --- link parameters -----------------------------------------------------------------


def test_default_link_params():
    plan = plan_of(StarTopo(n=2))
    for a, _ in plan.links:
        assert (a.params.bw_bps, a.params.delay_ns, a.params.mtu) == (100_000_000, 0, 1500)


def test_per_link_options_and_run_defaults():
    topo = Topo()
    s1 = topo.addSwitch("s1")
    for i in range(1, 5):
        topo.addHost(f"h{i}")
    topo.addLink("h1", s1, bw=10)                       # bare number: Mbit/s
    topo.addLink("h2", s1, bw="50mbit", delay="5us")
    topo.addLink("h3", s1, mtu=9000, delay="1ms")
    topo.addLink("h4", s1)                              # run defaults only
    plan = plan_of(topo, bw="1gbit", delay="2us", mtu=4000)
    params = {a.node if a.node.startswith("h") else b.node: (a.params.bw_bps, a.params.delay_ns, a.params.mtu)
              for a, b in plan.links}
    assert params == {
        "h1": (10_000_000, 2_000, 4000),
        "h2": (50_000_000, 5_000, 4000),
        "h3": (1_000_000_000, 1_000_000, 9000),
        "h4": (1_000_000_000, 2_000, 4000),
    }


def test_per_link_options_without_run_defaults():
    topo = Topo()
    topo.addSwitch("s1")
    topo.addHost("h1")
    topo.addHost("h2")
    topo.addLink("h1", "s1", bw=0.5, delay="5us")
    topo.addLink("h2", "s1", bw="2gbps")   # tc: bytes per second
    plan = plan_of(topo)
    got = {a.node: a.params for a, _ in plan.links}
    assert (got["h1"].bw_bps, got["h1"].delay_ns, got["h1"].mtu) == (500_000, 5_000, 1500)
    assert (got["h2"].bw_bps, got["h2"].delay_ns, got["h2"].mtu) == (16_000_000_000, 0, 1500)


@pytest.mark.parametrize("mtu", [575, 9001, 0, 65536])
def test_mtu_out_of_range_as_default(mtu):
    with pytest.raises(FabricError, match=f"bad mtu {mtu}"):
        plan_of(StarTopo(n=1), mtu=mtu)


@pytest.mark.parametrize("mtu", [576, 9000])
def test_mtu_bounds_are_inclusive(mtu):
    plan = plan_of(StarTopo(n=1), mtu=mtu)
    assert plan.links[0][0].params.mtu == mtu


def test_mtu_out_of_range_on_one_link():
    topo = StarTopo(n=1)
    topo.addHost("h2")
    topo.addLink("h2", "s1", mtu=100)
    with pytest.raises(FabricError, match="bad mtu 100"):
        plan_of(topo)


def test_bad_rate_in_link_option_is_a_fabric_error():
    topo = StarTopo(n=1)
    topo.addHost("h2")
    topo.addLink("h2", "s1", bw="fast")
    with pytest.raises(FabricError, match="bad rate 'fast'"):
        plan_of(topo)


# --- topologies the plan rejects -----------------------------------------------------


def test_host_with_two_links():
    topo = Topo()
    topo.addSwitch("s1")
    topo.addSwitch("s2")
    topo.addHost("h1")
    topo.addLink("s1", "s2")
    topo.addLink("h1", "s1")
    topo.addLink("h1", "s2")
    with pytest.raises(FabricError, match="host h1 has 2 links"):
        plan_of(topo)


def test_host_without_links():
    topo = StarTopo(n=1)
    topo.addHost("h2")
    with pytest.raises(FabricError, match="host h2 has 0 links"):
        plan_of(topo)


def test_host_cabled_to_host():
    topo = Topo()
    topo.addHost("h1")
    topo.addHost("h2")
    topo.addLink("h1", "h2")
    with pytest.raises(FabricError, match="cabled to host"):
        plan_of(topo)


def test_topology_without_hosts():
    topo = Topo()
    topo.addSwitch("s1")
    with pytest.raises(FabricError, match="no hosts"):
        plan_of(topo)


def test_two_islands_are_not_connected():
    topo = Topo()
    for i in (1, 2):
        topo.addSwitch(f"s{i}")
        topo.addHost(f"h{i}")
        topo.addLink(f"h{i}", f"s{i}")
    with pytest.raises(FabricError, match="not connected"):
        plan_of(topo)


def test_switch_island_without_hosts_is_not_connected():
    topo = StarTopo(n=2)
    topo.addSwitch("s2")
    topo.addSwitch("s3")
    topo.addLink("s2", "s3")
    with pytest.raises(FabricError, match="not connected: switch s[23]"):
        plan_of(topo)


def test_interface_name_limit_is_15_characters():
    ok = Topo()
    ok.addSwitch("sw34567890")         # "sw34567890-eth1" has 15 characters
    ok.addHost("h1")
    ok.addLink("h1", "sw34567890")
    plan = plan_of(ok)
    assert [p.ifname for p in plan.nodes["sw34567890"].ports] == ["sw34567890-eth1"]

    bad = Topo()
    bad.addSwitch("sw345678901")       # 16 characters
    bad.addHost("h1")
    bad.addLink("h1", "sw345678901")
    with pytest.raises(FabricError, match="longer than 15"):
        plan_of(bad)


def test_long_host_name_is_rejected_too():
    topo = StarTopo(n=1)
    topo.addHost("hostnumber12")       # "hostnumber12-eth0" has 17 characters
    topo.addLink("hostnumber12", "s1")
    with pytest.raises(FabricError, match="'hostnumber12-eth0'"):
        plan_of(topo)


def test_more_than_255_ports_is_rejected():
    assert len(plan_of(StarTopo(n=255)).nodes["s1"].ports) == 255
    with pytest.raises(FabricError, match="more than 255 ports"):
        plan_of(StarTopo(n=256))


# --- routes --------------------------------------------------------------------------


def check_shortest_paths(plan):
    """Every switch routes to every host over exactly its closer neighbours."""
    switches = [s.name for s in plan.switches()]
    assert set(plan.routes) == set(switches)
    for host in plan.hosts():
        dist = distances_to(plan, host.name)
        for switch in switches:
            listed = plan.routes[switch][host.ip]
            assert listed, f"{switch} has an empty route to {host.name}"
            assert len(listed) == len(set(listed))
            for ifname in listed:
                assert dist[peer_of(plan, switch, ifname)] == dist[switch] - 1, (switch, host.name, ifname)
            closer = {p.ifname for p in plan.nodes[switch].ports if dist[p.peer_node] == dist[switch] - 1}
            assert set(listed) == closer, (switch, host.name)
            # deterministic: the order of the switch's port list
            order = [p.ifname for p in plan.nodes[switch].ports]
            assert listed == [i for i in order if i in closer]
        # a switch never has a route via a host other than the destination
        for switch in switches:
            for ifname in plan.routes[switch][host.ip]:
                peer = peer_of(plan, switch, ifname)
                assert plan.nodes[peer].kind == "switch" or peer == host.name


@pytest.mark.parametrize("topo", [
    FatTreeTopo(k=4), FatTreeTopo(k=2), FatTreeTopo(k=6), LeafSpineTopo(), LeafSpineTopo(leaves=4, spines=3, hosts=1),
    RingTopo(n=4), RingTopo(n=5, hosts=2), RingTopo(n=6), DumbbellTopo(n=3), StarTopo(n=4),
], ids=["fattree4", "fattree2", "fattree6", "leafspine", "leafspine431", "ring4", "ring5x2", "ring6", "dumbbell3",
        "star4"])
def test_routes_are_all_shortest_paths(topo):
    plan = plan_of(topo)
    check_shortest_paths(plan)
    host_ips = {h.ip for h in plan.hosts()}
    for switch, table in plan.routes.items():
        assert set(table) == host_ips, switch


@pytest.mark.parametrize("make", [lambda: FatTreeTopo(k=4), lambda: RingTopo(n=6, hosts=2)], ids=["fattree4", "ring6"])
def test_routes_are_deterministic(make):
    assert plan_of(make()).routes == plan_of(make()).routes


@pytest.fixture(scope="module")
def fattree():
    topo = FatTreeTopo(k=4)
    return topo, plan_of(topo)


def test_fattree_every_switch_routes_every_host(fattree):
    _, plan = fattree
    assert len(plan.routes) == 20
    for switch, table in plan.routes.items():
        assert sorted(table, key=lambda ip: IPv4Address(ip)) == [f"10.0.0.{i}" for i in range(1, 17)], switch


def test_fattree_attached_host_uses_its_own_port_only(fattree):
    _, plan = fattree
    for host in plan.hosts():
        (nic,) = host.ports
        assert plan.routes[nic.peer_node][host.ip] == [nic.peer_ifname]
    # spelled out for one: h3 and h4 hang off s2 (ports 1 and 2)
    assert plan.routes["s2"]["10.0.0.3"] == ["s2-eth1"]
    assert plan.routes["s2"]["10.0.0.4"] == ["s2-eth2"]


def test_fattree_edge_to_another_pod_uses_both_aggregation_uplinks(fattree):
    topo, plan = fattree
    pod = lambda s: topo.nodeInfo(s)["pod"]
    checked = 0
    for switch in (s.name for s in plan.switches() if role(topo, s.name) == "edge"):
        uplinks = [p.ifname for p in plan.nodes[switch].ports
                   if plan.nodes[p.peer_node].kind == "switch" and role(topo, p.peer_node) == "aggregation"]
        assert len(uplinks) == 2
        for host in plan.hosts():
            there = edge_switch(plan, host.name)
            if pod(there) != pod(switch):
                route = plan.routes[switch][host.ip]
                assert len(route) == 2 and set(route) == set(uplinks)
                assert all(pod(peer_of(plan, switch, i)) == pod(switch) for i in route)
                checked += 1
    assert checked == 8 * 12
    # spelled out: s1 (pod 0) to h16 (on s8, pod 3) via s9 and s10
    assert plan.routes["s1"]["10.0.0.16"] == ["s1-eth3", "s1-eth4"]
    assert {peer_of(plan, "s1", i) for i in ("s1-eth3", "s1-eth4")} == {"s9", "s10"}


def test_fattree_edge_to_the_other_edge_of_its_pod(fattree):
    _, plan = fattree
    # s1 and s2 form pod 0 (with aggregation s9, s10); h3 is on s2
    assert plan.routes["s1"]["10.0.0.3"] == ["s1-eth3", "s1-eth4"]


def test_fattree_aggregation_routes(fattree):
    topo, plan = fattree
    pod = lambda s: topo.nodeInfo(s)["pod"]
    for switch in (s.name for s in plan.switches() if role(topo, s.name) == "aggregation"):
        cores = [p.ifname for p in plan.nodes[switch].ports if role(topo, p.peer_node) == "core"]
        assert len(cores) == 2
        for host in plan.hosts():
            there = edge_switch(plan, host.name)
            route = plan.routes[switch][host.ip]
            if pod(there) == pod(switch):
                # straight down to the host's edge switch
                assert len(route) == 1 and peer_of(plan, switch, route[0]) == there
            else:
                assert len(route) == 2 and set(route) == set(cores)
    # spelled out: s9 (pod 0, first aggregation) reaches other pods via cores s17, s18
    assert plan.routes["s9"]["10.0.0.5"] == ["s9-eth3", "s9-eth4"]
    assert {peer_of(plan, "s9", "s9-eth3"), peer_of(plan, "s9", "s9-eth4")} == {"s17", "s18"}


def test_fattree_core_routes_have_one_port_into_the_right_pod(fattree):
    topo, plan = fattree
    cores = [s.name for s in plan.switches() if role(topo, s.name) == "core"]
    assert cores == ["s17", "s18", "s19", "s20"]
    for core in cores:
        for host in plan.hosts():
            route = plan.routes[core][host.ip]
            assert len(route) == 1
            aggregation = peer_of(plan, core, route[0])
            assert role(topo, aggregation) == "aggregation"
            assert topo.nodeInfo(aggregation)["pod"] == topo.nodeInfo(edge_switch(plan, host.name))["pod"]
            # the docstring's port rule: port p+1 goes to pod p
            pod = (host_number(host.name) - 1) // 4
            assert route == [f"{core}-eth{pod + 1}"]


def test_leafspine_routes():
    plan = plan_of(LeafSpineTopo())   # leaves s1 s2, spines s3 s4, h1 h2 on s1, h3 h4 on s2
    assert plan.routes["s1"]["10.0.0.3"] == ["s1-eth3", "s1-eth4"]
    assert {peer_of(plan, "s1", i) for i in plan.routes["s1"]["10.0.0.3"]} == {"s3", "s4"}
    assert plan.routes["s1"]["10.0.0.2"] == ["s1-eth2"]
    for spine in ("s3", "s4"):
        assert plan.routes[spine]["10.0.0.1"] == [f"{spine}-eth1"]
        assert plan.routes[spine]["10.0.0.4"] == [f"{spine}-eth2"]

    wide = plan_of(LeafSpineTopo(leaves=4, spines=3, hosts=2))
    for leaf in ("s1", "s2", "s3", "s4"):
        for host in wide.hosts():
            route = wide.routes[leaf][host.ip]
            if edge_switch(wide, host.name) == leaf:
                assert len(route) == 1
            else:
                assert len(route) == 3
                assert {peer_of(wide, leaf, i) for i in route} == {"s5", "s6", "s7"}


def test_ring4_opposite_switch_has_two_equal_cost_ports():
    plan = plan_of(RingTopo(n=4))   # s1 -> s2 -> s3 -> s4 -> s1, h_i on s_i
    # on s1: eth1 = h1, eth2 = next (s2), eth3 = previous (s4)
    assert peer_of(plan, "s1", "s1-eth2") == "s2"
    assert peer_of(plan, "s1", "s1-eth3") == "s4"
    assert plan.routes["s1"]["10.0.0.3"] == ["s1-eth2", "s1-eth3"]
    assert plan.routes["s1"]["10.0.0.2"] == ["s1-eth2"]
    assert plan.routes["s1"]["10.0.0.4"] == ["s1-eth3"]
    assert plan.routes["s1"]["10.0.0.1"] == ["s1-eth1"]
    for i in range(1, 5):
        opposite = (i + 1) % 4 + 1
        assert len(plan.routes[f"s{i}"][f"10.0.0.{opposite}"]) == 2
        for neighbour in (i % 4 + 1, (i - 2) % 4 + 1):
            assert len(plan.routes[f"s{i}"][f"10.0.0.{neighbour}"]) == 1


def test_ring5_has_no_ties():
    plan = plan_of(RingTopo(n=5))
    for switch, table in plan.routes.items():
        assert all(len(ports) == 1 for ports in table.values()), switch
    assert plan.routes["s1"]["10.0.0.3"] == ["s1-eth2"]   # via s2, two hops
    assert plan.routes["s1"]["10.0.0.4"] == ["s1-eth3"]   # via s5, two hops


def test_dumbbell_routes_cross_the_bottleneck():
    plan = plan_of(DumbbellTopo(n=2))
    assert plan.routes["s1"]["10.0.0.3"] == ["s1-eth3"]
    assert plan.routes["s2"]["10.0.0.1"] == ["s2-eth3"]
    assert peer_of(plan, "s1", "s1-eth3") == "s2"


# --- link ranges ------------------------------------------------------------------------------------

def test_link_ranges_take_their_bounds():
    low = link_params({}, {"bw": "1kbit", "delay": "1s", "drop": ":".join(map(str, range(1, 1001)))})
    assert (low.bw_bps, low.delay_ns, len(low.drop)) == (1000, 10**9, 1000)
    assert link_params({}, {"bw": "100gbit", "drop": str(10**12)}).bw_bps == 100 * 10**9


@pytest.mark.parametrize("options, message", [
    ({"bw": "999bit"}, "bad bw '999bit': a link runs at 1 kbit/s to 800 Gbit/s"),
    ({"bw": "801gbit"}, "bad bw '801gbit': a link runs at 1 kbit/s to 800 Gbit/s"),
    ({"delay": "1000001us"}, "bad delay '1000001us': at most 1 s"),
    ({"drop": ":".join(map(str, range(1, 1002)))},
     "bad drop '1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:1'... (3897 characters): at most 1000 frame numbers"),
    ({"drop": str(10**12 + 1)}, "bad drop '1000000000001': drop frame '1000000000001': must be 1 to 1000000000000"),
    ({"drop": 10**400}, "bad drop 100000000000... (401 digits): drop frame 100000000000... (401 digits): must be"),
    ({"loss": 10**400}, "bad loss 100000000000... (401 digits): expected a probability"),
])
def test_link_values_out_of_range(options, message):
    with pytest.raises(FabricError) as err:
        link_params({}, options)
    assert str(err.value).startswith(message)


def test_routes_around_a_link_that_went_down():
    """leafspine,2,2: s1 and s2 are leaves, s3 and s4 spines; without s1-s3 everything crosses s4."""
    plan = make_plan(LeafSpineTopo(leaves=2, spines=2, hosts=1), "run")
    graph = switch_graph(plan)
    assert routes_over(graph) == plan.routes
    to_s3, back = graph.link("s1", "s3")
    to_s4 = graph.link("s1", "s4")[0]
    h2 = plan.nodes["h2"].ip
    assert plan.routes["s1"][h2] == [to_s3, to_s4]  # ECMP over both spines
    without = routes_over(graph.without({frozenset(("s1", "s3"))}))
    assert without["s1"][h2] == [to_s4]
    assert without["s3"][plan.nodes["h1"].ip] == [graph.link("s3", "s2")[0]]  # s3 reaches h1 through s2, s4
    assert graph.link("s1", "s2") is None and back.startswith("s3-")
    with pytest.raises(FabricError, match="switch s1 has no path to host h2"):
        routes_over(graph.without({frozenset(("s1", "s3")), frozenset(("s1", "s4"))}))
