//! `emulator._core.sim`: the simulation backend's fabric in Rust (`fabric_core::sim::fabric`: Ethernet, or IB
//! with its subnet), built from the plain data `emulator.study.sim_fabric.build_rust_fabric` makes of a
//! `FabricPlan`, running a collective (its plans made in Rust, `fabric_core::sim::plans`) with the GIL released
//! and giving back each iteration's summary; with `run_sim_variant`'s hooks: faults, the goodput watch (a
//! Python sampler called from the engine's sample events, with the GIL taken for it) and the PFC watchdogs'
//! figures; and `plan`, the Rust plans as `emulator.collectives.algorithms.plan` gives them.
use std::sync::{Arc, Mutex};

use fabric_core::model::dcqcn::MAX_PERIOD_NS;
use fabric_core::model::ib_plane::IbPlaneConfig;
use fabric_core::model::mmu::MmuConfig;
use fabric_core::model::pause::PrioritySet;
use fabric_core::model::spray::SprayPolicy;
use fabric_core::model::uet::UetSpec;
use fabric_core::sim::fabric::{
    Fabric, FabricSpec, HostSpec, IterationRecord, RawIteration, SwitchSpec, Totals,
};
use fabric_core::sim::faults::{FabricRoutes, Fault, LinkFault};
use fabric_core::sim::ib::{IbHostSpec, IbSpec, IbSwitchSpec};
use fabric_core::sim::plans::{LinkMessages, Plans, SendPlan};
use fabric_core::sim::program::{OpSpan, Program, ProgramSend, ProgramStep, RankProgram};
use fabric_core::sim::summary::IterationSummary;
use fabric_core::sim::switch::PortLoss;
use fabric_core::sim::wire::Endpoint;
use fabric_core::wire::mac::Mac;
use fabric_core::wire::pfc::PRIORITIES;
use fabric_core::wire::uet::MAX_EVS;
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::dcqcn::params_of;
use crate::link::small_seed_words;
use crate::pfcwd::watchdog_config_of;

