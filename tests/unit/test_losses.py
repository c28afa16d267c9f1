"""Loss accounting: the kernel's drop counters as read from netlink and /proc, and the verdict over every place."""

from __future__ import annotations

import struct

from emulator.agents.config import PortConfig, SwitchConfig
from emulator.agents.switch import _buffer_below_default
from emulator.fabric.losses import account
from emulator.fabric.stats import explained_by_faults, fidelity
from emulator.kernel.drop_counters import (
    attributes, ip_errors, link_drops, messages, tc_drops, tree_drops, udp_errors,
)
from emulator.model.switch_params import derive_config

ROOT, NO_PARENT = 0x10000, 0xFFFFFFFF


def _nla(kind: int, payload: bytes) -> bytes:
    return struct.pack("HH", 4 + len(payload), kind) + payload + b"\0" * (-len(payload) % 4)


def _message(kind: int, payload: bytes, seq: int = 1) -> bytes:
    return struct.pack("IHHII", 16 + len(payload), kind, 2, seq, 0) + payload


def _link(name: str, index: int, rx_dropped: int, tx_dropped: int) -> bytes:
    stats = struct.pack("24Q", *([0] * 6 + [rx_dropped, tx_dropped] + [0] * 16))
    return struct.pack("BxHiII", 0, 1, index, 0, 0) + _nla(3, name.encode() + b"\0") + _nla(23, stats)


def _tc(index: int, handle: int, parent: int, kind: str, drops: int, legacy: bool = False) -> bytes:
    head = struct.pack("BxxxiIII", 0, index, handle, parent, 0) + _nla(1, kind.encode() + b"\0")
    if legacy:
        return head + _nla(3, struct.pack("QIIIIIII", 0, 0, drops, 0, 0, 0, 0, 0))
    return head + _nla(7 | 0x8000, _nla(1, bytes(16)) + _nla(3, struct.pack("IIIII", 0, 0, drops, 0, 0)))


def test_netlink_link_and_tc_messages_are_read_and_truncation_stops_them():
    reply = _message(16, _link("h1-eth0", 7, 3, 5)) + _message(36, _tc(7, 0x230000, 0x10013, "tbf", 9), seq=2)
    found = messages(reply)
    assert [(kind, seq) for kind, seq, _ in found] == [(16, 1), (36, 2)]
    assert link_drops(found[0][2]) == ("h1-eth0", 7, {"rx_dropped": 3, "tx_dropped": 5})
    assert tc_drops(found[1][2]) == (7, 0x230000, 0x10013, 9)
    assert tc_drops(_tc(7, 0x10000, NO_PARENT, "htb", 4, legacy=True)) == (7, 0x10000, NO_PARENT, 4)
    assert messages(reply[:-3]) == found[:1]  # a message cut short is not read
    assert attributes(_nla(3, b"abcd") + struct.pack("HH", 40, 1)) == {3: b"abcd"}  # nor an attribute
    assert link_drops(struct.pack("BxHiII", 0, 1, 7, 0, 0) + _nla(3, b"h1-eth0\0")) is None  # no statistics
    assert tc_drops(b"short") is None


def test_tc_drops_are_the_largest_along_a_priority_chain_not_their_sum():
    # A gate queue (33:) drop is counted by it, the gate (23:) and the root (and class 1:13): 6 drops, not 18.
    qdiscs = [(0x330000, 0x230001, 6), (0x230000, 0x10013, 6), (ROOT, NO_PARENT, 8),
              (0x80010000, 0x10011, 1)]  # priority 1's default leaf
    drops = tree_drops(qdiscs)
    assert drops["by_priority"] == [0, 1, 0, 6, 0, 0, 0, 0]
    assert drops["unattributed"] == 1  # the root dropped one frame no class took (8 - 6 - 1)
    # Parents listed after their children still chain; a qdisc under nothing known is unattributed.
    assert tree_drops([(0x330000, 0x230001, 2), (0x230000, 0x10013, 2), (0x990000, 0x880001, 3)])["by_priority"][3] == 2
    assert tree_drops([(0x990000, 0x880001, 3)])["unattributed"] == 3


