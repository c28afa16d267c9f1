"""The end of a run: stop its captures and agents, keep its telemetry, remove it.

Used by :meth:`emulator.fabric.builder.Fabric.stop` for a run this process
built, and by ``fabric-emu down`` for a run another process left up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

from emulator.errors import FabricError
from emulator.fabric import runstate
from emulator.fabric.agent_control import query_agent
from emulator.fabric.capture import stop_detached
from emulator.fabric.stats import with_totals
from emulator.kernel.processes import ProcessId, running


@runstate.uninterrupted()
def finish_run(state: runstate.RunState, children: dict[str, subprocess.Popen] | None = None) -> runstate.Removed:
    """Stop a run's captures and agents, keep its telemetry, remove the run.

    ``children`` are the agents' Popen objects when this process started
    them (so they are reaped); for a run started by ``fabric-emu up`` the
    agents are waited for by their recorded identity (pid and start time).
    Signals that arrive meanwhile wait until the run is gone.  The run is
    removed even if its captures cannot be converted or its telemetry not
    written; that error is raised afterwards.
    """
    failure: FabricError | None = None
    captures = {ifname: proc for ifname, pid in state.captures.items() if (proc := state.process(pid))}
    if captures and state.capture_dir:
        try:
            stop_detached(captures, state.capture_dir)
        except FabricError as err:
            failure = err
    try:
        _stop_agents(state, children or {})
        if state.telemetry_dir:
            write_telemetry(state, state.telemetry_dir)
    finally:
        removed = runstate.destroy(state)
    if failure:
        raise failure
    return removed


def _stop_agents(state: runstate.RunState, children: dict[str, subprocess.Popen]) -> None:
    """Ask every agent to stop (they write their final counters) and wait up to 3 s for those that heard."""
    stopping = []
    for name in state.agents:
        try:
            query_agent(runstate.control_socket(state.run, name), "stop", timeout=0.5)
            stopping.append(name)
        except (OSError, ValueError):
            pass  # a dead, stuck or still starting agent: destroy() kills it
    deadline = time.monotonic() + 3
    for name in {state.agents[name]: name for name in stopping}.values():  # one node per process
        child, recorded = children.get(name), state.process(state.agents[name])
        while time.monotonic() < deadline and not _ended(child, recorded):
            time.sleep(0.01)


def _ended(child: subprocess.Popen | None, recorded: ProcessId | None) -> bool:
    """Whether an agent exited: our child by its Popen, another's by its recorded identity."""
    if child is not None:
        return child.poll() is not None
    return recorded is None or not running(recorded)


def write_telemetry(state: runstate.RunState, directory: str) -> None:
    """The agents' final counters as stats.json (with totals), and every
    switch's queue occupancy series merged into occupancy.csv."""
    os.makedirs(directory, exist_ok=True)
    final = {}
    for name in state.agents:
        try:
            with open(os.path.join(state.directory, f"{name}.stats.json")) as f:
                final[name] = json.load(f)
        except (OSError, ValueError):
            continue  # the agent died; its death was reported
    with open(os.path.join(directory, "stats.json"), "w") as f:
        json.dump(with_totals(state, final), f, indent=1)
    with open(os.path.join(directory, "occupancy.csv"), "w") as out:
        header_written = False
        for name in state.agents:
            path = os.path.join(state.directory, f"{name}.occupancy.csv")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                header = f.readline()
                if not header_written:
                    out.write(header)
                    header_written = True
                shutil.copyfileobj(f, out)
