"""InfiniBand credit flow control (emulator._core.credits), driven with a fake clock (``now`` in ns passed in).

The direct tests work the mod-4096 send rule, the init handshake and the
flow-control packet timing out by hand.  The closed-loop tests play two
:class:`CreditLink` ends over an emulated wire: A has an endless backlog of
random-size packets on every VL and sends whenever its credits allow; B
holds what arrives until its "switch" drains it at a set rate per VL.  The
invariant is the one credits exist for: B's buffer never overflows and B
never receives beyond its grant (``received`` raises), whatever the seed,
the drain rate, lost flow-control packets or lost data.
"""

import heapq
import random
from collections import deque

import pytest

from emulator._core.credits import (BLOCK, FABRIC_MIN_INTERVAL_NS, FABRIC_REFRESH_NS, OP_INIT, OP_NORMAL, CreditLink,
                                    CreditViolation, FcPacket, blocks, fabric_min_interval_ns)

MODULUS = 4096
FC_BYTES = 8  # a flow-control packet on the wire (6 bytes + framing); its size barely matters
LINK_PS_PER_BYTE = 1000  # 8 Gb/s: one byte a nanosecond
US = 1000
MS = 1_000_000


def nbytes(nblocks: int) -> int:
    """A packet of exactly ``nblocks`` blocks, its last one full."""
    return nblocks * BLOCK


# --- blocks and the send rule ------------------------------------------------------------

def test_blocks_round_up_to_64_bytes():
    assert [blocks(n) for n in (1, 63, 64, 65, 128, 4160)] == [1, 1, 1, 2, 2, 65]
    with pytest.raises(ValueError):
        blocks(0)


def granted(link: CreditLink, vl: int, fccl: int, fctbs: int = 0) -> None:
    link.on_fc(0, FcPacket(OP_NORMAL, fctbs, vl, fccl % MODULUS))


def test_send_rule_at_the_mod_4096_boundary():
    a = CreditLink(1, 100)
    # Walk FCTBS up to 4090 under grants of 2048 ahead (the first one also
    # tells A the peer's window: 2048 blocks).
    fctbs = 0
    for step in (2000, 2000, 90):
        granted(a, 0, fctbs + 2048)
        a.sent(0, nbytes(step))
        fctbs += step
    assert fctbs == 4090
    # The grant wraps past 4095 to 4: ten blocks of credit, across the wrap.
    granted(a, 0, 4090 + 10)
    assert a.credits(0) == 10
    assert a.can_send(0, nbytes(10))
    assert not a.can_send(0, nbytes(10) + 1)  # 11 blocks: FCTBS would pass FCCL
    a.sent(0, nbytes(10))  # FCTBS wraps to 4 = FCCL
    assert a.credits(0) == 0
    assert not a.can_send(0, 1)
    # With no credit, (FCCL - (FCTBS + 2047)) mod 4096 = 2049 > 2048: refused.
    assert not a.can_send(0, nbytes(2047))
    # A full window: exactly 2048 ahead, the largest packet (2047 blocks) fits.
    granted(a, 0, 4 + 2048)
    assert a.credits(0) == 2048
    assert a.can_send(0, nbytes(2047))
    # 2048 blocks would pass the rule even with no credit ((0 - 2048) mod 4096
    # = 2048): ambiguous, so never sendable.
    with pytest.raises(ValueError):
        a.can_send(0, nbytes(2048))


def test_receiver_holds_its_grant_across_the_wrap():
    b = CreditLink(1, 3000)  # more than a window: only 2048 blocks are ever granted
    assert b.fc_due(0) == [FcPacket(OP_INIT, 0, 0, 2048)]
    for abr in (2000, 4000, 6000):  # ABR wraps past 4095
        b.received(0, nbytes(2000))
        b.freed(0, nbytes(2000))
        # a grant of half the window or more goes at once
        assert b.fc_due(0) == [FcPacket(OP_INIT, 0, 0, (abr + 2048) % MODULUS)]
    b.received(0, nbytes(48))  # ABR 6048 = 1952 (mod 4096), 48 blocks held
    (fc,) = b.fc_due(0 + MS)  # a refresh: the grant is ABR + 2048, not + 2952
    assert fc.fccl == (6048 + 2048) % MODULUS == 4000
    b.received(0, nbytes(2048))  # up to the grant exactly
    with pytest.raises(CreditViolation):
        b.received(0, 1)