def test_ip_and_udp_errors_come_from_their_snmp_lines():
    snmp = ("Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards "
            "InDelivers OutRequests OutDiscards OutNoRoutes\nIp: 2 64 100 1 2 0 0 3 90 80 4 5\n"
            "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors "
            "InCsumErrors IgnoredMulti MemErrors\nUdp: 10 0 4 20 3 7 1 0 0\nUdpLite: InErrors\nUdpLite: 99\n")
    assert udp_errors(snmp) == {"in_errors": 4, "rcvbuf_errors": 3, "sndbuf_errors": 7, "csum_errors": 1,
                                "mem_errors": 0}
    assert ip_errors(snmp) == {"in_hdr_errors": 1, "in_addr_errors": 2, "in_discards": 3, "out_discards": 4,
                               "out_no_routes": 5}
    assert udp_errors("garbage")["in_errors"] == 0 and ip_errors("Ip: InHdrErrors\nIp: x")["in_hdr_errors"] == 0


def _queue(**drops: int) -> dict:
    return {"drops": {"threshold": 0, "headroom": 0, "injected": 0, "pfcwd": 0, **drops}}


def _kernel(tc: list[int] | None = None, rx: int = 0, udp_in: int = 0, unattributed: int = 0, ip_in: int = 0,
            filtered: int = 0, sent_dropped: int = 0) -> dict:
    """A node's kernel counters; ``filtered``: UDP InErrors of no loss (the RoCE sink's filter), ``sent_dropped``:
    the sending side of tc drops (UDP SndbufErrors, IPv4 OutDiscards)."""
    return {"interfaces": {"eth0": {"rx_dropped": rx, "tx_dropped": 0,
                                    "tc": {"by_priority": tc or [0] * 8, "unattributed": unattributed}}},
            "ip": {"in_hdr_errors": ip_in, "in_addr_errors": 0, "in_discards": 0, "out_discards": sent_dropped,
                   "out_no_routes": 0},
            "udp": {"in_errors": udp_in + filtered, "rcvbuf_errors": udp_in, "sndbuf_errors": sent_dropped,
                    "csum_errors": 0, "mem_errors": 0}}


def _switch(queues: dict[int, dict] | None = None, lossless: tuple[int, ...] = (3,), below: bool = False,
            link_errors: int = 0, kernel_drops: int = 0, malformed: int = 0) -> dict:
    priorities = [(queues or {}).get(p, _queue()) for p in range(8)]
    port = {"priorities": priorities, "rx_kernel_drops": kernel_drops, "tx_errors": 0, "link_errors": link_errors,
            "rx_drops": {"malformed": malformed, "not_for_us": 0, "unsupported": 0, "no_route": 0, "ttl": 0,
                         "mtu": 0}}
    return {"ports": {"s1-eth1": port}, "lossless": list(lossless), "buffer_below_default": below,
            "kernel": _kernel(), "fidelity": {"faithful": True, "reasons": []}}


def _host(kernel: dict | None = None, pfc_sent: int = 0) -> dict:
    return {"fault": {"stalled": False, "pfc_sent": pfc_sent, "slow": None},
            "rnic": {"rx_kernel_drops": 0, "rx_buffer_drops": 0, "send_errors": 0}, "kernel": kernel or _kernel(),
            "fidelity": {"faithful": True, "reasons": []}}


def test_a_lossless_loss_at_a_host_gate_or_socket_is_named_and_unexplained():
    gate = [0, 0, 0, 2, 0, 0, 0, 0]
    losses = account({"s1": _switch()}, {"h1": _host(_kernel(tc=gate)), "h4": _host(_kernel(udp_in=5, ip_in=1))})
    assert losses["lossless_unexplained"] == 8
    assert losses["by_kind"] == {"switch": 0, "tc": 2, "veth": 0, "ip": 1, "socket": 5, "nic": 0}
    assert losses["reasons"] == {
        "h1": ["2 frames of priority 3 (lossless) lost at h1 eth0 pause gate of priority 3"],
        "h4": ["1 frame of an unknown priority (counted as lossless) lost at h4 IPv4 receive (bad header, not our "
               "address, no room)",
               "5 frames of an unknown priority (counted as lossless) lost at h4 UDP receive (buffer full, no memory, "
               "bad checksum)"]}


