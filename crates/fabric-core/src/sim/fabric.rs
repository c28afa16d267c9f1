//! A whole fabric (Ethernet, or IB with `sim::ib`) in simulated time and the collective's ranks on it (what
//! `--backend sim` runs: `emulator/study/sim_fabric.py` builds it, `emulator/collectives/sim_ranks.py` drives it).
//!
//! The fabric owns the engine, the wires, the switches, the hosts and the ranks, and dispatches each event to
//! the one it concerns. Every callback of the Python backend is an [`Event`] here, scheduled at the same point
//! of the same step, so the engine's order (time, then scheduling sequence) is the Python engine's and a run
//! gives the same CCTs, counters and events. Python builds the plan and hands it over as a [`FabricSpec`], names
//! the collective (its ranks' plans are made here, `sim::plans`), and reads back each iteration's summary
//! ([`IterationRecord`]).
use crate::model::dcqcn::DcqcnParams;
use crate::model::mmu::{Mmu, MmuConfig};
use crate::model::rc::{Completion, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode};
use crate::model::rng::CpythonRandom;
use crate::model::uet::UetSpec;
use crate::sim::congestion::CcCounters;
use crate::sim::engine::Engine;
use crate::sim::faults::{Fault, FaultSchedule, LinkFault};
use crate::sim::frame::SimFrame;
use crate::sim::host::SimHost;
use crate::sim::ib::IbSpec;
use crate::sim::memory::{FlatMemory, MEMORY_KEY};
use crate::sim::plans::{slice_span, Plans};
use crate::sim::program::{Program, RunPlan, Schedule};
use crate::sim::ranks::{add_f32, reduce_input, reduce_result, Arrival, RankReport, SimRank};
use crate::sim::summary::{summarize, IterationSummary};
use crate::sim::switch::{PortLoss, SimSwitch, SwitchPort};
use crate::sim::watch::{Sampler, Watch};
use crate::sim::wire::{Endpoint, Wire};
use crate::wire::mac::Mac;
use crate::wire::pfc::{MAX_QUANTA, PRIORITIES};
use std::sync::Arc;

/// Time between an iteration's set-up and its start instant (the coordinator's margin).
pub const START_MARGIN_NS: u64 = 10_000_000;

/// Everything that happens in the simulated fabric: one variant per callback of the Python backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A frame's last bit arrives at the end of a wire: the oldest frame on it.
    Deliver(u32),
    /// A switch's MMU timer (pause expiries, XOFF refreshes).
    SwitchTimer(u32),
    /// A switch port's wire is free: send its next frame.
    WireFree {
        switch: u32,
        port: u32,
    },
    /// A host's NIC queue looks at its queues.
    QueueSend(u32),
    /// A host QP's transport timer.
    QpTimer {
        host: u32,
        qpn: u32,
    },
    /// A host's IB port's flow-control timer (an IB fabric).
    IbTimer(u32),
    /// A host's receiver-credit pacer may grant (a UET fabric with RCCC).
    CreditTimer(u32),
    /// A rank's iteration starts: its first step's sends are posted (a training step's rank also: its
    /// compute before a collective, or after its last, is over).
    StepBegins(u32),
    /// Fault `stall`: a host's NIC stops taking frames and pauses its switch port without end.
    Stall(u32),
    /// The stall of a host's NIC ends.
    Resume(u32),
    /// A stalled host refreshes its pause.
    StormRefresh(u32),
    /// The goodput watch takes a sample.
    Sample,
    /// A `down` fault's link goes down, and comes back (its index in the schedule's links).
    LinkDown(u32),
    LinkUp(u32),
}

/// One switch as the plan gives it.
#[derive(Clone, Debug)]
pub struct SwitchSpec {
    /// Per port: its MAC, its peer's MAC, its rate and the wire it sends on.
    pub ports: Vec<(Mac, Mac, u64, u32)>,
    pub routes: Vec<([u8; 4], Vec<u32>)>,
    pub mmu: MmuConfig,
    pub seed: u64,
    /// Injected loss per port (empty: none).
    pub losses: Vec<PortLoss>,
}

/// One host as the plan gives it: its MAC, its gateway's MAC, its IPv4 address, its rate, the wire it sends on.
#[derive(Clone, Copy, Debug)]
pub struct HostSpec {
    pub mac: Mac,
    pub gateway_mac: Mac,
    pub ip: [u8; 4],
    pub rate_bps: u64,
    pub wire: u32,
    /// DCQCN's constants at this host's link rate, if the RNIC runs it.
    pub cc: Option<DcqcnParams>,
}

/// A fabric to build: wires (rate, delay, where they deliver), switches, hosts.
#[derive(Clone, Debug, Default)]
pub struct FabricSpec {
    pub wires: Vec<(u64, u64, Endpoint)>,
    pub switches: Vec<SwitchSpec>,
    pub hosts: Vec<HostSpec>,
    /// The IB subnet on an IB fabric, else none (Ethernet).
    pub ib: Option<IbSpec>,
    /// The UET transport on a UET fabric, else none (RC).
    pub uet: Option<UetSpec>,
}

/// One finished iteration: its summary, and with the ranks' logs its raw data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterationRecord {
    pub summary: IterationSummary,
    pub raw: Option<RawIteration>,
    /// A training step's: per rank, each collective's (begun, done) and when the rank's step ended.
    pub timelines: Option<Vec<Timeline>>,
}

/// A training step's rank in one iteration: each collective's (begun, done), and when its step ended.
pub type Timeline = (Vec<(u64, u64)>, u64);

/// Where a training step's rank is in its compute and its collectives (`workload_plan.py`'s op by op: a
/// collective is issued after the compute before it, begins once the one before it is done, and the compute
/// after a blocking collective waits for it).
#[derive(Clone, Debug, Default)]
struct WorkRank {
    /// Collectives begun.
    begun: usize,
    /// Whether the last begun collective is done.
    closed: bool,
    /// When the compute stream is free, and when the last collective was done.
    compute_free: u64,
    previous_done: u64,
    /// Each begun collective's (begun, done).
    timeline: Vec<(u64, u64)>,
    /// When the rank's step ends, once its last collective is done.
    end: Option<u64>,
    /// A StepBegins is set for the rank.
    timer: bool,
    /// The step the rank is at is not posted: it waits for its collective's start (a WRITE's completion, or
    /// its compute). Only then may a completion or a timer post it (a posted step is never posted again).
    waiting: bool,
}

/// What the coordinator's `summarize` takes: every rank's report, each host's time paused in the iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawIteration {
    pub reports: Vec<RankReport>,
    pub paused: Vec<u64>,
}

/// The fabric-wide counters the runner keeps (results.json's totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// MMU drops (threshold, headroom, watchdog), the switches' own and injected loss.
    pub drops: u64,
    pub pfc_sent: u64,
    pub ecn_marked: u64,
    pub tx_frames: u64,
    pub host_paused_ns: u64,
    pub cnps_received: u64,
    pub paced_waits: u64,
    /// The stall fault's pause frames.
    pub host_pfc_sent: u64,
    /// IB: times a VL had a packet and no credit for it, at switches and RNICs.
    pub ib_credit_stalls: u64,
    /// UET: packets the switches cut to their headers rather than drop.
    pub trimmed: u64,
}

/// The PFC watchdogs' figures as the runner reports them (`sim_fabric.pfcwd`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PfcwdFigures {
    pub storms: u64,
    pub restorations: u64,
    pub drops: u64,
    /// (switch, port) of every port with a storm on some priority, in switch then port order.
    pub stormed_ports: Vec<(u32, u32)>,
}

/// One switch port's figures, read on demand: what a test of one port asks where the totals sum every port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortFigures {
    /// Time each priority's egress was held by the peer's PFC so far (ns): who paused whom, and how long.
    pub paused_ns: [u64; PRIORITIES],
    /// The MMU's drops (threshold, headroom, watchdog), all priorities.
    pub mmu_drops: u64,
    /// Frames injected loss took on the port's link, both directions (the totals lump them with the MMU's).
    pub injected_drops: u64,
    /// IB: packets the plane dropped on the port, every cause (0 on Ethernet; not in the totals).
    pub ib_drops: u64,
    /// Frames sent, through the MMU or the IB plane: which way ECMP took a flow.
    pub tx_frames: u64,
    /// Bytes sent, through the MMU or the IB plane: how evenly a fabric's uplinks carried the load.
    pub tx_bytes: u64,
    /// UET: packets trimmed at the port's ingress.
    pub trimmed: u64,
    /// PFC frames the port sent to its peer, XOFFs (refreshes included) and XONs, all priorities: the
    /// emulator's `stats` splits them so too, and the two backends' counts compare port by port.
    pub pfc_sent: (u64, u64),
    /// IB: the least time between two grown credit grants on the port's link, as the switch's `fc_floor` and
    /// the link's rate set it; `None` on Ethernet.
    pub credit_interval_ns: Option<u64>,
}

