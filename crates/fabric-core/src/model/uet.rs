//! UET's reliable unordered delivery (RUD) on one packet delivery context (PDC), without I/O.
//!
//! The counterpart of `model::rc` for the `uet` fabric, driven the same way (smoltcp's and quinn-proto's
//! manner): inbound packets in ([`UetPdc::receive_with_payload`]), outbound ones pulled while the link takes
//! them ([`UetPdc::next_packet`]), [`UetPdc::on_timer`] once [`UetPdc::next_deadline`] has passed, times as
//! integer ns from the caller, memory through `rc::Memory`. The verbs it serves are those of an RC QP
//! (WRITE, WRITE with immediate, SEND, SEND with immediate; READ is refused), so the ranks run unchanged.
//!
//! What differs from RC, after the UET 1.0 overview (arXiv 2508.08906):
//!
//! - *Unordered*: every request packet carries its message's target and its own offset in it, so the
//!   responder places each packet where it belongs whatever order the sprayed paths deliver them in. A
//!   message completes once all its bytes are in.
//! - *Selective*: the responder acknowledges cumulatively, with a 64-bit SACK bitmap past the cumulative
//!   point, and names the packet that caused the ACK (its ECN mark echoed). The requester resends only what
//!   is missing.
//! - *Trimming*: a switch out of room cuts a packet to its headers and forwards them; the responder NACKs the
//!   header and the requester resends at once, on another path. A packet lost outright is resent when its own
//!   retransmission timeout passes.
//! - *Spraying*: each packet (and each resend) takes the entropy value `model::spray` chooses.
//! - *Congestion*: the window is NSCC's (`model::nscc`): ECN and delay from every ACK, trims as losses. With
//!   receiver credits (`model::rccc`) a sender also sends only what its receiver granted.
//!
//! PSNs are 32 bits on the wire and 64 inside (the wire's value is the low half). Work requests complete in
//! the order they were posted, as verbs wants of a QP; inbound messages complete in the order they finish.
//! Every packet is hostile: a PSN outside the window, an offset past its message or a key refused is a
//! counted drop or a NACK, never a panic.
use std::collections::VecDeque;
use std::fmt;

use crate::model::nscc::{Nscc, NsccParams};
use crate::model::rc::{
    local_buffer, AccessError, Completion, Memory, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use crate::model::rccc::{CreditReceiver, CreditSender, Turn};
use crate::model::rdma_params::MAX_MR_BYTES;
use crate::model::spray::{Spray, SprayPolicy};
use crate::wire::uet::{nack, PdsKind, UetPacket};

/// PSNs past the cumulative point the responder keeps track of; a request beyond is dropped (its sender
/// keeps at most this many in flight).
pub const RX_WINDOW: u64 = 1024;
/// Inbound messages a PDC assembles or holds for a receive at once; a packet of one more waits for its resend.
pub const MAX_INBOUND: usize = 64;

/// A PDC's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UetConfig {
    /// Payload bytes per packet.
    pub mss: u32,
    /// A packet not acknowledged this long after it was sent is sent again: the least retransmission timeout,
    /// which grows with the round trips measured (RFC 6298's smoothed RTT plus four deviations), so that a
    /// packet waiting in a deep queue is not taken for lost.
    pub timeout_ns: u64,
    /// Timeouts of one packet before its work request fails (RETRY_EXC_ERR).
    pub retries: u8,
    /// The responder acknowledges at least every this many requests (and at once any that was marked, out of
    /// order, or ended a message).
    pub ack_every: u32,
    /// Packets in flight at most (at most [`RX_WINDOW`]).
    pub window: u32,
    pub max_msg: u64,
    /// Entropy values and how they are chosen.
    pub evs: u16,
    pub spray: SprayPolicy,
    /// NSCC's settings; `None` runs a fixed window of `window` packets.
    pub nscc: Option<NsccParams>,
    /// Receiver credits (RCCC): the most credit the sender holds, what it starts speculating with; `None`
    /// sends without them.
    pub rccc: Option<u64>,
}

/// A UET fabric's transport settings, the same for every RNIC of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UetSpec {
    pub spray: SprayPolicy,
    pub evs: u16,
    /// NSCC on (else a window of [`RX_WINDOW`] packets).
    pub nscc: bool,
    /// The longest round trip of the empty fabric: NSCC's base RTT and the scale of its constants.
    pub network_rtt_ns: u64,
    pub timeout_ns: u64,
    /// Receiver credits on.
    pub rccc: bool,
    /// NSCC's target queueing delay and multiplicative decrease factor, where the user set them (else the
    /// path's defaults: `NsccParams::for_path`).
    pub nscc_target_ns: Option<u64>,
    pub nscc_gamma: Option<f64>,
}

impl UetSpec {
    /// A PDC's settings for packets of `mss` bytes on a link of `rate_bps`: seven timeouts of one packet
    /// before its work request fails (RC's default retry count), an ACK at least every four requests
    /// (uet-htsim's 16 KB of 4 KB packets), the widest window the responder tracks, NSCC on the path, and with
    /// receiver credits a sender holding at most NSCC's largest window of credit (1.5 bandwidth-delay products).
    pub fn config(&self, mss: u32, rate_bps: u64) -> UetConfig {
        let defaults = NsccParams::for_path(self.network_rtt_ns, rate_bps, true);
        let nscc = NsccParams {
            target_delay_ns: self.nscc_target_ns.unwrap_or(defaults.target_delay_ns),
            gamma: self.nscc_gamma.unwrap_or(defaults.gamma),
            ..defaults
        };
        UetConfig {
            mss,
            timeout_ns: self.timeout_ns,
            retries: 7,
            ack_every: 4,
            window: RX_WINDOW as u32,
            max_msg: MAX_MR_BYTES,
            evs: self.evs,
            spray: self.spray,
            nscc: self.nscc.then_some(nscc),
            rccc: self
                .rccc
                .then(|| Nscc::new(nscc, mss).window().max(u64::from(mss))),
        }
    }
}

/// Why a verb was refused outright.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UetVerbError {
    /// `post_send` before `connect`.
    NotConnected { pdc: u32 },
    /// `connect` twice.
    Connected { pdc: u32 },
    /// An opcode the transport does not carry (READ).
    Unsupported { pdc: u32, opcode: WrOpcode },
}

impl fmt::Display for UetVerbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UetVerbError::NotConnected { pdc } => write!(f, "PDC {pdc} is not connected"),
            UetVerbError::Connected { pdc } => write!(f, "PDC {pdc} is already connected"),
            UetVerbError::Unsupported { pdc, opcode } => {
                let name = WrOpcode::ALL
                    .iter()
                    .find(|(_, op)| op == opcode)
                    .map_or("such verb", |(name, _)| name);
                write!(
                    f,
                    "PDC {pdc}: the uet transport has no {name} (WRITE and SEND only)"
                )
            }
        }
    }
}

/// What a PDC counts (Python reads them under RC's names: `model::queue_pair`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UetCounters {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub bytes_sent: u64,
    pub retransmitted_packets: u64,
    pub timeouts: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    pub nacks_sent: u64,
    pub nacks_received: u64,
    /// Requests that arrived trimmed (each NACKed unless already in).
    pub trimmed_received: u64,
    pub duplicate_packets: u64,
    pub ecn_ce_received: u64,
    /// Requests beyond the window, of a message past [`MAX_INBOUND`], or whose offsets do not fit.
    pub dropped_packets: u64,
    /// Receiver credits: grants sent and received.
    pub credits_sent: u64,
    pub credits_received: u64,
}

/// One posted work request.
#[derive(Debug)]
struct Outbound<W> {
    wr: SendWr,
    message_id: u16,
    first: u64,
    packets: u64,
    unacked: u64,
    local: Option<W>,
    /// Completes with this status at its turn, none of it sent (a local error) or once refused (remote).
    error: Option<WcStatus>,
}

/// One request packet sent and not yet acknowledged.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    at: u64,
    ev: u16,
    len: u32,
    acked: bool,
    /// Sent at least once.
    sent: bool,
    /// Counted in the bytes in flight (not yet acknowledged, NACKed or timed out).
    in_flight: bool,
    resent: bool,
    timeouts: u8,
}

