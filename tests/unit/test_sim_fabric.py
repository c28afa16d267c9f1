"""A fabric plan in simulated time (emulator.study.sim_fabric): RDMA across it against closed forms."""

from __future__ import annotations

import pytest

from emulator.fabric.plan import make_plan
from emulator.model.rc import SendWR, WcStatus, WrOpcode
from emulator.model.rdma_params import message_wire_bytes
from emulator.sim.host import FlatMemory
from emulator.study.sim_fabric import build_sim_fabric
from topologies import LeafSpineTopo, StarTopo

MIB = 1 << 20
MTU = 4096


def write(fabric, src: str, dst: str, qpn: int, length: int, offset: int) -> None:
    a, b = fabric.hosts[src], fabric.hosts[dst]
    qp = a.connect(qpn, b, qpn, MTU)
    b.connect(qpn, a, qpn, MTU)
    qp.post_send(SendWR(qpn, WrOpcode.RDMA_WRITE, 0, length, FlatMemory.KEY, offset, FlatMemory.KEY))
    a.kick(qpn)


@pytest.mark.parametrize("fabric_name", ["lossless", "lossy"])
def test_an_incast_on_a_planned_star(fabric_name):
    plan = make_plan(StarTopo(n=4), "sim", {"bw": "100mbit", "mtu": 4200})
    fabric = build_sim_fabric(plan, fabric_name, memory_bytes=4 * MIB)
    for i, sender in enumerate(("h2", "h3", "h4")):
        write(fabric, sender, "h1", 0x11 + i, MIB, i * MIB)
    fabric.sim.run()
    done = [c for name in ("h2", "h3", "h4") for c in fabric.hosts[name].completions]
    assert len(done) == 3 and all(c.status == WcStatus.SUCCESS for c in done)
    bound = 3 * message_wire_bytes(MIB, 4096, native_ib=False) * 8 * 10**9 // (100 * 10**6)
    finish = max(c.timestamp for c in done)
    drops = sum(c.drops_threshold + c.drops_headroom for port in fabric.switches["s1"].mmu.counters for c in port)
    if fabric_name == "lossless":
        assert drops == 0 and bound < finish < bound * 1.02, (finish, bound)
    else:
        assert drops > 0 and finish > bound  # lossy: the switch drops, the transport resends (go-back-N, timeouts)


def test_a_write_across_a_leaf_spine_goes_by_the_planned_routes():
    plan = make_plan(LeafSpineTopo(leaves=2, spines=2, hosts=1), "sim", {"bw": "1gbit", "delay": "10us"})
    fabric = build_sim_fabric(plan, "lossless", memory_bytes=4 * MIB)
    write(fabric, "h1", "h2", 0x11, MIB, 0)
    fabric.sim.run()
    [done] = fabric.hosts["h1"].completions
    assert done.status == WcStatus.SUCCESS
    link_ns = message_wire_bytes(MIB, 4096, native_ib=False) * 8  # 1 Gbit/s
    # Four cables of 10 us each way (h1-s1-spine-s2-h2), store and forward at three switches, the last ACK back.
    assert link_ns + 4 * 10_000 < done.timestamp < link_ns * 1.02 + 8 * 10_000
    spines = [sum(c.tx_frames for port in fabric.switches[s].mmu.counters for c in port) for s in ("s3", "s4")]
    # 256 data frames (1 MiB at 4096) and 16 ACKs (one per 16 packets): each direction hashes to one spine.
    assert sum(spines) == 256 + 16 and max(spines) >= 256


@pytest.mark.parametrize("switch, within", [
    (None, (2.5, 3.5)),  # 16-frame VL buffers, grants paced to 500 us: credit-starved, ~2.9x the link time
    ({"vl_buffer": "128KiB", "fc_floor": "0"}, (1.0, 1.08)),  # the link time and four 1 us cables (~1.05x)
])
def test_one_ib_flow_at_400_gbit_is_paced_by_the_switch_credit_settings(switch, within):
    """The switch's ``vl_buffer`` and ``fc_floor`` reach both ends of every link (the switch's IB plane and the
    host's port), and decide whether one flow fills a 400 Gbit/s link: what the scale experiment sets."""
    plan = make_plan(StarTopo(n=2), "sim", {"bw": "400gbit", "delay": "1us", "mtu": 4200})
    fabric = build_sim_fabric(plan, "ib", switch=switch, memory_bytes=4 * MIB)
    floor = 0 if switch else 500_000
    pacing = max(floor, 2 * 4214 * 8 // 400)  # credits.fabric_min_interval_ns: two frame times at least
    assert {link.min_interval_ns for link in fabric.switches["s1"].ib.links} == {pacing}
    assert {host.ib.credits.min_interval_ns for host in fabric.hosts.values()} == {pacing}
    write(fabric, "h1", "h2", 0x11, 4 * MIB, 0)
    fabric.sim.run(until=10_000_000)  # IB's flow-control refresh never lets the fabric go idle
    [done] = fabric.hosts["h1"].completions
    assert done.status == WcStatus.SUCCESS
    link_ns = message_wire_bytes(4 * MIB, MTU, native_ib=True) * 8 / 400
    assert within[0] * link_ns < done.timestamp < within[1] * link_ns, done.timestamp / link_ns


def test_a_stalled_host_pauses_its_switch_port_and_takes_what_waited_when_it_resumes():
    """Fault ``stall``: the NIC takes no RDMA frame and pauses its port without end (XOFF, then XON at resume);
    the lossless fabric holds the write back and drops nothing; the held frames are taken at once after."""
    plan = make_plan(StarTopo(n=2), "sim", {"bw": "100mbit", "mtu": 4200})
    fabric = build_sim_fabric(plan, "lossless", memory_bytes=4 * MIB)
    h2, sim = fabric.hosts["h2"], fabric.sim
    write(fabric, "h1", "h2", 0x11, MIB, 0)
    sim.at(1_000_000, h2.stall)
    sim.at(51_000_000, h2.resume)
    seen = {}
    sim.at(2_000_000, lambda: seen.setdefault("stalled at 2 ms", h2.frames_received))
    sim.at(50_000_000, lambda: seen.setdefault("stalled at 50 ms", h2.frames_received))
    sim.run()
    assert seen["stalled at 2 ms"] == seen["stalled at 50 ms"]  # the hung pipeline took nothing
    [done] = fabric.hosts["h1"].completions
    assert done.status == WcStatus.SUCCESS
    link_ns = message_wire_bytes(MIB, MTU, native_ib=False) * 8 * 10  # 100 Mbit/s
    assert 50_000_000 + link_ns * 0.98 < done.timestamp < 50_000_000 + link_ns * 1.05
    port = fabric.switches["s1"].mmu.counters[1]  # s1's port to h2
    assert sum(c.drops_threshold + c.drops_headroom for c in port) == 0
    paused = fabric.switches["s1"].mmu.pause[1].paused_time(3, sim.now)  # h2's XOFF held the lossless queue
    assert 49_000_000 < paused <= 50_000_000, paused
    # One XOFF of 65535 quanta (335 ms at 100 Mbit/s, refreshed at half of it: not within 50 ms) and the XON.
    assert (h2.storm_pfc_sent, h2.stall_drops) == (2, 0)
