"""The compiled loop that serves many agents in one process, with agents written in Python: deadlines per
agent, after_events only where something happened, one agent stopped while the others go on (no root).
Its heap of deadlines is checked by `cargo test -p fabric-io` (deadlines_moved_do_not_pile_up)."""

from __future__ import annotations

import json
import os
import select
import threading
import time
from typing import Any

import pytest

from emulator.agents.base import AgentBase
from emulator.agents.config import AgentConfig
from emulator._core.dataplane import Loop
from emulator.fabric.agent_control import query_agent

MS = 1_000_000


class Ticker(AgentBase):
    """An agent whose deadlines are ``offsets`` after the loop starts; it stops itself after the last."""

    def __init__(self, tmp: str, name: str, loop: Loop, offsets: list[int], stop_after: bool = True) -> None:
        super().__init__(AgentConfig(name=name, netns="none", control=os.path.join(tmp, f"{name}.sock"),
                                     stats_file=os.path.join(tmp, f"{name}.stats.json"), seed=0), loop)
        self.offsets = list(offsets)
        self.stop_after = stop_after
        self.deadlines: list[int] = []
        self.fired: list[tuple[int, int]] = []  # (deadline, now)
        self.after = 0

    def after_events(self, now: int) -> None:
        self.after += 1
        if not self.deadlines and self.offsets:  # the first wake-up: deadlines from now on
            self.deadlines = [now + offset for offset in self.offsets]
        due = self.deadlines[len(self.fired)] if len(self.fired) < len(self.deadlines) else None
        self.arm(due, now)

    def on_timer(self, now: int) -> None:
        self.fired.append((self.deadlines[len(self.fired)], now))
        if self.stop_after and len(self.fired) == len(self.deadlines):
            self.running = False

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, "fired": len(self.fired)}


def _run(loop: Loop, seconds: float = 10) -> None:
    """Run the loop; fail (and end it) if it has not returned within ``seconds``."""
    timer = threading.Timer(seconds, lambda: setattr(loop, "stopping", True))
    timer.start()
    try:
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < seconds, "the loop did not end by itself"
    finally:
        timer.cancel()
        loop.close()


def test_each_agent_wakes_for_its_own_deadlines_and_only_then(tmp_path):
    loop = Loop()
    fast = Ticker(str(tmp_path), "fast", loop, [2 * MS * k for k in range(1, 6)])
    slow = Ticker(str(tmp_path), "slow", loop, [3 * MS, 7 * MS])
    _run(loop)
    for agent, count in ((fast, 5), (slow, 2)):
        assert len(agent.fired) == count
        assert all(now >= deadline for deadline, now in agent.fired)
        # Lateness counted from the agent's own deadline, once per wake-up.
        assert agent.timer_lateness["link"].count == count
        # after_events: once at the start, then once per own wake-up; never for the other agent's.
        assert agent.after == 1 + count
        with open(tmp_path / f"{agent.name}.stats.json") as f:
            assert json.load(f) == {"name": agent.name, "fired": count}
    assert loop.agents == []


def test_a_stopped_agent_leaves_and_the_others_go_on(tmp_path):
    loop = Loop()
    first = Ticker(str(tmp_path), "first", loop, [], stop_after=False)
    second = Ticker(str(tmp_path), "second", loop, [], stop_after=False)
    seen: dict[str, Any] = {}

    def client() -> None:
        try:
            seen["stop"] = query_agent(first.config.control, "stop")
            deadline = time.monotonic() + 5
            while not os.path.exists(first.config.stats_file) and time.monotonic() < deadline:
                time.sleep(0.01)
            seen["second"] = query_agent(second.config.control, "stats")
            with pytest.raises(OSError):
                query_agent(first.config.control, "stats", timeout=0.5)
            seen["refused"] = True
        finally:
            query_agent(second.config.control, "stop")

    thread = threading.Thread(target=client)
    thread.start()
    _run(loop)
    thread.join()
    assert seen == {"stop": {"stopping": True}, "second": {"name": "second", "fired": 0}, "refused": True}
    assert os.path.exists(second.config.stats_file)


def test_stopping_ends_every_agent(tmp_path):
    loop = Loop()
    agents = [Ticker(str(tmp_path), f"a{i}", loop, [3600_000 * MS], stop_after=False) for i in range(3)]
    threading.Timer(0.2, lambda: setattr(loop, "stopping", True)).start()  # as the worker's SIGTERM does
    _run(loop)
    for agent in agents:
        with open(agent.config.stats_file) as f:
            assert json.load(f)["fired"] == 0


class Busy(Ticker):
    """An agent with one descriptor whose handler takes ``busy_s`` of the process's time."""

    def __init__(self, tmp: str, name: str, loop: Loop, busy_s: float, log: list[str]) -> None:
        super().__init__(tmp, name, loop, [], stop_after=False)
        self.fd = os.eventfd(1, os.EFD_NONBLOCK)  # readable from the start
        self.busy_s, self.log = busy_s, log
        self.watch(self.fd, select.EPOLLIN, self._on_event)

    def _on_event(self, _fd: int, _mask: int, _now: int) -> None:
        os.eventfd_read(self.fd)
        self.log.append(self.name)
        time.sleep(self.busy_s)
        self.running = False


