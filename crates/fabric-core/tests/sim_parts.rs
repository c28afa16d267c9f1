//! The simulator's parts the Python bindings do not expose, against closed forms: a host's transmit queue on
//! its wire, one switch under an incast of raw frames, RDMA writes through it, a leaf-spine's routes, an IB
//! switch's plane under an incast. These are the behaviours the Python simulator's unit tests pinned
//! (tests/unit/test_sim_link.py, test_sim_switch.py, test_sim_host.py, test_sim_fabric.py,
//! test_sim_collective.py) before the compiled simulator became the only one; what the bindings expose is
//! still tested from Python.
// The helpers here are test code outside #[test] functions, where clippy.toml's allowances do not reach.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use fabric_core::model::credits::BLOCK;
use fabric_core::model::ib_plane::IbPlaneConfig;
use fabric_core::model::mmu::{Mmu, MmuConfig};
use fabric_core::model::pause::PrioritySet;
use fabric_core::model::rdma_params::message_wire_bytes;
use fabric_core::model::rng::CpythonRandom;
use fabric_core::model::spray::SprayPolicy;
use fabric_core::model::uet::UetSpec;
use fabric_core::sim::engine::Engine;
use fabric_core::sim::fabric::{Event, Fabric, FabricSpec, HostSpec, SwitchSpec};
use fabric_core::sim::host::SimHost;
use fabric_core::sim::ib::{IbHostSpec, IbSpec, IbSwitchSpec};
use fabric_core::sim::plans::Plans;
use fabric_core::sim::switch::{SimSwitch, SwitchPort};
use fabric_core::sim::wire::{serialization_ns, Endpoint, Wire};
use fabric_core::wire::mac::Mac;
use fabric_core::wire::pfc::{
    decode_pfc, encode_pfc, pause_ns, PfcQuanta, ETHERTYPE_MAC_CONTROL, PRIORITIES,
};
use fabric_core::wire::roce::{Framer, DATA_DSCP};
use fabric_core::wire::transport::{opcode, Packet};
use proptest::prelude::*;

const GBIT: u64 = 1_000_000_000;
const MIB: u64 = 1 << 20;
/// The lossless priority, RoCE's (DSCP 26).
const ROCE: usize = 3;

fn host_mac(i: usize) -> Mac {
    [2, 0, 0, 0, 0, i as u8 + 1]
}

fn port_mac(i: usize) -> Mac {
    [2, 0, 0, 0, 1, i as u8 + 1]
}

fn host_ip(i: usize) -> [u8; 4] {
    [10, 0, 0, i as u8 + 1]
}

/// The MMU the Python switch model's `derive_config` gives a switch of 1500-byte links with `buffer` and
/// `headroom` overridden (`lossless` empty on a lossy fabric).
fn mmu_config(buffer: i64, headroom: i64, lossless: bool) -> MmuConfig {
    MmuConfig {
        buffer,
        reserve: 1514,
        headroom,
        alpha: 1.0,
        threshold: 96_896,
        xon_delta: 3028,
        lossless: if lossless {
            PrioritySet::EMPTY.with(ROCE)
        } else {
            PrioritySet::EMPTY
        },
        quanta: 65535,
        strict: PrioritySet::EMPTY.with(6).with(7),
        weights: [1; PRIORITIES],
        mtu_frame: 1514,
        ecn: true,
        kmin: 15_140,
        kmax: 60_560,
        pmax: 0.2,
        vl_buffer: 24_224,
        fc_floor: 500_000,
        pfcwd: None,
        trim: false,
    }
}

fn is_pfc(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&ETHERTYPE_MAC_CONTROL.to_be_bytes()[..])
}

/// Hosts' transmit queues on wires, with or without one switch between them, driven event by event as the
/// fabric drives them; a frame other than PFC that reaches a host is kept with its arrival time.
struct Rig {
    engine: Engine<Event>,
    wires: Vec<Wire>,
    hosts: Vec<SimHost>,
    switch: Option<SimSwitch>,
    arrivals: Vec<Vec<(u64, Vec<u8>)>>,
    /// PFC frames each host took.
    pauses: Vec<u64>,
}