def test_receiving_beyond_the_grant_raises():
    b = CreditLink(1, 10)
    b.received(0, nbytes(10))
    with pytest.raises(CreditViolation):
        b.received(0, 1)
    b.freed(0, nbytes(4))  # room again, but not yet granted to the peer
    with pytest.raises(CreditViolation):
        b.received(0, 1)
    b.fc_due(0)
    b.received(0, nbytes(4))
    assert b.occupancy(0) == 10
    with pytest.raises(ValueError):
        b.freed(0, nbytes(11))


def test_sent_without_credit_raises():
    a = CreditLink(2, 100, peer_capacity_blocks=100)
    a.sent(0, nbytes(100))
    with pytest.raises(CreditViolation):
        a.sent(0, 1)
    assert a.counters[0]["packets_sent"] == 1 and a.counters[0]["blocks_sent"] == 100
    waiting = CreditLink(1, 100)  # no assumed peer buffer: nothing until the peer's packet
    with pytest.raises(CreditViolation):
        waiting.sent(0, 1)


def test_a_packet_larger_than_the_whole_peer_buffer_is_an_error_not_a_stall():
    a = CreditLink(1, 100, peer_capacity_blocks=64)
    assert a.can_send(0, nbytes(64))
    with pytest.raises(ValueError, match="never"):
        a.can_send(0, nbytes(64) + 1)
    with pytest.raises(ValueError, match="never"):
        a.sent(0, nbytes(64) + 1)
    # Learnt from the peer's first packet: it has received nothing yet, so its
    # grant is its whole buffer.
    learner = CreditLink(1, 100)
    granted(learner, 0, 64)
    with pytest.raises(ValueError, match="never"):
        learner.can_send(0, nbytes(65))
    # Before that only the window bounds a packet.
    with pytest.raises(ValueError, match="never"):
        CreditLink(1, 100).can_send(0, nbytes(2048))


# --- flow-control packets ------------------------------------------------------------------

def test_init_handshake():
    a = CreditLink(2, [100, 3000])
    b = CreditLink(2, 200)
    assert a.next_deadline() == 0  # due at once, whatever the clock reads
    assert not a.can_send(0, 1)  # nothing assumed of B: wait for its init
    from_a = a.fc_due(10)
    assert from_a == [FcPacket(OP_INIT, 0, 0, 100), FcPacket(OP_INIT, 0, 1, 2048)]
    assert a.next_deadline() == 10 + MS  # nothing changes until the refresh
    for fc in from_a:
        b.on_fc(20, fc)
    assert b.next_deadline() == 0
    # B had sent nothing; A's init makes it answer at once, already as normal.
    assert b.fc_due(20) == [FcPacket(OP_NORMAL, 0, 0, 200), FcPacket(OP_NORMAL, 0, 1, 200)]
    assert b.credits(1) == 2048 and b.can_send(1, nbytes(2047))
    for fc in b.fc_due(20):
        raise AssertionError(f"{fc} sent twice")
    a.on_fc(30, FcPacket(OP_NORMAL, 0, 0, 200))
    assert a.credits(0) == 200 and a.can_send(0, nbytes(200))
    assert a.credits(1) == 0  # VL 1's answer has not arrived
    assert a.next_deadline() == 10 + MS  # a normal packet asks for no answer
    assert [fc.op for fc in a.fc_due(10 + MS)] == [OP_NORMAL, OP_INIT]  # VL 1 still unheard
    assert a.counters[0]["fc_sent"] == 2 and a.counters[0]["fc_received"] == 1