def test_a_deadline_that_comes_during_a_batch_is_served_before_the_rest_of_it(tmp_path):
    """Two busy agents' events in one batch; a third agent's deadline comes during the first: it is served
    (timer and after_events) before the second agent's handler, not after the batch."""
    log: list[str] = []
    loop = Loop()
    first = Busy(str(tmp_path), "first", loop, 0.05, log)
    second = Busy(str(tmp_path), "second", loop, 0.05, log)
    timed = Ticker(str(tmp_path), "timed", loop, [5 * MS])
    timed.on_timer = lambda now, original=timed.on_timer: (log.append("timed"), original(now))
    _run(loop)
    assert log[1] == "timed" and sorted(log) == ["first", "second", "timed"]  # between the two handlers
    assert timed.after == 2  # the start, and at once after its timer (not again at the batch's end)
    assert timed.timer_lateness["link"].quantile(0.99) < 60 * MS
    os.close(first.fd)
    os.close(second.fd)


def test_no_agent_sees_its_clock_run_backwards_when_a_deadline_is_served_within_a_batch(tmp_path):
    """An agent whose deadline is served in the middle of a batch, and whose own event comes later in that
    batch, is never handed an earlier time than before."""
    log: list[str] = []
    loop = Loop()
    Busy(str(tmp_path), "first", loop, 0.05, log)  # registered first: its event comes first in the batch
    timed = Busy(str(tmp_path), "timed", loop, 0.0, log)
    timed.offsets, seen = [5 * MS], []
    on_event, on_timer, after_events = timed._on_event, timed.on_timer, timed.after_events
    loop.unwatch(timed.fd)  # its handler, seen from outside
    timed.watch(timed.fd, select.EPOLLIN, lambda fd, mask, now: (seen.append(now), on_event(fd, mask, now)))
    timed.on_timer = lambda now: (seen.append(now), log.append("timer"), on_timer(now))
    timed.after_events = lambda now: (seen.append(now), after_events(now))
    _run(loop)
    assert log == ["first", "timer", "timed"]  # the deadline was served within the batch, before the event
    assert seen == sorted(seen)


def test_each_agent_sends_right_after_its_own_events_not_after_every_agents(tmp_path):
    """Two agents with an event in one batch: the first's after_events (what it sends) runs before the
    second's handler, at a time no earlier than its own turn's start; the second's turn starts later."""
    log: list[str] = []
    loop = Loop()
    first = Busy(str(tmp_path), "first", loop, 0.02, log)
    second = Busy(str(tmp_path), "second", loop, 0.02, log)
    times: dict[str, list[int]] = {"first": [], "second": []}
    for agent in (first, second):
        after_events = agent.after_events
        agent.after_events = lambda now, a=agent, f=after_events: (log.append(f"{a.name} sends"),
                                                                  times[a.name].append(now), f(now))
    _run(loop)
    assert log[:2] == ["first sends", "second sends"]  # the loop's start
    assert log[2:6] == ["first", "first sends", "second", "second sends"]
    assert times["second"][-1] - times["first"][-1] >= 20 * MS  # the second's turn began after the first's work
    os.close(first.fd)
    os.close(second.fd)


class TwoPorts(Busy):
    """A busy agent with two descriptors ready at once (a switch with two ports that both have frames)."""

    def __init__(self, tmp: str, name: str, loop: Loop, busy_s: float, log: list[str]) -> None:
        super().__init__(tmp, name, loop, busy_s, log)
        self.second_fd = os.eventfd(1, os.EFD_NONBLOCK)
        self.watch(self.second_fd, select.EPOLLIN, self._on_second)

    def _on_second(self, _fd: int, _mask: int, _now: int) -> None:
        os.eventfd_read(self.second_fd)
        self.log.append(f"{self.name} 2")
        time.sleep(self.busy_s)


def test_a_deadline_that_comes_during_one_of_an_agents_handlers_does_not_wait_for_its_others(tmp_path):
    """One agent's two descriptors in one batch; another agent's deadline comes during the first handler:
    it is served between them, not after the first agent's whole turn."""
    log: list[str] = []
    loop = Loop()
    ports = TwoPorts(str(tmp_path), "ports", loop, 0.05, log)
    timed = Ticker(str(tmp_path), "timed", loop, [5 * MS])
    timed.on_timer = lambda now, original=timed.on_timer: (log.append("timed"), original(now))
    _run(loop)
    assert log == ["ports", "timed", "ports 2"]
    os.close(ports.fd)
    os.close(ports.second_fd)


def test_a_request_the_agent_dropped_before_taking_it_is_sent_again(tmp_path):
    """An agent at its 16 clients drops the oldest silent one; a client scheduled out between its connect
    and its send can be that one (test_stop_and_dead_agents saw `stats` fail on a broken pipe once). The
    request was not taken, so query_agent sends it again; a third refusal is an error."""
    import socket as socketlib

    path = str(tmp_path / "agent.sock")
    server = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    refusals = {"left": 2}

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            with conn:
                if refusals["left"] > 0:  # closed with a reset before reading: the client's send fails
                    refusals["left"] -= 1
                    conn.setsockopt(socketlib.SOL_SOCKET, socketlib.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    continue
                request = conn.recv(256)
                conn.sendall(json.dumps({"got": request.decode().strip()}).encode())
                if request == b"last\n":
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    time.sleep(0.05)
    assert query_agent(path, "stats") == {"got": "stats"}
    assert refusals["left"] == 0
    assert query_agent(path, "last") == {"got": "last"}
    thread.join(timeout=5)
    server.close()