/// One host's figures, read on demand: DCQCN's per host (the totals keep only the CNPs received), the stall
/// fault's (the totals keep only its pause frames) and its IB port's credit pacing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostFigures {
    /// DCQCN's counters; all 0 when the RNIC runs none.
    pub cc: CcCounters,
    /// The stall fault's pause frames (XOFFs, refreshes, the XON) and the frames it lost once the held ones
    /// filled its buffer.
    pub stall_pfc_sent: u64,
    pub stall_drops: u64,
    /// IB: the least time between two grown credit grants of the host's port; `None` on Ethernet.
    pub credit_interval_ns: Option<u64>,
}

/// Where a collective run is.
#[derive(Debug, Default)]
struct RunState {
    /// The collective's plans (none before one begins).
    plans: Option<RunPlan>,
    /// A training step's ranks: where each is in its collectives and compute (empty for a collective).
    work: Vec<WorkRank>,
    /// Arrivals an iteration expects, all ranks together.
    expected: usize,
    /// Whether the records carry the ranks' reports (the ranks keep their logs).
    raw: bool,
    iteration: u32,
    total: u32,
    warmup: u32,
    pending: Vec<bool>,
    pending_count: usize,
    paused_before: Vec<u64>,
    /// Why the run stopped, the whole message.
    failure: Option<String>,
    /// Iterations finished.
    finished: u32,
    records: Vec<IterationRecord>,
}

/// The simulated fabric.
#[derive(Debug)]
pub struct Fabric {
    pub engine: Engine<Event>,
    pub wires: Vec<Wire>,
    pub switches: Vec<SimSwitch>,
    pub hosts: Vec<SimHost>,
    pub ranks: Vec<SimRank>,
    /// The totals when the measured iterations began.
    pub baseline: Option<Totals>,
    run: RunState,
    completions: Vec<Completion>,
    /// The buffer a frame whose payload stayed in its sender's memory is put together in for its receiver.
    assembly: Vec<u8>,
    /// The faults injected into every measured iteration.
    pub faults: FaultSchedule,
    /// The goodput watch, if set.
    watch: Option<Watch>,
}

/// Reads the first bytes of every frame about to arrive: the frames in flight at a fattree's peak (100s of MB)
/// are far out of every cache, and the first read of each, one after the other, was a fifth of the time. Read
/// here together, their misses overlap.
fn touch_frames<'a>(events: impl Iterator<Item = &'a Event>, wires: &[Wire]) {
    let mut seen = 0u8;
    for event in events {
        if let Event::Deliver(wire) = event {
            if let Some(frame) = wires.get(*wire as usize).and_then(Wire::next_arrival) {
                let bytes = frame.bytes();
                seen ^= bytes.get(12).copied().unwrap_or(0) ^ bytes.get(40).copied().unwrap_or(0);
            }
        }
    }
    std::hint::black_box(seen);
}

impl Fabric {
    /// The fabric of `spec` on a new engine, every switch started.
    pub fn new(spec: FabricSpec) -> Result<Fabric, String> {
        let mut engine = Engine::new();
        let mut wires: Vec<Wire> = spec
            .wires
            .iter()
            .map(|&(rate, delay, to)| Wire::new(rate, delay, to))
            .collect();
        let mut switches = Vec::with_capacity(spec.switches.len());
        for (index, sw) in spec.switches.into_iter().enumerate() {
            let rates = sw.ports.iter().map(|p| p.2).collect();
            let random = CpythonRandom::from_int_seed(&[sw.seed as u32, (sw.seed >> 32) as u32]);
            let mmu = Mmu::new(sw.mmu, rates, random).map_err(|error| error.to_string())?;
            let ports = sw
                .ports
                .iter()
                .map(|&(mac, peer_mac, _, wire)| SwitchPort {
                    mac,
                    peer_mac,
                    wire,
                })
                .collect();
            let routes = sw.routes;
            let mut switch = SimSwitch::new(
                index as u32,
                &mut engine,
                ports,
                routes,
                mmu,
                sw.seed as u32,
            );
            if !sw.losses.is_empty() {
                let rates: Vec<u64> = sw.ports.iter().map(|p| p.2).collect();
                switch.lose(&sw.losses, &rates)?;
            }
            switches.push(switch);
        }
        let mut hosts: Vec<SimHost> = spec
            .hosts
            .iter()
            .map(|h| {
                let mut host = SimHost::new(h.mac, h.gateway_mac, h.ip, h.wire, h.rate_bps, 4096);
                if let Some(params) = h.cc {
                    host.run_dcqcn(params);
                }
                host.uet = spec.uet;
                host
            })
            .collect();
        if let Some(ib) = spec.ib {
            crate::sim::ib::attach(ib, &mut engine, &wires, &mut switches, &mut hosts)?;
        }
        for (index, sw) in switches.iter_mut().enumerate() {
            sw.start(index as u32, &mut engine, &mut wires);
        }
        Ok(Fabric {
            engine,
            wires,
            switches,
            hosts,
            ranks: Vec::new(),
            baseline: None,
            run: RunState::default(),
            completions: Vec::new(),
            assembly: Vec::new(),
            faults: FaultSchedule::default(),
            watch: None,
        })
    }

