"""The ``fabric-emu`` command line.

Mininet and containerlab habits: ``up`` builds a fabric and leaves it
running, ``exec`` runs a command in a node, ``down``/``clean`` remove what
runs created, ``pingall`` builds, checks and tears down in one go.  Every
user mistake ends in one line on stderr and a non-zero exit, never a
traceback, and nothing is left behind.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from emulator import bounds, flags
from emulator.fabric import output_dirs, runstate
from emulator.errors import FabricError, listed, printable
from emulator.fabric.agent_control import query_agent
from emulator.fabric.builder import Fabric
from emulator.fabric.link_state import set_link
from emulator.fabric.privileges import require_root
from emulator.fabric.stats import collect_stats
from emulator.fabric.teardown import finish_run
from emulator.fabric.node import Node
from emulator.fabric.plan import DEFAULT_LINK, IB_LOSS, dilated, link_params
from emulator.model.dcqcn import CC_OPTIONS, at_link, check_fabric, check_link, parse_cc
from emulator.model.nscc import NSCC_OPTIONS, parse_nscc
from emulator._core.rdma_params import PATHS_MTU
from emulator.agents.config import SPRAYS
from emulator.fabric.ib_subnet import ROUTINGS
from emulator.model.switch_params import FABRICS, SWITCH_OPTIONS, parse_overrides
from emulator.fabric.topospec import build_topo, topo_parameters
from emulator.units import format_rate, format_size, format_time, parse_size
from topologies import topos as builtin_topos


def progress(message: str) -> None:
    """Progress goes to stderr so stdout stays parseable."""
    print(f"fabric-emu: {message}", file=sys.stderr, flush=True)


def parse_options(text: str | None, allowed: dict[str, Any], what: str) -> dict[str, str]:
    """``key=value,key=value`` with the keys in ``allowed``."""
    options: dict[str, str] = {}
    if not text:
        return options
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not value.strip():
            raise FabricError(f"bad {what} option {item!r}: expected key=value, e.g. bw=50mbit")
        if key not in allowed:
            raise FabricError(f"unknown {what} option {key!r}; known: {', '.join(sorted(allowed))}")
        options[key] = value.strip()
    return options


def _fabric(args: argparse.Namespace) -> Fabric:
    """Validate the topology (within the emulator's caps) and link options, then (as root) plan a Fabric."""
    topo = build_topo(args.topo, args.custom, "emulator")
    link = parse_options(args.link, DEFAULT_LINK, "--link")
    switch = parse_options(args.switch, dict.fromkeys(SWITCH_OPTIONS), "--switch")
    wire = link_params({}, link)  # reject bad values before asking for root
    if args.fabric == "ib" and (wire.loss or wire.drop):
        raise FabricError(IB_LOSS + ": remove loss and drop from --link")
    parse_overrides(switch, args.fabric)
    if getattr(args, "spray", None) is not None and args.fabric != "uet":
        raise FabricError(f"--spray chooses UET's entropy values: --fabric {args.fabric} sends each flow on one path")
    if getattr(args, "rccc", False) and args.fabric != "uet":
        raise FabricError(f"--rccc turns on UET's receiver credits: --fabric {args.fabric} has none")
    if getattr(args, "routing", None) is not None and args.fabric != "ib":
        raise FabricError(f"--routing chooses the IB subnet manager's routing: --fabric {args.fabric} routes by ECMP")
    factor = None
    written = link.get("delay", DEFAULT_LINK["delay"])
    if getattr(args, "model", None) is not None:
        link, factor = dilated(link, args.model)
    uet = args.fabric == "uet"  # its cc is NSCC's
    nscc = parse_nscc(getattr(args, "cc", None) or "nscc") if uet else None
    cc = None if uet else parse_cc(getattr(args, "cc", None) or "none")
    check_fabric(cc, args.fabric)
    if cc is not None:  # checked after scaling, before a line is printed
        emulated = link_params({}, link)
        check_link(cc, emulated.bw_bps, emulated.mtu, factor)  # every host link is this one
    if factor is not None:
        progress(f"modelled at {args.model}: D = {factor:g}; link delay {written} (modelled) is waited "
                 f"{link['delay']} here; measured times divided by D are the modelled fabric's")
    if cc is not None:
        scaled, cc_factor = at_link(cc, emulated.bw_bps, factor)
        given = "the modelled rate's" if factor is not None else f"the constants' reference rate {format_rate(cc.reference_bps)} over the link's"
        progress(f"DCQCN with times x {cc_factor:g} and rates / {cc_factor:g} ({given}): {scaled.describe()}")
    require_root()
    return Fabric(topo, link=link, name=getattr(args, "name", None), spec=args.topo, fabric=args.fabric,
                  switch=switch, seed=args.seed, capture=getattr(args, "capture", None),
                  telemetry=getattr(args, "telemetry", None), log=progress, workers=args.workers, cc=cc,
                  dilation=factor, spray=getattr(args, "spray", None) or "reps",
                  routing=getattr(args, "routing", None) or "static", rccc=getattr(args, "rccc", False),
                  nscc=nscc)


def _pick_run(run: str | None) -> runstate.RunState:
    if run:
        return runstate.load(run)
    existing = runstate.runs()
    if not existing:
        raise FabricError("no fabric is up (start one with fabric-emu up --topo SPEC)")
    if len(existing) > 1:
        names = ", ".join(s.run for s in existing)
        raise FabricError(f"several fabrics are up ({names}); choose one with --run")
    return existing[0]


def cmd_up(args: argparse.Namespace) -> int:
    fabric = _fabric(args)
    made = output_dirs.prepare(fabric.capture_dir, fabric.telemetry_dir)  # in one line now, not at down
    try:
        fabric.start()
        fabric.detach()
    except BaseException:  # Ctrl-C or SIGTERM between the build and the hand-over too
        try:
            fabric.stop()
        finally:
            output_dirs.remove_if_empty(made)
        raise
    hosts = listed([f"{n.name}={n.ip}" for n in fabric.hosts], sep=" ")
    print(f"run {fabric.run_name} is up: {len(fabric.hosts)} hosts, {len(fabric.switches)} switches, "
          f"{len(fabric.plan.links)} links (built in {fabric.timings['build_s']:.2f} s)")
    print(f"hosts: {hosts}")
    print(f"switches: {listed([n.name for n in fabric.switches], sep=' ')}")
    print(f"next: fabric-emu exec {fabric.hosts[0].name} -- ping -c1 {fabric.hosts[-1].ip}; "
          f"fabric-emu down --run {fabric.run_name}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Take a run down, under its lock (after a ``link`` or ``fault`` under way); a run another process holds
    (an experiment, a ``with Fabric``) is that process's to end, unless ``--force``."""
    require_root()
    picked = _pick_run(args.run)
    with runstate.run_lock(picked.run) as present:
        if not present:
            raise FabricError(f"run {picked.run} was taken down meanwhile")
        state = runstate.load(picked.run)  # as it is now
        held = state.holder()
        if held and not state.detached and not args.force:
            raise FabricError(f"run {state.run} is {held}, which removes it when it ends: left alone; "
                              f"fabric-emu down --run {state.run} --force takes it down now")
        removed = finish_run(state)
    print(f"run {state.run} is down: {removed.summary()}")
    for line in removed.refused:
        progress(line)
    if state.telemetry_dir:
        print(f"telemetry: {state.telemetry_dir}/stats.json, occupancy.csv")
    if state.capture_dir:
        print(f"captures: {state.capture_dir}/*.pcapng")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """The runs on this machine.  Without root, a run's record cannot be read (its directory is root's, mode
    0700): such a run is listed by its name alone, and one line says so."""
    found = runstate.scan()
    for line in found.refused:
        progress(line)
    existing = found.runs
    if found.private:
        progress(f"without root only the runs' names are listed ({len(found.private)} of them): their records are "
                 "root's; sudo fabric-emu list shows them whole")
    if args.json:
        print(json.dumps([{"run": s.run, "topo": s.topo, "nodes": s.nodes, "owner_pid": s.owner_pid,
                           "detached": s.detached} for s in existing]
                         + [{"run": run, "topo": None, "nodes": None, "owner_pid": None, "detached": None}
                            for run in found.private], indent=1))
        return 0
    if not existing and not found.private:
        print("no fabric is up")
        return 0
    print(f"{'RUN':10} {'TOPOLOGY':20} {'HOSTS':>5} {'SWITCHES':>8}  STATUS")
    for run in found.private:
        print(f"{run:10} {'-':20} {'-':>5} {'-':>8}  unknown without root")
    for s in existing:
        kinds = [n["kind"] for n in s.nodes.values()]
        alive = s.agents_running()
        if s.detached:
            status = f"up ({alive}/{len(s.agents)} agents running)"
        elif s.owner_alive():
            status = f"held by pid {s.owner_pid}"
        else:
            status = "stale: its runner died; fabric-emu clean removes it"
        print(f"{s.run:10} {s.topo:20} {kinds.count('host'):>5} {kinds.count('switch'):>8}  {status}")
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    require_root()
    if not args.cmd:
        raise FabricError("exec needs a command: fabric-emu exec NODE -- CMD [ARGS...]")
    state = _pick_run(args.run)
    info = state.nodes.get(args.node)
    if info is None:
        raise FabricError(f"no node named {args.node!r} in run {state.run}; nodes: {' '.join(sorted(state.nodes, key=_natural))}")
    node = Node(args.node, info["kind"], info["netns"], info["ip"])
    cmd = args.cmd[1:] if args.cmd[0] == "--" else args.cmd
    # The same installation inside the node: `fabric-emu exec h1 -- fabric-emu perf ...` under sudo.
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    try:
        proc = node.popen(cmd, env=env)
    except FileNotFoundError:
        error = FabricError(f"command not found in {args.node}: {cmd[0]}")
        error.exit_code = 127
        raise error from None
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue  # the child got the same SIGINT; report its exit code


def _natural(name: str) -> tuple:
    head = name.rstrip("0123456789")
    return head, int(name[len(head):] or 0)


def cmd_pingall(args: argparse.Namespace) -> int:
    fabric = _fabric(args)
    with fabric:
        began = time.monotonic()
        answered, total, failed = fabric.pingall(timeout=args.timeout, sample=args.sample)
        check_s = time.monotonic() - began
        fabric.check_agents()
    print(f"reachable: {answered}/{total} pairs")
    if failed:
        shown = ", ".join(f"{a}->{b}" for a, b in failed[:10])
        print(f"unreachable: {shown}{' ...' if len(failed) > 10 else ''}")
    print(f"build {fabric.timings['build_s']:.2f} s, check {check_s:.2f} s, teardown {fabric.timings['teardown_s']:.2f} s")
    return 0 if answered == total else 1


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove what runs left behind; runs in use are left alone and listed (``--force`` removes them too)."""
    require_root()
    removed = runstate.clean(args.run, force=args.force)
    print(removed.summary())
    for line in removed.left:
        print(line)
    for line in removed.refused:
        progress(line)
    return 1 if removed.refused or (args.run and removed.left) else 0


def cmd_fault(args: argparse.Namespace) -> int:
    """Inject a fault into a running fabric's node: ``stall`` (a host NIC pause storm) or ``resume``."""
    require_root()
    state = _pick_run(args.run)
    node = state.nodes.get(args.node)
    if node is None or node["kind"] != "host":
        hosts = sorted((n for n, v in state.nodes.items() if v["kind"] == "host"), key=_natural)
        raise FabricError(f"no host {args.node!r} in run {state.run} (hosts: {listed(hosts)})")
    request = args.fault
    if args.fault == "slow":
        if args.fraction is None:
            raise FabricError("fault slow needs the fraction of the link rate the NIC keeps up with, e.g. 0.25")
        request = f"slow {args.fraction}"
    elif args.fraction is not None:
        raise FabricError(f"fault {args.fault} takes no fraction")
    with runstate.run_lock(state.run) as present:  # not while a down or clean removes the run
        if not present:
            raise FabricError(f"run {state.run} was taken down meanwhile")
        try:
            reply = query_agent(runstate.control_socket(state.run, args.node), request)
        except (OSError, ValueError) as err:
            raise FabricError(f"the agent of {args.node} did not answer: {err}") from None
    if "error" in reply:
        raise FabricError(f"{args.node}: {reply['error']}")
    if "slow" in reply:
        progress(f"{args.node}: takes frames at {reply['slow']:g} of its link rate, pausing its switch port when "
                 "its buffer fills")
    else:
        progress(f"{args.node}: {'stalled: it takes no frame and pauses its switch port' if reply.get('stalled') else 'receiving again'}")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    """Take a switch-to-switch link of a running fabric down, or bring it back; routes follow at once."""
    require_root()
    state = _pick_run(args.run)
    progress(set_link(state, args.a, args.b, up=args.state == "up"))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    require_root()
    state = _pick_run(args.run)
    stats = collect_stats(state)
    if args.json:
        print(json.dumps(stats, indent=1))
        return 0
    print(f"{'PORT':14} {'RX FRAMES':>10} {'TX FRAMES':>10} {'TX BYTES':>12} {'DROPS':>6} "
          f"{'PFC SENT':>8} {'PFC RCVD':>8} {'PAUSED S':>8} {'ECN':>6}")
    for switch in sorted(stats["switches"], key=_natural):
        for ifname, port in stats["switches"][switch]["ports"].items():
            prios = port["priorities"]
            print(f"{ifname:14} {sum(q['rx_frames'] for q in prios):>10} {sum(q['tx_frames'] for q in prios):>10} "
                  f"{sum(q['tx_bytes'] for q in prios):>12} {port['dropped']:>6} "
                  f"{sum(q['pfc_sent']['xoff'] + q['pfc_sent']['xon'] for q in prios):>8} "
                  f"{sum(q['pfc_received'] for q in prios):>8} {sum(q['paused_ns'] for q in prios) / 1e9:>8.3f} "
                  f"{sum(q['ecn_marked'] for q in prios):>6}")
    for host in sorted(stats["hosts"], key=_natural):
        counters = stats["hosts"][host]
        print(f"{host + ' (host)':14} {'':>10} {'':>10} {'':>12} {counters['drops']['malformed']:>6} {'':>8} "
              f"{sum(counters['pfc_received']):>8} {sum(counters['paused_ns']) / 1e9:>8.3f}")
    totals = stats["totals"]
    print(f"totals: drops {totals['drops']} (malformed {totals['malformed']}), PFC sent {totals['pfc_sent']}, "
          f"PFC received {totals['pfc_received']}, ECN marked {totals['ecn_marked']}, "
          f"lost in a lossless class and unexplained {totals['lost_lossless_unexplained']}")
    fidelity = stats["fidelity"]
    if fidelity["faithful"]:
        print("fidelity: every agent kept up with the time it models")
    else:
        print("fidelity: NOT faithful (an agent did not keep up with the time it models, or a lossless class lost "
              "frames nothing explains); these figures are not the fabric's alone:")
        for name, reasons in fidelity["unfaithful"].items():
            print(f"  {name}: {'; '.join(reasons)}")
    return 0


def cmd_calibration(args: argparse.Namespace) -> int:
    from emulator.study import calibration

    for line in calibration.lines(calibration.load()):
        print(line)
    return 0


def cmd_dissector(args: argparse.Namespace) -> int:
    from importlib import resources

    print(resources.files("emulator.study") / "dissectors" / "uet.lua")
    return 0


def cmd_topos(args: argparse.Namespace) -> int:
    for name in sorted(builtin_topos):
        factory = builtin_topos[name]
        print(f"{name}{topo_parameters(factory)}: {(factory.__doc__ or '').strip().splitlines()[0]}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from emulator.study.demo import run_demo

    link_params({}, {"bw": args.bw})  # the link's range, before the root check
    return run_demo(spec=args.topo, bw=args.bw, seconds=args.seconds, log=progress)


def cmd_perf(args: argparse.Namespace) -> int:
    from emulator.apps import perf

    if args.peer is None:
        result = perf.serve(args.test, port=args.port, log=progress)
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            verdict = "verified" if result["verified"] else f"NOT verified: {result['detail']}"
            print(f"perf {args.test} server: {result['bytes']} bytes from {result['peer']}, {verdict}, "
                  f"CPU {result['server_cpu_s'] * 1e3:.2f} ms during the transfer")
        return 0 if result["verified"] else 1
    request = perf.PerfRequest(args.test, parse_size(args.size), args.iters, args.mtu, args.seed)
    result = perf.run_client(request, args.peer, port=args.port, log=progress)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        perf.print_table(result)
    return 0 if result["verified"] else 1


def cmd_run(args: argparse.Namespace) -> int:
    from emulator.study.experiment import builtin_descriptions, load_experiment
    from emulator.study.report import main_report
    from emulator.study.runner import run_experiment

    if args.list:
        descriptions = builtin_descriptions()
        width = max(map(len, descriptions))
        for name, description in descriptions.items():
            print(f"{name:{width}}  {description}")
        return 0
    if args.experiment is None:
        raise FabricError("run needs an experiment: a built-in name (fabric-emu run --list) or a TOML file")
    experiment = load_experiment(args.experiment, args.backend, progress)
    if any(variant.backend == "emulator" for variant in experiment.variants):
        require_root()
    directory = run_experiment(experiment, args.out, progress)
    return main_report(directory)


def cmd_nccl(args: argparse.Namespace) -> int:
    """A size sweep of one collective printed as nccl-tests prints it, run as an experiment by the runner."""
    from emulator.study.nccl import Sweep, run_sweep

    link = parse_options(args.link, DEFAULT_LINK, "--link")
    if args.bw is not None:
        if "bw" in link:
            raise FabricError("--bw and --link bw=... both set the link rate; set it once")
        link["bw"] = args.bw
    for option, value in link.items():  # each option's range, before anything else, naming its flag
        try:
            link_params({}, {option: value})
        except FabricError as err:
            raise FabricError(f"{'--bw' if option == 'bw' and args.bw is not None else '--link ' + option}: {err}"
                              ) from None
    switch = parse_options(args.switch, dict.fromkeys(SWITCH_OPTIONS), "--switch")
    parse_overrides(switch, args.fabric)
    sweep = Sweep(args.collective, args.topo, args.fabric, args.backend, args.minbytes, args.maxbytes,
                  args.stepfactor, args.iters, args.warmup_iters, link, switch, args.model, args.cc, args.mtu,
                  args.seed)
    return run_sweep(sweep, args.out, args.json, sys.argv, progress, require_root)


def cmd_report(args: argparse.Namespace) -> int:
    from emulator.study.report import main_report

    return main_report(args.directory)


def cmd_workload(args: argparse.Namespace) -> int:
    from collections import Counter

    from emulator.workload.files import read_workload

    workload = read_workload(args.file)
    parallelism = ", ".join(f"{group} {size}" for group, size in sorted(workload.parallelism.items()))
    # The source, not the argument: for a directory of Chakra traces it names the rank's file read.
    lines = [f"{printable(workload.source)}: {len(workload.stages)} pipeline stage(s); groups "
             f"{parallelism or 'none given'}"]
    for number, ops in enumerate(workload.stages):
        compute = sum(op.compute_ns for op in ops) + (workload.tail_compute_ns if number == 0 else 0)
        lines.append(f"stage {number}: {len(ops)} collectives, {format_size(sum(op.size for op in ops))}, compute "
                     f"{format_time(compute) if compute else 'none given'}")
        counts: Counter[tuple[str, str]] = Counter()
        sizes: Counter[tuple[str, str]] = Counter()
        for op in ops:
            counts[(op.kind, op.group)] += 1
            sizes[(op.kind, op.group)] += op.size
        lines += [f"  {kind:<15} {group:<10} {count:>6}  {format_size(sizes[(kind, group)])}"
                  for (kind, group), count in sorted(counts.items())]
    print("\n".join(lines))  # one write: a reader that stops early (| head) closes the pipe after it
    return 0


def cmd_ibroute(args: argparse.Namespace) -> int:
    from emulator.fabric.ib_subnet import assign, dump, ibroute
    from emulator.fabric.plan import make_plan

    plan = make_plan(build_topo(args.topo, args.custom, "sim"), "ibroute", {})  # the wider caps: either backend's tables
    subnet = assign(plan, adaptive=args.routing == "adaptive")
    if args.switch is None:
        print(dump(subnet, plan), end="")
    elif args.switch not in subnet.lfts:
        raise FabricError(f"no switch named {args.switch!r}; switches: {' '.join(sorted(subnet.lfts, key=_natural))}")
    else:
        print(ibroute(subnet, plan, args.switch), end="")
    return 0


def cmd_pcap(args: argparse.Namespace) -> int:
    from emulator.study.erf import convert_directory

    paths = convert_directory(args.directory)
    if not paths:
        raise FabricError(f"no .pcapng captures in {printable(args.directory)}")
    for path in paths:
        print(path)
    return 0


def _size_flag(flag: str) -> Any:
    """An argparse type: a size in bytes (nccl-tests' 8, 1K, 64M), else one line naming the flag."""
    def size(text: str) -> int:
        try:
            return parse_size(text)
        except FabricError as err:
            raise FabricError(f"{flag}: {err}") from None
    return size


def build_parser() -> argparse.ArgumentParser:
    parser = flags.Parser(prog="fabric-emu", description="Packet-level emulator of lossless AI/HPC fabrics.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def topo_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--topo", required=True, metavar="SPEC", help="Mininet-style spec, e.g. fattree,4 or leafspine,2,2,hosts=4")
        p.add_argument("--custom", metavar="FILE", help="a Mininet custom file with a topos dict")
        p.add_argument("--link", metavar="OPTS",
                       help="default link options: bw=100mbit,delay=0us,mtu=1500,loss=0,drop=N:M")
        p.add_argument("--fabric", choices=FABRICS, default="lossless",
                       help="lossless: PFC on priority 3 (default); lossy: tail drop everywhere; ib: native IB packets "
                            "under link credits; uet: lossy with trimming, UET's transport on the RNICs")
        p.add_argument("--spray", choices=SPRAYS, default=None,
                       help="--fabric uet: how each packet's entropy value (its path) is chosen (default reps)")
        p.add_argument("--rccc", action="store_true",
                       help="--fabric uet: receiver credits (RCCC): each sender sends what its receiver granted")
        p.add_argument("--routing", choices=ROUTINGS, default=None,
                       help="--fabric ib: the subnet manager's tables alone (static, the default) or with adaptive "
                            "routing: each switch sends a packet by the least-queued port of its shortest paths")
        p.add_argument("--switch", metavar="OPTS",
                       help="switch settings, e.g. buffer=256KiB,headroom=24KiB,alpha=1,kmin=15KiB,lossless=3")
        p.add_argument("--seed", type=flags.whole("--seed", bounds.SEED), default=1,
                       help="seed of ECN marking and injected loss (0 to 2**32-1)")
        p.add_argument("--workers", type=flags.whole("--workers", bounds.WORKERS), default=None,
                       help="data-plane processes serving the agents (default: one per core)")

    p = sub.add_parser("up", help="build a fabric and leave it running")
    topo_args(p)
    p.add_argument("--name", help="run name (default: random, e.g. fe3a7c)")
    p.add_argument("--capture", metavar="DIR", help="write one pcapng per link end into DIR (at down)")
    p.add_argument("--telemetry", metavar="DIR", help="write final counters and queue occupancy into DIR (at down)")
    p.add_argument("--model", metavar="RATE",
                   help="the real fabric's link rate, e.g. 400gbit: time dilation D = RATE / bw; --link delay is "
                        "then modelled time, waited D times")
    p.add_argument("--cc", metavar="CC", default=None,
                   help="the RNICs' congestion control: none (default) or dcqcn[,key=value...] with keys "
                        f"{', '.join(CC_OPTIONS)} (modelled units; RoCE fabrics only); on --fabric uet "
                        f"nscc[,key=value...] (default) with keys {', '.join(NSCC_OPTIONS)}, or none")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="tear a running fabric down")
    p.add_argument("--run", help="which run (default: the only one)")
    p.add_argument("--force", action="store_true",
                   help="also a run another process holds (an experiment): it loses its fabric")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("list", help="list the fabrics on this machine")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("exec", help="run a command inside a node: exec NODE -- CMD ...")
    p.add_argument("--run", help="which run (default: the only one)")
    p.add_argument("node")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("pingall", help="build, ping all host pairs, tear down")
    topo_args(p)
    p.add_argument("--timeout", type=flags.real("--timeout", bounds.PING_TIMEOUT_S), default=1.0,
                   help="seconds to wait for each echo reply (0.1 to 60)")
    p.add_argument("--sample", type=flags.whole("--sample", bounds.PING_SAMPLE), default=None, metavar="N",
                   help="ping N ordered host pairs drawn at random (--seed), not all of them")
    p.set_defaults(func=cmd_pingall)

    p = sub.add_parser("clean", help="remove what runs left behind (runs in use are left alone and listed)")
    p.add_argument("--run", help="only this run")
    p.add_argument("--force", action="store_true",
                   help="also runs in use: held by a live process (an experiment) or up with agents running")
    p.set_defaults(func=cmd_clean)

    p = sub.add_parser("fault", help="inject a fault into a running fabric: fault HOST stall|resume")
    p.add_argument("--run", help="which run (default: the only one)")
    p.add_argument("node", metavar="HOST")
    p.add_argument("fault", choices=("stall", "slow", "resume"),
                   help="stall: the host's NIC stops receiving and pauses its switch port without end; slow "
                        "FRACTION: it takes frames at that share of its link rate, pausing its port when its buffer "
                        "fills; resume: ends either")
    p.add_argument("fraction", nargs="?", type=flags.real("fraction", bounds.SLOW_FRACTION), default=None,
                   help="slow only: the share of the link rate, above 0 and below 1")
    p.set_defaults(func=cmd_fault)

    p = sub.add_parser("link", help="take a link between two switches down or up: link SWITCH SWITCH down|up")
    p.add_argument("--run", help="which run (default: the only one)")
    p.add_argument("a", metavar="SWITCH")
    p.add_argument("b", metavar="SWITCH")
    p.add_argument("state", choices=("down", "up"),
                   help="down: both ends go down and every switch's routes are recomputed without the link; up: back")
    p.set_defaults(func=cmd_link)

    p = sub.add_parser("stats", help="switch counters of a running fabric")
    p.add_argument("--run", help="which run (default: the only one)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("perf", help="perftest-style RDMA bandwidth test, run inside hosts: server without PEER, client with it")
    p.add_argument("test", choices=("write", "read", "send", "tcp"), help="RDMA WRITE, READ, SEND, or a TCP stream to compare")
    p.add_argument("peer", nargs="?", help="the server's host name (e.g. h2) or address; omit to be the server")
    p.add_argument("--size", default="64KiB", help="bytes per message (default 64KiB, at most 1GiB)")
    p.add_argument("--iters", type=flags.whole("--iters", bounds.PERF_ITERS), default=100,
                   help="messages (default 100, at most 1000000)")
    p.add_argument("--mtu", type=flags.whole("--mtu", (min(PATHS_MTU), max(PATHS_MTU))), default=1024, choices=PATHS_MTU,
                   help="path MTU (default 1024)")
    p.add_argument("--port", type=flags.whole("--port", bounds.PORT), default=18515,
                   help="out-of-band TCP port (default 18515, as perftest)")
    p.add_argument("--seed", type=flags.whole("--seed", bounds.SEED), default=1,
                   help="seed of the data pattern (0 to 2**32-1)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser("run", help="run an experiment: a built-in (run --list shows them) or a TOML file")
    p.add_argument("experiment", metavar="EXPERIMENT", nargs="?", help="built-in name or path of a TOML file")
    p.add_argument("--list", action="store_true", help="list the built-in experiments and what each shows")
    p.add_argument("--out", default="results", metavar="DIR",
                   help="results root (default results/): results go to DIR/<name>/<UTC time>/")
    p.add_argument("--backend", choices=("emulator", "sim"),
                   help="run every variant on this backend: emulator (namespaces, real time, root) or sim "
                        "(the same models in simulated time, no root); default: each variant's own, emulator")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("nccl", help="a size sweep of one collective, printed as nccl-tests prints it "
                                    "(an experiment of one variant per size)")
    p.add_argument("collective", nargs="?", choices=("allreduce", "allgather", "alltoall"), default="allreduce",
                   help="nccl-tests' all_reduce_perf, all_gather_perf or alltoall_perf (default allreduce)")
    p.add_argument("--topo", required=True, metavar="SPEC", help="a topology spec, e.g. star,8")
    p.add_argument("--fabric", choices=FABRICS, default="lossless", help="as fabric-emu up (default lossless)")
    p.add_argument("--backend", choices=("emulator", "sim"), default="emulator",
                   help="emulator (namespaces, real time, root; default) or sim (simulated time, no root)")
    p.add_argument("-b", "--minbytes", type=_size_flag("-b/--minbytes"), default=8,
                   help="the smallest size (default 8; 1K, 64M: powers of 1024 as nccl-tests reads them)")
    p.add_argument("-e", "--maxbytes", type=_size_flag("-e/--maxbytes"), default=64 << 20,
                   help="the largest size (default 64M)")
    p.add_argument("-f", "--stepfactor", type=flags.whole("-f/--stepfactor", (2, 1024)), default=2,
                   help="each size this many times the one before (default 2)")
    p.add_argument("-n", "--iters", type=flags.whole("-n/--iters", bounds.ITERATIONS), default=20,
                   help="measured iterations per size (default 20, as nccl-tests)")
    p.add_argument("-w", "--warmup_iters", type=flags.whole("-w/--warmup_iters", bounds.WARMUP), default=5,
                   help="warm-up iterations per size, not measured (default 5, as nccl-tests)")
    p.add_argument("--link", metavar="OPTS", help="link options as an experiment's link table: bw=100mbit,delay=0us,"
                                                  "mtu=4200,loss=0 (experiments' defaults)")
    p.add_argument("--bw", metavar="RATE", help="the links' rate, as an experiment's bw (default 100mbit)")
    p.add_argument("--model", metavar="RATE", help="the modelled link rate (time dilation, as an experiment's model):"
                                                   " times and bandwidths printed are the modelled fabric's")
    p.add_argument("--switch", metavar="OPTS", help="switch settings, as fabric-emu up's --switch")
    p.add_argument("--cc", metavar="CC", help="the RNICs' congestion control, as an experiment's cc")
    p.add_argument("--mtu", type=int, choices=PATHS_MTU, default=None,
                   help="RDMA path MTU (default: the largest the links take, 4096 on 4200-byte links)")
    p.add_argument("--seed", type=flags.whole("--seed", bounds.SEED), default=1, help="seed (0 to 2**32-1)")
    p.add_argument("--out", default="results", metavar="DIR",
                   help="results root (default results/): the sweep's results go to DIR/nccl-<collective>/<UTC time>/")
    p.add_argument("-J", "--json", metavar="FILE", help="also write the figures as nccl-tests' -J JSON to FILE")
    p.set_defaults(func=cmd_nccl)

    p = sub.add_parser("report", help="print the table and draw the plots of a results directory (no root)")
    p.add_argument("directory", metavar="DIR")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("workload", help="what a training-workload file (AICB CSV, SimAI text, Chakra trace) holds: "
                                        "its step's collectives by kind and group, bytes and compute (no root)")
    p.add_argument("file", metavar="FILE", help="a file, or a directory of Chakra traces (<name>.<rank>.et: the "
                                                "lowest rank's is read)")
    p.set_defaults(func=cmd_workload)

    p = sub.add_parser("ibroute", help="the IB subnet manager's LIDs and forwarding tables of a topology (no root)")
    p.add_argument("--topo", required=True, metavar="SPEC")
    p.add_argument("--custom", metavar="FILE", help="a Mininet custom file with a topos dict")
    p.add_argument("--switch", metavar="NAME", help="only this switch's table, as ibroute prints it")
    p.add_argument("--routing", choices=ROUTINGS, default="static", help="adaptive: the AR groups too")
    p.set_defaults(func=cmd_ibroute)

    p = sub.add_parser("pcap", help="convert the captures of an --fabric ib run to ERF pcaps tshark reads as InfiniBand")
    p.add_argument("directory", metavar="DIR")
    p.set_defaults(func=cmd_pcap)

    p = sub.add_parser("dissector", help="the path of the Wireshark Lua dissector of the uet fabric's frames "
                                         "(wireshark -X lua_script:PATH)")
    p.set_defaults(func=cmd_dissector)

    p = sub.add_parser("topos", help="list the built-in topologies")
    p.set_defaults(func=cmd_topos)

    p = sub.add_parser("calibration", help="the fastest faithful link rates `run fidelity` measured here (no root)")
    p.set_defaults(func=cmd_calibration)

    p = sub.add_parser("demo", help="the default experiment: pingall and shaped iperf3 runs")
    p.add_argument("--topo", default="leafspine", metavar="SPEC")
    p.add_argument("--bw", default="50mbit")
    p.add_argument("--seconds", type=flags.whole("--seconds", bounds.DEMO_SECONDS), default=5,
                   help="each iperf3 run (1 to 3600, default 5)")
    p.set_defaults(func=cmd_demo)
    return parser


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
REDELIVERY_DELAY_S = 0.01  # lets the unraisable hook return before the signal comes again
_stop_signal: int | None = None  # the stop signal unwinding the command, once one has come
_unwound = False  # the command has unwound (a stop or Ctrl-C reached main): late finalizer errors are noise
_python_hook = sys.unraisablehook  # what prints finalizer errors before a stop (Python's, or a test runner's)


def _terminate(signum: int, _frame: object) -> None:
    """The first SIGTERM or SIGHUP unwinds the command: its with blocks and
    finally clauses remove what it built.  Later ones must not interrupt
    that cleanup halfway, so they are noted and dropped."""
    global _stop_signal
    _stop_signal = signum
    for stop in STOP_SIGNALS:
        if signal.getsignal(stop) is _terminate:  # one the launcher left ignored stays so
            signal.signal(stop, _already_stopping)
    raise SystemExit(128 + signum)


def _unraisable(unraisable: Any) -> None:
    """An exception Python could not raise (it came out of a finalizer).

    The interrupt itself can be one: a SIGTERM or Ctrl-C that lands while a finalizer runs raises there, and
    Python drops it (a CI run's pingall, sent SIGTERM while building, went on to print its table).  Then the
    signal is sent again from a helper thread, so the command still unwinds.

    Once a stop is under way, other finalizer errors are dropped: the signal cut an object's construction
    short (an asyncio event loop inside pyroute2, collected without its ``_thread_id``, printed a traceback
    in 1 of 16 signal tests); that says nothing about the command, whose cleanup goes on and reports itself,
    and the command's last line must stay its own (asyncio's logger is silenced then too, in ``main``).  Before a stop, Python's own hook prints them."""
    if not _unwound and unraisable.exc_type is KeyboardInterrupt:
        _send_again(signal.SIGINT)
    elif (not _unwound and unraisable.exc_type is SystemExit and _stop_signal is not None
            and getattr(unraisable.exc_value, "code", None) == 128 + _stop_signal):
        signal.signal(_stop_signal, _terminate)
        _send_again(_stop_signal)
    elif _stop_signal is None and not _unwound:
        _python_hook(unraisable)


def _send_again(signum: int) -> None:
    threading.Timer(REDELIVERY_DELAY_S, os.kill, (os.getpid(), signum)).start()


def _already_stopping(_signum: int, _frame: object) -> None:
    """A stop signal while the first one's cleanup runs: nothing more to do."""


def _exit_now(signum: int, _frame: object) -> None:
    """A stop signal after the command returned (the interpreter is exiting):
    nothing is left to clean, so exit with the signal's code at once instead
    of raising SystemExit into an atexit callback (which prints a traceback)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing to deliver
    os._exit(128 + signum)


def _ignored_by_launcher() -> set[int]:
    """The stop signals this process was started with ignored: they stay ignored.  nohup ignores SIGHUP so
    that a command outlives its terminal, and a shell without job control starts a background job with
    SIGINT ignored so that Ctrl-C at the terminal does not reach it; handling SIGHUP anyway had ended a
    `nohup fabric-emu run ... &` when its terminal closed."""
    return {signum for signum in (signal.SIGINT, *STOP_SIGNALS) if signal.getsignal(signum) is signal.SIG_IGN}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; a number out of its range raises FabricError (from its type)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    for arg in itertools.takewhile(lambda a: a != "--", argv):
        flag, sep, value = arg.partition("=")
        if flag.startswith("--") and sep and value == "--":  # argparse would make the value []
            parser.error(f"argument {flag}: expected one argument")
    args, extra = parser.parse_known_args(argv)
    # argparse fills an optional positional before the options that follow it:
    # `perf write --json h2` would leave h2 over.  Take it as the peer.
    if extra and args.command == "perf" and args.peer is None and len(extra) == 1 and not extra[0].startswith("-"):
        args.peer, extra = extra[0], []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    global _stop_signal, _unwound, _python_hook
    _stop_signal, _unwound = None, False
    kept = _ignored_by_launcher()
    _python_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        if signal.SIGINT not in kept:  # in place of __main__'s, which ends the process during the imports
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for stop in STOP_SIGNALS:
            if stop not in kept:
                signal.signal(stop, _terminate)
        args = _parse(argv)
        return args.func(args)
    except FabricError as err:
        print(f"fabric-emu: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        _unwound = True
        print("fabric-emu: interrupted; everything this command created was removed", file=sys.stderr)
        return 130
    except subprocess.TimeoutExpired as err:
        print(f"fabric-emu: timed out: {err}", file=sys.stderr)
        return 1
    except SystemExit:
        _unwound = _stop_signal is not None
        raise
    finally:
        for stop in STOP_SIGNALS:
            if stop not in kept:
                signal.signal(stop, _exit_now)
        if not _unwound:
            sys.unraisablehook = _python_hook
        else:
            # The same noise through asyncio's logger: a pyroute2 task the signal cut short, collected as the
            # interpreter exits, says "Task was destroyed but it is pending!" after the command's last line.
            logging.getLogger("asyncio").disabled = True


if __name__ == "__main__":
    sys.exit(main())
