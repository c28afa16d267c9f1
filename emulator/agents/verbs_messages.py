"""Requests on the verbs socket, decoded and checked before the RNIC acts on them.

Applications are outside the RNIC: anything they send is hostile until
checked.  A request is one JSON object per SEQPACKET message with an
``op``; every field the RNIC reads goes through a getter here that insists
on its JSON type and its range, so that a bad request ends as one
:class:`BadRequest` (the RNIC's error reply) and never as an exception
deeper down: no Infinity or NaN, no float where an integer belongs, no
number beyond what its header field holds, no nesting beyond what JSON's
own recursion guard allows, no message over :data:`MESSAGE_MAX` bytes.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from emulator.errors import shown

MESSAGE_MAX = 1 << 20  # bytes of one request or reply
MAX_WRS = 4096  # work requests in one post
U24, U32, U64 = (1 << 24) - 1, (1 << 32) - 1, (1 << 64) - 1


class BadRequest(ValueError):
    """A request the RNIC refuses; the message is the one-line error reply."""


def _no_constant(name: str) -> None:
    raise BadRequest(f"{name} is not a number the RNIC takes")


def decode(data: bytes) -> dict[str, Any]:
    """The request object in one message; BadRequest unless it is a JSON object with a string ``op``."""
    if len(data) > MESSAGE_MAX:
        raise BadRequest(f"request of {len(data)} bytes: at most {MESSAGE_MAX}")
    try:
        request = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest("request nested too deeply") from None
    except BadRequest:
        raise
    except ValueError as err:  # also UnicodeDecodeError, and integers of more digits than Python converts
        raise BadRequest(f"request is not JSON: {str(err).splitlines()[0][:100]}") from None
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        raise BadRequest("a request is a JSON object with a string \"op\"")
    return request


def _field(request: dict[str, Any], key: str) -> Any:
    if key not in request:
        raise BadRequest(f"missing field {key!r}")
    return request[key]


def check_int(value: Any, name: str, low: int, high: int) -> int:
    """``value`` if it is a JSON integer (not a bool or float) within [low, high]."""
    if type(value) is not int:
        raise BadRequest(f"{name} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise BadRequest(f"{name} {shown(value)} is out of range ({low} to {high})")
    return value


def integer(request: dict[str, Any], key: str, low: int, high: int) -> int:
    """The integer field ``key`` of ``request``, within [low, high]."""
    return check_int(_field(request, key), key, low, high)


def optional_integer(request: dict[str, Any], key: str, low: int, high: int) -> int | None:
    """Like :func:`integer`, None when the field is absent."""
    return None if key not in request else integer(request, key, low, high)


def quiet(request: dict[str, Any]) -> bool:
    """Whether the request asks for no reply unless it fails (``"quiet": true``; absent is false)."""
    value = request.get("quiet", False)
    if type(value) is not bool:
        raise BadRequest(f"quiet must be true or false, not {shown(value)}")
    return value


def ipv4(request: dict[str, Any], key: str) -> str:
    """A dotted-quad IPv4 address field (the RNIC's GIDs), in its canonical text."""
    value = _field(request, key)
    try:
        return str(ipaddress.IPv4Address(value if isinstance(value, str) else None))
    except ValueError:
        raise BadRequest(f"{key} must be an IPv4 address, not {shown(value)}") from None


def rows(request: dict[str, Any], key: str, columns: tuple[tuple[str, int, int], ...]) -> list[list[int]]:
    """A list of work requests, each a list of integers named and bounded by ``columns``.

    A column whose bounds are (0, 1) also takes true and false.
    """
    value = _field(request, key)
    if not isinstance(value, list) or not 0 < len(value) <= MAX_WRS:
        raise BadRequest(f"{key} must be a list of 1 to {MAX_WRS} work requests")
    checked = []
    for number, row in enumerate(value):
        if not isinstance(row, list) or len(row) != len(columns):
            raise BadRequest(f"{key}[{number}] must be a list of {len(columns)} integers "
                             f"({', '.join(name for name, _, _ in columns)})")
        checked.append([
            int(item) if isinstance(item, bool) and high == 1 else check_int(item, f"{key}[{number}].{name}", low, high)
            for item, (name, low, high) in zip(row, columns)
        ])
    return checked
