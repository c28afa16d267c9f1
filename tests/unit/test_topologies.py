"""Built-in topologies: counts, shape, naming and argument checks."""

import time
from collections import Counter, deque

import pytest
from mininet.topo import Topo

from emulator import bounds
from topologies import (DumbbellTopo, FatTreeTopo, LeafSpineTopo, RingTopo,
                        StarTopo, topos)


def degrees(topo: Topo) -> Counter:
    return Counter(node for link in topo.links() for node in link)


def neighbours(topo: Topo, node: str) -> set[str]:
    return {b if a == node else a for a, b in topo.links() if node in (a, b)}


def is_connected(topo: Topo) -> bool:
    nodes = topo.nodes()
    seen, todo = {nodes[0]}, deque([nodes[0]])
    while todo:
        for nxt in neighbours(topo, todo.popleft()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen == set(nodes)


def role(topo: Topo, switch: str) -> str:
    return topo.nodeInfo(switch)["role"]


def switch_of(topo: Topo, host: str) -> str:
    (switch,) = neighbours(topo, host)
    return switch


CASES = [
    # (class, args, hosts, switches, links)
    (StarTopo, {}, 4, 1, 4),
    (StarTopo, {"n": 1}, 1, 1, 1),
    (StarTopo, {"n": 16}, 16, 1, 16),
    (DumbbellTopo, {}, 4, 2, 5),
    (DumbbellTopo, {"n": 5}, 10, 2, 11),
    (LeafSpineTopo, {}, 4, 4, 8),
    (LeafSpineTopo, {"leaves": 4, "spines": 2, "hosts": 3}, 12, 6, 20),
    (LeafSpineTopo, {"leaves": 1, "spines": 1, "hosts": 1}, 1, 2, 2),
    (FatTreeTopo, {"k": 2}, 2, 5, 6),
    (FatTreeTopo, {}, 16, 20, 48),
    (FatTreeTopo, {"k": 6}, 54, 45, 162),
    (FatTreeTopo, {"k": 8}, 128, 80, 384),
    (RingTopo, {}, 4, 4, 8),
    (RingTopo, {"n": 3}, 3, 3, 6),
    (RingTopo, {"n": 5, "hosts": 2}, 10, 5, 15),
]


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0].__name__}{c[1]}")
def case(request):
    cls, args, hosts, switches, links = request.param
    return cls(**args), hosts, switches, links


def test_counts(case):
    topo, hosts, switches, links = case
    assert len(topo.hosts()) == hosts
    assert len(topo.switches()) == switches
    assert len(topo.links()) == links


def test_names_are_mininet_style_and_dense(case):
    topo, hosts, switches, _ = case
    assert topo.hosts() == [f"h{i}" for i in range(1, hosts + 1)]
    assert topo.switches() == [f"s{i}" for i in range(1, switches + 1)]


def test_every_host_has_one_link_to_a_switch(case):
    topo = case[0]
    deg = degrees(topo)
    for host in topo.hosts():
        assert deg[host] == 1, host
        assert topo.isSwitch(switch_of(topo, host))


def test_connected_and_no_parallel_links(case):
    topo = case[0]
    assert is_connected(topo)
    pairs = [frozenset(link) for link in topo.links()]
    assert len(pairs) == len(set(pairs))
    assert all(len(pair) == 2 for pair in pairs)


def test_every_switch_has_a_role(case):
    topo = case[0]
    for switch in topo.switches():
        assert role(topo, switch) in {"edge", "leaf", "spine",
                                      "aggregation", "core"}


def test_host_ports_come_first_on_every_switch(case):
    topo = case[0]
    for switch in topo.switches():
        ports = topo.ports[switch]
        assert sorted(ports) == list(range(1, len(ports) + 1))
        kinds = [topo.isSwitch(ports[p][0]) for p in sorted(ports)]
        assert kinds == sorted(kinds), switch


