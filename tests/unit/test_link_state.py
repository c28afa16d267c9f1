"""Links going down in a running fabric (emulator.fabric.link_state): what is refused before anything is touched,
and the switch graph read back from its file as hostile input."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from emulator.errors import FabricError
from emulator.fabric.link_state import GRAPH_FILE, load_graph, save_graph, set_link
from emulator.fabric.plan import make_plan, switch_graph
from topologies import LeafSpineTopo, StarTopo


def run_of(tmp_path, topo, fabric="lossless") -> SimpleNamespace:
    plan = make_plan(topo, "fe0001")
    save_graph(str(tmp_path), switch_graph(plan))
    return SimpleNamespace(run="fe0001", fabric=fabric, directory=str(tmp_path),
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
    (tmp_path / "ib").mkdir()
    ib = run_of(tmp_path / "ib", StarTopo(n=2), fabric="ib")
    with pytest.raises(FabricError, match="the ib fabric routes by its subnet manager"):
        set_link(ib, "s1", "s2", up=False)
    (tmp_path / "links_down.json").write_text(json.dumps([["s1", "s4"]]))
    with pytest.raises(FabricError, match="link s1-s3 stays up: without it the topology is not connected: switch s1"):
        set_link(leafspine, "s1", "s3", up=False)
