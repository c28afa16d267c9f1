//! UET's receiver credits (RCCC), without I/O: a sender sends only what its receiver granted, and each
//! receiving NIC grants credit at its own link rate, in turn among the senders that ask.
//!
//! After uet-htsim's receiver-based congestion control (its `UecSrc` credit, `UecSink` pull target and
//! `UecPullPacer`), which is where the UET 1.0 overview (arXiv 2508.08906) leaves the details:
//!
//! - A sender starts *speculating* with a window's worth of credit (the largest it may hold), so a short
//!   message goes at once. The first ACK, NACK or grant ends speculation and drops what is left of it: from
//!   then on it sends only on credit granted, each packet spending its bytes.
//! - Every request carries the sender's *credit target*: the credit granted so far plus what it still has to
//!   send (new and resent bytes, at most a window), less the credit it holds. It is cumulative and in 256-byte
//!   units, so that a lost request or grant costs nothing but a delay.
//! - Each receiving NIC has one [`CreditPacer`]: it grants up to four packets' worth at a time to the next
//!   connection whose target is above what it was granted, and waits the time those bytes take at 99% of the
//!   link rate before the next grant. An incast's senders together are then granted what the receiver's link
//!   carries, and the switch's queue to it stays short. With no such connection, it grants the idle ones
//!   credit ahead of their asking, up to a window each, so that their next message goes at once.
//! - A sender with no credit and nothing in flight may send one packet without credit after a retransmission
//!   timeout (uet-htsim's RTS), which carries its target; a resent request makes the receiver repeat its
//!   grant (cumulative), so a lost grant costs a timeout, not the connection.
use std::collections::{HashMap, VecDeque};

use crate::wire::uet::CREDIT_UNIT;

/// The 24 bits of a credit target on the wire.
const TARGET_MASK: u32 = 0xFF_FFFF;
/// The pacer's rate against the link's (uet-htsim's).
const PACE_PERCENT: u64 = 99;
/// The least the pacer waits between grants, in bytes at its rate (uet-htsim's 1 KiB).
const MIN_GRANT_GAP: u64 = 1024;
/// The most a grant gives: uet-htsim's four packets of 4 KiB.
pub const GRANT_BYTES: u64 = 16384;

/// A sender's credit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditSender {
    /// The most credit held at once: what it starts speculating with.
    cap: u64,
    credit: i64,
    /// Credit granted so far (bytes).
    granted: u64,
    speculating: bool,
    /// One packet may go without credit (after a timeout with none).
    probe: bool,
}

impl CreditSender {
    /// A sender holding at most `cap` bytes of credit, speculating with all of it.
    pub fn new(cap: u64) -> Self {
        CreditSender {
            cap,
            credit: i64::try_from(cap).unwrap_or(i64::MAX),
            granted: 0,
            speculating: true,
            probe: false,
        }
    }

    /// Whether a packet may go now.
    pub fn may_send(&self) -> bool {
        self.credit > 0 || self.probe
    }

    /// Credit held (negative: spent past it, as a packet may be longer than what was left).
    pub fn credit(&self) -> i64 {
        self.credit
    }

    /// A packet of `len` bytes went.
    pub fn spend(&mut self, len: u64) {
        self.credit = self
            .credit
            .saturating_sub(i64::try_from(len).unwrap_or(i64::MAX));
        self.probe = false;
    }

    /// The receiver answered (an ACK, a NACK or a grant): speculation ends, and the credit left of it.
    pub fn answered(&mut self) {
        if std::mem::replace(&mut self.speculating, false) {
            self.credit = self.credit.min(0);
        }
    }

    /// A grant of `units` (cumulative, [`CREDIT_UNIT`]s, the wire's 32 bits): the credit it adds, up to the cap.
    pub fn granted(&mut self, units: u32) {
        self.answered();
        let have = (self.granted / CREDIT_UNIT) as u32;
        let new = units.wrapping_sub(have);
        if new == 0 || new >= 1 << 31 {
            return; // nothing new, or an old grant overtaken by a later one
        }
        let bytes = u64::from(new) * CREDIT_UNIT;
        self.granted = self.granted.saturating_add(bytes);
        let cap = i64::try_from(self.cap).unwrap_or(i64::MAX);
        self.credit = self
            .credit
            .saturating_add(i64::try_from(bytes).unwrap_or(i64::MAX))
            .min(cap);
    }

