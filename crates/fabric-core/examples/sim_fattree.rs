//! The compiled simulation backend's cost per frame, without Python: a k-ary fat tree's all-to-all on
//! `fabric_core::sim::fabric::Fabric`, built and run natively on one core.
//!
//! `cargo run --release --example sim_fattree -- [K] [BYTES] [ITERATIONS]` (defaults: 8, 1048576 and 1). The fabric is the one
//! `bench/bench_sim_rust.py fattree,K lossless alltoall BYTES 400gbit --delay 1us` hands to Rust: the same
//! switches, ports, MACs, IPv4 addresses, routes, ECMP seeds and MMU settings (the topology of
//! `topologies/fabrics.py`'s `FatTreeTopo`, the addressing of `emulator/fabric/plan.py`, the MMU of
//! `emulator.model.switch_params.derive_config` for lossless at 400 Gbit/s, 1 us, a 4200-byte link MTU, k ports),
//! and the plans of `emulator/collectives/algorithms.py`'s all-to-all, so at K = 8 it prints that run's events,
//! counters and CCT. The figure of interest is the cost per frame a switch forwarded (its MMU's `tx_frames`), by
//! the wall clock and by the time on a CPU (`/proc/self/schedstat`, which a loaded machine disturbs less).
//! A first iteration pays the kernel for every page it touches first (the hosts' memory, the frames in flight
//! at the peak); later iterations reuse them, so several iterations show the cost per frame once warm.
//!
//! Instructions per frame: `valgrind --tool=callgrind --toggle-collect='*sim_fattree::run*'
//! target/release/examples/sim_fattree`, its total Ir over the switch frames this prints (the run only: the
//! fabric's construction and the plans are outside `run`).
use std::process::ExitCode;
use std::time::Instant;

use fabric_core::model::mmu::MmuConfig;
use fabric_core::model::pause::PrioritySet;
use fabric_core::sim::fabric::{Fabric, FabricSpec, HostSpec, IterationRecord, SwitchSpec};
use fabric_core::sim::plans::Plans;
use fabric_core::sim::wire::Endpoint;
use fabric_core::wire::mac::Mac;

/// Every link's rate and delay, and the QPs' path MTU (the benchmark's `400gbit --delay 1us`, MTU 4096).
const RATE_BPS: u64 = 400_000_000_000;
const DELAY_NS: u64 = 1_000;
const PATH_MTU: u32 = 4096;
/// The run's seed (`build_rust_fabric`'s default): a node's seed is 1000 x this + its place in the plan.
const SEED: u64 = 1;

/// `derive_config("lossless", rate_bps=400e9, delay_ns=1000, mtu=4200, ports=8)`, as
/// `emulator.fabric.agent_config.switch_mmu` prints it for every switch of fattree,8.
fn mmu() -> MmuConfig {
    MmuConfig {
        buffer: 4_003_395_824,
        reserve: 4214,
        headroom: 500_121_070,
        alpha: 1.0,
        threshold: 269_696,
        xon_delta: 8428,
        lossless: PrioritySet::EMPTY.with(3),
        quanta: 65535,
        strict: PrioritySet::EMPTY.with(6).with(7),
        weights: [1; 8],
        mtu_frame: 4214,
        ecn: true,
        kmin: 42_140,
        kmax: 168_560,
        pmax: 0.2,
        vl_buffer: 67_424,
        fc_floor: 500_000,
        pfcwd: None,
        trim: false,
    }
}

/// `plan.py`'s MAC: 02, the kind (0 host, 1 switch), the node's place in the plan (3 bytes), the port.
fn mac(switch: bool, node: usize, port: usize) -> Mac {
    let n = (node as u32).to_be_bytes();
    [2, u8::from(switch), n[1], n[2], n[3], port as u8]
}

/// One end of a cable being laid: a switch's 0-based port, or a host.
#[derive(Clone, Copy)]
enum End {
    Switch(usize, usize),
    Host(usize),
}

