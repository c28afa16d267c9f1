"""RDMA in simulated time (emulator.sim.host): the RC model through the switch models, against closed forms."""

from __future__ import annotations

from emulator.model.rc import SendWR, WcStatus, WrOpcode
from emulator.model.rdma_params import message_wire_bytes
from emulator.sim.host import FlatMemory, SimHost
from emulator.sim.link import PortQueue, Wire
from test_sim_switch import GBIT, host_mac, port_mac, star

MIB = 1 << 20


def mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def rdma_star(hosts: int, rate: int, fabric: str = "lossless"):
    sim, sw, queues, arrivals, pauses = star(hosts, rate, fabric, {"buffer": "400KiB", "headroom": "40KiB"})
    nodes = []
    for i in range(hosts):
        node = SimHost(sim, f"h{i + 1}", mac_text(host_mac(i)), mac_text(port_mac(i)), f"10.0.0.{i + 1}", queues[i],
                       4 * MIB)
        nodes.append(node)
        sw.connect(i, Wire(sim, rate, 0, node.receive))  # the switch's wire to the host now delivers to its RNIC
    return sim, sw, nodes


def write(src: SimHost, dst: SimHost, qpn: int, length: int, offset: int, mtu: int) -> None:
    qp = src.connect(qpn, dst, qpn, mtu)
    dst.connect(qpn, src, qpn, mtu)
    src.memory.data[:length] = bytes([src.name[-1].encode()[0]]) * length
    qp.post_send(SendWR(qpn, WrOpcode.RDMA_WRITE, 0, length, FlatMemory.KEY, offset, FlatMemory.KEY))
    src.kick(qpn)


def test_one_write_takes_its_link_time():
    sim, sw, (h1, h2) = rdma_star(2, GBIT)
    mtu = 1024
    write(h1, h2, 0x11, MIB, 0, mtu)
    sim.run()
    [done] = h1.completions
    assert done.status == WcStatus.SUCCESS and h2.memory.data[:MIB] == b"1" * MIB
    link_ns = message_wire_bytes(MIB, 1024, native_ib=False) * 8  # at 1 Gbit/s: ns = bits
    # The data's link time, one frame more through the switch, and the last ACK back: within 2% of it.
    assert link_ns < done.timestamp < link_ns * 1.02, (done.timestamp, link_ns)


def test_an_n_to_1_rdma_incast_on_lossless_takes_n_link_times_and_drops_nothing():
    senders = 3
    sim, sw, nodes = rdma_star(senders + 1, GBIT)
    mtu = 1024
    for i in range(1, senders + 1):
        write(nodes[i], nodes[0], 0x10 + i, MIB // 2, (i - 1) * (MIB // 2), mtu)
    sim.run()
    finish = max(c.timestamp for node in nodes[1:] for c in node.completions)
    assert all(c.status == WcStatus.SUCCESS for node in nodes[1:] for c in node.completions)
    assert all(node.qps[0x10 + i][0].counters["retransmitted_packets"] == 0 for i, node in enumerate(nodes[1:], 1))
    assert not any(c.drops_headroom or c.drops_threshold for port in sw.mmu.counters for c in port)
    link_ns = senders * message_wire_bytes(MIB // 2, 1024, native_ib=False) * 8
    assert link_ns < finish < link_ns * 1.02, (finish, link_ns)
    for i in range(1, senders + 1):
        assert nodes[0].memory.data[(i - 1) * (MIB // 2):i * (MIB // 2)] == str(i + 1).encode() * (MIB // 2)
