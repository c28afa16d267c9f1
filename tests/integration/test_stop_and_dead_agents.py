"""One line, not a traceback, where only a real fabric shows it: a perf client
ended by SIGTERM in the middle of a transfer, and ``stats`` while an agent is
dead."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from emulator.kernel import processes
from emulator.fabric import runstate
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
