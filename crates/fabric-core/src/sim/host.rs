//! A host's RNIC in simulated time: the RC transport model on RoCEv2 frames, a
//! NIC queue that obeys the link's PFC, DCQCN when the fabric runs it (`sim::congestion`) and the stall fault
//! (`sim::faults`); on an IB fabric native IB packets sent against the switch's credits, with flow-control
//! packets back (its IB port, `sim::ib`); on a UET fabric UET's RUD transport (`model::uet`) on UET frames,
//! each packet on the entropy value its connection chooses, ACKs and NACKs at priority 6.
//!
//! As the emulator's RNIC does, it pulls packets from its QPs one each in turn while its NIC queue has room
//! ([`NIC_FRAMES`]), frames them, decodes what arrives (checking the ICRC) and hands it to the QP the BTH
//! names. Only QPs that may have something to send are visited (the ready ring, in round-robin order): a QP
//! joins when work is posted to it, a packet arrives for it or its timer fires, and leaves when it has
//! nothing to give. Memory is one flat region per host, key 1, enough for the transport's checks and the
//! data to land.
//!
//! A completion goes to the simulated rank before the host goes on (the Python host calls the rank back from
//! inside its receive), so receiving is split in two: [`SimHost::receive`] returns the QP whose completions
//! the caller hands to the rank, then the caller finishes with [`SimHost::resume`].
use std::collections::VecDeque;

use crate::model::dcqcn::DcqcnParams;
use crate::model::ib_port::IbPort;
use crate::model::pause::PrioritySet;
use crate::model::queue_pair::QueuePair;
use crate::model::rc::{default_timeout_ns, Completion, RcConfig, RcQueuePair};
use crate::model::rccc::{CreditPacer, Turn, GRANT_BYTES};
use crate::model::uet::{UetPdc, UetSpec};
use crate::sim::congestion::{Arrival, HostCc, CNP_PRIORITY};
use crate::sim::engine::{Engine, TimerId};
use crate::sim::fabric::Event;
use crate::sim::faults::{Stall, STORM_PRIORITY};
use crate::sim::frame::{FramePool, SimFrame};
use crate::sim::ib::{gid_octets, gid_text, HostIb, QpFramer};
use crate::sim::memory::{FlatMemory, Window};
use crate::sim::wire::{PortQueue, Wire};
use crate::wire::ib::Lrh;
use crate::wire::mac::{Mac, ETH_LEN};
use crate::wire::pfc::{decode_pfc, pause_ns, ETHERTYPE_MAC_CONTROL, MAX_QUANTA, PRIORITIES};
use crate::wire::roce::{
    decode, pad_len, Framer, DATA_DSCP, ICRC_LEN, IP_LEN, MAX_TRANSPORT_LEN, UDP_LEN,
};
use crate::wire::transport::Packet;
use crate::wire::uet::{self, PdsKind, UetFramer, UetPacket};

/// Frames the NIC queue holds before the RNIC stops pulling.
pub const NIC_FRAMES: usize = 4;
/// The data priority (DSCP 26).
pub const ROCE_PRIORITY: usize = 3;

/// ACKs and NACKs of UET: strict, above the data (uet-htsim's high queue).
pub const UET_CONTROL_PRIORITY: usize = (uet::CONTROL_DSCP >> 3) as usize;

/// How one QP's packets are framed: RoCE or IB for RC, UET's frames for a PDC.
#[derive(Debug)]
pub enum HostFramer {
    Rc(QpFramer),
    Uet(UetFramer),
}

/// One QP of the host: the transport and its framer, its peer's address, its timer.
#[derive(Debug)]
pub struct HostQp {
    pub qp: QueuePair<Window>,
    framer: HostFramer,
    peer_ip: [u8; 4],
    timer: TimerId,
}

/// Frames the host refused, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    pub icrc_errors: u64,
    pub unknown: u64,
    pub pauses: u64,
    pub malformed: u64,
    /// RDMA frames that arrived.
    pub frames_received: u64,
}

