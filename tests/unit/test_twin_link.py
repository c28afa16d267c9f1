"""Port by proof: emulator/model/link.py against its compiled twin emulator._core.link, on the same random
sequences of frames, time steps, loss settings and seeds (deleted together with the Python module).

Both links see the same frame objects in the same order; after every step they must agree on what came out
(frames, arrival times, loss verdicts, exceptions), on their counters and on their next deadline.
"""

from __future__ import annotations

import random
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator._core import link as core_link
from emulator.model import link as py_link


class Queue:
    """One port's egress queue as the MMU shows it to the link: (priority, frame) in order, port 1 only."""

    def __init__(self) -> None:
        self.frames: deque[tuple[int, bytes]] = deque()

    def head(self, egress: int) -> tuple[int, bytes] | None:
        assert egress == 1
        return self.frames[0] if self.frames else None

    def pop(self, egress: int, priority: int) -> None:
        assert egress == 1 and self.frames[0][0] == priority
        self.frames.popleft()


def _outcome(call, *args):
    """What a call gave: its value, or the type of the exception it raised."""
    try:
        return call(*args)
    except Exception as err:  # noqa: BLE001 - the twins must fail alike, whatever the failure
        return type(err)


def _state(link) -> tuple:
    """Everything a caller can read of a link."""
    return (link.rate_bps, link.delay_ns, link.host_facing, link.paced, repr(link.loss), set(link.drop_seq), link.lossy,
            list(link.arrivals), list(link.departures), len(link.arrivals), bool(link.departures), link.wire_free_at,
            link.rx_seq, link.tx_seq, list(link.injected_drops))


SEEDS = st.one_of(st.integers(0, 2**32), st.integers(-(2**200), 2**200), st.sampled_from([0, 1, 2**32, 2**64 - 1]),
                  st.floats(allow_nan=False))
LOSS = st.one_of(st.just(0.0), st.floats(0.0, 1.0), st.sampled_from([0.5, 1.0, 1.5, -0.1, float("nan")]))
PRIORITY = st.one_of(st.integers(0, 7), st.integers(-8, -1))
STEP = st.tuples(st.sampled_from(["arrive", "arrived", "from_host", "at_head", "again", "enqueue", "transmit",
                                  "left", "deadline"]),
                 st.integers(0, 300_000), PRIORITY, st.integers(0, 3000))


@settings(max_examples=250)
@given(rate=st.integers(1, 10**11), delay=st.integers(0, 2_000_000), host_facing=st.booleans(), loss=LOSS,
       drop=st.lists(st.integers(1, 40), max_size=6), seed=SEEDS, steps=st.lists(STEP, max_size=80))
def test_same_frames_drops_and_deadlines(rate, delay, host_facing, loss, drop, seed, steps):
    links = [py_link.Link(rate, delay, host_facing, loss, drop, seed),
             core_link.Link(rate, delay, host_facing, loss, drop, seed)]
    queues = [Queue(), Queue()]
    head = b""
    now = 0
    for number, (op, dt, priority, size) in enumerate(steps):
        now += dt
        frame = number.to_bytes(2, "big") * (size // 2)  # one object, handed to both
        if op == "arrive":
            out = [link.arrive(now, frame) for link in links]
        elif op == "arrived":
            out = [link.arrived(now) for link in links]
        elif op == "from_host":
            out = [link.lost_from_host(priority) for link in links]
        elif op in ("at_head", "again"):
            head = frame if op == "at_head" else head  # "again": the same head object, asked once more
            out = [link.lost_at_head(head, priority) for link in links]
        elif op == "enqueue":
            for queue in queues:
                queue.frames.append((priority % 8, frame))
            out = [None, None]
        elif op == "transmit":
            out = [(link.transmit(now, queue, 1), len(queue.frames)) for link, queue in zip(links, queues)]
        elif op == "left":
            out = [_outcome(link.left, now) for link in links]
        else:
            out = [link.next_deadline(bool(size % 2)) for link in links]
        assert out[0] == out[1], (number, op)
        assert _state(links[0]) == _state(links[1]), (number, op)
        assert links[0].next_deadline(True) == links[1].next_deadline(True)
        assert links[0].next_deadline(False) == links[1].next_deadline(False)


@settings(max_examples=200)
@given(seed=SEEDS, loss=st.floats(0.01, 0.99))
def test_the_same_seed_drops_the_same_frames(seed, loss):
    """Seeds keep their meaning: the Python link's draws are random.Random(seed)'s, and so are the twin's."""
    twin = core_link.Link(10**9, 0, True, loss, (), seed)
    draws = random.Random(seed)
    assert [twin.lost_from_host(0) for _ in range(700)] == [draws.random() < loss for _ in range(700)]


def test_errors_are_pythons():
    """A wire left with nothing on it, and priorities no list index names, fail as the Python model fails."""
    for module in (py_link, core_link):
        link = module.Link(10**9, 1000, True, 0.0, (3,), 1)
        assert _outcome(link.left, 0) is IndexError
        link.lost_from_host(0), link.lost_from_host(0)
        assert _outcome(link.lost_from_host, 8) is IndexError  # the third frame is dropped: counted nowhere


def test_a_simulated_fabric_loses_the_same_frames_on_either_link(monkeypatch):
    """The simulated switch drives the twin as it drives the Python link (the MMU's frames at the head, frames
    from hosts): seeded loss and a drop list take the same frames, and the run that recovers is the same."""
    import emulator.study.sim_fabric as sim_fabric
    from emulator.collectives.sim_ranks import run_sim_collective
    from emulator.fabric.plan import make_plan
    from topologies.fabrics import StarTopo

    runs = []
    for module in (py_link, core_link):
        monkeypatch.setattr(sim_fabric, "Link", module.Link)
        plan = make_plan(StarTopo(n=4), "sim", {"bw": "100mbit", "mtu": "4200", "loss": "0.002", "drop": "5"})
        fabric = sim_fabric.build_sim_fabric(plan, "lossless", {"buffer": "1MiB", "headroom": "72KiB"}, seed=7)
        result = run_sim_collective(fabric.sim, fabric.hosts, "allreduce", 1 << 20, 1, 1, None, 4096)
        links = fabric.switches["s1"].links
        assert all(isinstance(link, module.Link) for link in links)
        runs.append(([list(link.injected_drops) for link in links], [(link.rx_seq, link.tx_seq) for link in links],
                     sim_fabric.totals(fabric), fabric.sim.now, result.warmup[0].retransmissions))
    assert runs[0] == runs[1]
    assert sum(map(sum, runs[0][0])) > 8  # the drop list's 8 frames and seeded losses besides
