//! InfiniBand link-level credit flow control (IBTA vol. 1, 7.9), per data VL.
//!
//! Sans-I/O: the caller at one end of a link tells a [`CreditLink`] what went onto and came off the wire, sends
//! the flow-control packets [`CreditLink::fc_due`] gives, and wakes at [`CreditLink::next_deadline`]; times are
//! integer ns passed in.
//!
//! IB is lossless by credits rather than by pause: a transmitter never sends what the receiver has no room
//! for. Everything is counted in 64-byte blocks on 12-bit counters, per VL:
//!
//! - the transmitter adds every packet's blocks to FCTBS and may send only while that stays within FCCL, the
//!   limit the receiver last granted;
//! - the receiver adds every packet's blocks to ABR and grants FCCL = ABR + free blocks, so the grant is
//!   "everything you have sent so far, plus what I can still hold".
//!
//! Both ends send one flow-control packet per VL carrying both halves: our FCTBS (the peer resets its ABR to
//! it, which repairs the count after a lost data packet) and our FCCL (the peer's new limit). They go out when
//! our grant grows (at most every `min_interval_ns`, unless it grants half the buffer or more) and at least
//! every `refresh_ns`, so a lost one is repaired by the next.
//!
//! Counters wrap at 4096, so comparisons are mod 4096 and a grant is capped at 2048 blocks ahead: beyond that,
//! "ahead" and "behind" could not be told apart. A VL buffer larger than 2048 blocks is only used up to 2048
//! blocks, and a packet may be at most 2047 blocks, the largest for which the send rule is unambiguous.
//!
//! Correctness needs the wire to keep order per direction: a flow-control packet must not overtake data sent
//! before it, or the peer's ABR would count that data twice and over-grant.
use std::fmt;

use crate::wire::ib::{FcPacket, OP_INIT, OP_NORMAL};

/// Bytes of a credit block.
pub const BLOCK: u64 = 64;
/// FCTBS, ABR and FCCL are 12-bit counters.
pub const MODULUS: u16 = 4096;
/// The most a grant may run ahead of the blocks already sent.
pub const WINDOW: u16 = 2048;
/// The largest packet, in blocks, for which the send rule is unambiguous even with no credit left.
pub const MAX_PACKET_BLOCKS: u64 = WINDOW as u64 - 1;

/// The most VLs a link may have: a flow-control packet names its VL in 4 bits.
pub const MAX_VLS: u8 = 16;

/// What the emulated fabric uses: flow-control packets repeat at least every 50 ms per VL (IB: every 65,536
/// symbol times). Each costs a Python agent tens of microseconds at both ends; returned credit goes out at
/// once anyway, the refresh only repairs a lost update.
pub const FABRIC_REFRESH_NS: u64 = 50_000_000;
/// A grown grant goes out at most every 500 us (unless it grew by half the buffer): the emulated agents'
/// budget, not IB's; `--switch fc_floor` sets it (0: frames alone pace the grants).
pub const FABRIC_MIN_INTERVAL_NS: u64 = 500_000;
/// A grant waits up to this many frame times of the link (and at least the floor): a fixed interval does not
/// follow the frame (at 20 Mbit/s a 4 KiB frame takes 1.7 ms, and every data packet drew an update).
pub const FC_COALESCE_FRAMES: u64 = 2;

/// How long the emulated fabric lets a grown grant wait for more: [`FC_COALESCE_FRAMES`] times of the link's
/// longest frame, at least `floor_ns` (the switch's `fc_floor`) and at most the refresh. `None` for a rate of 0
/// (no frame time at no rate).
pub fn fabric_min_interval_ns(rate_bps: u64, frame_bytes: u64, floor_ns: u64) -> Option<u64> {
    let bits_ns = u128::from(FC_COALESCE_FRAMES) * u128::from(frame_bytes) * 8_000_000_000;
    let frames_ns = bits_ns.checked_div(u128::from(rate_bps))?;
    let frames_ns = u64::try_from(frames_ns).unwrap_or(u64::MAX);
    Some(FABRIC_REFRESH_NS.min(floor_ns.max(frames_ns)))
}

