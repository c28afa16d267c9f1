//! A switch in simulated time: the forwarding decisions and the
//! MMU on real frame bytes, cables instead of sockets.
//!
//! A port sends on its wire whenever the wire is free: PFC frames first (the agent sends them in the highest
//! tc class), then what the MMU chooses. Frames that are neither IPv4 nor PFC are dropped and counted, as the
//! agent does. Every step schedules its events in the order the Python switch does, so a run is the Python
//! run event for event. On an IB fabric the switch's IB plane (`model::ib_plane`, set up by `sim::ib`) takes
//! the native IB frames and goes before the MMU, its flow-control packets in line with the data they count.
use std::collections::VecDeque;

use crate::model::forwarding::{ecmp_index, ipv4_ok_len, priority, route_in_place, ETH_IPV4};
use crate::model::ib_plane::IbPlane;
use crate::model::link::{Link, SameFrame};
use crate::model::mmu::{Held, Mmu, PfcRequest};
use crate::model::routes::{Egress, Routes};
use crate::sim::engine::{Engine, EventId, TimerId};
use crate::sim::fabric::Event;
use crate::sim::frame::SimFrame;
use crate::sim::ib::port_waiting;
use crate::sim::wire::Wire;
use crate::wire::ib::{ETH_IB, LRH_AT, SLP};
use crate::wire::mac::{Mac, ETH_LEN};
use crate::wire::pfc::{decode_pfc, encode_pfc, ETHERTYPE_MAC_CONTROL, MIN_FRAME, PRIORITIES};

/// One port: its MAC, its peer's MAC, and the wire it sends on.
#[derive(Clone, Copy, Debug)]
pub struct SwitchPort {
    pub mac: Mac,
    pub peer_mac: Mac,
    pub wire: u32,
}

/// Injected loss on one port's link, as the plan gives it: whether the port faces a host (only then does
/// loss take frames arriving on it), the probability of losing each frame, the frame numbers always lost
/// (from 1, per direction), and the seed of the draws (`random.Random`'s integer seed as 32-bit words, least
/// significant first).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortLoss {
    pub host_facing: bool,
    pub loss: f64,
    pub drop: Vec<u64>,
    pub seed: Vec<u32>,
}

/// The handle a link's head-of-queue draw gets: never the same frame as the last one cleared, because the
/// switch draws for a head only when its wire is free and sends it at once (no head is asked about twice).
#[derive(Clone, Copy, Debug)]
struct SentAtOnce;

impl SameFrame for SentAtOnce {
    fn same_frame(&self, _other: &Self) -> bool {
        false
    }
}

/// Frames the switch dropped before the MMU, by reason (the Python switch's `dropped`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub malformed: u64,
    pub no_route: u64,
    pub ttl: u64,
    pub unsupported: u64,
}

impl Dropped {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.malformed + self.no_route + self.ttl + self.unsupported
    }
}

/// One simulated switch.
#[derive(Debug)]
pub struct SimSwitch {
    pub ports: Vec<SwitchPort>,
    /// IPv4 destination -> the egress ports that lead there (ECMP among several).
    routes: Routes,
    pub seed: u32,
    pub mmu: Mmu<SimFrame>,
    pub dropped: Dropped,
    pfc_out: Vec<VecDeque<[u8; MIN_FRAME]>>,
    /// Injected loss per port (`model::link`'s draws; its delay is the wire's business here); `None` when no
    /// port loses frames.
    links: Option<Vec<Link<SentAtOnce>>>,
    /// The MMU's PFC decisions being sent (kept to reuse its allocation).
    decided: Vec<PfcRequest>,
    drain_at: Vec<Option<EventId>>,
    /// Per port, the buffer of the frame on its wire: held until the frame's last bit has left, as a
    /// store-and-forward switch reads a frame out of its memory while it sends it (the emulated switch
    /// frees it at the same point of its virtual wire).
    on_wire: Vec<Option<Held>>,
    timer: TimerId,
    /// The IB plane on an IB fabric (`sim::ib::attach` gives it), else none.
    pub ib: Option<IbPlane>,
    /// The ports with flow-control packets due (kept to reuse its allocation).
    ib_ports: Vec<usize>,
}