def test_both_inits_crossing_end_in_one_answer_each():
    a, b = CreditLink(1, 100), CreditLink(1, 100)
    (fa,), (fb,) = a.fc_due(0), b.fc_due(0)
    a.on_fc(5, fb)
    b.on_fc(5, fa)
    (ra,), (rb,) = a.fc_due(5), b.fc_due(5)
    assert ra.op == rb.op == OP_NORMAL
    a.on_fc(10, rb)
    b.on_fc(10, ra)
    assert a.fc_due(10) == b.fc_due(10) == []


def test_grant_updates_are_rate_limited_unless_large_and_refreshed_periodically():
    b = CreditLink(1, 1000, refresh_ns=MS, min_interval_ns=20 * US)
    b.fc_due(0)
    b.received(0, nbytes(900))
    assert b.next_deadline() == MS  # receiving changes no grant
    b.freed(0, nbytes(10))
    assert b.next_deadline() == 20 * US  # a small grant waits out the interval
    assert b.fc_due(5 * US) == []
    b.freed(0, nbytes(10))
    (fc,) = b.fc_due(20 * US)  # one packet carries both
    assert fc.fccl == 1000 + 20
    b.freed(0, nbytes(499))
    assert b.fc_due(21 * US) == []
    b.freed(0, nbytes(1))  # 500 blocks since the last grant: half the window, at once
    assert b.next_deadline() == 20 * US  # i.e. past: now
    (fc,) = b.fc_due(21 * US)
    assert fc.fccl == 1000 + 520
    # Nothing changes: one refresh a refresh_ns.
    assert b.next_deadline() == 21 * US + MS
    assert b.fc_due(21 * US + MS - 1) == []
    assert [fc.fccl for fc in b.fc_due(21 * US + MS)] == [1520]
    assert b.counters[0]["fc_sent"] == 4


def test_the_peers_fctbs_resynchronises_abr_after_lost_data():
    a = CreditLink(1, 100, peer_capacity_blocks=100)
    b = CreditLink(1, 100, peer_capacity_blocks=100)
    b.fc_due(0)
    a.sent(0, nbytes(30))  # lost on the wire
    a.sent(0, nbytes(20))
    b.received(0, nbytes(20))
    b.freed(0, nbytes(20))
    (fc,) = b.fc_due(MS)
    assert fc.fccl == 120  # B knows of 20 blocks only: 30 credits leaked
    a.on_fc(MS, fc)
    assert a.credits(0) == 70
    (fa,) = a.fc_due(MS)
    b.on_fc(MS, fa)  # A's FCTBS 50: ABR catches up, the leak is returned
    (fc,) = b.fc_due(MS + 20 * US)
    assert fc.fccl == 150


def test_a_flow_control_packet_overtaking_data_is_caught():
    # The model needs a FIFO wire: here A's packet (FCTBS 10) arrives before
    # the 10 blocks it counts, so B's ABR counts them twice.
    a = CreditLink(1, 10, peer_capacity_blocks=10)
    b = CreditLink(1, 10, peer_capacity_blocks=10)
    b.fc_due(0)
    a.sent(0, nbytes(10))
    (fa,) = a.fc_due(0)
    b.on_fc(1, fa)
    with pytest.raises(CreditViolation):
        b.received(0, nbytes(10))


def test_bad_arguments():
    with pytest.raises(ValueError):
        CreditLink(2, [100])
    with pytest.raises(ValueError):
        CreditLink(1, 100, min_interval_ns=2 * MS)
    link = CreditLink(2, 100)
    with pytest.raises(ValueError):
        link.can_send(-1, 64)
    with pytest.raises(ValueError):
        link.on_fc(0, FcPacket(OP_NORMAL, 0, 2, 0))
    with pytest.raises(ValueError):
        FcPacket(OP_NORMAL, MODULUS, 0, 0)


# --- closed loop -------------------------------------------------------------------------

