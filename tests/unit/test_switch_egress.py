"""The switch's egress towards the kernel: frames go while the kernel queue has room, EPOLLOUT drains the rest."""
from __future__ import annotations

import select

from emulator._core.roce import Framer
from emulator._core.transport import Opcode, Packet
from fake_agents import MAC_PEERS, MAC_S1, close_agent, fake_wire, make_switch

assert fake_wire  # a fixture, used by name below

NOW = 1_000_000_000


def frames(count: int) -> list[bytes]:
    framer = Framer(MAC_PEERS[0], MAC_S1[0], "10.0.0.1", "10.0.0.2", 50000, dscp=26)
    return [framer.encode(Packet(Opcode.WRITE_MIDDLE, 0x11, psn, payload=bytes(1024))) for psn in range(count)]


class CountingRefusal:
    """The kernel's full queue: every send is refused, and counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> BlockingIOError:
        self.calls += 1
        return BlockingIOError(11, "the kernel queue is full")


def test_a_full_kernel_queue_is_not_tried_again_per_frame_until_epollout(fake_wire, tmp_path):
    """An incast keeps the egress queue full: each arriving frame used to cost a send refused with EAGAIN."""
    agent = make_switch(str(tmp_path))
    try:
        ingress, egress = agent.ports[0], agent.ports[1]
        refusal = CountingRefusal()
        egress.sock.refuse = refusal
        ingress.sock.inbox.extend(frames(10))
        agent._on_port(ingress.fd, select.EPOLLIN, NOW)
        assert refusal.calls == 1 and egress.writable_armed  # one refusal, then it waits for EPOLLOUT
        assert agent.mmu.backlog[egress.index] == 10
        egress.sock.refuse = None
        agent._on_port(egress.fd, select.EPOLLOUT, NOW + 1000)
        assert len(egress.sock.sent) == 10 and not egress.writable_armed
        ingress.sock.inbox.extend(frames(1))  # with room in the queue, a frame goes at once
        agent._on_port(ingress.fd, select.EPOLLIN, NOW + 2000)
        assert len(egress.sock.sent) == 11
    finally:
        close_agent(agent)
