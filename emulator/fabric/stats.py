"""A running fabric's counters: every agent's, and the fabric-wide totals."""

from __future__ import annotations

from typing import Any

from emulator.errors import FabricError
from emulator.fabric import runstate
from emulator.fabric.agent_control import query_agent
from emulator.fabric.losses import account
from emulator.fabric.plan import FabricPlan, uplinks
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


def uplink_bytes(plan: FabricPlan, switches: dict[str, Any]) -> dict[str, int]:
    """Bytes each uplink (:func:`~emulator.fabric.plan.uplinks`) sent, from the switches' stats, by interface:
    through the MMU, all priorities, or on ib through the IB plane."""
    out = {}
    for _, node, _, port in uplinks(plan):
        counters = switches.get(node.name, {}).get("ports", {}).get(port.ifname)
        if counters is not None:
            ib = counters.get("ib")
            out[port.ifname] = ib["forwarded_bytes"] if ib else sum(p["tx_bytes"] for p in counters["priorities"])
    return out


def with_totals(state: runstate.RunState, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The agents' counters by kind, and the fabric-wide totals over them (live or final counters alike)."""
    switches = {n: s for n, s in stats.items() if state.nodes[n]["kind"] == "switch"}
    hosts = {n: s for n, s in stats.items() if state.nodes[n]["kind"] == "host"}
    totals = {key: sum(s["totals"][key] for s in switches.values())
              for key in ("drops", "pfc_sent", "pfc_received", "ecn_marked", "rx_frames", "tx_frames",
                          "pfcwd_storms", "pfcwd_restorations", "pfcwd_drops", "trimmed")}
    totals["pfc_received"] += sum(sum(h["pfc_received"]) for h in hosts.values())
    totals["host_paused_ns"] = sum(sum(h["paused_ns"]) for h in hosts.values())
    # PFC frames the hosts' NICs sent (the stall and slow-receiver faults): their pauses explain a slow collective
    totals["host_pfc_sent"] = sum(h["fault"]["pfc_sent"] for h in hosts.values() if "fault" in h)
    # IB: times a VL had a packet and no credit for it, at switches and RNICs (the IB fabric's back-pressure)
    totals["ib_credit_stalls"] = sum(s["totals"].get("ib_credit_stalls", 0) for s in switches.values()) + sum(
        entry["stalls"] for h in hosts.values() if "rnic" in h for entry in h["rnic"]["link"].get("credits", ()))
    for key in ("cnps_sent", "cnps_received", "paced_waits"):  # DCQCN: notifications, and QPs held to their rate
        totals[key] = sum(h["rnic"][key] for h in hosts.values() if "rnic" in h)
    totals["malformed"] = (sum(s["totals"]["malformed"] for s in switches.values())
                           + sum(h["drops"]["malformed"] for h in hosts.values()))
    losses = account(switches, hosts)
    totals["lost_lossless_unexplained"] = losses["lossless_unexplained"]
    return {"run": state.run, "fabric": state.fabric, "totals": totals, "fidelity": fidelity(stats, losses),
            "losses": losses, "switches": switches, "hosts": hosts}


def explained_by_faults(stats: dict[str, Any], faults: str) -> dict[str, Any]:
    """``stats`` (of :func:`with_totals`) with its losses and verdict judged again, ``faults`` explaining any loss.

    For a caller that injected faults itself (an experiment's ``faults``):
    a fault that left no trace in the counters still explains a loss.
    """
    agents = {**stats["switches"], **stats["hosts"]}
    losses = account(stats["switches"], stats["hosts"], fault=faults)
    totals = {**stats["totals"], "lost_lossless_unexplained": losses["lossless_unexplained"]}
    return {**stats, "totals": totals, "losses": losses, "fidelity": fidelity(agents, losses)}


def fidelity(stats: dict[str, dict[str, Any]], losses: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's verdict: faithful while every agent kept up and no lossless-class frame was lost unexplained;
    the worst figures, and who did not keep up or lost what where (``losses`` of :func:`account`)."""
    figures = [s["fidelity"] for s in stats.values() if "fidelity" in s]
    unfaithful = {name: list(s["fidelity"]["reasons"]) for name, s in stats.items()
                  if "fidelity" in s and not s["fidelity"]["faithful"]}
    for name, reasons in (losses["reasons"] if losses else {}).items():
        unfaithful.setdefault(name, []).extend(reasons)

    def worst(part: str, key: str) -> Any:
        values = [f[part][key] for f in figures if f.get(part) and f[part][key] is not None]
        return max(values) if values else None

    return {
        "faithful": all(f["faithful"] for f in figures) and not unfaithful,
        "unfaithful": dict(sorted(unfaithful.items())),
        "lost_lossless_unexplained": losses["lossless_unexplained"] if losses else 0,
        "stall_share": worst("wire", "stall_share"),
        "longest_stall_ns": worst("wire", "longest_stall_ns"),
        "lag_p99_ns": worst("lag", "p99_ns"),
        "timers_p99_ns": worst("timers", "p99_ns"),
        "starts_p99_ns": worst("starts", "p99_ns"),
        "timeouts_p99_ns": worst("timeouts", "p99_ns"),
    }