def test_a_loss_in_a_lossy_class_or_a_refused_frame_is_shown_but_not_judged():
    losses = account({"s1": _switch({1: _queue(threshold=4)}, malformed=2)},
                     {"h1": _host(_kernel(tc=[0, 9, 0, 0, 0, 0, 0, 0]))})
    assert losses["lossless_unexplained"] == 0 and losses["reasons"] == {}
    assert sorted((p["place"], p["class"]) for p in losses["places"]) == [
        ("eth0 pause gate of priority 1", "lossy"), ("s1-eth1 malformed", "refused"),
        ("s1-eth1 priority 1 threshold", "lossy")]
    # The RoCE sink's filtered copies (UDP InErrors) and the sending side of a tc drop are no second loss.
    counted_once = account({"s1": _switch()}, {"h1": _host(_kernel(tc=[0, 0, 0, 4, 0, 0, 0, 0], filtered=90,
                                                                    sent_dropped=4))})
    assert counted_once["lossless_unexplained"] == 4 and counted_once["by_kind"]["socket"] == 0
    # A switch's own IPv4 and UDP are not on the frames' way (its agent forwards from AF_PACKET).
    switch = _switch()
    switch["kernel"] = _kernel(udp_in=7, ip_in=7)
    assert account({"s1": switch}, {})["lossless_unexplained"] == 0
    # On a fabric without a lossless class nothing is judged, not even a loss of unknown priority.
    lossy = account({"s1": _switch(lossless=())}, {"h1": _host(_kernel(rx=3))})
    assert lossy["lossless_unexplained"] == 0 and lossy["places"][0]["class"] == "lossy"


def test_what_explains_a_loss_the_watchdog_the_configured_buffer_a_fault():
    watchdog = account({"s1": _switch({3: _queue(pfcwd=10, injected=1)})}, {})
    assert watchdog["lossless_unexplained"] == 0
    assert {p["explained"] for p in watchdog["places"]} == {"the PFC watchdog (--switch pfcwd)",
                                                             "the link's configured loss"}
    headroom = {3: _queue(headroom=4)}
    assert account({"s1": _switch(headroom)}, {})["lossless_unexplained"] == 4
    assert account({"s1": _switch(headroom, below=True)}, {})["lossless_unexplained"] == 0
    # A host NIC that paused its port (a stall or slow fault) explains a loss anywhere; so does a link down.
    socket_loss = {"h4": _host(_kernel(udp_in=1))}
    assert account({"s1": _switch()}, {**socket_loss, "h1": _host(pfc_sent=3)})["lossless_unexplained"] == 0
    assert account({"s1": _switch(link_errors=1)}, socket_loss)["lossless_unexplained"] == 0
    assert account({"s1": _switch()}, socket_loss, fault="the variant's faults")["places"][0]["explained"] == \
        "the variant's faults"


def test_unread_kernel_counters_are_unaccounted_not_zero():
    losses = account({"s1": _switch()}, {"h1": _host({"error": "OSError: gone"})})
    assert losses["reasons"] == {"h1": ["kernel counters unread (OSError: gone): its losses cannot be accounted for"]}


def test_the_run_verdict_names_the_place_and_a_callers_faults_explain_it():
    switches, hosts = {"s1": _switch(kernel_drops=2)}, {"h1": _host()}
    losses = account(switches, hosts)
    run = fidelity({**switches, **hosts}, losses)
    assert not run["faithful"] and run["lost_lossless_unexplained"] == 2
    assert run["unfaithful"] == {"s1": ["2 frames of an unknown priority (counted as lossless) lost at s1 "
                                        "s1-eth1 agent socket full (rx_kernel_drops)"]}
    stats = {"switches": switches, "hosts": hosts, "totals": {"lost_lossless_unexplained": 2}, "losses": losses,
             "fidelity": run}
    again = explained_by_faults(stats, "the variant's faults")
    assert again["fidelity"]["faithful"] and again["totals"]["lost_lossless_unexplained"] == 0
    assert again["losses"]["places"][0]["explained"] == "the variant's faults"


def _switch_config(**overrides: str) -> SwitchConfig:
    mmu = derive_config("lossless", 40_000_000, 0, 1500, 4, overrides)
    ports = tuple(PortConfig(ifname=f"s1-eth{i}", mac="02:00:00:00:00:01", peer_mac="02:00:00:00:00:02",
                             rate_bps=40_000_000, mtu=1500, delay_ns=0, host_facing=True, loss=0.0, drop=())
                  for i in range(1, 5))
    return SwitchConfig(name="s1", netns="x-s1", control="c", stats_file="f", seed=1, mmu=mmu,
                        occupancy_file="o", ports=ports, routes={}, ib=None)


def test_a_switch_knows_when_its_buffer_was_set_below_its_default():
    assert not _buffer_below_default(_switch_config())
    assert _buffer_below_default(_switch_config(headroom="3KiB"))
    assert not _buffer_below_default(_switch_config(headroom="1MiB"))
    assert not _buffer_below_default(_switch_config(lossless="none"))
