"""The RNIC's verbs socket and the agents' control socket against hostile clients.

The RNIC runs with a fake wire (fake_agents.py) and its real verbs socket in
a temporary directory; a test is an application on the other end.  What is
checked: every request gets one reply, an error reply is one line naming
the problem, the RNIC then still serves a well-behaved application (a
WRITE goes out on the wire), and nothing an application sends or leaves
unread can make the RNIC hold more than its bounds.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import stat
import tempfile
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator import bounds
from emulator.agents import base as agentlib
from emulator.agents import rnic as rnic_module
from emulator.agents.memory import ACCESS_ALL
from emulator.agents.verbs_messages import BadRequest, decode
from emulator._core.rc import WrOpcode
from fake_agents import App, close_agent, fake_wire, make_host, make_rnic, registered_region, sealed_memfd

assert fake_wire  # a fixture, used by name below (rnic: conftest.py)


@pytest.fixture
def app(rnic, tmp_path):
    application = App(rnic, str(tmp_path / "h1.verbs"))
    yield application
    if application.client.pd in rnic.clients:
        application.close()


def still_transfers(app: App) -> None:
    """A well-behaved application on the same RNIC: a 4 KiB WRITE to a peer leaves on the wire."""
    key = registered_region(app)
    cq = app({"op": "create_cq"})["cq"]
    qpn = app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})["qpn"]
    assert app({"op": "connect", "qpn": qpn, "remote_qpn": 0x99, "remote_psn": 5, "remote_gid": "10.0.0.2"}) == {}
    app.rnic.nic.take_sent()
    assert app({"op": "post_send", "qpn": qpn, "wrs": [[1, int(WrOpcode.RDMA_WRITE), 0x10000, 4096, key, 0x5000,
                                                        0x77, 0, True]]}) == {}
    app.rnic.nic.after_events(time.monotonic_ns())
    assert len(app.rnic.nic.take_sent()) == 4  # 4 KiB at path MTU 1024


def error_of(reply: dict) -> str:
    assert set(reply) == {"error"}, reply
    assert isinstance(reply["error"], str) and "\n" not in reply["error"] and 0 < len(reply["error"]) < 300
    return reply["error"]


@pytest.mark.parametrize("data, message", [
    (b'{"op":"post_send","qpn":17,"wrs":[[Infinity,0,0,0,0,0,0,0,true]]}', "Infinity is not a number"),
    (b'{"op":"create_qp","send_cq":1e400,"recv_cq":1}', "send_cq must be an integer, not float"),
    (b'{"op":"post_recv","qpn":17.5,"wrs":[]}', "qpn must be an integer, not float"),
    (b'{"op":"create_qp","send_cq":NaN,"recv_cq":1}', "NaN is not a number"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"op":"query_qp","qpn":' + b"9" * 5000 + b"}", "not JSON"),
    (b'{"op":"query_qp","qpn":' + b"9" * 400 + b"}", "out of range"),
    (b"\xff\xfe\x00garbage", "not JSON"),
    (b'["op"]', "JSON object"),
    (b'{"op":7}', "JSON object"),
    (b'{"op":"connect","qpn":true}', "must be an integer, not bool"),
    (b'{"op":"post_recv","qpn":17,"wrs":[[1,2,3]]}', "list of 4 integers"),
    (b'{"op":"' + b"x" * 10_000 + b'"}', "unknown verbs request"),
])
def test_hostile_requests_get_one_line_and_the_rnic_goes_on(app, data, message):
    """Issue 10: Infinity (OverflowError) and deep nesting (RecursionError) killed the RNIC."""
    cq = app({"op": "create_cq"})["cq"]
    assert app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})["qpn"] == 17
    assert message in error_of(app.raw(data))
    still_transfers(app)


def test_a_descriptor_that_is_no_sealed_memfd_is_refused(app):
    """Issue 10: a pipe's fd (OSError from mmap) killed the RNIC; a shrunk memfd killed it with SIGBUS."""
    read, write = os.pipe()
    unsealed = os.memfd_create("unsealed")
    os.ftruncate(unsealed, 4096)
    try:
        request = {"op": "reg_mr", "addr": 0, "length": 4096, "access": ACCESS_ALL}
        assert "must be a memfd" in error_of(app(request, [read]))
        assert "sealed against shrinking" in error_of(app(request, [unsealed]))
        assert "needs the region's memfd" in error_of(app(request))
    finally:
        for fd in (read, write, unsealed):
            os.close(fd)
    still_transfers(app)
    assert app.rnic.counters["bad_requests"] == 3


