"""The command line's lifecycle: up, exec, down, clean after a crash, errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from emulator import runstate
from emulator.netns import existing_namespaces

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, **kwargs)


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


def test_up_exec_stats_down():
    up = cli("up", "--topo", "star,3", "--name", "life1", "--link", "bw=30mbit")
    assert up.returncode == 0, up.stderr
    assert "run life1 is up: 3 hosts, 1 switches, 3 links" in up.stdout
    try:
        listing = cli("list")
        assert "life1" in listing.stdout and "up (4/4 agents running)" in listing.stdout
        ping = cli("exec", "h1", "--", "ping", "-c1", "-W2", "10.0.0.3")
        assert ping.returncode == 0 and "1 received" in ping.stdout
        assert cli("exec", "h2", "--", "sh", "-c", "exit 7").returncode == 7
        echoed = cli("exec", "h2", "--", "cat", input="through stdin\n")
        assert echoed.stdout == "through stdin\n"
        unknown = cli("exec", "h9", "--", "true")
        assert unknown.returncode != 0
        assert unknown.stderr.strip() == "fabric-emu: no node named 'h9' in run life1; nodes: h1 h2 h3 s1"
        missing = cli("exec", "h1", "--", "no-such-command")
        assert missing.returncode == 127 and missing.stderr.count("\n") == 1
        clash = cli("up", "--topo", "star,2", "--name", "life1")
        assert clash.returncode == 1 and "already exists" in clash.stderr and "Traceback" not in clash.stderr
        stats = cli("stats")
        assert stats.returncode == 0 and "s1-eth1" in stats.stdout
    finally:
        down = cli("down", "--run", "life1")
    assert down.returncode == 0, down.stderr
    assert "life1-s1" in down.stdout
    assert not any(n.startswith("life1-") for n in existing_namespaces())
    assert cli("list").stdout.strip() == "no fabric is up"


def test_clean_after_runner_killed_with_sigkill():
    namespaces_before, links_before = existing_namespaces(), _root_links()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import time
            from emulator.fabric import Fabric
            from topologies import StarTopo
            with Fabric(StarTopo(n=4), name="crash1") as net:
                net["h2"].popen(["iperf3", "-s", "-D"])
                print("up", flush=True)
                time.sleep(120)
        """)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "up"
    state = runstate.load("crash1")
    time.sleep(0.3)  # let iperf3 daemonize
    in_fabric = runstate.processes_in(state.namespaces)
    assert len(in_fabric) >= 2  # the switch agent and iperf3
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert any(n.startswith("crash1-") for n in existing_namespaces())  # debris
    clean = cli("clean")
    assert clean.returncode == 0
    assert "5 namespaces" in clean.stdout
    assert existing_namespaces() == namespaces_before
    assert _root_links() == links_before
    leftover = [open(f"/proc/{pid}/stat").read() for pid in in_fabric if os.path.exists(f"/proc/{pid}")]
    assert not leftover
    assert not os.path.exists(state.directory)
    assert cli("clean").stdout.strip() == "nothing to remove"


def test_without_capabilities_one_line_exit_2_nothing_created():
    before = existing_namespaces()
    for args in (("up", "--topo", "star"), ("pingall", "--topo", "star"), ("clean",), ("exec", "h1", "--", "true")):
        done = subprocess.run(["setpriv", "--bounding-set", "-all", "--", sys.executable, "-m", "emulator", *args],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and "needs root" in done.stderr
    assert existing_namespaces() == before
    assert not runstate.runs()


def test_custom_topology_file(tmp_path):
    custom = tmp_path / "mytopo.py"
    custom.write_text(textwrap.dedent("""
        from mininet.topo import Topo

        class LineTopo(Topo):
            "Switches in a line, one host at each end."
            def build(self, n=3):
                switches = [self.addSwitch(f"s{i + 1}") for i in range(n)]
                for a, b in zip(switches, switches[1:]):
                    self.addLink(a, b, bw=20)
                self.addLink(self.addHost("h1"), switches[0])
                self.addLink(self.addHost("h2"), switches[-1])

        topos = {"line": LineTopo}
    """))
    done = cli("pingall", "--custom", str(custom), "--topo", "line,4")
    assert done.returncode == 0, done.stderr
    assert "reachable: 2/2 pairs" in done.stdout


def test_link_delay_is_modelled_and_said_so():
    done = cli("pingall", "--topo", "star,2", "--link", "delay=5ms")
    assert done.returncode == 0, done.stderr
    assert "link delay 5 ms modelled by the switch agents" in done.stderr
