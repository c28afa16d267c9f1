"""Which process serves which node (fabric/placement.py), and pingall's sample of host pairs (no root)."""

import pytest

from emulator.errors import FabricError
from emulator.fabric.node import Node
from emulator.fabric.placement import place, weight
from emulator.fabric.plan import make_plan
from emulator.fabric.reachability import _pairs
from topologies import FatTreeTopo, StarTopo


def test_star8_on_two_processes_puts_the_switch_alone():
    groups = place(make_plan(StarTopo(n=8), "pl1"), 2)
    assert [[n.name for n in g] for g in groups] == [["s1"], [f"h{i}" for i in range(1, 9)]]


def test_every_node_is_served_once_and_loads_stay_close():
    plan = make_plan(FatTreeTopo(k=8), "pl2")
    for workers in (1, 2, 3, 7):
        groups = place(plan, workers)
        names = [n.name for g in groups for n in g]
        assert sorted(names) == sorted(plan.nodes) and len(groups) == workers
        loads = [sum(map(weight, g)) for g in groups]
        assert max(loads) - min(loads) <= max(map(weight, plan.nodes.values()))


def test_fewer_nodes_than_processes_and_bad_counts():
    plan = make_plan(StarTopo(n=2), "pl3")
    assert len(place(plan, 8)) == 3
    for bad in (0, 257):
        with pytest.raises(FabricError, match="workers"):
            place(plan, bad)


def _hosts(n: int) -> list[Node]:
    return [Node(f"h{i}", "host", f"r-h{i}", f"10.0.0.{i}") for i in range(1, n + 1)]


def test_a_sample_of_pairs_is_distinct_never_a_host_to_itself_and_repeatable():
    hosts = _hosts(40)
    pairs = _pairs(hosts, 300, seed=5)
    flat = [(src.name, dst.name) for src, dsts in pairs.items() for dst in dsts]
    assert len(flat) == len(set(flat)) == 300
    assert all(a != b for a, b in flat)
    assert pairs == _pairs(hosts, 300, seed=5) and pairs != _pairs(hosts, 300, seed=6)


def test_a_sample_as_large_as_all_pairs_is_all_pairs():
    hosts = _hosts(5)
    for sample in (None, 20, 1000):
        assert sum(map(len, _pairs(hosts, sample, 1).values())) == 20
