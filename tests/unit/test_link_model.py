"""The link model of a switch port (emulator._core.link) on a fake clock.

Delay lines, serialization at the port's rate on the virtual wire, loss
that a seed repeats, and drop lists, with ``now`` in the test's hands.
"""

from __future__ import annotations

import random
from collections import deque

from emulator._core.link import Link

RATE = 100_000_000  # 1250 bytes take 100 us
DELAY = 1_000_000


class Queue:
    """One port's egress queue, as the MMU shows it to the link: (priority, frame) in order."""

    def __init__(self, *frames: tuple[int, bytes]) -> None:
        self.frames = deque(frames)

    def head(self, egress: int) -> tuple[int, bytes] | None:
        assert egress == 1
        return self.frames[0] if self.frames else None

    def pop(self, egress: int, priority: int) -> None:
        assert egress == 1 and self.frames[0][0] == priority
        self.frames.popleft()


def link(delay_ns: int = DELAY, host_facing: bool = True, loss: float = 0.0, drop: tuple[int, ...] = (),
         seed: int = 1) -> Link:
    return Link(RATE, delay_ns, host_facing, loss, drop, seed)


def frame(n: int, size: int = 1250) -> bytes:
    return n.to_bytes(2, "big") * (size // 2)


def test_a_received_frame_is_processed_the_delay_later_in_order():
    line = link(host_facing=False)
    line.arrive(10, frame(1))
    line.arrive(20, frame(2))
    assert line.next_deadline(backlog=False) == 10 + DELAY
    assert line.arrived(10 + DELAY - 1) is None
    assert line.arrived(10 + DELAY + 5) == (10 + DELAY, frame(1))  # processed as of when it arrives
    assert line.arrived(10 + DELAY + 5) is None
    assert line.next_deadline(backlog=False) == 20 + DELAY
    assert line.arrived(20 + DELAY) == (20 + DELAY, frame(2))
    assert line.next_deadline(backlog=False) is None


def test_the_virtual_wire_holds_each_frame_for_its_length_at_the_rate_then_the_delay():
    line = link()
    queue = Queue((0, frame(1)), (3, frame(2, 500)), (0, frame(3)))
    assert line.transmit(0, queue, 1) is None
    assert len(queue.frames) == 2 and line.wire_free_at == 100_000  # 1250 bytes at 100 Mbit/s
    assert line.next_deadline(backlog=True) == 100_000
    assert line.transmit(99_999, queue, 1) is None
    assert len(queue.frames) == 2  # the wire is busy
    assert line.transmit(100_000, queue, 1) is None
    assert len(queue.frames) == 1 and line.wire_free_at == 140_000  # 500 bytes: 40 us
    assert line.next_deadline(backlog=False) == DELAY  # the first frame reaches the kernel
    assert line.transmit(DELAY, Queue(), 1) == frame(1)
    assert line.transmit(DELAY, Queue(), 1) == frame(1)  # until it has left (the kernel may have no room yet)
    assert line.left(DELAY) is None
    assert line.transmit(DELAY + 99_999, Queue(), 1) is None
    assert line.transmit(DELAY + 100_000, Queue(), 1) == frame(2, 500)
    assert line.left(DELAY + 100_000) is None
    assert line.next_deadline(backlog=True) == 140_000


def test_frames_due_together_leave_one_after_the_other():
    line = link()
    queue = Queue((0, frame(1)), (0, frame(2)))
    line.transmit(0, queue, 1)
    line.transmit(100_000, queue, 1)
    assert line.transmit(DELAY + 100_000, queue, 1) == frame(1)
    assert line.left(DELAY + 100_000) == frame(2)
    assert line.left(DELAY + 100_000) is None


def test_a_frame_starts_on_the_wire_when_the_port_drains_it():
    line = link()
    queue = Queue((0, frame(1)))
    line.transmit(500_000, queue, 1)
    assert line.wire_free_at == 600_000
    assert line.transmit(500_000 + DELAY - 1, queue, 1) is None
    assert line.transmit(500_000 + DELAY, queue, 1) == frame(1)


def test_only_a_host_facing_link_with_delay_runs_the_wire():
    assert link().paced
    assert not link(host_facing=False).paced
    assert not link(delay_ns=0).paced
    line = link(host_facing=False)
    assert line.next_deadline(backlog=True) is None  # the kernel paces this port


def losses(line: Link, frames: int) -> list[int]:
    """Which of the first ``frames`` frames from the host the link loses."""
    return [n for n in range(1, frames + 1) if line.lost_from_host(n % 8)]


def test_loss_with_a_seed_repeats_and_follows_the_seeded_draws():
    first, again, other = losses(link(loss=0.1, seed=7007), 2000), losses(link(loss=0.1, seed=7007), 2000), \
        losses(link(loss=0.1, seed=7008), 2000)
    assert first == again != other
    draws = random.Random(7007)
    assert first == [n for n in range(1, 2001) if draws.random() < 0.1]
    assert 120 < len(first) < 280


def test_losses_are_counted_by_priority():
    line = link(drop=(1, 2, 3))
    assert [line.lost_from_host(p) for p in (3, 3, 5, 3)] == [True, True, True, False]
    assert line.injected_drops == [0, 0, 0, 2, 0, 1, 0, 0]


def test_drop_lists_number_each_direction_from_one():
    line = link(delay_ns=0, drop=(2, 4))
    assert losses(line, 5) == [2, 4]
    heads = [frame(n) for n in range(1, 6)]
    assert [head for head in heads if line.lost_at_head(head, 0)] == [frame(2), frame(4)]
    assert sum(line.injected_drops) == 4 and line.injected_drops[0] == 2


def test_the_loss_draw_happens_once_per_head_frame():
    line = link(delay_ns=0, loss=0.5, seed=3)
    head = frame(1)
    verdict = line.lost_at_head(head, 0)
    if not verdict:  # the kernel had no room: the same head is asked again, and passes again
        assert not line.lost_at_head(head, 0) and not line.lost_at_head(head, 0)
    assert line.tx_seq == 1
    line.lost_at_head(frame(2), 0)
    assert line.tx_seq == 2


def test_a_frame_lost_on_the_virtual_wire_still_took_its_time_on_it():
    line = link(drop=(1,))
    queue = Queue((0, frame(1)), (0, frame(2)))
    line.transmit(0, queue, 1)
    assert line.wire_free_at == 100_000 and not line.departures and line.injected_drops[0] == 1
    line.transmit(100_000, queue, 1)
    assert line.transmit(100_000 + DELAY, queue, 1) == frame(2)
