"""The routes kept per edge switch (plan.routes_over) against the routes computed host by host.

``reference_routes`` is the host-by-host planner that routes_over replaced, kept here as the straightforward
statement of what a route is: for every host, a breadth-first search from its edge switch, and on every other
switch the ports whose neighbour is one hop closer, in port order.  The compact tables must read exactly as its
dicts do (same keys in the same order, same port lists) on the built-in topologies and on random switch graphs
with parallel cables, self-cables, shared neighbours, links taken down and disconnected parts; a disconnected
graph is refused with the same line.
"""

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.errors import FabricError
from emulator.fabric.plan import SwitchGraph, check_connected, make_plan, routes_over, switch_graph
from emulator.fabric.topospec import build_topo


def reference_routes(graph: SwitchGraph) -> dict[str, dict[str, list[str]]]:
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


def outcome(planner, graph: SwitchGraph) -> object:
    """What a planner gives: every switch's routes as (ip, ports) pairs in their order, or its refusal."""
    try:
        return [(switch, list(table.items())) for switch, table in planner(graph).items()]
    except FabricError as err:
        return f"refused: {err}"


SPECS = ["star,1", "star,5", "dumbbell,3", "leafspine", "leafspine,4,3,hosts=2", "leafspine,1,1,hosts=3",
         "fattree,2", "fattree,4", "fattree,6", "fattree,8", "ring,3", "ring,5,hosts=2", "ring,8"]


@pytest.mark.parametrize("spec", SPECS)
def test_the_built_in_topologies_route_as_host_by_host(spec):
    graph = switch_graph(make_plan(build_topo(spec), "t1", routes=False))
    assert outcome(routes_over, graph) == outcome(reference_routes, graph)


def test_the_tables_read_as_dicts():
    """Each switch's table equals the reference dict, both ways round, and refuses an unknown address."""
    graph = switch_graph(make_plan(build_topo("fattree,4"), "t1", routes=False))
    new, old = routes_over(graph), reference_routes(graph)
    assert new == old and old == new
    table = new["s1"]
    assert len(table) == 16 and "10.0.0.16" in table and "10.0.0.17" not in table
    with pytest.raises(KeyError):
        table["10.0.0.17"]  # pylint: disable=pointless-statement
    assert table != {**old["s1"], "10.0.0.1": ["s1-eth2"]}


@st.composite
def switch_graphs(draw) -> SwitchGraph:
    """A few switches; cables between any two (parallel ones and a switch to itself included); hosts on any
    switch.  With few switches, edge switches often share their neighbours, which routes_over searches once."""
    switches = [f"s{i}" for i in range(1, draw(st.integers(1, 7)) + 1)]
    ports: dict[str, list[tuple[str, str]]] = {s: [] for s in switches}
    pairs = st.tuples(st.sampled_from(switches), st.sampled_from(switches))
    for a, b in draw(st.lists(pairs, max_size=14)):
        for node, peer in ((a, b), (b, a)) if a != b else ((a, a), (a, a)):
            ports[node].append((f"{node}-eth{len(ports[node]) + 1}", peer))
    hosts = []
    for number, edge in enumerate(draw(st.lists(st.sampled_from(switches), min_size=1, max_size=12)), start=1):
        ports[edge].append((f"{edge}-eth{len(ports[edge]) + 1}", f"h{number}"))
        hosts.append((f"h{number}", f"10.0.0.{number}", edge, ports[edge][-1][0]))
    links = {s: [(ifname, peer) for ifname, peer in p if not peer.startswith("h")] for s, p in ports.items()}
    return SwitchGraph(links, hosts)


@given(switch_graphs(), st.data())
def test_random_graphs_route_as_host_by_host(graph, data):
    pairs = sorted({frozenset((s, peer)) for s, ports in graph.links.items() for _i, peer in ports}, key=sorted)
    down = data.draw(st.sets(st.sampled_from(pairs)) if pairs else st.just(set()))
    for each in (graph, graph.without(down)):
        expected = outcome(reference_routes, each)
        assert outcome(routes_over, each) == expected
        assert outcome(lambda g: check_connected(g) or {}, each) == (
            expected if isinstance(expected, str) else [])


def test_edges_with_the_same_neighbours_share_one_search():
    """leafspine,4,2: the four leaves have the same two spines; each leaf's ports towards the others are its
    two uplinks, and the spines' ports towards each leaf the one cable to it (what the shared search patches)."""
    plan = make_plan(build_topo("leafspine,4,2,hosts=1"), "t1")
    for leaf, host in (("s1", "10.0.0.1"), ("s3", "10.0.0.3")):
        for other in ("s1", "s2", "s3", "s4"):
            expected = [f"{leaf}-eth1"] if other == leaf else [f"{other}-eth2", f"{other}-eth3"]
            assert plan.routes[other][host] == expected
        for spine in ("s5", "s6"):
            assert plan.routes[spine][host] == [f"{spine}-eth{int(leaf[1:])}"]
