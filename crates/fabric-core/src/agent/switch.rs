//! A switch of the emulator: the per-frame path that `emulator/agents/switch.py` ran in Python, compiled.
//!
//! Egress pacing is the kernel's: each port's HTB shapes at the link rate and the port's data socket has a
//! send buffer of about two frames, so the kernel queue holds one to three frames and the backlog stays in
//! the MMU, where PFC, ECN and the scheduler see it. When a send finds the kernel queue full, the port asks
//! ([`Wires::want_writable`]) to be woken when its socket turns writable, and the MMU's choice waits. PFC
//! frames and ARP replies leave through a second socket per port in the highest tc class, so they overtake
//! the data backlog.
//!
//! Link delay and injected loss are modelled here (`model::link`), as the veths have neither: a frame
//! arriving on a port whose link has delay is processed that much later; a host-facing port with delay
//! runs a virtual wire at its rate and hands a frame to the kernel the delay after it started on it.
//!
//! The fidelity monitor's figures are kept as the frames go: each port's virtual wire (did it idle while
//! frames waited?), the processing lag the driver samples, and how late each link timer fired.
use std::collections::VecDeque;
use std::fmt::Write as _;

use crate::model::fidelity::{Durations, EgressWire};
use crate::model::forwarding;
use crate::model::forwarding::{
    arp_reply, ecmp_index, ipv4_ok, priority, route_in_place, ETH_ARP, ETH_CONTROL, ETH_IPV4,
};
use crate::model::ib_plane::IbPlane;
use crate::model::link::{wire_ns, Link, LinkError, SameFrame};
use crate::model::mmu::{Held, Mmu, MmuConfig, MmuError, MmuFrame, PfcRequest};
use crate::model::rng::CpythonRandom;
use crate::model::routes::{Egress, Routes};
use crate::wire::ib::ETH_IB;
use crate::wire::mac::{Mac, ETH_LEN};
use crate::wire::pfc::{decode_pfc, encode_pfc, ETHERTYPE_MAC_CONTROL, MIN_FRAME, PRIORITIES};
use crate::wire::uet;

/// Occupancy sampling period: a sample is due this long after the last change.
pub const SAMPLE_NS: u64 = 1_000_000;
/// The processing lag costs an ioctl and a clock read, so a port samples it at most this often.
pub const LAG_PERIOD_NS: u64 = 5_000_000;
/// The occupancy file's header row.
pub const OCCUPANCY_HEADER: &str =
    "time_ns,switch,port,priority,ingress_bytes,egress_bytes,egress_paused,xoff\n";
/// Ethernet header, opcode, class-enable vector and eight quanta.
const PFC_FRAME_MIN: usize = 34;
/// Ethernet header and an IPv4-over-Ethernet ARP packet.
const ARP_FRAME_MIN: usize = 42;
/// Frame buffers kept for reuse: a burst's worth, so that a forwarded frame costs no allocation.
const SPARE_MAX: usize = 1024;

/// What a socket did with a frame handed to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The kernel took it.
    Taken,
    /// The kernel queue is full: try again when the socket turns writable.
    Full,
    /// Refused for good (a link down, no buffer): the frame is lost and counted.
    Refused,
}

/// The sockets of a switch's ports, as the switch sees them.
pub trait Wires {
    /// Hands `frame` to port `port`'s data socket.
    fn send(&mut self, port: usize, frame: &[u8]) -> Sent;
    /// Hands `frame` to the port's control socket (the highest tc class: PFC frames, ARP replies).
    fn send_control(&mut self, port: usize, frame: &[u8]) -> Sent;
    /// Whether the port wants to hear when its data socket turns writable (frames wait for its kernel queue).
    fn want_writable(&mut self, port: usize, on: bool);
}

/// A frame the switch holds: its bytes, and a number of its own that tells it from an equal frame (the
/// loss draw at the head of a queue happens once per frame).
#[derive(Debug)]
pub struct Frame {
    id: u64,
    bytes: Vec<u8>,
}

impl Frame {
    /// A stand-in with frame `id`'s number and no bytes, for the loss draw's "is it that same frame".
    fn handle(id: u64) -> Frame {
        Frame {
            id,
            bytes: Vec::new(),
        }
    }
}

impl MmuFrame for Frame {
    fn size(&self) -> usize {
        self.bytes.len()
    }

    fn is_ect(&self) -> bool {
        forwarding::is_ect(&self.bytes).unwrap_or(false)
    }

    fn mark_ce(&mut self) {
        forwarding::mark_ce_in_place(&mut self.bytes);
    }

    fn trim(&mut self) -> bool {
        uet::trim_in_place(&mut self.bytes)
    }
}

