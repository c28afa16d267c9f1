"""The client side of an agent's control socket: one request, one JSON reply.

The server side is :class:`emulator.agents.base.AgentBase`; the socket sits
in the run directory (:func:`emulator.fabric.runstate.control_socket`), so it
is reachable from any namespace.
"""

from __future__ import annotations

import json
import socket
from typing import Any


def query_agent(path: str, request: str, timeout: float = 2.0) -> dict[str, Any]:
    """Send one request to an agent's control socket; its JSON reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(request.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return json.loads(b"".join(chunks))
