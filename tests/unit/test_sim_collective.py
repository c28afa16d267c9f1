"""Collectives executed by simulated ranks (emulator.collectives.sim_ranks on the compiled backend) on planned
fabrics, against closed forms."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from emulator._core.rdma_params import message_wire_bytes
from emulator.collectives.sim_ranks import run_rust_collective
from emulator.errors import FabricError
from emulator.fabric.plan import FabricPlan, make_plan
from emulator.fabric.topospec import build_topo
from emulator.model.dcqcn import DcqcnParams
from emulator.study.sim_fabric import build_rust_fabric
from topologies.fabrics import StarTopo

RATE = 100_000_000
MTU = 4096
KIB = 1024


class Built(NamedTuple):
    """A compiled fabric, its hosts' names in rank order and its plan (which numbers the switches' ports)."""

    fabric: Any
    names: list[str]
    plan: FabricPlan


def fabric_of(hosts: int, fabric: str, buffer: str = "1MiB", link: dict[str, Any] | None = None,
              cc: Any = None) -> Built:
    plan = make_plan(StarTopo(n=hosts), "sim", {"bw": "100mbit", "mtu": "4200"} | (link or {}))
    return Built(build_rust_fabric(plan, fabric, {"buffer": buffer, "headroom": "72KiB"}, cc=cc),
                 [node.name for node in plan.hosts()], plan)


def run(built: Built, collective: str, size: int, iterations: int = 2, warmup: int = 1, senders=None):
    return run_rust_collective(built.fabric, built.names, collective, size, iterations, warmup, senders, MTU)


def link_us(nbytes: int, ib: bool = False) -> float:
    return message_wire_bytes(nbytes, MTU, native_ib=ib) * 8 / RATE * 1e6


def totals(built: Built) -> dict[str, int]:
    return built.fabric.totals()


def drops(built: Built) -> int:
    """Frames the switches dropped: MMU thresholds and headroom, watchdog, their own, injected loss."""
    return totals(built)["drops"]


def ports(built: Built) -> list[dict[str, Any]]:
    """Every switch port's figures, switch by switch."""
    return [built.fabric.port_figures(s, p) for s, node in enumerate(built.plan.switches())
            for p in range(len(node.ports))]


def pfc(built: Built) -> int:
    """PFC frames the switches sent, XOFF and XON."""
    return totals(built)["pfc_sent"]


@pytest.mark.parametrize("fabric_name", ["lossless", "ib"])
def test_an_incast_on_lossless_takes_n_link_times_and_drops_nothing(fabric_name):
    fabric = fabric_of(4, fabric_name, buffer="512KiB")
    result = run(fabric, "incast", 256 * KIB)
    bound = 3 * link_us(256 * KIB, ib=fabric_name == "ib")  # three senders' bytes through the receiver's one link
    assert [it.iteration for it in result.iterations] == [1, 2] and len(result.warmup) == 1
    for it in result.iterations:
        assert bound < it.cct_us < bound * 1.02, (it.cct_us, bound)
        assert it.verified and it.retransmissions == 0 and it.last_dst == "h1"
        assert sorted(f.src for f in it.flows) == ["h2", "h3", "h4"] and all(f.bytes == 256 * KIB for f in it.flows)
    if fabric_name == "ib":  # held back by credits: no pause frame, the switch's VL buffers stalled the senders
        assert drops(fabric) == 0 and pfc(fabric) == 0 and totals(fabric)["ib_credit_stalls"] > 0
        # Every port has its IB plane's link (credits paced), and the planes dropped nothing (not in the totals).
        assert all(p["credit_interval_ns"] is not None and p["ib_drops"] == 0 for p in ports(fabric))
    else:
        assert drops(fabric) == 0 and pfc(fabric) > 0


def test_the_same_incast_on_lossy_drops_resends_and_takes_longer():
    lossless, lossy = fabric_of(4, "lossless", "512KiB"), fabric_of(4, "lossy", "512KiB")
    fast = run(lossless, "incast", 256 * KIB).iterations[0].cct_us
    slow = run(lossy, "incast", 256 * KIB).iterations[0]
    assert drops(lossy) > 0 and slow.retransmissions > 0 and slow.cause == "retransmission"
    assert slow.cct_us > fast and slow.verified


