//! `emulator._core.sim`: the simulation backend's Ethernet fabric in Rust (`fabric_core::sim::fabric`), built
//! from the plain data `emulator.study.sim_fabric.rust_fabric_spec` makes of a `FabricPlan`, running a
//! collective (its plans made in Rust, `fabric_core::sim::plans`) with the GIL released and giving back each
//! iteration's summary; and `plan`, the Rust plans as `emulator.collectives.algorithms.plan` gives them.
use fabric_core::model::mmu::MmuConfig;
use fabric_core::model::pause::PrioritySet;
use fabric_core::sim::fabric::{
    Fabric, FabricSpec, HostSpec, IterationRecord, RawIteration, SwitchSpec, Totals,
};
use fabric_core::sim::plans::Plans;
use fabric_core::sim::summary::IterationSummary;
use fabric_core::sim::wire::Endpoint;
use fabric_core::wire::mac::Mac;
use fabric_core::wire::pfc::PRIORITIES;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// A wire as Python gives it: rate, delay, "switch" or "host", the node's index, the switch's port.
type WireArg = (u64, u64, String, u32, u32);
/// A switch port: MAC, peer MAC, rate, the wire it sends on.
type PortArg = (Vec<u8>, Vec<u8>, u64, u32);
/// The MMU settings, field by field in `MmuConfig`'s order (without the watchdog).
type MmuArg = (
    (i64, i64, i64, f64, i64, i64),
    (Vec<usize>, u16, Vec<usize>, Vec<i64>, i64),
    (bool, i64, i64, f64, i64, u64),
);
/// A switch: its ports, its routes (IPv4 address, egress ports), its MMU, its seed.
type SwitchArg = (Vec<PortArg>, Vec<(Vec<u8>, Vec<u32>)>, MmuArg, u64);
/// A host: MAC, gateway MAC, IPv4 address, rate, the wire it sends on.
type HostArg = (Vec<u8>, Vec<u8>, Vec<u8>, u64, u32);
/// A send as `algorithms.Send`'s fields: dst, offset, length, region ("data" or "staging"), dst offset.
type SendTuple = (u32, u64, u64, &'static str, u64);
/// A step as `algorithms.Step`'s fields: sends, receives, reduce.
type StepTuple = (Vec<SendTuple>, Vec<u32>, Option<(u64, u64, u64)>);
/// A rank's plan as `algorithms.RankPlan`'s fields: rank, data bytes, staging bytes, steps, measured, reduce
/// group.
type PlanTuple = (u32, u64, u64, Vec<StepTuple>, bool, Vec<u32>);

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
        (ecn, kmin, kmax, pmax, vl_buffer, fc_floor),
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

fn totals_dict<'py>(py: Python<'py>, totals: &Totals) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("drops", totals.drops)?;
    dict.set_item("pfc_sent", totals.pfc_sent)?;
    dict.set_item("ecn_marked", totals.ecn_marked)?;
    dict.set_item("tx_frames", totals.tx_frames)?;
    dict.set_item("host_paused_ns", totals.host_paused_ns)?;
    for zero in [
        "ib_credit_stalls",
        "cnps_received",
        "paced_waits",
        "host_pfc_sent",
    ] {
        dict.set_item(zero, 0)?;
    }
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
    let tail = (paused_ns, verified, skew_ns, late_ns, columns, raw);
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
            (rank, data, staging, steps, plans.measured(rank), group)
        })
        .collect())
}

/// An Ethernet fabric (lossless or lossy) in simulated time, every frame in Rust.
#[pyclass(module = "emulator._core.sim")]
pub struct SimFabric {
    fabric: Fabric,
}

#[pymethods]
impl SimFabric {
    #[new]
    fn new(wires: Vec<WireArg>, switches: Vec<SwitchArg>, hosts: Vec<HostArg>) -> PyResult<Self> {
        let mut spec = FabricSpec::default();
        for (rate, delay, kind, index, port) in wires {
            if rate == 0 {
                return Err(PyValueError::new_err(format!(
                    "bad wire: rate {rate} bit/s, delay {delay} ns"
                )));
            }
            spec.wires
                .push((rate, delay, endpoint(&kind, index, port)?));
        }
        for (ports, routes, config, seed) in switches {
            let ports = ports
                .iter()
                .map(|(a, b, rate, wire)| Ok((mac(a)?, mac(b)?, *rate, *wire)))
                .collect::<PyResult<Vec<_>>>()?;
            let routes = routes
                .iter()
                .map(|(ip, out)| Ok((ipv4(ip)?, out.clone())))
                .collect::<PyResult<Vec<_>>>()?;
            spec.switches.push(SwitchSpec {
                ports,
                routes,
                mmu: mmu_config(config)?,
                seed,
            });
        }
        for (own, gateway, ip, rate_bps, wire) in hosts {
            spec.hosts.push(HostSpec {
                mac: mac(&own)?,
                gateway_mac: mac(&gateway)?,
                ip: ipv4(&ip)?,
                rate_bps,
                wire,
            });
        }
        let fabric = Fabric::new(spec).map_err(PyValueError::new_err)?;
        Ok(SimFabric { fabric })
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

    /// Runs up to `max_events` events (all if None) with the GIL released; whether every iteration finished.
    /// RuntimeError with the Python backend's message when the run cannot finish.
    #[pyo3(signature = (max_events=None))]
    fn advance(&mut self, py: Python<'_>, max_events: Option<u64>) -> PyResult<bool> {
        let fabric = &mut self.fabric;
        py.detach(|| fabric.advance(max_events))
            .map_err(PyRuntimeError::new_err)
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

    /// The fabric-wide counters now (`sim_fabric.totals`'s keys).
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
    m.add_function(wrap_pyfunction!(plan, m)?)
}
