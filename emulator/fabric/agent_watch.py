"""The agents a fabric started, and what became of them.

An agent that dies while the fabric is up would otherwise go unnoticed
until results look wrong, so its death is reported on stderr within
POLL_INTERVAL, once per process (the agents of many nodes share one), with
its exit and the last line of its log; :meth:`AgentWatch.check` raises it for callers that
want to stop there.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from typing import Callable

from emulator.errors import FabricError

POLL_INTERVAL = 0.5  # seconds between the watcher's looks at the agents


class AgentWatch:
    """The agents' processes of one fabric (``procs``: node -> Popen, shared by the nodes of a process) and a
    thread that reports deaths."""

    def __init__(self, kinds: dict[str, str], log_path: Callable[[str], str]) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self._kinds = kinds  # node -> "host" or "switch"
        self._log_path = log_path  # node -> its agent's log file
        self._stopping = threading.Event()

    def failure(self, name: str) -> str | None:
        """Why node ``name``'s agent is gone, or None while it runs."""
        proc = self.procs[name]
        if proc.poll() is None:
            return None
        try:
            with open(self._log_path(name)) as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            lines = []
        if proc.returncode < 0:
            how = f"was killed by {signal.Signals(-proc.returncode).name}"
        else:
            how = f"exited with code {proc.returncode}"
        why = f": {lines[-1]}" if lines else ""
        others = sum(1 for other in self.procs.values() if other is proc) - 1
        shared = f" with the agents of {others} other nodes" if others else ""
        return f"{self._kinds[name]} {name} agent (pid {proc.pid}) {how}{shared}{why}"

    def check(self) -> None:
        """Raise FabricError naming the first node whose agent died."""
        for name in self.procs:
            failure = self.failure(name)
            if failure:
                raise FabricError(failure)

    def start(self) -> None:
        """Report, from a daemon thread, each agent that dies until :meth:`stop`."""
        threading.Thread(target=self._watch, name="agent-watch", daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()

    def _watch(self) -> None:
        reported: set[int] = set()  # processes (pids): one line for all the agents of a process
        while not self._stopping.wait(POLL_INTERVAL):
            for name, proc in self.procs.items():
                if proc.pid not in reported and (failure := self.failure(name)):
                    reported.add(proc.pid)
                    print(f"fabric-emu: {failure}", file=sys.stderr)
