"""The switch's egress queues: strict priority, byte accounting, tail drop."""

import copy

import pytest

from emulator.switch.queues import PRIORITIES, EgressQueues, QueueCounters


def frame(tag: str, size: int = 100) -> bytes:
    """A distinguishable frame of ``size`` bytes."""
    data = tag.encode()
    assert len(data) <= size
    return data + b"\0" * (size - len(data))


def drain(q: EgressQueues, port: str) -> list[tuple[int, bytes]]:
    out = []
    while (item := q.head(port)) is not None:
        q.pop(port, item[0])
        out.append(item)
    return out


def snapshot(q: EgressQueues, ports):
    return {
        (port, p): (q.backlog_bytes(port, p), copy.deepcopy(q.counters(port, p)))
        for port in ports for p in range(PRIORITIES)
    } | {(port, None): (q.backlog_bytes(port), q.has_backlog(port), q.head(port)) for port in ports}


def test_eight_priorities():
    assert PRIORITIES == 8


def test_empty_port():
    q = EgressQueues(["a"], 1000)
    assert q.head("a") is None
    assert not q.has_backlog("a")
    assert q.backlog_bytes("a") == 0
    assert all(q.backlog_bytes("a", p) == 0 for p in range(8))
    assert q.counters("a", 0) == QueueCounters(0, 0, 0, 0, 0)


def test_fifo_within_a_priority():
    q = EgressQueues(["a"], 10_000)
    frames = [frame(f"f{i}", 60 + i) for i in range(10)]
    for f in frames:
        assert q.enqueue("a", 2, f) is True
    assert drain(q, "a") == [(2, f) for f in frames]


def test_strict_priority_seven_first():
    q = EgressQueues(["a"], 100_000)
    order = [3, 0, 7, 5, 7, 1, 6, 2, 4, 0, 3, 6]
    for i, p in enumerate(order):
        q.enqueue("a", p, frame(f"p{p}-{i}"))
    expected = [(p, frame(f"p{p}-{i}")) for p in range(7, -1, -1) for i, pp in enumerate(order) if pp == p]
    assert drain(q, "a") == expected
    assert [p for p, _ in expected] == sorted(order, reverse=True)


def test_higher_priority_arriving_later_goes_first():
    q = EgressQueues(["a"], 100_000)
    q.enqueue("a", 0, frame("low1"))
    q.enqueue("a", 0, frame("low2"))
    assert q.head("a") == (0, frame("low1"))
    q.pop("a", 0)
    q.enqueue("a", 5, frame("high"))
    assert q.head("a") == (5, frame("high"))
    q.pop("a", 5)
    assert q.head("a") == (0, frame("low2"))


def test_head_does_not_remove_pop_does():
    q = EgressQueues(["a"], 1000)
    q.enqueue("a", 1, frame("x", 100))
    q.enqueue("a", 1, frame("y", 200))
    for _ in range(3):
        assert q.head("a") == (1, frame("x", 100))
    assert q.backlog_bytes("a") == 300
    assert q.counters("a", 1).dequeued == 0
    q.pop("a", 1)
    assert q.head("a") == (1, frame("y", 200))
    assert q.backlog_bytes("a") == 200
    q.pop("a", 1)
    assert q.head("a") is None
    assert not q.has_backlog("a")


def test_byte_accounting_per_port_and_priority():
    q = EgressQueues(["a", "b"], 10_000)
    q.enqueue("a", 0, frame("1", 100))
    q.enqueue("a", 0, frame("2", 150))
    q.enqueue("a", 3, frame("3", 64))
    q.enqueue("a", 7, frame("4", 1514))
    q.enqueue("b", 3, frame("5", 500))
    assert q.backlog_bytes("a") == 100 + 150 + 64 + 1514
    assert [q.backlog_bytes("a", p) for p in range(8)] == [250, 0, 0, 64, 0, 0, 0, 1514]
    assert q.backlog_bytes("b") == 500
    assert q.backlog_bytes("b", 3) == 500

    q.pop("a", 7)
    q.pop("a", 0)
    assert q.backlog_bytes("a") == 150 + 64
    assert [q.backlog_bytes("a", p) for p in range(8)] == [150, 0, 0, 64, 0, 0, 0, 0]
    c0, c7 = q.counters("a", 0), q.counters("a", 7)
    assert (c0.enqueued, c0.dequeued, c0.tx_bytes) == (2, 1, 100)
    assert (c7.enqueued, c7.dequeued, c7.tx_bytes) == (1, 1, 1514)
    assert q.backlog_bytes("b") == 500   # untouched