/// A wire as Python gives it: rate, delay, "switch" or "host", the node's index, the switch's port.
type WireArg = (u64, u64, String, u32, u32);
/// A switch port: MAC, peer MAC, rate, the wire it sends on.
type PortArg = (Vec<u8>, Vec<u8>, u64, u32);
/// The MMU settings, field by field in `MmuConfig`'s order (without the watchdog).
type MmuArg = (
    (i64, i64, i64, f64, i64, i64),
    (Vec<usize>, u16, Vec<usize>, Vec<i64>, i64),
    (bool, i64, i64, f64, i64, u64, bool),
);
/// A UET fabric's transport: spray policy ("flow", "oblivious", "reps"), entropy values, NSCC on, the
/// network's round trip and the retransmission timeout (ns), receiver credits on, NSCC's target delay (ns) and
/// decrease factor (None: the path's defaults).
type UetArg = (String, u16, bool, u64, u64, bool, Option<u64>, Option<f64>);
/// A switch: its ports, its routes (IPv4 address, egress ports), its MMU, its seed.
type SwitchArg = (Vec<PortArg>, Vec<(Vec<u8>, Vec<u32>)>, MmuArg, u64);
/// A host: MAC, gateway MAC, IPv4 address, rate, the wire it sends on.
type HostArg = (Vec<u8>, Vec<u8>, Vec<u8>, u64, u32);
/// A switch's part of the IB subnet: its forwarding table (DLID, port index), SL to VL, data VLs, VL buffer,
/// `fc_floor`, per port its longest frame and its peer's VL buffer, and its adaptive routing groups (DLID,
/// port indices).
type IbSwitchArg = (
    Vec<(u16, usize)>,
    Vec<u8>,
    usize,
    u64,
    u64,
    Vec<(u64, u64)>,
    Vec<(u16, Vec<usize>)>,
);
/// A host's part of the IB subnet: LID, every GID's LID, SL, VL, data VLs, its VL buffer, the switch's, the
/// link's longest frame, the switch's `fc_floor`, the requests its responders hold past a gap and how long.
type IbHostArg = (
    u16,
    Vec<(String, u16)>,
    u8,
    u8,
    usize,
    u64,
    u64,
    u64,
    u64,
    u32,
    u64,
);
/// The IB subnet: per switch, per host.
type IbArg = (Vec<IbSwitchArg>, Vec<IbHostArg>);
/// A send as `algorithms.Send`'s fields: dst, offset, length, region ("data" or "staging"), dst offset.
type SendTuple = (u32, u64, u64, &'static str, u64);
/// A step as `algorithms.Step`'s fields: sends, receives, reduce.
type StepTuple = (Vec<SendTuple>, Vec<u32>, Option<(u64, u64, u64)>);
/// A rank's plan as `algorithms.RankPlan`'s fields: rank, data bytes, staging bytes, steps, measured, reduce
/// group, slices.
type PlanTuple = (u32, u64, u64, Vec<StepTuple>, bool, Vec<u32>, u32);
/// Injected loss on a switch port's link: host-facing, loss probability, frame numbers always lost, seed.
type LossArg = (bool, f64, Vec<u64>, i128);
/// A fault: the host's index, when after each measured iteration's start (ns), for how long (None: for good).
type FaultArg = (u32, u64, Option<u64>);
/// Every switch's routes: (switch index, [(IPv4 address, egress ports)]).
type RoutesArg = Vec<(u32, Vec<(Vec<u8>, Vec<u32>)>)>;
/// Per switch of an `ib` fabric, its LFT (DLID, port) and AR groups (DLID, ports).
type IbTablesArg = Vec<(u32, (Vec<(u16, usize)>, Vec<(u16, Vec<usize>)>))>;
/// A `down` fault: the link's two wires, when, for how long (None: for good), the routes without it and with it,
/// the IB tables without it and with it.
type LinkFaultArg = (
    (u32, u32),
    u64,
    Option<u64>,
    RoutesArg,
    RoutesArg,
    IbTablesArg,
    IbTablesArg,
);

fn mac(bytes: &[u8]) -> PyResult<Mac> {
    bytes
        .try_into()
        .map_err(|_| PyValueError::new_err(format!("not a MAC address: {bytes:?}")))
}

fn ipv4(bytes: &[u8]) -> PyResult<[u8; 4]> {
    bytes
        .try_into()
        .map_err(|_| PyValueError::new_err(format!("not an IPv4 address: {bytes:?}")))
}

fn priorities(list: &[usize]) -> PrioritySet {
    list.iter().fold(PrioritySet::EMPTY, |set, &p| set.with(p))
}

fn mmu_config(arg: MmuArg) -> PyResult<MmuConfig> {
    let (
        (buffer, reserve, headroom, alpha, threshold, xon_delta),
        (lossless, quanta, strict, weights, mtu_frame),
        (ecn, kmin, kmax, pmax, vl_buffer, fc_floor, trim),
    ) = arg;
    let weights: [i64; PRIORITIES] = weights
        .try_into()
        .map_err(|_| PyValueError::new_err("weights: one per priority"))?;
    Ok(MmuConfig {
        buffer,
        reserve,
        headroom,
        alpha,
        threshold,
        xon_delta,
        lossless: priorities(&lossless),
        quanta,
        strict: priorities(&strict),
        weights,
        mtu_frame,
        ecn,
        kmin,
        kmax,
        pmax,
        vl_buffer,
        fc_floor,
        pfcwd: None,
        trim,
    })
}

fn endpoint(kind: &str, index: u32, port: u32) -> PyResult<Endpoint> {
    match kind {
        "switch" => Ok(Endpoint::Switch {
            switch: index,
            port,
        }),
        "host" => Ok(Endpoint::Host(index)),
        _ => Err(PyValueError::new_err(format!(
            "no {kind:?} endpoint: switch or host"
        ))),
    }
}

fn ib_spec((switches, hosts): IbArg) -> IbSpec {
    IbSpec {
        switches: switches
            .into_iter()
            .map(
                |(lft, sl2vl, vls, vl_buffer, fc_floor, ports, ar)| IbSwitchSpec {
                    config: IbPlaneConfig {
                        lft,
                        sl2vl,
                        vls,
                        vl_buffer,
                        fc_floor,
                        ar,
                    },
                    ports,
                },
            )
            .collect(),
        hosts: hosts
            .into_iter()
            .map(
                |(
                    lid,
                    lids,
                    sl,
                    vl,
                    vls,
                    capacity,
                    peer_capacity,
                    frame_bytes,
                    fc_floor_ns,
                    reorder,
                    reorder_wait_ns,
                )| {
                    IbHostSpec {
                        lid,
                        lids,
                        sl,
                        vl,
                        vls,
                        capacity,
                        peer_capacity,
                        frame_bytes,
                        fc_floor_ns,
                        reorder,
                        reorder_wait_ns,
                    }
                },
            )
            .collect(),
    }
}

fn totals_dict<'py>(py: Python<'py>, totals: &Totals) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("drops", totals.drops)?;
    dict.set_item("pfc_sent", totals.pfc_sent)?;
    dict.set_item("ecn_marked", totals.ecn_marked)?;
    dict.set_item("tx_frames", totals.tx_frames)?;
    dict.set_item("host_paused_ns", totals.host_paused_ns)?;
    dict.set_item("ib_credit_stalls", totals.ib_credit_stalls)?;
    dict.set_item("cnps_received", totals.cnps_received)?;
    dict.set_item("paced_waits", totals.paced_waits)?;
    dict.set_item("host_pfc_sent", totals.host_pfc_sent)?;
    dict.set_item("trimmed", totals.trimmed)?;
    Ok(dict)
}