    /// The fabric-wide counters now.
    pub fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for sw in &self.switches {
            for port in sw.mmu.counters() {
                for c in port {
                    totals.drops += c.drops_threshold + c.drops_headroom + c.pfcwd_drops;
                    totals.pfc_sent += c.pfc_xoff_sent + c.pfc_xon_sent;
                    totals.ecn_marked += c.ecn_marked;
                    totals.tx_frames += c.tx_frames;
                    totals.trimmed += c.trimmed;
                }
            }
            totals.drops += sw.dropped.total() + sw.injected_drops();
        }
        totals.drops += self.link_lost();
        let (forwarded, credit_stalls) = crate::sim::ib::totals(&self.switches, &self.hosts);
        totals.tx_frames += forwarded;
        totals.ib_credit_stalls = credit_stalls;
        let now = self.engine.now();
        for host in &self.hosts {
            totals.host_paused_ns += host.paused_ns(now);
            totals.host_pfc_sent += host.stall.storm_pfc_sent;
            if let Some(cc) = &host.cc {
                totals.cnps_received += cc.counters.cnps_received;
                totals.paced_waits += cc.counters.paced_waits;
            }
        }
        totals
    }

    /// Runs `warmup + iterations` iterations of `plans` (rank r on host r) and returns every iteration's
    /// record; an `Err` with the Python backend's message when it cannot finish.
    pub fn run_collective(
        &mut self,
        plans: Plans,
        iterations: u32,
        warmup: u32,
        mtu: u32,
    ) -> Result<Vec<IterationRecord>, String> {
        self.begin_collective(plans, iterations, warmup, mtu, false)?;
        while !self.advance(None)? {}
        Ok(self.take_records())
    }

    /// Sets up a collective: each host's memory laid out for its rank (data, then staging), one QP per peer,
    /// the first iteration begun. [`Fabric::advance`] then runs it. With `raw`, each record also carries the
    /// ranks' reports, as the rank processes make them (the differential test of the summary).
    pub fn begin_collective(
        &mut self,
        plans: Plans,
        iterations: u32,
        warmup: u32,
        mtu: u32,
        raw: bool,
    ) -> Result<(), String> {
        self.begin_run(RunPlan::Collective(plans), iterations, warmup, mtu, raw)
    }

    /// Sets up a training step's iterations (`program`: every rank's steps and collectives, rank r on host r),
    /// as [`Fabric::begin_collective`] sets up a collective's; each record carries the ranks' timelines.
    pub fn begin_workload(
        &mut self,
        program: Program,
        iterations: u32,
        warmup: u32,
        mtu: u32,
    ) -> Result<(), String> {
        self.begin_run(
            RunPlan::Workload(Arc::new(program)),
            iterations,
            warmup,
            mtu,
            false,
        )
    }

    fn begin_run(
        &mut self,
        plans: RunPlan,
        iterations: u32,
        warmup: u32,
        mtu: u32,
        raw: bool,
    ) -> Result<(), String> {
        if plans.ranks() as usize != self.hosts.len() {
            return Err(format!(
                "{} ranks for {} hosts",
                plans.ranks(),
                self.hosts.len()
            ));
        }
        for (rank, host) in (0..).zip(self.hosts.iter_mut()) {
            let (data, staging) = plans.regions(rank);
            let size = usize::try_from(data.saturating_add(staging)).unwrap_or(0);
            host.memory = FlatMemory::new(size.max(1));
        }
        self.ranks = (0..plans.ranks())
            .map(|rank| SimRank::new(&plans, rank, raw))
            .collect();
        for rank in 0..self.ranks.len() {
            for p in 0..self.ranks[rank].peers.len() {
                let peer = self.ranks[rank].peers[p].rank;
                let peer_ip = self
                    .hosts
                    .get(peer as usize)
                    .ok_or("a peer beyond the ranks")?
                    .ip;
                self.hosts[rank].connect(
                    rank as u32,
                    &mut self.engine,
                    SimRank::qpn(peer),
                    peer_ip,
                    SimRank::qpn(rank as u32),
                    mtu,
                )?;
            }
        }
        self.run = RunState {
            work: if plans.program().is_some() {
                vec![WorkRank::default(); self.ranks.len()]
            } else {
                Vec::new()
            },
            plans: Some(plans),
            expected: self.ranks.iter().map(|rank| rank.receives).sum(),
            raw,
            total: warmup.saturating_add(iterations),
            warmup,
            ..RunState::default()
        };
        self.start(0);
        Ok(())
    }

    /// Runs up to `max_events` events of the collective (all if `None`, a slice between looks at its progress,
    /// as `sim_ranks.py` runs SLICE_EVENTS at a time); whether the run is over: every iteration finished, or
    /// the goodput watch found the fabric stuck and stopped it ([`Fabric::stuck`]). An `Err` with the Python
    /// backend's message when a completion failed, the watch's sampler failed or nothing more will happen.
    pub fn advance(&mut self, max_events: Option<u64>) -> Result<bool, String> {
        if self.finished() || self.stuck() {
            return Ok(true);
        }
        let mut run = self.engine.start_run(None, max_events);
        while let Some(event) = self.engine.next_event(&mut run) {
            touch_frames(self.engine.fresh_front(), &self.wires);
            self.dispatch(event);
        }
        let ran = self.engine.end_run(run);
        if let Some(failure) = &self.run.failure {
            return Err(failure.clone());
        }
        if self.finished() || self.stuck() {
            return Ok(true);
        }
        if ran == 0 {
            let waiting: Vec<usize> = (0..self.ranks.len())
                .filter(|&r| self.run.pending.get(r).copied().unwrap_or(false))
                .take(8)
                .collect();
            return Err(format!(
                "simulation: iteration {} cannot finish: nothing more will happen (ranks {:?} still wait)",
                self.run.iteration, waiting
            ));
        }
        Ok(false)
    }

    /// Whether every iteration of the collective finished.
    fn finished(&self) -> bool {
        self.run.finished >= self.run.total
    }

    /// The records of the iterations finished since the last call, oldest first.
    pub fn take_records(&mut self) -> Vec<IterationRecord> {
        std::mem::take(&mut self.run.records)
    }

    /// Iterations finished and in all, and the current iteration's arrivals against those it expects.
    pub fn progress(&self) -> (u32, u32, usize, usize) {
        let arrived = self.ranks.iter().map(|r| r.arrivals as usize).sum();
        (
            self.run.finished,
            self.run.total,
            arrived,
            self.run.expected,
        )
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Deliver(wire) => {
                let Some(w) = self.wires.get_mut(wire as usize) else {
                    return;
                };
                match w.arrive() {
                    Some(_) if w.down => w.lost += 1,
                    Some(frame) => self.deliver(wire, frame),
                    None => {}
                }
            }
            Event::SwitchTimer(sw) => {
                if let Some(s) = self.switches.get_mut(sw as usize) {
                    s.on_timer(sw, &mut self.engine, &mut self.wires);
                }
            }
            Event::WireFree { switch, port } => {
                if let Some(s) = self.switches.get_mut(switch as usize) {
                    s.wire_free(switch, &mut self.engine, &mut self.wires, port as usize);
                }
            }
            Event::QueueSend(host) => {
                if let Some(h) = self.hosts.get_mut(host as usize) {
                    h.queue_send(host, &mut self.engine, &mut self.wires);
                }
            }
            Event::QpTimer { host, qpn } => {
                if let Some(h) = self.hosts.get_mut(host as usize) {
                    h.on_timer(&self.engine, qpn);
                    self.after_qp(host, qpn);
                }
            }
            Event::IbTimer(host) => {
                if let Some(h) = self.hosts.get_mut(host as usize) {
                    h.ib_timer(host, &mut self.engine, &mut self.wires);
                }
            }
            Event::CreditTimer(host) => {
                if let Some(h) = self.hosts.get_mut(host as usize) {
                    h.credit_timer(host, &mut self.engine, &mut self.wires);
                }
            }
            Event::StepBegins(rank) => self.steps_begin(rank as usize),
            Event::Stall(host) => {
                if let Some(h) = self.hosts.get_mut(host as usize) {
                    h.begin_stall(host, &mut self.engine, &self.wires);
                }
            }
            Event::Resume(host) => self.end_stall(host),
            Event::StormRefresh(host) => {
                if let Some(h) = self.hosts.get_mut(host as usize) {
                    h.storm(host, &mut self.engine, &self.wires, MAX_QUANTA);
                }
            }
            Event::Sample => self.sample(),
            Event::LinkDown(index) => self.set_link(index, false),
            Event::LinkUp(index) => self.set_link(index, true),
        }
    }

    /// A `down` fault's link goes down (`up` false) or comes back: its wires, and every switch's routes.
    fn set_link(&mut self, index: u32, up: bool) {
        let Some(fault) = self.faults.links.get(index as usize) else {
            return;
        };
        for wire in fault.wires {
            if let Some(w) = self.wires.get_mut(wire as usize) {
                w.down = !up;
            }
        }
        let routes = if up {
            &fault.routes_up
        } else {
            &fault.routes_down
        };
        for (switch, table) in routes {
            if let Some(s) = self.switches.get_mut(*switch as usize) {
                s.set_routes(table.clone());
            }
        }
        let tables = if up { &fault.ib_up } else { &fault.ib_down };
        for (switch, (lft, ar)) in tables {
            if let Some(plane) = self
                .switches
                .get_mut(*switch as usize)
                .and_then(|s| s.ib.as_mut())
            {
                let _ = plane.set_tables(lft, ar); // checked by set_link_faults
            }
        }
        if !up {
            // what the IB planes queued for the dead link is lost with it (a credit link never returns it)
            for wire in fault.wires {
                let end = self.wires.get(wire as usize).map(|w| w.to);
                if let Some(Endpoint::Switch { switch, port }) = end {
                    if let Some(plane) = self
                        .switches
                        .get_mut(switch as usize)
                        .and_then(|s| s.ib.as_mut())
                    {
                        plane.flush(port as usize);
                    }
                }
            }
        }
    }

    pub(crate) fn deliver(&mut self, wire: u32, frame: SimFrame) {
        let Some(to) = self.wires.get(wire as usize).map(|w| w.to) else {
            return;
        };
        match to {
            Endpoint::Switch { switch, port } => {
                if let Some(s) = self.switches.get_mut(switch as usize) {
                    s.receive(
                        switch,
                        &mut self.engine,
                        &mut self.wires,
                        port as usize,
                        frame,
                    );
                }
            }
            Endpoint::Host(host) => {
                let held = self
                    .hosts
                    .get_mut(host as usize)
                    .map(|h| h.stall.hold(frame));
                if let Some(Some(frame)) = held {
                    self.host_frame(host, frame);
                }
            }
        }
    }

    /// `host` takes a frame (put together from its sender's memory if its payload stayed there): its QP's
    /// completions to the rank, then the host goes on.
    fn host_frame(&mut self, host: u32, frame: SimFrame) {
        let mut assembly = std::mem::take(&mut self.assembly);
        let sender = frame
            .payload_host()
            .and_then(|sender| self.hosts.get(sender as usize))
            .map(|sender| &sender.memory);
        let whole = frame.whole(sender, &mut assembly);
        let qpn = match self.hosts.get_mut(host as usize) {
            Some(h) => {
                let qpn = h.receive(host, &mut self.engine, &mut self.wires, whole);
                h.take_back(frame);
                qpn
            }
            None => None,
        };
        self.assembly = assembly;
        if let Some(qpn) = qpn {
            self.after_qp(host, qpn);
        }
    }

    /// A QP of `host` took a packet or a timer: its completions to the rank, then the host goes on.
    fn after_qp(&mut self, host: u32, qpn: u32) {
        let now = self.engine.now();
        let mut completions = std::mem::take(&mut self.completions);
        if let Some(h) = self.hosts.get_mut(host as usize) {
            h.collect(qpn, now, &mut completions);
        }
        for completion in completions.drain(..) {
            if (host as usize) < self.ranks.len() {
                self.completion(host as usize, completion);
            }
        }
        self.completions = completions;
        if let Some(h) = self.hosts.get_mut(host as usize) {
            h.resume(host, &mut self.engine, &mut self.wires, qpn);
        }
    }

    // --- the ranks ------------------------------------------------------------------------------------------

    /// Iteration `i` begins: every rank's receives posted, its first step at the start instant.
    fn start(&mut self, i: u32) {
        self.run.iteration = i;
        if i == self.run.warmup {
            self.baseline = Some(self.totals());
        }
        let now = self.engine.now();
        self.run.paused_before = self.hosts.iter().map(|h| h.paused_ns(now)).collect();
        self.run.pending = vec![true; self.ranks.len()];
        self.run.pending_count = self.ranks.len();
        let at = now.saturating_add(START_MARGIN_NS);
        self.inject_faults(i, at);
        for rank in 0..self.ranks.len() {
            self.begin(rank, i, at);
        }
    }

    fn begin(&mut self, rank: usize, iteration: u32, start: u64) {
        let (Some(plans), Some(r), Some(host)) = (
            self.run.plans.as_ref(),
            self.ranks.get_mut(rank),
            self.hosts.get_mut(rank),
        ) else {
            return;
        };
        r.reset(iteration, start);
        if plans.reduces(r.rank) {
            // The data region only (Python fills the staging region too, which every step overwrites
            // before it reads it): the input, (rank + 1) x (iteration + 1) in every float32.
            let value = reduce_input(r.rank, iteration).to_le_bytes();
            let data = usize::try_from(plans.data_bytes(r.rank)).unwrap_or(usize::MAX);
            let memory = host.memory.data_mut();
            let end = data.min(memory.len());
            for chunk in memory[..end].chunks_exact_mut(4) {
                chunk.copy_from_slice(&value);
            }
        }
        for peer in &r.peers {
            if let Some(qp) = host.qp_mut(SimRank::qpn(peer.rank)) {
                for _ in 0..peer.receives {
                    qp.post_recv(RecvWr {
                        wr_id: 0,
                        addr: 0,
                        length: 0,
                        lkey: MEMORY_KEY,
                    });
                }
            }
        }
        if let Some(work) = self.run.work.get_mut(rank) {
            *work = WorkRank {
                compute_free: start,
                previous_done: start,
                timer: true,
                waiting: true,
                ..WorkRank::default()
            };
        }
        let delay = start.saturating_sub(self.engine.now());
        self.engine.after(delay, Event::StepBegins(rank as u32));
    }

    /// Every slice's first step posted (`rank.py`'s sends at T).
    fn steps_begin(&mut self, rank: usize) {
        if let Some(work) = self.run.work.get_mut(rank) {
            work.timer = false;
            if !work.waiting {
                self.maybe_done(rank);
                return;
            }
        }
        let slices = self.ranks.get(rank).map_or(0, SimRank::slices);
        for j in 0..slices {
            self.slice_begins(rank, j);
        }
        self.maybe_done(rank);
    }

    /// Posts slice `j` of the step it is at; moves it on while its arrivals there are all in.
    fn slice_begins(&mut self, rank: usize, j: u32) {
        let Some(plans) = self.run.plans.clone() else {
            return;
        };
        loop {
            if plans.program().is_some() {
                let go = self.advance_ops(rank, &plans);
                if let Some(work) = self.run.work.get_mut(rank) {
                    work.waiting = !go;
                }
                if !go {
                    return;
                }
            }
            let Some(r) = self.ranks.get(rank) else {
                return;
            };
            let k = r.step_of(j);
            if k >= plans.steps(r.rank) {
                return;
            }
            let slices = r.slices();
            let (number, tag) = (k * slices + j, r.tag());
            plans.each_send(r.rank, k, |send, at_step| {
                let arrives = at_step * slices + j; // the receiver's slice number: its immediate
                let base = if send.staging {
                    plans.data_bytes(send.dst) // the peer's layout: data, then staging
                } else {
                    0
                };
                let (at, length) = slice_span(send.length, slices, j);
                let wr = SendWr {
                    wr_id: u64::from(number),
                    opcode: WrOpcode::RdmaWriteWithImm,
                    addr: send.offset + at,
                    length,
                    lkey: MEMORY_KEY,
                    remote_addr: base.saturating_add(send.dst_offset + at),
                    rkey: MEMORY_KEY,
                    imm: tag | arrives,
                    signaled: true,
                };
                let qpn = SimRank::qpn(send.dst);
                let host = &mut self.hosts[rank];
                if let Some(Some(entry)) = host.qps.get_mut(qpn as usize) {
                    let _ = entry.qp.post_send(&mut host.memory, wr);
                }
                self.ranks[rank].outstanding += 1;
                self.hosts[rank].kick(rank as u32, &mut self.engine, &mut self.wires, qpn);
            });
            if !self.ranks[rank].slice_complete(&plans, j) {
                return;
            }
            self.finish_slice(rank, &plans, j);
        }
    }

    /// Slice `j`'s arrivals at its step are in: that slice of the step's reduction, then its next step.
    fn finish_slice(&mut self, rank: usize, plans: &RunPlan, j: u32) {
        let r = &mut self.ranks[rank];
        if let Some((staged, offset, length)) = plans.reduce(r.rank, r.step_of(j)) {
            let (at, count) = slice_span(length, r.slices(), j);
            let staging = plans.data_bytes(r.rank).saturating_add(staged + at);
            add_f32(
                self.hosts[rank].memory.data_mut(),
                (offset + at) as usize,
                staging as usize,
                (count / 4) as usize,
            );
        }
        r.next_step(plans, j);
    }

    fn completion(&mut self, rank: usize, wc: Completion) {
        let Some(plans) = self.run.plans.clone() else {
            return;
        };
        if wc.status != WcStatus::Success {
            let r = &mut self.ranks[rank];
            r.failure = Some(format!(
                "rank {rank}: {} {}",
                name(&WcOpcode::ALL, wc.opcode),
                name(&WcStatus::ALL, wc.status)
            ));
            r.done = true;
            self.rank_done(rank);
            return;
        }
        let peer = wc.qp_num.saturating_sub(1);
        if wc.opcode == WcOpcode::RecvRdmaWithImm {
            let imm = wc.imm.unwrap_or(0);
            let r = &mut self.ranks[rank];
            if imm & 0xFFFF_0000 != r.tag() {
                r.failure = Some(format!(
                    "rank {rank}: immediate {imm:#x} is not of iteration {}",
                    r.iteration
                ));
            }
            if let Arrival::CompletesSlice(j) = r.arrive(&plans, peer, imm & 0xFFFF, wc.timestamp) {
                // A training step's rank waiting to begin its next collective has not posted the step its
                // arrivals complete: it posts it first (slice_begins, once it may), then moves on.
                if !self.run.work.get(rank).is_some_and(|w| w.waiting) {
                    self.finish_slice(rank, &plans, j);
                }
                self.slice_begins(rank, j);
            }
        } else {
            self.ranks[rank].sent(peer, wc.wr_id, wc.timestamp);
            if self.run.work.get(rank).is_some_and(|w| w.waiting) {
                self.slice_begins(rank, 0); // the collective may be done: the next may begin
            }
        }
        self.maybe_done(rank);
    }

    /// A training step's rank between collectives: closes the one whose steps are passed once its WRITEs
    /// completed, and begins the next once its compute is over and the one before is done (sets a timer for
    /// the compute's end when it is not yet). Whether the step the rank is at may be posted now.
    fn advance_ops(&mut self, rank: usize, plans: &RunPlan) -> bool {
        let Some(program) = plans.program() else {
            return true;
        };
        let now = self.engine.now();
        let (Some(r), Some(w)) = (self.ranks.get(rank), self.run.work.get_mut(rank)) else {
            return false;
        };
        let (k, ops) = (r.step_of(0), program.ops(r.rank));
        loop {
            if let Some(current) = w.begun.checked_sub(1).and_then(|i| ops.get(i)) {
                if k < current.first.saturating_add(current.steps) {
                    return true; // inside the collective begun last
                }
                if !w.closed {
                    if r.outstanding > 0 {
                        return false; // its last WRITEs are not acknowledged yet
                    }
                    if let Some(entry) = w.timeline.last_mut() {
                        entry.1 = now;
                    }
                    w.previous_done = now;
                    if current.blocking {
                        w.compute_free = w.compute_free.max(now);
                    }
                    w.closed = true;
                }
            }
            let Some(next) = ops.get(w.begun) else {
                return false; // every collective begun and done: the step's end is `step_ended`'s
            };
            let issue = w.compute_free.saturating_add(next.compute_ns);
            let at = issue.max(w.previous_done);
            if now < at {
                if !w.timer {
                    w.timer = true;
                    self.engine.after(at - now, Event::StepBegins(rank as u32));
                }
                return false;
            }
            w.timeline.push((at, at));
            w.begun += 1;
            w.closed = false;
            w.compute_free = issue;
        }
    }

    /// Whether a training step's rank is done: every collective done, its compute over (a timer for the
    /// compute after the last collective when it is not yet).
    fn step_ended(&mut self, rank: usize, plans: &RunPlan) -> bool {
        let Some(program) = plans.program() else {
            return true;
        };
        self.advance_ops(rank, plans);
        let now = self.engine.now();
        let (Some(r), Some(w)) = (self.ranks.get(rank), self.run.work.get_mut(rank)) else {
            return false;
        };
        if w.begun < program.ops(r.rank).len() || (w.begun > 0 && !w.closed) {
            return false;
        }
        let end = w
            .compute_free
            .saturating_add(program.tail_ns)
            .max(w.previous_done);
        w.end = Some(end);
        if now < end {
            if !w.timer {
                w.timer = true;
                self.engine.after(end - now, Event::StepBegins(rank as u32));
            }
            return false;
        }
        true
    }

    fn maybe_done(&mut self, rank: usize) {
        let Some(plans) = self.run.plans.clone() else {
            return;
        };
        if plans.program().is_some() && !self.step_ended(rank, &plans) {
            return;
        }
        let r = &mut self.ranks[rank];
        if !r.done && r.finished(&plans) && r.outstanding == 0 {
            r.done = true;
            self.rank_done(rank);
        }
    }

    fn rank_done(&mut self, rank: usize) {
        if let Some(flag) = self.run.pending.get_mut(rank) {
            if *flag {
                *flag = false;
                self.run.pending_count -= 1;
            }
        }
        if let Some(failure) = &self.ranks[rank].failure {
            if self.run.failure.is_none() {
                self.run.failure = Some(format!("simulation: {failure}"));
                self.engine.stop();
            }
        }
        if self.run.pending_count > 0 {
            return;
        }
        if let Err(error) = self.record() {
            self.run.failure.get_or_insert(error);
        }
        let i = self.run.iteration;
        self.run.finished += 1;
        if i + 1 < self.run.total && self.run.failure.is_none() {
            self.start(i + 1);
        } else {
            // The run is over and summarized: the ranks' regions (an all-reduce's biggest part, 2 GiB at 1,024
            // ranks of 1 MiB) go back before Python makes the results of the summaries.
            for host in &mut self.hosts {
                host.memory = FlatMemory::default();
            }
            self.engine.stop();
        }
    }

    /// The iteration that just ended, summarized (with the ranks' reports when raw).
    fn record(&mut self) -> Result<(), String> {
        let Some(plans) = self.run.plans.clone() else {
            return Ok(());
        };
        let now = self.engine.now();
        let paused: Vec<u64> = self
            .hosts
            .iter()
            .zip(&self.run.paused_before)
            .map(|(h, before)| h.paused_ns(now).saturating_sub(*before))
            .collect();
        let verified: Vec<bool> = (0..self.ranks.len())
            .map(|r| self.verified(r, &plans))
            .collect();
        let raw = self.run.raw.then(|| RawIteration {
            reports: (0..self.ranks.len())
                .map(|r| self.report(r, &plans, verified[r]))
                .collect(),
            paused: paused.clone(),
        });
        let start = self.ranks.first().map_or(0, |r| r.start);
        let hosts = &self.hosts;
        let counters = |rank: usize, peer: u32| {
            hosts
                .get(rank)
                .and_then(|host| host.qps.get(SimRank::qpn(peer) as usize))
                .and_then(Option::as_ref)
                .map_or((0, 0), |entry| {
                    let counters = entry.qp.counters();
                    (counters.retransmitted_packets, counters.timeouts)
                })
        };
        let summary = summarize(
            self.run.iteration,
            start,
            &plans,
            &mut self.ranks,
            counters,
            &paused,
            verified.iter().all(|&v| v),
        )?;
        let timelines = plans.program().map(|_| {
            self.run
                .work
                .iter()
                .map(|w| (w.timeline.clone(), w.end.unwrap_or(start)))
                .collect()
        });
        self.run.records.push(IterationRecord {
            summary,
            raw,
            timelines,
        });
        Ok(())
    }

    /// Whether rank `rank`'s data region holds its group's sum (true if it reduces nothing).
    fn verified(&self, rank: usize, plans: &RunPlan) -> bool {
        let (r, host) = (&self.ranks[rank], &self.hosts[rank]);
        if !plans.reduces(r.rank) {
            return true;
        }
        let RunPlan::Collective(plans) = plans else {
            return true;
        };
        let expected = reduce_result(plans, r.rank, r.iteration);
        let data = usize::try_from(plans.data_bytes(r.rank)).unwrap_or(usize::MAX);
        host.memory
            .data()
            .get(..data - data % 4)
            .is_some_and(|bytes| {
                bytes
                    .chunks_exact(4)
                    .all(|value| value.try_into().ok().map(f32::from_le_bytes) == Some(expected))
            })
    }

    /// The rank process's report of the iteration (kept when raw).
    fn report(&self, rank: usize, plans: &RunPlan, verified: bool) -> RankReport {
        let r = &self.ranks[rank];
        let host = &self.hosts[rank];
        let counters = r
            .peers
            .iter()
            .filter_map(|peer| {
                let entry = host.qps.get(SimRank::qpn(peer.rank) as usize)?.as_ref()?;
                let counters = entry.qp.counters();
                Some((peer.rank, counters.retransmitted_packets, counters.timeouts))
            })
            .collect();
        let released = plans.first_step_sends(r.rank).then_some(r.start);
        let log = r.log.clone().unwrap_or_default();
        RankReport {
            iteration: r.iteration,
            released_ns: released,
            arrivals: log.arrivals,
            sends: log.sends,
            counters,
            verified,
        }
    }
}

