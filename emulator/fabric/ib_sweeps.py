"""The subnet manager's sweeps of a running ib fabric: its tables with each switch-to-switch link down.

OpenSM sweeps the fabric again when a link goes down and writes new forwarding tables (and adaptive routing
groups) into the switches.  The builder does the sweeps ahead, one with no link down and one per link, and
gives each switch agent its file of them (``<switch>.ib-sweeps.json``); taking a link down
(:mod:`emulator.fabric.link_state`) then has every agent take the sweep without it (``ib-tables``), at once,
as the Ethernet fabrics' routes converge at once.  One link down at a time: a sweep per set of links down
would grow with the square of the links.
"""

from __future__ import annotations

import os

from emulator.agents.config import IbSweeps, IbTables, dump
from emulator.errors import FabricError
from emulator.fabric import runstate
from emulator.fabric.ib_subnet import Subnet, assign
from emulator.fabric.plan import FabricPlan, NodePlan

NO_LINK_DOWN = "-"


def sweep_key(a: str, b: str) -> str:
    """The sweep of the link between switches ``a`` and ``b`` going down."""
    return "-".join(sorted((a, b)))


def sweeps_file(directory: str, switch: str) -> str:
    return os.path.join(directory, f"{switch}.ib-sweeps.json")


def switch_tables(subnet: Subnet, node: NodePlan) -> IbTables:
    """A switch's LFT and adaptive routing groups in ``subnet``, by port index (the agents' and the compiled
    plane's numbering)."""
    index_of = {port.number: i for i, port in enumerate(node.ports)}
    return IbTables(lft={dlid: index_of[number] for dlid, number in subnet.lfts[node.name].items()
                         if number in index_of},
                    ar={dlid: tuple(index_of[number] for number in group)
                        for dlid, group in subnet.ar.get(node.name, {}).items()})


def write_sweeps(directory: str, plan: FabricPlan, adaptive: bool) -> None:
    """Every switch's sweeps file: the tables with no link down, and with each link down whose loss leaves
    every host reachable."""
    subnets = {NO_LINK_DOWN: assign(plan, adaptive=adaptive)}
    for a, b in plan.links:
        if plan.nodes[a.node].kind == "switch" and plan.nodes[b.node].kind == "switch":
            try:
                subnets[sweep_key(a.node, b.node)] = assign(plan, adaptive=adaptive,
                                                            without=frozenset({frozenset((a.node, b.node))}))
            except FabricError:
                continue  # a link the fabric cannot lose: `link` refuses it before asking for a sweep
    for node in plan.switches():
        sweeps = IbSweeps({key: switch_tables(subnet, node) for key, subnet in subnets.items()})
        with runstate.create_file(sweeps_file(directory, node.name)) as f:
            f.write(dump(sweeps))