def test_a_ring_allreduce_sums_the_data_that_crossed_the_fabric_within_its_link_time():
    fabric = fabric_of(4, "lossless")
    result = run(fabric, "allreduce", 1 << 20)
    chunk = (1 << 20) // 4
    bound = 2 * 3 * link_us(chunk)  # 2(N-1) chunks leave every host
    for it in result.iterations:
        assert it.verified  # every rank's float32s are the sum of every rank's input
        assert bound < it.cct_us < bound * 1.10, (it.cct_us, bound)
    # ``verified``: every rank's float32s in its simulated memory, compared in Rust with the plan's reduce result
    # (the sum over 4 ranks of (rank + 1) x (iteration + 1), 30.0 in the last iteration); the memory itself is
    # released with the run.


@pytest.mark.parametrize("fabric_name", ["lossless", "ib", "uet"])
@pytest.mark.parametrize("collective,size", [("allreduce", 8), ("allreduce", 12), ("allreduce", 4 * 1001),
                                             ("allgather", 8), ("allgather", 13), ("allgather", 8 * 4099 + 5)])
def test_uneven_and_empty_chunks_run_and_add_up(fabric_name, collective, size):
    """nccl-tests' smallest sizes on 8 ranks: 8 B of all-reduce is 2 float32s, so six ranks' chunks are empty and
    go as zero-length WRITEs with immediate (one packet each); sizes no multiple of the ranks cut unevenly.  Every
    rank's data region still holds the sum, and nothing is resent."""
    fabric = fabric_of(8, fabric_name)
    result = run(fabric, collective, size)
    for it in result.iterations:
        assert it.verified and it.retransmissions == 0, it
        assert len(it.flows) == 8  # every rank hears from its ring neighbour, empty chunks or not
    assert drops(fabric) == 0


def test_an_alltoall_delivers_every_pair():
    fabric = fabric_of(4, "lossless")
    it = run(fabric, "alltoall", 256 * KIB).iterations[-1]
    assert len(it.flows) == 12 and all(f.bytes == 64 * KIB for f in it.flows)
    bound = 3 * link_us(64 * KIB)  # each host's three chunks out (and three in)
    # Not a closed form: twelve flows meet at four receivers' links, and PFC holds senders now and then.
    assert bound < it.cct_us < bound * 1.25


def test_iterations_are_spaced_and_reproducible():
    a, b = run(fabric_of(4, "lossy", "512KiB"), "incast", 256 * KIB), run(fabric_of(4, "lossy", "512KiB"), "incast", 256 * KIB)
    assert [it.cct_us for it in a.iterations] == [it.cct_us for it in b.iterations]
    starts = [it.start_ns for it in a.warmup + a.iterations]
    assert starts == sorted(starts) and len(set(starts)) == 3


def test_a_collective_whose_receiver_never_answers_fails_as_the_rnic_would():
    fabric = fabric_of(4, "lossless", link={"loss": 1.0})  # a black hole: the senders' retries run out
    with pytest.raises(FabricError, match="RDMA_WRITE RETRY_EXC_ERR"):
        run(fabric, "incast", 64 * KIB)


def test_a_finished_collective_stops_the_engine_though_ib_refreshes_would_run_for_ever():
    fabric = fabric_of(4, "ib")
    result = run(fabric, "incast", 64 * KIB, iterations=1, warmup=0)
    [it] = result.iterations
    assert fabric.fabric.entries() > 0  # the credit refreshes are still pending
    assert fabric.fabric.now * 1e-3 - (it.start_ns * 1e-3 + it.cct_us) < 1_000  # stopped within a ms of the last arrival


def test_dcqcn_in_the_simulated_rnics_cuts_the_senders_and_takes_pfc_out_of_an_incast(monkeypatch):
    """The RNIC agent's DCQCN (model.dcqcn) under the engine: CE marks earn CNPs, CNPs cut the senders' rates,
    paced senders keep the switch below its XOFF threshold."""
    import emulator._core.sim as core_sim
    from emulator.model.dcqcn import at_link, parse_cc

    given: dict[str, Any] = {}
    compiled = core_sim.SimFabric

    def spy(*args: Any, **kwargs: Any) -> Any:  # what build_rust_fabric hands the compiled backend
        given.update(kwargs)
        return compiled(*args, **kwargs)

    monkeypatch.setattr(core_sim, "SimFabric", spy)
    plain = fabric_of(8, "lossless")
    run(plain, "incast", 256 * KIB)
    cc = parse_cc("dcqcn")
    fabric = fabric_of(8, "lossless", cc=cc)
    result = run(fabric, "incast", 256 * KIB)
    counters = totals(fabric)
    assert totals(plain)["pfc_sent"] > 0 and totals(plain)["cnps_received"] == 0
    assert counters["cnps_received"] > 0 and counters["paced_waits"] > 0
    assert counters["pfc_sent"] < totals(plain)["pfc_sent"] and counters["drops"] == 0
    assert all(it.verified for it in result.iterations)
    assert given["cc"] == [at_link(cc, RATE)[0]] * 8  # every RNIC: the emulator's constants at this link's rate
    sender, receiver = fabric.fabric.host_figures(1), fabric.fabric.host_figures(0)  # h2, h1
    assert sender["cnps_received"] > 0 and receiver["cnps_sent"] > 0


