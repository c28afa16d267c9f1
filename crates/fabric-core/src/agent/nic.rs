//! The RNIC of an emulated host: the per-frame path that `emulator/agents/rnic.py` ran in Python, compiled.
//!
//! The verbs (applications' connections, protection domains, CQ numbers, timed posts) stay in Python; they
//! reach this model through its verbs-side calls (`register`, `connect`, `post_send`, `completions`, ...).
//! Everything a frame touches is here: RC queue pairs over the registered memory ([`Regions`]), RoCEv2 or
//! native IB framing (sent only against the switch's credits), or on the uet fabric UET PDCs on UET frames
//! (each packet from its entropy value's UDP port: `model::uet`), DCQCN's notification and reaction points,
//! the transmit turn across QPs, the slow-receiver fault, the fidelity monitor's virtual wire, and the NIC's
//! obedience to PFC: a PFC frame holds the host's priority from its arrival, through the host's pause gates
//! ([`Nic::take_gate_changes`]), until its quanta run out or an XON comes.
//!
//! Egress pacing is the kernel's: the data socket's small send buffer is the RNIC's transmit queue, and the
//! host's tc tree (with its PFC pause gates) paces it at the link rate. When a send finds the queue full the
//! frame waits ([`Nic::writable`] sends it first) and the QPs wait behind it.
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::ops::Bound;

use super::regions::{Regions, Window};
use super::switch::Sent;
use crate::model::dcqcn::{DcqcnParams, NotificationPoint, ReactionPoint};
use crate::model::fidelity::{Durations, EgressWire};
use crate::model::ib_port::{IbPort, IbPortConfig};
use crate::model::link::wire_ns;
use crate::model::pause::PauseState;
use crate::model::queue_pair::QueuePair;
use crate::model::rc::{Completion, QpState, RcConfig, RcCounters, RcQueuePair, RecvWr, SendWr};
use crate::model::rccc::{CreditPacer, Turn, GRANT_BYTES};
use crate::model::rx_pipeline::{PauseChange, RxPipeline};
use crate::model::uet::{UetPdc, UetSpec};
use crate::wire::ib::{encode_data_with_payload, Lrh, MIN_FRAME as IB_FC_FRAME};
use crate::wire::mac::Mac;
use crate::wire::pfc::{decode_pfc, PRIORITIES};
use crate::wire::roce::{decode, Framer, CNP_DSCP, DATA_DSCP};
use crate::wire::transport::{opcode, Packet};
use crate::wire::uet::{self, UetFramer, UetPacket};

/// RoCEv2 source ports carry the QP's ECMP entropy (and stay clear of well-known dissectors).
pub const SOURCE_PORT_BASE: u16 = 49152;
/// Rows of the DCQCN rate trace one RNIC keeps (about 0.7 MiB); later changes are only counted.
pub const MAX_RATE_ROWS: usize = 10_000;
/// The IP TTL of the RNIC's frames.
const TTL: u8 = 64;

/// The UDP source port of a QP: 49152 and up, a hash of both QPNs.
pub fn source_port(qpn: u32, remote_qpn: u32) -> u16 {
    let hash = (u64::from(qpn) * 0x9E37_79B1) ^ (u64::from(remote_qpn) * 0x85EB_CA6B);
    SOURCE_PORT_BASE + ((hash >> 7) & 0x3FFF) as u16
}

/// The data socket as the RNIC sees it.
pub trait Wire {
    /// Hands `frame` to the kernel's queue.
    fn send(&mut self, frame: &[u8]) -> Sent;
    /// What the RNIC wants to hear of: frames to read (not while stalled), room to send.
    fn interest(&mut self, readable: bool, writable: bool);
}

/// The kinds of deadline the fidelity monitor judges apart (`emulator.agents.base.TIMER_KINDS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// Pacing, credit and pipeline timers: how late they fire shifts frames on the wire.
    Link,
    /// Retransmission and RNR timers.
    Timeout,
    /// A timed post's start ([`Nic::post_send_at`]): how late it fires shifts the collective's start.
    Start,
}

/// What the RNIC is built from.
#[derive(Clone, Debug)]
pub struct NicConfig {
    /// The host's name (the rate trace's rows carry it).
    pub name: String,
    pub mac: Mac,
    pub gateway_mac: Mac,
    pub ip: [u8; 4],
    pub rate_bps: u64,
    /// DCQCN's parameters, when the fabric runs it (RoCE only).
    pub cc: Option<DcqcnParams>,
    /// Native IB instead of RoCEv2.
    pub ib: Option<IbPortConfig>,
    /// UET's transport on UET frames instead of RC on RoCEv2 (the uet fabric).
    pub uet: Option<UetSpec>,
    /// Whether the fidelity monitor's wire is kept.
    pub monitor: bool,
    /// Seeds the memory keys' random bytes.
    pub seed: u64,
}

/// How one QP's packets are framed.
#[derive(Debug)]
enum QpFramer {
    Roce { data: Framer, cnp: Framer },
    Ib { dlid: u16 },
    Uet(UetFramer),
}

/// A connected QP and what goes with it.
#[derive(Debug)]
struct NicQp {
    qp: QueuePair<Window>,
    owner: u32,
    remote_ip: [u8; 4],
    remote_gid: String,
    framer: QpFramer,
    /// DCQCN's rate limiter of this QP, when the fabric runs it.
    rp: Option<ReactionPoint>,
    /// Work requests posted for a later start, and when the last of them was released.
    timed: usize,
    released_ns: Option<u64>,
}

/// The link the RNIC's frames go on.
#[derive(Debug)]
enum Link {
    Roce { malformed: u64 },
    Ib(Box<IbPort>),
    Uet { spec: UetSpec, malformed: u64 },
}

/// What the RNIC counts (`stats()["rnic"]` in Python, with the verbs server's own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicCounters {
    pub frames_sent: u64,
    pub frames_received: u64,
    pub bytes_sent: u64,
    pub icrc_errors: u64,
    pub unknown_qp: u64,
    pub send_blocked: u64,
    pub credit_waits: u64,
    pub cnps_sent: u64,
    pub cnps_received: u64,
    pub paced_waits: u64,
    pub rx_buffer_drops: u64,
    /// Frames the kernel refused for good (a link down): lost, as on a wire that is cut.
    pub send_errors: u64,
}

impl NicCounters {
    /// Names and values, in the order Python's stats list them.
    pub fn items(&self) -> [(&'static str, u64); 12] {
        [
            ("frames_sent", self.frames_sent),
            ("frames_received", self.frames_received),
            ("bytes_sent", self.bytes_sent),
            ("icrc_errors", self.icrc_errors),
            ("unknown_qp", self.unknown_qp),
            ("send_blocked", self.send_blocked),
            ("credit_waits", self.credit_waits),
            ("cnps_sent", self.cnps_sent),
            ("cnps_received", self.cnps_received),
            ("paced_waits", self.paced_waits),
            ("rx_buffer_drops", self.rx_buffer_drops),
            ("send_errors", self.send_errors),
        ]
    }
}

/// The slow receiver's figures (`stats()["fault"]["slow"]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowFigures {
    pub rate_bps: u64,
    pub held_bytes: u64,
    pub peak_bytes: u64,
    pub dropped: u64,
    pub pausing: bool,
}

