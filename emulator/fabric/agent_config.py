"""What each agent is told when it starts, from the fabric's plan.

The configs are the typed contract of :mod:`emulator.agents.config`; the
builder writes each to the file its agent is started with.

A switch agent gets its ports and links, its routes and its MMU settings
(derived from its fastest port and longest delay, with the run's
``--switch`` overrides); a host agent gets its NIC and RNIC.  On
``--fabric ib`` both also get their part of the IB subnet: LIDs, the
switch's forwarding table, the SL-to-VL map and the credit sizes of both
ends of every link.  Pure: nothing here touches the system, so unit tests
can build every config without root.
"""

from __future__ import annotations

import os

from emulator.agents.config import HostConfig, HostIbConfig, PortConfig, SwitchConfig, SwitchIbConfig, UetTransport
from emulator.fabric import runstate
from emulator.fabric.ib_subnet import Subnet
from emulator.fabric.ib_sweeps import sweeps_file, switch_tables
from emulator.fabric.plan import FabricPlan, LinkParams, NodePlan
from emulator.model.dcqcn import DcqcnParams, at_link
from emulator.model.mmu import MmuConfig
from emulator.model.switch_params import derive_config
from emulator._core.ib import SLS
from emulator._core.mac import ETH_LEN
from emulator._core.rc import RcConfig

IB_SL = 0  # the service level RDMA uses on --fabric ib
HOST_IB_BUFFER = 2048 * 64  # a host RNIC takes every packet at once; it advertises the most IB credits allow
# With adaptive routing a QP's packets may pass each other, but none is further ahead than a window of
# unacknowledged PSNs: its responder holds that many past a gap, and go-back-N is left for real losses.
AR_REORDER = RcConfig.max_inflight