/// One iteration's summary as a tuple: (iteration, start, last arrival, its source, its destination, cause,
/// retransmissions, paused ns, verified, start skew ns, start late ns, flows, raw); the flows as six columns
/// (source, destination, bytes, last arrival, retransmissions, timeouts); raw the ranks' reports and pause
/// times as the coordinator's `summarize` takes them, or None.
fn record_tuple<'py>(py: Python<'py>, record: &IterationRecord) -> PyResult<Bound<'py, PyTuple>> {
    let IterationSummary {
        iteration,
        start,
        last,
        last_src,
        last_dst,
        cause,
        retransmissions,
        paused_ns,
        verified,
        skew_ns,
        late_ns,
        flows,
    } = &record.summary;
    let columns = (
        &flows.src,
        &flows.dst,
        &flows.bytes,
        &flows.last,
        &flows.retransmissions,
        &flows.timeouts,
    );
    let raw = record
        .raw
        .as_ref()
        .map(|raw| raw_dict(py, raw))
        .transpose()?;
    let head = (
        iteration,
        start,
        last,
        last_src,
        last_dst,
        cause.name(),
        retransmissions,
    );
    let tail = (
        paused_ns,
        verified,
        skew_ns,
        late_ns,
        columns,
        raw,
        &record.timelines,
    );
    let (head, tail) = (head.into_pyobject(py)?, tail.into_pyobject(py)?);
    let items: Vec<Bound<'py, PyAny>> = head.iter().chain(tail.iter()).collect();
    PyTuple::new(py, items)
}

/// The ranks' reports (the rank process's keys) and each host's pause time of one iteration.
fn raw_dict<'py>(py: Python<'py>, raw: &RawIteration) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("paused", raw.paused.clone())?;
    let mut reports = Vec::with_capacity(raw.reports.len());
    for report in &raw.reports {
        let r = PyDict::new(py);
        r.set_item("iteration", report.iteration)?;
        r.set_item("released_ns", report.released_ns)?;
        let arrivals: Vec<[u64; 3]> = report
            .arrivals
            .iter()
            .map(|&(src, step, stamp)| [src.into(), step.into(), stamp])
            .collect();
        r.set_item("arrivals", arrivals)?;
        let sends: Vec<[u64; 3]> = report
            .sends
            .iter()
            .map(|&(peer, wr_id, stamp)| [peer.into(), wr_id, stamp])
            .collect();
        r.set_item("sends", sends)?;
        let counters = PyDict::new(py);
        for &(peer, retransmitted, timeouts) in &report.counters {
            counters.set_item(peer.to_string(), [retransmitted, timeouts])?;
        }
        r.set_item("counters", counters)?;
        r.set_item("verified", report.verified)?;
        reports.push(r);
    }
    dict.set_item("reports", reports)?;
    Ok(dict)
}

