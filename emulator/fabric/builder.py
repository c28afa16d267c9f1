"""The fabric builder and the Python API: ``with Fabric(topo) as net:``.

Turns a plan into namespaces, veth pairs, addresses, static neighbours,
routes and tc through pyroute2 (one handle per namespace, no ``ip`` or
``tc`` commands), starts one switch agent per switch, and undoes all of it on
exit, on Ctrl-C and on error.  The run's record is written before anything
is created (see :mod:`emulator.fabric.runstate`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from mininet.topo import Topo
from pyroute2 import IPRoute

import emulator

from emulator.fabric import runstate
from emulator.fabric.capacity import check_capacity
from emulator.fabric.capture import Captures, stop_detached
from emulator.errors import FabricError, NeedRootError, shown
from emulator.kernel.ethtool import disable_offloads
from emulator.fabric.features import Features, probe_features, probe_namespace
from emulator.fabric.node import Node
from emulator.kernel.netns import create_namespace, entered, existing_namespaces
from emulator.fabric.plan import GATEWAY_IP, FabricPlan, NodePlan, make_plan
from emulator.kernel.processes import ProcessId, running
from emulator.fabric.ib_subnet import Subnet
from emulator.fabric.ib_subnet import assign as assign_subnet
from emulator.model.mmu import MmuConfig
from emulator.model.switch_params import derive_config
from emulator.kernel.tc import PauseGates, shape_link

AGENT_READY_TIMEOUT = 20.0
NUD_PERMANENT = 0x80
PROGRESS_INTERVAL = 3.0  # seconds between progress lines of a long build


CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


def _effective_capabilities() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


IB_SL = 0  # the service level RDMA uses on --fabric ib
HOST_IB_BUFFER = 2048 * 64  # a host RNIC takes every packet at once; it advertises the most IB credits allow


def require_root() -> None:
    """Raise NeedRootError unless we may create namespaces and configure them.

    Root is not enough inside a container without CAP_SYS_ADMIN, and that
    case must fail the same clean way, not halfway through a build.
    """
    caps = _effective_capabilities()
    if os.geteuid() != 0 or not (caps >> CAP_SYS_ADMIN & 1 and caps >> CAP_NET_ADMIN & 1):
        raise NeedRootError("this command needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces; run it with sudo")


class Fabric:
    """A fabric built from a Mininet ``Topo``; a context manager.

    ``link`` holds the default link options (``bw``, ``delay``, ``mtu``,
    ``loss``, ``drop``) for links that do not set their own.  ``fabric`` is
    ``lossless`` (PFC on priority 3) or ``lossy``; ``switch`` overrides the
    switches' buffer, PFC and ECN settings (:mod:`emulator.model.switch_params`).
    ``name`` fixes the run name (default: random); two runs cannot share
    one.  ``capture`` names a directory for one pcapng per link end;
    ``telemetry`` one for the final counters and occupancy time series.
    """

    def __init__(self, topo: Topo, link: dict[str, Any] | None = None, name: str | None = None,
                 spec: str = "", fabric: str = "lossless", switch: dict[str, str] | None = None,
                 seed: int = 1, capture: str | None = None, telemetry: str | None = None,
                 log: Callable[[str], None] | None = None) -> None:
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
        self.mmu_configs = {node.name: _switch_config(node, fabric, switch or {}) for node in self.plan.switches()}
        self.subnet = assign_subnet(self.plan) if fabric == "ib" else None
        self.capture_dir = os.path.abspath(capture) if capture else None  # `down` may run in another directory
        self.telemetry_dir = os.path.abspath(telemetry) if telemetry else None
        self.captures: Captures | None = None
        self.features: Features | None = None
        self.nodes = {n.name: Node(n.name, n.kind, n.netns, n.ip) for n in self.plan.nodes.values()}
        self.state: runstate.RunState | None = None
        self._ipr: dict[str, IPRoute] = {}
        self._gates: dict[str, PauseGates] = {}
        self._agents: dict[str, subprocess.Popen] = {}  # node -> agent
        self._stopping = threading.Event()
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
                "add", ifname=a.ifname, kind="veth", address=a.mac, mtu=a.params.mtu,
                peer={"ifname": b.ifname, "net_ns_fd": self.plan.nodes[b.node].netns, "address": b.mac, "mtu": b.params.mtu},
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
        for port in node.ports:
            index = ipr.link_lookup(ifname=port.ifname)[0]
            shape_link(ipr, index, port.params.bw_bps, port.params.mtu, host=node.kind == "host")
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

    def _agent_config(self, node: NodePlan, index: int) -> dict[str, Any]:
        common = {
            "name": node.name, "netns": node.netns, "control": self.control_path(node.name),
            "stats_file": os.path.join(self.directory, f"{node.name}.stats.json"),
        }
        if node.kind == "host":
            port = node.ports[0]
            return {**common, "ifname": port.ifname, "rate_bps": port.params.bw_bps, "mtu": port.params.mtu,
                    "mac": port.mac, "peer_mac": port.peer_mac, "ip": node.ip, "seed": self.seed * 1000 + index,
                    "verbs": runstate.verbs_socket(self.run_name, node.name), "ib": self._host_ib(node)}
        mmu = dataclasses.asdict(self.mmu_configs[node.name])
        for key in ("lossless", "strict"):
            mmu[key] = sorted(mmu[key])
        return {
            **common, "seed": self.seed * 1000 + index, "mmu": mmu,
            "occupancy_file": os.path.join(self.directory, f"{node.name}.occupancy.csv"),
            "ports": [
                {"ifname": p.ifname, "mac": p.mac, "peer_mac": p.peer_mac, "rate_bps": p.params.bw_bps,
                 "mtu": p.params.mtu, "delay_ns": p.params.delay_ns, "host_facing": self.plan.nodes[p.peer_node].kind == "host",
                 "loss": p.params.loss, "drop": list(p.params.drop)}
                for p in node.ports
            ],
            "routes": self.plan.routes[node.name],
            "ib": self._switch_ib(node),
        }

    def _host_ib(self, node: NodePlan) -> dict[str, Any] | None:
        """A host's port on the IB subnet: its LID, every GID's LID, SL and credits."""
        if self.subnet is None:
            return None
        peer = node.ports[0].peer_node
        return {"lid": self.subnet.lids[node.name], "sl": IB_SL, "sl2vl": _sl2vl(self.subnet), "vls": self.subnet.vls,
                "lids": {n.ip: self.subnet.lids[n.name] for n in self.plan.hosts()},
                "capacity": HOST_IB_BUFFER, "peer_capacity": self.mmu_configs[peer].vl_buffer}

    def _switch_ib(self, node: NodePlan) -> dict[str, Any] | None:
        """A switch's LFT (by port index), SL to VL map, and every port's credit sizes."""
        if self.subnet is None:
            return None
        index_of = {port.number: i for i, port in enumerate(node.ports)}
        peers = [self.mmu_configs[p.peer_node].vl_buffer if self.plan.nodes[p.peer_node].kind == "switch"
                 else HOST_IB_BUFFER for p in node.ports]
        return {"lft": {str(dlid): index_of[number] for dlid, number in self.subnet.lfts[node.name].items()
                        if number in index_of},
                "sl2vl": _sl2vl(self.subnet), "vls": self.subnet.vls,
                "vl_buffer": self.mmu_configs[node.name].vl_buffer, "peer_capacity": peers}

    def _start_agents(self) -> None:
        """One agent per node (switch: forwarding; host: PFC reaction)."""
        assert self.state is not None
        pending = {}
        for index, node in enumerate(self.plan.nodes.values(), start=1):
            config_path = os.path.join(self.directory, f"{node.name}.json")
            with runstate.create_file(config_path) as f:
                json.dump(self._agent_config(node, index), f)
            module = "emulator.agents.switch" if node.kind == "switch" else "emulator.agents.host"
            read_fd, write_fd = os.pipe()
            # Uninterrupted: an agent started but not recorded would outlive the run.
            with runstate.create_file(self.agent_log(node.name)) as log, runstate.uninterrupted():
                proc = subprocess.Popen(
                    [sys.executable, "-m", module, config_path, str(write_fd)],
                    pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, cwd=_package_root(),
                )
                self._agents[node.name] = proc
                self.state.agents[node.name] = proc.pid
                self.state.note_started([proc.pid])
            os.close(write_fd)
            pending[node.name] = read_fd
        self.state.save()
        deadline = time.monotonic() + AGENT_READY_TIMEOUT
        for name, fd in pending.items():
            try:
                ready = _read_with_deadline(fd, deadline)
            finally:
                os.close(fd)
            if ready != b"ready\n":
                raise FabricError(self._agent_failure(name) or f"{name}'s agent did not start within {AGENT_READY_TIMEOUT:.0f} s")
        self._log(f"started {len(self.plan.switches())} switch agents and {len(self.plan.hosts())} host agents")
        watcher = threading.Thread(target=self._watch_agents, name="agent-watch", daemon=True)
        watcher.start()

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
        return os.path.join(self.directory, f"{node}.sock")

    def agent_log(self, node: str) -> str:
        return os.path.join(self.directory, f"{node}.log")

    # --- supervision -----------------------------------------------------------------

    def _agent_failure(self, name: str) -> str | None:
        """Why switch ``name``'s agent is gone, or None while it runs."""
        proc = self._agents[name]
        if proc.poll() is None:
            return None
        try:
            with open(self.agent_log(name)) as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            lines = []
        if proc.returncode < 0:
            how = f"was killed by {signal.Signals(-proc.returncode).name}"
        else:
            how = f"exited with code {proc.returncode}"
        why = f": {lines[-1]}" if lines else ""
        return f"{self.plan.nodes[name].kind} {name} agent (pid {proc.pid}) {how}{why}"

    def check_agents(self) -> None:
        """Raise FabricError naming the first node whose agent died."""
        for name in self._agents:
            failure = self._agent_failure(name)
            if failure:
                raise FabricError(failure)

    def _watch_agents(self) -> None:
        reported: set[str] = set()
        while not self._stopping.wait(0.5):
            for name in self._agents:
                failure = self._agent_failure(name)
                if failure and name not in reported:
                    reported.add(name)
                    print(f"fabric-emu: {failure}", file=sys.stderr)

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

    def send_pfc(self, switch: str, ifname: str, priority: int, quanta: int) -> None:
        """Make ``switch`` send one PFC frame out of ``ifname`` (tests, timing)."""
        reply = query_agent(self.control_path(switch), f"pfc {ifname} {priority} {quanta}")
        if "error" in reply:
            raise FabricError(reply["error"])

    def pingall(self, timeout: float = 1.0) -> tuple[int, int, list[tuple[str, str]]]:
        """Ping every ordered host pair once; (answered, total, failed pairs)."""
        return pingall(self.hosts, timeout)

    # --- teardown ----------------------------------------------------------------------

    def detach(self) -> None:
        """Leave the fabric running after this process exits (``fabric-emu up``)."""
        assert self.state is not None
        self.state.detached = True
        self.state.owner_pid = 0
        self.state.save()
        self._stopping.set()
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
        self._stopping.set()
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
            finish_run(self.state, self._agents)
            self.state = None
        self.timings["teardown_s"] = time.monotonic() - began

    def _close_handles(self) -> None:
        for gates in self._gates.values():
            gates.close()
        self._gates.clear()
        for ipr in self._ipr.values():
            ipr.close()
        self._ipr.clear()


