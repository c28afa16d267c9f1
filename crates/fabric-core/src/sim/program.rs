//! A training step's plans, given whole (`emulator/collectives/workload_plan.py` makes them), and what a
//! rank's executor asks of any plan ([`Schedule`]), whether a collective's closed form ([`Plans`]) or a
//! step's listed steps ([`Program`]).
//!
//! A workload's steps follow no closed form: each rank runs its collectives one after the other, each in its
//! own group, with compute between them. Python places the groups and lists every rank's steps once (one
//! implementation of the placement, for both backends); the simulator takes them as they are, after checking
//! that every index and region they name is in range, so that a wrong plan is an error, never a panic.
//! Every step goes whole (one slice), and each WRITE names the receiver's step it arrives for (`at_step`):
//! a rank's steps are not its peers' (a broadcast's chain, a pipeline's sends and receives).
use std::sync::Arc;

use crate::sim::plans::{merge_peers, peers, PeerPlan, Plans, SendPlan, IMMEDIATE_SLICES};

/// One WRITE of a listed step: what it moves, and the receiver's step it arrives for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramSend {
    pub send: SendPlan,
    pub at_step: u32,
}

/// One listed step: its WRITEs, then the ranks it expects a WRITE with immediate from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramStep {
    pub sends: Vec<ProgramSend>,
    pub receives: Vec<u32>,
}

/// One collective of a rank's step: its steps `first..first + steps`, the compute before it is issued, and
/// whether the compute after it waits for it (`algorithms.OpSpan`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpSpan {
    pub first: u32,
    pub steps: u32,
    pub compute_ns: u64,
    pub blocking: bool,
}

/// One rank's part of a training step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankProgram {
    pub data: u64,
    pub staging: u64,
    pub steps: Vec<ProgramStep>,
    pub ops: Vec<OpSpan>,
}

/// Every rank's part of a training step, checked, and the compute after its last collective.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    ranks: Vec<RankProgram>,
    /// Per rank, per step: the slot of its first expected arrival (its steps' receives one after the other).
    slot_base: Vec<Vec<u32>>,
    pub tail_ns: u64,
}

impl Program {
    /// The program of `ranks`, or what is wrong with it: a send to a rank or step that does not expect it, a
    /// region overrun, ops that do not cover the steps in order, too many steps for the immediate.
    pub fn new(ranks: Vec<RankProgram>, tail_ns: u64) -> Result<Program, String> {
        let n = ranks.len();
        for (r, rank) in ranks.iter().enumerate() {
            if rank.steps.len() > IMMEDIATE_SLICES as usize {
                return Err(format!(
                    "rank {r}: {} steps, at most {IMMEDIATE_SLICES}",
                    rank.steps.len()
                ));
            }
            let mut next = 0u64;
            for op in &rank.ops {
                if u64::from(op.first) != next {
                    return Err(format!(
                        "rank {r}: an op begins at step {}, not {next}",
                        op.first
                    ));
                }
                next += u64::from(op.steps);
            }
            if next != rank.steps.len() as u64 {
                return Err(format!(
                    "rank {r}: its ops cover {next} of its {} steps",
                    rank.steps.len()
                ));
            }
            for (k, step) in rank.steps.iter().enumerate() {
                for s in &step.sends {
                    let dst = ranks.get(s.send.dst as usize).ok_or_else(|| {
                        format!("rank {r} step {k}: a send to rank {} of {n}", s.send.dst)
                    })?;
                    let expects = dst
                        .steps
                        .get(s.at_step as usize)
                        .is_some_and(|at| at.receives.contains(&(r as u32)));
                    if !expects {
                        return Err(format!(
                            "rank {r} step {k}: rank {} step {} expects no WRITE from it",
                            s.send.dst, s.at_step
                        ));
                    }
                    let region = if s.send.staging {
                        dst.staging
                    } else {
                        dst.data
                    };
                    let fits = |offset: u64, limit: u64| {
                        offset
                            .checked_add(s.send.length)
                            .is_some_and(|end| end <= limit)
                    };
                    if !fits(s.send.offset, rank.data) || !fits(s.send.dst_offset, region) {
                        return Err(format!("rank {r} step {k}: a send beyond its regions"));
                    }
                }
                if let Some(&src) = step.receives.iter().find(|&&src| src as usize >= n) {
                    return Err(format!(
                        "rank {r} step {k}: a receive from rank {src} of {n}"
                    ));
                }
            }
        }
        let slot_base = ranks
            .iter()
            .map(|rank| {
                let mut base = 0u32;
                rank.steps
                    .iter()
                    .map(|step| {
                        let at = base;
                        base = base.saturating_add(step.receives.len() as u32);
                        at
                    })
                    .collect()
            })
            .collect();
        Ok(Program {
            ranks,
            slot_base,
            tail_ns,
        })
    }

