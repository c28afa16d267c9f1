"""Which process serves which node and on which CPU (fabric/placement.py, kernel/rps.py's masks), and
pingall's sample of host pairs (no root)."""

import pytest

from emulator.errors import FabricError
from emulator.fabric.node import Node
from emulator.agents.config import SwitchConfig
from emulator.fabric.agent_config import agent_configs, switch_mmu
from emulator.fabric.placement import node_cpus, place, process_cpus, weight
from emulator.fabric.plan import make_plan
from emulator.fabric.reachability import _pairs
from emulator.kernel.rps import rps_mask
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


def test_processes_take_the_allowed_cpus_in_turn():
    assert process_cpus(5, {3, 1}) == [1, 3, 1, 3, 1]
    assert process_cpus(1, {6}) == [6]


def test_each_interface_receives_on_the_cpu_of_the_process_that_sends_into_it():
    plan = make_plan(FatTreeTopo(k=4), "pl4")
    groups = place(plan, 3)
    cpus = node_cpus(groups, process_cpus(len(groups), {0, 1}))
    assert len(set(cpus.values())) == 2 and set(cpus) == set(plan.nodes)
    mmu = {s.name: switch_mmu(s, "lossless", {}) for s in plan.switches()}
    configs = agent_configs(plan, 1, mmu, None, cpus=cpus)
    for node in plan.nodes.values():
        config = configs[node.name]
        if isinstance(config, SwitchConfig):
            assert [p.rx_cpu for p in config.ports] == [cpus[p.peer_node] for p in node.ports]
        else:
            assert config.rx_cpu == cpus[node.ports[0].peer_node]
    unpinned = agent_configs(plan, 1, mmu, None)
    assert {p.rx_cpu for c in unpinned.values() if isinstance(c, SwitchConfig) for p in c.ports} == {None}


def test_rps_masks():
    assert rps_mask("s1-eth1", 0, whole_link=False, rx_cpu=5, cpus=8) == "20"  # pinned: that CPU alone
    assert rps_mask("s1-eth1", 0, whole_link=True, rx_cpu=0, cpus=8) == "1"
    assert rps_mask("s1-eth1", 0, whole_link=False, rx_cpu=None, cpus=3) == "7"  # flows spread over all
    whole = {rps_mask(f"s1-eth{i}", i, whole_link=True, rx_cpu=None, cpus=2) for i in range(8)}
    assert whole == {"1", "2"}  # IB without pinning: one CPU per link, links spread
    assert rps_mask("s1-eth1", 0, whole_link=False, rx_cpu=32, cpus=64) == "1,00000000"  # 32-bit groups
    assert rps_mask("s1-eth1", 0, whole_link=False, rx_cpu=None, cpus=40) == "ff,ffffffff"


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