def test_frame_that_does_not_fit_is_dropped_and_nothing_else_changes():
    q = EgressQueues(["a", "b"], 1000)
    assert q.enqueue("a", 2, frame("x", 600))
    assert q.enqueue("a", 5, frame("y", 300))
    assert q.enqueue("b", 4, frame("z", 900))
    before = snapshot(q, ["a", "b"])
    assert q.enqueue("a", 4, frame("big", 101)) is False     # 900 + 101 > 1000
    after = snapshot(q, ["a", "b"])
    assert after[("a", 4)][1].drops == 1
    after[("a", 4)][1].drops = 0
    assert after == before
    # the buffer is per port, shared by its priorities: a frame that still
    # fits the remaining 100 bytes is accepted
    assert q.enqueue("a", 4, frame("fits", 100)) is True
    assert q.backlog_bytes("a") == 1000
    assert q.enqueue("a", 7, frame("1", 1)) is False
    assert q.counters("a", 7).drops == 1
    assert q.counters("a", 4).drops == 1
    assert q.counters("a", 4).enqueued == 1
    assert [p for p, _ in drain(q, "a")] == [5, 4, 2]


def test_frame_larger_than_the_buffer_is_dropped_on_an_empty_port():
    q = EgressQueues(["a"], 1500)
    assert q.enqueue("a", 0, frame("jumbo", 1501)) is False
    assert q.counters("a", 0).drops == 1
    assert q.counters("a", 0).enqueued == 0
    assert q.head("a") is None
    assert q.enqueue("a", 0, frame("exact", 1500)) is True


def test_space_freed_by_pop_can_be_reused():
    q = EgressQueues(["a"], 300)
    for i in range(3):
        assert q.enqueue("a", 1, frame(str(i), 100))
    assert not q.enqueue("a", 1, frame("3", 100))
    q.pop("a", 1)
    assert q.enqueue("a", 1, frame("4", 100))
    c = q.counters("a", 1)
    assert (c.enqueued, c.dequeued, c.drops, c.tx_bytes) == (4, 1, 1, 100)
    assert [f for _, f in drain(q, "a")] == [frame("1", 100), frame("2", 100), frame("4", 100)]


def test_peak_bytes_is_per_priority_high_water_mark():
    q = EgressQueues(["a"], 10_000)
    q.enqueue("a", 3, frame("1", 400))
    q.enqueue("a", 3, frame("2", 300))
    q.enqueue("a", 1, frame("3", 2000))
    q.pop("a", 3)
    q.enqueue("a", 3, frame("4", 200))          # 500 queued now, below the 700 peak
    assert q.counters("a", 3).peak_bytes == 700
    assert q.counters("a", 1).peak_bytes == 2000
    drain(q, "a")
    assert q.counters("a", 3).peak_bytes == 700    # a high-water mark survives draining
    q.enqueue("a", 3, frame("5", 800))
    assert q.counters("a", 3).peak_bytes == 800
    assert q.counters("a", 0).peak_bytes == 0
    # a dropped frame does not raise the peak
    q2 = EgressQueues(["a"], 1000)
    q2.enqueue("a", 0, frame("6", 900))
    q2.enqueue("a", 0, frame("7", 200))
    assert q2.counters("a", 0).peak_bytes == 900


def test_ports_are_independent():
    q = EgressQueues(["a", "b", "c"], 500)
    assert q.enqueue("a", 0, frame("a", 500))
    assert q.enqueue("b", 0, frame("b", 500))      # a's full buffer does not affect b
    assert not q.enqueue("a", 0, frame("2", 1))
    assert q.counters("b", 0).drops == 0
    assert q.head("c") is None
    assert q.head("b") == (0, frame("b", 500))
    q.pop("b", 0)
    assert q.backlog_bytes("a") == 500
    assert q.counters("a", 0).dequeued == 0
    assert q.counters("b", 0).dequeued == 1


def test_unknown_port_is_a_key_error():
    q = EgressQueues(["a"], 500)
    with pytest.raises(KeyError):
        q.enqueue("zz", 0, frame("x"))


@pytest.mark.parametrize("buffer", [0, -1, -1500])
def test_buffer_must_be_positive(buffer):
    with pytest.raises(ValueError):
        EgressQueues(["a"], buffer)


def test_one_byte_buffer_is_allowed():
    q = EgressQueues(["a"], 1)
    assert q.enqueue("a", 0, b"x")
    assert not q.enqueue("a", 0, b"y")
