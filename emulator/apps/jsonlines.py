"""JSON messages, one per line, over a stream socket: the out-of-band channels.

The perf tools exchange QP details over TCP through the fabric, as perftest
does; the collective coordinator talks to its ranks over a Unix socket.
Both speak this: a reply with an ``error`` key ends the exchange with that
error, and a peer that goes away or stays silent ends it with a line that
says who and what was awaited.  The peer is hostile until checked (the
perf server listens on the fabric): a line is at most LINE_MAX bytes, must
be a JSON object, and the fields a caller names must be there with their
types; anything else ends the exchange with one line naming the peer.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from emulator.errors import FabricError, one_line

LINE_MAX = 1 << 20


class JsonLines:
    """One connection; ``peer`` names the other end in error messages."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.file = sock.makefile("rwb")

    def send(self, message: dict[str, Any]) -> None:
        self.file.write(json.dumps(message).encode() + b"\n")
        self.file.flush()

    def receive(self, what: str, fields: dict[str, type] | None = None,
                optional: dict[str, type] | None = None) -> dict[str, Any]:
        """The next message; ``what`` says what it should be, for the errors.

        ``fields`` names keys the message must have, ``optional`` keys it
        may have, with their types (an int is never a bool or a float here).
        """
        try:
            line = self.file.readline(LINE_MAX + 1)
        except socket.timeout:
            raise FabricError(f"{self.peer} did not send {what} in time") from None
        except OSError as err:
            raise FabricError(f"{self.peer}: connection failed while we waited for {what}: {err.strerror}") from None
        if not line:
            raise FabricError(f"{self.peer} closed the connection while we waited for {what}")
        if len(line) > LINE_MAX:
            raise FabricError(f"{self.peer} sent a message over {LINE_MAX} bytes instead of {what}")
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            raise FabricError(f"{self.peer} sent something that is not JSON instead of {what}") from None
        if not isinstance(message, dict):
            raise FabricError(f"{self.peer} sent something that is no JSON object instead of {what}")
        if "error" in message:
            raise FabricError(f"{self.peer}: {one_line(str(message['error']))[:200]}")
        self.require(message, what, fields or {})
        self.require(message, what, {key: kind for key, kind in (optional or {}).items() if key in message})
        return message

    def require(self, message: dict[str, Any], what: str, fields: dict[str, type]) -> None:
        """FabricError unless ``message`` has each of ``fields`` with its type."""
        for key, kind in fields.items():
            if type(message.get(key)) is not kind:
                raise FabricError(f"{self.peer} sent {what} without a valid {key!r} ({kind.__name__})")

    def close(self) -> None:
        self.file.close()
        self.sock.close()
