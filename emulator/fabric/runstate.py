"""What a run created, on disk, so that anything can remove exactly that.

Every run has a directory /run/fabric-emu/<run>/ whose state.json names all
the namespaces the run *will* create, written before the first one exists.
Cleanup trusts only that record (Kathara-style tagging): it kills the
processes whose network namespace is one of the run's, and the agents and
captures the record names if they are still the processes it recorded;
removes those namespaces (their veths and tc go with them) and then the
directory.  So a runner killed with SIGKILL at any point leaves nothing
``fabric-emu clean`` cannot find, and cleanup never touches what another
program made.

The record is checked before anything follows it, as it is before it is
written: names as :mod:`emulator.fabric.names` says, every namespace carrying the
run's ``<run>-`` prefix, types and ranges of every field, at most
MAX_RECORD_BYTES of UTF-8 JSON.  Paths are only ever built from checked
names under RUN_ROOT.  What fails a check is reported in one line and left
alone: a bad record, an entry of the run root that is not a run name, a
symbolic link, something not owned by us.

The run root is created mode 0755, and an existing one of ours (a real
directory owned by us) is set to 0755: anyone may read the runs' names, which
their namespaces in /run/netns show anyone already, so that ``list`` works
without root; each run's directory is 0700, so its record, logs and sockets
stay root's.  A run root that is a symbolic link, not a directory, or owned by
someone else is refused.  Files in it are created mode 0600, and a record file is replaced
whole (:func:`replace_file`), so that a reader never sees half of one.

A run in use is not cleanup's to take: ``clean`` leaves a run whose owner
still runs (an experiment, a ``with Fabric``, an ``up`` still building) or
whose agents still run after ``up`` detached it (:meth:`RunState.holder`), and says
so; ``force`` removes those too.  The commands that change a running fabric
(``link``, ``fault``, ``down``, ``clean``, and a runner's own teardown) take
the run's lock (:func:`run_lock`) and so act one after the other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import stat
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Callable, Iterable, Iterator

from emulator.kernel import processes
from emulator.errors import FabricError, listed, shown
from emulator.fabric.names import RUN_NAME, check_ifname, check_node_name, check_run_name, namespace_name, owns_namespace
from emulator.kernel.netns import existing_namespaces, remove_namespace
from emulator.kernel.processes import ProcessId
from emulator.model.switch_params import FABRICS

RUN_ROOT = "/run/fabric-emu"
ROOT_MODE = 0o755  # the runs' names for anyone (list without root); each run's directory is 0700
STATE_FILE = "state.json"
MAX_RECORD_BYTES = 16 << 20  # a fat-tree of 16 000 hosts records about 4 MiB
MAX_TEXT = 4096  # characters of the topology spec and of a directory path
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT
DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOCK_WAIT_S = 10.0  # how long a command waits for the lock of a run another command is changing
LOCK_POLL_S = 0.01


class BadRecord(FabricError):
    """A state record that fails a check; the text says which."""


class RunBusy(FabricError):
    """Another command held a run's lock for longer than the wait."""


