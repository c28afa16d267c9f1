"""Command-line parsing shared by fabric-emu and the scripts and benchmarks: numbers within their ranges, errors
in one line.

A number's range is checked by its argparse type (:func:`whole`, :func:`real`, from :mod:`emulator.bounds`), so a
mistake costs one line naming the flag, before anything is built.  The scripts (``scripts/*.py``,
``bench/*.py``) parse with :meth:`Parser.parse_checked`: an out-of-range number there had no check at all (a
``--seconds 0`` incast or a ``--senders -1`` star went on to fail half-way, with a traceback).
"""

from __future__ import annotations

import argparse
from typing import Callable, NoReturn, Sequence

from emulator import bounds
from emulator.errors import FabricError


class Parser(argparse.ArgumentParser):
    """argparse with the project's error format: one line, not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog.split()[0]}: {message} (see {self.prog} --help)\n")

    def parse_checked(self, args: Sequence[str] | None = None) -> argparse.Namespace:
        """``parse_args``, with a number out of its range (its type's FabricError) one line too, exit 2.

        For the scripts; fabric-emu's ``main`` reports that FabricError as it does any input error (exit 1)."""
        try:
            return self.parse_args(args)
        except FabricError as err:
            self.error(str(err))


def whole(flag: str, allowed: tuple[int, int]) -> Callable[[str], int]:
    """An argparse type: a whole number within its range, else one line naming the flag."""
    return lambda text: bounds.whole(flag, text, allowed)


def real(flag: str, allowed: tuple[float, float]) -> Callable[[str], float]:
    """An argparse type: a finite number within its range, else one line naming the flag."""
    return lambda text: bounds.real(flag, text, allowed)