def test_a_registered_region_cannot_be_shrunk_under_the_rnic(app):
    fd = sealed_memfd(8192)
    try:
        app({"op": "reg_mr", "addr": 0, "length": 8192, "access": ACCESS_ALL}, [fd])
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 4096)
    finally:
        os.close(fd)


def test_the_verbs_socket_is_private(rnic, tmp_path):
    mode = os.stat(tmp_path / "h1.verbs").st_mode
    assert stat.S_IMODE(mode) == 0o600


def test_queues_and_resources_are_bounded(app, monkeypatch):
    monkeypatch.setattr(rnic_module, "MAX_QP_WR", 3)
    monkeypatch.setattr(rnic_module, "MAX_PER_CLIENT", 2)
    cq = app({"op": "create_cq"})["cq"]
    app({"op": "create_cq"})
    assert "at most 2 CQs" in error_of(app({"op": "create_cq"}))
    qpn = app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})["qpn"]
    app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})
    assert "at most 2 QPs" in error_of(app({"op": "create_qp", "send_cq": cq, "recv_cq": cq}))
    assert app({"op": "post_recv", "qpn": qpn, "wrs": [[1, 0, 0, 0]] * 3}) == {}
    assert "receive queue of QP" in error_of(app({"op": "post_recv", "qpn": qpn, "wrs": [[1, 0, 0, 0]]}))
    too_far = time.monotonic_ns() + 2 * 3600 * 10**9
    app({"op": "connect", "qpn": qpn, "remote_qpn": 0x99, "remote_psn": 5, "remote_gid": "10.0.0.2"})
    wr = [1, int(WrOpcode.RDMA_WRITE), 0, 0, 0, 0, 0, 0, True]
    assert "out of range" in error_of(app({"op": "post_send", "qpn": qpn, "wrs": [wr], "at": too_far}))
    assert "1 to 4096 work requests" in error_of(app({"op": "post_send", "qpn": qpn, "wrs": [wr] * 5000}))
    assert app({"op": "post_send", "qpn": qpn, "wrs": [wr] * 2, "at": time.monotonic_ns() + 10**9}) == {}
    assert app({"op": "post_send", "qpn": qpn, "wrs": [wr]}) == {}
    assert "send queue of QP" in error_of(app({"op": "post_send", "qpn": qpn, "wrs": [wr]}))


def test_an_application_that_reads_nothing_is_disconnected_not_buffered_for_ever(app, monkeypatch):
    monkeypatch.setattr(rnic_module, "MAX_OUTBOX", 3)
    app.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    app.client.conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
    request = json.dumps({"op": "query_device"}).encode()
    for _ in range(200):  # never reading a reply
        if app.client.pd not in app.rnic.clients:
            break
        app.sock.send(request)
        app.rnic._on_client(app.client, select.EPOLLIN, 0)
    assert app.client.pd not in app.rnic.clients
    assert app.rnic.counters["clients_dropped"] == 1


def test_an_oversized_request_is_refused_whole(app, monkeypatch):
    monkeypatch.setattr(rnic_module, "MESSAGE_MAX", 1000)
    assert "over 1000 bytes" in error_of(app.raw(b'{"op":"query_device","pad":"' + b"x" * 2000 + b'"}'))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: connects as user nobody to see it refused")