/// Why a credit operation was refused: a `CreditViolation` in Python (the first two) or a `ValueError`.
///
/// Values the caller gave are kept as `i64` so a binding can report a negative one in the same words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreditError {
    /// A packet sent past the peer's grant.
    SentPastGrant {
        vl: usize,
        blocks: u64,
        fctbs: u16,
        fccl: u16,
    },
    /// A packet received past our grant, or overflowing our buffer.
    ReceivedPastGrant {
        vl: usize,
        blocks: u64,
        abr: u16,
        occupied: u64,
        capacity: u64,
        granted: u16,
    },
    /// A packet of no bytes.
    EmptyPacket { nbytes: i64 },
    /// A VL this link does not have.
    NoSuchVl { vl: i64, vls: usize },
    /// A packet no grant could ever cover (larger than the peer's buffer or the window).
    NeverSendable {
        nbytes: u64,
        blocks: u64,
        vl: usize,
        limit: u64,
    },
    /// Freeing more than is occupied.
    OverFreed {
        vl: usize,
        blocks: u64,
        occupied: u64,
    },
    /// A link of no data VL, or of more than [`MAX_VLS`].
    NoVl { vls: i64 },
    /// A per-VL setting of another length than the VLs.
    PerVl { name: &'static str, vls: usize },
    /// Timers out of order: need 0 <= min_interval_ns <= refresh_ns, refresh_ns > 0.
    Timers {
        min_interval_ns: i64,
        refresh_ns: i64,
    },
}

impl CreditError {
    /// Whether this is a credit violation (the peer broke the protocol, or we would), not a bad argument.
    pub fn is_violation(&self) -> bool {
        matches!(
            self,
            CreditError::SentPastGrant { .. } | CreditError::ReceivedPastGrant { .. }
        )
    }
}

impl fmt::Display for CreditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreditError::SentPastGrant { vl, blocks, fctbs, fccl } => {
                write!(f, "VL {vl}: sending {blocks} blocks at FCTBS {fctbs} passes FCCL {fccl}")
            }
            CreditError::ReceivedPastGrant { vl, blocks, abr, occupied, capacity, granted } => write!(
                f,
                "VL {vl}: {blocks} blocks received with ABR {abr}, {occupied} of {capacity} blocks occupied, \
                 granted up to FCCL {granted}"
            ),
            CreditError::EmptyPacket { nbytes } => write!(f, "a packet has at least one byte, not {nbytes}"),
            CreditError::NoSuchVl { vl, vls } => write!(f, "VL {vl} is not one of this link's {vls} data VLs"),
            CreditError::NeverSendable { nbytes, blocks, vl, limit } => write!(
                f,
                "a {nbytes}-byte packet ({blocks} blocks) can never be sent on VL {vl}: the peer grants at most \
                 {limit} blocks; configure buffers of at least one MTU"
            ),
            CreditError::OverFreed { vl, blocks, occupied } => {
                write!(f, "VL {vl}: freeing {blocks} blocks, only {occupied} occupied")
            }
            CreditError::NoVl { vls } if *vls > 0 => {
                write!(f, "a link has at most {MAX_VLS} VLs (a 4-bit VL), not {vls}")
            }
            CreditError::NoVl { vls } => write!(f, "a link has at least one data VL, not {vls}"),
            CreditError::PerVl { name, vls } => {
                write!(f, "{name} must be one non-negative block count, or one per VL ({vls})")
            }
            CreditError::Timers { min_interval_ns, refresh_ns } => write!(
                f,
                "need 0 <= min_interval_ns ({min_interval_ns}) <= refresh_ns ({refresh_ns}), refresh > 0"
            ),
        }
    }
}

impl std::error::Error for CreditError {}

/// The credits a packet of `nbytes` costs: whole 64-byte blocks, rounded up.
pub fn blocks(nbytes: u64) -> Result<u64, CreditError> {
    if nbytes == 0 {
        return Err(CreditError::EmptyPacket { nbytes: 0 });
    }
    Ok(nbytes.div_ceil(BLOCK))
}

/// `a - b` mod 4096, of two 12-bit counters.
fn ahead(a: u16, b: u16) -> u16 {
    a.wrapping_sub(b) % MODULUS
}

/// `counter + n` mod 4096, for any `n`.
fn add(counter: u16, n: u64) -> u16 {
    // both terms below 4096: the sum fits, and the remainder is below 4096
    ((u64::from(counter) + n % u64::from(MODULUS)) % u64::from(MODULUS)) as u16
}