    /// Packets timed out: with no credit left, one may go without.
    pub fn timed_out(&mut self) {
        if self.credit <= 0 {
            self.probe = true;
        }
    }

    /// The credit target a request carries when `wanted` bytes are still to send (new and resent), in
    /// [`CREDIT_UNIT`]s, cumulative (the wire keeps its low 24 bits).
    pub fn target(&self, wanted: u64, mss: u64) -> u32 {
        let wanted = wanted.min(self.cap);
        let mut target =
            i128::from(self.granted) + i128::from(wanted) - i128::from(self.credit.max(0));
        if self.speculating && wanted > 0 {
            target = target.max(i128::from(self.granted) + i128::from(mss)); // ask early for a short message
        }
        let target = u64::try_from(target.max(i128::from(self.granted))).unwrap_or(u64::MAX);
        (target.div_ceil(CREDIT_UNIT) as u32) & TARGET_MASK
    }
}

/// Where a connection stands in its receiver's turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// It asked for more than it was granted.
    Asking,
    /// It has what it asked for, and may take credit ahead of asking.
    Idle,
    /// It holds a window of credit ahead of its asking: out of the turn until it asks again.
    Full,
}

/// A receiver's view of one sender's credit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreditReceiver {
    /// The highest credit target heard (bytes, cumulative) and the credit granted so far.
    target: u64,
    given: u64,
}

impl CreditReceiver {
    /// A request asked for `units` (the wire's 24 bits, cumulative): the target if it is higher. A target
    /// more than 2^23 units ahead of what was granted is taken as an old one.
    pub fn asked(&mut self, units: u32) {
        let given = (self.given / CREDIT_UNIT) as u32;
        let ahead = units.wrapping_sub(given) & TARGET_MASK;
        if ahead < 1 << 23 {
            let target = self.given + u64::from(ahead) * CREDIT_UNIT;
            self.target = self.target.max(target);
        }
    }

    /// Credit asked for and not yet granted (bytes).
    pub fn wanted(&self) -> u64 {
        self.target.saturating_sub(self.given)
    }

    /// Grants up to `most` bytes of what is wanted, or with nothing wanted credit ahead of asking up to `ahead`
    /// bytes past the target; what it granted.
    pub fn grant(&mut self, most: u64, ahead: u64) -> u64 {
        let room = match self.wanted() {
            0 => ahead.saturating_sub(self.given - self.target),
            wanted => wanted,
        };
        let granted = most.min(room);
        self.given += granted;
        granted
    }

    /// Where it stands, credit `ahead` of asking allowed.
    pub fn turn(&self, ahead: u64) -> Turn {
        if self.wanted() > 0 {
            Turn::Asking
        } else if self.given - self.target < ahead {
            Turn::Idle
        } else {
            Turn::Full
        }
    }

    /// The credit granted so far, as a grant carries it ([`CREDIT_UNIT`]s, 32 bits).
    pub fn given_units(&self) -> u32 {
        (self.given / CREDIT_UNIT) as u32
    }
}

/// One receiving NIC's grants: the connections (by key) asking for credit in turn, then the idle ones, and
/// when the next grant may go.
///
/// A request asks on every frame, so asking is O(1): each key's place is kept in `place` (asking, idle, or
/// neither), and an entry left in a queue by a key that moved is skipped when it comes up (it carries the
/// number its key had when it joined, `joined`), not searched for and removed.
#[derive(Clone, Debug)]
pub struct CreditPacer {
    rate_bps: u64,
    /// Bytes a grant gives at most.
    per_grant: u64,
    next_at: u64,
    asking: VecDeque<(u32, u64)>,
    idle: VecDeque<(u32, u64)>,
    /// Per key: which turn it is in, and the number of its entry there.
    place: HashMap<u32, (Turn, u64)>,
    joined: u64,
}

