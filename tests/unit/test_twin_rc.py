"""Port by proof: emulator/model/rc.py against its compiled twin emulator._core.rc (deleted with the Python model).

Two QPs connected back to back, twice: a Python pair and a compiled pair, each over its own copy of the same
memory (agents/memory.py's region tables, same seeds, same bytes).  Both get the same random sequence of work
requests, pulls (with and without the rate limiter's leave), deliveries in any order, drops, duplicates, CE
marks, hostile injected packets, time steps and polls; after every step the packets sent, the completions, the
counters, the PSN state and the deadlines must be the same, and at the end every byte of memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator._core import rc as core_rc
from emulator._core import transport as core_transport
from emulator.agents.memory import ACCESS_ALL, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, RegionTable
from emulator.model import rc as py_rc
from emulator.wire import transport as py_transport

QPNS = (0x11, 0x2A)
PSNS = (0xFFFFF0, 0x5000)  # the first wraps the 24-bit PSN space within a few packets
BASES = (0x1000_0000, 0x7F00_0000)
REGION = 1 << 15
SPARE = 0x1000  # a second region per host: read-only, for protection and access errors
FIELDS = ("opcode", "dest_qp", "psn", "ack_req", "solicited", "pkey", "va", "rkey", "dma_len", "imm", "syndrome",
          "msn", "payload", "ecn_ce")
STATE = ("state", "una", "tx_psn", "end_psn", "high_psn", "epsn", "msn", "nak_sent", "rto_deadline", "rnr_until",
         "retries_left", "rnr_left", "remote_qpn")


@dataclass
class Host:
    table: RegionTable
    buf: bytearray
    key: int
    spare: bytearray
    spare_key: int


def make_host(side: int) -> Host:
    table = RegionTable(side + 7)
    buf = bytearray(random.Random(side).randbytes(REGION))
    key = table.register(1, BASES[side], REGION, ACCESS_ALL, buffer=buf).key
    spare = bytearray(random.Random(side + 100).randbytes(SPARE))
    spare_key = table.register(1, BASES[side] + REGION, SPARE, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ,
                               buffer=spare).key
    return Host(table, buf, key, spare, spare_key)


@dataclass
class Pair:
    """Two connected QPs of one implementation, their memory, and the packets on the wire each way."""

    rc: Any
    hosts: list[Host]
    qps: list[Any]
    wire: list[list[Any]] = field(default_factory=lambda: [[], []])  # [0]: A to B, [1]: B to A
    history: list[list[Any]] = field(default_factory=lambda: [[], []])  # every packet ever sent, each way
    polled: list[list[tuple]] = field(default_factory=lambda: [[], []])


def make_pair(rc: Any, configs: tuple[dict, dict]) -> Pair:
    hosts = [make_host(0), make_host(1)]
    qps = [rc.RcQueuePair(QPNS[i], hosts[i].table.domain(1), rc.RcConfig(**configs[i]), PSNS[i]) for i in (0, 1)]
    qps[0].connect(QPNS[1], PSNS[1])
    qps[1].connect(QPNS[0], PSNS[0])
    return Pair(rc, hosts, qps)


def packet_fields(packet: Any) -> tuple | None:
    if packet is None:
        return None
    values = {name: getattr(packet, name) for name in FIELDS}
    values["payload"], values["opcode"] = bytes(values["payload"]), int(values["opcode"])
    return tuple(values[name] for name in FIELDS)


def completion_fields(c: Any) -> tuple:
    return c.wr_id, int(c.status), int(c.opcode), c.qp_num, c.byte_len, c.imm, c.timestamp


def out_fields(qp: Any) -> list[tuple]:
    return [(type(e).__name__, e.psn, e.syndrome, e.msn) if type(e).__name__ == "_Reply" else
            (type(e).__name__, e.first_psn, e.next_index, e.npkts) for e in qp.out]


def snapshot(pair: Pair) -> list:
    """Everything of both QPs the two implementations must agree on."""
    return [([getattr(qp, name) for name in STATE], dict(qp.counters), qp.next_deadline(), qp.has_data(),
             len(qp.sq), len(qp.rq), out_fields(qp)) for qp in pair.qps]


# --- operations: each applied to one pair; returns what the two implementations must agree on ----------------


def wr_class(pair: Pair, name: str, wr_id: int) -> Any:
    """The pair's own work request class; every other one the Python model's (the compiled QP takes both)."""
    return getattr(py_rc if wr_id % 2 else pair.rc, name)


def op_post_send(pair: Pair, side: int, kind: int, length: int, offsets: tuple[int, int], spoil: int,
                 signaled: bool, wr_id: int) -> Any:
    rc, host, peer = pair.rc, pair.hosts[side], pair.hosts[1 - side]
    opcode = list(rc.WrOpcode)[kind]
    addr, lkey = BASES[side] + offsets[0], host.key
    remote_addr, rkey = BASES[1 - side] + offsets[1], peer.key
    if spoil == 1:
        lkey ^= 1  # a bad lkey: LOC_PROT_ERR
    elif spoil == 2:
        rkey ^= 1  # a bad rkey: the responder NAKs, REM_ACCESS_ERR
    elif spoil == 3:
        addr, lkey = BASES[side] + REGION, host.spare_key  # read-only local buffer: a READ into it fails
    elif spoil == 4:
        remote_addr, rkey = BASES[1 - side] + REGION, peer.spare_key  # read-only remote: WRITEs fail
    pair.qps[side].post_send(wr_class(pair, "SendWR", wr_id)(wr_id, opcode, addr, length, lkey, remote_addr, rkey,
                                                             imm=wr_id * 7 + 1, signaled=signaled))
    return None


def op_post_recv(pair: Pair, side: int, offset: int, length: int, spoil: int, wr_id: int) -> Any:
    key = pair.hosts[side].key ^ (spoil == 1)
    pair.qps[side].post_recv(wr_class(pair, "RecvWR", wr_id)(wr_id, BASES[side] + offset, length, key))
    return None


def op_pull(pair: Pair, side: int, now: int, data: bool, count: int = 1) -> Any:
    """Up to ``count`` packets from one QP onto its wire."""
    pulled = []
    for _ in range(count):
        fields = packet_fields(pair.qps[side].next_packet(now, data))
        if fields is None:
            break
        pair.wire[side].append(fields)  # the wire copies (the Python model's payload is a view of memory)
        pair.history[side].append(fields)
        pulled.append(fields)
    return pulled


def make_packet(pair: Pair, fields: tuple) -> Any:
    """The packet as its pair's wire decodes it; for the compiled pair, every other PSN the Python decoder's
    packet (the compiled QP takes both)."""
    compiled = pair.rc is core_rc and fields[FIELDS.index("psn")] % 2 == 0
    return (core_transport.Packet if compiled else py_transport.Packet)(**dict(zip(FIELDS, fields)))


def op_deliver(pair: Pair, direction: int, index: int, now: int, action: int) -> Any:
    wire = pair.wire[direction]
    if not wire:
        return None
    fields = wire[index % len(wire)]
    if action == 1:  # dropped
        wire.remove(fields)
        return fields
    if action == 2:  # marked CE on the way
        fields = fields[:-1] + (True,)
    if action != 3:  # 3: duplicated (the original stays on the wire)
        wire.pop(index % len(wire))
    pair.qps[1 - direction].receive(now, make_packet(pair, fields))
    return fields


def op_replay(pair: Pair, direction: int, index: int, now: int) -> Any:
    """A late duplicate: a packet sent earlier arrives again."""
    history = pair.history[direction]
    if not history:
        return None
    fields = history[index % len(history)]
    pair.qps[1 - direction].receive(now, make_packet(pair, fields))
    return fields


def op_read_flood(pair: Pair, side: int, count: int, length: int, now: int) -> Any:
    """``count`` READ requests in order from nowhere (the responder's READ resources)."""
    qp, host = pair.qps[side], pair.hosts[side]
    for _ in range(count):
        fields = dict(zip(FIELDS, (12, QPNS[side], qp.epsn, False, False, 0xFFFF, BASES[side], host.key, length, 0,
                                   0, 0, b"", False)))
        qp.receive(now, make_packet(pair, tuple(fields.values())))
    return None


def op_inject(pair: Pair, side: int, fields: dict, psn_base: int, psn_delta: int, key_choice: int,
              now: int) -> Any:
    qp, host = pair.qps[side], pair.hosts[side]
    psn = [qp.una, qp.tx_psn, qp.epsn, fields["psn"]][psn_base]
    fields = dict(fields, dest_qp=QPNS[side], psn=(psn + psn_delta) & 0xFFFFFF)
    if key_choice < 2:
        fields["rkey"] = [host.key, host.spare_key][key_choice]
        fields["va"] = BASES[side] + fields["va"] % (REGION + SPARE)
    qp.receive(now, make_packet(pair, tuple(fields[name] for name in FIELDS)))
    return None


def op_timer(pair: Pair, now: int) -> Any:
    for qp in pair.qps:
        qp.on_timer(now)
    return None


def op_poll(pair: Pair, side: int, max_entries: int | None) -> Any:
    taken = [completion_fields(c) for c in pair.qps[side].poll_completions(max_entries)]
    pair.polled[side].extend(taken)
    return taken


# --- the random sequences --------------------------------------------------------------------------------------

SIDE = st.integers(0, 1)
HOSTILE = st.fixed_dictionaries({
    "opcode": st.sampled_from([op.value for op in py_transport.Opcode] + [0x12, 0x40, 0xFF]),
    "psn": st.integers(0, 0xFFFFFF),
    "ack_req": st.booleans(), "solicited": st.booleans(), "pkey": st.just(0xFFFF),
    "va": st.integers(0, (1 << 64) - 1), "rkey": st.integers(0, (1 << 32) - 1),
    "dma_len": st.integers(0, 1200) | st.integers(0, (1 << 32) - 1), "imm": st.integers(0, (1 << 32) - 1),
    "syndrome": st.sampled_from([0x00, 0x1F, 0x20, 0x21, 0x3F, 0x40, 0x60, 0x61, 0x62, 0x63, 0x64, 0x80, 0xFF])
    | st.integers(0, 255),
    "msn": st.integers(0, 0xFFFFFF), "payload": st.binary(max_size=600), "ecn_ce": st.booleans(),
})
OPERATIONS = st.one_of(
    st.tuples(st.just("post_send"), SIDE, st.integers(0, 4), st.integers(0, 1300) | st.sampled_from([0, 1, 5000]),
              st.tuples(st.integers(0, REGION - 1400), st.integers(0, REGION - 1400)),
              st.sampled_from([0] * 12 + [1, 2, 3, 4]), st.booleans()),
    st.tuples(st.just("post_recv"), SIDE, st.integers(0, REGION - 1400), st.integers(0, 1400),
              st.sampled_from([0] * 9 + [1])),
    st.tuples(st.just("pull"), SIDE, st.booleans() | st.just(True), st.integers(1, 10)),
    st.tuples(st.just("pull"), SIDE, st.just(True), st.integers(1, 10)),
    st.tuples(st.just("deliver"), SIDE, st.just(0), st.just(0)),
    st.tuples(st.just("deliver"), SIDE, st.integers(0, 40), st.sampled_from([0, 0, 1, 2, 3])),
    st.tuples(st.just("deliver"), SIDE, st.integers(0, 40), st.sampled_from([0, 0, 1, 2, 3])),
    st.tuples(st.just("post_send"), st.just(0), st.integers(0, 4), st.integers(0, 1300),
              st.tuples(st.integers(0, REGION - 1400), st.integers(0, REGION - 1400)), st.just(0), st.just(True)),
    st.tuples(st.just("inject"), SIDE, HOSTILE, st.integers(0, 3), st.integers(-3, 20), st.integers(0, 3)),
    st.tuples(st.just("replay"), SIDE, st.integers(0, 200)),
    st.tuples(st.just("flood"), SIDE, st.integers(1, 14), st.integers(0, 3000)),
    st.tuples(st.just("time"), st.sampled_from([1, 1000, 10_000, 100_000, 1_000_000, 3_000_000])),
    st.tuples(st.just("poll"), SIDE, st.none() | st.integers(-2, 3)),
)
CONFIG = st.fixed_dictionaries({
    "mtu": st.sampled_from([256, 512]), "timeout_ns": st.integers(20_000, 2_000_000),
    "retry_cnt": st.integers(0, 3), "rnr_retry": st.sampled_from([0, 1, 2, 7]),
    "rnr_timer_ns": st.integers(0, 700_000_000), "ack_every": st.integers(1, 5), "max_inflight": st.integers(1, 8),
    "max_rd_atomic": st.integers(1, 3), "max_msg": st.sampled_from([1 << 30, 1024]),
})


def apply(pair: Pair, op: tuple, now: int, step: int) -> Any:
    """One operation on one pair at ``now``; ``step`` numbers work requests."""
    name, args = op[0], op[1:]
    if name == "post_send":
        return op_post_send(pair, *args, wr_id=step)
    if name == "post_recv":
        return op_post_recv(pair, *args, wr_id=1000 + step)
    if name == "pull":
        return op_pull(pair, args[0], now, args[1], args[2])
    if name == "deliver":
        return op_deliver(pair, args[0], args[1], now, args[2])
    if name == "replay":
        return op_replay(pair, *args, now=now)
    if name == "flood":
        return op_read_flood(pair, *args, now=now)
    if name == "inject":
        return op_inject(pair, *args, now=now)
    if name == "time":
        return op_timer(pair, now)
    return op_poll(pair, *args)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs=st.tuples(CONFIG, CONFIG), ops=st.lists(OPERATIONS, min_size=10, max_size=150))
