"""The switch MMU, driven with a fake clock (``now`` in ns passed in).

Expected admission counts, PFC timings and scheduling shares are worked
out by hand in the comments from the model's rules (reserve, shared pool
threshold, headroom; 512 bit-time quanta; DWRR), never by calling the
code's own helpers.  The closed-loop test plays three PFC-obeying senders
against one egress port and checks the headroom rule of ../shared/reference.md.
"""

import functools
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator._core.mmu import Mmu
from emulator.model.mmu import MmuConfig  # the dataclass the agents' config carries, as the agents pass it

PRIORITIES = 8
GBIT = 1_000_000_000
FRAME = 1000          # bytes of most test frames
RESERVE = 1000
HEADROOM = 5000
POOL = 20000
PORTS = 4
LOSSLESS = 3


def config(pool: int = POOL, ports: int = PORTS, **changes) -> MmuConfig:
    """A small MmuConfig whose shared pool is ``pool`` bytes for ``ports`` ports."""
    settings = dict(
        reserve=RESERVE, headroom=HEADROOM, alpha=0.0, threshold=5000, xon_delta=2000,
        lossless=frozenset({LOSSLESS}), quanta=65535, strict=frozenset({6, 7}), weights=(1,) * PRIORITIES,
        mtu_frame=FRAME, ecn=False, kmin=10_000, kmax=20_000, pmax=0.2,
    )
    settings.update(changes)
    lossless = len(settings["lossless"])
    settings["buffer"] = pool + ports * (PRIORITIES * settings["reserve"] + lossless * settings["headroom"])
    return MmuConfig(**settings)


def mmu(rates=None, **changes) -> Mmu:
    rates = rates or [GBIT] * PORTS
    return Mmu(config(ports=len(rates), **changes), rates)


def fill(m: Mmu, ingress: int, egress: int, priority: int, count: int, size: int = FRAME, now: int = 0) -> list[bool]:
    return [m.enqueue(now, ingress, egress, priority, bytes(size)) for _ in range(count)]


def drain(m: Mmu, egress: int) -> list[tuple[int, bytes]]:
    out = []
    while (head := m.head(egress)) is not None:
        m.pop(egress, head[0])
        out.append(head)
    return out


# --- construction ------------------------------------------------------------------


def test_shared_pool_of_the_helper_config():
    # 72000 B for 4 ports: 4 x (8 x 1000 reserve + 1 x 5000 headroom) = 52000, 20000 left
    cfg = config()
    assert cfg.buffer == 72_000
    assert cfg.shared_pool(4) == 20_000


@pytest.mark.parametrize("buffer", [52_000, 51_999, 10_000, 0])
def test_no_shared_pool_raises(buffer):
    cfg = config()
    cfg = MmuConfig(**{**cfg.__dict__, "buffer": buffer})
    with pytest.raises(ValueError):
        Mmu(cfg, [GBIT] * 4)


def test_one_byte_of_pool_is_enough_to_construct():
    cfg = config(pool=1)
    Mmu(cfg, [GBIT] * 4)


# --- lossy admission -------------------------------------------------------------------


def test_lossy_static_threshold_drops_past_it():
    m = mmu(alpha=0.0, threshold=5000)
    # 1000 B reserve + 5000 B of shared: 6 frames of 1000 B, the 7th would take shared to 6000
    results = fill(m, 0, 3, 1, 10)
    assert results == [True] * 6 + [False] * 4
    c = m.counters[0][1]
    assert c.drops_threshold == 4 and c.drops_headroom == 0
    assert m.ingress_bytes(0, 1) == 6000
    assert m.shared_used == 5000
    assert m.egress_bytes(3, 1) == 6000
    assert m.take_pfc() == []  # lossy: never PFC


