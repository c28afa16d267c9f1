//! `emulator._core.fidelity`: the fidelity monitor's bookkeeping.
use fabric_core::model::fidelity as core;
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyTuple};

/// A histogram of durations in ns: count, exact maximum, quantiles within a quarter octave.
#[pyclass(module = "emulator._core.fidelity")]
pub struct Durations {
    inner: core::Durations,
}

#[pymethods]
impl Durations {
    #[new]
    fn new() -> Self {
        Durations {
            inner: core::Durations::new(),
        }
    }

    #[getter]
    fn counts(&self) -> Vec<u64> {
        self.inner.counts().to_vec()
    }

    #[getter]
    fn count(&self) -> u64 {
        self.inner.count()
    }

    #[getter]
    fn max_ns(&self) -> u64 {
        self.inner.max_ns()
    }

    /// Counts one duration; a negative one (a deadline met early) counts as 0, a longer one than 2^64 - 1 ns
    /// as that.
    fn add(&mut self, value_ns: i128) {
        let clamped = u64::try_from(value_ns.max(0)).unwrap_or(u64::MAX);
        self.inner.add(clamped);
    }

    /// The `q` quantile (0 < q <= 1), rounded up to its bucket's bound (never above the maximum).
    fn quantile(&self, q: f64) -> PyResult<Option<u64>> {
        self.inner.quantile(q).map_err(|err| match err {
            core::QuantileError::NotANumber => {
                PyValueError::new_err("cannot convert float NaN to integer")
            }
            core::QuantileError::Infinite => {
                PyOverflowError::new_err("cannot convert float infinity to integer")
            }
        })
    }

    /// Adds `other`'s samples (itself too: `a.merge(a)` doubles `a`, as in Python).
    fn merge(slf: &Bound<'_, Self>, other: &Bound<'_, Self>) {
        if slf.is(other) {
            let copy = other.borrow().inner.clone();
            slf.borrow_mut().inner.merge(&copy);
        } else {
            slf.borrow_mut().inner.merge(&other.borrow().inner);
        }
    }

    /// `{"count", "p50_ns", "p99_ns", "max_ns"}`, None where there is no sample.
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        durations_summary(py, &self.inner)
    }
}

/// The link invariant of one egress: busy time, and the time the wire idled while a frame waited.
#[pyclass(module = "emulator._core.fidelity")]
pub struct EgressWire {
    inner: core::EgressWire,
}

#[pymethods]
impl EgressWire {
    #[new]
    fn new() -> Self {
        EgressWire {
            inner: core::EgressWire::new(),
        }
    }

    #[getter]
    fn busy_ns(&self) -> u64 {
        self.inner.busy_ns
    }

    #[setter]
    fn set_busy_ns(&mut self, value: u64) {
        self.inner.busy_ns = value;
    }

    #[getter]
    fn stall_ns(&self) -> u64 {
        self.inner.stall_ns
    }

    #[setter]
    fn set_stall_ns(&mut self, value: u64) {
        self.inner.stall_ns = value;
    }

    #[getter]
    fn longest_stall_ns(&self) -> u64 {
        self.inner.longest_stall_ns
    }

    #[setter]
    fn set_longest_stall_ns(&mut self, value: u64) {
        self.inner.longest_stall_ns = value;
    }

    #[getter]
    fn frames(&self) -> u64 {
        self.inner.frames
    }

    #[setter]
    fn set_frames(&mut self, value: u64) {
        self.inner.frames = value;
    }

    /// A frame (or `frames` back to back) took the wire at `start_ns` for `frame_ns`; it could have started
    /// at `ideal_ns`.
    #[pyo3(signature = (start_ns, ideal_ns, frame_ns, frames=1))]
    fn departed(&mut self, start_ns: u64, ideal_ns: u64, frame_ns: u64, frames: u64) {
        self.inner.departed(start_ns, ideal_ns, frame_ns, frames);
    }