/// `per` (one entry per switch or host, or None for none at all) with every entry checked by `convert`.
fn each<T, U>(
    per: Option<Vec<Option<T>>>,
    count: usize,
    what: &str,
    convert: impl Fn(T) -> PyResult<U>,
) -> PyResult<Vec<Option<U>>> {
    let Some(per) = per else {
        return Ok((0..count).map(|_| None).collect());
    };
    if per.len() != count {
        return Err(PyValueError::new_err(format!(
            "{} {what} entries for {count}",
            per.len()
        )));
    }
    per.into_iter()
        .map(|entry| entry.map(&convert).transpose())
        .collect()
}

/// `algorithms.plan(collective, ranks, size, senders)` made by the Rust port, every rank's plan as a tuple of
/// `RankPlan`'s fields; ValueError with Python's message where `plan` raises FabricError.
#[pyfunction]
#[pyo3(signature = (collective, ranks, size, senders=None))]
fn plan(collective: &str, ranks: u32, size: u64, senders: Option<i64>) -> PyResult<Vec<PlanTuple>> {
    let plans = Plans::new(collective, ranks, size, senders).map_err(PyValueError::new_err)?;
    let region = |staging: bool| if staging { "staging" } else { "data" };
    Ok((0..ranks)
        .map(|rank| {
            let (data, staging) = plans.regions(rank);
            let steps = (0..plans.steps(rank))
                .filter_map(|k| plans.step(rank, k))
                .map(|step| {
                    let sends = step
                        .sends
                        .iter()
                        .map(|s| (s.dst, s.offset, s.length, region(s.staging), s.dst_offset))
                        .collect();
                    (sends, step.receives.iter().collect(), step.reduce)
                })
                .collect();
            let group = plans.reduce_group(rank).collect();
            (
                rank,
                data,
                staging,
                steps,
                plans.measured(rank),
                group,
                plans.slices(rank),
            )
        })
        .collect())
}

/// Per rank, (length, count) of the messages the measured ranks send on its link and of those it receives in
/// one iteration (`Plans::message_counts`): the link-time bound's traffic without Python's plans.
#[pyfunction]
#[pyo3(signature = (collective, ranks, size, senders=None))]
fn message_counts(
    collective: &str,
    ranks: u32,
    size: u64,
    senders: Option<i64>,
) -> PyResult<MessageCounts> {
    let plans = Plans::new(collective, ranks, size, senders).map_err(PyValueError::new_err)?;
    Ok(plans.message_counts())
}

/// Per rank, (length, count) pairs: sent, then received.
type MessageCounts = (Vec<LinkMessages>, Vec<LinkMessages>);

/// A fabric (lossless, lossy, or ib with `ib`, the subnet) in simulated time, every frame in Rust.
#[pyclass(module = "emulator._core.sim")]
pub struct SimFabric {
    fabric: Fabric,
    /// The exception the watch's sampler raised, given back as it is once the run stops.
    sampler_error: Arc<Mutex<Option<PyErr>>>,
}

impl SimFabric {
    /// A run's `Err` as Python's: the sampler's own exception if it raised one, else RuntimeError.
    fn run_error(&self, message: String) -> PyErr {
        match self
            .sampler_error
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
        {
            Some(error) => error,
            None => PyRuntimeError::new_err(message),
        }
    }
}

