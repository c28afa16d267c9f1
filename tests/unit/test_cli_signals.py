"""Stop signals at the command's edges: inside a finalizer, during the imports, and left ignored by the launcher.

Python drops an exception raised while a finalizer runs; the CLI's unraisable hook sends such a
SIGTERM or Ctrl-C again (a CI run's pingall, sent SIGTERM while building, printed its table instead).
A stop during the imports, before ``cli.main`` runs, ends the command with one line at most; a stop
signal the launcher left ignored (nohup, a background job) stays ignored."""
from __future__ import annotations

import configparser
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher_signals import stop_signals_at_default

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
                          capture_output=True, text=True, timeout=15, preexec_fn=stop_signals_at_default)
    assert done.returncode == code, done.stderr
    assert "after the finalizer" in done.stderr
    assert "ran to its end" not in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


# --- a stop during the imports ------------------------------------------------------------------------


def _console_script() -> list[str]:
    """What the installed ``fabric-emu`` runs, from setup.cfg's entry point (pip's stub does the same)."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    entries = dict(line.split(" = ") for line in config["options.entry_points"]["console_scripts"].split("\n") if line)
    module, function = entries["fabric-emu"].split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())"]


def _caught(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (SigCgt)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask & 1 << (signum - 1))


def _importing(pid: int) -> bool:
    """Whether process ``pid`` has loaded an extension module: Python starts with none, and the command's
    imports load dozens (_socket, _ctypes, ...) before main runs."""
    with open(f"/proc/{pid}/maps") as f:
        return ".cpython-" in f.read()


@pytest.mark.parametrize("launcher", ["python -m emulator", "console script"])
@pytest.mark.parametrize("signum, code, err", [
    (signal.SIGINT, 130, "fabric-emu: interrupted before the command began; nothing was created\n"),
    (signal.SIGTERM, 143, ""), (signal.SIGHUP, 129, "")], ids=["ctrl-c", "sigterm", "sighup"])
def test_a_stop_during_the_imports_is_one_line_at_most(launcher, signum, code, err):
    """Sent once the command handles SIGHUP (the last stop signal it takes) or has begun its imports, whichever
    comes first: both land inside the imports, which take about 0.4 s, and before the fix the handlers came only
    after them (a Ctrl-C printed a KeyboardInterrupt traceback, SIGTERM killed the process)."""
    command = [sys.executable, "-m", "emulator"] if launcher == "python -m emulator" else _console_script()
    proc = subprocess.Popen([*command, "topos"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=stop_signals_at_default)
    deadline = time.monotonic() + 10
    while not (_caught(proc.pid, signal.SIGHUP) or _importing(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.0005)
    proc.send_signal(signum)
    out, stderr = proc.communicate(timeout=15)
    assert (proc.returncode, stderr, out) == (code, err, "")


# --- a stop signal the launcher left ignored ---------------------------------------------------------

IGNORING = textwrap.dedent("""
    import signal, sys, time
    from emulator import __main__ as entry, cli

    def command(_args):
        print("running", file=sys.stderr, flush=True)
        time.sleep(1)
        print("the command ran to its end", file=sys.stderr, flush=True)
        return 0

    cli._parse = lambda argv: type("Args", (), {"func": staticmethod(command)})()
    sys.exit(entry.main())
""")


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT], ids=["nohup", "background-job"])
def test_a_stop_signal_the_launcher_ignored_stays_ignored(signum):
    """`nohup fabric-emu run ... &` must outlive its terminal: the command used to handle SIGHUP anyway, and a
    hang-up ended the run (exit 129).  Python itself keeps an ignored SIGINT, as a shell without job control
    sets it for a background job."""

    def launched_ignoring() -> None:
        stop_signals_at_default()
        signal.signal(signum, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-c", IGNORING], cwd=REPO, stderr=subprocess.PIPE, text=True,
                            preexec_fn=launched_ignoring)
    assert proc.stderr.readline() == "running\n"
    proc.send_signal(signum)
    stderr = proc.communicate(timeout=15)[1]
    assert proc.returncode == 0, stderr
    assert stderr == "the command ran to its end\n"