def test_lossy_static_threshold_with_odd_sizes():
    m = mmu(alpha=0.0, threshold=5000)
    # 600 B frames: at most reserve + threshold = 6000 B, i.e. 10 frames
    assert fill(m, 1, 2, 0, 12, size=600) == [True] * 10 + [False] * 2
    # 6000 B held: even a 400 B frame would take shared use to 5400 > 5000
    assert m.enqueue(0, 1, 2, 0, bytes(400)) is False
    assert m.counters[1][0].drops_threshold == 3


def test_lossy_threshold_is_per_ingress_and_priority():
    m = mmu(alpha=0.0, threshold=5000)
    assert fill(m, 0, 3, 1, 7) == [True] * 6 + [False]
    assert fill(m, 0, 3, 2, 6) == [True] * 6       # other priority, same ingress
    assert fill(m, 1, 3, 1, 6) == [True] * 6       # same priority, other ingress
    assert m.shared_used == 15_000


def test_lossy_dynamic_threshold_alpha_one():
    m = mmu(alpha=1.0)
    # alone: a frame is admitted while its shared use after it <= the free pool before it.
    # k frames in shared (k x 1000): admitted iff (k+1) x 1000 <= 20000 - k x 1000, k <= 9
    # -> shared 10000 (half the pool), plus the reserve frame: 11 frames.
    assert fill(m, 0, 3, 1, 13) == [True] * 11 + [False] * 2
    assert m.shared_used == 10_000
    # a second ingress now sees 10000 free: (k+1) x 1000 <= 10000 - k x 1000, k <= 4 -> 5 + reserve
    assert fill(m, 1, 3, 1, 8) == [True] * 6 + [False] * 2
    assert m.shared_used == 15_000
    assert m.counters[0][1].drops_threshold == 2 and m.counters[1][1].drops_threshold == 2


def test_lossy_dynamic_threshold_grows_back_after_drain():
    m = mmu(alpha=1.0)
    fill(m, 0, 3, 1, 11)
    fill(m, 1, 2, 1, 6)          # ingress 1 -> shared 15000, free 5000
    assert m.enqueue(0, 0, 3, 1, bytes(FRAME)) is False
    drain(m, 2)                  # ingress 1's 6000 B leave: free 10000 again
    assert m.shared_used == 10_000
    # ingress 0 at shared 10000: needs 11000 <= 10000: still refused
    assert m.enqueue(0, 0, 3, 1, bytes(FRAME)) is False
    m.pop(3, m.head(3)[0])
    m.pop(3, m.head(3)[0])       # ingress 0 down to shared 8000, free 12000
    assert m.enqueue(0, 0, 3, 1, bytes(FRAME)) is True   # 9000 <= 12000


def test_reserve_admits_when_pool_exhausted():
    m = mmu(alpha=0.0, threshold=POOL)
    # ingress 0 takes the whole pool: reserve + 20 x 1000
    assert fill(m, 0, 3, 1, 22) == [True] * 21 + [False]
    assert m.shared_used == POOL
    # every other (ingress, priority) still gets its reserve, then nothing
    assert fill(m, 1, 3, 1, 2) == [True, False]
    assert fill(m, 2, 3, 0, 2, size=400) == [True, True]   # 800 B within its 1000 B reserve
    assert m.enqueue(0, 2, 3, 0, bytes(400)) is False       # 1200 B: would need 200 B of shared
    assert fill(m, 0, 3, 5, 1) == [True]                    # another priority of the full ingress
    assert m.shared_used == POOL


# --- lossless: XOFF, headroom, XON ------------------------------------------------------