#[pymethods]
impl SimFabric {
    /// `losses`: per switch, None or one (host-facing, loss, drop list, seed) per port; `pfcwd`: per switch,
    /// None or its MMU's `WatchdogConfig`; `cc`: per host, None or its `DcqcnParams` at its link's rate;
    /// `uet`: a UET fabric's transport (spray, EVs, NSCC, network RTT ns, timeout ns), else RC.
    #[new]
    #[pyo3(signature = (wires, switches, hosts, ib=None, *, losses=None, pfcwd=None, cc=None, uet=None))]
    #[allow(clippy::too_many_arguments)] // Python's keywords
    fn new(
        wires: Vec<WireArg>,
        switches: Vec<SwitchArg>,
        hosts: Vec<HostArg>,
        ib: Option<IbArg>,
        losses: Option<Vec<Option<Vec<LossArg>>>>,
        pfcwd: Option<Vec<Option<Bound<'_, PyAny>>>>,
        cc: Option<Vec<Option<Bound<'_, PyAny>>>>,
        uet: Option<UetArg>,
    ) -> PyResult<Self> {
        let losses = each(losses, switches.len(), "losses", |ports| {
            Ok(ports
                .into_iter()
                .map(|(host_facing, loss, drop, seed)| PortLoss {
                    host_facing,
                    loss,
                    drop,
                    seed: small_seed_words(seed).to_vec(),
                })
                .collect::<Vec<_>>())
        })?;
        let watchdogs = each(pfcwd, switches.len(), "pfcwd", |c| watchdog_config_of(&c))?;
        let ccs = each(cc, hosts.len(), "cc", |params| params_of(&params))?;
        let uet = uet
            .map(|(spray, evs, nscc, network_rtt_ns, timeout_ns, rccc, target, gamma)| {
                let spray = SprayPolicy::parse(&spray).ok_or_else(|| {
                    PyValueError::new_err(format!("no spray policy {spray:?}: flow, oblivious or reps"))
                })?;
                let time_ok = |ns: u64| (1..=MAX_PERIOD_NS).contains(&ns);
                let nscc_ok = target.is_none_or(time_ok) && gamma.is_none_or(|g| g > 0.0 && g <= 1.0);
                if evs == 0
                    || evs > MAX_EVS
                    || !time_ok(network_rtt_ns)
                    || !time_ok(timeout_ns)
                    || !nscc_ok
                {
                    return Err(PyValueError::new_err(format!(
                        "bad UET settings: {evs} entropy values (1 to {MAX_EVS}), RTT {network_rtt_ns} ns, \
                         timeout {timeout_ns} ns, NSCC target {target:?} ns (1 ns to a day), gamma {gamma:?} \
                         (above 0, at most 1)"
                    )));
                }
                Ok(UetSpec {
                    spray,
                    evs,
                    nscc,
                    network_rtt_ns,
                    timeout_ns,
                    rccc,
                    nscc_target_ns: target,
                    nscc_gamma: gamma,
                })
            })
            .transpose()?;
        let mut spec = FabricSpec {
            ib: ib.map(ib_spec),
            uet,
            ..FabricSpec::default()
        };
        for (rate, delay, kind, index, port) in wires {
            if rate == 0 {
                return Err(PyValueError::new_err(format!(
                    "bad wire: rate {rate} bit/s, delay {delay} ns"
                )));
            }
            spec.wires
                .push((rate, delay, endpoint(&kind, index, port)?));
        }
        for (((ports, routes, config, seed), losses), watchdog) in
            switches.into_iter().zip(losses).zip(watchdogs)
        {
            let ports = ports
                .iter()
                .map(|(a, b, rate, wire)| Ok((mac(a)?, mac(b)?, *rate, *wire)))
                .collect::<PyResult<Vec<_>>>()?;
            let routes = routes
                .iter()
                .map(|(ip, out)| Ok((ipv4(ip)?, out.clone())))
                .collect::<PyResult<Vec<_>>>()?;
            let mut mmu = mmu_config(config)?;
            mmu.pfcwd = watchdog;
            spec.switches.push(SwitchSpec {
                ports,
                routes,
                mmu,
                seed,
                losses: losses.unwrap_or_default(),
            });
        }
        for ((own, gateway, ip, rate_bps, wire), cc) in hosts.into_iter().zip(ccs) {
            spec.hosts.push(HostSpec {
                mac: mac(&own)?,
                gateway_mac: mac(&gateway)?,
                ip: ipv4(&ip)?,
                rate_bps,
                wire,
                cc,
            });
        }
        let fabric = Fabric::new(spec).map_err(PyValueError::new_err)?;
        Ok(SimFabric {
            fabric,
            sampler_error: Arc::default(),
        })
    }