def _sl2vl(subnet: Subnet) -> list[int]:
    return [subnet.sl2vl[sl] for sl in range(16)]


def _switch_config(node: NodePlan, fabric: str, overrides: dict[str, str]) -> MmuConfig:
    """A switch's MMU settings from its fastest port and longest delay."""
    return derive_config(
        fabric,
        rate_bps=max(p.params.bw_bps for p in node.ports),
        delay_ns=max(p.params.delay_ns for p in node.ports),
        mtu=max(p.params.mtu for p in node.ports),
        ports=len(node.ports),
        overrides=overrides,
    )


def collect_stats(state: runstate.RunState) -> dict[str, Any]:
    """Every agent's live counters and the fabric-wide ``totals``.

    Totals over some of the agents would be wrong without saying so, so an
    agent that does not answer ends it, in one line that names the agent.
    """
    stats = {}
    for name, pid in state.agents.items():
        try:
            stats[name] = query_agent(os.path.join(state.directory, f"{name}.sock"), "stats")
        except (OSError, ValueError) as err:
            how = "is running" if (proc := state.process(pid)) and running(proc) else "is gone"
            raise FabricError(f"{state.nodes[name]['kind']} {name}'s agent (pid {pid}) does not answer "
                              f"({type(err).__name__}: {err}) and {how}; see {state.directory}/{name}.log, "
                              f"fabric-emu down --run {state.run} removes the run") from None
    return _with_totals(state, stats)


