//! A collective's ranks in simulated time: the state of each rank executing its plan,
//! kept small enough for thousands of ranks.
//!
//! A rank executes its steps of [`Plans`] (computed when needed, never stored). What it remembers of an
//! iteration is what the iteration's summary needs (`sim::summary`): per peer, the last arrival and the QP's
//! counters at the previous iteration's end; and which arrivals came, one bit each, so that a step's
//! completion is an O(1) count. The rank process's full report (every arrival and completion) is kept only
//! when asked ([`RankLog`]): the differential test of the summary against the coordinator's `summarize`.
//! The ranks are driven by `sim::fabric`, which owns the hosts they post on.
use crate::sim::plans::Plans;
use crate::sim::program::Schedule;

/// What a rank exchanges with one peer, and what it saw of it in the current iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    pub rank: u32,
    /// WRITEs with immediate the peer sends per iteration: the receives to post on its QP.
    pub receives: u32,
    /// Bytes this rank WRITEs to the peer per iteration.
    pub bytes: u64,
    /// The last arrival from the peer in this iteration, and the rank's count of arrivals when the first
    /// from it came (the coordinator's dict keeps peers in that order, which breaks ties).
    pub last: Option<(u64, u32)>,
    /// Its QP's (retransmitted packets, timeouts) when the previous iteration ended.
    pub previous: (u64, u64),
    /// Their growth over the iteration that just ended (set by the summary).
    pub delta: (u64, u64),
}

/// The rank process's report of an iteration (kept when the collective runs with its log).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankReport {
    pub iteration: u32,
    /// When its first step's WRITEs were posted (none if its first step sends nothing).
    pub released_ns: Option<u64>,
    /// (source rank, step, time stamp), in order of arrival.
    pub arrivals: Vec<(u32, u32, u64)>,
    /// (peer, work request id, time stamp) of each WRITE's completion.
    pub sends: Vec<(u32, u64, u64)>,
    /// Per peer: (peer, retransmitted packets, timeouts) of its QP, over the run so far.
    pub counters: Vec<(u32, u64, u64)>,
    /// Whether the reduction came out right (true without one).
    pub verified: bool,
}

/// Every arrival and send completion of an iteration, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankLog {
    pub arrivals: Vec<(u32, u32, u64)>,
    pub sends: Vec<(u32, u64, u64)>,
}

/// What an arrival was to the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Expected, and it completes slice `j` of the step that slice is at.
    CompletesSlice(u32),
    /// Expected (this or a later step).
    Expected,
    /// Not in the plan, or a second one from the same peer for the same step: the rank fails.
    Unexpected,
}

/// Where one slice of a rank's steps is (`rank.py`'s `cursor`).
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    /// The step whose slice is posted and whose arrivals it waits for.
    step: u32,
    /// Those arrivals so far.
    arrived: u32,
}

/// One rank's state during an iteration.
#[derive(Clone, Debug, Default)]
pub struct SimRank {
    pub rank: u32,
    pub iteration: u32,
    pub start: u64,
    /// Per slice (`Plans::slices`): its step, pipelined apart from the others'.
    cursors: Vec<Cursor>,
    /// One bit per arrival the iteration expects, at its slot ([`Plans::slot`]): whether it came.
    arrived: Vec<u64>,
    /// Arrivals in this iteration, and in all that it expects.
    pub arrivals: u32,
    pub receives: usize,
    pub outstanding: u64,
    pub done: bool,
    pub failure: Option<String>,
    /// Its peers, ascending (one QP each).
    pub peers: Vec<Peer>,
    /// The peers' ranks, in the same order: what an arrival searches (4 bytes a peer, where a search of
    /// `peers` took a cache miss a probe in an all-to-all).
    peer_ranks: Vec<u32>,
    /// The full report's data, when kept.
    pub log: Option<RankLog>,
}

