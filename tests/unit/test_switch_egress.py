"""The switch's egress towards the kernel: frames go while the kernel queue has room; a port whose queue is full
waits for its socket to turn writable, which drains the rest."""
from __future__ import annotations

from emulator._core.roce import Framer
from emulator._core.transport import Opcode, Packet
from fake_agents import MAC_PEERS, MAC_S1, make_switch

NOW = 1_000_000_000


def frames(count: int) -> list[bytes]:
    framer = Framer(MAC_PEERS[0], MAC_S1[0], "10.0.0.1", "10.0.0.2", 50000, dscp=26)
    return [framer.encode(Packet(Opcode.WRITE_MIDDLE, 0x11, psn, payload=bytes(1024))) for psn in range(count)]


def test_a_full_kernel_queue_is_not_tried_again_per_frame_until_the_socket_turns_writable(tmp_path):
    """An incast keeps the egress queue full: each arriving frame used to cost a send refused with EAGAIN."""
    switch = make_switch(str(tmp_path))
    switch.refuse(1, "full")
    for frame in frames(10):
        switch.receive(NOW, 0, frame)
    switch.settle()  # each frame processed at its last bit's time
    assert switch.refusals(1) == 1 and switch.wants_writable(1)  # one refusal, then it waits to be told
    assert switch.backlog(1) == 10
    switch.refuse(1, None)
    switch.writable(NOW + 1000, 1)
    assert len(switch.sent(1)) == 10 and not switch.wants_writable(1)
    switch.receive(NOW + 2000, 0, frames(1)[0])  # with room in the queue, a frame goes as soon as it is whole
    switch.settle()
    assert len(switch.sent(1)) == 11
