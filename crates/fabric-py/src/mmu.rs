//! `emulator._core.mmu`: the switch's shared-buffer MMU.
//!
//! The MMU holds the caller's `bytes` objects (no copy; a CE mark makes a new one). `Mmu` takes this module's
//! `MmuConfig` or any object with its fields (the Python dataclass that agents/config.py parses from JSON).
//! What callers read: `counters[port][priority]` are live views (read later, they show the counts
//! then); `ingress`, `queues`, `pause`, `backlog` and `watchdog` are copies taken
//! when read.
use fabric_core::model::credits::FABRIC_MIN_INTERVAL_NS;
use fabric_core::model::forwarding;
use fabric_core::model::mmu as core;
use fabric_core::model::pause::PrioritySet;
use fabric_core::model::rng::CpythonRandom;
use fabric_core::wire::pfc::PRIORITIES;
use fabric_core::wire::uet;
use pyo3::exceptions::{PyIndexError, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyTuple};

use crate::pause::{priority_index, quanta_of, PauseState};
use crate::pfcwd::{watchdog_config_of, Watchdog, WatchdogConfig};

/// A frame the compiled MMU holds: the caller's bytes object, its size and whether it is ECT.
struct PyFrame {
    bytes: Py<PyBytes>,
    size: usize,
    ect: bool,
}

impl core::MmuFrame for PyFrame {
    fn size(&self) -> usize {
        self.size
    }

    fn is_ect(&self) -> bool {
        self.ect
    }

    /// A new bytes object with CE set (bytes are immutable); the MMU only calls this while Python holds it.
    fn mark_ce(&mut self) {
        Python::attach(|py| {
            let old = self.bytes.bind(py).as_bytes();
            let marked = PyBytes::new_with(py, old.len(), |out| {
                out.copy_from_slice(old);
                forwarding::mark_ce_in_place(out);
                Ok(())
            });
            if let Ok(marked) = marked {
                self.bytes = marked.unbind();
            }
        })
    }

    /// A new bytes object of the headers, as a trimming switch leaves them.
    fn trim(&mut self) -> bool {
        Python::attach(|py| {
            let mut bytes = self.bytes.bind(py).as_bytes().to_vec();
            if !uet::trim_in_place(&mut bytes) {
                return false;
            }
            self.size = bytes.len();
            self.bytes = PyBytes::new(py, &bytes).unbind();
            true
        })
    }
}

/// Buffer, threshold, PFC, scheduling and ECN settings of one switch (frozen, compared by value).
#[pyclass(module = "emulator._core.mmu", frozen, eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub struct MmuConfig {
    inner: core::MmuConfig,
}

#[pymethods]
impl MmuConfig {
    #[new]
    #[pyo3(signature = (buffer, reserve, headroom, alpha, threshold, xon_delta, lossless, quanta, strict, weights,
                        mtu_frame, ecn, kmin, kmax, pmax, vl_buffer = 0, fc_floor = FABRIC_MIN_INTERVAL_NS,
                        pfcwd = None, trim = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        buffer: i64,
        reserve: i64,
        headroom: i64,
        alpha: f64,
        threshold: i64,
        xon_delta: i64,
        lossless: &Bound<'_, PyAny>,
        quanta: u16,
        strict: &Bound<'_, PyAny>,
        weights: Vec<i64>,
        mtu_frame: i64,
        ecn: bool,
        kmin: i64,
        kmax: i64,
        pmax: f64,
        vl_buffer: i64,
        fc_floor: u64,
        pfcwd: Option<&Bound<'_, PyAny>>,
        trim: bool,
    ) -> PyResult<Self> {
        Ok(MmuConfig {
            inner: core::MmuConfig {
                buffer,
                reserve,
                headroom,
                alpha,
                threshold,
                xon_delta,
                lossless: priority_set(lossless)?,
                quanta,
                strict: priority_set(strict)?,
                weights: weights_of(&weights)?,
                mtu_frame,
                ecn,
                kmin,
                kmax,
                pmax,
                vl_buffer,
                fc_floor,
                pfcwd: pfcwd.map(watchdog_config_of).transpose()?,
                trim,
            },
        })
    }

    /// Bytes left for sharing after every reserve and headroom.
    fn shared_pool(&self, ports: usize) -> i64 {
        self.inner.shared_pool(ports)
    }

    #[getter]
    fn buffer(&self) -> i64 {
        self.inner.buffer
    }
    #[getter]
    fn reserve(&self) -> i64 {
        self.inner.reserve
    }
    #[getter]
    fn headroom(&self) -> i64 {
        self.inner.headroom
    }
    #[getter]
    fn alpha(&self) -> f64 {
        self.inner.alpha
    }
    #[getter]
    fn threshold(&self) -> i64 {
        self.inner.threshold
    }
    #[getter]
    fn xon_delta(&self) -> i64 {
        self.inner.xon_delta
    }
    #[getter]
    fn lossless<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        PyFrozenSet::new(py, self.inner.lossless.iter())
    }
    #[getter]
    fn quanta(&self) -> u16 {
        self.inner.quanta
    }
    #[getter]
    fn strict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        PyFrozenSet::new(py, self.inner.strict.iter())
    }
    #[getter]
    fn weights<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.weights)
    }
    #[getter]
    fn mtu_frame(&self) -> i64 {
        self.inner.mtu_frame
    }
    #[getter]
    fn ecn(&self) -> bool {
        self.inner.ecn
    }
    #[getter]
    fn kmin(&self) -> i64 {
        self.inner.kmin
    }
    #[getter]
    fn kmax(&self) -> i64 {
        self.inner.kmax
    }
    #[getter]
    fn pmax(&self) -> f64 {
        self.inner.pmax
    }
    #[getter]
    fn vl_buffer(&self) -> i64 {
        self.inner.vl_buffer
    }
    #[getter]
    fn fc_floor(&self) -> u64 {
        self.inner.fc_floor
    }
    #[getter]
    fn pfcwd(&self) -> Option<WatchdogConfig> {
        self.inner.pfcwd.map(|inner| WatchdogConfig { inner })
    }

    fn __repr__(&self) -> String {
        format!("MmuConfig({:?})", self.inner)
    }
}