/// The RNIC of one host.
#[derive(Debug)]
pub struct SimHost {
    pub mac: Mac,
    pub gateway_mac: Mac,
    pub ip: [u8; 4],
    pub queue: PortQueue,
    pub memory: FlatMemory,
    /// By QP number (`None` where no QP has that number). Boxed: the ranks number a QP after its peer, so a
    /// ring's last rank has a table as long as the ring for its two QPs (3,456 ranks: 3 GB unboxed).
    pub qps: Vec<Option<Box<HostQp>>>,
    pub counters: HostCounters,
    /// DCQCN's notification point and reaction points, when the fabric runs it.
    pub cc: Option<HostCc>,
    /// The stall fault's state and counts.
    pub stall: Stall,
    /// QPs that may have a packet to send, in turn order, and whether each is in the ring.
    ready: VecDeque<u32>,
    in_ready: Vec<bool>,
    /// The packet buffer reused for every packet pulled (one received is read where it lies in its frame).
    scratch: Packet,
    /// Frame buffers that arrived here, reused for the frames it sends (no allocation per frame).
    spare: Vec<Vec<u8>>,
    /// The frames that arrived here, reused likewise.
    frames: FramePool,
    /// The IB port on an IB fabric (`sim::ib::attach` gives it), else none.
    pub ib: Option<HostIb>,
    /// A UET fabric's transport, else none (RC).
    pub uet: Option<UetSpec>,
    /// The UET packet buffer reused for every packet pulled.
    uet_scratch: UetPacket,
    /// UET frames refused: not decodable, or a UDP checksum that failed.
    pub uet_malformed: u64,
    /// Receiver credits (a UET fabric with RCCC): the NIC's pacer and its timer, made with the first PDC.
    credit_pacer: Option<(CreditPacer, TimerId)>,
}

/// Frame buffers a host keeps for reuse (a NIC queue's worth and then some).
const SPARE_FRAMES: usize = 64;
/// The longest frame sent as a copy (held in place by the frame, or in a buffer of its own size:
/// `FramePool::copied`): an ACK or NAK, a READ request, and a data frame of less than half a buffer. A
/// switch's buffer is counted in frame bytes, so a switch full of small frames holds many more of them than of
/// full ones; each in a 4 KB buffer, the ACKs and the 1 KiB messages of an all-to-all on fattree,16 took GBs.
/// A copy of a frame this short costs less than the memory it frees. A longer RoCE frame leaves its payload
/// in memory (`sim::frame`); a shorter one is copied because the copy costs less than the share (a count on
/// its pages, the frame put together at the receiver, a copy of a whole page when the rank writes it while
/// the frame is in flight): shared from 256 bytes, the 1 KiB steps of a ring all-reduce at fattree,16 ran
/// slower (docs/performance.md).
const SMALL_FRAME: usize = FRAME_BUFFER / 2;
/// A frame buffer's size: the longest RoCEv2 frame of the largest path MTU (4096 bytes of payload after every
/// transport header, 4,174 bytes; an IB fabric's frames are shorter, having no IP and UDP headers), so a
/// buffer that carried an ACK can carry data without growing (a reallocation and a copy). No more: at the
/// peak of a fattree,8 all-to-all nearly every frame is in a switch's buffer at once, and 256 bytes to spare
/// per frame (a 4,368-byte block each) cost 4% more pages, each a page fault when first touched.
const FRAME_BUFFER: usize = ETH_LEN + IP_LEN + UDP_LEN + MAX_TRANSPORT_LEN + 4096 + ICRC_LEN;

impl SimHost {
    /// The host's RNIC sending on wire `wire` of `rate_bps`.
    pub fn new(
        mac: Mac,
        gateway_mac: Mac,
        ip: [u8; 4],
        wire: u32,
        rate_bps: u64,
        memory: usize,
    ) -> SimHost {
        SimHost {
            mac,
            gateway_mac,
            ip,
            queue: PortQueue::new(wire, rate_bps),
            memory: FlatMemory::new(memory.max(1)),
            qps: Vec::new(),
            counters: HostCounters::default(),
            cc: None,
            stall: Stall::default(),
            ready: VecDeque::new(),
            in_ready: Vec::new(),
            scratch: Packet::default(),
            spare: Vec::new(),
            frames: FramePool::default(),
            ib: None,
            uet: None,
            uet_scratch: UetPacket::default(),
            uet_malformed: 0,
            credit_pacer: None,
        }
    }

