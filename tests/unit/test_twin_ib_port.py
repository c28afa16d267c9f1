"""Differential test: a host's IB port, Python (emulator.model.ib_port) against Rust (emulator._core.ib_port).

Both ports get the same random sequence of frames from the switch (data packets from known and unknown
LIDs, on VLs the link has and lacks; flow-control packets; damaged, truncated and random bytes), packets to
send against credit, and flow-control wake-ups, at the same times; after every step they must agree on what
each frame became, the frames they send, credits, counters and deadlines.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import emulator._core.ib_port as rust
import emulator.model.ib_port as python
from emulator.wire.ib import FcPacket, encode_data, encode_fc
from emulator.wire.transport import Opcode, Packet

HOST, SWITCH = "02:00:00:00:00:01", "02:00:00:00:00:aa"
LIDS = {"10.0.0.1": 1, "10.0.0.2": 2, "10.0.0.3": 7}
US = 1000

configs = st.fixed_dictionaries({
    "vls": st.integers(1, 4), "sl": st.integers(0, 3), "vl": st.integers(0, 3),
    "capacity": st.sampled_from([4200, 8400, 16 * 4200, 200_000]), "peer_capacity": st.sampled_from([4200, 8400, 67_200]),
    "rate_bps": st.sampled_from([20_000_000, 10**9, 100 * 10**9]), "frame_bytes": st.sampled_from([1514, 4214]),
    "fc_floor_ns": st.sampled_from([0, 500_000]),
})
packets = st.builds(lambda opcode, psn, payload: Packet(opcode, 0x11, psn,
                                                       payload=b"" if opcode == Opcode.ACK else payload),
                    st.sampled_from([Opcode.SEND_ONLY, Opcode.SEND_MIDDLE, Opcode.WRITE_MIDDLE, Opcode.ACK]),
                    st.integers(0, 0xFFFFFF), st.binary(max_size=4096) | st.sampled_from([bytes(1024), bytes(4096)]))
events = st.lists(st.one_of(
    st.tuples(st.just("data"), st.sampled_from([1, 2, 7, 9]), st.integers(0, 5), packets),
    st.tuples(st.just("fc"), st.integers(0, 1), st.integers(0, 4095), st.integers(0, 5), st.integers(0, 4095)),
    st.tuples(st.just("damaged"), st.integers(0, 80), st.integers(0, 255), st.integers(0, 200), packets),
    st.tuples(st.just("random"), st.binary(max_size=120)),
    st.tuples(st.just("send"), st.sampled_from(["10.0.0.2", "10.0.0.3"]), packets),
    st.tuples(st.just("tick"),),
), min_size=10, max_size=80)


def outcome(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as err:  # noqa: BLE001 - compared across twins
        return type(err).__name__, str(err)


def packet_fields(p: Any) -> tuple:
    return (int(p.opcode), p.dest_qp, p.psn, p.ack_req, p.solicited, p.pkey, p.va, p.rkey, p.dma_len, p.imm,
            p.syndrome, p.msn, bytes(p.payload), p.ecn_ce)


def accepted(result: Any) -> Any:
    if result is None or (isinstance(result, tuple) and isinstance(result[0], str)):
        return result
    packet, source, ok = result
    return packet_fields(packet), source, ok


def state(port: Any) -> tuple:
    credits = port.credits
    return (port.malformed, port.credit_violations, port.waiting, port.next_deadline(), port.stats(),
            [credits.credits(vl) for vl in range(credits.vls)], [credits.occupancy(vl) for vl in range(credits.vls)],
            port.lid, port.lids, port.ips, port.mac, port.gateway_mac, port.sl, port.vl)


def make(model: Any, config: dict) -> Any:
    c = config
    return outcome(model.IbPort, HOST, SWITCH, 1, dict(LIDS), c["sl"], c["vl"], c["vls"], c["capacity"],
                   c["peer_capacity"], c["rate_bps"], c["frame_bytes"], c["fc_floor_ns"])


def frame_of(event: tuple) -> bytes | None:
    kind = event[0]
    if kind == "data":
        _, slid, vl, packet = event
        return encode_data(SWITCH, HOST, 1, slid, vl, vl, packet)
    if kind == "fc":
        _, op, fctbs, vl, fccl = event
        return encode_fc(SWITCH, HOST, FcPacket(op, fctbs, vl, fccl))
    if kind == "damaged":
        _, at, value, cut, packet = event
        frame = bytearray(encode_data(SWITCH, HOST, 1, 2, 0, 0, packet))
        frame[at % len(frame)] = value
        return bytes(frame[:max(cut, 1)] if cut < 100 else frame)
    if kind == "random":
        return event[1]
    return None


@settings(max_examples=250, deadline=None)
@given(config=configs, steps=events)
def test_ports_agree(config: dict, steps: list) -> None:
    py_port, rust_port = make(python, config), make(rust, config)
    if isinstance(py_port, tuple):
        assert rust_port == py_port
        return
    assert state(rust_port) == state(py_port)
    now = 0
    for event in steps:
        now += 7 * US
        frame = frame_of(event)
        if frame is not None:
            got = [accepted(outcome(port.accept, now, frame)) for port in (py_port, rust_port)]
        elif event[0] == "send":
            _, ip, packet = event
            framers = [outcome(port.framer, 0x11, 0x12, ip, 4096 if len(packet.payload) > 2048 else 1024)
                       for port in (py_port, rust_port)]
            if isinstance(framers[0], tuple):
                got = framers
            else:
                frames = [outcome(framer.encode, packet) for framer in framers]
                got = frames + [outcome(port.admit, frame) for port, frame in zip((py_port, rust_port), frames)
                                if isinstance(frame, bytes)]
        else:
            got = [port.control_frames(now) for port in (py_port, rust_port)]
        assert got[1::2] == got[0::2] if len(got) == 4 else got[1] == got[0], (event, got)
        assert state(rust_port) == state(py_port), event


def test_a_subclass_with_its_own_arguments_builds_through_init() -> None:
    """The RNIC agent's IbLink(config, ib) subclasses IbPort and calls super().__init__ with the port's arguments."""
    for model in (python, rust):
        class Link(model.IbPort):  # type: ignore[misc, name-defined]
            def __init__(self, vls: int) -> None:
                super().__init__(HOST, SWITCH, 1, dict(LIDS), 0, 0, vls, 4200, 4200, 10**9, 1514, 0)

        link = Link(2)
        assert (link.lid, link.credits.vls, link.stats()["credits"][1]["fc_sent"]) == (1, 2, 0)
