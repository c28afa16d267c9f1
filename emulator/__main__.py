"""``python -m emulator`` and the ``fabric-emu`` console script: the command, stoppable from its first instant.

Importing the command takes about 0.4 s (pyroute2, numpy, the fabric's modules), and a Ctrl-C in
that time printed a KeyboardInterrupt traceback from somewhere inside an import, before ``main``
had installed its handlers.  So this module, which imports nothing else of the package, handles
the stop signals first: nothing exists yet that would need removing, so a stop during the imports
just ends the process with the signal's code, Ctrl-C with one line.  Once the command is imported,
``cli.main`` takes the signals over.

A stop signal the launcher left ignored stays ignored here as in ``cli.main``: nohup ignores
SIGHUP, and a shell without job control starts a background job with SIGINT ignored.
"""

from __future__ import annotations

import os
import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stopped_early(signum: int, _frame: object) -> None:
    if signum == signal.SIGINT:
        os.write(2, b"fabric-emu: interrupted before the command began; nothing was created\n")
    os._exit(128 + signum)


def main() -> int:
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _stopped_early)
    from emulator import cli

    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