    /// Stall fault per (host index, ns after each measured iteration's start, duration in ns or None for
    /// good): the host's NIC stalls then in every measured iteration, and resumes after the duration.
    fn set_faults(&mut self, faults: Vec<FaultArg>) -> PyResult<()> {
        let faults = faults
            .into_iter()
            .map(|(host, at_ns, duration_ns)| Fault {
                host,
                at_ns,
                duration_ns,
            })
            .collect();
        self.fabric
            .set_faults(faults)
            .map_err(PyValueError::new_err)
    }

    /// `down` faults per (the link's two wires, ns after each measured iteration's start, duration in ns or None for
    /// good, every switch's routes without the link, and with it, on `ib` every switch's LFT and AR groups without
    /// it and with it): its wires lose what they carry meanwhile.
    fn set_link_faults(&mut self, faults: Vec<LinkFaultArg>) -> PyResult<()> {
        let routes = |table: RoutesArg| -> PyResult<FabricRoutes> {
            table
                .into_iter()
                .map(|(switch, routes)| {
                    let routes = routes
                        .iter()
                        .map(|(ip, out)| Ok((ipv4(ip)?, out.clone())))
                        .collect::<PyResult<Vec<_>>>()?;
                    Ok((switch, routes))
                })
                .collect()
        };
        let faults = faults
            .into_iter()
            .map(|((a, b), at_ns, duration_ns, down, up, ib_down, ib_up)| {
                Ok(LinkFault {
                    wires: [a, b],
                    at_ns,
                    duration_ns,
                    routes_down: routes(down)?,
                    routes_up: routes(up)?,
                    ib_down,
                    ib_up,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.fabric
            .set_link_faults(faults)
            .map_err(PyValueError::new_err)
    }

    /// Faults injected so far (one per fault per measured iteration begun).
    #[getter]
    fn faults_injected(&self) -> u64 {
        self.fabric.faults.injected
    }

    /// The goodput watch: `sample(now_ns, frames_received) -> bool` now and every `interval_ns` of simulated
    /// time (an event in the engine: set it, as `run_sim_variant`
    /// does, before the collective begins); True (stuck) stops the run, and `advance` then says it is over,
    /// `stuck` says why. An exception it raises ends the run and is raised by `advance`. One per fabric.
    fn watch(&mut self, py: Python<'_>, interval_ns: u64, sample: Py<PyAny>) -> PyResult<()> {
        let slot = Arc::clone(&self.sampler_error);
        let sampler = Box::new(move |now: u64, frames: u64| {
            Python::attach(|py| {
                sample
                    .call1(py, (now, frames))
                    .and_then(|verdict| verdict.is_truthy(py))
                    .map_err(|error| {
                        let message = error.to_string();
                        if let Ok(mut kept) = slot.lock() {
                            *kept = Some(error);
                        }
                        message
                    })
            })
        });
        let fabric = &mut self.fabric;
        let started = py.detach(|| fabric.watch(interval_ns, sampler));
        started.map_err(|message| self.run_error(message))
    }

    /// Whether the goodput watch found the fabric stuck and stopped the run.
    #[getter]
    fn stuck(&self) -> bool {
        self.fabric.stuck()
    }

    /// RDMA frames the hosts received so far.
    fn frames_received(&self) -> u64 {
        self.fabric.frames_received()
    }

    /// Each host's time paused so far (ns, all priorities, in host order).
    fn paused_ns_by_host(&self) -> Vec<u64> {
        self.fabric.paused_ns_by_host()
    }

    /// The PFC watchdogs' figures (`rust_pfcwd`'s keys), the stormed ports as (switch, port) indices.
    fn pfcwd<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let figures = self.fabric.pfcwd();
        let dict = PyDict::new(py);
        dict.set_item("pfcwd_storms", figures.storms)?;
        dict.set_item("pfcwd_restorations", figures.restorations)?;
        dict.set_item("pfcwd_drops", figures.drops)?;
        dict.set_item("stormed_ports", figures.stormed_ports)?;
        Ok(dict)
    }

    /// Port `port` of switch `switch` (the plan's switch and port order) now: "paused_ns" (per priority, the
    /// peer's PFC), "mmu_drops", "injected_drops", "ib_drops", "tx_frames", "pfc_sent" (XOFFs and XONs), "credit_interval_ns" (IB's least
    /// time between grown grants on its link, None on Ethernet): what the totals sum, one port at a time.
    /// IndexError for a port the fabric does not have.
    fn port_figures<'py>(
        &self,
        py: Python<'py>,
        switch: usize,
        port: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let figures = self
            .fabric
            .port_figures(switch, port)
            .ok_or_else(|| PyIndexError::new_err(format!("no port {port} on switch {switch}")))?;
        let dict = PyDict::new(py);
        dict.set_item("paused_ns", figures.paused_ns.to_vec())?;
        dict.set_item("mmu_drops", figures.mmu_drops)?;
        dict.set_item("injected_drops", figures.injected_drops)?;
        dict.set_item("ib_drops", figures.ib_drops)?;
        dict.set_item("tx_frames", figures.tx_frames)?;
        dict.set_item("tx_bytes", figures.tx_bytes)?;
        dict.set_item("trimmed", figures.trimmed)?;
        dict.set_item("pfc_sent", figures.pfc_sent)?;
        dict.set_item("credit_interval_ns", figures.credit_interval_ns)?;
        Ok(dict)
    }

    /// Host `host` (the plan's host order) now: DCQCN's "cnps_sent", "cnps_received", "paced_waits" (0 without
    /// DCQCN), the stall fault's "stall_pfc_sent" and "stall_drops", and "credit_interval_ns" (its IB port's,
    /// None on Ethernet). IndexError for a host it does not have.
    fn host_figures<'py>(&self, py: Python<'py>, host: usize) -> PyResult<Bound<'py, PyDict>> {
        let figures = self
            .fabric
            .host_figures(host)
            .ok_or_else(|| PyIndexError::new_err(format!("no host {host}")))?;
        let dict = PyDict::new(py);
        dict.set_item("cnps_sent", figures.cc.cnps_sent)?;
        dict.set_item("cnps_received", figures.cc.cnps_received)?;
        dict.set_item("paced_waits", figures.cc.paced_waits)?;
        dict.set_item("stall_pfc_sent", figures.stall_pfc_sent)?;
        dict.set_item("stall_drops", figures.stall_drops)?;
        dict.set_item("credit_interval_ns", figures.credit_interval_ns)?;
        Ok(dict)
    }