@dataclass
class RunState:
    """The record of one run: who owns it and every name it creates."""

    run: str
    owner_pid: int
    created: float
    topo: str
    namespaces: list[str]
    nodes: dict[str, dict[str, Any]]  # name -> kind, netns, ip
    agents: dict[str, int] = field(default_factory=dict)  # node -> pid of the process serving its agent (shared)
    features: dict[str, bool] = field(default_factory=dict)  # what the kernel offered
    fabric: str = "lossless"
    capture_dir: str | None = None
    captures: dict[str, int] = field(default_factory=dict)  # ifname -> tcpdump pid
    telemetry_dir: str | None = None
    detached: bool = False  # True once `fabric-emu up` handed the run over
    started: dict[str, int] = field(default_factory=dict)  # pid (as text) -> its start time, processes.start_time

    @property
    def directory(self) -> str:
        return run_dir(self.run)

    def save(self) -> None:
        """Write the record (checked first, so that it can always be read back)."""
        check_record(self)
        text = json.dumps(asdict(self), indent=1)
        if len(text) > MAX_RECORD_BYTES:
            raise FabricError(f"the record of run {self.run} would exceed {MAX_RECORD_BYTES >> 20} MiB")
        replace_file(os.path.join(_make_run_dir(self.run), STATE_FILE), text)

    def note_started(self, pids: Iterable[int]) -> None:
        """Record when each of ``pids`` started, so that only that process is ever signalled."""
        for pid in pids:
            start = processes.start_time(pid)
            if start is not None:
                self.started[str(pid)] = start

    def process(self, pid: int) -> ProcessId | None:
        """Recorded process ``pid``; None if its start time was not recorded."""
        start = self.started.get(str(pid))
        return None if start is None else ProcessId(pid, start)

    def recorded_processes(self) -> list[ProcessId]:
        """The agents' processes (once each: nodes share them) and captures of the record."""
        pids = dict.fromkeys([*self.agents.values(), *self.captures.values()])
        return [proc for proc in map(self.process, pids) if proc is not None]

    def owner_alive(self) -> bool:
        owner = self.process(self.owner_pid)
        return owner is not None and processes.exists(owner)

    def agents_running(self) -> int:
        return sum(1 for pid in self.agents.values() if (proc := self.process(pid)) and processes.running(proc))

    def holder(self) -> str | None:
        """What keeps the run in use, for a message: its owner still running (an experiment, a ``with
        Fabric``, an ``up`` still building), or agents still running after ``up`` detached it; None when nothing
        does (its runner died, or every agent did), so that only cleanup can end it."""
        if not self.detached:
            return f"held by pid {self.owner_pid}" if self.owner_alive() else None
        running = self.agents_running()
        return f"up ({running}/{len(self.agents)} agents running)" if running else None


# --- checks ------------------------------------------------------------------------------


def _require(ok: bool, why: str) -> None:
    if not ok:
        raise BadRecord(why)


def _is_int(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _is_pid_text(value: object) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= 7 and value.isascii() and value.isdigit()
            and str(int(value)) == value and 1 <= int(value) <= PID_MAX)


def _is_text(value: object, limit: int = MAX_TEXT) -> bool:
    return isinstance(value, str) and len(value) <= limit and value.isprintable()


def _is_directory_path(value: object) -> bool:
    return value is None or (_is_text(value) and os.path.isabs(value) and os.path.normpath(value) == value)


def _check_name(check: Callable[[object], str], value: object) -> None:
    try:
        check(value)
    except FabricError as err:
        raise BadRecord(str(err)) from None


def _check_nodes(state: RunState) -> None:
    _require(isinstance(state.nodes, dict), "nodes is not an object")
    for name, info in state.nodes.items():
        _check_name(check_node_name, name)
        _require(isinstance(info, dict) and set(info) == {"kind", "netns", "ip"},
                 f"node {name}: expected kind, netns and ip")
        _require(info["kind"] in ("host", "switch"), f"node {name}: kind is neither host nor switch")
        _require(info["netns"] == namespace_name(state.run, name),
                 f"node {name}: its namespace is not {namespace_name(state.run, name)}")
        if info["kind"] == "switch":
            _require(info["ip"] is None, f"switch {name} has an address")
        else:
            _require(isinstance(info["ip"], str) and _is_ipv4(info["ip"]), f"host {name}: bad address")


def _is_ipv4(text: str) -> bool:
    try:
        return str(ipaddress.IPv4Address(text)) == text
    except ValueError:
        return False


def _check_pids(what: str, pids: object, known: Callable[[str], None]) -> None:
    _require(isinstance(pids, dict), f"{what} is not an object")
    for key, pid in pids.items():
        known(key)
        _require(_is_int(pid, 1, PID_MAX), f"{what}: bad pid for {key}")


def _check_capture(state: RunState, ifname: str) -> None:
    _check_name(check_ifname, ifname)
    _require(ifname.rsplit("-eth", 1)[0] in state.nodes, f"captures: {ifname} is on no node of the record")


