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


def printable(text: str) -> str:
    """``text`` with every character that is not printable escaped (``\\n``, ``\\x1b``).

    For names taken from files and directories someone else wrote: a file
    name with a newline must not split a one-line message, and an escape
    sequence must not reach the terminal.
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)