def test_another_user_is_refused_even_where_the_file_mode_lets_them_in(fake_wire):
    directory = tempfile.mkdtemp(prefix="fabric-emu-test-")  # not under pytest's 0700 tmp_path: nobody must reach it
    rnic, _loop = make_rnic(directory)
    try:
        os.chmod(directory, 0o755)
        os.chmod(os.path.join(directory, "h1.verbs"), 0o666)
        pid = os.fork()
        if pid == 0:  # the child connects as nobody and reports whether the RNIC hung up on it
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                sock.connect(os.path.join(directory, "h1.verbs"))
                sock.settimeout(5)
                code = 0 if sock.recv(100) == b"" else 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and rnic.counters["clients_refused"] == 0:
            rnic._on_accept(0, select.EPOLLIN, 0)
            time.sleep(0.01)
        _, status = os.waitpid(pid, 0)
        assert rnic.counters["clients_refused"] == 1 and os.waitstatus_to_exitcode(status) == 0
        assert rnic.clients == {}
    finally:
        rnic.close()
        shutil.rmtree(directory)


# --- fuzz ---------------------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)
OPS = ("query_device", "reg_mr", "dereg_mr", "create_cq", "create_qp", "connect", "post_send", "post_recv",
       "query_qp", "destroy_qp")
FIELDS = ("qpn", "addr", "length", "access", "key", "send_cq", "recv_cq", "remote_qpn", "remote_psn", "remote_gid",
          "mtu", "timeout_ns", "retry_cnt", "rnr_retry", "max_inflight", "wrs", "at")
VALUES = st.one_of(
    st.integers(-2, 40), st.integers(), st.sampled_from([0x11, 0x12, 1, 2, 1024, 4096, 2**24, 2**32, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=16), st.sampled_from(["10.0.0.2", "1", ""]),
    st.lists(st.lists(st.integers(-1, 2**33) | st.booleans(), min_size=3, max_size=10), max_size=4), JSON,
)
REQUESTS = st.one_of(
    st.binary(max_size=300),
    JSON.map(lambda value: json.dumps(value).encode()),
    st.builds(lambda op, fields: json.dumps({"op": op, **fields}, allow_nan=True).encode(),
              st.sampled_from(OPS), st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=8)),
)


@given(data=REQUESTS, with_fd=st.booleans())
def test_fuzz_verbs_requests(rnic, tmp_path, data, with_fd):
    app = App(rnic, str(tmp_path / "h1.verbs"))  # a new application each time: one may be hung up on
    fds = []
    if with_fd:
        fds = [os.memfd_create("fuzz")]
        os.ftruncate(fds[0], 4096)
    try:
        reply = app.raw(data, fds)
        if reply is None:
            assert data == b""  # the only request the RNIC answers by hanging up
        else:
            assert isinstance(reply, dict)
            if "error" in reply:
                error_of(reply)
            other = App(rnic, str(tmp_path / "h1.verbs"))
            assert "gid" in other({"op": "query_device"})  # still serving others
            other.close()
    finally:
        for fd in fds:
            os.close(fd)
        if app.client.pd in rnic.clients:
            app.close()
        else:
            app.sock.close()
    assert rnic.clients == {} and rnic.qps == {} and rnic.nic.regions() == 0  # nothing held for those gone
    assert rnic.nic.stats()["qps"] == 0


@given(data=st.binary(max_size=2000) | JSON.map(lambda v: json.dumps(v).encode()))
def test_fuzz_request_decoding(data):
    try:
        request = decode(data)
    except BadRequest as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(request, dict) and isinstance(request["op"], str)


# --- the control socket ---------------------------------------------------------------------------------------


