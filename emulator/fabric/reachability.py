"""Which hosts of a running fabric reach each other: one ICMP echo per ordered pair."""

from __future__ import annotations

import subprocess

from emulator.fabric.node import Node


def pingall(hosts: list[Node], timeout: float = 1.0) -> tuple[int, int, list[tuple[str, str]]]:
    """One ICMP echo from every host to every other, all sources in parallel."""
    failed: list[tuple[str, str]] = []
    procs = []
    for src in hosts:
        targets = [dst for dst in hosts if dst is not src]
        script = " ".join(
            f"(ping -c1 -W{max(int(timeout), 1)} -q {dst.ip} >/dev/null 2>&1 || echo {dst.name}) &" for dst in targets
        ) + " wait"
        procs.append((src, src.popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)))
    for src, proc in procs:
        out, _ = proc.communicate()
        failed += [(src.name, dst) for dst in out.split()]
    total = len(hosts) * (len(hosts) - 1)
    return total - len(failed), total, failed
