"""Every place a running fabric lost frames, from the agents' counters, and which losses a lossless run cannot have.

A lossless class loses no frame by design, so a loss in it is a defect of
the model or of the machine under it, unless something the user asked for
explains it.  The places, from the agents' stats (docs/results.md,
"Losses"):

- a switch port's queues, per priority: ``headroom`` and ``threshold``
  (the MMU), ``pfcwd`` (the PFC watchdog drops a stormed queue's frames),
  ``injected`` (the link's ``loss``/``drop`` options);
- a switch port's socket: frames the kernel dropped because the agent's
  AF_PACKET receive buffer was full (``rx_kernel_drops``), and frames it
  refused to send (``tx_errors``, a link that is down);
- a switch port's refusals of bad frames (malformed, no route, TTL, MTU):
  a router drops those by design, so they are shown but never judged;
- every interface's kernel, hosts' and switches': the tc tree (per
  priority: a host's pause gate, its queue and its HTB class; and what no
  class took) and the veth (``rx_dropped``, ``tx_dropped``);
- a host's IPv4 receive (/proc/net/snmp): a header that fails (a
  checksum a switch got wrong), an address not its own, no room;
- a host's sockets: UDP receive errors (a full receive buffer, no memory,
  a bad checksum: /proc/net/snmp ``RcvbufErrors``, ``MemErrors``,
  ``InCsumErrors``), the RNIC's AF_PACKET receive buffer, the frames the
  kernel refused the RNIC for good (``send_errors``: its link was down),
  and the slow-receiver fault's NIC buffer.

A veth, IPv4, a socket and the part of tc no class took do not know a frame's
priority; on a fabric with a lossless class their losses count as the
lossless class's (the conservative reading).  Not judged, though shown
in the node's ``kernel`` counters: UDP's ``InErrors`` (it also counts
every RoCE frame the RNIC's sink socket filters away by design, see
crates/fabric-agents/src/nic.rs), UDP send errors (``SndbufErrors``) and
IPv4's ``OutDiscards`` (the sender was told; each is the sending side of
a tc drop, counted at tc), and ``OutNoRoutes`` (nothing was sent).

What explains a loss: a fault (a host NIC that stalled or slowed and
paused its port, a link taken down, or the caller's own: an experiment's
``faults``), the PFC watchdog's drops and a link's configured loss (both
asked for), and a switch whose ``--switch`` headroom or buffer is below the
defaults its links derive.
"""

from __future__ import annotations

from typing import Any

# The loss places of a switch port's queue that the MMU counts per priority.
QUEUE_CAUSES = ("headroom", "threshold", "pfcwd", "injected")
REFUSED = ("malformed", "no_route", "ttl", "mtu")  # bad frames a router drops: shown, never judged
# A place's kind, for the totals: where in the fabric the frame went.
KINDS = ("switch", "tc", "veth", "ip", "socket", "nic")


def _entry(node: str, kind: str, place: str, count: int, priority: int | None, lossless: frozenset[int],
           explained: str | None = None, judged: bool = True) -> dict[str, Any]:
    """One place's count and class: ``lossless`` or ``lossy`` by its priority; ``unknown`` without one (judged as
    lossless when the fabric has a lossless class); ``refused`` when not ``judged``."""
    if not judged:
        klass = "refused"
    elif priority is None:
        klass = "unknown" if lossless else "lossy"
    else:
        klass = "lossless" if priority in lossless else "lossy"
    return {"node": node, "kind": kind, "place": place, "count": count, "priority": priority, "class": klass,
            "explained": explained}


def _kernel(node: str, kernel: dict[str, Any], lossless: frozenset[int], host: bool) -> list[dict[str, Any]]:
    """The entries of one node's kernel counters (:class:`emulator.kernel.drop_counters.NamespaceDrops`).

    A switch's IPv4 and UDP are not on the frames' way (its agent forwards
    them from AF_PACKET; the kernel's own copy of a routed frame is
    discarded as not addressed to it), so only a host's count.
    """
    if "error" in kernel:
        return [{"node": node, "kind": "tc", "place": f"kernel counters unread ({kernel['error']})", "count": None,
                 "priority": None, "class": "unaccounted", "explained": None}]
    entries = []
    for ifname, counters in sorted(kernel["interfaces"].items()):
        entries.append(_entry(node, "veth", f"{ifname} receive (rx_dropped)", counters["rx_dropped"], None, lossless))
        entries.append(_entry(node, "veth", f"{ifname} send (tx_dropped)", counters["tx_dropped"], None, lossless))
        where = "pause gate" if host else "tc queue"
        for priority, count in enumerate(counters["tc"]["by_priority"]):
            entries.append(_entry(node, "tc", f"{ifname} {where} of priority {priority}", count, priority, lossless))
        entries.append(_entry(node, "tc", f"{ifname} tc, no class", counters["tc"]["unattributed"], None, lossless))
    if not host:
        return entries
    ip = kernel["ip"]
    entries.append(_entry(node, "ip", "IPv4 receive (bad header, not our address, no room)",
                          ip["in_hdr_errors"] + ip["in_addr_errors"] + ip["in_discards"], None, lossless))
    udp = kernel["udp"]
    entries.append(_entry(node, "socket", "UDP receive (buffer full, no memory, bad checksum)",
                          udp["rcvbuf_errors"] + udp["mem_errors"] + udp["csum_errors"], None, lossless))
    return entries