impl CreditPacer {
    /// A pacer for a link of `rate_bps` granting at most `per_grant` bytes at a time.
    pub fn new(rate_bps: u64, per_grant: u64) -> Self {
        CreditPacer {
            rate_bps: rate_bps.max(1),
            per_grant: per_grant.max(CREDIT_UNIT),
            next_at: 0,
            asking: VecDeque::new(),
            idle: VecDeque::new(),
            place: HashMap::new(),
            joined: 0,
        }
    }

    /// Bytes a grant gives at most.
    pub fn per_grant(&self) -> u64 {
        self.per_grant
    }

    /// Connection `key` asks for credit: it joins the asking turn unless it is in it (leaving the idle one).
    pub fn ask(&mut self, key: u32) {
        if !matches!(self.place.get(&key), Some((Turn::Asking, _))) {
            self.join(key, Turn::Asking);
        }
    }

    /// When the next grant is due, if a connection waits for one.
    pub fn next_deadline(&self) -> Option<u64> {
        (!self.place.is_empty()).then_some(self.next_at)
    }

    /// The connection whose grant is due at `now` (an asking one before an idle one), taken out of the turn;
    /// the caller grants it and reports with [`Self::granted`].
    pub fn due(&mut self, now: u64) -> Option<u32> {
        if now < self.next_at {
            return None;
        }
        for turn in [Turn::Asking, Turn::Idle] {
            let queue = if turn == Turn::Asking {
                &mut self.asking
            } else {
                &mut self.idle
            };
            while let Some((key, number)) = queue.pop_front() {
                if self.place.get(&key) == Some(&(turn, number)) {
                    self.place.remove(&key);
                    return Some(key);
                }
            }
        }
        None
    }

    /// `key` was granted `bytes` at `now`, and stands at `turn`: the next grant waits for the bytes to cross
    /// the link, and `key` goes to the back of its turn.
    pub fn granted(&mut self, now: u64, key: u32, bytes: u64, turn: Turn) {
        let bits = u128::from(bytes.max(MIN_GRANT_GAP)) * 8 * 1_000_000_000 * 100;
        let gap = bits.div_ceil(u128::from(self.rate_bps) * u128::from(PACE_PERCENT));
        self.next_at = now.saturating_add(u64::try_from(gap).unwrap_or(u64::MAX));
        match turn {
            Turn::Asking => self.ask(key),
            Turn::Idle if !self.place.contains_key(&key) => self.join(key, Turn::Idle),
            Turn::Idle | Turn::Full => {}
        }
    }

