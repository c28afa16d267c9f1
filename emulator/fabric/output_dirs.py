"""The directories ``fabric-emu up`` writes into (``--capture``, ``--telemetry``): made and checked before the build.

The telemetry is written at ``down`` and the captures converted then, so a
directory that could not be made (``--telemetry /dev/null/x``) used to be
found only at ``down``, after the run, with the telemetry lost; a capture
directory failed half-way through the build with a traceback.  So each
directory is made here (with its parents) before anything is built, and
refused in one line if it cannot be made, is not a directory, or cannot be
written.

Each run needs a directory of its own: two runs given the same one would
write the same names (``stats.json``; ``s1-eth1.pcapng``), the second
overwriting the first.  So a directory that already holds such files, or
that a run that is up writes into, is refused too.  Two ``up`` commands
checking the same new directory in the same instant are not told apart.

What was made here and is still empty when the ``up`` fails is removed
again (:func:`remove_if_empty`).
"""

from __future__ import annotations

import os
from typing import Callable

from emulator.errors import FabricError, listed, printable
from emulator.fabric import runstate
from emulator.fabric.capture import CAPTURE_SUFFIXES
from emulator.fabric.teardown import TELEMETRY_FILES


def prepare(capture: str | None, telemetry: str | None) -> list[str]:
    """Make and check the capture and telemetry directories (absolute paths, or None); the directories it
    created, parents first."""
    made: list[str] = []
    try:
        others = runstate.runs()
        if capture is not None:
            _check_unused("--capture", capture, [s.run for s in others if s.capture_dir == capture])
            _make("--capture", capture, made)
            _check_empty("--capture", capture, "captures", lambda name: name.endswith(CAPTURE_SUFFIXES))
        if telemetry is not None:
            _check_unused("--telemetry", telemetry, [s.run for s in others if s.telemetry_dir == telemetry])
            _make("--telemetry", telemetry, made)
            _check_empty("--telemetry", telemetry, "telemetry", lambda name: name in TELEMETRY_FILES)
    except BaseException:
        remove_if_empty(made)
        raise
    return made


def remove_if_empty(made: list[str]) -> None:
    """Remove each directory :func:`prepare` created that is empty, deepest first; those that are not stay
    (a failed build's telemetry is kept), in ``made`` too."""
    for directory in reversed(list(made)):
        try:
            os.rmdir(directory)
        except OSError:
            continue  # not empty
        made.remove(directory)


def _check_unused(flag: str, directory: str, runs: list[str]) -> None:
    if runs:
        raise FabricError(f"{flag} {printable(directory)}: run {', '.join(runs)} (up) writes there; "
                          "give each run a directory of its own")


def _make(flag: str, directory: str, made: list[str]) -> None:
    """``directory`` and its missing parents; a link to a directory is the user's choice and is followed."""
    missing = []
    path = directory
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            pass  # made meanwhile by someone else: not ours to remove
        except OSError as err:
            raise FabricError(f"{flag} {printable(directory)}: cannot create {printable(path)}: "
                              f"{err.strerror or err}") from None
        else:
            made.append(path)
    if not os.path.isdir(directory):
        raise FabricError(f"{flag} {printable(directory)}: not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FabricError(f"{flag} {printable(directory)}: cannot write there (permission denied or a read-only "
                          "file system)")


def _check_empty(flag: str, directory: str, what: str, ours: Callable[[str], bool]) -> None:
    """Refuse a directory already holding files of the names a run writes there (another run's)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as err:
        raise FabricError(f"{flag} {printable(directory)}: cannot list it: {err.strerror or err}") from None
    taken = [printable(name) for name in names if ours(name)]
    if taken:
        raise FabricError(f"{flag} {printable(directory)} holds {what} already ({listed(taken, limit=4)}), which "
                          "this run would overwrite; give each run a directory of its own")
