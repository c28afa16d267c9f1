"""Which data-plane process serves which node; pure.

The agents run many to a process (:mod:`emulator.agents.worker`), one
process per core by default.  A node's load is about the frames it handles:
a switch handles every frame of each of its ports, a host those of its one
link, so a switch weighs its port count and a host one.  Nodes are placed
heaviest first on the least loaded process (longest-processing-time
first): on star,8 with two processes the switch gets one and the eight
hosts the other.  Each process is pinned to a CPU of its own (round robin
over the CPUs this process may use), so that every interface's frames are
sent from one CPU and can be received there (:mod:`emulator.kernel.rps`).
"""

from __future__ import annotations

import os

from emulator import bounds
from emulator.fabric.plan import FabricPlan, NodePlan


def default_workers() -> int:
    """One data-plane process per core of this machine."""
    return os.cpu_count() or 1


def check_workers(workers: int) -> int:
    """``workers`` if within bounds.WORKERS, else FabricError naming it."""
    return bounds.whole("workers", workers, bounds.WORKERS)


def place(plan: FabricPlan, workers: int) -> list[list[NodePlan]]:
    """The nodes of each process (none empty; fewer processes than ``workers`` if there are fewer nodes)."""
    nodes = sorted(plan.nodes.values(), key=lambda node: -weight(node))  # stable: plan order among equals
    groups: list[list[NodePlan]] = [[] for _ in range(min(check_workers(workers), len(nodes)))]
    loads = [0] * len(groups)
    for node in nodes:
        lightest = loads.index(min(loads))
        groups[lightest].append(node)
        loads[lightest] += weight(node)
    return groups


def process_cpus(processes: int, allowed: set[int]) -> list[int]:
    """The CPU each process is pinned to: the ``allowed`` ones (the builder's affinity) in turn."""
    cpus = sorted(allowed)
    return [cpus[number % len(cpus)] for number in range(processes)]


def node_cpus(groups: list[list[NodePlan]], cpus: list[int]) -> dict[str, int]:
    """Each node's CPU: its process's."""
    return {node.name: cpu for group, cpu in zip(groups, cpus) for node in group}


def weight(node: NodePlan) -> int:
    return len(node.ports) if node.kind == "switch" else 1
