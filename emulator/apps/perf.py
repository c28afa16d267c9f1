"""perftest-style bandwidth tests on the emulated RNIC (``fabric-emu perf``).

As with ``ib_write_bw``, the same command is the server (no peer) and the
client (the server's node name or address); they exchange QPN, PSN, GID,
rkey and address over a TCP connection on port 18515 through the fabric,
then the client moves ``iters`` messages of ``size`` bytes:

- ``write``: RDMA WRITEs into the server's region;
- ``read``: RDMA READs from the server's region;
- ``send``: SENDs into receives the server posted;
- ``tcp``: the same bytes over a kernel TCP socket, to compare the CPU the
  receiving application spends (the point of RDMA).

The data is a pattern drawn from a seed both sides know, and the side that
received it checks every byte: ``verified`` is true only if the region
holds exactly what was sent.  The server measures its own CPU time from the
moment it handed out its QP to the client's ``done``, before checking.
"""

from __future__ import annotations

import json
import random
import resource
import select
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TextIO

from emulator import bounds
from emulator.fabric import runstate
from emulator.errors import FabricError, shown
from emulator.apps.jsonlines import JsonLines
from emulator.agents.memory import MAX_MR_BYTES
from emulator._core.rdma_params import PATHS_MTU
from emulator.apps.verbs import CQ, MR, PD, QP, Context, RecvWR, SendWR, VerbsError, WcStatus, WrOpcode, find_device
from emulator.units import format_size

if TYPE_CHECKING:
    from emulator.fabric.node import Node

PERF_PORT = 18515  # perftest's default port
OPERATIONS = ("write", "read", "send", "tcp")
TITLES = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send", "tcp": "TCP stream"}
OPCODES = {"write": WrOpcode.RDMA_WRITE, "read": WrOpcode.RDMA_READ, "send": WrOpcode.SEND}
TX_DEPTH = 64  # work requests the client keeps outstanding
CONNECT_TIMEOUT_S = 5.0
STALL_TIMEOUT_S = 30.0  # no completion for this long: the transfer is stuck
# What the peer's messages must carry (the server listens on the fabric: anyone may talk to it).
QP_FIELDS = {"qpn": int, "psn": int, "gid": str}
CHECK_FIELDS = {"verified": bool, "detail": str, "server_cpu_s": float}
TCP_CHUNK = 1 << 16


@dataclass(frozen=True)
class PerfRequest:
    """What the client asks for; validated before anything is set up."""

    op: str
    size: int
    iters: int
    mtu: int = 1024
    seed: int = 1

    def check(self) -> None:
        """Every field in its range (the server checks a client's request with it too)."""
        if self.op not in OPERATIONS:
            raise FabricError(f"unknown perf test {shown(self.op)}; choose {', '.join(OPERATIONS)}")
        if self.size < 1 or self.size > MAX_MR_BYTES:
            raise FabricError(f"--size {shown(self.size)}: messages are 1 B to {format_size(MAX_MR_BYTES)}")
        if self.iters < 1:
            raise FabricError(f"--iters {shown(self.iters)}: at least one iteration")
        bounds.whole("--iters", self.iters, bounds.PERF_ITERS)
        bounds.whole("--seed", self.seed, bounds.SEED)
        if self.mtu not in PATHS_MTU:
            raise FabricError(f"--mtu {shown(self.mtu)}: choose one of {', '.join(map(str, PATHS_MTU))}")
        if self.op in ("send", "tcp") and self.size * self.iters > MAX_MR_BYTES:
            raise FabricError(f"{self.op}: --size x --iters is {format_size(self.size * self.iters)}; the receiver "
                              f"keeps all of it and takes at most {format_size(MAX_MR_BYTES)}")

    @property
    def total(self) -> int:
        return self.size * self.iters


def pattern(seed: int, size: int) -> bytes:
    """The bytes both sides expect: reproducible, not compressible, not zeros."""
    return random.Random(seed).randbytes(size)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- server -----------------------------------------------------------------------------