    /// DCQCN on this RNIC with `params` (scaled to its link, as `dcqcn.at_link` gives them), before its QPs
    /// are made: each QP gets a reaction point at the link's rate.
    pub fn run_dcqcn(&mut self, params: DcqcnParams) {
        self.cc = Some(HostCc::new(params, self.queue.pause.rate_bps));
    }

    /// An RC QP `qpn` to `peer_ip`'s `peer_qpn` (both ends at PSN 0), with the path MTU and the ACK timeout of
    /// this host's link rate, as the RNIC agent gives a QP by default.
    pub fn connect(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        qpn: u32,
        peer_ip: [u8; 4],
        peer_qpn: u32,
        mtu: u32,
    ) -> Result<(), String> {
        if let Some(spec) = self.uet {
            return self.connect_uet(index, engine, qpn, peer_ip, peer_qpn, mtu, spec);
        }
        let defaults = RcConfig::default();
        let timeout_ns = default_timeout_ns(
            self.queue.pause.rate_bps,
            u64::from(mtu),
            u64::from(defaults.max_inflight),
        );
        let config = RcConfig {
            mtu,
            timeout_ns,
            reorder: self.ib.as_ref().map_or(0, |ib| ib.reorder.0),
            reorder_wait_ns: self.ib.as_ref().map_or(0, |ib| ib.reorder.1),
            ..defaults
        }
        .validated()
        .map_err(|error| error.to_string())?;
        let mut qp = RcQueuePair::new(qpn, config, 0);
        qp.connect(peer_qpn, 0).map_err(|error| error.to_string())?;
        let port = 49152 + (qpn & 0x3FFF) as u16; // the UDP source port: ECMP's entropy per QP
        let framer = match &self.ib {
            None => QpFramer::Roce(
                Framer::new(
                    self.mac,
                    self.gateway_mac,
                    self.ip,
                    peer_ip,
                    port,
                    DATA_DSCP,
                    64,
                )
                .map_err(|error| error.to_string())?,
            ),
            Some(ib) => QpFramer::Ib {
                mac: self.mac,
                gateway_mac: self.gateway_mac,
                lrh: Lrh {
                    dlid: ib
                        .port
                        .framer(&gid_text(peer_ip), u64::from(mtu))
                        .map_err(|error| error.to_string())?,
                    slid: ib.port.lid(),
                    sl: ib.port.sl(),
                    vl: ib.port.vl(),
                },
            },
        };
        if let Some(cc) = self.cc.as_mut() {
            cc.connect(qpn, (self.mac, self.gateway_mac, self.ip, peer_ip), port)?;
        }
        self.install(
            engine,
            index,
            qpn,
            QueuePair::Rc(qp),
            HostFramer::Rc(framer),
            peer_ip,
        );
        Ok(())
    }

    /// A UET PDC numbered `qpn` to `peer_ip`'s `peer_qpn` (both ends at PSN 0): packets of the path MTU, NSCC
    /// on this host's rate, its entropy draws seeded by the host and the PDC.
    #[allow(clippy::too_many_arguments)] // the host's context and the connection's ends
    fn connect_uet(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        qpn: u32,
        peer_ip: [u8; 4],
        peer_qpn: u32,
        mtu: u32,
        spec: UetSpec,
    ) -> Result<(), String> {
        let config = spec.config(mtu, self.queue.pause.rate_bps);
        let seed = u64::from(index) << 32 | u64::from(qpn);
        let mut pdc = UetPdc::new(qpn, config, 0, seed);
        pdc.connect(peer_qpn, 0)
            .map_err(|error| error.to_string())?;
        let framer = UetFramer::new(self.mac, self.gateway_mac, self.ip, peer_ip);
        if spec.rccc && self.credit_pacer.is_none() {
            let pacer = CreditPacer::new(self.queue.pause.rate_bps, GRANT_BYTES);
            self.credit_pacer = Some((pacer, engine.timer(Event::CreditTimer(index))));
        }
        self.install(
            engine,
            index,
            qpn,
            QueuePair::Uet(Box::new(pdc)),
            HostFramer::Uet(framer),
            peer_ip,
        );
        Ok(())
    }