def check_record(state: RunState) -> None:
    """Raise BadRecord unless every field of ``state`` is what fabric-emu writes."""
    _check_name(check_run_name, state.run)
    _require(_is_int(state.owner_pid, 0, PID_MAX), "owner_pid is not a pid")
    _require(type(state.created) in (int, float) and 0 <= state.created <= 1e11, "created is not a time")
    _require(_is_text(state.topo), "topo is not a line of text")
    _require(isinstance(state.namespaces, list) and all(isinstance(n, str) for n in state.namespaces),
             "namespaces is not a list of names")
    for name in state.namespaces:
        _require(owns_namespace(state.run, name), f"namespace {shown(name)} is not {state.run}-<node>")
    _check_nodes(state)

    def known_node(name: object) -> None:
        _require(name in state.nodes, f"agents: {shown(name)} is no node of the record")

    _check_pids("agents", state.agents, known_node)
    _check_pids("captures", state.captures, lambda ifname: _check_capture(state, ifname))
    _require(isinstance(state.features, dict)
             and all(_is_text(k, 32) and type(v) is bool for k, v in state.features.items()),
             "features is not an object of booleans")
    _require(state.fabric in FABRICS, f"fabric is not one of {', '.join(FABRICS)}")
    _require(_is_directory_path(state.capture_dir), "capture_dir is not an absolute, normalized path")
    _require(_is_directory_path(state.telemetry_dir), "telemetry_dir is not an absolute, normalized path")
    _require(type(state.detached) is bool, "detached is not true or false")
    _require(isinstance(state.started, dict)
             and all(_is_pid_text(k) and _is_int(v, 0, 2**63 - 1) for k, v in state.started.items()),
             "started is not an object of pids and start times")


