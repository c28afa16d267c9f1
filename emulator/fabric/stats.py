"""A running fabric's counters: every agent's, and the fabric-wide totals."""

from __future__ import annotations

from typing import Any

from emulator.errors import FabricError
from emulator.fabric import runstate
from emulator.fabric.agent_control import query_agent
from emulator.kernel.processes import running


def collect_stats(state: runstate.RunState) -> dict[str, Any]:
    """Every agent's live counters and the fabric-wide ``totals``.

    Totals over some of the agents would be wrong without saying so, so an
    agent that does not answer ends it, in one line that names the agent.
    """
    stats = {}
    for name, pid in state.agents.items():
        try:
            stats[name] = query_agent(runstate.control_socket(state.run, name), "stats")
        except (OSError, ValueError) as err:
            how = "is running" if (proc := state.process(pid)) and running(proc) else "is gone"
            raise FabricError(f"{state.nodes[name]['kind']} {name}'s agent (pid {pid}) does not answer "
                              f"({type(err).__name__}: {err}) and {how}; see {state.directory}/{name}.log, "
                              f"fabric-emu down --run {state.run} removes the run") from None
    return with_totals(state, stats)


def with_totals(state: runstate.RunState, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The agents' counters by kind, and the fabric-wide totals over them (live or final counters alike)."""
    switches = {n: s for n, s in stats.items() if state.nodes[n]["kind"] == "switch"}
    hosts = {n: s for n, s in stats.items() if state.nodes[n]["kind"] == "host"}
    totals = {key: sum(s["totals"][key] for s in switches.values())
              for key in ("drops", "pfc_sent", "pfc_received", "ecn_marked", "rx_frames", "tx_frames")}
    totals["pfc_received"] += sum(sum(h["pfc_received"]) for h in hosts.values())
    totals["host_paused_ns"] = sum(sum(h["paused_ns"]) for h in hosts.values())
    totals["malformed"] = (sum(s["totals"]["malformed"] for s in switches.values())
                           + sum(h["drops"]["malformed"] for h in hosts.values()))
    return {"run": state.run, "fabric": state.fabric, "totals": totals, "switches": switches, "hosts": hosts}