    /// The wire idled `stall_ns` while a frame waited (for callers that keep busy time themselves).
    fn stalled(&mut self, stall_ns: u64) {
        self.inner.stalled(stall_ns);
    }

    /// Adds `other`'s figures (itself too, as in Python).
    fn merge(slf: &Bound<'_, Self>, other: &Bound<'_, Self>) {
        let theirs = other.borrow().inner;
        slf.borrow_mut().inner.merge(&theirs);
    }

    /// `{"frames", "busy_ns", "stall_ns", "stall_share", "longest_stall_ns"}`.
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        wire_summary(py, &self.inner)
    }
}

impl Durations {
    /// The Python face of a histogram a compiled agent kept.
    pub(crate) fn of(inner: core::Durations) -> Durations {
        Durations { inner }
    }
}

impl EgressWire {
    /// The Python face of a wire a compiled agent kept.
    pub(crate) fn of(inner: core::EgressWire) -> EgressWire {
        EgressWire { inner }
    }
}

/// `{"count", "p50_ns", "p99_ns", "max_ns"}` of `durations`, None where there is no sample.
pub(crate) fn durations_summary<'py>(
    py: Python<'py>,
    durations: &core::Durations,
) -> PyResult<Bound<'py, PyDict>> {
    let summary = durations.summary();
    let out = PyDict::new(py);
    out.set_item("count", summary.count)?;
    out.set_item("p50_ns", summary.p50_ns)?;
    out.set_item("p99_ns", summary.p99_ns)?;
    out.set_item("max_ns", summary.max_ns)?;
    Ok(out)
}

/// `{"frames", "busy_ns", "stall_ns", "stall_share", "longest_stall_ns"}` of `wire`.
pub(crate) fn wire_summary<'py>(
    py: Python<'py>,
    wire: &core::EgressWire,
) -> PyResult<Bound<'py, PyDict>> {
    let summary = wire.summary();
    let out = PyDict::new(py);
    out.set_item("frames", summary.frames)?;
    out.set_item("busy_ns", summary.busy_ns)?;
    out.set_item("stall_ns", summary.stall_ns)?;
    out.set_item("stall_share", summary.stall_share)?;
    out.set_item("longest_stall_ns", summary.longest_stall_ns)?;
    Ok(out)
}

/// What the monitor accepts (a frozen dataclass in Python: keyword defaults, equality, hash, repr).
#[pyclass(module = "emulator._core.fidelity", frozen)]
pub struct Thresholds {
    inner: core::Thresholds,
}

impl Thresholds {
    /// The fields in the dataclass's order, with their names.
    fn fields(&self) -> [(&'static str, f64); 5] {
        let t = &self.inner;
        [
            ("stall_share", t.stall_share),
            ("lag_p99_frames", t.lag_p99_frames),
            ("timer_p99_frames", t.timer_p99_frames),
            ("start_p99_frames", t.start_p99_frames),
            ("timeout_p99_share", t.timeout_p99_share),
        ]
    }
}

#[pymethods]
impl Thresholds {
    #[new]
    #[pyo3(signature = (stall_share=0.01, lag_p99_frames=1.0, timer_p99_frames=1.0, start_p99_frames=1.0,
                        timeout_p99_share=0.01))]
    fn new(
        stall_share: f64,
        lag_p99_frames: f64,
        timer_p99_frames: f64,
        start_p99_frames: f64,
        timeout_p99_share: f64,
    ) -> Self {
        Thresholds {
            inner: core::Thresholds {
                stall_share,
                lag_p99_frames,
                timer_p99_frames,
                start_p99_frames,
                timeout_p99_share,
            },
        }
    }

    #[getter]
    fn stall_share(&self) -> f64 {
        self.inner.stall_share
    }

    #[getter]
    fn lag_p99_frames(&self) -> f64 {
        self.inner.lag_p99_frames
    }

    #[getter]
    fn timer_p99_frames(&self) -> f64 {
        self.inner.timer_p99_frames
    }

    #[getter]
    fn start_p99_frames(&self) -> f64 {
        self.inner.start_p99_frames
    }

    #[getter]
    fn timeout_p99_share(&self) -> f64 {
        self.inner.timeout_p99_share
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Thresholds>()
            .is_ok_and(|other| other.get().inner == self.inner)
    }

    /// The dataclass's hash: that of the tuple of its fields.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        PyTuple::new(py, self.fields().map(|(_, value)| value))?.hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let fields = self
            .fields()
            .iter()
            .map(|(name, value)| Ok(format!("{name}={}", PyFloat::new(py, *value).repr()?)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!("Thresholds({})", fields.join(", ")))
    }
}