_FIELDS = {f.name for f in dataclasses.fields(RunState)}
_REQUIRED = {f.name for f in dataclasses.fields(RunState)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def parse_record(run: str, raw: bytes) -> RunState:
    """The record of run ``run`` from the bytes of its state.json; BadRecord if it fails a check."""
    _require(len(raw) <= MAX_RECORD_BYTES, f"larger than {MAX_RECORD_BYTES >> 20} MiB")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise BadRecord("not UTF-8") from None
    except RecursionError:
        raise BadRecord("nested too deeply") from None
    except ValueError as err:
        raise BadRecord(f"not JSON: {str(err).splitlines()[0][:100]}") from None
    _require(isinstance(data, dict), "not a JSON object")
    unknown, missing = set(data) - _FIELDS, _REQUIRED - set(data)
    _require(not unknown, f"unknown field {shown(min(unknown, default=''))}")
    _require(not missing, f"missing field {shown(min(missing, default=''))}")
    state = RunState(**data)
    check_record(state)
    _require(state.run == run, f"names run {state.run!r}, not {run!r}")
    return state


# --- the run root ---------------------------------------------------------------------------


def run_dir(run: str) -> str:
    """The directory of run ``run`` (a checked name, so it is a child of RUN_ROOT)."""
    return os.path.join(RUN_ROOT, check_run_name(run))


def verbs_socket(run: str, node: str) -> str:
    """Where the host agent of ``node`` listens for verbs."""
    return os.path.join(run_dir(run), f"{node}.verbs")


def control_socket(run: str, node: str) -> str:
    """Where the agent of ``node`` answers control requests (``stats``, ``stop``)."""
    return os.path.join(run_dir(run), f"{node}.sock")


def _open_root() -> int | None:
    """An fd of RUN_ROOT, refusing a symbolic link or someone else's directory; None if absent."""
    try:
        fd = os.open(RUN_ROOT, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:  # O_NOFOLLOW with O_DIRECTORY fails a link with ENOTDIR; say which it is
        raise FabricError(f"cannot use {RUN_ROOT}: {_not_own_dir(RUN_ROOT) or _why(err)}") from None
    owner = os.fstat(fd).st_uid
    if not _trusted(owner):
        os.close(fd)
        raise FabricError(f"cannot use {RUN_ROOT}: it belongs to uid {owner}, neither root nor us")
    return fd


def _trusted(uid: int) -> bool:
    """Whether files owned by ``uid`` may be followed: ours, or root's."""
    return uid in (0, os.geteuid())


def _why(err: OSError) -> str:
    if err.errno == errno.EACCES:
        return "permission denied (only root may read it)"
    return err.strerror or str(err)


def ensure_root() -> None:
    """Create RUN_ROOT mode ROOT_MODE, or set an existing one of ours to it (an older fabric-emu made it 0700)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(RUN_ROOT, ROOT_MODE)
    fd = _open_root()
    if fd is None:
        raise FabricError(f"cannot use {RUN_ROOT}: it vanished while being created")
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != ROOT_MODE:
            os.fchmod(fd, ROOT_MODE)
    finally:
        os.close(fd)


def _make_run_dir(run: str) -> str:
    """The run's directory, created mode 0700 if absent; FabricError if it is not ours."""
    ensure_root()
    path = run_dir(run)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # whatever the umask
    except FileExistsError:
        why = _not_own_dir(path)
        if why:
            raise FabricError(f"{path}: {why}; left alone") from None
    return path


def _not_own_dir(path: str) -> str | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "no such directory"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if not _trusted(st.st_uid):
        return f"owned by uid {st.st_uid}, neither root nor us"
    return None


def create_file(path: str, binary: bool = False) -> IO[Any]:
    """Create or truncate a file of a run for writing: mode 0600, never through a symbolic link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb" if binary else "w")


def replace_file(path: str, text: str) -> None:
    """Write a file of a run whole or not at all: a temporary file beside it (0600, no link followed), renamed
    over ``path``, so that a reader (an agent taking its routes, another command) sees the old text or the new."""
    tmp = path + ".tmp"
    try:
        with create_file(tmp) as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def new_run_name() -> str:
    """A short random run name; namespaces are called <run>-<node>."""
    while True:
        name = "fe" + secrets.token_hex(2)
        if not os.path.lexists(run_dir(name)):
            return name


def _read_record(run: str) -> RunState:
    """Run ``run``'s record; FileNotFoundError if it has none, FabricError if it fails a check."""
    path = os.path.join(run_dir(run), STATE_FILE)
    _require(stat.S_ISREG(os.lstat(path).st_mode), "not a regular file")  # a device is never even opened
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise BadRecord(f"cannot open: {_why(err)}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        _require(stat.S_ISREG(st.st_mode), "not a regular file")
        _require(_trusted(st.st_uid), f"owned by uid {st.st_uid}, neither root nor us")
        return parse_record(run, f.read(MAX_RECORD_BYTES + 1))


def load(run: str) -> RunState:
    """The record of run ``run``, checked; FabricError in one line if there is none or it is bad."""
    check_run_name(run)
    fd = _open_root()
    if fd is not None:
        os.close(fd)
    why = _not_own_dir(run_dir(run))
    if why == "no such directory":
        raise FabricError(f"no run named {run!r} (fabric-emu list shows the runs)")
    if why:
        raise FabricError(f"{run_dir(run)}: {why}; left alone")
    try:
        return _read_record(run)
    except FileNotFoundError:
        raise FabricError(f"run {run} has no {STATE_FILE} (its runner died early); "
                          "fabric-emu clean removes it") from None
    except BadRecord as err:
        raise FabricError(f"{os.path.join(run_dir(run), STATE_FILE)}: {err}; left alone") from None


@dataclass
class Scan:
    """What the run root holds: runs, orphans, and what was refused."""

    runs: list[RunState] = field(default_factory=list)  # oldest first
    orphans: list[str] = field(default_factory=list)  # run directories without a state record
    refused: list[str] = field(default_factory=list)  # one line each: what was left alone and why
    private: list[str] = field(default_factory=list)  # runs whose record only root may read (a scan without root)


def scan(only: str | None = None) -> Scan:
    """Every entry of the run root (or only the one named ``only``), checked; nothing is followed that fails a
    check."""
    found = Scan()
    fd = _open_root()
    if fd is None:
        return found
    try:
        entries = sorted(os.listdir(fd))
    finally:
        os.close(fd)
    for entry in entries:
        if only is not None and entry != only:
            continue
        path = os.path.join(RUN_ROOT, entry)
        if not RUN_NAME.fullmatch(entry):
            found.refused.append(f"{RUN_ROOT}: entry {shown(entry)} is not a run name; left alone")
            continue
        why = _not_own_dir(path)
        if why == "no such directory":
            continue  # removed meanwhile
        if why:
            found.refused.append(f"{path}: {why}; left alone")
            continue
        try:
            found.runs.append(_read_record(entry))
        except FileNotFoundError:
            found.orphans.append(entry)
        except PermissionError:
            found.private.append(entry)
        except BadRecord as err:
            found.refused.append(f"{os.path.join(path, STATE_FILE)}: {err}; left alone")
    found.runs.sort(key=lambda s: s.created)
    return found


# --- the lock of a run ------------------------------------------------------------------------


_held: dict[tuple[str, int], int] = {}  # (run, thread) -> how many times that thread of this process took its lock


@contextlib.contextmanager
def run_lock(run: str, wait_s: float | None = None) -> Iterator[bool]:
    """Hold the lock of run ``run`` for the body; yields whether the run is still there.

    The commands that change a running fabric take it (``link``, ``fault``, ``down``, ``clean``, a runner's
    teardown), so each acts on what the one before it left, never on half of it: two ``link`` commands once
    read the same links_down.json and one of the two cables pulled went unrecorded.  It is an flock on the
    run's directory itself (opened without following a link, ours or root's): nothing is created for it, so
    nothing can be planted in its place, left behind, or slip into a directory a teardown is removing.  A
    teardown removes the directory while holding the lock, so whoever waited finds it gone (False).  A thread
    that holds it already takes it again at once.  RunBusy (one line) after ``wait_s`` (LOCK_WAIT_S).
    """
    key = (check_run_name(run), threading.get_ident())
    if key in _held:
        _held[key] += 1
        try:
            yield os.path.isdir(run_dir(run))
        finally:
            _held[key] -= 1
        return
    path = run_dir(run)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    except OSError as err:
        raise FabricError(f"{path}: {_not_own_dir(path) or _why(err)}; left alone") from None
    if fd is None:
        yield False
        return
    try:
        owner = os.fstat(fd).st_uid
        if not _trusted(owner):
            raise FabricError(f"{path}: owned by uid {owner}, neither root nor us; left alone")
        _take(fd, run, LOCK_WAIT_S if wait_s is None else wait_s)
        _held[key] = 1
        try:
            yield os.fstat(fd).st_nlink > 0  # a removed directory has no link left
        finally:
            del _held[key]
    finally:
        os.close(fd)  # releases the lock


def _take(fd: int, run: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise RunBusy(f"run {run} is busy: another command (link, fault, down, clean or its runner's "
                              f"teardown) still held it after {wait_s:g} s; try again") from None
            time.sleep(LOCK_POLL_S)


def runs() -> list[RunState]:
    """All runs with a good state record, oldest first."""
    return scan().runs


def orphan_dirs() -> list[str]:
    """Run directories without a state record (crash before the first save, or cleanup cut short)."""
    return scan().orphans


# --- cleanup ------------------------------------------------------------------------------


_deferring = False


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the body to its end even if SIGINT, SIGTERM or SIGHUP arrives; then act on the signal.

    Cleanup cut short by Ctrl-C would leave namespaces and processes behind,
    so while it runs these signals are noted; once it is done the handlers
    in place before are restored and the first signal noted is raised again.
    Only the main thread can set handlers; elsewhere, and when already
    inside, the body just runs.
    """
    global _deferring
    if _deferring or threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    for signum in DEFERRED_SIGNALS:
        if signal.getsignal(signum) is not None:  # None: a handler Python cannot restore
            previous[signum] = signal.signal(signum, lambda number, _frame: received.append(number))
    _deferring = True
    try:
        yield
    finally:
        _deferring = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            signal.raise_signal(received[0])


@dataclass
class Removed:
    """What a cleanup removed, for the user to read, what it refused and what it left alone in use."""

    processes: list[int] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # runs in use, one line each: who holds them, how to end them

    def summary(self) -> str:
        if not (self.processes or self.namespaces or self.directories):
            return "nothing to remove"
        parts = []
        if self.processes:
            parts.append(f"{len(self.processes)} processes ({listed(list(map(str, self.processes)))})")
        if self.namespaces:
            parts.append(f"{len(self.namespaces)} namespaces ({listed(self.namespaces)})")
        if self.directories:
            parts.append(f"{len(self.directories)} run directories ({listed(self.directories)})")
        return "removed " + "; ".join(parts)


def remove_run_dir(run: str, removed: Removed) -> None:
    """Remove the directory of run ``run`` if it is ours (a real directory we own); note what was left alone."""
    path = run_dir(run)
    why = _not_own_dir(path)
    if why is None:
        shutil.rmtree(path)  # by file descriptors: never follows a link inside
        removed.directories.append(path)
    elif why != "no such directory":
        removed.refused.append(f"{path}: {why}; left alone")


def destroy(state: RunState, removed: Removed | None = None) -> Removed:
    """Remove everything ``state`` records: processes, namespaces, directory.

    The record is checked first: one that fails is not followed at all.
    """
    check_record(state)
    removed = removed or Removed()
    with uninterrupted():
        found = processes.in_namespaces(state.namespaces)
        recorded = [proc for proc in state.recorded_processes() if proc not in found]
        removed.processes += processes.terminate(found + recorded)
        present = existing_namespaces()
        for name in dict.fromkeys(state.namespaces):  # a record of an older fabric-emu may name one twice
            if name in present:
                remove_namespace(name)
                removed.namespaces.append(name)
        remove_run_dir(state.run, removed)
    return removed


def _left_alone(state: RunState, held: str) -> str:
    """The line that says why cleanup left run ``state`` (in use: ``held``) and how it ends."""
    if state.detached:
        return f"run {state.run} is {held}: left alone; fabric-emu down --run {state.run} takes it down"
    return (f"run {state.run} is {held}, which removes it when it ends: left alone; "
            f"fabric-emu clean --run {state.run} --force removes it now")


def clean(only: str | None = None, force: bool = False) -> Removed:
    """Remove what runs left behind: every run no live process holds (its runner died, or its agents all did),
    run directories without a record; report what is not ours, and the runs in use it left (``force``: removes
    those too).  ``only``: that run alone.

    Each run is removed under its lock, its record read again there: a ``down`` or ``link`` under way
    finishes first.
    """
    if only is not None:
        check_run_name(only)
    removed = Removed()
    with uninterrupted():
        found = scan(only)
        removed.refused += found.refused
        for name in [state.run for state in found.runs] + found.orphans:
            _locked(name, removed, force)
    return removed


def _locked(run: str, removed: Removed, force: bool) -> None:
    """Remove run ``run`` (or its directory without a record) under its lock, as its record is now."""
    try:
        with run_lock(run) as present:
            if not present:
                return  # removed meanwhile
            now = scan(run)
            removed.refused += now.refused
            for state in now.runs:
                held = state.holder()
                if held and not force:
                    removed.left.append(_left_alone(state, held))
                else:
                    destroy(state, removed)
            for name in now.orphans:
                remove_run_dir(name, removed)
    except RunBusy as err:
        removed.refused.append(f"{err}; left alone")
    except FabricError as err:  # a directory or record that is not ours: that run alone is refused
        removed.refused.append(str(err))