    /// Sets up `warmup + iterations` iterations of `collective` (`algorithms.plan`'s arguments; rank r on host
    /// r): memory, QPs, the first iteration begun; `advance` runs it. With `raw`, each record also carries the
    /// ranks' reports. ValueError with `plan`'s message for a collective it refuses.
    #[pyo3(signature = (collective, size, senders, iterations, warmup, mtu, raw=false))]
    #[allow(clippy::too_many_arguments)] // the collective's three and the run's three, as Python passes them
    fn begin_collective(
        &mut self,
        collective: &str,
        size: u64,
        senders: Option<i64>,
        iterations: u32,
        warmup: u32,
        mtu: u32,
        raw: bool,
    ) -> PyResult<()> {
        let ranks = u32::try_from(self.fabric.hosts.len())
            .map_err(|_| PyValueError::new_err("too many hosts"))?;
        let plans = Plans::new(collective, ranks, size, senders).map_err(PyValueError::new_err)?;
        self.fabric
            .begin_collective(plans, iterations, warmup, mtu, raw)
            .map_err(PyRuntimeError::new_err)
    }

    /// Sets up `warmup + iterations` iterations of a training step (`workload_plan.py`'s plans, rank r on host
    /// r): per rank (data bytes, staging bytes, steps, ops), a step ([(dst, offset, length, staging, dst offset,
    /// the receiver's step)], [ranks it expects a WRITE from]), an op (first step, steps, compute ns,
    /// blocking); `tail_ns` the compute after the last collective. Each record's last item is then every
    /// rank's timeline. ValueError for a program that names a rank, step or region it does not have.
    #[allow(clippy::type_complexity)] // the plans as Python's tuples
    fn begin_workload(
        &mut self,
        ranks: Vec<(
            u64,
            u64,
            Vec<(Vec<(u32, u64, u64, bool, u64, u32)>, Vec<u32>)>,
            Vec<(u32, u32, u64, bool)>,
        )>,
        tail_ns: u64,
        iterations: u32,
        warmup: u32,
        mtu: u32,
    ) -> PyResult<()> {
        let ranks = ranks
            .into_iter()
            .map(|(data, staging, steps, ops)| RankProgram {
                data,
                staging,
                steps: steps
                    .into_iter()
                    .map(|(sends, receives)| ProgramStep {
                        sends: sends
                            .into_iter()
                            .map(|(dst, offset, length, staging, dst_offset, at_step)| {
                                ProgramSend {
                                    send: SendPlan {
                                        dst,
                                        offset,
                                        length,
                                        staging,
                                        dst_offset,
                                    },
                                    at_step,
                                }
                            })
                            .collect(),
                        receives,
                    })
                    .collect(),
                ops: ops
                    .into_iter()
                    .map(|(first, steps, compute_ns, blocking)| OpSpan {
                        first,
                        steps,
                        compute_ns,
                        blocking,
                    })
                    .collect(),
            })
            .collect();
        let program = Program::new(ranks, tail_ns).map_err(PyValueError::new_err)?;
        self.fabric
            .begin_workload(program, iterations, warmup, mtu)
            .map_err(PyRuntimeError::new_err)
    }