impl SameFrame for Frame {
    fn same_frame(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

/// Frames that arrived on a port and went nowhere, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxDrops {
    /// Too short for its EtherType, or an IPv4 header that fails `ipv4_ok`.
    pub malformed: u64,
    /// Unicast to another MAC.
    pub not_for_us: u64,
    /// An EtherType, MAC control opcode or ARP this switch does not answer.
    pub unsupported: u64,
    /// IPv4 to an address that is no host of the fabric.
    pub no_route: u64,
    /// The TTL ran out.
    pub ttl: u64,
    /// Too long for the egress link (IPv4 is never fragmented here).
    pub mtu: u64,
}

impl RxDrops {
    /// Each cause's name and count, in the order the stats give them.
    pub fn named(&self) -> [(&'static str, u64); 6] {
        [
            ("malformed", self.malformed),
            ("not_for_us", self.not_for_us),
            ("unsupported", self.unsupported),
            ("no_route", self.no_route),
            ("ttl", self.ttl),
            ("mtu", self.mtu),
        ]
    }

    /// Those that are losses: not_for_us and unsupported are what a router ignores.
    pub fn lost(&self) -> u64 {
        self.malformed + self.no_route + self.ttl + self.mtu
    }
}

/// What one port counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub rx_frames: [u64; PRIORITIES],
    pub rx_bytes: [u64; PRIORITIES],
    pub pfc_received: [u64; PRIORITIES],
    pub drops: RxDrops,
    /// Frames the kernel refused to send (a link down refuses all).
    pub tx_errors: u64,
    /// Receive errors: the link went down.
    pub link_errors: u64,
    pub control_frames: u64,
    pub arp_replies: u64,
}

/// One port as configured: its MACs and the link cabled to it.
#[derive(Clone, Debug, PartialEq)]
pub struct PortSetup {
    pub mac: Mac,
    pub peer_mac: Mac,
    pub rate_bps: u64,
    pub mtu: usize,
    pub delay_ns: u64,
    pub host_facing: bool,
    /// The probability of losing each frame, each direction.
    pub loss: f64,
    /// Frame numbers (from 1, each direction) always lost.
    pub drop: Vec<u64>,
    /// The seed of the link's loss draws (`random.Random`'s integer seed as 32-bit words).
    pub seed: Vec<u32>,
}

/// Why a switch cannot be built.
#[derive(Clone, Debug, PartialEq)]
pub enum SwitchError {
    Link { port: usize, error: LinkError },
    Mmu(MmuError),
}

impl std::fmt::Display for SwitchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SwitchError::Link { port, error } => write!(f, "port {port}: {error}"),
            SwitchError::Mmu(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for SwitchError {}

/// What an occupancy row says of one (port, priority); a row is written when it changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sample {
    ingress: i64,
    egress: i64,
    paused: bool,
    xoff: bool,
}

struct Port {
    mac: Mac,
    peer_mac: Mac,
    rate_bps: u64,
    /// A longer frame cannot go out on this link.
    max_frame: usize,
    /// One full frame's time at the port's rate: the fidelity monitor's unit.
    frame_ns: u64,
    link: Link<Frame>,
    /// The port asked to hear when its data socket turns writable.
    writable_armed: bool,
    /// The virtual wire at the port's rate, fed with each frame the kernel takes: while the port's queue
    /// held frames it should never idle; if it did, the agent was late.
    wire: EgressWire,
    /// When the frames handed to the kernel so far have left, at the port's rate (`wire_took`).
    wire_end: u64,
    wire_bytes: u64,
    /// Frames the port had sent when the monitor was last reset.
    wire_frames_before: u64,
    /// The port's queue held frames the kernel had no room for.
    waiting: bool,
    /// Frames the kernel took from the MMU that the virtual wire has not sent yet: still in the switch's
    /// buffer until their last bit has left (`Mmu::release`), in order, as in the simulated switch. The kernel
    /// takes a frame or two ahead of the wire, and freeing them there sent XONs early.
    in_kernel: VecDeque<(u64, Held)>,
    /// Kernel receive time stamp to the agent's read, first frame of a batch.
    lag: Durations,
    lag_due: u64,
    counters: PortCounters,
}

/// One switch of the emulator.
pub struct Switch {
    name: String,
    ifnames: Vec<String>,
    ports: Vec<Port>,
    routes: Routes,
    seed: u32,
    mmu: Mmu<Frame>,
    ib: Option<IbPlane>,
    monitor: bool,
    paced: Vec<usize>,
    /// When an occupancy sample is due (0: none; the next change starts one).
    next_sample: u64,
    last_sample: Vec<[Sample; PRIORITIES]>,
    occupancy: String,
    /// Whether the timer armed is a link's (judged late against a frame time) or the lazy sample's.
    link_timer: bool,
    timer_lateness: Durations,
    next_id: u64,
    spare: Vec<Vec<u8>>,
    ib_ports: Vec<usize>,
    pfc: Vec<PfcRequest>,
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl Switch {
    /// Switch `name` with `ports` (each with its interface name), routes (IPv4 destination -> port indexes,
    /// ECMP among several, hashed with `seed`), an MMU of `mmu` whose ECN draws come from `random`, and the
    /// IB plane on an IB fabric. `monitor`: keep the fidelity monitor's figures.
    #[allow(clippy::too_many_arguments)] // one switch's whole configuration, each part its own type
    pub fn new(
        name: String,
        ports: Vec<(String, PortSetup)>,
        routes: Vec<([u8; 4], Vec<u32>)>,
        mmu: MmuConfig,
        random: CpythonRandom,
        ib: Option<IbPlane>,
        seed: u32,
        monitor: bool,
    ) -> Result<Switch, SwitchError> {
        let rates = ports.iter().map(|(_, p)| p.rate_bps).collect();
        let mmu = Mmu::new(mmu, rates, random).map_err(SwitchError::Mmu)?;
        let mut ifnames = Vec::with_capacity(ports.len());
        let mut built = Vec::with_capacity(ports.len());
        for (index, (ifname, setup)) in ports.into_iter().enumerate() {
            let link = Link::new(
                setup.rate_bps,
                setup.delay_ns,
                setup.host_facing,
                setup.loss,
                &setup.drop,
                &setup.seed,
            )
            .map_err(|error| SwitchError::Link { port: index, error })?;
            let max_frame = ETH_LEN.saturating_add(setup.mtu);
            built.push(Port {
                mac: setup.mac,
                peer_mac: setup.peer_mac,
                rate_bps: setup.rate_bps,
                max_frame,
                frame_ns: wire_ns(max_frame, setup.rate_bps),
                link,
                writable_armed: false,
                wire: EgressWire::new(),
                wire_end: 0,
                in_kernel: VecDeque::new(),
                wire_bytes: 0,
                wire_frames_before: 0,
                waiting: false,
                lag: Durations::new(),
                lag_due: 0,
                counters: PortCounters::default(),
            });
            ifnames.push(ifname);
        }
        let paced = (0..built.len())
            .filter(|&i| built[i].link.paced())
            .collect();
        Ok(Switch {
            name,
            ifnames,
            last_sample: vec![[Sample::default(); PRIORITIES]; built.len()],
            ports: built,
            routes: Routes::new(routes),
            seed,
            mmu,
            ib,
            monitor,
            paced,
            next_sample: 0,
            occupancy: String::new(),
            link_timer: true,
            timer_lateness: Durations::new(),
            next_id: 0,
            spare: Vec::new(),
            ib_ports: Vec::new(),
            pfc: Vec::new(),
        })
    }

    // --- what the driver calls -----------------------------------------------------------------------------

    /// A frame came in on `port` at `arrival` (the kernel's receive time): processed once its last bit would
    /// have arrived (its time on the wire at the port's rate after the kernel handed it over, and the link's
    /// delay), at a deadline, however late the switch read it. A port's frames keep their order; across
    /// ports a frame read late may come after one that arrived later and was processed already (by the
    /// loop's read latency, tens of us): holding it back to keep the order held its XOFF back as long
    /// (PFC generation's p99 80 to 116 us against 57 and 59 without, docs/performance.md).
    ///
    /// A veth hands a frame over when the sender's qdisc lets it go, a frame's time before a wire would have
    /// delivered it whole. Processed at once, a frame that crossed a PFC threshold paused its sender before
    /// the sender's next frame had started, where on a wire that frame is already on its way and lands in
    /// the headroom; every pause cycle of an incast then took one frame less, and the emulator sent 1.6
    /// times the simulator's PFC frames (docs/performance.md). A switch stores a frame whole before it
    /// forwards it, as the simulated one does.
    pub fn receive(&mut self, arrival: u64, port: usize, bytes: &[u8]) {
        let frame = self.frame_of(bytes);
        match self.ports.get_mut(port) {
            Some(p) => p.link.arrive_whole(arrival, bytes.len(), frame),
            None => self.recycle(frame),
        }
    }

    /// When the first frame received and not yet processed is due (its last bit's time), if any.
    pub fn next_arrival(&self) -> Option<u64> {
        self.ports
            .iter()
            .filter_map(|p| p.link.arrivals().front().map(|&(due, _)| due))
            .min()
    }

    /// When the first frame received and not yet processed is due, if it would pause its sender once
    /// processed: the driver does not sleep through its last bit, so that the XOFF leaves at that bit.
    pub fn pausing_arrival(&self) -> Option<u64> {
        let (due, index, frame) = self
            .ports
            .iter()
            .enumerate()
            .filter_map(|(index, p)| {
                p.link
                    .arrivals()
                    .front()
                    .map(|(due, frame)| (*due, index, frame))
            })
            .min_by_key(|&(due, index, _)| (due, index))?;
        let priority = priority(&frame.bytes).unwrap_or(0).min(PRIORITIES - 1);
        self.mmu
            .would_pause(index, priority, frame.bytes.len())
            .then_some(due)
    }

    /// The port whose first frame received and not yet processed is due first, if one is due by `now`.
    fn first_arrival(&self, now: u64) -> Option<usize> {
        self.ports
            .iter()
            .enumerate()
            .filter_map(|(index, p)| p.link.arrivals().front().map(|&(due, _)| (due, index)))
            .filter(|&(due, _)| due <= now)
            .min()
            .map(|(_, index)| index)
    }

    /// Port `port`'s data socket turned writable.
    pub fn writable(&mut self, now: u64, port: usize, wires: &mut impl Wires) {
        self.drain(now, port, wires);
        self.send_pfc_decided(wires); // what left may have brought an ingress below XON
    }

    /// A receive on `port` failed: its link went down.
    pub fn link_error(&mut self, port: usize) {
        if let Some(p) = self.ports.get_mut(port) {
            p.counters.link_errors += 1;
        }
    }

    /// `count` frames came in on `port` longer than any link of the switch carries: cut by the receive, never
    /// forwarded (counted as too long for the egress link).
    pub fn too_long(&mut self, port: usize, count: u64) {
        if let Some(p) = self.ports.get_mut(port) {
            p.counters.drops.mtu += count;
        }
    }

    /// Whether the driver should sample `port`'s processing lag on this wake-up (and then not again for
    /// [`LAG_PERIOD_NS`]): at most 200 samples a second per port when frames come fast, every wake-up on a
    /// slow link.
    pub fn lag_due(&mut self, port: usize, now: u64) -> bool {
        match self.ports.get_mut(port) {
            Some(p) if self.monitor && now >= p.lag_due => {
                p.lag_due = now.saturating_add(LAG_PERIOD_NS);
                true
            }
            _ => false,
        }
    }

    /// The kernel received the first frame of a batch on `port` `lag_ns` before the switch read it.
    pub fn add_lag(&mut self, port: usize, lag_ns: u64) {
        if let Some(p) = self.ports.get_mut(port) {
            p.lag.add(lag_ns);
        }
    }

    /// The switch's deadline came (at `deadline`, now `now`): pauses expired, XOFFs to refresh, delayed
    /// frames due, paced departures.
    pub fn deadline(&mut self, deadline: u64, now: u64, wires: &mut impl Wires) {
        if self.link_timer {
            self.timer_lateness.add(now.saturating_sub(deadline));
        }
        for port in self.mmu.on_timer(now) {
            self.drain(now, port, wires);
        }
        // The arrivals in the order of their last bits, each after the buffers the wire freed by then, as the
        // simulated switch meets them.
        while let Some(index) = self.first_arrival(now) {
            let Some((due, frame)) = self.ports.get_mut(index).and_then(|p| p.link.arrived(now))
            else {
                break;
            };
            self.release_sent(due);
            self.process(due, index, frame, wires);
        }
        self.release_sent(now);
        for at in 0..self.paced.len() {
            let index = self.paced[at];
            self.drain(now, index, wires);
        }
        self.send_pfc_decided(wires);
    }

    /// After a batch of events: the PFC frames the MMU decided on sent (each entry point sends them at once;
    /// what a control request decided too), an occupancy sample taken if one is due, the IB flow-control
    /// packets due sent; the next deadline (never before `now`).
    pub fn after_events(&mut self, now: u64, wires: &mut impl Wires) -> Option<u64> {
        self.release_sent(now);
        self.send_pfc_decided(wires);
        if self.next_sample != 0 && now >= self.next_sample {
            self.sample(now);
        }
        let mut deadline = self.mmu.next_deadline();
        if self.ib.is_some() {
            let mut ports = std::mem::take(&mut self.ib_ports);
            if let Some(ib) = self.ib.as_mut() {
                ib.take_fc(now, &mut ports); // sent on the data socket, behind the data they count
            }
            for port in ports.drain(..) {
                self.drain(now, port, wires);
            }
            self.ib_ports = ports;
            deadline = earliest(deadline, self.ib.as_mut().and_then(IbPlane::next_deadline));
        }
        // A frame the wire has not sent yet frees its buffer lazily, at the next wake-up; on time only while an
        // ingress waits for that to resume its sender (an XON).
        if self.mmu.ingress().iter().any(|i| i.xoff.iter().any(|&x| x)) {
            let leaves = self
                .ports
                .iter()
                .filter_map(|p| p.in_kernel.front().map(|&(at, _)| at));
            deadline = earliest(deadline, leaves.min());
        }
        let backlog = self.mmu.backlog();
        for (port, &queued) in self.ports.iter().zip(backlog) {
            let link = &port.link;
            if !link.arrivals().is_empty() || !link.departures().is_empty() || queued > 0 {
                deadline = earliest(deadline, link.next_deadline(queued > 0));
            }
        }
        // Occupancy is sampled on the wake-ups frames bring anyway; its own timer fires only when the switch
        // would sleep a whole period past a due sample, and is no link timer.
        let lazy = (self.next_sample != 0).then(|| self.next_sample.saturating_add(SAMPLE_NS));
        match lazy {
            Some(lazy) if deadline.is_none_or(|d| lazy < d) => {
                deadline = Some(lazy);
                self.link_timer = false;
            }
            _ => self.link_timer = true,
        }
        // A deadline already past (a grant that grew urgent meanwhile) is armed for now: it fires at once, and
        // its lateness counts from when the work became known.
        deadline.map(|d| d.max(now))
    }

    /// Sends the PFC frames the MMU decided on, at once: an XOFF leaves as soon as the frame that crossed the
    /// threshold is in, not after the rest of the wake-up's frames (the generation time the headroom covers).
    fn send_pfc_decided(&mut self, wires: &mut impl Wires) {
        if !self.mmu.pfc_pending() {
            return;
        }
        let mut pfc = std::mem::take(&mut self.pfc);
        pfc.extend(self.mmu.take_pfc());
        for request in pfc.drain(..) {
            if let Some(port) = self.ports.get_mut(request.port) {
                let mut quanta = [None; PRIORITIES];
                if let Some(slot) = quanta.get_mut(request.priority) {
                    *slot = Some(request.quanta);
                }
                if wires.send_control(request.port, &encode_pfc(&port.mac, &quanta)) != Sent::Taken
                {
                    port.counters.tx_errors += 1; // the link is down: the frame is lost with it
                }
            }
        }
        self.pfc = pfc;
    }

    /// Sends one PFC frame of `quanta` for `priority` out of `port` (the `pfc` control request): the frame,
    /// or what the socket did instead of taking it (`None` for a port or priority the switch lacks).
    pub fn send_pfc(
        &mut self,
        port: usize,
        priority: usize,
        quanta: u16,
        wires: &mut impl Wires,
    ) -> Option<Result<[u8; MIN_FRAME], Sent>> {
        let mac = self.ports.get(port)?.mac;
        let mut all = [None; PRIORITIES];
        *all.get_mut(priority)? = Some(quanta);
        let frame = encode_pfc(&mac, &all);
        Some(match wires.send_control(port, &frame) {
            Sent::Taken => Ok(frame),
            other => Err(other),
        })
    }

    /// Forward by `routes` from now on (a link went down or up).
    pub fn set_routes(&mut self, routes: Vec<([u8; 4], Vec<u32>)>) {
        self.routes = Routes::new(routes);
    }

    /// The subnet manager swept again (a link went down or up): the IB plane forwards by `lft` and `ar` from
    /// now on, and what it queued for the ports in `down` is lost with their link; the packets lost. Refused
    /// whole (nothing changed) if a table names a port the switch lacks, or the switch has no IB plane.
    pub fn set_ib_tables(
        &mut self,
        lft: &[(u16, usize)],
        ar: &[(u16, Vec<usize>)],
        down: &[usize],
    ) -> Result<u64, String> {
        let ib = self.ib.as_mut().ok_or("this switch has no IB plane")?;
        ib.set_tables(lft, ar).map_err(|error| error.to_string())?;
        Ok(down.iter().map(|&port| ib.flush(port)).sum())
    }

    /// A last occupancy sample (the switch stops) and every row not yet taken.
    pub fn final_sample(&mut self, now: u64) {
        self.sample(now);
    }

    /// The occupancy rows written since the last call (the driver appends them to the file).
    pub fn take_occupancy(&mut self) -> String {
        std::mem::take(&mut self.occupancy)
    }

    /// Bytes of occupancy rows waiting to be taken.
    pub fn occupancy_len(&self) -> usize {
        self.occupancy.len()
    }

    /// Start the fidelity monitor's figures afresh (a study's measured iterations begin).
    pub fn reset_fidelity(&mut self) {
        for index in 0..self.ports.len() {
            let sent = self.frames_sent(index);
            if let Some(port) = self.ports.get_mut(index) {
                port.wire = EgressWire::new();
                port.lag = Durations::new();
                port.wire_bytes = 0;
                port.wire_frames_before = sent;
            }
        }
        self.timer_lateness = Durations::new();
    }

    // --- what the stats read -------------------------------------------------------------------------------

    pub fn ifnames(&self) -> &[String] {
        &self.ifnames
    }

    pub fn mmu(&self) -> &Mmu<Frame> {
        &self.mmu
    }

    pub fn ib(&self) -> Option<&IbPlane> {
        self.ib.as_ref()
    }

    /// How late the link timers fired.
    pub fn timer_lateness(&self) -> &Durations {
        &self.timer_lateness
    }

    pub fn counters(&self, port: usize) -> Option<&PortCounters> {
        self.ports.get(port).map(|p| &p.counters)
    }

    /// Frames injected loss took on `port`'s link, per priority.
    pub fn injected_drops(&self, port: usize) -> Option<&[u64; PRIORITIES]> {
        self.ports.get(port).map(|p| p.link.injected_drops())
    }

    pub fn lag(&self, port: usize) -> Option<&Durations> {
        self.ports.get(port).map(|p| &p.lag)
    }

    /// One full frame's time at `port`'s rate.
    pub fn frame_ns(&self, port: usize) -> Option<u64> {
        self.ports.get(port).map(|p| p.frame_ns)
    }

    /// `port`'s wire figures since the last reset, its busy time and frames filled in from what it sent.
    pub fn wire(&self, port: usize) -> Option<EgressWire> {
        let p = self.ports.get(port)?;
        let mut wire = p.wire;
        let bits_ns = u128::from(p.wire_bytes).saturating_mul(8_000_000_000);
        wire.busy_ns = u64::try_from(bits_ns / u128::from(p.rate_bps.max(1))).unwrap_or(u64::MAX);
        wire.frames = self.frames_sent(port).saturating_sub(p.wire_frames_before);
        Some(wire)
    }

    /// Frames `port` sent: the MMU's and the IB plane's.
    pub fn frames_sent(&self, port: usize) -> u64 {
        let mmu: u64 = self
            .mmu
            .counters()
            .get(port)
            .map_or(0, |c| c.iter().map(|c| c.tx_frames).sum());
        mmu + self
            .ib
            .as_ref()
            .and_then(|ib| ib.forwarded(port))
            .unwrap_or(0)
    }

    // --- ingress -------------------------------------------------------------------------------------------

    /// `bytes` in a frame buffer of the switch's own (a spare one when there is).
    fn frame_of(&mut self, bytes: &[u8]) -> Frame {
        let mut buffer = self.spare.pop().unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(bytes);
        self.next_id += 1;
        Frame {
            id: self.next_id,
            bytes: buffer,
        }
    }

    /// A frame's buffer is free again.
    fn recycle(&mut self, frame: Frame) {
        if self.spare.len() < SPARE_MAX {
            self.spare.push(frame.bytes);
        }
    }

    /// One frame from the wire: forward, react, answer, or drop it under a named counter.
    fn process(&mut self, now: u64, index: usize, frame: Frame, wires: &mut impl Wires) {
        let Some(port) = self.ports.get_mut(index) else {
            return self.recycle(frame);
        };
        let bytes = &frame.bytes;
        let counters = &mut port.counters;
        let (Some(destination), Some(ethertype)) = (bytes.get(0..6), bytes.get(12..14)) else {
            counters.drops.malformed += 1;
            return self.recycle(frame);
        };
        if destination != port.mac && destination[0] & 1 == 0 {
            counters.drops.not_for_us += 1;
        } else if ethertype == ETH_IPV4 {
            return self.forward(now, index, frame, wires);
        } else if ethertype == ETHERTYPE_MAC_CONTROL.to_be_bytes() {
            let quanta = decode_pfc(bytes).filter(|q| q.iter().any(Option::is_some));
            match quanta {
                _ if bytes.len() < PFC_FRAME_MIN => counters.drops.malformed += 1,
                // another MAC control opcode (802.3x PAUSE), or PFC that enables no class
                None => counters.drops.unsupported += 1,
                Some(quanta) => {
                    for (priority, value) in quanta.iter().enumerate() {
                        if value.is_some() {
                            counters.pfc_received[priority] += 1;
                        }
                    }
                    self.activity(now);
                    let resumed = self.mmu.pfc_received(now, index, &quanta);
                    if resumed.is_ok_and(|set| !set.is_empty()) {
                        self.drain(now, index, wires);
                    }
                }
            }
        } else if ethertype == ETH_ARP {
            if bytes.len() < ARP_FRAME_MIN {
                counters.drops.malformed += 1;
            } else {
                match arp_reply(bytes, &port.mac) {
                    // a reply, or a request for an address outside the fabric
                    None => counters.drops.unsupported += 1,
                    Some(reply) => match wires.send_control(index, &reply) {
                        Sent::Taken => counters.arp_replies += 1,
                        _ => counters.tx_errors += 1,
                    },
                }
            }
        } else if ethertype == ETH_IB && self.ib.is_some() {
            let out = self
                .ib
                .as_mut()
                .and_then(|ib| ib.receive(now, index, bytes));
            if let Some(out) = out {
                self.drain(now, out, wires);
            }
        } else if ethertype == ETH_CONTROL {
            counters.control_frames += 1;
        } else {
            counters.drops.unsupported += 1;
        }
        self.recycle(frame);
    }

    /// An IPv4 frame: routed to its egress port's queue, or dropped under a named counter.
    fn forward(&mut self, now: u64, index: usize, mut frame: Frame, wires: &mut impl Wires) {
        let Some(port) = self.ports.get_mut(index) else {
            return self.recycle(frame);
        };
        if !ipv4_ok(&frame.bytes) {
            port.counters.drops.malformed += 1;
            return self.recycle(frame);
        }
        let prio = priority(&frame.bytes).unwrap_or(0).min(PRIORITIES - 1);
        port.counters.rx_frames[prio] += 1;
        port.counters.rx_bytes[prio] += frame.bytes.len() as u64;
        let link = &mut port.link;
        if link.host_facing() && link.lossy() && link.lost_from_host(prio) {
            return self.recycle(frame); // injected loss on the host's link, counted by the model
        }
        let destination: Option<[u8; 4]> =
            frame.bytes.get(30..34).and_then(|ip| ip.try_into().ok());
        let out = match destination.and_then(|ip| self.routes.get(ip)) {
            Some(Egress::One(out)) => Some(out as usize),
            Some(Egress::Among(choices)) => ecmp_index(&frame.bytes, self.seed, choices.len())
                .and_then(|i| choices.get(i))
                .map(|&out| out as usize),
            None => None,
        };
        let Some((out, egress)) = out.and_then(|out| Some((out, self.ports.get(out)?))) else {
            if let Some(port) = self.ports.get_mut(index) {
                port.counters.drops.no_route += 1;
            }
            return self.recycle(frame);
        };
        let (mac, peer_mac, max_frame) = (egress.mac, egress.peer_mac, egress.max_frame);
        let routed = route_in_place(&mut frame.bytes, &mac, &peer_mac).is_ok();
        if !routed || frame.bytes.len() > max_frame {
            if let Some(port) = self.ports.get_mut(index) {
                let drops = &mut port.counters.drops;
                if routed {
                    drops.mtu += 1;
                } else {
                    drops.ttl += 1;
                }
            }
            return self.recycle(frame);
        }
        if self
            .mmu
            .enqueue(now, index, out, prio, frame)
            .unwrap_or(false)
        {
            self.activity(now);
            let drain = self
                .ports
                .get(out)
                .is_some_and(|p| !p.writable_armed || p.link.paced());
            if drain {
                // armed: the kernel queue is full, and the socket turning writable drains it
                self.drain(now, out, wires);
            }
        }
    }

    // --- egress --------------------------------------------------------------------------------------------

    /// Moves frames from the MMU towards the wire as far as the wire allows.
    fn drain(&mut self, now: u64, index: usize, wires: &mut impl Wires) {
        let Some(paced) = self.ports.get(index).map(|p| p.link.paced()) else {
            return;
        };
        let backlog = if paced {
            let kernel_full = self.ib.is_some() && !self.drain_ib(now, index, wires); // IB: no modelled delay
            self.drain_paced(now, index, wires);
            kernel_full
                || self
                    .ports
                    .get(index)
                    .is_some_and(|p| !p.link.departures().is_empty())
        } else {
            let room = self.drain_ib(now, index, wires);
            if room {
                self.drain_mmu(now, index, wires);
            }
            // IB packets waiting for credit wake the port when credit comes, not when the socket turns writable.
            // The MMU is asked first and always: asking moves its DWRR turn, and the order of frames with it.
            let backlog = self.mmu.head(index).is_some() || !room;
            if let Some(port) = self.ports.get_mut(index) {
                port.waiting = backlog;
            }
            backlog
        };
        if let Some(port) = self.ports.get_mut(index) {
            if backlog != port.writable_armed {
                wires.want_writable(index, backlog);
                port.writable_armed = backlog;
            }
        }
    }

    /// Frees the buffer of every frame the modelled wire has sent by `now` (an XON may follow, sent by the
    /// caller's `send_pfc_decided`).
    fn release_sent(&mut self, now: u64) {
        for port in &mut self.ports {
            while let Some(&(at, held)) = port.in_kernel.front() {
                if at > now {
                    break;
                }
                port.in_kernel.pop_front();
                self.mmu.release(held);
            }
        }
    }

    /// Hands the MMU's choices for `index` to the kernel until it is full or they run out. A frame the kernel
    /// took holds its buffer until the virtual wire has sent it (`release_sent`).
    fn drain_mmu(&mut self, now: u64, index: usize, wires: &mut impl Wires) {
        loop {
            let Some(port) = self.ports.get_mut(index) else {
                return;
            };
            let Some((prio, head)) = self.mmu.head(index) else {
                return;
            };
            let lossy = port.link.lossy();
            if lossy && port.link.lost_at_head(Frame::handle(head.id), prio) {
                if let Ok(Some(frame)) = self.mmu.pop(index, prio) {
                    self.recycle(frame);
                }
                continue;
            }
            let size = head.bytes.len();
            match wires.send(index, &head.bytes) {
                Sent::Full => return,
                Sent::Taken => {
                    let leaves = self.wire_took(now, index, size);
                    if let Ok(Some((frame, held))) = self.mmu.pop_held(index, prio) {
                        if let Some(port) = self.ports.get_mut(index) {
                            port.in_kernel.push_back((leaves, held));
                        }
                        self.recycle(frame);
                    }
                    continue;
                }
                Sent::Refused => port.counters.tx_errors += 1, // lost for good (e.g. ENOBUFS); the port goes on
            }
            if let Ok(Some(frame)) = self.mmu.pop(index, prio) {
                self.recycle(frame);
            }
        }
    }

    /// The kernel took a frame of `size` bytes from port `index` at `now`: the virtual wire carries it after
    /// the frames before it, from when it is free; when its last bit leaves. Only the first of a wake-up can
    /// find the wire idle; had the port been waiting, that idle time was a stall the modelled link would not
    /// have had (the monitor's).
    fn wire_took(&mut self, now: u64, index: usize, size: usize) -> u64 {
        let monitor = self.monitor;
        let Some(port) = self.ports.get_mut(index) else {
            return now;
        };
        if now > port.wire_end {
            if port.waiting && monitor {
                port.wire.stalled(now - port.wire_end);
            }
            port.wire_end = now;
        }
        port.wire_end = port.wire_end.saturating_add(wire_ns(size, port.rate_bps));
        port.wire_bytes = port.wire_bytes.saturating_add(size as u64);
        port.wire_end
    }

    /// Sends what the IB plane lets go: whether the kernel queue has room left.
    fn drain_ib(&mut self, now: u64, index: usize, wires: &mut impl Wires) -> bool {
        while let Some((_, frame)) = self.ib.as_mut().and_then(|ib| ib.head(index)) {
            let size = frame.len();
            match wires.send(index, frame) {
                Sent::Full => return false,
                Sent::Refused => {
                    if let Some(ib) = self.ib.as_mut() {
                        let _ = ib.refused(index);
                    }
                }
                Sent::Taken => {
                    if let Some(ib) = self.ib.as_mut() {
                        let _ = ib.sent(index);
                    }
                    self.wire_took(now, index, size);
                }
            }
        }
        true
    }

    /// A host-facing port with delay: the link model's virtual wire and delay line say what goes now.
    fn drain_paced(&mut self, now: u64, index: usize, wires: &mut impl Wires) {
        let Some(port) = self.ports.get_mut(index) else {
            return;
        };
        let mut due = port
            .link
            .transmit(now, &mut self.mmu, index)
            .unwrap_or(None);
        while let Some(frame) = due {
            match wires.send(index, &frame.bytes) {
                Sent::Full => break,
                Sent::Refused => port.counters.tx_errors += 1,
                Sent::Taken => {}
            }
            due = port.link.left(now);
        }
    }

    // --- telemetry -----------------------------------------------------------------------------------------

    /// Writes the (port, priority) occupancies that changed since the last sample.
    ///
    /// A sample is due [`SAMPLE_NS`] after the last while something changes, and is taken on the first wake-up
    /// after that (rows carry the time taken); sampling stops when a sample finds nothing new, and the next
    /// admitted frame or PFC frame restarts it: an idle switch must not wake 1000 times a second.
    fn sample(&mut self, now: u64) {
        let mut wrote = false;
        for (index, last) in self.last_sample.iter_mut().enumerate() {
            let (Some(pause), Some(ingress)) =
                (self.mmu.pause().get(index), self.mmu.ingress().get(index))
            else {
                continue;
            };
            for (prio, last) in last.iter_mut().enumerate() {
                let value = Sample {
                    ingress: self.mmu.ingress_bytes(index, prio),
                    egress: self.mmu.egress_bytes(index, prio),
                    paused: pause.is_paused(prio),
                    xoff: ingress.xoff[prio],
                };
                if *last != value {
                    *last = value;
                    wrote = true;
                    let _ = writeln!(
                        self.occupancy,
                        "{now},{},{},{prio},{},{},{},{}",
                        self.name,
                        self.ifnames.get(index).map_or("", String::as_str),
                        value.ingress,
                        value.egress,
                        u8::from(value.paused),
                        u8::from(value.xoff)
                    );
                }
            }
        }
        self.next_sample = if wrote {
            now.saturating_add(SAMPLE_NS)
        } else {
            0
        };
    }

    fn activity(&mut self, now: u64) {
        if self.next_sample == 0 {
            self.next_sample = now.saturating_add(SAMPLE_NS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBIT100: u64 = 100_000_000;
    const LOSSLESS: usize = 3;
    const US: u64 = 1_000;

    /// Wires in memory: frames taken per port, and a port that is full or refuses.
    #[derive(Default)]
    struct Memory {
        sent: Vec<Vec<Vec<u8>>>,
        control: Vec<Vec<Vec<u8>>>,
        full: Vec<bool>,
        writable: Vec<bool>,
    }

    impl Memory {
        fn new(ports: usize) -> Memory {
            Memory {
                sent: vec![Vec::new(); ports],
                control: vec![Vec::new(); ports],
                full: vec![false; ports],
                writable: vec![false; ports],
            }
        }
    }

    impl Wires for Memory {
        fn send(&mut self, port: usize, frame: &[u8]) -> Sent {
            if self.full[port] {
                return Sent::Full;
            }
            self.sent[port].push(frame.to_vec());
            Sent::Taken
        }
        fn send_control(&mut self, port: usize, frame: &[u8]) -> Sent {
            self.control[port].push(frame.to_vec());
            Sent::Taken
        }
        fn want_writable(&mut self, port: usize, on: bool) {
            self.writable[port] = on;
        }
    }

    /// A frame in on `port` at `now`, and every frame received so far processed at its last bit's time.
    fn arrive(s: &mut Switch, w: &mut Memory, now: u64, port: usize, frame: &[u8]) {
        s.receive(now, port, frame);
        while let Some(due) = s.next_arrival() {
            s.deadline(due, due, w);
        }
    }

    fn mac(last: u8) -> Mac {
        [2, 1, 0, 0, 1, last]
    }

    /// The MMU tests' small lossless config (priority 3), its buffer for 3 ports: a few 1 kB frames reach
    /// its threshold and headroom.
    fn config() -> MmuConfig {
        let mut config = crate::model::mmu::tests::config();
        config.buffer = 20_000 + 3 * (8 * 1000 + 5000);
        config.threshold = 4000;
        config.mtu_frame = 1514;
        config
    }

    /// s1: ports to h1 (10.0.0.1), h2 (10.0.0.2) and h3 (10.0.0.3), 100 Mbit/s, `delay_ns` on every link.
    fn switch(delay_ns: u64) -> Switch {
        let ports = (0..3u8)
            .map(|i| {
                (
                    format!("s1-eth{}", i + 1),
                    PortSetup {
                        mac: mac(i + 1),
                        peer_mac: [2, 0, 0, 0, i + 1, 0],
                        rate_bps: MBIT100,
                        mtu: 1500,
                        delay_ns,
                        host_facing: true,
                        loss: 0.0,
                        drop: Vec::new(),
                        seed: vec![1000 + u32::from(i)],
                    },
                )
            })
            .collect();
        let routes = (0..3u8)
            .map(|i| ([10, 0, 0, i + 1], vec![u32::from(i)]))
            .collect();
        Switch::new(
            "s1".into(),
            ports,
            routes,
            config(),
            CpythonRandom::from_u64(1),
            None,
            1,
            true,
        )
        .unwrap()
    }

    /// An IPv4/UDP frame of `len` bytes from h1 to 10.0.0.`to`, to s1's port 1, in priority `prio`.
    fn udp(to: u8, len: usize, prio: u8) -> Vec<u8> {
        udp_on(0, to, len, prio)
    }

    /// The same, arriving on port `port` (its MAC the destination).
    fn udp_on(port: u8, to: u8, len: usize, prio: u8) -> Vec<u8> {
        let mut frame = mac(port + 1).to_vec();
        frame.extend_from_slice(&[2, 0, 0, 0, 1, 0]);
        frame.extend_from_slice(&ETH_IPV4);
        let total = (len - ETH_LEN) as u16;
        frame.extend_from_slice(&[
            0x45,
            prio << 5,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0,
            0,
            64,
            17,
            0,
            0,
        ]);
        frame.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, to]);
        let sum = !(frame[14..34]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .fold(0u32, |a, w| {
                let s = a + w;
                (s & 0xFFFF) + (s >> 16)
            }) as u16);
        frame[24..26].copy_from_slice(&sum.to_be_bytes());
        frame.extend_from_slice(&[0x04, 0xD2, 0x12, 0xB7]);
        frame.resize(len, 0);
        frame
    }

    #[test]
    fn a_frame_is_routed_with_its_ttl_down_and_its_macs_rewritten() {
        let (mut s, mut w) = (switch(0), Memory::new(3));
        arrive(&mut s, &mut w, 0, 0, &udp(2, 100, 0));
        let out = &w.sent[1];
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][22], 63);
        assert_eq!(&out[0][0..6], &[2, 0, 0, 0, 2, 0]);
        assert_eq!(&out[0][6..12], &mac(2));
        assert_eq!(s.counters(0).unwrap().rx_frames[0], 1);
        assert_eq!(s.frames_sent(1), 1);
    }

