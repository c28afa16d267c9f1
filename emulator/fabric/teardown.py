"""The end of a run: stop its captures and agents, keep its telemetry, remove it.

Used by :meth:`emulator.fabric.builder.Fabric.stop` for a run this process
built, and by ``fabric-emu down`` for a run another process left up.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from typing import BinaryIO

from emulator.errors import FabricError, printable
from emulator.fabric import runstate
from emulator.fabric.capture import stop_detached
from emulator.fabric.stats import with_totals
from emulator.kernel.processes import terminate
from emulator.safefiles import Outputs

STOP_GRACE_S = 3.0  # for the agent processes to write their counters and exit, and per node:
STOP_GRACE_PER_NODE_S = 0.01


@runstate.uninterrupted()
def finish_run(state: runstate.RunState, children: dict[str, subprocess.Popen] | None = None) -> runstate.Removed:
    """Stop a run's captures and agents, keep its telemetry, remove the run.

    ``children`` are the agents' Popen objects when this process started
    them (so they are reaped); for a run started by ``fabric-emu up`` the
    agents are waited for by their recorded identity (pid and start time).
    Signals that arrive meanwhile wait until the run is gone.  The run is
    removed even if its captures cannot be converted or its telemetry not
    written; that error is raised afterwards.

    It holds the run's lock (``fabric-emu down`` takes it first), so a
    ``link`` or ``fault`` under way finishes before the agents stop.  If
    another command keeps the lock past its wait (say one stopped with
    Ctrl-Z), the teardown goes on without it: a run must never outlive its
    owner because of a stranger.  If the run is gone when the lock comes (``down --force`` or ``clean
    --force`` took it from its owner), its captures and telemetry were kept then: writing them again, with
    no agent left to count, would replace them with empty files.
    """
    with contextlib.ExitStack() as lock:
        try:
            present = lock.enter_context(runstate.run_lock(state.run))
        except FabricError:  # busy past its wait, or a directory that is not ours: go on without the lock
            present = True
        failure: FabricError | None = None
        captures = {ifname: proc for ifname, pid in state.captures.items() if (proc := state.process(pid))}
        if present and captures and state.capture_dir:
            try:
                stop_detached(captures, state.capture_dir)
            except FabricError as err:
                failure = err
        try:
            _stop_agents(state, children or {})
            if present and state.telemetry_dir:
                write_telemetry(state, state.telemetry_dir)
        finally:
            removed = runstate.destroy(state)
    if failure:
        raise failure
    return removed


def _stop_agents(state: runstate.RunState, children: dict[str, subprocess.Popen]) -> None:
    """SIGTERM every agent process: each stops its agents (they write their final counters) and exits.

    What has not exited within STOP_GRACE_S (and STOP_GRACE_PER_NODE_S for each node) is killed; our own
    children are then reaped through their Popen objects.
    """
    procs = [proc for pid in dict.fromkeys(state.agents.values()) if (proc := state.process(pid)) is not None]
    terminate(procs, grace=STOP_GRACE_S + STOP_GRACE_PER_NODE_S * len(state.agents))
    for child in {id(child): child for child in children.values()}.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1)


TELEMETRY_FILES = ("stats.json", "occupancy.csv", "rates.csv")  # what write_telemetry puts in its directory


def write_telemetry(state: runstate.RunState, directory: str) -> None:
    """The agents' final counters as stats.json (with totals), every switch's
    queue occupancy series merged into occupancy.csv, and every RNIC's DCQCN
    rate trace into rates.csv (when the fabric ran DCQCN).

    Written as root into a directory the user chose (``up --telemetry``),
    where whoever may write there could have put a link at one of these
    names: each file goes to a fresh temporary file, opened without
    following a link, and all are renamed over their names once complete
    (:class:`emulator.safefiles.Outputs`); a link there is replaced, its
    target left alone.  A directory that cannot be written is one line.
    """
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        raise FabricError(f"telemetry not written: cannot create {printable(directory)}: "
                          f"{err.strerror or err}") from None
    final = {}
    for name in state.agents:
        try:
            with open(os.path.join(state.directory, f"{name}.stats.json")) as f:
                final[name] = json.load(f)
        except (OSError, ValueError):
            continue  # the agent died; its death was reported
    stats = json.dumps(with_totals(state, final), indent=1).encode()
    with Outputs(directory) as outputs:
        outputs.write("stats.json", lambda f: f.write(stats))
        _merge_series(state, outputs, "occupancy.csv", always=True)
        _merge_series(state, outputs, "rates.csv", always=False)


def _merge_series(state: runstate.RunState, outputs: Outputs, name: str, always: bool) -> None:
    """Every agent's ``<node>.<name>`` (CSV, one header each) into ``name`` of ``outputs``; written ``always``,
    or only when some agent wrote one (the rate trace exists only with congestion control)."""
    paths = [path for node in state.agents if os.path.exists(path := os.path.join(state.directory, f"{node}.{name}"))]
    if not paths and not always:
        return

    def merge(out: BinaryIO) -> None:
        header_written = False
        for path in paths:
            with open(path, "rb") as f:
                header = f.readline()
                if not header_written:
                    out.write(header)
                    header_written = True
                shutil.copyfileobj(f, out)

    outputs.write(name, merge)