/// The RNIC of one host, with memory bytes `B` (the driver's mapped memfds; vectors in tests).
#[derive(Debug)]
pub struct Nic<B> {
    name: String,
    mac: Mac,
    gateway_mac: Mac,
    ip: [u8; 4],
    rate_bps: u64,
    cc: Option<DcqcnParams>,
    link: Link,
    regions: Regions<B>,
    /// Connected QPs by number: the transmit turn goes in this order.
    qps: BTreeMap<u32, NicQp>,
    np: Option<NotificationPoint>,
    counters: NicCounters,
    closed_qp_counters: [u64; RcCounters::COUNT],
    /// The QP whose packet went last: the turn goes on after it.
    served: Option<u32>,
    /// A frame counted out that waits for the kernel's queue (or, `link_waiting`, for credit).
    blocked: Option<Vec<u8>>,
    link_waiting: bool,
    /// Link control frames (CNPs, IB credit updates), ahead of new data.
    control: VecDeque<Vec<u8>>,
    /// QPs with data held back by their rate limiter.
    paced: BTreeSet<u32>,
    /// Receiver credits (the uet fabric with RCCC): the grants to the PDCs that ask, paced at the link rate.
    credit_pacer: Option<CreditPacer>,
    /// Timed posts by (start, order posted): (QP, its work requests), released by the RNIC's own timer.
    timed: BTreeMap<(u64, u64), (u32, Vec<SendWr>)>,
    timed_posted: u64,
    receiving: bool,
    writable_wanted: bool,
    slow: Option<RxPipeline<Vec<u8>>>,
    /// Pause changes the slow receiver asked of the host (true: XOFF), for the host's PFC to send.
    pause_changes: VecDeque<bool>,
    /// What the switch's PFC frames hold, and since when.
    pause: PauseState,
    /// The latest time handed to `pause`: a frame read after an expiry it arrived before counts from then.
    pause_clock: u64,
    /// PFC frames received per priority enabled, and MAC control frames that were no PFC enabling a class.
    pfc_received: [u64; PRIORITIES],
    pfc_malformed: u64,
    /// Gate changes for the host's kernel queues, oldest first: (priority, closed).
    gate_changes: VecDeque<(usize, bool)>,
    rates: RateTrace,
    // the fidelity monitor
    monitor: bool,
    wire: EgressWire,
    wire_end: u64,
    backlogged: bool,
    held_since: Option<u64>,
    shortest_timeout_ns: u64,
    lateness: [Durations; 3],
    next_kind: TimerKind,
    // reused buffers
    packet: Packet,
    uet_packet: UetPacket,
    frame: Vec<u8>,
    fc: Vec<[u8; IB_FC_FRAME]>,
    turn: Vec<u32>,
    ready: Vec<u32>,
    taken: Vec<Vec<u8>>,
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Nic<B> {
    /// The RNIC of `config`, or why its IB port cannot be made.
    pub fn new(config: NicConfig) -> Result<Self, String> {
        let link = match (config.ib, config.uet) {
            (Some(ib), _) => Link::Ib(Box::new(IbPort::new(ib).map_err(|e| e.to_string())?)),
            (None, Some(spec)) => Link::Uet { spec, malformed: 0 },
            (None, None) => Link::Roce { malformed: 0 },
        };
        let cc = match link {
            Link::Roce { .. } => config.cc,
            // the IB fabric's flow control is its credits, UET's congestion control its NSCC
            Link::Ib(_) | Link::Uet { .. } => None,
        };
        Ok(Nic {
            name: config.name,
            mac: config.mac,
            gateway_mac: config.gateway_mac,
            ip: config.ip,
            rate_bps: config.rate_bps.max(1),
            np: cc.map(|p| NotificationPoint::new(p.cnp_interval_ns)),
            cc,
            link,
            regions: Regions::new(config.seed),
            qps: BTreeMap::new(),
            counters: NicCounters::default(),
            closed_qp_counters: [0; RcCounters::COUNT],
            served: None,
            blocked: None,
            link_waiting: false,
            control: VecDeque::new(),
            paced: BTreeSet::new(),
            credit_pacer: config
                .uet
                .filter(|spec| spec.rccc)
                .map(|_| CreditPacer::new(config.rate_bps, GRANT_BYTES)),
            timed: BTreeMap::new(),
            timed_posted: 0,
            receiving: true,
            writable_wanted: false,
            slow: None,
            pause_changes: VecDeque::new(),
            pause: PauseState::new(config.rate_bps.max(1)),
            pause_clock: 0,
            pfc_received: [0; PRIORITIES],
            pfc_malformed: 0,
            gate_changes: VecDeque::new(),
            rates: RateTrace::default(),
            monitor: config.monitor,
            wire: EgressWire::new(),
            wire_end: 0,
            backlogged: false,
            held_since: None,
            shortest_timeout_ns: 0,
            lateness: [Durations::new(), Durations::new(), Durations::new()],
            next_kind: TimerKind::Link,
            packet: Packet::default(),
            uet_packet: UetPacket::default(),
            frame: Vec::new(),
            fc: Vec::new(),
            turn: Vec::new(),
            ready: Vec::new(),
            taken: Vec::new(),
        })
    }

    // --- the verbs side --------------------------------------------------------------------------

    /// The registered memory.
    pub fn regions(&self) -> &Regions<B> {
        &self.regions
    }

    /// The registered memory, to register and deregister.
    pub fn regions_mut(&mut self) -> &mut Regions<B> {
        &mut self.regions
    }

    /// Connects QP `qpn` of domain `owner` (first send PSN `initial_psn`) to `remote_qpn` at `remote_ip`,
    /// whose first PSN is `remote_psn`; its receives posted before come with it. Why not, in one line.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        qpn: u32,
        owner: u32,
        initial_psn: u32,
        config: RcConfig,
        remote_qpn: u32,
        remote_psn: u32,
        remote_ip: [u8; 4],
        early_recvs: &[RecvWr],
    ) -> Result<(), String> {
        if self.qps.contains_key(&qpn) {
            return Err(format!("QP {qpn} is already connected"));
        }
        let [a, b, c, d] = remote_ip;
        let remote_gid = format!("{a}.{b}.{c}.{d}");
        let framer = match &self.link {
            Link::Roce { .. } => {
                let port = source_port(qpn, remote_qpn);
                let framer = |dscp| {
                    Framer::new(
                        self.mac,
                        self.gateway_mac,
                        self.ip,
                        remote_ip,
                        port,
                        dscp,
                        TTL,
                    )
                    .map_err(|e| e.to_string())
                };
                QpFramer::Roce {
                    data: framer(DATA_DSCP)?,
                    cnp: framer(CNP_DSCP)?,
                }
            }
            Link::Ib(port) => QpFramer::Ib {
                dlid: port
                    .framer(&remote_gid, u64::from(config.mtu))
                    .map_err(|e| e.to_string())?,
            },
            Link::Uet { .. } => QpFramer::Uet(UetFramer::new(
                self.mac,
                self.gateway_mac,
                self.ip,
                remote_ip,
            )),
        };
        let mut qp = match &self.link {
            Link::Uet { spec, .. } => {
                let seed = u64::from(qpn) << 32 | u64::from(remote_qpn);
                let mut pdc = UetPdc::new(
                    qpn,
                    spec.config(config.mtu, self.rate_bps),
                    initial_psn,
                    seed,
                );
                pdc.connect(remote_qpn, remote_psn)
                    .map_err(|e| e.to_string())?;
                QueuePair::Uet(Box::new(pdc))
            }
            Link::Roce { .. } | Link::Ib(_) => {
                let mut qp = RcQueuePair::new(qpn, config, initial_psn);
                qp.connect(remote_qpn, remote_psn)
                    .map_err(|e| e.to_string())?;
                QueuePair::Rc(qp)
            }
        };
        for wr in early_recvs {
            qp.post_recv(*wr);
        }
        self.shortest_timeout_ns = match self.shortest_timeout_ns {
            0 => config.timeout_ns,
            shortest => shortest.min(config.timeout_ns),
        };
        let rp = self
            .cc
            .map(|params| ReactionPoint::new(params, self.rate_bps));
        self.qps.insert(
            qpn,
            NicQp {
                qp,
                owner,
                remote_ip,
                remote_gid,
                framer,
                rp,
                timed: 0,
                released_ns: None,
            },
        );
        Ok(())
    }