impl SimRank {
    /// Rank `rank` of `plans`, with its log when `log`.
    pub fn new<S: Schedule + ?Sized>(plans: &S, rank: u32, log: bool) -> SimRank {
        let peers: Vec<Peer> = plans
            .peer_plans(rank)
            .into_iter()
            .map(|p| Peer {
                rank: p.peer,
                receives: p.receives,
                bytes: p.bytes,
                ..Peer::default()
            })
            .collect();
        let receives: usize = peers.iter().map(|p| p.receives as usize).sum();
        SimRank {
            rank,
            cursors: vec![Cursor::default(); plans.slices(rank) as usize],
            receives,
            arrived: vec![0; receives.div_ceil(64)],
            peer_ranks: peers.iter().map(|p| p.rank).collect(),
            peers,
            log: log.then(RankLog::default),
            ..SimRank::default()
        }
    }

    /// The QP number that talks to `peer` (one QP per peer).
    pub fn qpn(peer: u32) -> u32 {
        peer.saturating_add(1)
    }

    /// The peer `rank`, if it is one.
    pub fn peer(&self, rank: u32) -> Option<&Peer> {
        self.peers.get(self.peer_at(rank)?)
    }

    /// Where the peer `rank` is in `peers`, if it is one.
    fn peer_at(&self, rank: u32) -> Option<usize> {
        self.peer_ranks.binary_search(&rank).ok()
    }

    /// Iteration `iteration` begins, its first step at `start`.
    pub fn reset(&mut self, iteration: u32, start: u64) {
        self.iteration = iteration;
        self.start = start;
        self.arrived.fill(0);
        self.arrivals = 0;
        for peer in &mut self.peers {
            peer.last = None;
        }
        if let Some(log) = &mut self.log {
            log.arrivals.clear();
            log.sends.clear();
        }
        self.outstanding = 0;
        self.cursors.fill(Cursor::default());
        self.done = false;
        self.failure = None;
    }

    /// The immediate's upper half: the iteration.
    pub fn tag(&self) -> u32 {
        (self.iteration & 0xFFFF) << 16
    }

    /// How many slices each send goes in.
    pub fn slices(&self) -> u32 {
        self.cursors.len() as u32
    }

    /// The step slice `j` is at (past the last when it is done).
    pub fn step_of(&self, j: u32) -> u32 {
        self.cursors.get(j as usize).map_or(u32::MAX, |c| c.step)
    }

    /// Whether every slice is past the last step.
    pub fn finished<S: Schedule + ?Sized>(&self, plans: &S) -> bool {
        let steps = plans.steps(self.rank);
        self.cursors.iter().all(|c| c.step >= steps)
    }

    /// Records an arrival from `src` for slice number `number` (step x slices + slice) at `stamp`.
    pub fn arrive<S: Schedule + ?Sized>(
        &mut self,
        plans: &S,
        src: u32,
        number: u32,
        stamp: u64,
    ) -> Arrival {
        if let Some(log) = &mut self.log {
            log.arrivals.push((src, number, stamp));
        }
        let fresh = plans
            .slot(self.rank, number, src)
            .filter(|&slot| !self.bit(slot))
            .and_then(|slot| Some((slot, self.peer_at(src)?)));
        let Some((slot, at)) = fresh else {
            self.failure = Some(format!(
                "rank {}: an arrival from {src} for slice {number} it does not expect",
                self.rank
            ));
            return Arrival::Unexpected;
        };
        if let Some(word) = self.arrived.get_mut(slot as usize / 64) {
            *word |= 1 << (slot % 64);
        }
        let peer = &mut self.peers[at];
        peer.last = Some(match peer.last {
            Some((last, order)) => (last.max(stamp), order),
            None => (stamp, self.arrivals),
        });
        self.arrivals += 1;
        let slices = self.slices().max(1);
        let j = number % slices;
        match self.cursors.get_mut(j as usize) {
            Some(cursor) if cursor.step == number / slices => cursor.arrived += 1,
            _ => return Arrival::Expected,
        }
        if self.slice_complete(plans, j) {
            Arrival::CompletesSlice(j)
        } else {
            Arrival::Expected
        }
    }

