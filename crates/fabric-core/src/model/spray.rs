//! Which path a UET packet takes: the entropy value (EV) a sender puts in each packet, sans-I/O.
//!
//! Switches hash the EV with the rest of the flow's headers (it rides in the UDP source port), so one flow's
//! packets spread over as many equal-cost paths as it uses EVs. UET leaves the choice to the sender; this
//! module has three policies (the UET 1.0 overview, arXiv 2508.08906, and REPS, arXiv 2407.21625):
//!
//! - [`SprayPolicy::Flow`]: one EV for the whole connection, as RoCE's per-flow ECMP (the baseline);
//! - [`SprayPolicy::Oblivious`]: a fresh EV for every packet, drawn at random from the connection's EVs;
//! - [`SprayPolicy::Reps`]: recycled entropy. An EV whose ACK came back without an ECN mark goes into a small
//!   ring and is used again; a marked, trimmed or timed-out EV is forgotten. With nothing to recycle a fresh
//!   random EV explores. The ring needs a few bytes per connection and steers off a congested or failed path
//!   within a round trip.
use std::collections::VecDeque;

use crate::model::rng::CpythonRandom;

/// EVs a REPS sender remembers (REPS keeps a ring of 8 in its paper's evaluation).
pub const REPS_RING: usize = 8;

/// How a sender chooses its packets' EVs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SprayPolicy {
    Flow,
    Oblivious,
    Reps,
}

impl SprayPolicy {
    /// Every policy with its name in experiment files.
    pub const ALL: [(&'static str, SprayPolicy); 3] = [
        ("flow", SprayPolicy::Flow),
        ("oblivious", SprayPolicy::Oblivious),
        ("reps", SprayPolicy::Reps),
    ];

    /// The policy called `name`, if any.
    pub fn parse(name: &str) -> Option<SprayPolicy> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, p)| p)
    }
}

/// One connection's EV choice.
#[derive(Debug)]
pub struct Spray {
    policy: SprayPolicy,
    evs: u16,
    random: CpythonRandom,
    /// The flow policy's EV.
    fixed: u16,
    /// REPS: EVs that came back unmarked, oldest first.
    ring: VecDeque<u16>,
    /// EVs chosen fresh (explored) and recycled, for the statistics.
    pub explored: u64,
    pub recycled: u64,
}

impl Spray {
    /// `evs` values (at least 1) under `policy`, draws seeded by `seed` (per connection, so runs repeat).
    pub fn new(policy: SprayPolicy, evs: u16, seed: u64) -> Spray {
        let evs = evs.max(1);
        let mut random = CpythonRandom::from_u64(seed);
        let fixed = draw(&mut random, evs);
        Spray {
            policy,
            evs,
            random,
            fixed,
            ring: VecDeque::with_capacity(REPS_RING),
            explored: 0,
            recycled: 0,
        }
    }

    /// The EV of the next packet sent.
    pub fn choose(&mut self) -> u16 {
        match self.policy {
            SprayPolicy::Flow => self.fixed,
            SprayPolicy::Oblivious => {
                self.explored += 1;
                draw(&mut self.random, self.evs)
            }
            SprayPolicy::Reps => match self.ring.pop_front() {
                Some(ev) => {
                    self.recycled += 1;
                    ev
                }
                None => {
                    self.explored += 1;
                    draw(&mut self.random, self.evs)
                }
            },
        }
    }

    /// A packet sent on `ev` was acknowledged, `marked` if it met congestion on its way.
    pub fn acknowledged(&mut self, ev: u16, marked: bool) {
        if self.policy != SprayPolicy::Reps || marked || ev >= self.evs {
            return;
        }
        if self.ring.len() == REPS_RING {
            self.ring.pop_front();
        }
        self.ring.push_back(ev);
    }

    /// A packet sent on `ev` was trimmed or lost: that path is not reused. The flow policy keeps its EV (a
    /// flow's path changes only with the switches' tables), as RoCE does.
    pub fn lost(&mut self, ev: u16) {
        if self.policy == SprayPolicy::Reps {
            self.ring.retain(|&e| e != ev);
        }
    }
}

/// A uniform EV in `0..evs`.
fn draw(random: &mut CpythonRandom, evs: u16) -> u16 {
    (random.next_u32() % u32::from(evs)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flow_policy_keeps_one_ev() {
        let mut spray = Spray::new(SprayPolicy::Flow, 64, 7);
        let first = spray.choose();
        spray.lost(first);
        assert!((0..100).all(|_| spray.choose() == first));
    }

    #[test]
    fn oblivious_spraying_uses_every_ev() {
        let mut spray = Spray::new(SprayPolicy::Oblivious, 16, 1);
        let mut seen = [false; 16];
        for _ in 0..1000 {
            seen[spray.choose() as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn reps_recycles_unmarked_evs_and_forgets_marked_and_lost_ones() {
        let mut spray = Spray::new(SprayPolicy::Reps, 64, 3);
        spray.acknowledged(5, false);
        spray.acknowledged(9, true);
        spray.acknowledged(11, false);
        spray.lost(11);
        assert_eq!(spray.choose(), 5);
        assert_eq!(spray.recycled, 1);
        spray.choose();
        assert_eq!(spray.explored, 1, "nothing left to recycle: a fresh EV");
    }

    #[test]
    fn the_reps_ring_keeps_the_newest_and_refuses_values_out_of_range() {
        let mut spray = Spray::new(SprayPolicy::Reps, 64, 3);
        spray.acknowledged(64, false);
        for ev in 0..20 {
            spray.acknowledged(ev, false);
        }
        let got: Vec<u16> = (0..REPS_RING).map(|_| spray.choose()).collect();
        assert_eq!(got, (12..20).collect::<Vec<u16>>());
    }

    #[test]
    fn policies_parse_by_name() {
        for (name, policy) in SprayPolicy::ALL {
            assert_eq!(SprayPolicy::parse(name), Some(policy));
        }
        assert_eq!(SprayPolicy::parse("ecmp"), None);
    }
}