impl Rig {
    /// One host whose wire of `rate_bps` and `delay_ns` ends nowhere but in `arrivals[0]`.
    fn one_wire(rate_bps: u64, delay_ns: u64) -> Rig {
        Rig {
            engine: Engine::new(),
            wires: vec![Wire::new(rate_bps, delay_ns, Endpoint::Host(0))],
            hosts: vec![SimHost::new(
                host_mac(0),
                port_mac(0),
                host_ip(0),
                0,
                rate_bps,
                1,
            )],
            switch: None,
            arrivals: vec![Vec::new()],
            pauses: vec![0],
        }
    }

    /// One switch and `hosts` hosts at `rate_bps`: host i sends on wire i to port i, port i on wire
    /// `hosts + i` to host i.
    fn star(hosts: usize, rate_bps: u64, config: MmuConfig) -> Rig {
        let mut engine = Engine::new();
        let mut wires: Vec<Wire> = (0..hosts)
            .map(|i| {
                let port = i as u32;
                Wire::new(rate_bps, 0, Endpoint::Switch { switch: 0, port })
            })
            .collect();
        wires.extend((0..hosts).map(|i| Wire::new(rate_bps, 0, Endpoint::Host(i as u32))));
        let ports = (0..hosts)
            .map(|i| SwitchPort {
                mac: port_mac(i),
                peer_mac: host_mac(i),
                wire: (hosts + i) as u32,
            })
            .collect();
        let routes = (0..hosts).map(|i| (host_ip(i), vec![i as u32])).collect();
        let mmu = Mmu::new(
            config,
            vec![rate_bps; hosts],
            CpythonRandom::from_int_seed(&[1]),
        )
        .unwrap();
        let mut switch = SimSwitch::new(0, &mut engine, ports, routes, mmu, 1);
        switch.start(0, &mut engine, &mut wires);
        let hosts_made = (0..hosts)
            .map(|i| SimHost::new(host_mac(i), port_mac(i), host_ip(i), i as u32, rate_bps, 1))
            .collect();
        Rig {
            engine,
            wires,
            hosts: hosts_made,
            switch: Some(switch),
            arrivals: vec![Vec::new(); hosts],
            pauses: vec![0; hosts],
        }
    }

    /// `frame` into host `host`'s queue at `priority`, the queue told (the RNIC's enqueue).
    fn enqueue(&mut self, host: usize, frame: Vec<u8>, priority: usize) {
        let h = &mut self.hosts[host];
        h.queue.queues[priority].push_back(frame.into());
        let free_at = self.wires[h.queue.wire as usize].free_at;
        h.queue
            .kick(&mut self.engine, free_at, Event::QueueSend(host as u32));
    }

    /// A PFC frame of `quanta` reaches host `host` now.
    fn pfc(&mut self, host: usize, quanta: &PfcQuanta) {
        let frame = encode_pfc(&port_mac(host), quanta);
        self.hosts[host].receive(host as u32, &mut self.engine, &mut self.wires, &frame);
    }

    /// Runs every event up to `until` (all if `None`).
    fn run(&mut self, until: Option<u64>) {
        let Rig {
            engine,
            wires,
            hosts,
            switch,
            arrivals,
            pauses,
        } = self;
        engine.run(until, None, |engine, event| match event {
            Event::Deliver(wire) => {
                let frame = wires[wire as usize].arrive().expect("a frame on the wire");
                match wires[wire as usize].to {
                    Endpoint::Switch { port, .. } => {
                        let sw = switch.as_mut().expect("a switch");
                        sw.receive(0, engine, wires, port as usize, frame);
                    }
                    Endpoint::Host(h) => {
                        // The whole frame, its payload read from its sender's memory if it stayed there.
                        let sender = frame.payload_host().map(|s| &hosts[s as usize].memory);
                        let whole = frame.whole(sender, &mut Vec::new()).to_vec();
                        if is_pfc(&whole) {
                            pauses[h as usize] += 1;
                            hosts[h as usize].receive(h, engine, wires, &whole);
                        } else {
                            arrivals[h as usize].push((engine.now(), whole));
                        }
                    }
                }
            }
            Event::QueueSend(h) => hosts[h as usize].queue_send(h, engine, wires),
            Event::SwitchTimer(_) => switch
                .as_mut()
                .expect("a switch")
                .on_timer(0, engine, wires),
            Event::WireFree { port, .. } => {
                let sw = switch.as_mut().expect("a switch");
                sw.wire_free(0, engine, wires, port as usize);
            }
            other => panic!("no such event in this rig: {other:?}"),
        });
    }
}