    #[test]
    fn a_full_kernel_queue_waits_for_writable_and_then_drains_in_order() {
        let (mut s, mut w) = (switch(0), Memory::new(3));
        w.full[1] = true;
        for n in 0..3 {
            let mut frame = udp(2, 200, 0);
            frame[100] = n;
            arrive(&mut s, &mut w, n as u64 * US, 0, &frame);
        }
        assert!(w.writable[1] && w.sent[1].is_empty());
        w.full[1] = false;
        s.writable(10 * US, 1, &mut w);
        assert!(!w.writable[1]);
        let order: Vec<u8> = w.sent[1].iter().map(|f| f[100]).collect();
        assert_eq!(order, [0, 1, 2]);
    }

    #[test]
    fn an_incast_on_the_lossless_priority_pauses_the_ingress_and_never_drops() {
        let (mut s, mut w) = (switch(0), Memory::new(3));
        w.full[2] = true; // h3's link is busy: the queue builds
        let xoff = |w: &Memory, port: usize| {
            w.control[port]
                .iter()
                .any(|f| decode_pfc(f).is_some_and(|q| q[LOSSLESS].is_some_and(|v| v > 0)))
        };
        let (mut now, mut offered) = (0, 0);
        for _ in 0..20 {
            // Each sender obeys its pause (one frame more, as a real NIC may leak): the headroom takes it.
            for port in 0..2u8 {
                if !xoff(&w, usize::from(port)) {
                    let frame = udp_on(port, 3, 1000, LOSSLESS as u8);
                    arrive(&mut s, &mut w, now, usize::from(port), &frame);
                    offered += 1;
                }
            }
            assert!(s.after_events(now, &mut w).is_some_and(|d| d >= now));
            now += 10 * US;
        }
        assert!(xoff(&w, 0) && xoff(&w, 1), "no XOFF to the senders");
        let drops: u64 = s
            .mmu()
            .counters()
            .iter()
            .flatten()
            .map(|c| c.drops_headroom + c.drops_threshold)
            .sum();
        assert_eq!(drops, 0);
        w.full[2] = false;
        s.writable(now, 2, &mut w);
        let mut at = s.after_events(now, &mut w);
        assert_eq!(w.sent[2].len(), offered);
        let xon = |w: &Memory| {
            w.control[0]
                .iter()
                .filter(|f| decode_pfc(f).is_some_and(|q| q[LOSSLESS] == Some(0)))
                .count()
        };
        // The kernel took the whole queue at once; it is in the switch's buffer until the wire has sent it.
        assert_eq!(xon(&w), 0, "an XON before the wire sent anything");
        let mut wakes = 0;
        while xon(&w) == 0 {
            let due = at.expect("a deadline while an ingress waits for its XON");
            assert!(due > now, "its frames leave the wire one after the other");
            s.deadline(due, due, &mut w);
            at = s.after_events(due, &mut w);
            wakes += 1;
            assert!(wakes < 100, "no XON once the wire sent the queue");
        }
    }

