"""The command line's lifecycle: up, exec, down, clean after a crash, errors."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from emulator.kernel import processes
from emulator.fabric import runstate
from emulator.kernel.netns import existing_namespaces
from launcher_signals import stop_signals_at_default

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
            from emulator.fabric.builder import Fabric
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
    in_fabric = [proc.pid for proc in processes.in_namespaces(state.namespaces)]
    assert len(in_fabric) >= 1  # iperf3
    agents = set(state.agents.values())  # the agents' processes live in the machine's namespace, recorded
    assert agents and not agents & set(in_fabric)
    in_fabric += agents
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


HELD = """
name = "scheld"
topo = "star,3"
link = { bw = "20mbit" }
size = "64KiB"
iterations = 150
warmup = 0

[[variants]]
name = "incast"
fabric = "lossless"
collective = "incast"
"""


def _run_of(pid: int, timeout: float = 60) -> runstate.RunState:
    """The run process ``pid`` holds, once its every agent runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for state in runstate.runs():
            if state.owner_pid == pid and state.agents and state.agents_running() == len(state.agents):
                return state
        time.sleep(0.1)
    pytest.fail(f"pid {pid} built no run")


def test_clean_leaves_a_run_that_is_up_and_one_an_experiment_holds(tmp_path):
    """Issue 23: clean removed a run that was up (3/3 agents running) and killed an experiment at iteration
    145 of 201.  Now both survive, clean says what it left alone, and still removes a crashed run's debris."""
    crashed = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time
        from emulator.fabric.builder import Fabric
        from topologies import StarTopo
        with Fabric(StarTopo(n=2), name="scstale") as net:
            print("up", flush=True)
            time.sleep(120)
    """)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert crashed.stdout.readline().strip() == "up"
    crashed.kill()
    crashed.wait()
    crashed.stdout.close()
    up = cli("up", "--topo", "star,2", "--name", "sckeep")
    assert up.returncode == 0, up.stderr
    (tmp_path / "scheld.toml").write_text(HELD)
    experiment = Command("run", str(tmp_path / "scheld.toml"), "--out", str(tmp_path / "results"))
    try:
        held = _run_of(experiment.proc.pid)
        experiment.wait_for("incast iteration 3/150")
        listing = cli("list").stdout
        assert f"held by pid {experiment.proc.pid}" in listing and "up (3/3 agents running)" in listing, listing
        clean = cli("clean")
        print(f"$ fabric-emu clean\n{clean.stdout}{clean.stderr}", end="")
        assert clean.returncode == 0, clean.stderr
        assert clean.stdout.startswith("removed ") and "scstale-h1" in clean.stdout.splitlines()[0]
        assert ("run sckeep is up (3/3 agents running): left alone; fabric-emu down --run sckeep takes it down"
                in clean.stdout.splitlines())
        assert (f"run {held.run} is held by pid {experiment.proc.pid}, which removes it when it ends: left alone; "
                f"fabric-emu clean --run {held.run} --force removes it now" in clean.stdout.splitlines())
        assert not any(n.startswith("scstale-") for n in existing_namespaces())
        assert _intact("sckeep") and _intact(held.run)
        down = cli("down", "--run", held.run)  # the experiment's to end
        assert down.returncode == 1 and down.stderr == (
            f"fabric-emu: run {held.run} is held by pid {experiment.proc.pid}, which removes it when it ends: "
            f"left alone; fabric-emu down --run {held.run} --force takes it down now\n")
        assert cli("clean", "--run", "sckeep").returncode == 1 and _intact("sckeep")
        code, _ = experiment.finish()
        assert code == 0, "".join(experiment.err)
        assert "incast iteration 150/150" in "".join(experiment.err)
        ping = cli("exec", "--run", "sckeep", "h1", "--", "ping", "-c1", "-W2", "10.0.0.2")
        assert ping.returncode == 0, ping.stdout
    finally:
        if experiment.proc.poll() is None:
            experiment.interrupt(signal.SIGINT)
            experiment.finish()
        forced = cli("clean", "--run", "sckeep", "--force")
    assert forced.returncode == 0 and "sckeep-s1" in forced.stdout, forced.stdout + forced.stderr
    [stamp] = os.listdir(tmp_path / "results" / "scheld")
    results = json.load(open(tmp_path / "results" / "scheld" / stamp / "results.json"))
    assert results["complete"] and results["variants"][0]["iterations"] == 150 and results["variants"][0]["verified"]


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


def test_nodes_named_like_the_agent_processes_logs(tmp_path):
    """A node's files beside the run's own: its log is a hard link of its data-plane process's (a node
    called worker-0 once clashed with it), its agent config is no state.json (a node called state)."""
    custom = tmp_path / "named.py"
    custom.write_text(textwrap.dedent("""
        from mininet.topo import Topo

        class Named(Topo):
            def build(self):
                switch = self.addSwitch("worker-1")
                for name in ("worker-0", "state"):
                    self.addLink(self.addHost(name), switch)

        topos = {"named": Named}
    """))
    done = cli("pingall", "--custom", str(custom), "--topo", "named", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert "reachable: 2/2 pairs" in done.stdout


def test_link_delay_is_modelled_and_said_so():
    done = cli("pingall", "--topo", "star,2", "--link", "delay=5ms")
    assert done.returncode == 0, done.stderr
    assert "link delay 5 ms modelled by the switch agents" in done.stderr


# --- signals: Ctrl-C and SIGTERM during up, pingall and down; kill -9 during clean ---------------------
#
# Each command is started in a session of its own, with its stop signals at their defaults whatever
# started the suite, as an interactive shell starts a foreground job: Ctrl-C is SIGINT to that process
# group (the command and the children it did not put in sessions of their own), SIGTERM goes to the
# command alone, as `kill PID` sends it.  Moments are fixed delays
# (0.3 s: often still in Python's start-up, before the command did anything) and points in the
# command's progress.  Whatever the moment, nothing may be left: no namespace, no run directory,
# and (checked by the no_leftovers fixture) no process.


class Command:
    """A fabric-emu command running in the background; its stderr read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "emulator", *args], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=stop_signals_at_default)
        self.err: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, fragment: str, timeout: float = 60) -> None:
        """Until a line of stderr holds ``fragment``; fails the test if the command ends first."""
        deadline = time.monotonic() + timeout
        while (line := self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))) is not None:
            if fragment in line:
                return
        pytest.fail(f"the command ended before printing {fragment!r}: {''.join(self.err)}")

    def interrupt(self, signum: int) -> None:
        if signum == signal.SIGINT:
            os.killpg(self.proc.pid, signal.SIGINT)
        else:
            self.proc.send_signal(signum)

    def finish(self) -> tuple[int, str]:
        out = self.proc.stdout.read()
        self.proc.wait(timeout=120)
        self._reader.join(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode, out


def _gone(run: str) -> None:
    assert not any(n.startswith(f"{run}-") for n in existing_namespaces()), existing_namespaces()
    assert not os.path.lexists(runstate.run_dir(run))
    assert not runstate.runs()


def _handled(signum: int, code: int, err: list[str]) -> None:
    """The command had installed its handlers: one clean exit, no traceback."""
    text = "".join(err)
    assert "Traceback" not in text, text
    if signum == signal.SIGINT:
        assert code == 130, text
        assert err[-1] == "fabric-emu: interrupted; everything this command created was removed\n", text
    else:
        assert code == 143, text


SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])


