"""A stop that lands inside a finalizer still ends the command.

Python drops an exception raised while a finalizer runs; the CLI's unraisable hook sends such a
SIGTERM or Ctrl-C again (a CI run's pingall, sent SIGTERM while building, printed its table instead)."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

COMMAND = textwrap.dedent("""
    import signal, sys, time
    from emulator import cli

    class Finalized:
        def __del__(self):
            signal.raise_signal({signum})  # the handler runs here, inside the finalizer

    def command(_args):
        Finalized()
        print("after the finalizer", file=sys.stderr, flush=True)
        time.sleep(20)
        print("the command ran to its end", file=sys.stderr, flush=True)
        return 0

    cli._parse = lambda argv: type("Args", (), {{"func": staticmethod(command)}})()
    sys.exit(cli.main([]))
""")


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)],
                         ids=["sigterm", "sighup", "ctrl-c"])
def test_a_stop_dropped_by_a_finalizer_is_sent_again(signum, code):
    done = subprocess.run([sys.executable, "-c", COMMAND.format(signum=int(signum))], cwd=REPO,
                          capture_output=True, text=True, timeout=15)
    assert done.returncode == code, done.stderr
    assert "after the finalizer" in done.stderr
    assert "ran to its end" not in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