    fn bit(&self, slot: u32) -> bool {
        self.arrived
            .get(slot as usize / 64)
            .is_some_and(|word| word & (1 << (slot % 64)) != 0)
    }

    /// Whether slice `j`'s expected arrivals at its step are all in (false past the last step).
    pub fn slice_complete<S: Schedule + ?Sized>(&self, plans: &S, j: u32) -> bool {
        let Some(cursor) = self.cursors.get(j as usize) else {
            return false;
        };
        let number = cursor.step.saturating_mul(self.slices()).saturating_add(j);
        let (_, count) = plans.slots(self.rank, number);
        cursor.step < plans.steps(self.rank) && cursor.arrived == count
    }

    /// Slice `j` on to its next step, with the arrivals that came for it ahead of time.
    pub fn next_step<S: Schedule + ?Sized>(&mut self, plans: &S, j: u32) {
        let slices = self.slices();
        let Some(step) = self
            .cursors
            .get(j as usize)
            .map(|c| c.step.saturating_add(1))
        else {
            return;
        };
        let (first, count) = plans.slots(self.rank, step.saturating_mul(slices).saturating_add(j));
        let arrived = (first..first.saturating_add(count))
            .filter(|&slot| self.bit(slot))
            .count() as u32;
        if let Some(cursor) = self.cursors.get_mut(j as usize) {
            *cursor = Cursor { step, arrived };
        }
    }

    /// A WRITE to `peer` completed.
    pub fn sent(&mut self, peer: u32, wr_id: u64, stamp: u64) {
        self.outstanding = self.outstanding.saturating_sub(1);
        if let Some(log) = &mut self.log {
            log.sends.push((peer, wr_id, stamp));
        }
    }
}

/// Adds `count` float32s of `memory` at `from` into those at `to` (little-endian, as numpy's on x86).
pub fn add_f32(memory: &mut [u8], to: usize, from: usize, count: usize) {
    let bytes = count.saturating_mul(4);
    let (to_end, from_end) = (to.saturating_add(bytes), from.saturating_add(bytes));
    // The two ranges apart and within the memory (a reduction's data and staging): one pass over both.
    let apart = if to_end <= from && from_end <= memory.len() {
        let (left, right) = memory.split_at_mut(from);
        Some((&mut left[to..to_end], &right[..bytes]))
    } else if from_end <= to && to_end <= memory.len() {
        let (left, right) = memory.split_at_mut(to);
        Some((&mut right[..bytes], &left[from..from_end]))
    } else {
        None
    };
    if let Some((target, source)) = apart {
        for (a, b) in target.chunks_exact_mut(4).zip(source.chunks_exact(4)) {
            let x = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
            let y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            a.copy_from_slice(&(x + y).to_le_bytes());
        }
        return;
    }
    for i in 0..count {
        let (a, b) = (to + 4 * i, from + 4 * i);
        let (Some(x), Some(y)) = (read_f32(memory, a), read_f32(memory, b)) else {
            return;
        };
        if let Some(slot) = memory.get_mut(a..a + 4) {
            slot.copy_from_slice(&(x + y).to_le_bytes());
        }
    }
}

/// The float32 at `at`, if the memory holds one there.
pub fn read_f32(memory: &[u8], at: usize) -> Option<f32> {
    let bytes: [u8; 4] = memory.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(f32::from_le_bytes(bytes))
}

/// Every float32 of rank `rank`'s data region before iteration `iteration`: (rank + 1) x (iteration + 1).
pub fn reduce_input(rank: u32, iteration: u32) -> f32 {
    ((u64::from(rank) + 1) * (u64::from(iteration) + 1)) as f32
}