def test_injected_loss_takes_the_frames_the_emulators_link_model_would_and_the_transport_recovers():
    """The switch agent's loss model (model.link) at the simulated switch's ports: drop = 5 loses the 5th frame
    each way on every link; go-back-N resends, and the data still adds up."""
    fabric = fabric_of(4, "lossless", link={"drop": "5"})
    result = run(fabric, "allreduce", 1 << 20, iterations=1)
    injected = sum(p["injected_drops"] for p in ports(fabric))
    assert injected == 8  # the 5th frame from each of 4 hosts, and the 5th to each of them, once per run
    assert totals(fabric)["drops"] == injected
    assert result.warmup[0].retransmissions > 0 and result.warmup[0].verified and result.iterations[0].verified


def test_progress_counts_each_iteration_once():
    from emulator.collectives.sim_ranks import SimProgress

    assert SimProgress(0, 0, 0, 2, 50, 100).done == 0.25
    assert SimProgress(0, 0, 1, 2, 100, 100).done == 1.0  # the second iteration's arrivals all in, not yet summed
    assert SimProgress(0, 0, 2, 2, 100, 100).done == 1.0  # the last one's arrivals are not counted twice


# What the runs compared figure for figure with the Python backend (test_twin_sim.py, test_twin_sim_cc.py, gone
# with it) also showed on the compiled one: each case's PFC, drops, credit stalls, CNPs and pacing.
LINK = {"bw": "10gbit", "delay": "1us", "mtu": "1500"}
PFC = {"alpha": "0", "threshold": "3000"}  # lossless: a static threshold, XOFF after a few frames
SMALL = {"buffer": "60000"}  # lossy: tail drops
SCALE_IB = {"vl_buffer": "128KiB", "fc_floor": "0"}  # the scale experiment's IB switches
TIGHT_IB = {"vl_buffer": "2KiB"}  # one 1 KiB packet in flight per VL: senders wait for every grant
ECN = {"kmin": "3000", "kmax": "30000", "pmax": "1"}  # marks early, so DCQCN has CNPs to react to
CASES = [
    # (topology, fabric, collective, size, switch, link, DCQCN, what must show)
    ("star,4", "lossless", "incast", 262144, PFC, LINK, False, "pfc"),
    ("star,4", "lossy", "incast", 65536, SMALL, LINK, False, "drops"),
    ("leafspine,2,1,hosts=3", "lossless", "alltoall", 393216, PFC, LINK, False, "pfc"),
    ("leafspine,2,1,hosts=3", "lossy", "alltoall", 98304, SMALL, LINK, False, "drops"),
    ("fattree,4", "lossless", "allreduce", 65536, PFC, LINK, False, None),
    ("fattree,4", "lossy", "allreduce", 65536, SMALL, LINK, False, None),
    ("star,4", "ib", "incast", 65536, {}, LINK, False, "stalls"),  # 16 frames a VL, grants paced at 500 us
    ("star,4", "ib", "incast", 262144, TIGHT_IB, LINK, False, "stalls"),
    ("star,4", "ib", "allgather", 65536, SCALE_IB, LINK, False, None),
    ("leafspine,2,1,hosts=3", "ib", "alltoall", 393216, {}, LINK, False, "stalls"),
    ("leafspine,2,1,hosts=3", "ib", "alltoall", 393216, SCALE_IB, LINK, False, None),
    ("fattree,4", "ib", "allreduce", 65536, {}, LINK, False, None),
    ("fattree,4", "ib", "alltoall", 32768, SCALE_IB, LINK, False, None),
    ("star,4", "lossless", "incast", 262144, PFC | ECN, LINK, True, "paced"),
    ("leafspine,2,1,hosts=3", "lossless", "alltoall", 196608, PFC | ECN, LINK, True, "cnps"),
    ("star,4", "lossy", "incast", 131072, ECN, LINK, True, "paced"),
    ("star,4", "lossy", "alltoall", 65536, {}, LINK | {"loss": "0.02"}, False, "drops"),
    ("leafspine,2,1,hosts=2", "lossy", "allreduce", 65536, {}, LINK | {"drop": "3:40:41:200"}, False, "drops"),
    ("leafspine,2,1,hosts=2", "lossless", "alltoall", 65536, PFC | ECN, LINK | {"loss": "0.01"}, True, "drops"),
]