/// The fat tree of `FatTreeTopo` (k even, at least 2), cabled and routed.
struct FatTree {
    k: usize,
    hosts: usize,
    switches: usize,
    /// Per switch, per port: the far end.
    peers: Vec<Vec<End>>,
}

impl FatTree {
    fn new(k: usize) -> FatTree {
        let half = k / 2;
        let hosts = k * half * half;
        let switches = k * k + half * half;
        let mut peers = vec![Vec::new(); switches];
        let edge = |pod: usize, i: usize| pod * half + i;
        let aggregation = |pod: usize, i: usize| (k + pod) * half + i;
        for pod in 0..k {
            for e in 0..half {
                let sw = edge(pod, e);
                peers[sw] = (0..half).map(|h| End::Host(sw * half + h)).collect();
                peers[sw].extend((0..half).map(|a| End::Switch(aggregation(pod, a), e)));
            }
            for a in 0..half {
                let sw = aggregation(pod, a);
                peers[sw] = (0..half)
                    .map(|e| End::Switch(edge(pod, e), half + a))
                    .collect();
                peers[sw].extend((0..half).map(|c| End::Switch(k * k + a * half + c, pod)));
            }
        }
        for c in 0..half * half {
            peers[k * k + c] = (0..k)
                .map(|pod| End::Switch(aggregation(pod, c / half), half + c % half))
                .collect();
        }
        FatTree {
            k,
            hosts,
            switches,
            peers,
        }
    }

    /// The egress ports (0-based) of switch `sw` towards host `host`: down when it lies below, else every
    /// uplink (ECMP).
    fn route(&self, sw: usize, host: usize) -> Vec<u32> {
        let (k, half) = (self.k, self.k / 2);
        let (pod, edge) = (host / (half * half), host / half);
        let up = (half as u32..k as u32).collect();
        if sw < k * half {
            if sw == edge {
                vec![(host % half) as u32]
            } else {
                up
            }
        } else if sw < k * k {
            if (sw - k * half) / half == pod {
                vec![(edge % half) as u32]
            } else {
                up
            }
        } else {
            vec![pod as u32]
        }
    }

    /// The plan's node place (1-based: hosts first, then switches) of switch `sw`.
    fn switch_node(&self, sw: usize) -> usize {
        self.hosts + sw + 1
    }

    /// Wires (one per direction of each cable), switches and hosts as `build_rust_fabric` gives them.
    fn spec(&self) -> FabricSpec {
        let mut spec = FabricSpec::default();
        let ip = |host: usize| (0x0A00_0000u32 + host as u32 + 1).to_be_bytes();
        // The wire each switch port sends on (the wire into the port is the far end's).
        let mut out_wire = vec![Vec::new(); self.switches];
        for (sw, ports) in self.peers.iter().enumerate() {
            for &peer in ports {
                let to = match peer {
                    End::Host(h) => Endpoint::Host(h as u32),
                    End::Switch(s, p) => Endpoint::Switch {
                        switch: s as u32,
                        port: p as u32,
                    },
                };
                out_wire[sw].push(spec.wires.len() as u32);
                spec.wires.push((RATE_BPS, DELAY_NS, to));
            }
        }
        let half = self.k / 2;
        for host in 0..self.hosts {
            let (edge, port) = (host / half, host % half);
            spec.hosts.push(HostSpec {
                mac: mac(false, host + 1, 0),
                gateway_mac: mac(true, self.switch_node(edge), port + 1),
                ip: ip(host),
                rate_bps: RATE_BPS,
                wire: spec.wires.len() as u32,
                cc: None,
            });
            spec.wires.push((
                RATE_BPS,
                DELAY_NS,
                Endpoint::Switch {
                    switch: edge as u32,
                    port: port as u32,
                },
            ));
        }
        for (sw, ports) in self.peers.iter().enumerate() {
            let node = self.switch_node(sw);
            let ports = ports
                .iter()
                .enumerate()
                .map(|(port, &peer)| {
                    let peer_mac = match peer {
                        End::Host(h) => mac(false, h + 1, 0),
                        End::Switch(s, p) => mac(true, self.switch_node(s), p + 1),
                    };
                    (
                        mac(true, node, port + 1),
                        peer_mac,
                        RATE_BPS,
                        out_wire[sw][port],
                    )
                })
                .collect();
            let routes = (0..self.hosts)
                .map(|host| (ip(host), self.route(sw, host)))
                .collect();
            spec.switches.push(SwitchSpec {
                ports,
                routes,
                mmu: mmu(),
                seed: SEED * 1000 + node as u64,
                losses: Vec::new(),
            });
        }
        spec
    }
}