    /// Whether QP `qpn` is connected.
    pub fn connected(&self, qpn: u32) -> bool {
        self.qps.contains_key(&qpn)
    }

    /// Queues `wrs` on QP `qpn`'s send queue.
    pub fn post_send(&mut self, qpn: u32, wrs: &[SendWr]) -> Result<(), String> {
        let entry = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| format!("QP {qpn} is not connected (post_send needs RTS)"))?;
        let mut memory = self.regions.domain(entry.owner);
        for wr in wrs {
            entry.qp.post_send(&mut memory, *wr)?;
        }
        Ok(())
    }

    /// Holds `wrs` for QP `qpn` until `at` (CLOCK_MONOTONIC ns): the RNIC's own deadline posts them then, so that
    /// hosts start together whatever their applications' and agents' scheduling (at its next deadline if `at`
    /// has passed). [`Self::released_ns`] tells when.
    pub fn post_send_at(&mut self, qpn: u32, wrs: Vec<SendWr>, at: u64) -> Result<(), String> {
        let entry = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| format!("QP {qpn} is not connected (post_send needs RTS)"))?;
        entry.timed = entry.timed.saturating_add(wrs.len());
        self.timed.insert((at, self.timed_posted), (qpn, wrs));
        self.timed_posted += 1;
        Ok(())
    }

    /// When QP `qpn`'s last timed post was released, if one was.
    pub fn released_ns(&self, qpn: u32) -> Option<u64> {
        self.qps.get(&qpn)?.released_ns
    }

    /// Releases the timed posts whose start has come by `now`, each late by `now` minus its start.
    fn release(&mut self, now: u64) {
        while let Some(entry) = self.timed.first_entry() {
            let at = entry.key().0;
            if at > now {
                break;
            }
            let (qpn, wrs) = entry.remove();
            self.lateness[TimerKind::Start as usize].add(now - at);
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.timed = qp.timed.saturating_sub(wrs.len());
                qp.released_ns = Some(now);
            }
            // Connected when posted, and a QP never goes back to INIT: this cannot fail (a destroyed QP's
            // timed posts left with it).
            let _ = self.post_send(qpn, &wrs);
        }
    }

    /// Queues `wrs` on QP `qpn`'s receive queue.
    pub fn post_recv(&mut self, qpn: u32, wrs: &[RecvWr]) -> Result<(), String> {
        let entry = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| format!("QP {qpn} is not connected"))?;
        for wr in wrs {
            entry.qp.post_recv(*wr);
        }
        Ok(())
    }

    /// QP `qpn`'s send (with its timed posts) and receive queues' lengths.
    pub fn queue_lengths(&self, qpn: u32) -> Option<(usize, usize)> {
        let entry = self.qps.get(&qpn)?;
        let (send, recv) = entry.qp.queue_lengths();
        Some((send.saturating_add(entry.timed), recv))
    }

    /// QP `qpn`'s state and counters.
    pub fn qp_status(&self, qpn: u32) -> Option<(QpState, RcCounters)> {
        let qp = &self.qps.get(&qpn)?.qp;
        Some((qp.state(), qp.counters()))
    }

    /// Destroys QP `qpn`: its counters are kept in the RNIC's totals.
    pub fn destroy_qp(&mut self, qpn: u32) {
        self.paced.remove(&qpn);
        self.timed.retain(|_, (owner, _)| *owner != qpn);
        if let Some(np) = &mut self.np {
            np.forget(u64::from(qpn));
        }
        if let Some(entry) = self.qps.remove(&qpn) {
            for (total, value) in self
                .closed_qp_counters
                .iter_mut()
                .zip(entry.qp.counters().values())
            {
                *total += value;
            }
        }
    }

    /// Whether a QP has completions to hand out.
    pub fn has_completions(&self) -> bool {
        self.qps.values().any(|e| e.qp.completions_len() > 0)
    }

    /// Every QP's new completions, QP by QP, into `out`.
    pub fn completions(&mut self, out: &mut Vec<Completion>) {
        for entry in self.qps.values_mut() {
            entry.qp.poll_into(out);
        }
    }

    /// The pause changes the slow receiver asked for since the last call (true: XOFF), oldest first.
    pub fn take_pause_changes(&mut self) -> impl Iterator<Item = bool> + '_ {
        self.pause_changes.drain(..)
    }

    /// Whether the host's side has something to take ([`Self::completions`], [`Self::take_pause_changes`]).
    pub fn has_news(&self) -> bool {
        !self.pause_changes.is_empty() || self.has_completions()
    }

    // --- PFC ----------------------------------------------------------------------------------------

    /// A MAC control frame from the switch that arrived at `arrival` (the kernel's time stamp): a PFC frame
    /// pauses or resumes its priorities from then, as a NIC's MAC does on the frame's last bit, however late
    /// the host reads it; anything else is counted malformed.
    pub fn receive_pfc(&mut self, arrival: u64, frame: &[u8]) {
        let Some(quanta) = decode_pfc(frame).filter(|q| q.iter().any(Option::is_some)) else {
            self.pfc_malformed += 1;
            return;
        };
        for (received, value) in self.pfc_received.iter_mut().zip(quanta) {
            *received += u64::from(value.is_some());
        }
        let at = arrival.max(self.pause_clock);
        self.pause_clock = at;
        let (paused, resumed) = self.pause.on_pfc(at, &quanta);
        self.gate_changes
            .extend(paused.iter().map(|priority| (priority, true)));
        self.gate_changes
            .extend(resumed.iter().map(|priority| (priority, false)));
        self.wire_hold(at, self.held());
    }

    /// The gate changes since the last call, oldest first: (priority, closed).
    pub fn take_gate_changes(&mut self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.gate_changes.drain(..)
    }

    /// What PFC holds: priority by priority, whether paused now and for how long in all by `now`.
    pub fn pause_state(&self) -> &PauseState {
        &self.pause
    }

    /// PFC frames received per priority enabled, and MAC control frames that were no PFC enabling a class.
    pub fn pfc_figures(&self) -> ([u64; PRIORITIES], u64) {
        (self.pfc_received, self.pfc_malformed)
    }

    /// Whether PFC holds any priority (the monitor's wire then idles by right).
    fn held(&self) -> bool {
        self.pause.next_expiry().is_some() // every priority paused has its expiry
    }

    /// The pauses that ran out by `now`: their gates open.
    fn expire_pauses(&mut self, now: u64) {
        let resumed = self.pause.expire(now);
        if resumed.is_empty() {
            return;
        }
        self.pause_clock = self.pause_clock.max(now);
        self.gate_changes
            .extend(resumed.iter().map(|priority| (priority, false)));
        self.wire_hold(now, self.held());
    }

    // --- faults ---------------------------------------------------------------------------------

    /// Stops (or restarts) taking frames from the wire: a NIC whose receive pipeline hangs.
    pub fn stall(&mut self, stalled: bool, wire: &mut impl Wire) {
        self.receiving = !stalled;
        wire.interest(self.receiving, self.writable_wanted);
    }

    /// Whether it takes frames from the wire (not while stalled).
    pub fn receiving(&self) -> bool {
        self.receiving
    }

    /// Starts the slow-receiver fault with `pipeline`; a NIC already slow keeps its own (and its frames).
    pub fn start_slow(&mut self, pipeline: RxPipeline<Vec<u8>>) {
        if self.slow.is_none() {
            self.slow = Some(pipeline);
        }
    }

    /// Moves the slow receiver to `rate_bps` from `now` (false when it is not slow).
    pub fn set_slow_rate(&mut self, now: u64, rate_bps: u64) -> bool {
        match &mut self.slow {
            Some(slow) => slow.set_rate(now, rate_bps.max(1)).is_ok(),
            None => false,
        }
    }

    /// Ends the slow-receiver fault: every held frame is taken at once.
    pub fn end_slow(&mut self, now: u64) {
        let Some(mut slow) = self.slow.take() else {
            return;
        };
        self.counters.rx_buffer_drops += slow.dropped;
        let paused = slow.paused();
        for frame in slow.drain() {
            self.process(now, &frame);
        }
        if paused {
            self.pause_changes.push_back(false);
        }
    }

    /// The slow receiver's figures, while it is slow.
    pub fn slow_figures(&self) -> Option<SlowFigures> {
        self.slow.as_ref().map(|slow| SlowFigures {
            rate_bps: slow.rate_bps(),
            held_bytes: slow.bytes(),
            peak_bytes: slow.peak,
            dropped: slow.dropped,
            pausing: slow.paused(),
        })
    }

    // --- the wire ------------------------------------------------------------------------------

    /// A frame from the wire at `now`.
    pub fn receive(&mut self, now: u64, frame: &[u8]) {
        match &mut self.slow {
            None => self.process(now, frame),
            Some(slow) => {
                // a frame that did not fit is counted by the pipeline
                if let Ok(Some(change)) = slow.arrive(now, frame.to_vec(), frame.len() as u64) {
                    self.pause_changes.push_back(change == PauseChange::Xoff);
                }
            }
        }
    }

    /// One frame: to its QP, or dropped and counted.
    fn process(&mut self, now: u64, frame: &[u8]) {
        if let Link::Uet { .. } = self.link {
            self.process_uet(now, frame);
            return;
        }
        let (packet, payload, source_ok) = match &mut self.link {
            Link::Roce { malformed } => {
                let Some(decoded) = decode(frame) else {
                    *malformed += 1;
                    return;
                };
                self.counters.frames_received += 1;
                if !decoded.icrc_ok {
                    self.counters.icrc_errors += 1;
                    return;
                }
                let source = decoded.src_ip;
                let ok = self
                    .qps
                    .get(&decoded.packet.dest_qp)
                    .is_some_and(|e| e.remote_ip == source);
                (decoded.packet, decoded.payload, ok)
            }
            Link::Ib(port) => {
                let Some(accepted) = port.accept(now, frame) else {
                    return;
                };
                self.counters.frames_received += 1;
                if !accepted.crc_ok {
                    self.counters.icrc_errors += 1;
                    return;
                }
                let ok = self
                    .qps
                    .get(&accepted.decoded.packet.dest_qp)
                    .is_some_and(|e| e.remote_gid == accepted.source);
                (accepted.decoded.packet, accepted.decoded.payload, ok)
            }
            Link::Uet { .. } => return,
        };
        if !source_ok {
            self.counters.unknown_qp += 1;
            return;
        }
        let qpn = packet.dest_qp;
        let Some(entry) = self.qps.get_mut(&qpn) else {
            return;
        };
        if packet.opcode == opcode::CNP {
            self.counters.cnps_received += 1;
            if let Some(rp) = &mut entry.rp {
                rp.on_cnp(now);
                self.rates.record(&self.name, now, qpn, entry, "cnp");
            }
            return;
        }
        if packet.ecn_ce {
            if let (Some(np), QpFramer::Roce { cnp, .. }) = (&mut self.np, &mut entry.framer) {
                if np.on_ce(now, u64::from(qpn)) {
                    let mut frame = Vec::new();
                    let notice = Packet::new(opcode::CNP, entry.qp.remote_qpn(), 0);
                    if cnp.encode(&notice, &mut frame).is_ok() {
                        self.control.push_back(frame);
                        self.counters.cnps_sent += 1;
                    }
                }
            }
        }
        let payload = frame.get(payload).unwrap_or_default();
        let mut memory = self.regions.domain(entry.owner);
        if let QueuePair::Rc(qp) = &mut entry.qp {
            qp.receive_with_payload(now, &packet, payload, &mut memory);
        }
    }

    /// A frame on the uet fabric: to the PDC it names, if its checksum held and it comes from that PDC's peer.
    fn process_uet(&mut self, now: u64, frame: &[u8]) {
        let Some(decoded) = uet::decode(frame) else {
            if let Link::Uet { malformed, .. } = &mut self.link {
                *malformed += 1;
            }
            return;
        };
        self.counters.frames_received += 1;
        if !decoded.checksum_ok {
            self.counters.icrc_errors += 1;
            return;
        }
        let entry = self.qps.get_mut(&u32::from(decoded.packet.dpdcid));
        let Some(entry) = entry.filter(|e| e.remote_ip == decoded.src_ip) else {
            self.counters.unknown_qp += 1;
            return;
        };
        let payload = frame.get(decoded.payload.clone()).unwrap_or_default();
        let mut memory = self.regions.domain(entry.owner);
        if let QueuePair::Uet(pdc) = &mut entry.qp {
            pdc.receive_with_payload(now, &decoded.packet, payload, &mut memory);
            if let (Some(pacer), true) = (self.credit_pacer.as_mut(), pdc.credit_wanted() > 0) {
                pacer.ask(u32::from(decoded.packet.dpdcid));
            }
        }
    }

    /// The credit pacer's grants that are due at `now`: each PDC in turn owes its peer a grant.
    fn grant_credit(&mut self, now: u64) {
        let Some(pacer) = self.credit_pacer.as_mut() else {
            return;
        };
        while let Some(pdc) = pacer.due(now) {
            let (granted, turn) = match self.qps.get_mut(&pdc).map(|e| &mut e.qp) {
                Some(QueuePair::Uet(pdc)) => pdc.grant_credit(pacer.per_grant()),
                _ => (0, Turn::Full),
            };
            pacer.granted(now, pdc, granted, turn);
        }
    }

    /// The socket has room again at `now`: the waiting frame first, then the control queue, then the QPs.
    pub fn writable(&mut self, now: u64, wire: &mut impl Wire) {
        self.arm(false, wire);
        if !self.link_waiting {
            if let Some(frame) = self.blocked.take() {
                if !self.send(now, frame, true, wire) {
                    return;
                }
            }
        }
        if self.flush_control(now, wire) {
            self.retry(now, wire);
        }
    }

    /// After every batch of events (and deadline): send what can go. Returns the next deadline.
    pub fn after_events(&mut self, now: u64, wire: &mut impl Wire) -> Option<u64> {
        if let Link::Ib(port) = &mut self.link {
            self.fc.clear();
            port.control_frames(now, &mut self.fc);
            self.control.extend(self.fc.iter().map(|f| f.to_vec()));
        }
        // A frame counted as sent waits for the kernel queue: no credit update may overtake it.
        let waits = self.blocked.is_some() && !self.link_waiting;
        if !waits && self.flush_control(now, wire) {
            if self.link_waiting {
                self.retry(now, wire);
            } else {
                self.transmit(now, wire);
            }
        }
        // A deadline already past (a credit grant that grew urgent meanwhile, a start posted late) is armed for
        // now, as the switch arms its own: it fires at once, and its lateness counts from when it became known.
        self.next_deadline().map(|(at, kind)| {
            self.next_kind = kind;
            at.max(now)
        })
    }

    /// The deadline `deadline` came at `now`: its lateness counted, the timers that are due run.
    pub fn deadline(&mut self, deadline: u64, now: u64) {
        // A start's lateness is each timed post's own, from its start (`release`): a post that came after its
        // start is late by that much, though its deadline was armed for the moment it came.
        if self.next_kind != TimerKind::Start {
            if let Some(lateness) = self.lateness.get_mut(self.next_kind as usize) {
                lateness.add(now.saturating_sub(deadline));
            }
        }
        self.on_timer(now);
    }

    fn on_timer(&mut self, now: u64) {
        self.expire_pauses(now);
        self.release(now);
        self.grant_credit(now);
        if let Some(slow) = &mut self.slow {
            let mut taken = std::mem::take(&mut self.taken);
            let change = slow.take(now, &mut taken);
            for frame in taken.drain(..) {
                self.process(now, &frame);
            }
            self.taken = taken;
            if let Some(change) = change {
                self.pause_changes.push_back(change == PauseChange::Xoff);
            }
        }
        let qps = &self.qps;
        self.paced.retain(|qpn| {
            qps.get(qpn)
                .and_then(|e| e.rp.as_ref())
                .is_some_and(|rp| rp.ready_at() > now)
        });
        for (&qpn, entry) in &mut self.qps {
            if entry.qp.next_deadline().is_some_and(|d| d <= now) {
                entry.qp.on_timer(now);
            }
            let due = entry
                .rp
                .as_ref()
                .and_then(|rp| rp.next_deadline())
                .is_some_and(|d| d <= now);
            if let (true, Some(rp)) = (due, &mut entry.rp) {
                if rate_moved(rp, |rp| rp.on_timer(now)) {
                    self.rates.record(&self.name, now, qpn, entry, "timer");
                }
            }
        }
    }

    /// The earliest deadline and its kind.
    pub fn next_deadline(&mut self) -> Option<(u64, TimerKind)> {
        let mut best: Option<(u64, TimerKind)> = None;
        let mut offer = |at: Option<u64>, kind: TimerKind| {
            if let Some(at) = at {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, kind));
                }
            }
        };
        offer(
            self.timed.keys().next().map(|&(at, _)| at),
            TimerKind::Start,
        );
        for entry in self.qps.values() {
            offer(entry.qp.next_deadline(), TimerKind::Timeout);
        }
        for entry in self.qps.values() {
            if let Some(rp) = &entry.rp {
                offer(rp.next_deadline(), TimerKind::Link);
            }
        }
        for qpn in &self.paced {
            offer(
                self.qps
                    .get(qpn)
                    .and_then(|e| e.rp.as_ref())
                    .map(|rp| rp.ready_at()),
                TimerKind::Link,
            );
        }
        if let Some(slow) = &self.slow {
            offer(slow.next_deadline(), TimerKind::Link);
        }
        offer(self.pause.next_expiry(), TimerKind::Link);
        offer(
            self.credit_pacer
                .as_ref()
                .and_then(CreditPacer::next_deadline),
            TimerKind::Link,
        );
        if let Link::Ib(port) = &mut self.link {
            let at = port.next_deadline();
            offer((at != u64::MAX).then_some(at), TimerKind::Link);
        }
        best
    }

    fn arm(&mut self, writable: bool, wire: &mut impl Wire) {
        self.writable_wanted = writable;
        wire.interest(self.receiving, writable);
    }

    /// Sends queued control frames; false (and waits for room) when the kernel's queue is full.
    fn flush_control(&mut self, now: u64, wire: &mut impl Wire) -> bool {
        while let Some(frame) = self.control.front() {
            match wire.send(frame) {
                Sent::Full => {
                    self.backlogged = true;
                    self.arm(true, wire);
                    return false;
                }
                Sent::Refused => self.counters.send_errors += 1,
                Sent::Taken => {
                    let size = frame.len();
                    self.departed(now, size);
                }
            }
            self.control.pop_front();
        }
        true
    }

    /// Sends the frame that waited (for the kernel's queue or for credit), then the rest.
    fn retry(&mut self, now: u64, wire: &mut impl Wire) {
        if let Some(frame) = self.blocked.take() {
            let admitted = !self.link_waiting;
            if !self.send(now, frame, admitted, wire) {
                return;
            }
        }
        self.transmit(now, wire);
    }

    /// Hands one frame to the kernel; false (and keeps it) when the queue or the credit is exhausted.
    fn send(&mut self, now: u64, frame: Vec<u8>, admitted: bool, wire: &mut impl Wire) -> bool {
        self.link_waiting = false;
        if !admitted {
            if let Link::Ib(port) = &mut self.link {
                match port.admit(&frame) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.blocked = Some(frame);
                        self.link_waiting = true; // the next credit update retries it
                        self.backlogged = false; // flow control idles the wire by right
                        self.counters.credit_waits += 1;
                        return false;
                    }
                    Err(_) => {
                        self.counters.send_errors += 1; // our framer made it: never seen
                        self.frame = frame;
                        return true;
                    }
                }
            }
        }
        match wire.send(&frame) {
            Sent::Full => {
                self.blocked = Some(frame);
                self.backlogged = true;
                self.counters.send_blocked += 1;
                self.arm(true, wire);
                false
            }
            Sent::Refused => {
                self.counters.send_errors += 1;
                self.frame = frame;
                true
            }
            Sent::Taken => {
                self.counters.frames_sent += 1;
                self.counters.bytes_sent += frame.len() as u64;
                self.departed(now, frame.len());
                self.frame = frame; // its buffer serves the next frame
                true
            }
        }
    }

    /// Pulls packets from the QPs, one each in turn, until the kernel's queue is full.
    ///
    /// The turn goes on from the QP served last, across calls: each call starts when the kernel's queue has
    /// room again, often for one frame, and a turn begun afresh each time gave every such slot to the QP made
    /// first (the simulated RNIC keeps its ready QPs in turn order too).
    fn transmit(&mut self, now: u64, wire: &mut impl Wire) {
        if self.blocked.is_some() {
            return;
        }
        let mut turn = std::mem::take(&mut self.turn);
        let mut ready = std::mem::take(&mut self.ready);
        turn.clear();
        match self.served {
            Some(served) => {
                turn.extend(
                    self.qps
                        .range((Bound::Excluded(served), Bound::Unbounded))
                        .map(|(&q, _)| q),
                );
                turn.extend(self.qps.range(..=served).map(|(&q, _)| q));
            }
            None => turn.extend(self.qps.keys()),
        }
        let mut full = false;
        while !turn.is_empty() && !full {
            ready.clear();
            for &qpn in &turn {
                let Some(entry) = self.qps.get_mut(&qpn) else {
                    continue;
                };
                let data = entry.rp.as_ref().is_none_or(|rp| rp.may_send(now));
                let mut memory = self.regions.domain(entry.owner);
                let produced = match &mut entry.qp {
                    QueuePair::Rc(qp) => qp.next_packet(now, data, &mut memory, &mut self.packet),
                    QueuePair::Uet(pdc) => pdc.next_packet(now, &mut memory, &mut self.uet_packet),
                };
                if !produced {
                    if !data && entry.qp.has_data() && self.paced.insert(qpn) {
                        self.counters.paced_waits += 1;
                    }
                    continue;
                }
                self.served = Some(qpn);
                let mut frame = std::mem::take(&mut self.frame);
                frame.clear();
                let framed = match &mut entry.framer {
                    QpFramer::Roce { data, .. } => data
                        .encode(&self.packet, &mut frame)
                        .map_err(|e| e.to_string()),
                    QpFramer::Ib { dlid } => match &self.link {
                        Link::Ib(port) => encode_data_with_payload(
                            port.mac(),
                            port.gateway_mac(),
                            &Lrh {
                                dlid: *dlid,
                                slid: port.lid(),
                                sl: port.sl(),
                                vl: port.vl(),
                            },
                            &self.packet,
                            &self.packet.payload,
                            &mut frame,
                        )
                        .map_err(|e| e.to_string()),
                        Link::Roce { .. } | Link::Uet { .. } => Err(String::new()),
                    },
                    QpFramer::Uet(framer) => framer
                        .encode(&self.uet_packet, &self.uet_packet.payload, &mut frame)
                        .map_err(|e| e.to_string()),
                };
                if framed.is_err() {
                    self.counters.send_errors += 1; // the transport's packets always frame: never seen
                    self.frame = frame;
                    continue;
                }
                if let (Some(rp), false) = (&mut entry.rp, self.packet.opcode == opcode::ACK) {
                    if rate_moved(rp, |rp| rp.on_sent(now, frame.len() as u64)) {
                        self.rates.record(&self.name, now, qpn, entry, "bytes");
                    }
                }
                if !self.send(now, frame, false, wire) {
                    full = true;
                    break;
                }
                ready.push(qpn);
            }
            std::mem::swap(&mut turn, &mut ready);
        }
        if !full {
            self.backlogged = false; // every QP is out of packets to send: the wire may idle
        }
        self.turn = turn;
        self.ready = ready;
    }

    // --- the fidelity monitor ----------------------------------------------------------------------

    /// The kernel took a frame of `size` bytes at `now`: the virtual wire carries it when it is free.
    fn departed(&mut self, now: u64, size: usize) {
        if !self.monitor {
            return;
        }
        let frame_ns = wire_ns(size, self.rate_bps);
        let start = now.max(self.wire_end);
        let ideal = if self.backlogged {
            self.wire_end
        } else {
            start
        };
        self.wire.departed(start, ideal, frame_ns, 1);
        self.wire_end = start.saturating_add(frame_ns);
    }

    /// PFC holds the host's queues from `now` (`held`) or lets them go: the frames queued then leave after.
    fn wire_hold(&mut self, now: u64, held: bool) {
        match (held, self.held_since) {
            (true, None) => self.held_since = Some(now),
            (false, Some(since)) => {
                self.wire_end = now.saturating_add(self.wire_end.saturating_sub(since));
                self.held_since = None;
            }
            _ => {}
        }
    }

    /// The monitor's wire, the lateness of link and of timeout timers, and the shortest QP timeout.
    pub fn fidelity(&self) -> (&EgressWire, &Durations, &Durations, u64) {
        (
            &self.wire,
            &self.lateness[TimerKind::Link as usize],
            &self.lateness[TimerKind::Timeout as usize],
            self.shortest_timeout_ns,
        )
    }

    /// How late the timed posts were released.
    pub fn starts(&self) -> &Durations {
        &self.lateness[TimerKind::Start as usize]
    }

    /// Starts the monitor's figures afresh (a new measurement).
    pub fn reset_fidelity(&mut self) {
        self.wire = EgressWire::new();
        self.lateness = [Durations::new(), Durations::new(), Durations::new()];
    }

    /// When the virtual wire is next free (tests).
    pub fn wire_end(&self) -> u64 {
        self.wire_end
    }

    // --- counters --------------------------------------------------------------------------------

    pub fn counters(&self) -> &NicCounters {
        &self.counters
    }

    /// Every QP's transport counters summed, the destroyed ones' included (names: [`RcCounters::NAMES`]).
    pub fn transport_totals(&self) -> [u64; RcCounters::COUNT] {
        let mut totals = self.closed_qp_counters;
        for entry in self.qps.values() {
            for (total, value) in totals.iter_mut().zip(entry.qp.counters().values()) {
                *total += value;
            }
        }
        totals
    }

    /// Connected QPs.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    /// Frames that were no packet this RNIC's link speaks.
    pub fn malformed(&self) -> u64 {
        match &self.link {
            Link::Roce { malformed } | Link::Uet { malformed, .. } => *malformed,
            Link::Ib(port) => port.malformed(),
        }
    }

    /// The IB port, on the IB fabric.
    pub fn ib_port(&self) -> Option<&IbPort> {
        match &self.link {
            Link::Ib(port) => Some(port),
            Link::Roce { .. } | Link::Uet { .. } => None,
        }
    }

    /// DCQCN's figures when it runs: CE-marked packets seen, rate-trace rows kept and dropped, QPs limited.
    pub fn cc_figures(&self) -> Option<(u64, usize, u64, usize)> {
        let np = self.np.as_ref()?;
        let limited = self
            .qps
            .values()
            .filter(|e| e.rp.as_ref().is_some_and(|rp| rp.limited()))
            .count();
        Some((
            np.ce_received(),
            self.rates.count,
            self.rates.dropped,
            limited,
        ))
    }

    /// The rate trace's rows (CSV, no header).
    pub fn rate_rows(&self) -> &str {
        &self.rates.rows
    }
}