/// The spec's send rule: (FCCL - (FCTBS + blocks)) mod 4096 <= 2048.
fn fits(fccl: u16, fctbs: u16, nblocks: u64) -> bool {
    ahead(fccl, add(fctbs, nblocks)) <= WINDOW
}

/// One VL's counts, as callers read `counters[vl]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlCounters {
    /// Data packets sent.
    pub packets_sent: u64,
    /// Their blocks.
    pub blocks_sent: u64,
    /// Times the VL went from sending to refused for want of credit (not refusals: the count does not depend
    /// on how often the caller asks).
    pub stalls: u64,
    /// Flow-control packets sent.
    pub fc_sent: u64,
    /// Flow-control packets received.
    pub fc_received: u64,
    /// The most blocks of our buffer ever in use.
    pub max_occupancy_blocks: u64,
}

/// One data VL's transmitter, receiver and flow-control state.
#[derive(Clone, Debug)]
struct Vl {
    /// Our receive buffer, in blocks.
    capacity: u64,
    // transmitter
    fctbs: u16,
    fccl: u16,
    /// The peer's grant window, learnt from its first flow-control packet if not configured.
    peer_window: Option<u16>,
    stalled: bool,
    // receiver
    abr: u16,
    occupied: u64,
    /// The FCCL we last advertised.
    granted: u16,
    /// A grant grown by this much goes out at once: half the (capped) buffer.
    urgent: u16,
    // flow-control packets
    last_fc: Option<u64>,
    reply_at: Option<u64>,
    heard: bool,
    counters: VlCounters,
}

impl Vl {
    fn new(capacity: u64, peer_capacity: Option<u64>) -> Self {
        let window = capacity.min(u64::from(WINDOW)) as u16; // at most 2048: fits
        let peer_window = peer_capacity.map(|c| c.min(u64::from(WINDOW)) as u16);
        Vl {
            capacity,
            fctbs: 0,
            fccl: peer_window.unwrap_or(0),
            peer_window,
            stalled: false,
            abr: 0,
            occupied: 0,
            granted: window,
            urgent: (window / 2).max(1),
            last_fc: None,
            reply_at: None,
            heard: false,
            counters: VlCounters::default(),
        }
    }

    /// Blocks of the largest packet a grant can ever cover.
    fn largest(&self) -> u64 {
        self.peer_window
            .map_or(MAX_PACKET_BLOCKS, |w| u64::from(w).min(MAX_PACKET_BLOCKS))
    }

    /// The FCCL to advertise now: all received so far plus the free space, at most a window.
    fn grant(&self) -> u16 {
        let free = self
            .capacity
            .saturating_sub(self.occupied)
            .min(u64::from(WINDOW));
        add(self.abr, free)
    }

    /// When the next flow-control packet is due; 0 (long past) at start.
    fn due_at(&self, min_interval_ns: u64, refresh_ns: u64) -> u64 {
        let Some(last) = self.last_fc else { return 0 };
        if let Some(reply_at) = self.reply_at {
            return reply_at;
        }
        let grown = ahead(self.grant(), self.granted);
        if grown >= self.urgent {
            last
        } else if grown > 0 {
            last.saturating_add(min_interval_ns)
        } else {
            last.saturating_add(refresh_ns)
        }
    }
}

/// One end of one link: its transmitter and receiver credit state on every data VL.
///
/// `capacity` is our receive buffer per VL, in blocks. `peer_capacity` is what we may assume of the peer's
/// before it has told us (both ends configured alike, as a switch and an HCA are); `None` means send nothing on
/// a VL until the peer's first flow-control packet for it arrives. A VL of capacity 0 carries nothing.
#[derive(Clone, Debug)]
pub struct CreditLink {
    vls: Vec<Vl>,
    refresh_ns: u64,
    min_interval_ns: u64,
    /// `next_deadline`'s answer until something it depends on changes (received, freed, on_fc, fc_due): the
    /// caller asks after every batch of events, and the scan over VLs need not be repeated.
    deadline: Option<u64>,
}

