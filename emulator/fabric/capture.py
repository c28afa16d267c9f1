"""Packet captures on link ends: one tcpdump per veth end, one pcapng each.

A frame is captured on both ends of its link, so a capture on ``s1-eth1``
and one on ``s1-eth2`` show what the switch did to it (TTL, MACs).  tcpdump
runs inside the node's namespace, so ``fabric-emu clean`` kills it with the
run after a crash; a normal :meth:`Captures.stop` ends it with SIGINT so it
flushes, then converts its pcap to pcapng.

Options, as checked on Debian 12 (tcpdump 4.99.3, libpcap 1.10.3):

- ``--time-stamp-precision=nano`` works on veths (AF_PACKET gives ns time
  stamps); if a tcpdump refuses it we retry that port with ``micro``, and
  :attr:`Captures.precision` says which each port got.
- ``-Z root``: without it tcpdump runs as user ``tcpdump`` once the
  capture is open.  Debian's build keeps CAP_DAC_OVERRIDE for ``-w``, so
  it still wrote into a mode-700 root directory here (the file owned by
  ``tcpdump``), but that is a build detail we do not rely on.  With it
  tcpdump stays root (the test checks its Uid) and the files are root's.
- ``--immediate-mode`` is required: without it libpcap's TPACKET_V3 ring
  hands packets over only when a block fills or its ~1 s timer expires,
  and on SIGINT tcpdump drops the unfinished block.  A 1-second ping run
  then ended with "10 packets received by filter, 0 packets captured" and
  empty files on every port.
- ``-U`` writes each packet as it arrives, so a capture cut short by
  SIGKILL still holds everything up to its last packet.
- ``-B 16384``: a 16 MiB ring per capture.  tcpdump runs below the agents
  (which are real-time), so while a 100 Mbit/s RDMA transfer keeps both
  cores busy it falls behind; with libpcap's default 2 MiB ring three
  quarters of a 64 MiB WRITE's frames were lost to the capture.  What
  tcpdump still drops is counted (:attr:`Captures.dropped`) and reported.

tcpdump writes pcap; ``editcap -F pcapng`` converts it (pcapng records the
time-stamp resolution per interface, and names the capture format we ship).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from typing import TYPE_CHECKING, BinaryIO

from emulator.errors import FabricError, one_line, printable
from emulator.kernel.processes import ProcessId, running, send_signal
from emulator.fabric.runstate import create_file
from emulator.safefiles import Outputs, open_inside

if TYPE_CHECKING:
    from emulator.fabric.node import Node

START_TIMEOUT = 10.0  # seconds for one tcpdump to say "listening on"
STOP_TIMEOUT = 10.0  # seconds for one tcpdump to exit after SIGINT
RING_KIB = 16384  # tcpdump -B: the capture ring per link end
CAPTURE_SUFFIXES = (".pcap", ".pcapng")  # a link end's capture while tcpdump writes it, and once converted


class Captures:
    """tcpdump on each ``(node, ifname)``, writing ``<directory>/<ifname>.pcapng``.

    Use ``start()`` then ``stop()`` (or ``with Captures(...) as caps:``);
    ``stop()`` returns the pcapng paths and is safe to call again or after a
    failed ``start()``.
    """

    def __init__(self, ports: list[tuple[Node, str]], directory: str, log_dir: str, snaplen: int = 0) -> None:
        self.ports = list(ports)
        self.directory = os.path.abspath(directory)
        self.log_dir = log_dir
        self.snaplen = snaplen
        self.precision: dict[str, str] = {}  # ifname -> "nano" or "micro"
        self.paths: list[str] = []
        self.dropped: dict[str, int] = {}  # ifname -> frames tcpdump's ring lost
        self._procs: dict[str, subprocess.Popen] = {}

    def __enter__(self) -> "Captures":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pcap(self, ifname: str) -> str:
        return os.path.join(self.directory, f"{ifname}.pcap")

    def _log(self, ifname: str) -> str:
        return os.path.join(self.log_dir, f"tcpdump-{ifname}.log")

    @property
    def pids(self) -> dict[str, int]:
        """ifname -> tcpdump pid, for a run that outlives this process."""
        return {ifname: proc.pid for ifname, proc in self._procs.items()}

    def _launch(self, node: Node, ifname: str, precision: str) -> None:
        # A session of its own: a Ctrl-C at the terminal must not end the
        # capture before the experiment's teardown has been recorded.  Its
        # messages go to a file, not a pipe, so it can outlive this process
        # (``fabric-emu up --capture``) without dying of SIGPIPE at exit.
        try:
            with create_file(self._log(ifname), binary=True) as log:
                proc = node.popen(
                    ["tcpdump", "-i", ifname, "-w", self._pcap(ifname), "-U", "--immediate-mode", "-n", "-B", str(RING_KIB),
                     "-s", str(self.snaplen), f"--time-stamp-precision={precision}", "-Z", "root"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                    start_new_session=True,
                )
        except FileNotFoundError:
            raise FabricError("tcpdump is not installed (apt-get install tcpdump)") from None
        self._procs[ifname] = proc
        self.precision[ifname] = precision

    def start(self) -> None:
        """Start every tcpdump; return once each one is capturing.

        All are launched first so that their start-up overlaps; then each is
        waited for in turn.  On failure everything started is killed.
        """
        os.makedirs(self.directory, exist_ok=True)
        try:
            for node, ifname in self.ports:
                self._launch(node, ifname, "nano")
            for node, ifname in self.ports:
                ok, message = _wait_listening(self._procs[ifname], self._log(ifname))
                if not ok and "time stamp precision" in message:
                    self._launch(node, ifname, "micro")
                    ok, message = _wait_listening(self._procs[ifname], self._log(ifname))
                if not ok:
                    raise FabricError(f"tcpdump on {node.name} {ifname} did not start: {message or 'no output'}")
        except BaseException:
            self._kill()
            raise

    def _kill(self) -> None:
        """After a failed start: end every tcpdump now, keep no files."""
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.kill()
        for ifname, proc in self._procs.items():
            proc.wait()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._pcap(ifname))
        self._procs.clear()

    def stop(self) -> list[str]:
        """SIGINT every tcpdump, wait for it, convert to pcapng; the pcapng paths."""
        if not self._procs:
            return self.paths
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self._procs.values():
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()  # -U wrote every packet already; the file stays readable
                proc.wait()
        ifnames, self._procs = list(self._procs), {}
        self.dropped = {ifname: kernel_drops(self._log(ifname)) for ifname in ifnames}
        self.paths = convert_to_pcapng([self._pcap(ifname) for ifname in ifnames])
        return self.paths


def stop_detached(tcpdumps: dict[str, ProcessId], directory: str) -> list[str]:
    """Stop the tcpdumps of a run started by another process; the pcapng paths.

    Same as :meth:`Captures.stop`, for ``fabric-emu down`` after ``up``:
    the tcpdumps are not our children, so they are known by their recorded
    identity (a reused pid is never signalled) and we wait for them to exit.
    """
    for proc in tcpdumps.values():
        send_signal(proc, signal.SIGINT)
    deadline = time.monotonic() + STOP_TIMEOUT
    while any(map(running, tcpdumps.values())):
        if time.monotonic() > deadline:
            for proc in tcpdumps.values():
                send_signal(proc, signal.SIGKILL)
            break
        time.sleep(0.02)
    return convert_to_pcapng([os.path.join(directory, f"{ifname}.pcap") for ifname in tcpdumps])


def convert_to_pcapng(pcaps: list[str]) -> list[str]:
    """``editcap -F pcapng`` each file, deleting the pcap; the pcapng paths.

    A pcap already converted (by a teardown cut short) is taken as it is.
    editcap runs in a session of its own: a Ctrl-C at the terminal during
    a teardown must not cut the conversion short.  It reads the pcap and
    writes the pcapng through descriptors opened here without following a
    link (:mod:`emulator.safefiles`): this runs as root in a directory the
    user chose, where a link put at a capture's name during the run must
    neither be read into the capture nor written through.
    """
    paths, failures = [], []
    for pcap in pcaps:
        pcapng = pcap + "ng"
        if not os.path.lexists(pcap) and os.path.lexists(pcapng):
            paths.append(pcapng)
            continue
        directory, name = os.path.split(pcap)
        try:
            source = open_inside(directory, name)
            if source is None:
                raise FabricError(f"{printable(pcap)}: missing")
            with source, Outputs(directory) as outputs:
                outputs.write(name + "ng", lambda out: _editcap(pcap, source, out))
        except FabricError as err:
            failures.append(str(err))
            continue
        os.unlink(pcap)
        paths.append(pcapng)
    if failures:
        raise FabricError("editcap could not convert " + "; ".join(failures))
    return paths


def _editcap(pcap: str, source: BinaryIO, out: BinaryIO) -> None:
    try:
        done = subprocess.run(["editcap", "-F", "pcapng", "-", "-"], stdin=source, stdout=out, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    except FileNotFoundError:  # not "cannot write X.pcapng": the file was never the trouble
        raise FabricError("editcap is not installed (apt-get install wireshark-common)") from None
    if done.returncode != 0:
        raise FabricError(f"{printable(pcap)}: {one_line(done.stderr)}")


def kernel_drops(log: str) -> int:
    """Frames the kernel could not hand to a tcpdump, from its exit summary."""
    try:
        with open(log, "rb") as f:
            found = re.search(rb"(\d+) packets? dropped by kernel", f.read())
    except FileNotFoundError:
        return 0
    return int(found.group(1)) if found else 0


def _wait_listening(proc: subprocess.Popen, log: str, timeout: float = START_TIMEOUT) -> tuple[bool, str]:
    """Watch tcpdump's log until "listening on" (True) or exit/timeout (False).

    tcpdump prints that line once the capture is open and the output file
    written, so frames sent after it are in the capture.  Returns what it
    printed, for the error message.
    """
    deadline = time.monotonic() + timeout
    while True:
        with open(log, "rb") as f:
            text = f.read()
        if b"listening on" in text:
            return True, _tail(text)
        if proc.poll() is not None:
            with open(log, "rb") as f:
                return False, f"exit code {proc.returncode}: {_tail(f.read())}"
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return False, f"no 'listening on' within {timeout:.0f} s; {_tail(text)}"
        time.sleep(0.005)


def _tail(text: bytes) -> str:
    return " / ".join(line.strip() for line in text.decode(errors="replace").splitlines() if line.strip())


def _tshark(args: list[str]) -> str:
    done = subprocess.run(["tshark", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise FabricError(f"tshark {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def malformed_count(path: str) -> int:
    """How many frames of ``path`` Wireshark's dissectors call malformed."""
    return sum("Malformed" in line for line in _tshark(["-r", path, "-T", "fields", "-e", "_ws.col.Info"]).splitlines())


def expert_errors(path: str) -> str:
    """Wireshark's expert-info summary of ``path`` (``tshark -q -z expert``)."""
    return _tshark(["-r", path, "-q", "-z", "expert"])
