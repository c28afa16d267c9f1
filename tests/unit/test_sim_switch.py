"""A lossless incast through the switch models in simulated time (emulator.sim.switch), against its closed form."""

from __future__ import annotations

from emulator.model.switch_params import derive_config
from emulator.sim.engine import Simulator
from emulator.sim.link import PortQueue, Wire, serialization_ns
from emulator.sim.switch import SimSwitch
from emulator.wire.pfc import ETH_MAC_CONTROL, decode_pfc
from emulator.wire.roce import Framer
from emulator.wire.transport import Opcode, Packet

GBIT = 10**9
PAYLOAD = 1024


def host_mac(i: int) -> bytes:
    return bytes([2, 0, 0, 0, 0, i + 1])


def port_mac(i: int) -> bytes:
    return bytes([2, 0, 0, 0, 1, i + 1])


def star(hosts: int, rate_bps: int, fabric: str, switch: dict[str, str]):
    """One switch, ``hosts`` hosts at ``rate_bps``; each host a transmit queue that obeys PFC."""
    sim = Simulator()
    config = derive_config(fabric, rate_bps, 0, 1500, hosts, switch)
    routes = {bytes([10, 0, 0, i + 1]): [i] for i in range(hosts)}
    sw = SimSwitch(sim, [(port_mac(i), host_mac(i), rate_bps) for i in range(hosts)], routes, config)
    queues, arrivals, pauses = [], [[] for _ in range(hosts)], [0] * hosts

    def host_receives(i: int, frame: bytes) -> None:
        if frame[12:14] == ETH_MAC_CONTROL:
            pauses[i] += 1
            queues[i].on_pfc(decode_pfc(frame))
        else:
            arrivals[i].append((sim.now, frame))

    for i in range(hosts):
        queues.append(PortQueue(sim, Wire(sim, rate_bps, 0, lambda frame, i=i: sw.receive(i, frame))))
        sw.connect(i, Wire(sim, rate_bps, 0, lambda frame, i=i: host_receives(i, frame)))
    return sim, sw, queues, arrivals, pauses


def frames_from(i: int, to: int, count: int) -> list[bytes]:
    framer = Framer(":".join(f"{b:02x}" for b in host_mac(i)), ":".join(f"{b:02x}" for b in port_mac(i)),
                    f"10.0.0.{i + 1}", f"10.0.0.{to + 1}", 49152 + i)
    return [framer.encode(Packet(Opcode.WRITE_MIDDLE, 0x11, k, payload=bytes(PAYLOAD))) for k in range(count)]


def test_a_lossless_incast_takes_n_times_its_link_time_and_drops_nothing():
    senders, count, rate = 3, 300, GBIT
    sim, sw, queues, arrivals, pauses = star(senders + 1, rate, "lossless", {"buffer": "200KiB", "headroom": "20KiB"})
    frames = {i: frames_from(i, 0, count) for i in range(1, senders + 1)}
    for i, own in frames.items():
        for frame in own:
            queues[i].enqueue(frame, 3)
    sim.run()
    size = len(frames[1][0])
    assert len(arrivals[0]) == senders * count  # every frame, none dropped
    assert sw.mmu.counters[0][3].drops_headroom == 0 and not any(sw.dropped.values())
    assert sum(c.pfc_xoff_sent for port in sw.mmu.counters for c in port) > 0 and sum(pauses) > 0  # PFC worked
    bound = senders * count * serialization_ns(size, rate)  # the receiver's link, busy end to end
    last = arrivals[0][-1][0]
    assert bound < last <= bound + 2 * serialization_ns(size, rate), (last, bound)


def test_the_same_incast_on_a_lossy_fabric_drops():
    senders, count, rate = 3, 300, GBIT
    sim, sw, queues, arrivals, pauses = star(senders + 1, rate, "lossy", {"buffer": "200KiB"})
    for i in range(1, senders + 1):
        for frame in frames_from(i, 0, count):
            queues[i].enqueue(frame, 3)
    sim.run()
    dropped = sum(c.drops_threshold for port in sw.mmu.counters for c in port)
    assert dropped > 0 and len(arrivals[0]) == senders * count - dropped and sum(pauses) == 0