/// Seconds this process has run on a CPU, if Linux says (`/proc/self/schedstat`: ns on CPU first).
fn on_cpu() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// The collective: what callgrind's `--toggle-collect` counts.
#[inline(never)]
fn run(fabric: &mut Fabric, plans: Plans, iterations: u32) -> Result<Vec<IterationRecord>, String> {
    fabric.run_collective(plans, iterations, 0, PATH_MTU)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let k = args.first().map_or(Some(8), |arg| arg.parse().ok());
    let size = args.get(1).map_or(Some(1 << 20), |arg| arg.parse().ok());
    let iterations = args.get(2).map_or(Some(1), |arg| arg.parse().ok());
    let (Some(k), Some(size), Some(iterations)) = (
        k.filter(|&k: &usize| k % 2 == 0 && (2..=32).contains(&k)),
        size.filter(|s: &u64| (1 << 10..=1 << 30).contains(s)),
        iterations.filter(|&i: &u32| (1..=1000).contains(&i)),
    ) else {
        eprintln!(
            "sim_fattree: error: arguments are K (even, 2 to 32), BYTES (1 KiB to 1 GiB) and ITERATIONS (1 to 1000)"
        );
        return ExitCode::from(2);
    };
    let tree = FatTree::new(k);
    let began = Instant::now();
    let mut fabric = match Fabric::new(tree.spec()) {
        Ok(fabric) => fabric,
        Err(error) => {
            eprintln!("sim_fattree: error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let plans = match Plans::new("alltoall", tree.hosts as u32, size, None) {
        Ok(plans) => plans,
        Err(error) => {
            eprintln!("sim_fattree: error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let built = began.elapsed().as_secs_f64();
    let (began, cpu_began) = (Instant::now(), on_cpu());
    let records = match run(&mut fabric, plans, iterations) {
        Ok(records) => records,
        Err(error) => {
            eprintln!("sim_fattree: error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let wall = began.elapsed().as_secs_f64();
    let cpu = on_cpu().zip(cpu_began).map(|(end, start)| end - start);
    let totals = fabric.totals();
    let events = fabric.engine.events();
    let frames = totals.tx_frames.max(1) as f64;
    let ccts: Vec<String> = records
        .iter()
        .map(|record| {
            let summary = &record.summary;
            format!(
                "{:.1}",
                summary.last.saturating_sub(summary.start) as f64 / 1e3
            )
        })
        .collect();
    println!(
        "fattree,{k} lossless alltoall {size} B at 400 Gbit/s, delay 1 us, {iterations} iteration(s): build {built:.3} s, \
         run {wall:.3} s, {events} events, {} switch frames, CCT {} us",
        totals.tx_frames,
        ccts.join(", ")
    );
    println!(
        "  counters: drops {}, PFC {}, ECN {}, host paused {} ns",
        totals.drops, totals.pfc_sent, totals.ecn_marked, totals.host_paused_ns
    );
    let on_cpu = cpu.map_or(String::new(), |cpu| {
        format!(
            "; on CPU {cpu:.3} s: {:.0} ns per switch frame, {:.0} ns per event",
            cpu / frames * 1e9,
            cpu / events as f64 * 1e9
        )
    });
    println!(
        "  wall: {:.0} ns per switch frame, {:.0} ns per event{on_cpu}",
        wall / frames * 1e9,
        wall / events as f64 * 1e9
    );
    ExitCode::SUCCESS
}