    /// Runs up to `max_events` events (all if None) with the GIL released; whether the run is over (every
    /// iteration finished, or the goodput watch stopped it). RuntimeError with the message
    /// when the run cannot finish; the watch's own exception if its sampler raised one.
    #[pyo3(signature = (max_events=None))]
    fn advance(&mut self, py: Python<'_>, max_events: Option<u64>) -> PyResult<bool> {
        let fabric = &mut self.fabric;
        py.detach(|| fabric.advance(max_events))
            .map_err(|message| self.run_error(message))
    }

    /// The summaries of the iterations finished since the last call (see `record_tuple`).
    fn take_records<'py>(&mut self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let records = self.fabric.take_records();
        records
            .iter()
            .map(|record| record_tuple(py, record))
            .collect()
    }

    /// (iterations finished, iterations in all, arrivals in the current iteration, arrivals it expects).
    fn progress(&self) -> (u32, u32, usize, usize) {
        self.fabric.progress()
    }

    /// The fabric-wide counters now (the keys of results.json's totals).
    fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        totals_dict(py, &self.fabric.totals())
    }

    /// The counters when the measured iterations began, or None before.
    fn baseline<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.fabric
            .baseline
            .as_ref()
            .map(|t| totals_dict(py, t))
            .transpose()
    }

    /// Events run so far.
    #[getter]
    fn events(&self) -> u64 {
        self.fabric.engine.events()
    }

    /// Simulated time (ns).
    #[getter]
    fn now(&self) -> u64 {
        self.fabric.engine.now()
    }

    /// Entries in the engine's queue.
    fn entries(&self) -> usize {
        self.fabric.engine.entries()
    }
}

/// Fills `emulator._core.sim`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SimFabric>()?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(message_counts, m)?)
}