impl CreditLink {
    /// The checks made before the buffers are looked at, in this order: at least one data VL and
    /// at most 16 (a flow-control packet's VL is 4 bits), then `0 <= min_interval_ns <= refresh_ns`,
    /// `refresh_ns > 0`. Integers of any sign, as a caller may give them.
    pub fn check_shape(vls: i64, refresh_ns: i64, min_interval_ns: i64) -> Result<(), CreditError> {
        if !(1..=i64::from(MAX_VLS)).contains(&vls) {
            return Err(CreditError::NoVl { vls });
        }
        if !(0 <= min_interval_ns && min_interval_ns <= refresh_ns) || refresh_ns <= 0 {
            return Err(CreditError::Timers {
                min_interval_ns,
                refresh_ns,
            });
        }
        Ok(())
    }

    /// A link of `capacity.len()` data VLs; `peer_capacity`, if given, one per VL too.
    pub fn new(
        capacity: &[u64],
        peer_capacity: Option<&[u64]>,
        refresh_ns: u64,
        min_interval_ns: u64,
    ) -> Result<Self, CreditError> {
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let vls = capacity.len();
        Self::check_shape(
            as_i64(vls as u64),
            as_i64(refresh_ns),
            as_i64(min_interval_ns),
        )?;
        let vls = match peer_capacity {
            None => capacity.iter().map(|&c| Vl::new(c, None)).collect(),
            Some(peer) if peer.len() == vls => capacity
                .iter()
                .zip(peer)
                .map(|(&c, &p)| Vl::new(c, Some(p)))
                .collect(),
            Some(_) => {
                return Err(CreditError::PerVl {
                    name: "peer_capacity_blocks",
                    vls,
                })
            }
        };
        Ok(CreditLink {
            vls,
            refresh_ns,
            min_interval_ns,
            deadline: None,
        })
    }

    /// The number of data VLs.
    pub fn vl_count(&self) -> usize {
        self.vls.len()
    }

    /// Our receive buffer on each VL, in blocks.
    pub fn capacity(&self, vl: usize) -> Option<u64> {
        self.vls.get(vl).map(|v| v.capacity)
    }

    /// The longest a flow-control packet waits before it is repeated.
    pub fn refresh_ns(&self) -> u64 {
        self.refresh_ns
    }

    /// The least time between two grown grants (unless large).
    pub fn min_interval_ns(&self) -> u64 {
        self.min_interval_ns
    }

    /// One VL's counts.
    pub fn counters(&self, vl: usize) -> Option<&VlCounters> {
        self.vls.get(vl).map(|v| &v.counters)
    }

    fn vl_mut(&mut self, vl: usize) -> Result<&mut Vl, CreditError> {
        let vls = self.vls.len();
        self.vls.get_mut(vl).ok_or(CreditError::NoSuchVl {
            vl: i64::try_from(vl).unwrap_or(i64::MAX),
            vls,
        })
    }

    fn vl(&self, vl: usize) -> Result<&Vl, CreditError> {
        self.vls.get(vl).ok_or(CreditError::NoSuchVl {
            vl: i64::try_from(vl).unwrap_or(i64::MAX),
            vls: self.vls.len(),
        })
    }

    // --- transmitter ---------------------------------------------------------------------------------------

    /// Blocks of a packet to send on `vl`; an error if no grant could ever cover it (the fabric must give every
    /// VL a buffer of at least one MTU: refusing such a packet beats stalling on it for ever).
    fn blocks_to_send(&self, vl: usize, nbytes: u64) -> Result<u64, CreditError> {
        let n = blocks(nbytes)?;
        let limit = self.vl(vl)?.largest();
        if n > limit {
            return Err(CreditError::NeverSendable {
                nbytes,
                blocks: n,
                vl,
                limit,
            });
        }
        Ok(n)
    }

    /// Whether a packet of `nbytes` on `vl` could ever be sent; never an error (for checking input).
    pub fn sendable(&self, vl: usize, nbytes: u64) -> bool {
        match (self.vls.get(vl), blocks(nbytes)) {
            (Some(v), Ok(n)) => n <= v.largest(),
            _ => false,
        }
    }

    /// Whether a packet of `nbytes` may go out on `vl` now (a refusal after sending counts a stall).
    pub fn can_send(&mut self, vl: usize, nbytes: u64) -> Result<bool, CreditError> {
        let n = self.blocks_to_send(vl, nbytes)?;
        let v = self.vl_mut(vl)?;
        let ok = fits(v.fccl, v.fctbs, n);
        if !ok && !v.stalled {
            v.stalled = true;
            v.counters.stalls += 1;
        }
        Ok(ok)
    }