    /// Rank `rank`'s part, if it has one.
    pub fn rank(&self, rank: u32) -> Option<&RankProgram> {
        self.ranks.get(rank as usize)
    }

    /// Rank `rank`'s ops (none beyond the ranks).
    pub fn ops(&self, rank: u32) -> &[OpSpan] {
        self.rank(rank).map_or(&[], |r| r.ops.as_slice())
    }
}

/// What a rank's executor (`sim::ranks`, `sim::fabric`) and the summary ask of a plan.
pub trait Schedule {
    fn ranks(&self) -> u32;
    /// (data bytes, staging bytes).
    fn regions(&self, rank: u32) -> (u64, u64);
    fn data_bytes(&self, rank: u32) -> u64 {
        self.regions(rank).0
    }
    fn steps(&self, rank: u32) -> u32;
    fn slices(&self, rank: u32) -> u32;
    /// The slot of the arrival from `src` for slice number `number`, if one is expected.
    fn slot(&self, rank: u32, number: u32, src: u32) -> Option<u32>;
    /// The slots of the arrivals for slice number `number`: (first, count).
    fn slots(&self, rank: u32, number: u32) -> (u32, u32);
    fn measured(&self, rank: u32) -> bool;
    fn reduces(&self, rank: u32) -> bool;
    /// Every peer, ascending, with what is exchanged with it.
    fn peer_plans(&self, rank: u32) -> Vec<PeerPlan>;
    /// Whether the rank's first step sends (its achieved start is then the iteration's).
    fn first_step_sends(&self, rank: u32) -> bool;
}

impl Schedule for Plans {
    fn ranks(&self) -> u32 {
        Plans::ranks(self)
    }
    fn regions(&self, rank: u32) -> (u64, u64) {
        Plans::regions(self, rank)
    }
    fn steps(&self, rank: u32) -> u32 {
        Plans::steps(self, rank)
    }
    fn slices(&self, rank: u32) -> u32 {
        Plans::slices(self, rank)
    }
    fn slot(&self, rank: u32, number: u32, src: u32) -> Option<u32> {
        Plans::slot(self, rank, number, src)
    }
    fn slots(&self, rank: u32, number: u32) -> (u32, u32) {
        Plans::slots(self, rank, number)
    }
    fn measured(&self, rank: u32) -> bool {
        Plans::measured(self, rank)
    }
    fn reduces(&self, rank: u32) -> bool {
        Plans::reduces(self, rank)
    }
    fn peer_plans(&self, rank: u32) -> Vec<PeerPlan> {
        peers(self, rank)
    }
    fn first_step_sends(&self, rank: u32) -> bool {
        self.step(rank, 0).is_some_and(|s| !s.sends.is_empty())
    }
}