def switch_losses(name: str, stats: dict[str, Any], lossless: frozenset[int]) -> list[dict[str, Any]]:
    """A switch's loss places."""
    configured = "the switch's buffer, set below its default by --switch" if stats.get("buffer_below_default") else None
    entries = []
    for ifname, port in sorted(stats["ports"].items()):
        link_down = "the link was down" if port["link_errors"] else None
        for priority, queue in enumerate(port["priorities"]):
            for cause in QUEUE_CAUSES:
                explained = {"pfcwd": "the PFC watchdog (--switch pfcwd)", "injected": "the link's configured loss"}.get(
                    cause, configured)
                entries.append(_entry(name, "switch", f"{ifname} priority {priority} {cause}", queue["drops"][cause],
                                      priority, lossless, explained))
        entries.append(_entry(name, "switch", f"{ifname} agent socket full (rx_kernel_drops)", port["rx_kernel_drops"],
                              None, lossless))
        entries.append(_entry(name, "switch", f"{ifname} send refused (tx_errors)", port["tx_errors"], None, lossless,
                              link_down))
        for cause in REFUSED:
            entries.append(_entry(name, "switch", f"{ifname} {cause}", port["rx_drops"][cause], None, lossless,
                                  judged=False))
    if "kernel" in stats:
        entries += _kernel(name, stats["kernel"], lossless, host=False)
    return entries


def host_losses(name: str, stats: dict[str, Any], lossless: frozenset[int]) -> list[dict[str, Any]]:
    """A host's loss places."""
    entries = []
    if "rnic" in stats:
        rnic = stats["rnic"]
        entries.append(_entry(name, "nic", "RNIC socket full (rx_kernel_drops)", rnic["rx_kernel_drops"], None,
                              lossless))
        entries.append(_entry(name, "nic", "RNIC send refused (send_errors)", rnic["send_errors"], None, lossless,
                              "the link was down" if rnic["send_errors"] else None))
        entries.append(_entry(name, "nic", "slow receiver's NIC buffer", rnic["rx_buffer_drops"], None, lossless,
                              "the slow-receiver fault"))
    if "kernel" in stats:
        entries += _kernel(name, stats["kernel"], lossless, host=True)
    return entries


def fault_evidence(switches: dict[str, dict[str, Any]], hosts: dict[str, dict[str, Any]]) -> str | None:
    """What the counters say was faulted during the run (a host NIC that paused its port, a link down), or None."""
    found = [f"{name}'s NIC ({'stalled' if h['fault']['stalled'] else 'paused its port'})"
             for name, h in sorted(hosts.items())
             if "fault" in h and (h["fault"]["pfc_sent"] or h["fault"]["stalled"] or h["fault"]["slow"])]
    found += [f"{name}:{ifname} (link down)" for name, s in sorted(switches.items())
              for ifname, port in sorted(s["ports"].items()) if port["link_errors"]]
    return "a fault: " + ", ".join(found) if found else None


def account(switches: dict[str, dict[str, Any]], hosts: dict[str, dict[str, Any]],
            fault: str | None = None) -> dict[str, Any]:
    """Every place that lost frames, the totals by kind, and the unexplained lossless-class losses.

    ``fault`` explains every loss (a caller's own knowledge: an experiment's
    faults); without it, the counters' own evidence of a fault does.
    """
    lossless = frozenset(p for s in switches.values() for p in s.get("lossless", ()))
    fault = fault or fault_evidence(switches, hosts)
    entries = [e for name, s in sorted(switches.items()) for e in switch_losses(name, s, lossless)]
    entries += [e for name, h in sorted(hosts.items()) for e in host_losses(name, h, lossless)]
    places = []
    for entry in entries:
        if entry["count"] == 0:
            continue
        if entry["explained"] is None and fault is not None and entry["class"] in ("lossless", "unknown"):
            entry = {**entry, "explained": fault}
        places.append(entry)
    by_kind = dict.fromkeys(KINDS, 0)
    for entry in places:
        if entry["count"] is not None:
            by_kind[entry["kind"]] += entry["count"]
    unexplained = [e for e in places if e["explained"] is None and e["class"] in ("lossless", "unknown", "unaccounted")]
    return {"lossless": sorted(lossless), "by_kind": by_kind, "places": places,
            "lossless_unexplained": sum(e["count"] or 0 for e in unexplained),
            "reasons": _reasons(unexplained) if lossless else {}}


def _reasons(unexplained: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The fidelity verdict's lines, by node: each place that lost lossless-class frames unexplained."""
    reasons: dict[str, list[str]] = {}
    for e in unexplained:
        if e["class"] == "unaccounted":
            line = f"{e['place']}: its losses cannot be accounted for"
        else:
            what = f"priority {e['priority']} (lossless)" if e["class"] == "lossless" else \
                "an unknown priority (counted as lossless)"
            line = f"{e['count']} frame{'s' if e['count'] != 1 else ''} of {what} lost at {e['node']} {e['place']}"
        reasons.setdefault(e["node"], []).append(line)
    return reasons
