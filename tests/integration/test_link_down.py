"""A switch-to-switch link pulled in a running fabric (fabric-emu link): routes go round it, and come back."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time

from emulator.fabric import runstate
from emulator.fabric.agent_control import query_agent
from emulator.fabric.builder import Fabric
from emulator.fabric.link_state import links_down, load_graph
from emulator.fabric.plan import routes_over, switch_graph
from topologies import LeafSpineTopo


def _link(net: Fabric, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", "link", "--run", net.run_name, *args],
                          capture_output=True, text=True, timeout=60)


def _tx(net: Fabric, switch: str, ifname: str) -> int:
    return sum(q["tx_frames"] for q in net.stats()["switches"][switch]["ports"][ifname]["priorities"])


def _admin_up(line: str) -> bool:
    """Whether an ``ip -o link`` line's interface is set up: its flags, not its operstate, which the kernel's
    linkwatch updates up to a second later (a cable just put back can still read "state DOWN")."""
    return "UP" in re.search(r"<([^>]*)>", line).group(1).split(",")


def _is_up(net: Fabric, switch: str, ifname: str) -> bool:
    return _admin_up(net[switch].run(["ip", "-o", "link", "show", ifname]).stdout)


def _pings(net: Fabric, count: int = 10) -> subprocess.CompletedProcess:
    return net["h1"].run(["ping", "-c", str(count), "-i", "0.05", "-W", "1", net["h2"].ip])


def test_a_link_down_sends_traffic_round_it_and_up_brings_it_back():
    with Fabric(LeafSpineTopo(leaves=2, spines=2, hosts=1), link={"bw": "50mbit"}) as net:
        graph = load_graph(net.directory)
        via_s3, via_s4 = graph.link("s1", "s3")[0], graph.link("s1", "s4")[0]
        done = _link(net, "s1", "s3", "down")
        assert done.returncode == 0, done.stderr
        assert "link s1-s3 down: routes of 4 switches recomputed" in done.stderr
        assert not _is_up(net, "s1", via_s3)
        before = (_tx(net, "s1", via_s3), _tx(net, "s1", via_s4))
        ping = _pings(net)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
        after = (_tx(net, "s1", via_s3), _tx(net, "s1", via_s4))
        assert after[0] == before[0] and after[1] >= before[1] + 10  # every request went by s4
        # The other uplink too would cut s1 off: refused in one line, nothing changed.
        refused = _link(net, "s1", "s4", "down")
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1
        assert "link s1-s4 stays up: without it the topology is not connected" in refused.stderr
        assert _is_up(net, "s1", via_s4)
        done = _link(net, "s1", "s3", "up")
        assert done.returncode == 0 and "link s1-s3 up" in done.stderr, done.stderr
        assert _is_up(net, "s1", via_s3)
        ping = _pings(net)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
        stats = net.stats()
        assert stats["totals"]["malformed"] == 0


OUTCOME = re.compile(r"fabric-emu: (link s\d-s\d (down|up): routes of 4 switches recomputed|link s\d-s\d is (up|down) "
                     r"already|link s\d-s\d stays up: without it the topology is not connected: .*)\n")


def _kernel_down(net: Fabric, graph) -> set[frozenset[str]]:
    """The switch-to-switch links whose two veth ends are set down, from the kernel (`ip -o link` in each switch);
    fails on a cable with one end set up and the other down, or whose carrier (the operstate) has not followed its
    ends' flags within 3 s (linkwatch may take a second)."""
    deadline = time.monotonic() + 3
    while True:
        flags, operstate = {}, {}
        for switch in graph.links:
            for line in net[switch].run(["ip", "-o", "link"]).stdout.splitlines():
                end = (switch, line.split(": ")[1].split("@")[0])
                flags[end], operstate[end] = _admin_up(line), re.search(r" state (\S+)", line).group(1)
        down, settled = set(), True
        for switch, ports in graph.links.items():
            for ifname, peer in ports:
                ends = ((switch, ifname), (peer, graph.link(peer, switch)[0]))
                assert flags[ends[0]] == flags[ends[1]], f"{switch}-{peer}: set up {flags[ends[0]]}, {flags[ends[1]]}"
                settled &= all(operstate[end] == ("UP" if flags[end] else "DOWN") for end in ends)
                if not flags[ends[0]]:
                    down.add(frozenset((switch, peer)))
        if settled:
            return down
        assert time.monotonic() < deadline, f"carrier does not follow the flags: {operstate}"
        time.sleep(0.1)


