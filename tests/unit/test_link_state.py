"""Links going down in a running fabric (emulator.fabric.link_state): what is refused before anything is touched,
the switch graph read back from its file as hostile input, and (on a fake kernel and fake agents) what a failed
change undoes and what concurrent changes leave."""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from types import SimpleNamespace

import pytest

from emulator.agents.config import RouteTable, read
from emulator.errors import FabricError
from emulator.fabric import link_state, runstate
from emulator.fabric.link_state import GRAPH_FILE, links_down, load_graph, save_graph, set_link
from emulator.fabric.plan import make_plan, routes_over, switch_graph
from topologies import LeafSpineTopo, StarTopo


@pytest.fixture(autouse=True)
def run_root(tmp_path, monkeypatch):
    monkeypatch.setattr(runstate, "RUN_ROOT", str(tmp_path))
    return tmp_path


def run_of(tmp_path, topo, fabric="lossless", run="fe0001") -> SimpleNamespace:
    """A run's directory with its switch graph, as the builder leaves it (no namespaces, no agents)."""
    plan = make_plan(topo, run)
    directory = tmp_path / run
    directory.mkdir()
    save_graph(str(directory), switch_graph(plan))
    return SimpleNamespace(run=run, fabric=fabric, directory=str(directory),
                           nodes={n.name: {"kind": n.kind, "netns": n.netns} for n in plan.nodes.values()})


def test_the_graph_survives_its_file(tmp_path):
    plan = make_plan(LeafSpineTopo(leaves=2, spines=2, hosts=2), "fe0001")
    save_graph(str(tmp_path), switch_graph(plan))
    assert load_graph(str(tmp_path)) == switch_graph(plan)


@pytest.mark.parametrize("content", ['{"links": [], "hosts": []}', '{"links": {"s1": [["eth", 3]]}, "hosts": []}',
                                     '{"links": {}, "hosts": [["h1", "10.0.0.1"]]}', "[", '"x"'])
def test_a_bad_graph_file_is_one_line(tmp_path, content):
    (tmp_path / GRAPH_FILE).write_text(content)
    with pytest.raises(FabricError, match=f"{GRAPH_FILE}: not") as err:
        load_graph(str(tmp_path))
    assert "\n" not in str(err.value)


def test_refusals_touch_nothing(tmp_path):
    leafspine = run_of(tmp_path, LeafSpineTopo(leaves=2, spines=2, hosts=1))
    with pytest.raises(FabricError, match="'s1' and 's2' are no two linked switches of run fe0001"):
        set_link(leafspine, "s1", "s2", up=False)
    with pytest.raises(FabricError, match="'s1' and 'h1' are no two linked switches"):
        set_link(leafspine, "s1", "h1", up=False)
    assert set_link(leafspine, "s1", "s3", up=True) == "link s1-s3 is up already"
    ib = run_of(tmp_path, LeafSpineTopo(leaves=2, spines=2, hosts=1), fabric="ib", run="fe0002")
    (tmp_path / "fe0002" / "links_down.json").write_text(json.dumps([["s1", "s3"]]))
    with pytest.raises(FabricError, match="link s2-s4 stays up: the ib fabric's subnet manager was swept for one "
                                          "link down at a time, and s1-s3 is down"):
        set_link(ib, "s2", "s4", up=False)
    (tmp_path / "fe0001" / "links_down.json").write_text(json.dumps([["s1", "s4"]]))
    with pytest.raises(FabricError, match="link s1-s3 stays up: without it the topology is not connected: switch s1"):
        set_link(leafspine, "s1", "s3", up=False)


