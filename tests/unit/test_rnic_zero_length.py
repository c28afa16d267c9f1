"""A zero-length RDMA WRITE with immediate on the compiled RNIC (the emulator's), RoCEv2 and native IB.

A ring all-reduce of 8 B on 8 ranks gives six ranks empty chunks (algorithms.ring_chunks): they still take their
steps, with WRITEs with immediate of no bytes.  That is valid RoCE and IB (one packet, no payload, RETH DMA
length 0), and the RNIC must send one, take one (a completion with byte_len 0 and the immediate), ACK it, and
complete its own when the peer's ACK comes.  The RC model's own test is test_rc.py's zero-length operations;
this one goes through the RNIC's verbs server and framing, as the rank processes do.  The simulated RNIC runs the
same collectives in test_sim_collective.py (uneven and empty chunks).
"""

from __future__ import annotations

import json
import socket

import pytest

from emulator._core.ib import decode_data, encode_data
from emulator._core.rc import WcOpcode, WcStatus, WrOpcode
from emulator._core.roce import Framer, decode
from emulator._core.transport import Opcode, Packet
from fake_agents import GATEWAY_MAC, HOST_MAC, LIDS, App, fake_wire, make_rnic, registered_region

assert fake_wire  # a fixture, used by name below

PEER_QPN, PEER_PSN, IMM = 0x99, 5, 0x00070003


@pytest.fixture(params=[False, True], ids=["roce", "ib"])
def nic(fake_wire, tmp_path, request):
    agent, _loop = make_rnic(str(tmp_path), ib=request.param)
    yield agent, request.param
    agent.close()


def frame_from_peer(ib: bool, packet: Packet) -> bytes:
    """``packet`` as h2 (10.0.0.2) sends it to h1 through the switch."""
    if ib:
        return encode_data(GATEWAY_MAC, HOST_MAC, LIDS["10.0.0.1"], LIDS["10.0.0.2"], 3, 3, packet)
    return Framer(GATEWAY_MAC, HOST_MAC, "10.0.0.2", "10.0.0.1", 49152).encode(packet)


def sent_packets(rnic, ib: bool) -> list[Packet]:
    """The transport packets of what the RNIC sent since the last call (on IB, not its link's flow control)."""
    frames = rnic.nic.take_sent()
    if ib:
        return [decoded.packet for decoded in map(decode_data, frames) if decoded is not None]
    return [decode(frame).packet for frame in frames]


def completions(app: App) -> list[list]:
    """Every completion delivered to the application so far."""
    found = []
    while True:
        try:
            message = json.loads(app.sock.recv(1 << 16, socket.MSG_DONTWAIT))
        except BlockingIOError:
            return found
        found += message["wc"]


def test_a_zero_length_write_with_immediate_is_sent_taken_acked_and_completed(nic, tmp_path):
    rnic, ib = nic
    app = App(rnic, str(tmp_path / "h1.verbs"))
    key = registered_region(app)
    cq = app({"op": "create_cq"})["cq"]
    made = app({"op": "create_qp", "send_cq": cq, "recv_cq": cq})
    qpn, psn = made["qpn"], made["psn"]
    assert app({"op": "connect", "qpn": qpn, "remote_qpn": PEER_QPN, "remote_psn": PEER_PSN,
                "remote_gid": "10.0.0.2", "mtu": 1024}) == {}
    assert app({"op": "post_recv", "qpn": qpn, "wrs": [[1, 0, 0, 0]]}) == {}

    # Sent: one packet, no payload, RETH DMA length 0.
    wr = [7, int(WrOpcode.RDMA_WRITE_WITH_IMM), 0x10000, 0, key, 0x5000, 0x77, IMM, True]
    assert app({"op": "post_send", "qpn": qpn, "wrs": [wr]}) == {}
    rnic.nic.after_events(1_000)
    [request] = sent_packets(rnic, ib)
    assert (request.opcode, request.dest_qp, request.psn) == (Opcode.WRITE_ONLY_IMM, PEER_QPN, psn)
    assert (request.dma_len, len(request.payload), request.imm, request.ack_req) == (0, 0, IMM, True)

    # Taken: the peer's zero-length WRITE with immediate completes the posted receive, and is ACKed.
    peer = Packet(Opcode.WRITE_ONLY_IMM, qpn, PEER_PSN, ack_req=True, va=0x10000, rkey=key, dma_len=0, imm=IMM)
    rnic.nic.receive(2_000, frame_from_peer(ib, peer))
    rnic.nic.after_events(2_000)
    [ack] = sent_packets(rnic, ib)
    assert (ack.opcode, ack.dest_qp, ack.psn, ack.syndrome >> 5) == (Opcode.ACK, PEER_QPN, PEER_PSN, 0)

    # Completed: the peer's ACK of ours completes our WRITE.
    rnic.nic.receive(3_000, frame_from_peer(ib, Packet(Opcode.ACK, qpn, psn, syndrome=0x1F)))
    rnic.nic.after_events(3_000)
    rnic.deliver(3_000)
    done = {(opcode, status): (wr_id, byte_len, imm) for wr_id, status, opcode, _qp, byte_len, imm, _at
            in completions(app)}
    assert done == {(WcOpcode.RECV_RDMA_WITH_IMM, WcStatus.SUCCESS): (1, 0, IMM),
                    (WcOpcode.RDMA_WRITE, WcStatus.SUCCESS): (7, 0, None)}