def serve(op: str, port: int = PERF_PORT, log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Wait for one client, run its test, report; returns the server's result."""
    ctx = Context() if op != "tcp" else None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("0.0.0.0", port))
    except OSError as err:
        raise FabricError(f"cannot listen on port {port}: {err.strerror}") from None
    listener.listen(1)
    log(f"perf {op} server waiting on port {port}")
    try:
        conn, (peer, _) = listener.accept()
    finally:
        listener.close()
    channel = JsonLines(conn, "the perf client")
    try:
        hello = channel.receive("the client's request", {"op": str, "size": int, "iters": int},
                                {"mtu": int, "seed": int})
        request = PerfRequest(hello["op"], hello["size"], hello["iters"], hello.get("mtu", 1024), hello.get("seed", 1))
        try:
            if request.op != op:
                raise FabricError(f"this server runs perf {op}, the client asked for perf {request.op}")
            request.check()
            if op == "tcp":
                return _serve_tcp(channel, request, peer)
            channel.require(hello, "the client's request", QP_FIELDS)
            return _serve_rdma(ctx, channel, request, hello, peer)
        except FabricError as err:
            channel.send({"error": str(err)})
            raise
    finally:
        channel.close()
        if ctx is not None:
            ctx.close()


def _serve_rdma(ctx: Context, channel: JsonLines, request: PerfRequest, hello: dict[str, Any],
                peer: str) -> dict[str, Any]:
    pd = PD(ctx)
    cq = CQ(ctx)
    region = request.total if request.op == "send" else request.size
    mr = MR(pd, region)
    expected = pattern(request.seed, request.size)
    if request.op == "read":
        mr.buf[:] = expected
    qp = QP(pd, cq, cq)
    qp.connect(hello["qpn"], hello["psn"], hello["gid"], mtu=request.mtu)
    if request.op == "send":
        qp.post_recv([RecvWR(i, mr.addr + i * request.size, request.size, mr.lkey) for i in range(request.iters)])
    cpu_before = cpu_seconds()
    channel.send({"qpn": qp.qp_num, "psn": qp.psn, "gid": ctx.attr["gid"], "addr": mr.addr, "rkey": mr.rkey})
    channel.receive("the client's done")
    cpu = cpu_seconds() - cpu_before
    verified, detail = True, ""
    if request.op == "write":
        verified = mr.buf[:] == expected
        detail = "" if verified else "the region does not hold what the client wrote"
    elif request.op == "send":
        verified, detail = _check_receives(cq, mr, request, expected)
    result = {"verified": verified, "detail": detail, "server_cpu_s": round(cpu, 6),
              "server_counters": qp.query()["counters"]}
    channel.send(result)
    return {"op": request.op, "peer": peer, "bytes": request.total, **result}


def _check_receives(cq: CQ, mr: MR, request: PerfRequest, expected: bytes) -> tuple[bool, str]:
    received = []
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while len(received) < request.iters and time.monotonic() < deadline:
        received += cq.wait(request.iters - len(received), timeout=1.0)
    if len(received) < request.iters:
        return False, f"{len(received)} of {request.iters} receives completed"
    for wc in received:
        if wc.status != WcStatus.SUCCESS or wc.byte_len != request.size:
            return False, f"receive {wc.wr_id}: {wc.status.name}, {wc.byte_len} bytes"
        start = wc.wr_id * request.size
        if mr.buf[start:start + request.size] != expected:
            return False, f"receive {wc.wr_id} does not hold what the client sent"
    return True, ""


def _serve_tcp(channel: JsonLines, request: PerfRequest, peer: str) -> dict[str, Any]:
    buffer = bytearray(request.total)
    view = memoryview(buffer)
    cpu_before = cpu_seconds()
    channel.send({"ready": True})
    got = 0
    while got < request.total:
        n = channel.file.readinto(view[got:got + TCP_CHUNK])
        if not n:
            raise FabricError(f"the client stopped after {got} of {request.total} bytes")
        got += n
    cpu = cpu_seconds() - cpu_before
    channel.send({"received": got})
    expected = pattern(request.seed, request.size)
    verified = all(view[i * request.size:(i + 1) * request.size] == expected for i in range(request.iters))
    result = {"verified": verified, "detail": "" if verified else "the bytes differ", "server_cpu_s": round(cpu, 6)}
    channel.send(result)
    return {"op": "tcp", "peer": peer, "bytes": request.total, **result}


# --- client -----------------------------------------------------------------------------


def resolve_peer(peer: str) -> str:
    """A node name of the fabric this process runs in, or an IPv4 address."""
    try:
        return socket.inet_ntoa(socket.inet_aton(peer))
    except OSError:
        pass
    run, _ = find_device()
    info = runstate.load(run).nodes.get(peer)
    if info is None or info.get("kind") != "host":
        raise FabricError(f"no host named {peer!r} in run {run}")
    return info["ip"]


