"""The RNIC's times come from its caller: timed posts are released at the ``now`` of the deadline that reaches
their start, completions carry the ``now`` of their delivery.

The RNIC runs with a fake wire (fake_agents.py); the clock is the test's.
"""

from __future__ import annotations

import json
import socket
import time


from emulator._core.mac import mac_bytes
from emulator._core.pfc import encode_pfc
from emulator._core.rc import WcStatus, WrOpcode
from fake_agents import GATEWAY_MAC, App, fake_wire, registered_region

assert fake_wire  # a fixture, used by name below (rnic: conftest.py)


def connected_qp(app: App, **options: int) -> tuple[int, int, int]:
    """A QP connected to a peer that never answers, with a 4 KiB region: (qpn, cq, key)."""
    key = registered_region(app)
    cq = app({"op": "create_cq"})["cq"]
    qpn = app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})["qpn"]
    assert app({"op": "connect", "qpn": qpn, "remote_qpn": 0x99, "remote_psn": 5, "remote_gid": "10.0.0.2",
                **options}) == {}
    return qpn, cq, key


def write(key: int, wr_id: int = 1) -> list[int]:
    return [wr_id, int(WrOpcode.RDMA_WRITE), 0x10000, 1024, key, 0x5000, 0x77, 0, True]


def test_a_timed_post_is_released_at_the_now_that_reaches_its_start(rnic, tmp_path):
    """The RNIC holds a post with a start on its own deadline (no Python wakes for it) and releases it with the
    ``now`` the deadline came at; its lateness is the monitor's ``starts``."""
    app = App(rnic, str(tmp_path / "h1.verbs"))
    qpn, _cq, key = connected_qp(app)
    start = time.monotonic_ns() + 10**9
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key)], "at": start}) == {}
    rnic.nic.after_events(start - 1)
    assert rnic.nic.next_deadline() == (start, "start")
    assert rnic.nic.queue_lengths(qpn) == (1, 0)  # a timed post counts against the send queue
    assert rnic.nic.take_sent() == [] and app({"op": "query_qp", "qpn": qpn})["released_ns"] == 0
    rnic.nic.deadline(start, start + 7)
    rnic.nic.after_events(start + 7)
    assert len(rnic.nic.take_sent()) == 1
    assert app({"op": "query_qp", "qpn": qpn})["released_ns"] == start + 7
    assert rnic.nic.next_deadline()[1] != "start"
    starts = rnic.nic.fidelity_figures()[4]
    assert starts.count == 1 and 7 <= starts.quantile(0.5) <= 8


def test_a_post_after_its_start_goes_at_once_and_is_late_by_what_it_missed(rnic, tmp_path):
    """Its deadline is armed for the moment it came (never before ``now``, as every deadline of the RNIC), but
    the monitor's ``starts`` count from the start it missed."""
    app = App(rnic, str(tmp_path / "h1.verbs"))
    qpn, _cq, key = connected_qp(app)
    now = time.monotonic_ns()
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key)], "at": now - 1_000}) == {}
    assert rnic.nic.after_events(now) == now
    rnic.nic.deadline(now, now + 5)
    rnic.nic.after_events(now + 5)
    assert len(rnic.nic.take_sent()) == 1
    starts = rnic.nic.fidelity_figures()[4]
    assert starts.count == 1 and 1_005 <= starts.quantile(0.5) <= 1_300  # its bucket's upper bound
    assert rnic.nic.fidelity_figures()[1].count == 0  # no link timer was late


def test_a_destroyed_qps_timed_posts_leave_with_it(rnic, tmp_path):
    app = App(rnic, str(tmp_path / "h1.verbs"))
    qpn, _cq, key = connected_qp(app)
    start = time.monotonic_ns() + 10**9
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key)], "at": start}) == {}
    assert app({"op": "destroy_qp", "qpn": qpn}) == {}
    assert rnic.nic.next_deadline() is None
    rnic.nic.deadline(start, start)  # a stale wake-up releases nothing
    rnic.nic.after_events(start)
    assert rnic.nic.take_sent() == []