    #[test]
    fn a_frame_waits_for_its_last_bit_and_the_links_delay_and_the_deadline_says_when() {
        let (mut s, mut w) = (switch(50 * US), Memory::new(3));
        s.receive(0, 0, &udp(2, 100, 0));
        let deadline = s.after_events(0, &mut w).unwrap();
        assert_eq!(deadline, 58 * US); // 100 bytes take 8 us at 100 Mbit/s, then the link's 50 us
        assert!(w.sent[1].is_empty());
        s.deadline(deadline, deadline, &mut w); // processed; then h2's paced link holds it its delay again
        let next = s.after_events(deadline, &mut w).unwrap();
        assert!(w.sent[1].is_empty() && next == 108 * US, "{next}");
        s.deadline(next, next + 3 * US, &mut w);
        assert_eq!(w.sent[1].len(), 1);
        assert_eq!(s.timer_lateness().count(), 2);
        assert_eq!(s.timer_lateness().max_ns(), 3 * US);
    }

    #[test]
    fn an_arrival_counts_from_its_stamp_however_late_it_is_read() {
        let (mut s, mut w) = (switch(0), Memory::new(3));
        s.receive(420 * US, 0, &udp(2, 100, 0)); // read later than it came: due 8 us after it came
        assert_eq!(
            s.after_events(650 * US, &mut w),
            Some(650 * US),
            "already whole: now"
        );
        s.deadline(650 * US, 650 * US, &mut w);
        assert_eq!(w.sent[1].len(), 1);
        s.receive(300 * US, 1, &udp_on(1, 1, 100, 0)); // another port's, stamped before the frame processed
        assert_eq!(s.next_arrival(), Some(308 * US));
        s.receive(301 * US, 1, &udp_on(1, 1, 100, 0)); // behind it on its wire: whole a wire time after it
        s.deadline(650 * US, 650 * US, &mut w);
        assert_eq!(w.sent[0].len(), 2);
    }