    /// A packet went onto the wire; call it in wire order, as it leaves (the FCTBS of a flow-control packet
    /// built after this counts the packet, so the packet must be ahead of it on the wire).
    pub fn sent(&mut self, vl: usize, nbytes: u64) -> Result<(), CreditError> {
        let n = self.blocks_to_send(vl, nbytes)?;
        let v = self.vl_mut(vl)?;
        if !fits(v.fccl, v.fctbs, n) {
            return Err(CreditError::SentPastGrant {
                vl,
                blocks: n,
                fctbs: v.fctbs,
                fccl: v.fccl,
            });
        }
        v.fctbs = add(v.fctbs, n);
        v.stalled = false;
        v.counters.packets_sent += 1;
        v.counters.blocks_sent = v.counters.blocks_sent.saturating_add(n);
        Ok(())
    }

    /// Blocks we may still send on `vl` under the peer's last grant.
    pub fn credits(&self, vl: usize) -> Result<u16, CreditError> {
        let v = self.vl(vl)?;
        Ok(ahead(v.fccl, v.fctbs))
    }

    // --- receiver ------------------------------------------------------------------------------------------

    /// A data packet arrived on `vl` and now occupies our buffer.
    ///
    /// [`CreditError::ReceivedPastGrant`] if it passes our last grant or overflows the buffer (the second
    /// catches an overshoot too large for the mod-4096 comparison to see).
    pub fn received(&mut self, vl: usize, nbytes: u64) -> Result<(), CreditError> {
        let n = blocks(nbytes)?;
        let v = self.vl_mut(vl)?;
        let abr = add(v.abr, n);
        let occupied = v.occupied.saturating_add(n);
        if ahead(v.granted, abr) > WINDOW || occupied > v.capacity {
            return Err(CreditError::ReceivedPastGrant {
                vl,
                blocks: n,
                abr: v.abr,
                occupied: v.occupied,
                capacity: v.capacity,
                granted: v.granted,
            });
        }
        v.abr = abr;
        v.occupied = occupied;
        v.counters.max_occupancy_blocks = v.counters.max_occupancy_blocks.max(occupied);
        self.deadline = None;
        Ok(())
    }

    /// A packet of `nbytes` we received on `vl` left our buffer (forwarded or consumed).
    pub fn freed(&mut self, vl: usize, nbytes: u64) -> Result<(), CreditError> {
        let n = blocks(nbytes)?;
        let v = self.vl_mut(vl)?;
        if n > v.occupied {
            return Err(CreditError::OverFreed {
                vl,
                blocks: n,
                occupied: v.occupied,
            });
        }
        v.occupied -= n;
        self.deadline = None;
        Ok(())
    }

    /// Blocks of our buffer on `vl` in use.
    pub fn occupancy(&self, vl: usize) -> Result<u64, CreditError> {
        Ok(self.vl(vl)?.occupied)
    }

    // --- flow-control packets ------------------------------------------------------------------------------

    /// The peer's flow-control packet arrived.
    ///
    /// Its FCCL becomes our send limit and its FCTBS our ABR. The first one on a VL also tells an end without
    /// a configured peer capacity the peer's window: the peer has then received nothing, so its grant is its
    /// whole (capped) buffer. An init packet means the peer has not heard from us, so our answer is due at
    /// once, not at the next refresh.
    pub fn on_fc(&mut self, now: u64, fc: &FcPacket) -> Result<(), CreditError> {
        let vl = usize::from(fc.vl());
        let v = match self.vls.get_mut(vl) {
            Some(v) => v,
            None => {
                return Err(CreditError::NoSuchVl {
                    vl: i64::from(fc.vl()),
                    vls: self.vls.len(),
                })
            }
        };
        v.fccl = fc.fccl();
        if v.peer_window.is_none() {
            v.peer_window = Some(ahead(fc.fccl(), v.fctbs));
        }
        v.abr = fc.fctbs();
        v.heard = true;
        if fc.op() == OP_INIT && v.reply_at.is_none() {
            v.reply_at = Some(now);
        }
        v.counters.fc_received += 1;
        self.deadline = None;
        Ok(())
    }

    /// When the next flow-control packet on `vl` is due; 0 (long past) at start.
    pub fn due_at(&self, vl: usize) -> Result<u64, CreditError> {
        Ok(self.vl(vl)?.due_at(self.min_interval_ns, self.refresh_ns))
    }

