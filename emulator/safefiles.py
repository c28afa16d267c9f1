"""Files in a directory someone else wrote: bounded reads, and writes that follow no link.

``fabric-emu report DIR`` and ``fabric-emu pcap DIR`` run unprivileged on
directories copied from elsewhere, and whoever wrote such a directory chose
every name in it: a file may be a symbolic link (to one of the user's files,
to /dev/zero), a FIFO or a device, a subdirectory may be a link out of DIR,
a file may be gigabytes.  So, below DIR (DIR itself is the user's choice
and may be a link):

- no symbolic link is followed, reading or writing: each name is looked up
  relative to its parent directory's descriptor (lstat, then O_NOFOLLOW),
  and a link is refused with one line;
- only regular files are read; a FIFO or a device is refused before it is
  opened, so opening one cannot hang or have side effects;
- :func:`read_inside` reads at most a stated number of bytes;
- :func:`append_inside` appends to a regular file, never through a link;
- :class:`Outputs` writes each output to a fresh temporary file
  (O_CREAT|O_EXCL|O_NOFOLLOW) in the target directory and renames them all
  over their names only when every one is complete: a link at an output's
  name is replaced, never written through, and a command that fails leaves
  no output behind (nor the output directory, when it created it).  A
  command killed with SIGKILL cannot remove its temporary files: the next
  :class:`Outputs` in that directory does, when no other is writing there
  (each holds a shared flock on the directory while it writes, and removes
  what it finds only under an exclusive one); only regular files named as
  ours (``.fabric-emu-<16 hex digits>.tmp``) go, and no link is followed.

Every name below DIR is opened through a descriptor of the directory above,
so nothing is read or written outside DIR whatever the names resolve to.

The same holds where fabric-emu writes as root into a directory it did not
make: the calibration cache in /var/cache/fabric-emu, a run's
``--telemetry`` directory.  So this module sits in the base layer, below
the fabric's teardown and the study's commands alike.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import stat
from types import TracebackType
from typing import BinaryIO, Callable

from emulator.errors import FabricError, printable
from emulator.units import format_size

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_BELOW = os.O_NOFOLLOW | os.O_CLOEXEC
NAME_MAX = 255  # bytes in one file name (Linux)
TEMPORARY = re.compile(r"\.fabric-emu-[0-9a-f]{16}\.tmp")  # the names of Outputs' temporary files


def _open_directory(path: str) -> int:
    try:
        return os.open(path, _DIRECTORY)
    except FileNotFoundError:
        raise FabricError(f"no such directory: {printable(path)}") from None
    except OSError as err:
        raise FabricError(f"cannot open the directory {printable(path)}: {err.strerror}") from None


def _lstat_below(dir_fd: int, name: str, shown: str) -> os.stat_result | None:
    """What ``name`` in ``dir_fd`` is, the link itself for a link; None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise FabricError(f"cannot look at {shown}: {err.strerror}") from None