@pytest.mark.parametrize("topo,fabric,collective,size,switch,link,dcqcn,expect", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[7]}-{'-'.join(c[4].values()) or 'defaults'}" for c in CASES])
def test_each_fabric_shows_what_it_is_for(topo, fabric, collective, size, switch, link, dcqcn, expect) -> None:
    cc = DcqcnParams(cnp_interval_ns=4000, alpha_period_ns=1000, increase_period_ns=3000, byte_counter=32767,
                     fast_recovery=1, reference_bps=10_000_000_000) if dcqcn else None
    plan = make_plan(build_topo(topo), "sim", link)
    built = Built(build_rust_fabric(plan, fabric, switch, cc=cc, seed=7), [node.name for node in plan.hosts()], plan)
    result = run_rust_collective(built.fabric, built.names, collective, size, 2, 1, None, 1024)
    counters = totals(built)
    assert all(r.verified for r in result.iterations) and len(result.warmup) == 1
    assert built.fabric.baseline() is not None  # the counters when the measured iterations began
    if expect == "pfc":
        assert counters["pfc_sent"] > 0
    elif expect == "drops":
        assert counters["drops"] > 0 and sum(r.retransmissions for r in result.iterations + result.warmup) > 0
    elif expect == "stalls":
        assert counters["ib_credit_stalls"] > 0
    elif expect in ("cnps", "paced"):
        assert counters["cnps_received"] > 0 and counters["ecn_marked"] > 0
        assert (counters["paced_waits"] > 0) == (expect == "paced")  # many QPs take turns: none waits for its rate
    if fabric == "ib":  # every frame crossed the IB planes, none the MMUs: the planes' count is the whole
        assert counters["tx_frames"] > 0 and counters["pfc_sent"] == counters["drops"] == 0
    if cc is None:
        assert counters["cnps_received"] == counters["paced_waits"] == 0


def test_refuses_a_fabric_it_does_not_know() -> None:
    plan = make_plan(StarTopo(n=2), "sim", LINK)
    with pytest.raises(ValueError, match="no 'ethernet' fabric"):
        build_rust_fabric(plan, "ethernet")


def test_an_ib_path_mtu_past_the_switch_buffer_is_refused_as_the_qps_are_made() -> None:
    """A path MTU whose packets no grant of the switch's VL buffer could cover: a FabricError with the reason."""
    plan = make_plan(StarTopo(n=2), "sim", LINK)
    fabric = build_rust_fabric(plan, "ib", TIGHT_IB)
    with pytest.raises(FabricError, match="path MTU 4096 does not fit"):
        run_rust_collective(fabric, ["h1", "h2"], "alltoall", 8192, 1, 0, None, 4096)


def test_a_watch_that_raises_ends_the_run_as_itself_and_faults_name_real_hosts() -> None:
    plan = make_plan(StarTopo(n=2), "sim", LINK)
    fabric = build_rust_fabric(plan, "lossless")

    def broken(now: int, frames: int) -> bool:
        if now:
            raise KeyError("the tracker broke")
        return False

    fabric.watch(1000, broken)
    with pytest.raises(RuntimeError, match="a goodput watch already"):
        fabric.watch(1000, broken)
    with pytest.raises(KeyError, match="the tracker broke"):
        run_rust_collective(fabric, ["h1", "h2"], "alltoall", 1 << 20, 1, 0, None, 1024)
    with pytest.raises(ValueError, match="a fault on host 2 of 2"):
        fabric.set_faults([(2, 0, None)])


def test_refuses_settings_for_other_nodes() -> None:
    from emulator._core.sim import SimFabric

    for key in ("losses", "pfcwd", "cc"):
        with pytest.raises(ValueError, match=f"1 {key} entries for 0"):
            SimFabric([], [], [], **{key: [None]})
