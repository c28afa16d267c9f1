//! The receiver's pause state of 802.1Qbb PFC, sans-I/O.
//!
//! Shared by the switch (a paused egress port) and the host (closing the host NIC's pause gates). A new frame
//! for a priority replaces its running timer, as the standard says; 0 quanta (XON) resumes at once.
use crate::wire::pfc::{pause_ns, PfcQuanta, PRIORITIES};

/// A set of priorities (bit p for priority p): what a PFC frame paused or resumed, without a heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PrioritySet(u8);

impl PrioritySet {
    /// No priority.
    pub const EMPTY: PrioritySet = PrioritySet(0);

    /// The set with `priority` added (`priority` below [`PRIORITIES`]).
    pub fn with(self, priority: usize) -> PrioritySet {
        PrioritySet(self.0 | 1u8.checked_shl(priority as u32).unwrap_or(0))
    }

    /// Whether `priority` is in the set.
    pub fn contains(self, priority: usize) -> bool {
        priority < PRIORITIES && self.0 >> priority & 1 == 1
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The priorities in ascending order, as the Python model lists them for a decoded frame.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..PRIORITIES).filter(move |&priority| self.contains(priority))
    }
}

/// Which priorities a received PFC holds on one port, and until when.
///
/// `paused_ns` accumulates, per priority, how long it was paused (for telemetry); intervals still running are
/// counted up to `now` by [`PauseState::paused_time`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PauseState {
    /// The port's rate: the length of a quantum (512 bit times).
    pub rate_bps: u64,
    /// When each priority's pause ends; `None` when it is not paused.
    pub until: [Option<u64>; PRIORITIES],
    /// When each priority's current pause began (meaningful while it is paused).
    pub since: [u64; PRIORITIES],
    /// Closed pause intervals per priority, in ns.
    pub paused_ns: [u64; PRIORITIES],
    /// PFC frames applied.
    pub frames: u64,
}

impl PauseState {
    /// A port of `rate_bps` with nothing paused.
    pub fn new(rate_bps: u64) -> PauseState {
        PauseState {
            rate_bps,
            until: [None; PRIORITIES],
            since: [0; PRIORITIES],
            paused_ns: [0; PRIORITIES],
            frames: 0,
        }
    }

    /// Apply a received frame; returns the (newly paused, resumed) priorities.
    pub fn on_pfc(&mut self, now: u64, quanta: &PfcQuanta) -> (PrioritySet, PrioritySet) {
        self.frames += 1;
        let (mut paused, mut resumed) = (PrioritySet::EMPTY, PrioritySet::EMPTY);
        for (priority, value) in quanta.iter().enumerate() {
            let Some(value) = *value else { continue };
            let was = self.until[priority].is_some();
            if value != 0 {
                let hold = pause_ns(u64::from(value), self.rate_bps);
                self.until[priority] = Some(now.saturating_add(hold));
                if !was {
                    self.since[priority] = now;
                    paused = paused.with(priority);
                }
            } else if was {
                self.resume(priority, now);
                resumed = resumed.with(priority);
            }
        }
        (paused, resumed)
    }

    /// Whether `priority` is held (a priority out of range never is).
    pub fn is_paused(&self, priority: usize) -> bool {
        matches!(self.until.get(priority), Some(Some(_)))
    }

    /// When the first running pause ends, if any.
    pub fn next_expiry(&self) -> Option<u64> {
        self.until.iter().flatten().copied().min()
    }

    /// Resume every priority whose pause has run out by `now`; each counts as paused until its expiry.
    pub fn expire(&mut self, now: u64) -> PrioritySet {
        let mut resumed = PrioritySet::EMPTY;
        for priority in 0..PRIORITIES {
            if let Some(until) = self.until[priority] {
                if until <= now {
                    self.resume(priority, until);
                    resumed = resumed.with(priority);
                }
            }
        }
        resumed
    }

    /// End `priority`'s pause at `now` without a frame (a PFC watchdog takes PFC away from it).
    pub fn release(&mut self, now: u64, priority: usize) {
        if self.is_paused(priority) {
            self.resume(priority, now);
        }
    }

    /// How long `priority` has been paused in all, the running interval counted up to `now`.
    pub fn paused_time(&self, priority: usize, now: u64) -> u64 {
        let Some(closed) = self.paused_ns.get(priority) else {
            return 0;
        };
        let running = if self.is_paused(priority) {
            now.saturating_sub(self.since[priority])
        } else {
            0
        };
        closed.saturating_add(running)
    }

    fn resume(&mut self, priority: usize, at: u64) {
        let interval = at.saturating_sub(self.since[priority]);
        self.paused_ns[priority] = self.paused_ns[priority].saturating_add(interval);
        self.until[priority] = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pfc::decode_pfc;
    use proptest::prelude::*;

    const RATE: u64 = 1_000_000_000; // 1 quantum = 512 ns

    fn quanta(entries: &[(usize, u16)]) -> PfcQuanta {
        let mut out = [None; PRIORITIES];
        for &(priority, value) in entries {
            out[priority] = Some(value);
        }
        out
    }

    #[test]
    fn pauses_listed_priorities_and_xon_resumes_at_once() {
        let mut state = PauseState::new(RATE);
        let (paused, resumed) = state.on_pfc(1000, &quanta(&[(3, 10), (5, 1)]));
        assert_eq!(paused.iter().collect::<Vec<_>>(), [3, 5]);
        assert!(resumed.is_empty());
        assert_eq!(state.until[3], Some(1000 + 10 * 512));
        let (paused, resumed) = state.on_pfc(2000, &quanta(&[(3, 0), (4, 2)]));
        assert_eq!(
            (paused, resumed),
            (PrioritySet::EMPTY.with(4), PrioritySet::EMPTY.with(3))
        );
        assert_eq!(state.paused_time(3, 10_000), 1000);
        assert_eq!(state.frames, 2);
    }

    #[test]
    fn expiry_closes_the_interval_at_the_pause_end() {
        let mut state = PauseState::new(RATE);
        state.on_pfc(1000, &quanta(&[(3, 10)]));
        assert_eq!(state.next_expiry(), Some(6120));
        assert!(state.expire(6119).is_empty());
        assert_eq!(state.expire(7000), PrioritySet::EMPTY.with(3));
        assert_eq!(state.paused_time(3, 99_000), 5120);
        assert_eq!(state.next_expiry(), None);
    }

    proptest! {
        /// Any frame bytes, decoded or not, then applied at any time: no panic, and the paused time never
        /// shrinks as time goes on.
        #[test]
        fn no_panic_on_any_frame(frames in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..40), any::<u64>(), any::<u64>()), 0..20)) {
            let mut state = PauseState::new(1);
            let mut now = 0u64;
            for (bytes, dt, rate) in frames {
                now = now.saturating_add(dt % 1_000_000_000_000);
                if let Some(q) = decode_pfc(&bytes) {
                    state.on_pfc(now, &q);
                }
                state.rate_bps = rate;
                let before: Vec<u64> = (0..PRIORITIES).map(|p| state.paused_time(p, now)).collect();
                state.expire(now);
                let after: Vec<u64> = (0..PRIORITIES).map(|p| state.paused_time(p, now)).collect();
                prop_assert!(before.iter().zip(&after).all(|(b, a)| a <= b));
                prop_assert!(state.next_expiry().is_none_or(|t| t > now));
            }
        }
    }
}