/// Priorities (any iterable of ints, a frozenset in the configs) as a set; ValueError for one outside 0 to 7.
fn priority_set(priorities: &Bound<'_, PyAny>) -> PyResult<PrioritySet> {
    let mut set = PrioritySet::EMPTY;
    for p in priorities.try_iter()? {
        let p: i64 = p?.extract()?;
        let index = usize::try_from(p)
            .ok()
            .filter(|&p| p < PRIORITIES)
            .ok_or_else(|| PyValueError::new_err(format!("priority {p}: expected 0 to 7")))?;
        set = set.with(index);
    }
    Ok(set)
}

/// One DWRR weight per priority; ValueError otherwise.
fn weights_of(weights: &[i64]) -> PyResult<[i64; PRIORITIES]> {
    weights.try_into().map_err(|_| {
        PyValueError::new_err(format!(
            "weights: {} of them, expected one per priority",
            weights.len()
        ))
    })
}

/// The core config of an `MmuConfig`, this module's or the Python dataclass (read by its fields).
pub(crate) fn config_of(config: &Bound<'_, PyAny>) -> PyResult<core::MmuConfig> {
    if let Ok(ours) = config.cast::<MmuConfig>() {
        return Ok(ours.get().inner.clone());
    }
    let field = |name: &str| config.getattr(name);
    let pfcwd = field("pfcwd")?;
    Ok(core::MmuConfig {
        buffer: field("buffer")?.extract()?,
        reserve: field("reserve")?.extract()?,
        headroom: field("headroom")?.extract()?,
        alpha: field("alpha")?.extract()?,
        threshold: field("threshold")?.extract()?,
        xon_delta: field("xon_delta")?.extract()?,
        lossless: priority_set(&field("lossless")?)?,
        quanta: field("quanta")?.extract()?,
        strict: priority_set(&field("strict")?)?,
        weights: weights_of(&field("weights")?.extract::<Vec<i64>>()?)?,
        mtu_frame: field("mtu_frame")?.extract()?,
        ecn: field("ecn")?.is_truthy()?,
        kmin: field("kmin")?.extract()?,
        kmax: field("kmax")?.extract()?,
        pmax: field("pmax")?.extract()?,
        vl_buffer: field("vl_buffer")?.extract()?,
        fc_floor: field("fc_floor")?.extract()?,
        pfcwd: if pfcwd.is_none() {
            None
        } else {
            Some(watchdog_config_of(&pfcwd)?)
        },
        trim: field("trim")?.is_truthy()?,
    })
}

/// The buffer use of one ingress port, per priority (a copy).
#[pyclass(module = "emulator._core.mmu", get_all)]
pub struct Ingress {
    used: Vec<i64>,
    headroom: Vec<i64>,
    xoff: Vec<bool>,
    refresh_at: Vec<Option<u64>>,
}