def test_lossless_xoff_headroom_and_xon():
    m = mmu(alpha=0.0, threshold=5000, quanta=65535)
    c = m.counters[0][LOSSLESS]
    # frames 1-5: reserve then shared 1000..4000, no PFC
    assert fill(m, 0, 3, LOSSLESS, 5) == [True] * 5
    assert m.take_pfc() == []
    # frame 6 brings shared use to the threshold (5000): XOFF out of the ingress port
    assert m.enqueue(100, 0, 3, LOSSLESS, bytes(FRAME))
    assert m.take_pfc() == [(0, {LOSSLESS: 65535})]
    assert c.pfc_xoff_sent == 1
    assert m.take_pfc() == []   # the outbox was cleared
    # frames 7-11 land in the 5000 B headroom, admitted, no second XOFF
    assert fill(m, 0, 3, LOSSLESS, 5, now=200) == [True] * 5
    assert m.take_pfc() == []
    assert c.pfc_xoff_sent == 1
    assert m.ingress[0].headroom[LOSSLESS] == 5000
    assert m.ingress_bytes(0, LOSSLESS) == 11_000
    assert m.shared_used == 5000
    # headroom full: drop, a headroom violation
    assert m.enqueue(300, 0, 3, LOSSLESS, bytes(FRAME)) is False
    assert c.drops_headroom == 1 and c.drops_threshold == 0
    assert m.take_pfc() == []
    # drain: the headroom empties first (5 pops), then shared 5000 -> 4000 -> 3000:
    # XON when shared <= threshold - xon_delta = 3000 and the headroom is empty, i.e. at pop 7
    for pop in range(1, 12):
        m.pop(3, m.head(3)[0])
        pfc = m.take_pfc()
        if pop == 7:
            assert pfc == [(0, {LOSSLESS: 0})], pop
        else:
            assert pfc == [], pop
    assert c.pfc_xon_sent == 1 and c.pfc_xoff_sent == 1
    assert m.ingress_bytes(0, LOSSLESS) == 0 and m.shared_used == 0
    assert m.next_deadline() is None
    # congest again: a second XOFF
    fill(m, 0, 3, LOSSLESS, 6)
    assert m.take_pfc() == [(0, {LOSSLESS: 65535})]
    assert c.pfc_xoff_sent == 2


def test_lossless_no_xon_while_headroom_holds_bytes():
    m = mmu(alpha=0.0, threshold=5000, xon_delta=2000)
    fill(m, 0, 3, LOSSLESS, 8)  # 6 to XOFF + 2 in headroom
    m.take_pfc()
    # other traffic on the same egress does not matter; pop ingress 0's frames one by one
    m.pop(3, LOSSLESS)
    assert m.take_pfc() == [] and m.ingress[0].headroom[LOSSLESS] == 1000
    m.pop(3, LOSSLESS)
    assert m.take_pfc() == [] and m.ingress[0].headroom[LOSSLESS] == 0
    m.pop(3, LOSSLESS)   # shared 4000 > 3000
    assert m.take_pfc() == []
    m.pop(3, LOSSLESS)   # shared 3000
    assert m.take_pfc() == [(0, {LOSSLESS: 0})]


def test_lossless_does_not_affect_lossy_priority_of_same_port():
    m = mmu(alpha=0.0, threshold=5000)
    fill(m, 0, 3, LOSSLESS, 8)
    assert m.take_pfc() == [(0, {LOSSLESS: 65535})]
    assert fill(m, 0, 3, 1, 7) == [True] * 6 + [False]
    assert m.take_pfc() == []