fn quanta(priority: usize, value: u16) -> PfcQuanta {
    let mut quanta = [None; PRIORITIES];
    quanta[priority] = Some(value);
    quanta
}

// --- A host's transmit queue on its wire (test_sim_link.py) ---

#[test]
fn one_flow_takes_its_link_time_plus_the_cable() {
    for (frames, size, rate_bps, delay_ns) in [
        (1usize, 1000usize, GBIT, 0u64),
        (100, 4158, 20_000_000, 5000),
        (7, 61, 400 * GBIT, 1),
    ] {
        let mut rig = Rig::one_wire(rate_bps, delay_ns);
        for i in 0..frames {
            rig.enqueue(0, vec![(i % 256) as u8; size], ROCE);
        }
        rig.run(None);
        let each = (size as u64 * 8 * GBIT).div_ceil(rate_bps); // bytes x 8 / rate, rounded up per frame
        let times: Vec<u64> = rig.arrivals[0].iter().map(|(t, _)| *t).collect();
        let expected: Vec<u64> = (1..=frames as u64).map(|k| k * each + delay_ns).collect();
        assert_eq!(times, expected);
        let order: Vec<u8> = rig.arrivals[0].iter().map(|(_, f)| f[0]).collect();
        assert_eq!(
            order,
            (0..frames).map(|i| (i % 256) as u8).collect::<Vec<_>>()
        ); // in order
        assert_eq!(
            (rig.wires[0].frames, rig.wires[0].bytes),
            (frames as u64, (frames * size) as u64)
        );
    }
}

#[test]
fn strict_priority_from_seven_down() {
    let mut rig = Rig::one_wire(GBIT, 0);
    for p in [0usize, 3, 7, 3] {
        rig.enqueue(0, vec![p as u8; 100], p);
    }
    rig.run(None);
    let order: Vec<u8> = rig.arrivals[0].iter().map(|(_, f)| f[0]).collect();
    assert_eq!(order, vec![7, 3, 3, 0]); // the queue looks once this instant's frames are in
    let now = rig.engine.now();
    rig.enqueue(0, vec![0; 100], 0);
    rig.run(Some(now + 1));
    rig.enqueue(0, vec![7; 100], 7);
    rig.run(None);
    let order: Vec<u8> = rig.arrivals[0][4..].iter().map(|(_, f)| f[0]).collect();
    assert_eq!(order, vec![0, 7]); // 0 was on the wire when 7 came: it finishes first
}

#[test]
fn a_pause_holds_its_priority_q_quanta_and_lets_the_others_go() {
    let mut rig = Rig::one_wire(10 * GBIT, 0);
    rig.pfc(0, &quanta(3, 1000)); // at t = 0
    rig.enqueue(0, vec![3; 1000], 3);
    rig.enqueue(0, vec![5; 1000], 5);
    rig.run(None);
    let held = pause_ns(1000, 10 * GBIT); // 1000 x 512 bit times at 10 Gbit/s: 51.2 us
    assert_eq!(held, 51_200);
    let frame_ns = serialization_ns(1000, 10 * GBIT);
    assert_eq!(
        rig.arrivals[0],
        vec![(frame_ns, vec![5; 1000]), (held + frame_ns, vec![3; 1000])]
    );
    assert_eq!(rig.hosts[0].counters.pauses, 1);
}

#[test]
fn xon_resumes_at_once_and_a_frame_on_the_wire_finishes() {
    let mut rig = Rig::one_wire(GBIT, 0);
    rig.enqueue(0, vec![b'a'; 1250], ROCE); // 10 us on the wire from t = 0
    rig.run(Some(5_000));
    rig.pfc(0, &quanta(ROCE, 65535)); // mid-frame: that frame still finishes
    rig.enqueue(0, vec![b'b'; 1250], ROCE);
    rig.run(Some(30_000));
    rig.pfc(0, &quanta(ROCE, 0)); // XON
    rig.run(None);
    assert_eq!(
        rig.arrivals[0],
        vec![(10_000, vec![b'a'; 1250]), (40_000, vec![b'b'; 1250])]
    );
}