impl SimSwitch {
    /// Switch `index` of the fabric with its ports, routes, MMU and ECMP seed; its timer is made on `engine`.
    pub fn new(
        index: u32,
        engine: &mut Engine<Event>,
        ports: Vec<SwitchPort>,
        routes: Vec<([u8; 4], Vec<u32>)>,
        mmu: Mmu<SimFrame>,
        seed: u32,
    ) -> SimSwitch {
        let count = ports.len();
        SimSwitch {
            ports,
            routes: Routes::new(routes),
            seed,
            mmu,
            dropped: Dropped::default(),
            pfc_out: vec![VecDeque::new(); count],
            links: None,
            decided: Vec::new(),
            drain_at: vec![None; count],
            on_wire: vec![None; count],
            timer: engine.timer(Event::SwitchTimer(index)),
            ib: None,
            ib_ports: Vec::new(),
        }
    }

    /// Injected loss on the ports' links (one [`PortLoss`] per port, at the ports' `rates`), kept only if some
    /// port loses frames.
    /// New routes (a link went down or came back): what arrives from now on goes by them.
    pub fn set_routes(&mut self, routes: Vec<([u8; 4], Vec<u32>)>) {
        self.routes = Routes::new(routes);
    }

    pub fn lose(&mut self, losses: &[PortLoss], rates: &[u64]) -> Result<(), String> {
        if losses.len() != self.ports.len() || rates.len() != self.ports.len() {
            return Err(format!(
                "{} losses and {} rates for {} ports",
                losses.len(),
                rates.len(),
                self.ports.len()
            ));
        }
        let links = losses
            .iter()
            .zip(rates)
            .map(|(port, &rate)| {
                Link::new(rate, 0, port.host_facing, port.loss, &port.drop, &port.seed)
                    .map_err(|error| error.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?;
        self.links = links.iter().any(Link::lossy).then_some(links);
        Ok(())
    }

    /// Frames injected loss took on every port, all priorities.
    pub fn injected_drops(&self) -> u64 {
        self.links
            .iter()
            .flatten()
            .map(|link| link.injected_drops().iter().sum::<u64>())
            .sum()
    }

    /// Frames injected loss took on `port`'s link, both directions, all priorities: the figure a test of one
    /// port tells from the MMU's drops, which the totals add to it.
    pub fn injected_drops_at(&self, port: usize) -> u64 {
        self.links
            .as_ref()
            .and_then(|links| links.get(port))
            .map_or(0, |link| link.injected_drops().iter().sum())
    }

    /// Whether injected loss takes this frame of priority `prio` arriving on `port` (from a host).
    fn lost_from_host(&mut self, port: usize, prio: usize) -> bool {
        match self.links.as_mut().and_then(|links| links.get_mut(port)) {
            Some(link) => link.host_facing() && link.lost_from_host(prio),
            None => false,
        }
    }

    /// Whether injected loss takes the head of `port`'s queue, of priority `prio`.
    fn lost_at_head(&mut self, port: usize, prio: usize) -> bool {
        match self.links.as_mut().and_then(|links| links.get_mut(port)) {
            Some(link) => link.lost_at_head(SentAtOnce, prio),
            None => false,
        }
    }

    /// Once every port's wire is connected: what is due at once.
    pub fn start(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire]) {
        self.after(index, engine, wires);
    }

    /// A frame's last bit arrived on `port`.
    pub fn receive(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &mut [Wire],
        port: usize,
        mut frame: SimFrame,
    ) {
        let now = engine.now();
        let wire_len = frame.len();
        let bytes = frame.bytes();
        let ethertype = bytes.get(12..14);
        if ethertype == Some(&ETH_IPV4[..])
            && bytes.len() >= ETH_LEN
            && ipv4_ok_len(bytes, wire_len)
        {
            let destination: Option<[u8; 4]> = bytes.get(30..34).and_then(|ip| ip.try_into().ok());
            if self.lost_from_host(port, priority(bytes).unwrap_or(0)) {
                self.after(index, engine, wires); // injected loss on the host's link, counted by the model
                return;
            }
            match destination.and_then(|ip| self.routes.get(ip)) {
                None => self.dropped.no_route += 1,
                Some(egress) => {
                    let out = match egress {
                        Egress::One(port) => Some(port),
                        Egress::Among(choices) => ecmp_index(bytes, self.seed, choices.len())
                            .and_then(|i| choices.get(i).copied()),
                    };
                    let out = out.map_or(usize::MAX, |out| out as usize);
                    let prio = priority(bytes).unwrap_or(0);
                    match self.ports.get(out) {
                        None => self.dropped.no_route += 1,
                        Some(egress) => {
                            if route_in_place(frame.bytes_mut(), &egress.mac, &egress.peer_mac)
                                .is_err()
                            {
                                self.dropped.ttl += 1;
                            } else if self
                                .mmu
                                .enqueue(now, port, out, prio, frame)
                                .unwrap_or(false)
                            {
                                self.drain(index, engine, wires, out);
                            }
                        }
                    }
                }
            }
        } else if ethertype == Some(&ETH_IB[..]) && self.ib.is_some() {
            // Injected loss takes a data packet from a host's link before the IB plane counts it; the host's
            // next flow-control packet (its FCTBS) repairs the plane's count of blocks received (IBTA 7.9).
            if bytes.get(LRH_AT - 1) != Some(&SLP) && self.lost_from_host(port, 0) {
                return;
            }
            let out = self.ib.as_mut().and_then(|ib| ib.receive(now, port, bytes));
            if let Some(out) = out {
                self.drain(index, engine, wires, out);
            }
        } else if ethertype == Some(&ETHERTYPE_MAC_CONTROL.to_be_bytes()[..])
            && decode_pfc(bytes).is_some_and(|quanta| quanta.iter().any(Option::is_some))
        {
            if let Some(quanta) = decode_pfc(bytes) {
                let resumed = self.mmu.pfc_received(now, port, &quanta);
                if resumed.is_ok_and(|set| !set.is_empty()) {
                    self.drain(index, engine, wires, port);
                }
            }
        } else if ethertype == Some(&ETH_IPV4[..]) {
            self.dropped.malformed += 1;
        } else {
            self.dropped.unsupported += 1;
        }
        self.after(index, engine, wires);
    }

    /// Sends the PFC frames the MMU decided on (sending may decide more: an XON), and keeps its timer armed.
    fn after(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire]) {
        while self.mmu.pfc_pending() {
            let mut decided = std::mem::take(&mut self.decided);
            decided.extend(self.mmu.take_pfc());
            for request in decided.drain(..) {
                let Some(port) = self.ports.get(request.port) else {
                    continue;
                };
                let mut quanta = [None; PRIORITIES];
                if let Some(slot) = quanta.get_mut(request.priority) {
                    *slot = Some(request.quanta);
                }
                let frame = encode_pfc(&port.mac, &quanta);
                self.pfc_out[request.port].push_back(frame);
                self.drain(index, engine, wires, request.port);
            }
            self.decided = decided;
        }
        let mut deadline = self.mmu.next_deadline();
        if let Some(ib_deadline) = self.ib_deadline(index, engine, wires) {
            if deadline.is_none_or(|d| ib_deadline < d) {
                deadline = Some(ib_deadline);
            }
        }
        engine.set_timer(self.timer, deadline);
    }

    /// The IB plane's next deadline, its flow-control packets now due queued and their ports drained first.
    fn ib_deadline(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &mut [Wire],
    ) -> Option<u64> {
        let now = engine.now();
        let deadline = self.ib.as_mut()?.next_deadline()?;
        if deadline > now {
            return Some(deadline);
        }
        let mut ports = std::mem::take(&mut self.ib_ports);
        if let Some(ib) = self.ib.as_mut() {
            ib.take_fc(now, &mut ports);
        }
        for port in ports.drain(..) {
            self.drain(index, engine, wires, port);
        }
        self.ib_ports = ports;
        self.ib.as_mut()?.next_deadline()
    }

    /// The switch's timer: pauses expired, XOFFs to refresh.
    pub fn on_timer(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire]) {
        for port in self.mmu.on_timer(engine.now()) {
            self.drain(index, engine, wires, port);
        }
        self.after(index, engine, wires);
    }