def test_twin_queue_pairs_agree(configs, ops):
    run_twins(configs, ops)


def run_twins(configs: tuple[dict, dict], ops: list[tuple]) -> tuple[Pair, Pair]:
    """The operations on both pairs, compared after each, then a drain to quiet; the pairs at the end."""
    python, compiled = make_pair(py_rc, configs), make_pair(core_rc, configs)
    assert snapshot(python) == snapshot(compiled)
    now = 0
    for step, op in enumerate(ops):
        if op[0] == "time":
            now += op[1]
        expected = apply(python, op, now, step)
        assert apply(compiled, op, now, step) == expected, (step, op)
        assert snapshot(compiled) == snapshot(python), (step, op)
    # Drain: everything delivered in order, timers run, until both pairs are quiet; then memory and completions.
    for _ in range(400):
        moved = False
        for side in (0, 1):
            sent = op_pull(python, side, now, True, 20)
            assert op_pull(compiled, side, now, True, 20) == sent
            moved |= bool(sent)
            for pair in (python, compiled):
                while pair.wire[side]:
                    op_deliver(pair, side, 0, now, 0)
                    moved = True
        assert snapshot(compiled) == snapshot(python)
        if not moved:
            deadlines = [d for qp in python.qps if (d := qp.next_deadline()) is not None]
            if not deadlines:
                break
            now = max(now, min(deadlines))
            op_timer(python, now)
            op_timer(compiled, now)
    for side in (0, 1):
        assert op_poll(compiled, side, None) == op_poll(python, side, None)
        assert compiled.polled[side] == python.polled[side]
        assert compiled.hosts[side].buf == python.hosts[side].buf
        assert compiled.hosts[side].spare == python.hosts[side].spare
    return python, compiled


