"""InfiniBand link-level credit flow control (IBTA vol. 1, 7.9), per data VL.

Sans-I/O (h11 style): no sockets, no clock.  The agent at one end of a link
tells a :class:`CreditLink` what went onto and came off the wire, sends the
flow-control packets :meth:`CreditLink.fc_due` returns, and wakes at
:meth:`CreditLink.next_deadline`; times are integer nanoseconds passed in.

IB is lossless by credits rather than by pause: a transmitter never sends
what the receiver has no room for.  Everything is counted in 64-byte
blocks on 12-bit counters, per VL:

- the transmitter adds every packet's blocks to FCTBS and may send only
  while that stays within FCCL, the limit the receiver last granted;
- the receiver adds every packet's blocks to ABR and grants
  FCCL = ABR + free blocks, so the grant is "everything you have sent so
  far, plus what I can still hold".

Both ends send one flow-control packet per VL carrying both halves: our
FCTBS (the peer resets its ABR to it, which repairs the count after a lost
data packet) and our FCCL (the peer's new limit).  They go out when our
grant grows (rate-limited: an update every ``min_interval_ns`` at most,
unless it grants half the buffer or more) and at least every
``refresh_ns``, so a lost one is repaired by the next.

Counters wrap at 4096, so comparisons are made mod 4096 and a grant is
capped at 2048 blocks ahead: beyond that, "ahead" and "behind" could not
be told apart.  A VL buffer larger than 2048 blocks (128 KiB) is therefore
only used up to 2048 blocks, as the spec prescribes, and a packet may be
at most 2047 blocks, the largest for which the send rule is unambiguous
even with no credit left.

Correctness needs the wire to keep order per direction: a flow-control
packet must not overtake data sent before it, or the peer's ABR would
count that data twice and over-grant.
"""

from __future__ import annotations

from emulator.wire.ib import OP_INIT, OP_NORMAL, FcPacket

BLOCK = 64
MODULUS = 4096  # FCTBS, ABR and FCCL are 12-bit counters
WINDOW = 2048  # the most a grant may run ahead of the blocks already sent
MAX_PACKET_BLOCKS = WINDOW - 1

COUNTER_NAMES = ("packets_sent", "blocks_sent", "stalls", "fc_sent", "fc_received", "max_occupancy_blocks")


# What the emulated fabric uses: flow-control packets repeat at least every 50 ms per VL (IB: every
# 65,536 symbol times).  Each costs a Python agent tens of microseconds at both ends; at 1 ms per VL
# nine agents of star,8 spent their time on them.  Returned credit goes out at once anyway; the
# refresh only repairs a lost update.
FABRIC_REFRESH_NS = 50_000_000
# ... and a grown grant goes out at most every 500 us (unless it grew by half the buffer): at 20 us
# nearly every data packet was answered by a flow-control packet, which doubled the agents' work in an
# all-reduce (every link busy both ways) and made it 1.7 times slower than on Ethernet.  The floor is
# the agents' budget, not IB's: ``--switch fc_floor`` sets it (0: frames alone pace the grants, for a
# modelled rate where 500 us is hundreds of frames and the simulation backend, which has no agents).
FABRIC_MIN_INTERVAL_NS = 500_000
# A fixed interval does not follow the frame: at 20 Mbit/s a 4 KiB frame takes 1.7 ms, so every data
# packet still drew a flow-control packet.  A grant waits up to FC_COALESCE_FRAMES frame times instead
# (500 us at least): one update for every two frames or so.  The sender never waits on it while the VL
# buffer (16 frames by default) has more than that in hand, and half the buffer still goes at once.
FC_COALESCE_FRAMES = 2


def fabric_min_interval_ns(rate_bps: int, frame_bytes: int, floor_ns: int = FABRIC_MIN_INTERVAL_NS) -> int:
    """How long the emulated fabric lets a grown grant wait for more: FC_COALESCE_FRAMES times of the
    link's longest frame, at least ``floor_ns`` (the switch's ``fc_floor``) and at most the refresh."""
    frames_ns = FC_COALESCE_FRAMES * frame_bytes * 8_000_000_000 // rate_bps
    return min(FABRIC_REFRESH_NS, max(floor_ns, frames_ns))


class CreditViolation(Exception):
    """A packet beyond the credit limit: sent without credit, or received
    beyond what this end granted (its buffer would overflow)."""