// --- faults, the goodput watch and their figures (`run_sim_variant`'s hooks) --------------------------------
impl Fabric {
    /// The faults to inject into every measured iteration; an `Err` naming a host the fabric does not have.
    pub fn set_faults(&mut self, faults: Vec<Fault>) -> Result<(), String> {
        if let Some(fault) = faults.iter().find(|f| f.host as usize >= self.hosts.len()) {
            return Err(format!(
                "a fault on host {} of {}",
                fault.host,
                self.hosts.len()
            ));
        }
        self.faults.faults = faults;
        Ok(())
    }

    /// The `down` faults to inject into every measured iteration; an `Err` naming a wire or a switch the fabric
    /// does not have.
    pub fn set_link_faults(&mut self, links: Vec<LinkFault>) -> Result<(), String> {
        for fault in &links {
            if let Some(wire) = fault
                .wires
                .iter()
                .find(|&&w| w as usize >= self.wires.len())
            {
                return Err(format!(
                    "a down fault on wire {wire} of {}",
                    self.wires.len()
                ));
            }
            let switches = fault.routes_down.iter().chain(&fault.routes_up);
            if let Some((switch, _)) = switches
                .clone()
                .find(|(s, _)| *s as usize >= self.switches.len())
            {
                return Err(format!(
                    "routes for switch {switch} of {}",
                    self.switches.len()
                ));
            }
            let ports_ok = switches.clone().all(|(s, table)| {
                let ports = self.switches[*s as usize].ports.len();
                table
                    .iter()
                    .all(|(_, out)| out.iter().all(|&p| (p as usize) < ports))
            });
            if !ports_ok {
                return Err("a route to a port its switch does not have".to_string());
            }
            for (switch, (lft, ar)) in fault.ib_down.iter().chain(&fault.ib_up) {
                let plane = self
                    .switches
                    .get(*switch as usize)
                    .and_then(|s| s.ib.as_ref());
                let Some(plane) = plane else {
                    return Err(format!(
                        "IB tables for switch {switch}, which has no IB plane"
                    ));
                };
                plane
                    .check_tables(lft, ar)
                    .map_err(|error| format!("IB tables of switch {switch}: {error}"))?;
            }
        }
        self.faults.links = links;
        Ok(())
    }