def test_a_silent_control_client_does_not_hold_the_agent(fake_wire, tmp_path):
    """Issue 10: a client that connected and sent nothing stalled a SCHED_FIFO agent for 200 ms."""
    agent = make_host(str(tmp_path))
    path = str(tmp_path / "h1.sock")
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    talker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        silent.connect(path)
        talker.connect(path)
        talker.sendall(b"stats\n")
        agent._on_control(0, select.EPOLLIN, 0)  # accepts both, reads nothing yet: it must not wait
        assert len(agent.control_clients) == 2
        for fd in list(agent.control_clients):  # the loop's EPOLLIN for each: only the talker has data
            agent._on_control_client(fd, select.EPOLLIN, 0)
        reply = b""
        while not reply.endswith(b"\n"):
            reply += talker.recv(1 << 16)
        assert json.loads(reply)["host"] == "h1"
        assert len(agent.control_clients) == 1  # the silent one, until its deadline
        agent.expire_control(time.monotonic_ns() + 3 * 10**9)
        assert agent.control_clients == {}
        assert silent.recv(10) == b""  # closed
    finally:
        silent.close()
        talker.close()
        close_agent(agent)


def test_an_overlong_or_binary_control_request_gets_an_error(fake_wire, tmp_path):
    agent = make_host(str(tmp_path))
    try:
        assert "over 256 bytes" in agent._answer(b"x" * 300)["error"]
        assert "error" in agent._answer(b"\xff\xfe")
        assert "error" in agent._answer(b"slow " + b"9" * 5000)
        assert "error" in agent._answer(b"slow 99")
    finally:
        close_agent(agent)


def _ask(agent, client: socket.socket, request: bytes) -> dict:
    """Send ``request`` from a connected ``client``, let the agent accept and serve every client once; the reply."""
    client.sendall(request)
    agent._on_control(0, select.EPOLLIN, time.monotonic_ns())
    for fd in list(agent.control_clients):
        agent._on_control_client(fd, select.EPOLLIN, time.monotonic_ns())
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = client.recv(1 << 16)
        assert chunk, "the agent closed the connection without a reply"
        reply += chunk
    return json.loads(reply)


def test_idle_control_clients_cannot_lock_a_stats_request_out(fake_wire, tmp_path):
    """Issue 23: with 16 clients connected and silent, a 17th (fabric-emu stats) was closed at once, and stats
    called a healthy switch not answering.  The newest client takes the oldest one's place."""
    agent = make_host(str(tmp_path))
    path = str(tmp_path / "h1.sock")
    idle = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(agentlib.CONTROL_CLIENTS_MAX)]
    stats = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for client in idle:
            client.connect(path)
            agent._on_control(0, select.EPOLLIN, time.monotonic_ns())
        assert len(agent.control_clients) == agentlib.CONTROL_CLIENTS_MAX
        stats.connect(path)
        assert _ask(agent, stats, b"stats\n")["host"] == "h1"
        assert idle[0].recv(10) == b""  # the oldest silent client made room
        assert len(agent.control_clients) == agentlib.CONTROL_CLIENTS_MAX - 1  # the others wait for their deadline
    finally:
        for client in [*idle, stats]:
            client.close()
        close_agent(agent)


def test_a_request_accepted_among_reconnecting_silent_clients_is_answered(fake_wire, tmp_path):
    """Issue 24 (CI): silent clients that reconnect as soon as they are dropped, accepted in one batch with a
    stats request whose bytes the agent had not read yet, dropped the oldest in turn until the request was the
    oldest: stats saw a broken pipe.  A client with a request waiting is dropped after every silent one."""
    agent = make_host(str(tmp_path))
    path = str(tmp_path / "h1.sock")
    count = agentlib.CONTROL_CLIENTS_MAX
    first = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(count)]
    again = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(count)]
    stats = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for client in first:
            client.connect(path)
        agent._on_control(0, select.EPOLLIN, time.monotonic_ns())
        stats.connect(path)
        stats.sendall(b"stats\n")
        for client in again:  # the dropped ones back at once, all waiting in the backlog with the request
            client.connect(path)
        agent._on_control(0, select.EPOLLIN, time.monotonic_ns())
        assert len(agent.control_clients) == count
        assert _ask(agent, stats, b"")["host"] == "h1"
    finally:
        for client in [*first, *again, stats]:
            client.close()
        close_agent(agent)