class Wire:
    """One direction of a link: FIFO, serialising at a byte rate, then a fixed latency."""

    def __init__(self, latency_ns: int) -> None:
        self.latency_ns = latency_ns
        self.free_at = 0

    def send(self, now: int, size: int) -> int:
        """Put ``size`` bytes on the wire; when they arrive."""
        start = max(now, self.free_at)
        self.free_at = start + -(-size * LINK_PS_PER_BYTE // 1000)
        return self.free_at + self.latency_ns


class Loop:
    """A sends to B over a wire; B's switch drains each VL at ``drain_ps_per_byte`` (None: never).

    ``fc_loss`` drops flow-control packets at random both ways,
    ``blackout`` = (start, end) drops all of them sent in that span, and
    ``data_loss`` drops data packets (B never sees them, so never frees them).
    """

    def __init__(self, seed: int, vls: int, capacity: list[int], drain_ps_per_byte: list[int | None],
                 latency_ns: int = 1000, peer_known: bool = True, fc_loss: float = 0.0,
                 blackout: tuple[int, int] | None = None, data_loss: float = 0.0,
                 refresh_ns: int = MS, min_interval_ns: int = 20 * US) -> None:
        self.rng = random.Random(seed)
        self.capacity = capacity
        a_capacity = [self.rng.randint(65, 2500) for _ in range(vls)]
        timers = dict(refresh_ns=refresh_ns, min_interval_ns=min_interval_ns)
        self.a = CreditLink(vls, a_capacity, capacity if peer_known else None, **timers)
        self.b = CreditLink(vls, capacity, a_capacity if peer_known else None, **timers)
        self.a_to_b, self.b_to_a = Wire(latency_ns), Wire(latency_ns)
        self.drain = drain_ps_per_byte
        self.fc_loss, self.blackout, self.data_loss = fc_loss, blackout, data_loss
        self.vls = vls
        self.next_size = [self.packet() for _ in range(vls)]
        self.turn = 0
        self.held = [deque() for _ in range(vls)]  # packets in B's buffer, in arrival order
        self.draining = [False] * vls
        self.delivered: list[list[tuple[int, int]]] = [[] for _ in range(vls)]  # (time, bytes) B drained
        self.lost_blocks = 0
        self.events: list[tuple[int, int, str, tuple]] = []
        self.seq = 0
        self.now = 0

    def packet(self) -> int:
        return self.rng.randint(64, 4160)

    def at(self, t: int, kind: str, *args) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, args))

    def fc_lost(self) -> bool:
        if self.blackout and self.blackout[0] <= self.now < self.blackout[1]:
            return True
        return self.rng.random() < self.fc_loss

    def start_drain(self, vl: int) -> None:
        if self.held[vl] and not self.draining[vl] and self.drain[vl] is not None:
            self.draining[vl] = True
            self.at(self.now + -(-self.held[vl][0] * self.drain[vl] // 1000), "drained", vl)

    def handle(self, kind: str, args: tuple) -> None:
        if kind == "data":
            vl, size = args
            self.b.received(vl, size)  # raises CreditViolation past B's grant
            assert self.b.occupancy(vl) <= self.capacity[vl]
            self.held[vl].append(size)
            self.start_drain(vl)
        elif kind == "drained":
            (vl,) = args
            size = self.held[vl].popleft()
            self.b.freed(vl, size)
            self.delivered[vl].append((self.now, size))
            self.draining[vl] = False
            self.start_drain(vl)
        else:
            dest, fc = args
            dest.on_fc(self.now, fc)

    def step(self) -> None:
        while self.events and self.events[0][0] <= self.now:
            _, _, kind, args = heapq.heappop(self.events)
            self.handle(kind, args)
        if self.a_to_b.free_at <= self.now:  # round robin over the VLs with credit
            for i in range(self.vls):
                vl = (self.turn + i) % self.vls
                size = self.next_size[vl]
                if self.a.can_send(vl, size):
                    self.a.sent(vl, size)
                    arrival = self.a_to_b.send(self.now, size)
                    if self.rng.random() < self.data_loss:
                        self.lost_blocks += blocks(size)
                    else:
                        self.at(arrival, "data", vl, size)
                    self.next_size[vl] = self.packet()
                    self.turn = vl + 1
                    break
        for link, wire, dest in ((self.a, self.a_to_b, self.b), (self.b, self.b_to_a, self.a)):
            for fc in link.fc_due(self.now):
                arrival = wire.send(self.now, FC_BYTES)
                if not self.fc_lost():
                    self.at(arrival, "fc", dest, fc)
            assert link.next_deadline() > self.now  # everything due went out

    def run(self, until: int) -> "Loop":
        while self.now <= until:
            self.step()
            times = [self.a.next_deadline(), self.b.next_deadline()]
            if self.events:
                times.append(self.events[0][0])
            if self.a_to_b.free_at > self.now:
                times.append(self.a_to_b.free_at)
            self.now = min(times)
        for vl in range(self.vls):
            assert self.b.counters[vl]["max_occupancy_blocks"] <= self.capacity[vl]
        return self

    def rate(self, vl: int, start: int, end: int) -> float:
        """Bytes a nanosecond B drained on ``vl`` in [start, end)."""
        return sum(size for t, size in self.delivered[vl] if start <= t < end) / (end - start)

    def wraps(self, vl: int) -> int:
        return self.a.counters[vl]["blocks_sent"] // MODULUS


SLOW, FAST = 2000, 500  # drain picoseconds a byte: half and twice the link rate


def random_loop(seed: int, drain: int, **changes) -> Loop:
    rng = random.Random(seed)
    vls = rng.randint(1, 4)
    settings = dict(
        seed=seed, vls=vls,
        capacity=[rng.choice([65, 66, 100, rng.randint(65, 2048), 2048, 3000]) for _ in range(vls)],
        drain_ps_per_byte=[drain] * vls, latency_ns=rng.choice([100, 1000, 5000]),
        peer_known=rng.random() < 0.5,
    )
    settings.update(changes)
    return Loop(**settings)


@pytest.mark.parametrize("drain", [SLOW, FAST], ids=["slow-drain", "fast-drain"])
@pytest.mark.parametrize("seed", range(12))
def test_buffer_never_overflows(seed, drain):
    loop = random_loop(seed, drain).run(8 * MS)
    for vl in range(loop.vls):
        assert loop.wraps(vl) >= 2
        assert loop.rate(vl, 6 * MS, 8 * MS) > 0


@pytest.mark.parametrize("seed", range(8))
def test_lost_flow_control_packets_are_repaired(seed):
    loop = random_loop(seed, SLOW, fc_loss=0.3, refresh_ns=200 * US).run(10 * MS)
    for vl in range(loop.vls):
        assert loop.wraps(vl) >= 1
        for start in range(0, 10 * MS, 2 * MS):  # throughput continues throughout
            assert loop.rate(vl, start, start + 2 * MS) > 0


def test_a_flow_control_blackout_stalls_the_sender_until_the_next_refresh():
    # Every flow-control packet sent in [1 ms, 3 ms) is lost: A uses up its
    # credits, B drains empty and has no news left to send.  The refresh
    # (1 ms after B's last, lost, packet) restarts the flow.
    loop = Loop(1, 1, [256], [SLOW], blackout=(MS, 3 * MS)).run(6 * MS)
    times = [t for t, _ in loop.delivered[0]]
    gap_start = max(t for t in times if t < 3 * MS)
    resumed = min(t for t in times if t > 3 * MS)
    assert gap_start < 1 * MS + 100 * US  # the credits left drained out soon
    assert resumed < 3 * MS + 1 * MS + 10 * US  # within one refresh (+ a round trip and a packet)
    assert loop.rate(0, 4 * MS, 6 * MS) == pytest.approx(0.5, rel=0.02)
    assert loop.a.counters[0]["stalls"] >= 1


@pytest.mark.parametrize("seed", range(4))
def test_lost_data_does_not_leak_credits(seed):
    # Without ABR := FCTBS, every lost block would be a credit gone for good:
    # far more than the whole buffer is lost here, and data still flows.
    loop = Loop(seed, 2, [200, 300], [SLOW, SLOW], data_loss=0.05, refresh_ns=100 * US).run(10 * MS)
    assert loop.lost_blocks > 10 * 300
    for vl in range(2):
        assert loop.rate(vl, 8 * MS, 10 * MS) > 0.3


@pytest.mark.parametrize("seed", range(3))
def test_throughput_is_the_drain_rate_when_the_buffer_covers_the_round_trip(seed):
    # Drain 0.5 B/ns; credits return within 2 us of latency + 20 us of rate
    # limit + a 4 kB packet: ~13 kB in flight, well inside 1024 blocks (64 kB).
    loop = Loop(seed, 1, [1024], [SLOW], latency_ns=1000).run(20 * MS)
    assert loop.rate(0, 2 * MS, 20 * MS) == pytest.approx(0.5, rel=0.005)
    assert loop.wraps(0) >= 35
    assert loop.a.counters[0]["stalls"] > 0  # the receiver is the bottleneck: A waits on credits


def test_throughput_is_buffer_over_round_trip_when_the_buffer_is_small():
    # 100 blocks (6400 B) over a 100 us round trip: 6400 B / (100 us + 20 us of
    # rate limit) ~ 0.05 B/ns, far below the drain's 2 B/ns.
    loop = Loop(0, 1, [100], [FAST], latency_ns=50 * US).run(10 * MS)
    assert 0.03 < loop.rate(0, 2 * MS, 10 * MS) < 0.065


def test_no_stalls_when_the_receiver_keeps_up():
    # B drains at twice the link rate and 2048 blocks cover the round trip:
    # the link, not the credits, sets the pace.
    loop = Loop(0, 2, [2048, 2048], [FAST, FAST]).run(5 * MS)
    assert [loop.a.counters[vl]["stalls"] for vl in range(2)] == [0, 0]
    assert loop.rate(0, MS, 5 * MS) + loop.rate(1, MS, 5 * MS) == pytest.approx(1.0, rel=0.01)


def test_a_stalled_vl_does_not_block_another():
    loop = Loop(0, 2, [256, 256], [None, SLOW]).run(5 * MS)
    assert loop.delivered[0] == []
    assert loop.b.occupancy(0) > 256 - 65  # full but for less than a packet
    assert loop.a.counters[0]["stalls"] == 1  # one stall, however often A asked
    assert loop.rate(1, MS, 5 * MS) == pytest.approx(0.5, rel=0.01)


def test_the_remembered_deadline_is_always_the_one_a_fresh_scan_gives():
    """next_deadline keeps its answer between changes; every change that moves a deadline must drop it."""
    rng = random.Random(7)
    a, b = CreditLink(vls=4, capacity_blocks=64), CreditLink(vls=4, capacity_blocks=64)
    now, in_b = 0, [[] for _ in range(4)]

    def fresh(link: CreditLink) -> int:
        return min(link._due_at(vl) for vl in range(link.vls))

    for _ in range(5000):
        now += rng.randrange(0, 300 * US)
        op = rng.randrange(4)
        vl = rng.randrange(4)
        if op == 0 and a.can_send(vl, 1024):
            a.sent(vl, 1024)
            b.received(vl, 1024)
            in_b[vl].append(1024)
        elif op == 1 and in_b[vl]:
            b.freed(vl, in_b[vl].pop())
        elif op == 2:
            for fc in b.fc_due(now):
                a.on_fc(now, fc)
        else:
            for fc in a.fc_due(now):
                b.on_fc(now, fc)
        for link in (a, b):
            assert link.next_deadline() == fresh(link)


def test_the_fabric_lets_a_grant_wait_two_frame_times_within_bounds():
    """At 20 Mbit/s a 4214-byte frame takes 1.69 ms: a 500 us limit answered every data packet."""
    assert fabric_min_interval_ns(20_000_000, 4214) == 2 * 4214 * 400  # 400 ns a byte: 3.37 ms
    assert fabric_min_interval_ns(10**9, 1514) == FABRIC_MIN_INTERVAL_NS  # 24 us of frames: the floor
    assert fabric_min_interval_ns(1000, 4214) == FABRIC_REFRESH_NS  # never past the refresh
    assert fabric_min_interval_ns(10**9, 1514, 0) == 2 * 1514 * 8  # no floor (--switch fc_floor=0): two frames
    assert fabric_min_interval_ns(400 * 10**9, 4214, 0) == 2 * 4214 * 8 // 400  # 168 ns at 400 Gbit/s