    /// Append to `out` the flow-control packets to send now (init at start, grown grants, refreshes), in VL
    /// order. Once given they count as sent; send them behind any data already passed to [`Self::sent`].
    ///
    /// The caller's vector is reused from call to call: no allocation per wake-up.
    pub fn fc_due(&mut self, now: u64, out: &mut Vec<FcPacket>) {
        if self.deadline.is_some_and(|d| d > now) {
            return;
        }
        self.deadline = None;
        let (min_interval, refresh) = (self.min_interval_ns, self.refresh_ns);
        for (index, v) in self.vls.iter_mut().enumerate() {
            if v.due_at(min_interval, refresh) > now {
                continue;
            }
            let grant = v.grant();
            let op = if v.heard { OP_NORMAL } else { OP_INIT };
            // every field is in range (fctbs and grant mod 4096, index below MAX_VLS): never skips
            let Ok(fc) = FcPacket::new(
                i64::from(op),
                i64::from(v.fctbs),
                index as i64,
                i64::from(grant),
            ) else {
                continue;
            };
            out.push(fc);
            v.granted = grant;
            v.last_fc = Some(now);
            v.reply_at = None;
            v.counters.fc_sent += 1;
        }
    }

    /// When [`Self::fc_due`] next has something; a time already past means now. Always some time: the
    /// periodic refresh is always pending. [`Self::freed`] can bring it forward, so ask again after freeing.
    pub fn next_deadline(&mut self) -> u64 {
        if let Some(deadline) = self.deadline {
            return deadline;
        }
        let (min_interval, refresh) = (self.min_interval_ns, self.refresh_ns);
        let deadline = self
            .vls
            .iter()
            .map(|v| v.due_at(min_interval, refresh))
            .min()
            .unwrap_or(0);
        self.deadline = Some(deadline);
        deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1000;

    fn nbytes(nblocks: u64) -> u64 {
        nblocks * BLOCK
    }

    fn fc(op: u8, fctbs: u16, vl: u8, fccl: u16) -> FcPacket {
        FcPacket::new(op.into(), fctbs.into(), vl.into(), (fccl % MODULUS).into()).unwrap()
    }

    fn due(link: &mut CreditLink, now: u64) -> Vec<FcPacket> {
        let mut out = Vec::new();
        link.fc_due(now, &mut out);
        out
    }

    #[test]
    fn blocks_round_up() {
        let got: Vec<u64> = [1, 63, 64, 65, 128, 4160]
            .iter()
            .map(|&n| blocks(n).unwrap())
            .collect();
        assert_eq!(got, [1, 1, 1, 2, 2, 65]);
        assert!(blocks(0).is_err());
    }

    #[test]
    fn send_rule_at_the_wrap() {
        let mut a = CreditLink::new(&[100], None, MS, 20 * US).unwrap();
        let mut fctbs: u16 = 0;
        for step in [2000u16, 2000, 90] {
            a.on_fc(0, &fc(OP_NORMAL, 0, 0, fctbs + 2048)).unwrap();
            a.sent(0, nbytes(step.into())).unwrap();
            fctbs += step;
        }
        a.on_fc(0, &fc(OP_NORMAL, 0, 0, 4090 + 10)).unwrap();
        assert_eq!(a.credits(0), Ok(10));
        assert_eq!(a.can_send(0, nbytes(10)), Ok(true));
        assert_eq!(a.can_send(0, nbytes(10) + 1), Ok(false));
        a.sent(0, nbytes(10)).unwrap();
        assert_eq!(a.credits(0), Ok(0));
        assert_eq!(a.can_send(0, nbytes(2047)), Ok(false));
        assert!(matches!(
            a.can_send(0, nbytes(2048)),
            Err(CreditError::NeverSendable { .. })
        ));
    }

    #[test]
    fn init_handshake() {
        let mut a = CreditLink::new(&[100, 3000], None, MS, 20 * US).unwrap();
        let mut b = CreditLink::new(&[200, 200], None, MS, 20 * US).unwrap();
        assert_eq!(a.next_deadline(), 0);
        let from_a = due(&mut a, 10);
        assert_eq!(from_a, [fc(OP_INIT, 0, 0, 100), fc(OP_INIT, 0, 1, 2048)]);
        assert_eq!(a.next_deadline(), 10 + MS);
        for p in &from_a {
            b.on_fc(20, p).unwrap();
        }
        assert_eq!(
            due(&mut b, 20),
            [fc(OP_NORMAL, 0, 0, 200), fc(OP_NORMAL, 0, 1, 200)]
        );
        assert_eq!(b.credits(1), Ok(2048));
        assert!(due(&mut b, 20).is_empty());
    }

    #[test]
    fn receiving_past_the_grant_is_a_violation() {
        let mut b = CreditLink::new(&[10], None, MS, 20 * US).unwrap();
        b.received(0, nbytes(10)).unwrap();
        assert!(b.received(0, 1).unwrap_err().is_violation());
        b.freed(0, nbytes(4)).unwrap();
        assert!(b.received(0, 1).is_err());
        due(&mut b, 0);
        b.received(0, nbytes(4)).unwrap();
        assert!(matches!(
            b.freed(0, nbytes(11)),
            Err(CreditError::OverFreed { .. })
        ));
    }

    #[test]
    fn fabric_interval_within_bounds() {
        assert_eq!(
            fabric_min_interval_ns(20_000_000, 4214, FABRIC_MIN_INTERVAL_NS),
            Some(2 * 4214 * 400)
        );
        assert_eq!(
            fabric_min_interval_ns(1_000_000_000, 1514, FABRIC_MIN_INTERVAL_NS),
            Some(FABRIC_MIN_INTERVAL_NS)
        );
        assert_eq!(
            fabric_min_interval_ns(1000, 4214, FABRIC_MIN_INTERVAL_NS),
            Some(FABRIC_REFRESH_NS)
        );
        assert_eq!(fabric_min_interval_ns(0, 4214, 0), None);
    }

    proptest! {
        /// Two ends over a lossless FIFO wire, any operations: no panic, the receiver never overflows, and
        /// nothing the sender was allowed to send is refused by the receiver.
        #[test]
        fn closed_loop_never_overflows(
            capacity in proptest::collection::vec(0u64..3000, 1..4),
            ops in proptest::collection::vec((0u8..5, 0usize..4, 1u64..70_000, 0u64..2 * MS), 0..200),
        ) {
            let mut a = CreditLink::new(&capacity, None, MS, 20 * US).unwrap();
            let mut b = CreditLink::new(&capacity, None, MS, 20 * US).unwrap();
            let mut held: Vec<Vec<u64>> = vec![Vec::new(); capacity.len()];
            let mut now = 0u64;
            let mut out = Vec::new();
            for (op, vl, size, step) in ops {
                now += step;
                match op {
                    0 => if a.can_send(vl, size).unwrap_or(false) {
                        a.sent(vl, size).unwrap();
                        b.received(vl, size).unwrap();
                        held[vl].push(size);
                        prop_assert!(b.occupancy(vl).unwrap() <= capacity[vl]);
                    },
                    1 => if let Some(size) = held.get_mut(vl).and_then(Vec::pop) { b.freed(vl, size).unwrap(); },
                    2 => { out.clear(); b.fc_due(now, &mut out); for p in &out { a.on_fc(now, p).unwrap(); } },
                    3 => { out.clear(); a.fc_due(now, &mut out); for p in &out { b.on_fc(now, p).unwrap(); } },
                    _ => { let _ = a.next_deadline(); let _ = b.sendable(vl, size); },
                }
            }
        }

        /// Any VL, any size, any packet: errors, never a panic.
        #[test]
        fn no_panic_on_any_argument(vl in any::<usize>(), size in any::<u64>(), now in any::<u64>(),
                                    fctbs in 0u16..4096, fccl in 0u16..4096, fvl in 0u8..16, op in 0u8..2) {
            let mut link = CreditLink::new(&[64, 3000], Some(&[100, u64::MAX]), u64::MAX, 0).unwrap();
            let _ = link.can_send(vl, size);
            let _ = link.sent(vl, size);
            let _ = link.received(vl, size);
            let _ = link.freed(vl, size);
            let _ = link.on_fc(now, &fc(op, fctbs, fvl, fccl));
            let mut out = Vec::new();
            link.fc_due(now, &mut out);
            let _ = link.next_deadline();
            let _ = fabric_min_interval_ns(size, size, now);
        }
    }
}
