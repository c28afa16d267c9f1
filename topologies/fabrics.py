"""The built-in fabric topologies, as plain Mininet ``Topo`` graphs.

They only describe nodes and links; the fabric builder decides rates,
delays and buffers, so no link options are set here.  Shared conventions,
so the builder and the user never have to guess:

- Hosts are ``h1..hN`` and switches ``s1..sM``, numbered globally.  Hosts
  are added in order, so ``h1`` is the first host, and consecutive hosts
  share a switch.
- Every host has exactly one link, to a switch.
- Every switch carries a ``role`` option (read it with
  ``topo.nodeInfo(name)['role']``): ``edge`` for a switch with hosts in
  the single-tier topologies, ``leaf``/``spine`` in a leaf-spine,
  ``edge``/``aggregation``/``core`` in a fat tree (tier switches also carry
  their ``pod``).
- On every switch the ports towards hosts come first, then the ports
  towards other switches (lower tiers before higher ones), so ``s1-eth1``
  always faces a host.

``build()`` validates its arguments and raises ``ValueError`` with a
one-line message; the spec parser turns that into a user error.  Each
build counts its nodes before adding any, so ``star,100000`` is refused
at once by the widest node cap (``emulator.bounds.MOST_NODES``, the
simulation backend's), not after minutes of building; each backend's own
caps are checked once the topology is built (:mod:`emulator.bounds`).
"""

from __future__ import annotations

from mininet.topo import Topo

from emulator.bounds import over_caps
from emulator.errors import shown

# Mininet's idiom puts the topology parameters in build(), which changes
# its signature on purpose.
# pylint: disable=arguments-differ


def _count(name: str, value: object, minimum: int) -> int:
    """Check a size parameter: an int (not bool, not float) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer (got {shown(value)})")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum} (got {shown(value)})")
    return value


def _size(hosts: int, switches: int) -> None:
    """Refuse a topology over every backend's node cap before adding a node."""
    refused = over_caps(hosts, switches, None)
    if refused is not None:
        raise ValueError(refused)


class _FabricTopo(Topo):
    """Numbers hosts globally so each topology only says where they go."""

    def __init__(self, *args: object, **params: object) -> None:
        # Topo.__init__ calls build(), so the counter must exist first.
        self._hosts_added = 0
        super().__init__(*args, **params)

    def _add_hosts(self, switch: str, count: int) -> None:
        for _ in range(count):
            self._hosts_added += 1
            host = self.addHost(f"h{self._hosts_added}")
            self.addLink(host, switch)


class StarTopo(_FabricTopo):
    """One switch ``s1`` with hosts ``h1..hn``: the simplest incast."""

    def build(self, n: int = 4) -> None:
        """n: number of hosts."""
        _count("n", n, 1)
        _size(n, 1)
        switch = self.addSwitch("s1", role="edge")
        self._add_hosts(switch, n)


class DumbbellTopo(_FabricTopo):
    """Two switches joined by one bottleneck link.

    ``h1..hn`` hang off ``s1`` and ``h(n+1)..h(2n)`` off ``s2``; the
    ``s1``-``s2`` link is the last port on both switches.
    """

    def build(self, n: int = 2) -> None:
        """n: number of hosts on each side."""
        _count("n", n, 1)
        _size(2 * n, 2)
        left = self.addSwitch("s1", role="edge")
        right = self.addSwitch("s2", role="edge")
        self._add_hosts(left, n)
        self._add_hosts(right, n)
        self.addLink(left, right)


