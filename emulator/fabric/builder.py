"""The fabric builder and the Python API: ``with Fabric(topo) as net:``.

Turns a plan into namespaces, veth pairs, addresses, static neighbours,
routes and tc through pyroute2 (one handle per namespace, no ``ip`` or
``tc`` commands), starts an agent per node (many to a process) with the config
:mod:`emulator.fabric.agent_config` makes for it, and undoes all of it on
exit, on Ctrl-C and on error (:mod:`emulator.fabric.teardown`).  The run's
record is written before anything is created (see
:mod:`emulator.fabric.runstate`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import subprocess
import sys
import time
from typing import Any, Callable

from mininet.topo import Topo
from pyroute2 import IPRoute

import emulator
from emulator.agents.config import dump
from emulator.fabric import runstate
from emulator.fabric.agent_config import agent_configs, switch_mmu
from emulator.fabric.agent_control import query_agent
from emulator.fabric.agent_watch import AgentWatch
from emulator.fabric.capacity import check_capacity
from emulator.fabric.capture import Captures
from emulator.errors import FabricError, shown
from emulator.kernel.ethtool import disable_offloads
from emulator.fabric.features import Features, probe_features
from emulator.fabric.names import probe_namespace
from emulator.fabric.node import Node
from emulator.kernel.netns import create_namespace, entered, existing_namespaces
from emulator.fabric.placement import check_workers, default_workers, node_cpus, place, process_cpus
from emulator.fabric.link_state import save_graph
from emulator.fabric.plan import GATEWAY_IP, FabricPlan, NodePlan, make_plan, switch_graph, veth_mac
from emulator.fabric.uet_transport import UET_IP_HEADERS, uet_transport
from emulator.fabric.ib_subnet import assign as assign_subnet
from emulator.fabric.ib_sweeps import write_sweeps
from emulator.model.nscc import NsccSettings
from emulator.fabric.privileges import require_root
from emulator.fabric.reachability import pingall
from emulator.fabric.stats import collect_stats
from emulator.fabric.teardown import finish_run
from emulator.kernel.tc import PauseGates, link_tree, netlink_batch, open_route_socket
from emulator.model.dcqcn import DcqcnParams, check_fabric

AGENT_READY_TIMEOUT = 20.0  # seconds for a data-plane process to start, and AGENT_BUILD_SECONDS per agent
AGENT_BUILD_SECONDS = 0.1
NUD_PERMANENT = 0x80
PROGRESS_INTERVAL = 3.0  # seconds between progress lines of a long build


# The directory that holds the ``emulator`` package: the checkout for a source tree or an editable
# install, site-packages for an installed one.  The agents start there, because ``python -m`` looks in
# its cwd first: they run the same copy of the package as the builder, not whichever one is installed.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(emulator.__file__)))


class Fabric:
    """A fabric built from a Mininet ``Topo``; a context manager.

    ``link`` holds the default link options (``bw``, ``delay``, ``mtu``,
    ``loss``, ``drop``) for links that do not set their own.  ``fabric`` is
    ``lossless`` (PFC on priority 3) or ``lossy``; ``switch`` overrides the
    switches' buffer, PFC and ECN settings (:mod:`emulator.model.switch_params`).
    ``name`` fixes the run name (default: random); two runs cannot share
    one.  ``capture`` names a directory for one pcapng per link end;
    ``telemetry`` one for the final counters and occupancy time series.
    ``workers`` is how many data-plane processes serve the agents (default:
    one per core).  ``cc`` turns DCQCN on in every RNIC (RoCE fabrics only),
    its constants in the modelled fabric's units, scaled by ``dilation`` (the
    fabric's D when it has a modelled rate; else by the constants' own
    reference rate over the link's, :func:`emulator.model.dcqcn.at_link`).
    """

    def __init__(self, topo: Topo, link: dict[str, Any] | None = None, name: str | None = None,
                 spec: str = "", fabric: str = "lossless", switch: dict[str, str] | None = None,
                 seed: int = 1, capture: str | None = None, telemetry: str | None = None,
                 log: Callable[[str], None] | None = None, monitor: bool = True,
                 workers: int | None = None, cc: DcqcnParams | None = None, dilation: float | None = None,
                 spray: str = "reps", routing: str = "static", rccc: bool = False,
                 nscc: NsccSettings | None = NsccSettings()) -> None:
        require_root()
        if name is not None:
            runstate.check_run_name(name)
        self.run_name = name or runstate.new_run_name()
        self.plan: FabricPlan = make_plan(topo, self.run_name, link)
        check_capacity(f"topology {shown(spec)}" if spec else "the topology", len(self.plan.nodes),
                       len(self.plan.links))
        self.spec = spec
        self.fabric = fabric
        self.seed = seed
        self.monitor = monitor  # the fidelity monitor in every agent (off only to measure its cost)
        self.workers = default_workers() if workers is None else check_workers(workers)  # data-plane processes
        self.mmu_configs = {node.name: switch_mmu(node, fabric, switch or {}) for node in self.plan.switches()}
        self.subnet = assign_subnet(self.plan, adaptive=routing == "adaptive") if fabric == "ib" else None
        # uet: every RNIC runs UET's transport, its packets as long as the links allow (the RDMA path MTU of
        # the experiments, 4096, on their 4200-byte links)
        self.uet = uet_transport(self.plan, spray, min(p.params.mtu for n in self.plan.nodes.values()
                                                       for p in n.ports) - UET_IP_HEADERS,
                                 rccc, nscc) if fabric == "uet" else None
        check_fabric(cc, fabric)
        self.cc, self.dilation = cc, dilation  # DCQCN's constants (modelled units), the fabric's D if modelled
        self.capture_dir = os.path.abspath(capture) if capture else None  # `down` may run in another directory
        self.telemetry_dir = os.path.abspath(telemetry) if telemetry else None
        self.captures: Captures | None = None
        self.features: Features | None = None
        self.nodes = {n.name: Node(n.name, n.kind, n.netns, n.ip) for n in self.plan.nodes.values()}
        self.state: runstate.RunState | None = None
        self._ipr: dict[str, IPRoute] = {}
        self._gates: dict[str, PauseGates] = {}
        self._agents = AgentWatch({n.name: n.kind for n in self.plan.nodes.values()}, self.agent_log)
        self._log = log or (lambda message: None)
        self.timings: dict[str, float] = {}

    # --- the context-manager API -------------------------------------------------

    def __enter__(self) -> "Fabric":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __getitem__(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise FabricError(f"no node named {name!r} in run {self.run_name}") from None

    @property
    def hosts(self) -> list[Node]:
        return [self.nodes[n.name] for n in self.plan.hosts()]

    @property
    def switches(self) -> list[Node]:
        return [self.nodes[n.name] for n in self.plan.switches()]

    @property
    def directory(self) -> str:
        return runstate.run_dir(self.run_name)

    # --- build ---------------------------------------------------------------------

    def start(self) -> None:
        """Build the fabric and start its agents; on any failure undo it all."""
        namespaces = [n.netns for n in self.plan.nodes.values()] + [probe_namespace(self.run_name)]
        clash = sorted(set(namespaces) & existing_namespaces())
        if os.path.exists(self.directory) or clash:
            raise FabricError(f"run {self.run_name!r} already exists; remove it with fabric-emu down --run {self.run_name}")
        self.state = runstate.RunState(
            run=self.run_name, owner_pid=os.getpid(), created=time.time(), topo=self.spec,
            namespaces=namespaces,
            nodes={n.name: {"kind": n.kind, "netns": n.netns, "ip": n.ip} for n in self.plan.nodes.values()},
            fabric=self.fabric, capture_dir=self.capture_dir, telemetry_dir=self.telemetry_dir,
        )
        self.state.note_started([self.state.owner_pid])
        try:
            self.state.save()
            save_graph(self.directory, switch_graph(self.plan))
            _raise_open_file_limit()
            began = time.monotonic()
            self._build()
            self.timings["build_s"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise

    def _build(self) -> None:
        self.features = probe_features(self.plan)
        self.state.features = self.features.as_dict()
        self._log(self.features.notice(self.plan))
        for node in self.plan.nodes.values():
            create_namespace(node.netns)
            with entered(node.netns):
                _write_sysctl("net/ipv6/conf/all/disable_ipv6", "1")
                _write_sysctl("net/ipv6/conf/default/disable_ipv6", "1")
                self._ipr[node.name] = IPRoute()
        self._log(f"created {len(self.plan.nodes)} namespaces")
        for a, b in self.plan.links:
            self._ipr[a.node].link(
                "add", ifname=a.ifname, kind="veth", address=veth_mac(self.plan, a), mtu=a.params.mtu,
                peer={"ifname": b.ifname, "net_ns_fd": self.plan.nodes[b.node].netns,
                      "address": veth_mac(self.plan, b), "mtu": b.params.mtu},
            )
        self._log(f"created {len(self.plan.links)} links")
        last_report = time.monotonic()
        for done, node in enumerate(self.plan.nodes.values(), start=1):
            self._configure(node)
            if time.monotonic() - last_report > PROGRESS_INTERVAL:
                self._log(f"configured {done}/{len(self.plan.nodes)} nodes (tc, addresses, routes)")
                last_report = time.monotonic()
        self._start_agents()
        if self.capture_dir:
            self._start_captures()

    def _configure(self, node: NodePlan) -> None:
        ipr = self._ipr[node.name]
        with entered(node.netns):
            disable_offloads([p.ifname for p in node.ports])
        lo = ipr.link_lookup(ifname="lo")[0]
        ipr.link("set", index=lo, state="up")
        indexes = [ipr.link_lookup(ifname=port.ifname)[0] for port in node.ports]
        with contextlib.closing(open_route_socket(node.netns)) as route:
            netlink_batch(route, [request for port, index in zip(node.ports, indexes)
                                  for request in link_tree(index, port.params.bw_bps, port.params.mtu,
                                                           host=node.kind == "host")])
        for port, index in zip(node.ports, indexes):
            ipr.link("set", index=index, state="up")
            if node.kind == "host":
                gates = PauseGates(node.netns, port.ifname, index, port.params.bw_bps, port.params.mtu,
                                   port.mac, port.peer_mac)
                gates.install()
                self._gates[node.name] = gates
                ipr.addr("add", index=index, address=node.ip, prefixlen=32)
                ipr.route("add", dst=f"{GATEWAY_IP}/32", oif=index, scope=253)
                ipr.neigh("add", dst=GATEWAY_IP, lladdr=port.peer_mac, ifindex=index, state=NUD_PERMANENT)
                ipr.route("add", dst="10.0.0.0/8", gateway=GATEWAY_IP, oif=index)

    def _start_agents(self) -> None:
        """The agents, many nodes to a data-plane process (:mod:`emulator.fabric.placement`)."""
        assert self.state is not None
        pending = {}
        groups = place(self.plan, self.workers)
        cpus = process_cpus(len(groups), os.sched_getaffinity(0))
        configs = agent_configs(self.plan, self.seed, self.mmu_configs, self.subnet, self.monitor,
                                node_cpus(groups, cpus), self.cc, self.dilation, self.uet)
        if self.subnet is not None:  # the subnet manager's sweeps with each link down, for `link`
            write_sweeps(self.directory, self.plan, adaptive=bool(self.subnet.ar))
        for number, (group, cpu) in enumerate(zip(groups, cpus)):
            specs = []
            for node in group:
                # Not <node>.json: a node called "state" would overwrite the run's record, state.json.
                config_path = os.path.join(self.directory, f"{node.name}.config.json")
                with runstate.create_file(config_path) as f:
                    f.write(dump(configs[node.name]))
                specs.append(f"{node.kind}:{config_path}")
            read_fd, write_fd = os.pipe()
            # A dot is in no node's name, so no node's own files (<node>.log, .json, ...) can be called this.
            log_path = os.path.join(self.directory, f"worker.{number}.log")
            # Uninterrupted: an agent started but not recorded would outlive the run.
            with runstate.create_file(log_path) as log, runstate.uninterrupted():
                proc = subprocess.Popen(
                    [sys.executable, "-m", "emulator.agents.worker", str(write_fd), str(cpu), *specs],
                    pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, cwd=PACKAGE_PARENT,
                )
                for node in group:
                    self._agents.procs[node.name] = proc
                    self.state.agents[node.name] = proc.pid
                self.state.note_started([proc.pid])
            os.close(write_fd)
            for node in group:  # each node's log is its process's: <node>.log names the same file
                os.link(log_path, self.agent_log(node.name))
            pending[group[0].name] = (read_fd, len(group))
        self.state.save()
        deadline = time.monotonic() + AGENT_READY_TIMEOUT + AGENT_BUILD_SECONDS * max(len(g) for g in groups)
        for name, (fd, count) in pending.items():
            try:
                ready = _read_with_deadline(fd, deadline)
            finally:
                os.close(fd)
            if ready != b"ready\n":
                raise FabricError(self._agents.failure(name)
                                  or f"the agents of {name} and {count - 1} other nodes did not start in time")
        self._log(f"started {len(self.plan.switches())} switch agents and {len(self.plan.hosts())} host agents "
                  f"in {len(groups)} processes")
        self._agents.start()

    def _start_captures(self) -> None:
        assert self.state is not None and self.capture_dir is not None
        ports = [(self.nodes[n.name], p.ifname) for n in self.plan.nodes.values() for p in n.ports]
        self.captures = Captures(ports, self.capture_dir, self.directory)
        self.captures.start()
        self.state.captures = self.captures.pids
        self.state.note_started(self.state.captures.values())
        self.state.save()
        self._log(f"capturing {len(ports)} link ends into {self.capture_dir}")

    def control_path(self, node: str) -> str:
        return runstate.control_socket(self.run_name, node)

    def agent_log(self, node: str) -> str:
        return os.path.join(self.directory, f"{node}.log")

    # --- supervision -----------------------------------------------------------------

    def check_agents(self) -> None:
        """Raise FabricError naming the first node whose agent died."""
        self._agents.check()

    # --- using it --------------------------------------------------------------------

    def gates(self, host: str) -> PauseGates:
        """The pause gates of ``host``'s NIC (pause/resume a priority)."""
        if self[host].kind != "host":
            raise FabricError(f"{host} is a switch; pause gates are on host NICs")
        return self._gates[host]

    def switch_stats(self, switch: str) -> dict[str, Any]:
        """The live counters of one switch agent."""
        return query_agent(self.control_path(switch), "stats")

    def stats(self) -> dict[str, Any]:
        """Live counters of every agent, with fabric-wide totals."""
        assert self.state is not None
        return collect_stats(self.state)

    def reset_fidelity(self) -> None:
        """Every agent starts its fidelity monitor's figures afresh (a study's measured iterations begin)."""
        for name in self.nodes:
            reply = query_agent(self.control_path(name), "fidelity-reset")
            if "error" in reply:
                raise FabricError(f"{name}: {reply['error']}")

    def send_pfc(self, switch: str, ifname: str, priority: int, quanta: int) -> None:
        """Make ``switch`` send one PFC frame out of ``ifname`` (tests, timing)."""
        reply = query_agent(self.control_path(switch), f"pfc {ifname} {priority} {quanta}")
        if "error" in reply:
            raise FabricError(reply["error"])

    def pingall(self, timeout: float = 1.0, sample: int | None = None) -> tuple[int, int, list[tuple[str, str]]]:
        """Ping every ordered host pair once, or ``sample`` pairs drawn with the fabric's seed;
        (answered, pinged, failed pairs)."""
        return pingall(self.hosts, timeout, sample, self.seed)

    # --- teardown ----------------------------------------------------------------------

    def detach(self) -> None:
        """Leave the fabric running after this process exits (``fabric-emu up``)."""
        assert self.state is not None
        self.state.detached = True
        self.state.owner_pid = 0
        self.state.save()
        self._agents.stop()
        self._close_handles()

    @runstate.uninterrupted()
    def stop(self) -> None:
        """Tear everything down; safe to call twice and after a failed build.

        Captures are stopped first (so they hold the whole run), then the
        agents, whose final counters and occupancy series go to the
        telemetry directory, if any; then the run is destroyed.
        """
        if self.state is None:
            return
        began = time.monotonic()
        self._agents.stop()
        try:
            if self.captures is not None:
                self.captures.stop()
                self.state.captures = {}
                lost = {ifname: n for ifname, n in self.captures.dropped.items() if n}
                if lost:
                    self._log(f"captures incomplete: tcpdump dropped {sum(lost.values())} frames "
                              f"({', '.join(f'{k} {v}' for k, v in sorted(lost.items()))}); the CPU was busy")
        finally:  # a capture that cannot be converted must not keep the run alive
            self._close_handles()
            finish_run(self.state, self._agents.procs)
            self.state = None
        self.timings["teardown_s"] = time.monotonic() - began

    def _close_handles(self) -> None:
        for gates in self._gates.values():
            gates.close()
        self._gates.clear()
        for ipr in self._ipr.values():
            ipr.close()
        self._ipr.clear()


def _write_sysctl(key: str, value: str) -> None:
    with open(f"/proc/sys/{key}", "w") as f:
        f.write(value)


def _read_with_deadline(fd: int, deadline: float) -> bytes:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    remaining_ms = max(deadline - time.monotonic(), 0) * 1000
    return os.read(fd, 64) if poller.poll(remaining_ms) else b""


def _raise_open_file_limit() -> None:
    """Large fabrics hold several descriptors per namespace; lift the soft cap."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