def _with_totals(state: runstate.RunState, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    switches = {n: s for n, s in stats.items() if state.nodes[n]["kind"] == "switch"}
    hosts = {n: s for n, s in stats.items() if state.nodes[n]["kind"] == "host"}
    totals = {key: sum(s["totals"][key] for s in switches.values())
              for key in ("drops", "pfc_sent", "pfc_received", "ecn_marked", "rx_frames", "tx_frames")}
    totals["pfc_received"] += sum(sum(h["pfc_received"]) for h in hosts.values())
    totals["host_paused_ns"] = sum(sum(h["paused_ns"]) for h in hosts.values())
    totals["malformed"] = (sum(s["totals"]["malformed"] for s in switches.values())
                           + sum(h["drops"]["malformed"] for h in hosts.values()))
    return {"run": state.run, "fabric": state.fabric, "totals": totals, "switches": switches, "hosts": hosts}


@runstate.uninterrupted()
def finish_run(state: runstate.RunState, children: dict[str, subprocess.Popen] | None = None) -> runstate.Removed:
    """Stop a run's captures and agents, keep its telemetry, remove the run.

    ``children`` are the agents' Popen objects when this process started
    them (so they are reaped); for a run started by ``fabric-emu up`` the
    agents are waited for by their recorded identity (pid and start time).
    Signals that arrive meanwhile wait until the run is gone.  The run is
    removed even if its captures cannot be converted or its telemetry not
    written; that error is raised afterwards.
    """
    failure: FabricError | None = None
    captures = {ifname: proc for ifname, pid in state.captures.items() if (proc := state.process(pid))}
    if captures and state.capture_dir:
        try:
            stop_detached(captures, state.capture_dir)
        except FabricError as err:
            failure = err
    try:
        _stop_agents(state, children or {})
        if state.telemetry_dir:
            write_telemetry(state, state.telemetry_dir)
    finally:
        removed = runstate.destroy(state)
    if failure:
        raise failure
    return removed


def _stop_agents(state: runstate.RunState, children: dict[str, subprocess.Popen]) -> None:
    """Ask every agent to stop (they write their final counters) and wait up to 3 s for those that heard."""
    stopping = []
    for name in state.agents:
        try:
            query_agent(os.path.join(state.directory, f"{name}.sock"), "stop", timeout=0.5)
            stopping.append(name)
        except (OSError, ValueError):
            pass  # a dead, stuck or still starting agent: destroy() kills it
    deadline = time.monotonic() + 3
    for name in stopping:
        child, recorded = children.get(name), state.process(state.agents[name])
        while time.monotonic() < deadline and not _ended(child, recorded):
            time.sleep(0.01)


def _ended(child: subprocess.Popen | None, recorded: ProcessId | None) -> bool:
    """Whether an agent exited: our child by its Popen, another's by its recorded identity."""
    if child is not None:
        return child.poll() is not None
    return recorded is None or not running(recorded)


def write_telemetry(state: runstate.RunState, directory: str) -> None:
    """The agents' final counters as stats.json (with totals), and every
    switch's queue occupancy series merged into occupancy.csv."""
    os.makedirs(directory, exist_ok=True)
    final = {}
    for name in state.agents:
        try:
            with open(os.path.join(state.directory, f"{name}.stats.json")) as f:
                final[name] = json.load(f)
        except (OSError, ValueError):
            continue  # the agent died; its death was reported
    with open(os.path.join(directory, "stats.json"), "w") as f:
        json.dump(_with_totals(state, final), f, indent=1)
    with open(os.path.join(directory, "occupancy.csv"), "w") as out:
        header_written = False
        for name in state.agents:
            path = os.path.join(state.directory, f"{name}.occupancy.csv")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                header = f.readline()
                if not header_written:
                    out.write(header)
                    header_written = True
                shutil.copyfileobj(f, out)


def query_agent(path: str, request: str, timeout: float = 2.0) -> dict[str, Any]:
    """Send one request to a switch agent's control socket; its JSON reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(request.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return json.loads(b"".join(chunks))


def pingall(hosts: list[Node], timeout: float = 1.0) -> tuple[int, int, list[tuple[str, str]]]:
    """One ICMP echo from every host to every other, all sources in parallel."""
    failed: list[tuple[str, str]] = []
    procs = []
    for src in hosts:
        targets = [dst for dst in hosts if dst is not src]
        script = " ".join(
            f"(ping -c1 -W{max(int(timeout), 1)} -q {dst.ip} >/dev/null 2>&1 || echo {dst.name}) &" for dst in targets
        ) + " wait"
        procs.append((src, src.popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)))
    for src, proc in procs:
        out, _ = proc.communicate()
        failed += [(src.name, dst) for dst in out.split()]
    total = len(hosts) * (len(hosts) - 1)
    return total - len(failed), total, failed


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


def _package_root() -> str:
    """The directory that holds the ``emulator`` package, for the agents' cwd.

    ``python -m`` looks in its cwd first, so the agents run the same copy of
    the package as the builder, not whichever one is installed.
    """
    return os.path.dirname(os.path.dirname(os.path.abspath(emulator.__file__)))