def test_consecutive_hosts_share_a_switch(case):
    topo = case[0]
    switches = [switch_of(topo, h) for h in topo.hosts()]
    # each switch's hosts form one contiguous run
    runs = [s for i, s in enumerate(switches)
            if i == 0 or s != switches[i - 1]]
    assert len(runs) == len(set(runs))


@pytest.mark.parametrize("cls, args", [case[:2] for case in CASES])
def test_deterministic(cls, args):
    first, second = cls(**args), cls(**args)
    assert first.links(withInfo=True) == second.links(withInfo=True)
    assert first.ports == second.ports
    assert [first.nodeInfo(n) for n in first.nodes()] == \
        [second.nodeInfo(n) for n in second.nodes()]


def test_topos_dict():
    assert topos == {"star": StarTopo, "dumbbell": DumbbellTopo,
                     "leafspine": LeafSpineTopo, "fattree": FatTreeTopo,
                     "ring": RingTopo}


def test_star():
    topo = StarTopo(n=3)
    assert neighbours(topo, "s1") == {"h1", "h2", "h3"}


def test_dumbbell_sides_and_bottleneck():
    topo = DumbbellTopo(n=3)
    assert neighbours(topo, "s1") == {"h1", "h2", "h3", "s2"}
    assert neighbours(topo, "s2") == {"h4", "h5", "h6", "s1"}
    assert topo.ports["s1"][4] == ("s2", 4)


def test_leafspine_layout():
    topo = LeafSpineTopo(leaves=3, spines=2, hosts=2)
    assert [role(topo, s) for s in topo.switches()] == \
        ["leaf"] * 3 + ["spine"] * 2
    assert [switch_of(topo, h) for h in topo.hosts()] == \
        ["s1", "s1", "s2", "s2", "s3", "s3"]
    for leaf in ("s1", "s2", "s3"):
        assert neighbours(topo, leaf) - set(topo.hosts()) == {"s4", "s5"}
    # spine port i goes to leaf i; leaf port hosts+i to spine i
    assert [topo.ports["s5"][p][0] for p in (1, 2, 3)] == ["s1", "s2", "s3"]
    assert [topo.ports["s2"][p][0] for p in (3, 4)] == ["s4", "s5"]


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fattree_every_switch_has_k_ports(k):
    topo = FatTreeTopo(k=k)
    deg = degrees(topo)
    assert {deg[s] for s in topo.switches()} == {k}


def test_fattree_numbering_and_wiring():
    k, half = 4, 2
    topo = FatTreeTopo(k=k)
    roles = [role(topo, s) for s in topo.switches()]
    assert roles == ["edge"] * 8 + ["aggregation"] * 8 + ["core"] * 4
    pods = [topo.nodeInfo(s).get("pod") for s in topo.switches()]
    assert pods == [0, 0, 1, 1, 2, 2, 3, 3] * 2 + [None] * 4
    assert [switch_of(topo, h) for h in topo.hosts()] == \
        [f"s{1 + i // half}" for i in range(16)]
    # pod 1: edges s3, s4 and aggregations s11, s12 form a full bipartite
    for edge in ("s3", "s4"):
        assert neighbours(topo, edge) - set(topo.hosts()) == {"s11", "s12"}
    # i-th aggregation of every pod reaches core group i
    for pod in range(k):
        first, second = f"s{9 + 2 * pod}", f"s{10 + 2 * pod}"
        assert neighbours(topo, first) >= {"s17", "s18"}
        assert neighbours(topo, second) >= {"s19", "s20"}
    # core port p+1 goes to pod p
    assert [topo.ports["s20"][p][0] for p in (1, 2, 3, 4)] == \
        ["s10", "s12", "s14", "s16"]


def test_fattree_core_reaches_every_pod_once():
    """Every core switch reaches every pod exactly once."""
    topo = FatTreeTopo(k=6)
    for core in [s for s in topo.switches() if role(topo, s) == "core"]:
        pods = [topo.nodeInfo(a)["pod"] for a in neighbours(topo, core)]
        assert sorted(pods) == list(range(6))