// --- One switch under an incast of raw frames (test_sim_switch.py) ---

const PAYLOAD: usize = 1024;

/// `count` RoCE WRITE_MIDDLE frames of PAYLOAD bytes from host `i` to host `to`, through the switch.
fn frames_from(i: usize, to: usize, count: u32) -> Vec<Vec<u8>> {
    let mut framer = Framer::new(
        host_mac(i),
        port_mac(i),
        host_ip(i),
        host_ip(to),
        49152 + i as u16,
        DATA_DSCP,
        64,
    )
    .unwrap();
    (0..count)
        .map(|k| {
            let mut packet = Packet::new(opcode::WRITE_MIDDLE, 0x11, k);
            packet.payload = vec![0; PAYLOAD];
            let mut out = Vec::new();
            framer.encode(&packet, &mut out).unwrap();
            out
        })
        .collect()
}

/// Three hosts send 300 frames each to host 0 through a switch of 200 KiB at 1 Gbit/s.
fn incast(config: MmuConfig) -> (Rig, usize, usize) {
    let (senders, count) = (3, 300);
    let mut rig = Rig::star(senders + 1, GBIT, config);
    let mut size = 0;
    for i in 1..=senders {
        for frame in frames_from(i, 0, count as u32) {
            size = frame.len();
            rig.enqueue(i, frame, ROCE);
        }
    }
    rig.run(None);
    (rig, senders * count, size)
}

fn mmu_sum(rig: &Rig, counter: impl Fn(&fabric_core::model::mmu::Counters) -> u64) -> u64 {
    let sw = rig.switch.as_ref().unwrap();
    sw.mmu.counters().iter().flatten().map(counter).sum()
}

#[test]
fn a_lossless_incast_takes_n_times_its_link_time_and_drops_nothing() {
    let (rig, sent, size) = incast(mmu_config(200 * 1024, 20 * 1024, true));
    assert_eq!(rig.arrivals[0].len(), sent); // every frame, none dropped
    let sw = rig.switch.as_ref().unwrap();
    assert_eq!(sw.mmu.counters()[0][ROCE].drops_headroom, 0);
    assert_eq!(sw.dropped.total(), 0);
    assert!(mmu_sum(&rig, |c| c.pfc_xoff_sent) > 0 && rig.pauses.iter().sum::<u64>() > 0); // PFC worked
    let frame_ns = serialization_ns(size, GBIT);
    let bound = sent as u64 * frame_ns; // the receiver's link, busy end to end
    let last = rig.arrivals[0].last().unwrap().0;
    assert!(
        bound < last && last <= bound + 2 * frame_ns,
        "{last} {bound}"
    );
}

#[test]
fn the_same_incast_on_a_lossy_fabric_drops() {
    let (rig, sent, _) = incast(mmu_config(200 * 1024, 1_257_570, false));
    let dropped = mmu_sum(&rig, |c| c.drops_threshold);
    assert!(dropped > 0);
    assert_eq!(rig.arrivals[0].len() as u64, sent as u64 - dropped);
    assert_eq!(rig.pauses.iter().sum::<u64>(), 0);
}

// --- RDMA writes through a switch (test_sim_host.py) and a leaf-spine's routes (test_sim_fabric.py) ---

/// A node: ('s', switch index) or ('h', host index).
type Node = (char, usize);
/// A switch: its ports as (peer node, its port there), its routes as (host, egress ports).
type SwitchAt = (Vec<(Node, usize)>, Vec<(usize, Vec<u32>)>);

/// A fabric of `switches` (each its ports as (peer node, its port there), its routes as (host, ports)) and
/// `hosts` (each its switch and port), every link at `rate_bps` with `delay_ns` each way; node names are
/// ("s", i) and ("h", i).
struct Topology {
    switches: Vec<SwitchAt>,
    hosts: Vec<(usize, usize)>,
    rate_bps: u64,
    delay_ns: u64,
    config: MmuConfig,
}