    /// Frames lost on links that were down.
    pub fn link_lost(&self) -> u64 {
        self.wires.iter().map(|w| w.lost).sum()
    }

    /// Iteration `i` starts at `start`: its faults scheduled from it (`run_sim_variant`'s `started`).
    fn inject_faults(&mut self, i: u32, start: u64) {
        let mut due = Vec::new();
        self.faults.iteration(i, self.run.warmup, start, &mut due);
        for (at, event) in due {
            let delay = at.saturating_sub(self.engine.now());
            self.engine.after(delay, event);
        }
    }

    /// A host's stall ends: XON, then every frame it held taken at once.
    fn end_stall(&mut self, host: u32) {
        let Some(h) = self.hosts.get_mut(host as usize) else {
            return;
        };
        let Some(held) = h.end_stall(host, &mut self.engine, &self.wires) else {
            return;
        };
        for frame in held {
            self.host_frame(host, frame);
        }
    }

    /// Watches goodput: `sampler` gets (now, frames received) at once and every `interval_ns` after, and stops
    /// the run when it says stuck (`_watch_goodput`). Set it where the Python runner sets its own, before the
    /// collective begins, for the same order of events. An `Err` if its first sample failed, or a watch is
    /// set already (its samples would go on).
    pub fn watch(&mut self, interval_ns: u64, sampler: Sampler) -> Result<(), String> {
        if self.watch.is_some() {
            return Err("the fabric has a goodput watch already".to_string());
        }
        let mut watch = Watch::new(interval_ns, sampler);
        let more = watch.sample(self.engine.now(), self.frames_received())?;
        if more {
            self.engine.after(watch.interval_ns, Event::Sample);
        }
        self.watch = Some(watch);
        Ok(())
    }