@SIGNALS
@pytest.mark.parametrize("moment", ["0.3s", "1s", "building", "configuring"])
def test_signal_during_up_leaves_nothing(tmp_path, signum, moment):
    """Interrupted, up removes all it built.  After a fixed delay up may have finished first: then
    the run must be whole (and is taken down here)."""
    up = Command("up", "--topo", "star,3", "--name", "sigup", "--capture", str(tmp_path / "caps"))
    if moment.endswith("s"):
        time.sleep(float(moment[:-1]))
    else:
        up.wait_for("kernel features" if moment == "building" else "created 3 links")
    up.interrupt(signum)
    code, out = up.finish()
    if moment.endswith("s") and "run sigup is up" in out:  # the signal came as it exited, or after
        assert _intact("sigup")
        assert cli("down", "--run", "sigup").returncode == 0
    else:
        assert code != 0 and "is up" not in out, (moment, out)
    if not moment.endswith("s"):
        _handled(signum, code, up.err)
    _gone("sigup")


@SIGNALS
@pytest.mark.parametrize("moment", ["0.3s", "building", "pinging"])
def test_signal_during_pingall_leaves_nothing(signum, moment):
    """With every frame lost, each ping waits out its 5 s timeout: the signal lands while pinging."""
    before = existing_namespaces()
    pingall = Command("pingall", "--topo", "star,3", "--link", "loss=1", "--timeout", "5")
    if moment == "0.3s":
        time.sleep(0.3)
    else:
        pingall.wait_for("kernel features" if moment == "building" else "started 1 switch agents")
        time.sleep(0.3 if moment == "pinging" else 0)
    pingall.interrupt(signum)
    code, out = pingall.finish()
    assert code != 0 and "reachable" not in out, (moment, out)
    if moment != "0.3s":
        _handled(signum, code, pingall.err)
    assert existing_namespaces() == before
    assert not runstate.runs() and not runstate.orphan_dirs()