/// One message arriving.
#[derive(Debug)]
struct Inbound<W> {
    message_id: u16,
    length: u64,
    received: u64,
    window: Option<W>,
    imm: Option<u32>,
    send: bool,
    /// A SEND's receive, taken with its first packet.
    recv: Option<RecvWr>,
}

/// An ACK or NACK owed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Control {
    Ack { psn: u64, ecn: bool, ev: u16 },
    Nack { psn: u64, code: u8, ev: u16 },
    Credit { ev: u16 },
}

/// A packet delivery context: both halves of one UET connection.
#[derive(Debug)]
pub struct UetPdc<W> {
    pdc: u32,
    config: UetConfig,
    remote_pdc: u32,
    connected: bool,
    failed: bool,
    counters: UetCounters,
    completions: VecDeque<Completion>,
    spray: Spray,
    cc: Option<Nscc>,
    // requester
    sq: VecDeque<Outbound<W>>,
    next_message: u16,
    /// The first PSN not acknowledged; `sent[i]` is PSN `base + i`, up to `tx_next`.
    base: u64,
    sent: VecDeque<Sent>,
    tx_next: u64,
    /// The PSN after the last posted.
    end: u64,
    in_flight_bytes: u64,
    /// NACKed or timed-out PSNs, to send again first.
    resend: VecDeque<u64>,
    rto_at: Option<u64>,
    /// RFC 6298's smoothed round trip and its deviation (ns), from packets sent once; none measured yet.
    srtt: Option<(u64, u64)>,
    /// Receiver credits: what this end may send, when it runs them, and when it may send one packet without
    /// (nothing in flight, no credit: a grant may have been lost).
    credit_tx: Option<CreditSender>,
    credit_probe_at: Option<u64>,
    // responder
    rx_base: u64,
    /// `seen[i]`: PSN `rx_base + 1 + i` arrived (`rx_base` itself never has: it would have moved on).
    seen: VecDeque<bool>,
    /// How many of `seen` are set: PSNs in past a gap (each ACK says it; counted here, not per ACK).
    out_of_order: usize,
    inbound: Vec<Inbound<W>>,
    rq: VecDeque<RecvWr>,
    /// Messages with immediate complete before a receive was posted for them: (immediate, length).
    unclaimed: VecDeque<(Option<u32>, u64)>,
    out: VecDeque<Control>,
    unacked_requests: u32,
    /// An ACK held back for coalescing goes out by then anyway, for the latest request (its PSN, EV): a sender
    /// whose window shrank after it sent them waits for it and sends nothing more meanwhile.
    ack_due: Option<(u64, u64, u16)>,
    /// Receiver credits: what the peer asked for and was granted.
    credit_rx: CreditReceiver,
}

impl<W> UetPdc<W> {
    /// PDC `pdc` whose first PSN is `initial_psn`; `seed` seeds its entropy draws.
    pub fn new(pdc: u32, config: UetConfig, initial_psn: u32, seed: u64) -> Self {
        let window = config.window.clamp(1, RX_WINDOW as u32);
        let config = UetConfig { window, ..config };
        let cc = config.nscc.map(|params| Nscc::new(params, config.mss));
        UetPdc {
            pdc,
            config,
            remote_pdc: 0,
            connected: false,
            failed: false,
            counters: UetCounters::default(),
            completions: VecDeque::new(),
            spray: Spray::new(config.spray, config.evs, seed),
            cc,
            sq: VecDeque::new(),
            next_message: 0,
            base: u64::from(initial_psn),
            sent: VecDeque::new(),
            tx_next: u64::from(initial_psn),
            end: u64::from(initial_psn),
            in_flight_bytes: 0,
            resend: VecDeque::new(),
            rto_at: None,
            srtt: None,
            credit_tx: config.rccc.map(CreditSender::new),
            credit_probe_at: None,
            rx_base: 0,
            seen: VecDeque::new(),
            out_of_order: 0,
            inbound: Vec::new(),
            rq: VecDeque::new(),
            unclaimed: VecDeque::new(),
            out: VecDeque::new(),
            unacked_requests: 0,
            ack_due: None,
            credit_rx: CreditReceiver::default(),
        }
    }

    // --- what callers read -------------------------------------------------------------------------------

    pub fn pdc(&self) -> u32 {
        self.pdc
    }

    pub fn remote_pdc(&self) -> u32 {
        self.remote_pdc
    }

    pub fn config(&self) -> &UetConfig {
        &self.config
    }

    pub fn counters(&self) -> &UetCounters {
        &self.counters
    }