    /// The watch's sample is due: stuck stops the run, else the next sample one interval on.
    fn sample(&mut self) {
        let (now, frames) = (self.engine.now(), self.frames_received());
        let Some(watch) = self.watch.as_mut() else {
            return;
        };
        match watch.sample(now, frames) {
            Ok(true) => {
                let interval = watch.interval_ns;
                self.engine.after(interval, Event::Sample);
            }
            Ok(false) => self.engine.stop(),
            Err(error) => {
                if self.run.failure.is_none() {
                    self.run.failure = Some(format!("simulation: goodput watch: {error}"));
                }
                self.engine.stop();
            }
        }
    }

    /// Whether the goodput watch found the fabric stuck (and stopped the run).
    pub fn stuck(&self) -> bool {
        self.watch.as_ref().is_some_and(|watch| watch.stuck)
    }

    /// RDMA frames the hosts received so far (the watch's measure of progress).
    pub fn frames_received(&self) -> u64 {
        self.hosts.iter().map(|h| h.counters.frames_received).sum()
    }

    /// Each host's time paused so far, all priorities summed (ns, in host order).
    pub fn paused_ns_by_host(&self) -> Vec<u64> {
        let now = self.engine.now();
        self.hosts.iter().map(|h| h.paused_ns(now)).collect()
    }

    /// The PFC watchdogs' figures: storms, restorations, drops, the stormed ports.
    pub fn pfcwd(&self) -> PfcwdFigures {
        let mut figures = PfcwdFigures::default();
        for (s, sw) in self.switches.iter().enumerate() {
            figures.restorations += sw.mmu.watchdog().map_or(0, |wd| wd.restorations);
            for (p, port) in sw.mmu.counters().iter().enumerate() {
                figures.storms += port.iter().map(|c| c.pfcwd_storms).sum::<u64>();
                figures.drops += port.iter().map(|c| c.pfcwd_drops).sum::<u64>();
                if port.iter().any(|c| c.pfcwd_storms > 0) {
                    figures.stormed_ports.push((s as u32, p as u32));
                }
            }
        }
        figures
    }

    /// Port `port` of switch `switch` now (`None` if there is no such port): counters the switch keeps anyway,
    /// read here and not on the frames' path.
    pub fn port_figures(&self, switch: usize, port: usize) -> Option<PortFigures> {
        let sw = self.switches.get(switch)?;
        let counters = sw.mmu.counters().get(port)?;
        let pause = sw.mmu.pause().get(port)?;
        let now = self.engine.now();
        let plane = sw.ib.as_ref();
        Some(PortFigures {
            paused_ns: std::array::from_fn(|priority| pause.paused_time(priority, now)),
            mmu_drops: counters
                .iter()
                .map(|c| c.drops_threshold + c.drops_headroom + c.pfcwd_drops)
                .sum(),
            injected_drops: sw.injected_drops_at(port),
            ib_drops: plane
                .and_then(|p| p.drops(port))
                .map_or(0, |d| d.iter().sum()),
            tx_frames: counters.iter().map(|c| c.tx_frames).sum::<u64>()
                + plane.and_then(|p| p.forwarded(port)).unwrap_or(0),
            tx_bytes: counters.iter().map(|c| c.tx_bytes).sum::<u64>()
                + plane.and_then(|p| p.forwarded_bytes(port)).unwrap_or(0),
            trimmed: counters.iter().map(|c| c.trimmed).sum(),
            pfc_sent: counters.iter().fold((0, 0), |(xoff, xon), c| {
                (xoff + c.pfc_xoff_sent, xon + c.pfc_xon_sent)
            }),
            credit_interval_ns: plane
                .and_then(|p| p.link(port))
                .map(|link| link.min_interval_ns()),
        })
    }

    /// Host `host` now (`None` if there is no such host).
    pub fn host_figures(&self, host: usize) -> Option<HostFigures> {
        let h = self.hosts.get(host)?;
        Some(HostFigures {
            cc: h.cc.as_ref().map(|cc| cc.counters).unwrap_or_default(),
            stall_pfc_sent: h.stall.storm_pfc_sent,
            stall_drops: h.stall.stall_drops,
            credit_interval_ns: h.ib.as_ref().map(|ib| ib.port.credits().min_interval_ns()),
        })
    }
}

