"""Port by proof: emulator/model/mmu.py against emulator._core.mmu on the same random arrivals (ECT IPv4 frames
among them), sends, PFC frames and timers, with and without a PFC watchdog; every answer, PFC frame, counter,
buffer figure and deadline compared after each step (deleted with the Python module)."""

from __future__ import annotations

import dataclasses
import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import mmu as core
from emulator._core import pfcwd as core_pfcwd
from emulator.model import mmu as py
from emulator.model.pfcwd import WatchdogConfig

PORTS = 4
COUNTERS = [f.name for f in dataclasses.fields(py.Counters)]


def frame(size: int, tos: int, ident: int) -> bytes:
    """An Ethernet/IPv4 frame of ``size`` bytes (at least 34) with ``tos`` (its ECN bits) and a valid checksum."""
    header = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, size - 14, ident, 0, 64, 17, 0, b"\x0a\0\0\x01",
                                   b"\x0a\0\0\x02"))
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    header[10:12] = (~total & 0xFFFF).to_bytes(2, "big")
    return bytes(12) + b"\x08\x00" + bytes(header) + bytes(size - 34)


PRIORITY = st.integers(0, 7)
BYTES = st.integers(0, 40).map(lambda n: 500 * n)


def script(rng: random.Random, steps: int) -> list[tuple]:
    """A random driver's steps: mostly arrivals on few (ingress, priority) pairs, so that shares fill up and PFC,
    drops and marks happen; round sizes (a threshold met exactly, a queue at kmin) and odd ones."""
    out = []
    for _ in range(steps):
        dt = rng.choice([0, 0, rng.randrange(1000), rng.randrange(300_000)])
        kind = rng.random()
        if kind < 0.5:
            size = rng.choice([64, 500, 1000, 1500, rng.randint(34, 1600)])
            priority = rng.choice([3, 3, 1, 6, rng.randrange(8)])
            ingress = rng.choice([0, 0, rng.randrange(PORTS)])
            out.append((dt, "enqueue", (ingress, rng.randrange(PORTS), priority,
                                        frame(size, rng.randrange(256), rng.randrange(0x10000)))))
        elif kind < 0.85:
            out.append((dt, "send", rng.randrange(PORTS)))
        elif kind < 0.95:
            quanta = {p: rng.choice([0, 0, 1, 100, 0xFFFF, rng.randrange(0x10000)])
                      for p in sorted(rng.sample(range(8), rng.randint(1, 3)))}
            out.append((dt, "pfc", (rng.randrange(PORTS), quanta)))
        else:
            out.append((dt, "timer", None))
    return out


@st.composite
def configs(draw) -> py.MmuConfig:
    reserve, headroom = draw(st.integers(0, 6).map(lambda n: 500 * n)), draw(BYTES)
    lossless = frozenset(draw(st.one_of(st.just({3}), st.sets(PRIORITY, max_size=3))))
    strict = frozenset(draw(st.one_of(st.just({6, 7}), st.sets(PRIORITY, max_size=3))))
    pool = draw(st.one_of(BYTES.map(lambda n: n + 500), st.integers(1, 40_000)))
    kmin = draw(st.integers(0, 16).map(lambda n: 500 * n))
    pfcwd = draw(st.one_of(st.none(), st.builds(WatchdogConfig, st.integers(1, 2_000_000),
                                                 st.integers(1, 2_000_000), st.sampled_from(["drop", "forward", "alert"]))))
    return py.MmuConfig(
        buffer=pool + PORTS * (8 * reserve + len(lossless) * headroom), reserve=reserve, headroom=headroom,
        alpha=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])), threshold=draw(BYTES),
        xon_delta=draw(st.integers(0, 10).map(lambda n: 500 * n)), lossless=lossless, quanta=draw(st.integers(1, 0xFFFF)), strict=strict,
        weights=tuple(draw(st.lists(st.integers(1, 4), min_size=8, max_size=8))), mtu_frame=draw(st.integers(64, 1600)),
        ecn=draw(st.sampled_from([True, True, True, False])), kmin=kmin, kmax=kmin + draw(st.one_of(BYTES.map(lambda n: n + 500), st.integers(1, 20_000))),
        pmax=draw(st.one_of(st.sampled_from([0.2, 0.5, 1.0]), st.floats(0, 1))), pfcwd=pfcwd)