impl Schedule for Program {
    fn ranks(&self) -> u32 {
        self.ranks.len() as u32
    }
    fn regions(&self, rank: u32) -> (u64, u64) {
        self.rank(rank).map_or((0, 0), |r| (r.data, r.staging))
    }
    fn steps(&self, rank: u32) -> u32 {
        self.rank(rank).map_or(0, |r| r.steps.len() as u32)
    }
    fn slices(&self, _rank: u32) -> u32 {
        1
    }
    fn slot(&self, rank: u32, number: u32, src: u32) -> Option<u32> {
        let step = self.rank(rank)?.steps.get(number as usize)?;
        let index = step.receives.iter().position(|&r| r == src)?;
        Some(self.slot_base.get(rank as usize)?.get(number as usize)? + index as u32)
    }
    fn slots(&self, rank: u32, number: u32) -> (u32, u32) {
        let count = self
            .rank(rank)
            .and_then(|r| r.steps.get(number as usize))
            .map_or(0, |s| s.receives.len() as u32);
        let first = self
            .slot_base
            .get(rank as usize)
            .and_then(|b| b.get(number as usize))
            .copied()
            .unwrap_or(0);
        (first, count)
    }
    fn measured(&self, _rank: u32) -> bool {
        true
    }
    fn reduces(&self, _rank: u32) -> bool {
        false
    }
    fn peer_plans(&self, rank: u32) -> Vec<PeerPlan> {
        let Some(r) = self.rank(rank) else {
            return Vec::new();
        };
        let mut all: Vec<PeerPlan> = Vec::new();
        for step in &r.steps {
            all.extend(step.sends.iter().map(|s| PeerPlan {
                peer: s.send.dst,
                receives: 0,
                bytes: s.send.length,
            }));
            all.extend(step.receives.iter().map(|&src| PeerPlan {
                peer: src,
                receives: 1,
                bytes: 0,
            }));
        }
        merge_peers(all)
    }
    fn first_step_sends(&self, rank: u32) -> bool {
        self.rank(rank)
            .and_then(|r| r.steps.first())
            .is_some_and(|s| !s.sends.is_empty())
    }
}

/// The plan a run executes: a collective's, or a training step's.
#[derive(Clone, Debug)]
pub enum RunPlan {
    Collective(Plans),
    Workload(Arc<Program>),
}

impl RunPlan {
    /// Calls `f` with each WRITE of rank `rank`'s step `k` and the receiver's step it arrives for (no
    /// allocation: a step is posted for every slice of every rank).
    pub fn each_send(&self, rank: u32, k: u32, mut f: impl FnMut(SendPlan, u32)) {
        match self {
            RunPlan::Collective(plans) => {
                if let Some(step) = plans.step(rank, k) {
                    step.sends.iter().for_each(|s| f(s, k));
                }
            }
            RunPlan::Workload(program) => {
                if let Some(step) = program.rank(rank).and_then(|r| r.steps.get(k as usize)) {
                    step.sends.iter().for_each(|s| f(s.send, s.at_step));
                }
            }
        }
    }

    /// Rank `rank`'s step `k`'s reduction, if it has one (a training step's have none).
    pub fn reduce(&self, rank: u32, k: u32) -> Option<(u64, u64, u64)> {
        match self {
            RunPlan::Collective(plans) => plans.step(rank, k).and_then(|s| s.reduce),
            RunPlan::Workload(_) => None,
        }
    }

    /// The training step's program, if it is one.
    pub fn program(&self) -> Option<&Program> {
        match self {
            RunPlan::Collective(_) => None,
            RunPlan::Workload(program) => Some(program),
        }
    }

    fn schedule(&self) -> &dyn Schedule {
        match self {
            RunPlan::Collective(plans) => plans,
            RunPlan::Workload(program) => program.as_ref(),
        }
    }
}

impl Schedule for RunPlan {
    fn ranks(&self) -> u32 {
        self.schedule().ranks()
    }
    fn regions(&self, rank: u32) -> (u64, u64) {
        self.schedule().regions(rank)
    }
    fn steps(&self, rank: u32) -> u32 {
        self.schedule().steps(rank)
    }
    fn slices(&self, rank: u32) -> u32 {
        self.schedule().slices(rank)
    }
    fn slot(&self, rank: u32, number: u32, src: u32) -> Option<u32> {
        self.schedule().slot(rank, number, src)
    }
    fn slots(&self, rank: u32, number: u32) -> (u32, u32) {
        self.schedule().slots(rank, number)
    }
    fn measured(&self, rank: u32) -> bool {
        self.schedule().measured(rank)
    }
    fn reduces(&self, rank: u32) -> bool {
        self.schedule().reduces(rank)
    }
    fn peer_plans(&self, rank: u32) -> Vec<PeerPlan> {
        self.schedule().peer_plans(rank)
    }
    fn first_step_sends(&self, rank: u32) -> bool {
        self.schedule().first_step_sends(rank)
    }
}