@given(st.integers(-5, 10**12), st.sampled_from([256, 512, 1024, 2048, 4096]), st.integers(1, 1 << 16))
def test_default_timeout_ns(rate, mtu, max_inflight):
    assert core_rc.default_timeout_ns(rate, mtu, max_inflight) == py_rc.default_timeout_ns(rate, mtu, max_inflight)
    assert core_rc.default_timeout_ns(rate, mtu) == py_rc.default_timeout_ns(rate, mtu)


@given(st.integers(-5, 10**9))
def test_rnr_timer_code(ns):
    assert core_rc.rnr_timer_code(ns) == py_rc.rnr_timer_code(ns)


def _outcome(call: Any, **kwargs: Any) -> Any:
    try:
        config = call(**kwargs)
    except Exception as err:  # noqa: BLE001 - the twins must fail alike
        return type(err), str(err)
    return repr(config).replace("RcConfig", "")


@given(st.fixed_dictionaries({}, optional={
    "mtu": st.sampled_from([0, 100, 256, 1024, 4096, 8192]), "retry_cnt": st.integers(-1, 8),
    "rnr_retry": st.integers(-1, 8), "ack_every": st.integers(0, 3), "max_inflight": st.integers(0, 3),
    "max_rd_atomic": st.integers(0, 3), "timeout_ns": st.integers(0, 10**12), "max_msg": st.integers(0, 1 << 40),
}))
def test_config_checks(kwargs):
    assert _outcome(core_rc.RcConfig, **kwargs) == _outcome(py_rc.RcConfig, **kwargs)