def observed(m) -> tuple:
    """Everything a caller can read of an MMU, between steps."""
    return (
        m.next_deadline(), m.shared_used, m.pool, list(m.backlog),
        [[getattr(c, name) for name in COUNTERS] for row in m.counters for c in row],
        [(ing.used, ing.headroom, ing.xoff, ing.refresh_at) for ing in m.ingress],
        [(q.bytes, q.deficit, [f for f, _ in q.frames]) for row in m.queues for q in row],
        [(list(s.until), s.paused_ns, s.frames) for s in m.pause],
        None if m.watchdog is None else (m.watchdog.storms, m.watchdog.restorations),
    )


@settings(max_examples=80, deadline=None)
@given(configs(), st.lists(st.sampled_from([10**8, 10**9, 10**10, 4 * 10**10]), min_size=PORTS, max_size=PORTS),
       st.integers(0, 2**40), st.integers(0, 2**32))
def test_same_admission_pfc_scheduling_and_marks(config, rates, seed, script_seed):
    a, b = py.Mmu(config, rates, seed=seed), core.Mmu(config, rates, seed=seed)
    now = 0
    for dt, op, arg in script(random.Random(script_seed), 300):
        now += dt
        if op == "enqueue":
            assert a.enqueue(now, *arg) == b.enqueue(now, *arg)
        elif op == "send":
            head = a.head(arg)
            assert b.head(arg) == head
            if head is not None:
                a.pop(arg, head[0])
                b.pop(arg, head[0])
        elif op == "pfc":
            assert a.pfc_received(now, *arg) == b.pfc_received(now, *arg)
        elif (deadline := a.next_deadline()) is not None:  # a timer: at the deadline, as a driver wakes
            now = max(now, deadline)
            assert a.on_timer(now) == b.on_timer(now)
        assert a.take_pfc() == b.take_pfc()
        assert observed(a) == observed(b)


def test_configs_alike():
    fields = {f.name: getattr(configs, "__name__", None) for f in dataclasses.fields(py.MmuConfig)}
    settings_ = dict(buffer=72_000, reserve=1000, headroom=5000, alpha=0.5, threshold=5000, xon_delta=2000,
                     lossless=frozenset({3}), quanta=65535, strict=frozenset({6, 7}), weights=(1,) * 8,
                     mtu_frame=1000, ecn=True, kmin=10, kmax=20, pmax=0.2)
    a = py.MmuConfig(**settings_, pfcwd=WatchdogConfig(5, 10, "forward"))
    b = core.MmuConfig(**settings_, pfcwd=core_pfcwd.WatchdogConfig(5, 10, "forward"))
    for name in fields:
        value = getattr(b, name)
        assert (value.describe() if name == "pfcwd" else value) == (
            getattr(a, name).describe() if name == "pfcwd" else getattr(a, name)), name
    assert [a.shared_pool(n) for n in range(1, 8)] == [b.shared_pool(n) for n in range(1, 8)]
    assert b == core.MmuConfig(**settings_, pfcwd=core_pfcwd.WatchdogConfig(5, 10, "forward"))
    assert core.Mmu(b, [10**9] * 2).config is b


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, PORTS - 1), st.integers(0, PORTS - 1), PRIORITY, st.binary(max_size=90)),
                max_size=60), st.integers(0, 2**32))
def test_compiled_mmu_takes_any_bytes(arrivals, seed):
    """Hostile frames (any length, any bytes) into the compiled MMU with ECN marking from the first byte: no
    exception, the frames come out whole (a frame too short to mark stays as it was), the buffer balances."""
    config = py.MmuConfig(buffer=10**6, reserve=100, headroom=1000, alpha=1.0, threshold=0, xon_delta=100,
                          lossless=frozenset({3}), quanta=100, strict=frozenset({7}), weights=(1,) * 8, mtu_frame=100,
                          ecn=True, kmin=0, kmax=1, pmax=1.0)
    m = core.Mmu(config, [10**9] * PORTS, seed=seed)
    sent = []
    for ingress, egress, priority, raw in arrivals:
        if m.enqueue(0, ingress, egress, priority, raw) and len(raw) < 26:
            sent.append(raw)
    out = []
    for egress in range(PORTS):
        while (head := m.head(egress)) is not None:
            m.pop(egress, head[0])
            out.append(head[1])
    assert all(frame in out for frame in sent)
    assert m.shared_used == 0 and list(m.backlog) == [0] * PORTS