impl Topology {
    /// The fabric, Ethernet.
    fn fabric(&self) -> Fabric {
        self.fabric_with(None)
    }

    /// The fabric, IB with `ib`'s subnet.
    fn fabric_with(&self, ib: Option<IbSpec>) -> Fabric {
        Fabric::new(self.spec_with(ib)).unwrap()
    }

    /// The fabric's spec, IB with `ib`'s subnet. Wire of (node, port): a switch's port k is wire
    /// `offset(s) + k`, a host's after every switch port.
    fn spec_with(&self, ib: Option<IbSpec>) -> FabricSpec {
        let offsets: Vec<usize> = self
            .switches
            .iter()
            .scan(0, |at, (ports, _)| {
                let here = *at;
                *at += ports.len();
                Some(here)
            })
            .collect();
        let switch_ports: usize = self.switches.iter().map(|(ports, _)| ports.len()).sum();
        let wire_of = |(kind, index): Node, port: usize| -> u32 {
            if kind == 's' {
                (offsets[index] + port) as u32
            } else {
                (switch_ports + index) as u32
            }
        };
        let mut wires = Vec::new();
        for (s, (ports, _)) in self.switches.iter().enumerate() {
            for (k, &((kind, peer), peer_port)) in ports.iter().enumerate() {
                let to = if kind == 's' {
                    Endpoint::Switch {
                        switch: peer as u32,
                        port: peer_port as u32,
                    }
                } else {
                    Endpoint::Host(peer as u32)
                };
                assert_eq!(wire_of(('s', s), k) as usize, wires.len());
                wires.push((self.rate_bps, self.delay_ns, to));
            }
        }
        for &(switch, port) in &self.hosts {
            let to = Endpoint::Switch {
                switch: switch as u32,
                port: port as u32,
            };
            wires.push((self.rate_bps, self.delay_ns, to));
        }
        let mac = |(kind, index): Node, port: usize| -> Mac {
            [2, u8::from(kind == 's'), 0, index as u8, port as u8, 1]
        };
        let switches = self
            .switches
            .iter()
            .enumerate()
            .map(|(s, (ports, routes))| SwitchSpec {
                ports: ports
                    .iter()
                    .enumerate()
                    .map(|(k, &(peer, peer_port))| {
                        (
                            mac(('s', s), k),
                            mac(peer, peer_port),
                            self.rate_bps,
                            wire_of(('s', s), k),
                        )
                    })
                    .collect(),
                routes: routes
                    .iter()
                    .map(|(h, out)| (host_ip(*h), out.clone()))
                    .collect(),
                mmu: self.config.clone(),
                seed: 1001 + s as u64,
                losses: vec![],
            })
            .collect();
        let hosts = self
            .hosts
            .iter()
            .enumerate()
            .map(|(h, &(switch, port))| HostSpec {
                mac: mac(('h', h), 0),
                gateway_mac: mac(('s', switch), port),
                ip: host_ip(h),
                rate_bps: self.rate_bps,
                wire: wire_of(('h', h), 0),
                cc: None,
            })
            .collect();
        FabricSpec {
            wires,
            switches,
            hosts,
            ib,
            uet: None,
        }
    }
}

/// One switch with `hosts` hosts, host i on port i.
fn rdma_star(hosts: usize, rate_bps: u64, config: MmuConfig) -> Fabric {
    Topology {
        switches: vec![(
            (0..hosts).map(|i| (('h', i), 0)).collect(),
            (0..hosts).map(|i| (i, vec![i as u32])).collect(),
        )],
        hosts: (0..hosts).map(|i| (0, i)).collect(),
        rate_bps,
        delay_ns: 0,
        config,
    }
    .fabric()
}

/// Every host but host 0 WRITEs `length` bytes into host 0 once (path MTU `mtu`): that iteration's time (its
/// last WRITE's arrival), retransmissions and whether it checked out.
fn write_incast(fabric: &mut Fabric, hosts: u32, length: u64, mtu: u32) -> (u64, u64, bool) {
    let plans = Plans::new("incast", hosts, length, None).unwrap();
    let records = fabric.run_collective(plans, 1, 0, mtu).unwrap();
    let summary = &records[0].summary;
    assert!(summary.flows.bytes.iter().all(|&b| b == length));
    assert_eq!(summary.flows.bytes.len(), hosts as usize - 1);
    (
        summary.last - summary.start,
        summary.retransmissions,
        summary.verified,
    )
}