/// One egress queue (a copy): its (frame, ingress port) pairs, bytes and DWRR deficit.
#[pyclass(module = "emulator._core.mmu", get_all)]
pub struct Queue {
    frames: Vec<(Py<PyBytes>, usize)>,
    bytes: i64,
    deficit: i64,
}

/// Telemetry of one (port, priority), ingress and egress side: a live view of its MMU's counts.
#[pyclass(module = "emulator._core.mmu", frozen)]
pub struct Counters {
    mmu: Py<Mmu>,
    port: usize,
    priority: usize,
}

impl Counters {
    fn read<T>(&self, py: Python<'_>, field: impl Fn(&core::Counters) -> T) -> T {
        let mmu = self.mmu.bind(py).borrow();
        field(&mmu.inner.counters()[self.port][self.priority])
    }
}

#[pymethods]
impl Counters {
    #[getter]
    fn drops_threshold(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.drops_threshold)
    }
    #[getter]
    fn drops_headroom(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.drops_headroom)
    }
    #[getter]
    fn pfc_xoff_sent(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.pfc_xoff_sent)
    }
    #[getter]
    fn pfc_xon_sent(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.pfc_xon_sent)
    }
    #[getter]
    fn ingress_peak(&self, py: Python<'_>) -> i64 {
        self.read(py, |c| c.ingress_peak)
    }
    #[getter]
    fn tx_frames(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.tx_frames)
    }
    #[getter]
    fn tx_bytes(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.tx_bytes)
    }
    #[getter]
    fn ecn_marked(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.ecn_marked)
    }
    #[getter]
    fn egress_peak(&self, py: Python<'_>) -> i64 {
        self.read(py, |c| c.egress_peak)
    }
    #[getter]
    fn pfcwd_drops(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.pfcwd_drops)
    }
    #[getter]
    fn pfcwd_storms(&self, py: Python<'_>) -> u64 {
        self.read(py, |c| c.pfcwd_storms)
    }
}

/// Shared-buffer admission, PFC generation and reaction, ECN, scheduling.
#[pyclass(module = "emulator._core.mmu")]
pub struct Mmu {
    inner: core::Mmu<PyFrame>,
    /// The config object it was built from, as callers read it back.
    config: Py<PyAny>,
}

fn no_queue(err: core::NoSuchQueue) -> PyErr {
    PyIndexError::new_err(err.to_string())
}

impl Mmu {
    fn port(&self, port: usize) -> PyResult<usize> {
        if port < self.inner.rates().len() {
            Ok(port)
        } else {
            Err(PyIndexError::new_err("list index out of range"))
        }
    }
}

#[pymethods]
impl Mmu {
    #[new]
    #[pyo3(signature = (config, port_rates, seed = 0))]
    fn new(config: &Bound<'_, PyAny>, port_rates: Vec<u64>, seed: i128) -> PyResult<Self> {
        let random = CpythonRandom::from_int_seed(&crate::link::small_seed_words(seed));
        let inner =
            core::Mmu::new(config_of(config)?, port_rates, random).map_err(|err| match err {
                core::MmuError::ZeroRate { .. } => PyZeroDivisionError::new_err(err.to_string()),
                _ => PyValueError::new_err(err.to_string()),
            })?;
        Ok(Mmu {
            inner,
            config: config.clone().unbind(),
        })
    }

    /// Admit `frame` from `ingress` for `egress`; False if dropped. An admitted ECT frame may be stored
    /// CE-marked.
    fn enqueue(
        &mut self,
        now: u64,
        ingress: usize,
        egress: usize,
        priority: usize,
        frame: &Bound<'_, PyBytes>,
    ) -> PyResult<bool> {
        let bytes = frame.as_bytes();
        let frame = PyFrame {
            size: bytes.len(),
            ect: forwarding::is_ect(bytes).unwrap_or(false),
            bytes: frame.clone().unbind(),
        };
        self.inner
            .enqueue(now, ingress, egress, priority, frame)
            .map_err(no_queue)
    }

