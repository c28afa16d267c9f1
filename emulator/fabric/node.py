"""A node of a running fabric: a name, a kind, a network namespace, and commands run inside it."""

from __future__ import annotations

import subprocess
from typing import Any, Sequence

from emulator.kernel.netns import enter_for_exec


class Node:
    """A host or switch of a running fabric: run commands inside it."""

    def __init__(self, name: str, kind: str, netns: str, ip: str | None) -> None:
        self.name, self.kind, self.netns, self.ip = name, kind, netns, ip

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name} {self.ip or ''}>".replace(" >", ">")

    def popen(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``cmd`` inside the node's namespace (``subprocess.Popen``)."""
        netns = self.netns
        return subprocess.Popen(list(cmd), preexec_fn=lambda: enter_for_exec(netns), **kwargs)

    def run(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """Run ``cmd`` inside the node's namespace to completion.

        Output is captured as text unless the caller says otherwise.
        """
        kwargs.setdefault("capture_output", "stdout" not in kwargs and "stderr" not in kwargs)
        kwargs.setdefault("text", True)
        netns = self.netns
        return subprocess.run(list(cmd), preexec_fn=lambda: enter_for_exec(netns), **kwargs)