def _intact(run: str) -> bool:
    """Whether ``run`` is all there: its record, every namespace, every agent running."""
    state = runstate.load(run)
    present = existing_namespaces()
    namespaces = all(info["netns"] in present for info in state.nodes.values())
    return namespaces and state.agents_running() == len(state.agents)


def _teardown_begun(state: runstate.RunState, timeout: float = 30) -> None:
    """Until one of the run's agents has stopped: the command is tearing the run down."""
    agents = [state.process(pid) for pid in state.agents.values()]
    deadline = time.monotonic() + timeout
    while all(processes.running(a) for a in agents):
        assert time.monotonic() < deadline, "the teardown did not begin"
        time.sleep(0.002)


def _child_running(parent: int, command: str, timeout: float = 30) -> None:
    """Until ``parent`` has a child running ``command`` (polled fast: editcap takes milliseconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as f:
                children = f.read().split()
        except OSError:
            children = []
        for child in children:
            try:
                with open(f"/proc/{child}/comm") as f:
                    if f.read().strip() == command:
                        return
            except OSError:
                continue
        time.sleep(0.0005)
    pytest.fail(f"pid {parent} never ran {command}")


@SIGNALS
@pytest.mark.parametrize("moment", ["0.3s", "1s", "converting", "tearing-down"])
def test_signal_during_down_leaves_all_or_nothing(tmp_path, signum, moment):
    """A down that began tearing down finishes; one stopped before it began leaves the run whole.

    "converting": while editcap turns the captures into pcapng.  Ctrl-C reaches editcap too unless
    it runs in a session of its own; a failed conversion once aborted the teardown, and every later
    down failed on the pcaps the first had already converted.
    """
    up = cli("up", "--topo", "star,3", "--name", "sigdown", "--capture", str(tmp_path / "caps"))
    assert up.returncode == 0, up.stderr
    state = runstate.load("sigdown")
    down = Command("down", "--run", "sigdown")
    if moment == "tearing-down":
        _teardown_begun(state)
    elif moment == "converting":
        _child_running(down.proc.pid, "editcap")
    else:
        time.sleep(float(moment[:-1]))
    down.interrupt(signum)
    code, out = down.finish()
    if moment in ("converting", "tearing-down"):
        _handled(signum, code, down.err)
        assert sorted(os.listdir(tmp_path / "caps")) == sorted(f"{i}.pcapng" for i in state.captures)
    if os.path.lexists(state.directory):
        assert moment != "tearing-down" and code != 0 and _intact("sigdown"), (code, down.err)
        assert cli("down", "--run", "sigdown").returncode == 0
    _gone("sigdown")


@pytest.mark.parametrize("moment", ["0.3s", "1s", "tearing-down"])
def test_kill_9_during_clean_then_clean_again_leaves_nothing(tmp_path, moment):
    up = cli("up", "--topo", "star,3", "--name", "sigclean", "--capture", str(tmp_path / "caps"))
    assert up.returncode == 0, up.stderr
    state = runstate.load("sigclean")
    clean = Command("clean", "--run", "sigclean", "--force")  # the run is up: clean leaves it without --force
    if moment == "tearing-down":
        _teardown_begun(state)
    else:
        time.sleep(float(moment[:-1]))
    clean.interrupt(signal.SIGKILL)
    assert clean.finish()[0] == -signal.SIGKILL
    again = cli("clean", "--run", "sigclean", "--force")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    _gone("sigclean")
