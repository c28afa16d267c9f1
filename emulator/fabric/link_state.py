"""Switch-to-switch links of a running fabric going down and up, and the routes that follow.

The builder keeps the fabric's switch graph with the run (``graph.json``:
each switch's ports towards other switches, and where each host hangs), so
that routes can be recomputed for any running fabric, custom topologies
included.  Taking a link down pulls the cable (both veth ends down: frames
queued for it are lost, as on a real link) and then converges routing at
once: shortest paths without the link, written to each switch's routes
file and taken by its agent (``routes``).  A link whose loss would leave a
switch without a path to a host is refused.  The links down are recorded
in ``links_down.json``.  Ethernet fabrics only: the ib fabric routes by its
subnet manager's forwarding tables.
"""

from __future__ import annotations

import json
import os
from typing import Any

from emulator.agents.config import RouteTable, dump
from emulator.errors import FabricError, shown
from emulator.fabric import runstate
from emulator.fabric.agent_control import query_agent
from emulator.fabric.plan import SwitchGraph, routes_over
from emulator.kernel.links import set_link_up

GRAPH_FILE = "graph.json"
DOWN_FILE = "links_down.json"
MAX_GRAPH_BYTES = 64 << 20


def save_graph(directory: str, graph: SwitchGraph) -> None:
    with runstate.create_file(os.path.join(directory, GRAPH_FILE)) as f:
        json.dump({"links": graph.links, "hosts": graph.hosts}, f)


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
    """Take the link between switches ``a`` and ``b`` down (``up`` False) or bring it back; what was done."""
    if state.fabric == "ib":
        raise FabricError("links go down on the Ethernet fabrics only: the ib fabric routes by its subnet "
                          "manager's forwarding tables")
    graph = load_graph(state.directory)
    ends = graph.link(a, b)
    if ends is None:
        raise FabricError(f"{shown(a)} and {shown(b)} are no two linked switches of run {state.run}")
    down = links_down(state.directory)
    pair = frozenset((a, b))
    wanted = down - {pair} if up else down | {pair}
    if wanted == down:
        return f"link {a}-{b} is {'up' if up else 'down'} already"
    try:
        routes = routes_over(graph.without(wanted))
    except FabricError as err:
        raise FabricError(f"link {a}-{b} stays up: without it the {err}") from None
    for switch, ifname in ((a, ends[0]), (b, ends[1])):
        set_link_up(state.nodes[switch]["netns"], ifname, up)
    for switch, table in routes.items():
        with runstate.create_file(os.path.join(state.directory, f"{switch}.routes.json")) as f:
            f.write(dump(RouteTable({ip: tuple(ifnames) for ip, ifnames in table.items()})))
        reply = query_agent(runstate.control_socket(state.run, switch), "routes")
        if "error" in reply:
            raise FabricError(f"{switch} refused its new routes: {reply['error']}")
    with runstate.create_file(os.path.join(state.directory, DOWN_FILE)) as f:
        json.dump(sorted(sorted(p) for p in wanted), f)
    return f"link {a}-{b} {'up' if up else 'down'}: routes of {len(routes)} switches recomputed"


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