#[test]
fn one_write_takes_its_link_time() {
    let mut fabric = rdma_star(2, GBIT, mmu_config(400 * 1024, 40 * 1024, true));
    let (time, retransmissions, verified) = write_incast(&mut fabric, 2, MIB, 1024);
    assert!(verified && retransmissions == 0);
    let link_ns = message_wire_bytes(MIB, 1024, false) * 8; // at 1 Gbit/s: ns = bits
                                                            // The data's link time and one frame more through the switch: within 2% of it.
    assert!(
        link_ns < time && time * 100 < link_ns * 102,
        "{time} {link_ns}"
    );
}

#[test]
fn an_n_to_1_rdma_incast_on_lossless_takes_n_link_times_and_drops_nothing() {
    let senders = 3;
    let mut fabric = rdma_star(senders + 1, GBIT, mmu_config(400 * 1024, 40 * 1024, true));
    let (time, retransmissions, verified) =
        write_incast(&mut fabric, senders as u32 + 1, MIB / 2, 1024);
    assert!(verified && retransmissions == 0);
    let counters = fabric.switches[0].mmu.counters();
    assert!(counters
        .iter()
        .flatten()
        .all(|c| c.drops_headroom == 0 && c.drops_threshold == 0));
    let link_ns = senders as u64 * message_wire_bytes(MIB / 2, 1024, false) * 8;
    assert!(
        link_ns < time && time * 100 < link_ns * 102,
        "{time} {link_ns}"
    );
}

/// Two leaves (host 0 on s0, host 1 on s1) and two spines (s2, s3), links of 10 us at 1 Gbit/s; a leaf's ports:
/// its host, s2, s3; the spines' ports lead to the leaves' ports 1 (s2) and 2 (s3).
fn two_leaves(config: MmuConfig) -> Topology {
    let leaf = |host: usize, other: usize| {
        (
            vec![(('h', host), 0), (('s', 2), host), (('s', 3), host)],
            vec![(host, vec![0]), (other, vec![1, 2])],
        )
    };
    let spine = |port: usize| {
        (
            vec![(('s', 0), port), (('s', 1), port)],
            vec![(0, vec![0]), (1, vec![1])],
        )
    };
    Topology {
        switches: vec![leaf(0, 1), leaf(1, 0), spine(1), spine(2)],
        hosts: vec![(0, 0), (1, 0)],
        rate_bps: GBIT,
        delay_ns: 10_000,
        config,
    }
}

#[test]
fn a_write_across_a_leaf_spine_takes_one_spine_each_way() {
    let mut fabric = two_leaves(mmu_config(4_107_234, 1_260_070, true)).fabric();
    let (time, _, verified) = write_incast(&mut fabric, 2, MIB, 4096); // host 1 into host 0
    assert!(verified);
    let link_ns = message_wire_bytes(MIB, 4096, false) * 8;
    // Four cables of 10 us (h1-s1-spine-s0-h0), store and forward at three switches.
    assert!(link_ns + 4 * 10_000 < time && time * 100 < link_ns * 102 + 800_000);
    let spines: Vec<u64> = fabric.switches[2..]
        .iter()
        .map(|sw| {
            sw.mmu
                .counters()
                .iter()
                .flatten()
                .map(|c| c.tx_frames)
                .sum()
        })
        .collect();
    // 256 data frames (1 MiB at 4096) and 16 ACKs (one per 16 packets): each direction hashes to one spine.
    assert_eq!(spines.iter().sum::<u64>(), 256 + 16);
    assert!(spines.iter().max().copied().unwrap_or(0) >= 256);
}

/// UET on both spines' fabric: REPS spraying from the first packet, NSCC, trimming switches.
fn uet_spec(network_rtt_ns: u64) -> UetSpec {
    UetSpec {
        spray: SprayPolicy::Reps,
        evs: 64,
        nscc: true,
        network_rtt_ns,
        timeout_ns: 8 * network_rtt_ns,
        rccc: false,
        nscc_target_ns: None,
        nscc_gamma: None,
    }
}