    /// `port`'s wire is free again.
    pub fn wire_free(
        &mut self,
        index: u32,
        engine: &mut Engine<Event>,
        wires: &mut [Wire],
        port: usize,
    ) {
        self.drain(index, engine, wires, port);
        self.after(index, engine, wires); // what left may have brought an ingress below XON
    }

    /// Puts the next frame on the port's wire if it is free, else looks again when it is; a look is
    /// scheduled only while something waits.
    fn drain(&mut self, index: u32, engine: &mut Engine<Event>, wires: &mut [Wire], port: usize) {
        let Some(wire_id) = self.ports.get(port).map(|p| p.wire) else {
            return;
        };
        let Some(wire) = wires.get_mut(wire_id as usize) else {
            return;
        };
        let now = engine.now();
        let wake = Event::WireFree {
            switch: index,
            port: port as u32,
        };
        if wire.busy(now) {
            if !self.drain_at[port].is_some_and(|id| engine.pending(id)) {
                self.drain_at[port] = Some(engine.after(wire.free_at - now, wake));
            }
            return;
        }
        if let Some(held) = self.on_wire.get_mut(port).and_then(Option::take) {
            self.mmu.release(held); // its last bit has left
        }
        if let Some(frame) = self.pfc_out[port].pop_front() {
            wire.send(wire_id, engine, SimFrame::copied(&frame));
        } else if self.ib.as_mut().is_some_and(|ib| ib.head(port).is_some()) {
            // the head just found: it has credit, so sending it cannot fail
            if let Some(Ok(mut frame)) = self.ib.as_mut().map(|ib| ib.take_sent(port)) {
                // Injected loss on a host's link, towards the host: the packet crosses the wire corrupted (its
                // VCRC flipped) and the host drops it, as a bit error (its credits were spent all the same).
                // Links between switches lose nothing on the ib fabric yet: the IB plane checks no VCRC.
                let to_host = self
                    .links
                    .as_ref()
                    .and_then(|links| links.get(port))
                    .is_some_and(|link| link.host_facing());
                if to_host && self.lost_at_head(port, 0) {
                    if let Some(last) = frame.last_mut() {
                        *last ^= 0xFF;
                    }
                }
                wire.send(wire_id, engine, frame.into());
            }
        } else {
            let prio = loop {
                let Some((prio, _)) = self.mmu.head(port) else {
                    return;
                };
                if !self.lost_at_head(port, prio) {
                    break prio;
                }
                let _ = self.mmu.pop(port, prio); // injected loss: the frame never reaches the wire
            };
            match self.mmu.pop_held(port, prio) {
                Ok(Some((frame, held))) => {
                    wire.send(wire_id, engine, frame);
                    if let Some(slot) = self.on_wire.get_mut(port) {
                        *slot = Some(held);
                    }
                }
                _ => return,
            }
        }
        if !self.pfc_out[port].is_empty()
            || self.on_wire.get(port).is_some_and(Option::is_some)
            || self.mmu.backlog().get(port).is_some_and(|&n| n > 0)
            || self.ib.as_ref().is_some_and(|ib| port_waiting(ib, port))
        {
            let delay = wire.free_at.saturating_sub(engine.now());
            self.drain_at[port] = Some(engine.after(delay, wake));
        }
    }
}