def test_slow_again_changes_the_rate_and_the_range_is_the_command_lines(fake_wire, tmp_path):
    """Issue 23: `fault h1 slow 0.5` then `slow 0.1` reported 0.1 while the NIC kept 0.5; and the control socket
    took `slow 1e-300`, below the command line's floor."""
    agent = make_host(str(tmp_path))  # 100 Mbit/s
    try:
        assert agent._answer(b"slow 0.5") == {"slow": 0.5}
        assert agent.stats()["fault"]["slow"]["rate_bps"] == 50_000_000
        assert agent._answer(b"slow 0.1") == {"slow": 0.1}
        assert agent.stats()["fault"]["slow"]["rate_bps"] == 10_000_000
        low, high = bounds.SLOW_FRACTION
        for refused in ("1e-300", "0", "1", "nan", "inf", "-0.5", "0.9999999", "half"):
            reply = agent._answer(f"slow {refused}".encode())
            assert reply["error"].startswith(f"slow '{refused}': ") and f"{low:g} to {high:g}" in reply["error"], reply
        assert agent.stats()["fault"]["slow"]["rate_bps"] == 10_000_000  # a refusal changes nothing
        assert agent._answer(f"slow {low!r}".encode()) == {"slow": low}  # the ends of the range are taken
        assert agent.stats()["fault"]["slow"]["rate_bps"] == 100
        assert agent._answer(b"resume") == {"stalled": False} and agent.stats()["fault"]["slow"] is None
    finally:
        agent.rnic.close()
        close_agent(agent)


def test_a_quiet_request_is_answered_only_when_it_fails(app):
    """A rank's posts do not wait for the RNIC: a quiet request that succeeds gets no reply, one that fails gets
    its error marked quiet (the application raises it at its next read), and a quiet flag that is no boolean is
    an ordinary bad request."""
    cq = app({"op": "create_cq"})["cq"]
    qpn = app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})["qpn"]
    app.sock.send(json.dumps({"op": "post_recv", "qpn": qpn, "wrs": [[1, 0, 0, 0]], "quiet": True}).encode())
    app.rnic._on_client(app.client, select.EPOLLIN, time.monotonic_ns())
    with pytest.raises(BlockingIOError):
        app.sock.recv(1 << 16, socket.MSG_DONTWAIT)
    assert len(app.rnic.qps[qpn].early_recvs) == 1  # it was done
    reply = app({"op": "post_send", "qpn": qpn, "wrs": [[1, int(WrOpcode.RDMA_WRITE), 0, 8, 1, 0, 1, 0, True]],
                 "quiet": True})
    assert reply.pop("quiet") is True and "is not connected" in error_of(reply)
    assert "quiet must be true or false" in error_of(app({"op": "create_cq", "quiet": "yes"}))
    still_transfers(app)


def test_the_application_raises_a_quiet_error_at_its_next_read():
    from emulator.apps.verbs import Context, VerbsError

    ours, rnics = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ctx = Context.__new__(Context)
    ctx.sock, ctx.node, ctx._pending = ours, "h1", {}
    try:
        ctx.post({"op": "post_recv", "qpn": 17, "wrs": [[1, 0, 0, 0]]})
        assert json.loads(rnics.recv(1 << 16))["quiet"] is True
        rnics.send(b'{"cq":1,"wc":[[1,0,128,17,8,null,5]]}')
        rnics.send(b'{"error":"QP 17 is not connected","quiet":true}')
        assert [wc.wr_id for wc in ctx._completions(1, 8, 1.0)] == [1]  # the completion before it
        with pytest.raises(VerbsError, match="an earlier post failed: QP 17 is not connected"):
            ctx._completions(1, 8, 1.0)
    finally:
        ours.close()
        rnics.close()
