//! A host's RNIC in simulated time (port of `emulator/sim/host.py`, Ethernet without DCQCN): the RC transport
//! model on RoCEv2 frames, a NIC queue that obeys the link's PFC.
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

use crate::model::pause::PrioritySet;
use crate::model::rc::{
    default_timeout_ns, AccessError, Completion, Memory, RcConfig, RcQueuePair,
};
use crate::sim::engine::{Engine, TimerId};
use crate::sim::fabric::Event;
use crate::sim::wire::{PortQueue, Wire};
use crate::wire::mac::Mac;
use crate::wire::pfc::{decode_pfc, ETHERTYPE_MAC_CONTROL, PRIORITIES};
use crate::wire::roce::{decode, Framer, DATA_DSCP};
use crate::wire::transport::Packet;

/// Frames the NIC queue holds before the RNIC stops pulling.
pub const NIC_FRAMES: usize = 4;
/// The data priority (DSCP 26).
pub const ROCE_PRIORITY: usize = 3;
/// The one memory key of a [`FlatMemory`].
pub const MEMORY_KEY: u32 = 1;

/// A checked range of a [`FlatMemory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    start: usize,
    len: usize,
}

/// One region of memory at address 0, key 1, every access allowed.
#[derive(Clone, Debug, Default)]
pub struct FlatMemory {
    pub data: Vec<u8>,
}

impl FlatMemory {
    /// `size` bytes of zeros.
    pub fn new(size: usize) -> FlatMemory {
        FlatMemory {
            data: vec![0; size],
        }
    }

    fn window(&self, key: u32, addr: u64, length: u64) -> Result<Window, AccessError> {
        let start = usize::try_from(addr).map_err(|_| AccessError)?;
        let len = usize::try_from(length).map_err(|_| AccessError)?;
        match start.checked_add(len) {
            Some(end) if key == MEMORY_KEY && end <= self.data.len() => Ok(Window { start, len }),
            _ => Err(AccessError),
        }
    }
}

impl Memory for FlatMemory {
    type Window = Window;

    fn local(
        &mut self,
        lkey: u32,
        addr: u64,
        length: u64,
        _write: bool,
    ) -> Result<Window, AccessError> {
        self.window(lkey, addr, length)
    }

    fn remote(
        &mut self,
        rkey: u32,
        addr: u64,
        length: u64,
        _write: bool,
    ) -> Result<Window, AccessError> {
        self.window(rkey, addr, length)
    }

    fn read(&mut self, window: &Window, offset: u64, len: usize, out: &mut Vec<u8>) {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .saturating_add(window.start);
        match self.data.get(start..start.saturating_add(len)) {
            Some(bytes) => out.extend_from_slice(bytes),
            None => out.resize(out.len() + len, 0), // never: the window was checked
        }
    }

    fn write(&mut self, window: &Window, offset: u64, data: &[u8]) {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .saturating_add(window.start);
        if let Some(bytes) = self.data.get_mut(start..start.saturating_add(data.len())) {
            bytes.copy_from_slice(data);
        }
    }
}

/// One QP of the host: the transport, its framer, its peer's address, its timer.
#[derive(Debug)]
pub struct HostQp {
    pub qp: RcQueuePair<Window>,
    framer: Framer,
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
    /// QPs that may have a packet to send, in turn order, and whether each is in the ring.
    ready: VecDeque<u32>,
    in_ready: Vec<bool>,
    /// The packet buffer reused for every packet pulled or received.
    scratch: Packet,
    /// Frame buffers that arrived here, reused for the frames it sends (no allocation per frame).
    spare: Vec<Vec<u8>>,
}