def _check_kind(st: os.stat_result, wanted: Callable[[int], bool], kind: str, shown: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise FabricError(f"{shown} is a symbolic link: not followed")
    if not wanted(st.st_mode):
        raise FabricError(f"{shown} is not a {kind}")


def _open_below(dir_fd: int, name: str, flags: int, wanted: Callable[[int], bool], kind: str,
                shown: str) -> int | None:
    """``name`` (one component) in ``dir_fd``, opened only if it is a ``kind`` and not a link; None if missing.

    lstat first, so a FIFO or device is never opened; fstat after, in case
    the name was replaced in between.
    """
    before = _lstat_below(dir_fd, name, shown)
    if before is None:
        return None
    _check_kind(before, wanted, kind, shown)
    try:
        fd = os.open(name, flags | _BELOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise FabricError(f"cannot open {shown}: {err.strerror}") from None
    if not wanted(os.fstat(fd).st_mode):
        os.close(fd)
        raise FabricError(f"{shown} is not a {kind}")
    return fd


def open_inside(directory: str, relative: str) -> BinaryIO | None:
    """The regular file ``directory/relative`` open for reading; None when it (or a directory on the way) is missing.

    ``relative`` is a '/'-separated path the caller built from checked
    names; no link below ``directory`` is followed.
    """
    parts = relative.split("/")
    if any(part in ("", ".", "..") or "\0" in part for part in parts):
        raise ValueError(f"not a path below a directory: {relative!r}")
    fd: int | None = _open_directory(directory)
    try:
        for depth, part in enumerate(parts[:-1]):
            below = _open_below(fd, part, _DIRECTORY, stat.S_ISDIR, "directory",
                                printable(os.path.join(directory, *parts[:depth + 1])))
            os.close(fd)
            fd = below
            if fd is None:
                return None
        file_fd = _open_below(fd, parts[-1], os.O_RDONLY | os.O_NONBLOCK, stat.S_ISREG, "regular file",
                              printable(os.path.join(directory, relative)))
    finally:
        if fd is not None:
            os.close(fd)
    if file_fd is None:
        return None
    os.set_blocking(file_fd, True)
    return os.fdopen(file_fd, "rb")


def read_inside(directory: str, relative: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``directory/relative``, at most ``limit`` of them; None when it is missing."""
    f = open_inside(directory, relative)
    if f is None:
        return None
    shown = printable(os.path.join(directory, relative))
    return read_bounded(f, limit, f"cannot read {shown}",
                        f"{shown} is larger than {format_size(limit)}, the limit for this file")


def read_bounded(f: BinaryIO, limit: int, unreadable: str, too_large: str) -> bytes:
    """All of ``f``, closed after, if it holds at most ``limit`` bytes.

    Reads one byte past the limit instead of trusting the size a stat
    reports, which a file that grows outdates.  Fails with ``unreadable:
    strerror`` or ``too_large``, each the caller's words for its file.
    """
    try:
        with f:
            data = f.read(limit + 1)
    except OSError as err:
        raise FabricError(f"{unreadable}: {err.strerror}") from err
    if len(data) > limit:
        raise FabricError(too_large)
    return data


def append_inside(directory: str, name: str) -> BinaryIO:
    """The regular file ``name`` (one component) of ``directory``, open for appending, never through a link.

    For a file this program created and goes on adding to (the runner's
    CSV files): what is at its name now must still be a regular file.
    """
    shown = printable(os.path.join(directory, name))
    fd = _open_directory(directory)
    try:
        file_fd = _open_below(fd, name, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK, stat.S_ISREG, "regular file",
                              shown)
    finally:
        os.close(fd)
    if file_fd is None:
        raise FabricError(f"cannot write {shown}: it was removed")
    os.set_blocking(file_fd, True)
    return os.fdopen(file_fd, "ab")


def list_inside(directory: str) -> list[str]:
    """The names in ``directory``, sorted."""
    fd = _open_directory(directory)
    try:
        return sorted(os.listdir(fd))
    except OSError as err:
        raise FabricError(f"cannot list {printable(directory)}: {err.strerror}") from None
    finally:
        os.close(fd)


class Outputs:
    """Files written into ``directory`` (or its ``subdirectory``), all of them or none.

    Use as a context manager: :meth:`write` fills a temporary file at once
    (so the outputs need not all be in memory together); leaving the block
    normally renames every one into place, leaving it by an exception
    removes them, and the subdirectory too if this created it.
    """

    def __init__(self, directory: str, subdirectory: str | None = None) -> None:
        self.path = os.path.join(directory, subdirectory) if subdirectory else directory
        self._subdirectory = subdirectory
        self._pending: list[tuple[str, str]] = []  # (temporary name, final name)
        self._created = False
        self._parent_fd: int | None = _open_directory(directory)
        self._fd: int | None = None
        try:
            self._fd = self._open_target()
            self._claim()
        except BaseException:
            self._discard()
            raise

    def _open_target(self) -> int:
        """The descriptor outputs go to: DIR's own, or the subdirectory's, created if missing, never through a link."""
        assert self._parent_fd is not None
        if self._subdirectory is None:
            return os.dup(self._parent_fd)
        shown = printable(self.path)
        try:
            os.mkdir(self._subdirectory, 0o777, dir_fd=self._parent_fd)
            self._created = True
        except FileExistsError:
            pass
        except OSError as err:
            raise FabricError(f"cannot create {shown}: {err.strerror}") from None
        fd = _open_below(self._parent_fd, self._subdirectory, _DIRECTORY, stat.S_ISDIR, "directory", shown)
        if fd is None:
            raise FabricError(f"cannot create {shown}: it was removed meanwhile")
        return fd

    def _claim(self) -> None:
        """Hold the target directory shared while these outputs are pending (the descriptor's close lets go); first,
        if no other Outputs holds it, in any process, remove the temporary files one killed with SIGKILL left."""
        assert self._fd is not None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another command is writing here: the temporary files are its own
        except OSError:
            return  # a file system without flock on directories: nothing is known to be stale
        else:
            self._remove_stale()
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def _remove_stale(self) -> None:
        """Remove every regular file of the target named as our temporary files are (unlink follows no link)."""
        assert self._fd is not None
        try:
            names = os.listdir(self._fd)
        except OSError:  # a directory we may write but not read: its outputs are still written
            return
        for name in filter(TEMPORARY.fullmatch, names):
            st = _lstat_below(self._fd, name, printable(os.path.join(self.path, name)))
            if st is not None and stat.S_ISREG(st.st_mode):
                try:
                    os.unlink(name, dir_fd=self._fd)
                except OSError:
                    pass  # gone meanwhile, or the directory is not writable: writing the outputs will say so

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if kind is None:
                self._commit()
        finally:
            self._discard()

    def write(self, name: str, fill: Callable[[BinaryIO], object]) -> str:
        """Call ``fill`` with a fresh temporary file that becomes ``name`` when the block ends; the final path.

        ``name`` must be one file name (callers build it from validated
        parts); it is checked again here because a wrong one would write
        elsewhere.
        """
        if name in ("", ".", "..") or "/" in name or "\0" in name:
            raise ValueError(f"not a file name: {name!r}")
        path = printable(os.path.join(self.path, name))
        if len(os.fsencode(name)) > NAME_MAX:
            raise FabricError(f"cannot write {path}: the name is longer than {NAME_MAX} bytes")
        temporary = f".fabric-emu-{secrets.token_hex(8)}.tmp"  # TEMPORARY
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BELOW, 0o666, dir_fd=self._fd)
        except OSError as err:
            raise FabricError(f"cannot write in {printable(self.path)}: {err.strerror}") from None
        self._pending.append((temporary, name))
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)
        except OSError as err:
            raise FabricError(f"cannot write {path}: {err.strerror}") from None
        return os.path.join(self.path, name)

    def _commit(self) -> None:
        """Rename every temporary file over its name; first refuse a name held by a directory (rename would fail
        half-way).  A subdirectory this created and left empty is removed with the rest."""
        renaming = bool(self._pending)
        for _, name in self._pending:
            shown = printable(os.path.join(self.path, name))
            st = _lstat_below(self._fd, name, shown)
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise FabricError(f"cannot write {shown}: a directory has that name")
        while self._pending:
            temporary, name = self._pending[0]
            try:
                os.replace(temporary, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
            except OSError as err:
                raise FabricError(f"cannot write {printable(os.path.join(self.path, name))}: {err.strerror}") from None
            self._pending.pop(0)
        if renaming:
            self._created = False  # it holds the outputs now

    def _discard(self) -> None:
        """Remove what is still temporary (everything, unless committed), the subdirectory if this created it;
        close the descriptors."""
        if self._fd is not None:
            for temporary, _ in self._pending:
                try:
                    os.unlink(temporary, dir_fd=self._fd)
                except OSError:
                    pass  # gone already, or the directory's mode changed: the error that brought us here matters
            os.close(self._fd)
        self._pending, self._fd = [], None
        if self._parent_fd is not None:
            if self._created and self._subdirectory is not None:
                try:
                    os.rmdir(self._subdirectory, dir_fd=self._parent_fd)
                except OSError:
                    pass  # not empty: something else was put there meanwhile
            os.close(self._parent_fd)
        self._parent_fd = None
