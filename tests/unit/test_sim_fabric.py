"""A fabric plan in simulated time (emulator.study.sim_fabric, the compiled backend): RDMA across it against
closed forms.  Each write is a collective of the compiled ranks: an incast (the senders WRITE with immediate
into rank 0), whose time is its last WRITE's arrival at the receiver."""

from __future__ import annotations

from typing import Any

import pytest

from emulator._core.rdma_params import message_wire_bytes
from emulator.collectives.sim_ranks import run_rust_collective
from emulator.fabric.plan import FabricPlan, make_plan
from emulator.study.sim_fabric import build_rust_fabric
from topologies import LeafSpineTopo, StarTopo

MIB = 1 << 20
MTU = 4096


def switch_index(plan: FabricPlan, switch: str) -> int:
    """``switch``'s index in the compiled fabric: the plan's order (its ports' too)."""
    return next(i for i, node in enumerate(plan.switches()) if node.name == switch)


def port(plan: FabricPlan, switch: str, peer: str) -> tuple[int, int]:
    """(switch, port) of ``switch``'s port to ``peer``, for ``port_figures``."""
    s = switch_index(plan, switch)
    return s, next(i for i, p in enumerate(plan.switches()[s].ports) if p.peer_node == peer)


def tx_frames(plan: FabricPlan, fabric: Any, switch: str) -> int:
    """Frames ``switch`` sent, every port."""
    s = switch_index(plan, switch)
    return sum(fabric.port_figures(s, p)["tx_frames"] for p in range(len(plan.switches()[s].ports)))


def incast(plan: FabricPlan, fabric: Any, size: int) -> Any:
    """Every host but the first WRITEs ``size`` bytes into the first, once; that iteration."""
    names = [node.name for node in plan.hosts()]
    [it] = run_rust_collective(fabric, names, "incast", size, 1, 0, None, MTU).iterations
    assert it.verified and all(f.bytes == size for f in it.flows)
    return it


@pytest.mark.parametrize("fabric_name", ["lossless", "lossy"])
def test_an_incast_on_a_planned_star(fabric_name):
    plan = make_plan(StarTopo(n=4), "sim", {"bw": "100mbit", "mtu": 4200})
    fabric = build_rust_fabric(plan, fabric_name)
    it = incast(plan, fabric, MIB)
    assert sorted(f.src for f in it.flows) == ["h2", "h3", "h4"]
    bound = 3 * message_wire_bytes(MIB, 4096, native_ib=False) * 8 * 10**9 // (100 * 10**6)
    finish = it.cct_us * 1e3
    drops = fabric.totals()["drops"]
    if fabric_name == "lossless":
        assert drops == 0 and bound < finish < bound * 1.02, (finish, bound)
    else:
        assert drops > 0 and finish > bound  # lossy: the switch drops, the transport resends (go-back-N, timeouts)


def test_a_write_across_a_leaf_spine_goes_by_the_planned_routes():
    plan = make_plan(LeafSpineTopo(leaves=2, spines=2, hosts=1), "sim", {"bw": "1gbit", "delay": "10us"})
    fabric = build_rust_fabric(plan, "lossless")
    it = incast(plan, fabric, MIB)  # h2 into h1
    link_ns = message_wire_bytes(MIB, 4096, native_ib=False) * 8  # 1 Gbit/s
    # Four cables of 10 us (h2-s2-spine-s1-h1), store and forward at three switches.
    assert link_ns + 4 * 10_000 < it.cct_us * 1e3 < link_ns * 1.02 + 8 * 10_000
    # 256 data frames (1 MiB at 4096) and 16 ACKs (one per 16 packets), each through a leaf, a spine and a leaf:
    # every frame took a planned route of three switches, none dropped on the way.
    assert fabric.totals()["tx_frames"] == 3 * (256 + 16) and fabric.totals()["drops"] == 0
    spines = [tx_frames(plan, fabric, s) for s in ("s3", "s4")]
    # Each direction (the 256 data frames, the 16 ACKs) hashes to one spine.
    assert sum(spines) == 256 + 16 and max(spines) >= 256


