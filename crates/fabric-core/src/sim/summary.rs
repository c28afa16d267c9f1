//! One iteration's metrics from the ranks' state (port of `emulator/collectives/coordinator.py`'s
//! `summarize`), so that a run on thousands of ranks hands Python a few numbers and its flows as columns,
//! not a report per rank.
//!
//! Times stay integer ns: Python divides them by 1e3 as `summarize` does, so the floats are the same.
//! `tests/unit/test_twin_summary.py` checks the result against `summarize` of the same run's reports.
use crate::sim::program::Schedule;
use crate::sim::ranks::SimRank;

/// Why the last flow of an iteration was last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Its QP retransmitted or timed out.
    Retransmission,
    /// Its sender's NIC was paused.
    Pause,
    Queueing,
}

impl Cause {
    /// The coordinator's word for it.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Retransmission => "retransmission",
            Cause::Pause => "pause",
            Cause::Queueing => "queueing",
        }
    }
}

/// The flows of an iteration, one per (source, destination) that had an arrival, sorted by that pair: as
/// columns (a million flows are a few arrays, not a million objects).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flows {
    pub src: Vec<u32>,
    pub dst: Vec<u32>,
    /// Bytes the plan sends from source to destination in an iteration.
    pub bytes: Vec<u64>,
    /// The last arrival's time stamp.
    pub last: Vec<u64>,
    /// The source's QP's retransmitted packets and timeouts over the iteration.
    pub retransmissions: Vec<u64>,
    pub timeouts: Vec<u64>,
}

/// One iteration's metrics (the fields of the coordinator's `IterationResult`, times in ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterationSummary {
    pub iteration: u32,
    /// The start instant T.
    pub start: u64,
    /// The last arrival at a measured rank (the CCT is `last - start`), its source and destination.
    pub last: u64,
    pub last_src: u32,
    pub last_dst: u32,
    pub cause: Cause,
    /// Retransmitted packets of the QPs towards measured ranks.
    pub retransmissions: u64,
    /// The hosts' pause time during the iteration, summed.
    pub paused_ns: u64,
    pub verified: bool,
    /// Spread of the ranks' achieved starts, and how long after T the latest started.
    pub skew_ns: u64,
    pub late_ns: u64,
    pub flows: Flows,
}