def _in_agreement(net: Fabric) -> set[frozenset[str]]:
    """The links down, once the kernel's cables, the run's record and the routes every switch agent holds (and its
    routes file) are found to agree."""
    graph = load_graph(net.directory)
    record = links_down(net.directory)
    assert _kernel_down(net, graph) == record
    assert graph == switch_graph(net.plan)  # the graph itself never changes
    for switch, table in routes_over(graph.without(record)).items():
        assert query_agent(net.control_path(switch), "held-routes")["routes"] == table, switch
        assert json.load(open(f"{net.directory}/{switch}.routes.json"))["routes"] == table, switch
    return record


def test_twenty_concurrent_link_commands_leave_kernel_record_and_routes_in_agreement():
    """Issue 23: `link s1 s3 down & link s1 s4 down` pulled both cables, recorded one, and s1 refused its routes
    (read half-written); `link s1 s4 up` then said "up already".  Twenty at once, on a run held by this process."""
    links = [("s1", "s3"), ("s1", "s4"), ("s2", "s3"), ("s2", "s4")]
    rng = random.Random(23)
    changes = [(*rng.choice(links), rng.choice(("down", "up"))) for _ in range(20)]
    with Fabric(LeafSpineTopo(leaves=2, spines=2, hosts=1), link={"bw": "50mbit"}) as net:
        began = time.monotonic()
        commands = [subprocess.Popen([sys.executable, "-m", "emulator", "link", "--run", net.run_name, *change],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for change in changes]
        ended = [(proc.wait(timeout=120), *proc.communicate()) for proc in commands]
        elapsed = time.monotonic() - began
        for change, (code, out, err) in zip(changes, ended):
            assert OUTCOME.fullmatch(err) and code == (1 if "stays up" in err else 0) and out == "", (change, err)
        down = _in_agreement(net)
        counts = {kind: sum(kind in err for _, _, err in ended) for kind in ("recomputed", "already", "stays up")}
        print(f"\n{' '.join('-'.join(c) for c in changes)}\nall ended in {elapsed:.1f} s: {counts}; down at the end: "
              f"{sorted('-'.join(sorted(p)) for p in down) or 'none'}; kernel, record and routes agree")
        ping = _pings(net)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
        for a, b in links:
            assert _link(net, a, b, "up").returncode == 0
        assert _in_agreement(net) == set()


def test_an_agent_that_does_not_answer_undoes_the_link_change_in_one_line():
    """Issue 23: with a switch's control socket gone, `link` printed a ConnectionRefusedError traceback after it had
    pulled the cable, wrote no record, and the cable stayed down for good."""
    with Fabric(LeafSpineTopo(leaves=2, spines=2, hosts=1), link={"bw": "50mbit"}) as net:
        os.unlink(net.control_path("s2"))
        done = _link(net, "s1", "s3", "down")
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr == ("fabric-emu: link s1-s3 down failed: s2's agent does not answer ([Errno 2] No such "
                               "file or directory); the cable and the routes were put back\n")
        graph = load_graph(net.directory)
        assert _kernel_down(net, graph) == set() == links_down(net.directory)
        for switch, table in routes_over(graph).items():
            if switch != "s2":
                assert query_agent(net.control_path(switch), "held-routes")["routes"] == table, switch
        ping = _pings(net)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout


def test_link_and_down_at_once_end_in_one_line_each_and_leave_nothing():
    """Issue 23: `link` racing `down` printed a traceback; now they take turns on the run's lock: either the link
    goes down and then the run, or the run goes and `link` says so."""
    for attempt in range(3):
        up = subprocess.run([sys.executable, "-m", "emulator", "up", "--topo", "leafspine,2,2,hosts=1", "--name",
                             "scrace"], capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stderr
        link = subprocess.Popen([sys.executable, "-m", "emulator", "link", "--run", "scrace", "s1", "s3", "down"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.1 * attempt)
        down = subprocess.run([sys.executable, "-m", "emulator", "down", "--run", "scrace"], capture_output=True,
                              text=True, timeout=120)
        _, link_err = link.communicate(timeout=120)
        assert down.returncode == 0 and down.stderr == "", down.stderr
        assert link_err in ("fabric-emu: link s1-s3 down: routes of 4 switches recomputed\n",
                            "fabric-emu: run scrace was taken down meanwhile\n",
                            "fabric-emu: no run named 'scrace' (fabric-emu list shows the runs)\n"), link_err
        assert not os.path.lexists(runstate.run_dir("scrace"))
        print(f"\nlink {0.1 * attempt:.1f} s before down: {link_err.strip()}")