def blocks(nbytes: int) -> int:
    """The credits a packet of ``nbytes`` costs: whole 64-byte blocks, rounded up."""
    if nbytes <= 0:
        raise ValueError(f"a packet has at least one byte, not {nbytes}")
    return -(-nbytes // BLOCK)


def _fits(fccl: int, fctbs: int, nblocks: int) -> bool:
    """The spec's send rule: (FCCL - (FCTBS + blocks)) mod 4096 <= 2048."""
    return (fccl - (fctbs + nblocks)) % MODULUS <= WINDOW


def _per_vl(value: int | list[int], vls: int, name: str) -> list[int]:
    values = [value] * vls if isinstance(value, int) else list(value)
    if len(values) != vls or any(v < 0 for v in values):
        raise ValueError(f"{name} must be one non-negative block count, or one per VL ({vls}): {value!r}")
    return values


class CreditLink:
    """One end of one link: its transmitter and receiver credit state on every data VL.

    ``capacity_blocks`` is our receive buffer per VL.  ``peer_capacity_blocks``
    is what we may assume of the peer's before it has told us (both ends
    configured alike, as a switch and an HCA are); None means send nothing on
    a VL until the peer's first flow-control packet for it arrives.  A VL of
    capacity 0 carries nothing.

    ``counters[vl]`` holds packets_sent, blocks_sent, stalls (times the VL
    went from sending to refused for want of credit, not refusals, so the
    count does not depend on how often the caller asks), fc_sent,
    fc_received and max_occupancy_blocks.
    """

    def __init__(
        self,
        vls: int,
        capacity_blocks: int | list[int],
        peer_capacity_blocks: int | list[int] | None = None,
        refresh_ns: int = 1_000_000,
        min_interval_ns: int = 20_000,
    ) -> None:
        if vls < 1:
            raise ValueError(f"a link has at least one data VL, not {vls}")
        if not 0 <= min_interval_ns <= refresh_ns or refresh_ns <= 0:
            raise ValueError(f"need 0 <= min_interval_ns ({min_interval_ns}) <= refresh_ns ({refresh_ns}), refresh > 0")
        self.vls = vls
        self.capacity = _per_vl(capacity_blocks, vls, "capacity_blocks")
        self.refresh_ns = refresh_ns
        self.min_interval_ns = min_interval_ns
        # transmitter
        self._fctbs = [0] * vls
        if peer_capacity_blocks is None:
            self._peer_window: list[int | None] = [None] * vls
        else:
            self._peer_window = [min(c, WINDOW) for c in _per_vl(peer_capacity_blocks, vls, "peer_capacity_blocks")]
        self._fccl = [0 if w is None else w for w in self._peer_window]
        self._stalled = [False] * vls
        # receiver; the grant a configured peer assumes before our first packet
        self._abr = [0] * vls
        self._occupied = [0] * vls
        self._granted = [min(c, WINDOW) for c in self.capacity]
        self._urgent = [max(1, min(c, WINDOW) // 2) for c in self.capacity]
        # flow-control packets
        self._last_fc: list[int | None] = [None] * vls
        self._reply_at: list[int | None] = [None] * vls
        self._heard = [False] * vls
        # next_deadline's answer until something it depends on changes (received, freed, on_fc, fc_due):
        # an agent asks after every batch of events, and the scan over VLs was most of an IB switch's Python.
        self._deadline: int | None = None
        self.counters: dict[int, dict[str, int]] = {vl: dict.fromkeys(COUNTER_NAMES, 0) for vl in range(vls)}

    def _vl(self, vl: int) -> int:
        if not 0 <= vl < self.vls:
            raise ValueError(f"VL {vl} is not one of this link's {self.vls} data VLs")
        return vl

    # --- transmitter ---------------------------------------------------------------

    def _blocks_to_send(self, vl: int, nbytes: int) -> int:
        """Blocks of a packet to send on ``vl``; ValueError if no grant could ever cover it.

        Refusing such a packet outright, rather than stalling on it for ever,
        is the point: the fabric must give every VL a buffer of at least one MTU.
        """
        n = blocks(nbytes)
        limit = self._largest(self._vl(vl))
        if n > limit:
            raise ValueError(
                f"a {nbytes}-byte packet ({n} blocks) can never be sent on VL {vl}: "
                f"the peer grants at most {limit} blocks; configure buffers of at least one MTU"
            )
        return n

    def _largest(self, vl: int) -> int:
        """Blocks of the largest packet a grant on ``vl`` can ever cover."""
        window = self._peer_window[vl]
        return MAX_PACKET_BLOCKS if window is None else min(window, MAX_PACKET_BLOCKS)

    def sendable(self, vl: int, nbytes: int) -> bool:
        """Whether a packet of ``nbytes`` on ``vl`` could ever be sent; never raises (for checking input)."""
        return 0 <= vl < self.vls and 0 < nbytes and blocks(nbytes) <= self._largest(vl)

    def can_send(self, vl: int, nbytes: int) -> bool:
        """Whether a packet of ``nbytes`` may go out on ``vl`` now."""
        n = self._blocks_to_send(vl, nbytes)
        ok = _fits(self._fccl[vl], self._fctbs[vl], n)
        if not ok and not self._stalled[vl]:
            self._stalled[vl] = True
            self.counters[vl]["stalls"] += 1
        return ok

    def sent(self, vl: int, nbytes: int) -> None:
        """A packet went onto the wire; call it in wire order, as it leaves.

        The FCTBS of a flow-control packet built after this call counts the
        packet, so the packet must be ahead of it on the wire.
        """
        n = self._blocks_to_send(vl, nbytes)
        if not _fits(self._fccl[vl], self._fctbs[vl], n):
            raise CreditViolation(
                f"VL {vl}: sending {n} blocks at FCTBS {self._fctbs[vl]} passes FCCL {self._fccl[vl]}"
            )
        self._fctbs[vl] = (self._fctbs[vl] + n) % MODULUS
        self._stalled[vl] = False
        counters = self.counters[vl]
        counters["packets_sent"] += 1
        counters["blocks_sent"] += n

    def credits(self, vl: int) -> int:
        """Blocks we may still send on ``vl`` under the peer's last grant."""
        return (self._fccl[self._vl(vl)] - self._fctbs[vl]) % MODULUS

    # --- receiver ------------------------------------------------------------------

    def _grant(self, vl: int) -> int:
        """The FCCL to advertise now: all received so far plus the free space, at most a window."""
        return (self._abr[vl] + min(self.capacity[vl] - self._occupied[vl], WINDOW)) % MODULUS

    def received(self, vl: int, nbytes: int) -> None:
        """A data packet arrived on ``vl`` and now occupies our buffer.

        Raises :class:`CreditViolation` if it passes our last grant or
        overflows the buffer (the second catches an overshoot too large for
        the mod-4096 comparison to see).
        """
        n = blocks(nbytes)
        abr = (self._abr[self._vl(vl)] + n) % MODULUS
        occupied = self._occupied[vl] + n
        if (self._granted[vl] - abr) % MODULUS > WINDOW or occupied > self.capacity[vl]:
            raise CreditViolation(
                f"VL {vl}: {n} blocks received with ABR {self._abr[vl]}, {self._occupied[vl]} of "
                f"{self.capacity[vl]} blocks occupied, granted up to FCCL {self._granted[vl]}"
            )
        self._abr[vl] = abr
        self._occupied[vl] = occupied
        self._deadline = None
        counters = self.counters[vl]
        counters["max_occupancy_blocks"] = max(counters["max_occupancy_blocks"], occupied)

    def freed(self, vl: int, nbytes: int) -> None:
        """A packet of ``nbytes`` we received on ``vl`` left our buffer (forwarded or consumed)."""
        n = blocks(nbytes)
        if n > self._occupied[self._vl(vl)]:
            raise ValueError(f"VL {vl}: freeing {n} blocks, only {self._occupied[vl]} occupied")
        self._occupied[vl] -= n
        self._deadline = None

    def occupancy(self, vl: int) -> int:
        """Blocks of our buffer on ``vl`` in use."""
        return self._occupied[self._vl(vl)]

    # --- flow-control packets ----------------------------------------------------------

    def on_fc(self, now: int, fc: FcPacket) -> None:
        """The peer's flow-control packet arrived.

        Its FCCL becomes our send limit and its FCTBS our ABR.  The first
        one on a VL also tells an end without ``peer_capacity_blocks`` the
        peer's window: the peer has then received nothing, so its grant is
        its whole (capped) buffer.  An init packet means the peer has not
        heard from us, so our answer is due at once, not at the next refresh.
        """
        vl = self._vl(fc.vl)
        self._fccl[vl] = fc.fccl
        if self._peer_window[vl] is None:
            self._peer_window[vl] = (fc.fccl - self._fctbs[vl]) % MODULUS
        self._abr[vl] = fc.fctbs
        self._heard[vl] = True
        if fc.op == OP_INIT and self._reply_at[vl] is None:
            self._reply_at[vl] = now
        self._deadline = None
        self.counters[vl]["fc_received"] += 1

    def _due_at(self, vl: int) -> int:
        """When the next flow-control packet on ``vl`` is due; 0 (long past) at start."""
        last = self._last_fc[vl]
        if last is None:
            return 0
        reply_at = self._reply_at[vl]
        if reply_at is not None:
            return reply_at
        grown = (self._grant(vl) - self._granted[vl]) % MODULUS
        if grown >= self._urgent[vl]:
            return last
        if grown:
            return last + self.min_interval_ns
        return last + self.refresh_ns

    def fc_due(self, now: int) -> list[FcPacket]:
        """The flow-control packets to send now (init at start, grown grants, refreshes).

        Once returned they count as sent; send them behind any data already
        passed to :meth:`sent`.
        """
        if self._deadline is not None and self._deadline > now:
            return []
        self._deadline = None
        out = []
        for vl in range(self.vls):
            if self._due_at(vl) <= now:
                grant = self._grant(vl)
                out.append(FcPacket(OP_NORMAL if self._heard[vl] else OP_INIT, self._fctbs[vl], vl, grant))
                self._granted[vl] = grant
                self._last_fc[vl] = now
                self._reply_at[vl] = None
                self.counters[vl]["fc_sent"] += 1
        return out

    def next_deadline(self) -> int:
        """When :meth:`fc_due` next has something; a time already past means now.

        Never None: the periodic refresh is always pending.  :meth:`freed`
        can bring it forward, so ask again after freeing.
        """
        if self._deadline is None:
            self._deadline = min(self._due_at(vl) for vl in range(self.vls))
        return self._deadline
