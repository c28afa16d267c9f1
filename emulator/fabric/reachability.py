"""Which hosts of a running fabric reach each other: one ICMP echo per ordered pair."""

from __future__ import annotations

import random
import subprocess

from emulator.fabric.node import Node


def pingall(hosts: list[Node], timeout: float = 1.0, sample: int | None = None,
            seed: int = 1) -> tuple[int, int, list[tuple[str, str]]]:
    """One ICMP echo from every host to every other, all sources in parallel; (answered, pinged, failed).

    With ``sample``, only that many ordered pairs, drawn at random with ``seed`` (all of them if there
    are fewer): fattree,16 has over a million.
    """
    failed: list[tuple[str, str]] = []
    procs = []
    pairs = _pairs(hosts, sample, seed)
    for src, targets in pairs.items():
        if not targets:
            continue
        script = " ".join(
            f"(ping -c1 -W{max(int(timeout), 1)} -q {dst.ip} >/dev/null 2>&1 || echo {dst.name}) &" for dst in targets
        ) + " wait"
        procs.append((src, src.popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)))
    for src, proc in procs:
        out, _ = proc.communicate()
        failed += [(src.name, dst) for dst in out.split()]
    total = sum(map(len, pairs.values()))
    return total - len(failed), total, failed


def _pairs(hosts: list[Node], sample: int | None, seed: int) -> dict[Node, list[Node]]:
    """Each source's destinations: every other host, or those of ``sample`` distinct random pairs."""
    everyone = len(hosts) * (len(hosts) - 1)
    if sample is None or sample >= everyone:
        return {src: [dst for dst in hosts if dst is not src] for src in hosts}
    rng, chosen = random.Random(seed), set()
    while len(chosen) < sample:
        src, dst = rng.randrange(len(hosts)), rng.randrange(len(hosts) - 1)
        chosen.add((src, dst + (dst >= src)))  # any host but the source
    targets: dict[Node, list[Node]] = {}
    for src, dst in sorted(chosen):
        targets.setdefault(hosts[src], []).append(hosts[dst])
    return targets