class FakeFabric:
    """The kernel's veth ends and the switch agents of a run, in memory: a cable end is up or down; an agent takes
    its routes file when asked (as the switch agent's ``routes`` does), unless it is ``dead``."""

    def __init__(self, monkeypatch, state: SimpleNamespace, pause_s: float = 0.0) -> None:
        self.state, self.pause_s = state, pause_s
        graph = load_graph(state.directory)
        self.kernel = {(state.nodes[s]["netns"], ifname): True for s, ports in graph.links.items() for ifname, _ in ports}
        self.held: dict[str, dict] = {}
        self.dead: set[str] = set()
        self.stuck: set[tuple[str, str]] = set()  # veth ends whose namespace is gone
        monkeypatch.setattr(link_state, "set_link_up", self.set_link_up)
        monkeypatch.setattr(link_state, "query_agent", self.query_agent)

    def set_link_up(self, netns: str, ifname: str, up: bool) -> None:
        if (netns, ifname) in self.stuck:
            raise FileNotFoundError(2, "No such file or directory")
        time.sleep(self.pause_s)
        self.kernel[(netns, ifname)] = up

    def query_agent(self, path: str, request: str) -> dict:
        switch = os.path.basename(path).removesuffix(".sock")
        assert request == "routes"
        if switch in self.dead:
            raise ConnectionRefusedError(111, "Connection refused")
        time.sleep(self.pause_s)
        self.held[switch] = read(os.path.join(self.state.directory, f"{switch}.routes.json"), RouteTable).routes
        return {"routes": len(self.held[switch])}

    def cables_down(self) -> set[frozenset[str]]:
        """The links whose two ends are both down; fails on a cable with one end up and one down."""
        graph, nodes = load_graph(self.state.directory), self.state.nodes
        down = set()
        for switch, ports in graph.links.items():
            for ifname, peer in ports:
                ends = (self.kernel[(nodes[switch]["netns"], ifname)],
                        self.kernel[(nodes[peer]["netns"], graph.link(peer, switch)[0])])
                assert ends[0] == ends[1], f"{switch}-{peer}: one end up, the other down"
                if not ends[0]:
                    down.add(frozenset((switch, peer)))
        return down

    def expected_routes(self, down: set[frozenset[str]]) -> dict[str, dict]:
        return {s: {ip: tuple(i) for ip, i in t.items()}
                for s, t in routes_over(load_graph(self.state.directory).without(down)).items()}


def test_on_ib_every_agent_takes_the_sweep_without_the_link_and_the_ends_lose_their_queues(tmp_path, monkeypatch):
    state = run_of(tmp_path, LeafSpineTopo(leaves=2, spines=2, hosts=1), fabric="ib")
    fabric = FakeFabric(monkeypatch, state)
    asked: list[tuple[str, str]] = []
    routes = fabric.query_agent

    def query_agent(path: str, request: str) -> dict:
        switch = os.path.basename(path).removesuffix(".sock")
        if request.startswith("ib-tables"):
            asked.append((switch, request))
            return {"ib_tables": request.split()[1], "lost": 0}
        return routes(path, request)

    monkeypatch.setattr(link_state, "query_agent", query_agent)
    assert set_link(state, "s3", "s1", up=False).startswith("link s3-s1 down")
    ends = load_graph(state.directory).link("s1", "s3")
    assert sorted(asked) == [("s1", f"ib-tables s1-s3 {ends[0]}"), ("s2", "ib-tables s1-s3"),
                             ("s3", f"ib-tables s1-s3 {ends[1]}"), ("s4", "ib-tables s1-s3")]
    asked.clear()
    set_link(state, "s1", "s3", up=True)
    assert sorted(asked) == [(s, "ib-tables -") for s in ("s1", "s2", "s3", "s4")]


