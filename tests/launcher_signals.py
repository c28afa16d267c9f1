"""Children that a test stops with a signal, whatever started the suite.

A launcher may leave the stop signals ignored: a shell without job control starts a background job
with SIGINT ignored (``nohup scripts/test.sh > log 2>&1 &``), and nohup ignores SIGHUP.  An ignored
signal stays ignored across fork and exec, and Python installs its KeyboardInterrupt handler only
when SIGINT was at its default, so a command under test never saw the Ctrl-C the test sent it (the
ctrl-c variants of the signal tests failed, and only when run that way).  Popen's
``restore_signals`` does not help: it resets SIGPIPE, SIGXFZ and SIGXFSZ alone.
"""

from __future__ import annotations

import signal
import subprocess

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_signals_at_default() -> None:
    """For Popen's ``preexec_fn``: in the child, between fork and exec, every stop signal back to its
    default disposition, as an interactive shell starts a foreground job."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def read_until(proc: subprocess.Popen, marker: str, what: str) -> None:
    """Reads the child's stderr until a line holds ``marker``; fails naming ``what`` it ended before."""
    seen: list[str] = []
    while not any(marker in line for line in seen):
        line = proc.stderr.readline()
        assert line, f"the run ended before {what}: " + "".join(seen[-5:])
        seen.append(line)