    /// The congestion window in bytes (the fixed window's when NSCC is off).
    pub fn window_bytes(&self) -> u64 {
        self.cc.as_ref().map_or(
            u64::from(self.config.window) * u64::from(self.config.mss),
            Nscc::window,
        )
    }

    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }

    /// Receiver credits: bytes the peer asked for and was not yet granted.
    pub fn credit_wanted(&self) -> u64 {
        self.credit_rx.wanted()
    }

    /// Grants the peer up to `most` bytes of what it asked for, or with nothing asked credit ahead of its
    /// asking up to a window (a credit packet owed); what it granted and where the peer then stands.
    pub fn grant_credit(&mut self, most: u64) -> (u64, Turn) {
        let ahead = self.config.rccc.unwrap_or(0);
        let granted = self.credit_rx.grant(most, ahead);
        if granted > 0 {
            self.owe_credit();
        }
        (granted, self.credit_rx.turn(ahead))
    }

    /// A credit packet owed, repeating the grants so far.
    fn owe_credit(&mut self) {
        let ev = (self.credit_rx.given_units() % u32::from(self.config.evs.max(1))) as u16;
        self.owe(Control::Credit { ev });
    }

    /// Whether the PDC failed (a work request's retries ran out, or the peer refused a message).
    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }

    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    // --- verbs -------------------------------------------------------------------------------------------

    /// Binds the PDC to its peer, whose first PSN is `remote_psn`.
    pub fn connect(&mut self, remote_pdc: u32, remote_psn: u32) -> Result<(), UetVerbError> {
        if self.connected {
            return Err(UetVerbError::Connected { pdc: self.pdc });
        }
        self.remote_pdc = remote_pdc;
        self.rx_base = u64::from(remote_psn);
        self.connected = true;
        Ok(())
    }

    /// Queues `wr`; a local error (length, key) completes it with that status at its turn.
    pub fn post_send<M: Memory<Window = W>>(
        &mut self,
        memory: &mut M,
        wr: SendWr,
    ) -> Result<(), UetVerbError> {
        if !self.connected {
            return Err(UetVerbError::NotConnected { pdc: self.pdc });
        }
        if wr.opcode == WrOpcode::RdmaRead {
            return Err(UetVerbError::Unsupported {
                pdc: self.pdc,
                opcode: wr.opcode,
            });
        }
        if self.failed {
            self.complete(
                wr.wr_id,
                WcStatus::WrFlushErr,
                wr.opcode.completion(),
                0,
                None,
            );
            return Ok(());
        }
        let (local, error) = local_buffer(memory, &wr, self.config.max_msg);
        let packets = if error.is_some() {
            0
        } else {
            wr.length.div_ceil(u64::from(self.config.mss.max(1))).max(1)
        };
        let message_id = self.next_message;
        self.next_message = self.next_message.wrapping_add(1);
        self.sq.push_back(Outbound {
            wr,
            message_id,
            first: self.end,
            packets,
            unacked: packets,
            local,
            error,
        });
        self.end += packets;
        self.complete_front();
        Ok(())
    }

    /// Queues a receive for the next SEND or WRITE with immediate.
    pub fn post_recv(&mut self, wr: RecvWr) {
        if self.failed {
            self.complete(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
            return;
        }
        self.rq.push_back(wr);
        self.claim();
    }

    /// Up to `max_entries` completions, oldest first.
    pub fn poll_completions(
        &mut self,
        max_entries: Option<usize>,
    ) -> std::collections::vec_deque::Drain<'_, Completion> {
        let n = max_entries.map_or(self.completions.len(), |m| m.min(self.completions.len()));
        self.completions.drain(..n)
    }

    pub fn completions_len(&self) -> usize {
        self.completions.len()
    }

    // --- the I/O layer's side ----------------------------------------------------------------------------

    /// When `on_timer` is due: the oldest packet in flight's retransmission timeout, an ACK held back, or a
    /// packet without credit.
    pub fn next_deadline(&self) -> Option<u64> {
        [
            self.rto_at,
            self.ack_due.map(|(at, _, _)| at),
            self.credit_probe_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// An ACK held back past its time goes; every packet in flight whose timeout passed goes back to be sent
    /// again (or fails its work request once its retries are spent).
    pub fn on_timer(&mut self, now: u64) {
        if self.credit_probe_at.is_some_and(|at| now >= at) {
            self.credit_probe_at = None;
            if let Some(credit) = self.credit_tx.as_mut() {
                credit.timed_out();
            }
        }
        if let Some((at, psn, ev)) = self.ack_due {
            if now >= at {
                self.ack_due = None;
                self.unacked_requests = 0;
                self.owe(Control::Ack {
                    psn,
                    ecn: false,
                    ev,
                });
            }
        }
        if self.rto_at.is_none_or(|at| now < at) {
            return;
        }
        let timeout = self.rto();
        let mut expired = false;
        let mut exhausted = None;
        for (i, sent) in self.sent.iter_mut().enumerate() {
            if !sent.in_flight || sent.at.saturating_add(timeout) > now {
                continue;
            }
            sent.in_flight = false;
            sent.timeouts = sent.timeouts.saturating_add(1);
            self.in_flight_bytes = self.in_flight_bytes.saturating_sub(u64::from(sent.len));
            self.spray.lost(sent.ev);
            if let Some(cc) = self.cc.as_mut() {
                cc.on_timeout(u64::from(sent.len));
            }
            if let Some(credit) = self.credit_tx.as_mut() {
                credit.timed_out();
            }
            let psn = self.base + i as u64;
            if sent.timeouts > self.config.retries && exhausted.is_none() {
                exhausted = Some(psn);
            }
            self.resend.push_back(psn);
            expired = true;
        }
        if expired {
            self.counters.timeouts += 1;
        }
        if let Some(psn) = exhausted {
            self.fail_at(psn, WcStatus::RetryExcErr);
            return;
        }
        self.rearm();
    }

    /// Whether a request is waiting to go (the window permitting) or an ACK/NACK is owed.
    pub fn has_data(&self) -> bool {
        !self.out.is_empty()
            || (!self.failed && (!self.resend.is_empty() || self.tx_next < self.end))
    }

    /// The next packet to send into `out` (its payload buffer reused), if any: ACKs and NACKs first, then
    /// resends, then new requests while the window has room.
    pub fn next_packet<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        memory: &mut M,
        out: &mut UetPacket,
    ) -> bool {
        if let Some(control) = self.out.pop_front() {
            self.control_packet(control, out);
            return true;
        }
        if self.failed {
            return false;
        }
        while let Some(&psn) = self.resend.front() {
            let Some(sent) = self.slot(psn) else {
                self.resend.pop_front();
                continue;
            };
            if sent.acked || sent.in_flight {
                self.resend.pop_front();
                continue;
            }
            if !self.room(u64::from(sent.len)) {
                self.blocked(now);
                return false;
            }
            self.resend.pop_front();
            self.counters.retransmitted_packets += 1;
            return self.request_packet(now, psn, memory, out);
        }
        if self.tx_next >= self.end || self.tx_next - self.base >= u64::from(self.config.window) {
            return false;
        }
        let psn = self.tx_next;
        let Some(len) = self.op_at(psn).map(|at| self.span(&self.sq[at], psn).1) else {
            return false;
        };
        if !self.room(u64::from(len)) {
            self.blocked(now);
            return false;
        }
        self.tx_next += 1;
        self.sent.push_back(Sent::default());
        self.request_packet(now, psn, memory, out)
    }

    /// One inbound packet for this PDC (`payload` held apart from its headers).
    pub fn receive_with_payload<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        packet: &UetPacket,
        payload: &[u8],
        memory: &mut M,
    ) {
        if !self.connected || self.failed {
            return;
        }
        self.counters.packets_received += 1;
        if packet.ecn_ce {
            self.counters.ecn_ce_received += 1;
        }
        match packet.kind {
            PdsKind::Ack => self.on_ack(now, packet),
            PdsKind::Nack => self.on_nack(now, packet),
            PdsKind::Request => self.on_request(now, packet, payload, memory),
            PdsKind::Credit => {
                self.counters.credits_received += 1;
                if let Some(credit) = self.credit_tx.as_mut() {
                    credit.granted(packet.credit);
                }
            }
        }
    }

    // --- requester ---------------------------------------------------------------------------------------

    /// Whether `len` more bytes fit the window (one packet always may go when nothing is in flight) and, with
    /// receiver credits, the credit.
    fn room(&self, len: u64) -> bool {
        (self.in_flight_bytes == 0 || self.in_flight_bytes + len <= self.window_bytes())
            && self.credit_tx.as_ref().is_none_or(CreditSender::may_send)
    }

    /// A packet could not go: with nothing in flight for want of credit, one may go without after a
    /// retransmission timeout.
    fn blocked(&mut self, now: u64) {
        let no_credit = self
            .credit_tx
            .as_ref()
            .is_some_and(|credit| !credit.may_send());
        if no_credit && self.in_flight_bytes == 0 && self.credit_probe_at.is_none() {
            self.credit_probe_at = Some(now.saturating_add(self.rto()));
        }
    }

    fn slot(&self, psn: u64) -> Option<&Sent> {
        psn.checked_sub(self.base)
            .and_then(|i| self.sent.get(usize::try_from(i).ok()?))
    }

    fn slot_mut(&mut self, psn: u64) -> Option<&mut Sent> {
        let i = usize::try_from(psn.checked_sub(self.base)?).ok()?;
        self.sent.get_mut(i)
    }

    /// The index in `sq` of the work request `psn` belongs to.
    fn op_at(&self, psn: u64) -> Option<usize> {
        let at = self.sq.partition_point(|op| op.first + op.packets <= psn);
        self.sq
            .get(at)
            .filter(|op| op.first <= psn && psn < op.first + op.packets)
            .map(|_| at)
    }

    /// Where request `psn` of `op` lies in its message, and how long it is.
    fn span(&self, op: &Outbound<W>, psn: u64) -> (u64, u32) {
        let mss = u64::from(self.config.mss.max(1));
        let offset = (psn - op.first) * mss;
        let len = op.wr.length.saturating_sub(offset).min(mss);
        (offset, len as u32)
    }

    fn request_packet<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        psn: u64,
        memory: &mut M,
        out: &mut UetPacket,
    ) -> bool {
        let Some(at) = self.op_at(psn) else {
            return false;
        };
        let ev = self.spray.choose();
        let op = &self.sq[at];
        let (offset, len) = self.span(op, psn);
        let last = psn + 1 == op.first + op.packets;
        let resent = self.slot(psn).is_some_and(|s| s.sent);
        // The responder coalesces ACKs; it is asked for one at once where the sender would otherwise wait for
        // it: a message's end, a resend, a window this packet fills, nothing else to send.
        let window_full = self.in_flight_bytes + 2 * u64::from(len) > self.window_bytes()
            || self.tx_next - self.base >= u64::from(self.config.window);
        let drained = self.tx_next >= self.end && self.resend.is_empty();
        let ack_request = last || resent || window_full || drained;
        out.payload.clear();
        if let (Some(window), true) = (&op.local, len > 0) {
            memory.read(window, offset, len as usize, &mut out.payload);
        }
        let with_imm = matches!(
            op.wr.opcode,
            WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm
        );
        *out = UetPacket {
            kind: PdsKind::Request,
            spdcid: self.pdc as u16,
            dpdcid: self.remote_pdc as u16,
            psn: psn as u32,
            ack_request,
            retransmit: resent,
            message_id: op.message_id,
            som: offset == 0,
            eom: last,
            remote_addr: op.wr.remote_addr,
            rkey: op.wr.rkey,
            offset,
            length: op.wr.length,
            imm: (with_imm && offset == 0).then_some(op.wr.imm),
            send: matches!(op.wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            ev,
            payload: std::mem::take(&mut out.payload),
            ..UetPacket::default()
        };
        if let Some(sent) = self.slot_mut(psn) {
            sent.resent |= resent;
            sent.sent = true;
            sent.at = now;
            sent.ev = ev;
            sent.len = len;
            sent.in_flight = true;
        }
        self.in_flight_bytes += u64::from(len);
        if let Some(credit) = self.credit_tx.as_mut() {
            credit.spend(u64::from(len));
        }
        self.credit_probe_at = None;
        out.credit_target = self.credit_target();
        self.counters.packets_sent += 1;
        self.counters.bytes_sent += u64::from(len);
        if self.rto_at.is_none() {
            self.rto_at = Some(now.saturating_add(self.rto()));
        }
        true
    }

    /// The credit target a request carries: the bytes still to send (new and resent; with NSCC, at most its
    /// window and a packet), none without receiver credits.
    fn credit_target(&self) -> Option<u32> {
        let credit = self.credit_tx.as_ref()?;
        let mss = u64::from(self.config.mss.max(1));
        let packets = (self.end - self.tx_next).saturating_add(self.resend.len() as u64);
        let mut wanted = packets.saturating_mul(mss);
        if self.cc.is_some() {
            wanted = wanted.min(self.window_bytes().saturating_add(mss));
        }
        Some(credit.target(wanted, mss))
    }

    fn on_ack(&mut self, now: u64, packet: &UetPacket) {
        self.counters.acks_received += 1;
        if let Some(credit) = self.credit_tx.as_mut() {
            credit.answered();
        }
        let Some(cack) = self.unwrap_tx(packet.cack_psn) else {
            return; // not a PSN of ours: a stale or hostile ACK
        };
        let mut acked_bytes = 0;
        for psn in self.base..cack.max(self.base) {
            acked_bytes += self.acknowledge(psn);
        }
        if let Some(base) = self.unwrap_tx(packet.sack_base) {
            for bit in 0..64u64 {
                if packet.sack_bitmap & (1 << bit) != 0 {
                    acked_bytes += self.acknowledge(base + bit);
                }
            }
        }
        let mut delay = None;
        if let Some(psn) = self.unwrap_tx(packet.psn) {
            acked_bytes += self.acknowledge(psn);
            if let Some(sent) = self.slot(psn).copied() {
                if !sent.resent {
                    delay = Some(now.saturating_sub(sent.at));
                }
                if let Some(rtt) = delay {
                    self.sample_rtt(rtt);
                }
                self.spray.acknowledged(sent.ev, packet.ecn_echo);
            }
        }
        if let Some(cc) = self.cc.as_mut() {
            cc.on_ack(
                now,
                acked_bytes,
                self.in_flight_bytes,
                delay,
                packet.ecn_echo,
            );
        }
        while self.sent.front().is_some_and(|s| s.acked) {
            self.sent.pop_front();
            self.base += 1;
        }
        self.complete_front();
        self.rearm();
    }

    /// Marks `psn` acknowledged; the bytes it takes out of flight.
    fn acknowledge(&mut self, psn: u64) -> u64 {
        let Some(sent) = self.slot_mut(psn) else {
            return 0;
        };
        if sent.acked {
            return 0;
        }
        sent.acked = true;
        let was_in_flight = std::mem::replace(&mut sent.in_flight, false);
        let len = u64::from(sent.len);
        if was_in_flight {
            self.in_flight_bytes = self.in_flight_bytes.saturating_sub(len);
        }
        if let Some(at) = self.op_at(psn) {
            let op = &mut self.sq[at];
            op.unacked = op.unacked.saturating_sub(1);
        }
        len
    }

    fn on_nack(&mut self, now: u64, packet: &UetPacket) {
        self.counters.nacks_received += 1;
        if let Some(credit) = self.credit_tx.as_mut() {
            credit.answered();
        }
        let Some(psn) = self.unwrap_tx(packet.psn) else {
            return;
        };
        match packet.nack_code {
            nack::TRIMMED => {
                let Some(sent) = self.slot_mut(psn) else {
                    return;
                };
                if sent.acked || !sent.in_flight {
                    return;
                }
                sent.in_flight = false;
                let (len, ev) = (u64::from(sent.len), sent.ev);
                self.in_flight_bytes = self.in_flight_bytes.saturating_sub(len);
                self.spray.lost(ev);
                self.resend.push_back(psn);
                let in_flight = self.in_flight_bytes;
                if let Some(cc) = self.cc.as_mut() {
                    cc.on_nack(now, len, in_flight);
                }
                self.rearm();
            }
            nack::ACCESS => self.fail_at(psn, WcStatus::RemAccessErr),
            _ => self.fail_at(psn, WcStatus::RemInvReqErr),
        }
    }

    /// The 64-bit PSN whose low half is `psn`, nearest `base` (an ACK overtaken by a later one on another
    /// path names PSNs behind it), if it is not past `tx_next`.
    fn unwrap_tx(&self, psn: u32) -> Option<u64> {
        let ahead = psn.wrapping_sub(self.base as u32) as i32;
        let psn = self.base.checked_add_signed(i64::from(ahead))?;
        (psn <= self.tx_next).then_some(psn)
    }

    /// The retransmission timer from the oldest packet in flight.
    /// The retransmission timeout now: the configured least, or the measured RTT's bound if longer.
    fn rto(&self) -> u64 {
        let measured = self
            .srtt
            .map_or(0, |(srtt, var)| srtt.saturating_add(var.saturating_mul(4)));
        self.config.timeout_ns.max(measured)
    }

    /// An RTT sample (RFC 6298 2.2 and 2.3: gains 1/8 and 1/4).
    fn sample_rtt(&mut self, rtt: u64) {
        self.srtt = Some(match self.srtt {
            None => (rtt, rtt / 2),
            Some((srtt, var)) => {
                let var = var.saturating_mul(3).saturating_add(srtt.abs_diff(rtt)) / 4;
                (srtt.saturating_mul(7).saturating_add(rtt) / 8, var)
            }
        });
    }

    fn rearm(&mut self) {
        let oldest = self.sent.iter().filter(|s| s.in_flight).map(|s| s.at).min();
        let rto = self.rto();
        self.rto_at = oldest.map(|at| at.saturating_add(rto));
    }

    /// Completes the work requests at the front that are done (all acknowledged, or failed locally).
    fn complete_front(&mut self) {
        while let Some(op) = self.sq.front() {
            let done =
                op.error.is_some() || (op.unacked == 0 && op.first + op.packets <= self.base);
            if !done {
                break;
            }
            let Some(op) = self.sq.pop_front() else { break };
            let status = op.error.unwrap_or(WcStatus::Success);
            if status != WcStatus::Success || op.wr.signaled {
                let len = if status == WcStatus::Success {
                    op.wr.length
                } else {
                    0
                };
                self.complete(op.wr.wr_id, status, op.wr.opcode.completion(), len, None);
            }
            if status != WcStatus::Success {
                self.enter_error();
                return;
            }
        }
    }

    /// Fails the work request `psn` belongs to with `status` (those before it are flushed) and the PDC.
    fn fail_at(&mut self, psn: u64, status: WcStatus) {
        let at = self.op_at(psn).unwrap_or(0);
        for _ in 0..at {
            if let Some(op) = self.sq.pop_front() {
                self.complete(
                    op.wr.wr_id,
                    WcStatus::WrFlushErr,
                    op.wr.opcode.completion(),
                    0,
                    None,
                );
            }
        }
        if let Some(op) = self.sq.pop_front() {
            self.complete(op.wr.wr_id, status, op.wr.opcode.completion(), 0, None);
        }
        self.enter_error();
    }

    /// Everything still posted completes flushed, and nothing more is sent but ACKs.
    fn enter_error(&mut self) {
        self.failed = true;
        self.rto_at = None;
        self.resend.clear();
        while let Some(op) = self.sq.pop_front() {
            self.complete(
                op.wr.wr_id,
                WcStatus::WrFlushErr,
                op.wr.opcode.completion(),
                0,
                None,
            );
        }
        for inbound in std::mem::take(&mut self.inbound) {
            if let Some(recv) = inbound.recv {
                self.complete(recv.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
            }
        }
        while let Some(recv) = self.rq.pop_front() {
            self.complete(recv.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
        }
    }

    // --- responder ---------------------------------------------------------------------------------------

    fn on_request<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        packet: &UetPacket,
        payload: &[u8],
        memory: &mut M,
    ) {
        if let Some(units) = packet.credit_target {
            self.credit_rx.asked(units); // a trimmed or repeated request asks as well
            if packet.retransmit && self.credit_rx.wanted() == 0 && self.credit_rx.given_units() > 0
            {
                self.owe_credit(); // the sender may have lost a grant: it is cumulative, so say it again
            }
        }
        let ahead = u64::from(packet.psn.wrapping_sub(self.rx_base as u32));
        if ahead >= 1 << 31 {
            // behind the cumulative point: a resend of something already in
            self.counters.duplicate_packets += 1;
            let behind = u64::from((self.rx_base as u32).wrapping_sub(packet.psn));
            self.owe_ack(now, self.rx_base.saturating_sub(behind), packet, true);
            return;
        }
        if ahead >= RX_WINDOW {
            self.counters.dropped_packets += 1;
            return;
        }
        let psn = self.rx_base + ahead;
        if self.arrived(psn) {
            self.counters.duplicate_packets += 1;
            self.owe_ack(now, psn, packet, true);
            return;
        }
        if packet.trimmed {
            self.counters.trimmed_received += 1;
            self.owe(Control::Nack {
                psn,
                code: nack::TRIMMED,
                ev: packet.ev,
            });
            return;
        }
        match self.place(packet, payload, memory) {
            Ok(()) => {}
            Err(Refused::Drop) => {
                self.counters.dropped_packets += 1;
                return;
            }
            Err(Refused::Nack(code)) => {
                self.owe(Control::Nack {
                    psn,
                    code,
                    ev: packet.ev,
                });
                return;
            }
        }
        self.mark_arrived(psn);
        let urgent = packet.ack_request || packet.ecn_ce || ahead != 0;
        self.owe_ack(now, psn, packet, urgent);
    }

    /// Writes `payload` where it belongs, finishing its message if it was the last part missing.
    fn place<M: Memory<Window = W>>(
        &mut self,
        packet: &UetPacket,
        payload: &[u8],
        memory: &mut M,
    ) -> Result<(), Refused> {
        let len = payload.len() as u64;
        let fits = packet.length <= self.config.max_msg
            && packet
                .offset
                .checked_add(len)
                .is_some_and(|end| end <= packet.length);
        if !fits {
            return Err(Refused::Nack(nack::INVALID));
        }
        let at = match self
            .inbound
            .iter()
            .position(|m| m.message_id == packet.message_id)
        {
            Some(at) => at,
            None => {
                // Messages in and waiting for a receive count too: a peer that writes with immediates nobody
                // takes is held back (its resends wait), not buffered without end.
                if self.inbound.len() + self.unclaimed.len() >= MAX_INBOUND {
                    return Err(Refused::Drop);
                }
                let mut recv = None;
                let window = if packet.send {
                    let Some(wr) = self.rq.pop_front() else {
                        return Err(Refused::Drop); // no receive yet: its resend will find one
                    };
                    recv = Some(wr);
                    if packet.length > wr.length {
                        self.rq.push_front(wr);
                        return Err(Refused::Nack(nack::INVALID));
                    }
                    if packet.length == 0 {
                        None
                    } else {
                        match memory.local(wr.lkey, wr.addr, packet.length, true) {
                            Ok(window) => Some(window),
                            Err(AccessError) => {
                                self.rq.push_front(wr);
                                return Err(Refused::Nack(nack::ACCESS));
                            }
                        }
                    }
                } else if packet.length == 0 {
                    None
                } else {
                    match memory.remote(packet.rkey, packet.remote_addr, packet.length, true) {
                        Ok(window) => Some(window),
                        Err(AccessError) => return Err(Refused::Nack(nack::ACCESS)),
                    }
                };
                self.inbound.push(Inbound {
                    message_id: packet.message_id,
                    length: packet.length,
                    received: 0,
                    window,
                    imm: None,
                    send: packet.send,
                    recv,
                });
                self.inbound.len() - 1
            }
        };
        let message = &mut self.inbound[at];
        if message.length != packet.length || message.send != packet.send {
            return Err(Refused::Nack(nack::INVALID));
        }
        if packet.som {
            // the immediate rides on the message's first packet
            message.imm = packet.imm;
        }
        if let (Some(window), false) = (&message.window, payload.is_empty()) {
            memory.write(window, packet.offset, payload);
        }
        message.received = message.received.saturating_add(len);
        if message.received >= message.length {
            let message = self.inbound.swap_remove(at);
            self.finish(message);
        }
        Ok(())
    }

    /// A message is in: a SEND completes its receive, a WRITE with immediate the next one posted.
    fn finish(&mut self, message: Inbound<W>) {
        if let Some(recv) = message.recv {
            self.complete(
                recv.wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                message.length,
                message.imm,
            );
        } else if message.imm.is_some() {
            self.unclaimed.push_back((message.imm, message.length));
            self.claim();
        }
    }

    /// Hands WRITEs with immediate that are in to the receives posted.
    fn claim(&mut self) {
        while !self.unclaimed.is_empty() && !self.rq.is_empty() {
            let (Some((imm, length)), Some(recv)) =
                (self.unclaimed.pop_front(), self.rq.pop_front())
            else {
                break;
            };
            self.complete(
                recv.wr_id,
                WcStatus::Success,
                WcOpcode::RecvRdmaWithImm,
                length,
                imm,
            );
        }
    }

    fn arrived(&self, psn: u64) -> bool {
        psn < self.rx_base
            || psn
                .checked_sub(self.rx_base + 1)
                .and_then(|i| self.seen.get(usize::try_from(i).ok()?).copied())
                .unwrap_or(false)
    }

    fn mark_arrived(&mut self, psn: u64) {
        if psn == self.rx_base {
            self.rx_base += 1;
            while self.seen.front() == Some(&true) {
                self.seen.pop_front();
                self.rx_base += 1;
                self.out_of_order -= 1;
            }
            // the slot of the new rx_base itself is not kept
            self.seen.pop_front();
            return;
        }
        let i = (psn - self.rx_base - 1) as usize;
        if self.seen.len() <= i {
            self.seen.resize(i + 1, false);
        }
        self.seen[i] = true;
        self.out_of_order += 1;
    }

    /// An ACK of `packet` (at `psn`) is owed: sent at once if `urgent` or every `ack_every` requests.
    fn owe_ack(&mut self, now: u64, psn: u64, packet: &UetPacket, urgent: bool) {
        self.unacked_requests += 1;
        if !urgent && self.unacked_requests < self.config.ack_every.max(1) {
            if self.ack_due.is_none() {
                self.ack_due = Some((now.saturating_add(self.ack_delay()), psn, packet.ev));
            } else if let Some(due) = self.ack_due.as_mut() {
                (due.1, due.2) = (psn, packet.ev);
            }
            return;
        }
        self.unacked_requests = 0;
        self.ack_due = None;
        // A later ACK carries everything an earlier one still waiting would: it takes its place, unless that
        // one echoes a mark this one does not.
        if let Some(Control::Ack { ecn: false, .. }) = self.out.back() {
            self.out.pop_back();
        }
        self.owe(Control::Ack {
            psn,
            ecn: packet.ecn_ce,
            ev: packet.ev,
        });
    }

    fn owe(&mut self, control: Control) {
        self.out.push_back(control);
    }

    /// How long an ACK may be held back: an eighth of the least retransmission timeout (about a round trip).
    fn ack_delay(&self) -> u64 {
        (self.config.timeout_ns / 8).max(1)
    }

    fn control_packet(&mut self, control: Control, out: &mut UetPacket) {
        // The SACK bitmap covers the 64 PSNs that end at the one acknowledged (uet-htsim's), not the 64 after the
        // cumulative point: with a hole early in a wide window, the packets far past it are acknowledged too.
        // A credit grant (a CONTROL packet) carries no SACK: it is not computed.
        let (base, sack) = match control {
            Control::Ack { psn, .. } | Control::Nack { psn, .. } => {
                let base = psn.saturating_sub(63).max(self.rx_base);
                let sack = (0..64)
                    .filter(|&bit| self.arrived(base + bit))
                    .fold(0u64, |sack, bit| sack | 1 << bit);
                (base, sack)
            }
            Control::Credit { .. } => (self.rx_base, 0),
        };
        out.payload.clear();
        let payload = std::mem::take(&mut out.payload);
        *out = UetPacket {
            spdcid: self.pdc as u16,
            dpdcid: self.remote_pdc as u16,
            cack_psn: self.rx_base as u32,
            sack_base: base as u32,
            sack_bitmap: sack,
            out_of_order: u16::try_from(self.out_of_order).unwrap_or(u16::MAX),
            payload,
            ..UetPacket::default()
        };
        match control {
            Control::Ack { psn, ecn, ev } => {
                out.kind = PdsKind::Ack;
                out.psn = psn as u32;
                out.ecn_echo = ecn;
                out.ev = ev;
                self.counters.acks_sent += 1;
            }
            Control::Nack { psn, code, ev } => {
                out.kind = PdsKind::Nack;
                out.psn = psn as u32;
                out.nack_code = code;
                out.ev = ev;
                self.counters.nacks_sent += 1;
            }
            Control::Credit { ev } => {
                out.kind = PdsKind::Credit;
                out.credit = self.credit_rx.given_units();
                out.ev = ev;
                self.counters.credits_sent += 1;
            }
        }
        self.counters.packets_sent += 1;
    }

    fn complete(
        &mut self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u64,
        imm: Option<u32>,
    ) {
        self.completions.push_back(Completion {
            wr_id,
            status,
            opcode,
            qp_num: self.pdc,
            byte_len,
            imm,
            timestamp: 0,
        });
    }
}

/// Why a request was not placed.
enum Refused {
    Drop,
    Nack(u8),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::rc::test_memory::{Flat, KEY, REGION};
    use crate::model::rng::CpythonRandom;
    use proptest::prelude::*;

    const PSN_A: u32 = u32::MAX - 3; // wraps the PSN space within a few packets
    const PSN_B: u32 = 0x5000;
    const MSS: u32 = 256;

    fn config(nscc: bool) -> UetConfig {
        UetConfig {
            mss: MSS,
            timeout_ns: 100_000,
            retries: 7,
            ack_every: 4,
            window: 32,
            max_msg: REGION,
            evs: 64,
            spray: SprayPolicy::Reps,
            nscc: nscc.then(|| NsccParams::for_path(10_000, 1_000_000_000, true)),
            rccc: None,
        }
    }

    /// A receive for a WRITE with immediate (it takes no buffer).
    fn recv(wr_id: u64) -> RecvWr {
        RecvWr {
            wr_id,
            addr: 0,
            length: 0,
            lkey: KEY,
        }
    }

    fn write_imm(wr_id: u64, addr: u64, length: u64, remote_addr: u64, imm: u32) -> SendWr {
        SendWr {
            wr_id,
            opcode: WrOpcode::RdmaWriteWithImm,
            addr,
            length,
            lkey: KEY,
            remote_addr,
            rkey: KEY,
            imm,
            signaled: true,
        }
    }

    /// What the channel does to each packet, by the draw.
    #[derive(Clone, Copy, Debug)]
    struct Faults {
        drop: f64,
        trim: f64,
        duplicate: f64,
        /// Packets in flight the channel picks the next delivered from (1: in order).
        reorder: usize,
    }

    /// Two connected PDCs, their memories and a channel between them.
    struct Net {
        pdcs: [UetPdc<(u64, u64)>; 2],
        memory: [Flat; 2],
        now: u64,
        wire: Vec<(usize, UetPacket)>,
        random: CpythonRandom,
        faults: Faults,
        completions: [Vec<Completion>; 2],
    }

    impl Net {
        fn new(config: UetConfig, faults: Faults, seed: u64) -> Net {
            let mut a = UetPdc::new(1, config, PSN_A, seed);
            let mut b = UetPdc::new(2, config, PSN_B, seed + 1);
            a.connect(2, PSN_B).unwrap();
            b.connect(1, PSN_A).unwrap();
            Net {
                pdcs: [a, b],
                memory: [Flat::new(1), Flat::new(2)],
                now: 1_000,
                wire: Vec::new(),
                random: CpythonRandom::from_u64(seed),
                faults,
                completions: [Vec::new(), Vec::new()],
            }
        }

        fn post(&mut self, side: usize, wr: SendWr) {
            let [a, b] = &mut self.memory;
            let memory = if side == 0 { a } else { b };
            self.pdcs[side].post_send(memory, wr).unwrap();
        }

        /// Pulls what both sides have to send into the channel.
        fn pull(&mut self) {
            for side in 0..2 {
                let mut packet = UetPacket::default();
                while self.pdcs[side].next_packet(self.now, &mut self.memory[side], &mut packet) {
                    self.wire.push((side, packet.clone()));
                }
            }
        }

        /// Delivers one packet from the channel (faults applied); false when it is empty.
        fn deliver(&mut self) -> bool {
            if self.wire.is_empty() {
                return false;
            }
            let pick = (self.random.next_u32() as usize) % self.faults.reorder.min(self.wire.len());
            let (from, mut packet) = self.wire.remove(pick);
            self.now += 1_000;
            let draw = self.random.random();
            if draw < self.faults.drop {
                return true;
            }
            if packet.kind == PdsKind::Request && draw < self.faults.drop + self.faults.trim {
                packet.trimmed = true;
                packet.payload.clear();
            }
            if self.random.random() < self.faults.duplicate {
                self.wire.push((from, packet.clone()));
            }
            let to = 1 - from;
            let payload = packet.payload.clone();
            self.pdcs[to].receive_with_payload(self.now, &packet, &payload, &mut self.memory[to]);
            true
        }

        fn collect(&mut self) {
            for side in 0..2 {
                let done: Vec<Completion> = self.pdcs[side].poll_completions(None).collect();
                self.completions[side].extend(done);
            }
        }

        /// Runs until nothing moves: the channel is empty and no timer is due (each is fired when it is the
        /// only thing left).
        fn run(&mut self) {
            for _ in 0..200_000 {
                self.pull();
                if self.deliver() {
                    for pdc in &mut self.pdcs {
                        pdc.grant_credit(crate::model::rccc::GRANT_BYTES); // receiver credits at once
                    }
                    self.collect();
                    continue;
                }
                let due = self.pdcs.iter().filter_map(UetPdc::next_deadline).min();
                let Some(due) = due else { break };
                self.now = self.now.max(due);
                for pdc in &mut self.pdcs {
                    pdc.on_timer(self.now);
                }
                self.collect();
            }
            self.collect();
        }
    }

    fn clean() -> Faults {
        Faults {
            drop: 0.0,
            trim: 0.0,
            duplicate: 0.0,
            reorder: 1,
        }
    }

    #[test]
    fn a_write_with_immediate_lands_whole_and_completes_on_both_sides() {
        let mut net = Net::new(config(true), clean(), 1);
        net.pdcs[1].post_recv(recv(70));
        let length = 10 * u64::from(MSS) + 17;
        net.post(0, write_imm(5, 100, length, 3000, 0xABCD));
        net.run();
        assert_eq!(net.memory[1].at(3000, length), Flat::new(1).at(100, length));
        assert_eq!(net.completions[0].len(), 1);
        assert_eq!(net.completions[0][0].status, WcStatus::Success);
        assert_eq!(net.completions[0][0].wr_id, 5);
        let recv = net.completions[1][0];
        assert_eq!(
            (recv.wr_id, recv.opcode, recv.byte_len, recv.imm),
            (70, WcOpcode::RecvRdmaWithImm, length, Some(0xABCD))
        );
        assert_eq!(net.pdcs[0].counters().packets_sent, 11);
        assert_eq!(net.pdcs[0].counters().retransmitted_packets, 0);
        assert_eq!(net.pdcs[0].in_flight_bytes(), 0);
    }

    #[test]
    fn packets_in_any_order_land_where_they_belong() {
        let faults = Faults {
            reorder: 16,
            ..clean()
        };
        let mut net = Net::new(config(false), faults, 2);
        for i in 0..4 {
            net.pdcs[1].post_recv(recv(70 + i));
            net.post(
                0,
                write_imm(i, 100 + i * 4000, 3000, 20_000 + i * 4000, i as u32),
            );
        }
        net.run();
        for i in 0..4 {
            let (from, to) = (100 + i * 4000, 20_000 + i * 4000);
            assert_eq!(net.memory[1].at(to, 3000), Flat::new(1).at(from, 3000));
        }
        let mut imms: Vec<Option<u32>> = net.completions[1].iter().map(|c| c.imm).collect();
        imms.sort();
        assert_eq!(imms, vec![Some(0), Some(1), Some(2), Some(3)]);
        let ids: Vec<u64> = net.completions[0].iter().map(|c| c.wr_id).collect();
        assert_eq!(
            ids,
            vec![0, 1, 2, 3],
            "work requests complete in the order posted"
        );
        assert!(net.pdcs[1].counters().acks_sent > 0);
    }

    #[test]
    fn with_receiver_credits_a_sender_speculates_a_window_then_sends_what_it_is_granted() {
        let config = UetConfig {
            rccc: Some(4 * u64::from(MSS)),
            ..config(false)
        };
        let mut net = Net::new(config, clean(), 11);
        let length = 32 * u64::from(MSS);
        net.pdcs[1].post_recv(recv(7));
        net.post(0, write_imm(1, 0, length, 40_000, 5));
        net.pull();
        let asks: Vec<Option<u32>> = net.wire.iter().map(|(_, p)| p.credit_target).collect();
        // a window's credit speculated; each request asks for what is left to send (a window at most) less the
        // credit it still holds, in 256-byte units
        assert_eq!(asks, [Some(1), Some(2), Some(3), Some(4)]);
        net.run();
        assert_eq!(net.memory[1].at(40_000, length), Flat::new(1).at(0, length));
        assert!(net.completions[0]
            .iter()
            .all(|c| c.status == WcStatus::Success));
        let granted = net.pdcs[1].counters().credits_sent;
        assert!(
            granted >= 7,
            "28 packets after speculation, 4 a grant: {granted} grants"
        );
        assert_eq!(net.pdcs[0].counters().credits_received, granted);
        assert_eq!(net.pdcs[0].counters().retransmitted_packets, 0);
    }

    #[test]
    fn a_sender_whose_grant_was_lost_sends_one_packet_after_a_timeout_and_hears_it_again() {
        let config = UetConfig {
            rccc: Some(4 * u64::from(MSS)),
            ..config(false)
        };
        let mut net = Net::new(config, clean(), 12);
        net.post(0, write_imm(1, 0, 8 * u64::from(MSS), 40_000, 5));
        net.pdcs[1].post_recv(recv(7));
        net.pull();
        while net.deliver() {} // the speculated 4 land; their ACKs end speculation
        net.pull(); // ACKs back; no credit: nothing more goes
        while net.deliver() {}
        net.pull();
        assert!(net.wire.is_empty());
        let (granted, _) = net.pdcs[1].grant_credit(crate::model::rccc::GRANT_BYTES);
        assert!(granted > 0);
        net.pull();
        net.wire.retain(|(_, p)| p.kind != PdsKind::Credit); // the grant is lost
        let due = net.pdcs[0].next_deadline().expect("a probe is due");
        net.now = due;
        net.pdcs[0].on_timer(due);
        net.pull();
        assert_eq!(net.wire.len(), 1, "one packet without credit");
        assert!(net.wire[0].1.retransmit || net.wire[0].1.credit_target.is_some());
        net.run();
        assert_eq!(net.completions[0].len(), 1);
        assert!(net.completions[0][0].status == WcStatus::Success);
    }

    #[test]
    fn a_trimmed_packet_is_nacked_and_sent_again_at_once() {
        let mut net = Net::new(config(true), clean(), 3);
        net.post(0, write_imm(1, 0, 4 * u64::from(MSS), 8000, 9));
        net.pdcs[1].post_recv(recv(2));
        net.pull();
        // the second request is cut to its headers on the way
        net.wire[1].1.trimmed = true;
        net.wire[1].1.payload.clear();
        let before = net.pdcs[0].window_bytes();
        net.run();
        let (a, b) = (net.pdcs[0].counters(), net.pdcs[1].counters());
        assert_eq!(b.trimmed_received, 1);
        assert_eq!(b.nacks_sent, 1);
        assert_eq!(a.nacks_received, 1);
        assert_eq!(a.retransmitted_packets, 1);
        assert_eq!(a.timeouts, 0, "a trim costs no timeout");
        assert!(net.pdcs[0].cc.as_ref().unwrap().counters.nacks == 1 && before > 0);
        assert_eq!(
            net.memory[1].at(8000, 4 * u64::from(MSS)),
            Flat::new(1).at(0, 4 * u64::from(MSS))
        );
        assert_eq!(net.completions[0][0].status, WcStatus::Success);
    }

    #[test]
    fn a_lost_packet_is_sent_again_when_its_timeout_passes() {
        let config = UetConfig {
            ack_every: 1,
            ..config(true)
        };
        let mut net = Net::new(config, clean(), 4);
        net.post(0, write_imm(1, 0, 3 * u64::from(MSS), 8000, 9));
        net.pdcs[1].post_recv(recv(2));
        net.pull();
        net.wire.remove(2); // the last request: nothing after it tells the receiver it is missing
        net.run();
        assert_eq!(net.pdcs[0].counters().timeouts, 1);
        assert_eq!(net.pdcs[0].counters().retransmitted_packets, 1);
        assert_eq!(net.completions[1].len(), 1);
        assert_eq!(net.completions[0][0].status, WcStatus::Success);
    }

    #[test]
    fn a_packet_that_never_arrives_fails_its_work_request_after_its_retries() {
        let faults = Faults {
            drop: 1.0,
            ..clean()
        };
        let mut net = Net::new(config(false), faults, 5);
        net.post(0, write_imm(1, 0, 10, 8000, 9));
        net.post(0, write_imm(2, 0, 10, 8000, 9));
        net.run();
        let statuses: Vec<WcStatus> = net.completions[0].iter().map(|c| c.status).collect();
        assert_eq!(statuses, vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr]);
        assert!(net.pdcs[0].failed());
        assert_eq!(net.pdcs[0].counters().timeouts, 8);
    }

    #[test]
    fn a_key_the_target_refuses_fails_the_work_request_with_a_remote_access_error() {
        let mut net = Net::new(config(false), clean(), 6);
        let mut wr = write_imm(1, 0, 10, 8000, 9);
        wr.rkey = 99;
        net.post(0, wr);
        net.run();
        assert_eq!(net.completions[0][0].status, WcStatus::RemAccessErr);
        assert_eq!(net.pdcs[1].counters().nacks_sent, 1);
    }

    #[test]
    fn the_retransmission_timeout_grows_to_the_round_trips_measured() {
        let config = UetConfig {
            timeout_ns: 10_000,
            ack_every: 1,
            ..config(false)
        };
        let mut net = Net::new(config, clean(), 8);
        net.post(0, write_imm(1, 0, 8 * u64::from(MSS), 8000, 9));
        net.pull();
        assert_eq!(
            net.pdcs[0].next_deadline(),
            Some(net.now + 10_000),
            "the least timeout before any sample"
        );
        // every request answered 50 us after it left: a deep queue, no loss
        net.now += 50_000;
        while net.deliver() {
            net.pull();
        }
        net.post(0, write_imm(2, 0, u64::from(MSS), 8000, 9));
        let sent_at = net.now;
        net.pull();
        let deadline = net.pdcs[0].next_deadline().unwrap();
        assert!(
            deadline >= sent_at + 50_000,
            "{} after the send",
            deadline - sent_at
        );
        assert_eq!(net.pdcs[0].counters().timeouts, 0);
    }

    #[test]
    fn an_ack_held_back_for_coalescing_goes_out_when_its_time_comes() {
        let mut net = Net::new(config(false), clean(), 9);
        net.post(0, write_imm(1, 0, 8 * u64::from(MSS), 8000, 9));
        net.pull();
        let requests: Vec<UetPacket> = net.wire.drain(..).map(|(_, p)| p).collect();
        // the first two arrive in order, unmarked, asking for nothing: held for coalescing
        for packet in &requests[..2] {
            assert!(!packet.ack_request);
            let payload = packet.payload.clone();
            net.pdcs[1].receive_with_payload(net.now, packet, &payload, &mut net.memory[1]);
        }
        let mut out = UetPacket::default();
        assert!(!net.pdcs[1].next_packet(net.now, &mut net.memory[1], &mut out));
        let due = net.pdcs[1].next_deadline().expect("the held ACK's time");
        assert_eq!(due, net.now + config(false).timeout_ns / 8);
        net.pdcs[1].on_timer(due);
        assert!(net.pdcs[1].next_packet(due, &mut net.memory[1], &mut out));
        assert_eq!(
            (out.kind, out.cack_psn),
            (PdsKind::Ack, PSN_A.wrapping_add(2))
        );
        assert_eq!(net.pdcs[1].next_deadline(), None);
    }

    #[test]
    fn immediates_nobody_takes_are_held_up_to_a_bound_and_the_rest_resent_later() {
        let config = UetConfig {
            ack_every: 1,
            window: RX_WINDOW as u32,
            ..config(false)
        };
        let mut net = Net::new(config, clean(), 10);
        let messages = MAX_INBOUND as u64 + 5;
        for i in 0..messages {
            net.post(0, write_imm(i, 0, 10, 8000, i as u32));
        }
        net.pull();
        for (_, packet) in net.wire.drain(..).collect::<Vec<_>>() {
            let payload = packet.payload.clone();
            net.pdcs[1].receive_with_payload(net.now, &packet, &payload, &mut net.memory[1]);
        }
        assert_eq!(
            net.pdcs[1].counters().dropped_packets,
            5,
            "held: the bound's worth"
        );
        for i in 0..messages {
            net.pdcs[1].post_recv(recv(100 + i));
        }
        net.run();
        net.collect();
        assert_eq!(
            net.completions[1].len() as u64,
            messages,
            "the dropped ones came again"
        );
        assert!(net.completions[0]
            .iter()
            .all(|c| c.status == WcStatus::Success));
    }

    #[test]
    fn verbs_out_of_turn_are_refused() {
        let mut pdc: UetPdc<(u64, u64)> = UetPdc::new(1, config(false), 0, 1);
        let mut memory = Flat::new(0);
        assert_eq!(
            pdc.post_send(&mut memory, write_imm(1, 0, 1, 0, 0)),
            Err(UetVerbError::NotConnected { pdc: 1 })
        );
        pdc.connect(2, 0).unwrap();
        assert_eq!(pdc.connect(2, 0), Err(UetVerbError::Connected { pdc: 1 }));
        let read = SendWr {
            opcode: WrOpcode::RdmaRead,
            ..write_imm(1, 0, 1, 0, 0)
        };
        let refused = pdc.post_send(&mut memory, read).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "PDC 1: the uet transport has no RDMA_READ (WRITE and SEND only)"
        );
    }

    #[test]
    fn a_send_lands_in_the_receive_posted_for_it() {
        let mut net = Net::new(config(false), clean(), 7);
        net.pdcs[1].post_recv(RecvWr {
            wr_id: 40,
            addr: 5000,
            length: 2000,
            lkey: KEY,
        });
        let send = SendWr {
            opcode: WrOpcode::Send,
            ..write_imm(3, 300, 1000, 0, 0)
        };
        net.post(0, send);
        net.run();
        assert_eq!(net.memory[1].at(5000, 1000), Flat::new(1).at(300, 1000));
        let recv = net.completions[1][0];
        assert_eq!(
            (recv.wr_id, recv.opcode, recv.byte_len, recv.imm),
            (40, WcOpcode::Recv, 1000, None)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the channel drops, trims, duplicates and reorders, every message lands whole exactly once.
        #[test]
        fn every_message_lands_once_whatever_the_channel_does(
            seed in 0u64..1_000_000,
            drop in 0.0f64..0.2,
            trim in 0.0f64..0.3,
            duplicate in 0.0f64..0.2,
            reorder in 1usize..24,
            sizes in proptest::collection::vec(0u64..3000, 1..12),
            nscc in any::<bool>(),
            rccc in any::<bool>(),
        ) {
            let faults = Faults { drop, trim, duplicate, reorder };
            let mut config = config(nscc);
            config.retries = 60;
            config.rccc = rccc.then_some(4 * u64::from(MSS));
            let mut net = Net::new(config, faults, seed);
            let mut at = 0;
            for (i, &size) in sizes.iter().enumerate() {
                net.pdcs[1].post_recv(RecvWr { wr_id: 100 + i as u64, addr: 0, length: 0, lkey: KEY });
                net.post(0, write_imm(i as u64, at, size, 30_000 + at, i as u32));
                at += size;
            }
            net.run();
            let source = Flat::new(1);
            prop_assert!(net.memory[1].at(30_000, at) == source.at(0, at), "the data landed wrong");
            let ids: Vec<u64> = net.completions[0].iter().map(|c| c.wr_id).collect();
            prop_assert_eq!(ids, (0..sizes.len() as u64).collect::<Vec<_>>());
            prop_assert!(net.completions[0].iter().all(|c| c.status == WcStatus::Success));
            let mut imms: Vec<u32> = net.completions[1].iter().filter_map(|c| c.imm).collect();
            imms.sort_unstable();
            prop_assert_eq!(imms, (0..sizes.len() as u32).collect::<Vec<_>>());
            prop_assert_eq!(net.pdcs[0].in_flight_bytes(), 0);
        }

        /// Any packet a decoder could produce is a counted drop, a NACK or an ACK: never a panic.
        #[test]
        fn hostile_packets_never_panic(
            packets in proptest::collection::vec(
                (0u8..3, any::<u32>(), any::<u32>(), any::<u64>(), any::<u16>(), any::<u64>(), any::<u64>(),
                 any::<u64>(), any::<bool>(), any::<bool>(), 0u8..5, 0usize..600),
                1..40),
        ) {
            let mut net = Net::new(config(true), clean(), 9);
            net.post(0, write_imm(1, 0, 2000, 100, 1));
            net.pull();
            for (kind, psn, cack, sack, id, addr, offset, length, send, trimmed, code, len) in packets {
                let packet = UetPacket {
                    kind: [PdsKind::Request, PdsKind::Ack, PdsKind::Nack][kind as usize],
                    psn: PSN_A.wrapping_add(psn % 11),
                    cack_psn: cack,
                    sack_bitmap: sack,
                    message_id: id % 4,
                    remote_addr: addr % (2 * REGION),
                    rkey: KEY,
                    offset: offset % 5000,
                    length: length % 5000,
                    send,
                    trimmed,
                    nack_code: code,
                    payload: vec![7; len],
                    ..UetPacket::default()
                };
                for side in 0..2 {
                    let payload = packet.payload.clone();
                    net.pdcs[side].receive_with_payload(net.now, &packet, &payload, &mut net.memory[side]);
                }
                net.now += 500;
                for pdc in &mut net.pdcs {
                    pdc.on_timer(net.now);
                }
                net.pull();
                net.wire.clear();
            }
        }
    }
}