/// The verbs name of `value` in a table of (name, value).
fn name<T: PartialEq + Copy>(table: &[(&'static str, T)], value: T) -> &'static str {
    table
        .iter()
        .find(|(_, v)| *v == value)
        .map_or("?", |(n, _)| n)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::pause::PrioritySet;
    use proptest::prelude::*;

    const RATE: u64 = 10_000_000_000;

    fn config() -> MmuConfig {
        MmuConfig {
            buffer: 1 << 22,
            reserve: 1514,
            headroom: 100_000,
            alpha: 1.0,
            threshold: 96_896,
            xon_delta: 3028,
            lossless: PrioritySet::EMPTY.with(3),
            quanta: 65535,
            strict: PrioritySet::EMPTY.with(6).with(7),
            weights: [1; 8],
            mtu_frame: 1514,
            ecn: false,
            kmin: 15_140,
            kmax: 60_560,
            pmax: 0.2,
            vl_buffer: 24_224,
            fc_floor: 500_000,
            pfcwd: None,
            trim: false,
        }
    }

    /// Two hosts on one switch: wires 0 and 1 from the hosts, 2 and 3 from the switch's ports.
    fn star() -> Fabric {
        Fabric::new(star_spec()).unwrap()
    }

    /// [`star`]'s spec (Ethernet), for tests that add to it.
    pub(crate) fn star_spec() -> FabricSpec {
        let mac = |n: u8| [2, 0, 0, 0, n, 0];
        FabricSpec {
            wires: vec![
                (RATE, 1000, Endpoint::Switch { switch: 0, port: 0 }),
                (RATE, 1000, Endpoint::Switch { switch: 0, port: 1 }),
                (RATE, 1000, Endpoint::Host(0)),
                (RATE, 1000, Endpoint::Host(1)),
            ],
            switches: vec![SwitchSpec {
                ports: vec![(mac(10), mac(1), RATE, 2), (mac(11), mac(2), RATE, 3)],
                routes: vec![([10, 0, 0, 1], vec![0]), ([10, 0, 0, 2], vec![1])],
                mmu: config(),
                seed: 1001,
                losses: vec![],
            }],
            hosts: vec![
                HostSpec {
                    mac: mac(1),
                    gateway_mac: mac(10),
                    ip: [10, 0, 0, 1],
                    rate_bps: RATE,
                    wire: 0,
                    cc: None,
                },
                HostSpec {
                    mac: mac(2),
                    gateway_mac: mac(11),
                    ip: [10, 0, 0, 2],
                    rate_bps: RATE,
                    wire: 1,
                    cc: None,
                },
            ],
            ib: None,
            uet: None,
        }
    }

    /// A training step of two ranks: rank 0 computes 1 us, WRITEs 4 KiB to rank 1 and waits for its answer;
    /// rank 1 waits for it, computes 2 us and answers (not blocking), then computes the tail of 500 ns.
    #[test]
    fn a_training_step_runs_op_by_op_with_its_compute() {
        use crate::sim::program::{write, OpSpan, ProgramSend, ProgramStep, RankProgram};
        let op = |first, compute_ns, blocking| OpSpan {
            first,
            steps: 1,
            compute_ns,
            blocking,
        };
        let step = |sends: Vec<ProgramSend>, receives: Vec<u32>| ProgramStep { sends, receives };
        let ranks = vec![
            RankProgram {
                data: 4096,
                staging: 0,
                steps: vec![step(vec![write(1, 4096, 0)], vec![]), step(vec![], vec![1])],
                ops: vec![op(0, 1000, true), op(1, 0, true)],
            },
            RankProgram {
                data: 4096,
                staging: 0,
                steps: vec![step(vec![], vec![0]), step(vec![write(0, 4096, 1)], vec![])],
                ops: vec![op(0, 0, true), op(1, 2000, false)],
            },
        ];
        let mut fabric = star();
        fabric
            .begin_workload(Program::new(ranks, 500).unwrap(), 2, 0, 1024)
            .unwrap();
        while !fabric.advance(None).unwrap() {}
        let records = fabric.take_records();
        assert_eq!(records.len(), 2);
        for record in &records {
            let start = record.summary.start;
            let lines = record.timelines.as_ref().unwrap();
            let (zero, one) = (&lines[0].0, &lines[1].0);
            assert_eq!(
                zero[0].0,
                start + 1000,
                "rank 0 issues its WRITE after its compute"
            );
            assert!(
                zero[0].1 > zero[0].0 + 3000,
                "done when acknowledged: 4 KiB at 10 Gbit/s and back"
            );
            assert_eq!(one[0].0, start, "rank 1 waits from the start");
            assert!(
                one[0].1 < zero[0].1,
                "the data arrives before its acknowledgement does"
            );
            assert_eq!(
                one[1].0,
                one[0].1 + 2000,
                "rank 1 answers after 2 us of compute"
            );
            assert_eq!(
                zero[1].0, zero[0].1,
                "rank 0 waits for the answer once its WRITE is done"
            );
            assert!(zero[1].1 > one[1].0 + 3000, "and has it a link time later");
            // rank 1's answer does not block: its compute goes on to the tail, then it waits for the answer
            assert_eq!(lines[1].1, (one[1].0 + 500).max(one[1].1));
            assert_eq!(
                lines[0].1,
                zero[1].1 + 500,
                "rank 0's tail follows its blocking receive"
            );
        }
    }

    /// Two ranks each WRITE and receive in both steps of one collective, as a ring's do: a WRITE's
    /// completion that comes after the next step was posted does not post it again (the rank would wait for
    /// a completion that never comes).
    #[test]
    fn a_ring_step_of_a_training_step_is_posted_once() {
        use crate::sim::program::{write, OpSpan, ProgramStep, RankProgram};
        let rank = |peer| RankProgram {
            data: 4096,
            staging: 0,
            steps: (0..2)
                .map(|k| ProgramStep {
                    sends: vec![write(peer, 4096, k)],
                    receives: vec![peer],
                })
                .collect(),
            ops: vec![OpSpan {
                first: 0,
                steps: 2,
                compute_ns: 0,
                blocking: true,
            }],
        };
        let program = Program::new(vec![rank(1), rank(0)], 0).unwrap();
        let mut fabric = star();
        fabric
            .begin_run(RunPlan::Workload(Arc::new(program)), 3, 0, 1024, true)
            .unwrap();
        while !fabric.advance(None).unwrap() {}
        let records = fabric.take_records();
        assert_eq!(records.len(), 3);
        for record in records {
            let raw = record.raw.unwrap();
            assert!(raw
                .reports
                .iter()
                .all(|r| r.sends.len() == 2 && r.arrivals.len() == 2));
        }
    }

    /// An arrival that completes the first step of a training step's next collective while its rank still
    /// waits for its last WRITE's acknowledgement: the step's own WRITEs are posted before the rank moves on
    /// (once it skipped them, and its peer waited for ever).
    #[test]
    fn an_early_arrival_does_not_skip_a_collectives_first_writes() {
        use crate::sim::program::{write, OpSpan, ProgramSend, ProgramStep, RankProgram};
        let op = |first| OpSpan {
            first,
            steps: 1,
            compute_ns: 0,
            blocking: true,
        };
        let step = |sends: Vec<ProgramSend>, receives: Vec<u32>| ProgramStep { sends, receives };
        let ranks = vec![
            RankProgram {
                data: 65536,
                staging: 0,
                // a long WRITE (its acknowledgement comes late), then a short one that rank 1 waits for
                steps: vec![
                    step(vec![write(1, 65536, 0)], vec![]),
                    step(vec![write(1, 64, 1)], vec![1]),
                ],
                ops: vec![op(0), op(1)],
            },
            RankProgram {
                data: 65536,
                staging: 0,
                // its short WRITE reaches rank 0 long before rank 0's first collective is done
                steps: vec![step(vec![write(0, 64, 1)], vec![0]), step(vec![], vec![0])],
                ops: vec![op(0), op(1)],
            },
        ];
        let mut fabric = star();
        fabric
            .begin_run(
                RunPlan::Workload(Arc::new(Program::new(ranks, 0).unwrap())),
                2,
                0,
                1024,
                true,
            )
            .unwrap();
        while !fabric.advance(None).unwrap() {}
        for record in fabric.take_records() {
            let raw = record.raw.unwrap();
            assert_eq!(raw.reports[0].sends.len(), 2);
            assert_eq!(raw.reports[1].arrivals.len(), 2);
            let lines = record.timelines.unwrap();
            assert!(
                lines[0].0[1].0 >= lines[0].0[0].1,
                "the second collective begins when the first is done"
            );
        }
    }

    /// Rank 1 WRITEs `length` bytes into rank 0: an incast of two.
    pub(crate) fn one_write(length: u64) -> Plans {
        Plans::new("incast", 2, length, None).unwrap()
    }

    /// `plans` run whole on `fabric`: per iteration its start and the ranks' reports.
    pub(crate) fn run_raw(
        fabric: &mut Fabric,
        plans: Plans,
        iterations: u32,
        warmup: u32,
        mtu: u32,
    ) -> Result<Vec<(u64, RawIteration)>, String> {
        fabric.begin_collective(plans, iterations, warmup, mtu, true)?;
        while !fabric.advance(None)? {}
        Ok(fabric
            .take_records()
            .into_iter()
            .filter_map(|record| Some((record.summary.start, record.raw?)))
            .collect())
    }

    #[test]
    fn a_write_crosses_the_switch_in_serialization_plus_delay() {
        let mut fabric = star();
        let incast = Plans::new("incast", 2, 1024, None).unwrap(); // rank 1 WRITEs 1 KiB into rank 0
        fabric.begin_collective(incast, 2, 0, 1024, true).unwrap();
        while !fabric.advance(Some(7)).unwrap() {}
        let records = fabric.take_records();
        assert_eq!(records.len(), 2);
        let first = &records[0].summary;
        // One WRITE only with immediate of 1024 B (Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16, ImmDt 4, ICRC 4:
        // 1102 B) on two wires of 1 us.
        let frame_ns = crate::sim::wire::serialization_ns(1102, RATE);
        assert_eq!(first.last - first.start, 2 * (frame_ns + 1000));
        assert_eq!((first.last_src, first.last_dst), (1, 0));
        assert_eq!(first.flows.bytes, vec![1024]);
        assert_eq!(fabric.totals().drops, 0);
        assert!(records[1].summary.start > first.start);
        let raw = records[0].raw.as_ref().unwrap();
        assert_eq!(raw.reports[0].arrivals, vec![(1, 0, first.last)]);
        assert_eq!(raw.reports[1].sends.len(), 1);
        assert_eq!(fabric.progress(), (2, 2, 1, 1));
    }

    #[test]
    fn a_frame_holds_the_switch_buffer_until_its_last_bit_has_left() {
        let mut fabric = star();
        fabric
            .begin_collective(one_write(1024), 1, 0, 1024, true)
            .unwrap();
        let frame_ns = crate::sim::wire::serialization_ns(1102, RATE);
        // h2's frame is in the switch from its last bit's arrival (1 us of h2's wire after it) until its last
        // bit has left the switch's port to h1, a frame time later; the reserve is what an idle port holds.
        let held = |fabric: &Fabric| -> i64 {
            (0..PRIORITIES)
                .map(|p| fabric.switches[0].mmu.ingress_bytes(1, p))
                .sum()
        };
        let idle = held(&fabric);
        let mut seen = Vec::new();
        while !fabric.advance(Some(1)).unwrap() {
            seen.push((fabric.engine.now(), held(&fabric) > idle));
        }
        let start = fabric.take_records()[0].summary.start;
        let (arrives, leaves) = (start + frame_ns + 1000, start + 2 * frame_ns + 1000);
        assert!(
            seen.iter().any(|&(at, holds)| at == arrives && holds),
            "{seen:?}"
        );
        assert!(
            seen.iter()
                .all(|&(at, holds)| holds == (arrives..leaves).contains(&at)),
            "{seen:?}"
        );
    }

    #[test]
    fn a_ring_allreduce_adds_up_in_simulated_memory() {
        let mut fabric = star();
        let plans = Plans::new("allreduce", 2, 4096, None).unwrap();
        let records = fabric.run_collective(plans, 2, 1, 1024).unwrap();
        assert_eq!(records.len(), 3);
        assert!(records
            .iter()
            .all(|r| r.summary.verified && r.raw.is_none()));
        assert_eq!(records[0].summary.flows.bytes, vec![4096, 4096]); // 2 steps of 2 KiB each way
        assert!(fabric.hosts.iter().all(|h| h.memory.data().is_empty())); // released once the run ended
    }

    #[test]
    fn plans_for_other_hosts_are_refused() {
        let mut fabric = star();
        let plans = Plans::new("incast", 3, 1024, None).unwrap();
        assert!(fabric.run_collective(plans, 1, 0, 1024).is_err());
    }

    #[test]
    fn a_stalled_receiver_takes_the_write_when_it_resumes_after_pausing_its_port() {
        let mut fabric = star();
        fabric
            .set_faults(vec![Fault {
                host: 0,
                at_ns: 0,
                duration_ns: Some(1_000_000),
            }])
            .unwrap();
        let records = run_raw(&mut fabric, one_write(1024), 1, 0, 1024).unwrap();
        let [(_, _, stamp)] = records[0].1.reports[0].arrivals[..] else {
            panic!("one arrival expected");
        };
        // The switch held it, its port to host 0 paused: it goes when the XON of the resume (1 ms) arrived.
        let xon_ns = crate::sim::wire::serialization_ns(60, RATE);
        let frame_ns = crate::sim::wire::serialization_ns(1102, RATE);
        assert_eq!(
            stamp - records[0].0,
            1_000_000 + xon_ns + 1000 + frame_ns + 1000
        );
        assert_eq!(fabric.faults.injected, 1);
        // XOFF and XON (the refresh, at half of 65535 quanta at 10 Gbit/s, would come after 1.68 ms).
        assert_eq!(fabric.totals().host_pfc_sent, 2);
        assert_eq!(fabric.hosts[0].stall.stall_drops, 0);
        let port = fabric.switches[0].mmu.counters()[0];
        assert!(port.iter().all(|c| c.pfcwd_storms == 0));
        // The XOFF and the XON both crossed the same wire: the port to host 0 held priority 3 (lossless) for
        // the stall's 1 ms exactly, nothing else and no other port.
        let figures = fabric.port_figures(0, 0).unwrap();
        let mut paused = [0; PRIORITIES];
        paused[3] = 1_000_000;
        assert_eq!(figures.paused_ns, paused);
        assert_eq!(
            fabric.port_figures(0, 1).unwrap().paused_ns,
            [0; PRIORITIES]
        );
        assert_eq!((figures.mmu_drops, figures.injected_drops), (0, 0));
        assert_eq!(figures.credit_interval_ns, None); // Ethernet
        assert!(fabric.port_figures(0, 2).is_none() && fabric.port_figures(1, 0).is_none());
        let host = fabric.host_figures(0).unwrap();
        assert_eq!((host.stall_pfc_sent, host.stall_drops), (2, 0));
        // No DCQCN, no IB port.
        assert_eq!(
            (host.cc, host.credit_interval_ns),
            (CcCounters::default(), None)
        );
        assert!(fabric.host_figures(2).is_none());
    }

    #[test]
    fn faults_wait_for_the_measured_iterations_and_name_real_hosts() {
        let mut fabric = star();
        assert!(fabric
            .set_faults(vec![Fault {
                host: 2,
                at_ns: 0,
                duration_ns: None
            }])
            .is_err());
        fabric
            .set_faults(vec![Fault {
                host: 0,
                at_ns: 0,
                duration_ns: Some(1000),
            }])
            .unwrap();
        fabric.run_collective(one_write(1024), 2, 1, 1024).unwrap();
        assert_eq!(fabric.faults.injected, 2);
        assert_eq!(fabric.totals().host_pfc_sent, 4);
    }

    #[test]
    fn an_injected_drop_is_counted_and_the_write_resent() {
        let mut spec = star_spec();
        let loss = |drop: Vec<u64>| PortLoss {
            host_facing: true,
            loss: 0.0,
            drop,
            seed: vec![1001],
        };
        spec.switches[0].losses = vec![loss(vec![]), loss(vec![1])]; // the sender's first frame
        let mut fabric = Fabric::new(spec).unwrap();
        let records = run_raw(&mut fabric, one_write(1024), 1, 0, 1024).unwrap();
        // Frame 1 of each direction of the sender's link: its WRITE, then the ACK of the WRITE resent.
        assert_eq!(fabric.totals().drops, 2);
        assert_eq!(fabric.switches[0].injected_drops(), 2);
        let figures = |port| fabric.port_figures(0, port).unwrap();
        assert_eq!(
            (figures(0).injected_drops, figures(1).injected_drops),
            (0, 2)
        );
        assert_eq!(figures(1).mmu_drops, 0);
        assert_eq!(records[0].1.reports[1].counters, vec![(0, 2, 2)]); // resent after each timeout
        let mut lossless = star_spec();
        lossless.switches[0].losses = vec![PortLoss::default(), PortLoss::default()];
        let mut fabric = Fabric::new(lossless).unwrap();
        fabric.run_collective(one_write(1024), 1, 0, 1024).unwrap();
        assert_eq!(fabric.totals().drops, 0);
        let mut short = star_spec();
        short.switches[0].losses = vec![PortLoss::default()];
        assert!(Fabric::new(short).is_err());
    }

    #[test]
    fn the_watch_stops_a_stuck_run_at_its_sample() {
        let mut fabric = star();
        fabric
            .set_faults(vec![Fault {
                host: 0,
                at_ns: 0,
                duration_ns: None,
            }])
            .unwrap();
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&samples);
        let sampler = Box::new(move |now: u64, frames: u64| {
            seen.lock().unwrap().push((now, frames));
            Ok(now >= 40_000_000)
        });
        fabric.watch(15_000_000, sampler).unwrap();
        fabric
            .begin_collective(one_write(1024), 1, 0, 1024, false)
            .unwrap();
        while !fabric.advance(Some(7)).unwrap() {}
        assert!(fabric.stuck() && fabric.take_records().is_empty());
        assert_eq!(fabric.engine.now(), 45_000_000);
        let samples = samples.lock().unwrap().clone();
        assert_eq!(
            samples,
            vec![(0, 0), (15_000_000, 0), (30_000_000, 0), (45_000_000, 0)]
        );
        assert!(fabric.advance(None).unwrap()); // over: nothing more runs
        assert_eq!(fabric.engine.now(), 45_000_000);
    }

    #[test]
    fn a_failing_sampler_ends_the_run_with_its_message() {
        let mut fabric = star();
        let sampler = Box::new(|now: u64, _: u64| match now {
            0 => Ok(false),
            _ => Err("no tracker".to_string()),
        });
        fabric.watch(1000, sampler).unwrap();
        let error = fabric
            .run_collective(one_write(1024), 1, 0, 1024)
            .unwrap_err();
        assert_eq!(error, "simulation: goodput watch: no tracker");
        assert!(!fabric.stuck());
        assert!(fabric.watch(1000, Box::new(|_, _| Ok(false))).is_err()); // one watch per fabric
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Stalls at any time for any while (or for good), injected loss and drops, with or without DCQCN: a run
        /// ends with every iteration, or with the transport's failure (retries run out), never a panic; the
        /// totals' drops are the injected ones, every fault of the measured iterations is injected.
        #[test]
        fn faults_and_loss_end_a_run_cleanly(
            stalls in proptest::collection::vec((0u32..2, 0u64..3_000_000, proptest::option::of(1u64..2_000_000)), 0..4),
            drop in proptest::collection::vec(1u64..20, 0..5),
            loss in 0.0f64..0.3,
            dcqcn in any::<bool>(),
        ) {
            let mut spec = star_spec();
            let lossy = PortLoss { host_facing: true, loss, drop, seed: vec![7] };
            spec.switches[0].losses = vec![lossy.clone(), lossy];
            for host in &mut spec.hosts {
                host.cc = dcqcn.then(DcqcnParams::default);
            }
            let mut fabric = Fabric::new(spec).unwrap();
            let faults: Vec<Fault> = stalls
                .iter()
                .map(|&(host, at_ns, duration_ns)| Fault { host, at_ns, duration_ns })
                .collect();
            fabric.set_faults(faults).unwrap();
            match fabric.run_collective(one_write(8192), 2, 1, 1024) {
                Ok(records) => prop_assert_eq!(records.len(), 3),
                Err(error) => prop_assert!(error.contains("RETRY_EXC_ERR"), "{}", error),
            }
            let totals = fabric.totals();
            prop_assert_eq!(totals.drops, fabric.switches[0].injected_drops()); // a lossless MMU drops none
            let measured = u64::from(fabric.run.iteration); // iterations 1 and 2 are measured
            prop_assert_eq!(fabric.faults.injected, measured * stalls.len() as u64);
        }

        #[test]
        fn any_frame_from_the_wire_is_counted_never_a_panic(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..20),
            prefix in prop_oneof![Just(vec![0x08u8, 0x00, 0x45]), Just(vec![0x88, 0x08, 0x01, 0x01]), Just(vec![])],
        ) {
            let mut fabric = star();
            for (i, mut frame) in frames.into_iter().enumerate() {
                if frame.len() >= 12 + prefix.len() {
                    frame[12..12 + prefix.len()].copy_from_slice(&prefix);
                }
                let wire = (i % 4) as u32;
                fabric.deliver(wire, frame.into());
            }
            let mut run = fabric.engine.start_run(None, Some(10_000));
            while let Some(event) = fabric.engine.next_event(&mut run) {
                fabric.dispatch(event);
            }
            fabric.engine.end_run(run);
        }
    }
}