    /// `key` to the back of `turn`'s queue; the entries its moves left behind are dropped once they outnumber
    /// the keys (so the queues stay within twice the connections).
    fn join(&mut self, key: u32, turn: Turn) {
        self.joined += 1;
        self.place.insert(key, (turn, self.joined));
        let queue = if turn == Turn::Asking {
            &mut self.asking
        } else {
            &mut self.idle
        };
        queue.push_back((key, self.joined));
        if self.asking.len() + self.idle.len() > 2 * self.place.len() + 16 {
            let place = &self.place;
            self.asking
                .retain(|&(k, n)| place.get(&k) == Some(&(Turn::Asking, n)));
            self.idle
                .retain(|&(k, n)| place.get(&k) == Some(&(Turn::Idle, n)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asking is O(1) per frame: a key that moves between the turns leaves its old entry to be skipped, and
    /// the queues stay within twice the keys however often the keys move.
    #[test]
    fn the_pacer_serves_asking_before_idle_and_skips_moved_keys() {
        let mut pacer = CreditPacer::new(1_000_000_000, 4096);
        pacer.granted(0, 1, 0, Turn::Idle);
        pacer.granted(0, 2, 0, Turn::Idle);
        pacer.ask(2); // 2 leaves the idle turn for the asking one
        pacer.ask(2); // already asking: nothing
        let at = pacer.next_deadline().unwrap();
        assert_eq!(pacer.due(at), Some(2));
        assert_eq!(pacer.due(at), Some(1));
        assert_eq!((pacer.due(at), pacer.next_deadline()), (None, None));
        for _ in 0..10_000 {
            pacer.granted(0, 7, 0, Turn::Idle);
            pacer.ask(7);
            let at = pacer.next_deadline().unwrap();
            assert_eq!(pacer.due(at), Some(7));
        }
        pacer.granted(0, 3, 0, Turn::Idle);
        for _ in 0..10_000 {
            pacer.ask(8);
            pacer.granted(0, 8, 0, Turn::Idle); // still asking: stays in the asking turn
            let at = pacer.next_deadline().unwrap();
            assert_eq!(pacer.due(at), Some(8));
            pacer.granted(0, 8, 0, Turn::Idle);
            pacer.ask(8);
        }
        assert!(pacer.asking.len() + pacer.idle.len() <= 2 * pacer.place.len() + 17);
    }

    #[test]
    fn a_sender_speculates_then_sends_only_on_credit() {
        let mut sender = CreditSender::new(8192);
        assert!(sender.may_send());
        sender.spend(4096);
        assert_eq!(sender.target(16384, 4096), 4096 / 256); // 8192 wanted (the cap), 4096 of it held
        sender.answered();
        assert!(!sender.may_send(), "what speculation left is dropped");
        sender.granted(16); // 4096 bytes
        assert_eq!(sender.credit(), 4096);
        sender.granted(16); // the same grant again: nothing new
        sender.granted(8); // an older one overtaken: nothing
        assert_eq!(sender.credit(), 4096);
        sender.granted(1000); // capped
        assert_eq!(sender.credit(), 8192);
        sender.spend(8192);
        sender.spend(100);
        assert!(!sender.may_send());
        sender.timed_out();
        assert!(sender.may_send(), "one probe after a timeout");
        sender.spend(100);
        assert!(!sender.may_send());
    }

    #[test]
    fn a_receiver_grants_what_was_asked_once_and_ignores_old_targets() {
        let mut receiver = CreditReceiver::default();
        receiver.asked(64);
        assert_eq!(receiver.wanted(), 64 * 256);
        assert_eq!(receiver.grant(4096, 0), 4096);
        assert_eq!(receiver.turn(0), Turn::Asking);
        receiver.asked(10); // an old target overtaken by a later one
        assert_eq!(receiver.wanted(), 48 * 256);
        assert_eq!(receiver.grant(1 << 20, 0), 48 * 256);
        assert_eq!((receiver.wanted(), receiver.given_units()), (0, 64));
        assert_eq!(receiver.turn(0), Turn::Full);
        receiver.asked(64 + (1 << 23) + 5); // too far ahead to be new
        assert_eq!(receiver.wanted(), 0);
        receiver.asked((64 + 3) | 1 << 24); // the wire keeps 24 bits
        assert_eq!(receiver.wanted(), 3 * 256);
        assert_eq!(receiver.grant(1 << 20, 1024), 3 * 256);
        // nothing asked: credit ahead of asking, up to 1024 bytes past the target
        assert_eq!(receiver.turn(1024), Turn::Idle);
        assert_eq!(receiver.grant(512, 1024), 512);
        assert_eq!(receiver.grant(4096, 1024), 512);
        assert_eq!(
            (receiver.turn(1024), receiver.grant(4096, 1024)),
            (Turn::Full, 0)
        );
    }

    #[test]
    fn the_pacer_grants_in_turn_at_the_link_rate() {
        let mut pacer = CreditPacer::new(8_000_000_000, 16384); // 1 byte/ns
        pacer.ask(1);
        pacer.ask(2);
        pacer.ask(1);
        assert_eq!(pacer.next_deadline(), Some(0));
        assert_eq!(pacer.due(0), Some(1));
        pacer.granted(0, 1, 16384, Turn::Idle); // 1 has what it asked: idle, after the asking ones
        let next = pacer.next_deadline().unwrap();
        assert_eq!(next, (16384u64 * 100).div_ceil(99)); // 16,384 ns at 99%
        assert_eq!(pacer.due(next - 1), None);
        assert_eq!(pacer.due(next), Some(2));
        pacer.granted(next, 2, 0, Turn::Full); // a short gap, out of the turn
        assert_eq!(
            pacer.next_deadline(),
            Some(next + (1024u64 * 100).div_ceil(99))
        );
        assert_eq!(pacer.due(u64::MAX), Some(1));
        pacer.granted(u64::MAX, 1, 1024, Turn::Full);
        assert_eq!(pacer.due(u64::MAX), None);
        assert_eq!(pacer.next_deadline(), None);
    }
}