    /// `qp` framed by `framer` as QP `qpn`, with its timer.
    fn install(
        &mut self,
        engine: &mut Engine<Event>,
        index: u32,
        qpn: u32,
        qp: QueuePair<Window>,
        framer: HostFramer,
        peer_ip: [u8; 4],
    ) {
        let timer = engine.timer(Event::QpTimer { host: index, qpn });
        let at = qpn as usize;
        if self.qps.len() <= at {
            self.qps.resize_with(at + 1, || None);
            self.in_ready.resize(at + 1, false);
        }
        self.qps[at] = Some(Box::new(HostQp {
            qp,
            framer,
            peer_ip,
            timer,
        }));
    }

    /// The QP numbered `qpn`.
    pub fn qp_mut(&mut self, qpn: u32) -> Option<&mut QueuePair<Window>> {
        self.qps
            .get_mut(qpn as usize)?
            .as_mut()
            .map(|entry| &mut entry.qp)
    }

    /// The completions `qpn` has, stamped `now`, appended to `out`.
    pub fn collect(&mut self, qpn: u32, now: u64, out: &mut Vec<Completion>) {
        if let Some(Some(entry)) = self.qps.get_mut(qpn as usize) {
            let from = out.len();
            entry.qp.poll_into(out);
            for completion in &mut out[from..] {
                completion.timestamp = now;
            }
        }
    }

    fn mark_ready(&mut self, qpn: u32) {
        if let Some(flag) = self.in_ready.get_mut(qpn as usize) {
            if !*flag {
                *flag = true;
                self.ready.push_back(qpn);
            }
        }
    }