def test_ring_cycle_and_ports():
    topo = RingTopo(n=5, hosts=2)
    for i in range(1, 6):
        nxt, prev = f"s{i % 5 + 1}", f"s{(i - 2) % 5 + 1}"
        assert neighbours(topo, f"s{i}") - set(topo.hosts()) == {nxt, prev}
        assert topo.ports[f"s{i}"][3][0] == nxt
        assert topo.ports[f"s{i}"][4][0] == prev
    assert [switch_of(topo, h) for h in ("h1", "h2", "h3", "h10")] == \
        ["s1", "s1", "s2", "s5"]


@pytest.mark.parametrize("cls, args, message", [
    (StarTopo, {"n": 0}, "n must be at least 1 (got 0)"),
    (StarTopo, {"n": 2.5}, "n must be an integer (got 2.5)"),
    (StarTopo, {"n": "four"}, "n must be an integer (got 'four')"),
    (StarTopo, {"n": True}, "n must be an integer (got True)"),
    (DumbbellTopo, {"n": -1}, "n must be at least 1 (got -1)"),
    (LeafSpineTopo, {"leaves": 0}, "leaves must be at least 1 (got 0)"),
    (LeafSpineTopo, {"spines": 0}, "spines must be at least 1 (got 0)"),
    (LeafSpineTopo, {"hosts": 0}, "hosts must be at least 1 (got 0)"),
    (FatTreeTopo, {"k": 3}, "k must be even (got 3)"),
    (FatTreeTopo, {"k": 0}, "k must be at least 2 (got 0)"),
    (FatTreeTopo, {"k": 4.0}, "k must be an integer (got 4.0)"),
    (RingTopo, {"n": 2}, "n must be at least 3 (got 2)"),
    (RingTopo, {"hosts": 0}, "hosts must be at least 1 (got 0)"),
])
def test_invalid_arguments(cls, args, message):
    with pytest.raises(ValueError) as err:
        cls(**args)
    assert str(err.value) == message


# --- the widest node cap (any backend's): counted before any node is added ---------------------------

@pytest.mark.parametrize("cls, args", [
    (StarTopo, {"n": 5}), (DumbbellTopo, {"n": 3}), (LeafSpineTopo, {"leaves": 3, "spines": 2, "hosts": 4}),
    (FatTreeTopo, {"k": 4}), (FatTreeTopo, {"k": 6}), (RingTopo, {"n": 4, "hosts": 3}),
])
def test_the_cap_counts_exactly_the_nodes_built(monkeypatch, cls, args):
    """The count each build checks is the count it builds: with the cap at that count it
    builds, one below it refuses."""
    nodes = len(cls(**args).nodes())
    monkeypatch.setattr(bounds, "MOST_NODES", nodes)
    assert len(cls(**args).nodes()) == nodes
    monkeypatch.setattr(bounds, "MOST_NODES", nodes - 1)
    with pytest.raises(ValueError, match=fr"^{nodes} nodes .*; at most {nodes - 1} on any backend \(the emulator runs 2048\)$"):
        cls(**args)


WIDEST = "at most 16384 on any backend (the emulator runs 2048)"


@pytest.mark.parametrize("cls, args, message", [
    (StarTopo, {"n": 100_000}, f"100001 nodes (100000 hosts, 1 switches); {WIDEST}"),
    (FatTreeTopo, {"k": 40}, f"18000 nodes (16000 hosts, 2000 switches); {WIDEST}"),
    (RingTopo, {"n": 10**400}, "200000000000... (401 digits) nodes (100000000000... (401 digits) hosts, "
                               f"100000000000... (401 digits) switches); {WIDEST}"),
])
def test_absurd_sizes_are_refused_at_once(cls, args, message):
    began = time.monotonic()
    with pytest.raises(ValueError) as err:
        cls(**args)
    assert str(err.value) == message
    assert time.monotonic() - began < 0.05
