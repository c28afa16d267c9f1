"""One line, not a traceback, where only a real fabric shows it: a perf client
ended by SIGTERM in the middle of a transfer, and ``stats`` while an agent is
dead; the slow fault given twice, and idle control clients."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from emulator.kernel import processes
from emulator.fabric import runstate
from emulator.fabric.agent_control import query_agent
from emulator.fabric.builder import Fabric
from emulator.apps.perf import run_pair
from topologies import StarTopo

PERF = [sys.executable, "-m", "emulator", "perf", "write"]


def _stderr_line_with(proc: subprocess.Popen, text: str, seconds: float = 20.0) -> str:
    """Read the process's stderr until a line holds ``text``; what was read."""
    seen = ""
    deadline = time.monotonic() + seconds
    while text not in seen:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stderr.readline() if ready else ""
        assert line, f"no {text!r} on stderr; got {seen!r}"
        seen += line
    return seen


def test_a_perf_client_ended_by_sigterm_exits_143_quietly_and_the_rnic_serves_the_next():
    with Fabric(StarTopo(2), link={"bw": "20mbit"}) as net:
        server = net["h2"].popen(PERF, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        client = None
        try:
            _stderr_line_with(server, "waiting")
            client = net["h1"].popen(PERF + ["h2", "--size", "16MiB", "--iters", "4"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
            began = _stderr_line_with(client, "RDMA_Write: 4 x 16 MiB to h2")
            time.sleep(0.5)  # 64 MiB at 20 Mbit/s take 27 s: the transfer is under way
            assert client.poll() is None
            client.send_signal(signal.SIGTERM)
            out, err = client.communicate(timeout=20)
            server_out, server_err = server.communicate(timeout=20)
        finally:
            for proc in (server, client):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert (client.returncode, out, began + err) == (143, "", "fabric-emu: RDMA_Write: 4 x 16 MiB to h2\n")
        assert server.returncode == 1 and server_out == ""
        assert server_err.splitlines()[-1].startswith("fabric-emu: the perf client closed the connection")
        assert "Traceback" not in server_err
        # The client's QP and region went with it: the same hosts transfer again, verified.
        client_result, server_result = run_pair(net["h2"], net["h1"], "write", 1 << 20, iters=2, timeout=60)
        assert client_result["verified"] and server_result["verified"]
        net.check_agents()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], capture_output=True, text=True, timeout=60)


def test_stats_with_a_dead_agent_is_one_line_naming_it():
    up = _cli("up", "--topo", "star,2", "--name", "deadag")
    assert up.returncode == 0, up.stderr
    try:
        state = runstate.load("deadag")
        pid = state.agents["h1"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while processes.exists(state.process(pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        stats = _cli("stats", "--run", "deadag")
    finally:
        down = _cli("down", "--run", "deadag")
    assert down.returncode == 0, down.stderr
    assert (stats.returncode, stats.stdout) == (1, "")
    assert stats.stderr.count("\n") == 1 and "Traceback" not in stats.stderr
    assert stats.stderr.startswith(f"fabric-emu: host h1's agent (pid {pid}) does not answer (")
    assert "and is gone; see /run/fabric-emu/deadag/h1.log, fabric-emu down --run deadag removes the run" \
        in stats.stderr


class IdleClients:
    """``count`` clients connected to a control socket that never say anything; each one the agent drops connects
    again at once, so the agent always has them (a hung monitoring script, or a hostile one)."""

    def __init__(self, path: str, count: int) -> None:
        self.path = path
        self.socks = [self._connect() for _ in range(count)]
        self.reconnected = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.path)
        return sock

    def _keep(self) -> None:
        while not self._stop.is_set():
            readable, _, _ = select.select(self.socks, [], [], 0.01)
            for sock in readable:
                if sock.recv(1) == b"":  # the agent dropped it
                    sock.close()
                    self.socks[self.socks.index(sock)] = self._connect()
                    self.reconnected += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sock in self.socks:
            sock.close()


def test_slow_twice_takes_the_second_rate_and_idle_control_clients_do_not_silence_stats():
    """Issue 23: `fault h1 slow 0.5` then `slow 0.1` reported 0.1 while h1 kept 0.5; the control socket took
    `slow 1e-300` below the command line's floor; 16 idle control clients made `stats` call a healthy switch not
    answering."""
    up = _cli("up", "--topo", "star,2", "--name", "scslow", "--link", "bw=20mbit")
    assert up.returncode == 0, up.stderr
    idle = None
    try:
        first = _cli("fault", "--run", "scslow", "h1", "slow", "0.5")
        second = _cli("fault", "--run", "scslow", "h1", "slow", "0.1")
        assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
        assert second.stderr.startswith("fabric-emu: h1: takes frames at 0.1 of its link rate")
        stats = json.loads(_cli("stats", "--run", "scslow", "--json").stdout)
        assert stats["hosts"]["h1"]["fault"]["slow"]["rate_bps"] == 2_000_000  # 0.1 x 20 Mbit/s
        assert query_agent(runstate.control_socket("scslow", "h1"), "slow 1e-300") == \
            {"error": "slow '1e-300': must be 1e-06 to 0.999999"}
        refused = _cli("fault", "--run", "scslow", "h1", "slow", "1e-300")
        assert (refused.returncode, refused.stderr) == (1, "fabric-emu: fraction '1e-300': must be 1e-06 to 0.999999\n")
        assert _cli("fault", "--run", "scslow", "h1", "resume").returncode == 0
        idle = IdleClients(runstate.control_socket("scslow", "s1"), 16)
        time.sleep(0.5)
        stats = _cli("stats", "--run", "scslow")
        assert stats.returncode == 0 and "s1-eth1" in stats.stdout, stats.stderr
    finally:
        if idle is not None:
            idle.close()
        down = _cli("down", "--run", "scslow")
    assert down.returncode == 0, down.stderr