def test_xoff_refresh_period_is_half_the_pause():
    quanta = 1000
    rates = [GBIT, 10 * GBIT, GBIT, GBIT]
    m = mmu(rates=rates, quanta=quanta)
    # 1000 quanta x 512 bit at 1 Gbit/s = 512 us; refreshed at half: 256 us
    period0 = quanta * 512 * 10**9 // rates[0] // 2
    period1 = quanta * 512 * 10**9 // rates[1] // 2
    assert (period0, period1) == (256_000, 25_600)
    t0 = 5_000
    fill(m, 0, 3, LOSSLESS, 6, now=t0)
    assert m.take_pfc() == [(0, {LOSSLESS: quanta})]
    assert m.next_deadline() == t0 + period0
    m.on_timer(t0 + period0 - 1)
    assert m.take_pfc() == []
    # still congested: the timer re-sends XOFF and schedules the next refresh
    m.on_timer(t0 + period0)
    assert m.take_pfc() == [(0, {LOSSLESS: quanta})]
    assert m.counters[0][LOSSLESS].pfc_xoff_sent == 2
    assert m.next_deadline() == t0 + 2 * period0
    # a late timer: the next refresh counts from when it ran
    late = t0 + 3 * period0 + 777
    m.on_timer(late)
    assert m.take_pfc() == [(0, {LOSSLESS: quanta})]
    assert m.next_deadline() == late + period0
    # the 10 Gbit/s port refreshes ten times as often
    t1 = 1_000_000
    fill(m, 1, 2, LOSSLESS, 6, now=t1)
    assert m.take_pfc() == [(1, {LOSSLESS: quanta})]
    assert m.next_deadline() == t1 + period1
    m.on_timer(t1 + period1)
    assert m.take_pfc() == [(1, {LOSSLESS: quanta})]
    # XON ends the refreshes of port 0
    drain(m, 3)
    assert m.take_pfc() == [(0, {LOSSLESS: 0})]
    assert m.next_deadline() == t1 + 2 * period1
    drain(m, 2)
    assert m.take_pfc() == [(1, {LOSSLESS: 0})]
    assert m.next_deadline() is None
    m.on_timer(10**12)
    assert m.take_pfc() == []


# --- closed loop: three senders into one port ---------------------------------------------


