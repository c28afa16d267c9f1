"""The client side of an agent's control socket: one request, one JSON reply.

The server side is :class:`emulator.agents.base.AgentBase`; the socket sits
in the run directory (:func:`emulator.fabric.runstate.control_socket`), so it
is reachable from any namespace.
"""

from __future__ import annotations

import json
import socket
from typing import Any


ATTEMPTS = 3  # connections an agent may close before it took the request


def query_agent(path: str, request: str, timeout: float = 2.0) -> dict[str, Any]:
    """Send one request to an agent's control socket; its JSON reply.

    An agent serves 16 clients at once and makes room for a new one by dropping the oldest that has said
    nothing: one that connected but had not sent its request yet (scheduled out between the two) can be
    that one when clients that were dropped reconnect at once, over and over (a hung or hostile script).
    The agent then closed the connection before it took the request, so nothing was done, and the request
    is sent again on a new connection, up to ATTEMPTS times.
    """
    for _ in range(ATTEMPTS):
        reply = _ask(path, request, timeout)
        if reply is not None:
            return reply
    raise BrokenPipeError(f"{path}: the agent closed {ATTEMPTS} connections before it took the request")


def _ask(path: str, request: str, timeout: float) -> dict[str, Any] | None:
    """The reply to one request on a connection of its own; None if the agent closed it before taking it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        try:
            sock.sendall(request.encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            return None
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            if chunks:  # a reply cut short: the request was taken
                raise
            return None  # closed with the request unread (a reset): it was not taken
    return json.loads(b"".join(chunks))
