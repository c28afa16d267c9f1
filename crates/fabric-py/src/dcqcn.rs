//! `emulator._core.dcqcn`: DCQCN's constants, notification point and reaction point (fabric-core's
//! `model::dcqcn`) under the names and attributes the RNIC agent uses.
//!
//! `parse_cc`, `check_fabric`, `at_link` and `check_link` stay in Python (control plane: run once before a
//! fabric is built). A [`ReactionPoint`] takes this module's [`DcqcnParams`] or any object with its fields
//! (the Python dataclass that `parse_cc` returns), so a caller switches its import of the state machines alone.
use fabric_core::model::dcqcn as core;
use pyo3::exceptions::{PyOverflowError, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The Python error of a refused set of constants: an exception type and message for each cause.
fn error(py: Python<'_>, err: core::DcqcnError) -> PyErr {
    match err {
        core::DcqcnError::OutOfRange { .. } => PyValueError::new_err(err.to_string()),
        core::DcqcnError::FactorNan => PyValueError::new_err(err.to_string()),
        core::DcqcnError::FactorInfinite => PyOverflowError::new_err(err.to_string()),
        core::DcqcnError::FactorZero => PyZeroDivisionError::new_err(err.to_string()),
        core::DcqcnError::Dilated {
            field,
            written,
            scaled,
            factor,
        } => match dilated(py, field, written, scaled, factor) {
            Ok(fabric_error) => fabric_error,
            Err(failed) => failed,
        },
    }
}

/// The one-line `FabricError` of a time over a day once dilated, worded with the units module's times.
fn dilated(py: Python<'_>, field: &str, written: u64, scaled: f64, factor: f64) -> PyResult<PyErr> {
    let format_time = py.import("emulator.units")?.getattr("format_time")?;
    let scaled = py.import("builtins")?.getattr("int")?.call1((scaled,))?; // exact: an integral float
    let factor = py
        .import("builtins")?
        .getattr("format")?
        .call1((factor, "g"))?;
    let message = format!(
        "dcqcn {field} {} is {} at time dilation D = {} (times x D), over the {} a DCQCN time may be: lower it, or D",
        format_time.call1((written,))?,
        format_time.call1((scaled,))?,
        factor,
        format_time.call1((core::MAX_PERIOD_NS,))?,
    );
    let class = py.import("emulator.errors")?.getattr("FabricError")?;
    Ok(PyErr::from_value(class.call1((message,))?))
}

/// DCQCN's constants, by default the DCQCN authors' own (their ns-3 configuration, for 40 Gbit/s links).
#[pyclass(frozen, eq, skip_from_py_object, module = "emulator._core.dcqcn")]
#[derive(Clone, PartialEq)]
pub struct DcqcnParams(core::DcqcnParams);

#[pymethods]
impl DcqcnParams {
    #[new]
    #[pyo3(signature = (cnp_interval_ns=50_000, alpha_period_ns=55_000, g=1.0/256.0, increase_period_ns=55_000,
                        byte_counter=10_000_000, fast_recovery=5, rai_bps=40_000_000, rhai_bps=200_000_000,
                        min_rate_bps=1_000_000, reference_bps=40_000_000_000))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        cnp_interval_ns: i128,
        alpha_period_ns: i128,
        g: f64,
        increase_period_ns: i128,
        byte_counter: i128,
        fast_recovery: i128,
        rai_bps: i128,
        rhai_bps: i128,
        min_rate_bps: i128,
        reference_bps: i128,
    ) -> PyResult<Self> {
        let fields = core::DcqcnFields {
            cnp_interval_ns,
            alpha_period_ns,
            g,
            increase_period_ns,
            byte_counter,
            fast_recovery,
            rai_bps,
            rhai_bps,
            min_rate_bps,
            reference_bps,
        };
        core::DcqcnParams::new(fields)
            .map(DcqcnParams)
            .map_err(|e| error(py, e))
    }

    #[getter]
    fn cnp_interval_ns(&self) -> u64 {
        self.0.cnp_interval_ns
    }
    #[getter]
    fn alpha_period_ns(&self) -> u64 {
        self.0.alpha_period_ns
    }
    #[getter]
    fn g(&self) -> f64 {
        self.0.g
    }
    #[getter]
    fn increase_period_ns(&self) -> u64 {
        self.0.increase_period_ns
    }
    #[getter]
    fn byte_counter(&self) -> u64 {
        self.0.byte_counter
    }
    #[getter]
    fn fast_recovery(&self) -> u64 {
        self.0.fast_recovery
    }
    #[getter]
    fn rai_bps(&self) -> u64 {
        self.0.rai_bps
    }
    #[getter]
    fn rhai_bps(&self) -> u64 {
        self.0.rhai_bps
    }
    #[getter]
    fn min_rate_bps(&self) -> u64 {
        self.0.min_rate_bps
    }
    #[getter]
    fn reference_bps(&self) -> u64 {
        self.0.reference_bps
    }

    /// The same constants at time dilation D = `factor`: times x D, rates / D, sizes and counts as they are.
    fn emulated(&self, py: Python<'_>, factor: f64) -> PyResult<Self> {
        self.0
            .emulated(factor)
            .map(DcqcnParams)
            .map_err(|e| error(py, e))
    }

    /// The constants in one line, in the units module's words.
    fn describe(&self, py: Python<'_>) -> PyResult<String> {
        let units = py.import("emulator.units")?;
        let time =
            |ns: u64| -> PyResult<String> { units.getattr("format_time")?.call1((ns,))?.extract() };
        let rate = |bps: u64| -> PyResult<String> {
            units.getattr("format_rate")?.call1((bps,))?.extract()
        };
        let size: String = units
            .getattr("format_size")?
            .call1((self.0.byte_counter,))?
            .extract()?;
        let g: String = py
            .import("builtins")?
            .getattr("format")?
            .call1((self.0.g, "g"))?
            .extract()?;
        let p = &self.0;
        Ok(format!(
            "CNP interval {}, alpha period {}, g {g}, increase timer {}, byte counter {size}, F {}, R_AI {}, \
             R_HAI {}, min rate {}",
            time(p.cnp_interval_ns)?,
            time(p.alpha_period_ns)?,
            time(p.increase_period_ns)?,
            p.fast_recovery,
            rate(p.rai_bps)?,
            rate(p.rhai_bps)?,
            rate(p.min_rate_bps)?,
        ))
    }

    fn __repr__(&self) -> String {
        let p = &self.0;
        format!(
            "DcqcnParams(cnp_interval_ns={}, alpha_period_ns={}, g={:?}, increase_period_ns={}, byte_counter={}, \
             fast_recovery={}, rai_bps={}, rhai_bps={}, min_rate_bps={}, reference_bps={})",
            p.cnp_interval_ns,
            p.alpha_period_ns,
            p.g,
            p.increase_period_ns,
            p.byte_counter,
            p.fast_recovery,
            p.rai_bps,
            p.rhai_bps,
            p.min_rate_bps,
            p.reference_bps
        )
    }
}

