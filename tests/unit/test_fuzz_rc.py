"""The RC transport against hostile packets: it drops or errors, completes every WR, never raises.

A peer (or anyone who can put a frame on the link with the right QPN) can
send any packet a decoder produces: any opcode, PSN, RETH, AETH and
payload.  These tests inject such packets into a pair of QPs in the middle
of mixed traffic (the fake-clock harness of test_rc.py) and check what
verbs promises whatever the wire does: no exception, every posted work
request completes exactly once and in posting order, the QPs end in RTS or
ERROR, and a QP in RTS with nothing injected into its own stream still
moves its data right.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator._core.rc import RcConfig, WcOpcode, WcStatus
from emulator._core.transport import HAS_PAYLOAD, NAK_PSN_SEQUENCE_ERROR, Opcode, Packet, psn_add
from test_rc import OK, pair, read_wr, recv_wr, send_wr, write_wr

MTU = 256


def test_a_read_response_with_data_for_a_zero_length_read_is_dropped_and_counted():
    """Issue 10: the length check was skipped for a zero-length READ, and the payload write raised."""
    net = pair(RcConfig(mtu=MTU))
    a, b = net.a, net.b
    a.qp.post_send(read_wr(1, a, b, 0, 0, 0))
    request = a.qp.next_packet(0)
    assert request.opcode == Opcode.READ_REQUEST and request.dma_len == 0
    a.qp.receive(1, Packet(Opcode.READ_RESPONSE_ONLY, a.qpn, request.psn, syndrome=0x1F, payload=b"surprise"))
    assert a.counters["malformed_packets"] == 1
    assert a.qp.poll_completions() == []
    b.qp.receive(2, request)  # the real responder answers with no data: the READ completes
    a.qp.receive(3, b.qp.next_packet(3))
    assert [(c.wr_id, c.status) for c in a.qp.poll_completions()] == [(1, OK)]


def test_a_read_response_for_a_read_that_failed_its_local_check_is_dropped():
    """A READ with a bad lkey behind a WRITE is never sent and has no buffer: a response at its PSN, of the
    length its data would have, answers nothing (the model raised writing it) and the WRs complete in order."""
    net = pair(RcConfig(mtu=MTU))
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 10))
    bad = read_wr(2, a, b, 0x100, 0x100, 100)
    bad.lkey = a.key ^ 1
    a.qp.post_send(bad)
    a.qp.receive(0, Packet(Opcode.READ_RESPONSE_ONLY, a.qpn, (a.qp.una + 1) & 0xFFFFFF, syndrome=0x1F,
                           payload=bytes(100)))
    assert a.counters["duplicate_packets"] == 1
    net.run()
    assert a.results() == [(1, OK), (2, WcStatus.LOC_PROT_ERR)]


def test_a_flood_of_read_requests_is_bounded_by_the_responders_resources():
    config = RcConfig(mtu=MTU, max_inflight=8, max_rd_atomic=2)
    net = pair(config)
    a, b = net.a, net.b
    psn = b.qp.epsn
    for i in range(50):  # in order, each for 4 KiB, while B sends nothing back
        b.qp.receive(i, Packet(Opcode.READ_REQUEST, b.qpn, psn, va=b.addr(0),
                               rkey=b.key, dma_len=4096))
        psn = (psn + 16) & 0xFFFFFF
    assert b.qp.state == "ERROR"  # past max_rd_atomic + max_inflight it NAKs invalid request
    assert b.counters["naks_sent"] == 1
    assert sum(1 for entry in b.qp.out if type(entry).__name__ == "_ReadJob") == 10


@pytest.mark.parametrize("syndrome", [0x21, NAK_PSN_SEQUENCE_ERROR], ids=["rnr-nak", "sequence-nak"])
def test_a_nak_that_skips_read_responses_resends_from_the_first_missing_one(syndrome):
    """A NAK inside a READ's response PSNs implies the responses before it lost: the requester asks again
    from the first missing one, with its retransmission timer running (crates/fabric-core/proptest-regressions/
    model/rc.txt).  Both models resumed at the NAK's PSN instead: past una, with no timer, so over a dead link
    the READ never completed."""
    net = pair(RcConfig(mtu=MTU, max_inflight=3, timeout_ns=1_000_000, retry_cnt=1, rnr_retry=1),
               drop=lambda direction, packet: direction == "A>B")
    a, b = net.a, net.b
    a.qp.post_send(write_wr(1, a, b, 0, 0, 10))
    a.qp.post_send(read_wr(2, a, b, 0x1000, 0x1000, MTU + 1))  # responses at PSNs psn + 1 and psn + 2
    a.qp.post_send(write_wr(3, a, b, 0x2000, 0x2000, 0))  # behind them, outside the window of 3
    read_psn = psn_add(a.psn, 1)
    # Once both requests are out, as if from B: the WRITE arrived, the READ's second response is not welcome
    # (RNR: wait 10 us).  Through the harness's delivery, so its window check sees the WRITE acknowledged.
    nak = Packet(Opcode.ACK, a.qpn, psn_add(read_psn, 1), syndrome=syndrome)
    net.at(50_000, lambda: net._deliver(a, nak))
    net.run()
    resent = [(p.psn, p.dma_len) for p in net.sent("A", {Opcode.READ_REQUEST})][1]
    assert resent == (read_psn, MTU + 1)
    assert a.results() == [(1, OK), (2, WcStatus.RETRY_EXC_ERR), (3, WcStatus.WR_FLUSH_ERR)]


OPCODES = st.sampled_from(list(Opcode))
U32 = st.integers(0, (1 << 32) - 1)


@st.composite
def hostile_packet(draw, near_psns: list[int], keys: list[int], bases: list[int]) -> Packet:
    """A packet as a decoder could hand it over: fields in their wire ranges, often near the real ones."""
    opcode = draw(OPCODES)
    psn = draw(st.sampled_from(near_psns).flatmap(lambda p: st.integers(-3, 20).map(lambda d: (p + d) & 0xFFFFFF))
               | st.integers(0, 0xFFFFFF))
    payload = draw(st.binary(max_size=2 * MTU)) if opcode in HAS_PAYLOAD and draw(st.booleans()) else b""
    return Packet(
        opcode, 0, psn, ack_req=draw(st.booleans()), solicited=draw(st.booleans()),
        va=draw(st.sampled_from(bases).flatmap(lambda b: st.integers(-64, 1 << 16).map(lambda d: max(b + d, 0)))
                | st.integers(0, (1 << 64) - 1)),
        rkey=draw(st.sampled_from(keys) | U32), dma_len=draw(st.integers(0, 3 * MTU) | U32),
        imm=draw(U32), syndrome=draw(st.integers(0, 255)), msn=draw(st.integers(0, 0xFFFFFF)), payload=payload,
        ecn_ce=draw(st.booleans()),
    )


@given(data=st.data())
def test_fuzz_rc_transport_under_injected_packets(data):
    net = pair(RcConfig(mtu=MTU, timeout_ns=2_000_000, retry_cnt=2, rnr_retry=2))
    a, b = net.a, net.b
    posted = []
    for i in range(data.draw(st.integers(1, 6), label="work requests")):
        kind = data.draw(st.sampled_from(["write", "write_imm", "read", "send"]), label="kind")
        length = data.draw(st.integers(0, 3 * MTU), label="length")
        offset = i * 4 * MTU
        if kind == "read":
            a.qp.post_send(read_wr(i, a, b, offset, offset, length))
        elif kind == "send":
            a.qp.post_send(send_wr(i, a, offset, length))
            b.qp.post_recv(recv_wr(100 + i, b, offset, 4 * MTU))
        else:
            a.qp.post_send(write_wr(i, a, b, offset, offset, length, imm=7 if kind == "write_imm" else None))
            if kind == "write_imm":
                b.qp.post_recv(recv_wr(100 + i, b, offset, 4 * MTU))
        posted.append(i)
    near = [a.qp.una, a.qp.tx_psn, b.qp.epsn]
    injections = data.draw(st.lists(
        st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 3_000_000),
                  hostile_packet(near, [a.key, b.key], [a.host.base, b.host.base])),
        min_size=1, max_size=4), label="injections")
    for side, when, packet in injections:
        target = a if side == "A" else b
        packet.dest_qp = target.qpn
        net.at(when, lambda t=target, p=packet: t.qp.receive(net.now, p))
    net.run()

    for side in (a, b):
        assert side.qp.state in ("RTS", "ERROR")
    sends = [c for c in a.completions if c.opcode not in (WcOpcode.RECV, WcOpcode.RECV_RDMA_WITH_IMM)]
    assert [c.wr_id for c in sends] == posted  # each exactly once, in posting order
    if a.qp.state == "RTS":
        assert all(c.status == OK for c in sends)
    assert all(isinstance(c.status, WcStatus) for c in a.completions + b.completions)