#[test]
fn a_uet_write_across_a_leaf_spine_is_sprayed_over_both_spines() {
    let leaves = two_leaves(MmuConfig {
        trim: true,
        ..mmu_config(4_107_234, 0, false)
    });
    let mut spec = leaves.spec_with(None);
    spec.uet = Some(uet_spec(2 * 4 * 10_000 + 150_000));
    let mut fabric = Fabric::new(spec).unwrap();
    let (time, retransmissions, verified) = write_incast(&mut fabric, 2, MIB, 4096);
    assert!(verified && retransmissions == 0);
    let link_ns = message_wire_bytes(MIB, 4096, false) * 8;
    assert!(time * 100 < link_ns * 110, "{time} against {link_ns}");
    let spines: Vec<u64> = fabric.switches[2..]
        .iter()
        .map(|sw| {
            sw.mmu
                .counters()
                .iter()
                .flatten()
                .map(|c| c.tx_frames)
                .sum()
        })
        .collect();
    // the 256 data frames and their ACKs, over both spines: neither carries all of one direction
    assert!(spines.iter().all(|&frames| frames > 64), "{spines:?}");
}

#[test]
fn a_uet_incast_on_a_trimming_lossy_switch_loses_nothing_the_ranks_see() {
    let senders = 4;
    let config = MmuConfig {
        trim: true,
        ..mmu_config(80 * 1024, 0, false)
    };
    let topology = Topology {
        switches: vec![(
            (0..=senders).map(|i| (('h', i), 0)).collect(),
            (0..=senders).map(|i| (i, vec![i as u32])).collect(),
        )],
        hosts: (0..=senders).map(|i| (0, i)).collect(),
        rate_bps: GBIT,
        delay_ns: 1_000,
        config,
    };
    let mut spec = topology.spec_with(None);
    spec.uet = Some(uet_spec(50_000));
    let mut fabric = Fabric::new(spec).unwrap();
    let (time, retransmissions, verified) =
        write_incast(&mut fabric, senders as u32 + 1, MIB / 2, 4096);
    assert!(verified, "every byte in place");
    let counters: Vec<_> = fabric.switches[0]
        .mmu
        .counters()
        .iter()
        .flatten()
        .copied()
        .collect();
    let trimmed: u64 = counters.iter().map(|c| c.trimmed).sum();
    let dropped: u64 = counters
        .iter()
        .map(|c| c.drops_threshold + c.drops_headroom)
        .sum();
    assert!(
        trimmed > 0 && retransmissions >= trimmed,
        "{trimmed} trimmed, {retransmissions} resent"
    );
    assert_eq!(dropped, 0, "trimmed, not dropped");
    assert_eq!(counters.iter().map(|c| c.pfc_xoff_sent).sum::<u64>(), 0);
    let link_ns = senders as u64 * message_wire_bytes(MIB / 2, 4096, false) * 8;
    assert!(time * 100 < link_ns * 130, "{time} against {link_ns}");
}

// --- An IB switch's plane under an incast (test_sim_collective.py, the ib case) ---

