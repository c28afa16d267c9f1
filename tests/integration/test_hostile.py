"""A switch and an RNIC that received every reproducer of issue 10 still forward and transfer.

Frames are sent for real from inside the fabric with a raw socket (what any
process in a host with CAP_NET_RAW can do); requests go for real to an
RNIC's verbs socket.  Afterwards the agents are alive, the drops are
counted in ``fabric-emu stats`` terms, and an RDMA transfer is verified.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from emulator.fabric.builder import Fabric
from emulator._core.ib import FcPacket, encode_data, encode_fc
from emulator._core.mac import mac_bytes
from emulator._core.transport import Opcode, Packet
from emulator.apps.perf import run_pair
from emulator.apps.verbs import CQ, PD, QP, Context, SendWR, WrOpcode
from emulator.fabric.agent_control import query_agent
from emulator.fabric.runstate import control_socket, verbs_socket
from emulator._core.roce import Framer
from topologies import StarTopo

SEND_FRAMES = """
import socket, sys
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((sys.argv[1], 0))
for frame in sys.argv[2:]:
    sock.send(bytes.fromhex(frame))
"""


def inject(net: Fabric, node: str, ifname: str, frames: list[bytes]) -> None:
    """Send raw frames out of ``ifname`` from inside ``node``'s namespace."""
    net[node].run([sys.executable, "-c", SEND_FRAMES, ifname, *(f.hex() for f in frames)], check=True, timeout=30)


def port(net: Fabric, node: str):
    return net.plan.nodes[node].ports[0]


def assert_still_transfers(net: Fabric) -> None:
    client, server = run_pair(net["h2"], net["h1"], "write", 1 << 20, timeout=120)
    assert client["verified"] and server["verified"]
    net.check_agents()  # every agent process still running


def test_a_switch_counts_hostile_ethernet_frames_and_forwards_on():
    with Fabric(StarTopo(2)) as net:
        h1 = port(net, "h1")
        header = mac_bytes(h1.peer_mac) + mac_bytes(h1.mac)
        good = Framer(h1.mac, h1.peer_mac, "10.0.0.1", "10.0.0.2", 50000).encode(
            Packet(Opcode.SEND_ONLY, 0x11, 1, payload=b"x" * 20))
        frames = [
            header + b"\x08\x00",                                # issue 10: 14 bytes, IPv4, no payload
            good[:14] + b"\x44" + good[15:],                     # IHL 4
            good[:16] + b"\x05\xdc" + good[18:],                 # total length beyond the frame
            header + b"\x88\x08\x01",                            # a MAC control frame of 15 bytes
        ]
        inject(net, "h1", h1.ifname, frames)
        # Hostile control requests to the switch: each one line of error, and the switch goes on.
        control = control_socket(net.state.run, "s1")
        for request in (f"pfc {h1.peer_ifname} 3 999999", f"pfc {h1.peer_ifname} 99 1", f"pfc {h1.peer_ifname} -1 1",
                        f"pfc {h1.peer_ifname} x 1", "pfc nope 3 1", "pfc", "held-routes extra"):
            reply = query_agent(control, request)
            assert set(reply) == {"error"} and "\n" not in reply["error"], (request, reply)
        assert query_agent(control, f"pfc {h1.peer_ifname} 3 0")["sent"].startswith("0180c2000001")
        assert_still_transfers(net)
        stats = net.stats()
    port_stats = stats["switches"]["s1"]["ports"][h1.peer_ifname]
    assert port_stats["rx_drops"]["malformed"] == 4
    assert stats["totals"]["malformed"] == 4


def test_an_ib_switch_and_rnic_count_hostile_packets_and_transfer_on():
    with Fabric(StarTopo(2), fabric="ib") as net:
        h1 = port(net, "h1")
        header = mac_bytes(h1.peer_mac) + mac_bytes(h1.mac) + b"\x88\xb6"
        ack = Packet(Opcode.ACK, 0x11, 1, syndrome=0x1F)
        lnh0 = bytearray(encode_data(h1.mac, h1.peer_mac, 2, 1, 1, 0, ack))
        lnh0[16] = 1 << 4  # issue 10: SL 1 on VL 0, LNH 0
        inject(net, "h1", h1.ifname, [header, header + b"\xfb", bytes(lnh0),
                                      encode_data(h1.mac, h1.peer_mac, 2, 1, 0, 9, ack),  # VL 9
                                      encode_fc(h1.mac, h1.peer_mac, FcPacket(0, 0, 7, 10))])  # credits for VL 7
        # issue 10: a data packet on VL >= 4 reaching the RNIC (from a broken switch port: sent out of s1's side)
        inject(net, "s1", h1.peer_ifname, [encode_data(h1.peer_mac, h1.mac, 1, 2, 0, vl, ack) for vl in (4, 15)])
        assert_still_transfers(net)
        stats = net.stats()
    assert stats["totals"]["malformed"] == 7
    assert stats["switches"]["s1"]["totals"]["ib_malformed"] == 5
    assert stats["hosts"]["h1"]["drops"]["malformed"] == 2


def test_an_rnic_survives_a_bogus_read_response_and_hostile_verbs_requests():
    with Fabric(StarTopo(2)) as net:
        # A QP on h1 reads 0 bytes from a QP on h2 that does not exist; "h2" answers with data.
        ctx = Context(net.run_name, "h1")
        cq = CQ(ctx)
        qp = QP(PD(ctx), cq, cq)
        qp.connect(0x99, 0, "10.0.0.2")
        qp.post_send(SendWR(1, WrOpcode.RDMA_READ, 0, 0, 0, 0, 0))
        h2 = port(net, "h2")
        response = Packet(Opcode.READ_RESPONSE_ONLY, qp.qp_num, qp.psn, syndrome=0x1F, payload=b"surprise")
        inject(net, "h2", h2.ifname, [Framer(h2.mac, h2.peer_mac, "10.0.0.2", "10.0.0.1", 49152).encode(response)])

        # Hostile verbs requests on h1's RNIC: each gets an error reply; nothing else changes.
        replies = []
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as raw:
            raw.connect(verbs_socket(net.run_name, "h1"))
            raw.settimeout(10)
            for request in (b'{"op":"create_qp","send_cq":Infinity,"recv_cq":1}', b"[" * 200_000,
                            b'{"op":"post_send","qpn":1e400,"wrs":[]}'):
                raw.send(request)
                replies.append(json.loads(raw.recv(1 << 16)))
            read, write = os.pipe()
            socket.send_fds(raw, [b'{"op":"reg_mr","addr":0,"length":4096,"access":7}'], [read])
            replies.append(json.loads(raw.recv(1 << 16)))
            os.close(read)
            os.close(write)
        deadline = time.monotonic() + 5
        while qp.query()["counters"]["malformed_packets"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        counters = qp.query()["counters"]
        assert_still_transfers(net)
        ctx.close()
    assert [set(r) for r in replies] == [{"error"}] * 4
    assert "must be a memfd" in replies[-1]["error"]
    assert counters["malformed_packets"] == 1