/// The summary of iteration `iteration` started at `start`: `counters(rank, peer)` gives the QP's
/// (retransmitted packets, timeouts) now, `paused` each host's pause time in the iteration, `verified`
/// whether every reduction came out right. Each peer's counters are kept for the next iteration's deltas.
/// An `Err` with the coordinator's message when nothing arrived (at the measured ranks).
pub fn summarize<S: Schedule + ?Sized>(
    iteration: u32,
    start: u64,
    plans: &S,
    ranks: &mut [SimRank],
    counters: impl Fn(usize, u32) -> (u64, u64),
    paused: &[u64],
    verified: bool,
) -> Result<IterationSummary, String> {
    let mut retransmissions = 0u64;
    for (r, rank) in ranks.iter_mut().enumerate() {
        for peer in &mut rank.peers {
            let now = counters(r, peer.rank);
            peer.delta = (
                now.0.saturating_sub(peer.previous.0), // the counters only grow
                now.1.saturating_sub(peer.previous.1),
            );
            peer.previous = now;
            if plans.measured(peer.rank) {
                retransmissions += peer.delta.0;
            }
        }
    }
    // (src, dst, last arrival); the last measured one: the latest, the first in the coordinator's order
    // (destinations ascending, each one's sources in the order their first arrival came) among equals.
    let mut arrivals: Vec<(u32, u32, u64)> = Vec::new();
    let mut latest: Option<(u64, u32, u32)> = None;
    for (d, rank) in ranks.iter().enumerate() {
        let dst = d as u32;
        let mut here: Option<(u64, u32, u32)> = None; // (stamp, order, src)
        for peer in &rank.peers {
            let Some((stamp, order)) = peer.last else {
                continue;
            };
            arrivals.push((peer.rank, dst, stamp));
            if plans.measured(dst)
                && here
                    .is_none_or(|(best, first, _)| stamp > best || (stamp == best && order < first))
            {
                here = Some((stamp, order, peer.rank));
            }
        }
        if let Some((stamp, _, src)) = here {
            if latest.is_none_or(|(best, _, _)| stamp > best) {
                latest = Some((stamp, src, dst));
            }
        }
    }
    if arrivals.is_empty() {
        return Err(format!("iteration {iteration}: no data arrived anywhere"));
    }
    let Some((last, last_src, last_dst)) = latest else {
        return Err(format!(
            "iteration {iteration}: no data arrived at the measured job's ranks"
        ));
    };
    arrivals.sort_unstable_by_key(|&(src, dst, _)| (src, dst));
    let sent = |src: u32, dst: u32| ranks.get(src as usize).and_then(|rank| rank.peer(dst));
    let mut flows = Flows::default();
    for &(src, dst, stamp) in &arrivals {
        let peer = sent(src, dst);
        let (bytes, delta) = peer.map_or((0, (0, 0)), |p| (p.bytes, p.delta));
        flows.src.push(src);
        flows.dst.push(dst);
        flows.bytes.push(bytes);
        flows.last.push(stamp);
        flows.retransmissions.push(delta.0);
        flows.timeouts.push(delta.1);
    }
    let (retrans, timeouts) = sent(last_src, last_dst).map_or((0, 0), |p| p.delta);
    let cause = if retrans > 0 || timeouts > 0 {
        Cause::Retransmission
    } else if paused.get(last_src as usize).is_some_and(|&p| p > 0) {
        Cause::Pause
    } else {
        Cause::Queueing
    };
    // A rank's achieved start is T when its first step sends (the simulated ranks are never late).
    let released = ranks.iter().filter_map(|rank| {
        let sends = plans.first_step_sends(rank.rank);
        (sends && rank.start > 0).then_some(rank.start)
    });
    let (earliest, latest_start) = released
        .fold(None, |span: Option<(u64, u64)>, at| {
            Some(span.map_or((at, at), |(lo, hi)| (lo.min(at), hi.max(at))))
        })
        .unwrap_or((0, 0));
    Ok(IterationSummary {
        iteration,
        start,
        last,
        last_src,
        last_dst,
        cause,
        retransmissions,
        paused_ns: paused.iter().sum(),
        verified,
        skew_ns: latest_start - earliest,
        late_ns: latest_start.saturating_sub(start),
        flows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::plans::Plans;

    /// An all-gather of 3 ranks with every arrival at `stamp(src, dst)` and rank 0's QP to 1 retransmitting.
    fn ranks_of(plans: &Plans, stamp: impl Fn(u32, u32) -> u64) -> Vec<SimRank> {
        (0..plans.ranks())
            .map(|r| {
                let mut rank = SimRank::new(plans, r, false);
                rank.reset(0, 100);
                for k in 0..plans.steps(r) {
                    for src in plans.step(r, k).unwrap().receives.iter() {
                        rank.arrive(plans, src, k, stamp(src, r));
                    }
                }
                rank
            })
            .collect()
    }

    #[test]
    fn the_last_flow_ties_go_to_the_first_destination() {
        let plans = Plans::new("allgather", 3, 12, None).unwrap();
        let mut ranks = ranks_of(&plans, |_, _| 500);
        let counters = |rank: usize, peer: u32| {
            if (rank, peer) == (0, 1) {
                (3, 1)
            } else {
                (0, 0)
            }
        };
        let summary = summarize(0, 100, &plans, &mut ranks, counters, &[0, 0, 7], true).unwrap();
        assert_eq!(
            (summary.last, summary.last_src, summary.last_dst),
            (500, 2, 0)
        );
        assert_eq!(summary.cause, Cause::Pause); // rank 2's NIC was paused, its QP did not retransmit
        assert_eq!(summary.flows.src, vec![0, 1, 2]);
        assert_eq!(summary.flows.dst, vec![1, 2, 0]);
        assert_eq!(summary.flows.bytes, vec![8, 8, 8]);
        assert_eq!(summary.flows.retransmissions, vec![3, 0, 0]);
        assert_eq!(summary.retransmissions, 3);
        assert_eq!(
            (summary.skew_ns, summary.late_ns, summary.paused_ns),
            (0, 0, 7)
        );
        // The next iteration's deltas start from these counters.
        let again = summarize(1, 100, &plans, &mut ranks, counters, &[0, 0, 0], true).unwrap();
        assert_eq!(again.retransmissions, 0);
        assert_eq!(again.cause, Cause::Queueing);
    }

    #[test]
    fn among_equal_arrivals_at_one_rank_the_first_sender_heard_is_last() {
        // Not on a wire (its frames end at distinct ns), but the coordinator's order decides it: a dict of
        // flows in the order of their first arrival.
        let plans = Plans::new("alltoall", 3, 12, None).unwrap();
        let mut ranks: Vec<SimRank> = (0..3).map(|r| SimRank::new(&plans, r, false)).collect();
        for rank in &mut ranks {
            rank.reset(0, 100);
        }
        ranks[0].arrive(&plans, 2, 0, 300);
        ranks[0].arrive(&plans, 1, 0, 300);
        let summary = summarize(0, 100, &plans, &mut ranks, |_, _| (0, 0), &[0; 3], true).unwrap();
        assert_eq!(
            (summary.last, summary.last_src, summary.last_dst),
            (300, 2, 0)
        );
        assert_eq!(summary.flows.src, vec![1, 2]); // flows by (source, destination)
    }

    #[test]
    fn nothing_measured_is_an_error() {
        let plans = Plans::new("allgather", 3, 12, None).unwrap();
        let mut ranks: Vec<SimRank> = (0..3).map(|r| SimRank::new(&plans, r, false)).collect();
        let error = summarize(4, 0, &plans, &mut ranks, |_, _| (0, 0), &[0; 3], true).unwrap_err();
        assert_eq!(error, "iteration 4: no data arrived anywhere");
    }
}
