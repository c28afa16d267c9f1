"""Topology specs and Mininet custom files, and the errors users see."""

import textwrap

import pytest

from emulator.errors import FabricError
from emulator.fabric.topospec import (build_topo, load_custom, parse_spec,
                               topo_parameters)
from topologies import FatTreeTopo, LeafSpineTopo, topos

CUSTOM = """
from mininet.topo import Topo

class PairTopo(Topo):
    def build(self, n=1):
        if n < 1:
            raise ValueError(f"n must be at least 1 (got {n})")
        s = self.addSwitch("s1")
        for i in range(2 * n):
            self.addLink(self.addHost(f"h{i + 1}"), s)

class MyStar(Topo):
    "Shadows the built-in star."
    def build(self):
        self.addLink(self.addHost("h1"), self.addSwitch("s1"))

topos = {"pair": PairTopo, "star": MyStar,
         "minimal": lambda: PairTopo(n=1)}
"""


def write(tmp_path, text, name="custom.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def error(call, *args, **kwargs) -> str:
    with pytest.raises(FabricError) as err:
        call(*args, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("spec, parsed", [
    ("fattree", ("fattree", [], {})),
    ("fattree,4", ("fattree", [4], {})),
    (" fattree , 6 ", ("fattree", [6], {})),
    ("leafspine,4,spines=2,hosts=8",
     ("leafspine", [4], {"spines": 2, "hosts": 8})),
    ("star,n=2.5", ("star", [], {"n": 2.5})),
    ("star,n=many", ("star", [], {"n": "many"})),
])
def test_parse_spec(spec, parsed):
    assert parse_spec(spec) == parsed


@pytest.mark.parametrize("spec, part", [
    ("", "empty topology spec"),
    ("   ", "empty topology spec"),
    ("star,", "bad topology spec 'star,': empty name or argument"),
    (",4", "bad topology spec ',4'"),
    ("fattree,,4", "empty name or argument"),
])
def test_parse_spec_rejects(spec, part):
    assert part in error(parse_spec, spec)


def test_build_builtin():
    topo = build_topo("fattree,4")
    assert isinstance(topo, FatTreeTopo)
    assert len(topo.hosts()) == 16
    topo = build_topo("leafspine,3,spines=2,hosts=1")
    assert isinstance(topo, LeafSpineTopo)
    assert len(topo.switches()) == 5 and len(topo.hosts()) == 3


def test_defaults_when_no_arguments():
    assert len(build_topo("ring").switches()) == 4


def test_unknown_topology_lists_known_names():
    assert error(build_topo, "foo,3") == (
        "unknown topology 'foo'; known: dumbbell, fattree, leafspine, "
        "ring, star")


def test_too_many_positional_arguments():
    assert error(build_topo, "fattree,4,2") == (
        "topology 'fattree' takes (k=4); got 2 positional arguments")


def test_unknown_keyword():
    assert error(build_topo, "leafspine,tiers=3") == (
        "topology 'leafspine' takes (leaves=2, spines=2, hosts=2); "
        "got unknown keyword 'tiers'")


def test_argument_given_twice():
    message = error(build_topo, "star,3,n=4")
    assert message.startswith("topology 'star' takes (n=4); ")
    assert "'n'" in message


@pytest.mark.parametrize("spec, message", [
    ("fattree,3", "topology 'fattree,3': k must be even (got 3)"),
    ("ring,2", "topology 'ring,2': n must be at least 3 (got 2)"),
    ("star,n=many", "topology 'star,n=many': n must be an integer "
                    "(got 'many')"),
    (" dumbbell,1.5 ", "topology 'dumbbell,1.5': n must be an integer "
                       "(got 1.5)"),
])
def test_bad_values_name_the_spec(spec, message):
    assert error(build_topo, spec) == message


@pytest.mark.parametrize("name, shown", [
    ("star", "(n=4)"),
    ("dumbbell", "(n=2)"),
    ("leafspine", "(leaves=2, spines=2, hosts=2)"),
    ("fattree", "(k=4)"),
    ("ring", "(n=4, hosts=1)"),
])
def test_topo_parameters(name, shown):
    assert topo_parameters(topos[name]) == shown


def test_topo_parameters_of_other_callables():
    def factory(x, *rest, y=1, **opts):
        raise AssertionError("not called")
    assert topo_parameters(factory) == "(x, *rest, y=1, **opts)"


def test_custom_file(tmp_path):
    path = write(tmp_path, CUSTOM)
    assert set(load_custom(path)) == {"pair", "star", "minimal"}
    topo = build_topo("pair,3", custom=path)
    assert len(topo.hosts()) == 6
    # built-ins stay available next to the custom names
    assert len(build_topo("fattree,2", custom=path).hosts()) == 2


def test_custom_file_wins_over_builtin(tmp_path):
    path = write(tmp_path, CUSTOM)
    topo = build_topo("star", custom=path)
    assert type(topo).__name__ == "MyStar"
    assert error(build_topo, "star,4", custom=path) == (
        f"custom topology file {path!r}: topology 'star' takes (); got 1 positional argument")


def test_custom_lambda_entry(tmp_path):
    """Mininet's own custom example maps a name to a lambda."""
    path = write(tmp_path, CUSTOM)
    assert len(build_topo("minimal", custom=path).hosts()) == 2
    assert "topology 'minimal' takes ()" in error(
        build_topo, "minimal,2", custom=path)


def test_custom_errors_are_wrapped(tmp_path):
    path = write(tmp_path, CUSTOM)
    assert error(build_topo, "pair,0", custom=path) == (
        f"custom topology file {path!r}: topology 'pair,0': n must be at least 1 (got 0)")
    assert "known: dumbbell, fattree, leafspine, minimal, pair, ring, star" \
        in error(build_topo, "nope", custom=path)


def test_custom_file_missing(tmp_path):
    path = str(tmp_path / "absent.py")
    assert error(load_custom, path) == (
        f"custom topology file {path!r} not found")
    assert "not found" in error(load_custom, str(tmp_path))


def test_custom_file_without_topos(tmp_path):
    path = write(tmp_path, "from mininet.topo import Topo\n")
    assert error(load_custom, path) == (
        f"custom topology file {path!r} defines no 'topos' dict "
        "(name -> Topo class)")
    assert "defines no 'topos' dict" in error(build_topo, "star", path)


def test_custom_file_topos_not_a_dict(tmp_path):
    path = write(tmp_path, "topos = ['star']\n")
    assert "defines no 'topos' dict" in error(load_custom, path)


def test_custom_file_bad_entry(tmp_path):
    path = write(tmp_path, "topos = {'x': 3}\n")
    assert "topos entry 'x' must map a name to a Topo class" in error(
        load_custom, path)


@pytest.mark.parametrize("body, part", [
    ("raise RuntimeError('boom\\nsecond line')",
     "failed: RuntimeError: boom second line"),
    ("import no_such_module_here",
     "failed: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("def broken(:\n", "failed: SyntaxError: "),
])
def test_custom_file_that_fails(tmp_path, body, part):
    path = write(tmp_path, body + "\n")
    message = error(load_custom, path)
    assert message.startswith(f"custom topology file {path!r} failed: ")
    assert part in message


def test_custom_factory_that_returns_no_topo(tmp_path):
    path = write(tmp_path, "topos = {'odd': lambda: 42}\n")
    assert error(build_topo, "odd", custom=path) == (
        f"custom topology file {path!r}: topology 'odd' returned int, not a Topo")


# --- whatever a custom file's code does is one line naming the file ---------------------------------------

@pytest.mark.parametrize("body, part", [
    ("raise RuntimeError('no cables\\nat all')", "topology 'x' failed: RuntimeError: no cables at all"),
    ("raise SystemExit(3)", "topology 'x' failed: SystemExit: 3"),
    ("return 1 / 0", "topology 'x' failed: ZeroDivisionError: division by zero"),
    ("raise KeyError('s9')", "topology 'x' failed: KeyError: 's9'"),
])
def test_custom_build_that_raises_names_the_file(tmp_path, body, part):
    path = write(tmp_path, f"""
        from mininet.topo import Topo
        class X(Topo):
            def build(self):
                {body}
        topos = {{"x": X}}
        """)
    assert error(build_topo, "x", custom=path) == f"custom topology file {path!r}: {part}"


def test_custom_file_that_exits_while_loading(tmp_path):
    path = write(tmp_path, "import sys\nsys.exit('bye')\n")
    assert error(load_custom, path) == f"custom topology file {path!r} failed: SystemExit: bye"


def test_custom_topology_over_the_node_cap(tmp_path):
    """A custom file's topology meets the caps once built: the emulator's when it names that backend, the widest
    (any backend's) when it names none."""
    path = write(tmp_path, """
        from mininet.topo import Topo
        class Big(Topo):
            def build(self, hosts=2100):
                s = self.addSwitch("s1")
                for i in range(hosts):
                    self.addHost(f"h{i + 1}")
        topos = {"big": Big}
        """)
    assert error(build_topo, "big", custom=path, backend="emulator") == (
        f"custom topology file {path!r}: topology 'big': 2101 nodes (2100 hosts, 1 switches); at most 2048 on one "
        "machine (the emulator)")
    assert len(build_topo("big", custom=path).hosts()) == 2100
    assert error(build_topo, "big,16384", custom=path) == (
        f"custom topology file {path!r}: topology 'big,16384': 16385 nodes (16384 hosts, 1 switches); at most 16384 "
        "on any backend (the emulator runs 2048)")
    assert error(build_topo, "big,16384", custom=path, backend="sim") == (
        f"custom topology file {path!r}: topology 'big,16384': 16385 nodes (16384 hosts, 1 switches); the simulation "
        "backend runs at most 16384")


@pytest.mark.parametrize("spec, backend, refusal", [
    ("fattree,24", None, None),
    ("fattree,24", "sim", None),
    ("fattree,24", "emulator", "topology 'fattree,24': 4176 nodes (3456 hosts, 720 switches); at most 2048 on one "
                               "machine (the emulator)"),
    ("fattree,18", "emulator", None),  # 1863 nodes
    ("fattree,32", "sim", "topology 'fattree,32': 1,280 switches x 8,192 hosts = 10,485,760 routes; the simulation "
                          "backend plans and builds at most 8,000,000"),
    ("fattree,30", "sim", None),  # 1125 switches x 6750 hosts
    ("ring,2829", "sim", "topology 'ring,2829': 2,829 switches x 2,829 hosts = 8,003,241 routes; the simulation "
                         "backend plans and builds at most 8,000,000"),
    ("ring,2828", "sim", None),
    ("leafspine,64,32,hosts=256", "sim", "topology 'leafspine,64,32,hosts=256': 16480 nodes (16384 hosts, 96 "
                                         "switches); at most 16384 on any backend (the emulator runs 2048)"),
])
def test_each_backend_caps_the_topologies_it_runs(spec, backend, refusal):
    """The built topology against ``backend``'s caps: one line naming the cap that refuses it (a built-in
    topology over every backend's node cap is refused by its own count, before it is built)."""
    if refusal is None:
        assert build_topo(spec, backend=backend).hosts()
    else:
        assert error(build_topo, spec, backend=backend) == refusal


def test_custom_entry_without_a_readable_signature(tmp_path):
    path = write(tmp_path, "topos = {'m': max}\n")
    assert error(build_topo, "m", custom=path).startswith(
        f"custom topology file {path!r}: topology 'm': cannot read its parameters: ValueError: ")


def test_a_spec_longer_than_200_characters():
    assert error(parse_spec, "star," + "1" * 300) == (
        "bad topology spec 'star,11111111111111111111111111111111111'... (305 characters): "
        "longer than 200 characters")


def test_a_builtin_topology_bug_is_not_hidden(monkeypatch):
    """Only a custom file's failures are the user's; ours stay tracebacks."""
    from topologies import fabrics

    def broken(self, n=4):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(fabrics.StarTopo, "build", broken)
    with pytest.raises(RuntimeError, match="a bug of ours"):
        build_topo("star")
