//! A collective's plans and ranks in simulated time (the data of `emulator/collectives/sim_ranks.py`).
//!
//! The plans come from Python's `emulator.collectives.algorithms` as plain data: per rank its regions and its
//! steps (the WRITEs with immediate it sends, the arrivals it expects, the float32 reduction it does). What a
//! rank reports for an iteration is what the rank process reports, so the coordinator's own `summarize`
//! computes the iteration's metrics. The ranks are driven by `sim::fabric`, which owns the hosts they post on.
use std::collections::HashMap;

/// One WRITE with immediate: `length` bytes at `offset` of my data region into `dst`'s region (its staging
/// region when `staging`) at `dst_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendPlan {
    pub dst: u32,
    pub offset: u64,
    pub length: u64,
    pub staging: bool,
    pub dst_offset: u64,
}

/// One step: its sends, the ranks it expects a WRITE with immediate from, and the reduction
/// `(staging offset, data offset, length)` it does once they arrived (data += staging, float32).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPlan {
    pub sends: Vec<SendPlan>,
    pub receives: Vec<u32>,
    pub reduce: Option<(u64, u64, u64)>,
}

/// One rank's plan: its regions (data, then staging), its steps, the ranks whose inputs it sums.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankPlan {
    pub data_bytes: u64,
    pub staging_bytes: u64,
    pub steps: Vec<StepPlan>,
    pub reduce_group: Vec<u32>,
}

impl RankPlan {
    /// Every rank it talks to, ascending (the order its QPs are made in).
    pub fn peers(&self) -> Vec<u32> {
        let mut peers: Vec<u32> = self
            .steps
            .iter()
            .flat_map(|step| {
                step.sends
                    .iter()
                    .map(|send| send.dst)
                    .chain(step.receives.iter().copied())
            })
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }

    /// How many WRITEs with immediate each peer sends per iteration, in order of first appearance: the
    /// receives to post.
    pub fn receives_by_peer(&self) -> Vec<(u32, u32)> {
        let mut counts: Vec<(u32, u32)> = Vec::new();
        for src in self.steps.iter().flat_map(|step| step.receives.iter()) {
            match counts.iter_mut().find(|(peer, _)| peer == src) {
                Some((_, count)) => *count += 1,
                None => counts.push((*src, 1)),
            }
        }
        counts
    }

    /// Arrivals it expects per iteration.
    pub fn receive_count(&self) -> usize {
        self.steps.iter().map(|step| step.receives.len()).sum()
    }

    /// Every float32 of the data region before iteration `iteration`: (rank + 1) x (iteration + 1).
    pub fn reduce_input(rank: u32, iteration: u32) -> f32 {
        ((u64::from(rank) + 1) * (u64::from(iteration) + 1)) as f32
    }

    /// Every float32 of the data region after iteration `iteration`: the group's inputs summed.
    pub fn reduce_result(&self, iteration: u32) -> f32 {
        let sum: u64 = self
            .reduce_group
            .iter()
            .map(|&rank| u64::from(rank) + 1)
            .sum();
        ((u64::from(iteration) + 1) * sum) as f32
    }
}

/// What a rank reports for an iteration (the rank process's report).
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

/// One rank's state during an iteration.
#[derive(Clone, Debug, Default)]
pub struct SimRank {
    pub plan: RankPlan,
    pub iteration: u32,
    pub start: u64,
    pub arrived: Vec<(u32, u32, u64)>,
    /// (source, step) -> its index in `arrived`.
    pub arrived_at: HashMap<(u32, u32), usize>,
    pub sends: Vec<(u32, u64, u64)>,
    pub outstanding: u64,
    pub step: usize,
    pub done: bool,
    pub failure: Option<String>,
}

impl SimRank {
    /// A rank that executes `plan`.
    pub fn new(plan: RankPlan) -> SimRank {
        SimRank {
            plan,
            ..SimRank::default()
        }
    }

    /// The QP number that talks to `peer` (one QP per peer).
    pub fn qpn(peer: u32) -> u32 {
        peer.saturating_add(1)
    }

    /// Back to the start of an iteration.
    pub fn reset(&mut self) {
        self.arrived.clear();
        self.arrived_at.clear();
        self.sends.clear();
        self.outstanding = 0;
        self.step = 0;
        self.done = false;
        self.failure = None;
    }

    /// The immediate's upper half: the iteration.
    pub fn tag(&self) -> u32 {
        (self.iteration & 0xFFFF) << 16
    }

    /// Records an arrival from `src` for `step` at `stamp` (a repeat keeps its place, as a dict's key does).
    pub fn arrive(&mut self, src: u32, step: u32, stamp: u64) {
        match self.arrived_at.get(&(src, step)) {
            Some(&at) => {
                if let Some(entry) = self.arrived.get_mut(at) {
                    entry.2 = stamp;
                }
            }
            None => {
                self.arrived_at.insert((src, step), self.arrived.len());
                self.arrived.push((src, step, stamp));
            }
        }
    }

    /// Whether the current step's expected arrivals are all in.
    pub fn step_complete(&self) -> bool {
        let step = self.step as u32;
        self.plan.steps.get(self.step).is_some_and(|plan| {
            plan.receives
                .iter()
                .all(|&src| self.arrived_at.contains_key(&(src, step)))
        })
    }
}

/// Adds `count` float32s of `memory` at `from` into those at `to` (little-endian, as numpy's on x86).
pub fn add_f32(memory: &mut [u8], to: usize, from: usize, count: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receives_by_peer_keeps_first_appearance_order() {
        let plan = RankPlan {
            steps: vec![
                StepPlan {
                    receives: vec![3, 1],
                    ..StepPlan::default()
                },
                StepPlan {
                    receives: vec![1],
                    ..StepPlan::default()
                },
            ],
            ..RankPlan::default()
        };
        assert_eq!(plan.receives_by_peer(), vec![(3, 1), (1, 2)]);
        assert_eq!(plan.peers(), vec![1, 3]);
        assert_eq!(plan.receive_count(), 3);
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
    }
}
