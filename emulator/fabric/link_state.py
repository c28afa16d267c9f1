"""Switch-to-switch links of a running fabric going down and up, and the routes that follow.

The builder keeps the fabric's switch graph with the run (``graph.json``:
each switch's ports towards other switches, and where each host hangs), so
that routes can be recomputed for any running fabric, custom topologies
included.  Taking a link down pulls the cable (both veth ends down: frames
queued for it are lost, as on a real link) and then converges routing at
once: shortest paths without the link, written to each switch's routes
file and taken by its agent (``routes``).  A link whose loss would leave a
switch without a path to a host is refused.  The links down are recorded
in ``links_down.json``.  On the ib fabric the switches forward by the
subnet manager's tables instead: each agent takes the sweep without the
link (:mod:`emulator.fabric.ib_sweeps`, ``ib-tables``), and what its IB
plane queued for the dead link is lost with it; one link down at a time.

A change holds the run's lock (:func:`emulator.fabric.runstate.run_lock`)
from reading the record to the last agent's answer, and every file is
replaced whole, so the kernel's cables, ``links_down.json`` and the routes
the agents hold agree whatever runs at the same time: two ``link`` commands
once read the same record, one of the two cables pulled went unrecorded,
and an agent read its routes file while the other command rewrote it.  A
change is all or nothing: if an agent does not take its new routes (it
stopped answering, or the run is being taken down), the cable and every
switch's routes are put back; what could not be put back is said, and the
record keeps what the kernel holds.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from emulator.agents.config import RouteTable, dump
from emulator.errors import FabricError, one_line, shown
from emulator.fabric import runstate
from emulator.fabric.agent_control import query_agent
from emulator.fabric.ib_sweeps import NO_LINK_DOWN, sweep_key
from emulator.fabric.plan import SwitchGraph, routes_over
from emulator.kernel.links import set_link_up

GRAPH_FILE = "graph.json"
DOWN_FILE = "links_down.json"
MAX_GRAPH_BYTES = 64 << 20


def save_graph(directory: str, graph: SwitchGraph) -> None:
    runstate.replace_file(os.path.join(directory, GRAPH_FILE), json.dumps({"links": graph.links, "hosts": graph.hosts}))


def load_graph(directory: str) -> SwitchGraph:
    """The run's switch graph, its shape checked (one line if it is not what the builder writes)."""
    data = _read_json(os.path.join(directory, GRAPH_FILE), {"links": {}, "hosts": []})
    links, hosts = (data.get("links"), data.get("hosts")) if isinstance(data, dict) else (None, None)
    if not (isinstance(links, dict) and isinstance(hosts, list)
            and all(isinstance(s, str) and isinstance(ports, list) and all(_strings(p, 2) for p in ports)
                    for s, ports in links.items())
            and all(_strings(h, 4) for h in hosts)):
        raise FabricError(f"{os.path.join(directory, GRAPH_FILE)}: not a switch graph")
    return SwitchGraph({s: [tuple(p) for p in ports] for s, ports in links.items()}, [tuple(h) for h in hosts])


def links_down(directory: str) -> set[frozenset[str]]:
    data = _read_json(os.path.join(directory, DOWN_FILE), [])
    if not isinstance(data, list) or not all(_strings(pair, 2) for pair in data):
        raise FabricError(f"{os.path.join(directory, DOWN_FILE)}: not a list of switch pairs")
    return {frozenset(pair) for pair in data}


def set_link(state: runstate.RunState, a: str, b: str, up: bool) -> str:
    """Take the link between switches ``a`` and ``b`` down (``up`` False) or bring it back; what was done.

    FabricError (one line) if it is refused, or if it failed and was undone (the line says what was put back).
    """
    with runstate.run_lock(state.run) as present, runstate.uninterrupted():
        if not present:
            raise FabricError(f"run {state.run} was taken down meanwhile")
        return _change(state, a, b, up)


def _change(state: runstate.RunState, a: str, b: str, up: bool) -> str:
    """:func:`set_link` under the run's lock: the record read, the cable, the record written, the routes."""
    graph = load_graph(state.directory)
    ends = graph.link(a, b)
    if ends is None:
        raise FabricError(f"{shown(a)} and {shown(b)} are no two linked switches of run {state.run}")
    down = links_down(state.directory)
    pair = frozenset((a, b))
    wanted = down - {pair} if up else down | {pair}
    change = f"link {a}-{b} {'up' if up else 'down'}"
    if wanted == down:
        return f"link {a}-{b} is {'up' if up else 'down'} already"
    if state.fabric == "ib" and len(wanted) > 1:
        raise FabricError(f"link {a}-{b} stays up: the ib fabric's subnet manager was swept for one link down at "
                          f"a time, and {'-'.join(sorted(next(iter(down))))} is down")
    try:
        routes = routes_over(graph.without(wanted))
    except FabricError as err:
        raise FabricError(f"link {a}-{b} stays up: without it the {err}") from None
    cable = [(state.nodes[a]["netns"], ends[0]), (state.nodes[b]["netns"], ends[1])]
    try:
        _set_cable(cable, up)
    except FabricError as err:
        raise FabricError(f"{change} failed, nothing changed: {err}") from None
    _record(state.directory, wanted)  # the kernel's cables, from here on
    refused = _give_routes(state, routes) or _give_ib_tables(state, graph, wanted)
    if refused:
        undone = _undo(state, graph, cable, up, down, refused)
        raise FabricError(f"{change} failed: {'; '.join(refused.values())}; {undone}")
    swept = ", the subnet manager's sweep taken" if state.fabric == "ib" else ""
    return f"{change}: routes of {len(routes)} switches recomputed{swept}"