class LeafSpineTopo(_FabricTopo):
    """Two-tier Clos: every leaf is linked to every spine.

    Leaves are ``s1..sL`` and spines ``s(L+1)..s(L+S)``.  Each leaf has
    ``hosts`` hosts (``h1``, ``h2`` on ``s1``, then ``h3``, ``h4`` on ``s2``
    with the default of two).  On a leaf, port ``hosts + i`` goes to the
    i-th spine; on a spine, port i goes to the i-th leaf.
    """

    def build(self, leaves: int = 2, spines: int = 2, hosts: int = 2) -> None:
        """leaves, spines: switch counts; hosts: hosts per leaf."""
        _count("leaves", leaves, 1)
        _count("spines", spines, 1)
        _count("hosts", hosts, 1)
        _size(leaves * hosts, leaves + spines)
        leaf_names = [self.addSwitch(f"s{i + 1}", role="leaf")
                      for i in range(leaves)]
        spine_names = [self.addSwitch(f"s{leaves + i + 1}", role="spine")
                       for i in range(spines)]
        for leaf in leaf_names:
            self._add_hosts(leaf, hosts)
        for leaf in leaf_names:
            for spine in spine_names:
                self.addLink(leaf, spine)


class FatTreeTopo(_FabricTopo):
    """The k-ary fat tree of Al-Fares et al. (SIGCOMM 2008).

    k pods, each with k/2 edge and k/2 aggregation switches; (k/2)^2 core
    switches; k/2 hosts per edge switch.  That makes k^3/4 hosts, 5k^2/4
    switches and 3k^3/4 links, and every switch has exactly k ports.

    Switches are numbered bottom-up, pod by pod:

    - edge ``s1..s(k^2/2)``: pod p holds ``s(p*k/2 + 1)..s((p+1)*k/2)``;
    - aggregation ``s(k^2/2 + 1)..s(k^2)``, in the same pod order;
    - core ``s(k^2 + 1)..s(5k^2/4)``.

    Hosts follow their edge switch (``h1..h(k/2)`` on ``s1``).  Within a
    pod every edge switch links to every aggregation switch.  The i-th
    aggregation switch of each pod (i from 0) links to the core group
    i*k/2 .. i*k/2 + k/2 - 1, so core switch c reaches every pod through
    its aggregation switch c // (k/2).  Ports: on edge and aggregation
    switches the k/2 downlinks are ports 1..k/2 and the uplinks
    k/2+1..k; on a core switch, port p+1 goes to pod p.
    """

    def build(self, k: int = 4) -> None:
        """k: switch port count (even, at least 2)."""
        _count("k", k, 2)
        if k % 2:
            raise ValueError(f"k must be even (got {shown(k)})")
        half = k // 2
        _size(k * half * half, k * k + half * half)
        edges = [[self.addSwitch(f"s{pod * half + i + 1}", role="edge",
                                 pod=pod)
                  for i in range(half)] for pod in range(k)]
        aggregations = [[self.addSwitch(f"s{(k + pod) * half + i + 1}",
                                        role="aggregation", pod=pod)
                         for i in range(half)] for pod in range(k)]
        cores = [self.addSwitch(f"s{k * k + c + 1}", role="core")
                 for c in range(half * half)]
        for pod in range(k):
            for edge in edges[pod]:
                self._add_hosts(edge, half)
        for pod in range(k):
            for edge in edges[pod]:
                for aggregation in aggregations[pod]:
                    self.addLink(edge, aggregation)
        for pod in range(k):
            for i, aggregation in enumerate(aggregations[pod]):
                for core in cores[i * half:(i + 1) * half]:
                    self.addLink(aggregation, core)


class RingTopo(_FabricTopo):
    """Switches ``s1..sn`` in a cycle, ``hosts`` hosts on each.

    n must be at least 3: two switches would need a double link.  On every
    switch port ``hosts + 1`` faces the next switch (s1 -> s2 -> ... -> sn
    -> s1) and port ``hosts + 2`` the previous one.
    """

    def build(self, n: int = 4, hosts: int = 1) -> None:
        """n: number of switches; hosts: hosts per switch."""
        _count("n", n, 3)
        _count("hosts", hosts, 1)
        _size(n * hosts, n)
        switches = [self.addSwitch(f"s{i + 1}", role="edge")
                    for i in range(n)]
        for switch in switches:
            self._add_hosts(switch, hosts)
        for i, switch in enumerate(switches):
            self.addLink(switch, switches[(i + 1) % n],
                         port1=hosts + 1, port2=hosts + 2)