    #[test]
    fn the_frame_whose_last_bit_sends_the_xoff_is_named_before_it_is_processed() {
        let (mut s, mut w) = (switch(0), Memory::new(3));
        w.full[2] = true; // h3's link is busy: the queue builds
        let frame = udp_on(0, 3, 1000, LOSSLESS as u8);
        let mut now = 0;
        while s.pausing_arrival().is_none() {
            assert!(now < 1_000 * US, "no frame ever crosses the XOFF threshold");
            s.receive(now, 0, &frame);
            if s.pausing_arrival().is_some() {
                break;
            }
            let due = s.after_events(now, &mut w).unwrap();
            s.deadline(due, due, &mut w);
            now = due;
        }
        assert!(w.control[0].is_empty(), "named before its XOFF");
        let due = s.after_events(now, &mut w).unwrap();
        s.deadline(due, due, &mut w);
        s.after_events(due, &mut w);
        assert_eq!(w.control[0].len(), 1, "its last bit sent the XOFF");
        assert_eq!(s.pausing_arrival(), None);
    }

    #[test]
    fn a_wake_up_late_for_a_waiting_frame_is_a_stall_of_the_wire_and_a_reset_forgets_it() {
        let (mut s, mut w) = (switch(0), Memory::new(3));
        let frame = udp(2, 1000, 0);
        arrive(&mut s, &mut w, 0, 0, &frame); // whole at 80 us, then on h2's wire until 160 us
        w.full[1] = true;
        arrive(&mut s, &mut w, US, 0, &frame); // waits for room
        w.full[1] = false;
        s.writable(660 * US, 1, &mut w); // 500 us after the wire went idle
        assert_eq!(s.wire(1).unwrap().longest_stall_ns, 500 * US);
        assert_eq!(s.wire(1).unwrap().frames, 2);
        s.reset_fidelity();
        assert_eq!(s.wire(1).unwrap().stall_ns, 0);
        assert_eq!(s.wire(1).unwrap().frames, 0);
    }