def _set_cable(cable: list[tuple[str, str]], up: bool) -> None:
    """Both ends of a cable up or down; if the second end fails, the first is put back."""
    done: list[tuple[str, str]] = []
    for netns, ifname in cable:
        try:
            set_link_up(netns, ifname, up)
        except (FabricError, OSError, NetlinkError) as err:
            failed = f"{ifname} in {netns}: {one_line(str(err)) or type(err).__name__}"
            for back in done:
                try:
                    set_link_up(*back, not up)
                except (FabricError, OSError, NetlinkError):
                    failed += f", and {back[1]} could not be put back"
            raise FabricError(failed) from None
        done.append((netns, ifname))


def _record(directory: str, links: set[frozenset[str]]) -> None:
    runstate.replace_file(os.path.join(directory, DOWN_FILE), json.dumps(sorted(sorted(p) for p in links)))


def _give_routes(state: runstate.RunState, routes: dict[str, dict[str, list[str]]]) -> dict[str, str]:
    """Write each switch's routes file and have its agent take it; why, for each switch that did not."""
    refused = {}
    for switch, table in routes.items():
        runstate.replace_file(os.path.join(state.directory, f"{switch}.routes.json"),
                              dump(RouteTable({ip: tuple(ifnames) for ip, ifnames in table.items()})))
        why = _ask(state, switch, "routes", "its new routes")
        if why is not None:
            refused[switch] = why
    return refused


def _give_ib_tables(state: runstate.RunState, graph: SwitchGraph, down: set[frozenset[str]]) -> dict[str, str]:
    """On ib, have each switch's agent take the subnet manager's sweep with the links ``down`` (at most one), what
    it queued for them lost; why, for each switch that did not."""
    if state.fabric != "ib":
        return {}
    pair = sorted(next(iter(down))) if down else None
    key = sweep_key(*pair) if pair else NO_LINK_DOWN
    ends = dict(zip(pair, graph.link(*pair) or ())) if pair else {}
    refused = {}
    for switch in graph.links:
        request = " ".join(["ib-tables", key] + ([ends[switch]] if switch in ends else []))
        why = _ask(state, switch, request, "its IB tables")
        if why is not None:
            refused[switch] = why
    return refused


def _ask(state: runstate.RunState, switch: str, request: str, what: str) -> str | None:
    """Send ``request`` to ``switch``'s agent; why it did not take ``what``, or None if it did."""
    try:
        reply = query_agent(runstate.control_socket(state.run, switch), request)
    except (OSError, ValueError) as err:
        return f"{switch}'s agent does not answer ({one_line(str(err)) or type(err).__name__})"
    if "error" in reply:
        return f"{switch} refused {what}: {one_line(str(reply['error']))}"
    return None


def _undo(state: runstate.RunState, graph: SwitchGraph, cable: list[tuple[str, str]], up: bool,
          down: set[frozenset[str]], refused: dict[str, str]) -> str:
    """Put the cable back and every switch's routes as they were (``refused``: the switches that did not take the
    change); what was done, for the end of the line."""
    try:
        _set_cable(cable, not up)
    except FabricError as err:
        return (f"the cable could not be put back ({err}): links_down.json records it {'up' if up else 'down'}; "
                f"fabric-emu down --run {state.run} removes the run")
    _record(state.directory, down)
    again = _give_routes(state, routes_over(graph.without(down))) or _give_ib_tables(state, graph, down)
    kept = sorted(set(again) - set(refused))  # took the change, then not its undo
    if kept:
        return f"the cable was put back, but {', '.join(kept)} kept the new routes: {again[kept[0]]}"
    return "the cable and the routes were put back"


def _strings(value: Any, count: int) -> bool:
    return isinstance(value, list) and len(value) == count and all(isinstance(v, str) for v in value)


def _read_json(path: str, missing: Any) -> Any:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_GRAPH_BYTES + 1)
    except FileNotFoundError:
        return missing
    if len(data) > MAX_GRAPH_BYTES:
        raise FabricError(f"{path}: over {MAX_GRAPH_BYTES >> 20} MiB")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise FabricError(f"{path}: not JSON") from None
