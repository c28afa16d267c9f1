"""Run, node and interface names: what is accepted, and where they are checked."""

import pytest
from mininet.topo import Topo

from emulator.fabric import names
from emulator.errors import FabricError
from emulator.fabric.plan import make_plan


@pytest.mark.parametrize("name", ["demo1", "a", "abcdefghijkl", "x0", "fe3a7c"])
def test_run_names_accepted(name):
    assert names.check_run_name(name) == name


@pytest.mark.parametrize("name", ["Demo", "1abc", "a-b", "abcdefghijklm", "", "a_b", "a b", "demo1\n", "ü", "..",
                                  "../x", "/run", ".hidden", 7, None, ["a"]])
def test_run_names_rejected(name):
    with pytest.raises(FabricError, match="bad run name") as err:
        names.check_run_name(name)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["h1", "s1", "leaf-1", "sw34567890", "a"])
def test_node_names_accepted(name):
    assert names.check_node_name(name) == name


@pytest.mark.parametrize("name", ["H1", "1h", "-h", "h_1", "sw345678901", "a/b", "..", "", "h1\x1b[2J", 3])
def test_node_names_rejected(name):
    with pytest.raises(FabricError, match="bad node name") as err:
        names.check_node_name(name)
    assert "\x1b" not in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["h1-eth0", "s1-eth255", "sw34567890-eth1", "leaf-1-eth3"])
def test_interface_names_accepted(name):
    assert names.check_ifname(name) == name


@pytest.mark.parametrize("name", ["sw345678901-eth1", "h1", "h1-eth", "h1-eth1/../x", "../h1-eth0", "H1-eth0",
                                  "h1-eth1234", 5])
def test_interface_names_rejected(name):
    with pytest.raises(FabricError, match="bad interface name"):
        names.check_ifname(name)


def test_the_longest_names_fit_the_kernel_limits():
    node = "n" * 10
    assert names.check_node_name(node) and len(f"{node}-eth0") == names.IFNAMSIZ
    assert len(names.namespace_name("r" * 12, node)) == 23


@pytest.mark.parametrize("namespace, owned", [
    ("demo1-h1", True), ("demo1-probe", True), ("demo1--probe", True), ("demo1-leaf-1", True),
    ("demo1--h1", False), ("other--probe", False), ("demo1h1", False), ("demo12-h1", False), ("demo1-", False), ("demo1-../x", False), ("demo1-H1", False),
    ("other-h1", False), ("demo1-h1/x", False), ("demo1-n2345678901", False),
])
def test_a_run_owns_only_namespaces_with_its_prefix(namespace, owned):
    assert names.owns_namespace("demo1", namespace) is owned


def _topo(*nodes):
    topo = Topo()
    switch = topo.addSwitch("s1")
    for name in nodes:
        topo.addHost(name)
        topo.addLink(name, switch)
    return topo


@pytest.mark.parametrize("bad", ["H1", "host_1", "h.1"])
def test_the_plan_refuses_bad_node_names(bad):
    with pytest.raises(FabricError, match="bad node name"):
        make_plan(_topo("h1", bad), "demo1")


def test_the_plan_accepts_hyphenated_node_names():
    plan = make_plan(_topo("h1", "rack-2"), "demo1")
    assert plan.nodes["rack-2"].netns == "demo1-rack-2"
    assert plan.nodes["rack-2"].ports[0].ifname == "rack-2-eth0"


def test_a_node_called_probe_keeps_its_namespace_apart_from_the_kernel_probes():
    """The probe's scratch namespace was <run>-probe, a node called probe's namespace too: the probe's is now a
    name no node's can have, and the run's record owns it."""
    plan = make_plan(_topo("h1", "probe"), "demo1")
    probe = names.probe_namespace("demo1")
    assert plan.nodes["probe"].netns == "demo1-probe"
    assert probe not in {node.netns for node in plan.nodes.values()}
    assert names.owns_namespace("demo1", probe) and len(names.probe_namespace("r" * 12)) <= 23
