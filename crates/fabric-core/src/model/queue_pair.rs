//! A queue pair behind the verbs, whichever transport carries it: RC (RoCEv2 and IB) or UET's RUD.
//!
//! Both RNICs (the emulator's `agent::nic` and the simulator's `sim::host`) post work, take completions and
//! run timers through this one type; only framing, which differs by wire, is theirs. What Python reads of a
//! QP (its state and its counters) keeps RC's shape: a UET PDC reports itself as RTS or ERROR and its
//! counters under RC's names (a NACK is counted as a NAK, a request dropped as malformed).
use crate::model::rc::{Completion, Memory, QpState, RcCounters, RcQueuePair, RecvWr, SendWr};
use crate::model::uet::UetPdc;

/// One queue pair's transport.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // RC, on every fabric but one, stays in place: its callers box the pair
pub enum QueuePair<W> {
    Rc(RcQueuePair<W>),
    /// Boxed: a PDC's entropy draws keep a Mersenne Twister's state.
    Uet(Box<UetPdc<W>>),
}

impl<W> QueuePair<W> {
    /// Queues a send work request; a verb refused outright, in one line.
    pub fn post_send<M: Memory<Window = W>>(
        &mut self,
        memory: &mut M,
        wr: SendWr,
    ) -> Result<(), String> {
        match self {
            QueuePair::Rc(qp) => qp.post_send(memory, wr).map_err(|e| e.to_string()),
            QueuePair::Uet(pdc) => pdc.post_send(memory, wr).map_err(|e| e.to_string()),
        }
    }

    /// Queues a receive.
    pub fn post_recv(&mut self, wr: RecvWr) {
        match self {
            QueuePair::Rc(qp) => qp.post_recv(wr),
            QueuePair::Uet(pdc) => pdc.post_recv(wr),
        }
    }

    /// Its completions, oldest first, appended to `out`.
    pub fn poll_into(&mut self, out: &mut Vec<Completion>) {
        match self {
            QueuePair::Rc(qp) => out.extend(qp.poll_completions(None)),
            QueuePair::Uet(pdc) => out.extend(pdc.poll_completions(None)),
        }
    }

    /// Completions waiting to be polled.
    pub fn completions_len(&self) -> usize {
        match self {
            QueuePair::Rc(qp) => qp.completions_len(),
            QueuePair::Uet(pdc) => pdc.completions_len(),
        }
    }

    pub fn next_deadline(&self) -> Option<u64> {
        match self {
            QueuePair::Rc(qp) => qp.next_deadline(),
            QueuePair::Uet(pdc) => pdc.next_deadline(),
        }
    }

    pub fn on_timer(&mut self, now: u64) {
        match self {
            QueuePair::Rc(qp) => qp.on_timer(now),
            QueuePair::Uet(pdc) => pdc.on_timer(now),
        }
    }

    /// Whether data waits to go (a rate limiter's question: ACKs go regardless).
    pub fn has_data(&self) -> bool {
        match self {
            QueuePair::Rc(qp) => qp.has_data(),
            QueuePair::Uet(pdc) => pdc.has_data(),
        }
    }

    /// The send and receive queues' lengths.
    pub fn queue_lengths(&self) -> (usize, usize) {
        match self {
            QueuePair::Rc(qp) => (qp.send_queue_len(), qp.recv_queue_len()),
            QueuePair::Uet(pdc) => (pdc.send_queue_len(), pdc.recv_queue_len()),
        }
    }

    pub fn remote_qpn(&self) -> u32 {
        match self {
            QueuePair::Rc(qp) => qp.remote_qpn(),
            QueuePair::Uet(pdc) => pdc.remote_pdc(),
        }
    }

    /// RTS, or ERROR once it failed (a UET PDC is connected from the start).
    pub fn state(&self) -> QpState {
        match self {
            QueuePair::Rc(qp) => qp.state(),
            QueuePair::Uet(pdc) if pdc.failed() => QpState::Error,
            QueuePair::Uet(_) => QpState::Rts,
        }
    }

    /// Its counters under RC's names.
    pub fn counters(&self) -> RcCounters {
        match self {
            QueuePair::Rc(qp) => *qp.counters(),
            QueuePair::Uet(pdc) => {
                let c = pdc.counters();
                RcCounters {
                    packets_sent: c.packets_sent,
                    packets_received: c.packets_received,
                    bytes_sent: c.bytes_sent,
                    retransmitted_packets: c.retransmitted_packets,
                    timeouts: c.timeouts,
                    naks_sent: c.nacks_sent,
                    naks_received: c.nacks_received,
                    duplicate_packets: c.duplicate_packets,
                    acks_sent: c.acks_sent,
                    acks_received: c.acks_received,
                    ecn_ce_received: c.ecn_ce_received,
                    malformed_packets: c.dropped_packets,
                    ..RcCounters::default()
                }
            }
        }
    }
}