@pytest.mark.parametrize("switch, within", [
    (None, (2.5, 3.5)),  # 16-frame VL buffers, grants paced to 500 us: credit-starved, ~2.9x the link time
    ({"vl_buffer": "128KiB", "fc_floor": "0"}, (1.0, 1.08)),  # the link time and two 1 us cables (~1.03x)
])
def test_one_ib_flow_at_400_gbit_is_paced_by_the_switch_credit_settings(switch, within):
    """The switch's ``vl_buffer`` and ``fc_floor`` reach both ends of every link (the switch's IB plane and the
    host's port), and decide whether one flow fills a 400 Gbit/s link: what the scale experiment sets."""
    plan = make_plan(StarTopo(n=2), "sim", {"bw": "400gbit", "delay": "1us", "mtu": 4200})
    fabric = build_rust_fabric(plan, "ib", switch=switch)
    floor = 0 if switch else 500_000
    pacing = max(floor, 2 * 4214 * 8 // 400)  # credits.fabric_min_interval_ns: two frame times at least
    assert {fabric.port_figures(0, p)["credit_interval_ns"] for p in range(2)} == {pacing}
    assert {fabric.host_figures(h)["credit_interval_ns"] for h in range(2)} == {pacing}
    it = incast(plan, fabric, 4 * MIB)
    link_ns = message_wire_bytes(4 * MIB, MTU, native_ib=True) * 8 / 400
    assert within[0] * link_ns < it.cct_us * 1e3 < within[1] * link_ns, it.cct_us * 1e3 / link_ns


def test_a_stalled_host_pauses_its_switch_port_and_takes_what_waited_when_it_resumes():
    """Fault ``stall``: the NIC takes no RDMA frame and pauses its port without end (XOFF, then XON at resume);
    the lossless fabric holds the write back and drops nothing; the held frames are taken at once after."""
    plan = make_plan(StarTopo(n=2), "sim", {"bw": "100mbit", "mtu": 4200})
    fabric = build_rust_fabric(plan, "lossless")
    fabric.set_faults([(0, 1_000_000, 50_000_000)])  # h1, the receiver: from 1 ms to 51 ms of the iteration
    seen: dict[int, int] = {}

    def sample(now: int, frames: int) -> bool:
        seen[now] = frames
        return False

    fabric.watch(1_000_000, sample)  # every ms from 0, simulated time
    it = incast(plan, fabric, MIB)
    start = it.start_ns
    stalled = [frames for now, frames in seen.items() if start + 2_000_000 <= now <= start + 50_000_000]
    assert len(stalled) == 49 and len(set(stalled)) == 1  # the hung pipeline took nothing
    link_ns = message_wire_bytes(MIB, MTU, native_ib=False) * 8 * 10  # 100 Mbit/s
    assert 50_000_000 + link_ns * 0.98 < it.cct_us * 1e3 < 50_000_000 + link_ns * 1.05
    totals = fabric.totals()
    assert totals["drops"] == 0 and fabric.faults_injected == 1
    figures = fabric.port_figures(*port(plan, "s1", "h1"))  # s1's port to h1
    assert figures["mmu_drops"] == 0
    paused = figures["paused_ns"][3]  # h1's XOFF held the lossless queue
    assert 49_000_000 < paused <= 50_000_000, paused
    # One XOFF of 65535 quanta (335 ms at 100 Mbit/s, refreshed at half of it: not within 50 ms) and the XON.
    h1 = fabric.host_figures(0)
    assert (h1["stall_pfc_sent"], h1["stall_drops"]) == (2, 0) and totals["host_pfc_sent"] == 2
    with pytest.raises(IndexError, match="no port 2 on switch 0"):
        fabric.port_figures(0, 2)
    with pytest.raises(IndexError, match="no host 2"):
        fabric.host_figures(2)
