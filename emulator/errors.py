"""User-facing errors.

Anything the user can cause (a bad topology spec, bad units, a missing
privilege, a name clash) raises :class:`FabricError`.  Its text is one line
that names the problem; the CLI prints it and exits non-zero, without a
traceback.  Bugs stay ordinary exceptions so they do show a traceback.
"""


class FabricError(Exception):
    """A problem the user can fix; ``str(err)`` is the whole message."""

    exit_code = 1


class NeedRootError(FabricError):
    """The command needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)."""

    exit_code = 2


SHOWN_CHARS = 40  # how much of a hostile value a message repeats


def printable(text: str) -> str:
    """``text`` with every character a terminal would not print on the same
    line (newlines, U+2028, lone surrogates, ...) escaped as ``repr`` does."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def one_line(text: str) -> str:
    """Someone else's message (an exception's, a parser's) as one line."""
    return printable(" ".join(text.split()))


def shown(value: object, depth: int = 2) -> str:
    """A value as a message repeats it: its ``repr``, on one line, shortened.

    Hostile input can be anything a file or command line holds, including
    an integer of 5000 digits, whose ``repr`` raises (Python refuses to
    print integers of more than 4300 digits) and which would be a page of
    digits anyway: such values are shown by their first digits and length.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        digits = _digit_count(abs(value))
        lead = abs(value) // 10 ** (digits - 12)
        return f"{'-' if value < 0 else ''}{lead}... ({digits} digits)"
    if isinstance(value, (list, tuple, dict)) and depth == 0:
        return "[...]" if isinstance(value, (list, tuple)) else "{...}"
    if isinstance(value, (list, tuple)):
        items = ", ".join(shown(item, depth - 1) for item in value[:3])
        return printable(f"[{items}{', ...' if len(value) > 3 else ''}]")[:3 * SHOWN_CHARS]
    if isinstance(value, dict):
        items = ", ".join(f"{shown(k)}: {shown(v, depth - 1)}" for k, v in list(value.items())[:3])
        return printable(f"{{{items}{', ...' if len(value) > 3 else ''}}}")[:3 * SHOWN_CHARS]
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 2 * SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _digit_count(n: int) -> int:
    """Decimal digits of ``n`` > 0 without converting it to text."""
    digits = int((n.bit_length() - 1) * 0.30102999566398120) + 1
    return digits + 1 if n >= 10 ** digits else digits


def listed(items: list[str], limit: int = 16, sep: str = ", ") -> str:
    """The first ``limit`` of ``items`` joined, and how many more: a fattree,16 run has 1344 namespaces."""
    if len(items) <= limit:
        return sep.join(items)
    return f"{sep.join(items[:limit])}{sep}... and {len(items) - limit} more"