def test_an_agent_that_does_not_answer_undoes_the_change_in_one_line(tmp_path, monkeypatch):
    """Issue 23: with a switch's control socket gone, `link` printed a traceback after pulling the cable, wrote no
    record, and the cable stayed down for good."""
    run = run_of(tmp_path, LeafSpineTopo(leaves=2, spines=2, hosts=1))
    fabric = FakeFabric(monkeypatch, run)
    fabric.dead.add("s2")
    with pytest.raises(FabricError) as err:
        set_link(run, "s1", "s3", up=False)
    assert str(err.value) == ("link s1-s3 down failed: s2's agent does not answer ([Errno 111] Connection refused); "
                              "the cable and the routes were put back")
    assert fabric.cables_down() == set() == links_down(run.directory)
    assert fabric.held == {s: t for s, t in fabric.expected_routes(set()).items() if s != "s2"}
    for switch, table in fabric.expected_routes(set()).items():  # the dead one's file too, for when it answers
        assert read(os.path.join(run.directory, f"{switch}.routes.json"), RouteTable).routes == table


def test_a_cable_that_cannot_be_put_back_is_recorded_as_it_is(tmp_path, monkeypatch):
    run = run_of(tmp_path, LeafSpineTopo(leaves=2, spines=2, hosts=1))
    fabric = FakeFabric(monkeypatch, run)
    fabric.dead.add("s4")
    end = (run.nodes["s1"]["netns"], load_graph(run.directory).link("s1", "s3")[0])
    original = fabric.set_link_up

    def gone_after_the_change(netns, ifname, up):
        original(netns, ifname, up)
        if (netns, ifname) == end:
            fabric.stuck.add(end)  # the namespace went (the run is being taken down by force)

    monkeypatch.setattr(link_state, "set_link_up", gone_after_the_change)
    with pytest.raises(FabricError) as err:
        set_link(run, "s1", "s3", up=False)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("link s1-s3 down failed: s4's agent does not answer")
    assert str(err.value).endswith(f"the cable could not be put back ({end[1]} in {end[0]}: [Errno 2] No such file or "
                                   "directory): links_down.json records it down; fabric-emu down --run fe0001 "
                                   "removes the run")
    assert fabric.cables_down() == {frozenset(("s1", "s3"))} == links_down(run.directory)


def test_a_failed_end_puts_the_other_back_and_changes_nothing(tmp_path, monkeypatch):
    run = run_of(tmp_path, LeafSpineTopo(leaves=2, spines=2, hosts=1))
    fabric = FakeFabric(monkeypatch, run)
    far = (run.nodes["s3"]["netns"], load_graph(run.directory).link("s3", "s1")[0])
    fabric.stuck.add(far)
    with pytest.raises(FabricError, match=f"link s1-s3 down failed, nothing changed: {far[1]} in {far[0]}: "):
        set_link(run, "s1", "s3", up=False)
    assert all(fabric.kernel.values()) and links_down(run.directory) == set() and fabric.held == {}


def test_concurrent_changes_leave_cables_record_and_routes_in_agreement(tmp_path, monkeypatch):
    """Issue 23: `link s1 s3 down & link s1 s4 down` pulled both cables and recorded one; an agent read its
    routes file half-written.  Twenty changes at once (threads here, processes in the integration test), each
    slowed at every step so that they would interleave, end as one after the other would."""
    run = run_of(tmp_path, LeafSpineTopo(leaves=2, spines=2, hosts=1))
    fabric = FakeFabric(monkeypatch, run, pause_s=0.002)
    rng = random.Random(23)
    changes = [(*rng.choice([("s1", "s3"), ("s1", "s4"), ("s2", "s3"), ("s2", "s4")]), rng.random() < 0.5)
               for _ in range(20)]
    outcomes: list[str] = []

    def change(a: str, b: str, up: bool) -> None:
        try:
            outcomes.append(set_link(run, a, b, up))
        except FabricError as err:
            outcomes.append(str(err))

    threads = [threading.Thread(target=change, args=c) for c in changes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(outcomes) == 20 and all(re.fullmatch(
        r"link s\d-s\d (down|up): routes of 4 switches recomputed|link s\d-s\d is (up|down) already"
        r"|link s\d-s\d stays up: without it the topology is not connected: .*", o) for o in outcomes), outcomes
    down = links_down(run.directory)
    assert fabric.cables_down() == down
    assert fabric.held == fabric.expected_routes(down)