/// The constants of `params`: this module's class, or any object with its fields (checked as the constructor).
pub(crate) fn params_of(params: &Bound<'_, PyAny>) -> PyResult<core::DcqcnParams> {
    if let Ok(ours) = params.cast::<DcqcnParams>() {
        return Ok(ours.get().0);
    }
    let int = |name: &str| -> PyResult<i128> { params.getattr(name)?.extract() };
    let fields = core::DcqcnFields {
        cnp_interval_ns: int("cnp_interval_ns")?,
        alpha_period_ns: int("alpha_period_ns")?,
        g: params.getattr("g")?.extract()?,
        increase_period_ns: int("increase_period_ns")?,
        byte_counter: int("byte_counter")?,
        fast_recovery: int("fast_recovery")?,
        rai_bps: int("rai_bps")?,
        rhai_bps: int("rhai_bps")?,
        min_rate_bps: int("min_rate_bps")?,
        reference_bps: int("reference_bps")?,
    };
    core::DcqcnParams::new(fields).map_err(|e| error(params.py(), e))
}

/// The receiving RNIC's side: whether a CE-marked packet of a QP earns its peer a CNP now.
#[pyclass(module = "emulator._core.dcqcn")]
pub struct NotificationPoint(core::NotificationPoint);

#[pymethods]
impl NotificationPoint {
    #[new]
    fn new(interval_ns: u64) -> Self {
        NotificationPoint(core::NotificationPoint::new(interval_ns))
    }

