"""JSON messages, one per line, over a stream socket: the out-of-band channels.

The perf tools exchange QP details over TCP through the fabric, as perftest
does; the collective coordinator talks to its ranks over a Unix socket.
Both speak this: a reply with an ``error`` key ends the exchange with that
error, and a peer that goes away or stays silent ends it with a line that
says who and what was awaited.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from emulator.errors import FabricError


class JsonLines:
    """One connection; ``peer`` names the other end in error messages."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.file = sock.makefile("rwb")

    def send(self, message: dict[str, Any]) -> None:
        self.file.write(json.dumps(message).encode() + b"\n")
        self.file.flush()

    def receive(self, what: str) -> dict[str, Any]:
        """The next message; ``what`` says what it should be, for the errors."""
        try:
            line = self.file.readline()
        except socket.timeout:
            raise FabricError(f"{self.peer} did not send {what} in time") from None
        if not line:
            raise FabricError(f"{self.peer} closed the connection while we waited for {what}")
        message = json.loads(line)
        if "error" in message:
            raise FabricError(f"{self.peer}: {message['error']}")
        return message

    def close(self) -> None:
        self.file.close()
        self.sock.close()