/// Every float32 of rank `rank`'s data region after iteration `iteration`: its group's inputs summed.
pub fn reduce_result(plans: &Plans, rank: u32, iteration: u32) -> f32 {
    let sum: u64 = plans.reduce_group(rank).map(|r| u64::from(r) + 1).sum();
    ((u64::from(iteration) + 1) * sum) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_completes_when_its_arrivals_are_in_even_if_they_came_early() {
        let plans = Plans::new("allgather", 3, 12, None).unwrap(); // rank 1 hears from rank 0 each step
        let mut rank = SimRank::new(&plans, 1, true);
        rank.reset(0, 100);
        assert_eq!(rank.arrive(&plans, 0, 1, 7), Arrival::Expected); // step 1's, ahead of time
        assert!(!rank.slice_complete(&plans, 0));
        assert_eq!(rank.arrive(&plans, 0, 0, 5), Arrival::CompletesSlice(0));
        rank.next_step(&plans, 0);
        assert!(rank.slice_complete(&plans, 0)); // step 1's arrival was already in
        rank.next_step(&plans, 0);
        assert!(!rank.slice_complete(&plans, 0)); // past the last step
        assert!(rank.finished(&plans));
        assert_eq!(rank.peer(0).unwrap().last, Some((7, 0)));
        assert_eq!(rank.arrivals, 2);
        assert_eq!(
            rank.log.as_ref().unwrap().arrivals,
            vec![(0, 1, 7), (0, 0, 5)]
        );
    }

    #[test]
    fn a_repeat_or_a_stranger_fails_the_rank() {
        let plans = Plans::new("allgather", 3, 12, None).unwrap();
        let mut rank = SimRank::new(&plans, 1, false);
        rank.reset(0, 0);
        assert_eq!(rank.arrive(&plans, 0, 0, 5), Arrival::CompletesSlice(0));
        assert_eq!(rank.arrive(&plans, 0, 0, 6), Arrival::Unexpected);
        assert!(rank.failure.is_some());
        rank.reset(1, 0);
        assert_eq!(rank.arrive(&plans, 2, 0, 5), Arrival::Unexpected); // rank 2 is not its sender
        assert_eq!(rank.arrive(&plans, 0, 9, 5), Arrival::Unexpected); // no step 9
    }

    #[test]
    fn slices_advance_apart() {
        // 3 ranks of 3 x 64 KiB: chunks of 64 KiB in 2 slices of 32 KiB; rank 1 hears from rank 0.
        let plans = Plans::new("allgather", 3, 3 << 16, None).unwrap();
        let mut rank = SimRank::new(&plans, 1, false);
        rank.reset(0, 0);
        assert_eq!(rank.slices(), 2);
        assert_eq!(rank.arrive(&plans, 0, 1, 1), Arrival::CompletesSlice(1)); // step 0, slice 1
        rank.next_step(&plans, 1);
        assert_eq!((rank.step_of(0), rank.step_of(1)), (0, 1));
        assert_eq!(rank.arrive(&plans, 0, 2, 2), Arrival::Expected); // step 1, slice 0: slice 0 is at step 0
        assert_eq!(rank.arrive(&plans, 0, 0, 3), Arrival::CompletesSlice(0));
        rank.next_step(&plans, 0);
        assert!(rank.slice_complete(&plans, 0)); // its step 1 arrival came ahead
        assert_eq!(rank.arrive(&plans, 0, 4, 4), Arrival::Unexpected); // an all-gather of 3 has 2 steps
        assert!(!rank.finished(&plans));
    }

    #[test]
    fn float_sums_in_place() {
        let mut memory = Vec::new();
        for value in [1.5f32, 2.0, 0.25, 4.0] {
            memory.extend_from_slice(&value.to_le_bytes());
        }
        add_f32(&mut memory, 0, 8, 2);
        assert_eq!(read_f32(&memory, 0), Some(1.75));
        assert_eq!(read_f32(&memory, 4), Some(6.0));
        add_f32(&mut memory, 12, 14, 5); // out of bounds: stops, never panics
        add_f32(&mut memory, 4, 0, 2); // overlapping: float by float, in order
        assert_eq!(read_f32(&memory, 4), Some(7.75));
        assert_eq!(read_f32(&memory, 8), Some(7.75 + 0.25));
        add_f32(&mut memory, 8, 0, 1); // before it
        assert_eq!(read_f32(&memory, 8), Some(8.0 + 1.75));
    }
}