    #[getter]
    fn interval_ns(&self) -> u64 {
        self.0.interval_ns()
    }
    #[getter]
    fn ce_received(&self) -> u64 {
        self.0.ce_received()
    }
    #[getter]
    fn cnps(&self) -> u64 {
        self.0.cnps()
    }

    /// A CE-marked packet arrived for QP `qpn` at `now`: True if a CNP is to be sent for it.
    fn on_ce(&mut self, now: u64, qpn: u64) -> bool {
        self.0.on_ce(now, qpn)
    }

    fn forget(&mut self, qpn: u64) {
        self.0.forget(qpn)
    }
}

/// The sending RNIC's side for one QP: its current and target rate, alpha, and the pacing of its frames.
#[pyclass(module = "emulator._core.dcqcn")]
pub struct ReactionPoint {
    rp: core::ReactionPoint,
    /// The params object the caller gave, read back as `p`.
    params: Py<PyAny>,
}

#[pymethods]
impl ReactionPoint {
    #[new]
    fn new(params: &Bound<'_, PyAny>, line_rate_bps: u64) -> PyResult<Self> {
        Ok(ReactionPoint {
            rp: core::ReactionPoint::new(params_of(params)?, line_rate_bps),
            params: params.clone().unbind(),
        })
    }

    #[getter]
    fn p(&self, py: Python<'_>) -> Py<PyAny> {
        self.params.clone_ref(py)
    }
    #[getter]
    fn line_bps(&self) -> u64 {
        self.rp.line_bps()
    }
    #[getter]
    fn rate_bps(&self) -> u64 {
        self.rp.rate_bps()
    }
    #[getter]
    fn target_bps(&self) -> u64 {
        self.rp.target_bps()
    }
    #[getter]
    fn alpha(&self) -> f64 {
        self.rp.alpha()
    }
    #[getter]
    fn limited(&self) -> bool {
        self.rp.limited()
    }
    #[getter]
    fn timer_events(&self) -> u64 {
        self.rp.timer_events()
    }
    #[getter]
    fn byte_events(&self) -> u64 {
        self.rp.byte_events()
    }
    #[getter(_alpha_since)]
    fn alpha_since(&self) -> Option<u64> {
        self.rp.alpha_since()
    }
    #[getter]
    fn alpha_deadline(&self) -> Option<u64> {
        self.rp.alpha_deadline()
    }
    #[getter]
    fn increase_deadline(&self) -> Option<u64> {
        self.rp.increase_deadline()
    }
    #[getter]
    fn ready_at(&self) -> u64 {
        self.rp.ready_at()
    }

    /// cnps, decreases, increases, released (a fresh dict).
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.rp.counters();
        let dict = PyDict::new(py);
        dict.set_item("cnps", c.cnps)?;
        dict.set_item("decreases", c.decreases)?;
        dict.set_item("increases", c.increases)?;
        dict.set_item("released", c.released)?;
        Ok(dict)
    }

    /// A CNP for this QP: cut the rate, raise alpha, start the increase stages over.
    fn on_cnp(&mut self, now: u64) {
        self.rp.on_cnp(now)
    }

    fn may_send(&self, now: u64) -> bool {
        self.rp.may_send(now)
    }

    /// A frame of `size` bytes of this QP left at `now`: the pacer and the byte counter move.
    fn on_sent(&mut self, now: u64, size: u64) {
        self.rp.on_sent(now, size)
    }

    fn next_deadline(&self) -> Option<u64> {
        self.rp.next_deadline()
    }

    /// Serve the alpha and rate-increase timers due by `now`, each period it missed too.
    fn on_timer(&mut self, now: u64) {
        self.rp.on_timer(now)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DcqcnParams>()?;
    m.add_class::<NotificationPoint>()?;
    m.add_class::<ReactionPoint>()?;
    m.add("MAX_PERIOD_NS", core::MAX_PERIOD_NS)?;
    m.add("MAX_RATE_BPS", core::MAX_RATE_BPS)?;
    Ok(())
}