def _connect(address: str, port: int, op: str, peer: str) -> JsonLines:
    try:
        sock = socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S)
    except ConnectionRefusedError:
        raise FabricError(f"no perf server on {peer} ({address}:{port}); start one first: "
                          f"fabric-emu exec {peer} -- fabric-emu perf {op}") from None
    except OSError as err:
        raise FabricError(f"cannot reach {peer} ({address}:{port}): {err.strerror or err}") from None
    sock.settimeout(None)
    return JsonLines(sock, f"the perf server on {peer}")


def run_client(request: PerfRequest, peer: str, port: int = PERF_PORT,
               log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Run one test against the server on ``peer``; returns the result."""
    request.check()
    address = resolve_peer(peer)
    if request.op == "tcp":
        return _client_tcp(request, peer, address, port)
    with Context() as ctx:
        pd = PD(ctx)
        cq = CQ(ctx)
        mr = MR(pd, request.size)
        expected = pattern(request.seed, request.size)
        if request.op != "read":
            mr.buf[:] = expected
        qp = QP(pd, cq, cq)
        channel = _connect(address, port, request.op, peer)
        try:
            channel.send({"op": request.op, "size": request.size, "iters": request.iters, "mtu": request.mtu,
                          "seed": request.seed, "qpn": qp.qp_num, "psn": qp.psn, "gid": ctx.attr["gid"]})
            remote = channel.receive("the server's QP", {**QP_FIELDS, "addr": int, "rkey": int})
            qp.connect(remote["qpn"], remote["psn"], remote["gid"], mtu=request.mtu)
            log(f"{TITLES[request.op]}: {request.iters} x {format_size(request.size)} to {peer}")
            seconds = _transfer(qp, cq, mr, request, remote["addr"], remote["rkey"])
            counters = qp.query()["counters"]
            channel.send({"done": True})
            server = channel.receive("the server's check", CHECK_FIELDS)
        finally:
            channel.close()
        verified = server["verified"]
        if request.op == "read":
            verified = mr.buf[:] == expected
        return _result(request, peer, seconds, verified, server, counters, qp, remote)


def _transfer(qp: QP, cq: CQ, mr: MR, request: PerfRequest, remote_addr: int, rkey: int) -> float:
    """Post ``iters`` work requests, at most TX_DEPTH outstanding; seconds until the last completes."""
    opcode = OPCODES[request.op]
    posted = done = 0
    began = time.monotonic()
    last_progress = began
    while done < request.iters:
        batch = min(TX_DEPTH - (posted - done), request.iters - posted)
        if batch > 0:
            qp.post_send([SendWR(posted + i, opcode, mr.addr, request.size, mr.lkey, remote_addr, rkey)
                          for i in range(batch)])
            posted += batch
        for wc in cq.wait(TX_DEPTH, timeout=1.0):
            if wc.status != WcStatus.SUCCESS:
                state = qp.query()["state"]
                raise VerbsError(f"{TITLES[request.op]} {wc.wr_id} failed: {wc.status.name} (QP now {state})")
            done += 1
            last_progress = time.monotonic()
        if time.monotonic() - last_progress > STALL_TIMEOUT_S:
            raise VerbsError(f"no completion for {STALL_TIMEOUT_S:.0f} s ({done} of {request.iters} done)")
    return time.monotonic() - began


def _result(request: PerfRequest, peer: str, seconds: float, verified: bool, server: dict[str, Any],
            counters: dict[str, int], qp: QP | None, remote: dict[str, Any] | None) -> dict[str, Any]:
    seconds = max(seconds, 1e-9)
    result = {
        "op": request.op, "peer": peer, "size": request.size, "iters": request.iters, "bytes": request.total,
        "seconds": round(seconds, 6), "goodput_bps": round(request.total * 8 / seconds),
        "msg_rate": round(request.iters / seconds, 3), "mtu": request.mtu if qp else None,
        "retransmissions": counters.get("retransmitted_packets", 0),
        "timeouts": counters.get("timeouts", 0), "naks_received": counters.get("naks_received", 0),
        "verified": bool(verified), "server_cpu_s": server.get("server_cpu_s"),
    }
    if server.get("detail"):
        result["detail"] = server["detail"]
    if qp is not None and remote is not None:
        result["local_qpn"], result["remote_qpn"] = qp.qp_num, remote["qpn"]
    return result


def _client_tcp(request: PerfRequest, peer: str, address: str, port: int) -> dict[str, Any]:
    data = pattern(request.seed, request.size)
    channel = _connect(address, port, "tcp", peer)
    try:
        channel.send({"op": "tcp", "size": request.size, "iters": request.iters, "seed": request.seed})
        channel.receive("the server's ready")
        began = time.monotonic()
        for _ in range(request.iters):
            channel.file.write(data)
        channel.file.flush()
        channel.receive("the server's receipt")
        seconds = time.monotonic() - began
        server = channel.receive("the server's check", CHECK_FIELDS)
    finally:
        channel.close()
    return _result(request, peer, seconds, server["verified"], server, {}, None, None)


def print_table(result: dict[str, Any], out: TextIO = sys.stdout) -> None:
    """perftest's table, with Mbit/s (emulated links are tens to hundreds of Mbit/s)."""
    line = "-" * 88
    print(line, file=out)
    print(f"{TITLES[result['op']] + ' BW Test':^88}", file=out)
    transport = "RC over RoCEv2" if result["op"] != "tcp" else "kernel TCP"
    mtu = f"   MTU: {result['mtu']}" if result.get("mtu") else ""
    print(f" Peer: {result['peer']}   Transport: {transport}{mtu}", file=out)
    if "local_qpn" in result:
        print(f" local QPN {result['local_qpn']:#08x}   remote QPN {result['remote_qpn']:#08x}", file=out)
    print(line, file=out)
    print(f" {'#bytes':>10} {'#iterations':>12} {'BW average[Mb/sec]':>19} {'MsgRate[Mpps]':>14} "
          f"{'Retrans':>8} {'ServerCPU[ms]':>13} {'Verified':>9}", file=out)
    cpu = result.get("server_cpu_s")
    print(f" {result['size']:>10} {result['iters']:>12} {result['goodput_bps'] / 1e6:>19.2f} "
          f"{result['msg_rate'] / 1e6:>14.6f} {result['retransmissions']:>8} "
          f"{'' if cpu is None else f'{cpu * 1e3:.2f}':>13} {'yes' if result['verified'] else 'NO':>9}", file=out)
    print(line, file=out)


# --- from outside the hosts (tests, scripts, benchmarks) ------------------------------------


def run_pair(server: "Node", client: "Node", test: str, size: int, iters: int = 1, mtu: int = 1024,
             port: int = PERF_PORT, timeout: float = 300.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start ``fabric-emu perf TEST`` on ``server``, run the client on ``client``; both JSON results."""
    [pair] = run_concurrent(server, [client], test, size, iters, mtu, port, timeout)
    return pair


def run_concurrent(server: "Node", clients: list["Node"], test: str, size: int, iters: int = 1, mtu: int = 1024,
                   port: int = PERF_PORT, timeout: float = 300.0) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One server per client on ``server`` (ports ``port``, ``port + 1``, ...), all clients at once.

    Returns (client result, server result) per client.  With several
    clients this is an incast of RDMA transfers into one host.
    """
    base = [sys.executable, "-m", "emulator", "perf", test]
    servers = [server.popen(base + ["--json", "--port", str(port + i)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for i in range(len(clients))]
    running: list[subprocess.Popen] = []
    try:
        for proc in servers:
            _wait_for_banner(proc, server.name)
        running = [client.popen(base + [server.name, "--size", str(size), "--iters", str(iters), "--mtu", str(mtu),
                                         "--port", str(port + i), "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE,
                                text=True) for i, client in enumerate(clients)]
        client_out = [proc.communicate(timeout=timeout) for proc in running]
        server_out = [proc.communicate(timeout=30) for proc in servers]
    finally:
        for proc in servers + running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = []
    for client, (out, err), (server_json, server_err) in zip(clients, client_out, server_out):
        if not out.strip():
            raise FabricError(f"perf {test} client on {client.name} failed: {err.strip()}")
        if not server_json.strip():
            raise FabricError(f"perf {test} server on {server.name} failed: {server_err.strip()}")
        results.append((json.loads(out), json.loads(server_json)))
    return results


def _wait_for_banner(proc: subprocess.Popen, node: str, seconds: float = 20.0) -> None:
    """Until the server says it is listening (it prints that on stderr)."""
    deadline = time.monotonic() + seconds
    banner = ""
    while "waiting" not in banner:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stderr.readline() if ready else ""
        if not line:
            raise FabricError(f"perf server on {node} did not start: {banner}{proc.stderr.read() if ready else ''}")
        banner += line