    /// PFC frames to send: (port, {priority: quanta}); clears the outbox.
    fn take_pfc<'py>(&mut self, py: Python<'py>) -> PyResult<Vec<(usize, Bound<'py, PyDict>)>> {
        self.inner
            .take_pfc()
            .map(|request| {
                let quanta = PyDict::new(py);
                quanta.set_item(request.priority, request.quanta)?;
                Ok((request.port, quanta))
            })
            .collect()
    }

    /// The (priority, frame) to send next on `egress`, or None; the same until `pop`.
    fn head(&mut self, py: Python<'_>, egress: usize) -> PyResult<Option<(usize, Py<PyBytes>)>> {
        self.port(egress)?;
        Ok(self
            .inner
            .head(egress)
            .map(|(priority, frame)| (priority, frame.bytes.clone_ref(py))))
    }

    /// The head frame of (`egress`, `priority`) went to the wire.
    fn pop(&mut self, egress: usize, priority: usize) -> PyResult<()> {
        match self.inner.pop(egress, priority).map_err(no_queue)? {
            Some(_) => Ok(()),
            None => Err(PyIndexError::new_err("pop from an empty deque")),
        }
    }

    /// A PFC frame arrived on `port` ({priority: quanta}); returns priorities it resumed.
    fn pfc_received(
        &mut self,
        now: u64,
        port: usize,
        quanta: &Bound<'_, PyDict>,
    ) -> PyResult<Vec<usize>> {
        let quanta = quanta_of(quanta)?;
        let resumed = self
            .inner
            .pfc_received(now, port, &quanta)
            .map_err(no_queue)?;
        Ok(resumed.iter().collect())
    }

    /// When `on_timer` must run next: a pause expiry, XOFF refresh or watchdog time.
    fn next_deadline(&mut self) -> Option<u64> {
        self.inner.next_deadline()
    }

    /// Expire pauses, act on storms and refresh XOFFs due by `now`; ports to drain.
    fn on_timer(&mut self, now: u64) -> Vec<usize> {
        self.inner.on_timer(now)
    }

    fn ingress_bytes(&self, port: usize, priority: i64) -> PyResult<i64> {
        Ok(self
            .inner
            .ingress_bytes(self.port(port)?, priority_index(priority)?))
    }

    fn egress_bytes(&self, port: usize, priority: i64) -> PyResult<i64> {
        Ok(self
            .inner
            .egress_bytes(self.port(port)?, priority_index(priority)?))
    }

    #[getter]
    fn config(&self, py: Python<'_>) -> Py<PyAny> {
        self.config.clone_ref(py)
    }

    #[getter]
    fn pool(&self) -> i64 {
        self.inner.pool()
    }

    #[getter]
    fn rates(&self) -> Vec<u64> {
        self.inner.rates().to_vec()
    }

    #[getter]
    fn shared_used(&self) -> i64 {
        self.inner.shared_used()
    }

    /// Frames queued per egress port (a copy).
    #[getter]
    fn backlog(&self) -> Vec<usize> {
        self.inner.backlog().to_vec()
    }

    #[getter]
    fn ingress(&self) -> Vec<Ingress> {
        self.inner
            .ingress()
            .iter()
            .map(|ing| Ingress {
                used: ing.used.to_vec(),
                headroom: ing.headroom.to_vec(),
                xoff: ing.xoff.to_vec(),
                refresh_at: ing.refresh_at.to_vec(),
            })
            .collect()
    }

    #[getter]
    fn queues(&self, py: Python<'_>) -> Vec<Vec<Queue>> {
        (0..self.inner.rates().len())
            .filter_map(|port| self.inner.queues(port))
            .map(|queues| {
                queues
                    .iter()
                    .map(|queue| Queue {
                        frames: queue
                            .frames
                            .iter()
                            .map(|(frame, ingress)| (frame.bytes.clone_ref(py), *ingress))
                            .collect(),
                        bytes: queue.bytes,
                        deficit: queue.deficit,
                    })
                    .collect()
            })
            .collect()
    }

    #[getter]
    fn pause(&self) -> Vec<PauseState> {
        self.inner
            .pause()
            .iter()
            .map(|state| PauseState {
                inner: state.clone(),
            })
            .collect()
    }

    /// Counters per port, per priority: live views.
    #[getter]
    fn counters(slf: &Bound<'_, Self>) -> Vec<Vec<Counters>> {
        let ports = slf.borrow().inner.rates().len();
        (0..ports)
            .map(|port| {
                (0..PRIORITIES)
                    .map(|priority| Counters {
                        mmu: slf.clone().unbind(),
                        port,
                        priority,
                    })
                    .collect()
            })
            .collect()
    }

    #[getter]
    fn watchdog(&self) -> Option<Watchdog> {
        self.inner
            .watchdog()
            .map(|wd| Watchdog { inner: wd.clone() })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MmuConfig>()?;
    m.add_class::<Mmu>()?;
    m.add_class::<Counters>()?;
    m.add_class::<Ingress>()?;
    m.add_class::<Queue>()?;
    Ok(())
}