/// Frame buffers a host keeps for reuse (a NIC queue's worth and then some).
const SPARE_FRAMES: usize = 64;

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
            ready: VecDeque::new(),
            in_ready: Vec::new(),
            scratch: Packet::default(),
            spare: Vec::new(),
        }
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
        let defaults = RcConfig::default();
        let timeout_ns = default_timeout_ns(
            self.queue.pause.rate_bps,
            u64::from(mtu),
            u64::from(defaults.max_inflight),
        );
        let config = RcConfig {
            mtu,
            timeout_ns,
            ..defaults
        }
        .validated()
        .map_err(|error| error.to_string())?;
        let mut qp = RcQueuePair::new(qpn, config, 0);
        qp.connect(peer_qpn, 0).map_err(|error| error.to_string())?;
        let port = 49152 + (qpn & 0x3FFF) as u16; // the UDP source port: ECMP's entropy per QP
        let framer = Framer::new(
            self.mac,
            self.gateway_mac,
            self.ip,
            peer_ip,
            port,
            DATA_DSCP,
            64,
        )
        .map_err(|error| error.to_string())?;
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
        Ok(())
    }

    /// The QP numbered `qpn`.
    pub fn qp_mut(&mut self, qpn: u32) -> Option<&mut RcQueuePair<Window>> {
        self.qps
            .get_mut(qpn as usize)?
            .as_mut()
            .map(|entry| &mut entry.qp)
    }

    /// The completions `qpn` has, stamped `now`, appended to `out`.
    pub fn collect(&mut self, qpn: u32, now: u64, out: &mut Vec<Completion>) {
        if let Some(Some(entry)) = self.qps.get_mut(qpn as usize) {
            out.extend(entry.qp.poll_completions(None).map(|mut completion| {
                completion.timestamp = now;
                completion
            }));
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
        let Some(decoded) = decode(frame) else {
            self.counters.malformed += 1;
            return None;
        };
        self.counters.frames_received += 1;
        if !decoded.icrc_ok {
            self.counters.icrc_errors += 1;
            return None;
        }
        let qpn = decoded.packet.dest_qp;
        let Some(Some(entry)) = self.qps.get_mut(qpn as usize) else {
            self.counters.unknown += 1;
            return None;
        };
        if entry.peer_ip != decoded.src_ip {
            self.counters.unknown += 1;
            return None;
        }
        let mut packet = decoded.packet;
        packet.payload = std::mem::take(&mut self.scratch.payload);
        packet.payload.clear();
        packet
            .payload
            .extend_from_slice(frame.get(decoded.payload).unwrap_or(&[]));
        entry.qp.receive(now, &packet, &mut self.memory);
        self.scratch.payload = packet.payload;
        Some(qpn)
    }

    /// A frame this host is done with: its buffer kept for a frame to send.
    pub fn recycle(&mut self, frame: Vec<u8>) {
        if self.spare.len() < SPARE_FRAMES {
            self.spare.push(frame);
        }
    }

    /// The QP's timer fired; the caller collects its completions, then calls [`SimHost::resume`].
    pub fn on_timer(&mut self, engine: &Engine<Event>, qpn: u32) {
        if let Some(qp) = self.qp_mut(qpn) {
            qp.on_timer(engine.now());
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
            let Some(qpn) = self.ready.pop_front() else {
                return;
            };
            if let Some(flag) = self.in_ready.get_mut(qpn as usize) {
                *flag = false;
            }
            let Some(Some(entry)) = self.qps.get_mut(qpn as usize) else {
                continue;
            };
            if !entry
                .qp
                .next_packet(now, true, &mut self.memory, &mut self.scratch)
            {
                continue;
            }
            let mut frame = self.spare.pop().unwrap_or_default();
            frame.clear();
            let framed = entry.framer.encode(&self.scratch, &mut frame);
            self.mark_ready(qpn); // to the back of the turn
            self.arm(engine, qpn); // its first packet in flight starts the retransmission timer
            if framed.is_ok() {
                self.enqueue(index, engine, wires, frame, ROCE_PRIORITY);
            }
        }
    }

    fn enqueue(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &[Wire],
        frame: Vec<u8>,
        priority: usize,
    ) {
        if let Some(queue) = self.queue.queues.get_mut(priority) {
            queue.push_back(frame);
        }
        let free_at = self.wire_free_at(wires);
        self.queue.kick(engine, free_at, Event::QueueSend(index));
    }

    /// The QP's one timer at its transport's deadline.
    fn arm(&mut self, engine: &mut Engine<Event>, qpn: u32) {
        if let Some(Some(entry)) = self.qps.get(qpn as usize) {
            engine.set_timer(entry.timer, entry.qp.next_deadline());
        }
    }

    /// The NIC queue's look (`link.py`'s `PortQueue._send`): the highest unpaused priority's head goes on the
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

    /// How long the NIC's queue has been paused, all priorities summed, up to `now`.
    pub fn paused_ns(&self, now: u64) -> u64 {
        (0..PRIORITIES)
            .map(|p| self.queue.pause.paused_time(p, now))
            .sum()
    }
}