    #[test]
    fn hostile_bytes_are_counted_never_forwarded_nor_a_panic() {
        let (mut s, mut w) = (switch(0), Memory::new(3));
        let good = udp(2, 100, 0);
        for cut in 0..good.len() {
            arrive(&mut s, &mut w, 0, 0, &good[..cut]);
        }
        arrive(&mut s, &mut w, 0, 0, &[0xff; 3000]);
        let c = s.counters(0).unwrap();
        assert!(w.sent.iter().all(Vec::is_empty));
        assert!(
            c.drops.malformed > 0
                && c.drops.named().iter().map(|(_, n)| n).sum::<u64>() == good.len() as u64 + 1
        );
    }

    /// Every counter a frame arriving at the switch can move.
    fn trace(s: &Switch) -> u64 {
        (0..3)
            .filter_map(|port| s.counters(port))
            .map(|c| {
                c.rx_frames.iter().sum::<u64>()
                    + c.pfc_received.iter().sum::<u64>()
                    + c.drops.named().iter().map(|(_, n)| n).sum::<u64>()
                    + c.control_frames
                    + c.arp_replies
                    + c.tx_errors
            })
            .sum()
    }

    proptest::proptest! {
        /// Any bytes on any port, whole or a valid frame with one byte changed: never a panic, and each frame
        /// leaves a trace in a counter (forwarded, reacted to, answered, or dropped under its cause).
        #[test]
        fn any_frame_on_any_port_is_counted_never_a_panic(
            frames in proptest::collection::vec(
                (0usize..3, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1600),
                 proptest::option::of((0usize..120, proptest::prelude::any::<u8>()))),
                1..24,
            )
        ) {
            let (mut s, mut w) = (switch(0), Memory::new(3));
            for (port, bytes, mutation) in frames {
                let frame = match mutation {
                    Some((at, value)) => {
                        let mut f = udp_on(port as u8, 2, 200, 3);
                        f[at % 200] = value;
                        f
                    }
                    None => bytes,
                };
                let before = trace(&s);
                arrive(&mut s, &mut w, 0, port, &frame);
                s.after_events(0, &mut w);
                proptest::prop_assert!(trace(&s) > before, "{:02x?} left no trace", frame);
            }
        }
    }
}
