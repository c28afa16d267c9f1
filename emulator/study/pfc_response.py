"""The response time of both ends of a lossless link, measured from the captures of an incast.

A lossless incast (``star,senders+1``, UDP senders at the full link rate
into the last host, priority 3, every link end captured) gives, per XOFF:

  (a) generation: at the switch port that sends it, the time from the last
      data frame the port received before it (its last bit) to the XOFF on
      the wire;
  (b) reaction: at the sender it reaches, the time from its arrival to the
      sender's last priority-3 frame before its traffic stops (a silence of
      ``gap_frames`` frame times), and what the sender still sent meanwhile;

and the two added, the response time the PFC headroom must cover.  The
analysis of each capture is :mod:`emulator.study.pfc_analysis`;
``scripts/pfc_timing.py`` prints it and ``scripts/headroom_sweep.py`` puts
it into the headroom formula.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

from emulator.study import pfc_analysis as pa
from emulator.study.incast import run_incast
from emulator.units import parse_rate, parse_time

PRIORITY = 3  # the lossless class the incast sends in
DEFAULT_GAP_FRAMES = 3.0


@dataclass
class ResponseResult:
    """What :func:`measure_response` found: per-XOFF events and the run's counters."""

    rate_bps: int
    delay_ns: int
    mtu: int
    generation: dict[str, list[pa.Generation]] = field(default_factory=dict)  # switch port -> XOFFs
    reaction: dict[str, list[pa.Reaction]] = field(default_factory=dict)  # host -> XOFFs
    combined_ns: list[int] = field(default_factory=list)  # generation + reaction per matched XOFF
    totals: dict[str, Any] = field(default_factory=dict)
    headroom_drops: int = 0
    lost: list[int | None] = field(default_factory=list)
    scheduling: str = "?"  # the agents' scheduling policy

    @property
    def frame_ns(self) -> int:
        return pa.frame_time_ns(self.rate_bps)

    def generation_ns(self) -> list[int]:
        return [g.delay_ns for events in self.generation.values() for g in events]

    def stopped(self) -> list[pa.Reaction]:
        return [r for events in self.reaction.values() for r in events if r.stopped]

    def all_reactions(self) -> list[pa.Reaction]:
        return [r for events in self.reaction.values() for r in events]


def headroom_drops(stats: dict[str, Any]) -> int:
    """Sum of drops.headroom over every switch port and priority."""
    return sum(q["drops"]["headroom"] for sw in stats["switches"].values()
               for port in sw["ports"].values() for q in port["priorities"])


def agent_scheduling(stats: dict[str, Any]) -> str:
    """The scheduling policies the agents report (e.g. SCHED_FIFO 10)."""
    agents = list(stats["switches"].values()) + list(stats["hosts"].values())
    return ", ".join(sorted({a.get("scheduling", "?") for a in agents}))


def analyse_response(directory: str, ports: dict[str, str], rate_bps: int, gap_ns: int,
                     result: ResponseResult) -> None:
    """Fill ``result`` from the pcapng files of a response run."""
    for ifname, host in sorted(ports.items()):
        switch_side = pa.read_capture(os.path.join(directory, f"{ifname}.pcapng"))
        generations = pa.generation_delays(switch_side, PRIORITY, rate_bps)
        if not generations:
            continue  # the receiver's port sends no XOFF
        host_side = pa.read_capture(os.path.join(directory, f"{host}-eth0.pcapng"))
        reactions = pa.reactions(host_side, PRIORITY, gap_ns=gap_ns)
        result.generation[ifname] = generations
        result.reaction[host] = reactions
        pairs = pa.match([g.xoff_ns for g in generations], [r.pause_ns for r in reactions], tolerance_ns=100_000)
        result.combined_ns += [generations[i].delay_ns + reactions[j].reaction_ns
                               for i, j in pairs if reactions[j].stopped]


def measure_response(bw: str = "50mbit", seconds: int = 3, senders: int = 3, delay: str = "0us",
                     mtu: int = 1500, switch: dict[str, str] | None = None, capture: str | None = None,
                     gap_frames: float = DEFAULT_GAP_FRAMES,
                     log: Callable[[str], None] | None = None) -> ResponseResult:
    """Run a captured lossless incast and measure (a) generation and (b) reaction.

    ``capture`` keeps the pcapng files there; by default they go to a
    temporary directory that is removed.
    """
    rate = parse_rate(bw)
    directory = capture or tempfile.mkdtemp(prefix="pfc-timing-")
    try:
        incast = run_incast("lossless", "udp", senders, bw, seconds, switch=switch, capture=directory, log=log,
                            delay=delay, mtu=mtu)
        result = ResponseResult(rate, parse_time(delay), mtu, totals=incast.totals,
                                headroom_drops=headroom_drops(incast.stats),
                                lost=[f.lost_packets for f in incast.flows],
                                scheduling=agent_scheduling(incast.stats))
        analyse_response(directory, incast.switch_ports, rate, int(gap_frames * pa.frame_time_ns(rate)), result)
    finally:
        if capture is None:
            shutil.rmtree(directory, ignore_errors=True)
    return result
