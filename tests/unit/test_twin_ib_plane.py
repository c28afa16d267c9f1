"""Differential test: a switch's IB plane, Python (emulator.model.ib_plane) against Rust (emulator._core.ib_plane).

Both planes get the same random sequence of frames on their ports (data packets to known and unknown DLIDs,
on every SL and VL, of any size, past credit or not; flow-control packets; damaged and random bytes), the
same sends and refusals of their heads and the same flow-control wake-ups; after every step they must agree
on what each port sends next (byte for byte), queues, drops, counters, credits and deadlines.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import emulator._core.ib_plane as rust
import emulator.model.ib_plane as python
from emulator.wire.ib import FcPacket, encode_data, encode_fc
from emulator.wire.transport import Opcode, Packet

OURS = ["02:00:00:00:01:01", "02:00:00:00:01:02", "02:00:00:00:01:03"]
PEERS = ["02:00:00:00:02:01", "02:00:00:00:02:02", "02:00:00:00:02:03"]
US = 1000

configs = st.fixed_dictionaries({
    "vls": st.integers(1, 4), "vl_buffer": st.sampled_from([1514, 4 * 1514, 16 * 1514, 200_000]),
    "peer": st.lists(st.sampled_from([1514, 3000, 16 * 1514]), min_size=3, max_size=3),
    "max_frames": st.lists(st.sampled_from([1514, 4214]), min_size=3, max_size=3),
    "rates": st.lists(st.sampled_from([20_000_000, 10**9, 10**11]), min_size=3, max_size=3),
    "sl2vl": st.lists(st.integers(0, 4), min_size=0, max_size=16), "fc_floor": st.sampled_from([0, 500_000]),
})
packets = st.builds(lambda psn, payload: Packet(Opcode.SEND_ONLY, 0x11, psn, payload=payload),
                    st.integers(0, 0xFFFFFF), st.binary(max_size=64) | st.sampled_from([bytes(1400), bytes(4000)]))
ports = st.integers(0, 2)
events = st.lists(st.one_of(
    st.tuples(st.just("data"), ports, st.sampled_from([1, 2, 3, 77]), st.integers(0, 15), st.integers(0, 5), packets),
    st.tuples(st.just("fc"), ports, st.integers(0, 1), st.integers(0, 4095), st.integers(0, 5), st.integers(0, 4095)),
    st.tuples(st.just("damaged"), ports, st.integers(0, 60), st.integers(0, 255), st.integers(0, 100), packets),
    st.tuples(st.just("random"), ports, st.binary(max_size=80)),
    st.tuples(st.just("drain"), ports, st.lists(st.booleans(), max_size=6)),
    st.tuples(st.just("tick"),),
), min_size=10, max_size=80)


def attempt(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as err:  # noqa: BLE001 - compared across twins
        return type(err).__name__, str(err)


def make(model: Any, c: dict) -> Any:
    config = SimpleNamespace(lft={1: 0, 2: 1, 3: 2}, sl2vl=tuple(c["sl2vl"]), vls=c["vls"], vl_buffer=c["vl_buffer"],
                             peer_capacity=tuple(c["peer"]), fc_floor=c["fc_floor"])
    return attempt(model.IbPlane, list(zip(OURS, PEERS)), config, c["max_frames"], c["rates"])


def state(plane: Any) -> tuple:
    links = plane.links
    return (plane.forwarded, plane.tx_errors, plane.drops, plane.next_vl, plane.next_deadline(),
            [[list(q) for q in port] for port in plane.queues], [list(c) for c in plane.control],
            [plane.stats(p) for p in range(3)], [plane.total(cause) for cause in python.IB_DROPS],
            [[(link.credits(vl), link.occupancy(vl)) for vl in range(link.vls)] for link in links])


def frame_of(event: tuple) -> bytes:
    kind, port = event[0], event[1]
    if kind == "data":
        _, _, dlid, sl, vl, packet = event
        return encode_data(PEERS[port], OURS[port], dlid, 1, sl, vl, packet)
    if kind == "fc":
        _, _, op, fctbs, vl, fccl = event
        return encode_fc(PEERS[port], OURS[port], FcPacket(op, fctbs, vl, fccl))
    if kind == "damaged":
        _, _, at, value, cut, packet = event
        frame = bytearray(encode_data(PEERS[port], OURS[port], 2, 1, 0, 0, packet))
        frame[at % len(frame)] = value
        return bytes(frame[:cut] if cut < 80 else frame)
    return event[2]


def drain(plane: Any, port: int, outcomes: list[bool]) -> list:
    """Each outcome: the kernel takes the head (True) or refuses it (False); the heads, as bytes."""
    heads = []
    for taken in outcomes:
        head = plane.head(port)
        heads.append(head)
        if head is None:
            break
        assert plane.head(port) is head  # the same object while it waits
        plane.sent(port) if taken else plane.refused(port)
    return heads


@settings(max_examples=250, deadline=None)
@given(config=configs, steps=events)
def test_planes_agree(config: dict, steps: list) -> None:
    py_plane, rust_plane = make(python, config), make(rust, config)
    if isinstance(py_plane, tuple):
        assert rust_plane == py_plane
        return
    assert state(rust_plane) == state(py_plane)
    now = 0
    for event in steps:
        now += 11 * US
        if event[0] == "drain":
            got = [drain(plane, event[1], event[2]) for plane in (py_plane, rust_plane)]
        elif event[0] == "tick":
            got = [plane.take_fc(now) for plane in (py_plane, rust_plane)]
        else:
            frame = frame_of(event)
            got = [plane.receive(now, event[1], frame) for plane in (py_plane, rust_plane)]
        assert got[1] == got[0], event
        assert state(rust_plane) == state(py_plane), event