/// A WRITE of `length` bytes from offset 0 to offset 0 of `dst`'s data, for `dst`'s step `at_step` (tests).
#[cfg(test)]
pub(crate) fn write(dst: u32, length: u64, at_step: u32) -> ProgramSend {
    ProgramSend {
        send: SendPlan {
            dst,
            offset: 0,
            length,
            staging: false,
            dst_offset: 0,
        },
        at_step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 0 sends to 1, then waits for 1's answer; rank 1 waits, then answers in its second step.
    fn ping_pong() -> Vec<RankProgram> {
        let op = |first, steps| OpSpan {
            first,
            steps,
            compute_ns: 5,
            blocking: true,
        };
        vec![
            RankProgram {
                data: 64,
                staging: 0,
                steps: vec![
                    ProgramStep {
                        sends: vec![write(1, 64, 0)],
                        receives: vec![],
                    },
                    ProgramStep {
                        sends: vec![],
                        receives: vec![1],
                    },
                ],
                ops: vec![op(0, 1), op(1, 1)],
            },
            RankProgram {
                data: 64,
                staging: 0,
                steps: vec![
                    ProgramStep {
                        sends: vec![],
                        receives: vec![0],
                    },
                    ProgramStep {
                        sends: vec![write(0, 64, 1)],
                        receives: vec![],
                    },
                ],
                ops: vec![op(0, 2)],
            },
        ]
    }

    #[test]
    fn slots_and_peers_follow_the_listed_steps() {
        let program = Program::new(ping_pong(), 7).unwrap();
        assert_eq!(program.slot(0, 1, 1), Some(0));
        assert_eq!(program.slot(0, 0, 1), None);
        assert_eq!(program.slots(1, 0), (0, 1));
        assert_eq!(program.slots(1, 1), (1, 0));
        let peers = program.peer_plans(0);
        assert_eq!(
            peers,
            vec![PeerPlan {
                peer: 1,
                receives: 1,
                bytes: 64
            }]
        );
        assert!(program.first_step_sends(0) && !program.first_step_sends(1));
        let run = RunPlan::Workload(Arc::new(program));
        let mut sends = Vec::new();
        run.each_send(1, 1, |send, at_step| sends.push((send.dst, at_step)));
        assert_eq!(sends, vec![(0, 1)]);
        assert_eq!(run.reduce(0, 0), None);
    }

    #[test]
    fn a_wrong_program_is_refused_not_run() {
        let mut ranks = ping_pong();
        ranks[1].steps[1].sends[0].at_step = 0; // rank 0's step 0 expects nothing
        assert!(Program::new(ranks, 0)
            .unwrap_err()
            .contains("expects no WRITE"));
        let mut ranks = ping_pong();
        ranks[0].steps[0].sends[0].send.length = 65;
        assert!(Program::new(ranks, 0)
            .unwrap_err()
            .contains("beyond its regions"));
        let mut ranks = ping_pong();
        ranks[0].ops.pop();
        assert!(Program::new(ranks, 0)
            .unwrap_err()
            .contains("cover 1 of its 2"));
        let mut ranks = ping_pong();
        ranks[0].steps[0].sends[0].send.dst = 9;
        assert!(Program::new(ranks, 0)
            .unwrap_err()
            .contains("a send to rank 9"));
        let mut ranks = ping_pong();
        ranks[0].steps[1].receives[0] = 5;
        assert!(Program::new(ranks, 0).is_err());
    }
}