#[test]
fn an_ib_incast_is_held_back_by_credits_and_the_plane_drops_nothing() {
    let (hosts, frame, vls) = (4usize, 1514u64, 4usize);
    let host_buffer = 2048 * BLOCK; // what a host's RNIC receives into per VL (agent_config's HOST_IB_BUFFER)
    let vl_buffer = 16 * frame; // the switch's default: 16 frames per VL
    let lids: Vec<(String, u16)> = (0..hosts)
        .map(|h| (format!("10.0.0.{}", h + 1), h as u16 + 1))
        .collect();
    let subnet = IbSpec {
        switches: vec![IbSwitchSpec {
            config: IbPlaneConfig {
                lft: (0..hosts).map(|h| (h as u16 + 1, h)).collect(),
                sl2vl: (0..16).map(|sl| sl % vls as u8).collect(),
                vls,
                vl_buffer,
                fc_floor: 500_000,
                ar: Vec::new(),
            },
            ports: vec![(frame, host_buffer); hosts],
        }],
        hosts: (0..hosts)
            .map(|h| IbHostSpec {
                lid: h as u16 + 1,
                lids: lids.clone(),
                sl: 0,
                vl: 0,
                vls,
                capacity: host_buffer,
                peer_capacity: vl_buffer,
                frame_bytes: frame,
                fc_floor_ns: 500_000,
                reorder: 0,
                reorder_wait_ns: 0,
            })
            .collect(),
    };
    let config = mmu_config(512 * 1024, 72 * 1024, true);
    let mut fabric = Topology {
        switches: vec![(
            (0..hosts).map(|i| (('h', i), 0)).collect(),
            (0..hosts).map(|i| (i, vec![i as u32])).collect(),
        )],
        hosts: (0..hosts).map(|i| (0, i)).collect(),
        rate_bps: 10 * GBIT,
        delay_ns: 1000,
        config,
    }
    .fabric_with(Some(subnet));
    let length = 256 * 1024;
    let (time, retransmissions, verified) = write_incast(&mut fabric, hosts as u32, length, 1024);
    assert!(verified && retransmissions == 0);
    let link_ns = 3 * message_wire_bytes(length, 1024, true) * 8 / 10; // three senders' bytes, one link
    assert!(
        link_ns < time && time * 100 < link_ns * 102,
        "{time} {link_ns}"
    );
    let totals = fabric.totals();
    assert_eq!((totals.drops, totals.pfc_sent), (0, 0));
    assert!(totals.ib_credit_stalls > 0); // the switch's VL buffers stalled the senders
    let plane = fabric.switches[0].ib.as_ref().unwrap();
    assert!((0..hosts).all(|port| plane.drops(port) == Some([0; 4])));
}

// --- hostile frames: a switch and an RNIC drop and count what they cannot use, and never panic ---

/// A frame a switch port may receive: any bytes; a host's good RoCE frame with up to eight bytes changed
/// (past the parsers' first checks: bad IPv4 headers, TTLs, addresses, lengths, opcodes) or cut short; a PFC
/// frame of any classes and quanta.
fn hostile_frame() -> impl Strategy<Value = Vec<u8>> {
    let good = frames_from(1, 0, 1).remove(0);
    let len = good.len();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..120),
        proptest::collection::vec((0..len, any::<u8>()), 1..8).prop_map(move |edits| {
            let mut frame = good.clone();
            for (at, byte) in edits {
                frame[at] = byte;
            }
            frame
        }),
        (0..len).prop_map({
            let good = frames_from(1, 0, 1).remove(0);
            move |cut| good[..cut].to_vec()
        }),
        proptest::array::uniform8(proptest::option::of(any::<u16>()))
            .prop_map(|quanta| encode_pfc(&host_mac(1), &quanta).to_vec()),
    ]
}

proptest! {
    /// Every frame a switch port receives is forwarded, counted as dropped (by the switch or its MMU), or is a
    /// PFC frame it obeys; a host given the same frames counts what it cannot decode. Nothing panics.
    #[test]
    fn hostile_frames_are_forwarded_or_counted_never_a_panic(
        frames in proptest::collection::vec((0usize..3, hostile_frame()), 1..40),
    ) {
        let mut rig = Rig::star(3, GBIT, mmu_config(200 * 1024, 20 * 1024, true));
        let mut obeyed = 0;
        for (port, frame) in &frames {
            let pfc = frame.get(12..14) == Some(&ETHERTYPE_MAC_CONTROL.to_be_bytes()[..])
                && decode_pfc(frame).is_some_and(|quanta| quanta.iter().any(Option::is_some));
            obeyed += u64::from(pfc);
            let Rig { engine, wires, switch, hosts, .. } = &mut rig;
            switch.as_mut().unwrap().receive(0, engine, wires, *port, frame.clone().into());
            hosts[*port].receive(*port as u32, engine, wires, frame);
        }
        rig.run(Some(1_000_000_000));
        let sw = rig.switch.as_ref().unwrap();
        let mmu_drops = mmu_sum(&rig, |c| c.drops_threshold + c.drops_headroom + c.pfcwd_drops);
        let forwarded: usize = rig.arrivals.iter().map(Vec::len).sum();
        prop_assert_eq!(forwarded as u64 + sw.dropped.total() + mmu_drops + obeyed, frames.len() as u64);
    }
}