def incast(headroom: int, response_ns: int, duration_ns: int, rate: int = GBIT) -> dict:
    """Three senders at line rate into one egress port of the same rate, lossless.

    A sender obeys a PFC frame ``response_ns`` after the switch emitted it
    (the pause then lasts its quanta at ``rate``; XON ends it).  Time moves
    in frame times; the egress sends one frame per frame time.
    """
    m = Mmu(config(headroom=headroom, alpha=1.0, quanta=65535), [rate] * 4)
    frame_ns = FRAME * 8 * 10**9 // rate
    frame = bytes(FRAME)
    pending = [[] for _ in range(3)]       # (effective time, quanta) per sender
    paused_until = [0] * 3
    offered = admitted = 0
    busy_ns = 0
    started = None
    now = 0
    while now < duration_ns:
        deadline = m.next_deadline()
        if deadline is not None and deadline <= now:
            m.on_timer(now)
        for sender in range(3):
            queue = pending[sender]
            while queue and queue[0][0] <= now:
                at, quanta = queue.pop(0)
                # quanta x 512 bit times at the link rate, rounded up
                paused_until[sender] = at + -(-quanta * 512 * 10**9 // rate) if quanta else 0
            if now >= paused_until[sender]:
                offered += 1
                admitted += m.enqueue(now, sender, 3, LOSSLESS, frame)
        for port, quanta in m.take_pfc():
            assert set(quanta) == {LOSSLESS}
            pending[port].append((now + response_ns, quanta[LOSSLESS]))
        head = m.head(3)
        if head is not None:
            m.pop(3, head[0])
            started = now if started is None else started
            busy_ns += frame_ns
        now += frame_ns
    counters = [m.counters[port][LOSSLESS] for port in range(3)]
    return dict(
        offered=offered, admitted=admitted, queued=m.backlog[3],
        tx=m.counters[3][LOSSLESS].tx_frames,
        utilisation=busy_ns / (now - started),
        drops_headroom=sum(c.drops_headroom for c in counters),
        drops_threshold=sum(c.drops_threshold for c in counters),
        xoff=sum(c.pfc_xoff_sent for c in counters),
        xon=sum(c.pfc_xon_sent for c in counters),
    )


RESPONSE_NS = 50_000   # 50 us at 1 Gbit/s: R x T = 6250 B


def test_closed_loop_enough_headroom_never_drops():
    in_flight = GBIT * RESPONSE_NS // 8 // 10**9
    assert in_flight == 6250
    result = incast(headroom=2 * FRAME + in_flight, response_ns=RESPONSE_NS, duration_ns=200_000_000)
    assert result["drops_headroom"] == 0 and result["drops_threshold"] == 0, result
    assert result["admitted"] == result["offered"]
    assert result["tx"] + result["queued"] == result["admitted"]
    assert result["utilisation"] >= 0.95, result
    assert result["xoff"] > 10 and result["xon"] > 10, result   # PFC really cycled
    # the senders were held to the egress rate: about 25000 frames in 200 ms at 1 Gbit/s
    assert 24_000 <= result["tx"] <= 25_000


def test_closed_loop_one_frame_of_headroom_drops():
    result = incast(headroom=FRAME, response_ns=RESPONSE_NS, duration_ns=50_000_000)
    assert result["drops_headroom"] > 0, result
    assert result["drops_threshold"] == 0
    assert result["admitted"] + result["drops_headroom"] == result["offered"]


# --- conservation under random traffic -----------------------------------------------------


def check_invariants(m: Mmu, model_ingress: dict, model_egress: dict) -> None:
    reserve = m.config.reserve
    shared = 0
    for port, ing in enumerate(m.ingress):
        for prio in range(PRIORITIES):
            assert ing.used[prio] == model_ingress.get((port, prio), 0), (port, prio)
            assert 0 <= ing.headroom[prio] <= m.config.headroom
            assert ing.headroom[prio] <= ing.used[prio]
            shared += max(0, ing.used[prio] - ing.headroom[prio] - reserve)
    assert m.shared_used == shared
    assert 0 <= m.shared_used <= m.pool
    for port in range(len(m.rates)):
        frames = 0
        for prio in range(PRIORITIES):
            queue = m.queues[port][prio]
            frames += len(queue.frames)
            assert m.egress_bytes(port, prio) == model_egress.get((port, prio), 0)
            assert sum(len(f) for f, _ in queue.frames) == queue.bytes
        assert m.backlog[port] == frames


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_conservation_under_random_traffic(alpha):
    rng = random.Random(4242 + int(alpha))
    m = Mmu(config(alpha=alpha, threshold=4000, lossless=frozenset({3, 4})), [GBIT] * 4)
    model_ingress: dict = {}
    model_egress: dict = {}
    inflight: dict = {}           # (egress, prio) -> ingress ports in FIFO order, with sizes
    admitted: dict = {}
    for step in range(3000):
        if rng.random() < 0.6:
            ingress, egress, prio = rng.randrange(4), rng.randrange(4), rng.randrange(PRIORITIES)
            size = rng.randint(64, FRAME)
            if m.enqueue(step, ingress, egress, prio, bytes(size)):
                model_ingress[ingress, prio] = model_ingress.get((ingress, prio), 0) + size
                model_egress[egress, prio] = model_egress.get((egress, prio), 0) + size
                inflight.setdefault((egress, prio), []).append((ingress, size))
                admitted[egress, prio] = admitted.get((egress, prio), 0) + 1
        else:
            egress = rng.randrange(4)
            head = m.head(egress)
            if head is not None:
                prio, frame = head
                assert m.head(egress) == head
                m.pop(egress, prio)
                ingress, size = inflight[egress, prio].pop(0)
                assert len(frame) == size
                model_ingress[ingress, prio] -= size
                model_egress[egress, prio] -= size
        m.take_pfc()
        check_invariants(m, model_ingress, model_egress)
    for egress in range(4):
        drain(m, egress)
    check_invariants(m, {}, {})
    assert m.shared_used == 0
    for egress in range(4):
        for prio in range(PRIORITIES):
            assert m.counters[egress][prio].tx_frames == admitted.get((egress, prio), 0)
    # every lossless ingress that sent XOFF has sent XON once drained: nobody stays paused
    for port in range(4):
        for prio in (3, 4):
            c = m.counters[port][prio]
            assert c.pfc_xoff_sent == c.pfc_xon_sent, (port, prio)
            assert not m.ingress[port].xoff[prio]
    assert m.next_deadline() is None
    total_drops = sum(c.drops_threshold + c.drops_headroom for row in m.counters for c in row)
    assert total_drops > 0   # the run did reach the limits


def test_xon_sent_after_drain_even_when_threshold_below_xon_delta():
    """A drained lossless ingress must resume its peer.

    With a static threshold (1000) below xon_delta (2000), XON needs the
    shared use to reach threshold - xon_delta < 0, which never happens, so
    the peer is paused forever by refreshed XOFFs.
    """
    m = mmu(alpha=0.0, threshold=1000, xon_delta=2000, quanta=100)
    fill(m, 0, 3, LOSSLESS, 4)
    assert m.take_pfc() == [(0, {LOSSLESS: 100})]
    drain(m, 3)
    assert m.ingress_bytes(0, LOSSLESS) == 0
    assert m.take_pfc() == [(0, {LOSSLESS: 0})], "no XON after the ingress drained completely"
    assert m.next_deadline() is None


# --- egress scheduling ----------------------------------------------------------------------


def lossy_mmu(**changes) -> Mmu:
    return mmu(lossless=frozenset(), alpha=0.0, threshold=10**8, pool=10**8, **changes)


def test_strict_priorities_first_seven_before_six():
    m = lossy_mmu()
    for prio in range(PRIORITIES):
        fill(m, prio % 3, 3, prio, 2, size=100 + prio)
    order = [prio for prio, _ in drain(m, 3)]
    assert order[:4] == [7, 7, 6, 6]
    assert sorted(order[4:]) == sorted([0, 1, 2, 3, 4, 5] * 2)


def test_strict_frame_arriving_later_jumps_the_queue():
    m = lossy_mmu()
    fill(m, 0, 3, 0, 3)
    assert m.head(3)[0] == 0
    m.pop(3, 0)
    fill(m, 1, 3, 6, 1)
    assert m.head(3)[0] == 6
    m.pop(3, 6)
    assert m.head(3)[0] == 0


def test_head_is_stable_until_pop():
    m = lossy_mmu()
    fill(m, 0, 3, 1, 5, size=400)
    fill(m, 1, 3, 2, 5, size=1000)
    for _ in range(10):
        first = m.head(3)
        assert m.head(3) == first
        assert m.head(3) == first
        m.pop(3, first[0])
    assert m.head(3) is None


def dwrr_shares(weights, sizes, pops):
    m = lossy_mmu(weights=weights)
    for prio, size in sizes.items():
        fill(m, prio % 3, 3, prio, pops, size=size)
    sent = dict.fromkeys(sizes, 0)
    worst = 0
    for _ in range(pops):
        prio, frame = m.head(3)
        m.head(3)                       # extra looks must not earn extra credit
        m.pop(3, prio)
        sent[prio] += len(frame)
        a, b = (sent[p] / weights[p] for p in sizes)
        worst = max(worst, abs(a - b))
    assert all(m.queues[3][p].frames for p in sizes), "test setup: both must stay backlogged"
    return sent, worst


def test_dwrr_equal_weights_equal_bytes():
    sent, worst = dwrr_shares((1,) * PRIORITIES, {2: 1000, 1: 400}, 700)
    assert abs(sent[2] - sent[1]) <= FRAME, sent
    # DRR's bound at any moment: one quantum plus one frame
    assert worst <= 2 * FRAME


def test_dwrr_weights_two_to_one():
    weights = (1, 1, 2, 1, 1, 1, 1, 1)
    sent, worst = dwrr_shares(weights, {2: 300, 1: 700}, 900)
    assert abs(sent[2] - 2 * sent[1]) <= 2 * FRAME, sent
    assert 1.95 <= sent[2] / sent[1] <= 2.05
    assert worst <= 3 * FRAME


def test_dwrr_idle_queue_does_not_hoard_credit():
    m = lossy_mmu()
    fill(m, 0, 3, 1, 1, size=100)
    drain(m, 3)
    fill(m, 0, 3, 1, 50, size=100)
    fill(m, 1, 3, 2, 50, size=1000)
    sent = {1: 0, 2: 0}
    for _ in range(30):
        prio, frame = m.head(3)
        m.pop(3, prio)
        sent[prio] += len(frame)
    assert abs(sent[1] - sent[2]) <= 2 * FRAME, sent


def test_paused_priority_is_skipped_until_expiry():
    m = lossy_mmu()
    fill(m, 0, 3, 2, 3)
    fill(m, 1, 3, 1, 3)
    # 100 quanta at 1 Gbit/s = 51.2 us
    assert m.pfc_received(1_000, 3, {2: 100}) == []
    for _ in range(3):
        prio, _ = m.head(3)
        assert prio == 1
        m.pop(3, prio)
    assert m.head(3) is None and m.backlog[3] == 3
    assert m.next_deadline() == 1_000 + 51_200
    assert m.on_timer(1_000 + 51_199) == []
    assert m.head(3) is None
    assert m.on_timer(1_000 + 51_200) == [3]
    assert m.head(3)[0] == 2
    assert m.next_deadline() is None


def test_pause_on_one_port_leaves_other_ports():
    m = lossy_mmu()
    fill(m, 0, 3, 2, 1)
    fill(m, 0, 2, 2, 1)
    m.pfc_received(0, 3, {2: 65535})
    assert m.head(3) is None
    assert m.head(2)[0] == 2


def test_pfc_zero_quanta_resumes_immediately():
    m = lossy_mmu()
    fill(m, 0, 3, 0, 2)
    assert m.pfc_received(0, 3, {0: 65535, 5: 65535}) == []
    assert m.head(3) is None
    assert m.pfc_received(10, 3, {0: 0}) == [0]
    assert m.head(3)[0] == 0
    assert m.pfc_received(20, 3, {0: 0}) == []   # not paused: nothing resumed
    assert m.pfc_received(30, 3, {5: 0, 0: 7}) == [5]


def test_paused_strict_priority_lets_drr_through():
    m = lossy_mmu()
    fill(m, 0, 3, 7, 2)
    fill(m, 1, 3, 0, 2)
    m.pfc_received(0, 3, {7: 1000})
    assert m.head(3)[0] == 0
    m.pfc_received(5, 3, {7: 0})
    assert m.head(3)[0] == 7


# --- ECN --------------------------------------------------------------------------------------

ECN_PRIO = 1


@functools.lru_cache(maxsize=None)
def ip_frame(tos: int, size: int = FRAME) -> bytes:
    pkt = Ether(src="02:00:00:00:00:01", dst="02:01:00:00:00:01") / IP(
        src="10.0.0.1", dst="10.0.1.2", tos=tos, id=77) / UDP(sport=49152, dport=4791)
    pad = size - len(pkt)
    return bytes(pkt / (b"p" * pad))


def ecn_mmu(ecn=True, kmin=10_000, kmax=20_000, pmax=0.5, seed=1) -> Mmu:
    cfg = config(lossless=frozenset(), alpha=0.0, threshold=10**8, pool=10**8, ecn=ecn, kmin=kmin, kmax=kmax,
                 pmax=pmax)
    return Mmu(cfg, [GBIT] * 4, seed=seed)


def checksum_valid(frame: bytes) -> bool:
    pkt = Ether(frame)
    stored = pkt[IP].chksum
    del pkt[IP].chksum
    return Ether(bytes(pkt))[IP].chksum == stored


ECT0 = (26 << 2) | 0b10
ECT1 = (26 << 2) | 0b01
NOT_ECT = 26 << 2
CE = (26 << 2) | 0b11


def test_test_frames():
    frame = ip_frame(ECT0)
    assert len(frame) == FRAME and frame[15] == 0x6A and checksum_valid(frame)


def queue_then_probe(m: Mmu, level: int, probe: bytes, filler: bytes) -> bytes:
    """Queue ``level`` bytes of ``filler``, enqueue ``probe``; return ``probe`` as stored."""
    for _ in range(level // len(filler)):
        assert m.enqueue(0, 0, 3, ECN_PRIO, filler)
    assert m.enqueue(0, 1, 3, ECN_PRIO, probe)
    frames = [frame for _, frame in drain(m, 3)]
    return frames[-1]


@pytest.mark.parametrize("tos", [ECT0, ECT1])
def test_ect_frame_marked_above_kmax(tos):
    m = ecn_mmu()
    filler = ip_frame(NOT_ECT)
    stored = queue_then_probe(m, 21_000, ip_frame(tos), filler)
    assert stored[15] & 3 == 3
    assert stored[15] >> 2 == 26           # DSCP untouched
    assert checksum_valid(stored)
    pkt = Ether(stored)
    assert pkt[IP].tos == CE and pkt[IP].id == 77 and pkt[UDP].dport == 4791
    assert stored[:15] == ip_frame(tos)[:15] and stored[16:24] == ip_frame(tos)[16:24]
    assert stored[26:] == ip_frame(tos)[26:]
    assert m.counters[3][ECN_PRIO].ecn_marked == 1   # filler is not ECT


@pytest.mark.parametrize("level", [0, 5_000, 10_000])
def test_ect_frame_never_marked_at_or_below_kmin(level):
    m = ecn_mmu(pmax=1.0)
    for _ in range(50):
        stored = queue_then_probe(m, level, ip_frame(ECT0), ip_frame(ECT0))
        assert stored[15] & 3 == 2 and stored == ip_frame(ECT0)
    assert m.counters[3][ECN_PRIO].ecn_marked == 0


def test_non_ect_never_marked():
    m = ecn_mmu()
    for tos in (NOT_ECT, 0):
        stored = queue_then_probe(m, 30_000, ip_frame(tos), ip_frame(tos))
        assert stored == ip_frame(tos)
    # an already-CE frame stays CE and is not counted as marked here
    stored = queue_then_probe(m, 30_000, ip_frame(CE), ip_frame(NOT_ECT))
    assert stored == ip_frame(CE)
    assert m.counters[3][ECN_PRIO].ecn_marked == 0


def test_ecn_off_never_marks():
    m = ecn_mmu(ecn=False)
    stored = queue_then_probe(m, 30_000, ip_frame(ECT0), ip_frame(ECT0))
    assert stored == ip_frame(ECT0)
    assert m.counters[3][ECN_PRIO].ecn_marked == 0


@pytest.mark.parametrize("level, expected", [(12_000, 0.5 * 2_000 / 10_000), (15_000, 0.5 * 5_000 / 10_000),
                                             (19_000, 0.5 * 9_000 / 10_000)])
def test_ecn_ramp_probability(level, expected):
    """Hold the queue at ``level`` bytes; each arrival is marked with the RED ramp probability."""
    m = ecn_mmu(pmax=0.5, seed=12345)
    frame = ip_frame(ECT0)
    samples = 3000
    n = level // FRAME
    for _ in range(n):
        m.enqueue(0, 0, 3, ECN_PRIO, frame)
    marked_before = m.counters[3][ECN_PRIO].ecn_marked
    ce = 0
    popped = 0
    for i in range(samples):
        assert m.queues[3][ECN_PRIO].bytes == level
        assert m.enqueue(i, i % 3, 3, ECN_PRIO, frame)
        prio, out = m.head(3)
        m.pop(3, prio)
        popped += 1
        if popped > n:               # the first n pops are the warm-up frames
            ce += out[15] & 3 == 3
    for _, out in drain(m, 3):
        ce += out[15] & 3 == 3
    marked = m.counters[3][ECN_PRIO].ecn_marked - marked_before
    assert marked == ce
    rate = marked / samples
    sigma = (expected * (1 - expected) / samples) ** 0.5
    assert abs(rate - expected) <= max(5 * sigma, 0.01), (rate, expected)