    /// Work was posted to `qpn`: send what may go.
    pub fn kick(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire], qpn: u32) {
        self.resume(index, engine, wires, qpn);
    }

    /// After a QP's completions went to the rank: the QP in the ring, packets pulled, its timer armed.
    pub fn resume(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire], qpn: u32) {
        self.mark_ready(qpn);
        self.pull(index, engine, wires);
        self.arm(engine, qpn);
    }

    /// A frame's last bit arrived from the switch; the QP it went to, whose completions the caller collects
    /// and hands on before calling [`SimHost::resume`] for it.
    pub fn receive(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &mut [Wire],
        frame: &[u8],
    ) -> Option<u32> {
        if self.ib.is_some() {
            return self.receive_ib(index, engine, wires, frame);
        }
        let now = engine.now();
        if frame.get(12..14) == Some(&ETHERTYPE_MAC_CONTROL.to_be_bytes()[..]) {
            if let Some(quanta) = decode_pfc(frame).filter(|q| q.iter().any(Option::is_some)) {
                self.counters.pauses += 1;
                self.queue.pause.on_pfc(now, &quanta);
                let free_at = self.wire_free_at(wires);
                self.queue.kick(engine, free_at, Event::QueueSend(index));
            }
            return None;
        }
        if self.uet.is_some() {
            return self.receive_uet(engine, frame);
        }
        let Some(decoded) = decode(frame) else {
            self.counters.malformed += 1;
            return None;
        };
        let payload = frame.get(decoded.payload).unwrap_or(&[]);
        self.deliver(
            index,
            engine,
            wires,
            decoded.packet,
            Some(decoded.src_ip),
            decoded.icrc_ok,
            payload,
        )
    }

    /// A decoded packet from `source` (`None`: an address no host has): counted, and handed to the QP its BTH
    /// names if its CRCs held and it comes from that QP's peer; that QP, for the caller as `receive` says.
    #[allow(clippy::too_many_arguments)] // the host's context (index, engine, wires) and the packet's parts
    fn deliver(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &[Wire],
        packet: Packet,
        source: Option<[u8; 4]>,
        crc_ok: bool,
        payload: &[u8],
    ) -> Option<u32> {
        let now = engine.now();
        self.counters.frames_received += 1;
        if !crc_ok {
            self.counters.icrc_errors += 1;
            return None;
        }
        let qpn = packet.dest_qp;
        let Some(Some(entry)) = self.qps.get_mut(qpn as usize) else {
            self.counters.unknown += 1;
            return None;
        };
        if Some(entry.peer_ip) != source {
            self.counters.unknown += 1;
            return None;
        }
        if !matches!(entry.qp, QueuePair::Rc(_)) {
            self.counters.unknown += 1;
            return None;
        }
        let remote_qpn = entry.qp.remote_qpn();
        if self.congestion(index, engine, wires, qpn, remote_qpn, &packet) {
            return None;
        }
        let entry = self.qps.get_mut(qpn as usize).and_then(Option::as_mut);
        if let Some(QueuePair::Rc(qp)) = entry.map(|entry| &mut entry.qp) {
            qp.receive_with_payload(now, &packet, payload, &mut self.memory);
        }
        Some(qpn)
    }

    /// A UET frame: to the PDC it names, if its checksum held and it comes from that PDC's peer; that PDC, for
    /// the caller as `receive` says.
    fn receive_uet(&mut self, engine: &mut Engine<Event>, frame: &[u8]) -> Option<u32> {
        let Some(decoded) = uet::decode(frame).filter(|d| d.checksum_ok) else {
            self.uet_malformed += 1;
            self.counters.malformed += 1;
            return None;
        };
        self.counters.frames_received += 1;
        let qpn = u32::from(decoded.packet.dpdcid);
        let payload = frame.get(decoded.payload.clone()).unwrap_or(&[]);
        let entry = self.qps.get_mut(qpn as usize).and_then(Option::as_mut);
        match entry.map(|entry| (entry.peer_ip, &mut entry.qp)) {
            Some((peer_ip, QueuePair::Uet(pdc))) if peer_ip == decoded.src_ip => {
                pdc.receive_with_payload(engine.now(), &decoded.packet, payload, &mut self.memory);
                if pdc.credit_wanted() > 0 {
                    if let Some((pacer, timer)) = self.credit_pacer.as_mut() {
                        pacer.ask(qpn);
                        engine.set_timer(*timer, pacer.next_deadline());
                    }
                }
                Some(qpn)
            }
            _ => {
                self.counters.unknown += 1;
                None
            }
        }
    }

    /// DCQCN's part of a packet's arrival for `qpn`: a CNP for its limiter (consumed: true, the QP's timer
    /// re-armed), or a CE mark that earns the peer a CNP, queued ahead of the data.
    fn congestion(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &[Wire],
        qpn: u32,
        remote_qpn: u32,
        packet: &Packet,
    ) -> bool {
        let Some(cc) = self.cc.as_mut() else {
            return false;
        };
        let mut cnp = self.spare.pop().unwrap_or_default();
        match cc.arrival(engine.now(), qpn, remote_qpn, packet, &mut cnp) {
            Arrival::Cnp => {
                self.recycle(cnp);
                self.arm(engine, qpn);
                true
            }
            Arrival::Pass(true) => {
                let frame = self.frames.copied(&cnp);
                self.recycle(cnp);
                self.enqueue(index, engine, wires, frame, CNP_PRIORITY);
                false
            }
            Arrival::Pass(false) => {
                self.recycle(cnp);
                false
            }
        }
    }

    /// A frame this host took: kept to make a frame to send.
    pub fn take_back(&mut self, frame: SimFrame) {
        if let Some(buffer) = self.frames.recycle(frame) {
            self.recycle(buffer);
        }
    }

    /// A buffer this host is done with: kept for a frame to send (a small one, a PFC frame's, is not worth
    /// keeping).
    fn recycle(&mut self, frame: Vec<u8>) {
        if self.spare.len() < SPARE_FRAMES && frame.capacity() >= FRAME_BUFFER {
            self.spare.push(frame);
        }
    }

    /// The QP's timer fired; the caller collects its completions, then calls [`SimHost::resume`].
    pub fn on_timer(&mut self, engine: &Engine<Event>, qpn: u32) {
        let now = engine.now();
        if let Some(qp) = self.qp_mut(qpn) {
            qp.on_timer(now);
        }
        if let Some(cc) = self.cc.as_mut() {
            cc.on_timer(qpn, now);
        }
    }

    fn wire_free_at(&self, wires: &[Wire]) -> u64 {
        wires
            .get(self.queue.wire as usize)
            .map_or(0, |wire| wire.free_at)
    }

    /// Packets from the ready QPs, one each in turn, while the NIC queue has room.
    fn pull(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire]) {
        let now = engine.now();
        while self.queue.queued(ROCE_PRIORITY) < NIC_FRAMES {
            if let Some(ib) = self.ib.as_mut() {
                if let Some(held) = ib.held.take() {
                    if !matches!(ib.port.admit(&held), Ok(true)) {
                        ib.held = Some(held); // still no credit: the next flow-control packet pulls again
                        return;
                    }
                    self.enqueue(index, engine, wires, held.into(), ROCE_PRIORITY);
                    continue;
                }
            }
            let Some(qpn) = self.ready.pop_front() else {
                return;
            };
            if let Some(flag) = self.in_ready.get_mut(qpn as usize) {
                *flag = false;
            }
            let Some(Some(entry)) = self.qps.get_mut(qpn as usize) else {
                continue;
            };
            let data = self.cc.as_ref().is_none_or(|cc| cc.may_send(qpn, now));
            self.memory.take_last_read(); // forgotten: only this packet's read says where its payload lies
            let (qp, framer) = match (&mut entry.qp, &mut entry.framer) {
                (QueuePair::Rc(qp), HostFramer::Rc(framer)) => (qp, framer),
                (QueuePair::Uet(pdc), HostFramer::Uet(framer)) => {
                    if !pdc.next_packet(now, &mut self.memory, &mut self.uet_scratch) {
                        continue;
                    }
                    let mut frame = self.spare.pop().unwrap_or_default();
                    frame.clear();
                    let scratch = &self.uet_scratch;
                    let framed = framer.encode(scratch, &scratch.payload, &mut frame).is_ok();
                    let priority = match scratch.kind {
                        PdsKind::Request => ROCE_PRIORITY,
                        PdsKind::Ack | PdsKind::Nack | PdsKind::Credit => UET_CONTROL_PRIORITY,
                    };
                    self.mark_ready(qpn); // to the back of the turn
                    self.arm(engine, qpn);
                    let copy = self.frames.copied(&frame);
                    self.recycle(frame);
                    if framed {
                        self.enqueue(index, engine, wires, copy, priority);
                    }
                    continue;
                }
                _ => continue, // a QP is made with its own framer: never mismatched
            };
            if !qp.next_packet(now, data, &mut self.memory, &mut self.scratch) {
                // Held to its rate: its ACKs may go, and its timer wakes it when its next frame may.
                let has_data = !data && qp.has_data();
                if self.cc.as_mut().is_some_and(|cc| cc.hold(qpn, has_data)) {
                    self.arm(engine, qpn);
                }
                continue;
            }
            let mut frame = self
                .spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(FRAME_BUFFER));
            frame.clear();
            let framed = framer.encode(&self.scratch, &mut frame);
            let leaving = self.leave_payload(index, &frame);
            self.mark_ready(qpn); // to the back of the turn
            self.arm(engine, qpn); // its first packet in flight starts the retransmission timer
            if let Some(cc) = self.cc.as_mut().filter(|_| framed) {
                cc.sent(qpn, now, self.scratch.opcode, frame.len());
            }
            if let Some(ib) = self.ib.as_mut().filter(|_| framed) {
                if !matches!(ib.port.admit(&frame), Ok(true)) {
                    ib.held = Some(frame); // it waits for the switch's credit
                    return;
                }
            }
            // The buffer kept to frame the next packet unless the frame needs all of it.
            let frame = match leaving {
                Some(leaving) => {
                    self.recycle(frame);
                    leaving
                }
                None if frame.len() <= SMALL_FRAME => {
                    let short = self.frames.copied(&frame);
                    self.recycle(frame);
                    short
                }
                None => frame.into(),
            };
            if framed {
                self.enqueue(index, engine, wires, frame, ROCE_PRIORITY);
            }
        }
    }

    /// The RoCE frame just made from `self.scratch`, its payload left in this host's memory where the transport
    /// read it: `None` on an IB fabric, for a frame too short to be worth it ([`SMALL_FRAME`]), or a payload
    /// not read from memory.
    fn leave_payload(&mut self, index: u32, frame: &[u8]) -> Option<SimFrame> {
        let (start, len) = self.memory.take_last_read()?;
        if self.ib.is_some() || frame.len() <= SMALL_FRAME || len != self.scratch.payload.len() {
            return None;
        }
        // The payload, its pad and the ICRC end the frame. Were `at` wrong, the frame put back together would
        // fail its ICRC at the receiver, a counted drop (tests/sim_parts.rs's leaf-spine write and
        // tests/unit/test_sim_collective.py then fail), never a panic.
        let at = frame.len().checked_sub(ICRC_LEN + pad_len(len) + len)?;
        let shared = self.memory.share(start, len)?;
        self.frames.sharing(frame, at, index, shared)
    }

    fn enqueue(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &[Wire],
        frame: SimFrame,
        priority: usize,
    ) {
        if let Some(queue) = self.queue.queues.get_mut(priority) {
            queue.push_back(frame);
        }
        let free_at = self.wire_free_at(wires);
        self.queue.kick(engine, free_at, Event::QueueSend(index));
    }

    /// The QP's one timer at its earliest deadline: the transport's, and with DCQCN its limiter's.
    fn arm(&mut self, engine: &mut Engine<Event>, qpn: u32) {
        if let Some(Some(entry)) = self.qps.get(qpn as usize) {
            let deadline = entry.qp.next_deadline();
            let deadline = match &self.cc {
                Some(cc) => cc.deadline(qpn, deadline),
                None => deadline,
            };
            engine.set_timer(entry.timer, deadline);
        }
    }

    /// Fault `stall`: the NIC's receive pipeline hangs (the fabric holds its RDMA frames in `stall`) and it
    /// pauses its switch port without end.
    pub fn begin_stall(&mut self, index: u32, engine: &mut Engine<Event>, wires: &[Wire]) {
        if self.stall.begin() {
            self.storm(index, engine, wires, MAX_QUANTA);
        }
    }

    /// The stall ends: XON, and the frames it held (oldest first) for the caller to take at once; `None` if the
    /// NIC was not stalled.
    pub fn end_stall(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &[Wire],
    ) -> Option<VecDeque<SimFrame>> {
        let held = self.stall.end()?;
        if let Some(refresh) = self.stall.refresh.take() {
            engine.cancel(refresh);
        }
        self.storm(index, engine, wires, 0);
        Some(held)
    }

    /// The storm's PFC frame of `quanta` (0: XON) into priority 7's queue; an XOFF is refreshed at half its
    /// pause time.
    pub fn storm(&mut self, index: u32, engine: &mut Engine<Event>, wires: &[Wire], quanta: u16) {
        let frame = self
            .frames
            .copied(&self.stall.storm_frame(&self.mac, quanta));
        self.enqueue(index, engine, wires, frame, STORM_PRIORITY);
        if quanta > 0 {
            let refresh = pause_ns(u64::from(MAX_QUANTA), self.queue.pause.rate_bps) / 2;
            self.stall.refresh = Some(engine.after(refresh, Event::StormRefresh(index)));
        }
    }

    /// The NIC queue's look (a transmit queue's): the highest unpaused priority's head goes on the
    /// wire, and the RNIC pulls the next packet at once.
    pub fn queue_send(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire]) {
        self.queue.wake = None;
        let now = engine.now();
        self.queue.pause.expire(now);
        let wire_id = self.queue.wire;
        let Some(wire) = wires.get_mut(wire_id as usize) else {
            return;
        };
        if wire.busy(now) {
            let free_at = wire.free_at;
            self.queue
                .wake_at_time(engine, free_at, Event::QueueSend(index));
            return;
        }
        for priority in (0..PRIORITIES).rev() {
            if self.queue.pause.is_paused(priority) {
                continue;
            }
            let Some(frame) = self.queue.queues[priority].pop_front() else {
                continue;
            };
            let free_at = wire.send(wire_id, engine, frame);
            self.pull(index, engine, wires); // may enqueue the next frame: its look is then due when the wire frees
            if self.queue.wake.is_none() && self.queue.any_queued() {
                self.queue
                    .wake_at_time(engine, free_at, Event::QueueSend(index));
            }
            return;
        }
        let held = (0..PRIORITIES)
            .filter(|&p| self.queue.pause.is_paused(p))
            .fold(PrioritySet::EMPTY, |set, p| set.with(p));
        if let Some(expiry) = self.queue.pause.next_expiry() {
            if held.iter().any(|p| !self.queue.queues[p].is_empty()) {
                self.queue
                    .wake_at_time(engine, expiry, Event::QueueSend(index));
            }
        }
    }

    /// The credit pacer's grant is due: the PDC whose turn it is owes its peer a grant, and goes out.
    pub fn credit_timer(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire]) {
        let now = engine.now();
        let Some((mut pacer, timer)) = self.credit_pacer.take() else {
            return;
        };
        while let Some(qpn) = pacer.due(now) {
            let (granted, turn) = match self.qp_mut(qpn) {
                Some(QueuePair::Uet(pdc)) => pdc.grant_credit(pacer.per_grant()),
                _ => (0, Turn::Full),
            };
            pacer.granted(now, qpn, granted, turn);
            self.mark_ready(qpn);
        }
        engine.set_timer(timer, pacer.next_deadline());
        self.credit_pacer = Some((pacer, timer));
        self.pull(index, engine, wires);
    }

    /// An IB fabric: the host's IB port, its flow-control timer armed (its first packets, init, go at once).
    pub fn attach_ib(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        port: IbPort,
        reorder: (u32, u64),
    ) {
        let timer = engine.timer(Event::IbTimer(index));
        self.ib = Some(HostIb {
            port,
            held: None,
            timer,
            control: Vec::new(),
            reorder,
        });
        self.arm_ib(engine);
    }

    /// The IB port's timer at its next flow-control deadline.
    fn arm_ib(&mut self, engine: &mut Engine<Event>) {
        if let Some(ib) = self.ib.as_mut() {
            let deadline = ib.port.next_deadline();
            engine.set_timer(ib.timer, Some(deadline));
        }
    }

    /// A frame on an IB fabric: a flow-control packet is credit (what waited may go), a data packet goes to its
    /// QP as on Ethernet, and what arrived is credit to grant back.
    fn receive_ib(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &mut [Wire],
        frame: &[u8],
    ) -> Option<u32> {
        let now = engine.now();
        let accepted = self.ib.as_mut()?.port.accept(now, frame).map(|accepted| {
            let source = gid_octets(accepted.source);
            (accepted.decoded, source, accepted.crc_ok)
        });
        let Some((decoded, source, crc_ok)) = accepted else {
            self.pull(index, engine, wires); // a flow-control packet (credit) or garbage (counted)
            self.arm_ib(engine);
            return None;
        };
        self.arm_ib(engine);
        let payload = frame.get(decoded.payload).unwrap_or(&[]);
        self.deliver(
            index,
            engine,
            wires,
            decoded.packet,
            source,
            crc_ok,
            payload,
        )
    }

    /// The IB port's timer: the flow-control packets due (grants, refreshes) go behind the data already queued,
    /// as the RNIC agent sends them.
    pub fn ib_timer(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire]) {
        let now = engine.now();
        let Some(ib) = self.ib.as_mut() else {
            return;
        };
        let mut control = std::mem::take(&mut ib.control);
        ib.port.control_frames(now, &mut control);
        for frame in control.drain(..) {
            let frame = self.frames.copied(&frame);
            self.enqueue(index, engine, wires, frame, ROCE_PRIORITY);
        }
        if let Some(ib) = self.ib.as_mut() {
            ib.control = control;
        }
        self.arm_ib(engine);
    }

    /// How long the NIC's queue has been paused, all priorities summed, up to `now`.
    pub fn paused_ns(&self, now: u64) -> u64 {
        (0..PRIORITIES)
            .map(|p| self.queue.pause.paused_time(p, now))
            .sum()
    }
}
