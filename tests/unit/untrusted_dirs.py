"""Helpers for testing commands that run on directories someone else wrote (report, pcap).

The promise checked: the command either succeeds, changing nothing but
its outputs inside DIR, or prints exactly one line ("fabric-emu: ...") on
stderr, exits non-zero and changes nothing at all.  A snapshot of the
whole sandbox (DIR and what lies beside it, links not followed) is taken
before and compared after.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import stat

from emulator import cli


def snapshot(root: str) -> dict[str, tuple]:
    """Everything below ``root``, links not followed: each path's kind and content (hash) or target."""
    state: dict[str, tuple] = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                entry: tuple = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                with open(path, "rb") as f:
                    entry = ("file", hashlib.sha256(f.read()).hexdigest())
            else:
                entry = ("dir" if stat.S_ISDIR(mode) else "other", stat.S_IFMT(mode))
            state[os.path.relpath(path, root)] = entry
    return state


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> set[str]:
    return {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``fabric-emu ARGV`` in this process: (exit code, stdout, stderr); main's signal handlers undone."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code: int, err: str, *fragments: str) -> str:
    """A non-zero code and exactly one line on stderr, "fabric-emu: ..." with ``fragments``; the line."""
    assert code != 0
    lines = err.split("\n")
    assert len(lines) == 2 and lines[1] == "", err
    assert lines[0].startswith("fabric-emu: "), err
    assert lines[0].isprintable(), err
    for fragment in fragments:
        assert fragment in lines[0], err
    return lines[0]