/// The DCQCN rate trace: a CSV row per change of a QP's rate, up to [`MAX_RATE_ROWS`] (later ones counted).
#[derive(Debug, Default)]
struct RateTrace {
    rows: String,
    count: usize,
    dropped: u64,
}

impl RateTrace {
    /// A row: QP `qpn`'s (of host `host`) DCQCN state after `event` at `now`.
    fn record(&mut self, host: &str, now: u64, qpn: u32, entry: &NicQp, event: &str) {
        let Some(rp) = &entry.rp else {
            return;
        };
        if self.count >= MAX_RATE_ROWS {
            self.dropped += 1;
            return;
        }
        self.count += 1;
        let _ = writeln!(
            self.rows,
            "{now},{host},{qpn},{},{},{},{:.6},{}",
            entry.remote_gid,
            rp.rate_bps(),
            rp.target_bps(),
            rp.alpha(),
            event
        );
    }
}

/// `change` applied to `rp`: whether its rate moved.
fn rate_moved(rp: &mut ReactionPoint, change: impl FnOnce(&mut ReactionPoint)) -> bool {
    let before = rp.rate_bps();
    change(rp);
    rp.rate_bps() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::regions::ACCESS_ALL;
    use crate::model::ib_port::IbPortConfig;
    use crate::model::rc::{Memory, WcStatus, WrOpcode};

    /// A wire that takes `room` frames, then is full.
    #[derive(Default)]
    struct TestWire {
        sent: Vec<Vec<u8>>,
        room: Option<usize>,
        writable: bool,
    }

    impl Wire for TestWire {
        fn send(&mut self, frame: &[u8]) -> Sent {
            match &mut self.room {
                Some(0) => Sent::Full,
                Some(room) => {
                    *room -= 1;
                    self.sent.push(frame.to_vec());
                    Sent::Taken
                }
                None => {
                    self.sent.push(frame.to_vec());
                    Sent::Taken
                }
            }
        }

        fn interest(&mut self, _readable: bool, writable: bool) {
            self.writable = writable;
        }
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];

    fn config_of(ip: [u8; 4], mac: u8) -> NicConfig {
        NicConfig {
            name: format!("h{mac}"),
            mac: [2, 0, 0, 0, mac, 0],
            gateway_mac: [2, 1, 0, 0, 1, 1],
            ip,
            rate_bps: 100_000_000,
            cc: None,
            ib: None,
            uet: None,
            monitor: true,
            seed: u64::from(mac),
        }
    }

    fn nic(ip: [u8; 4], mac: u8) -> Nic<Vec<u8>> {
        Nic::new(config_of(ip, mac)).unwrap()
    }

    fn config() -> RcConfig {
        RcConfig {
            mtu: 1024,
            max_msg: 1 << 20,
            ..RcConfig::default()
        }
    }

    /// Two RNICs with QP 0x11 of each connected to the other and a 64 KiB region each: (a, b, a's key, b's key).
    fn pair() -> (Nic<Vec<u8>>, Nic<Vec<u8>>, u32, u32) {
        connected(nic(A, 1), nic(B, 2))
    }

    /// `a` (at A) and `b` (at B) with QP 0x11 of each connected to the other and a 64 KiB region each.
    fn connected(
        mut a: Nic<Vec<u8>>,
        mut b: Nic<Vec<u8>>,
    ) -> (Nic<Vec<u8>>, Nic<Vec<u8>>, u32, u32) {
        let ka = a
            .regions_mut()
            .register(1, 0x10000, 65536, ACCESS_ALL, vec![0; 65536])
            .unwrap();
        let kb = b
            .regions_mut()
            .register(1, 0x10000, 65536, ACCESS_ALL, vec![0; 65536])
            .unwrap();
        a.connect(0x11, 1, 100, config(), 0x11, 200, B, &[])
            .unwrap();
        b.connect(0x11, 1, 200, config(), 0x11, 100, A, &[])
            .unwrap();
        (a, b, ka, kb)
    }

    fn write(wr_id: u64, key: u32, rkey: u32, length: u64) -> SendWr {
        SendWr {
            wr_id,
            opcode: WrOpcode::RdmaWrite,
            addr: 0x10000,
            length,
            lkey: key,
            remote_addr: 0x10000,
            rkey,
            imm: 0,
            signaled: true,
        }
    }

    #[test]
    fn a_write_crosses_between_two_rnics_and_completes() {
        let (mut a, mut b, ka, kb) = pair();
        let (mut wa, mut wb) = (TestWire::default(), TestWire::default());
        let pattern: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        let mut memory = a.regions_mut().domain(1);
        let window = Memory::local(&mut memory, ka, 0x10000, 4096, true).unwrap();
        Memory::write(&mut memory, &window, 0, &pattern);
        a.post_send(0x11, &[write(7, ka, kb, 4096)]).unwrap();
        let mut now = 1_000;
        for _ in 0..20 {
            a.after_events(now, &mut wa);
            for frame in wa.sent.drain(..) {
                b.receive(now, &frame);
            }
            b.after_events(now, &mut wb);
            for frame in wb.sent.drain(..) {
                a.receive(now, &frame);
            }
            now += 10_000;
        }
        let mut done = Vec::new();
        a.completions(&mut done);
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].wr_id, done[0].status), (7, WcStatus::Success));
        let mut out = Vec::new();
        let mut memory = b.regions_mut().domain(1);
        let window = Memory::local(&mut memory, kb, 0x10000, 4096, false).unwrap();
        Memory::read(&mut memory, &window, 0, 4096, &mut out);
        assert_eq!(out, pattern);
        assert_eq!(a.counters().frames_sent, 4);
        assert_eq!(b.counters().frames_received, 4);
    }

    /// An RNIC of the uet fabric at `ip`, spraying obliviously.
    fn uet_nic(ip: [u8; 4], mac: u8) -> Nic<Vec<u8>> {
        uet_nic_with(ip, mac, false)
    }

    /// [`uet_nic`], with receiver credits if `rccc`.
    fn uet_nic_with(ip: [u8; 4], mac: u8, rccc: bool) -> Nic<Vec<u8>> {
        let spec = UetSpec {
            spray: crate::model::spray::SprayPolicy::Oblivious,
            evs: 64,
            nscc: true,
            network_rtt_ns: 50_000,
            timeout_ns: 1_000_000,
            rccc,
            nscc_target_ns: None,
            nscc_gamma: None,
        };
        Nic::new(NicConfig {
            uet: Some(spec),
            ..config_of(ip, mac)
        })
        .unwrap()
    }

    #[test]
    fn on_the_uet_fabric_a_write_goes_as_uet_frames_sprayed_and_lands_whole() {
        let (mut a, mut b, ka, kb) = connected(uet_nic(A, 1), uet_nic(B, 2));
        let pattern: Vec<u8> = (0..16384u32).map(|i| (i * 7) as u8).collect();
        let mut memory = a.regions_mut().domain(1);
        let window = Memory::local(&mut memory, ka, 0x10000, 16384, true).unwrap();
        Memory::write(&mut memory, &window, 0, &pattern);
        b.post_recv(
            0x11,
            &[RecvWr {
                wr_id: 9,
                addr: 0,
                length: 0,
                lkey: kb,
            }],
        )
        .unwrap();
        let mut wr = write(7, ka, kb, 16384);
        wr.opcode = WrOpcode::RdmaWriteWithImm;
        wr.imm = 0xBEEF;
        a.post_send(0x11, &[wr]).unwrap();
        let (mut wa, mut wb) = (TestWire::default(), TestWire::default());
        let mut ports = std::collections::BTreeSet::new();
        let mut now = 1_000;
        for _ in 0..40 {
            a.after_events(now, &mut wa);
            for frame in wa.sent.drain(..) {
                let decoded = uet::decode(&frame).expect("a UET frame");
                assert!(decoded.checksum_ok);
                ports.insert(decoded.packet.ev);
                b.receive(now, &frame);
            }
            b.after_events(now, &mut wb);
            for frame in wb.sent.drain(..) {
                a.receive(now, &frame);
            }
            now += 10_000;
        }
        let (mut done_a, mut done_b) = (Vec::new(), Vec::new());
        a.completions(&mut done_a);
        b.completions(&mut done_b);
        assert_eq!((done_a[0].wr_id, done_a[0].status), (7, WcStatus::Success));
        assert_eq!((done_b[0].wr_id, done_b[0].imm), (9, Some(0xBEEF)));
        let mut out = Vec::new();
        let mut memory = b.regions_mut().domain(1);
        let window = Memory::local(&mut memory, kb, 0x10000, 16384, false).unwrap();
        Memory::read(&mut memory, &window, 0, 16384, &mut out);
        assert_eq!(out, pattern);
        assert!(ports.len() > 4, "16 packets sprayed over {ports:?}");
        let (state, counters) = a.qp_status(0x11).unwrap();
        assert_eq!(
            (state, counters.packets_sent, counters.retransmitted_packets),
            (QpState::Rts, 16, 0)
        );
    }

    #[test]
    fn two_qps_alternate_when_the_kernel_queue_takes_one_frame_at_a_time() {
        let (mut a, _b, ka, kb) = pair();
        a.connect(0x12, 1, 0, config(), 0x12, 0, B, &[]).unwrap();
        a.post_send(0x11, &[write(1, ka, kb, 16 << 10)]).unwrap();
        a.post_send(0x12, &[write(2, ka, kb, 16 << 10)]).unwrap();
        let mut wire = TestWire {
            room: Some(0),
            ..TestWire::default()
        };
        a.after_events(1_000, &mut wire);
        assert!(wire.writable, "a full queue asks to hear of room");
        for step in 0..20 {
            wire.room = Some(1);
            a.writable(2_000 + step, &mut wire);
        }
        let qps: Vec<u32> = wire
            .sent
            .iter()
            .map(|f| decode(f).unwrap().packet.dest_qp)
            .collect();
        assert_eq!(qps.len(), 20);
        assert_eq!(qps.iter().filter(|&&q| q == 0x11).count(), 10);
        assert!(qps.windows(2).all(|w| w[0] != w[1]), "{qps:?}");
    }

    #[test]
    fn a_pfc_pause_holds_from_its_arrival_until_its_quanta_run_out() {
        use crate::wire::pfc::{encode_pfc, pause_ns};
        let mut a = nic(A, 1);
        let mut wire = TestWire::default();
        let mut quanta = [None; PRIORITIES];
        quanta[3] = Some(195);
        // read 70 us after it arrived: the pause counts from its arrival
        a.receive_pfc(1_000_000, &encode_pfc(&[2, 1, 0, 0, 1, 1], &quanta));
        assert_eq!(a.take_gate_changes().collect::<Vec<_>>(), [(3, true)]);
        let expiry = 1_000_000 + pause_ns(195, 100_000_000);
        assert_eq!(a.after_events(1_070_000, &mut wire), Some(expiry));
        assert!(a.pause_state().is_paused(3));
        a.deadline(expiry, expiry + 5_000);
        assert_eq!(a.take_gate_changes().collect::<Vec<_>>(), [(3, false)]);
        assert_eq!(
            a.pause_state().paused_time(3, expiry + 5_000),
            expiry - 1_000_000
        );
        assert_eq!(
            a.fidelity().1.max_ns(),
            5_000,
            "the expiry's lateness is a link timer's"
        );
        // an XON ends the next pause at its own arrival; a frame older than the last expiry counts from it
        a.receive_pfc(expiry, &encode_pfc(&[2, 1, 0, 0, 1, 1], &quanta));
        quanta[3] = Some(0);
        a.receive_pfc(expiry + 1_000, &encode_pfc(&[2, 1, 0, 0, 1, 1], &quanta));
        let changes: Vec<_> = a.take_gate_changes().collect();
        assert_eq!(changes, [(3, true), (3, false)]);
        assert_eq!(a.after_events(expiry + 6_000, &mut wire), None);
        assert_eq!(a.pfc_figures(), ([0, 0, 0, 3, 0, 0, 0, 0], 0));
    }

    #[test]
    fn a_mac_control_frame_that_pauses_nothing_is_counted_malformed() {
        let mut a = nic(A, 1);
        let header = [[1, 0x80, 0xC2, 0, 0, 1], [2; 6]].concat();
        a.receive_pfc(0, &[header.as_slice(), &[0x88, 0x08, 0x01]].concat());
        a.receive_pfc(
            0,
            &[header.as_slice(), &[0x88, 0x08, 0x01, 0x01], &[0; 18]].concat(),
        );
        a.receive_pfc(0, &[0xFF; 3]);
        assert_eq!(a.pfc_figures(), ([0; PRIORITIES], 3));
        assert_eq!(a.take_gate_changes().count(), 0);
    }

    #[test]
    fn hostile_frames_are_counted_drops() {
        let (mut a, _b, _ka, _kb) = pair();
        a.receive(0, &[0u8; 10]);
        a.receive(0, &[0xFFu8; 200]);
        assert_eq!(a.malformed(), 2);
        let mut framer = Framer::new([2; 6], [3; 6], [10, 0, 0, 9], A, 1, 26, 64).unwrap();
        let mut frame = Vec::new();
        framer
            .encode(&Packet::new(opcode::SEND_ONLY, 0x11, 200), &mut frame)
            .unwrap();
        a.receive(0, &frame);
        assert_eq!(a.counters().unknown_qp, 1, "a stranger's packet for our QP");
        let last = frame.len() - 1;
        frame[last] ^= 1;
        a.receive(0, &frame);
        assert_eq!(a.counters().icrc_errors, 1);
    }

    /// An RNIC on native IB with QP 0x11 connected to LID 2's host.
    fn ib_nic() -> Nic<Vec<u8>> {
        let mut nic = Nic::new(NicConfig {
            ib: Some(IbPortConfig {
                mac: [2, 0, 0, 0, 1, 0],
                gateway_mac: [2, 1, 0, 0, 1, 1],
                lid: 1,
                lids: vec![("10.0.0.1".into(), 1), ("10.0.0.2".into(), 2)],
                sl: 0,
                vl: 0,
                vls: 4,
                capacity: 64 << 10,
                peer_capacity: 16 * 1514,
                rate_bps: 100_000_000,
                frame_bytes: 1514,
                fc_floor_ns: 500_000,
            }),
            ..config_of(A, 1)
        })
        .unwrap();
        nic.connect(0x11, 1, 100, config(), 0x11, 200, B, &[])
            .unwrap();
        nic
    }

    /// Every counter a received frame can move.
    fn trace(nic: &Nic<Vec<u8>>) -> u64 {
        let c = nic.counters();
        let credits = nic.ib_port().map_or(0, |p| p.credit_violations());
        nic.malformed() + c.frames_received + credits
    }

    proptest::proptest! {
        /// Any bytes, or a valid frame with one byte changed, on RoCE, IB or UET (with receiver credits too,
        /// its grants then run): never a panic, and each frame leaves a trace in a counter (received, or
        /// dropped as malformed or past our credit).
        #[test]
        fn any_frame_is_counted_never_a_panic(
            link in 0u8..4,
            frames in proptest::collection::vec(
                (proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1600),
                 proptest::option::of((0usize..200, proptest::prelude::any::<u8>()))),
                1..24,
            )
        ) {
            let (mut nic, peer) = match link {
                0 => { let (a, b, _, _) = pair(); (a, Some(b)) }
                1 => (ib_nic(), None),
                2 => { let (a, b, _, _) = connected(uet_nic(A, 1), uet_nic(B, 2)); (a, Some(b)) }
                _ => {
                    let (a, b, _, _) = connected(uet_nic_with(A, 1, true), uet_nic_with(B, 2, true));
                    (a, Some(b))
                }
            };
            let mut wire = TestWire::default();
            let valid = match peer {
                Some(mut b) => {
                    // a valid frame from the peer: its ACK-less SEND
                    let mut out = TestWire::default();
                    b.post_send(0x11, &[SendWr { opcode: WrOpcode::Send, length: 64, ..write(1, 0, 0, 0) }]).ok();
                    b.after_events(0, &mut out);
                    out.sent.pop().unwrap_or_default()
                }
                None => {
                    let mut frame = Vec::new();
                    let lrh = Lrh { dlid: 1, slid: 2, sl: 0, vl: 0 };
                    encode_data_with_payload(&[2, 1, 0, 0, 1, 1], &[2, 0, 0, 0, 1, 0], &lrh,
                                             &Packet::new(opcode::ACK, 0x11, 200), &[], &mut frame).unwrap();
                    frame
                }
            };
            for (now, (bytes, mutation)) in frames.into_iter().enumerate() {
                let now = now as u64 * 1_000_000;
                let frame = match mutation {
                    Some((at, value)) if !valid.is_empty() => {
                        let mut f = valid.clone();
                        let at = at % f.len();
                        f[at] = value;
                        f
                    }
                    _ => bytes,
                };
                let before = trace(&nic);
                nic.receive(now, &frame);
                nic.after_events(now, &mut wire);
                proptest::prop_assert!(trace(&nic) > before, "{:02x?} left no trace", frame);
                nic.deadline(now, now + 500_000); // timers and credit grants on what came
                nic.after_events(now + 500_000, &mut wire);
            }
        }
    }
}
