"""The InfiniBand plane of a switch: forwarding by DLID under link credits.

With ``--fabric ib`` hosts send native IB packets (see
:mod:`emulator.wire.ib` for the encapsulation).  The switch looks up the
destination LID in its linear forwarding table (from the subnet manager,
:mod:`emulator.fabric.ib_subnet`), maps the packet's SL to the egress VL, and
queues it per (egress port, VL).  Nothing is ever dropped for lack of
space: a packet leaves only when the downstream receiver has advertised
credit for all of it (:class:`emulator.model.credits.CreditLink`, one per
port, both directions), and the ingress buffer it occupied is freed, and
credited back upstream, only when it has left.  Flow-control packets leave
in the same sequence as the data (the agent sends both on the data socket
and tc class), so they never overtake the packets whose blocks they count
(the receiver would count those twice).

The plane does no I/O: :meth:`IbPlane.head` says which frame a port sends
next, and the agent reports what became of it (:meth:`IbPlane.sent`, or
:meth:`IbPlane.refused`); a frame the kernel has no room for yet stays the
head.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Mapping, Protocol, Sequence

from emulator.model.credits import FABRIC_REFRESH_NS, CreditLink, CreditViolation, blocks, fabric_min_interval_ns
from emulator.wire.ib import LRH_AT, MIN_FRAME, SLP, data_end, decode_fc, encode_fc, set_vl
from emulator.wire.mac import mac_bytes

IB_DROPS = (
    "malformed",         # not a local-routed data packet or a flow-control packet with a good LPCRC; a VL we lack
    "credit_violation",  # the sender ignored our credit
    "no_route",          # a DLID our forwarding table does not have
    "too_long",          # longer than the egress link's MTU, or than its peer's buffer could ever credit
)



class IbPlaneSettings(Protocol):
    """What the plane needs of a switch's IB configuration (the agents' ``SwitchIbConfig`` has it)."""

    lft: Mapping[int, int]  # DLID -> port index
    sl2vl: Sequence[int]
    vls: int
    vl_buffer: int  # bytes each VL of each port receives into
    peer_capacity: Sequence[int]  # per port: the bytes each VL of the peer receives into
    fc_floor: int  # ns: the least time a grown grant waits for more (credits.fabric_min_interval_ns)


class IbPlane:
    """Credit state and VL queues of every port of one switch."""

    def __init__(self, macs: list[tuple[str, str]], config: IbPlaneSettings, max_frames: list[int],
                 rates_bps: list[int]) -> None:
        self.macs = macs  # per port: (our MAC, the peer's MAC), as text
        self.mac_bytes = [(mac_bytes(a), mac_bytes(b)) for a, b in macs]
        self.max_frames = max_frames  # per port: the longest Ethernet frame its link carries
        self.lft = config.lft  # DLID -> port index
        self.sl2vl = config.sl2vl
        self.vls = config.vls
        capacity = blocks(config.vl_buffer)
        self.links = [CreditLink(self.vls, capacity, blocks(config.peer_capacity[i]), refresh_ns=FABRIC_REFRESH_NS,
                                 min_interval_ns=fabric_min_interval_ns(rates_bps[i], max_frames[i], config.fc_floor))
                      for i in range(len(macs))]
        self.queues: list[list[deque[tuple[bytes, int, int, int]]]] = [
            [deque() for _ in range(self.vls)] for _ in macs]  # (frame, ingress port, ingress VL, IB bytes)
        self.next_vl = [0] * len(macs)
        self.control: list[deque[bytes]] = [deque() for _ in macs]  # flow-control packets to send
        self.drops = [dict.fromkeys(IB_DROPS, 0) for _ in macs]  # per ingress port
        self.forwarded = [0] * len(macs)
        self.tx_errors = [0] * len(macs)  # packets and flow-control packets the kernel refused to send

    def receive(self, now: int, port: int, frame: bytes) -> list[int]:
        """An IB frame arrived on ``port``; returns the ports that may now send.

        What it cannot parse or will not forward is dropped and counted in
        ``drops[port]``; nothing a frame holds can raise here.
        """
        drops = self.drops[port]
        if len(frame) <= LRH_AT:
            drops["malformed"] += 1
            return []
        if frame[LRH_AT - 1] == SLP:
            fc = decode_fc(frame)
            if fc is None or not fc.lpcrc_ok or fc.packet.vl >= self.vls:
                drops["malformed"] += 1
                return []
            self.links[port].on_fc(now, fc.packet)
            return [port]
        end = data_end(frame)  # None unless an SDP frame with LNH "IBA local" and a PktLen the frame holds
        vl_in = frame[LRH_AT] >> 4
        if end is None or vl_in >= self.vls:
            drops["malformed"] += 1
            return []
        size = end - LRH_AT  # LRH..ICRC (PktLen words) and the VCRC
        try:
            self.links[port].received(vl_in, size)
        except CreditViolation:  # the sender ignored our credit: a broken peer; drop and count it
            drops["credit_violation"] += 1
            return []
        out = self.lft.get(int.from_bytes(frame[LRH_AT + 2:LRH_AT + 4], "big"))
        sl = frame[LRH_AT + 1] >> 4
        vl_out = self.sl2vl[sl] if sl < len(self.sl2vl) else 0
        if out is None or not self._fits(out, vl_out, end):
            drops["no_route" if out is None else "too_long"] += 1
            self.links[port].freed(vl_in, size)
            return []
        ours, peers = self.mac_bytes[out]
        forwarded = peers + ours + frame[12:end]
        if vl_out != vl_in:
            forwarded = set_vl(forwarded, vl_out)
        if len(forwarded) < MIN_FRAME:
            forwarded += bytes(MIN_FRAME - len(forwarded))
        self.queues[out][vl_out].append((forwarded, port, vl_in, size))
        return [out]

    def _fits(self, out: int, vl: int, end: int) -> bool:
        """Whether a packet ending at ``end`` can ever leave ``out``: the link's MTU and the peer's credit window."""
        return max(end, MIN_FRAME) <= self.max_frames[out] and self.links[out].sendable(vl, end - LRH_AT)

    def head(self, port: int) -> bytes | None:
        """The frame ``port`` sends next, or None: flow-control packets first, then data as credits allow.

        The data queues take turns by VL, from the one after the VL that
        last sent.  The head stays the head until :meth:`sent` or
        :meth:`refused` says what became of it.
        """
        control = self.control[port]
        if control:
            return control[0]
        link, queues, vls = self.links[port], self.queues[port], self.vls
        vl = self.next_vl[port]
        for _ in range(vls):
            queue = queues[vl]
            if queue and link.can_send(vl, queue[0][3]):
                self.next_vl[port] = vl
                return queue[0][0]
            vl = (vl + 1) % vls
        return None

    def sent(self, port: int) -> None:
        """The kernel took the frame :meth:`head` gave for ``port``."""
        self._done(port, True)

    def refused(self, port: int) -> None:
        """The kernel refused the frame :meth:`head` gave for ``port`` for good (e.g. ENOBUFS): it is lost."""
        self.tx_errors[port] += 1
        self._done(port, False)

    def _done(self, port: int, sent: bool) -> None:
        control = self.control[port]
        if control:  # a lost update is repeated by the next refresh
            control.popleft()
            return
        vl = self.next_vl[port]
        _frame, ingress, vl_in, size = self.queues[port][vl].popleft()
        if sent:  # a packet refused is uncounted by the credits it never used
            self.links[port].sent(vl, size)
            self.forwarded[port] += 1
        self.links[ingress].freed(vl_in, size)
        self.next_vl[port] = (vl + 1) % self.vls

    def take_fc(self, now: int) -> list[int]:
        """Queue the flow-control packets now due; the ports that have some to send."""
        ports = []
        for index, link in enumerate(self.links):
            due = link.fc_due(now)
            if due:
                ours, peers = self.macs[index]
                self.control[index].extend(encode_fc(ours, peers, fc) for fc in due)
                ports.append(index)
        return ports

    def next_deadline(self) -> int | None:
        deadlines = [d for link in self.links if (d := link.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def stats(self, port: int) -> dict[str, Any]:
        return {"forwarded": self.forwarded[port], "queued": [len(q) for q in self.queues[port]],
                "drops": dict(self.drops[port]), "tx_errors": self.tx_errors[port], "credits": [self.links[port].counters[vl] for vl in range(self.vls)]}

    def total(self, cause: str) -> int:
        """Drops of one cause (an IB_DROPS name) over every port."""
        return sum(drops[cause] for drops in self.drops)