def reorder_wait_ns(link: LinkParams) -> int:
    """How long a responder on ``link`` holds requests past a gap before it NAKs it: the time of a window of
    full frames (no packet that only took a longer path is later than that; one lost with a link is)."""
    return max(1, AR_REORDER * (link.mtu + ETH_LEN) * 8 * 1_000_000_000 // link.bw_bps)


def switch_mmu(node: NodePlan, fabric: str, overrides: dict[str, str]) -> MmuConfig:
    """A switch's MMU settings from its fastest port and longest delay."""
    return derive_config(
        fabric,
        rate_bps=max(p.params.bw_bps for p in node.ports),
        delay_ns=max(p.params.delay_ns for p in node.ports),
        mtu=max(p.params.mtu for p in node.ports),
        ports=len(node.ports),
        overrides=overrides,
    )


def agent_configs(plan: FabricPlan, seed: int, mmu: dict[str, MmuConfig], subnet: Subnet | None,
                  monitor: bool = True, cpus: dict[str, int] | None = None, cc: DcqcnParams | None = None,
                  dilation: float | None = None, uet: UetTransport | None = None) -> dict[str, HostConfig | SwitchConfig]:
    """Every node's agent config, in the plan's node order; ``mmu`` holds each switch's settings.

    ``cpus`` (node -> the CPU its process is pinned to) makes each interface
    receive on its peer's CPU, the one that sends into it.  ``cc`` (DCQCN's
    constants in modelled units) goes to every RNIC at its link's rate, at
    time dilation ``dilation`` (:func:`emulator.model.dcqcn.at_link`).  ``uet`` (the uet fabric) makes every
    RNIC run UET's transport.
    """
    return {node.name: _agent_config(plan, node, seed * 1000 + index, mmu, subnet, monitor, cpus or {}, cc, dilation,
                                     uet)
            for index, node in enumerate(plan.nodes.values(), start=1)}


def _agent_config(plan: FabricPlan, node: NodePlan, seed: int, mmu_configs: dict[str, MmuConfig],
                  subnet: Subnet | None, monitor: bool, cpus: dict[str, int], cc: DcqcnParams | None,
                  dilation: float | None, uet: UetTransport | None) -> HostConfig | SwitchConfig:
    directory = runstate.run_dir(plan.run)
    common = dict(name=node.name, netns=node.netns, control=runstate.control_socket(plan.run, node.name),
                  stats_file=os.path.join(directory, f"{node.name}.stats.json"), seed=seed,
                  monitor=monitor)
    if node.kind == "host":
        port = node.ports[0]
        return HostConfig(**common, ifname=port.ifname, rate_bps=port.params.bw_bps, mtu=port.params.mtu,
                          mac=port.mac, peer_mac=port.peer_mac, ip=node.ip,
                          verbs=runstate.verbs_socket(plan.run, node.name),
                          ib=host_ib(plan, node, mmu_configs, subnet), rx_cpu=cpus.get(port.peer_node),
                          cc=None if cc is None else at_link(cc, port.params.bw_bps, dilation)[0],
                          rates_file=None if cc is None else os.path.join(directory, f"{node.name}.rates.csv"),
                          uet=uet)
    return SwitchConfig(
        **common, mmu=mmu_configs[node.name],
        occupancy_file=os.path.join(directory, f"{node.name}.occupancy.csv"),
        routes_file=os.path.join(directory, f"{node.name}.routes.json"),
        ib_sweeps_file=sweeps_file(directory, node.name) if subnet is not None else None,
        ports=tuple(
            PortConfig(ifname=p.ifname, mac=p.mac, peer_mac=p.peer_mac, rate_bps=p.params.bw_bps,
                       mtu=p.params.mtu, delay_ns=p.params.delay_ns,
                       host_facing=plan.nodes[p.peer_node].kind == "host", loss=p.params.loss, drop=p.params.drop,
                       rx_cpu=cpus.get(p.peer_node))
            for p in node.ports
        ),
        routes={ip: tuple(ifnames) for ip, ifnames in plan.routes[node.name].items()},
        ib=switch_ib(plan, node, mmu_configs, subnet),
    )


def host_ib(plan: FabricPlan, node: NodePlan, mmu_configs: dict[str, MmuConfig],
             subnet: Subnet | None) -> HostIbConfig | None:
    """A host's port on the IB subnet: its LID, every GID's LID, SL and credits."""
    if subnet is None:
        return None
    peer = node.ports[0].peer_node
    return HostIbConfig(lid=subnet.lids[node.name], sl=IB_SL, sl2vl=_sl2vl(subnet), vls=subnet.vls,
                        lids={n.ip: subnet.lids[n.name] for n in plan.hosts()},
                        capacity=HOST_IB_BUFFER, peer_capacity=mmu_configs[peer].vl_buffer,
                        fc_floor=mmu_configs[peer].fc_floor, reorder=AR_REORDER if subnet.ar else 0,
                        reorder_wait_ns=reorder_wait_ns(node.ports[0].params) if subnet.ar else 0)


def switch_ib(plan: FabricPlan, node: NodePlan, mmu_configs: dict[str, MmuConfig],
               subnet: Subnet | None) -> SwitchIbConfig | None:
    """A switch's LFT and adaptive routing groups (by port index), SL to VL map, and every port's credit
    sizes."""
    if subnet is None:
        return None
    peers = tuple(mmu_configs[p.peer_node].vl_buffer if plan.nodes[p.peer_node].kind == "switch"
                  else HOST_IB_BUFFER for p in node.ports)
    tables = switch_tables(subnet, node)
    return SwitchIbConfig(lft=tables.lft, sl2vl=_sl2vl(subnet), vls=subnet.vls,
                          vl_buffer=mmu_configs[node.name].vl_buffer, peer_capacity=peers,
                          fc_floor=mmu_configs[node.name].fc_floor, ar=tables.ar)


def _sl2vl(subnet: Subnet) -> tuple[int, ...]:
    return tuple(subnet.sl2vl[sl] for sl in range(SLS))