/// Whether an agent kept up, and why not (one line each; empty when faithful).
#[pyclass(module = "emulator._core.fidelity", frozen)]
pub struct Verdict {
    #[pyo3(get)]
    faithful: bool,
    #[pyo3(get)]
    reasons: Py<PyTuple>,
}

#[pymethods]
impl Verdict {
    #[new]
    fn new(faithful: bool, reasons: &Bound<'_, PyAny>) -> PyResult<Self> {
        let reasons = PyTuple::new(
            reasons.py(),
            reasons.try_iter()?.collect::<PyResult<Vec<_>>>()?,
        )?;
        Ok(Verdict {
            faithful,
            reasons: reasons.unbind(),
        })
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.cast::<Verdict>() {
            Ok(other) => {
                let other = other.get();
                Ok(self.faithful == other.faithful
                    && self.reasons.bind(py).eq(other.reasons.bind(py))?)
            }
            Err(_) => Ok(false),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        (self.faithful, self.reasons.bind(py))
            .into_pyobject(py)?
            .hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let faithful = if self.faithful { "True" } else { "False" };
        Ok(format!(
            "Verdict(faithful={faithful}, reasons={})",
            self.reasons.bind(py).repr()?
        ))
    }
}

/// Judges one agent's (or a merged run's) figures; `frame_ns` is one MTU-sized frame at the link rate.
///
/// `timers` are the link timers, `starts` the timed starts' lateness, `timeouts` the retransmission and RNR
/// timers', judged against `timeout_ns`. An agent whose monitor was off is never called faithful.
#[pyfunction]
#[pyo3(signature = (wire, lag, timers, frame_ns, thresholds=None, starts=None, timeouts=None, timeout_ns=0,
                    monitored=None))]
#[allow(clippy::too_many_arguments)]
fn verdict(
    py: Python<'_>,
    wire: PyRef<'_, EgressWire>,
    lag: PyRef<'_, Durations>,
    timers: PyRef<'_, Durations>,
    frame_ns: u64,
    thresholds: Option<PyRef<'_, Thresholds>>,
    starts: Option<PyRef<'_, Durations>>,
    timeouts: Option<PyRef<'_, Durations>>,
    timeout_ns: u64,
    monitored: Option<&Bound<'_, PyAny>>,
) -> PyResult<Verdict> {
    let monitored = monitored.map_or(Ok(true), |m| m.is_truthy())?;
    let figures = core::Figures {
        wire: &wire.inner,
        lag: &lag.inner,
        timers: &timers.inner,
        starts: starts.as_ref().map(|starts| &starts.inner),
        timeouts: timeouts.as_ref().map(|timeouts| &timeouts.inner),
    };
    let thresholds = thresholds.map_or_else(core::Thresholds::default, |t| t.inner);
    let judged = core::verdict(&figures, frame_ns, timeout_ns, &thresholds, monitored);
    Ok(Verdict {
        faithful: judged.faithful,
        reasons: PyTuple::new(py, judged.reasons)?.unbind(),
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Durations>()?;
    m.add_class::<EgressWire>()?;
    m.add_class::<Thresholds>()?;
    m.add_class::<Verdict>()?;
    m.add_function(wrap_pyfunction!(verdict, m)?)?;
    Ok(())
}