def test_names_and_constants():
    assert core_rc.COUNTERS == py_rc.COUNTERS
    assert core_rc.RNR_TIMER_NS == py_rc.RNR_TIMER_NS
    assert core_rc.INFINITE_RNR_RETRY == py_rc.INFINITE_RNR_RETRY
    for name in ("WrOpcode", "WcStatus", "WcOpcode"):
        assert [(m.name, m.value) for m in getattr(core_rc, name)] == [
            (m.name, m.value) for m in getattr(py_rc, name)]
    assert core_rc.RcConfig.max_inflight == py_rc.RcConfig.max_inflight == 128
    assert py_rc.AccessError is core_rc.AccessError


@pytest.mark.parametrize("rc", [py_rc, core_rc], ids=["python", "compiled"])
def test_the_drain_settles_a_plain_transfer(rc):
    """The twin harness moves data at all: a WRITE, a READ and a SEND complete and the bytes land."""
    pair = make_pair(rc, ({}, {}))
    pair.qps[1].post_recv(rc.RecvWR(9, BASES[1] + 0x4000, 100, pair.hosts[1].key))
    op_post_send(pair, 0, 0, 3000, (0, 0x100), 0, True, 1)
    op_post_send(pair, 0, 4, 2000, (0x2000, 0x3000), 0, True, 2)
    op_post_send(pair, 0, 2, 100, (0x5000, 0), 0, True, 3)
    for _ in range(50):
        for side in (0, 1):
            op_pull(pair, side, 0, True, 100)
            while pair.wire[side]:
                op_deliver(pair, side, 0, 0, 0)
    assert [(c[0], c[1]) for c in op_poll(pair, 0, None)] == [(1, 0), (2, 0), (3, 0)]
    assert [(c[0], c[1], c[4]) for c in op_poll(pair, 1, None)] == [(9, 0, 100)]
    a, b = pair.hosts
    assert b.buf[0x100:0x100 + 3000] == a.buf[0:3000]
    assert a.buf[0x2000:0x2000 + 2000] == b.buf[0x3000:0x3000 + 2000]
    assert b.buf[0x4000:0x4000 + 100] == a.buf[0x5000:0x5000 + 100]