def test_completions_carry_the_now_of_their_delivery(rnic, tmp_path):
    app = App(rnic, str(tmp_path / "h1.verbs"))
    qpn, cq, key = connected_qp(app, timeout_ns=8192, retry_cnt=0)
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key, wr_id=42)]}) == {}
    rnic.nic.after_events(1_000)
    deadline, kind = rnic.nic.next_deadline()
    assert kind == "timeout"
    rnic.nic.deadline(deadline, deadline)  # no ACK, no retry left: the WRITE completes in error
    rnic.deliver(deadline + 123)
    message = json.loads(app.sock.recv(1 << 16, socket.MSG_DONTWAIT))
    assert message["cq"] == cq
    [[wr_id, status, _opcode, qp_num, _length, _imm, stamp]] = message["wc"]
    assert (wr_id, status, qp_num, stamp) == (42, WcStatus.RETRY_EXC_ERR, qpn, deadline + 123)


def _wire(rnic):
    """The RNIC's monitored wire so far."""
    return rnic.nic.fidelity_figures()[0]


def _wire_with_a_full_kernel_queue(rnic, app, key, qpn) -> int:
    """Four frames go at 0, a fifth finds the kernel's queue full: returns when the four have left."""
    nic = rnic.nic
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key, wr_id=i) for i in range(4)]}) == {}
    nic.after_events(0)
    sent = nic.take_sent()
    assert len(sent) == 4 and _wire(rnic).stall_ns == 0
    frame_ns = len(sent[0]) * 8_000_000_000 // rnic.rate_bps
    assert nic.wire_end == 4 * frame_ns
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key, wr_id=9)]}) == {}
    nic.room(0)  # the kernel queue is full
    nic.after_events(1_000)
    nic.room(None)
    return nic.wire_end


def test_the_monitor_counts_the_wire_idle_while_a_frame_waited_for_the_agent(rnic, tmp_path):
    """The kernel's queue ran dry 2 ms before the agent came back with the frame it had ready: a 2 ms stall."""
    app = App(rnic, str(tmp_path / "h1.verbs"))
    qpn, _cq, key = connected_qp(app)
    free_at = _wire_with_a_full_kernel_queue(rnic, app, key, qpn)
    rnic.nic.writable(free_at + 2_000_000)
    assert len(rnic.nic.take_sent()) == 1  # the fifth
    assert _wire(rnic).stall_ns == _wire(rnic).longest_stall_ns == 2_000_000


def test_a_pfc_hold_idles_the_rnic_wire_by_right(rnic, tmp_path):
    app = App(rnic, str(tmp_path / "h1.verbs"))
    qpn, _cq, key = connected_qp(app)
    free_at = _wire_with_a_full_kernel_queue(rnic, app, key, qpn)
    rnic.nic.receive_pfc(2_000, encode_pfc(mac_bytes(GATEWAY_MAC), {3: 65535}))  # paused, four frames' time still queued
    rnic.nic.receive_pfc(free_at + 2_000_000, encode_pfc(mac_bytes(GATEWAY_MAC), {3: 0}))
    assert rnic.nic.gate_changes() == [(3, True), (3, False)]
    rnic.nic.writable(free_at + 2_000_000)  # the agent is back as the queue resumes: no stall
    assert len(rnic.nic.take_sent()) == 1 and _wire(rnic).stall_ns == 0  # the fifth


def test_an_rnic_with_nothing_to_send_lets_its_wire_idle(rnic, tmp_path):
    app = App(rnic, str(tmp_path / "h1.verbs"))
    qpn, _cq, key = connected_qp(app)
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key)]}) == {}
    rnic.nic.after_events(0)
    assert app({"op": "post_send", "qpn": qpn, "wrs": [write(key, wr_id=2)]}) == {}
    rnic.nic.after_events(50_000_000)  # posted 50 ms later: the wire was free, nothing waited
    wire = _wire(rnic)
    assert len(rnic.nic.take_sent()) == 2 and wire.stall_ns == 0 and wire.frames == 2
